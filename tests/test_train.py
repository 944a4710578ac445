"Training through a real torchrun: a tiny BERT built here (no download), two workers, metrics.json checked."
import json, subprocess, sys
from pathlib import Path

import pytest

from trn_tutorials.core import tiny_bert
from trn_tutorials.data import DataArguments, load_raw, prepare, sample_data
from trn_tutorials.launch import launch, torchrun_command, launch_env
from trn_tutorials.train import TrainArguments


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
    "The bundled sample, prepared for a tiny BERT whose vocabulary is the sample's words."
    tmp = tmp_path_factory.mktemp('train')
    words = sorted({w for split in load_raw(sample_data()).values() for t in split['text'] for w in t.split()})
    model = tiny_bert(tmp/'tiny-bert', words)
    manifest = prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'data')))
    return tmp, manifest


def test_torchrun_two_workers(prepared):
    tmp, manifest = prepared
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'model'), epochs=2, learning_rate=1e-3,
                          per_device_train_batch_size=8, logging_steps=5)
    cmd = torchrun_command(args, 2)
    r = subprocess.run(cmd, env=launch_env('cpu', 2), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((tmp/'model'/'metrics.json').read_text())
    assert (m['world_size'], m['backend'], m['final_split']) == (2, 'cpu', 'test')
    # 360 rows over 2 workers x 8 per batch = 23 steps an epoch (the sampler pads the last one)
    assert m['train']['steps'] == 2 * 23
    assert m['train']['samples_per_second'] > 0 and m['train']['runtime_s'] > 0
    assert set(m['test']['per_class']) == set(manifest['label_names']) and len(manifest['label_names']) == 6
    assert sum(c['support'] for c in m['test']['per_class'].values()) == manifest['rows']['test']
    assert 0 <= m['test']['f1'] <= 1 and 0 <= m['validation']['accuracy'] <= 1
    assert m['label_names'] == manifest['label_names'] and m['max_length'] == manifest['max_length']
    assert {'torch', 'transformers', 'python'} <= set(m['versions'])
    assert m['args']['bf16'] is False
    # the saved model is complete: pipeline loads it and answers with label names
    from transformers import pipeline
    out = pipeline('text-classification', model=str(tmp/'model'))('i feel wonderful today')
    assert out[0]['label'] in manifest['label_names']


def test_launch_returns_results(prepared):
    tmp, _ = prepared
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'launched'), max_steps=3, logging_steps=1)
    res = launch(args, nproc_per_node=1, instance_type='trn1.32xlarge', echo=False)
    assert res.workers == 1 and res.metrics['train']['steps'] == 3
    assert res.cost_usd == pytest.approx(21.50 * res.wall_s / 3600)
    assert (tmp/'launched'/'train.log').read_text().strip()


def test_bf16_false_means_false(prepared):
    tmp, _ = prepared
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '1', '-m', 'trn_tutorials.train',
           '--dataset_path', str(tmp/'data'), '--output_dir', str(tmp/'bf16'), '--max_steps', '1', '--bf16', 'false']
    r = subprocess.run(cmd, env=launch_env('cpu', 1), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp/'bf16'/'metrics.json').read_text())['args']['bf16'] is False
