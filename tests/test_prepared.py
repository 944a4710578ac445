"""Checks of `trn_tutorials.data.prepared`: a prepared folder opened once as a `Prepared`, what it answers without reading
the folder again, and the one line for each other thing a path can hold where a prepared folder belongs; a split's row
lengths, the command that prepares a folder again (`prep_command`: complete, quoted, and run as printed) and the data's
fingerprint; what `load_prepared` refuses to trust (real files damaged, nothing mocked) and the space a save needs."""
import json, os, re, shlex, shutil, subprocess, sys, time
from collections import namedtuple
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from conftest import rows, write
from local_services import damage, one_line
from test_train import linked, small_vocab  # noqa: F401  (small_vocab: a fixture)
from trn_tutorials.core.folders import RECORD
from trn_tutorials.reader import check_prepared_path
from trn_tutorials.core.options import UsageError
from trn_tutorials.models import local_model
from trn_tutorials.data.sources import DataArguments, sample_data
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import data_fingerprint, prep_command, row_lengths
from trn_tutorials.data.prepared import Prepared, load_prepared
from trn_tutorials.data.tokenizers import tokenizer_fingerprint


def refused(fn, *a) -> str:
    with pytest.raises(UsageError) as e: fn(*a)
    msg = str(e.value)
    assert '\n' not in msg, msg
    return msg


def test_a_prepared_folder_opened_once(prepared, monkeypatch):
    "What a run asks of the data comes from the one read: rows, labels, row lengths (read from Arrow once), fingerprint, command."
    import trn_tutorials.data.prepared as P
    data = load_prepared(str(prepared/'data-3'))
    assert isinstance(data, Prepared) and data.path == str(prepared/'data-3')
    assert data.rows == {s: len(d) for s, d in data.splits.items()} and data['train'] is data.splits['train'] and 'validation' in data
    assert data.label_names == data.manifest['label_names'] and data.model_id == data.manifest['model_id']
    assert data.problem_type == 'single_label_classification' and data.packing is None and data.lengths == data.manifest['bucket_lengths']
    real, reads = P.row_lengths, []
    monkeypatch.setattr(P, 'row_lengths', lambda split: reads.append(split) or real(split))
    first = data.row_lengths('train')
    assert (data.row_lengths('train') is first) and len(reads) == 1 and sorted(set(first.tolist())) == data.lengths
    assert data.fingerprint == data_fingerprint(data.manifest) and data.fingerprint is data.fingerprint
    assert data.command() == prep_command(data.manifest, dataset_path=os.path.abspath(data.path))
    assert '--model_id bert-base-uncased' in data.command(model_id='bert-base-uncased')
    assert repr(data).startswith(f"Prepared({str(prepared/'data-3')!r}: train ")


def test_the_checks_a_run_makes(prepared, tmp_path):
    "Batch, problem type and model: each a method, each a one-line refusal that names the fix."
    data = load_prepared(str(prepared/'data'))
    n = data.rows['train']
    assert data.check_batch(16, 8, 2) is None
    assert f"use --per_device_train_batch_size {n // 2} or less" in refused(data.check_batch, n, 8, 2)
    assert data.check_batch(1, n, 2).startswith('note: evaluation batches of')
    assert data.check_problem_type() == 'single_label_classification'


def test_the_model_against_the_data(prepared, tmp_path, small_vocab):
    "Another tokenizer is refused with the command that prepares the data for it; allowed on purpose, a vocabulary too small never is."
    tmp = linked(prepared, tmp_path, 'data', 'tiny-bert')
    data, b = load_prepared(str(tmp/'data')), small_vocab
    assert data.check_model() is None and data.check_model(str(tmp/'tiny-bert')) is None
    n = data.manifest['tokenizer']['vocab_size']
    msg = refused(data.check_model, b)
    assert 'was prepared with the tokenizer of' in msg and 'tiny-bert' in msg and 'small-vocab' in msg and f'vocabulary {n} vs 45' in msg, msg
    assert msg.endswith(f"prepare it again for that model with `trn-tutorials prep --dataset_path {tmp/'data'} --data {sample_data()} "
                        f"--model_id {b}`, or pass --allow_tokenizer_mismatch true"), msg
    with pytest.raises(UsageError, match=f'small-vocab has 45 token embeddings, fewer than the {n} token ids'):
        data.check_model(b, allow_tokenizer_mismatch=True)
    old = Prepared(data.path, data.splits, {k: v for k, v in data.manifest.items() if k != 'tokenizer'})   # recorded before the tokenizer was
    with pytest.raises(UsageError, match='vocabulary'): old.check_model(b)
    gone = Prepared(data.path, data.splits, {**old.manifest, 'model_id': str(tmp/'gone')})
    assert gone.check_model(b) is None   # the data's model is gone: nothing to compare


@pytest.mark.parametrize('what', ['model', 'checkpoint', 'half-written', 'partial copy', 'raw data'])
def test_what_else_a_path_holds(prepared, tmp_path, what):
    "One line each, naming what the path holds and how to get a prepared folder, from the path alone (no import of torch)."
    if what == 'model':   # its record names the data it was trained on: the fix passes that
        path = tmp_path/'runs'/'emotion-model'; path.mkdir(parents=True)
        (path/RECORD).write_text(json.dumps({'kind': 'model', 'data': {'dataset_path': str(prepared/'data')}}))
        words = ['is a model folder', f"pass --dataset_path {prepared/'data'}, the data it was trained on"]
    elif what == 'checkpoint':
        path = tmp_path/'runs'/'emotion-model'/'checkpoint-20'; path.mkdir(parents=True); (path/'trainer_state.json').write_text('{}')
        words = ['is a training checkpoint', f'--output_dir {path.parent}']
    elif what == 'half-written':
        path = tmp_path/'runs'/'tweets-data'; (tmp_path/'runs'/'.tweets-data.tmp-0123abcd').mkdir(parents=True)
        words = ['stopped before the data was whole', f'trn-tutorials prep --dataset_path {path}']
    elif what == 'partial copy':
        path = tmp_path/'runs'/'.tweets-data.tmp-0123abcd'; path.mkdir(parents=True)
        words = ['half-written', f"trn-tutorials prep --dataset_path {tmp_path/'runs'/'tweets-data'}"]
    else:
        path = tmp_path/'tweets'; path.mkdir(); shutil.copy(Path(__file__).parent/'fixtures'/'tweets.csv', path/'train.csv') \
            if (Path(__file__).parent/'fixtures'/'tweets.csv').exists() else (path/'train.csv').write_text('text,label\nhi,joy\n')
        words = ['was not made by prepare', 'trn-tutorials prep --data']
    msg = refused(load_prepared, str(path))
    assert all(w in msg for w in words), msg
    if what != 'raw data':
        assert refused(check_prepared_path, str(path)) == msg   # the command line's early check says the same, before any import
    if what == 'model': assert load_prepared(str(prepared/'data')).rows['train'] == 360   # the fix, as printed, works


def test_the_command_line_refuses_a_model_folder_before_torch(tmp_path):
    "`trn-tutorials train --dataset_path` a model folder: the line, before torch is imported, in well under the import's time."
    model = tmp_path/'emotion-model'; model.mkdir(); (model/RECORD).write_text('{"kind": "model"}')
    code = ("import sys, trn_tutorials.cli as c\ntry: c.run(['train', '--dataset_path', sys.argv[1], '--output_dir', sys.argv[2]])\n"
            "except SystemExit as e: print(e.code, 'torch' in sys.modules)")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, '-c', code, str(model), str(tmp_path/'out')], capture_output=True, text=True)
    assert 'is a model folder' in r.stderr and r.stdout.split() == ['2', 'False'], (r.stdout, r.stderr)
    assert time.perf_counter() - t0 < 10   # a process of its own; the line itself comes before anything slow


# -------------------------------------------------------------------------------------- row lengths, the record
def test_row_lengths(tds, bds):
    assert row_lengths(bds['train']).tolist() == [len(r) for r in bds['train']['input_ids']]
    assert row_lengths(bds['train'].select([2, 0])).tolist() == [len(bds['train'][i]['input_ids']) for i in (2, 0)]  # a selection's order
    assert set(row_lengths(tds['validation']).tolist()) == {len(tds['validation'][0]['input_ids'])}


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


# ------------------------------------------------------------------------------------------------- load_prepared
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


@pytest.fixture
def copy(minilm_prepared, tmp_path) -> Path:
    "A copy of conftest's MiniLM-prepared sample, to damage."
    return Path(shutil.copytree(minilm_prepared, tmp_path/'data'))


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


# ------------------------------------------------------------------------------- the space check: what the save needs
def test_space_estimate_covers_the_save(tmp_path, monkeypatch):
    "The bytes `check_save_space` asks for cover the save's peak (the new copy and one rewrite of its largest file), with no room for an old copy."
    import trn_tutorials.data.prepare as D
    from trn_tutorials.data.prepared import _folder_bytes, _space_needed
    peak, real = [], D.datasets3_form
    def measure(folder):
        arrows = [f.stat().st_size for f in Path(folder).rglob('*.arrow')]
        peak.append(_folder_bytes(Path(folder)) + max(arrows))
        return real(folder)
    monkeypatch.setattr(D, 'datasets3_form', measure)
    for kw in (dict(), dict(buckets=3)):
        m = prepare(DataArguments(data=str(write(tmp_path, 'csv', rows(400))[0]), model_id=local_model(), dataset_path=str(tmp_path/'prep'), **kw))
        need, data = _space_needed(m['rows'], m['max_length'], 3)
        assert peak[-1] <= need + 64_000 and need < 2 * data, (peak, need, data)


def test_a_new_folder_needs_no_room_for_an_old_copy(tmp_path, monkeypatch):
    import trn_tutorials.data.files as F
    from trn_tutorials.data.prepared import _space_needed
    f, _ = write(tmp_path, 'csv', rows(400))
    args = lambda: DataArguments(data=str(f), model_id=local_model(), dataset_path=str(tmp_path/'prep'), max_length=32)
    need, data = _space_needed({'train': 360, 'validation': 40}, 32, 3)
    usage = namedtuple('usage', 'total used free')
    monkeypatch.setattr(shutil, 'disk_usage', lambda p: usage(10**12, 10**12, need + 1000))   # less than two copies: enough
    assert need + 1000 < 2 * data and prepare(args())['rows'] == {'train': 360, 'validation': 40}
    monkeypatch.setattr(shutil, 'disk_usage', lambda p: usage(10**12, 10**12, 50_000))
    msg = refused(prepare, args())   # the data prepared before: named, its size said
    from trn_tutorials.models import size_text
    from trn_tutorials.data.prepared import _folder_bytes
    old = size_text(_folder_bytes(tmp_path/'prep'))
    assert f"the data prepared there before ({old}) is removed only once the new copy is whole) but 50 kB are free" in msg, msg
    shutil.rmtree(tmp_path/'prep')
    msg = refused(prepare, args())   # a new folder: no old copy in the message
    assert re.fullmatch(rf"saving the prepared data needs about [\d.]+ kB free at {re.escape(str(tmp_path))} \([\d.]+ kB of data, and room to rewrite "
                        r"its largest file once\) but 50 kB are free: free some space there, or pass another --dataset_path on a disk with more room", msg), msg
    assert not (tmp_path/'prep').exists()
