"The evaluation loss: the mean cross-entropy over the labelled texts of every worker, finite with filler rows; metrics.json strict JSON."
import json, math
from pathlib import Path

import numpy as np
import pytest

from trn_tutorials.arguments import TrainArguments
from test_train import torchrun   # the two-worker torchrun launch of the training tests


def strict(text:str):
    "`text` parsed as strict JSON: NaN, Infinity and -Infinity are refused."
    def refuse(name): raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def ce(logits, label) -> float:
    "Cross-entropy of one text, by hand."
    logits = np.asarray(logits, dtype=np.float64)
    return float(np.log(np.exp(logits).sum()) - logits[label])


def test_all_filler_worker_padded_rows():
    "Two workers of two rows each, gathered: the second worker's rows are all filler (-100); its batch's own mean would be nan."
    from trn_tutorials.trainer import labelled_loss
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
    from trn_tutorials.trainer import labelled_loss
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
    from trn_tutorials.trainer import labelled_loss
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 3, 6)).astype(np.float32)
    labels = np.array([[1, 4, -100], [0, -100, -100], [-100] * 3, [-100] * 3])   # rows 2-3: a worker's filler rows
    want = np.mean([ce(logits[r, t], labels[r, t]) for r in range(4) for t in range(3) if labels[r, t] >= 0])
    assert labelled_loss(logits, labels) == pytest.approx(want, rel=1e-6)


def test_evaluation_loop_hook():
    "`LabelledLoss` overrides the public `Trainer.evaluation_loop` with its parameters, in their order (the same in transformers 4.57 and 5)."
    import inspect
    from transformers import Trainer
    from trn_tutorials.trainer import LabelledLoss, trainer_class
    assert list(inspect.signature(LabelledLoss.evaluation_loop).parameters) == list(inspect.signature(Trainer.evaluation_loop).parameters)
    assert LabelledLoss in trainer_class().__mro__


def test_metrics_text_is_strict_json():
    "A value that is not a finite number is written as null: every JSON parser reads the file."
    from trn_tutorials.progress import metrics_text
    m = {'history': [{'step': 5, 'eval_loss': float('nan')}, {'step': 10, 'loss': np.float32('inf')}], 'f1': np.float64(0.5), 'n': np.int64(3)}
    back = strict(metrics_text(m))
    assert back == {'history': [{'step': 5, 'eval_loss': None}, {'step': 10, 'loss': None}], 'f1': 0.5, 'n': 3}


@pytest.mark.parametrize('data', ['data', 'data-4'])
def test_two_workers_eval_loss_finite_and_unbiased(prepared, data):
    "2 workers x 8 rows. One bucket: the second worker's last evaluation batch is all filler (the loss was nan). "
    "Four buckets: two of its batches are half filler (the loss was biased). eval_loss is the validation split's own mean loss."
    tmp = prepared
    args = TrainArguments(dataset_path=str(tmp/data), output_dir=str(tmp/f'eval-loss-{data}'), num_train_epochs=1, learning_rate=1e-3,
                          per_device_train_batch_size=16, per_device_eval_batch_size=8, logging_steps=50)
    r = torchrun(args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = strict(Path(args.output_dir, 'metrics.json').read_text())
    evals = [h['eval_loss'] for h in m['history'] if 'eval_loss' in h]
    assert evals and all(isinstance(v, float) and math.isfinite(v) for v in evals), m['history']
    # the last evaluation ran on the saved weights: recompute the validation loss over every text, in one batch
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trn_tutorials.data import load_prepared
    from trn_tutorials.samplers import PaddedRows
    ds, _ = load_prepared(args.dataset_path)
    val = ds['validation']
    model = AutoModelForSequenceClassification.from_pretrained(args.output_dir).eval()
    padded, longest = PaddedRows(val, AutoTokenizer.from_pretrained(args.output_dir).pad_token_id), max(map(len, val['input_ids']))
    rows = [padded[(i, longest)] for i in range(len(val))]   # four buckets: every row padded to the longest
    cols = [c for c in ('input_ids', 'attention_mask', 'token_type_ids') if c in val.column_names]
    with torch.no_grad():
        logits = model(**{c: torch.tensor([r[c] for r in rows]) for c in cols}).logits
    want = torch.nn.functional.cross_entropy(logits, torch.tensor(val['labels'])).item()
    assert evals[-1] == pytest.approx(want, rel=1e-4), (evals, want)
