"""Checks of `trn_tutorials.data.labels`: what the labels are and what they are called. Issue 43, items 2 and 3 (data): a column
of decimal numbers is a regression label (float32), a column of label lists (or names joined by --label_separator) a
multi-label one (multi-hot float32 `labels`), integers are classes unless told; bad values refused in one line naming their
rows; the label maps; the names that look like one label spelt two ways (`similar_labels`, `edit_distance`).

Every file is written by the test; the tokenizer is the offline MiniLM (`local_model()`).
"""
from __future__ import annotations
import itertools, json, math, random, string

import pytest
from datasets import ClassLabel, Sequence, Value

from conftest import LISTS, WORDS, lists_jsonl, pair_args, pairs_csv, scores_csv
from local_services import prep_args, refused
from trn_tutorials.core.options import parse_args
from trn_tutorials.data.sources import DataArguments, load_raw
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.files import EMOTION_LABELS, KNOWN_DATA, PROBLEM_TYPES
from trn_tutorials.data.labels import edit_distance, label_maps, problem_type_of, similar_labels
from trn_tutorials.data.checks import validate


def test_label_maps(ds):
    id2label, label2id = label_maps(ds)
    assert id2label == dict(enumerate(EMOTION_LABELS)) and label2id['surprise'] == 5
    assert label_maps(ds['test']) == (id2label, label2id)


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


def test_integer_ids_with_a_missing_one_name_the_line(tmp_path):
    "pandas reads integer labels as floats when one is missing: that row is named, not `numbers with decimals`."
    (tmp_path/'ids.csv').write_text('text,label\n' + ''.join(f"tweet {i},{'' if i == 6 else i % 2}\n" for i in range(12)))
    assert refused(validate, load_raw(str(tmp_path/'ids.csv'))) == f"{tmp_path/'ids.csv'}: 1 row has no label (line 8): give every row one"
    (tmp_path/'ids.csv').write_text('text,label\n' + ''.join(f"tweet {i}.,{float(i % 2)}\n" for i in range(12)))
    assert validate(load_raw(str(tmp_path/'ids.csv')))['train'].features['label'].names == ['0', '1']


# ------------------------------------------------------------------------------------------------------ multi-label
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


# ------------------------------------------------------------------------------------------------- sentence pairs
@pytest.mark.parametrize('col', ['s2', 's1'])
def test_an_empty_text_of_a_pair_refused_by_line(tmp_path, col, capsys):
    f = pairs_csv(tmp_path/'p.csv', empty={3: col, 7: col})
    msg = refused(prepare, pair_args(tmp_path, f))
    assert msg == (f"{f}: 2 rows have no {col!r} text (lines 5 and 9): fill them (a sentence pair needs both texts), "
                   f"or pass --join_texts to join s1 and s2 as sentences")
    assert not (tmp_path/'prep').exists()
    m = prepare(pair_args(tmp_path, f, join_texts=True))   # the fix, as printed, works
    assert m['text_pair'] is False and sum(m['rows'].values()) == 24


def test_accepted_label_rows_left_out_keep_pairs_aligned(tmp_path):
    "encode_split leaves out the rows of an accepted label train lacks: text and text_pair drop the same rows."
    d = tmp_path/'d'; d.mkdir()
    pairs_csv(d/'train.csv')
    (d/'validation.csv').write_text('s1,s2,label\n' + ''.join(f'"first {i}","second {i}",{["no", "maybe", "yes"][i % 3]}\n' for i in range(9)))
    ds = validate(load_raw(str(d), ['s1', 's2']), ['s1', 's2'], accept_labels=['maybe'])
    v = ds['validation']
    assert len(v) == 6 and all(a.split()[1] == b.split()[1] for a, b in zip(v['text'], v['text_pair']))
    assert [int(a.split()[1]) % 3 for a in v['text']] == [0, 2] * 3


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


def test_real_typos_still_found():
    assert [p[:2] for p in similar_labels({'positive': 9, 'positve': 2, 'class_a': 9, 'clas_a': 1})] == [('clas_a', 'class_a'), ('positve', 'positive')]
