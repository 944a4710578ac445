"""The harness of the second ring of careless input (issue 23): cases grouped by class, each one run the way a user meets it,
then its suggested fix followed.

A `Case` builds its own folder (the working folder of the command) and returns the argv of `trn-tutorials` (or
`['-m', 'trn_tutorials.training.train', ...]`, as torchrun starts it), or a no-argument callable for the Python API. The harness:
1. runs it offline and checks: the exit status (2, or 130 for Ctrl-C), one stderr line (the last, for a run that was
   interrupted), no traceback, the case's words; for a refusal, that no file changed (byte for byte);
2. follows the suggested fix, as a user copies it: the first backticked `trn-tutorials ...` command in the message, else the
   concrete `--option value` pairs after use/pass/add (applied to the original argv), else `pass another --X` (a new folder);
   or, where the fix is an action (save the file as UTF-8), the case's `fix(d)`. Then the command must succeed (status 0)
   and every file the user had (outside the package's recorded folders) must still be there, byte for byte.

Where it runs (issue 55: each thing proven once, in the cheapest place): in this process, through the command's own entry
(`trn_tutorials.cli.run`, or `trn_tutorials.training.train.main` for `-m trn_tutorials.training.train`: `run_here`), are the refusals, the
runs that must work (status 0) and every followed fix; a real process of its own (`run`) only where the case is about
processes: a signal (Ctrl-C, SIGTERM, SIGHUP), a `stop` from another terminal (`Case.here=False`). `trn-tutorials train`
in this process still starts torchrun and its worker: the launcher-worker boundary stays real; the boundary of each
command's own process is proven once, in tests/test_cli.py. A fix that starts a fresh training (a new --output_dir or
--dataset_path) runs the smallest training that proves the printed command works (`MIN`: one step, no evaluation during it);
kill -> resume bit-exactness is proven once, in tests/test_chaos.py.

Each test file: `CASES = [...]`, then `test_careless = make_test(CASES)`. The cases of one file run concurrently, once.
"""
from __future__ import annotations
import atexit, hashlib, os, re, shlex, shutil, signal, subprocess, sys, tempfile, threading, time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from trn_tutorials.core.folders import RECORD
from trn_tutorials.core.options import UsageError
from trn_tutorials.models import tiny_bert

CLASSES = ('owned folders', 'safe fixes', 'resume', 'looks valid', 'no traceback', 'files as people have them')
TRN = str(Path(sys.executable).parent/'trn-tutorials')   # the console script of the Python running the tests
ENV = dict(os.environ, HF_HUB_OFFLINE='1', HF_DATASETS_OFFLINE='1', TOKENIZERS_PARALLELISM='false', PYTHONUNBUFFERED='1')
FAST = ['--num_train_epochs', '1', '--per_device_train_batch_size', '8', '--per_device_eval_batch_size', '16', '--logging_steps', '2',
        '--save_steps', '3', '--backend', 'cpu']   # a training run of the tiny fixtures: seconds
MIN = [*FAST, '--max_steps', '1', '--eval_strategy', 'no']   # the smallest training that proves a command trains: one step, scored once at the end


@dataclass
class Case:
    cls: str            # one of `CLASSES`
    id: str
    setup: Callable     # (case folder) -> argv list, or a no-argument callable (the Python API: it must raise `UsageError`)
    words: list[str]    # all in the message
    follow: bool|Callable = True   # True: follow the message's suggestion; False: none to follow; a callable (d): do the fix, re-run argv
    status: int = 2     # 130: the case interrupts the run (Ctrl-C); 0: the input must now work (`words` in its output, `check` passes)
    interrupt: str|None = None   # send SIGINT (as Ctrl-C does) when the output matches this regex
    interrupt_with: int = signal.SIGINT   # the signal `interrupt` sends: SIGINT to the process group (Ctrl-C); another to the launcher alone (`kill`)
    timeout: float = 240
    env: dict = field(default_factory=dict)   # more environment, e.g. {'HOME': '{d}/home'} (`{d}`: the case folder)
    check: Callable|None = None   # (d, completed process) -> None, asserting what a run that works must have done
    here: bool|None = None   # run in this process (`run_here`); default: unless it is interrupted or ends with another status than 0 or 2
    same_fix_as: str|None = None   # the id of a case of the same file whose message prints the same fix (its folder aside), followed
                                   # there: here the fix must be that command, and is not run a second time

    def __post_init__(self):
        assert self.cls in CLASSES, self.cls
        if self.here is None: self.here = not self.interrupt and self.status in (0, 2)
        assert not (self.here and self.interrupt), 'a signal goes to a process of its own'


# ------------------------------------------------------------------------------------------------------------ fixtures
WORDS = ('i feel so happy today what a lovely sunny day so sad and lonely tonight i miss you '
         'i am angry about this unfair mess the news made me furious').split()

def tiny_csv(d:Path, name:str='tweets.csv', n:int=48, labels=('joy', 'sadness', 'anger')) -> str:
    "A small csv (`text,label`) of `n` rows over `labels`, in `d/name`; returns its path."
    texts = {'joy': 'i feel so happy today', 'sadness': 'so sad and lonely tonight', 'anger': 'the news made me furious'}
    rows = [f"{texts.get(l, 'what a lovely sunny day')} {WORDS[i % len(WORDS)]},{l}" for i in range(n) for l in [labels[i % len(labels)]]]
    p = Path(d)/name; p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text('text,label\n' + '\n'.join(rows) + '\n')
    return str(p)

def tiny_model(d:Path, name:str='tiny-model') -> str:
    "A tiny random BERT whose vocabulary covers `tiny_csv`'s words, in `d/name`."
    return tiny_bert(Path(d)/name, WORDS)

SHARED: dict = {}   # the session's fixtures a file's cases asked for (`make_test(fixtures=...)`), e.g. conftest's `prepared`

def shared_data(d:Path, name:str='data') -> str:
    """`d/name`, a link to conftest's session-wide `prepared` sample (`prepared/data`, prepared for `prepared/tiny-bert`): for a
    case that only reads some prepared data (a run's lock lands beside the link, in `d`); a case that changes the data, or
    whose message names it, makes its own (`tiny_prepared`)."""
    p = Path(d)/name; p.parent.mkdir(parents=True, exist_ok=True)
    p.symlink_to(Path(SHARED['prepared'])/'data')
    return str(p)

def tiny_prepared(d:Path, data:str|None=None, model:str|None=None, dataset_path:str='data', **kw) -> str:
    "`data` (default: a `tiny_csv`) prepared with `model` (default: a `tiny_model`) into `d/dataset_path`; returns its path."
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from contextlib import redirect_stdout
    import io
    data, model = data or tiny_csv(d), model or tiny_model(d)
    with redirect_stdout(io.StringIO()): prepare(DataArguments(data=data, model_id=model, dataset_path=str(Path(d)/dataset_path), **kw))
    return str(Path(d)/dataset_path)


# ---------------------------------------------------------------------------------------------------- files and state
def files(d:Path) -> dict[str, str]:
    "Every file under `d` -> its sha256 (lock files, caches and the package's temp folders aside)."
    out = {}
    for p in Path(d).rglob('*'):
        rel = p.relative_to(d)
        if p.is_file() and not p.is_symlink() and '__pycache__' not in rel.parts and not p.name.endswith('.lock'):
            out[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out

def recorded(d:Path) -> list[str]:
    "The folders under `d` that carry the package's record (prepared data, model folders)."
    return [str(p.parent.relative_to(d)) for p in Path(d).rglob(RECORD)]

def users(d:Path, snap:dict[str, str]) -> dict[str, str]:
    "The part of `snap` that is the user's: files outside every recorded folder."
    owned = [Path(r) for r in recorded(d)]
    return {k: v for k, v in snap.items() if not any(Path(k).is_relative_to(o) for o in owned)}


# --------------------------------------------------------------------------------------------------------- the fix
_CMD = re.compile(r"`((?:trn-tutorials|python -m trn_tutorials\.training\.train|torchrun)\s[^`]+)`")
_STOP = {'or', 'to', 'and', 'if', 'for', 'so', 'instead', 'outside', 'of', 'with', 'the', 'a', 'an', 'that', 'which', 'then',
         'again', 'first', 'less', 'more', 'e.g.', 'is', 'as', 'on', 'in', 'at', 'from', 'by', 'when', 'where', 'after', 'before'}
_VERB = re.compile(r"(?:\b(?:use|pass|add|with|rerun with|relaunch with)|\be\.g\.)\s+(--\w)")
_ANOTHER = re.compile(r"\bpass (?:another|a new) --(\w+)")

def suggested_options(msg:str) -> list[str]|None:
    "The first concrete `--option value...` group after use/pass/add/e.g. in `msg`, e.g. ['--resume', 'true']; alternatives after it are not taken."
    m = _VERB.search(msg)
    if not m: return None
    group = []
    for raw in msg[m.start(1):].split():
        t = raw if re.fullmatch(r'[-+]?\d*\.?\d+(e[-+]?\d+)?', raw) else raw.rstrip(',;:)`.')
        if not t.startswith('--') and (not group or t.lower() in _STOP or t.startswith(('(', '`', '"'))): break
        group.append(t)
        if raw != t and raw[len(t):][:1] in ',;:)`.': break   # the clause ends here
    opts = [i for i, t in enumerate(group) if t.startswith('--')]
    if any(i + 1 >= len(group) or group[i + 1].startswith('--') for i in opts): return None   # `pass --text_column` names no value: nothing to run
    if any(len(t) > 1 and t.isalpha() and t.isupper() for t in group): return None   # `--run_id RUN`: a placeholder
    return group or None

def apply_options(argv:list[str], g:list[str]) -> list[str]:
    "`argv` with each option of the group `g` set to its values (replacing the values it had)."
    argv = list(argv)
    if True:
        opts, i = [], 0
        while i < len(g):   # split a group into (option, values)
            vals = []
            j = i + 1
            while j < len(g) and not g[j].startswith('--'): vals.append(g[j]); j += 1
            opts.append((g[i], vals)); i = j
        for opt, vals in opts:
            if opt in argv:
                k = argv.index(opt); e = k + 1
                while e < len(argv) and not argv[e].startswith('--'): e += 1
                argv[k:e] = [opt, *vals]
            else: argv += [opt, *vals]
    return argv

def follow_argv(msg:str, argv:list[str], d:Path) -> list[str]|None:
    "The argv a user runs after reading `msg` (refusing `argv`), or `None` if it suggests nothing concrete."
    for m in _CMD.finditer(msg):   # a command in backticks with options: `trn-tutorials status` alone only points at information
        cmd = shlex.split(m.group(1))
        if not any(a.startswith('--') for a in cmd): continue
        if cmd[0] == 'trn-tutorials': return cmd[1:]
        if cmd[:3] == ['python', '-m', 'trn_tutorials.training.train']: return ['-m', 'trn_tutorials.training.train', *cmd[3:]]
    if (group := suggested_options(msg)): return apply_options(argv, group)
    if (m := _ANOTHER.search(msg)): return apply_options(argv, [f'--{m[1]}', str(d/f'another-{m[1]}')])
    return None


# --------------------------------------------------------------------------------------------------------- running
def command(argv:list[str]) -> list[str]:
    return [sys.executable, *argv] if argv[:1] == ['-m'] else [TRN, *argv]

def ctrl_c_default():
    """In the child: SIGINT back to its default, as in a terminal. A runner started in the background (`cmd &` in a script)
    ignores SIGINT, its children inherit that, and Python then installs no KeyboardInterrupt handler: Ctrl-C would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# The cases' in-process work (setups, Python API calls, fixes done by hand) runs one at a time: transformers' lazy imports
# are not safe across threads. A case that waits on a subprocess (`run`, e.g. a setup that trains) lets the others go on.
_INPROC = threading.RLock()
_HELD = threading.local()

@contextmanager
def in_process():
    "Hold the lock of the cases' in-process work."
    with _INPROC:
        _HELD.n = getattr(_HELD, 'n', 0) + 1
        try: yield
        finally: _HELD.n -= 1

@contextmanager
def _released():
    "While this thread waits on a subprocess: the lock of in-process work, if it holds it, is free for the other cases."
    n = getattr(_HELD, 'n', 0)
    for _ in range(n): _INPROC.release()
    try: yield
    finally:
        for _ in range(n): _INPROC.acquire()


def run_here(argv:list[str], d:Path, env:dict|None=None) -> subprocess.CompletedProcess:
    """`trn-tutorials argv` through the CLI's entry `trn_tutorials.cli.run` (`['-m', 'trn_tutorials.training.train', ...]`: the
    script's `main`, on one CPU worker as without torchrun) in this process, in `d`, offline: a refusal, a run that must work
    or a fix followed needs no process of its own (the process boundary is proven once a command, in test_cli and
    test_bad_inputs; `trn-tutorials train` still starts torchrun). One at a time (`in_process`): the working folder, the
    environment and stdout/stderr are the process's; the environment is put back as it was (a run sets its backend's)."""
    import contextlib, io
    if argv[:2] == ['-m', 'trn_tutorials.training.train']:
        from trn_tutorials.training.train import main as entry
        rest = argv[2:]
    else:
        from trn_tutorials.cli import run as entry
        rest = argv
    more = {k: ENV[k] for k in ('HF_HUB_OFFLINE', 'HF_DATASETS_OFFLINE', 'TOKENIZERS_PARALLELISM')} | \
        {k: v.replace('{d}', str(d)) for k, v in (env or {}).items()}
    out, err, code = io.StringIO(), io.StringIO(), 0
    with in_process():
        back, saved = os.getcwd(), dict(os.environ)
        try:
            os.chdir(d); os.environ.update(more)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try: entry(list(rest))
                except SystemExit as e: code = e.code if isinstance(e.code, int) else 1
                except BaseException:
                    import traceback; traceback.print_exc(); code = 1
        finally:
            os.chdir(back)
            for k in set(os.environ) - set(saved): os.environ.pop(k, None)
            for k, v in saved.items():
                if os.environ.get(k) != v: os.environ[k] = v
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())

def run(argv:list[str], d:Path, timeout:float=240, interrupt:str|None=None, env:dict|None=None, sig:int=signal.SIGINT) -> subprocess.CompletedProcess:
    "Run `argv` in `d`, offline; with `interrupt`, when the output matches it send `sig`: SIGINT to its process group, another to it alone."
    with _released(): return _run(argv, d, timeout, interrupt, env, sig)

def _run(argv, d, timeout, interrupt, env, sig=signal.SIGINT):
    env = {**ENV, **{k: v.replace('{d}', str(d)) for k, v in (env or {}).items()}}
    p = subprocess.Popen(command(argv), cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=ctrl_c_default)
    out, err, seen = [], [], threading.Event()
    def pump(stream, acc):
        for line in stream:
            acc.append(line)
            if interrupt and not seen.is_set() and re.search(interrupt, line):
                seen.set()
                try:   # Ctrl-C in a terminal: every process of the foreground group; `kill PID`, a SageMaker stop: the launcher alone
                    if sig == signal.SIGINT: os.killpg(p.pid, sig)
                    else: os.kill(p.pid, sig)
                except ProcessLookupError: pass
    ts = [threading.Thread(target=pump, args=a, daemon=True) for a in ((p.stdout, out), (p.stderr, err))]
    for t in ts: t.start()
    try: rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL); rc = p.wait()
        err.append(f'\n[harness] timed out after {timeout} s\n')
    for t in ts: t.join(5)
    if interrupt and not seen.is_set(): err.append(f'\n[harness] the output never matched {interrupt!r}: nothing was interrupted\n')
    return subprocess.CompletedProcess(argv, rc, ''.join(out), ''.join(err))

def _lines(text:str) -> list[str]:
    return [l for l in re.split(r'[\r\n]', text) if l.strip()]

def _check(case:Case, d:Path, argv) -> dict:
    "Run `case` (set up in `d`, `argv` what its setup returned): the problems found, the message, and what following its fix did."
    problems, res = [], {'dir': d}
    before = files(d)
    if callable(argv):   # the Python API
        with in_process():
            try: argv(); problems.append('no UsageError raised'); msg = ''
            except UsageError as e: msg = str(e)
            except Exception as e: problems.append(f'{type(e).__name__} instead of UsageError: {e}'); msg = ''
        if '\n' in msg.strip(): problems.append('a message of several lines')
        res.update(msg=msg, problems=problems + [f'changed: {k}' for k in _changed(before, files(d))])
        return res
    t0 = time.time()
    r = run_here(argv, d, case.env) if case.here else run(argv, d, case.timeout, case.interrupt, case.env, case.interrupt_with)
    res['s'] = time.time() - t0
    if case.status == 0:   # an input that must now work: status 0, no traceback, what `check` asserts
        problems += [f'status {r.returncode}, not 0'] * (r.returncode != 0) + ['a traceback'] * ('Traceback' in r.stderr + r.stdout)
        try:
            if case.check: case.check(d, r)
        except AssertionError as e: problems.append(f'check failed: {e}')
        res.update(msg=r.stdout + r.stderr, problems=problems, stderr=r.stderr[-3000:], stdout=r.stdout[-2000:])
        return res
    errs = _lines(r.stderr)
    msg = errs[-1] if errs else ''
    if r.returncode != case.status: problems.append(f'status {r.returncode}, not {case.status}')
    if 'Traceback' in r.stderr + r.stdout: problems.append('a traceback')
    if case.status == 2 and len(errs) != 1: problems.append(f'{len(errs)} stderr lines, not 1')
    if case.status == 2: problems += [f'changed: {k}' for k in _changed(before, files(d))]
    else: problems += [f"the user's file changed: {k}" for k in _changed(users(d, before), files(d))]
    res.update(msg=msg, problems=problems, stderr=r.stderr[-3000:], stdout=r.stdout[-2000:])
    if case.follow is False or problems: return res
    mine = users(d, files(d))
    if callable(case.follow):
        with in_process(): case.follow(d)
        again = argv; mine = users(d, files(d))
    else: again = follow_argv(re.sub(r'^\S+(?: \S+)?: error: ', '', msg), argv, d)
    if again is None: res['problems'].append(f'no fix to follow in: {msg}'); return res
    if again == argv and not callable(case.follow) and case.status == 2:   # after Ctrl-C or a stop, the same command is the way to continue
        res['problems'].append(f'the suggested fix is the command that failed: {msg}'); return res
    res['fix'] = [a.replace(str(d), '{d}') for a in again]   # the fix as every case's folder has it
    if case.same_fix_as: return res   # followed in that case: `test_careless` compares the two
    r2 = run_here(again, d, case.env)   # the printed fix, as typed: in this process (its runs are no signal's case)
    res['followed'] = ' '.join(shlex.quote(a) for a in again)
    if r2.returncode != 0:
        res['problems'].append(f"the suggested fix `{res['followed']}` failed with status {r2.returncode}: {(_lines(r2.stderr) or [''])[-1]}")
    res['problems'] += [f"the fix lost or changed the user's {k}" for k in _changed(mine, files(d))]
    return res

def _changed(before:dict, after:dict) -> list[str]:
    return sorted(k for k, v in before.items() if after.get(k) != v)


_RESULTS: dict[int, dict] = {}
_LOCK = threading.Lock()

def _run_all(cases:list[Case]) -> dict:
    "Run every case of one file concurrently, once: id -> result."
    key = id(cases)
    with _LOCK:
        if key not in _RESULTS:
            root = Path(tempfile.mkdtemp(prefix='careless-')); atexit.register(shutil.rmtree, root, True)
            dirs = {c.id: root/re.sub(r'\W+', '-', c.id) for c in cases}
            for p in dirs.values(): p.mkdir()
            def one(c):
                try:   # set up in-process one case at a time (`in_process`); a setup's own subprocess (a run to resume) overlaps the others
                    with in_process(): argv = c.setup(dirs[c.id])
                except Exception as e: return {'problems': [f'the case setup failed: {type(e).__name__}: {e}'], 'msg': ''}
                try: return _check(c, dirs[c.id], argv)
                except Exception as e: return {'problems': [f'the case itself failed: {type(e).__name__}: {e}'], 'msg': ''}
            # the cases whose run is a process of their own first: they go on while the in-process work goes one at a time
            order = sorted(cases, key=lambda c: bool(c.here))
            with ThreadPoolExecutor(max_workers=max(3, min(4, (os.cpu_count() or 1) + 2))) as ex:
                _RESULTS[key] = dict(zip([c.id for c in order], ex.map(one, order)))
        return _RESULTS[key]

def make_test(cases:list[Case], fixtures:tuple=()):
    """A parametrized test over `cases` (ids `class: id`); the cases run concurrently the first time one is asked for, with
    the session `fixtures` named (e.g. 'prepared', for `shared_data`) in `SHARED`."""
    ids = [f'{c.cls}: {c.id}' for c in cases]
    assert len(set(ids)) == len(ids), 'case ids repeat'
    @pytest.mark.parametrize('case', cases, ids=ids)
    def test_careless(case, request):
        for f in fixtures: SHARED[f] = request.getfixturevalue(f)
        results = _run_all(cases); res = results[case.id]
        if case.same_fix_as and (res.get('fix') is None or res.get('fix') != results[case.same_fix_as].get('fix')):   # none found: a problem
            res['problems'].append(f"the fix {res.get('fix')} is not the one followed in {case.same_fix_as!r}: {results[case.same_fix_as].get('fix')}")
        for w in case.words:
            if w not in res['msg']: res['problems'].append(f'{w!r} not in the message')
        assert not res['problems'], '; '.join(res['problems']) + f"\n--- message: {res['msg']}" + \
            (f"\n--- followed: {res['followed']}" if res.get('followed') else '') + \
            f"\n--- stderr:\n{res.get('stderr', '')}\n--- stdout:\n{res.get('stdout', '')}"
    return test_careless
