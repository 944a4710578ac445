"""The plain PyTorch loop of `trn_tutorials.training.xla_loop` under a real torchrun: two CPU workers (gloo, DDP) and one, on an easy
fixture whose loss must fall within a few steps; the saved model is the one every worker held; bad input gets one line.

Its XLA path (PJRT's CPU device) is tested in tests/test_xla.py, in the environment with torch-xla.
"""
import importlib.util, json, os, random, subprocess, sys
from pathlib import Path

import pytest

from trn_tutorials.backends import XLA_INSTALL
from trn_tutorials.models import tiny_bert
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.training.launch import launch_env
from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.training.xla_loop import ERROR_PREFIX, LoopArguments, Workers, eval_loader, train_loader, weights_sha256

GOOD = ['great', 'happy', 'joy', 'lovely', 'fun', 'bright']
BAD = ['sad', 'awful', 'gloomy', 'dull', 'grim', 'bleak']


@pytest.fixture(scope='module')
def easy(tmp_path_factory):
    "Two labels that any one word decides, prepared for a tiny BERT that knows those words."
    tmp = tmp_path_factory.mktemp('loop')
    rng, src = random.Random(0), tmp/'src'
    src.mkdir()
    for split, n in (('train', 64), ('validation', 24)):
        rows = [(' '.join(rng.choices(GOOD if i % 2 else BAD, k=4)), 'pos' if i % 2 else 'neg') for i in range(n)]
        (src/f'{split}.csv').write_text('text,label\n' + ''.join(f'{t},{l}\n' for t, l in rows))
    model = tiny_bert(tmp/'tiny-bert', GOOD + BAD, labels=['neg', 'pos'])
    manifest = prepare(DataArguments(data=str(src), model_id=model, dataset_path=str(tmp/'data')))
    return tmp, manifest


def env():
    return dict(os.environ, OMP_NUM_THREADS='1', TOKENIZERS_PARALLELISM='false', USE_TORCH_XLA='0')


def torchrun(n:int, *opts):
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', str(n), '-m', 'trn_tutorials.training.xla_loop',
           '--backend', 'cpu', *map(str, opts)]
    return subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)


def mean(xs): return sum(xs) / len(xs)


def test_two_cpu_workers(easy):
    tmp, manifest = easy
    out = tmp/'two'
    r = torchrun(2, '--dataset_path', tmp/'data', '--output_dir', out, '--num_train_epochs', 8, '--learning_rate', 3e-3,
                 '--per_device_train_batch_size', 8, '--per_device_eval_batch_size', 16)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((out/'metrics.json').read_text())
    assert (m['backend'], m['device'], m['world_size'], m['compiled_graphs']) == ('cpu', 'cpu', 2, None)
    # 64 rows on 2 workers in batches of 8: 4 steps an epoch, each of one shape
    assert (m['steps_per_epoch'], m['steps'], len(m['loss'])) == (4, 32, 32)
    assert m['batch_shape'] == [8, manifest['max_length']] and m['train']['rows_fed'] == 32 * 8 * 2
    assert m['train']['samples_per_second'] > 0
    assert mean(m['loss'][-4:]) < 0.5 * mean(m['loss'][:4]), m['loss']
    # every validation row scored once (24 rows in two batches of 16, 8 of them filler)
    assert m['validation']['rows'] == 24 and m['validation']['accuracy'] > 0.9, m['validation']
    assert m['validation']['accuracy'] > m['baseline']['accuracy']
    # DDP kept the workers in step: both ended with the same weights, and that is the model written, once
    assert m['weights']['same_on_all_workers']
    assert [p.name for p in out.iterdir() if p.name.startswith('.')] == [] and len(list(out.glob('*.safetensors'))) == 1
    from transformers import AutoModelForSequenceClassification
    saved = AutoModelForSequenceClassification.from_pretrained(out)
    assert weights_sha256(saved) == m['weights']['sha256']
    assert saved.config.id2label == {0: 'neg', 1: 'pos'} and (out/'tokenizer.json').is_file()
    assert r.stdout.count('validation: accuracy') == 1, r.stdout   # the first worker speaks for all


def test_one_worker_max_steps(easy):
    tmp, _ = easy
    out = tmp/'one'
    r = torchrun(1, '--dataset_path', tmp/'data', '--output_dir', out, '--max_steps', 3, '--per_device_train_batch_size', 8)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((out/'metrics.json').read_text())
    assert (m['world_size'], m['steps'], len(m['loss']), m['steps_per_epoch']) == (1, 3, 3, 8)
    assert m['weights']['same_on_all_workers'] and (out/'model.safetensors').is_file()


def test_loaders_one_shape_disjoint_shards(easy):
    "Three workers: disjoint rows, full batches only; evaluation scores every row in batches of one shape."
    tmp, manifest = easy
    ds, L = load_prepared(str(tmp/'data')).splits, manifest['max_length']
    import torch
    views = [train_loader(ds['train'], Workers('cpu', torch.device('cpu'), r, 3), 5, 0, 0, L) for r in range(3)]
    rows = [set(s) for s, _ in views]
    assert all(not (rows[a] & rows[b]) for a in range(3) for b in range(a + 1, 3)) and sum(map(len, rows)) == 63
    assert {tuple(b['input_ids'].shape) for _, loader in views for b in loader} == {(5, L)}
    batches = list(eval_loader(ds['validation'], Workers('cpu', torch.device('cpu')), 10, 0, L))
    assert [tuple(b['input_ids'].shape) for b in batches] == [(10, L)] * 3
    assert sum(int((b['labels'] >= 0).sum()) for b in batches) == 24


def test_arguments_are_train_arguments():
    "Every option of the loop is an option of `trn_tutorials.training.train` with the same type and default (but its own output folder)."
    from dataclasses import fields
    from typing import get_type_hints   # the types themselves: HfArgumentParser turns a field's 'str' into str once it parsed it
    train, types, loop_types = {f.name: f for f in fields(TrainArguments)}, get_type_hints(TrainArguments), get_type_hints(LoopArguments)
    for f in fields(LoopArguments):
        assert f.name in train and loop_types[f.name] == types[f.name], f.name
        assert f.default == train[f.name].default or f.name == 'output_dir', f.name


def run_main(*opts):
    return subprocess.run([sys.executable, '-m', 'trn_tutorials.training.xla_loop', *map(str, opts)], env=env(), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize('opts, says', [
    (['--backend', 'cpu', '--dataset_path', 'nowhere'], 'no prepared data at nowhere: run `trn-tutorials prep'),
    (['--backend', 'cpu', '--max_steps', '0'], '--max_steps 0 is out of range: use 1 or more, or -1 (all epochs)'),
    (['--backend', 'cpu', '--learning_rate', 'nan'], '--learning_rate nan is not a finite number'),
    (['--backend', 'gpu'], "--backend 'gpu' is not one of auto, neuron, xla, cpu"),
    (['--backend', 'cpu', '--per_device_train_batch_size', '1000', '--dataset_path', '{data}'], 'make no batch of 1000'),
])
def test_bad_input_one_line(easy, opts, says):
    tmp, _ = easy
    r = run_main(*[o.format(data=tmp/'data') for o in opts], '--output_dir', tmp/'bad')
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(ERROR_PREFIX) and says in lines[0], r.stderr
    assert not (tmp/'bad').exists()   # nothing written


@pytest.mark.skipif(importlib.util.find_spec('torch_xla') is not None, reason='torch-xla is installed here')
def test_xla_backend_without_torch_xla(easy):
    tmp, _ = easy
    r = run_main('--backend', 'xla', '--dataset_path', tmp/'data')
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        ERROR_PREFIX + f"--backend xla needs torch-xla: `{XLA_INSTALL}` in a separate virtual environment, or use --backend cpu"], r.stderr


def test_the_xla_loop_refuses_what_it_does_not_implement(prepared):
    env = dict(launch_env('cpu', 1), PYTHONPATH=str(Path(__file__).parents[1]))
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.training.xla_loop', '--dataset_path', str(prepared/'data'), '--backend', 'cpu',
                        '--gradient_accumulation_steps', '2'], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "trn_tutorials.training.xla_loop: error: --gradient_accumulation_steps is a TrainingArguments flag the plain loop does not implement (it keeps "
        "the loop short): train with `python -m trn_tutorials.training.train`, the Trainer, which takes every one"], r.stderr
