"""The SageMaker training job in the training image's versions, started the way the image starts it, on two nodes.

The container side runs in `$TRN_TUTORIALS_CONTAINER`, a venv holding `pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.30.0`'s
versions (tools/environments.toml, table sm-training: Python 3.12, torch 2.9.0 + torch-xla 2.9.0 standing in for
torch-neuronx, transformers 4.56.2, datasets 3.0.0, numpy 1.26.4); `tools/test.sh` gives each run a fresh copy, so the
job's `pip install -r requirements.txt` may change it. The host side (the SDK's `ModelTrainer`, moto) runs in this
pytest's venv. `SageMakerStandIn.run_container` (tests/local_services.py) runs what the SDK uploaded: the job's own
entrypoint, `sm_drivers/sm_train.sh` (environment.py, sm_training.env, the requirements, SageMaker's torchrun driver),
once per host, two hosts on 127.0.0.1.

Backend: cpu (gloo). The stand-in has no torch-neuronx, so `--backend auto` resolves to the CPU here, as it resolves to
neuron in the real image; torch-xla's CPU device (`--backend xla`) runs one worker only (no cross-process collectives
on the CPU), and this job runs two per node.
"""
import json, os, subprocess, time
from pathlib import Path

import boto3, pytest

from local_services import SageMakerStandIn

CONTAINER = os.environ.get('TRN_TUTORIALS_CONTAINER')
IMAGE = {'torch': '2.9.0', 'torch-xla': '2.9.0', 'transformers': '4.56.2', 'datasets': '3.0.0', 'numpy': '1.26.4'}


@pytest.fixture(autouse=True)
def container():
    if not CONTAINER:
        pytest.fail("TRN_TUTORIALS_CONTAINER is not set: `STAGES=sm-training bash tools/test.sh` runs these tests in the training image's stand-in",
                    pytrace=False)
    return Path(CONTAINER)/'bin'/'python'


def freeze(python) -> dict:
    out = subprocess.run([str(python), '-m', 'pip', 'freeze', '--all'], capture_output=True, text=True, check=True).stdout
    return {l.split('==')[0].lower(): l.split('==')[1] for l in out.splitlines() if '==' in l}


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
    "The sample prepared here, with this venv's (newest) datasets, for a tiny BERT."
    from trn_tutorials.models import tiny_bert
    from trn_tutorials.data.files import EMOTION_LABELS
    from trn_tutorials.data.sources import load_raw, sample_data
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    tmp = tmp_path_factory.mktemp('sm-training')
    raw = load_raw(sample_data())
    words = sorted({w for split in raw.values() for t in split['text'] for w in t.split()})
    tiny_bert(tmp/'tiny-bert', words, labels=EMOTION_LABELS)
    prepare(DataArguments(data=sample_data(), model_id=str(tmp/'tiny-bert'), dataset_path=str(tmp/'data')))
    return tmp


def test_the_stand_in_holds_the_images_versions(container):
    got = freeze(container)
    assert {k: got.get(k) for k in IMAGE} == IMAGE
    r = subprocess.run([str(container), '-c', 'import datasets, transformers, torch'], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (f"the stand-in's datasets {IMAGE['datasets']} does not import (pyarrow {got.get('pyarrow')} with numpy "
                               f"{got.get('numpy')}? pyarrow 22.0.0 imports with numpy 1.26): {r.stderr.strip().splitlines()[-1:]}")


def test_a_folder_prepared_here_loads_in_the_images_datasets(container, prepared, tmp_path):
    "The folder prepare wrote with this venv's datasets loads in datasets 3.0.0; the same rows saved plainly by it do not."
    import datasets
    read = ("import sys, datasets; from datasets import load_from_disk; d = load_from_disk(sys.argv[1]); "
            "print(datasets.__version__, d['train'].features['input_ids'].length, len(d['train'][0]['input_ids']))")
    r = subprocess.run([str(container), '-c', read, str(prepared/'data')], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    version, length, row = r.stdout.split()
    assert version == '3.0.0' and int(length) == int(row) > 0, r.stdout
    print(f"prepared with datasets {datasets.__version__}, loaded with datasets {version}")
    datasets.load_from_disk(str(prepared/'data')).save_to_disk(str(tmp_path/'plain'))
    r = subprocess.run([str(container), '-c', read, str(tmp_path/'plain')], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0   # huggingface/datasets#7739: what the check in submit refuses


def test_a_two_node_job_through_the_images_start_up(container, prepared, moto_server, tmp_path, monkeypatch):
    from trn_tutorials.training.launch import Results
    from trn_tutorials.training.arguments import TrainArguments
    from trn_tutorials.sagemaker.training_job import JobArguments, job_results, submit, wait_job
    monkeypatch.chdir(tmp_path)
    before = freeze(container)
    sm_ = SageMakerStandIn()
    try:
        args = TrainArguments(dataset_path=str(prepared/'data'), max_steps=4, logging_steps=2, save_steps=2, learning_rate=3e-3,
                              per_device_train_batch_size=8, per_device_eval_batch_size=8)
        name = submit(args, JobArguments(role=sm_.role(), bucket=sm_.bucket(), instance_count=2, run_id='twonodes'))
        t0 = time.monotonic()
        code = sm_.run_container(name, str(container), timeout=900)
        seconds = time.monotonic() - t0
        log = '\n'.join(sm_.output)
        if os.environ.get('TRN_TUTORIALS_LOG_DIR'):
            Path(os.environ['TRN_TUTORIALS_LOG_DIR'], 'sm-training-two-node-job.log').write_text(log + '\n')
        tail = [l for l in sm_.output if l.startswith('algo-1: ')][-45:] + [l for l in sm_.output if l.startswith('algo-2: ')][-8:]
        print(f"\n--- the two-node job's log ({seconds:.0f} s; each host's last lines):\n" + '\n'.join(tail))
        assert code == 0, log[-6000:]
        # the image's start-up, step by step, on each host
        for h in ('algo-1', 'algo-2'):
            mine = [l[len(h) + 2:] for l in sm_.output if l.startswith(h + ': ')]
            text = '\n'.join(mine)
            for step in ('Setting up environment variables', 'Installing requirements', 'Running Torchrun Driver',
                         'Training Container Execution Completed'):
                assert step in text, (h, step)
            rank = h[-1] == '2'
            assert f'--nnodes=2 --nproc_per_node=2 --master_addr=127.0.0.1' in text and f'--node_rank={int(rank)}' in text, h
        # pip install -r requirements.txt as the image runs it: transformers 4.57, nothing else of the image's moved
        after = freeze(container)
        changed = {k: (before.get(k), after.get(k)) for k in set(before) | set(after) if before.get(k) != after.get(k)}
        print('pip install -r requirements.txt changed:', ', '.join(f'{k} {a}->{b}' for k, (a, b) in sorted(changed.items())))
        assert after['transformers'].startswith('4.57.')
        assert {k: after[k] for k in ('torch', 'torch-xla', 'numpy', 'datasets')} == {k: IMAGE[k] for k in ('torch', 'torch-xla', 'numpy', 'datasets')}
        # model.tar.gz, read back as a reader would
        d = wait_job(name, log='train.log', poll_s=0.1, echo=False)
        r = job_results(name, 'dl', description=d)
        assert isinstance(r, Results) and r.workers == 4 and r.backend == 'cpu'
        m = r.metrics
        assert m['world_size'] == 4 and len(m['train']['shapes_per_worker']) == 4 and m['train']['steps'] == 4
        assert m['versions']['transformers'].startswith('4.57.') and m['versions']['datasets'] == '3.0.0'
        assert (Path(r.output_dir)/'model.safetensors').exists()
        streams = boto3.client('logs').describe_log_streams(logGroupName='/aws/sagemaker/TrainingJobs', logStreamNamePrefix=name)['logStreams']
        assert sorted(s['logStreamName'].split('/')[1].rsplit('-', 1)[0] for s in streams) == ['algo-1', 'algo-2']
    finally: sm_.stop()
