"Checks of the launch chapter's pieces, moved out of the lesson: workers, environment, command, stream, progress (precompile: tests/test_precompile.py)."
import json, os, signal, subprocess, sys, time
from dataclasses import replace
from pathlib import Path

import pytest
from fastcore.test import test_eq as eq, test_fail as fails

from trn_tutorials.backends import Accelerator
from trn_tutorials.core import UsageError, die_with_parent, folder_lock, lock_holder, parse_args
from trn_tutorials.data import load_prepared
from trn_tutorials.launch import LaunchError, Results, free_port, launch, launch_env, stop, torchrun_command, train_argv, workers
from trn_tutorials.torchrun import end_tree, process_tree, stream, worker_error
from trn_tutorials.live_progress import Progress
from trn_tutorials.arguments import TrainArguments
from trn_tutorials.progress import progress_line

CPU = Accelerator('cpu', 1, 'cpu')


def test_workers():
    trn1_2xl = Accelerator('neuron', 2, '2 NeuronCore(s)')
    eq(workers(acc=trn1_2xl), 2)
    fails(lambda: workers(32, trn1_2xl), contains="use --nproc_per_node 2 or fewer")
    fails(lambda: workers(0, trn1_2xl), contains="--nproc_per_node 0")
    eq(workers(acc=CPU), 1)
    fails(lambda: workers(4, Accelerator('neuron', 32, '32 NeuronCore(s)')), contains="1, 2, 8, 32")
    fails(lambda: workers(2, CPU, 'xla'), contains="--nproc_per_node 1")
    eq(1024 < free_port() < 65536, True)


def test_workers_of_the_cpu_on_purpose_count_cpu_cores_on_a_trn1_too():
    "A demo with backend='cpu' on a Trn1 (one NeuronCore visible): one worker by default, up to the CPU cores, not the NeuronCores."
    one_core = Accelerator('neuron', 1, '1 NeuronCore(s)')
    eq(workers(acc=one_core, backend='cpu'), 1)
    eq(workers(2, one_core, 'cpu'), 2)   # refused before: "1 NeuronCore(s) visible"
    fails(lambda: workers(10_000, one_core, 'cpu'), contains=f"use --nproc_per_node {os.cpu_count()} or fewer")
    eq(workers(acc=Accelerator('neuron', 2, '2 NeuronCore(s)'), backend='cpu'), 1)   # was 2: one per NeuronCore


def test_launch_env():
    eq(launch_env('neuron', 2, base={'MALLOC_ARENA_MAX': '8'})['MALLOC_ARENA_MAX'], '8')
    eq('NEURON_CC_FLAGS' in launch_env('cpu', 1, base={}), False)
    eq(launch_env('cpu', 1, base={})['OMP_NUM_THREADS'], str(os.cpu_count()))
    eq(launch_env('neuron', 2, base={'NEURON_CC_FLAGS': '--cache_dir=/data/ncc'})['NEURON_CC_FLAGS'], '--cache_dir=/data/ncc --model-type transformer')
    eq(launch_env('cpu', 1, base={'PATH': '/usr/bin'}, python='/opt/venv/bin/python')['PATH'], '/opt/venv/bin:/usr/bin')


def test_command():
    a = TrainArguments(dataset_path='d', output_dir='o', learning_rate=3e-5, bf16=True, num_train_epochs=2.0, model_id='m')
    got = parse_args([TrainArguments], train_argv(a))[0]
    if hasattr(a, 'logging_dir'): got = replace(got, logging_dir=a.logging_dir)   # 4.57 dates its default to the second it is made
    eq(got, a)
    eq(train_argv(TrainArguments(dataset_path='d', output_dir='o')), ['--dataset_path', 'd', '--output_dir', 'o'])
    cmd = torchrun_command(TrainArguments(), 2, port=29500, python='python')
    eq(cmd[:5], ['python', '-m', 'torch.distributed.run', '--nproc_per_node', '2'])
    eq(cmd[cmd.index('-m', 3):][:2], ['-m', 'trn_tutorials.train'])


def test_process_tree_and_stream():
    sleeper = subprocess.Popen([sys.executable, '-c', 'import subprocess, sys; subprocess.run([sys.executable, "-c", "import time; time.sleep(60)"])'])
    time.sleep(1)
    tree = process_tree(sleeper.pid)
    eq((len(tree), tree[0]), (2, sleeper.pid))
    for p in reversed(tree): os.kill(p, signal.SIGKILL)
    sleeper.wait()
    eq(stream([sys.executable, '-c', 'import sys; print("x"); sys.exit(3)'], echo=False), (3, ['x']))
    seen = []
    eq(stream([sys.executable, '-c', 'print("a"); print("b")'], echo=False, on_line=seen.append), (0, ['a', 'b']))
    eq(seen, ['a', 'b'])


def run_lines(p: Progress):
    for line in [progress_line('begin', step=0, max_steps=4, num_train_epochs=2), 'some worker log line',
                 progress_line('step', step=2, epoch=1.0), progress_line('log', step=2, loss=1.7),
                 progress_line('eval', step=2, epoch=1.0, loss=1.6, f1=0.25, accuracy=0.5),
                 progress_line('note', text='resuming from checkpoint-2'),
                 progress_line('step', step=4, epoch=2.0), progress_line('eval', step=4, epoch=2.0, loss=1.4, f1=0.5, accuracy=0.75),
                 progress_line('end', step=4)]:
        yield line, p(line)


def test_progress_in_a_terminal(capsys):
    p = Progress(notebook=False)
    taken = [t for _, t in run_lines(p)]
    p.close()
    eq(taken, [True, False, True, True, True, True, True, True, True])   # the worker's own line is left to `stream`
    out, err = capsys.readouterr()
    assert 'Epoch 1  Training Loss 1.7000  Validation Loss 1.6000  F1 0.2500  Accuracy 0.5000' in out + err
    assert 'resuming from checkpoint-2' in out + err and '4/4' in err


def test_progress_in_a_notebook(monkeypatch):
    shown = []
    import IPython.display as disp
    class Handle:
        def update(self, obj): shown.append(obj.data)
    monkeypatch.setattr(disp, 'display', lambda obj, display_id=None: (shown.append(obj.data), Handle())[1])
    p = Progress(notebook=True)
    for _ in run_lines(p): pass
    html = shown[-1]
    assert '<progress' in html and '4/4' in html
    for cell in ('Training Loss', 'Validation Loss', '0.2500', '0.7500', '1.4000'): assert cell in html


def test_results_display():
    m = {'final_split': 'test', 'test': {'f1': 0.83712, 'accuracy': 0.8412}, 'train': {'samples_per_second': 123.456, 'runtime_s': 12.345},
         'world_size': 2, 'backend': 'cpu', 'args': {'output_dir': 'model'}, 'beats_baseline': True}
    r = Results.from_metrics(m, 61.234, 'trn1.2xlarge')
    md = r._repr_markdown_()
    for s in ('| F1 (test) | 0.837 |', '| wall time | 61.2 s |', '| workers | 2 (cpu) |', '| cost | $0.02'): assert s in md, md
    assert '0.83712' not in repr(r) and 'output_dir: model' in repr(r)
    assert 'warning' in Results.from_metrics({**m, 'beats_baseline': False}, 1.0)._repr_markdown_()


def no_weights(tmp) -> str:
    "A copy of the tiny BERT without its weights file: its tokenizer and config load, the model does not."
    import shutil
    if not (tmp/'no-weights').exists():
        shutil.copytree(tmp/'tiny-bert', tmp/'no-weights'); (tmp/'no-weights'/'model.safetensors').unlink()
    return str(tmp/'no-weights')


def test_launch_refuses_bad_input(prepared):
    tmp = prepared
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'model'))
    fails(lambda: launch(TrainArguments(dataset_path=str(tmp/'missing'))), contains="prep")
    fails(lambda: launch(args, nproc_per_node=64), contains="--nproc_per_node")
    fails(lambda: launch(TrainArguments(dataset_path=str(tmp/'data'), learning_rate=-1)), contains="--learning_rate")
    fails(lambda: launch(args, instance_type='p5.48xlarge'), contains="unknown instance type")
    fails(lambda: launch(args, nproc_per_node=0), contains="--nproc_per_node 0 is out of range")
    fails(lambda: launch(args, nproc_per_node=1.5), contains="not a whole number")
    # a model that is gone is refused before torchrun starts; one whose weights are gone fails in the workers: the cause, in one line
    fails(lambda: launch(replace(args, model_id=str(tmp/'deleted-model'))), contains="no such model folder")
    no_weights(tmp)
    bad = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'bad'), model_id=str(tmp/'no-weights'), max_steps=1)
    with pytest.raises(LaunchError) as e: launch(bad, nproc_per_node=1, echo=False)
    assert 'a worker failed with OSError' in str(e.value) and e.value.log.endswith('train.log'), e.value
    assert lock_holder(bad.output_dir) is None


def test_worker_error():
    eq(worker_error(['Traceback (most recent call last):', '  File "x.py", line 1', "OSError: no such model 'm'",
                     'torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ', 'trn_tutorials.train FAILED']),
       "OSError: no such model 'm'")
    eq(worker_error(['KeyboardInterrupt']), 'KeyboardInterrupt')
    eq(worker_error(['all fine', 'Error rate: 3%']), None)
    eq(str(LaunchError(1, ['a', 'b'])), 'torchrun exited with status 1: last lines:\na\nb')
    eq(str(LaunchError(1, ['torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15'])),
       'torchrun exited with status 1: stopped by signal 15 (SIGTERM); launch again with the same arguments to continue from its newest checkpoint, if it wrote one')


# a process that starts two children in sessions of their own, as torchrun starts its workers; the second ignores SIGTERM
TREE = """import signal, subprocess, sys, time
kids = [subprocess.Popen([sys.executable, '-c', c + '; print(1, flush=True); time.sleep(60)'], start_new_session=True, stdout=subprocess.PIPE)
        for c in ('import time', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN)')]
for k in kids: k.stdout.readline()   # both ready
print(' '.join(str(k.pid) for k in kids), flush=True)
time.sleep(60)
"""

def alive(pid): return Path(f'/proc/{pid}').exists() and Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z'


def test_end_tree_reaches_other_sessions_and_kills_what_ignores_sigterm():
    p = subprocess.Popen([sys.executable, '-c', TREE], stdout=subprocess.PIPE, text=True)
    kids = [int(k) for k in p.stdout.readline().split()]
    t0 = time.time()
    ended = end_tree(p.pid, timeout=1)
    eq(sorted(ended), sorted([p.pid, *kids]))
    p.wait()
    eq([q for q in ended if alive(q)], [])
    assert 1 <= time.time() - t0 < 10   # SIGKILL for the one that ignored SIGTERM, after the timeout


def test_stream_ends_with_a_killed_launcher(tmp_path):
    "`die_with_parent` as `preexec_fn`: kill -9 of the process running `stream` takes its command down (a dead kernel, a closed terminal)."
    pidfile = tmp_path/'pid'
    launcher = subprocess.Popen([sys.executable, '-c', f"""
import sys
from trn_tutorials.core import die_with_parent
from trn_tutorials.torchrun import stream
stream([sys.executable, '-c', 'import time; time.sleep(60)'], preexec_fn=die_with_parent,
       on_start=lambda p: open({str(pidfile)!r}, 'w').write(str(p.pid)))
"""])
    while not pidfile.exists() or not pidfile.read_text(): time.sleep(0.05)
    child = int(pidfile.read_text())
    assert alive(child)
    os.kill(launcher.pid, signal.SIGKILL); launcher.wait()
    t0 = time.time()
    while alive(child) and time.time() - t0 < 5: time.sleep(0.05)
    assert not alive(child)


HOLD = """import sys, time
from trn_tutorials.core import folder_lock
if sys.argv[2] == 'kernel':   # what a Jupyter kernel looks like to the lock
    from IPython.core.interactiveshell import InteractiveShell; InteractiveShell.instance()
import subprocess
kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)
with folder_lock(sys.argv[1], 'dataset_path'):
    print(kid.pid, flush=True); time.sleep(60)
"""

def test_stop(tmp_path, capsys):
    folder = tmp_path/'data'
    eq(stop(folder), [])
    eq(capsys.readouterr().out, f'nothing holds {folder}: no run to stop\n')
    with folder_lock(folder, 'dataset_path'):   # this process: stop would end itself
        fails(lambda: stop(folder), contains='held by this very process')
    # a process holding the folder, as `prep` does (no torchrun: its own tree is ended), with a child in another session
    p = subprocess.Popen([sys.executable, '-c', HOLD, str(folder), 'cli'], stdout=subprocess.PIPE, text=True)
    kid = int(p.stdout.readline())
    ended = stop(folder, timeout=5)
    eq(sorted(ended), sorted([p.pid, kid]))
    p.wait()
    assert not alive(kid) and lock_holder(folder) is None
    assert capsys.readouterr().out == f'stopped the run in {folder}: ended 2 process(es)\n'
    # a notebook kernel holding a folder itself: stop ends no kernel
    p = subprocess.Popen([sys.executable, '-c', HOLD, str(folder), 'kernel'], stdout=subprocess.PIPE, text=True)
    kid = int(p.stdout.readline())
    fails(lambda: stop(folder), contains='in use by a notebook kernel')
    assert alive(p.pid) and alive(kid)
    for q in (kid, p.pid): os.kill(q, signal.SIGKILL)
    p.wait()
    fails(lambda: stop(folder, timeout=float('nan')), contains='--timeout nan is not a finite number')


# issue 23: nothing lost, messages true to the state

def test_log_is_written_line_by_line(tmp_path):
    "`tail -f train.log` shows a live run as it goes: each line is in the file before the next one is printed."
    import threading
    log = tmp_path/'train.log'
    cmd = [sys.executable, '-c', 'import sys, time; print("first", flush=True); time.sleep(4); print("second")']
    t = threading.Thread(target=stream, args=(cmd,), kwargs={'log': log, 'echo': False}); t.start()
    deadline, seen = time.time() + 3, ''
    while time.time() < deadline and 'first' not in seen:
        seen = log.read_text() if log.exists() else ''; time.sleep(0.1)
    t.join()
    assert 'first' in seen and 'second' not in seen, seen


def test_stop_message_names_the_checkpoint_there_is(tmp_path):
    from trn_tutorials.checkpoints import seal_checkpoint
    out = tmp_path/'out'; out.mkdir()
    sig = ['torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15']
    msg = str(LaunchError(1, sig, str(out/'train.log')))
    assert 'no checkpoint was written' in msg and 'start over' in msg and 'newest checkpoint' not in msg, msg
    (out/'checkpoint-4').mkdir(); (out/'checkpoint-4'/'model.safetensors').write_bytes(b'w'); seal_checkpoint(out/'checkpoint-4')
    (out/'checkpoint-6').mkdir(); (out/'checkpoint-6'/'model.safetensors').write_bytes(b'w')   # cut off: no record
    msg = str(LaunchError(1, sig, str(out/'train.log')))
    assert 'continue from checkpoint-4' in msg and 'checkpoint-6' not in msg, msg


def test_a_full_disk_in_a_worker_is_said_as_such(tmp_path):
    out = tmp_path/'out'; out.mkdir()
    (out/'train.log').write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                                 f"OSError: [Errno 28] No space left on device: '{out}/checkpoint-2/model.safetensors'\n"
                                 "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    msg = str(LaunchError(1, ['x'], str(out/'train.log')))
    assert 'disk' in msg and 'is full' in msg and str(out) in msg and 'free space' in msg, msg


def test_results_show_mcc_and_the_run_s_warnings():
    m = {'final_split': 'validation', 'validation': {'f1': 0.5651, 'accuracy': 0.6913, 'mcc': 0.0},
         'train': {'samples_per_second': 10.0, 'runtime_s': 1.0}, 'world_size': 1, 'backend': 'cpu', 'args': {'output_dir': 'model'},
         'beats_baseline': False,
         'warnings': ['warning: no better than always predicting the majority label: --learning_rate 5 is far above its usual range '
                      '(1e-5 to 1e-4): lower it, e.g. --learning_rate 5e-05']}
    r = Results.from_metrics(m, 1.0)
    rows = dict(r.rows())
    eq(r.mcc, 0.0)
    eq(rows['Matthews correlation (validation)'], '0.000')
    md = r._repr_markdown_()
    assert '--learning_rate 5 is far above' in md and '| warning | warning:' not in md, md
    eq(md.count('majority'), 1)   # the run's own warning, not a second, vaguer one
    old = Results.from_metrics({**m, 'validation': {'f1': 0.5, 'accuracy': 0.5}, 'warnings': []}, 1.0)   # metrics of an older version
    assert old.mcc is None and 'majority' in old._repr_markdown_()


def fake_run(monkeypatch, code:str):
    "`launch` runs `code` in place of torchrun: a run that fails, or one that ends without writing metrics.json."
    import trn_tutorials.launch as L
    monkeypatch.setattr(L, 'torchrun_command', lambda args, n, *a, **k: [sys.executable, '-c', code])


def test_a_failed_retrain_keeps_the_previous_metrics(prepared, tmp_path, monkeypatch):
    from trn_tutorials.train import claim_output_dir
    args = TrainArguments(dataset_path=str(prepared/'data'), output_dir=str(tmp_path/'model'), max_steps=1)
    claim_output_dir(args, load_prepared(args.dataset_path)[1])
    old = '{"final_split": "validation"}'
    (tmp_path/'model'/'metrics.json').write_text(old)
    fake_run(monkeypatch, 'import sys; print("RuntimeError: boom"); sys.exit(1)')
    with pytest.raises(LaunchError, match='RuntimeError: boom'): launch(args, nproc_per_node=1, echo=False)
    eq((tmp_path/'model'/'metrics.json').read_text(), old)
    fake_run(monkeypatch, 'print("done")')   # status 0, yet no new metrics.json: the old one is not reported as this run's
    with pytest.raises(LaunchError, match='metrics.json'): launch(args, nproc_per_node=1, echo=False)
    eq((tmp_path/'model'/'metrics.json').read_text(), old)


def test_torchrun_killed_before_it_could_say_so(tmp_path):
    "`stop` can reach torchrun before its signal handlers are set: status -15 and no output; still a stop, said as one."
    (tmp_path/'out').mkdir()
    msg = str(LaunchError(-15, [], str(tmp_path/'out'/'train.log')))
    assert 'stopped by signal 15 (SIGTERM)' in msg and 'no checkpoint was written' in msg, msg
