"""Checks of `trn_tutorials.instance.ssh` and `trn_tutorials.instance.jupyter` (nbs/instance/02_ssh.ipynb) against a real OpenSSH sshd on
127.0.0.1 and a real `jupyter server` started through it. "The instance" is this machine, reached through the test sshd
as the current user.

The checks that used to sit in the SSH chapter run below through the chapter's own rehearsal: `rehearse(instances=1,
ssh=True)` is what the chapter's hidden cell starts under the test runner (a moto server with one launched instance, a
temporary HOME, and a real sshd on 127.0.0.1 that accepts that instance's key and stands in for it).
"""
import inspect, logging, os, shlex, socket, subprocess, time
from dataclasses import fields
from pathlib import Path

import pytest

from trn_tutorials.core.options import UsageError, field_help, parse_args
from trn_tutorials.instance.dlami import DLAMI, dlami_for
from trn_tutorials.instance.ec2 import find_instance, wait_for_ssh
from trn_tutorials.instance import ssh as S
from trn_tutorials.instance import jupyter as J
from local_services import (alive, free_port, jupyter_command, listen_addresses, make_venv, one_line, procs_mentioning, port_open,
                            rehearse)

# a root login (as here) needs --allow-root; on the DLAMI you log in as ubuntu
JUPYTER = jupyter_command()
started = []   # (kind, pid) of every process the tests start, checked at the end


def conn(sshd, **kw):
    "Connection arguments for the test sshd."
    return dict(user=sshd.user, port=sshd.port, known_hosts=str(sshd.known_hosts), **kw)


@pytest.fixture(scope='module')
def venv(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp('opt')/'aws_neuronx_venv_test')


def test_wait_for_ssh(sshd):
    assert wait_for_ssh('127.0.0.1', sshd.port, timeout=10) < 10
    closed = free_port()
    t0 = time.monotonic()
    with pytest.raises(UsageError) as e: wait_for_ssh('127.0.0.1', closed, timeout=1)
    assert f'no SSH answer from 127.0.0.1:{closed}' in one_line(e) and time.monotonic() - t0 < 10


def test_plain_command_forwards(sshd):
    "The command the chapter prints forwards a port: here to the sshd's own port, which answers with its banner."
    lp = free_port()
    cmd = shlex.split(S.ssh_command('127.0.0.1', str(sshd.key), lp, sshd.port, sshd.user, sshd.port))
    assert cmd[:3] == ['ssh', '-L', f'{lp}:localhost:{sshd.port}']
    p = subprocess.Popen(cmd[:1] + ['-N', '-o', 'BatchMode=yes', '-o', 'ExitOnForwardFailure=yes', '-o', f'UserKnownHostsFile={sshd.known_hosts}',
                                    '-o', 'StrictHostKeyChecking=accept-new'] + cmd[1:], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    started.append(('ssh', p.pid))
    try:
        deadline = time.monotonic() + 20
        while not port_open(lp):
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < deadline, 'forward did not come up'
            time.sleep(0.05)
        with socket.create_connection(('127.0.0.1', lp), timeout=5) as s: assert s.recv(8) == b'SSH-2.0-'
    finally:
        p.terminate(); p.wait(10)


def test_config_entry_works(sshd, tmp_path):
    cfg = tmp_path/'config'
    lp = free_port()
    cfg.write_text(S.ssh_config_entry('127.0.0.1', str(sshd.key), 'trn-test', lp, 8888, sshd.user, sshd.port, str(sshd.known_hosts)))
    r = subprocess.run(['ssh', '-F', str(cfg), '-o', 'BatchMode=yes', 'trn-test', 'echo ok'], capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout) == (0, 'ok\n'), r.stderr
    g = subprocess.run(['ssh', '-G', '-F', str(cfg), 'trn-test'], capture_output=True, text=True, timeout=30).stdout
    assert f'localforward [127.0.0.1]:{lp} [localhost]:8888' in g and 'stricthostkeychecking accept-new' in g


def test_jupyter_through_tunnel(sshd, venv, tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    work = sshd.dir/'work-ok'; work.mkdir()
    lp, rp = free_port(), free_port()
    s = J.open_jupyter('127.0.0.1', str(sshd.key), lp, rp, venv=str(venv), workdir=str(work), timeout=60, **conn(sshd))
    started.extend([('jupyter', s.jupyter.pid), ('ssh', s.tunnel.proc.pid)])
    try:
        # 'auto' ran the environment's own JupyterLab, with the environment and the Neuron tools first on PATH
        assert (s.jupyter.command, s.jupyter.venv) == (f'{venv}/bin/jupyter-lab', str(venv))
        assert (venv/'path-seen').read_text().startswith(f'{venv}/bin:/opt/aws/neuron/bin:')
        token = s.jupyter.token
        assert len(token) == 48 and s.url == f'http://127.0.0.1:{lp}/?token={token}'
        assert J.api_status(lp, token) == 200
        assert J.api_status(lp, None) == 403
        assert J.api_status(lp, 'wrong' + token) == 403
        assert listen_addresses(rp) == {'127.0.0.1'}          # Jupyter: loopback only
        assert listen_addresses(lp) == {'127.0.0.1'}          # the tunnel's local end too
        assert alive(s.jupyter.pid) and s.tunnel.alive
        # the token is in no command line, log, repr or output
        assert procs_mentioning(token) == []
        assert token not in (work/'.trn-tutorials'/f'jupyter-{rp}.log').read_text()
        assert token not in repr(s) and token not in repr(s.jupyter) and token not in repr(s.tunnel)
        out = capsys.readouterr()
        assert token not in out.out + out.err + caplog.text
        assert s.jupyter in S.LIVE and s.tunnel in S.LIVE
    finally:
        s.stop()
    assert not alive(s.jupyter.pid) and not s.tunnel.alive and S.LIVE == []
    assert not port_open(rp) and not port_open(lp)
    s.stop()   # twice is harmless


def test_stop_all_stops_what_this_process_started(sshd):
    work = sshd.dir/'work-stop'; work.mkdir()
    s = J.open_jupyter('127.0.0.1', str(sshd.key), free_port(), free_port(), jupyter=JUPYTER, venv=None, workdir=str(work), timeout=60, **conn(sshd))
    started.extend([('jupyter', s.jupyter.pid), ('ssh', s.tunnel.proc.pid)])
    assert S.stop_all(hosts={'198.51.100.1'}) == []
    stopped = S.stop_all(hosts={'127.0.0.1'})
    assert len(stopped) == 2 and not alive(s.jupyter.pid) and not s.tunnel.alive and S.LIVE == []


def test_wait_ends_when_the_tunnel_dies(sshd):
    "What `trn-tutorials tunnel` blocks in: a lost tunnel ends it, and Jupyter is stopped too."
    work = sshd.dir/'work-wait'; work.mkdir()
    s = J.open_jupyter('127.0.0.1', str(sshd.key), free_port(), free_port(), jupyter=JUPYTER, venv=None, workdir=str(work), timeout=60, **conn(sshd))
    started.extend([('jupyter', s.jupyter.pid), ('ssh', s.tunnel.proc.pid)])
    s.tunnel.proc.kill()
    t0 = time.monotonic()
    assert s.wait(poll=0.1) == 'the tunnel closed (connection lost?)'
    assert time.monotonic() - t0 < 30 and not alive(s.jupyter.pid) and S.LIVE == []


def test_busy_local_port(sshd):
    work = sshd.dir/'work-busy'; work.mkdir()
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0)); busy.listen()
        lp = busy.getsockname()[1]
        with pytest.raises(UsageError) as e: S.Tunnel('127.0.0.1', str(sshd.key), lp, 8888, **conn(sshd)).start()
        assert f'local port {lp} is already in use' in one_line(e)
        with pytest.raises(UsageError) as e:
            J.open_jupyter('127.0.0.1', str(sshd.key), lp, free_port(), jupyter=JUPYTER, venv=None, workdir=str(work), **conn(sshd))
        assert f'local port {lp} is already in use' in one_line(e)
    assert procs_mentioning(str(work)) == []    # refused before Jupyter was started
    # ssh's own message for a failed forward (ExitOnForwardFailure) maps to the same line
    assert S.explain_ssh(f'bind [127.0.0.1]:{lp}: Address already in use\nchannel_setup_fwd_listener_tcpip: cannot listen to port: {lp}\n'
                         'Could not request local forwarding.', '127.0.0.1', local_port=lp).startswith(f'local port {lp} is already in use')


def test_key_0644(sshd, tmp_path):
    loose = tmp_path/'loose.pem'
    loose.write_bytes(sshd.key.read_bytes()); loose.chmod(0o644)
    with pytest.raises(UsageError) as e: S.Tunnel('127.0.0.1', str(loose), free_port(), 8888, **conn(sshd)).start()
    assert one_line(e).endswith(f'run `chmod 400 {loose}`')
    # what ssh itself says about such a key, explained the same way
    r = subprocess.run(['ssh', '-o', 'BatchMode=yes', '-o', 'IdentitiesOnly=yes', '-i', str(loose), '-o', f'UserKnownHostsFile={sshd.known_hosts}',
                        '-p', str(sshd.port), f'{sshd.user}@127.0.0.1', 'true'], capture_output=True, text=True, timeout=30)
    assert r.returncode == 255 and 'UNPROTECTED PRIVATE KEY FILE' in r.stderr
    assert 'chmod 400' in S.explain_ssh(r.stderr, '127.0.0.1', sshd.port, str(loose))


def test_wrong_key(sshd, tmp_path):
    wrong = tmp_path/'wrong'
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(wrong)], check=True, timeout=30)
    with pytest.raises(UsageError) as e: S.Tunnel('127.0.0.1', str(wrong), free_port(), 8888, timeout=20, **conn(sshd)).start()
    assert f'{sshd.user}@127.0.0.1:{sshd.port} refused the key {wrong}' in one_line(e)
    with pytest.raises(UsageError) as e:
        J.start_jupyter('127.0.0.1', str(wrong), free_port(), jupyter=JUPYTER, venv=None, workdir=str(tmp_path), **conn(sshd))
    assert 'refused the key' in one_line(e)


def test_unreachable_host(sshd, tmp_path):
    closed = free_port()
    with pytest.raises(UsageError) as e:
        S.Tunnel('127.0.0.1', str(sshd.key), free_port(), 8888, timeout=20, **conn(sshd) | {'port': closed}).start()
    assert f'cannot reach 127.0.0.1:{closed} (Connection refused)' in one_line(e)


def test_changed_host_key(sshd, tmp_path):
    other = tmp_path/'other_host'
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(other)], check=True, timeout=30)
    kh = tmp_path/'known_hosts'
    kh.write_text(f'[127.0.0.1]:{sshd.port} {(tmp_path/"other_host.pub").read_text()}')
    with pytest.raises(UsageError) as e: S.run_remote('true', '127.0.0.1', str(sshd.key), sshd.user, sshd.port, str(kh), timeout=30)
    assert 'different host key' in one_line(e) and f"ssh-keygen -R '[127.0.0.1]:{sshd.port}'" in one_line(e)
    assert S.forget_host('127.0.0.1', sshd.port, str(kh))
    assert S.run_remote('echo fine', '127.0.0.1', str(sshd.key), sshd.user, sshd.port, str(kh), timeout=30).stdout == 'fine\n'


def test_jupyter_errors(sshd, tmp_path):
    with pytest.raises(UsageError) as e:
        J.start_jupyter('127.0.0.1', str(sshd.key), free_port(), jupyter=JUPYTER, venv=None, workdir=str(tmp_path/'missing'), **conn(sshd))
    assert 'does not exist' in one_line(e)
    with pytest.raises(UsageError) as e:
        J.start_jupyter('127.0.0.1', str(sshd.key), free_port(), jupyter='/bin/false', venv=None, workdir=str(tmp_path), **conn(sshd))
    assert 'exited at once' in one_line(e)
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0)); busy.listen()
        rp = busy.getsockname()[1]
        with pytest.raises(UsageError) as e:
            J.start_jupyter('127.0.0.1', str(sshd.key), rp, jupyter=JUPYTER, venv=None, workdir=str(tmp_path), **conn(sshd))
        assert f'port {rp} on 127.0.0.1 is already in use' in one_line(e)


def test_missing_venv_refused_first(sshd, tmp_path):
    "An instance without the environment (a Trn1 from a Neuron 2.32+ DLAMI) gets one line naming the fix; nothing starts."
    work = tmp_path/'work'; work.mkdir()
    assert not Path(J.NEURON_VENV).exists()       # as on a DLAMI without PyTorch/XLA
    with pytest.raises(UsageError) as e: J.start_jupyter('127.0.0.1', str(sshd.key), free_port(), workdir=str(work), **conn(sshd))
    msg = one_line(e)
    assert msg.startswith('127.0.0.1 has no /opt/aws_neuronx_venv_pytorch_2_9 (it was launched from an image without the PyTorch/XLA')
    assert all(fix in msg for fix in ('`trn-tutorials up`', '--ami', '--venv', 'Neuron SDK 2.32')), msg
    missing = tmp_path/'aws_neuronx_venv_torch_neuronx_2_14_0'
    with pytest.raises(UsageError) as e:
        J.open_jupyter('127.0.0.1', str(sshd.key), free_port(), free_port(), venv=str(missing), jupyter=JUPYTER, workdir=str(work), **conn(sshd))
    msg = one_line(e)
    assert msg.startswith(f'127.0.0.1 has no {missing}; relaunch') and 'PyTorch/XLA' not in msg
    # refused before anything else: no log folder, no process, nothing left in the registry
    assert not (work/'.trn-tutorials').exists() and procs_mentioning(str(work)) == [] and S.LIVE == []


def test_venv_without_jupyterlab(sshd, tmp_path):
    bare = make_venv(tmp_path/'aws_neuronx_venv_bare', jupyter=False)
    with pytest.raises(UsageError) as e:
        J.start_jupyter('127.0.0.1', str(sshd.key), free_port(), venv=str(bare), workdir=str(tmp_path), **conn(sshd))
    assert one_line(e).startswith(f'no JupyterLab in {bare} on 127.0.0.1: install it (`{bare}/bin/pip install jupyterlab` there)')


def test_venv_option():
    assert J.NEURON_VENV == DLAMI['trn1'].venv == '/opt/aws_neuronx_venv_pytorch_2_9'
    (t,) = parse_args([J.TunnelArguments], [])
    assert t.venv == J.NEURON_VENV
    (t,) = parse_args([J.TunnelArguments], ['--venv', DLAMI['trn2'].venv])
    assert t.venv == '/opt/aws_neuronx_venv_torch_neuronx_2_14_0'
    assert 'torch_neuronx_2_14_0' in field_help(J.TunnelArguments)['venv']


# ----------------------------------------------------------------------------------------------------
# The checks that used to sit in the SSH chapter (nbs/instance/02_ssh.ipynb), run through the chapter's own rehearsal.
#
# `rehearse(instances=1, ssh=True)` is what the chapter's hidden cell starts under the test runner: a moto server
# with one launched instance, a temporary HOME, and a real sshd on 127.0.0.1 that accepts that instance's key and
# stands in for it. The chapter shows each step once and ends on its value; what it used to assert is here.
# (was test_ssh_chapter.py)

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
def login(r):
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


def test_plain_commands(r, login, tmp_path):
    inst = find_instance()
    assert S.ssh_command(inst.host, inst.key_path) == \
           f'ssh -L 8888:localhost:8888 -i ~/.ssh/trn-tutorials-{inst.run_id}.pem ubuntu@{inst.host}'
    assert S.ssh_command('h', 'k.pem', 8080, 8081, port=2222) == 'ssh -L 8080:localhost:8081 -i k.pem -p 2222 ubuntu@h'
    assert S.ssh_command('h', '/my keys/k.pem') == "ssh -L 8888:localhost:8888 -i '/my keys/k.pem' ubuntu@h"
    assert '    LocalForward 127.0.0.1:8888 localhost:8888' in S.ssh_config_entry('h', 'k.pem')
    # the entry works as written: ssh reads it, logs in with the key and runs a command (ssh expands ~ to the
    # passwd home, not $HOME, so the rehearsal's temporary ~ is written out here)
    cfg = tmp_path/'ssh_config'
    cfg.write_text(S.ssh_config_entry(r.host, str(Path(login['key']).expanduser()), alias='demo', user=r.user, port=r.port,
                                      known_hosts=str(tmp_path/'known_hosts')))
    res = subprocess.run(['ssh', '-F', str(cfg), '-o', 'BatchMode=yes', '-o', 'LogLevel=ERROR', '-o', 'ClearAllForwardings=yes',
                          'demo', 'echo logged in'], capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stdout) == (0, 'logged in\n'), res.stderr


def test_key_file(login, tmp_path):
    assert oct(S.check_key(login['key']).stat().st_mode & 0o777) == '0o400'
    assert S.check_key(login['key']) == Path(login['key']).expanduser()
    loose = tmp_path/'loose.pem'
    loose.write_bytes(Path(login['key']).expanduser().read_bytes()); loose.chmod(0o644)
    with pytest.raises(UsageError) as e: S.check_key(loose)
    assert f"run `chmod 400 {loose}`" in str(e.value)
    with pytest.raises(UsageError, match="no private key at"): S.check_key(tmp_path/'missing.pem')


def test_run_remote_and_its_errors(login, tmp_path):
    c = login
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


def test_tunnel(r, login, tmp_path):
    c, lp = login, r.local_port
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


def test_jupyter(r, login):
    c, rport, venv = login, r.remote_port, r.venv
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


def test_missing_environment(r, login):
    c = login
    with pytest.raises(UsageError) as e: J.start_jupyter(c['host'], c['key'], r.remote_port, c['user'], c['port'], venv=TRN2_VENV)
    assert str(e.value).startswith(f'127.0.0.1 has no {TRN2_VENV}; relaunch with `trn-tutorials up`') and str(e.value).endswith(': none')
    with pytest.raises(UsageError) as e: J.start_jupyter(c['host'], c['key'], r.remote_port, c['user'], c['port'])
    assert str(e.value).startswith('127.0.0.1 has no /opt/aws_neuronx_venv_pytorch_2_9 (it was launched from an image without the PyTorch/XLA')
    assert S.LIVE == []


def test_open_jupyter_and_stop_all(r, login):
    c, lp = login, r.local_port
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


def test_zz_nothing_left_running(sshd):
    "Every process the tests started is gone, and the sshd has no open sessions."
    assert S.LIVE == []
    assert started and all(not alive(pid) for _, pid in started), [(k, p) for k, p in started if alive(p)]
    deadline = time.monotonic() + 10
    while sshd.children() and time.monotonic() < deadline: time.sleep(0.1)
    assert sshd.children() == []
    assert [p for p in procs_mentioning(str(sshd.dir)) if p[0] != sshd.proc.pid] == []
