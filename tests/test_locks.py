"""One run per folder (`trn_tutorials.core.folders`' locks), with real processes: a busy folder is refused, `stop` ends a run,
a run interrupted in Python says what it kept, a prep and a run never share a folder. One CPU worker: workers are not the
point here. The refusals, and the commands that only lead up to or follow the one that matters, run in-process through the
CLI's entry (careless' `run_here`); the run holding the folder, the `stop` that ends one and a Python kernel are real
processes (each command's own process: tests/test_cli.py). (A killed launcher takes torchrun and its workers with it, and the relaunch takes over its stale lock and
resumes bit-exactly: tests/test_chaos.py.)"""
import json, os, signal, subprocess, sys, time
from pathlib import Path

import pytest

from careless import run_here
from local_services import procs_mentioning
from test_train import linked

from trn_tutorials.core.folders import lock_holder, lock_path
from trn_tutorials.data.sources import sample_data
from trn_tutorials.training.checkpoints import checkpoints

TRN = str(Path(sys.executable).parent/'trn-tutorials')
ENV = dict(os.environ, HF_HUB_OFFLINE='1')
EPOCHS, PER_EPOCH = 4, 23   # a run that a stop lands in the middle of: checkpoint-4 of 92 steps (one worker, 16 rows a batch)


@pytest.fixture
def work(prepared, tmp_path):
    "A scratch folder with links `data` and `tiny-bert` to the shared ones (a run's lock file lands beside its data: here)."
    return linked(prepared, tmp_path)


def train(data, out, *more, epochs=str(EPOCHS)):
    "A `trn-tutorials train` on one CPU worker, started in the background (23 steps an epoch, a checkpoint every 4)."
    return subprocess.Popen([TRN, 'train', '--dataset_path', str(data), '--output_dir', str(out), '--num_train_epochs', epochs,
                             '--learning_rate', '1e-3', '--save_steps', '4', '--nproc_per_node', '1', *more],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def run(*args, timeout=300):
    "`trn-tutorials ARGS` in a process of its own."
    return subprocess.run([TRN, *map(str, args)], capture_output=True, text=True, env=ENV, timeout=timeout)


def here(*args, cwd):
    "`trn-tutorials ARGS` in this process, through the CLI's entry, in `cwd` (careless' `run_here`)."
    return run_here(list(map(str, args)), cwd)


def procs_of(folder) -> list[int]:
    "Live processes (not zombies) whose command line names `folder`: the launcher, torchrun and the workers of a run."
    return [pid for pid, _ in procs_mentioning(str(folder))]


def wait_for(cond, p, what, timeout=120):
    "Wait until `cond()` while `p` runs; fail with its output if it ends first."
    t0 = time.time()
    while not cond():
        if p.poll() is not None: pytest.fail(f"the run ended before {what}: {p.stdout.read()[-1500:]} {p.stderr.read()[-1500:]}")
        if time.time() - t0 > timeout: pytest.fail(f"no {what} after {timeout} s")
        time.sleep(0.05)


def has_checkpoint(out): return lambda: any(ok for _, ok in checkpoints(out))
def torchrun_started(out): return lambda: bool((lock_holder(out) or {}).get('root'))


def test_second_run_into_a_busy_folder_is_refused(work):
    data, out = work/'data', work/'busy'
    first = train(data, out, epochs='1')
    wait_for(torchrun_started(out), first, 'torchrun started')
    r = here('train', '--dataset_path', data, '--output_dir', out, '--num_train_epochs', '1', '--nproc_per_node', '1', cwd=work)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and 'Traceback' not in r.stderr, r.stderr
    assert f'pid {first.pid}' in lines[0] and f'trn-tutorials stop --output_dir {out}' in lines[0], lines[0]
    # the first run was not disturbed
    assert first.wait(timeout=300) == 0, first.stderr.read()[-2000:]
    m = json.loads((out/'metrics.json').read_text())
    assert m['train']['steps'] == PER_EPOCH and m['train']['resumed_from'] is None
    assert lock_holder(out) is None and not lock_path(out).exists()


def test_stop_ends_a_run_and_says_how_to_continue(work):
    "`stop` ends torchrun and its worker; the launcher says in one line how to continue (following it: tests/test_chaos.py)."
    data, out = work/'data', work/'stopped'
    r = here('stop', '--output_dir', out, cwd=work)   # nothing holds it yet: said, and no error
    assert r.returncode == 0 and f'nothing holds {out}' in r.stdout and not r.stderr.strip(), (r.stdout, r.stderr)
    p = train(data, out)
    wait_for(has_checkpoint(out), p, 'a checkpoint')
    root = lock_holder(out)['root']
    assert len(procs_of(out)) >= 3   # the launcher, torchrun, the worker
    r = run('stop', '--output_dir', out)
    assert r.returncode == 0 and f'stopped the run in {out}: ended 2 process(es)' in r.stdout, (r.stdout, r.stderr)
    assert not [q for q in procs_of(out) if q != p.pid]   # torchrun and the workers are gone when stop returns
    assert p.wait(timeout=30) == 1   # the launcher saw torchrun stopped and says so in one line (after its progress bar)
    last = p.stderr.read().strip().splitlines()[-1]
    assert 'stopped by signal 15 (SIGTERM); run the same command again to continue from checkpoint-' in last, last
    assert not procs_of(out) and not Path(f'/proc/{root}').exists()
    assert not (out/'metrics.json').exists() and lock_holder(out) is None


def test_two_preps_into_one_folder(prepared, tmp_path):
    "Two `prep` into one folder at once: one prepares it, the other is refused in one line naming the first."
    rows = [l.rsplit(';', 1) for l in Path(sample_data(), 'train.txt').read_text().splitlines()]
    csv = tmp_path/'big.csv'   # big enough that the first is still tokenizing when the second (in-process: at once) asks
    csv.write_text('text,label\n' + ''.join(f'{t} {i % 97},{l}\n' for i in range(20) for t, l in rows))
    cmd = ['prep', '--data', csv, '--model_id', prepared/'tiny-bert', '--dataset_path', tmp_path/'data']
    first = subprocess.Popen([TRN, *map(str, cmd)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    wait_for(lambda: lock_holder(tmp_path/'data') is not None, first, 'the lock taken')
    second = here(*cmd, cwd=tmp_path)
    assert first.wait(timeout=300) == 0, first.stderr.read()[-2000:]
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 2 and len(lines) == 1, second.stderr
    assert f'pid {first.pid}' in lines[0] and '--dataset_path' in lines[0], lines[0]
    assert sum(json.loads((tmp_path/'data'/'trn_tutorials.json').read_text())['rows'].values()) == 20 * len(rows)   # the first one's work


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_launch_interrupted_in_python_says_what_was_kept(work, sig):
    "launch() in a notebook cell, interrupted (Jupyter sends the kernel SIGINT) or stopped (`kill`): the KeyboardInterrupt names the checkpoint kept."
    data, out = work/'data', work/f'interrupted-{sig}'
    code = ("from trn_tutorials.training.launch import launch\nfrom trn_tutorials.training.arguments import TrainArguments\n"
            f"launch(TrainArguments(dataset_path={str(data)!r}, output_dir={str(out)!r}, num_train_epochs={EPOCHS}, learning_rate=1e-3, "
            "save_steps=4), nproc_per_node=1)")
    p = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # as a kernel has it, even under a runner started with `&`
    wait_for(has_checkpoint(out), p, 'a checkpoint')
    os.kill(p.pid, sig)   # the kernel alone: the workers are in sessions of their own
    _, err = p.communicate(timeout=60)
    last, how = err.strip().splitlines()[-1], 'interrupted' if sig == signal.SIGINT else 'stopped by SIGTERM'
    assert last.startswith(f'KeyboardInterrupt: {how}: launch again with the same arguments to continue from checkpoint-'), last
    t0 = time.time()
    while procs_of(out) and time.time() - t0 < 10: time.sleep(0.1)
    assert not procs_of(out) and lock_holder(out) is None


def test_prep_into_data_a_run_reads_is_refused_and_the_fix_works(prepared, tmp_path):
    "A run holds its data folder for reading: a prep into it is refused in one line naming the run; stopping it, as said, frees it."
    import shutil
    data, out = tmp_path/'data-read', tmp_path/'reading'
    shutil.copytree(prepared/'data', data)   # its own copy: the other tests' data stays as prepared
    before = (data/'trn_tutorials.json').read_text()
    p = train(data, out, epochs='40')
    wait_for(torchrun_started(out), p, 'torchrun started')
    again = ('prep', '--dataset_path', data, '--data', sample_data(), '--model_id', prepared/'tiny-bert', '--buckets', '2')
    r = here(*again, cwd=tmp_path)   # into the folder the run reads, other data
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and 'Traceback' not in r.stderr, r.stderr
    assert f"{data} is being read by pid " in lines[0] and f"stop it (`trn-tutorials stop --output_dir {out}`)" in lines[0], lines
    assert (data/'trn_tutorials.json').read_text() == before   # the run's data, untouched
    fix = lines[0].split('stop it (`')[1].split('`)')[0].split()
    assert here(*fix[1:], cwd=tmp_path).returncode == 0 and p.wait(timeout=60) == 1   # the fix as printed: the run ends
    r = here(*again, cwd=tmp_path)
    assert r.returncode == 0 and (data/'trn_tutorials.json').read_text() != before, r.stderr[-2000:]


def test_a_run_waits_for_no_prep_but_refuses_one_that_writes_its_data(work):
    "While a prep writes the folder, a run into it is refused in one line (it would read data being replaced)."
    from trn_tutorials.core.folders import folder_lock
    data = work/'data'
    with folder_lock(data, 'dataset_path'):   # as `prep` holds it while it writes
        r = here('train', '--dataset_path', data, '--output_dir', work/'too-early', '--max_steps', '2', cwd=work)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and f"{data} is being written by pid {os.getpid()}" in lines[0], r.stderr
