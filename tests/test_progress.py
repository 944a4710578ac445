"""`trn_tutorials.training.progress`: the scores (F1, accuracy, Matthews correlation, the majority baseline), filler rows left out,
the collapse warning, the progress lines the workers print, metrics.json as strict JSON."""
import json

import numpy as np
import pytest
from fastcore.test import test_close as close, test_eq as eq

from trn_tutorials.training.progress import (classification_metrics, collapse_warning, flat_array, majority_baseline, progress_line,
                                    read_progress, split_scores)
from trn_tutorials.training.samplers import EvalBatchSampler


NAMES = ['sadness', 'joy', 'love']


def test_metrics_and_baseline():
    m = classification_metrics([0, 0, 1, 2], [0, 1, 1, 2], NAMES)
    eq(m['accuracy'], 0.75)
    close(m['f1'], (2/3*2 + 2/3 + 1)/4)
    eq(m['per_class']['love']['recall'], 1.0)
    eq(m['confusion'], [[1, 1, 0], [0, 1, 0], [0, 0, 1]])
    eq(majority_baseline([1, 1, 0, 2], [0, 1, 1, 1], NAMES)['accuracy'], 0.75)


def test_scores_skip_filler_rows():
    from transformers import EvalPrediction
    batched = EvalPrediction(predictions=[np.eye(3)[[0, 1]], np.eye(3)[[2, 2]]], label_ids=[np.array([0, 1]), np.array([1, -100])])
    eq(flat_array([np.array([1, 2]), np.array([3])]), np.array([1, 2, 3]))
    eq(split_scores(batched, NAMES)['rows'], 3)
    ev = [EvalBatchSampler([8]*5 + [16]*3, 2, 2, r) for r in (0, 1)]
    eq(len(ev[0]), len(ev[1]))


def test_progress_lines_round_trip():
    line = progress_line('eval', step=40, epoch=2.0, loss=1.52, f1=0.41)
    eq(read_progress(line), {'event': 'eval', 'step': 40, 'epoch': 2.0, 'loss': 1.52, 'f1': 0.41})
    eq(read_progress('{"loss": 1.52}'), None)                       # the Trainer's own dicts are not progress lines
    eq(read_progress(line[:-5]), None)                              # nor is a line cut short


def strict(text:str):
    "`text` parsed as strict JSON: NaN, Infinity and -Infinity are refused."
    def refuse(name): raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_metrics_text_is_strict_json():
    "A value that is not a finite number is written as null: every JSON parser reads the file."
    from trn_tutorials.training.progress import metrics_text
    m = {'history': [{'step': 5, 'eval_loss': float('nan')}, {'step': 10, 'loss': np.float32('inf')}], 'f1': np.float64(0.5), 'n': np.int64(3)}
    back = strict(metrics_text(m))
    assert back == {'history': [{'step': 5, 'eval_loss': None}, {'step': 10, 'loss': None}], 'f1': 0.5, 'n': 3}


def test_matthews_correlation_beside_accuracy_and_f1():
    m = classification_metrics([0, 0, 1, 1], [0, 0, 1, 0], ['neg', 'pos'])
    assert m['mcc'] == pytest.approx(0.5774, abs=1e-4)
    assert majority_baseline([0, 0, 1], [0, 1, 1], ['neg', 'pos'])['mcc'] == 0.0


@pytest.mark.parametrize('lr, bf16, words', [(5.0, False, 'lower it (e.g. --learning_rate 5e-05)'), (50.0, False, 'lower it'),
                                             (1e-9, False, 'raise it (e.g. --learning_rate 5e-05)'), (5e-5, True, '--bf16 false')])
def test_collapse_names_the_right_direction(lr, bf16, words):
    m = {'final_split': 'test', 'test': {'accuracy': 0.1667, 'f1': 0.05}, 'baseline': {'label': 'sadness', 'accuracy': 0.1667},
         'beats_baseline': False, 'args': {'learning_rate': lr, 'bf16': bf16}}
    w = collapse_warning(m)
    assert w.startswith('warning: ') and '\n' not in w and words in w and 'majority' in w, w
    if lr > 1: assert 'raise' not in w
    assert collapse_warning(m | {'beats_baseline': True}) is None
