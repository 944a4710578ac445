"""The SSH chapter against a real OpenSSH sshd on 127.0.0.1 and a real `jupyter server` started through it.

"The instance" is this machine, reached through the test sshd as the current user.
"""
import logging, os, shlex, shutil, socket, subprocess, sys, time
from dataclasses import fields
from pathlib import Path

import pytest

from trn_tutorials.core import UsageError, field_help, parse_args
from trn_tutorials.dlami import DLAMI
from trn_tutorials.instance import wait_for_ssh
from trn_tutorials import ssh as S
from trn_tutorials import remote_jupyter as J
from local_services import alive, free_port, jupyter_command, listen_addresses, make_venv, procs_mentioning, port_open

# a root login (as here) needs --allow-root; on the DLAMI you log in as ubuntu
JUPYTER = jupyter_command()
started = []   # (kind, pid) of every process the tests start, checked at the end


def one_line(e) -> str:
    msg = str(e.value)
    assert msg and '\n' not in msg, msg
    return msg


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


def test_zz_nothing_left_running(sshd):
    "Every process the tests started is gone, and the sshd has no open sessions."
    assert S.LIVE == []
    assert started and all(not alive(pid) for _, pid in started), [(k, p) for k, p in started if alive(p)]
    deadline = time.monotonic() + 10
    while sshd.children() and time.monotonic() < deadline: time.sleep(0.1)
    assert sshd.children() == []
    assert [p for p in procs_mentioning(str(sshd.dir)) if p[0] != sshd.proc.pid] == []
