"""`trn_tutorials.training.precompile`: where the Neuron compile cache is, what it holds, the trial's command and steps, precompile with a
stand-in `neuron_parallel_compile` that runs the trial on the CPU; a packed folder's shapes planned as its trial and a real run
feed them."""
import io, json, os
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

from fastcore.test import test_eq as eq, test_fail as fails, test_stdout as stdout_is

from trn_tutorials.backends import Accelerator
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.prepared import row_lengths
from test_launch import no_weights
from test_train import linked
from test_packing import packed  # noqa: F401  (the packed folder, a fixture)
from trn_tutorials.training.launch import launch, torchrun_command
from trn_tutorials.training.torchrun import cache_status, compile_cache
from trn_tutorials.training.precompile import (PrecompileError, precompile, precompile_args, precompile_command,
                                      precompile_shapes, precompile_steps)
from trn_tutorials.training.samplers import BucketBatchSampler
from trn_tutorials.training.arguments import TrainArguments

CPU = Accelerator('cpu', 1, 'cpu')


def test_compile_cache_and_status(tmp_path):
    eq(compile_cache({}), Path('/var/tmp/neuron-compile-cache'))
    eq(compile_cache({'NEURON_COMPILE_CACHE_URL': '/data/ncc'}), Path('/data/ncc'))
    eq(compile_cache({'NEURON_COMPILE_CACHE_URL': '/data/ncc', 'NEURON_CC_FLAGS': '--model-type transformer --cache_dir=/mnt/ncc'}), Path('/mnt/ncc'))
    eq(compile_cache({'NEURON_CC_FLAGS': '--cache_dir /mnt/ncc --model-type=transformer'}), Path('/mnt/ncc'))
    eq(compile_cache({'NEURON_COMPILE_CACHE_URL': 's3://b/p'}), 's3://b/p')
    ncc = fake_cache(tmp_path/'neuron-compile-cache')
    st = cache_status(ncc)
    eq([st[k] for k in ('compiled', 'failed', 'in_progress', 'pending')], [2, 1, 1, 1])
    eq(st['compilers'], ['2.14.213.0+013d129b', '2.15.128.0+56dc5a86'])
    eq(st['size_mb'], 2.0)
    eq(cache_status(tmp_path/'no-cache-yet'), {'path': str(tmp_path/'no-cache-yet'), 'compiled': 0, 'failed': 0, 'in_progress': 0,
                                               'pending': 0, 'size_mb': 0.0, 'compilers': []})
    eq(cache_status('s3://b/p')['compiled'], None)


def fake_cache(root: Path) -> Path:
    "A compile cache with 2 compiled graphs under 2 compiler versions, 1 failed, 1 compiling, 1 pending."
    graphs = {'neuronxcc-2.15.128.0+56dc5a86/MODULE_98ba4c9111d5882d2331+39f12043': ['model.hlo_module.pb', 'compile_flags.json', 'model.neff', 'model.done'],
              'neuronxcc-2.15.128.0+56dc5a86/MODULE_a7b0021f88c35fba5c31+39f12043': ['model.hlo_module.pb', 'compile_flags.json', 'model.log'],
              'neuronxcc-2.15.128.0+56dc5a86/MODULE_cafd6eb1a22bbd8d668b+39f12043': ['model.hlo_module.pb', 'compile_flags.json', 'model.hlo_module.pb.lock'],
              'neuronxcc-2.15.128.0+56dc5a86/MODULE_dbd562f4987f424d68b7+39f12043': ['model.hlo_module.pb'],
              'neuronxcc-2.14.213.0+013d129b/MODULE_50a122f44c378e1567a4+ede6753c': ['model.hlo_module.pb', 'compile_flags.json', 'model.neff', 'model.done']}
    for g, files in graphs.items():
        (root/g).mkdir(parents=True)
        for f in files: (root/g/f).write_bytes(b'\0' * (2**20 if f == 'model.neff' else 100 if f.endswith('.pb') else 0))
    return root


def test_precompile_command():
    a = TrainArguments(dataset_path='d', output_dir='runs/m/', bf16=True, logging_steps=50)
    cmd = precompile_command(a, 2, steps=10, port=29500, python='python')
    eq(cmd[0], 'neuron_parallel_compile')
    eq(cmd[1:], torchrun_command(replace(a, max_steps=10, output_dir='runs/m-precompile', logging_steps=5, save_steps=0, resume=False), 2, 29500, 'python'))
    eq(cmd[cmd.index('--output_dir'):], ['--output_dir', 'runs/m-precompile', '--max_steps', '10', '--bf16', 'true', '--logging_steps', '5',
                                        '--save_strategy', 'no', '--save_steps', '0', '--resume', 'false'])
    eq(precompile_args(TrainArguments(logging_steps=2), 10).logging_steps, 2)
    eq(precompile_args(TrainArguments(), 1).logging_steps, 1)
    eq(a.output_dir, 'runs/m/')  # the real run's arguments are untouched
    fails(lambda: precompile_command(a, 2, steps=0), contains="--steps 0 is out of range")


def test_precompile_steps_reach_every_shape(prepared):
    tmp = prepared
    eq(precompile_steps(TrainArguments(dataset_path=str(tmp/'data')), load_prepared(str(tmp/'data')), 2), 2)
    n4 = precompile_steps(TrainArguments(dataset_path=str(tmp/'data-4')), load_prepared(str(tmp/'data-4')), 2)
    rows4 = row_lengths(load_prepared(str(tmp/'data-4')).splits['train'])
    for rank in range(2):
        s = BucketBatchSampler(rows4, 16, 2, rank, fill_last=True, pad_to_batch=True)
        eq({(len(b), b[0][1]) for b in list(s)[:n4]}, s.shapes())


def test_precompile_on_cpu_and_bad_input():
    stdout_is(lambda: eq(precompile(TrainArguments(), acc=CPU), None),
              'precompile: not needed on cpu (only the Neuron compiler compiles graphs ahead of a run)')
    fails(lambda: precompile(TrainArguments(), steps=0, acc=Accelerator('neuron', 2, '2 NeuronCore(s)')), contains="steps")
    fails(lambda: precompile(TrainArguments(), 4, acc=Accelerator('neuron', 2, '2 NeuronCore(s)')), contains="--nproc_per_node")


def test_precompile_neuron_path_with_a_stand_in_compiler(prepared, tmp_path, monkeypatch):
    "Everything but the compiler: a stand-in `neuron_parallel_compile` runs the trial as it is, on the CPU."
    ncc = fake_cache(tmp_path/'neuron-compile-cache')
    monkeypatch.setenv('PATH', f"{stand_in_compiler(tmp_path, tmp_path/'trial.json')}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv('NEURON_COMPILE_CACHE_URL', str(ncc))
    trn = Accelerator('neuron', 1, 'stand-in')
    trial = TrainArguments(dataset_path=str(linked(prepared, tmp_path, 'data')/'data'), output_dir=str(tmp_path/'pc-model'), logging_steps=100)
    with redirect_stdout(out := io.StringIO()): after = precompile(trial, steps=2, echo=False, acc=trn)
    eq(after, cache_status(ncc))
    eq(out.getvalue().splitlines()[0].startswith(f"Neuron compile cache {ncc}: 2 compiled graph(s), 1 failed"), True)
    eq('2 compiled graph(s) (0 new)' in out.getvalue().splitlines()[-1], True)
    eq(sorted(os.listdir(tmp_path/'pc-model-precompile')), ['precompile.log', 'trn_tutorials.json'])   # the log, and the folder's record
    eq((tmp_path/'pc-model').exists(), False)
    fails(lambda: precompile(replace(trial, model_id=str(tmp_path/'deleted-model')), steps=2, acc=trn), contains="no such model folder")
    bad = replace(trial, model_id=no_weights(prepared, tmp_path))   # found out by the workers
    with redirect_stdout(io.StringIO()):
        fails(lambda: precompile(bad, steps=2, echo=False, acc=trn), exc=PrecompileError, contains="neuron_parallel_compile exited with status 1")


def stand_in_compiler(tmp, keep):
    "A `neuron_parallel_compile` that runs the trial on the CPU, then keeps a copy of the trial's metrics as `keep`."
    stub = tmp/'bin'; stub.mkdir(exist_ok=True)
    (stub/'neuron_parallel_compile').write_text(
        '#!/bin/sh\nout=\nfor a; do shift; [ "$a" = neuron ] && a=cpu; [ "$prev" = --output_dir ] && out=$a; prev=$a; set -- "$@" "$a"; done\n'
        f'"$@"; s=$?; cp "$out/metrics.json" {keep} 2>/dev/null; exit $s\n')
    (stub/'neuron_parallel_compile').chmod(0o755)
    return stub


def test_precompile_plans_the_packed_runs_shapes(packed, tmp_path, monkeypatch):
    "A packed folder: the shapes precompile plans are those its trial feeds, and those a real packed run feeds (training and evaluation)."
    data, rec = packed
    L = rec['packing']['row_length']
    # dataloader_drop_last: what the XLA backends set, so the CPU run feeds the shapes a Neuron run would
    args = TrainArguments(dataset_path=str(data), output_dir=str(tmp_path/'model'), num_train_epochs=1, learning_rate=1e-3,
                          per_device_train_batch_size=8, per_device_eval_batch_size=8, logging_steps=100, backend='cpu',
                          dataloader_drop_last=True)
    data = load_prepared(args.dataset_path)
    plan, steps = precompile_shapes(args, data, 1), precompile_steps(args, data, 1)
    assert plan == {'train': [(8, L)], 'eval': [(8, L)]} and steps == 2   # one shape, and the first step and a later one
    assert precompile_shapes(args, data, 2) == plan and precompile_steps(args, data, 2) == 2
    real = launch(args, 1, echo=False).metrics['train']   # the whole run: every training batch, evaluation and test
    monkeypatch.setenv('PATH', f"{stand_in_compiler(tmp_path, tmp_path/'trial.json')}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv('NEURON_COMPILE_CACHE_URL', str(tmp_path/'ncc'))
    with redirect_stdout(io.StringIO()): precompile(replace(args, backend='neuron'), echo=False, acc=Accelerator('neuron', 1, 'stand-in'))
    trial = json.loads((tmp_path/'trial.json').read_text())['train']   # what the trial fed
    assert trial['steps'] == steps and real['steps'] > steps
    for fed in (real, trial):
        assert [tuple(s) for s in fed['input_shapes']] == plan['train'], fed['input_shapes']
        assert [tuple(s) for s in fed['eval_shapes']] == plan['eval'], fed['eval_shapes']
