"""`trn_tutorials.training.checkpoints`: a checkpoint is sealed (every file listed with its size and sha256) or ignored, a run resumes
from the newest sealed one that its own options wrote, a diverged run names the likely cause, the workers meet only once the
first has sealed, and old checkpoints go only once a newer one is sealed. (Killed at random moments and resumed bit-exactly,
with real processes: tests/test_chaos.py.)"""
import json, os, subprocess, sys
from dataclasses import asdict
from pathlib import Path

import pytest
from fastcore.test import test_eq as eq, test_fail as fails

from local_services import free_port
from trn_tutorials.training.checkpoints import (COMPLETE, RUN_ARGS, checkpoint_complete, checkpoint_problem, checkpoints, diverged,
                                       newest_complete, resume_from, seal_checkpoint, skipped_note)
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.training.arguments import TrainArguments

TORCHRUN_VARS = ('TORCHELASTIC_RUN_ID', 'LOCAL_RANK', 'RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT',
                 'TORCHELASTIC_USE_AGENT_STORE', 'TORCHELASTIC_RESTART_COUNT')
ENV = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS} | {'HF_HUB_OFFLINE': '1', 'USE_TORCH_XLA': '0'}   # CPU workers, as launch_env('cpu')


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
    (lambda d: (d/'optimizer.pt').write_bytes((d/'optimizer.pt').read_bytes()[:1200]), 'optimizer.pt: 1.2 kB of 6 kB written'),
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


def test_diverged_names_the_likely_cause():
    assert diverged('the training loss became nan', 12, 10.0, False) == \
        "the training loss became nan at step 12: --learning_rate 10 is likely too high; use a lower --learning_rate (e.g. 5e-05)"
    assert 'retry with --bf16 false' in diverged('the training loss became inf', 3, 2e-5, True)
    assert 'check the model' in diverged('the training loss became nan', 3, 2e-5, False)


def fake_checkpoint(run, step, complete=True):
    "A sealed checkpoint, or one cut off before its completion record."
    d = run/f'checkpoint-{step}'; d.mkdir(parents=True)
    for f in ('model.safetensors', 'scheduler.pt', 'optimizer.pt'): (d/f).write_bytes(b'x')
    (d/'trainer_state.json').write_text(json.dumps({'global_step': step}))
    if complete: seal_checkpoint(d)


def test_resume_from(tmp_path):
    run = tmp_path/'model'
    for step in (10, 20): fake_checkpoint(run, step)
    fake_checkpoint(run, 30, complete=False)
    eq([(p.name, ok) for p, ok in checkpoints(run)], [('checkpoint-30', False), ('checkpoint-20', True), ('checkpoint-10', True)])
    eq(resume_from(TrainArguments(output_dir=str(run))).name, 'checkpoint-20')
    eq(resume_from(TrainArguments(output_dir=str(run/'new'))), None)
    fails(lambda: resume_from(TrainArguments(output_dir=str(run), resume=False)), contains="pass --resume true")
    (run/'checkpoint-20'/'trainer_state.json').write_text('{"global_st')   # killed while writing the state
    eq(resume_from(TrainArguments(output_dir=str(run))).name, 'checkpoint-10')
    # a checkpoint only continues the run that wrote it
    (run/'checkpoint-10'/RUN_ARGS).write_text(json.dumps(asdict(TrainArguments(output_dir=str(run), learning_rate=1e-4, seed=7))))
    fails(lambda: resume_from(TrainArguments(output_dir=str(run))),
              contains="written by a run with --learning_rate 0.0001 --seed 7, not --learning_rate 5e-05 --seed 42: use --learning_rate 0.0001 --seed 7 to continue it")
    eq(resume_from(TrainArguments(output_dir=str(run), learning_rate=1e-4, seed=7, logging_steps=10)).name, 'checkpoint-10')
    eq(resume_from(TrainArguments(output_dir=str(run), learning_rate=1e-4, seed=7, save_steps=5)).name, 'checkpoint-10')
    fails(lambda: resume_from(TrainArguments(output_dir=str(run), learning_rate=1e-4, seed=7, bf16=True)), contains="--bf16 false, not --bf16 true")
    (run/'checkpoint-10'/RUN_ARGS).unlink()
    eq(resume_from(TrainArguments(output_dir=str(run), seed=3)).name, 'checkpoint-10')


# ------------------------------------------------------------------------------------ 1. seal, then meet
WORKER = r'''
import json, os, sys, time, types
from pathlib import Path
import torch, torch.distributed as dist
from safetensors.torch import save_file
from trn_tutorials.training import checkpoints as train   # `CheckpointGuard` looks up `seal_checkpoint` and `host_store` in its own module
from trn_tutorials.core.processes import die_with_parent

die_with_parent()
out, mode = Path(sys.argv[1]), sys.argv[2]
rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
if mode in ('gloo', 'device'):   # as the Trainer's arguments make it on CPU workers: accelerate's state over a gloo process group
    from accelerate import PartialState
    PartialState(cpu=True)
    assert dist.is_initialized() and PartialState().num_processes == world
if mode == 'device': train.host_store = lambda: None   # the fallback through accelerate's collectives
real_seal = train.seal_checkpoint
def slow_seal(d): time.sleep(4); return real_seal(d)   # a slow volume: fsync and sha256 of a large checkpoint
def broken_seal(d): raise OSError(28, 'No space left on device')
guard = train.CheckpointGuard({'learning_rate': 1000.0})
for case, step in (('slow', 10), ('nan', 20), ('broken', 30), ('slow', 40)):
    d = out/f'checkpoint-{step}'; d.mkdir(parents=True, exist_ok=True)
    # every worker writes its part, as the Trainer does (the first one the weights); the second one is slower
    if rank == 0: save_file({'w': torch.full((4,), float('nan') if case == 'nan' else 1.0)}, str(d/'model.safetensors'))
    else: time.sleep(1)
    (d/f'rng_state_{rank}.pth').write_bytes(b'x' * 100)
    train.seal_checkpoint = {'slow': slow_seal, 'broken': broken_seal}.get(case, real_seal)
    args = types.SimpleNamespace(output_dir=str(out), learning_rate=1000.0, bf16=False, world_size=world, process_index=rank)
    state = types.SimpleNamespace(global_step=step, is_world_process_zero=rank == 0, best_model_checkpoint=None)
    err = None
    try: guard.on_save(args, state, None)
    except Exception as e: err = f'{type(e).__name__}: {e}'
    rec = d/train.COMPLETE
    (out/f'{step}-{rank}.json').write_text(json.dumps({
        'error': err, 'sealed': rec.exists(), 'exists': d.exists(), 'returned': time.time(),
        'files': sorted(json.loads(rec.read_text())['files']) if rec.exists() else None}))
if dist.is_initialized(): dist.barrier(); dist.destroy_process_group()   # a clean exit (gloo may abort one left open)
'''


@pytest.mark.parametrize('mode', ['gloo', 'agent', 'device'])
def test_seal_then_meet(tmp_path, mode):
    """Two real torchrun workers: the second returns from `on_save` only once the first has sealed; a nan checkpoint or a
    failed seal stops both (neither waits forever). `gloo`: with a process group (CPU, GPU, Neuron once transformers made
    its XLA group), still torchrun's store; `agent`: no process group; `device`: no host store, accelerate's collectives."""
    script = tmp_path/'worker.py'; script.write_text(WORKER)
    out = tmp_path/'run'
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2', '--master_addr', '127.0.0.1',
           '--master_port', str(free_port()), str(script), str(out), mode]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=240)
    res = {p.stem: json.loads(p.read_text()) for p in out.glob('*-*.json')}
    assert len(res) == 8, (sorted(res), r.stderr[-3000:])
    for step in (10, 40):   # the slow seal: the second worker left only after the record was there
        first, second = res[f'{step}-0'], res[f'{step}-1']
        assert first['error'] is None and second['error'] is None, (first, second)
        assert second['sealed'], f'checkpoint-{step}: the second worker went on before the first had sealed it'
        assert first['files'] == ['model.safetensors', 'rng_state_0.pth', 'rng_state_1.pth', 'trn_tutorials_args.json'], first   # the second's part is in
    # nan weights: deleted, and both workers stop with the same line
    for rank in (0, 1):
        e = res[f'20-{rank}']
        assert e['error'] and e['error'].startswith('UsageError: the weights became nan or inf at step 20'), (rank, e)
        assert not e['exists'], (rank, e)
    # the first worker fails to seal: it raises, and the second stops too, without a record
    assert res['30-0']['error'].startswith('OSError') and not res['30-0']['sealed']
    assert res['30-1']['error'] and res['30-1']['error'].startswith('UsageError') and 'checkpoint-30' in res['30-1']['error'], res['30-1']
    assert r.returncode == 0, r.stderr[-3000:]


def test_old_checkpoints_go_only_once_a_newer_one_is_sealed(prepared, tmp_path):
    "The Trainer's own rotation deletes old checkpoints before the new one is sealed: a crash there left none sealed with "
    "`save_total_limit 1`. The guard prunes after the seal instead: whenever a checkpoint is written, the last sealed one is there."
    tmp = prepared
    from transformers import AutoModelForSequenceClassification, TrainerCallback
    from trn_tutorials.training.trainer import trainer_class
    from trn_tutorials.training.arguments import training_arguments
    seen = []
    class Watch(TrainerCallback):   # runs before the guard's on_save: the new checkpoint is written, not sealed yet
        def on_save(self, args, state, control, **kw): seen.append([(c.name, ok) for c, ok in checkpoints(args.output_dir)])
    from transformers.utils import is_torch_xla_available
    backend = 'xla' if is_torch_xla_available() else 'cpu'   # the Trn1 stand-in's tests run in-process on torch-xla's device
    model = AutoModelForSequenceClassification.from_pretrained(tmp/'tiny-bert', num_labels=6, ignore_mismatched_sizes=True)
    targs = training_arguments(TrainArguments(output_dir=str(tmp_path/'pruned'), max_steps=6, save_steps=2, save_total_limit=1), backend)
    ds = load_prepared(str(tmp/'data')).splits
    trainer = trainer_class()(model=model, args=targs, train_dataset=ds['train'], eval_dataset=ds['validation'], callbacks=[Watch()])
    trainer.train()
    assert seen == [[('checkpoint-2', False)], [('checkpoint-4', False), ('checkpoint-2', True)],
                    [('checkpoint-6', False), ('checkpoint-4', True)]], seen
    assert [(c.name, ok) for c, ok in checkpoints(targs.output_dir)] == [('checkpoint-6', True)]
