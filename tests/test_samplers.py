"""`trn_tutorials.training.samplers`: the multi-worker rules, checked on the samplers and the data loaders for 2, 8 and 32 workers (a
trn1.2xlarge and a trn1.32xlarge): the same input shape on every worker at every step, every training row used once per epoch
(a few twice when the last batch is filled up), every evaluation row scored exactly once; the steps a run plans, and the
warning when the global batch leaves too few of them."""
import numpy as np
import pytest
from fastcore.test import test_eq as eq, test_fail as fails
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.training.samplers import BucketBatchSampler, EvalBatchSampler, PaddedRows, planned_steps

rng = np.random.default_rng(0)
LENGTHS = rng.choice([16, 24, 40, 72], size=2003, p=[.4, .3, .2, .1])   # a bucketed split, unsorted


class Split(list):
    "A stand-in for a tokenized split: rows of input ids of their bucket's length."
    def __init__(self, lengths):
        super().__init__({'input_ids': [7] * int(L), 'attention_mask': [1] * int(L), 'labels': i % 6} for i, L in enumerate(lengths))


class Tok:   # what DataCollatorWithPadding needs of a tokenizer
    pad_token_id, padding_side, model_input_names = 0, 'right', ['input_ids', 'attention_mask']
    def pad(self, features, **kw):
        import torch
        L = max(len(f['input_ids']) for f in features)
        assert all(len(f['input_ids']) == L for f in features), "rows of one batch must already have one length"
        return {k: torch.tensor([f[k] for f in features]) for k in features[0]}


def loader(ds, sampler): return DataLoader(PaddedRows(ds, 0), batch_sampler=sampler, collate_fn=DataCollatorWithPadding(Tok()))


@pytest.mark.parametrize('workers', [2, 8, 32])
@pytest.mark.parametrize('fill', [False, True])
def test_training_batches(workers, fill):
    samplers = [BucketBatchSampler(LENGTHS, 8, workers, r, seed=3, fill_last=fill, pad_to_batch=True) for r in range(workers)]
    for epoch in (0, 1):
        for s in samplers: s.set_epoch(epoch)
        steps = [list(loader(Split(LENGTHS), s)) for s in samplers]
        assert len({len(w) for w in steps}) == 1                       # the same number of steps on every worker
        for step in zip(*steps):
            shapes = {tuple(b['input_ids'].shape) for b in step}
            if fill: assert len(shapes) == 1, shapes                    # XLA: one shape on every worker, every step
            else: assert len({L for _, L in shapes}) == 1, shapes      # the same length; the last batch may split unevenly
        used = [i for s in samplers for b in s for i, _ in b]
        assert set(used) == set(range(len(LENGTHS)))                    # every row, every epoch
        if not fill: assert len(used) == len(LENGTHS)                   # exactly once
        else: assert len(used) - len(LENGTHS) < 8 * workers             # a few twice, to fill the last batch


@pytest.mark.parametrize('workers', [2, 8, 32])
def test_evaluation_batches(workers):
    order = np.argsort(LENGTHS, kind='stable')       # the data chapter sorts evaluation splits by length
    lengths = LENGTHS[order]
    ds = Split(lengths)
    samplers = [EvalBatchSampler(lengths, 64, workers, r) for r in range(workers)]
    steps = [list(loader(ds, s)) for s in samplers]
    assert len({len(w) for w in steps}) == 1
    scored = []
    for step in zip(*steps):
        assert len({tuple(b['input_ids'].shape) for b in step}) == 1   # one shape on every worker
        assert all(b['input_ids'].shape[0] == 64 for b in step)          # full batches only: one graph per bucket length
        for w, b in enumerate(step): scored += [(w, int(x)) for x in b['labels'] if x >= 0]
    assert len(scored) == len(ds)                                       # every row scored once, fillers never
    assert len(samplers[0]) <= len(set(lengths.tolist())) + len(ds) // (64 * workers)


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


def test_planned_steps():
    rows = [16] * 400
    eq(planned_steps(TrainArguments(num_train_epochs=3), rows, 1), 75)                  # 25 batches of 16 per epoch
    eq(planned_steps(TrainArguments(num_train_epochs=3), rows, 2), 39)                  # 13 global batches of 2 x 16, the last partial
    eq(planned_steps(TrainArguments(num_train_epochs=3), rows, 2, fill_last=True), 39)  # XLA fills the partial one up
    eq(planned_steps(TrainArguments(num_train_epochs=0.5), rows, 1), 13)                # rounded up, like the Trainer
    eq(planned_steps(TrainArguments(max_steps=40), rows, 2), 40)


# ------------------------------------------------------------------------- 3. too few steps for the global batch
def test_few_steps_warning_numbers():
    from trn_tutorials.training.samplers import MIN_OPTIMIZER_STEPS, REFERENCE_GLOBAL_BATCH, few_steps_warning, planned_steps
    assert (MIN_OPTIMIZER_STEPS, REFERENCE_GLOBAL_BATCH) == (200, 32)
    args = TrainArguments(num_train_epochs=3, per_device_train_batch_size=16)
    # emotion on a trn1.32xlarge: 16,000 rows in global batches of 32 x 16 = 512: 31 full ones and one of 128 rows an epoch
    assert planned_steps(args, [66] * 16000, 32) == 96
    w = few_steps_warning(args, 16000, 32)
    assert w and '\n' not in w and w.startswith('warning: '), w
    for part in ('96 optimizer steps', '16000 training rows', '32 workers', '512', '200',
                 '8 workers', '--per_device_train_batch_size 4', '--num_train_epochs 7', '--learning_rate'):
        assert part in w, (part, w)
    assert few_steps_warning(args, 16000, 2) is None            # the recipe: 2 x 16, 1500 steps
    assert few_steps_warning(args, 360, 2) is None              # few steps, but a global batch of 32: nothing to scale
    assert few_steps_warning(TrainArguments(num_train_epochs=1), 16000, 4) is None   # 64 rows a step, 250 steps
    assert few_steps_warning(TrainArguments(num_train_epochs=1), 16000, 8) is not None   # 128 rows a step, 125 steps
    assert few_steps_warning(TrainArguments(max_steps=50), 16000, 32) is None   # a step count chosen on purpose
    # no worker count reaches 200 steps: the line names the other fixes only
    w = few_steps_warning(TrainArguments(num_train_epochs=1, per_device_train_batch_size=64), 1000, 2)
    assert w and 'workers (' not in w and '--num_train_epochs' in w, w


def test_planned_steps_count_gradient_accumulation():
    "As the Trainer counts them: ceil(batches / accumulation) steps an epoch."
    rows = [16] * 400   # 25 batches of 16
    assert planned_steps(TrainArguments(num_train_epochs=2, gradient_accumulation_steps=4), rows, 1) == 2 * 7
    assert planned_steps(TrainArguments(num_train_epochs=2, gradient_accumulation_steps=5), rows, 1) == 2 * 5
