"""Issue 43, items 2 and 3 (data): a column of numbers is a regression label (float32), a column of label lists (or names joined by
--label_separator) a multi-label one (multi-hot float32 `labels`); bad values refused in one line naming their rows.

Every file is written by the test; the tokenizer is the offline MiniLM (`local_model()`).
"""
from __future__ import annotations
import json, math, re
from pathlib import Path

import numpy as np
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Sequence, Value

from trn_tutorials.core import UsageError, parse_args
from trn_tutorials.models import local_model
from trn_tutorials.data import DataArguments, load_prepared, prep_command, prepare
from trn_tutorials.data_files import KNOWN_DATA, known_defaults, load_raw
from trn_tutorials.data_checks import validate
from trn_tutorials.data_files import PROBLEM_TYPES
from trn_tutorials.data_checks import label_maps, problem_type_of

REPR = re.compile(r"Value\(|ClassLabel\(|List\(|Traceback")
WORDS = ['the cat sat on the mat', 'a man plays a guitar', 'rain fell all day', 'she reads in the park', 'dogs run on the beach']


def refused(fn, *a, **kw) -> str:
    with pytest.raises(UsageError) as e: fn(*a, **kw)
    msg = str(e.value)
    assert '\n' not in msg and not REPR.search(msg), msg
    return msg


def scores_csv(path:Path, values) -> str:
    path.write_text('text,score\n' + ''.join(f'{WORDS[i % 5]} {i},{v}\n' for i, v in enumerate(values)))
    return str(path)


def args(tmp_path, data, **kw) -> DataArguments:
    return DataArguments(**{'data': data, 'model_id': local_model(), 'dataset_path': str(tmp_path/'prep'), **kw})


# ------------------------------------------------------------------------------------------------------ regression
def test_decimal_numbers_are_regression(tmp_path):
    values = [round(i * 0.37 % 5, 2) for i in range(30)]
    ds = validate(load_raw(scores_csv(tmp_path/'s.csv', values)), label_column='score')
    assert ds['train'].features['label'] == Value('float32') and problem_type_of(ds['train'].features['label']) == 'regression'
    by_text = {f'{WORDS[i % 5]} {i}': v for i, v in enumerate(values)}
    assert all(math.isclose(r['label'], by_text[r['text']], rel_tol=1e-6) for s in ds.values() for r in s)


def test_integers_are_classes_unless_told(tmp_path):
    f = scores_csv(tmp_path/'i.csv', [i % 3 for i in range(30)])
    assert validate(load_raw(f), label_column='score')['train'].features['label'] == ClassLabel(names=['0', '1', '2'])
    ds = validate(load_raw(f), label_column='score', problem_type='regression')
    assert ds['train'].features['label'] == Value('float32') and set(ds['train']['label']) <= {0.0, 1.0, 2.0}
    txt = tmp_path/'t.txt'   # .txt labels are read as text: numbers with decimals still make a regression
    txt.write_text(''.join(f'{WORDS[i % 5]} {i};{i * 0.5}\n' for i in range(20)))
    assert problem_type_of(validate(load_raw(str(txt)))['train'].features['label']) == 'regression'


def test_the_random_split_is_seeded(tmp_path):
    f = scores_csv(tmp_path/'s.csv', [i * 0.25 for i in range(40)])
    val = lambda seed: validate(load_raw(f), label_column='score', seed=seed)['validation']['text']
    assert val(1) == val(1) and val(1) != val(2) and len(val(1)) == 4


@pytest.mark.parametrize('values,words', [
    ([0.5, 1.5, '', 2.5, 3.5, 4.5] * 4, "4 rows have no 'score' (lines 4, 10, 16 and 22): give every row a number"),
    ([0.5, 1.5, 2.5, 3.5, 'nan', 4.5] * 4, "hold no number in 'score' ('nan') (lines 6, 12, 18 and 24)"),
    ([0.5, 1.5, 'abc', 2.5, 3.5, 4.5] * 4, "hold no number in 'score' ('abc') (lines 4, 10, 16 and 22): give every row a finite number"),
    ([0.5, 1.5, 2.5, 'inf', 3.5, 4.5] * 4, "hold no number in 'score' ('inf') (lines 5, 11, 17 and 23)"),
])
def test_bad_numbers_refused_by_line(tmp_path, values, words):
    f = scores_csv(tmp_path/'s.csv', values)
    msg = refused(prepare, args(tmp_path, f, label_column='score'))
    assert msg.startswith(f) and words in msg, msg
    assert not (tmp_path/'prep').exists()


def test_regression_refusals(tmp_path):
    f = scores_csv(tmp_path/'s.csv', [i * 0.5 for i in range(20)])
    assert refused(prepare, args(tmp_path, f, label_column='score', label_names=['a', 'b'])).startswith(
        "--label_names names classes, but 'score' is a number to predict (regression): leave --label_names out")
    assert 'leave --accept_labels out' in refused(prepare, args(tmp_path, f, label_column='score', accept_labels=['a']))
    nan = DatasetDict(train=Dataset.from_dict({'text': WORDS * 4, 'score': [0.5, float('nan'), 1.5, 2.5, 3.5] * 4}))
    assert refused(validate, nan, label_column='score') == "4 rows of split 'train' have no 'score' (rows 1, 6, 11 and 16): give every row a number"
    g = scores_csv(tmp_path/'c.csv', [1.5] * 20)
    assert refused(validate, load_raw(g), label_column='score', problem_type='regression') == (
        "every row of split 'train' has 'score' 1.5: a regression needs values that vary; add rows of other values")
    words = scores_csv(tmp_path/'w.csv', ['good', 'bad'] * 10)
    assert 'pass --problem_type single_label_classification if the values are class names' in refused(
        validate, load_raw(words), label_column='score', problem_type='regression')


def test_prepare_regression(tmp_path, capsys):
    values = [round(i * 0.37 % 5, 2) for i in range(40)]
    m = prepare(args(tmp_path, scores_csv(tmp_path/'s.csv', values), label_column='score'))
    out = capsys.readouterr().out
    train = [v for v in load_raw(str(tmp_path/'s.csv'))['train']['score']]
    assert m['problem_type'] == 'regression' and m['label_names'] == ['score'] and m['label_rows'] == {} and m['text_pair'] is False
    ds, m2 = load_prepared(str(tmp_path/'prep'))
    assert m2 == m and ds['train'].features['labels'] == Value('float32')
    got = np.array(ds['train']['labels'])
    st = m['label_stats']
    assert math.isclose(st['mean'], float(got.mean()), abs_tol=1e-3) and math.isclose(st['std'], float(got.std()), abs_tol=1e-3)
    assert (st['min'], st['max']) == (round(float(got.min()), 4), round(float(got.max()), 4)) and set(got) <= {np.float32(v) for v in train}
    assert re.search(r"labels: score, a number \(regression\): train mean [\d.]+, std [\d.]+, min [\d.]+, max [\d.]+\n", out), out
    assert 'score' in prep_command(m) and '--problem_type' not in prep_command(m)
    mi = prepare(args(tmp_path/'i', scores_csv(tmp_path/'i.csv', [i % 4 for i in range(40)]), label_column='score', problem_type='regression'))
    assert mi['problem_type'] == 'regression' and '--problem_type regression' in prep_command(mi)


# ------------------------------------------------------------------------------------------------------ multi-label
LISTS = [['sports', 'politics'], ['sports'], [], ['music', 'sports'], ['politics'], ['music']]


def lists_jsonl(path:Path, n:int=36, lists=LISTS) -> str:
    path.write_text(''.join(json.dumps({'text': f'{WORDS[i % 5]} {i}', 'label': lists[i % len(lists)]}) + '\n' for i in range(n)))
    return str(path)


def test_lists_are_multi_label(tmp_path):
    ds = validate(load_raw(lists_jsonl(tmp_path/'m.jsonl')))
    ft = ds['train'].features['label']
    assert ft == Sequence(ClassLabel(names=['music', 'politics', 'sports'])) and problem_type_of(ft) == 'multi_label_classification'
    names = ft.feature.names
    by_text = {f'{WORDS[i % 5]} {i}': set(LISTS[i % 6]) for i in range(36)}
    assert all({names[i] for i in r['label']} == by_text[r['text']] for s in ds.values() for r in s)
    assert label_maps(ds)[0] == {0: 'music', 1: 'politics', 2: 'sports'}


def test_label_separator(tmp_path):
    (tmp_path/'m.csv').write_text('text,tags\n' + ''.join(f'{WORDS[i % 5]} {i},"{" , ".join(LISTS[i % 6])}"\n' for i in range(36)))
    ds = validate(load_raw(str(tmp_path/'m.csv')), label_column='tags', label_separator=',')
    names = ds['train'].features['label'].feature.names
    assert names == ['music', 'politics', 'sports']
    assert all({names[i] for i in r['label']} == set(LISTS[int(r['text'].split()[-1]) % 6]) for r in ds['train'])
    assert refused(validate, load_raw(str(tmp_path/'m.csv')), label_column='tags', problem_type='multi_label_classification').endswith(
        "pass --label_separator ',' if each row's names are joined in one text, or give each row a list")


def test_prepare_multi_label(tmp_path, capsys):
    m = prepare(args(tmp_path, lists_jsonl(tmp_path/'m.jsonl', 60)))
    out = capsys.readouterr().out
    ds, m2 = load_prepared(str(tmp_path/'prep'))
    assert m2 == m and m['problem_type'] == 'multi_label_classification' and m['label_names'] == ['music', 'politics', 'sports']
    assert ds['train'].features['labels'] == Sequence(Value('float32'), length=3)
    raw = {json.loads(l)['text']: json.loads(l)['label'] for l in (tmp_path/'m.jsonl').read_text().splitlines()}
    assert sum(m['label_rows'].values()) == int(np.array(ds['train']['labels']).sum())
    v = validate(load_raw(str(tmp_path/'m.jsonl')))   # the same seeded split `prepare` made
    assert m['label_rows'] == {n: sum(n in raw[t] for t in v['train']['text']) for n in m['label_names']}
    for row, t in zip(ds['validation'], v['validation']['text']):
        assert row['labels'] == [float(n in raw[t]) for n in m['label_names']]
    assert 'labels (train rows, several a row): music ' in out and 'labels a row on average' in out and 'rows with none' in out


def test_a_label_outside_train_refused_or_left_out(tmp_path, capsys):
    d = tmp_path/'d'; d.mkdir()
    lists_jsonl(d/'train.jsonl')
    lists_jsonl(d/'validation.jsonl', 6, [['sports', 'weather'], ['music']])
    msg = refused(validate, load_raw(str(d)))
    assert msg.startswith("unknown label 'weather' in split 'validation' (3 rows): the train split has only 'music', 'politics', 'sports'")
    assert msg.endswith("pass --accept_labels weather to leave it out of the label lists of split 'validation'"), msg
    m = prepare(args(tmp_path, str(d), accept_labels=['weather']))
    assert m['left_out'] == {'validation': {'weather': 3}} and m['rows']['validation'] == 6
    assert "left out: label 'weather' of 3 rows of split 'validation' (not in train; --accept_labels)" in capsys.readouterr().out
    assert load_prepared(str(tmp_path/'prep'))[0]['validation']['labels'].count([0.0, 0.0, 1.0]) == 3


def test_multi_label_refusals(tmp_path):
    bad = tmp_path/'n.jsonl'
    bad.write_text(''.join(json.dumps({'text': f'w {i}', 'label': None if i in (2, 5) else ['a', 'b'][:1 + i % 2]}) + '\n' for i in range(12)))
    assert refused(validate, load_raw(str(bad)), problem_type='multi_label_classification') == (
        f"{bad}: 2 rows have no labels (lines 3 and 6): give every row a list of its labels ([] for none)")
    typo = tmp_path/'t.jsonl'
    typo.write_text(''.join(json.dumps({'text': f'w {i}', 'label': [['sports'], ['music'], ['Sports']][i % 3]}) + '\n' for i in range(12)))
    assert "differ only in case" in refused(validate, load_raw(str(typo)))
    lists = lists_jsonl(tmp_path/'m.jsonl')
    assert 'or leave --problem_type out for several labels a row (multi-label)' in refused(
        validate, load_raw(lists), problem_type='single_label_classification')


# ------------------------------------------------------------------------------------------------------ options
def test_options_parsed_and_checked(tmp_path):
    a, = parse_args([DataArguments], ['--problem_type', 'regression', '--label_separator', ';'])
    assert (a.problem_type, a.label_separator, a.join_texts) == ('regression', ';', False)
    f = scores_csv(tmp_path/'s.csv', [i * 0.5 for i in range(20)])
    assert refused(prepare, args(tmp_path, f, problem_type='classification')) == (
        f"unknown --problem_type 'classification': use one of {', '.join(PROBLEM_TYPES)}, or leave it out (it is read from the label column)")
    assert refused(prepare, args(tmp_path, f, problem_type='regression', label_separator=',')).startswith(
        "--label_separator splits several labels a row, but --problem_type is regression")
    assert not (tmp_path/'prep').exists()


def test_problem_type_of():
    assert problem_type_of(ClassLabel(names=['a', 'b'])) == 'single_label_classification'
    assert problem_type_of(Value('float32')) == 'regression'
    assert problem_type_of(Sequence(ClassLabel(names=['a', 'b']))) == 'multi_label_classification'
    assert problem_type_of(Sequence(Value('float32'), length=2)) == 'multi_label_classification'
    assert refused(problem_type_of, Value('string')).startswith('a label column of text is none of')


def test_glue_presets():
    for name, cols, labels, kind in [('mrpc', ['sentence1', 'sentence2'], ['not_equivalent', 'equivalent'], None),
                                     ('rte', ['sentence1', 'sentence2'], ['entailment', 'not_entailment'], None),
                                     ('stsb', ['sentence1', 'sentence2'], None, 'regression')]:
        a = known_defaults(DataArguments(data=name))
        assert (a.preset, a.text_column, a.label_names, a.problem_type, a.join_texts) == (name, cols, labels, kind, False)
        assert (KNOWN_DATA[name].hub_id, KNOWN_DATA[name].config) == ('nyu-mll/glue', name)
    assert known_defaults(DataArguments(data='amazon_polarity')).join_texts is True   # a title and a review: joined, as before
    assert known_defaults(DataArguments(data='amazon_polarity', text_column=['content'])).join_texts is False
