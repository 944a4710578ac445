"A worker's end reaches whoever started it: its failure as torchrun's error record, SIGTERM and SIGHUP as Ctrl-C, with real torchrun runs."
import os, re, shlex, signal, subprocess, time
from pathlib import Path

import pytest

from trn_tutorials.arguments import TrainArguments
from trn_tutorials.core import UsageError
from trn_tutorials.data import DataArguments, prepare
from trn_tutorials.data_files import sample_data
from trn_tutorials.launch import LaunchError, free_port, launch, launch_env, torchrun_command
from trn_tutorials.torchrun import failure_records
from trn_tutorials.train import ERROR_PREFIX
from trn_tutorials.checkpoints import checkpoints

OFFLINE = ("import os\n"
           "if os.environ.get('FAIL_OFFLINE'):\n"
           "    import transformers\n"
           "    from huggingface_hub.errors import OfflineModeIsEnabled\n"
           "    def train(self, *a, **k): raise OfflineModeIsEnabled('Cannot reach https://huggingface.co/api/models/m: offline mode is enabled.')\n"
           "    transformers.Trainer.train = train\n")


def test_a_failure_named_unlike_an_error_reaches_launch_as_the_workers_record(prepared, tmp_path, monkeypatch):
    "huggingface_hub's `OfflineModeIsEnabled` ends in neither Error nor Exception: read from the log it was lost, from the record it is named."
    (tmp_path/'sitecustomize.py').write_text(OFFLINE)
    monkeypatch.setenv('PYTHONPATH', str(tmp_path)); monkeypatch.setenv('FAIL_OFFLINE', '1')
    args = TrainArguments(dataset_path=str(prepared/'data'), output_dir=str(tmp_path/'m'), max_steps=2, backend='cpu')
    with pytest.raises(LaunchError) as e: launch(args, nproc_per_node=2, echo=False)
    assert e.value.cause == 'OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/m: offline mode is enabled.', e.value
    assert str(e.value).endswith(f"a worker failed with {e.value.cause}") and '\n' not in str(e.value), str(e.value)


def test_failure_records_read_torchruns_error_files(prepared, tmp_path):
    "Each worker's record, first failure first: a worker's bad input comes as `UsageError` with its one line."
    logs = tmp_path/'logs'
    args = TrainArguments(dataset_path=str(prepared/'data'), output_dir=str(tmp_path/'m'), max_steps=2, backend='cpu',
                          per_device_train_batch_size=5000)   # refused by each worker, after torchrun started it
    env = launch_env('cpu', 2) | {'PET_LOG_DIR': str(logs)}
    r = subprocess.run(torchrun_command(args, 2), env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    recs = failure_records(logs)
    assert sorted(x['rank'] for x in recs) == [0, 1] and {x['error'] for x in recs} == {'UsageError'}, recs
    said = [l[len(ERROR_PREFIX):] for l in r.stderr.splitlines() if l.startswith(ERROR_PREFIX)]
    assert recs[0]['message'] == said[0], (recs, said)
    assert failure_records(tmp_path/'nothing-here') == []


def _tiny_run(prepared, tmp_path, name):
    args = TrainArguments(dataset_path=str(prepared/'data'), output_dir=str(tmp_path/name), num_train_epochs=6, learning_rate=1e-3,
                          save_steps=4, logging_steps=1, backend='cpu')
    env = launch_env('cpu', 2) | {'PET_MASTER_PORT': str(free_port())}
    return args, env


@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_to_torchrun_says_what_was_kept_and_the_command_continues(prepared, tmp_path, sig):
    "A SageMaker stop or a spot interruption sends SIGTERM to torchrun: the first worker says in one line what was kept and how to go on."
    args, env = _tiny_run(prepared, tmp_path, 'm')
    cmd = torchrun_command(args, 2)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    t0 = time.time()
    while not any(ok for _, ok in checkpoints(args.output_dir)):
        assert p.poll() is None and time.time() - t0 < 300, p.stderr.read()[-3000:] if p.poll() is not None else 'no checkpoint'
        time.sleep(0.05)
    # while it runs, its data cannot be replaced: each node's first worker holds it for reading
    with pytest.raises(UsageError, match=f"{prepared/'data'} is being read by pid"):
        prepare(DataArguments(data=sample_data(), model_id=str(prepared/'tiny-bert'), dataset_path=str(prepared/'data'), buckets=2))
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    ours = [l for l in err.splitlines() if l.startswith(ERROR_PREFIX)]
    assert len(ours) == 1, err[-4000:]   # the first worker speaks; the other ends as quietly
    name = signal.Signals(sig).name
    m = re.match(rf"{re.escape(ERROR_PREFIX)}stopped by {name}: kept (\S+/checkpoint-\d+), the newest complete checkpoint; run `(.+)` to continue$",
                 ours[0])
    assert m and Path(m[1]).is_dir(), ours[0]
    again = shlex.split(m[2])
    assert again[:5] == ['torchrun', '--nproc_per_node', '2', '-m', 'trn_tutorials.train'], again
    r = subprocess.run(again, env=env, capture_output=True, text=True, timeout=600)   # followed as printed: it continues
    assert r.returncode == 0, r.stderr[-3000:]
    import json
    assert json.loads((Path(args.output_dir)/'metrics.json').read_text())['train']['resumed_from'], r.stderr[-2000:]
