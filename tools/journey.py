"""Walk the book as a reader on a Trn1 does: the instance chapters in reading order, one kernel per chapter, all in one
reader's folder (`TRN_TUTORIALS_DIR`), so what a chapter leaves the next one uses; the `#| neuron` (and `#| xla`) cells
run too, on the Trn1 stand-in. Run it with the stand-in's Python (`.venv-trn1`, which `STAGES=trn1 bash tools/test.sh`
builds from the Neuron 2.31 DLAMI's versions); tools/test.sh runs it in the trn1 stage.

The stand-in for what a Trn1 has and a CPU machine lacks, made in a temporary folder and put first on PATH/PYTHONPATH:
- `neuron-ls`: as the 2.31 DLAMI's tool, it answers `--json-output`/`-j` only (2.34's `--output-format json` is a usage
  error), with the real tool's JSON for a trn1.2xlarge (tests/fixtures/neuron-ls/, its README says where it comes from),
  so `detect()` finds NeuronCores and the backend is `neuron`, as on the instance: nothing in the cells is edited.
- `torch_neuronx`: the package's metadata (the 2.31 DLAMI's torch-neuronx version), which is what `neuron_stack`
  reads; importing it sets nothing. PJRT_DEVICE=CPU puts torch-xla on the CPU, where torch-neuronx would choose the
  NeuronCores.
- NEURON_RT_VISIBLE_CORES=0: one worker (torch-xla has no collectives between CPU processes), as a reader who keeps
  one NeuronCore for something else would set it.
- `neuron_parallel_compile`: runs the trial command as given (on the CPU it executes instead of extracting graphs;
  nothing fills a Neuron compile cache, and the cache status says so).
What this cannot show: neuronx-cc, the device, collectives between NeuronCores, Trainium's speed.

With `aws` among the table's flags (the endpoint chapters), the `#| aws` cells run as written against `InstanceAws`:
one moto server for the walk (.venv's `moto_server`: the Trn1 stand-in's Python has boto3 only, as a reader's
`pip install "trn-tutorials[trn1]"` does), the reader's SageMaker execution role made in it as an account has one, and
`Endpoints` answering the endpoints' requests with the archive they were created with. After the walk nothing of the
run may be left (the chapters' own delete and cleanup cells), or the walk fails.

Every chapter runs as a reader's Run All (run_nb.py `--reader`: `IN_TEST` unset, so no hidden rehearsal cell starts a
moto of its own; the instance chapters' hidden cells are those rehearsals only).

The laptop journey (`--table laptop`, flag `aws`, run with .venv's Python: the laptop's environment) walks the chapters
a reader runs on the laptop, setup -> SSH -> Jupyter -> cleanup, as a reader's Run All: `IN_TEST` unset, so no hidden
rehearsal cell starts a stand-in of its own, and the `#| aws` cells run as written, against one set of stand-ins for
the whole walk (`Laptop`: one moto server, a temporary HOME, a local address service; `Instances`: an sshd at the
launched instance's own address). After cleanup nothing of the run may be left (`Laptop.left`), or the walk fails.

The chapters and the flags run are the `notebooks` and `flags` of a table in tools/environments.toml (trn1-dlami unless
--table says otherwise). A failing cell fails its chapter, which stops the walk (exit status 1).
Usage: .venv-trn1/bin/python tools/journey.py [--store] [--chapters nbs/data/03_data.ipynb ...] [--folder DIR]
       .venv/bin/python tools/journey.py --table laptop [--store]
  --store   write the outputs of the flagged cells into the notebooks (the rest of each notebook is left as it is), each
            with a line saying it comes from the rehearsal; outputs that hold a machine path, or (laptop) a value that
            differs at every walk, are not stored
  --folder  walk in this reader's folder (kept afterwards) instead of a new one: e.g. later chapters on what an earlier
            walk left there
"""
import http.server, json, os, re, shlex, shutil, signal, socket, subprocess, sys, tempfile, threading, time, tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'tools')); sys.path.insert(1, str(ROOT/'tests'))
import run_nb  # noqa: E402  (its reading of cell flags)

NEURON_LS = ROOT/'tests'/'fixtures'/'neuron-ls'/'trn1.2xlarge.json'   # the real tool's output on a trn1.2xlarge (fixtures README)
NEURONX_VERSION = '2.9.0.2.15.32035'   # torch-neuronx in the Neuron 2.31 DLAMI's PyTorch 2.9 venv (tools/environments.toml)
REHEARSED = ("> The output above comes from CI's rehearsal on the Trn1 stand-in (torch-xla on the CPU for the NeuronCores, "
             "one worker, the offline data and model), not from a Trn1.")

def table(name:str='trn1-dlami') -> dict:
    "The environment's table in tools/environments.toml: `notebooks` (the journey, in reading order) and `flags`."
    return tomllib.loads((ROOT/'tools'/'environments.toml').read_text())[name]

def stand_in(d:Path) -> dict:
    "Make the Trn1 stand-in's programs and package in `d`; return the environment variables that put them in place."
    (d/'bin').mkdir(parents=True); (d/'site'/'torch_neuronx').mkdir(parents=True)
    tools = {'neuron-ls': ("#!/bin/sh\n# the Neuron 2.31 tool: JSON with --json-output/-j only (2.34's --output-format json is new)\n"
                           f"case \"$*\" in\n  --json-output|-j) cat '{NEURON_LS}'; exit 0 ;;\nesac\n"
                           "echo \"neuron-ls: unrecognized arguments: $*\" >&2; exit 2\n"),
             'neuron_parallel_compile': '#!/bin/sh\n# stand-in: runs the trial as given (nothing is extracted or compiled)\nexec "$@"\n'}
    for name, text in tools.items():
        (d/'bin'/name).write_text(text); (d/'bin'/name).chmod(0o755)
    (d/'site'/'torch_neuronx'/'__init__.py').write_text(f'"The Trn1 stand-in\'s torch-neuronx: its metadata only."\n__version__ = {NEURONX_VERSION!r}\n')
    meta = d/'site'/f'torch_neuronx-{NEURONX_VERSION}.dist-info'; meta.mkdir()
    (meta/'METADATA').write_text(f"Metadata-Version: 2.1\nName: torch-neuronx\nVersion: {NEURONX_VERSION}\n")
    return {'PATH': f"{d/'bin'}{os.pathsep}{os.environ['PATH']}",
            'PYTHONPATH': os.pathsep.join(p for p in (str(d/'site'), os.environ.get('PYTHONPATH', '')) if p),
            'PJRT_DEVICE': 'CPU', 'NEURON_RT_VISIBLE_CORES': '0'}

def flagged(fn:Path, flags:set) -> list[str]:
    "Ids of the code cells of `fn` flagged with any of `flags`."
    nb = json.loads(fn.read_text())
    return [c['id'] for c in nb['cells'] if c['cell_type'] == 'code' and flags & run_nb._directives(''.join(c['source'])).keys()]

NETNS_MARK = 'TRN_TUTORIALS_JOURNEY_NETNS'   # the network namespace the laptop walk made for itself (`own_network`)

def _netns() -> str:
    return os.readlink('/proc/self/ns/net')

def in_own_network() -> bool:
    "Whether this process runs in the network namespace `own_network` made (not the machine's)."
    return os.environ.get(NETNS_MARK) == _netns()

def own_network(argv:list[str]) -> int|None:
    """Run this walk again inside a new network namespace (`unshare --net`, its loopback up), where the instance stand-ins'
    public addresses may go on `lo`: nothing is added to this machine's interfaces, nothing leaves the namespace. Returns
    the walk's exit status, or `None` when this process already is in that namespace."""
    if in_own_network(): return None
    import shutil as sh
    if not (sh.which('unshare') and sh.which('ip')):
        print("FAILED the laptop journey needs `unshare` (util-linux) and `ip` (iproute2) for a network namespace of its own: "
              "apt-get install util-linux iproute2", flush=True); return 1
    script = f'ip link set lo up && export {NETNS_MARK}="$(readlink /proc/self/ns/net)" && exec "$@"'
    r = subprocess.run(['unshare', '--net', 'sh', '-c', script, 'journey', sys.executable, *sys.argv[:1], *argv])
    if r.returncode and not os.environ.get(NETNS_MARK):
        print(f"(the laptop journey ran under `unshare --net`: exit {r.returncode}; a FAILED line above says why, "
              "or unshare could not make the namespace: it needs root with CAP_SYS_ADMIN)", flush=True)
    return r.returncode

def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--store', action='store_true', help="store the flagged cells' outputs in the notebooks")
    p.add_argument('--chapters', nargs='*', help='these chapters instead of the journey (in the order given)')
    p.add_argument('--table', default='trn1-dlami', help='the environment (tools/environments.toml) whose notebooks and flags to run')
    p.add_argument('--folder', help="the reader's folder to walk in (kept); default: a new one, removed afterwards")
    p.add_argument('--ci-cap', action='store_true', help="CI's cap: in the flagged cells, the table's `ci_cap` replacements "
                   "(fewer epochs: the same code path, less training); never with --store, so no stored output comes from it")
    a = p.parse_args(argv)
    t = table(a.table)
    if a.ci_cap and a.store: p.error("--ci-cap changes what the flagged cells train: stored outputs come from the chapters as written (drop --ci-cap)")
    cap = [x for pair in t.get('ci_cap', []) for x in ('--replace', *pair)] if a.ci_cap else []
    walk, flags = a.chapters or t['notebooks'], set(t['flags'])
    work = Path(tempfile.mkdtemp(prefix='trn-tutorials-journey-'))
    is_laptop = t.get('kind') == 'laptop'
    if is_laptop and (rc := own_network(sys.argv[1:] if argv is None else list(argv))) is not None:
        shutil.rmtree(work, ignore_errors=True); return rc
    laptop = Laptop(work) if is_laptop else None   # the laptop's chapters: AWS and the instance stood in for
    aws = InstanceAws(work) if 'aws' in flags and not is_laptop else None   # the instance's endpoint chapters: AWS stood in for
    if laptop or aws: signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # a stopped walk still stops its stand-ins
    folder = Path(a.folder).resolve() if a.folder else work/'reader'
    os.environ['TRN_TUTORIALS_DIR'] = str(folder)
    print(f"journey: {' -> '.join(Path(c).stem for c in walk)}, in one reader's folder; "
          f"flagged cells run: {', '.join(sorted(flags))}" + (f"; CI cap: {'; '.join(f'{o!r} -> {n!r}' for o, n in t.get('ci_cap', []))}" if cap else ''))
    failed, t_all = 0, time.time()
    try:
        if laptop:
            try: laptop.start()
            except Exception as e:
                print(f"FAILED the laptop's stand-ins: {e}", flush=True); return 1
        else:
            os.environ.update(stand_in(work/'stand-in'))
            if aws:
                try: aws.start()
                except Exception as e:
                    print(f"FAILED the instance's AWS stand-ins: {e}", flush=True); return 1
        for c in walk:
            fn, t0 = (ROOT/c).resolve(), time.time()
            keep = flagged(fn, flags)
            store = a.store and bool(keep)   # (run_nb's --keep with no id would store every cell's output)
            how = ['--keep', *keep] if store else ['--check']   # one Python per chapter, as Jupyter gives each its own kernel
            # a reader's Run All (--reader): no hidden rehearsal (the walk's stand-ins are up)
            try: rc = subprocess.run([sys.executable, str(ROOT/'tools'/'run_nb.py'), '--reader', '--flags', *sorted(flags), *how, *(cap if not store else []), '--', str(fn)],
                                     timeout=600 if laptop else None).returncode
            except subprocess.TimeoutExpired: rc = 'timeout (600 s)'
            if rc != 0:
                failed += 1
                print(f"FAILED {c} ({time.time() - t0:.0f} s): exit {rc} (the cell's error is above)", flush=True)
                if aws: aws.show_log()
                break   # a reader stops at the first chapter that fails: the next ones need what it leaves
            if store:
                cleared = unstore_paths(fn, keep, VARYING if laptop or aws else None)
                shown = flagged(fn, {'aws'} if laptop else {'neuron'})
                note_rehearsed(fn, [i for i in shown if i not in cleared], REHEARSED_AWS if laptop else REHEARSED)
                if aws: note_rehearsed(fn, [i for i in flagged(fn, {'aws'}) if i not in cleared], REHEARSED_ENDPOINT)
            per_flag = ', '.join(f"{f} {n}" for f in sorted(flags) if (n := len(flagged(fn, {f}))))
            print(f"ok {c}: {len(keep)} flagged cell(s) run{f' ({per_flag})' if per_flag else ''}, {time.time() - t0:.0f} s; the reader's folder holds "
                  f"{json.dumps(_contents(folder))}", flush=True)
        if laptop and not failed:
            if left := laptop.left():
                failed += 1; print(f"FAILED cleanup: the run left {json.dumps(left)}", flush=True)
            else: print(f"journey: after cleanup nothing of the run is left (moto: no tagged instance, volume, security group "
                        f"or key pair; no key file in ~/.ssh; instance stand-ins booted and halted: {len(laptop.instances.booted)})")
        if aws and not failed:
            if left := aws.left():
                failed += 1; print(f"FAILED cleanup: the run left {json.dumps(left)}", flush=True)
            else: print(f"journey: after the endpoint chapters nothing of the run is left (moto: no tagged endpoint, endpoint "
                        f"configuration, model or S3 file); endpoints that answered: {json.dumps(aws.endpoints.served)}")
    finally:
        if laptop: laptop.stop()
        if aws: aws.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"journey: {time.time() - t_all:.0f} s")
    return failed

def unstore_paths(fn:Path, ids:list[str], varying:re.Pattern|None=None) -> list[str]:
    """Clear the outputs of the cells `ids` of `fn` that hold a machine path (a stored output never does), or a match of
    `varying` (what differs at every walk); return their ids."""
    nb, cleared = json.loads(fn.read_text()), []
    marks = re.compile('|'.join(rf'(?<![\w/.-]){re.escape(m)}/' for m in (str(ROOT), tempfile.gettempdir(), str(Path.home()))))
    for c in nb['cells']:
        out = json.dumps(c.get('outputs', []))
        if c.get('id') in ids and (marks.search(out) or (varying and varying.search(out))):
            c['outputs'], c['execution_count'] = [], None; cleared.append(c['id'])
            print(f"  {fn.name} cell {c['id']}: output not stored (it holds machine paths, or what differs at every walk)")
    if cleared: fn.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
    return cleared

def note_rehearsed(fn:Path, ids:list[str], note:str=REHEARSED):
    "Put `note` under each of the cells `ids` of `fn` (once): their stored outputs come from this rehearsal."
    nb = json.loads(fn.read_text()); cells = nb['cells']
    for i in reversed([k for k, c in enumerate(cells) if c.get('id') in ids and c.get('outputs')]):   # no output, no note
        nxt = cells[i + 1] if i + 1 < len(cells) else None
        if nxt and nxt['cell_type'] == 'markdown' and ''.join(nxt['source']).startswith("> The output above comes from CI's rehearsal"): continue
        cells.insert(i + 1, {'cell_type': 'markdown', 'id': f"{cells[i]['id'][:6]}r1", 'metadata': {}, 'source': [note]})
    fn.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
    subprocess.run([str(Path(sys.executable).parent/'nbdev_clean'), '--fname', str(fn)], check=False)

def _contents(p:Path) -> dict:
    from trn_tutorials.reader import reader_contents
    return reader_contents(p) if p.is_dir() else {}



# ---- the laptop journey: the `#| aws` cells against one moto server, SSH through an sshd at the instance's address ----

REHEARSED_AWS = ("> The output above comes from CI's rehearsal against a local moto server (for AWS) and a local sshd (for the "
                 "instance), not from AWS.")
# what differs at every walk, so a stored output never holds it: a run id, an instance id, a Jupyter token
VARYING = re.compile(r'\b\d{8}-\d{6}-[0-9a-z]{4}\b|\bi-[0-9a-f]{17}\b|token=[0-9a-f]{16,}')


class Instances(threading.Thread):
    """The instances the setup chapter launches, stood in for while they run. moto records an instance and gives it a
    public address (54.214.x.y) but starts no machine; this thread watches moto like the EC2 console would, and when an
    instance of this project is `running` (and its key file, which setup writes before launching, is in the walk's
    `~/.ssh`), it "boots" it:

    - its public address is put on the loopback of the walk's own network namespace (`own_network`: the laptop walk
      runs under `unshare --net`, so no address is ever added to this machine's interfaces and no packet to that
      address leaves the namespace), so the chapters reach `<ip>:22` as they would reach the instance, with no edit to
      a cell;
    - a real OpenSSH sshd (tests/local_services.py `Sshd`) listens on `<ip>:22`, accepting the run's key only (and its
      own client key), in a mount namespace of its own (`unshare --mount`) where `/opt` is the instance's: the DLAMI's
      environment `/opt/aws_neuronx_venv_pytorch_2_9` (`make_venv`: this machine's Python and its Jupyter server as
      `jupyter-lab`), and `/etc/passwd` names the DLAMI's user `ubuntu` with its home in the walk's folder. That user has
      uid 0 here (this machine's Python lives under /root, which no other user may read); on a DLAMI it is uid 1000.

    When the instance leaves `running` (cleanup terminates it), its sshd stops, whatever still runs on it is killed (as
    termination does) and the address comes off the loopback. What this cannot show: the security group (moto records
    its /32 rule; nothing here filters packets by it), the boot time, the DLAMI's Neuron tools and its real JupyterLab,
    and a network between laptop and instance (both share this machine's localhost: Jupyter's 8888 and the tunnel's
    8889 must be free here)."""
    def __init__(self, work:Path, home:Path):
        super().__init__(daemon=True)
        self.work, self.home, self.up, self.errors, self.booted = work, home, {}, [], []
        self.done = threading.Event()

    def run(self):
        import boto3
        from trn_tutorials.aws import tag_filters
        ec2 = boto3.client('ec2')
        while not self.done.is_set():
            try:
                for r in ec2.describe_instances(Filters=tag_filters())['Reservations']:
                    for d in r['Instances']:
                        iid, state, ip = d['InstanceId'], d['State']['Name'], d.get('PublicIpAddress')
                        key = self.home/'.ssh'/f"{d.get('KeyName')}.pem"
                        if state == 'running' and ip and iid not in self.up and key.exists(): self.boot(iid, ip, key)
                        elif state != 'running' and iid in self.up: self.halt(iid)
            except Exception as e:   # a stand-in that cannot start fails the walk, in one line
                self.errors.append(f"{type(e).__name__}: {e}"); print(f"FAILED instance stand-in: {self.errors[-1]}", flush=True)
                return
            self.done.wait(0.2)

    def boot(self, iid:str, ip:str, key:Path):
        from local_services import Sshd, make_venv
        from trn_tutorials.instance.dlami import DLAMI
        root = self.work/'instances'/iid
        venv = Path(DLAMI['trn1'].venv)
        (root/'opt'/'aws'/'neuron'/'bin').mkdir(parents=True)
        make_venv(root/'opt'/venv.relative_to('/opt'))
        (root/'home'/'ubuntu').mkdir(parents=True, mode=0o755); (root/'sshd').mkdir()
        users = [l for l in Path('/etc/passwd').read_text().splitlines() if not l.startswith('ubuntu:')]
        (root/'passwd').write_text('\n'.join(users + [f"ubuntu:x:0:0:the DLAMI's user (stand-in):{root/'home'/'ubuntu'}:/bin/bash"]) + '\n')
        if not in_own_network():
            raise RuntimeError(f"refusing to put the instance's address {ip} on this machine's loopback: run the laptop journey "
                               "as `python tools/journey.py --table laptop`, which starts itself in a network namespace of its own")
        r = subprocess.run(['ip', 'addr', 'add', f'{ip}/32', 'dev', 'lo'], capture_output=True, text=True)   # in the walk's unshare --net namespace
        if r.returncode: raise RuntimeError(f"cannot put the instance's address {ip} on the loopback of the walk's unshare --net namespace: "
                                            f"{r.stderr.strip()}")
        self.up[iid] = (ip, None, root)
        wrap = ['unshare', '--mount', '--propagation', 'private', 'sh', '-c',
                f'mount --bind {shlex.quote(str(root/"opt"))} /opt && mount --bind {shlex.quote(str(root/"passwd"))} /etc/passwd && exec "$@"',
                'instance']
        sshd = Sshd(root/'sshd', authorized=[key], host=ip, port=22, wrap=wrap).start()
        self.up[iid] = (ip, sshd, root); self.booted.append(iid)
        print(f"  (instance stand-in: {iid} answers SSH at its address, as a booted instance does)", flush=True)

    def halt(self, iid:str):
        from local_services import procs_mentioning
        ip, sshd, root = self.up.pop(iid)
        if sshd:
            sshd.stop()
            log = sshd.log.read_text(errors='replace') if sshd.log.exists() else ''
            print(f"  (instance stand-in: {iid} halted; its sshd accepted {log.count('Accepted publickey for ubuntu')} logins "
                  f"as ubuntu with the run's key, refused {log.count('Connection closed by authenticating user')})", flush=True)
        for pid, _ in procs_mentioning(str(root)):   # termination ends everything on the instance
            try: os.kill(pid, signal.SIGKILL)
            except ProcessLookupError: pass
        subprocess.run(['ip', 'addr', 'del', f'{ip}/32', 'dev', 'lo'], capture_output=True)

    def stop(self):
        self.done.set(); self.join(10)
        for iid in list(self.up): self.halt(iid)


def _checkip(answer:str):
    "A local HTTP server answering `answer` to any GET, as https://checkip.amazonaws.com answers with the caller's address."
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            b = (answer + '\n').encode(); self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
        def log_message(self, *a): pass
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class Laptop:
    """The laptop chapters' world, one for the whole walk (so what setup launched, the SSH and Jupyter chapters find by
    its tags and cleanup removes):
    - AWS: one real moto server (tests/local_services.py `MotoServer`, with the Neuron DLAMIs), boto3 pointed at it with
      `AWS_ENDPOINT_URL` and fake credentials; the variables that could reach a real account are removed;
    - `~`: a temporary HOME, so the run's key, `~/.ssh/trn-tutorials_known_hosts` and IPython's files are not this machine's;
    - the address service: `TRN_TUTORIALS_CHECKIP_URL` (the setup chapter's documented setting) names a local server
      that answers 203.0.113.7 (a documentation address), as checkip.amazonaws.com answers with the laptop's address;
    - the instance: `Instances`.
    `left()` says what of the run is still there after the walk: tagged instances not terminated, volumes, security
    groups, key pairs (asked of moto), key files in `~/.ssh`, an instance stand-in still up."""
    def __init__(self, work:Path):
        self.work, self.home = work, work/'home'

    def start(self) -> dict:
        from local_services import MY_IP, local_aws
        busy = [p for p in (8888, 8889) if _busy(p)]
        if busy: raise RuntimeError(f"127.0.0.1 port(s) {', '.join(map(str, busy))} in use here: the Jupyter chapter's instance "
                                    "(8888) and tunnel (8889) share this machine's localhost in the laptop journey")
        self.home.mkdir(mode=0o700)
        self.moto = local_aws(self.work/'moto')
        self.checkip = _checkip(MY_IP)
        env = {**self.moto.env, 'HOME': str(self.home), 'TRN_TUTORIALS_CHECKIP_URL': f'http://127.0.0.1:{self.checkip.server_port}/'}
        os.environ.update(env)
        self.instances = Instances(self.work, self.home); self.instances.start()
        return env

    def left(self) -> dict:
        from trn_tutorials.instance.cleanup import leftovers
        out = {k: v for k, v in leftovers(ec2=True, sagemaker=False).items() if v}
        if keys := sorted(p.name for p in (self.home/'.ssh').glob('*.pem')): out['key files'] = keys
        if self.instances.up: out['instance stand-ins still up'] = sorted(self.instances.up)
        if self.instances.errors: out['instance stand-in errors'] = self.instances.errors
        return out

    def stop(self):
        for x in ('instances', 'checkip', 'moto'):
            if (s := getattr(self, x, None)) is not None: s.shutdown() if x == 'checkip' else s.stop()


# ---- the instance's endpoint chapters: the `#| aws` cells against one moto server, the endpoints answered here ----

REHEARSED_ENDPOINT = ("> The output above comes from CI's rehearsal against a local moto server (for AWS); an endpoint's answer comes "
                      "from the deployed archive served on the Trn1 stand-in (the handler, or the Hugging Face image's pipeline), "
                      "not from AWS.")


class Endpoints:
    """What SageMaker's serving containers would answer, answered here. moto creates an endpoint, its configuration and
    its model (with their tags) and marks it InService, but runs no container; its InvokeEndpoint answers whatever it was
    queued (`/moto-api/static/sagemaker/endpoint-results`), whatever the request. This is an HTTP server for the
    SageMaker Runtime API (`AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`, botocore's setting for one service's endpoint: the
    other services stay on moto) that answers `InvokeEndpoint` as the container would:

    - it asks moto for the endpoint (not there, or not InService: the API's ValidationError), its configuration's model,
      that model's image, environment and `ModelDataUrl`, downloads `model.tar.gz` from moto's S3 and unpacks it (as
      SageMaker unpacks it into /opt/ml/model);
    - the PyTorch image (the endpoint chapter): the archive's own `code/inference.py` (`SAGEMAKER_PROGRAM`), imported
      from the unpacked archive, runs the request through `model_fn`, `input_fn`, `predict_fn`, `output_fn` as the
      inference toolkit does; its `RequestError` comes back as the API's ModelError with the handler's status;
    - the Hugging Face image (`HF_TASK` set): transformers' `pipeline(HF_TASK, model, tokenizer)` from the unpacked
      folder, `{"inputs": ..., "parameters": ...}` through it, the answer as JSON, as the toolkit's default handler does.

    Stood in for: the image's versions (here the Trn1 stand-in's torch and transformers; the archive's
    `code/requirements.txt` is not installed), the model server, the instance; a request is not signed-checked."""
    def __init__(self, work:Path):
        self.dir, self.models, self.served = work/'endpoints', {}, {}

    def start(self) -> dict:
        import boto3
        outer = self
        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get('Content-Length') or 0)
                body = self.rfile.read(n)
                m = re.fullmatch(r'/endpoints/([^/]+)/invocations', self.path.split('?')[0])
                try:
                    if not m: raise _ApiError(404, 'UnknownOperationException', f'no such operation: {self.path}')
                    status, ctype, out = outer.invoke(m.group(1), body, self.headers.get('Content-Type'), self.headers.get('Accept'))
                    self._send(status, out, ctype, {'x-Amzn-Invoked-Production-Variant': 'AllTraffic'})
                except _ApiError as e:
                    self._send(e.status, json.dumps({'message': e.message, **e.extra}).encode(), 'application/json',
                               {'x-amzn-ErrorType': e.code})
            def _send(self, status, data, ctype, headers):
                self.send_response(status); self.send_header('Content-Type', ctype); self.send_header('Content-Length', str(len(data)))
                for k, v in headers.items(): self.send_header(k, v)
                self.end_headers(); self.wfile.write(data)
            def log_message(self, *a): pass
        self.sm, self.s3 = boto3.client('sagemaker'), boto3.client('s3')
        self.srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return {'AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME': f'http://127.0.0.1:{self.srv.server_port}'}

    def _model(self, name:str):
        "The endpoint's served model (loaded once per archive): (kind, loaded model, folder)."
        from botocore.exceptions import ClientError
        try: d = self.sm.describe_endpoint(EndpointName=name)
        except ClientError: d = None
        if not d or d['EndpointStatus'] != 'InService':
            raise _ApiError(400, 'ValidationError', f"Endpoint {name} of account 123456789012 not found." if not d else
                            f"Endpoint {name} is {d['EndpointStatus']}, not InService.")
        cfg = self.sm.describe_endpoint_config(EndpointConfigName=d['EndpointConfigName'])
        c = self.sm.describe_model(ModelName=cfg['ProductionVariants'][0]['ModelName'])['PrimaryContainer']
        url, env = c['ModelDataUrl'], c.get('Environment', {})
        if url not in self.models:
            import tarfile
            bucket, key = url[len('s3://'):].split('/', 1)
            where = self.dir/str(len(self.models)); (where/'opt-ml-model').mkdir(parents=True)
            self.s3.download_file(bucket, key, str(where/'model.tar.gz'))
            with tarfile.open(where/'model.tar.gz') as t: t.extractall(where/'opt-ml-model', filter='data')
            folder = where/'opt-ml-model'
            if env.get('HF_TASK'):
                from transformers import pipeline
                self.models[url] = ('hf', pipeline(task=env['HF_TASK'], model=str(folder), tokenizer=str(folder), device=-1), folder)
            else:
                import importlib.util
                spec = importlib.util.spec_from_file_location(f'endpoint_handler_{len(self.models)}', folder/'code'/env.get('SAGEMAKER_PROGRAM', 'inference.py'))
                handler = importlib.util.module_from_spec(spec); spec.loader.exec_module(handler)
                self.models[url] = ('handler', (handler, handler.model_fn(str(folder))), folder)
        return self.models[url]

    def invoke(self, name:str, body:bytes, ctype:str|None, accept:str|None) -> tuple[int, str, bytes]:
        kind, model, _ = self._model(name)
        try:
            if kind == 'hf':
                data = json.loads(body)
                inputs, params = (data.pop('inputs', data), data.pop('parameters', None)) if isinstance(data, dict) else (data, None)
                out, otype = json.dumps(model(inputs, **(params or {}))), 'application/json'
            else:
                handler, loaded = model
                out, otype = handler.output_fn(handler.predict_fn(handler.input_fn(body, ctype), loaded), accept)
        except Exception as e:
            status = getattr(e, 'status', 500)
            raise _ApiError(424, 'ModelError', f"Received client error ({status}) from primary with message \"{e}\".",
                            {'OriginalStatusCode': status, 'OriginalMessage': str(e)}) from None
        self.served[name] = self.served.get(name, 0) + 1
        return 200, otype, out.encode() if isinstance(out, str) else out

    def stop(self):
        if getattr(self, 'srv', None): self.srv.shutdown()


class _ApiError(Exception):
    def __init__(self, status:int, code:str, message:str, extra:dict|None=None):
        super().__init__(message); self.status, self.code, self.message, self.extra = status, code, message, extra or {}


class InstanceAws:
    """AWS for the chapters that run on the instance with the reader's credentials there (the endpoint chapters), one
    for the whole walk:
    - one real moto server (tests/local_services.py `MotoServer`), started with .venv's `moto_server` (the Trn1 stand-in
      holds what a reader installs there, `pip install "trn-tutorials[trn1]"`: boto3, no moto); boto3 pointed at it with
      `AWS_ENDPOINT_URL` and fake credentials; the variables that could reach a real account are removed;
    - the reader's SageMaker execution role, `SageMakerExecution` (trusting sagemaker.amazonaws.com), made in moto
      before the walk, as the reader's account has it: the chapters' `role = ...` line names it;
    - `Endpoints`, answering the endpoints' requests.
    `left()` says what of the project is still there after the walk (tagged endpoints, configurations, models, the
    run's S3 files...: `leftovers`)."""
    def __init__(self, work:Path):
        self.work = work

    def start(self) -> dict:
        from local_services import local_aws, sagemaker_role
        exe = next((p for p in (Path(sys.executable).parent/'moto_server', ROOT/'.venv'/'bin'/'moto_server') if p.exists()), None)
        if exe is None: raise RuntimeError(f"no moto_server next to {sys.executable} nor in {ROOT/'.venv'/'bin'}: run `make setup` (it builds .venv)")
        self.moto = local_aws(self.work/'moto', exe=exe)
        self.role = sagemaker_role('SageMakerExecution')
        self.endpoints = Endpoints(self.work)
        os.environ.update(env := self.endpoints.start())
        print(f"  (AWS stand-in: moto at {self.moto.url}, role SageMakerExecution made in it; SageMaker Runtime at "
              f"{env['AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME']}: the endpoints' archives answered here)", flush=True)
        return {**self.moto.env, **env}

    def left(self) -> dict:
        from trn_tutorials.instance.cleanup import leftovers
        return {k: v for k, v in leftovers(ec2=False).items() if v}

    def show_log(self):
        "moto's last lines (why an AWS call failed)."
        log = self.work/'moto'/'moto.log'
        if log.exists(): print('  moto.log (last lines):', *log.read_text(errors='replace').splitlines()[-10:], sep='\n    ')

    def stop(self):
        for x in ('endpoints', 'moto'):
            if (s := getattr(self, x, None)) is not None: s.stop()


def _busy(port:int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try: s.bind(('127.0.0.1', port)); return False
        except OSError: return True


if __name__ == '__main__': sys.exit(main())
