"Issue 15, the training script: checkpoints complete or ignored, a diverged run stopped, tokenizer/model/batch/folder checks, the lock."
import json, os, subprocess, sys
from pathlib import Path

import pytest

from trn_tutorials.core import UsageError, lock_path
from trn_tutorials.models import tiny_bert
from trn_tutorials.data_files import EMOTION_LABELS, load_raw, sample_data
from trn_tutorials.data import DataArguments, prepare
from trn_tutorials.checkpoints import (COMPLETE, checkpoint_complete, checkpoint_problem, checkpoints, diverged,
                                       newest_complete, resume_from, seal_checkpoint, skipped_note)
from trn_tutorials.train import ERROR_PREFIX, LOCK_ENV, check_batch, check_model, check_output_dir
from trn_tutorials.arguments import TrainArguments

ENV = dict(os.environ, HF_HUB_OFFLINE='1')


# ------------------------------------------------------------------------------------------------ checkpoints
def ckpt(run:Path, step:int, seal:bool=True) -> Path:
    "A checkpoint folder with Trainer-like files of a few sizes, sealed unless told otherwise."
    d = run/f'checkpoint-{step}'; d.mkdir(parents=True)
    for name, n in (('model.safetensors', 3000), ('optimizer.pt', 6000), ('scheduler.pt', 100)): (d/name).write_bytes(bytes(range(256)) * (n // 256) + b'x' * (n % 256))
    (d/'trainer_state.json').write_text(json.dumps({'global_step': step, 'max_steps': 100}))
    if seal: seal_checkpoint(d)
    return d


def test_seal_lists_every_file(tmp_path):
    d = ckpt(tmp_path, 10)
    rec = json.loads((d/COMPLETE).read_text())
    assert rec['step'] == 10 and sorted(rec['files']) == ['model.safetensors', 'optimizer.pt', 'scheduler.pt', 'trainer_state.json']
    assert rec['files']['optimizer.pt']['size'] == 6000 and len(rec['files']['optimizer.pt']['sha256']) == 64
    assert checkpoint_complete(d) and checkpoint_problem(d, verify=True) is None
    assert [p.name for p in d.iterdir() if p.name.startswith('.')] == []   # no temporary file left


@pytest.mark.parametrize('damage, why', [
    (lambda d: (d/'optimizer.pt').write_bytes((d/'optimizer.pt').read_bytes()[:1200]), 'optimizer.pt: 1.2 kB of 6.0 kB written'),
    (lambda d: (d/'scheduler.pt').unlink(), 'scheduler.pt is missing'),
    (lambda d: (d/COMPLETE).unlink(), 'no completion record'),
    (lambda d: (d/COMPLETE).write_text('{"step": 1'), f'its {COMPLETE} is unreadable'),
    (lambda d: (d/COMPLETE).write_text((d.parent/'checkpoint-10'/COMPLETE).read_text()), f'its {COMPLETE} is for step 10, not this folder'),
])
def test_an_incomplete_checkpoint_is_skipped(tmp_path, damage, why):
    "Truncated, missing file, no record, a broken record, another step's record: the run falls back to the previous checkpoint."
    ckpt(tmp_path, 10); bad = ckpt(tmp_path, 20)
    damage(bad)
    assert checkpoint_problem(bad) is not None and why in checkpoint_problem(bad)
    assert [(p.name, ok) for p, ok in checkpoints(tmp_path)] == [('checkpoint-20', False), ('checkpoint-10', True)]
    start, skipped = newest_complete(tmp_path)
    assert start.name == 'checkpoint-10' and skipped_note(skipped, start) == f"warning: checkpoint-20 is incomplete ({why}): resuming from checkpoint-10"
    assert resume_from(TrainArguments(output_dir=str(tmp_path))).name == 'checkpoint-10'


def test_a_changed_byte_is_caught_by_the_checksum(tmp_path):
    "Same size, one byte different: the sizes pass, the sha256 of the checkpoint a run resumes from does not."
    ckpt(tmp_path, 10); d = ckpt(tmp_path, 20)
    b = bytearray((d/'optimizer.pt').read_bytes()); b[100] ^= 1; (d/'optimizer.pt').write_bytes(bytes(b))
    assert checkpoint_complete(d)
    assert checkpoint_problem(d, verify=True) == 'optimizer.pt has changed since it was written (sha256 differs)'
    start, skipped = newest_complete(tmp_path)
    assert start.name == 'checkpoint-10' and [p.name for p, _ in skipped] == ['checkpoint-20']
    assert skipped_note([], start) is None
    assert skipped_note(skipped, None).endswith(': starting from the beginning')


# --------------------------------------------------------------------------------------------- folders, batch
def test_check_output_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_output_dir(TrainArguments(dataset_path='data', output_dir='runs/model')) == Path('runs/model')
    for out, words in (('data', 'is the prepared data folder data'), ('data/model', 'is inside the prepared data folder data'),
                       ('./data/../data/m', 'inside the prepared data folder'), ('', '--output_dir is empty')):
        with pytest.raises(UsageError, match=words): check_output_dir(TrainArguments(dataset_path='data', output_dir=out))
    with pytest.raises(UsageError, match='holds the prepared data folder'):   # the data inside the model folder: they never nest
        check_output_dir(TrainArguments(dataset_path='runs/data', output_dir='runs'))
    assert list(tmp_path.iterdir()) == [], 'the check wrote nothing'


def test_check_batch():
    rows = {'train': 360, 'validation': 72, 'test': 72}
    assert check_batch(TrainArguments(per_device_train_batch_size=16, per_device_eval_batch_size=8), rows, 2) is None
    with pytest.raises(UsageError, match=r'--per_device_train_batch_size 256 on 2 worker\(s\) makes batches of 512 rows, more than the 360 '
                                         r'training rows of .*: use --per_device_train_batch_size 180 or less'):
        check_batch(TrainArguments(per_device_train_batch_size=256), rows, 2)
    with pytest.raises(UsageError, match=r'use 3 worker\(s\) or fewer'): check_batch(TrainArguments(per_device_train_batch_size=1), {'train': 3}, 4)
    note = check_batch(TrainArguments(per_device_eval_batch_size=64), {'manifest': 1, 'rows': rows}, 2)
    assert note.startswith('note: evaluation batches of 128 rows') and 'the 72 validation and 72 test rows' in note


def test_diverged_names_the_likely_cause():
    assert diverged('the training loss became nan', 12, 10.0, False) == \
        "the training loss became nan at step 12: --learning_rate 10 is likely too high; use a lower --learning_rate (e.g. 5e-05)"
    assert 'retry with --bf16 false' in diverged('the training loss became inf', 3, 2e-5, True)
    assert 'check the model' in diverged('the training loss became nan', 3, 2e-5, False)


# -------------------------------------------------------------------------------------------- model vs data
@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    "Two tiny BERTs of different vocabularies, data prepared with the first."
    tmp = tmp_path_factory.mktemp('tiny')
    words = sorted({w for split in load_raw(sample_data()).values() for t in split['text'] for w in t.split()})
    a = tiny_bert(tmp/'tiny-a', words, labels=EMOTION_LABELS)
    b = tiny_bert(tmp/'tiny-b', words[:40], labels=EMOTION_LABELS)
    manifest = prepare(DataArguments(data=sample_data(), model_id=a, dataset_path=str(tmp/'data')))
    return tmp, a, b, manifest


def test_check_model(tiny):
    tmp, a, b, manifest = tiny
    args = lambda **kw: TrainArguments(dataset_path=str(tmp/'data'), **kw)
    assert check_model(args(), manifest) is None and check_model(args(model_id=a), manifest) is None
    n = manifest['tokenizer']['vocab_size'] if 'tokenizer' in manifest else None
    with pytest.raises(UsageError) as e: check_model(args(model_id=b), manifest)
    msg = str(e.value)
    assert 'was prepared with the tokenizer of' in msg and 'tiny-a' in msg and 'tiny-b' in msg and f'vocabulary {n} vs 45' in msg, msg
    assert msg.endswith(f"prepare it again for that model with `trn-tutorials prep --dataset_path {tmp/'data'} --data {sample_data()} "
                        f"--model_id {b}`, or pass --allow_tokenizer_mismatch true"), msg
    # allowed deliberately: a tokenizer that differs only in its special ids trains; a vocabulary too small for the data never does
    with pytest.raises(UsageError, match=f'tiny-b has 45 token embeddings, fewer than the {n} token ids'):
        check_model(args(model_id=b, allow_tokenizer_mismatch=True), manifest)
    old = {k: v for k, v in manifest.items() if k != 'tokenizer'}   # a manifest from before the tokenizer was recorded
    with pytest.raises(UsageError, match='vocabulary'): check_model(args(model_id=b), old)
    assert check_model(args(model_id=b), {**old, 'model_id': str(tmp/'gone')}) is None   # the data's model is gone: nothing to compare


def test_mismatch_refused_before_anything_is_written(tiny):
    tmp, a, b, manifest = tiny
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.train', '--dataset_path', str(tmp/'data'), '--output_dir', str(tmp/'out-b'),
                        '--model_id', b], capture_output=True, text=True, env=ENV, cwd=tmp, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().startswith(ERROR_PREFIX) and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp/'out-b').exists() and not lock_path(tmp/'out-b').exists() and not (tmp/'train.log').exists()


# ------------------------------------------------------------------------------------ a run that diverges
@pytest.mark.parametrize('where, opts', [('at a logged loss', ['--logging_steps', '5', '--save_steps', '0']),
                                         ('before sealing a checkpoint', ['--logging_steps', '500', '--save_steps', '15'])])
def test_a_nan_run_stops_and_saves_nothing(tiny, where, opts):
    "A learning rate of 1000 makes the tiny BERT's loss nan within 15 steps: one line, status 2, nothing saved or sealed."
    tmp, a, b, manifest = tiny
    out = tmp/f"nan-{opts[-1]}"
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.train', '--dataset_path', str(tmp/'data'), '--output_dir', str(out),
                        '--learning_rate', '1000', '--max_steps', '40', *opts], capture_output=True, text=True, env=ENV, cwd=tmp, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and 'Traceback' not in r.stderr, r.stderr[-3000:]
    want = 'the training loss became nan' if where == 'at a logged loss' else 'the weights became nan or inf at step 15'
    assert lines[0].startswith(ERROR_PREFIX + want) and '--learning_rate 1000 is likely too high; use a lower --learning_rate (e.g. 5e-05)' in lines[0], lines
    assert not (out/'metrics.json').exists() and not (out/'model.safetensors').exists()
    assert not list(out.glob('checkpoint-*/' + COMPLETE)) and not list(out.glob('checkpoint-*')), list(out.iterdir())


# -------------------------------------------------------------------------------------------------- the lock
HOLD = """import sys, time
from trn_tutorials.core import die_with_parent, folder_lock
die_with_parent()
with folder_lock(sys.argv[1], 'output_dir'): print('held', flush=True); time.sleep(120)"""

def test_the_lock(tiny):
    "A busy output_dir is refused; the launcher's own lock (LOCK_ENV naming the folder) is not mistaken for another run."
    tmp, a, b, manifest = tiny
    out = tmp/'locked'
    holder = subprocess.Popen([sys.executable, '-c', HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == 'held'
        cmd = [sys.executable, '-m', 'trn_tutorials.train', '--dataset_path', str(tmp/'data'), '--output_dir', str(out), '--max_steps', '1', '--save_steps', '0']
        r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
        assert r.returncode == 2 and f'{out} is in use by pid {holder.pid}' in r.stderr and 'trn-tutorials stop --output_dir' in r.stderr, r.stderr
        r = subprocess.run(cmd, capture_output=True, text=True, env=ENV | {LOCK_ENV: os.path.abspath(out)}, timeout=300)
        assert r.returncode == 0 and (out/'metrics.json').exists(), r.stderr[-3000:]
    finally: holder.kill(); holder.wait()
