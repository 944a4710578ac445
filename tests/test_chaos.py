"""Kill -> resume, proven once and thoroughly: a run killed at random moments (one of them while a checkpoint is being
written, one right after an epoch's last checkpoint), with its newest checkpoint torn once between two launches, relaunched
each time with the same command, ends with the same model, bit for bit, as a run that was never interrupted.

Real processes throughout: `trn-tutorials train` on two CPU workers (the point of two: a kill inside a save lands between
the workers' parts of one checkpoint, and the resume restores both workers' random state and place in the data), a tiny
BERT, the bundled sample; SIGKILL as a crash sends it, to the launcher alone (whose torchrun and workers must follow it,
and whose stale lock the relaunch takes over) or to every process of the run. Elsewhere only what differs: `stop` and a
stop signal's one line (tests/test_locks.py, tests/test_torchrun.py), the checkpoint checks in-process
(tests/test_checkpoints.py)."""
import json, os, random, shutil, signal, subprocess, sys, time
from dataclasses import replace
from pathlib import Path

import pytest

from local_services import procs_mentioning
from test_train import linked

from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.core.options import UsageError
from trn_tutorials.core.folders import lock_holder
from trn_tutorials.training.checkpoints import COMPLETE, checkpoints
from trn_tutorials.training.launch import launch

TRN = str(Path(sys.executable).parent/'trn-tutorials')
ENV = dict(os.environ, HF_HUB_OFFLINE='1')
EPOCHS, PER_EPOCH = 4, 12   # 360 rows, 2 workers x 16 a batch: 12 steps an epoch, a checkpoint every 3


def procs_of(folder) -> list[int]:
    "Live processes (not zombies) whose command line names `folder`: the launcher, torchrun and the workers of a run."
    return [pid for pid, _ in procs_mentioning(str(folder))]


def step_of(p:Path) -> int: return int(p.name.split('-')[1])


def send(pids, sig):
    for q in pids:
        try: os.kill(q, sig)
        except ProcessLookupError: pass


# `load_from_disk` opens the prepared folder's dataset_dict.json once a call: an audit hook notes each open, with its process
COUNT_OPENS = """import os, sys
_want, _log = os.environ['COUNT_OPENS_OF'], os.environ['COUNT_OPENS_LOG']
def _hook(event, args):
    if event == 'open' and args and isinstance(args[0], str) and args[0] == _want:
        with open(_log, 'a') as f: f.write(f'{os.getpid()}\\n')
sys.addaudithook(_hook)
"""


class Run:
    "One `trn-tutorials train` of the chaos run into `out`, its output in a log file."
    def __init__(self, data, out, log, env:dict|None=None):
        self.out, self.log = out, log
        self.p = subprocess.Popen([TRN, 'train', '--dataset_path', str(data), '--output_dir', str(out), '--num_train_epochs', str(EPOCHS),
                                   '--learning_rate', '1e-3', '--save_steps', '3', '--logging_steps', '4', '--seed', '7',
                                   '--nproc_per_node', '2'], stdout=open(log, 'w'), stderr=subprocess.STDOUT, env=ENV | (env or {}))
        self.start = max([step_of(c) for c, _ in checkpoints(out)], default=0)   # new checkpoints are beyond every folder there now

    def running(self) -> bool: return self.p.poll() is None

    def wait_workers(self, timeout=120) -> list[int]:
        "The launcher, torchrun and both workers, once they all run."
        t0 = time.time()
        while self.running() and time.time() - t0 < timeout:
            if len(ps := procs_of(self.out)) >= 4: return ps
            time.sleep(0.05)
        pytest.fail(f"the run did not start its workers: {Path(self.log).read_text()[-2000:]}")

    def saving(self) -> Path|None:
        "A checkpoint this run is writing right now (its folder is there, its completion record not yet)."
        try: names = os.listdir(self.out)
        except FileNotFoundError: return None
        for n in names:
            if n.startswith('checkpoint-') and int(n[11:]) > self.start and not os.path.exists(os.path.join(self.out, n, COMPLETE)):
                return self.out/n
        return None

    def kill(self, pids:list[int]|None=None, frozen:list[int]=()):
        "SIGKILL to `pids` (default: the launcher alone); then no process of the run may be left within a few seconds."
        for q in pids or [self.p.pid]:
            try: os.kill(q, signal.SIGKILL)
            except ProcessLookupError: pass
        send(frozen, signal.SIGCONT)   # a stopped process takes the SIGTERM that die_with_parent sends only once it runs again
        self.p.wait()
        t0 = time.time()
        while procs_of(self.out) and time.time() - t0 < 10: time.sleep(0.05)
        assert not procs_of(self.out), f"still running 10 s after the kill: {procs_of(self.out)}"
        assert lock_holder(self.out) is None


def test_killed_at_random_moments_ends_with_the_same_model(prepared, tmp_path):
    tmp, rng = linked(prepared, tmp_path, 'data'), random.Random(15)
    data, whole, cut = tmp/'data', tmp/'whole', tmp/'cut'
    hook = tmp/'hook'; hook.mkdir(); (hook/'sitecustomize.py').write_text(COUNT_OPENS)   # in every process of the first run
    opens = tmp/'opens.log'
    first = Run(data, whole, tmp/'whole.log', env={'PYTHONPATH': os.pathsep.join(filter(None, [str(hook), os.environ.get('PYTHONPATH')])),
                                                   'COUNT_OPENS_OF': str(data/'dataset_dict.json'), 'COUNT_OPENS_LOG': str(opens)})
    assert first.p.wait(timeout=600) == 0, Path(first.log).read_text()[-3000:]   # the uninterrupted run
    pids = opens.read_text().split()   # the prepared folder read once by the launcher's preflight and once by each worker's
    assert len(pids) == 3 == len(set(pids)) and str(first.p.pid) in pids, (first.p.pid, pids)   # (a worker is a process of its own)

    during_save, killed, n, last_pid = 0, [], 0, None
    # what to do to each launch (the last one runs to the end): kill it while it writes a checkpoint, right after it has
    # sealed the one at an epoch's end (the relaunch starts a new epoch), at a random moment (then tear the newest checkpoint);
    # SIGKILL to every process of the run (True), or to the launcher alone (False), each at least once
    plan = [('save', True), ('epoch', False), ('save', True), ('torn', True), ('random', False)]
    while True:
        n += 1
        run = Run(data, cut, tmp/f'cut-{n}.log')
        what, everything = plan.pop(0) if plan else (None, None)
        if what is None: break
        tree = run.wait_workers()
        if last_pid:   # the killed launcher's lock went with it; its record stayed, and this launch took it over
            assert f'taking over from pid {last_pid}' in Path(run.log).read_text(), Path(run.log).read_text()[-2000:]
        last_pid = run.p.pid
        if what == 'save':   # poll every few ms for a new checkpoint folder without its record; freeze the run (SIGSTOP)
            torn = None      # and look again: still no record, so the kill lands inside the save; else let it go on;
                             # and kill every process: the launcher alone would let its frozen workers finish the seal
            while run.running() and torn is None:
                if (c := run.saving()) is None: time.sleep(0.002); continue
                send(tree, signal.SIGSTOP)
                if not (c/COMPLETE).exists(): torn = c
                else: send(tree, signal.SIGCONT)
            run.kill(tree if everything else None, frozen=tree)
            assert torn and torn.is_dir(), Path(run.log).read_text()[-2000:]
            if not (torn/COMPLETE).exists(): during_save += 1   # the kill landed inside the save
        elif what == 'epoch':
            at_end = lambda: [c for c, ok in checkpoints(cut) if ok and step_of(c) > run.start and step_of(c) % PER_EPOCH == 0]
            while run.running() and not at_end(): time.sleep(0.002)
            run.kill(tree if everything else None)
            assert at_end(), Path(run.log).read_text()[-2000:]
        else:   # a random moment after this launch has saved a checkpoint of its own
            while run.running() and not any(ok and step_of(c) > run.start for c, ok in checkpoints(cut)): time.sleep(0.02)
            time.sleep(rng.uniform(0, 0.5))
            run.kill(tree if everything else None)
        if run.p.returncode == 0: break   # it finished before the kill: that was the last launch
        assert not (cut/'metrics.json').exists()
        killed.append((what, everything, [step_of(c) for c, ok in checkpoints(cut) if ok]))
        if what == 'torn':   # a file of the newest sealed checkpoint cut short between two launches, and a checkpoint
            sealed = [c for c, ok in checkpoints(cut) if ok]   # beyond it whose state the kill cut off before it was written
            assert len(sealed) >= 2, sealed
            f = sealed[0]/'optimizer.pt'
            f.write_bytes(f.read_bytes()[:f.stat().st_size // 2])
            beyond = cut/f'checkpoint-{EPOCHS * PER_EPOCH + 100}'
            shutil.copytree(sealed[1], beyond); (beyond/'trainer_state.json').unlink()
            expect_warning = (sealed[0].name, sealed[1].name)

    assert run.p.wait(timeout=600) == 0, Path(run.log).read_text()[-3000:]
    assert during_save >= 1, f"no kill landed inside a checkpoint save: {killed}"
    # the launch after the torn file said so in one warning line and resumed from the checkpoint before it
    log = Path(tmp/f'cut-{plan_index(killed, "torn") + 2}.log').read_text()
    warnings = [l for l in log.splitlines() if 'warning:' in l and 'is incomplete' in l]   # (4 epochs may not beat the majority: that warning too)
    assert len(warnings) == 1 and f'{expect_warning[0]} is incomplete (optimizer.pt: ' in warnings[0] \
        and f'{beyond.name} is incomplete (' in warnings[0] and f'resuming from {expect_warning[1]}' in warnings[0], warnings
    assert not beyond.exists()   # removed before training went on
    m, w = (json.loads((d/'metrics.json').read_text()) for d in (cut, whole))
    assert m['train']['steps'] == w['train']['steps'] == EPOCHS * PER_EPOCH and m['train']['resumed_from']
    from safetensors.torch import load_file
    got, want = (load_file(d/'model.safetensors') for d in (cut, whole))
    assert got.keys() == want.keys()
    diff = {k: float((got[k] - want[k]).abs().max()) for k in want}
    resumed = [l.split('resuming from ')[1].split()[0] for i in range(2, n + 1) for l in Path(tmp/f'cut-{i}.log').read_text().splitlines()
               if 'resuming from ' in l]
    # exact: the same batches, the same random state (a resume at an epoch's end must not skip the evaluation's draw either)
    assert max(diff.values()) == 0, f"largest difference {max(diff.values()):.3g} after resuming from {resumed} (kills: {killed})"
    for split in ('validation', 'test'): assert m[split] == w[split]
    # its checkpoints belong to this run: refused without resuming, and on another worker count, before torchrun starts
    same = TrainArguments(dataset_path=str(data), output_dir=str(cut), num_train_epochs=EPOCHS, learning_rate=1e-3, save_steps=3,
                          logging_steps=4, seed=7)
    with pytest.raises(UsageError, match='pass --resume true'): launch(replace(same, resume=False), nproc_per_node=2, echo=False)
    with pytest.raises(UsageError, match='relaunch with that run'): launch(same, nproc_per_node=1, echo=False)


def plan_index(killed, what) -> int: return [k[0] for k in killed].index(what)
