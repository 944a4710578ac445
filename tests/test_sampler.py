"""The multi-worker rules, checked on the samplers and the data loaders for 2, 8 and 32 workers (a trn1.2xlarge and a
trn1.32xlarge): the same input shape on every worker at every step, every training row used once per epoch (a few
twice when the last batch is filled up), every evaluation row scored exactly once."""
import numpy as np
import pytest
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

from trn_tutorials.samplers import BucketBatchSampler, EvalBatchSampler, PaddedRows

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
