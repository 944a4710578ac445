"""Checks of `trn_tutorials.data.prepared`: a prepared folder opened once as a `Prepared`, what it answers without reading
the folder again, and the one line for each other thing a path can hold where a prepared folder belongs."""
import json, os, shutil, subprocess, sys, time
from pathlib import Path

import pytest

from test_train import linked, small_vocab  # noqa: F401  (small_vocab: a fixture)
from trn_tutorials.core.folders import RECORD, check_prepared_path
from trn_tutorials.core.options import UsageError
from trn_tutorials.data.sources import sample_data
from trn_tutorials.data.prepared import data_fingerprint, prep_command
from trn_tutorials.data.prepared import Prepared, load_prepared


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
