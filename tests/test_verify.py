"verify: every served form scored on the prepared test split against the eager model, recorded, and read by deploy."
import json, os, shutil, subprocess, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from trn_tutorials.core.options import UsageError
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.sources import load_raw, sample_data
from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.training.launch import launch
from trn_tutorials.serving.inference import JSON, RequestError, input_fn, output_fn, predict_fn
from trn_tutorials.serving.torchscript import trace
from trn_tutorials.serving.predict import load
from trn_tutorials.serving.verify import (NO_NEURON, VERIFY_RECORD, check_verified, handler, served_form, split_rows, texts_of_rows,
                                  verify, weights_hash)

CLI = [sys.executable, '-c', 'from trn_tutorials.cli import main; main()']


@pytest.fixture(scope='module')
def trained(tmp_path_factory, prepared):
    "A tiny BERT fine-tuned by `launch` (torchrun, CPU) for 10 epochs on the bundled sample in three buckets (the chapter's: F1 0.825), and the untrained one it started from."
    tmp = tmp_path_factory.mktemp('verify')
    (tmp/'data').symlink_to(prepared/'data-3'); (tmp/'tiny-bert').symlink_to(prepared/'tiny-bert')   # conftest's, read-only
    launch(TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'model'), num_train_epochs=10, learning_rate=3e-3,
                          per_device_train_batch_size=16, save_steps=0), echo=False)
    return tmp


def copy(model, to):
    shutil.copytree(model, to, ignore=shutil.ignore_patterns('checkpoint-*', VERIFY_RECORD))
    return to


def stale(tmp, name='stale'):
    "The fine-tuned weights beside a trace of the model before fine-tuning: what deploy would ship after training again."
    d = copy(tmp/'model', tmp/name)
    base = copy(tmp/'tiny-bert', tmp/f'{name}-base')
    trace(str(base))
    for f in ('model.pt', 'torchscript.json'): shutil.copy(base/f, d)
    return d


def test_the_eager_form_scores_what_training_scored_and_every_form_is_on_one_line(trained, monkeypatch):
    monkeypatch.chdir(trained)
    v = verify('model')
    m = json.loads(Path('model/metrics.json').read_text())
    assert v.rows == 72 and v.metric == 'f1' and list(v.forms) == ['eager', 'torchscript', 'neuron', 'endpoint']
    assert abs(v.forms['eager']['f1'] - m['test']['f1']) < 1e-4 and abs(v.forms['eager']['accuracy'] - m['test']['accuracy']) < 1e-4
    ts = v.forms['torchscript']
    assert ts['status'] == 'ran' and ts['flips'] == 0 and ts['max_logit_diff'] <= 1e-4 and ts['cut'] == 0, ts
    assert v.forms['neuron'] == {'status': NO_NEURON}   # no torch-neuronx here, said so
    assert v.forms['endpoint']['status'].startswith('not run: no endpoint given')
    assert v.failing() == [] and not Path('model/model.pt').exists()   # the trace was made aside: the folder is as training left it
    rec = json.loads(Path('model', VERIFY_RECORD).read_text())
    assert rec['weights'] == weights_hash('model') and rec['forms'] == v.forms and rec['model_pt'] is None
    table = v.table().splitlines()
    assert len(table) == 6 and table[2].startswith('| eager | ') and 'not run: this Python has no torch-neuronx' in table[4]


def test_a_stale_trace_fails_and_deploy_refuses_it_in_one_line(trained, monkeypatch):
    monkeypatch.chdir(trained)
    d = stale(trained)
    v = verify(str(d))
    assert v.failing() == ['torchscript'] and v.forms['torchscript']['flips'] > 30, v.table()
    assert served_form(d) == 'torchscript'
    with pytest.raises(UsageError) as e: check_verified(str(d), 'torchscript')
    msg = str(e.value)
    assert '\n' not in msg and 'stale/model.pt (torchscript) scored f1' in msg and "trace('stale')" in msg and 'trn-tutorials verify --model_dir stale' in msg
    assert check_verified(str(d), 'eager')['flips'] == 0   # the eager weights themselves pass
    # the fix, as printed: delete model.pt (the eager weights are served), or make it again; then verify again
    (d/'model.pt').unlink(); (d/'torchscript.json').unlink()
    assert served_form(d) == 'eager' and check_verified(str(d), 'eager')
    trace(str(d))
    assert check_verified(str(d), 'torchscript') is None   # a new model.pt: the record was of another one
    assert verify(str(d)).failing() == [] and check_verified(str(d), 'torchscript')['flips'] == 0


def test_the_record_is_bound_to_the_weights(trained, monkeypatch):
    monkeypatch.chdir(trained)
    d = copy(trained/'model', trained/'rebound')
    verify(str(d), record=True)
    assert check_verified(str(d), 'torchscript') is not None
    w = d/'model.safetensors'
    w.write_bytes(w.read_bytes()[:-8] + b'\0' * 8)   # other weights: the record says nothing of them
    assert check_verified(str(d), 'torchscript') is None


class _Server(BaseHTTPRequestHandler):
    "/invocations answered by the handler's functions, as the serving container calls them; `fn` may change the texts first."
    clf, fn = None, staticmethod(lambda t: t)
    def do_POST(self):
        body = self.rfile.read(int(self.headers['Content-Length']))
        try:
            texts = [self.fn(t) for t in input_fn(body, self.headers['Content-Type'])]
            out, status = output_fn(predict_fn(texts, self.clf), self.headers.get('Accept'))[0].encode(), 200
        except RequestError as e: out, status = str(e).encode(), e.status_code
        self.send_response(status); self.send_header('Content-Type', JSON); self.end_headers(); self.wfile.write(out)
    def log_message(self, *a): pass


@pytest.fixture
def server(trained):
    srv = ThreadingHTTPServer(('127.0.0.1', 0), _Server)
    _Server.clf, _Server.fn = load(trained/'model'), staticmethod(lambda t: t)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv, f'http://127.0.0.1:{srv.server_address[1]}/invocations'
    srv.shutdown(); srv.server_close()


def test_an_endpoint_over_http_answers_as_the_eager_model(trained, monkeypatch, server):
    monkeypatch.chdir(trained)
    v = verify('model', endpoint=server[1], record=False)
    e = v.forms['endpoint']
    assert e['status'] == 'ran' and e['flips'] == 0 and e['f1'] == v.forms['eager']['f1'] and e['texts_as_trained'] == 72, e
    assert e['max_score_diff'] <= 1e-4   # the answers' probabilities are rounded to 4 places


def test_an_endpoint_that_cuts_texts_is_caught(trained, monkeypatch, server):
    "A server that reads only each text's first three words: the flips and the F1 drop show it."
    monkeypatch.chdir(trained)
    _Server.fn = staticmethod(lambda t: ' '.join(t.split()[:3]))
    v = verify('model', endpoint=server[1], record=False)
    assert 'endpoint' in v.failing() and v.forms['endpoint']['flips'] > 10, v.table()


def test_a_function_endpoint_and_the_rows_decoded(trained, monkeypatch):
    monkeypatch.chdir(trained)
    data = load_prepared('data')
    rows, labels = split_rows(data)
    texts = texts_of_rows(rows, load('model').tokenizer)
    raw = load_raw(sample_data())['test']
    names = data.label_names
    assert sorted(zip(texts, (names[l] for l in labels))) == sorted(zip(raw['text'], raw['label']))   # the test split's texts, each with its label
    v = verify('model', endpoint=handler('model'), record=False)
    assert v.forms['endpoint']['flips'] == 0


def test_packed_rows_are_taken_apart_into_their_texts(prepared, tmp_path):
    prepare(DataArguments(data=sample_data(), model_id=str(prepared/'tiny-bert'), dataset_path=str(tmp_path/'packed'), pack=True))
    packed_data = load_prepared(str(tmp_path/'packed'))
    plain, packed = split_rows(load_prepared(str(prepared/'data'))), split_rows(packed_data)   # conftest's `data`: the plain prep
    assert packed_data.manifest['packing']['rows']['test'] < len(packed[0]) == len(plain[0]) == 72
    key = lambda rl: sorted(zip((tuple(r['input_ids']) for r in rl[0]), rl[1]))
    assert key(packed) == key(plain)   # the same texts and labels; packed rows hold them longest first


def test_bad_input_is_one_line_before_any_model_loads(trained, monkeypatch, tmp_path):
    monkeypatch.chdir(trained)
    cases = [(dict(model_dir='nothing'), 'no model folder at nothing: pass --model_dir'),
             (dict(model_dir='data'), 'data is prepared data (trn-tutorials prep writes them), not a model folder: pass --model_dir'),
             (dict(model_dir='tiny-bert'), 'tiny-bert has no metrics.json naming its data: pass --dataset_path'),
             (dict(model_dir='model', split='nosplit'), "data has no 'nosplit' split (it has train, validation, test)"),
             (dict(model_dir='model', dataset_path='nope'), 'no prepared data at nope'),
             (dict(model_dir='model', max_f1_drop=2.0), 'out of range'),
             (dict(model_dir='model', endpoint='http://127.0.0.1:9/invocations'), 'could not reach http://127.0.0.1:9/invocations')]
    for kw, want in cases:
        with pytest.raises(UsageError) as e: verify(**kw)
        assert want in str(e.value) and '\n' not in str(e.value), (kw, str(e.value))
    other = copy(trained/'model', tmp_path/'model')
    m = json.loads((other/'metrics.json').read_text())
    (other/'metrics.json').write_text(json.dumps({**m, 'dataset_path': 'data'}))   # as `train --dataset_path data` writes it
    monkeypatch.chdir(tmp_path)   # metrics.json names `data`, relative to where training ran: not here
    with pytest.raises(UsageError, match=r'names the data data, which is not here .*: pass --dataset_path'): verify('model')
    assert verify('model', dataset_path=str(trained/'data'), record=False).rows == 72   # the fix, as printed


def test_the_command_prints_the_table_and_exits_2_on_a_failing_form(trained):
    d = stale(trained, 'stale-cli')
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    r = subprocess.run([*CLI, 'verify', '--model_dir', str(d), '--dataset_path', str(trained/'data')], capture_output=True, text=True, env=env, cwd=trained)
    assert r.returncode == 2 and '| torchscript | ' in r.stdout and 'below the eager model by more than 0.01' in r.stdout, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and 'torchscript scored more than --max_f1_drop 0.01 below the eager model' in err[0], r.stderr
    ok = subprocess.run([*CLI, 'verify', '--model_dir', 'model'], capture_output=True, text=True, env=env, cwd=trained)
    assert ok.returncode == 0 and '| eager | ' in ok.stdout, ok.stderr


def test_deploy_refuses_a_form_verify_failed_before_anything_is_made(trained, monkeypatch, moto_server):
    from trn_tutorials.sagemaker.endpoint import deploy
    import boto3
    monkeypatch.chdir(trained)
    d = stale(trained, 'stale2')
    verify(str(d))
    with pytest.raises(UsageError, match=r'stale2/model.pt \(torchscript\) scored f1 .* more than max_f1_drop 0.01'):
        deploy(str(d), role='arn:aws:iam::123456789012:role/r', region='us-east-1')
    assert boto3.client('sagemaker', region_name='us-east-1').list_models()['Models'] == []
    assert boto3.client('s3', region_name='us-east-1').list_buckets()['Buckets'] == []


def test_verify_json_leaves_predicts_record_of_the_model_alone(trained, monkeypatch):
    "An output `predict` is writing continues after `verify` ran on its model: verify.json is not a file the answers come from."
    from trn_tutorials.serving.predict import model_fingerprint
    monkeypatch.chdir(trained)
    d = copy(trained/'model', trained/'fingerprint')
    before = model_fingerprint(str(d))
    verify(str(d), record=True)
    assert (d/VERIFY_RECORD).exists() and model_fingerprint(str(d)) == before
    trace(str(d))
    assert model_fingerprint(str(d)) != before   # a trace changes what predict runs
