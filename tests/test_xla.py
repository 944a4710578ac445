"""The XLA rehearsal: the Neuron code path of `train`/`launch`/`precompile` on PJRT's CPU device, graphs counted.

Runs where torch-xla is installed: the Trn1 DLAMI stand-in `tools/test.sh` builds (`.venv-trn1`: Python 3.12, torch 2.9,
torch-xla 2.9 for torch-neuronx, then the wheel installed with `pip install "trn-tutorials[trn1]"`, as the README says;
versions in tools/environments.toml). torch-xla has no cross-process collectives on the CPU, so one worker; the
multi-worker rules are tested on the samplers and loaders in `tests/test_samplers.py`.
"""
import json, math, os, subprocess, sys
from pathlib import Path

import pytest

pytest.importorskip('torch_xla', reason="the XLA rehearsal runs in the Trn1 stand-in (.venv-trn1: STAGES=trn1 bash tools/test.sh)")

from test_train import TORCHRUN_VARS, linked
from trn_tutorials.data.sources import sample_data
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.training.launch import launch, launch_env, torchrun_command
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.training.precompile import compile_report, precompile, precompile_shapes
from trn_tutorials.training.arguments import TrainArguments


@pytest.fixture(scope='module')
def tiny(prepared, tmp_path_factory):
    "The shared tiny BERT and its data in 1 and 4 buckets (linked as `data-1`, `data-4`), and the sample in 2 buckets made here."
    tmp = linked(prepared, tmp_path_factory.mktemp('xla'), 'tiny-bert', 'data-4')
    (tmp/'data-1').symlink_to(prepared/'data', target_is_directory=True)
    model = str(tmp/'tiny-bert')
    prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'data-2'), buckets=2))
    from transformers import AutoModelForSequenceClassification
    n_params = len(list(AutoModelForSequenceClassification.from_pretrained(model, num_labels=6, ignore_mismatched_sizes=True).parameters()))
    return tmp, n_params


def rehearse(tmp:Path, buckets:int, **kw):
    args = TrainArguments(dataset_path=str(tmp/f'data-{buckets}'), output_dir=str(tmp/f'model-{buckets}'), num_train_epochs=2,
                          learning_rate=1e-4, per_device_train_batch_size=16, per_device_eval_batch_size=16,
                          logging_steps=5, save_steps=10, backend='xla', **kw)
    env = launch_env('xla', 1) | {'PT_XLA_DEBUG_LEVEL': '1'}
    r = subprocess.run(torchrun_command(args, 1), env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return args, json.loads(Path(args.output_dir, 'metrics.json').read_text()), compile_report(r.stdout + r.stderr)


@pytest.mark.parametrize('buckets', [1, 4])   # the ends: one length, and the most buckets the tests prepare
def test_rehearsal_graphs(tiny, buckets):
    tmp, n_params = tiny
    args, m, graphs = rehearse(tmp, buckets)
    g, t = m['compiled_graphs'], m['train']
    assert m['backend'] == 'xla' and m['versions'].get('torch-xla', '').startswith('2.9')
    assert math.isfinite(m['train']['loss'])   # AdamW's tensor learning rate must not divide by a zero one
    # every validation and test row is scored (72 each; 72 is not a multiple of the evaluation batch of 16)
    assert (m['validation']['rows'], m['test']['rows']) == (72, 72)
    # the second epoch and every evaluation after the first compile nothing: logging, saving and metrics included
    assert len(g['per_epoch']) == 2 and g['per_epoch'][1] == 0, g
    assert len(g['per_evaluation']) == 4 and g['per_evaluation'][1:] == [0, 0, 0], g
    assert g['train'] + g['eval'] == len(graphs)
    large = [c for c in graphs if c['inputs'] >= n_params]   # graphs that hold the model: steps and forwards
    # one training-step graph per input shape fed, plus one for the first step (it creates the optimizer state); the
    # learning rate 1e-4 decays below ~6e-6 at the end, where a Python-float learning rate compiled a second set
    assert len([c for c in large if not c['in_eval']]) == len(t['input_shapes']) + 1, (t['input_shapes'], large)
    # evaluation: at most one graph per bucket length at the evaluation batch size
    assert len([c for c in large if c['in_eval']]) <= len({L for _, L in t['eval_shapes']}) and all(r == 16 for r, _ in t['eval_shapes'])
    # eager attention: BERT's SDPA mask check (a host sync and a graph per length) never runs
    assert not any('_prepare_4d_attention_mask_for_sdpa' in c['frames'] for c in graphs)
    # precompile's shape list is what the run fed
    shapes = precompile_shapes(args, load_prepared(args.dataset_path), 1)
    assert [list(s) for s in shapes['train']] == t['input_shapes']
    assert [list(s) for s in shapes['eval']] == t['eval_shapes']
    # training throughput leaves the evaluations out; the Trainer's own figure does not
    assert t['samples_per_second'] > t['trainer_samples_per_second'] and t['runtime_s'] < t['runtime_with_eval_s']
    assert m['compile_s']['train'] > 0 and m['compile_s']['eval'] > 0


def test_launch_and_precompile_xla(tiny, capsys):
    tmp, _ = tiny
    args = TrainArguments(dataset_path=str(tmp/'data-2'), output_dir=str(tmp/'launched'), max_steps=4, logging_steps=2,
                          per_device_eval_batch_size=16, backend='xla')
    res = launch(args, echo=False)
    assert (res.backend, res.workers) == ('xla', 1) and res.compiled_graphs['train'] > 0 and res.compile_s > 0
    out = precompile(args)
    assert 'cannot load it back' in capsys.readouterr().out and out['shapes']['eval']


def test_cpu_stays_cpu_with_torch_xla_installed(tiny):
    tmp, _ = tiny
    args = TrainArguments(dataset_path=str(tmp/'data-1'), output_dir=str(tmp/'cpu'), max_steps=2, backend='cpu')
    r = subprocess.run(torchrun_command(args, 1), env=launch_env('cpu', 1), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads(Path(args.output_dir, 'metrics.json').read_text())
    assert m['backend'] == 'cpu' and m['compiled_graphs'] is None


def test_xla_one_worker_only(tiny):
    tmp, _ = tiny
    args = TrainArguments(dataset_path=str(tmp/'data-1'), output_dir=str(tmp/'two'), max_steps=2, backend='xla')
    r = subprocess.run(torchrun_command(args, 2), env=launch_env('xla', 2), capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and 'trn_tutorials.training.train: error: --backend xla runs one worker' in r.stderr


def test_xla_learns_like_the_cpu(tiny):
    "The XLA path (AdamW fed its learning rate as device data) trains to the same loss as the CPU path."
    tmp, _ = tiny
    loss = {}
    for backend in ('xla', 'cpu'):
        args = TrainArguments(dataset_path=str(tmp/'data-1'), output_dir=str(tmp/f'learn-{backend}'), num_train_epochs=6, learning_rate=3e-3,
                              per_device_train_batch_size=16, logging_steps=50, save_steps=0, backend=backend)
        r = subprocess.run(torchrun_command(args, 1), env=launch_env(backend, 1), capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        m = json.loads(Path(args.output_dir, 'metrics.json').read_text())
        loss[backend] = m['train']['loss']
        assert m['beats_baseline'], (backend, m['test'])
    assert abs(loss['xla'] - loss['cpu']) < 0.02 * loss['cpu'], loss


def test_xla_loop_on_the_xla_device(tiny):
    "The plain loop's Trainium path (`torch_xla.device()`, `MpDeviceLoader`, `xm.optimizer_step`, saving off the device) on PJRT's CPU."
    from transformers import AutoModelForSequenceClassification
    from trn_tutorials.training.xla_loop import weights_sha256
    tmp, _ = tiny
    out = tmp/'loop'
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '1', '-m', 'trn_tutorials.training.xla_loop',
           '--backend', 'xla', '--dataset_path', str(tmp/'data-2'), '--output_dir', str(out), '--max_steps', '6',
           '--per_device_train_batch_size', '8', '--per_device_eval_batch_size', '16']
    r = subprocess.run(cmd, env=launch_env('xla', 1), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((out/'metrics.json').read_text())
    assert (m['backend'], m['device'], m['world_size'], m['steps']) == ('xla', 'xla:0', 1, 6)
    assert m['versions']['torch-xla'].startswith('2.9')
    # data in two length buckets, every row padded to the longest: one graph for the first step (it creates AdamW's
    # state), one for every later step, one for evaluation (its last batch filled up to the same shape)
    assert m['compiled_graphs'] == {'train': 2, 'eval': 1}, m['compiled_graphs']
    assert len(m['loss']) == 6 and all(math.isfinite(l) for l in m['loss']) and m['validation']['rows'] == 72
    saved = AutoModelForSequenceClassification.from_pretrained(out)   # written from the CPU copies of the device's weights
    assert weights_sha256(saved) == m['weights']['sha256'] and m['weights']['same_on_all_workers']


def test_neuron_backend_relaunches_and_trains(tiny, tmp_path):
    """`python -m trn_tutorials.training.train --backend neuron` outside torchrun re-launches itself under torchrun with one worker, and
    that worker trains on the Neuron code path: torch-xla's CPU device standing in for the NeuronCore (`PJRT_DEVICE=CPU`), an
    empty `torch_neuronx` package standing in for torch-neuronx (`check_backend` only looks for it)."""
    data = tiny[0]/'data-2'
    stub = tmp_path/'stub'; (stub/'torch_neuronx').mkdir(parents=True); (stub/'torch_neuronx'/'__init__.py').write_text('')
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS} | {
        'HF_HUB_OFFLINE': '1', 'PJRT_DEVICE': 'CPU',
        'PYTHONPATH': os.pathsep.join([str(stub), *filter(None, [os.environ.get('PYTHONPATH')])])}
    out = tmp_path/'model'
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.training.train', '--backend', 'neuron', '--dataset_path', str(data),
                        '--output_dir', str(out), '--num_train_epochs', '1', '--learning_rate', '1e-4', '--per_device_train_batch_size', '16',
                        '--per_device_eval_batch_size', '16', '--logging_steps', '5', '--save_steps', '10'],
                       env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    said = r.stdout + r.stderr
    assert r.returncode == 0, said[-4000:]
    relaunch = [l for l in said.splitlines() if 'without torchrun hangs' in l]
    assert len(relaunch) == 1 and '--nproc_per_node 1' in relaunch[0], said[-3000:]
    m = json.loads((out/'metrics.json').read_text())
    # written by the torchrun worker, on the Neuron code path: XLA graphs counted, one worker
    assert m['torchrun'] is True and m['backend'] == 'neuron' and m['world_size'] == 1, {k: m.get(k) for k in ('torchrun', 'backend', 'world_size')}
    assert m['compiled_graphs'] and m['compiled_graphs']['train'] > 0, m['compiled_graphs']
    # one epoch of a tiny random BERT may not beat the majority label yet: that warning (issue 23) is the only one allowed
    assert m['versions'].get('torch-xla') and all('no better than always predicting the majority label' in w for w in m['warnings']), m['warnings']
    # its checkpoints were sealed by the guard (one worker: no meeting to wait for)
    from trn_tutorials.training.checkpoints import checkpoints
    assert [ok for _, ok in checkpoints(out)] and all(ok for _, ok in checkpoints(out)), checkpoints(out)
