"Checks of `prepare`'s record and the fixes it suggests: `prep_command`, `data_fingerprint`, owned folders, looks-valid inputs."
from __future__ import annotations
import json, os, re, shlex, subprocess, sys
from pathlib import Path

import pytest

from trn_tutorials.core import UsageError, local_model, tiny_bert
from trn_tutorials.data import DataArguments, data_fingerprint, load_prepared, prep_command, prepare, sample_data


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
