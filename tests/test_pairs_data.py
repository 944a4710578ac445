"""Issue 43, item 1 (data): two text columns are the tokenizer's sentence pair by default (`text`, `text_pair`), `--join_texts` joins them.

Every file is written by the test; the tokenizer is the offline MiniLM (`local_model()`), which has a pair encoding and segment ids.
"""
from __future__ import annotations
import json, re
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict, Value
from transformers import AutoTokenizer

from trn_tutorials.core import UsageError, parse_args
from trn_tutorials.models import local_model
from trn_tutorials.data import (DataArguments, choose_length, data_fingerprint, load_prepared, prep_command, prepare,
                                token_lengths, tokenize)
from trn_tutorials.data_files import load_raw
from trn_tutorials.data_checks import validate
from trn_tutorials.data_checks import repeat_warning, repeated_rows

REPR = re.compile(r"Value\(|ClassLabel\(|Traceback")
FIRST = ['The cat sat on the mat', 'A man is playing a guitar', 'The sun rose over the hills', 'She reads a book in the park',
         'Two dogs run along the beach', 'The train left the station late']
SECOND = ['A cat is sitting on a mat', 'Someone plays music', 'It was dark all day', 'A woman is reading outside',
          'The beach is empty', 'The train was on time']


def refused(fn, *a, **kw) -> str:
    with pytest.raises(UsageError) as e: fn(*a, **kw)
    msg = str(e.value)
    assert '\n' not in msg and not REPR.search(msg), msg
    return msg


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


def args(tmp_path, data, **kw) -> DataArguments:
    return DataArguments(**{'data': data, 'model_id': local_model(), 'dataset_path': str(tmp_path/'prep'), 'text_column': ['s1', 's2'], **kw})


@pytest.fixture(scope='module')
def tok(): return AutoTokenizer.from_pretrained(local_model())


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


def test_pair_lengths_and_tokens(tmp_path, tok):
    ds = validate(load_raw(pairs_csv(tmp_path/'p.csv'), ['s1', 's2']), ['s1', 's2'])
    t = ds['train']
    lengths = token_lengths(t, tok)
    assert lengths.tolist() == [len(tok(a, b)['input_ids']) for a, b in zip(t['text'], t['text_pair'])]
    assert (lengths > token_lengths(t.remove_columns('text_pair'), tok)).all()   # the second text counts
    length = choose_length(lengths, 100)[0]
    tds = tokenize(ds, tok, length)
    row, a, b = tds['train'][0], t[0]['text'], t[0]['text_pair']
    want = tok(a, b, padding='max_length', max_length=length)
    assert row['input_ids'] == want['input_ids'] and row['token_type_ids'] == want['token_type_ids']
    assert row['input_ids'].count(tok.sep_token_id) == 2 and set(row['token_type_ids']) == {0, 1}
    assert tok.decode([i for i in row['input_ids'] if i != tok.pad_token_id], skip_special_tokens=True).split() == tok.decode(tok(a + ' ' + b)['input_ids'], skip_special_tokens=True).split()


def test_truncation_longest_first_counted(tmp_path, tok, capsys):
    long = ' '.join(['word'] * 60)
    (tmp_path/'t.csv').write_text('s1,s2,label\n' + ''.join(f'"{FIRST[i % 6]} {long if i == 3 else ""}","{SECOND[i % 6]}",{["no", "yes"][i % 2]}\n' for i in range(20)))
    m = prepare(args(tmp_path, str(tmp_path/'t.csv'), max_length=32, eval_fraction=0.5))
    assert sum(m['truncated'].values()) == 1 and re.search(r'truncated rows: train \d, validation \d', capsys.readouterr().out)
    ds, _ = load_prepared(str(tmp_path/'prep'))
    row = next(r for s in ds.values() for r in s if len([i for i in r['attention_mask'] if i]) == 32)
    tt = row['token_type_ids']
    assert tt.count(1) >= 4 and tt[-1] == 1   # longest first: the long first text was cut, the short second kept whole


def test_prepare_says_and_records_the_pair(tmp_path, capsys):
    f = pairs_csv(tmp_path/'p.csv')
    m = prepare(args(tmp_path, f))
    out = capsys.readouterr().out
    assert 'text: s1 + s2, as a sentence pair ([SEP] between, segment ids)' in out
    assert m['text_pair'] is True and m['problem_type'] == 'single_label_classification'
    ds, m2 = load_prepared(str(tmp_path/'prep'))
    assert m2 == m and set(ds['train'][0]['token_type_ids']) == {0, 1}
    assert '--join_texts' not in prep_command(m)
    mj = prepare(args(tmp_path/'j', f, join_texts=True))
    assert 'text: s1 + s2, joined as sentences' in capsys.readouterr().out
    assert mj['text_pair'] is False and prep_command(mj).endswith('--text_column s1 s2 --join_texts')
    assert set(load_prepared(str(tmp_path/'j'/'prep'))[0]['train'][0]['token_type_ids']) == {0}
    fp, fj = data_fingerprint(m), data_fingerprint(mj)
    assert fp['text_pair'] is True and 'text_pair' not in fj and fp['sha256'] != fj['sha256']
    assert m['content_sha256'] != mj['content_sha256']


def test_pair_hash_changes_with_the_second_text(tmp_path):
    from trn_tutorials.data import _content_sha256
    ds = validate(load_raw(pairs_csv(tmp_path/'p.csv'), ['s1', 's2']), ['s1', 's2'])
    other = DatasetDict({s: d.map(lambda r: {'text_pair': r['text_pair'] + '!'}) for s, d in ds.items()})
    assert _content_sha256(ds) != _content_sha256(other)


@pytest.mark.parametrize('col', ['s2', 's1'])
def test_an_empty_text_of_a_pair_refused_by_line(tmp_path, col, capsys):
    f = pairs_csv(tmp_path/'p.csv', empty={3: col, 7: col})
    msg = refused(prepare, args(tmp_path, f))
    assert msg == (f"{f}: 2 rows have no {col!r} text (lines 5 and 9): fill them (a sentence pair needs both texts), "
                   f"or pass --join_texts to join s1 and s2 as sentences")
    assert not (tmp_path/'prep').exists()
    m = prepare(args(tmp_path, f, join_texts=True))   # the fix, as printed, works
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
    msg = refused(prepare, args(tmp_path, f, model_id=str(folder)))
    assert msg.startswith(f"the tokenizer of {folder} has no pair encoding (no separator token to put between s1 and s2): pass --join_texts"), msg
    assert not (tmp_path/'prep').exists()
    assert prepare(args(tmp_path, f, model_id=str(folder), join_texts=True))['text_pair'] is False


def test_join_texts_needs_two_columns(tmp_path):
    f = pairs_csv(tmp_path/'p.csv')
    assert refused(prepare, args(tmp_path, f, text_column=['s1'], join_texts=True)) == (
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
