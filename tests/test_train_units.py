"Checks of the train chapter's pieces, moved out of the lesson: arguments, metrics, samplers, checkpoints and resuming."
import json, tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from fastcore.test import test_close as close, test_eq as eq, test_fail as fails

from trn_tutorials.core import UsageError, parse_args
from trn_tutorials.checkpoints import RUN_ARGS, checkpoints, seal_checkpoint, resume_from
from trn_tutorials.samplers import BucketBatchSampler, EvalBatchSampler, planned_steps
from trn_tutorials.arguments import TrainArguments, check_args, training_arguments
from trn_tutorials.progress import (flat_array, split_scores, classification_metrics, majority_baseline, progress_line,
                                    read_progress)

NAMES = ['sadness', 'joy', 'love']


def test_arguments_parse_with_their_types():
    targs = parse_args([TrainArguments], ['--epochs', '2', '--bf16', 'False', '--per_device_train_batch_size', '8'])[0]
    eq((targs.num_train_epochs, targs.bf16, targs.per_device_train_batch_size), (2.0, False, 8))
    eq(parse_args([TrainArguments], ['--lr', '3e-5'])[0].learning_rate, 3e-5)   # the original tutorial's name, an alias
    fails(lambda: parse_args([TrainArguments], ['--learning_rate', 'fast']), exc=SystemExit)


def test_check_args():
    "Numbers are refused when the arguments are made (`TRAIN_LIMITS`); `check_args` keeps what the limits cannot say."
    fails(lambda: TrainArguments(learning_rate=0), contains="--learning_rate 0 is out of range: use a number in (0, 1000]")
    fails(lambda: TrainArguments(num_train_epochs=-1), contains="--num_train_epochs")
    fails(lambda: TrainArguments(max_steps=0), contains="--max_steps 0 is out of range: use 1 or more, or -1 (all epochs)")
    fails(lambda: TrainArguments(save_steps=-1), contains="--save_steps -1 is out of range: use 1 or more, or 0 (no checkpoints)")
    fails(lambda: TrainArguments(save_total_limit=0), contains="--save_total_limit")
    fails(lambda: check_args(TrainArguments(backend='tpu')), contains="--backend 'tpu' is not one of")
    eq(check_args(TrainArguments()).num_train_epochs, 3.0)


def test_metrics_and_baseline():
    m = classification_metrics([0, 0, 1, 2], [0, 1, 1, 2], NAMES)
    eq(m['accuracy'], 0.75)
    close(m['f1'], (2/3*2 + 2/3 + 1)/4)
    eq(m['per_class']['love']['recall'], 1.0)
    eq(m['confusion'], [[1, 1, 0], [0, 1, 0], [0, 0, 1]])
    eq(majority_baseline([1, 1, 0, 2], [0, 1, 1, 1], NAMES)['accuracy'], 0.75)


def test_training_arguments_per_backend(tmp_path):
    ta = training_arguments(TrainArguments(output_dir=str(tmp_path/'a')), 'neuron')
    eq((ta.dataloader_drop_last, ta.eval_do_concat_batches), (True, False))
    ta_cpu = training_arguments(TrainArguments(output_dir=str(tmp_path/'b')), 'cpu')
    eq((ta_cpu.eval_do_concat_batches, ta.use_cpu), (True, False))
    eq((ta.save_strategy, ta.save_steps, ta.save_total_limit), ('steps', 500, 2))
    eq(training_arguments(TrainArguments(output_dir=str(tmp_path/'c'), save_steps=0), 'cpu').save_strategy, 'no')
    eq(ta_cpu.average_tokens_across_devices, False)   # the loss is a batch mean: not scaled by the worker count


def test_attention_per_backend_and_packing():
    "Eager attention on the XLA backends, and on TorchNeuron for packed rows (their 4-D float mask); transformers' default elsewhere."
    from trn_tutorials.train import attention_for
    eq({b: (attention_for(b, False), attention_for(b, True)) for b in ('neuron', 'xla', 'torchneuron', 'cuda', 'cpu')},
       {'neuron': ('eager', 'eager'), 'xla': ('eager', 'eager'), 'torchneuron': (None, 'eager'), 'cuda': (None, None), 'cpu': (None, None)})


def test_check_device_on_torchneuron():
    "The Trainer's device and world size, as the Trainer's arguments report them: `neuron` and every worker, or one line."
    from types import SimpleNamespace as NS
    from trn_tutorials.train import check_device
    seen = lambda device, world: NS(device=NS(type=device), world_size=world)
    eq(check_device(seen('neuron', 2), 'torchneuron', workers=2), None)
    fails(lambda: check_device(seen('cpu', 1), 'torchneuron', workers=1), contains="the Trainer's device is cpu, not `neuron`")
    fails(lambda: check_device(seen('neuron', 1), 'torchneuron', workers=2), contains="WORLD_SIZE 2 asks for 2 workers, but the Trainer's process group holds 1")
    with pytest.raises(UsageError) as e: check_device(seen('cpu', 1), 'torchneuron', workers=1)
    assert '\n' not in str(e.value) and 'neuron-ls' in str(e.value) and 'torchrun --nproc_per_node N -m trn_tutorials.train' in str(e.value)
    eq([check_device(seen('cpu', 1), b, workers=2) for b in ('neuron', 'xla', 'cuda', 'cpu')], [None] * 4)   # the other backends: not checked here


def epoch_rows(samplers): return sorted(i for s in samplers for b in s for i in b)


def test_bucket_sampler_toy():
    toy = [8]*6 + [16]*4
    w0, w1 = BucketBatchSampler(toy, 2, 2, 0), BucketBatchSampler(toy, 2, 2, 1)
    eq(epoch_rows([w0, w1]), list(range(10)))  # every row exactly once across the workers
    eq(len(w0), len(w1))                        # the same number of steps on each worker
    for b in list(w0) + list(w1): eq(len(b), 2 if max(toy[i] for i in b) == 8 else len(b))
    eq(list(BucketBatchSampler(toy, 2, 2, 0, seed=1)) != list(w0), True)
    first = list(w0); w0.set_epoch(1)
    eq(list(w0) != first, True)
    eq(list(BucketBatchSampler(toy, 2, 2, 0)), first)


def test_bucket_sampler_made_up_data():
    fake = np.random.default_rng(0).choice([16, 24, 40, 72], size=1003, p=[.4, .3, .2, .1])
    for n in (1, 2, 3, 4):
        for fill in (False, True):
            ws = [BucketBatchSampler(fake, 16, n, r, fill_last=fill) for r in range(n)]
            rows = epoch_rows(ws)
            eq(set(rows), set(range(1003)))
            eq(len(rows), 1003 if not fill else len(ws[0]) * 16 * n)
            eq(len({len(w) for w in ws}), 1)
            for w in ws: eq(len(w.shapes()) <= 4 + (not fill), True)
    fails(lambda: BucketBatchSampler([8], 4, 2, 0), contains="use fewer workers")
    small = BucketBatchSampler([8]*3 + [16]*40, 16)   # a bucket smaller than one batch joins the next
    eq((len(small), sorted(i for b in small for i in b)), (3, list(range(43))))
    one = BucketBatchSampler([72]*100, 16)
    eq((len(one), one.shapes()), (7, {(16, 72), (4, 72)}))


def test_scores_skip_filler_rows():
    from transformers import EvalPrediction
    batched = EvalPrediction(predictions=[np.eye(3)[[0, 1]], np.eye(3)[[2, 2]]], label_ids=[np.array([0, 1]), np.array([1, -100])])
    eq(flat_array([np.array([1, 2]), np.array([3])]), np.array([1, 2, 3]))
    eq(split_scores(batched, NAMES)['rows'], 3)
    ev = [EvalBatchSampler([8]*5 + [16]*3, 2, 2, r) for r in (0, 1)]
    eq(len(ev[0]), len(ev[1]))


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


def test_planned_steps():
    rows = [16] * 400
    eq(planned_steps(TrainArguments(num_train_epochs=3), rows, 1), 75)                  # 25 batches of 16 per epoch
    eq(planned_steps(TrainArguments(num_train_epochs=3), rows, 2), 39)                  # 13 global batches of 2 x 16, the last partial
    eq(planned_steps(TrainArguments(num_train_epochs=3), rows, 2, fill_last=True), 39)  # XLA fills the partial one up
    eq(planned_steps(TrainArguments(num_train_epochs=0.5), rows, 1), 13)                # rounded up, like the Trainer
    eq(planned_steps(TrainArguments(max_steps=40), rows, 2), 40)


def test_progress_lines_round_trip():
    line = progress_line('eval', step=40, epoch=2.0, loss=1.52, f1=0.41)
    eq(read_progress(line), {'event': 'eval', 'step': 40, 'epoch': 2.0, 'loss': 1.52, 'f1': 0.41})
    eq(read_progress('{"loss": 1.52}'), None)                       # the Trainer's own dicts are not progress lines
    eq(read_progress(line[:-5]), None)                              # nor is a line cut short
