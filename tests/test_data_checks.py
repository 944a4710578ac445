"""Checks of `trn_tutorials.data.checks`: what the labels and texts are and whether they look like mistakes.

Issue 43, items 2 and 3 (data): a column of numbers is a regression label (float32), a column of label lists (or names joined by
--label_separator) a multi-label one (multi-hot float32 `labels`); bad values refused in one line naming their rows.

Every file is written by the test; the tokenizer is the offline MiniLM (`local_model()`).
"""
from __future__ import annotations
import collections, itertools, json, math, random, re, shlex, string
from pathlib import Path

import numpy as np
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value
from transformers import AutoTokenizer

from local_services import one_line, prep_args, refused
from trn_tutorials.core.options import UsageError, parse_args
from trn_tutorials.models import local_model
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.shapes import choose_length, token_lengths, tokenize
from trn_tutorials.data.prepared import data_fingerprint, prep_command
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.files import EMOTION_LABELS, KNOWN_DATA, PROBLEM_TYPES
from trn_tutorials.data.sources import known_defaults, load_raw, sample_data
from trn_tutorials.data.labels import edit_distance, label_maps, problem_type_of, similar_labels
from trn_tutorials.data.checks import repeat_warning, repeated_rows, validate
from trn_tutorials.data.tokenizers import tokenizer_fingerprint

WORDS = ['the cat sat on the mat', 'a man plays a guitar', 'rain fell all day', 'she reads in the park', 'dogs run on the beach']


def scores_csv(path:Path, values) -> str:
    path.write_text('text,score\n' + ''.join(f'{WORDS[i % 5]} {i},{v}\n' for i, v in enumerate(values)))
    return str(path)


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
    msg = refused(prepare, prep_args(tmp_path, f, label_column='score'))
    assert msg.startswith(f) and words in msg, msg
    assert not (tmp_path/'prep').exists()


def test_regression_refusals(tmp_path):
    f = scores_csv(tmp_path/'s.csv', [i * 0.5 for i in range(20)])
    assert refused(prepare, prep_args(tmp_path, f, label_column='score', label_names=['a', 'b'])).startswith(
        "--label_names names classes, but 'score' is a number to predict (regression): leave --label_names out")
    assert 'leave --accept_labels out' in refused(prepare, prep_args(tmp_path, f, label_column='score', accept_labels=['a']))
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
    m = prepare(prep_args(tmp_path, scores_csv(tmp_path/'s.csv', values), label_column='score'))
    out = capsys.readouterr().out
    train = [v for v in load_raw(str(tmp_path/'s.csv'))['train']['score']]
    assert m['problem_type'] == 'regression' and m['label_names'] == ['score'] and m['label_rows'] == {} and m['text_pair'] is False
    prepared = load_prepared(str(tmp_path/'prep'))
    ds, m2 = prepared.splits, prepared.manifest
    assert m2 == m and ds['train'].features['labels'] == Value('float32')
    got = np.array(ds['train']['labels'])
    st = m['label_stats']
    assert math.isclose(st['mean'], float(got.mean()), abs_tol=1e-3) and math.isclose(st['std'], float(got.std()), abs_tol=1e-3)
    assert (st['min'], st['max']) == (round(float(got.min()), 4), round(float(got.max()), 4)) and set(got) <= {np.float32(v) for v in train}
    assert re.search(r"labels: score, a number \(regression\): train mean [\d.]+, std [\d.]+, min [\d.]+, max [\d.]+\n", out), out
    assert 'score' in prep_command(m) and '--problem_type' not in prep_command(m)
    mi = prepare(prep_args(tmp_path/'i', scores_csv(tmp_path/'i.csv', [i % 4 for i in range(40)]), label_column='score', problem_type='regression'))
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
    m = prepare(prep_args(tmp_path, lists_jsonl(tmp_path/'m.jsonl', 60)))
    out = capsys.readouterr().out
    prepared = load_prepared(str(tmp_path/'prep'))
    ds, m2 = prepared.splits, prepared.manifest
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
    m = prepare(prep_args(tmp_path, str(d), accept_labels=['weather']))
    assert m['left_out'] == {'validation': {'weather': 3}} and m['rows']['validation'] == 6
    assert "left out: label 'weather' of 3 rows of split 'validation' (not in train; --accept_labels)" in capsys.readouterr().out
    assert load_prepared(str(tmp_path/'prep')).splits['validation']['labels'].count([0.0, 0.0, 1.0]) == 3


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
    assert refused(prepare, prep_args(tmp_path, f, problem_type='classification')) == (
        f"unknown --problem_type 'classification': use one of {', '.join(PROBLEM_TYPES)}, or leave it out (it is read from the label column)")
    assert refused(prepare, prep_args(tmp_path, f, problem_type='regression', label_separator=',')).startswith(
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


# ----------------------------------------------------------------------------------------------------
# Issue 43, item 1 (data): two text columns are the tokenizer's sentence pair by default (`text`, `text_pair`), `--join_texts` joins them.
#
# Every file is written by the test; the tokenizer is the offline MiniLM (`local_model()`), which has a pair encoding and segment ids.
# (was test_pairs_data.py)
FIRST = ['The cat sat on the mat', 'A man is playing a guitar', 'The sun rose over the hills', 'She reads a book in the park',
         'Two dogs run along the beach', 'The train left the station late']
SECOND = ['A cat is sitting on a mat', 'Someone plays music', 'It was dark all day', 'A woman is reading outside',
          'The beach is empty', 'The train was on time']


def pairs_csv(path:Path, n:int=24, empty:dict|None=None) -> str:
    "A CSV of `n` sentence pairs (`s1`, `s2`, `label` yes/no); `empty`: row -> the column left empty."
    rows = []
    for i in range(n):
        a, b = f"{FIRST[i % 6]} {i}", f"{SECOND[(i * 5) % 6]} {i}"
        if (empty or {}).get(i) == 's1': a = ''
        if (empty or {}).get(i) == 's2': b = ''
        rows.append(f'"{a}","{b}",{["no", "yes"][i % 2]}\n')
    path.write_text('s1,s2,label\n' + ''.join(rows))
    return str(path)


def pair_args(tmp_path, data, **kw) -> DataArguments:
    return DataArguments(**{'data': data, 'model_id': local_model(), 'dataset_path': str(tmp_path/'prep'), 'text_column': ['s1', 's2'], **kw})


def test_two_columns_are_a_pair_by_default(tmp_path):
    f = pairs_csv(tmp_path/'p.csv')
    raw = load_raw(f, ['s1', 's2'])
    ds = validate(raw, ['s1', 's2'])
    assert ds['train'].column_names == ['text', 'text_pair', 'label'] and ds['train'].features['text_pair'] == Value('string')
    src = {(a, b): l for a, b, l in zip(raw['train']['s1'], raw['train']['s2'], raw['train']['label'])}
    for s in ('train', 'validation'):   # each text keeps its own pair and label
        assert all(src[(r['text'], r['text_pair'])] == ['no', 'yes'][r['label']] for r in ds[s])
    joined = validate(raw, ['s1', 's2'], join_texts=True)
    assert joined['train'].column_names == ['text', 'label'] and all('. ' in t for t in joined['train']['text'])
    three = Dataset.from_dict({'a': ['x y'] * 8, 'b': ['p q'] * 8, 'c': ['z'] * 8, 'label': ['u', 'v'] * 4})
    assert validate(DatasetDict(train=three), ['a', 'b', 'c'], eval_fraction=0.25)['train'].column_names == ['text', 'label']   # three: always joined


def test_pair_lengths_and_tokens(tmp_path, minilm_tokenizer):
    ds = validate(load_raw(pairs_csv(tmp_path/'p.csv'), ['s1', 's2']), ['s1', 's2'])
    t = ds['train']
    lengths = token_lengths(t, minilm_tokenizer)
    assert lengths.tolist() == [len(minilm_tokenizer(a, b)['input_ids']) for a, b in zip(t['text'], t['text_pair'])]
    assert (lengths > token_lengths(t.remove_columns('text_pair'), minilm_tokenizer)).all()   # the second text counts
    length = choose_length(lengths, 100)[0]
    tds = tokenize(ds, minilm_tokenizer, length)
    row, a, b = tds['train'][0], t[0]['text'], t[0]['text_pair']
    want = minilm_tokenizer(a, b, padding='max_length', max_length=length)
    assert row['input_ids'] == want['input_ids'] and row['token_type_ids'] == want['token_type_ids']
    assert row['input_ids'].count(minilm_tokenizer.sep_token_id) == 2 and set(row['token_type_ids']) == {0, 1}
    assert minilm_tokenizer.decode([i for i in row['input_ids'] if i != minilm_tokenizer.pad_token_id], skip_special_tokens=True).split() == minilm_tokenizer.decode(minilm_tokenizer(a + ' ' + b)['input_ids'], skip_special_tokens=True).split()


def test_truncation_longest_first_counted(tmp_path, minilm_tokenizer, capsys):
    long = ' '.join(['word'] * 60)
    (tmp_path/'t.csv').write_text('s1,s2,label\n' + ''.join(f'"{FIRST[i % 6]} {long if i == 3 else ""}","{SECOND[i % 6]}",{["no", "yes"][i % 2]}\n' for i in range(20)))
    m = prepare(pair_args(tmp_path, str(tmp_path/'t.csv'), max_length=32, eval_fraction=0.5))
    assert sum(m['truncated'].values()) == 1 and re.search(r'truncated rows: train \d, validation \d', capsys.readouterr().out)
    prepared = load_prepared(str(tmp_path/'prep'))
    ds, _ = prepared.splits, prepared.manifest
    row = next(r for s in ds.values() for r in s if len([i for i in r['attention_mask'] if i]) == 32)
    tt = row['token_type_ids']
    assert tt.count(1) >= 4 and tt[-1] == 1   # longest first: the long first text was cut, the short second kept whole


def test_prepare_says_and_records_the_pair(tmp_path, capsys):
    f = pairs_csv(tmp_path/'p.csv')
    m = prepare(pair_args(tmp_path, f))
    out = capsys.readouterr().out
    assert 'text: s1 + s2, as a sentence pair ([SEP] between, segment ids)' in out
    assert m['text_pair'] is True and m['problem_type'] == 'single_label_classification'
    prepared = load_prepared(str(tmp_path/'prep'))
    ds, m2 = prepared.splits, prepared.manifest
    assert m2 == m and set(ds['train'][0]['token_type_ids']) == {0, 1}
    assert '--join_texts' not in prep_command(m)
    mj = prepare(pair_args(tmp_path/'j', f, join_texts=True))
    assert 'text: s1 + s2, joined as sentences' in capsys.readouterr().out
    assert mj['text_pair'] is False and prep_command(mj).endswith('--text_column s1 s2 --join_texts')
    assert set(load_prepared(str(tmp_path/'j'/'prep')).splits['train'][0]['token_type_ids']) == {0}
    fp, fj = data_fingerprint(m), data_fingerprint(mj)
    assert fp['text_pair'] is True and 'text_pair' not in fj and fp['sha256'] != fj['sha256']
    assert m['content_sha256'] != mj['content_sha256']


def test_pair_hash_changes_with_the_second_text(tmp_path):
    from trn_tutorials.data.prepare import _content_sha256
    ds = validate(load_raw(pairs_csv(tmp_path/'p.csv'), ['s1', 's2']), ['s1', 's2'])
    other = DatasetDict({s: d.map(lambda r: {'text_pair': r['text_pair'] + '!'}) for s, d in ds.items()})
    assert _content_sha256(ds) != _content_sha256(other)


@pytest.mark.parametrize('col', ['s2', 's1'])
def test_an_empty_text_of_a_pair_refused_by_line(tmp_path, col, capsys):
    f = pairs_csv(tmp_path/'p.csv', empty={3: col, 7: col})
    msg = refused(prepare, pair_args(tmp_path, f))
    assert msg == (f"{f}: 2 rows have no {col!r} text (lines 5 and 9): fill them (a sentence pair needs both texts), "
                   f"or pass --join_texts to join s1 and s2 as sentences")
    assert not (tmp_path/'prep').exists()
    m = prepare(pair_args(tmp_path, f, join_texts=True))   # the fix, as printed, works
    assert m['text_pair'] is False and sum(m['rows'].values()) == 24


def test_a_tokenizer_without_pair_encoding_refused(tmp_path):
    "A word-level tokenizer with no separator token: pairs are refused before tokenizing; --join_texts prepares."
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    f = pairs_csv(tmp_path/'p.csv')
    words = sorted({w for t in FIRST + SECOND for w in t.split()} | {str(i) for i in range(24)})
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(['[UNK]', '[PAD]'] + words)}, unk_token='[UNK]'))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path/'nosep'
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token='[UNK]', pad_token='[PAD]').save_pretrained(folder)
    msg = refused(prepare, pair_args(tmp_path, f, model_id=str(folder)))
    assert msg.startswith(f"the tokenizer of {folder} has no pair encoding (no separator token to put between s1 and s2): pass --join_texts"), msg
    assert not (tmp_path/'prep').exists()
    assert prepare(pair_args(tmp_path, f, model_id=str(folder), join_texts=True))['text_pair'] is False


def test_join_texts_needs_two_columns(tmp_path):
    f = pairs_csv(tmp_path/'p.csv')
    assert refused(prepare, pair_args(tmp_path, f, text_column=['s1'], join_texts=True)) == (
        "--join_texts joins several --text_column, but only 's1' is given: name two or more (e.g. --text_column title content), or leave --join_texts out")
    a, = parse_args([DataArguments], ['--text_column', 's1', 's2', '--join_texts'])
    assert a.join_texts is True and a.text_column == ['s1', 's2']


def test_accepted_label_rows_left_out_keep_pairs_aligned(tmp_path):
    "_encode leaves out the rows of an accepted label train lacks: text and text_pair drop the same rows."
    d = tmp_path/'d'; d.mkdir()
    pairs_csv(d/'train.csv')
    (d/'validation.csv').write_text('s1,s2,label\n' + ''.join(f'"first {i}","second {i}",{["no", "maybe", "yes"][i % 3]}\n' for i in range(9)))
    ds = validate(load_raw(str(d), ['s1', 's2']), ['s1', 's2'], accept_labels=['maybe'])
    v = ds['validation']
    assert len(v) == 6 and all(a.split()[1] == b.split()[1] for a, b in zip(v['text'], v['text_pair']))
    assert [int(a.split()[1]) % 3 for a in v['text']] == [0, 2] * 3


def test_repeats_of_pairs(tmp_path):
    "A validation pair repeats train only when both its texts do."
    train = Dataset.from_dict({'text': ['a', 'b', 'c'], 'text_pair': ['x', 'y', 'z'], 'label': [0, 1, 0]})
    val = Dataset.from_dict({'text': ['a', 'b', 'q'], 'text_pair': ['x', 'other', 'z'], 'label': [0, 1, 0]})
    ds = DatasetDict(train=train, validation=val)
    assert repeated_rows(ds) == {'validation': 1}
    assert repeat_warning(ds).startswith('warning: 1 of the 3 validation rows (33%) have a text the train split has too')
    assert repeated_rows(DatasetDict(train=train.remove_columns('text_pair'), validation=val.remove_columns('text_pair'))) == {'validation': 2}


# ------------------------------------------------------------------------------------------------- similar labels
# ------------------------------------------------------------------------------------------------- similar labels
def test_edit_distance_is_levenshtein():
    def slow(a, b):   # by definition: the fewest edits, searched breadth-first
        seen, level = {a}, {a}
        for n in itertools.count():
            if b in level: return n
            nxt = set()
            for s in level:
                for i in range(len(s) + 1):
                    for c in set(a + b):
                        nxt |= {s[:i] + c + s[i:], s[:i] + c + s[i + 1:]}
                    nxt.add(s[:i] + s[i + 1:])
            level = nxt - seen; seen |= nxt
    rnd = random.Random(0)
    for _ in range(60):
        a, b = (''.join(rnd.choices('abc', k=rnd.randint(0, 4))) for _ in range(2))
        assert edit_distance(a, b) == slow(a, b) == edit_distance(b, a), (a, b)
    assert edit_distance('kitten', 'sitting') == 3 and edit_distance('', 'joy') == 3


def test_similar_labels():
    counts = {'joy': 60, 'sadness': 60, 'Joy': 1, 'sadnes': 2, 'very_good': 5, 'Very Good': 9, 'very-good': 1,
              'acceptable': 5, 'unacceptable': 5, 'positive': 5, 'negative': 5, '0': 3, '1': 3, 'A': 1, 'B': 1,
              '1.5': 2, '2.5': 2, 'LABEL_1': 2, 'LABEL_11': 2, 'class_07': 2, 'class_08': 2, 'cat': 3, 'cut': 3, 'anger': 4, 'angry': 2, 'fear': 4, 'fears': 1}
    assert similar_labels(counts) == [('Joy', 'joy', 'case'), ('sadnes', 'sadness', 'one letter'), ('very_good', 'Very Good', 'case'),
                                      ('very-good', 'Very Good', 'case'), ('fears', 'fear', 'one letter')]
    assert similar_labels({'Bear': 2, 'bear': 2}) == [('bear', 'Bear', 'case')]   # a tie: the later name is the suspect
    for k in KNOWN_DATA.values(): assert similar_labels(dict.fromkeys(k.label_names, 10)) == []
    assert similar_labels(dict.fromkeys(map(str, range(100)), 5)) == []   # integer ids are names too


def test_similar_labels_scales(monkeypatch):
    "No comparison of every pair: 20,000 made-up labels (200 million pairs) need a handful of edit distances."
    import trn_tutorials.data.labels as C
    rnd = random.Random(1)
    counts = {''.join(rnd.choices(string.ascii_lowercase, k=9)): 1 for _ in range(20_000)}
    counts |= {'abcdefghi': 5, 'abcdefgh': 1, 'ABCDEFGHI': 2}
    calls = []
    monkeypatch.setattr(C, 'edit_distance', lambda a, b: calls.append(1) or edit_distance(a, b))
    found = similar_labels(counts)
    assert len(calls) < 20_000, len(calls)   # counted, not timed: a timed test fails on a busy machine
    monkeypatch.undo()
    assert ('abcdefgh', 'abcdefghi', 'one letter') in found and ('ABCDEFGHI', 'abcdefghi', 'case') in found
    brute = {(a, b) for a, b in itertools.combinations([l for l in sorted(counts) if l.islower()][:300], 2) if edit_distance(a, b) <= 1}
    assert brute <= {tuple(sorted(p[:2])) for p in found}


# ------------------------------------------------------------------------------------------------- labels in validate
# ------------------------------------------------------------------------------------------------- labels in validate
def two(*splits) -> DatasetDict:
    "A DatasetDict of `(name, labels)` splits with made-up texts."
    return DatasetDict({s: Dataset.from_dict({'text': [f'{s} {i}' for i in range(len(ls))], 'label': list(ls)}) for s, ls in splits})


TRAIN = ['joy'] * 4 + ['sadness'] * 4


@pytest.mark.parametrize('splits,words', [
    ([('train', TRAIN), ('test', ['joy', 'fear', 'fear'])],
     "unknown label 'fear' in split 'test' (2 rows): the train split has only 'joy', 'sadness'; fix those rows, add rows of it to train, "
     "or pass --accept_labels fear --eval_fraction 0.25 to leave those rows out of split 'test'"),   # 8 train rows: 0.1 gives 1 validation row
    ([('train', TRAIN), ('validation', ['joy', 'Sadness', 'love'])],
     "unknown labels 'Sadness', 'love' in split 'validation' (1 row, 1 row; 'Sadness' looks like 'sadness')"),
    ([('train', TRAIN + ['Joy'])],
     "labels that look like one label spelt two ways in split 'train': 'Joy' (1 row) and 'joy' (4 rows) differ only in case, spaces, _ or -; "
     "fix the rows of the likely typo 'Joy', or pass --accept_labels Joy --eval_fraction 0.25 if they are meant"),
    ([('train', TRAIN + ['sadnes'] * 2 + ['very good'] * 2 + ['very_good'] * 3)],
     "'sadnes' (2 rows) and 'sadness' (4 rows) differ only by one letter; 'very good' (2 rows) and 'very_good' (3 rows) differ only in case, "
     "spaces, _ or -; fix the rows of the likely typos 'sadnes', 'very good', or pass --accept_labels sadnes 'very good' --eval_fraction 0.34 if they are meant"),
    ([('train', TRAIN + ['anger'])],
     "label 'anger' (1 row) in split 'train' has fewer than --min_label_rows 2 (a label seen once is most often a typo): fix or add rows, "
     "or pass --accept_labels anger --eval_fraction 0.25 to keep it (or --min_label_rows 1 --eval_fraction 0.25); with one row, a label stays in train only (the validation split "
     "taken off train gets none)"),
    ([('train', TRAIN + ['anger']), ('validation', ['joy', 'sadness'])],
     "label 'anger' (1 row) in split 'train' has fewer than --min_label_rows 2 (a label seen once is most often a typo): fix"),
    ([('train', TRAIN + ['0', '1', '0', '1'])],   # issue 42: ids beside names were four labels, silently
     "the labels of split 'train' mix integer ids (0, 1) with names (joy, sadness): give every row a name, or every row an id"),
])
def test_suspect_labels_refused(splits, words):
    with pytest.raises(UsageError) as e: validate(two(*splits))
    assert words in one_line(e)


def test_min_label_rows_and_zero_row_class_labels():
    with pytest.raises(UsageError, match=r"labels 'joy' \(4 rows\), 'sadness' \(4 rows\) in split 'train' have fewer than --min_label_rows 5"):
        validate(two(('train', TRAIN), ('validation', ['joy', 'sadness'])), min_label_rows=5)
    feats = Features({'text': Value('string'), 'label': ClassLabel(names=['neg', 'neutral', 'pos'])})
    ds = DatasetDict({s: Dataset.from_dict({'text': ['a', 'b', 'c', 'd'], 'label': [0, 2, 0, 2]}, features=feats) for s in ('train', 'validation')})
    with pytest.raises(UsageError, match=r"label 'neutral' \(0 rows\) in split 'train' has fewer"): validate(ds)
    assert validate(ds, accept_labels=['neutral'])['train'].features['label'].names == ['neg', 'neutral', 'pos']


def test_accepted_labels():
    ok = validate(two(('train', TRAIN + ['Joy'] * 2), ('validation', ['joy', 'sadness', 'Joy'])), accept_labels=['joy'])   # either of a pair
    assert ok['train'].features['label'].names == ['Joy', 'joy', 'sadness']
    kept = validate(two(('train', TRAIN + ['anger']), ('validation', ['joy', 'sadness'])), accept_labels=['anger'])
    assert collections.Counter(kept['train'].features['label'].int2str(list(kept['train']['label'])))['anger'] == 1
    left = validate(two(('train', TRAIN), ('validation', ['joy', 'sadness']), ('test', ['joy', 'fear', 'sadness', 'fear'])), accept_labels=['fear'])
    assert left['test']['text'][:] == ['test 0', 'test 2'] and left['test'].features['label'].names == ['joy', 'sadness']
    with pytest.raises(UsageError, match=r"every row of split 'test' has a label that train lacks .*: add rows of the train labels to it, or remove it$"):
        validate(two(('train', TRAIN), ('validation', ['joy', 'sadness']), ('test', ['fear'])), accept_labels=['fear'])
    with pytest.raises(UsageError, match=r"--accept_labels jyo: no such label in the data \(train has 'joy', 'sadness'\): pass labels the data has$"):
        validate(two(('train', TRAIN)), accept_labels=['jyo'])


def test_known_data_and_the_sample_pass(tmp_path):
    "The presets' label sets and the bundled sample raise no suspicion; the real emotion files neither, where they are."
    for name, k in KNOWN_DATA.items():
        if k.problem_type == 'regression': continue   # stsb: a score, no label names
        labels = [l for l in k.label_names for _ in range(3)]
        assert validate(two(('train', labels), ('validation', list(k.label_names))), label_names=list(k.label_names))['train'].features['label'].names == list(k.label_names)
    assert validate(load_raw(sample_data()))['train'].features['label'].names == EMOTION_LABELS
    emotion = Path(__file__).resolve().parents[2]/'shared'/'data'/'emotion'
    if (emotion/'train.txt').exists(): assert len(validate(load_raw(str(emotion)))['train']) == 16_000


def _split(labels, **kw):
    "`validate` of one train split with these labels."
    return validate(two(('train', labels)), **kw)


@pytest.mark.parametrize('names', [[f'topic_{i:02d}' for i in range(1, 21)], [f'class_{c}' for c in 'abcdefghijklmnopqrstuvwxyz'],
                                   [f'L{i}' for i in range(1, 13)], ['cat-3', 'cat-8'], ['typeA', 'typeB', 'typeC'],
                                   ['size_S', 'size_M', 'size_XL'], ['grade a', 'grade b']])
def test_systematic_labels_are_not_typos(names):
    assert similar_labels({n: 5 for n in names}) == []
    assert _split([n for n in names for _ in range(10)])['train'].features['label'].names == sorted(names)


def test_real_typos_still_found():
    assert [p[:2] for p in similar_labels({'positive': 9, 'positve': 2, 'class_a': 9, 'clas_a': 1})] == [('clas_a', 'class_a'), ('positve', 'positive')]


def test_one_fix_names_every_suspect_label():
    "Four typos and a rare label: the first refusal's --accept_labels names all of them, and passed as printed it works."
    labels = ['good'] * 30 + ['bad'] * 30 + [x for w in ('goad', 'gond', 'gold', 'goot', 'bud', 'bid') for x in [w] * 2] + ['fine']
    with pytest.raises(UsageError) as e: _split(labels)
    fix = shlex.split(str(e.value).split('--accept_labels ')[1].split(' if they')[0])
    assert set(fix) == {'goad', 'gond', 'gold', 'goot', 'fine'}, str(e.value)
    assert 'fine' in _split(labels, accept_labels=fix)['train'].features['label'].names


def test_one_row_label_accepted_stays_in_train():
    labels = ['joy'] * 20 + ['sadness'] * 20 + ['anger']
    with pytest.raises(UsageError) as e: _split(labels)
    assert '--accept_labels anger to keep it (or --min_label_rows 1); with one row, a label stays in train only' in str(e.value)
    for kw in (dict(accept_labels=['anger']), dict(min_label_rows=1)):
        ds = _split(labels, **kw)
        names = ds['train'].features['label'].names
        assert ds['train']['label'].count(names.index('anger')) == 1 and names.index('anger') not in ds['validation']['label']
        assert len(ds['train']) + len(ds['validation']) == len(labels)
    same = [_split(['joy'] * 20 + ['sadness'] * 20)['validation']['text'] for _ in range(2)]   # no one-row label: the split as before
    assert same[0] == same[1]


def test_no_label_to_split_off_gets_no_accept_fix():
    with pytest.raises(UsageError) as e: _split(['joy', 'sadness', 'anger'])
    assert 'no validation split can be taken off it' in str(e.value) and '--accept_labels' not in str(e.value)
    with pytest.raises(UsageError, match=r"pass --eval_fraction 0\.\d+, or add a validation file"):
        _split(['a'] * 10 + ['b'] * 10 + ['c'] * 10 + ['d'] * 10 + ['e'] * 10 + ['f'] * 10, eval_fraction=0.05)


def test_rare_label_fix_names_the_eval_fraction_it_needs():
    labels = ['joy'] * 3 + ['sadness'] * 3 + ['love'] * 3 + ['anger']
    with pytest.raises(UsageError, match=r"pass --accept_labels anger --eval_fraction 0\.34 to keep it \(or --min_label_rows 1 --eval_fraction 0\.34\)"):
        _split(labels)
    assert len(_split(labels, accept_labels=['anger'], eval_fraction=0.34)['validation']) == 4


def test_tokenizer_fingerprint():
    tok = AutoTokenizer.from_pretrained(local_model())
    fp = tokenizer_fingerprint(tok)
    assert fp == {'vocab_size': 30522, 'special_ids': {'pad': 0, 'cls': 101, 'sep': 102, 'unk': 100, 'mask': 103, 'bos': None, 'eos': None}}
    tok.add_tokens(['trainium'])
    assert tokenizer_fingerprint(tok)['vocab_size'] == 30523 and json.loads(json.dumps(fp)) == fp
