"Training regression and multi-label data: the metrics, the baseline, the loss, and real torchrun runs on variants of the shared prepared sample."
import json, math, subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import EvalPrediction

from test_train import linked
from trn_tutorials.core.options import UsageError
from trn_tutorials.data.prepared import Prepared, load_prepared
from trn_tutorials.training.launch import Results, launch, launch_env, torchrun_command
from trn_tutorials.training.live_progress import Progress
from trn_tutorials.training.progress import (MULTI_LABEL, REGRESSION, SINGLE, THRESHOLDS, split_scores, beats_baseline, best_threshold, collapse_warning,
                                    majority_baseline, multi_label_metrics, plot_history, problem_of, progress_line, regression_metrics, summary)
from trn_tutorials.training.progress import PLOTS_OF
from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.training.trainer import labelled_loss

# emotion -> (a score, the labels of a multi-label variant): both follow the text, so a model can learn them
SCORE = {'sadness': 0.5, 'joy': 4.5, 'love': 4.0, 'anger': 1.0, 'fear': 1.5, 'surprise': 3.0}
MULTI_NAMES = ['positive', 'negative', 'intense']
MULTI = {'sadness': [0, 1, 0], 'joy': [1, 0, 0], 'love': [1, 0, 1], 'anger': [0, 1, 1], 'fear': [0, 1, 1], 'surprise': [0, 0, 0]}


def variant(src:Path, dst:Path, problem:str) -> dict:
    "A copy of the prepared folder `src` whose labels are a score (regression) or multi-hot rows (multi-label), with the spec's manifest."
    from datasets import DatasetDict, Sequence, Value
    prepared = load_prepared(src)
    ds, m = prepared.splits, prepared.manifest
    names = ds['train'].features['labels'].names
    out = {}
    for s, d in ds.items():
        emo = [names[i] for i in d['labels']]
        d = d.remove_columns('labels')
        if problem == REGRESSION: out[s] = d.add_column('labels', [SCORE[e] for e in emo], feature=Value('float32'))
        else: out[s] = d.add_column('labels', [[float(v) for v in MULTI[e]] for e in emo], feature=Sequence(Value('float32'), length=3))
    DatasetDict(out).save_to_disk(str(dst))
    train = np.array([SCORE[names[i]] for i in ds['train']['labels']]) if problem == REGRESSION else None
    m = m | {'problem_type': problem, 'text_pair': False, 'content_sha256': f"{m['content_sha256']}-{problem}"}
    if problem == REGRESSION:
        m |= {'label_names': ['score'], 'label_rows': {},
              'label_stats': {'mean': float(train.mean()), 'std': float(train.std()), 'min': float(train.min()), 'max': float(train.max())}}
    else:
        hot = np.array([MULTI[names[i]] for i in ds['train']['labels']])
        m |= {'label_names': MULTI_NAMES, 'label_rows': dict(zip(MULTI_NAMES, map(int, hot.sum(0))))}
    rec = json.loads((src/'trn_tutorials.json').read_text())
    (dst/'trn_tutorials.json').write_text(json.dumps(rec | m))
    return m


@pytest.fixture(scope='module')
def folders(prepared, tmp_path_factory):
    "The shared prepared sample (linked as `data`: single-label), and its regression and multi-label variants made here."
    tmp = linked(prepared, tmp_path_factory.mktemp('kinds'), 'data')
    variant(tmp/'data', tmp/'regression', REGRESSION)
    variant(tmp/'data', tmp/'multi', MULTI_LABEL)
    return tmp


def metrics(out): return json.loads(Path(out, 'metrics.json').read_text())


# --- the pieces, on known numbers -------------------------------------------------------------------------------------

def test_problem_of_old_records_are_single():
    assert problem_of({}) == problem_of({'problem_type': None}) == SINGLE
    assert problem_of({'problem_type': REGRESSION}) == REGRESSION


def test_regression_metrics_match_scipy_and_a_constant_is_zero():
    from scipy.stats import pearsonr, spearmanr
    y, p = np.array([0.5, 2.0, 3.5, 5.0, 1.0]), np.array([1.0, 1.8, 3.0, 4.6, 2.5])
    m = regression_metrics(y, p)
    assert m['pearson'] == round(pearsonr(y, p)[0], 4) and m['spearmanr'] == round(spearmanr(y, p)[0], 4)
    assert m['combined_score'] == round((pearsonr(y, p)[0] + spearmanr(y, p)[0]) / 2, 4)
    assert m['mse'] == pytest.approx(((y - p) ** 2).mean(), abs=1e-6)
    flat = regression_metrics(y, np.full(5, 2.0))
    assert (flat['pearson'], flat['spearmanr']) == (0.0, 0.0) and flat['mse'] == pytest.approx(((y - 2) ** 2).mean(), abs=1e-6)


def test_threshold_is_the_best_micro_f1_on_the_grid():
    from sklearn.metrics import f1_score
    rng = np.random.default_rng(0)
    y = rng.random((50, 4)) < 0.3
    probs = np.clip(y * 0.3 + rng.random((50, 4)) * 0.6, 0, 1)
    t = best_threshold(y, probs)
    f1 = {u: f1_score(y, probs >= u, average='micro', zero_division=0) for u in THRESHOLDS}
    assert t in THRESHOLDS and f1[t] == max(f1.values())
    assert THRESHOLDS[0] == 0.05 and THRESHOLDS[-1] == 0.95 and len(THRESHOLDS) == 19
    m = multi_label_metrics(y, probs, list('abcd'))
    assert m['threshold'] == t and m['micro_f1'] == round(f1[t], 4) and set(m['per_class']) == set('abcd')
    assert multi_label_metrics(y, probs, list('abcd'), threshold=0.5)['threshold'] == 0.5   # a given threshold is kept


def test_baselines():
    b = majority_baseline([1.0, 2.0, 3.0], [1.5, 2.5], ['score'], REGRESSION)
    assert b['mean'] == 2.0 and b['mse'] == 0.25 and b['pearson'] == b['spearmanr'] == 0.0
    b = majority_baseline([[1, 0], [1, 1], [1, 0]], [[1, 0], [0, 1]], ['a', 'b'], MULTI_LABEL)
    # 'a' always (each label's majority) is right once, wrong once and misses 'b': micro F1 0.5; every label scores 2/3
    assert b['label'] == 'every label' and b['labels'] == ['a', 'b'] and b['micro_f1'] == 0.6667
    b = majority_baseline([[1, 0], [1, 0], [1, 1]], [[1, 0], [1, 0]], ['a', 'b'], MULTI_LABEL)
    assert b['label'] == "each label's majority" and b['labels'] == ['a'] and b['micro_f1'] == 1.0   # the stronger of the two
    assert majority_baseline([1, 1, 0], [0, 1], ['x', 'y'])['accuracy'] == 0.5   # single label, as before
    assert beats_baseline({'mse': 0.2}, {'mse': 0.25}, REGRESSION) and not beats_baseline({'mse': 0.3}, {'mse': 0.25}, REGRESSION)
    assert beats_baseline({'micro_f1': 0.6}, {'micro_f1': 0.5}, MULTI_LABEL) and not beats_baseline({'accuracy': 0.5}, {'accuracy': 0.5})


def test_scores_leave_fillers_out():
    p = EvalPrediction(predictions=[np.array([[1.0], [2.0]]), np.array([[3.0], [9.0]])], label_ids=[np.array([1.0, 2.0]), np.array([2.0, -100.0])])
    s = split_scores(p, ['score'], REGRESSION)
    assert s['rows'] == 3 and s['mse'] == pytest.approx((0 + 0 + 1) / 3, abs=1e-6)
    x = np.array([[3.0, -3.0], [-3.0, 3.0], [0.0, 0.0]])
    y = np.array([[1.0, 0.0], [0.0, 1.0], [-100, -100]])
    s = split_scores(EvalPrediction(predictions=x, label_ids=y), ['a', 'b'], MULTI_LABEL, threshold=0.5)
    assert s['rows'] == 2 and s['micro_f1'] == 1.0 and s['threshold'] == 0.5


def test_labelled_loss_is_the_models_loss():
    x, y = np.array([[1.0], [2.5], [7.0]]), np.array([1.5, 2.0, -100])
    assert labelled_loss(x, y, REGRESSION) == pytest.approx(torch.nn.functional.mse_loss(torch.tensor(x[:2, 0]), torch.tensor(y[:2])).item())
    x, y = np.array([[2.0, -1.0, 40.0], [0.5, 0.5, -40.0], [5.0, 5.0, 5.0]]), np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-100, -100, -100]])
    want = torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor(x[:2]), torch.tensor(y[:2])).item()
    assert labelled_loss(x, y, MULTI_LABEL) == pytest.approx(want)
    assert labelled_loss(x, np.full((3, 3), -100.0), MULTI_LABEL) is None   # nothing labelled
    logits, labels = np.log(np.array([[.7, .2, .1], [.2, .6, .2]])), np.array([0, -100])
    assert labelled_loss(logits, labels) == pytest.approx(-math.log(.7))   # single label, as before


def _metrics(problem, final, baseline, beats, **extra):
    return {'problem_type': problem, 'final_split': 'test', 'test': final, 'baseline': baseline, 'beats_baseline': beats,
            'args': {'learning_rate': 5e-5}, 'label_names': ['score'] if problem == REGRESSION else MULTI_NAMES,
            'train': {'samples_per_second': 10.0, 'runtime_s': 2.0, 'steps': 4}, 'world_size': 1, 'backend': 'cpu', 'bucket_lengths': [40],
            'history': [{'step': 2, 'loss': 1.0}, {'step': 4, 'eval_loss': 0.9, **{f'eval_{k}': v for k, v in final.items()}}], **extra}


def test_warning_and_summary_per_problem_type():
    good = _metrics(REGRESSION, {'pearson': 0.8, 'spearmanr': 0.7, 'mse': 0.5}, {'label': 'the training mean', 'mean': 2.4, 'mse': 2.0, 'pearson': 0.0}, True)
    assert collapse_warning(good) is None   # no accuracy to read: no misfire, no KeyError
    assert summary(good).splitlines()[0] == 'test: Pearson 0.8000, Spearman 0.7000, MSE 0.5 (always the training mean 2.4: MSE 2)'
    bad = good | {'test': {'pearson': 0.0, 'spearmanr': 0.0, 'mse': 2.1}, 'beats_baseline': False}
    assert collapse_warning(bad).startswith('warning: test MSE 2.1 is no better than always predicting the training mean 2.4 (MSE 2): ')
    multi = _metrics(MULTI_LABEL, {'micro_f1': 0.7, 'macro_f1': 0.6, 'threshold': 0.35}, {'label': "each label's majority", 'micro_f1': 0.4, 'macro_f1': 0.2}, True)
    assert collapse_warning(multi) is None
    assert summary(multi).splitlines()[0] == "test: micro F1 0.7000, macro F1 0.6000 at threshold 0.35 (each label's majority: micro F1 0.4000)"
    assert "no better than predicting each label's majority" in collapse_warning(multi | {'beats_baseline': False})
    for m in (good, multi): assert plot_history(m) is not None   # the curves of the problem's main metric


def test_results_per_problem_type():
    reg = _metrics(REGRESSION, {'pearson': 0.8, 'spearmanr': 0.7, 'combined_score': 0.75, 'mse': 0.5}, {'label': 'the training mean', 'mean': 2.4, 'mse': 2.0},
                   False, args={'output_dir': 'out'}, warnings=[])
    r = Results.from_metrics(reg, wall_s=3.0)
    assert (r.problem_type, r.pearson, r.spearmanr, r.mse, r.f1, r.accuracy) == (REGRESSION, 0.8, 0.7, 0.5, None, None)
    rows = dict(r.rows())
    assert rows['Pearson correlation (test)'] == '0.800' and rows['MSE (test)'] == '0.5' and 'F1 (test)' not in rows
    assert rows['warning'] == 'no better than always predicting the training mean: see the summary in train.log'
    assert r.scores_text() == 'test Pearson 0.8000, Spearman 0.7000, MSE 0.5'
    multi = _metrics(MULTI_LABEL, {'micro_f1': 0.7, 'macro_f1': 0.6, 'threshold': 0.35}, {'micro_f1': 0.4}, True, args={'output_dir': 'out'})
    r = Results.from_metrics(multi, wall_s=3.0)
    assert (r.micro_f1, r.macro_f1, r.threshold) == (0.7, 0.6, 0.35) and dict(r.rows())['micro F1 (test)'] == '0.700'
    assert r.scores_text() == 'test micro F1 0.7000, macro F1 0.6000 at threshold 0.35'
    old = {k: v for k, v in _metrics(SINGLE, {'f1': 0.5, 'accuracy': 0.6, 'mcc': 0.3}, {'accuracy': 0.2}, True, args={'output_dir': 'o'}).items()
           if k != 'problem_type'}   # a metrics.json from before there were problem types
    r = Results.from_metrics(old, wall_s=1.0)
    assert r.problem_type == SINGLE and r.scores_text() == 'test weighted F1 0.5000, accuracy 0.6000, Matthews correlation 0.3000'


def test_progress_table_columns(capsys):
    for problem, want in ((REGRESSION, ['Pearson', 'Spearman']), (MULTI_LABEL, ['Micro F1', 'Macro F1']), (SINGLE, ['F1', 'Accuracy'])):
        p = Progress(notebook=False)
        begin = {'problem_type': problem} if problem != SINGLE else {}
        p(progress_line('begin', step=0, max_steps=4, epochs=1, **begin))
        p(progress_line('log', step=2, loss=1.5))
        p(progress_line('eval', step=4, epoch=1.0, loss=1.2, f1=0.5, accuracy=0.6, pearson=0.71, spearmanr=0.69, micro_f1=0.55, macro_f1=0.45))
        p.close()
        assert list(p.rows[0]) == ['Epoch', 'Training Loss', 'Validation Loss', *want]
    assert p.rows[0]['F1'] == '0.5000'


def test_problem_type_checked(folders):
    "Real regression data: its problem type; packed, refused with the command that prepares it again unpacked."
    data = load_prepared(folders/'regression')
    assert data.check_problem_type() == REGRESSION
    packed = Prepared(data.path, data.splits, data.manifest | {'packing': {'rows': data.rows}})
    with pytest.raises(UsageError, match='packed rows hold single-label texts only: prepare it again without --pack, `trn-tutorials prep'):
        packed.check_problem_type()


# --- real runs --------------------------------------------------------------------------------------------------------

def torchrun(args, n=2):
    r = subprocess.run(torchrun_command(args, n), env=launch_env('cpu', n), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def test_regression_trains_on_two_workers(folders):
    out = folders/'reg-model'
    args = TrainArguments(dataset_path=str(folders/'regression'), output_dir=str(out), num_train_epochs=1, learning_rate=1e-3,
                          per_device_train_batch_size=8, logging_steps=5)
    r = torchrun(args)
    m = metrics(out)
    assert m['problem_type'] == REGRESSION and m['label_names'] == ['score'] and m['final_split'] == 'test'
    for s in ('validation', 'test'):
        assert set(m[s]) == {'pearson', 'spearmanr', 'combined_score', 'mse', 'rows'} and m[s]['rows'] == 72
        assert -1 <= m[s]['pearson'] <= 1 and m[s]['mse'] >= 0
    assert m['baseline']['label'] == 'the training mean' and m['baseline']['pearson'] == 0.0
    assert m['beats_baseline'] == (m['test']['mse'] < m['baseline']['mse'])
    evals = [h for h in m['history'] if 'eval_loss' in h]
    assert len(evals) == 1 and all('eval_pearson' in h and 'eval_spearmanr' in h and 'eval_f1' not in h for h in evals)
    # the evaluation loss is the MSE over the 72 labelled rows: the filler rows of 2 workers x 8 are left out
    assert all(h['eval_loss'] == pytest.approx(h['eval_mse'], abs=1e-5) for h in evals)
    assert 'Pearson' in r.stdout and 'Spearman' in r.stdout
    assert sorted(p.name for p in out.glob('*.png')) == sorted(PLOTS_OF[REGRESSION])
    cfg = json.loads((out/'config.json').read_text())
    assert cfg['problem_type'] == REGRESSION and cfg['id2label'] == {'0': 'score'} and 'multi_label_threshold' not in cfg
    from transformers import AutoModelForSequenceClassification
    assert AutoModelForSequenceClassification.from_pretrained(out).num_labels == 1


def test_multi_label_trains_on_two_workers(folders):
    out = folders/'multi-model'
    args = TrainArguments(dataset_path=str(folders/'multi'), output_dir=str(out), num_train_epochs=1, learning_rate=1e-3,
                          per_device_train_batch_size=8, logging_steps=5)
    torchrun(args)
    m = metrics(out)
    assert m['problem_type'] == MULTI_LABEL and m['label_names'] == MULTI_NAMES
    for s in ('validation', 'test'):
        assert {'micro_f1', 'macro_f1', 'per_class', 'threshold', 'rows'} == set(m[s]) and m[s]['rows'] == 72
        assert set(m[s]['per_class']) == set(MULTI_NAMES) and 0 <= m[s]['micro_f1'] <= 1
    # the threshold is chosen on validation, the test split scored at it, and the model keeps it
    cfg = json.loads((out/'config.json').read_text())
    assert m['test']['threshold'] == m['validation']['threshold'] == cfg['multi_label_threshold'] and m['test']['threshold'] in THRESHOLDS
    assert cfg['problem_type'] == MULTI_LABEL and cfg['id2label'] == {str(i): n for i, n in enumerate(MULTI_NAMES)}
    assert m['baseline']['label'] in ("each label's majority", 'every label') and m['beats_baseline'] == (m['test']['micro_f1'] > m['baseline']['micro_f1'])
    evals = [h for h in m['history'] if 'eval_loss' in h]
    assert len(evals) == 1 and all({'eval_micro_f1', 'eval_macro_f1', 'eval_threshold'} <= set(h) for h in evals)
    assert sorted(p.name for p in out.glob('*.png')) == sorted(PLOTS_OF[MULTI_LABEL])
    # the evaluation loss is the BCE of the saved model over the 72 validation rows, fillers left out
    from datasets import load_from_disk
    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    val = load_from_disk(str(folders/'multi'))['validation']
    with torch.no_grad():
        logits = torch.cat([model(input_ids=torch.tensor([r['input_ids']]), attention_mask=torch.tensor([r['attention_mask']])).logits for r in val])
    want = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.tensor(val['labels'])).item()
    assert evals[-1]['eval_loss'] == pytest.approx(want, abs=1e-4)


def test_launch_regression_results(folders, capsys):
    out = folders/'reg-launched'
    args = TrainArguments(dataset_path=str(folders/'regression'), output_dir=str(out), max_steps=4, logging_steps=2, eval_steps=4,
                          eval_strategy='steps', backend='cpu')
    res = launch(args, nproc_per_node=1)
    assert res.problem_type == REGRESSION and res.f1 is None and res.pearson == res.metrics['test']['pearson'] and res.mse is not None
    assert 'Pearson correlation (test)' in dict(res.rows())
    out, err = capsys.readouterr()   # in a terminal: a bar, and the table's row under it, Pearson and Spearman where F1 and accuracy are for classes
    assert 'Pearson 0.' in out + err and 'Spearman 0.' in out + err and 'Accuracy' not in out + err
    assert any(w.startswith('test MSE') for w in res.warnings) == (not res.metrics['beats_baseline'])   # the warning, where it is due


def test_single_label_unchanged(folders):
    out = folders/'single-model'
    args = TrainArguments(dataset_path=str(folders/'data'), output_dir=str(out), max_steps=3, per_device_train_batch_size=8)
    torchrun(args, 1)
    m = metrics(out)
    assert m['problem_type'] == SINGLE and {'accuracy', 'f1', 'mcc', 'per_class', 'confusion', 'rows'} == set(m['test'])
    assert 'accuracy' in m['baseline'] and m['beats_baseline'] == (m['test']['accuracy'] > m['baseline']['accuracy'])
    assert sorted(p.name for p in out.glob('*.png')) == sorted(PLOTS_OF[SINGLE])
    assert 'multi_label_threshold' not in json.loads((out/'config.json').read_text())


def test_glue_scores_follow_each_task_and_the_summary_says_them():
    from trn_tutorials.training.progress import glue_scores
    s = {'accuracy': 0.8, 'f1': 0.79, 'mcc': 0.55, 'per_class': {'not_equivalent': {'f1-score': 0.69}, 'equivalent': {'f1-score': 0.85}}}
    names = ['not_equivalent', 'equivalent']
    assert glue_scores(s, 'mrpc', names) == {'accuracy': 0.8, 'f1': 0.85}   # the positive label's F1, not the weighted one
    assert glue_scores(s, 'rte', names) == {'accuracy': 0.8} and glue_scores(s, 'cola', names) == {'matthews_correlation': 0.55}
    assert glue_scores({'pearson': 0.9, 'spearmanr': 0.8, 'mse': 0.3}, 'stsb', ['score']) == {'pearson': 0.9, 'spearmanr': 0.8}
    assert glue_scores(s, None, names) is None and glue_scores(s, 'emotion', names) is None   # no GLUE task: nothing to report
    m = _metrics(SINGLE, {'accuracy': 0.8, 'f1': 0.79, 'mcc': 0.55}, {'label': 'equivalent', 'accuracy': 0.68, 'f1': 0.55, 'mcc': 0.0}, True)
    assert 'GLUE' not in summary(m)
    assert summary(m | {'glue': {'task': 'mrpc', 'accuracy': 0.8, 'f1': 0.85}}).splitlines()[1] == 'GLUE mrpc: accuracy 0.8000, f1 0.8500'
