"""Precompile covers a packed folder: the shapes it plans are the shapes its trial feeds, and those a real packed run feeds,
in training (one shape) and in evaluation. On the CPU: a stand-in `neuron_parallel_compile` runs the trial as it is."""
import io, json, os
from contextlib import redirect_stdout
from dataclasses import replace

import pytest

from trn_tutorials.backends import Accelerator
from trn_tutorials.models import tiny_bert
from trn_tutorials.data_files import EMOTION_LABELS, load_raw, sample_data
from trn_tutorials.data import DataArguments, prepare
from trn_tutorials.launch import launch
from trn_tutorials.precompile import precompile, precompile_shapes, precompile_steps
from trn_tutorials.arguments import TrainArguments


@pytest.fixture(scope='module')
def packed(tmp_path_factory):
    "The bundled sample packed for a tiny BERT, and the packing record."
    tmp = tmp_path_factory.mktemp('packed-pc')
    words = sorted({w for s in load_raw(sample_data()).values() for t in s['text'] for w in t.split()})
    model = tiny_bert(tmp/'tiny-bert', words, labels=EMOTION_LABELS)
    m = prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'data'), pack=True))
    return tmp, m['packing']


def stand_in_compiler(tmp, keep):
    "A `neuron_parallel_compile` that runs the trial on the CPU, then keeps a copy of the trial's metrics as `keep`."
    stub = tmp/'bin'; stub.mkdir(exist_ok=True)
    (stub/'neuron_parallel_compile').write_text(
        '#!/bin/sh\nout=\nfor a; do shift; [ "$a" = neuron ] && a=cpu; [ "$prev" = --output_dir ] && out=$a; prev=$a; set -- "$@" "$a"; done\n'
        f'"$@"; s=$?; cp "$out/metrics.json" {keep} 2>/dev/null; exit $s\n')
    (stub/'neuron_parallel_compile').chmod(0o755)
    return stub


def test_precompile_plans_the_packed_runs_shapes(packed, tmp_path, monkeypatch):
    tmp, pk = packed
    L = pk['row_length']
    # dataloader_drop_last: what the XLA backends set, so the CPU run feeds the shapes a Neuron run would
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp_path/'model'), num_train_epochs=1, learning_rate=1e-3,
                          per_device_train_batch_size=8, per_device_eval_batch_size=8, logging_steps=100, backend='cpu',
                          dataloader_drop_last=True)
    plan, steps = precompile_shapes(args, 1), precompile_steps(args, 1)
    assert plan == {'train': [(8, L)], 'eval': [(8, L)]} and steps == 2   # one shape, and the first step and a later one
    assert precompile_shapes(args, 2) == plan and precompile_steps(args, 2) == 2
    real = launch(args, 1, echo=False).metrics['train']   # the whole run: every training batch, evaluation and test
    monkeypatch.setenv('PATH', f"{stand_in_compiler(tmp_path, tmp_path/'trial.json')}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv('NEURON_COMPILE_CACHE_URL', str(tmp_path/'ncc'))
    with redirect_stdout(io.StringIO()): precompile(replace(args, backend='neuron'), echo=False, acc=Accelerator('neuron', 1, 'stand-in'))
    trial = json.loads((tmp_path/'trial.json').read_text())['train']   # what the trial fed
    assert trial['steps'] == steps and real['steps'] > steps
    for fed in (real, trial):
        assert [tuple(s) for s in fed['input_shapes']] == plan['train'], fed['input_shapes']
        assert [tuple(s) for s in fed['eval_shapes']] == plan['eval'], fed['eval_shapes']
