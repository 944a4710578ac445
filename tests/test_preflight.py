"""Checks of `trn_tutorials.training.preflight`: the output folder, the disk's room, the worker count, and `preflight` itself,
the one order of checks every entry that starts a run makes. How often a two-worker `trn-tutorials train` reads the prepared
folder (once in each process) is counted in tests/test_chaos.py, whose first run is one."""
import os, shutil
from pathlib import Path

import pytest
from fastcore.test import test_eq as eq, test_fail as fails

from trn_tutorials.backends import Accelerator
from trn_tutorials.core.options import UsageError
from trn_tutorials.core.processes import free_port
from trn_tutorials.data.prepared import Prepared
from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.training.preflight import Run, check_output_dir, check_space, preflight, workers

CPU = Accelerator('cpu', 1, 'cpu')


# --------------------------------------------------------------------------------------------- the output folder, the disk
def test_check_output_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_output_dir(TrainArguments(dataset_path='data', output_dir='runs/model')) == Path('runs/model')
    for out, words in (('data', 'is the prepared data folder data'), ('data/model', 'is inside the prepared data folder data'),
                       ('./data/../data/m', 'inside the prepared data folder'), ('', '--output_dir is empty')):
        with pytest.raises(UsageError, match=words): check_output_dir(TrainArguments(dataset_path='data', output_dir=out))
    for out, words in (('runs', 'holds the prepared data folder'), ('.', 'holds the prepared data folder'),
                       ('runs/data', 'is the prepared data folder'), ('runs/data/m', 'inside the prepared data folder')):
        with pytest.raises(UsageError, match=words) as e: check_output_dir(TrainArguments(dataset_path='runs/data', output_dir=out))
        assert f"--output_dir {tmp_path/'runs'/'data-model'}" in str(e.value), e.value   # data and model never nest: a folder beside
    assert list(tmp_path.iterdir()) == [], 'the check wrote nothing'


def test_free_space(prepared, tmp_path, monkeypatch):
    args = TrainArguments(dataset_path=str(prepared/'data'), output_dir=str(tmp_path/'space'))
    assert check_space(args, str(prepared/'tiny-bert')) is None and check_space(args, 'bert-base-uncased') is None   # a Hub id: not known
    monkeypatch.setattr(shutil, 'disk_usage', lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(UsageError, match=r'the disk holding .*space has 1 kB free, and this run writes about [\d.]+ [kMG]B'):
        check_space(args, str(prepared/'tiny-bert'))


# -------------------------------------------------------------------------------------------------------- workers
def test_workers():
    trn1_2xl = Accelerator('neuron', 2, '2 NeuronCore(s)')
    eq(workers(acc=trn1_2xl), 2)
    fails(lambda: workers(32, trn1_2xl), contains="use --nproc_per_node 2 or fewer")
    eq(workers(acc=CPU), 1)
    trn1_32 = Accelerator('neuron', 32, '32 NeuronCore(s)')
    assert [workers(n, trn1_32) for n in (1, 2, 8, 32)] == [1, 2, 8, 32]
    for n in (3, 4, 16): fails(lambda: workers(n, trn1_32), contains="1, 2, 8, 32")
    fails(lambda: workers(2, CPU, 'xla'), contains="--nproc_per_node 1")
    eq(1024 < free_port() < 65536, True)


def test_workers_of_the_cpu_on_purpose_count_cpu_cores_on_a_trn1_too():
    "A demo with backend='cpu' on a Trn1 (one NeuronCore visible): one worker by default, up to the CPU cores, not the NeuronCores."
    one_core = Accelerator('neuron', 1, '1 NeuronCore(s)')
    eq(workers(acc=one_core, backend='cpu'), 1)
    eq(workers(2, one_core, 'cpu'), 2)
    fails(lambda: workers(10_000, one_core, 'cpu'), contains=f"use --nproc_per_node {os.cpu_count()} or fewer")
    eq(workers(acc=Accelerator('neuron', 2, '2 NeuronCore(s)'), backend='cpu'), 1)


# ------------------------------------------------------------------------------------------------------ preflight
def test_preflight_of_each_entry(prepared, tmp_path):
    "A launch's (the machine counted), a worker's (its world size given) and a SageMaker job's (the data only): one `Run` each."
    args = TrainArguments(dataset_path=str(prepared/'data'), output_dir=str(tmp_path/'model'), per_device_eval_batch_size=8)
    run = preflight(args, 2, acc=CPU)
    assert isinstance(run, Run) and isinstance(run.data, Prepared) and (run.args.backend, run.workers) == ('cpu', 2)
    assert run.output_dir == tmp_path/'model' and run.model_id == run.data.model_id and run.batch_note is None
    assert preflight(args, world_size=3).workers == 3
    job = preflight(args, here=False)
    assert (job.workers, job.output_dir, job.data.rows) == (None, None, run.data.rows)
    assert not (tmp_path/'model').exists(), 'the preflight writes nothing'
    msg = str(pytest.raises(UsageError, preflight, TrainArguments(dataset_path=str(prepared/'data'), output_dir=str(tmp_path/'m'),
                                                                  per_device_train_batch_size=512), acc=CPU).value)
    assert 'more than the 360 training rows' in msg and '\n' not in msg, msg
    assert run.batch_note is None and preflight(TrainArguments(dataset_path=str(prepared/'data'), output_dir=str(tmp_path/'m'),
                                                               per_device_eval_batch_size=512), acc=CPU).batch_note.startswith('note:')
