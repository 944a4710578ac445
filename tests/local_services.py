"""Real local stand-ins for the cloud, shared by the tests and the notebooks' demonstration cells.

- `MotoServer`: a real `moto_server` (the AWS APIs) on a free 127.0.0.1 port; `env` holds the
  variables that point boto3 at it (`AWS_ENDPOINT_URL`, fake credentials, a region).
- `Sshd`: a real OpenSSH `sshd` on a free 127.0.0.1 port with its own config, host key and
  authorized_keys in a temporary folder, and a client key that it accepts.
- `make_venv`: a stand-in for a DLAMI environment (bin/python, bin/jupyter-lab).
- `rehearse`: all of these at once, for a chapter run by the test runner (see `Rehearsal`).

Nothing here is imported by the library. Missing programs raise `MissingService`, whose message says
to run `.ci/services.sh`; tests turn that into a failure, never a skip.
"""
from __future__ import annotations
import atexit, ctypes, getpass, json, os, re, shlex, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

HINT = "install it with `bash .ci/services.sh .venv` (as root, from the repository root)"


class MissingService(RuntimeError):
    "A program the real-component tests need is not installed."


def free_port() -> int:
    "A TCP port on 127.0.0.1 that nothing listens on right now."
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def one_line(e) -> str:
    "The message of the exception `pytest.raises` caught as `e`, checked to be one non-empty line without surrounding spaces."
    msg = str(e.value)
    assert msg and msg == msg.strip() and '\n' not in msg, repr(msg)
    return msg


def queue_answer(moto, body, region: str = 'us-east-1'):
    "Queue what the next invoke_endpoint on `moto` (a MotoServer, or its URL) returns: moto runs no container. `body`: text, or JSON-able."
    import urllib.request
    url = moto if isinstance(moto, str) else moto.url
    data = json.dumps({'region': region, 'results': [{'Body': body if isinstance(body, str) else json.dumps(body),
                                                      'ContentType': 'application/json'}]}).encode()
    urllib.request.urlopen(urllib.request.Request(url + '/moto-api/static/sagemaker/endpoint-results', data=data, method='POST'), timeout=10).read()


REPR = re.compile(r"\b(Value|ClassLabel|List|LargeList|Sequence|Features|Json)\(|Traceback")   # a datasets feature's repr, a traceback


def refused(fn, *a, **kw) -> str:
    "The one line of the `UsageError` that `fn(*a, **kw)` raises: no datasets feature's repr, no traceback in it."
    import pytest
    from trn_tutorials.core.options import UsageError
    with pytest.raises(UsageError) as e: fn(*a, **kw)
    msg = str(e.value)
    assert '\n' not in msg and not REPR.search(msg), msg
    return msg


def prep_args(tmp_path, data=None, **kw):
    "`DataArguments` preparing `data` (default: the bundled sample) with the offline MiniLM into `tmp_path/prep`, changed by `kw`."
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.sources import sample_data
    from trn_tutorials.models import local_model
    return DataArguments(**{'data': data or sample_data(), 'model_id': local_model(), 'dataset_path': str(tmp_path/'prep'), **kw})


def hold_lock(folder, option:str='dataset_path', seconds:float=60) -> subprocess.Popen:
    "A real helper process holding `folder`'s lock until it is killed, `seconds` pass, or its parent (this process) ends."
    code = ("import sys, time\nfrom trn_tutorials.core.processes import die_with_parent; from trn_tutorials.core.folders import folder_lock\ndie_with_parent()\n"
            "with folder_lock(sys.argv[1], sys.argv[2]):\n    print('held', flush=True); time.sleep(float(sys.argv[3]))")
    p = subprocess.Popen([sys.executable, '-c', code, str(folder), option, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == 'held', 'the helper did not take the lock'
    atexit.register(stop, p)
    return p


def stop(p:subprocess.Popen, sig:int=signal.SIGTERM):
    "End the helper `p` (started here) and reap it."
    if p.poll() is None:
        p.send_signal(sig)
        try: p.wait(10)
        except subprocess.TimeoutExpired: p.kill(); p.wait()
    if p.stdout: p.stdout.close()


def damage(d:Path, how:str):
    "Damage the prepared folder `d` as `how` says: what `load_prepared` must refuse (tests/test_prepared.py lists the ways)."
    m = d/'trn_tutorials.json'
    if how == 'no manifest': m.unlink()
    elif how == 'not JSON': m.write_text('{"model_id": "x", ')
    elif how == 'a list': m.write_text('[]')
    elif how == 'no label_names':
        j = json.loads(m.read_text()); del j['label_names']; del j['model_id']; m.write_text(json.dumps(j))
    elif how == 'max_length 0':
        j = json.loads(m.read_text()); j['max_length'] = 0; j['bucket_lengths'] = [0]; m.write_text(json.dumps(j))
    elif how == 'one label':
        j = json.loads(m.read_text()); j['label_names'] = ['joy']; m.write_text(json.dumps(j))
    elif how == 'truncated arrow':
        a = next((d/'train').glob('*.arrow')); a.write_bytes(a.read_bytes()[:10_000])
    elif how == 'no dataset_dict.json': (d/'dataset_dict.json').unlink()
    elif how == 'no train split': shutil.rmtree(d/'train'); (d/'dataset_dict.json').write_text('{"splits": ["validation", "test"]}')
    elif how == 'other rows':
        shutil.rmtree(d/'test'); shutil.copytree(d/'train', d/'test')
    elif how == 'other labels':
        j = json.loads(m.read_text()); j['label_names'] = sorted(j['label_names']); m.write_text(json.dumps(j))


def damaged(d:Path, prepared, how:str) -> str:
    "A copy of the prepared folder `prepared` in `d`, damaged as `how` says (see `damage`)."
    c = Path(shutil.copytree(prepared, d/'data')); damage(c, how)
    return str(c)



def port_open(port: int, host: str = '127.0.0.1') -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5): return True
    except OSError: return False


def _die_with_parent():
    "Run in the child before exec: get SIGTERM when the parent dies, so no server outlives a killed test run."
    try: ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception: pass


def _wait_listening(proc: subprocess.Popen, port: int, timeout: float, log: Path, what: str, host: str = '127.0.0.1'):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        if port_open(port, host): return
        time.sleep(0.05)
    proc.kill(); proc.wait(5)
    raise RuntimeError(f"{what} did not listen on {host}:{port} within {timeout} s: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen | None, timeout: float = 10):
    if proc is None or proc.poll() is not None: return
    proc.terminate()
    try: proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill(); proc.wait(timeout)


def alive(pid: int) -> bool:
    "Whether `pid` is a live (not zombie) process."
    try: stat = Path(f'/proc/{pid}/stat').read_text()
    except OSError: return False
    return stat.rsplit(')', 1)[1].split()[0] != 'Z'


def procs_mentioning(text: str) -> list[tuple[int, str]]:
    "Live processes (not zombies) whose command line contains `text`, except this one."
    out = []
    for p in Path('/proc').iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid(): continue
        try: cmd = (p/'cmdline').read_bytes().replace(b'\0', b' ').decode(errors='replace')
        except OSError: continue
        if text in cmd and alive(int(p.name)): out.append((int(p.name), cmd.strip()))
    return out


def listen_addresses(port: int) -> set[str]:
    "Local addresses with a TCP socket in LISTEN state on `port`, read from /proc/net/tcp and tcp6."
    addrs = set()
    for f, v6 in (('/proc/net/tcp', False), ('/proc/net/tcp6', True)):
        try: lines = Path(f).read_text().splitlines()[1:]
        except OSError: continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            hexip, hexport = local.split(':')
            if state != '0A' or int(hexport, 16) != port: continue
            raw = bytes.fromhex(hexip)
            # /proc prints each 32-bit word in host (little-endian) order
            raw = b''.join(raw[i:i+4][::-1] for i in range(0, len(raw), 4))
            addrs.add(socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, raw))
    return addrs


# Images the moto server knows, in the shape of moto's own `amis.json` (loaded through MOTO_AMIS_PATH): Neuron DLAMIs
# named as AWS names them, each with its Neuron SDK version in its description (what the Neuron DLAMI guide filters
# on, "*Neuron SDK 2.32.0*"; the rest of these descriptions, the ids and the dates are made up for the tests).
# Trn1 must get the newest SDK 2.31 PyTorch 2.9 image although the 2.32 and 2.33 multi-framework images (JAX and vLLM
# only) are newer; Trn2/Trn3 the torch-neuronx 2.14 image; the 2.31 JAX image and plain Ubuntu never.
# Owner 898082745236 is the account that publishes the DLAMIs.
def _dlami(ami_id: str, name: str, sdk: str) -> dict:
    date = name.rsplit(' ', 1)[1]
    return {"ami_id": ami_id, "name": name, "creation_date": f"{date[:4]}-{date[4:6]}-{date[6:]}T00:00:00.000Z",
            "description": f"{name.rsplit(' ', 1)[0]}, Neuron SDK {sdk}, supported EC2 instances: Inf2, Trn1, Trn1n, Trn2, Trn3"}

AMIS = [
    _dlami("ami-0dl4m1mf2310707", "Deep Learning AMI Neuron (Ubuntu 24.04) 20260707", "2.31.0"),
    _dlami("ami-0dl4m1pt2310707", "Deep Learning AMI Neuron PyTorch 2.9 (Ubuntu 24.04) 20260707", "2.31.0"),
    _dlami("ami-0dl4m1pt2310812", "Deep Learning AMI Neuron PyTorch 2.9 (Ubuntu 24.04) 20260812", "2.31.1"),
    _dlami("ami-0dl4m1jx2310707", "Deep Learning AMI Neuron JAX 0.9 (Amazon Linux 2023) 20260707", "2.31.0"),
    _dlami("ami-0dl4m1mf2320817", "Deep Learning AMI Neuron (Ubuntu 24.04) 20260817", "2.32.0"),
    _dlami("ami-0dl4m1mf2331019", "Deep Learning AMI Neuron (Ubuntu 24.04) 20261019", "2.33.0"),
    _dlami("ami-0dl4m1tn2331019", "Deep Learning AMI Neuron torch-neuronx 2.14.0 (Ubuntu 24.04) 20261019", "2.33.0"),
    {"ami_id": "ami-0ub4ntu2404n0b1e", "name": "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20261101",
     "creation_date": "2026-11-01T00:00:00.000Z", "owner_id": "099720109477"},
]
TRN1_DLAMI = "ami-0dl4m1pt2310812"     # what a Trn1 must get: the newest SDK 2.31 PyTorch 2.9 DLAMI
TRN2_DLAMI = "ami-0dl4m1tn2331019"     # what a Trn2/Trn3 must get: the torch-neuronx 2.14 DLAMI
LATEST_DLAMI = "ami-0dl4m1mf2331019"   # the newest multi-framework DLAMI ("latest"): no PyTorch/XLA, never for Trn1
NO_XLA_DLAMI = "ami-0dl4m1mf2320817"   # SDK 2.32 multi-framework: JAX and vLLM only


def _ami(d: dict) -> dict:
    return {"state": "available", "public": True, "owner_id": "898082745236", "image_location": f"amazon/{d['name']}",
            "sriov": "simple", "root_device_type": "ebs", "root_device_name": "/dev/sda1", "description": d['name'],
            "image_type": "machine", "platform": None, "architecture": "x86_64", "virtualization_type": "hvm",
            "hypervisor": "xen", **d}


class MotoServer:
    "A real `moto_server` on a free 127.0.0.1 port, with the Neuron DLAMIs of `AMIS`."
    region = 'us-east-1'

    def __init__(self, workdir=None, exe=None):
        self.dir = Path(workdir or tempfile.mkdtemp(prefix='moto-'))
        self.port, self.proc = free_port(), None
        self.exe = Path(exe) if exe else Path(sys.executable).parent/'moto_server'   # exe: another venv's (tools/journey.py)

    @property
    def url(self) -> str: return f'http://127.0.0.1:{self.port}'

    @property
    def env(self) -> dict:
        "Variables that send boto3 to this server with fake credentials, and away from any real profile."
        return {'AWS_ENDPOINT_URL': self.url, 'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing',
                'AWS_DEFAULT_REGION': self.region, 'AWS_CONFIG_FILE': str(self.dir/'no-config'),
                'AWS_SHARED_CREDENTIALS_FILE': str(self.dir/'no-credentials'), 'AWS_EC2_METADATA_DISABLED': 'true'}

    def start(self, timeout: float = 30) -> 'MotoServer':
        exe = self.exe
        if not exe.exists(): raise MissingService(f"moto_server is not in {exe.parent}: {HINT}")
        amis = self.dir/'amis.json'
        amis.write_text(json.dumps([_ami(a) for a in AMIS]))
        log = self.dir/'moto.log'
        env = {**os.environ, 'MOTO_AMIS_PATH': str(amis)}
        with open(log, 'wb') as f:
            self.proc = subprocess.Popen([str(exe), '-H', '127.0.0.1', '-p', str(self.port)], stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent)
        _wait_listening(self.proc, self.port, timeout, log, 'moto_server')
        return self

    def reset(self):
        "Forget every resource (moto's documented reset endpoint)."
        urllib.request.urlopen(urllib.request.Request(self.url + '/moto-api/reset', method='POST'), timeout=10).read()

    def stop(self): _stop(self.proc)
    def __enter__(self): return self.start()
    def __exit__(self, *exc): self.stop()


class Sshd:
    """A real OpenSSH sshd on a free 127.0.0.1 port: key login only, for the current user (root by key only).

    `home`: the HOME of its sessions (default: the user's own); `authorized`: more private keys it accepts;
    `host`, `port`: where it listens (default 127.0.0.1 and a free port); `wrap`: a command line sshd's is appended to
    (e.g. `unshare` giving it a file system view of its own, as tools/journey.py's instance stand-in does)."""
    exe = '/usr/sbin/sshd'  # sshd must be started by its absolute path (it re-executes itself)

    def __init__(self, workdir=None, home=None, authorized=(), host: str = '127.0.0.1', port: int | None = None, wrap=()):
        self.dir = Path(workdir or tempfile.mkdtemp(prefix='sshd-'))
        self.port, self.user, self.proc = port or free_port(), getpass.getuser(), None
        self.host, self.wrap = host, list(wrap)
        self.home, self.authorized = home, [Path(k).expanduser() for k in authorized]
        self.key = self.dir/'client_ed25519'            # the private key sshd accepts
        self.known_hosts = self.dir/'known_hosts'       # empty: the client learns the host key (accept-new)
        self.config = self.dir/'sshd_config'
        self.log = self.dir/'sshd.log'

    def start(self, timeout: float = 15) -> 'Sshd':
        for exe in (self.exe, shutil.which('ssh'), shutil.which('ssh-keygen')):
            if not exe or not Path(exe).exists(): raise MissingService(f"OpenSSH is missing ({exe or 'ssh/ssh-keygen'}): {HINT}")
        Path('/run/sshd').mkdir(mode=0o755, exist_ok=True)   # privilege-separation directory sshd insists on
        kg = lambda *a: subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', *a], check=True, capture_output=True, timeout=30)
        kg('-f', str(self.dir/'host_ed25519'))
        kg('-f', str(self.key), '-C', 'trn-tutorials-test')
        self.key.chmod(0o400)
        pub = lambda k: subprocess.run(['ssh-keygen', '-y', '-f', str(k)], check=True, capture_output=True, text=True, timeout=30).stdout
        (self.dir/'authorized_keys').write_text((self.dir/'client_ed25519.pub').read_text() + ''.join(pub(k) for k in self.authorized))
        (self.dir/'authorized_keys').chmod(0o600)
        self.known_hosts.touch()
        self.config.write_text(f"""Port {self.port}
ListenAddress {self.host}
HostKey {self.dir}/host_ed25519
PidFile {self.dir}/sshd.pid
AuthorizedKeysFile {self.dir}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
AllowTcpForwarding local
X11Forwarding no
PermitTTY no
PrintMotd no
UseDNS no
LogLevel VERBOSE
""" + (f"SetEnv HOME={self.home}\n" if self.home else ''))
        t = subprocess.run([self.exe, '-t', '-f', str(self.config)], capture_output=True, text=True, timeout=30)
        if t.returncode: raise RuntimeError(f"sshd rejects its test config: {t.stderr.strip()}")
        with open(self.log, 'wb') as f:
            self.proc = subprocess.Popen([*self.wrap, self.exe, '-D', '-e', '-f', str(self.config)], stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        _wait_listening(self.proc, self.port, timeout, self.log, 'sshd', self.host)
        return self

    def children(self) -> list[int]:
        "Live per-connection sshd processes under this server."
        if self.proc is None: return []
        kids = []
        for p in Path('/proc').iterdir():
            if not p.name.isdigit(): continue
            try: ppid = int((p/'stat').read_text().rsplit(')', 1)[1].split()[1])
            except (OSError, IndexError, ValueError): continue
            if ppid == self.proc.pid and alive(int(p.name)): kids.append(int(p.name))
        return kids

    def stop(self): _stop(self.proc)
    def __enter__(self): return self.start()
    def __exit__(self, *exc): self.stop()


def jupyter_command() -> str:
    "This environment's Jupyter server as a command; a root login (as on CI) needs --allow-root, the DLAMI's ubuntu never does."
    return f'{sys.executable} -m jupyter_server' + (' --allow-root' if os.geteuid() == 0 else '')


def make_venv(path: Path, jupyter: bool = True) -> Path:
    "A stand-in for a DLAMI environment: bin/python, and a bin/jupyter-lab that notes its PATH (in `path-seen`) and runs this environment's Jupyter."
    path = Path(path)
    (path/'bin').mkdir(parents=True)
    (path/'bin'/'python').symlink_to(sys.executable)
    if jupyter:
        (path/'bin'/'jupyter-lab').write_text(f'#!/bin/sh\necho "$PATH" > {shlex.quote(str(path))}/path-seen\nexec {jupyter_command()} "$@"\n')
        (path/'bin'/'jupyter-lab').chmod(0o755)
    return path


# Variables that could send boto3 to a real account (a profile, SSO, a role) instead of the moto server.
AWS_VARS_TO_DROP = ('AWS_PROFILE', 'AWS_DEFAULT_PROFILE', 'AWS_REGION', 'AWS_SESSION_TOKEN', 'AWS_SECURITY_TOKEN',
                    'AWS_ROLE_ARN', 'AWS_WEB_IDENTITY_TOKEN_FILE', 'AWS_CONTAINER_CREDENTIALS_FULL_URI',
                    'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI')
MY_IP = '203.0.113.7'   # a documentation address (RFC 5737) in place of the caller's public IP from checkip.amazonaws.com


def local_aws(workdir: Path, exe=None) -> MotoServer:
    "A moto server in `workdir` (made), with boto3 in this process pointed at it and the variables that could reach a real account removed."
    for k in AWS_VARS_TO_DROP: os.environ.pop(k, None)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    moto = MotoServer(workdir, exe=exe).start()
    os.environ.update(moto.env)
    return moto


class Rehearsal:
    """The local stand-ins that the AWS chapters' stored outputs come from. A hidden cell starts one only when the
    test runner runs the chapter (`IN_TEST=1`: `nbdev_test`, `tools/run_nb.py`); a reader's Run All never does.

    - AWS: a real moto server; boto3 is pointed at it with `AWS_ENDPOINT_URL`, fake credentials and us-east-1, and
      the variables that could reach a real account are removed;
    - `~`: `HOME` is a temporary folder, so `~/.ssh` (keys, known hosts) is there, not in the build machine's home;
      it is also the working folder, so files a chapter makes have short relative names;
    - `instances` Trn1 instances launched in moto as the setup chapter launches one (SSH open to `MY_IP`, no wait
      for SSH: moto starts no machine), so `find_instance` has something to find;
    - with `ssh`: a real sshd on 127.0.0.1 stands in for the instance. It accepts the instances' keys (their `.pem`
      files in `~/.ssh`), its sessions get the same temporary `HOME`, and a stand-in environment (`make_venv`) takes
      the place of the DLAMI's. `host`, `port`, `user` and `venv` are what the chapter puts in place of the
      instance's address, 22, ubuntu and /opt/aws_neuronx_venv_pytorch_2_9; `local_port` and `remote_port` are free
      ports in place of 8889 and 8888 (several rehearsals may run on one machine at once).

    `stop()` (also registered to run at exit) stops everything, restores the environment and the working folder,
    and removes the temporary folder."""
    host = '127.0.0.1'
    my_ip = MY_IP

    def __init__(self, instances: int = 0, ssh: bool = False):
        self.n, self.ssh = instances, ssh
        self.moto = self.sshd = self.venv = None
        self.instances, self.stopped = [], False

    def start(self) -> 'Rehearsal':
        self._env, self._cwd = dict(os.environ), os.getcwd()
        self.dir = Path(tempfile.mkdtemp(prefix='rehearsal-'))
        self.home = self.dir/'home'
        self.home.mkdir(mode=0o700)
        atexit.register(self.stop)
        try:
            os.environ['HOME'] = str(self.home)
            os.chdir(self.home)
            (self.dir/'sshd').mkdir()
            self.moto = local_aws(self.dir/'moto')
            if self.n:
                from trn_tutorials.instance.ec2 import launch_instance
                self.instances = [launch_instance('trn1.2xlarge', my_ip=self.my_ip, wait_ssh=False) for _ in range(self.n)]
            if self.ssh:
                self.sshd = Sshd(self.dir/'sshd', home=self.home, authorized=[i.key_path for i in self.instances]).start()
                self.port, self.user = self.sshd.port, self.sshd.user
                self.venv = str(make_venv(self.home/'stand-in-venv'))
                self.local_port, self.remote_port = free_port(), free_port()
        except BaseException:
            self.stop(); raise
        return self

    def stop(self):
        "Stop the servers (and any tunnel or Jupyter the chapter left running), restore the environment, remove the folder. Harmless twice."
        if self.stopped: return
        self.stopped = True
        if (ssh := sys.modules.get('trn_tutorials.instance.ssh')) is not None: ssh.stop_all()
        for srv in (self.sshd, self.moto):
            if srv is not None: srv.stop()
        os.environ.clear(); os.environ.update(self._env)
        os.chdir(self._cwd)
        shutil.rmtree(self.dir, ignore_errors=True)


def rehearse(instances: int = 0, ssh: bool = False) -> Rehearsal:
    "Start a `Rehearsal`: moto and a temporary `~`, `instances` launched instances, and with `ssh` an sshd standing in for the instance."
    return Rehearsal(instances, ssh).start()


def sagemaker_role(name: str = 'SageMakerExecution', service: str = 'sagemaker.amazonaws.com') -> str:
    "The ARN of IAM role `name` (made if missing) whose trust policy lets `service` assume it: a SageMaker execution role."
    import boto3
    trust = {'Version': '2012-10-17', 'Statement': [{'Effect': 'Allow', 'Principal': {'Service': service}, 'Action': 'sts:AssumeRole'}]}
    iam = boto3.client('iam')
    try: return iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))['Role']['Arn']
    except iam.exceptions.EntityAlreadyExistsException: return iam.get_role(RoleName=name)['Role']['Arn']


def _simulate_denied(**kw):
    "IAM's answer to a caller without iam:SimulatePrincipalPolicy (moto lacks the call: it answers 500)."
    from botocore.awsrequest import AWSResponse
    return (AWSResponse('https://iam.amazonaws.com/', 403, {}, None),
            {'Error': {'Code': 'AccessDenied', 'Message': 'not authorized to perform: iam:SimulatePrincipalPolicy'},
             'ResponseMetadata': {'HTTPStatusCode': 403}})


def deny_simulate_principal_policy(on: bool = True):
    """Every boto3 session made from now on in this process gets AccessDenied on iam:SimulatePrincipalPolicy, as a caller
    without that permission does; the SDK then warns and goes on. SAGEMAKER_VALIDATE_ROLE=false skips the call, but
    only sagemaker-core 2.25 and later read it: this reaches every version (botocore's handlers of new sessions)."""
    from botocore import handlers
    entry = ('before-call.iam.SimulatePrincipalPolicy', _simulate_denied)
    if on and entry not in handlers.BUILTIN_HANDLERS: handlers.BUILTIN_HANDLERS.append(entry)
    if not on and entry in handlers.BUILTIN_HANDLERS: handlers.BUILTIN_HANDLERS.remove(entry)


class SageMakerStandIn:
    """What SageMaker would do with a training job, done here: moto accepts `CreateTrainingJob` and marks the job
    Completed at once without running anything. `run(name)` runs the job's container side on this machine:

    - the job's channels (the prepared data, the model, the code and SageMaker's drivers that `ModelTrainer`
      uploaded) are downloaded from moto's S3 into `<root>/opt/ml/input/data/<channel>`, as SageMaker would;
    - SageMaker's own torchrun driver (`sm_drivers/distributed_drivers/torchrun_driver.py`) runs with the variables
      the container gets (`SM_HPS`, `SM_DISTRIBUTED_CONFIG`, `SM_ENTRY_SCRIPT`, `SM_MODEL_DIR`, ...), so torchrun
      starts the entry script with the job's hyperparameters on this CPU (backend auto: cpu). Stood in for:
      the `/opt/ml` paths in the hyperparameters point into `<root>` (no writing to this machine's /opt);
      `requirements.txt` is not installed (this venv has what it lists); the job's environment variables, which
      moto does not return, are set as `training_job.model_trainer` gives them;
    - the checkpoints in the job's checkpoint S3 URI are copied into its local path first and back afterwards (SageMaker
      syncs them while the job runs), so a job started again for the same run resumes from them;
    - its output goes to moto's CloudWatch Logs stream `<job>/algo-1-...` and `<root>/opt/ml/model` to the job's
      `model.tar.gz` in S3, where `wait_job` and `job_results` read them.

    Bypassed boundaries of moto: IAM `SimulatePrincipalPolicy` (SAGEMAKER_VALIDATE_ROLE=false; for sagemaker-core
    before 2.25, which ignores it, `deny_simulate_principal_policy`) and the SDK's default-bucket STS call (the bucket
    is passed)."""
    bucket_name = 'trn-tutorials-rehearsal'

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix='sm-stand-in-'))
        self._old = os.environ.get('SAGEMAKER_VALIDATE_ROLE')
        os.environ['SAGEMAKER_VALIDATE_ROLE'] = 'false'
        deny_simulate_principal_policy()   # sagemaker-core before 2.25 ignores SAGEMAKER_VALIDATE_ROLE
        atexit.register(self.stop)

    def role(self, name: str = 'SageMakerExecution', service: str = 'sagemaker.amazonaws.com') -> str:
        return sagemaker_role(name, service)

    def bucket(self) -> str:
        import boto3
        boto3.client('s3').create_bucket(Bucket=self.bucket_name)
        return self.bucket_name

    def _download(self, s3, uri: str, dest: Path):
        bucket, prefix = uri[len('s3://'):].split('/', 1)
        for page in s3.get_paginator('list_objects_v2').paginate(Bucket=bucket, Prefix=prefix.rstrip('/') + '/'):
            for o in page.get('Contents', []):
                p = dest/o['Key'][len(prefix.rstrip('/')) + 1:]
                p.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, o['Key'], str(p))

    def run(self, name: str, timeout: float = 600) -> int:
        "Run training job `name`'s container side here; put its log and model where SageMaker would. Returns torchrun's exit status."
        import boto3, tarfile
        from trn_tutorials.training.launch import NEURON_ENV
        from trn_tutorials.training.progress import PROGRESS_ENV
        sm, s3, logs = boto3.client('sagemaker'), boto3.client('s3'), boto3.client('logs')
        d = sm.describe_training_job(TrainingJobName=name)
        root = self.dir/name
        data = root/'opt/ml/input/data'
        for ch in d['InputDataConfig']: self._download(s3, ch['DataSource']['S3DataSource']['S3Uri'], data/ch['ChannelName'])
        ck = d.get('CheckpointConfig')   # SageMaker copies the checkpoints in S3 to LocalPath before the script starts
        if ck: self._download(s3, ck['S3Uri'], root/ck['LocalPath'].lstrip('/'))
        local = lambda v: v.replace('/opt/ml/', f'{root}/opt/ml/') if isinstance(v, str) else v
        hps = {k: local(v) for k, v in d['HyperParameters'].items()}
        (root/'opt/ml/model').mkdir(parents=True)
        env = {**os.environ, PROGRESS_ENV: '1', **NEURON_ENV,
               'SM_HPS': json.dumps(hps), 'SM_ENTRY_SCRIPT': str(data/'code/sm_train.py'),
               'SM_DISTRIBUTED_CONFIG': (data/'sm_drivers/distributed.json').read_text(),
               'SM_HOST_COUNT': str(d['ResourceConfig']['InstanceCount']), 'SM_CURRENT_INSTANCE_TYPE': d['ResourceConfig']['InstanceType'],
               'SM_MODEL_DIR': str(root/'opt/ml/model'), 'PET_MASTER_PORT': str(free_port()),
               'PATH': f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", 'TOKENIZERS_PARALLELISM': 'false',
               'OMP_NUM_THREADS': '1', 'HF_HUB_OFFLINE': '1'}   # this machine has no Hub: a Hub model fails at once
        p = subprocess.run([sys.executable, str(data/'sm_drivers/distributed_drivers/torchrun_driver.py')], env=env,
                           cwd=str(data/'code'), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        lines = [l.replace(f'{root}/opt/ml/', '/opt/ml/') for l in p.stdout.splitlines()]
        group, stream = '/aws/sagemaker/TrainingJobs', f'{name}/algo-1-{int(time.time())}'
        try: logs.create_log_group(logGroupName=group)
        except logs.exceptions.ResourceAlreadyExistsException: pass
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
        t0 = int(time.time() * 1000)
        for i in range(0, len(lines), 500):
            logs.put_log_events(logGroupName=group, logStreamName=stream,
                                logEvents=[{'timestamp': t0 + i + j, 'message': l or ' '} for j, l in enumerate(lines[i:i + 500])])
        if ck:   # ... and keeps LocalPath in sync with S3 while the job runs
            bucket, prefix = ck['S3Uri'][len('s3://'):].split('/', 1)
            local_ck = root/ck['LocalPath'].lstrip('/')
            for f in sorted(local_ck.rglob('*')):
                if f.is_file(): s3.upload_file(str(f), bucket, f"{prefix.rstrip('/')}/{f.relative_to(local_ck).as_posix()}")
        if p.returncode == 0:
            tgz = root/'model.tar.gz'
            with tarfile.open(tgz, 'w:gz') as t:
                for f in sorted((root/'opt/ml/model').iterdir()): t.add(f, arcname=f.name)
            bucket, key = d['ModelArtifacts']['S3ModelArtifacts'][len('s3://'):].split('/', 1)
            s3.upload_file(str(tgz), bucket, key)
        self.output = lines
        return p.returncode

    def run_container(self, name: str, python: str, timeout: float = 900) -> int:
        """Run training job `name` as its image starts it, one launcher per host on 127.0.0.1, with `python` (a venv holding
        the image's versions) as the image's Python. For each host `algo-N` of the job's `InstanceCount`:

        - `<root>/<host>/opt/ml` stands in for the host's `/opt/ml`: the job's channels (data, model, code, and the
          `sm_drivers` channel as `ModelTrainer` built and uploaded it) downloaded from moto's S3 into `input/data/<channel>`,
          the checkpoints into the checkpoint folder, and `input/config/` written as SageMaker writes it for that host
          (`resourceconfig.json`: `current_host`, `hosts`, instance type and group, network interface `lo`;
          `inputdataconfig.json`; `hyperparameters.json`);
        - the container runs the job's own `ContainerEntrypoint` + `ContainerArguments` (`bash -c "chmod +x .../sm_train.sh
          && .../sm_train.sh"`): `environment.py`, `source sm_training.env`, `cd` to the code, the SDK's
          `install_requirements.py` (a plain `pip install -r requirements.txt` into `python`'s venv), then SageMaker's
          torchrun driver, which starts `torchrun --nnodes=N --node_rank=R --master_addr=... --master_port=...`.

        Stood in for, and only these: the text `/opt/ml` in the downloaded driver files and the hyperparameters points
        into `<root>/<host>/opt/ml`; `environment.py`'s fixed master `algo-1:7777` becomes `127.0.0.1:<free port>` (no
        name `algo-1` resolves here, and a fixed port could be taken); the hosts start one after the other once the
        first has installed the requirements (they share `python`'s venv, where each real host has its own copy of the
        image: the second `pip install -r` then finds everything installed); the job's environment, which moto does
        not return, is set as `training_job.model_trainer` gives it. Then, as SageMaker does: each host's log goes to
        its CloudWatch stream `<job>/algo-N-...`, the first host's checkpoints to the checkpoint S3 URI and its
        `/opt/ml/model` to `model.tar.gz`. `self.output`: every host's lines, prefixed with the host. Returns the first
        non-zero exit status, else 0."""
        import boto3, tarfile, threading
        from trn_tutorials.training.launch import NEURON_ENV
        from trn_tutorials.training.progress import PROGRESS_ENV
        from trn_tutorials.sagemaker.training_job import compile_cache_url
        sm, s3, logs = boto3.client('sagemaker'), boto3.client('s3'), boto3.client('logs')
        d = sm.describe_training_job(TrainingJobName=name)
        rc_ = d['ResourceConfig']
        hosts = [f'algo-{i + 1}' for i in range(rc_['InstanceCount'])]
        port, bucket = free_port(), d['OutputDataConfig']['S3OutputPath'][len('s3://'):].split('/', 1)[0]
        ck = d.get('CheckpointConfig')
        spec = d['AlgorithmSpecification']
        venv_bin = str(Path(python).parent)
        roots, procs, out = {}, {}, {h: [] for h in hosts}
        for h in hosts:
            ml = self.dir/name/h/'opt/ml'
            roots[h] = ml
            for ch in d['InputDataConfig']: self._download(s3, ch['DataSource']['S3DataSource']['S3Uri'], ml/'input/data'/ch['ChannelName'])
            if ck: self._download(s3, ck['S3Uri'], ml/ck['LocalPath'][len('/opt/ml/'):])
            for sub in ('model', 'output/data', 'input/config', 'code'): (ml/sub).mkdir(parents=True, exist_ok=True)
            local = lambda v: v.replace('/opt/ml', str(ml)) if isinstance(v, str) else v
            group = {'instance_group_name': 'homogeneousCluster', 'instance_type': rc_['InstanceType'], 'hosts': hosts}
            (ml/'input/config/resourceconfig.json').write_text(json.dumps(
                {'current_host': h, 'current_instance_type': rc_['InstanceType'], 'current_group_name': 'homogeneousCluster',
                 'hosts': hosts, 'instance_groups': [group], 'network_interface_name': 'lo'}))
            (ml/'input/config/inputdataconfig.json').write_text(json.dumps(
                {c['ChannelName']: {'TrainingInputMode': 'File', 'S3DistributionType': 'FullyReplicated', 'RecordWrapperType': 'None'}
                 for c in d['InputDataConfig']}))
            (ml/'input/config/hyperparameters.json').write_text(json.dumps({k: local(v) for k, v in d['HyperParameters'].items()}))
            for f in (ml/'input/data/sm_drivers').rglob('*'):
                if f.is_file() and f.suffix in ('.py', '.sh', '.json'):
                    t = f.read_text().replace('/opt/ml', str(ml))
                    if f.name == 'environment.py':
                        t = t.replace('SM_MASTER_ADDR = "algo-1"', 'SM_MASTER_ADDR = "127.0.0.1"').replace('SM_MASTER_PORT = 7777', f'SM_MASTER_PORT = {port}')
                    f.write_text(t)
        env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV', 'PYTHONSAFEPATH')}
        env.update({PROGRESS_ENV: '1', **NEURON_ENV, 'NEURON_COMPILE_CACHE_URL': compile_cache_url(bucket), 'TRAINING_JOB_NAME': name,
                    'PATH': f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}", 'TOKENIZERS_PARALLELISM': 'false',
                    'OMP_NUM_THREADS': '1', 'HF_HUB_OFFLINE': '1', 'PIP_DISABLE_PIP_VERSION_CHECK': '1'})
        started = threading.Event()
        def pump(h, p):
            for line in p.stdout:
                out[h].append(line.rstrip('\n').replace(str(roots[h]), '/opt/ml'))
                if h == hosts[0] and 'Running Torchrun Driver' in line: started.set()
            started.set()
        threads = []
        t0 = time.monotonic()
        for i, h in enumerate(hosts):
            if i: started.wait(timeout)   # the first host has installed the requirements into the shared venv
            args = [a.replace('/opt/ml', str(roots[h])) for a in spec['ContainerEntrypoint'] + spec.get('ContainerArguments', [])]
            procs[h] = subprocess.Popen(args, env=env, cwd=str(roots[h]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        start_new_session=True)
            threads.append(threading.Thread(target=pump, args=(h, procs[h]), daemon=True)); threads[-1].start()
        codes = []
        for h in hosts:
            try: codes.append(procs[h].wait(timeout=max(1, timeout - (time.monotonic() - t0))))
            except subprocess.TimeoutExpired:
                for p in procs.values():
                    try: os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError: pass
                codes.append(-9)
        for t in threads: t.join(timeout=10)
        group_name = '/aws/sagemaker/TrainingJobs'
        try: logs.create_log_group(logGroupName=group_name)
        except logs.exceptions.ResourceAlreadyExistsException: pass
        t_ms = int(time.time() * 1000)
        for h in hosts:
            stream = f'{name}/{h}-{int(time.time())}'
            logs.create_log_stream(logGroupName=group_name, logStreamName=stream)
            lines = out[h]
            for i in range(0, len(lines), 500):
                logs.put_log_events(logGroupName=group_name, logStreamName=stream,
                                    logEvents=[{'timestamp': t_ms + i + j, 'message': l or ' '} for j, l in enumerate(lines[i:i + 500])])
        first = roots[hosts[0]]
        if ck:
            b, prefix = ck['S3Uri'][len('s3://'):].split('/', 1)
            local_ck = first/ck['LocalPath'][len('/opt/ml/'):]
            for f in sorted(local_ck.rglob('*')):
                if f.is_file(): s3.upload_file(str(f), b, f"{prefix.rstrip('/')}/{f.relative_to(local_ck).as_posix()}")
        code = next((c for c in codes if c != 0), 0)
        if code == 0:
            tgz = self.dir/name/'model.tar.gz'
            with tarfile.open(tgz, 'w:gz') as t:
                for f in sorted((first/'model').iterdir()): t.add(f, arcname=f.name)
            b, key = d['ModelArtifacts']['S3ModelArtifacts'][len('s3://'):].split('/', 1)
            s3.upload_file(str(tgz), b, key)
        self.output = [f'{h}: {l}' for h in hosts for l in out[h]]
        self.seconds = time.monotonic() - t0
        return code

    def stop(self):
        if self._old is None: os.environ.pop('SAGEMAKER_VALIDATE_ROLE', None)
        else: os.environ['SAGEMAKER_VALIDATE_ROLE'] = self._old
        deny_simulate_principal_policy(False)
        shutil.rmtree(self.dir, ignore_errors=True)


def freeze(path) -> bool:
    "Make the folder `path` unwritable, even for root (`chattr +i`: permission bits do not stop root), else by its mode; whether it worked."
    p = Path(path)
    if os.geteuid() == 0:
        return shutil.which('chattr') is not None and subprocess.run(['chattr', '+i', str(p)], capture_output=True).returncode == 0
    p.chmod(0o555)
    return True


def unfreeze(path):
    "Undo `freeze` on `path` and every folder under it (so pytest can remove them)."
    p = Path(path)
    if not p.exists(): return
    if os.geteuid() == 0 and shutil.which('chattr'):
        subprocess.run(['chattr', '-R', '-i', str(p)], capture_output=True)
    else:
        for d in [p, *p.rglob('*')]:
            if d.is_dir() and not d.is_symlink(): d.chmod(0o755)
