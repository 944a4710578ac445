"Checks of `prepare`'s record and the fixes it suggests: `prep_command`, `data_fingerprint`, owned folders, looks-valid inputs."
from __future__ import annotations
import json, os, re, shlex, subprocess, sys
from pathlib import Path

import pytest

from trn_tutorials.core import UsageError
from trn_tutorials.models import local_model, tiny_bert
from trn_tutorials.data import DataArguments, data_fingerprint, load_prepared, prep_command, prepare
from trn_tutorials.data_files import sample_data


def _args(tmp_path, **kw):
    return DataArguments(**{'data': sample_data(), 'model_id': local_model(), 'dataset_path': str(tmp_path/'prep'), **kw})


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
    m2 = load_prepared(str(tmp_path/'again'))[1]
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
    prepare(_args(tmp_path, dataset_path=str(tmp_path/'outer'/'inner'/'prep')))
    for path, words in [(tmp_path/'mine', 'holds files trn-tutorials did not write (notes.txt)'),
                        (model, 'holds files trn-tutorials did not write'),
                        (model/'sub', 'lies inside'), (d/'prep'/'more', 'lies inside'),
                        (tmp_path/'outer', 'holds')]:
        before = sorted(str(p) for p in tmp_path.rglob('*'))
        with pytest.raises(UsageError, match=re.escape(words)): prepare(_args(tmp_path, dataset_path=str(path)))
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
    with pytest.raises(UsageError) as e: prepare(_args(tmp_path, model_id=model))
    msg = str(e.value)
    assert f"{model} has no tokenizer files (tokenizer.json or vocab.txt)" in msg and f"e.g. --model_id {local_model()}" in msg, msg
    assert not (tmp_path/'prep').exists()


def test_tokenizer_that_maps_most_words_to_unk_refused(tmp_path):
    model = tiny_bert(tmp_path/'few-words', ['zebra', 'quartz'])   # tokenizer files, but not one word of the data
    with pytest.raises(UsageError, match=r"maps 100% of the train tokens to \[UNK\]") as e: prepare(_args(tmp_path, model_id=model))
    assert f"e.g. --model_id {local_model()}" in str(e.value) and not (tmp_path/'prep').exists()


def _split(labels, **kw):
    from datasets import Dataset, DatasetDict
    from trn_tutorials.data_checks import validate
    return validate(DatasetDict(train=Dataset.from_dict({'text': [f'row {i}' for i in range(len(labels))], 'label': list(labels)})), **kw)


@pytest.mark.parametrize('names', [[f'topic_{i:02d}' for i in range(1, 21)], [f'class_{c}' for c in 'abcdefghijklmnopqrstuvwxyz'],
                                   [f'L{i}' for i in range(1, 13)], ['cat-3', 'cat-8'], ['typeA', 'typeB', 'typeC'],
                                   ['size_S', 'size_M', 'size_XL'], ['grade a', 'grade b']])
def test_systematic_labels_are_not_typos(names):
    from trn_tutorials.data_checks import similar_labels
    assert similar_labels({n: 5 for n in names}) == []
    assert _split([n for n in names for _ in range(10)])['train'].features['label'].names == sorted(names)


def test_real_typos_still_found():
    from trn_tutorials.data_checks import similar_labels
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


def _state(tmp_path):
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob('*') if not p.name.endswith('.lock'))


def test_too_little_free_space_refused_before_saving(tmp_path, monkeypatch, csv_prepared):
    import shutil
    from collections import namedtuple
    first = prepare(_args(tmp_path)); before = _state(tmp_path)
    usage = namedtuple('usage', 'total used free')
    monkeypatch.setattr(shutil, 'disk_usage', lambda p: usage(10**9, 10**9 - 50_000, 50_000))
    with pytest.raises(UsageError, match=r"needs about [\d.]+ [kM]B free at .* but 50 kB are free: free some space there, or pass another --dataset_path"):
        prepare(_args(tmp_path, max_length=128))
    assert _state(tmp_path) == before and load_prepared(str(tmp_path/'prep'))[1] == first


@pytest.mark.parametrize('stage', ['save_to_disk', 'datasets3_form'])
@pytest.mark.parametrize('what', ['disk full', 'Ctrl-C'])
def test_full_disk_or_ctrl_c_while_saving_keeps_the_old_data(tmp_path, monkeypatch, stage, what):
    import errno, datasets, trn_tutorials.data as data
    first = prepare(_args(tmp_path)); before = _state(tmp_path)
    def boom(*a, **k):
        real(*a, **k) if stage == 'datasets3_form' else Path(a[1] if stage == 'save_to_disk' else a[0]).mkdir(parents=True, exist_ok=True)
        raise OSError(errno.ENOSPC, 'No space left on device') if what == 'disk full' else KeyboardInterrupt()
    if stage == 'save_to_disk': real = None; monkeypatch.setattr(datasets.DatasetDict, 'save_to_disk', boom)
    else: real = data.datasets3_form; monkeypatch.setattr(data, 'datasets3_form', boom)
    if what == 'disk full':
        with pytest.raises(UsageError, match="the disk filled while saving the prepared data to .*: the previous prepared data is kept as it was; free some space"):
            prepare(_args(tmp_path, max_length=128))
    else:
        with pytest.raises(KeyboardInterrupt): prepare(_args(tmp_path, max_length=128))
    assert _state(tmp_path) == before and load_prepared(str(tmp_path/'prep'))[1] == first   # no temp folder, the old data whole


def test_ctrl_c_while_replacing_keeps_a_whole_folder(tmp_path, monkeypatch):
    "Ctrl-C while the old folder is removed after the swap: the new data is whole and in place."
    import shutil
    prepare(_args(tmp_path))
    real = shutil.rmtree
    def rm(p, *a, **k):
        if '.old-' in str(p) and not rm.done: rm.done = True; raise KeyboardInterrupt
        return real(p, *a, **k)
    rm.done = False
    monkeypatch.setattr(shutil, 'rmtree', rm)
    with pytest.raises(KeyboardInterrupt): prepare(_args(tmp_path, max_length=128))
    monkeypatch.setattr(shutil, 'rmtree', real)
    assert load_prepared(str(tmp_path/'prep'))[1]['max_length'] == 128


def test_summary_names_labels_validation_lacks(tmp_path, capsys):
    (tmp_path/'one.csv').write_text('text,label\n' + ''.join(f'i feel {i},{l}\n' for i, l in enumerate(['joy'] * 20 + ['sadness'] * 20 + ['anger'])))
    prepare(_args(tmp_path, data=str(tmp_path/'one.csv'), accept_labels=['anger']))
    assert "\n  validation has no rows of 'anger': its score cannot tell how well the model knows it\n" in capsys.readouterr().out


def test_rare_label_fix_names_the_eval_fraction_it_needs():
    labels = ['joy'] * 3 + ['sadness'] * 3 + ['love'] * 3 + ['anger']
    with pytest.raises(UsageError, match=r"pass --accept_labels anger --eval_fraction 0\.34 to keep it \(or --min_label_rows 1 --eval_fraction 0\.34\)"):
        _split(labels)
    assert len(_split(labels, accept_labels=['anger'], eval_fraction=0.34)['validation']) == 4


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
    assert load_prepared(str(dest))[1] == m and sorted(p.name for p in tmp_path.iterdir()) == ['prep']
    prepare(DataArguments(data=m['options']['data'], text_column='review', label_column='stars', model_id=local_model(),
                          dataset_path=str(dest), max_length=32, buckets=2))   # then the same prep runs as it did
    assert sorted(p.name for p in tmp_path.iterdir()) == ['prep']


def test_a_test_split_that_repeats_train_is_warned_once(tmp_path, capsys):
    "Issue 42: a test file that is (mostly) the train file: one warning line on stderr naming the split and the fix; the sample: none."
    import shutil
    (tmp_path/'raw').mkdir()
    for f in ('train.txt', 'test.txt'): shutil.copy(Path(sample_data())/'train.txt', tmp_path/'raw'/f)
    prepare(_args(tmp_path, data=str(tmp_path/'raw')))
    err = [l for l in capsys.readouterr().err.splitlines() if 'warning' in l]   # in-process, datasets' progress bars draw there too
    assert len(err) == 1 and err[0].startswith('warning: 324 of the 360 test rows (90%) have a text the train split has too') \
        and err[0].endswith('remove those rows from the test data'), err
    prepare(_args(tmp_path, dataset_path=str(tmp_path/'sample')))   # the bundled sample: its splits share no text
    assert 'warning' not in capsys.readouterr().err
