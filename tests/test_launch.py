"""`trn_tutorials.training.launch`: workers, the environment and the torchrun command, bad input refused before torchrun starts, a
worker's failure and a stop said in one line, `stop`, the results shown (graphs loaded from the Neuron cache told apart from
graphs compiled, the run's warnings), and launches that train one worker to the end."""
import os, signal, subprocess, sys
from dataclasses import replace
from pathlib import Path

import pytest
from fastcore.test import test_eq as eq, test_fail as fails

from test_torchrun import alive
from test_train import linked
from trn_tutorials.backends import Accelerator
from trn_tutorials.core.options import UsageError, parse_args
from trn_tutorials.core.folders import folder_lock, lock_holder
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.training.launch import LaunchError, Results, launch, launch_env, stop, torchrun_command, train_argv
from trn_tutorials.training.torchrun import cache_status, graphs_from_cache
from trn_tutorials.training.arguments import TrainArguments

CPU = Accelerator('cpu', 1, 'cpu')


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
    eq(cmd[cmd.index('-m', 3):][:2], ['-m', 'trn_tutorials.training.train'])


def test_results_display():
    m = {'final_split': 'test', 'test': {'f1': 0.83712, 'accuracy': 0.8412}, 'train': {'samples_per_second': 123.456, 'runtime_s': 12.345},
         'world_size': 2, 'backend': 'cpu', 'args': {'output_dir': 'model'}, 'beats_baseline': True}
    r = Results.from_metrics(m, 61.234, 'trn1.2xlarge')
    md = r._repr_markdown_()
    for s in ('| F1 (test) | 0.837 |', '| wall time | 61.2 s |', '| workers | 2 (cpu) |', '| cost | $0.02'): assert s in md, md
    assert '0.83712' not in repr(r) and 'output_dir: model' in repr(r)
    assert 'warning' in Results.from_metrics({**m, 'beats_baseline': False}, 1.0)._repr_markdown_()


def no_weights(prepared, tmp) -> str:
    "A copy (in `tmp`) of the shared tiny BERT without its weights file: its tokenizer and config load, the model does not."
    import shutil
    if not (tmp/'no-weights').exists():
        shutil.copytree(prepared/'tiny-bert', tmp/'no-weights'); (tmp/'no-weights'/'model.safetensors').unlink()
    return str(tmp/'no-weights')


def test_launch_refuses_bad_input(prepared, tmp_path):
    tmp = linked(prepared, tmp_path, 'data')
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp_path/'model'))
    fails(lambda: launch(TrainArguments(dataset_path=str(tmp/'missing'))), contains="prep")
    fails(lambda: launch(args, nproc_per_node=64), contains="--nproc_per_node")
    fails(lambda: launch(TrainArguments(dataset_path=str(tmp/'data'), learning_rate=-1)), contains="--learning_rate")
    fails(lambda: launch(args, instance_type='p5.48xlarge'), contains="unknown instance type")
    fails(lambda: launch(args, nproc_per_node=0), contains="--nproc_per_node 0 is out of range")
    fails(lambda: launch(args, nproc_per_node=1.5), contains="not a whole number")
    # a model that is gone is refused before torchrun starts; one whose weights are gone fails in the workers: the cause, in one line
    fails(lambda: launch(replace(args, model_id=str(tmp_path/'deleted-model'))), contains="no such model folder")
    bad = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp_path/'bad'), model_id=no_weights(prepared, tmp_path), max_steps=1)
    with pytest.raises(LaunchError) as e: launch(bad, nproc_per_node=1, echo=False)
    assert 'a worker failed with OSError' in str(e.value) and e.value.log.endswith('train.log'), e.value
    assert lock_holder(bad.output_dir) is None


HOLD = """import sys, time
from trn_tutorials.core.folders import folder_lock
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


def test_stop_message_names_the_checkpoint_there_is(tmp_path):
    from trn_tutorials.training.checkpoints import seal_checkpoint
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
    import trn_tutorials.training.launch as L
    monkeypatch.setattr(L, 'torchrun_command', lambda args, n, *a, **k: [sys.executable, '-c', code])


def test_a_failed_retrain_keeps_the_previous_metrics(prepared, tmp_path, monkeypatch):
    from trn_tutorials.training.preflight import claim_output_dir
    args = TrainArguments(dataset_path=str(linked(prepared, tmp_path, 'data')/'data'), output_dir=str(tmp_path/'model'), max_steps=1)
    claim_output_dir(args, load_prepared(args.dataset_path))
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


def test_launch_returns_results(prepared, tmp_path, capsys):
    "One worker, three steps, the backend left to `auto`: the launcher resolves it once and hands it to the workers."
    args = TrainArguments(dataset_path=str(linked(prepared, tmp_path, 'data')/'data'), output_dir=str(tmp_path/'launched'), max_steps=3, logging_steps=1)
    res = launch(args, nproc_per_node=1)
    assert res.workers == 1 and res.metrics['train']['steps'] == 3
    out, err = capsys.readouterr()   # in a terminal: a tqdm bar on stderr; the workers' own lines only in train.log
    assert '3/3' in err and 'trn_tutorials.training.train: progress:' not in out + err and "{'loss'" not in out + err
    assert (tmp_path/'launched'/'train.log').read_text().strip()
    assert res.metrics['args']['backend'] == 'cpu'   # resolved once by the launcher, not 'auto' detected again per worker
    assert res.compiled_graphs is None and res.metrics['compiled_graphs'] is None
    # priced at the instance type's rate (with `auto`, a Trainium type on a machine without NeuronCores is refused: priced after)
    assert Results.from_metrics(res.metrics, res.wall_s, 'trn1.32xlarge').cost_usd == pytest.approx(21.50 * res.wall_s / 3600)


def test_neuron_environment():
    env = launch_env('neuron', 2, base={'NEURON_CC_FLAGS': '--retry_failed_compilation', 'PATH': '/usr/bin'}, python='/venv/bin/python')
    assert env['NEURON_CC_FLAGS'] == '--retry_failed_compilation --model-type transformer'
    assert env['PATH'].split(':')[0] == '/venv/bin' and env['USE_TORCH_XLA'] == '1'
    assert launch_env('cpu', 1, base={})['USE_TORCH_XLA'] == '0'


def graph(root:Path, name:str, done:bool=True):
    d = root/'neuronxcc-2.26.6360.0+9f7b3c1e'/name; d.mkdir(parents=True)
    for f in ['model.hlo_module.pb', 'compile_flags.json'] + (['model.neff', 'model.done'] if done else []): (d/f).write_bytes(b'\0')


def metrics(**extra) -> dict:
    return {'final_split': 'test', 'test': {'f1': 0.91, 'accuracy': 0.92}, 'train': {'samples_per_second': 96.3, 'runtime_s': 510.0},
            'world_size': 2, 'backend': 'neuron', 'args': {'output_dir': 'runs/emotion-model'}, 'beats_baseline': True,
            'compiled_graphs': {'train': 9, 'eval': 6}, 'compile_s': {'train': 40.0, 'eval': 12.0}, **extra}


def test_cache_loads_told_apart_from_compiles(tmp_path):
    cache = tmp_path/'neuron-compile-cache'
    for i in range(14): graph(cache, f'MODULE_{i:020d}+39f12043')   # a precompile left 14 graphs
    before = cache_status(cache)
    graph(cache, 'MODULE_99999999999999999999+39f12043')           # the run compiled one more
    graph(cache, 'MODULE_88888888888888888888+39f12043', done=False)   # and one failed: not a compile
    loaded = graphs_from_cache({'train': 9, 'eval': 6}, before, cache_status(cache))
    assert loaded == 14
    r = Results.from_metrics(metrics(), wall_s=600.0, instance_type='trn1.2xlarge', from_cache=loaded)
    row = dict(r.rows())['graphs']
    assert '1 compiled, 14 loaded from the Neuron cache' in row, row
    # what cannot be told is not guessed: an S3 cache, or no cache status
    s3 = cache_status('s3://bucket/neuron-cache')
    assert graphs_from_cache({'train': 9, 'eval': 6}, s3, s3) is None and graphs_from_cache({'train': 9, 'eval': 6}, None, None) is None
    assert 'graphs compiled' in dict(Results.from_metrics(metrics(), 600.0).rows())
    # a cache that holds no graph after the run supplied none: no neuronx-cc ran (the Trn1 stand-in's torch-xla on the CPU)
    empty = cache_status(tmp_path/'empty-cache')
    assert graphs_from_cache({'train': 9, 'eval': 6}, empty, empty) is None   # said "15 loaded from the Neuron cache" before


def test_warnings_shown_in_results():
    w = 'only 93 optimizer steps planned: use fewer workers'
    r = Results.from_metrics(metrics(warnings=[w]), wall_s=600.0)
    assert ('warning', w) in r.rows() and w in r._repr_markdown_()
    assert not [k for k, _ in Results.from_metrics(metrics(), 600.0).rows() if k == 'warning']
