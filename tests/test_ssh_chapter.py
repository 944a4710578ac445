"""The checks that used to sit in the SSH chapter (nbs/instance/02_ssh.ipynb), run through the chapter's own rehearsal.

`rehearse(instances=1, ssh=True)` is what the chapter's hidden cell starts under the test runner: a moto server
with one launched instance, a temporary HOME, and a real sshd on 127.0.0.1 that accepts that instance's key and
stands in for it. The chapter shows each step once and ends on its value; what it used to assert is here.
"""
import inspect, os, socket, subprocess, time
from dataclasses import fields
from pathlib import Path

import pytest

from trn_tutorials.core import UsageError
from trn_tutorials.dlami import dlami_for
from trn_tutorials.instance import find_instance
from trn_tutorials import ssh as S
from trn_tutorials import remote_jupyter as J
from local_services import alive, free_port, listen_addresses, rehearse

TRN2_VENV = '/opt/aws_neuronx_venv_torch_neuronx_2_14_0'


@pytest.fixture(scope='module')
def r():
    "The chapter's rehearsal, and the values its hidden cell puts in place of the instance's."
    reh = rehearse(instances=1, ssh=True)
    try: yield reh
    finally:
        reh.stop()
        assert S.LIVE == []


@pytest.fixture
def conn(r):
    "What the chapter logs in with after its hidden cell: the run's key, the stand-in's address, user and port."
    inst = find_instance()
    return dict(host=r.host, key=inst.key_path, user=r.user, port=r.port)


def test_rehearsal(r):
    "The rehearsal the hidden cells start: its instance is found by tags, its key is under a temporary ~, and the sshd accepts it."
    inst = find_instance()
    assert (inst.instance_id, inst.user) == (r.instances[0].instance_id, 'ubuntu')
    assert inst.key_path == f'~/.ssh/trn-tutorials-{inst.run_id}.pem' and os.environ['HOME'] == str(r.home)
    assert Path(inst.key_path).expanduser().parent == r.home/'.ssh' and Path.cwd() == r.home
    assert os.environ['AWS_ENDPOINT_URL'] == r.moto.url and 'AWS_PROFILE' not in os.environ
    assert dlami_for(inst.instance_type).venv == J.NEURON_VENV and Path(r.venv).parent == r.home
    assert S.run_remote('echo "$HOME"', r.host, inst.key_path, r.user, r.port).stdout == f'{r.home}\n'
    assert r.local_port != r.remote_port and not S.port_busy(r.local_port)


def test_rehearsal_stop_restores_everything(tmp_path):
    before, cwd = dict(os.environ), os.getcwd()
    reh = rehearse(instances=1, ssh=True)
    assert os.environ != before
    moto, sshd = reh.moto.proc.pid, reh.sshd.proc.pid
    reh.stop(); reh.stop()     # twice is harmless
    assert dict(os.environ) == before and os.getcwd() == cwd and not reh.dir.exists()
    deadline = time.monotonic() + 10
    while (alive(moto) or alive(sshd)) and time.monotonic() < deadline: time.sleep(0.1)
    assert not alive(moto) and not alive(sshd)


def test_plain_commands(r, conn, tmp_path):
    inst = find_instance()
    assert S.ssh_command(inst.host, inst.key_path) == \
           f'ssh -L 8888:localhost:8888 -i ~/.ssh/trn-tutorials-{inst.run_id}.pem ubuntu@{inst.host}'
    assert S.ssh_command('h', 'k.pem', 8080, 8081, port=2222) == 'ssh -L 8080:localhost:8081 -i k.pem -p 2222 ubuntu@h'
    assert S.ssh_command('h', '/my keys/k.pem') == "ssh -L 8888:localhost:8888 -i '/my keys/k.pem' ubuntu@h"
    assert '    LocalForward 127.0.0.1:8888 localhost:8888' in S.ssh_config_entry('h', 'k.pem')
    # the entry works as written: ssh reads it, logs in with the key and runs a command (ssh expands ~ to the
    # passwd home, not $HOME, so the rehearsal's temporary ~ is written out here)
    cfg = tmp_path/'ssh_config'
    cfg.write_text(S.ssh_config_entry(r.host, str(Path(conn['key']).expanduser()), alias='demo', user=r.user, port=r.port,
                                      known_hosts=str(tmp_path/'known_hosts')))
    res = subprocess.run(['ssh', '-F', str(cfg), '-o', 'BatchMode=yes', '-o', 'LogLevel=ERROR', '-o', 'ClearAllForwardings=yes',
                          'demo', 'echo logged in'], capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stdout) == (0, 'logged in\n'), res.stderr


def test_key_file(conn, tmp_path):
    assert oct(S.check_key(conn['key']).stat().st_mode & 0o777) == '0o400'
    assert S.check_key(conn['key']) == Path(conn['key']).expanduser()
    loose = tmp_path/'loose.pem'
    loose.write_bytes(Path(conn['key']).expanduser().read_bytes()); loose.chmod(0o644)
    with pytest.raises(UsageError) as e: S.check_key(loose)
    assert f"run `chmod 400 {loose}`" in str(e.value)
    with pytest.raises(UsageError, match="no private key at"): S.check_key(tmp_path/'missing.pem')


def test_run_remote_and_its_errors(conn, tmp_path):
    c = conn
    out = S.run_remote('echo "$(uname -sm), $(nproc) CPUs"', c['host'], c['key'], c['user'], c['port']).stdout.strip()
    assert out.endswith(f', {os.cpu_count()} CPUs')
    wrong = tmp_path/'wrong_ed25519'
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(wrong)], check=True, timeout=30)
    with pytest.raises(UsageError, match="refused the key"): S.run_remote('true', c['host'], wrong, c['user'], c['port'])
    closed = free_port()
    with pytest.raises(UsageError) as e: S.run_remote('true', c['host'], c['key'], c['user'], closed)
    assert f"cannot reach 127.0.0.1:{closed} (Connection refused)" in str(e.value)
    assert S.explain_ssh("bind [127.0.0.1]:8888: Address already in use\nCould not request local forwarding.", 'h',
                         local_port=8888)[:33] == 'local port 8888 is already in use'
    assert S.explain_ssh('ubuntu@54.210.1.2: Permission denied (publickey).', '54.210.1.2', key_path='~/.ssh/old-key.pem') == \
           'ubuntu@54.210.1.2 refused the key ~/.ssh/old-key.pem (Permission denied): use the key pair the instance was launched with'


def test_tunnel(r, conn, tmp_path):
    c, lp = conn, r.local_port
    with S.Tunnel(c['host'], c['key'], lp, c['port'], c['user'], c['port']) as t:
        with socket.create_connection(('127.0.0.1', lp), timeout=5) as s: banner = s.recv(64)
        assert t.alive
    assert banner.startswith(b'SSH-2.0-') and not t.alive
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', lp)); busy.listen()
        with pytest.raises(UsageError, match=f"local port {lp} is already in use"):
            S.Tunnel(c['host'], c['key'], lp, c['port'], c['user'], c['port']).start()
    loose = tmp_path/'loose.pem'
    loose.write_bytes(Path(c['key']).expanduser().read_bytes()); loose.chmod(0o644)
    with pytest.raises(UsageError, match="chmod 400"): S.Tunnel(c['host'], loose, free_port(), c['port'], c['user'], c['port']).start()
    wrong = tmp_path/'wrong'
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(wrong)], check=True, timeout=30)
    with pytest.raises(UsageError, match="refused the key"):
        S.Tunnel(c['host'], wrong, free_port(), c['port'], c['user'], c['port'], timeout=20).start()
    with pytest.raises(UsageError, match="cannot reach"):
        S.Tunnel(c['host'], c['key'], free_port(), c['port'], c['user'], free_port(), timeout=20).start()
    assert S.LIVE == []


def test_jupyter(r, conn):
    c, rport, venv = conn, r.remote_port, r.venv
    jup = J.start_jupyter(c['host'], c['key'], rport, c['user'], c['port'], venv=venv)
    try:
        # the environment's jupyter-lab, with the environment and the Neuron tools first on its PATH (what the chapter shows)
        path = S.run_remote(f"tr '\\0' '\\n' </proc/{jup.pid}/environ | grep '^PATH='", c['host'], c['key'], c['user'], c['port']).stdout
        assert [p.replace(venv, '<venv>') for p in [jup.command] + path.strip().removeprefix('PATH=').split(':')[:2]] == \
               ['<venv>/bin/jupyter-lab', '<venv>/bin', '/opt/aws/neuron/bin']
        assert (jup.command, jup.venv) == (f'{venv}/bin/jupyter-lab', venv)
        assert (Path(venv)/'path-seen').read_text().startswith(f'{venv}/bin:/opt/aws/neuron/bin:')
        # loopback only, and no token in its log or repr
        listening = S.run_remote(f'ss -Hltn "sport = :{rport}"', c['host'], c['key'], c['user'], c['port']).stdout.split()[3]
        assert listening == f'127.0.0.1:{rport}' and listen_addresses(rport) == {'127.0.0.1'}
        log = (r.home/'.trn-tutorials'/f'jupyter-{rport}.log').read_text()
        assert jup.token not in log and jup.token not in repr(jup)
        with pytest.raises(UsageError, match=f"port {rport} on 127.0.0.1 is already in use"):
            J.start_jupyter(c['host'], c['key'], rport, c['user'], c['port'], venv=venv)
        with pytest.raises(UsageError, match="exited at once"):
            J.start_jupyter(c['host'], c['key'], free_port(), c['user'], c['port'], jupyter='/bin/false', venv=venv)
        with pytest.raises(UsageError, match="does not exist"):
            J.start_jupyter(c['host'], c['key'], free_port(), c['user'], c['port'], venv=venv, workdir=str(r.home/'nope'))
    finally:
        jup.stop()
    assert not alive(jup.pid) and S.LIVE == []


def test_missing_environment(r, conn):
    c = conn
    with pytest.raises(UsageError) as e: J.start_jupyter(c['host'], c['key'], r.remote_port, c['user'], c['port'], venv=TRN2_VENV)
    assert str(e.value).startswith(f'127.0.0.1 has no {TRN2_VENV}; relaunch with `trn-tutorials up`') and str(e.value).endswith(': none')
    with pytest.raises(UsageError) as e: J.start_jupyter(c['host'], c['key'], r.remote_port, c['user'], c['port'])
    assert str(e.value).startswith('127.0.0.1 has no /opt/aws_neuronx_venv_pytorch_2_9 (it was launched from an image without the PyTorch/XLA')
    assert S.LIVE == []


def test_open_jupyter_and_stop_all(r, conn):
    c, lp = conn, r.local_port
    s = J.open_jupyter(c['host'], c['key'], lp, r.remote_port, c['user'], c['port'], venv=r.venv)
    jpid, tpid = s.jupyter.pid, s.tunnel.proc.pid
    assert s.tunnel.alive
    assert (J.api_status(lp, s.jupyter.token), J.api_status(lp, None)) == (200, 403)
    assert s.url.startswith(f'http://127.0.0.1:{lp}/?token=') and s.jupyter.token not in repr(s)
    assert S.stop_all(hosts={'54.210.1.2'}) == []
    stopped = S.stop_all()
    assert len(stopped) == 2 and not s.tunnel.alive
    assert [alive(p) for p in (jpid, tpid)] == [False, False]
    s.stop()                   # harmless after stop_all
    assert S.stop_all() == []
    assert S.forget_host(c['host'], c['port']) is True
    assert S.forget_host(c['host'], c['port']) is False


def test_tunnel_arguments_match_open_jupyter():
    sig = inspect.signature(J.open_jupyter).parameters
    assert [f.name for f in fields(J.TunnelArguments)] == list(sig)
    assert {f.name: f.default for f in fields(J.TunnelArguments) if f.name not in ('host', 'key_path')} == \
           {k: p.default for k, p in sig.items() if k not in ('host', 'key_path')}
