"""Checks of `trn_tutorials.data.shapes`: the token lengths of the texts (one text or a sentence pair), their statistics, the
padded length and the buckets chosen from them (the dynamic program against every combination), the plot of both, their
arguments checked in one line, and `tokenize` at one length or in buckets (a pair truncated longest first). The real emotion
files' lengths, where they are here (research licence: read in place, never copied)."""
from __future__ import annotations
import collections, itertools, math, re
from pathlib import Path

import numpy as np
import pytest
from datasets import DatasetDict
from transformers import AutoTokenizer

from conftest import FIRST, SECOND, pair_args, pairs_csv
from local_services import one_line
from trn_tutorials.core.options import UsageError
from trn_tutorials.models import local_model
from trn_tutorials.data.shapes import (_rounded, choose_buckets, choose_length, length_stats, padded_lengths, padding_share,
                                       plot_lengths, token_lengths, tokenize)
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.data.sources import load_raw
from trn_tutorials.data.labels import label_maps
from trn_tutorials.data.checks import validate


def test_token_lengths(ds, minilm_tokenizer, lengths):
    assert len(lengths) == 360
    assert lengths[0] == len(minilm_tokenizer(ds['train'][0]['text'])['input_ids'])
    assert (token_lengths(ds['train'], minilm_tokenizer, batch_size=7) == lengths).all()


def test_length_stats():
    assert length_stats([10]*999 + [87]) == {'rows': 1000, 'mean': 10.1, 'p50': 10, 'p95': 10, 'p99': 10, 'p99.9': 10, 'max': 87}
    assert length_stats([1, 2, 3, 4])['p50'] == 2
    with pytest.raises(UsageError, match="empty"): length_stats([])


def test_choose_length(lengths):
    toy = [10]*999 + [87]
    assert choose_length(toy) == (16, 1)
    assert choose_length(toy, percentile=100) == (88, 0)
    assert choose_length(toy, percentile=100, pad_multiple=1) == (87, 0)
    assert choose_length(toy, percentile=100, limit=64) == (64, 1)
    assert choose_length([10]*998 + [87]*2) == (88, 0)
    assert choose_length(lengths, percentile=100) == (math.ceil(lengths.max()/8)*8, 0)
    with pytest.raises(UsageError, match=r"use a number in \(0, 100\]"): choose_length(toy, percentile=0)
    with pytest.raises(UsageError, match="--pad_multiple"): choose_length(toy, pad_multiple=0)


def test_choose_buckets_padded_lengths_padding_share(lengths, length):
    toy2 = [10]*90 + [30]*10
    assert choose_buckets(toy2, 1, 32) == [32]
    assert choose_buckets(toy2, 2, 32) == [16, 32]
    assert choose_buckets(toy2, 4, 32) == [16, 32]
    assert padded_lengths(toy2, [16, 32]).sum() == 90*16 + 10*32
    assert padded_lengths([5, 16, 17, 99], [16, 32]).tolist() == [16, 16, 32, 32]
    assert round(padding_share(toy2, [16, 32]), 4) == round(1 - 1200/1760, 4)
    assert choose_buckets([3, 9, 17, 25, 33, 41], 3, 48, pad_multiple=8) == [16, 32, 48]
    assert choose_buckets(lengths, 3, length)[-1] == length
    with pytest.raises(UsageError, match="use 1 to 8"): choose_buckets(toy2, 0, 32)
    with pytest.raises(UsageError, match="--buckets 9"): choose_buckets(toy2, 9, 32)


def test_choose_buckets_is_exact():
    "The dynamic program matches trying every combination of lengths, on random lengths."
    rng = np.random.default_rng(0)
    for _ in range(20):
        l = rng.integers(3, 70, size=int(rng.integers(1, 40)))
        cands = sorted(set(_rounded(l, 72, 8).tolist()) - {72})
        for k in (2, 3):
            brute = min(padded_lengths(l, sorted(c) + [72]).sum() for n in range(min(k - 1, len(cands)) + 1)
                        for c in itertools.combinations(cands, n))
            assert padded_lengths(l, choose_buckets(l, k, 72)).sum() == brute


def test_plot_lengths_marks_length_and_bucket_edges(lengths, length, bl):
    fig = plot_lengths(lengths, length, bl, percentile=99.9)
    ax, = fig.axes
    assert [round(x.get_xdata()[0], 1) for x in ax.get_lines()] == [length + 0.5] + [b + 0.5 for b in bl[:-1]]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [f'padded length {length} (p99.9, 0 rows truncated)', f"bucket edges: {', '.join(map(str, bl[:-1]))}"]
    assert plot_lengths(lengths).axes[0].get_legend() is None


def test_tokenize_one_length(ds, minilm_tokenizer, lengths, length, tds):
    assert tds['train'].column_names == ['input_ids', 'token_type_ids', 'attention_mask', 'labels']
    assert {len(r) for s in tds.values() for r in s['input_ids']} == {length}
    assert list(tds['train']['labels']) == list(ds['train']['label'])
    assert tds['train'][0]['input_ids'][:lengths[0]] == minilm_tokenizer(ds['train'][0]['text'])['input_ids']
    assert label_maps(tds) == label_maps(ds)
    short = tokenize(ds, minilm_tokenizer, 8)['train'][int(np.argmax(lengths))]['input_ids']
    assert (len(short), minilm_tokenizer.convert_ids_to_tokens(short)[-1]) == (8, '[SEP]')


def test_tokenize_buckets(ds, minilm_tokenizer, lengths, length, tds, bl, bds):
    assert collections.Counter(len(r) for r in bds['train']['input_ids']) == collections.Counter(padded_lengths(lengths, bl).tolist())
    assert bds['train'].column_names == tds['train'].column_names
    row = int(np.argmin(lengths))
    assert bds['train'][row]['input_ids'] == tds['train'][row]['input_ids'][:len(bds['train'][row]['input_ids'])]
    assert list(bds['train']['labels']) == list(ds['train']['label'])
    vl = [len(r) for r in bds['validation']['input_ids']]
    assert vl == sorted(vl)
    assert collections.Counter(bds['validation']['labels']) == collections.Counter(ds['validation']['label'])
    with pytest.raises(UsageError, match="ascending"): tokenize(ds, minilm_tokenizer, length, [length, 8])


def test_function_arguments_checked():
    toy = [10] * 9 + [30]
    for call, words in [(lambda: choose_length(toy, percentile=float('nan')), '--percentile nan is not a finite number'),
                        (lambda: choose_length(toy, percentile='99'), "--percentile '99' is a str"),
                        (lambda: choose_length(toy, pad_multiple=2.5), '--pad_multiple 2.5 is a float'),
                        (lambda: choose_length(toy, limit=0), '--limit 0 is out of range'),
                        (lambda: choose_buckets(toy, math.inf, 32), '--buckets inf is a float'),
                        (lambda: choose_buckets(toy, 2, 4), '--max_length 4 is out of range'),
                        (lambda: choose_buckets(toy, 2, 32, pad_multiple=0), '--pad_multiple 0 is out of range'),
                        (lambda: length_stats([3, float('nan')]), 'lengths must be token counts'),
                        (lambda: length_stats([3, -1]), 'lengths must be token counts'),
                        (lambda: length_stats(['a', 'b']), 'lengths must be token counts'),
                        (lambda: length_stats([[1, 2]]), 'lengths of shape (1, 2)'),
                        (lambda: choose_length([]), 'no lengths to choose from'),
                        (lambda: validate(DatasetDict(), eval_fraction=2), '--eval_fraction 2 is out of range'),
                        (lambda: validate(DatasetDict(), min_label_rows=0), '--min_label_rows 0 is out of range')]:
        with pytest.raises(UsageError) as e: call()
        assert words in one_line(e)
    assert length_stats([3.0, 5.0])['max'] == 5 and choose_length(toy, 100, 8) == (32, 0)


# ------------------------------------------------------------------------------------------------- sentence pairs
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


# ------------------------------------------------------------------------------------------------- the real emotion files
EMOTION = Path(__file__).resolve().parents[2]/'shared'/'data'/'emotion'  # research licence: read here, never copied


@pytest.mark.skipif(not (EMOTION/'train.txt').exists(), reason='the emotion files are not here')
def test_real_emotion_lengths(monkeypatch):
    import datasets.config, tempfile
    cache = tempfile.TemporaryDirectory()  # keep datasets' Arrow copy of the research-licensed files out of ~/.cache
    monkeypatch.setattr(datasets.config, 'HF_DATASETS_CACHE', Path(cache.name))
    ds = validate(load_raw(str(EMOTION)))
    assert {s: len(d) for s, d in ds.items()} == {'train': 16000, 'validation': 2000, 'test': 2000}
    assert ds['train'].features['label'].names == EMOTION_LABELS
    assert ds['train'][0] == {'text': 'i didnt feel humiliated', 'label': 0}
    lengths = token_lengths(ds['train'], AutoTokenizer.from_pretrained(local_model()))
    assert (length_stats(lengths)['p99.9'], length_stats(lengths)['max']) == (66, 87)
    assert choose_length(lengths) == (72, 4)
    assert choose_length(lengths, percentile=100) == (88, 0)
    cache.cleanup()
