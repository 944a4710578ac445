"""`trn_tutorials.training.trainer`: the Trainer the script builds. The evaluation loss is the mean loss over the labelled texts of every
worker (finite with filler rows); the hooks it overrides keep their signatures; the model's columns without private API; the
graph-extraction trial's padding patched out."""
import math
from pathlib import Path

import numpy as np
import pytest

from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.data.prepared import load_prepared
from test_progress import strict
from test_train import linked, torchrun   # the training tests' links to the shared data, their two-worker torchrun launch


def ce(logits, label) -> float:
    "Cross-entropy of one text, by hand."
    logits = np.asarray(logits, dtype=np.float64)
    return float(np.log(np.exp(logits).sum()) - logits[label])


def test_all_filler_worker_padded_rows():
    "Two workers of two rows each, gathered: the second worker's rows are all filler (-100); its batch's own mean would be nan."
    from trn_tutorials.training.trainer import labelled_loss
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 1.5, 0.2], [3.0, 0.0, 0.0], [0.0, 3.0, 0.0]], dtype=np.float32)
    labels = np.array([0, 2, -100, -100])
    want = (ce(logits[0], 0) + ce(logits[1], 2)) / 2
    got = labelled_loss(logits, labels)
    assert math.isfinite(got) and got == pytest.approx(want, rel=1e-6)
    # the Trainer's way: a mean per batch, each repeated by the batch size, then averaged; the filler batch is nan
    import torch, torch.nn.functional as F
    per_batch = [F.cross_entropy(torch.tensor(logits[i:i + 2]), torch.tensor(labels[i:i + 2]), ignore_index=-100).item() for i in (0, 2)]
    assert math.isnan(per_batch[1])
    # no labelled text at all: no loss to report
    assert labelled_loss(logits, np.full(4, -100)) is None


def test_unbiased_over_batches_of_unequal_fill():
    "A batch with one labelled row weighs one row, not a full batch: the mean over texts, not over batch means."
    from trn_tutorials.training.trainer import labelled_loss
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(8, 6)).astype(np.float32), rng.integers(0, 6, 8)
    labels[5:] = -100   # batch 2 (rows 4-7) has one labelled row
    want = sum(ce(logits[i], labels[i]) for i in range(5)) / 5
    assert labelled_loss(logits, labels) == pytest.approx(want, rel=1e-6)
    batch_means = [np.mean([ce(logits[i], labels[i]) for i in range(s, s + 4) if labels[i] >= 0]) for s in (0, 4)]
    assert abs(np.mean(batch_means) - want) > 1e-3   # what averaging batch means would have said
    # per-batch arrays (eval_do_concat_batches=False, as on XLA) and a tuple of outputs (logits first): the same value
    assert labelled_loss([logits[:4], logits[4:]], [labels[:4], labels[4:]]) == pytest.approx(want, rel=1e-6)
    assert labelled_loss((logits, np.zeros((8, 2))), labels) == pytest.approx(want, rel=1e-6)


def test_packed_rows():
    "Packed rows: logits [rows, texts, labels], a label per text, -100 in the empty slots and for filler rows."
    from trn_tutorials.training.trainer import labelled_loss
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 3, 6)).astype(np.float32)
    labels = np.array([[1, 4, -100], [0, -100, -100], [-100] * 3, [-100] * 3])   # rows 2-3: a worker's filler rows
    want = np.mean([ce(logits[r, t], labels[r, t]) for r in range(4) for t in range(3) if labels[r, t] >= 0])
    assert labelled_loss(logits, labels) == pytest.approx(want, rel=1e-6)


def test_evaluation_loop_hook():
    "`LabelledLoss` overrides the public `Trainer.evaluation_loop` with its parameters, in their order (the same in transformers 4.57 and 5)."
    import inspect
    from transformers import Trainer
    from trn_tutorials.training.trainer import LabelledLoss, trainer_class
    assert list(inspect.signature(LabelledLoss.evaluation_loop).parameters) == list(inspect.signature(Trainer.evaluation_loop).parameters)
    assert LabelledLoss in trainer_class().__mro__


@pytest.mark.parametrize('data', ['data', 'data-4'])
def test_two_workers_eval_loss_finite_and_unbiased(prepared, tmp_path, data):
    "2 workers x 8 rows. One bucket: the second worker's last evaluation batch is all filler (the loss was nan). "
    "Four buckets: two of its batches are half filler (the loss was biased). eval_loss is the validation split's own mean loss."
    tmp = linked(prepared, tmp_path, data)
    args = TrainArguments(dataset_path=str(tmp/data), output_dir=str(tmp/'model'), num_train_epochs=1, learning_rate=1e-3,
                          per_device_train_batch_size=16, per_device_eval_batch_size=8, logging_steps=50)
    r = torchrun(args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = strict(Path(args.output_dir, 'metrics.json').read_text())
    evals = [h['eval_loss'] for h in m['history'] if 'eval_loss' in h]
    assert evals and all(isinstance(v, float) and math.isfinite(v) for v in evals), m['history']
    # the last evaluation ran on the saved weights: recompute the validation loss over every text, in one batch
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trn_tutorials.data.prepared import load_prepared
    from trn_tutorials.training.samplers import PaddedRows
    prepared = load_prepared(args.dataset_path)
    ds, _ = prepared.splits, prepared.manifest
    val = ds['validation']
    model = AutoModelForSequenceClassification.from_pretrained(args.output_dir).eval()
    padded, longest = PaddedRows(val, AutoTokenizer.from_pretrained(args.output_dir).pad_token_id), max(map(len, val['input_ids']))
    rows = [padded[(i, longest)] for i in range(len(val))]   # four buckets: every row padded to the longest
    cols = [c for c in ('input_ids', 'attention_mask', 'token_type_ids') if c in val.column_names]
    with torch.no_grad():
        logits = model(**{c: torch.tensor([r[c] for r in rows]) for c in cols}).logits
    want = torch.nn.functional.cross_entropy(logits, torch.tensor(val['labels'])).item()
    assert evals[-1] == pytest.approx(want, rel=1e-4), (evals, want)


def test_graph_extraction_skips_padding_across_workers(prepared, tmp_path, monkeypatch):
    "`neuron_parallel_compile`'s trial (NEURON_EXTRACT_GRAPHS_ONLY) feeds placeholders: accelerate's padding is patched out."
    tmp = prepared
    from transformers import AutoModelForSequenceClassification
    from trn_tutorials.training.trainer import trainer_class
    from trn_tutorials.training.arguments import training_arguments
    import torch
    model = AutoModelForSequenceClassification.from_pretrained(tmp/'tiny-bert', num_labels=6, ignore_mismatched_sizes=True)
    targs = training_arguments(TrainArguments(output_dir=str(tmp_path/'extract')), 'cpu')
    t, ds = torch.ones(3, 2), load_prepared(str(tmp/'data')).splits
    make = lambda: trainer_class()(model=model, args=targs, eval_dataset=ds['validation'])
    monkeypatch.setenv('NEURON_EXTRACT_GRAPHS_ONLY', '1')
    acc = make().accelerator
    assert 'pad_across_processes' in vars(acc) and acc.pad_across_processes(t, dim=1, pad_index=-100) is t
    monkeypatch.setenv('NEURON_EXTRACT_GRAPHS_ONLY', '0')
    assert 'pad_across_processes' not in vars(make().accelerator)   # accelerate's own, everywhere else


def test_cpu_resume_overrides_a_pinned_private_hook():
    "`CpuResume` overrides `Trainer._load_optimizer_and_scheduler` (no public hook loads a checkpoint's optimizer state): "
    "its name, its one argument and its `map_location` must stay, on transformers 4.57 and 5."
    import inspect
    from transformers import Trainer
    from trn_tutorials.training.trainer import CpuResume
    assert [p for p in inspect.signature(Trainer._load_optimizer_and_scheduler).parameters] == ['self', 'checkpoint']
    assert 'map_location' in inspect.getsource(Trainer._load_optimizer_and_scheduler)
    assert '_load_optimizer_and_scheduler' in vars(CpuResume)


def test_model_columns_without_private_api(prepared, tmp_path):
    "With `remove_unused_columns=False`, `BucketBatches.model_columns` keeps what `forward` takes (and the labels), via `select_columns`."
    tmp = prepared
    from transformers import AutoModelForSequenceClassification
    from trn_tutorials.training.trainer import trainer_class
    from trn_tutorials.training.arguments import training_arguments
    model = AutoModelForSequenceClassification.from_pretrained(tmp/'tiny-bert', num_labels=6, ignore_mismatched_sizes=True)
    targs = training_arguments(TrainArguments(output_dir=str(tmp_path/'columns')), 'cpu')
    assert targs.remove_unused_columns is False
    ds = load_prepared(str(tmp/'data')).splits['validation']
    kept = trainer_class()(model=model, args=targs, eval_dataset=ds).model_columns(ds.add_column('note', ['x'] * len(ds))).column_names
    assert 'note' not in kept and 'labels' in kept and 'input_ids' in kept and set(kept) <= set(ds.column_names)
