"""Checks of `trn_tutorials.data.checks`: what `validate` makes of raw data and what it refuses. The text and label columns
(one text, a sentence pair, label names or ids), the validation split it takes off train (seeded, stratified), and labels that
look like mistakes: unknown outside train, spelt two ways, too rare; each refusal's one fix (`--accept_labels`,
`--eval_fraction`) works as printed. Texts of the validation or test split that train holds too are counted.

Every file is written by the test.
"""
from __future__ import annotations
import collections, shlex
from pathlib import Path

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from conftest import TRAIN, WORDS, csv, lists_jsonl, pairs_csv, scores_csv
from local_services import one_line, prep_args, refused
from trn_tutorials.core.options import UsageError
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.files import EMOTION_LABELS, KNOWN_DATA
from trn_tutorials.data.sources import load_raw, sample_data
from trn_tutorials.data.labels import similar_labels
from trn_tutorials.data.checks import repeat_warning, repeated_rows, validate


def test_validate_sample(raw, ds):
    assert ds['train'].features['label'].names == EMOTION_LABELS
    assert ds['train'].features['text'] == Value('string')
    assert list(ds) == ['train', 'validation', 'test']
    assert ds['train'][0] == {'text': raw['train'][0]['text'], 'label': EMOTION_LABELS.index(raw['train'][0]['label'])}


def test_validate_splits_off_a_stratified_seeded_validation_set():
    one = validate(load_raw(str(Path(sample_data())/'train.txt')))
    assert {s: len(d) for s, d in one.items()} == {'train': 324, 'validation': 36}
    assert set(collections.Counter(one['validation']['label']).values()) == {6}
    again = validate(load_raw(str(Path(sample_data())/'train.txt')))
    assert list(again['validation']['text']) == list(one['validation']['text'])


def test_the_random_split_is_seeded(tmp_path):
    f = scores_csv(tmp_path/'s.csv', [i * 0.25 for i in range(40)])
    val = lambda seed: validate(load_raw(f), label_column='score', seed=seed)['validation']['text']
    assert val(1) == val(1) and val(1) != val(2) and len(val(1)) == 4


def test_validate_other_columns_and_label_sets(ds, tmp_path):
    (tmp_path/'reviews.csv').write_text('review,stars,id\ngreat,good,1\nawful,bad,2\nfine,good,3\nmeh,bad,4\n')
    rv = validate(load_raw(str(tmp_path/'reviews.csv')), text_column='review', label_column='stars', eval_fraction=0.5)
    assert rv['train'].features['label'].names == ['bad', 'good']
    assert sorted(list(rv['train']['label']) + list(rv['validation']['label'])) == [0, 0, 1, 1]
    ints = DatasetDict(train=Dataset.from_dict({'text': ['a', 'b', 'c', 'd'], 'label': [0, 1, 2, 1]}),
                       validation=Dataset.from_dict({'text': ['e'], 'label': [2]}))
    assert validate(ints, min_label_rows=1)['train'].features['label'].names == ['0', '1', '2']   # one row of 0 and of 2
    assert validate(ds)['train'].features['label'].names == EMOTION_LABELS
    own = Dataset.from_dict({'text': ['a', 'b'], 'label': [0, 1]},
                            features=Features({'text': Value('string'), 'label': ClassLabel(names=['pos', 'neg'])}))
    assert validate(DatasetDict(train=own, validation=own), min_label_rows=1)['train'].features['label'].names == ['pos', 'neg']


def test_validate_bad_data(tmp_path):
    (tmp_path/'reviews.csv').write_text('review,stars,id\ngreat,good,1\nawful,bad,2\nfine,good,3\nmeh,bad,4\n')
    reviews = lambda: load_raw(str(tmp_path/'reviews.csv'))
    with pytest.raises(UsageError, match=r"no text column 'text' in split 'train' \(columns: review, stars, id\): pass --text_column"):
        validate(reviews())
    with pytest.raises(UsageError, match="pass --label_column"): validate(reviews(), text_column='review')
    with pytest.raises(UsageError, match=r"column 'id' of .*reviews\.csv holds whole numbers \(1, 2\), not text"): validate(reviews(), text_column='id', label_column='stars')
    bad = tmp_path/'bad'; bad.mkdir()
    (bad/'train.txt').write_text('i feel happy;joy\ni feel glad;joy\ni feel low;sadness\ni feel blue;sadness\n')
    (bad/'test.txt').write_text('i feel grumpy;grumpy\n')
    with pytest.raises(UsageError, match=r"unknown label 'grumpy' in split 'test' \(1 row\): the train split has only 'joy', 'sadness'; .*"
                                         r"or remove split 'test' \(every row of it has a label train lacks\)$"):
        validate(load_raw(str(bad)))
    (bad/'test.txt').write_text('i feel grumpy\n')
    with pytest.raises(UsageError, match=r"bad/test\.txt: 1 row has no label \(line 1\): give every row one"): validate(load_raw(str(bad)))
    with pytest.raises(UsageError, match=r"must be ids 0\.\.k-1"):
        validate(DatasetDict(train=Dataset.from_dict({'text': ['a', 'b'], 'label': [1, 5]})))
    ints = Dataset.from_dict({'text': ['a', 'b', 'c', 'd'], 'label': [0, 1, 2, 1]})
    empty = DatasetDict(train=ints, validation=Dataset.from_dict({'text': [], 'label': []}, features=ints.features))
    with pytest.raises(UsageError, match="split 'validation' is empty"): validate(empty)
    with pytest.raises(UsageError, match="only one label"):
        validate(DatasetDict(train=Dataset.from_dict({'text': ['a', 'b'], 'label': ['joy', 'joy']})))


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


# ------------------------------------------------------------------------------------------------- sentence pairs
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


def test_repeats_of_pairs(tmp_path):
    "A validation pair repeats train only when both its texts do."
    train = Dataset.from_dict({'text': ['a', 'b', 'c'], 'text_pair': ['x', 'y', 'z'], 'label': [0, 1, 0]})
    val = Dataset.from_dict({'text': ['a', 'b', 'q'], 'text_pair': ['x', 'other', 'z'], 'label': [0, 1, 0]})
    ds = DatasetDict(train=train, validation=val)
    assert repeated_rows(ds) == {'validation': 1}
    assert repeat_warning(ds).startswith('warning: 1 of the 3 validation rows (33%) have a text the train split has too')
    assert repeated_rows(DatasetDict(train=train.remove_columns('text_pair'), validation=val.remove_columns('text_pair'))) == {'validation': 2}


# ------------------------------------------------------------------------------------------------- labels in validate
def two(*splits) -> DatasetDict:
    "A DatasetDict of `(name, labels)` splits with made-up texts."
    return DatasetDict({s: Dataset.from_dict({'text': [f'{s} {i}' for i in range(len(ls))], 'label': list(ls)}) for s, ls in splits})


def test_text_column_is_not_the_label_column(tmp_path):
    with pytest.raises(UsageError, match="--text_column label is also the --label_column: pass the column that holds the text"):
        validate(two(('train', TRAIN)), text_column=['text', 'label'])
    with pytest.raises(UsageError, match="--text_column stars is also the --label_column"):
        prepare(prep_args(tmp_path, csv(tmp_path, TRAIN), text_column=['stars'], label_column='stars'))
    assert not (tmp_path/'prep').exists()


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
