"""`trn-tutorials predict` (trn_tutorials.serving.predict) on a tiny BERT trained here: the same answers as the serving handler,
long texts in windows, an output continued after a stop, foreign outputs refused, bad input in one line before the model
loads, JSON lines and CSV, stdin through the command."""
import csv, json, os, signal, subprocess, sys, time
from pathlib import Path

import pytest

import trn_tutorials.serving.predict as predict_mod
from trn_tutorials.backends import Accelerator
from trn_tutorials.cli import predict_kept
from trn_tutorials.core.options import UsageError
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.data.sources import load_raw, sample_data
from trn_tutorials.serving.inference import TORCHSCRIPT, TRACE_INFO, model_fn, predict_fn
from trn_tutorials.serving.predict import ClassifyArguments, classify, record_path, rows_done, windows
from trn_tutorials.serving.preflight import serving_preflight

SCORE_TOL = 1.0001e-4   # both round to 4 places
CLI = [sys.executable, '-c', 'from trn_tutorials.cli import main; main()', 'predict']
LONG = ' '.join(['i feel sad and lonely'] * 30)   # 151 tokens: several windows of 40


N_MANY = 20_000


@pytest.fixture(scope='module')
def many(tmp_path_factory):
    """A text file of 20,000 tweets (the sample's train split, repeated), in emotion's `text;label` lines: seconds of work, so a
    signal sent once the first rows are written finds the run in the middle even when the test shares a busy machine."""
    lines = Path(sample_data(), 'train.txt').read_text().splitlines()
    f = tmp_path_factory.mktemp('many')/'many.txt'
    f.write_text('\n'.join((lines * 56)[:N_MANY]) + '\n')
    return f


def cli(*args, stdin=None, **kw):
    return subprocess.run([*CLI, *map(str, args)], input=stdin, capture_output=True, text=True,
                          env={**os.environ, 'OMP_NUM_THREADS': '1'}, **kw)


def jsonl(f): return [json.loads(l) for l in Path(f).read_text().splitlines()]


# ---------------------------------------------------------------------------------------------------------------
# answers
# ---------------------------------------------------------------------------------------------------------------
def test_the_same_answers_as_the_serving_handler(trained_model):
    texts = load_raw(sample_data())['test']['text'][:40]
    res = classify(str(trained_model), text=texts)
    want = predict_fn(texts, model_fn(str(trained_model)))
    assert [r['row'] for r in res.rows] == list(range(40)) and res.longer == 0 and res.windows == 40
    assert [r['label'] for r in res.rows] == [w['label'] for w in want]
    assert max(abs(r['score'] - w['score']) for r, w in zip(res.rows, want)) <= SCORE_TOL
    for r in res.rows:
        assert set(r['probabilities']) == set(EMOTION_LABELS) and abs(sum(r['probabilities'].values()) - 1) < 1e-3
        assert r['score'] == max(r['probabilities'].values()) == r['probabilities'][r['label']]


def test_a_long_text_is_classified_in_windows_and_their_probabilities_averaged(trained_model):
    import torch
    clf = predict_mod.load(str(trained_model))
    assert clf.max_length == 40
    res = classify(str(trained_model), text=['i feel happy', LONG])
    assert [r['windows'] for r in res.rows] == [1, 5] and res.longer == 1 and res.windows == 6 and res.stride == 10
    assert '1 longer than 40 tokens were split into overlapping windows' in str(res)
    enc, owner, longer = windows([LONG], clf.tokenizer, 40, 10)
    assert len(enc) == 5 and owner == [0] * 5 and longer == 1 and all(len(e['input_ids']) <= 40 for e in enc)
    ids = [clf.tokenizer.convert_ids_to_tokens(e['input_ids']) for e in enc]
    assert all(a[-11:-1] == b[1:11] for a, b in zip(ids, ids[1:]))   # each window shares `stride` tokens with the one before
    p = torch.softmax(predict_mod.batch_logits(enc, clf).float(), -1).mean(0)   # the mean of the windows' softmax
    assert max(abs(res.rows[1]['probabilities'][n] - v) for n, v in zip(clf.labels, p.tolist())) <= SCORE_TOL
    cut = classify(str(trained_model), text=['i feel happy', LONG], truncate=True)
    assert [r['windows'] for r in cut.rows] == [1, 1] and cut.longer == 1 and '1 longer than 40 tokens were cut' in str(cut)
    want = predict_fn([LONG], model_fn(str(trained_model)))[0]   # what the handler does: cut at the longest length
    assert cut.rows[1]['label'] == want['label'] and abs(cut.rows[1]['score'] - want['score']) <= SCORE_TOL
    assert classify(str(trained_model), text=[LONG], stride=0).rows[0]['windows'] == 4   # no overlap: fewer windows


def test_jsonl_and_csv_hold_the_same_rows(trained_model, tmp_path):
    a = classify(str(trained_model), data=sample_data(), split='test', output=str(tmp_path/'p.jsonl'))
    b = classify(str(trained_model), data=sample_data(), split='test', output=str(tmp_path/'p.csv'))
    assert a.texts == b.texts == 72 and a.done_before == b.done_before == 0
    rows = list(csv.DictReader(open(tmp_path/'p.csv')))
    assert list(rows[0]) == ['row', 'label', 'score', 'windows', *EMOTION_LABELS]
    for j, c in zip(jsonl(tmp_path/'p.jsonl'), rows):
        assert (j['row'], j['label'], j['score'], j['windows']) == (int(c['row']), c['label'], float(c['score']), int(c['windows']))
        assert j['probabilities'] == {n: float(c[n]) for n in EMOTION_LABELS}
    rec = json.loads(record_path(str(tmp_path/'p.csv')).read_text())
    assert rec['kind'] == 'predictions' and rec['texts'] == 72 and rec['options'] == {'truncate': False, 'stride': 10}


# ---------------------------------------------------------------------------------------------------------------
# an output file that continues, and one that is refused
# ---------------------------------------------------------------------------------------------------------------
def test_a_killed_run_and_a_half_written_line_continue_to_the_same_file(trained_model, many, tmp_path):
    whole = tmp_path/'whole.jsonl'
    classify(str(trained_model), data=str(many), output=str(whole), batch_size=16)
    out = tmp_path/'stopped.jsonl'
    p = subprocess.Popen([*CLI, '--model_dir', str(trained_model), '--data', str(many), '--output', str(out), '--batch_size', '16'],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, 'OMP_NUM_THREADS': '1'}, preexec_fn=lambda: os.nice(10))
    deadline = time.monotonic() + 120
    while (not out.exists() or out.read_bytes().count(b'\n') < 512) and time.monotonic() < deadline and p.poll() is None: time.sleep(0.02)
    p.send_signal(signal.SIGKILL); p.wait()
    kept = out.read_bytes().count(b'\n')
    assert 512 <= kept < N_MANY, kept   # killed in the middle
    with open(out, 'a') as f: f.write('{"row": ' + str(kept) + ', "label": "jo')   # and a line cut in the middle
    res = cli('--model_dir', trained_model, '--data', many, '--output', out, '--batch_size', 16)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count('\n') == 1, res.stderr   # the summary only: no progress bars where stderr is not a terminal
    assert f"({kept} were there already)" in res.stderr and f"classified {N_MANY - kept} texts" in res.stderr
    assert out.read_text() == whole.read_text()
    again = cli('--model_dir', trained_model, '--data', many, '--output', out)   # complete: nothing to do, nothing changed
    assert again.returncode == 0 and f'holds all {N_MANY} rows already' in again.stderr and out.read_text() == whole.read_text()


def test_ctrl_c_leaves_whole_rows_and_says_how_to_continue(trained_model, many, tmp_path):
    out = tmp_path/'p.csv'
    p = subprocess.Popen([*CLI, '--model_dir', str(trained_model), '--data', str(many), '--output', str(out), '--batch_size', '16'],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, 'OMP_NUM_THREADS': '1'},
                         preexec_fn=lambda: os.nice(10))   # the poller below must see it mid-run
    deadline = time.monotonic() + 120
    while (not out.exists() or out.read_bytes().count(b'\n') < 300) and time.monotonic() < deadline and p.poll() is None: time.sleep(0.02)
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=60)[1]
    rows = out.read_bytes().count(b'\n') - 1
    assert p.returncode == 130 and err.count('\n') == 1, err
    assert f"trn-tutorials predict: interrupted: {out} keeps {rows} complete rows: run the same command again to continue after them: `" in err
    assert out.read_bytes().endswith(b'\n') and 0 < rows < N_MANY


def test_csv_continues_after_a_cut_header_and_rows(trained_model, tmp_path):
    out, whole = tmp_path/'p.csv', tmp_path/'whole.csv'
    classify(str(trained_model), data=sample_data(), split='train', output=str(whole))
    for cut in (30, 5000):   # inside the header; inside a row
        body = whole.read_text()
        out.write_text(body[:cut]); record_path(str(out)).write_text(record_path(str(whole)).read_text())
        res = classify(str(trained_model), data=sample_data(), split='train', output=str(out), batch_size=7)
        assert out.read_text() == body and res.done_before == max(body[:cut].count('\n') - 1, 0)


def test_an_output_of_another_model_or_input_or_not_ours_is_refused_untouched(trained_model, tmp_path):
    out = tmp_path/'p.jsonl'
    classify(str(trained_model), data=sample_data(), split='test', output=str(out))
    body = out.read_bytes()
    refused = [dict(data=sample_data(), split='validation'),   # other texts
               dict(data=sample_data(), split='test', truncate=True)]   # other options
    for kw in refused:
        with pytest.raises(UsageError) as e: classify(str(trained_model), output=str(out), **kw)
        assert '\n' not in str(e.value) and 'pass another --output, or delete' in str(e.value)
    other = tmp_path/'other-model'   # the same model trained again: new weights
    import shutil; shutil.copytree(trained_model, other)
    os.utime(other/'model.safetensors', ns=(1, 1))
    with pytest.raises(UsageError, match='holds predictions of another model'): classify(str(other), data=sample_data(), split='test', output=str(out))
    mine = tmp_path/'mine.csv'; mine.write_text('my,own\n1,2\n')   # a file predict did not write
    with pytest.raises(UsageError, match=r'exists and was not written by predict \(no mine.csv.record.json beside it\): pass another --output, or delete it'):
        classify(str(trained_model), text=['hi'], output=str(mine))
    assert out.read_bytes() == body and mine.read_text() == 'my,own\n1,2\n'
    r = cli('--model_dir', trained_model, '--data', sample_data(), '--split', 'validation', '--output', out)
    assert r.returncode == 2 and r.stderr.count('\n') == 1 and 'trn-tutorials predict: error:' in r.stderr


def test_rows_done_drops_only_the_half_line(tmp_path):
    out = tmp_path/'p.jsonl'
    rec = {'model': 'm', 'input': 'i', 'options': {}}
    assert rows_done(str(out), rec) == 0
    out.write_text('{"row": 0}\n{"row": 1}\n{"ro'); record_path(str(out)).write_text(json.dumps(rec))
    assert rows_done(str(out), rec) == 2 and out.read_text() == '{"row": 0}\n{"row": 1}\n'
    assert predict_kept(str(out)).endswith('keeps 2 complete rows: run the same command again to continue after them')
    assert predict_kept(None) == 'no rows were kept: run the same command again'


# ---------------------------------------------------------------------------------------------------------------
# bad input: one line, before the model loads
# ---------------------------------------------------------------------------------------------------------------
def test_bad_input_is_one_line_before_the_model_loads(trained_model, tmp_path, monkeypatch):
    def no_load(*a, **kw): raise AssertionError('the model was loaded')
    monkeypatch.setattr(predict_mod, 'load', no_load)
    (tmp_path/'tweets.csv').write_text('tweet,id\ni feel great,1\n')
    (tmp_path/'empty.txt').write_text('')
    (tmp_path/'blank.csv').write_text('text\n')
    (tmp_path/'no-weights').mkdir(); (tmp_path/'no-weights'/'config.json').write_text('{}')
    m = str(trained_model)
    cases = [
        (dict(model_dir=str(tmp_path/'nothing'), text=['hi']), 'nothing: pass --model_dir, the folder train wrote'),
        (dict(model_dir=str(tmp_path/'no-weights'), text=['hi']), 'has no weights'),
        (dict(model_dir=m, data=str(tmp_path/'tweets.csv')), "has no column 'text' (its columns: tweet, id): pass the one holding the texts with --text_column NAME"),
        (dict(model_dir=m, data=str(tmp_path/'empty.txt')), 'is empty'),
        (dict(model_dir=m, data=str(tmp_path/'blank.csv')), 'has column names but no rows: add rows'),
        (dict(model_dir=m, text=[]), 'holds no texts: give at least one'),
        (dict(model_dir=m, text=['hi'], output=str(tmp_path/'p.txt')), 'ends with .txt: name a .jsonl or a .csv file'),
        (dict(model_dir=m), 'pass the texts: --data FILE (or - for stdin), or --text'),
        (dict(model_dir=m, text=['hi'], data=sample_data()), 'not both'),
        (dict(model_dir=m, data=sample_data()), 'holds the splits train, validation, test: pass one with --split, e.g. --split test'),
        (dict(model_dir=m, data=sample_data(), split='dev'), "has no split 'dev'"),
        (dict(model_dir=m, data=str(tmp_path/'missing.csv')), 'no such file or folder'),
        (dict(model_dir=m, text=['hi'], stride=30), '--stride 30 is out of range'),
        (dict(model_dir=m, text=['hi'], text_column=['a', 'b', 'c']), 'name one, or two for a sentence pair'),
    ]
    for kw, says in cases:
        with pytest.raises(UsageError) as e: classify(**kw)
        assert says in str(e.value) and '\n' not in str(e.value), (kw, str(e.value))
    with pytest.raises(UsageError, match='--batch_size 0 is out of range'): ClassifyArguments(model_dir=m, text=['hi'], batch_size=0)


def test_the_text_column_option_and_sentence_pairs(trained_model, tmp_path):
    (tmp_path/'tweets.csv').write_text('tweet,id\ni feel great,1\ni am scared,2\n')
    res = classify(str(trained_model), data=str(tmp_path/'tweets.csv'), text_column=['tweet'])
    assert [r['label'] for r in res.rows] == [p['label'] for p in predict_fn(['i feel great', 'i am scared'], model_fn(str(trained_model)))]
    (tmp_path/'pairs.jsonl').write_text(json.dumps({'a': 'i feel', 'b': 'great'}) + '\n')
    pair = classify(str(trained_model), data=str(tmp_path/'pairs.jsonl'), text_column=['a', 'b'])
    want = predict_fn([{'text': 'i feel', 'text_pair': 'great'}], model_fn(str(trained_model)))[0]
    assert pair.rows[0]['label'] == want['label'] and abs(pair.rows[0]['score'] - want['score']) <= SCORE_TOL


def test_on_neuron_only_a_compiled_model_runs(trained_model, tmp_path, monkeypatch):
    monkeypatch.setattr(predict_mod, 'detect', lambda: Accelerator('neuron', 2, '2 NeuronCore(s)', 2))
    with pytest.raises(UsageError) as e: classify(str(trained_model), text=['hi'])
    msg = str(e.value)
    assert msg.startswith('on Neuron, predict runs the compiled model and') and 'from trn_tutorials.serving.torchscript import trace; trace(' in msg
    assert msg.endswith("neuron=True)\"") and '\n' not in msg
    d = tmp_path/'compiled'
    import shutil; shutil.copytree(trained_model, d)
    (d/TORCHSCRIPT).write_bytes(b'')
    (d/TRACE_INFO).write_text(json.dumps({'compiler': 'torch_neuronx 2.9.0', 'lengths': [40]}))
    assert serving_preflight(str(d), 'neuron').label_names == EMOTION_LABELS
    assert predict_mod.default_batch_size('neuron', 128) == 128 and predict_mod.default_batch_size('cpu', 40) == 102


# ---------------------------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------------------------
def test_stdin_through_the_command(trained_model, tmp_path):
    r = cli('--model_dir', trained_model, '--data', '-', stdin='i feel so happy today\n\ni am scared of the dark\n')
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    want = predict_fn(['i feel so happy today', 'i am scared of the dark'], model_fn(str(trained_model)))
    assert [x['row'] for x in rows] == [0, 1] and [x['label'] for x in rows] == [w['label'] for w in want]
    assert r.stderr.startswith('classified 2 texts with the eager model on cpu') and r.stderr.count('\n') == 1
    empty = cli('--model_dir', trained_model, '--data', '-', stdin='')
    assert empty.returncode == 2 and empty.stderr == 'trn-tutorials predict: error: stdin holds no texts: give at least one (one text a line)\n'
    inline = cli('--model_dir', trained_model, '--text', 'i feel great', 'i am sad', '--output', tmp_path/'p.csv')
    assert inline.returncode == 0 and len(list(csv.DictReader(open(tmp_path/'p.csv')))) == 2 and inline.stdout == ''
