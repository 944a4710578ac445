"""Issue 15, the AWS side: a key pair never outlives a key file that could not be written, `--my_ip` must be one public
host address, and every number the AWS and SageMaker entry points take is checked (type, finite, range) before any call.

Against a real moto_server (AWS_ENDPOINT_URL). "Cannot write" is made real: a key_dir under a file, a read-only
file system (a tmpfs mounted ro), and a file-size limit (RLIMIT_FSIZE) that lets the writability probe (an empty file) pass but
makes writing the key itself fail with EFBIG - the failure between the check and the write.
"""
import os, subprocess, sys
from pathlib import Path

import boto3, pytest

from trn_tutorials.core import UsageError, parse_args
from trn_tutorials import instance as I
from trn_tutorials.instance import InstanceArguments, ensure_key_pair, launch_instance, ssh_cidr
from trn_tutorials.aws import tag_filters
from local_services import MY_IP, free_port

TRN = str(Path(sys.executable).parent/'trn-tutorials')


def one_line(e) -> str:
    msg = str(e.value)
    assert msg and '\n' not in msg, msg
    return msg


def nothing_made(region='us-east-1'):
    ec2 = boto3.client('ec2', region_name=region)
    assert ec2.describe_key_pairs()['KeyPairs'] == []
    assert ec2.describe_security_groups(Filters=tag_filters())['SecurityGroups'] == []
    assert [i for r in ec2.describe_instances()['Reservations'] for i in r['Instances']] == []


# ------------------------------------------------------------------------------------------------ the key pair
def test_key_dir_under_a_file_makes_nothing(moto_server, tmp_path):
    (tmp_path/'notes.txt').write_text('mine\n')
    with pytest.raises(UsageError) as e: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path/'notes.txt'/'keys'), wait_ssh=False)
    assert 'lies under the file' in one_line(e) and '--key_dir' in one_line(e)
    with pytest.raises(UsageError) as e: ensure_key_pair('my-key', key_dir=str(tmp_path/'notes.txt'))
    assert 'is a file, not a folder' in one_line(e)
    nothing_made()
    assert sorted(p.name for p in tmp_path.iterdir()) == ['notes.txt']


def _cli(args, env, preexec=None, code='') -> subprocess.CompletedProcess:
    "`trn-tutorials ARGS` in a fresh Python; `code` runs after the imports, just before the command."
    prog = f"from trn_tutorials.cli import main\n{code}\nmain()"   # main reads the arguments after -c
    return subprocess.run([sys.executable, '-c', prog, *args], capture_output=True, text=True, env=env, timeout=120, preexec_fn=preexec,
                          cwd='/')


@pytest.fixture
def read_only_dir(tmp_path):
    "A folder on a read-only file system (a tmpfs mounted ro): not writable, even by root. Needs the right to mount."
    d = tmp_path/'ro'; d.mkdir()
    r = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', str(d)], capture_output=True, text=True)
    if r.returncode: pytest.skip(f'cannot mount a read-only tmpfs here: {r.stderr.strip()}')
    yield d
    subprocess.run(['umount', str(d)], check=True)


def test_key_dir_not_writable_makes_nothing(moto_server, read_only_dir):
    "`up` with a key_dir on a read-only file system: refused before any AWS call (the CLI, in a subprocess)."
    r = _cli(['up', '--my_ip', MY_IP, '--key_dir', str(read_only_dir/'keys'), '--wait_ssh', 'false'], dict(os.environ))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0] == (f"trn-tutorials up: error: --key_dir {read_only_dir}/keys is not writable (a read-only file system at "
                        f"{read_only_dir}): pass a folder you can write to")
    nothing_made()
    # a key pair of the user's, named with --key_name, is checked the same way before it is created
    with pytest.raises(UsageError) as e: ensure_key_pair('named', key_dir=str(read_only_dir))
    assert 'is not writable (a read-only file system' in one_line(e)
    nothing_made()


LIMIT_WRITES = ("import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                "resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))")   # after the imports: a key (~400 bytes) no longer fits


def test_key_write_fails_after_the_check_rolls_the_pair_back(moto_server, tmp_path):
    keys = tmp_path/'keys'
    r = _cli(['up', '--my_ip', MY_IP, '--key_dir', str(keys), '--run_id', 'efbig', '--wait_ssh', 'false'], dict(os.environ),
             code=LIMIT_WRITES)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0] == (f"trn-tutorials up: error: could not write the private key {keys}/trn-tutorials-efbig.pem (file too large), "
                        "so the new key pair 'trn-tutorials-efbig' was deleted again: pass a --key_dir you can write to, "
                        "with free space, and retry")
    nothing_made()
    assert list(keys.iterdir()) == []   # no partial key, no temporary file
    # the same launch, with room to write, works: nothing was left to get in its way
    inst = launch_instance(my_ip=MY_IP, key_dir=str(keys), run_id='efbig', wait_ssh=False)
    assert Path(inst.key_path).read_text().startswith('-----BEGIN') and oct(Path(inst.key_path).stat().st_mode & 0o777) == '0o400'


def test_interrupted_key_write_rolls_the_pair_back(moto_server, tmp_path, monkeypatch):
    "Ctrl-C while the key is written: the pair is deleted and the interrupt goes on."
    def interrupted(path, material): path.write_text(material[:10]); raise KeyboardInterrupt
    monkeypatch.setattr(I, '_write_key', interrupted)
    with pytest.raises(KeyboardInterrupt): ensure_key_pair('half', key_dir=str(tmp_path))
    assert boto3.client('ec2').describe_key_pairs()['KeyPairs'] == []


def test_a_file_that_takes_the_name_is_not_overwritten(moto_server, tmp_path, monkeypatch):
    real = I._write_key
    def race(path, material): path.write_text('precious\n'); real(path, material)
    monkeypatch.setattr(I, '_write_key', race)
    with pytest.raises(UsageError) as e: ensure_key_pair('raced', key_dir=str(tmp_path))
    assert 'a file took its name meanwhile' in one_line(e) and "'raced' was deleted again" in one_line(e)
    assert (tmp_path/'raced.pem').read_text() == 'precious\n' and [p.name for p in tmp_path.iterdir()] == ['raced.pem']
    assert boto3.client('ec2').describe_key_pairs()['KeyPairs'] == []


# ------------------------------------------------------------------------------------------------ --my_ip
@pytest.mark.parametrize('ip,what', [('0.0.0.0', 'unspecified'), ('0.0.0.0/32', 'unspecified'), ('192.168.1.20', 'private'),
    ('10.0.0.5', 'private'), ('172.20.1.1', 'private'), ('100.64.3.4', 'carrier-grade NAT'), ('127.0.0.1', 'loopback'),
    ('169.254.169.254', 'link-local'), ('239.1.2.3', 'multicast'), ('255.255.255.255', 'broadcast'), ('250.1.1.1', 'reserved')])
def test_my_ip_not_a_public_host(ip, what):
    with pytest.raises(UsageError) as e: ssh_cidr(ip)
    assert one_line(e).startswith(f'--my_ip {ip} is ') and what in one_line(e)
    assert 'pass your public IPv4 address (https://checkip.amazonaws.com shows it)' in one_line(e)
    with pytest.raises(UsageError): InstanceArguments(my_ip=ip)


@pytest.mark.parametrize('ip', [MY_IP, '192.0.2.10', '198.51.100.2/32', '8.8.8.8', '100.63.255.255', '172.32.0.1'])
def test_public_and_documentation_addresses_pass(ip):
    assert ssh_cidr(ip) == ip.split('/')[0] + '/32'


# ------------------------------------------------------------------------------------------------ numbers
from trn_tutorials import ssh as S
from trn_tutorials import remote_jupyter as J
from trn_tutorials.cleanup import CleanupArguments, cleanup
from trn_tutorials.endpoint import deploy, endpoint_requests
from trn_tutorials.instance import caller_ip, guard_user_data, wait_for_ssh
from trn_tutorials.remote_jupyter import TunnelArguments
from trn_tutorials.training_job import JobArguments, sm_cost, wait_job

NAN, INF = float('nan'), float('inf')


@pytest.fixture
def no_aws(monkeypatch):
    "boto3 pointed at a closed port: a call that reached it would fail with 'cannot reach AWS', not with the expected line."
    monkeypatch.setenv('AWS_ENDPOINT_URL', f'http://127.0.0.1:{free_port()}')
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'testing'); monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'testing')
    monkeypatch.setenv('AWS_DEFAULT_REGION', 'us-east-1')


@pytest.mark.parametrize('cls,kw,says', [
    (InstanceArguments, dict(max_hours='8'), "--max_hours '8' is a str, not a number: pass a number (e.g. --max_hours 8)"),
    (InstanceArguments, dict(max_hours=NAN), '--max_hours nan is not a finite number'),
    (InstanceArguments, dict(max_hours=-1), '--max_hours -1 is out of range: use a number in (0, 720], or 0 (no cost guard)'),
    (InstanceArguments, dict(max_hours=721), '--max_hours 721 is out of range'),
    (InstanceArguments, dict(volume_gb=100), '--volume_gb 100 is too small for the DLAMI (its snapshot is about 100 GB): use 120 or more'),
    (InstanceArguments, dict(volume_gb=20000), '--volume_gb 20000 is out of range: use 120 to 16384'),
    (InstanceArguments, dict(volume_gb=256.0), '--volume_gb 256.0 is a float, not a whole number'),
    (InstanceArguments, dict(volume_gb=True), '--volume_gb True is a bool'),
    (InstanceArguments, dict(timeout=0), '--timeout 0 is out of range: use a number in (0, 86400]'),
    (InstanceArguments, dict(timeout=INF), '--timeout inf is not a finite number'),
    (TunnelArguments, dict(local_port=70000), '--local_port 70000 is out of range: use 1 to 65535'),
    (TunnelArguments, dict(remote_port=0), '--remote_port 0 is out of range'),
    (TunnelArguments, dict(port='22'), "--port '22' is a str"),
    (TunnelArguments, dict(timeout=-5), '--timeout -5 is out of range'),
    (CleanupArguments, dict(timeout=-1), '--timeout -1 is out of range: use a number in (0, 86400]'),
    (CleanupArguments, dict(timeout=NAN), '--timeout nan is not a finite number'),
    (JobArguments, dict(instance_count=0), '--instance_count 0 is out of range: use 1 or more'),
    (JobArguments, dict(max_run_hours=0), '--max_run_hours 0 is out of range: use a number in (0, 672]'),
    (JobArguments, dict(max_run_hours=673), '--max_run_hours 673 is out of range'),
    (JobArguments, dict(spot=True, max_wait_hours=INF), '--max_wait_hours inf is not a finite number'),
    (JobArguments, dict(volume_gb=0), '--volume_gb 0 is out of range: use 1 to 16384'),
    (JobArguments, dict(poll_s=0), '--poll_s 0 is out of range: use a number in (0, 3600]'),
])
def test_argument_numbers_refused_at_construction(cls, kw, says):
    with pytest.raises(UsageError) as e: cls(**kw)
    assert one_line(e).startswith(says)
    assert any(w in one_line(e) for w in (': use ', ': pass '))


def test_good_numbers_pass_and_ints_become_floats():
    a = InstanceArguments(max_hours=0, volume_gb=120, timeout=60)
    assert (a.max_hours, type(a.max_hours), a.volume_gb) == (0.0, float, 120)
    assert InstanceArguments(max_hours=720).max_hours == 720.0
    assert TunnelArguments(local_port=1, remote_port=65535).local_port == 1
    j = JobArguments(spot=True, max_wait_hours=4, max_run_hours=672)
    assert (j.max_wait_hours, j.max_run_hours) == (4.0, 672.0) and JobArguments().max_wait_hours is None


def test_the_cli_parser_refuses_in_one_line(capsys):
    for types, argv, says in [([InstanceArguments], ['--max_hours', 'nan'], '--max_hours nan is not a finite number'),
                              ([InstanceArguments], ['--my_ip', '0.0.0.0'], '--my_ip 0.0.0.0 is unspecified'),
                              ([J.TunnelArguments], ['--local_port', '70000'], '--local_port 70000 is out of range'),
                              ([CleanupArguments], ['--timeout', '-1'], '--timeout -1.0 is out of range')]:
        with pytest.raises(SystemExit) as e: parse_args(types, argv, prog='trn-tutorials x')
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and err.startswith(f'trn-tutorials x: error: {says}') and err.endswith('(see --help)'), err


def test_functions_refuse_before_any_aws_call(no_aws, tmp_path):
    key = tmp_path/'k.pem'; key.write_text('x'); key.chmod(0o400)
    cases = [
        (lambda: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path), max_hours=NAN), '--max_hours nan is not a finite number'),
        (lambda: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path), volume_gb=INF), '--volume_gb inf is a float'),
        (lambda: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path), timeout=-1), '--timeout -1 is out of range'),
        (lambda: launch_instance(my_ip='192.168.1.20', key_dir=str(tmp_path)), '--my_ip 192.168.1.20 is a private address'),
        (lambda: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path/'k.pem')), '--key_dir'),
        (lambda: guard_user_data(-0.5), '--max_hours -0.5 is out of range'),
        (lambda: guard_user_data('8'), "--max_hours '8' is a str"),
        (lambda: wait_for_ssh('127.0.0.1', 22, timeout=NAN), '--timeout nan is not a finite number'),
        (lambda: wait_for_ssh('127.0.0.1', 0), '--port 0 is out of range'),
        (lambda: caller_ip(timeout=0), '--timeout 0 is out of range'),
        (lambda: cleanup('r1', timeout=-1), '--timeout -1 is out of range'),
        (lambda: cleanup('r1', timeout='600'), "--timeout '600' is a str"),
        (lambda: J.open_jupyter('203.0.113.7', str(key), local_port=70000), '--local_port 70000 is out of range'),
        (lambda: J.open_jupyter('203.0.113.7', str(key), timeout=INF), '--timeout inf is not a finite number'),
        (lambda: S.Tunnel('203.0.113.7', str(key), remote_port=-1), '--remote_port -1 is out of range'),
        (lambda: J.start_jupyter('203.0.113.7', str(key), port=65536), '--port 65536 is out of range'),
        (lambda: S.ssh_command('203.0.113.7', str(key), local_port=8888.5), '--local_port 8888.5 is a float'),
        (lambda: sm_cost('ml.trn1.2xlarge', -60), '--seconds -60 is out of range: use 0 or more'),
        (lambda: sm_cost('ml.trn1.2xlarge', NAN), '--seconds nan is not a finite number'),
        (lambda: sm_cost('ml.trn1.2xlarge', 60, 0), '--count 0 is out of range'),
        (lambda: wait_job('some-job', poll_s=0), '--poll_s 0 is out of range'),
        (lambda: deploy(str(tmp_path), instance_count=0), '--instance_count 0 is out of range: use 1 or more'),
        (lambda: endpoint_requests('e', 's3://b/k', 'arn', instance_count=1.5), '--instance_count 1.5 is a float'),
    ]
    for call, says in cases:
        with pytest.raises(UsageError) as e: call()
        assert one_line(e).startswith(says), (says, one_line(e))
    assert list(tmp_path.iterdir()) == [key]
    assert sm_cost('ml.trn1.2xlarge', 0) == 0 and sm_cost('ml.trn1.2xlarge', 3600, 2) == 3.08 and sm_cost('ml.trn1.32xlarge', 60) is None
