"""CI's scheduler: run the stages of `tools/test.sh` on a few slots, longest first, each within its budget.

`tools/test.sh` sets up (.venv, the local services, the wheel, the stand-ins' bases in the background), then hands the
stages to this script. The jobs, what each waits for and each one's budget in seconds are in `tools/ci.toml`; the order
comes from the times the last run recorded (`~/.cache/trn-tutorials/ci-times.json` on this machine, else the committed
`tools/ci_times.json`, else the budgets). Each job runs as `bash tools/test.sh --stage NAME` in a process group of its
own, its output in `_ci/logs/NAME.log`, printed whole when it ends.

It fails loudly: a job that fails, or runs past its budget (its ten slowest tests are listed, from its pytest junit
files), fails the run; past `total_budget` every running job is stopped and the run fails. The last lines name each
failed job and its log, then `N passed, N failed`.

Usage (tools/test.sh calls it): python3 tools/ci.py [JOB ...]   (default: every job in tools/ci.toml)
"""
from __future__ import annotations
import json, os, re, signal, subprocess, sys, time, tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT/'tools'/'ci.toml'
COMMITTED = ROOT/'tools'/'ci_times.json'
STAGE_CMD = ['bash', str(ROOT/'tools'/'test.sh'), '--stage']   # + the job's name
CACHED = Path(os.environ.get('XDG_CACHE_HOME', Path.home()/'.cache'))/'trn-tutorials'/'ci-times.json'


def load_config(path:Path=CONFIG) -> dict:
    "The jobs of tools/ci.toml, checked: every `needs` names a job, every `base` is a table of tools/environments.toml."
    c = tomllib.loads(path.read_text())
    jobs, tables = c['jobs'], tomllib.loads((ROOT/'tools'/'environments.toml').read_text())
    for name, j in jobs.items():
        if not isinstance(j.get('budget'), int) or j['budget'] <= 0: raise SystemExit(f"tools/ci.toml: job {name} has no budget (seconds)")
        for n in j.get('needs', []):
            if n not in jobs: raise SystemExit(f"tools/ci.toml: job {name} needs {n!r}, which is not a job: use one of {', '.join(jobs)}")
        if (b := j.get('base')) and b not in tables: raise SystemExit(f"tools/ci.toml: job {name}'s base {b!r} is not a table of tools/environments.toml")
    return c


def last_times() -> dict:
    "Seconds each job took in the last run that recorded it: this machine's record first, then the committed one."
    out = {}
    for f in (COMMITTED, CACHED):
        try: out.update({k: v['seconds'] for k, v in json.loads(f.read_text())['jobs'].items()})
        except (OSError, ValueError, KeyError, TypeError): pass
    return out


def file_times() -> dict:
    "Seconds each test file took in the last run that recorded it (its tests' times, from the pytest jobs' junit files)."
    out = {}
    for f in (COMMITTED, CACHED):
        try: out.update(json.loads(f.read_text())['files'])
        except (OSError, ValueError, KeyError, TypeError): pass
    return out


def shards(cfg:dict, k:int, times:dict) -> list[list[str]]:
    """The .venv test files (tests/test_*.py less `pytest.elsewhere`) in `k` groups of about equal time, longest file first
    (a file the last run did not time counts `pytest.unknown_file_s`)."""
    p = cfg.get('pytest', {})
    skip = {str(ROOT/f) for f in p.get('elsewhere', [])}
    missing = [f for f in p.get('elsewhere', []) if not (ROOT/f).exists()]
    if missing: raise SystemExit(f"tools/ci.toml: pytest.elsewhere names {', '.join(missing)}, which do(es) not exist")
    files = [f for f in sorted(map(str, (ROOT/'tests').glob('test_*.py'))) if f not in skip]
    rel = lambda f: os.path.relpath(f, ROOT)
    groups = [[0.0, []] for _ in range(k)]
    for f in sorted(files, key=lambda f: -times.get(rel(f), p.get('unknown_file_s', 30))):
        g = min(groups, key=lambda g: g[0]); g[0] += times.get(rel(f), p.get('unknown_file_s', 30)); g[1].append(rel(f))
    return [sorted(g[1]) for g in groups]


def junit_file_times(junit_dir:Path) -> dict:
    "Seconds per test file in the pytest jobs' junit files (`pytest-*--*.xml`)."
    out = {}
    for f in junit_dir.glob('pytest-*--*.xml'):
        try: root = ET.parse(f).getroot()
        except (ET.ParseError, OSError): continue
        for c in root.iter('testcase'):
            mod = next((p for p in (c.get('classname') or '').split('.') if p.startswith('test_')), None)   # tests.test_cli[.Class]
            if mod: out[f'tests/{mod}.py'] = round(out.get(f'tests/{mod}.py', 0) + float(c.get('time', 0)), 1)
    return out


def slowest(junit_dir:Path, job:str, n:int=10) -> list[str]:
    "The `n` slowest tests in the job's junit files."
    rows = []
    for f in sorted(junit_dir.glob(f'{job}--*.xml')):
        try: root = ET.parse(f).getroot()
        except (ET.ParseError, OSError): continue
        rows += [(float(c.get('time', 0)), f"{c.get('classname')}::{c.get('name')}") for c in root.iter('testcase')]
    return [f"{t:7.1f} s  {name}" for t, name in sorted(rows, reverse=True)[:n]]


def critical_paths(jobs:dict) -> dict:
    "Each job's expected seconds plus the longest chain of jobs that need it: the order to start them in (longest first)."
    out = {}
    def path(n):
        if n not in out: out[n] = jobs[n].expected + max((path(m) for m, j in jobs.items() if n in j.spec.get('needs', [])), default=0)
        return out[n]
    for n in jobs: path(n)
    return out


class Job:
    def __init__(self, name:str, spec:dict, expected:float, ci_dir:Path, port:int):
        self.name, self.spec, self.expected, self.ci_dir, self.port = name, spec, expected, ci_dir, port
        self.log = ci_dir/'logs'/f'{name}.log'
        self.proc, self.t0, self.seconds, self.state, self.why = None, None, None, 'waiting', ''
        self.passed = self.failed = 0

    def ready(self, done:dict) -> bool:
        if any(n not in done for n in self.spec.get('needs', [])): return False
        b = self.spec.get('base')   # the stand-in's base venv, built in the background by tools/test.sh
        return not b or any((self.ci_dir/'bases'/f'{b}.{s}').exists() for s in ('ready', 'failed')) or not (self.ci_dir/'bases'/'building').exists()

    def start(self):
        env = dict(os.environ, CI_JOB=self.name, PET_MASTER_PORT=str(self.port),   # torchrun's default port: one per job
                   TRN_TUTORIALS_DIR=str(self.ci_dir/'reader'/self.name))
        self.t0, self.state = time.monotonic(), 'running'
        with open(self.log, 'w') as out:
            self.proc = subprocess.Popen([*STAGE_CMD, self.name], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=ROOT, env=env, start_new_session=True)

    def stop(self, why:str):
        try: os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError: pass
        try: self.proc.wait(20)
        except subprocess.TimeoutExpired:
            try: os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError: pass
            self.proc.wait()
        self.why = why

    def finish(self):
        self.seconds = round(time.monotonic() - self.t0)
        try: self.passed, self.failed = map(int, (self.ci_dir/'counts'/self.name).read_text().split())
        except (OSError, ValueError): self.passed, self.failed = 0, 1   # it ended before counting
        rc = self.proc.returncode
        if self.why: self.failed += 1
        elif rc != 0 and not self.failed: self.failed, self.why = 1, f"exit {rc} with no failure counted"
        budget = self.spec['budget']
        if self.seconds > budget and not self.why: self.why, self.failed = f"over its budget: {self.seconds} s > {budget} s", self.failed + 1
        self.state = 'failed' if self.failed or self.why else 'passed'


def expand(cfg:dict, names:list[str]) -> list[str]:
    "The jobs `names` asks for (all when empty; a group, e.g. `trn1`, is its jobs `trn1-*`), and the jobs they need, in tools/ci.toml's order."
    jobs, want = cfg['jobs'], set()
    for n in names or list(cfg['jobs']):
        got = [n] if n in jobs else [j for j in jobs if j.startswith(n + '-')]
        if not got: raise SystemExit(f"unknown job {n!r}: tools/ci.toml has {', '.join(jobs)} (or a group: {', '.join(sorted({j.split('-')[0] for j in jobs if '-' in j}))})")
        want.update(got)
    while (more := {m for n in want for m in jobs[n].get('needs', [])} - want): want |= more
    return [j for j in jobs if j in want]


def main(argv=None, config:Path=CONFIG) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try: cfg = load_config(config)
    except SystemExit as e: print(f"FAILED: {e}"); print("0 passed, 1 failed"); return 1
    if argv[:1] == ['--expand']: print(' '.join(expand(cfg, argv[1:]))); return 0
    if argv[:1] == ['--bases']: print(' '.join(dict.fromkeys(b for n in argv[1:] if (b := cfg['jobs'][n].get('base'))))); return 0
    try: names = expand(cfg, argv)
    except SystemExit as e: print(f"FAILED: {e}"); print("0 passed, 1 failed"); return 1
    ci_dir = Path(os.environ.get('CI_DIR') or ROOT/'_ci')
    for d in ('logs', 'counts', 'junit', 'reader'): (ci_dir/d).mkdir(parents=True, exist_ok=True)
    slots = int(os.environ.get('CI_SLOTS') or cfg.get('slots', 2))
    setup_s = int(os.environ.get('CI_SETUP_S') or 0)   # the set-up's seconds count against the whole run's budget
    total = int(cfg['total_budget']) - setup_s
    times = last_times()
    k = len([n for n in cfg['jobs'] if re.fullmatch(r'pytest-\d+', n)])
    if k: (ci_dir/'pytest-shards.json').write_text(json.dumps(shards(cfg, k, file_times()), indent=1))
    jobs = {n: Job(n, cfg['jobs'][n], times.get(n, cfg['jobs'][n]['budget']), ci_dir, 29500 + 11 * i) for i, n in enumerate(names)}
    priority = critical_paths(jobs)
    print(f"ci: {len(jobs)} jobs on {slots} slots, longest chain first (expected seconds from the last run: "
          f"{'this machine' if CACHED.exists() else 'tools/ci_times.json' if COMMITTED.exists() else 'the budgets'}); "
          f"the jobs stop past {total} s (the run's {cfg['total_budget']} s less the set-up's {setup_s} s)", flush=True)
    t_start, done = time.monotonic(), {}
    stopped = False
    while len(done) < len(jobs):
        running = [j for j in jobs.values() if j.state == 'running']
        if not stopped and time.monotonic() - t_start > total:   # the whole run's budget: stop everything, fail loudly
            stopped = True
            for j in running: j.stop(f"stopped: the run passed its budget of {total} s")
        for j in running:
            if j.proc.poll() is not None:
                j.finish(); done[j.name] = j
                print(f"\n==== {j.name}: {j.state}, {j.seconds} s (budget {j.spec['budget']} s; expected {j.expected:.0f} s) ====", flush=True)
                sys.stdout.write(j.log.read_text(errors='replace')); sys.stdout.flush()
                if j.why: print(f"FAILED: {j.name}: {j.why}")
                if 'over its budget' in j.why:
                    print(f"  its ten slowest tests:\n    " + ('\n    '.join(slowest(ci_dir/'junit', j.name)) or '(no pytest junit file)'))
        running = [j for j in jobs.values() if j.state == 'running']
        waiting = [j for j in jobs.values() if j.state == 'waiting']
        if stopped:
            for j in waiting: j.state, j.why, j.failed, done[j.name] = 'failed', 'not started: the run passed its budget', 1, j
            waiting = []
        blocked = [j for j in waiting if any(done.get(n) and done[n].state != 'passed' for n in j.spec.get('needs', []))]
        for j in blocked:   # what it needs failed: it cannot run, and says so
            j.state, j.why, j.failed, done[j.name] = 'failed', f"not run: {', '.join(j.spec['needs'])} failed", 1, j
            print(f"FAILED: {j.name}: {j.why}", flush=True)
        ready = sorted((j for j in waiting if j not in blocked and j.ready(done)), key=lambda j: -priority[j.name])
        for j in ready[:max(0, slots - len(running))]:
            print(f"ci: start {j.name} (expected {j.expected:.0f} s) at {time.monotonic() - t_start:.0f} s", flush=True)
            j.start()
        time.sleep(0.5)
    wall = round(time.monotonic() - t_start)
    record(jobs, setup_s + wall, full=set(names) >= set(cfg['jobs']), files=junit_file_times(ci_dir/'junit'), budget=int(cfg['total_budget']))
    if (bl := ci_dir/'logs'/'bases.log').exists():
        print("\nthe stand-ins' bases (built in the background):\n  " + '\n  '.join(l for l in bl.read_text(errors='replace').splitlines() if not l.startswith('WARNING: Location')))
    print(f"\nci: set-up {setup_s} s, then the jobs {wall} s on {slots} slots: {setup_s + wall} s (budget {cfg['total_budget']} s)")
    print(f"{'job':24} {'seconds':>7} {'budget':>6} {'passed':>6} {'failed':>6}")
    for j in sorted(jobs.values(), key=lambda j: -(j.seconds or 0)):
        print(f"{j.name:24} {j.seconds if j.seconds is not None else '-':>7} {j.spec['budget']:>6} {j.passed:>6} {j.failed:>6}  {j.why}")
    bad = [j for j in jobs.values() if j.state != 'passed']
    for j in bad: print(f"FAILED job {j.name}: {j.why or 'failures above'}; log: {j.log}")
    passed, failed = sum(j.passed for j in jobs.values()), sum(j.failed for j in jobs.values())
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


def record(jobs:dict, wall:int, full:bool, files:dict, budget:int=0):
    "Keep each finished job's seconds for the next run's order (this machine); a full run also rewrites tools/ci_times.json."
    try: old, old_files = json.loads(CACHED.read_text())['jobs'], json.loads(CACHED.read_text()).get('files', {})
    except (OSError, ValueError, KeyError): old, old_files = {}, {}
    new = {**old, **{j.name: {'seconds': j.seconds, 'budget': j.spec['budget'], 'passed': j.passed, 'failed': j.failed}
                     for j in jobs.values() if j.seconds is not None and not j.why.startswith(('stopped', 'not '))}}
    CACHED.parent.mkdir(parents=True, exist_ok=True)
    CACHED.write_text(json.dumps({'jobs': new, 'files': {**old_files, **files}}, indent=1) + '\n')
    if full:
        commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        COMMITTED.write_text(json.dumps({'commit': commit, 'date': time.strftime('%Y-%m-%d'), 'wall_s': wall, 'budget_s': budget,
                                         'slots': int(os.environ.get('CI_SLOTS') or 2), 'cores': os.cpu_count(),
                                         'jobs': {j.name: {'seconds': j.seconds, 'budget': j.spec['budget'], 'passed': j.passed, 'failed': j.failed}
                                                  for j in sorted(jobs.values(), key=lambda j: -(j.seconds or 0))},
                                         'files': dict(sorted(files.items(), key=lambda kv: -kv[1]))}, indent=1) + '\n')


if __name__ == '__main__': sys.exit(main())
