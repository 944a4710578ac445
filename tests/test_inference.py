"""Checks of `trn_tutorials.serving.inference`: the handler for real, on a tiny BERT trained here: the four functions on JSON, the TorchScript trace against the
eager model, the same handler driven by the SageMaker inference toolkit's own handler service in-process, and served over
HTTP by the toolkit's model server (Multi Model Server, a Java program) on 127.0.0.1.

The model server needs a Java runtime (`java` on PATH; Debian: `default-jre-headless`, i.e. OpenJDK 17 on Debian 12,
installed by .ci/services.sh) and the `multi-model-server` and `sagemaker-inference` packages (dev extras): a missing one
fails the test with the line that installs it.
"""
import ast, json, os, random, shutil, signal, socket, subprocess, sys, tarfile, time, urllib.error, urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

import trn_tutorials.serving.inference as handler
from trn_tutorials.core.options import UsageError
from trn_tutorials.models import tiny_bert
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.sagemaker.model_package import package
from trn_tutorials.serving.torchscript import trace
from trn_tutorials.serving.inference import (JSON, TORCHSCRIPT, TRACE_INFO, ModelFolderError, RequestError, check_model_folder, input_fn,
                                     model_fn, output_fn, trained_lengths, predict_fn, texts_of)
from local_services import HINT, procs_mentioning

SCORE_TOL = 1.0001e-4   # scores are rounded to 4 places: two roundings of one probability differ by at most 1e-4
TEXTS = ['i feel so happy and proud of my little sister today', 'sad', 'i am scared of what might happen to us all tonight',
         'i was furious', 'i love the way he smiles at me when i feel low and lonely and tired']


def unpacked(model_dir, dest, **kw):
    "`model_dir` as SageMaker unpacks its model.tar.gz into /opt/ml/model: the archive `package` writes, extracted."
    archive = package(str(model_dir), str(dest.parent/f'{dest.name}.tar.gz'), **kw)
    with tarfile.open(archive) as t: t.extractall(dest, filter='data')
    return dest


# ---------------------------------------------------------------------------------------------------------------
# the four functions
# ---------------------------------------------------------------------------------------------------------------
def test_four_functions_on_json(trained_model):
    clf = model_fn(str(trained_model))
    assert not clf.traced and clf.labels == EMOTION_LABELS and clf.lengths == trained_lengths(trained_model)
    assert len(clf.lengths) == 3 and clf.max_length == clf.lengths[-1]
    body = json.dumps({'inputs': TEXTS}).encode()
    texts = input_fn(body, JSON)
    assert texts == TEXTS
    assert input_fn(body.decode(), 'application/json; charset=utf-8') == TEXTS   # the toolkit decodes plain JSON only
    assert input_fn('{"inputs": "one text"}', JSON) == ['one text']
    assert input_fn('"bare text"', JSON) == ['bare text'] and input_fn('["a", "b"]', JSON) == ['a', 'b']
    preds = predict_fn(texts, clf)
    assert [set(p) for p in preds] == [{'label', 'score'}] * len(TEXTS)
    assert all(p['label'] in EMOTION_LABELS and 1 / len(EMOTION_LABELS) <= p['score'] <= 1 for p in preds)
    out, ctype = output_fn(preds, JSON)
    assert ctype == JSON and json.loads(out) == preds
    assert output_fn(preds, None) == output_fn(preds, '*/*') == output_fn(preds, 'text/html, application/json;q=0.9') == (out, JSON)


def test_same_answers_as_pipeline(trained_model):
    "Padding to the trained lengths, sorting by length and batching change nothing: the pipeline (one text at a time) agrees."
    from transformers import pipeline
    want = pipeline('text-classification', model=str(trained_model))(TEXTS)
    got = predict_fn(TEXTS, model_fn(str(trained_model)))
    assert [g['label'] for g in got] == [w['label'] for w in want]
    assert max(abs(g['score'] - w['score']) for g, w in zip(got, want)) <= SCORE_TOL


def test_batches_padded_to_the_trained_lengths(trained_model, monkeypatch):
    "Each forward pass gets a batch padded to one of the recorded lengths; small batches answer as one big batch, in order."
    clf = model_fn(str(trained_model))
    shapes = []
    clf.model.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw['input_ids'].shape)), with_kwargs=True)
    whole = predict_fn(TEXTS, clf)
    monkeypatch.setattr(handler, 'BATCH_SIZE', 2)
    shapes.clear()
    small = predict_fn(TEXTS, clf)
    assert [p['label'] for p in small] == [p['label'] for p in whole]
    assert max(abs(a['score'] - b['score']) for a, b in zip(small, whole)) <= SCORE_TOL
    assert [b for b, _ in shapes] == [2, 2, 1] and {n for _, n in shapes} <= set(clf.lengths)
    long = predict_fn([' '.join(['happy'] * 500)], clf)   # cut at the longest trained length, not refused
    assert shapes[-1] == (1, clf.lengths[-1]) and long[0]['label'] in EMOTION_LABELS


BAD = [  # body, content type, status, what the one line must say
    ('{"inputs": ["i feel', JSON, 400, 'malformed JSON'),
    (b'\xff\xfe{', JSON, 400, 'not UTF-8'),
    ('{"inputs": []}', JSON, 400, 'the list of texts is empty'),
    ('[]', JSON, 400, 'the list of texts is empty'),
    ('{"inputs": ["ok", 3]}', JSON, 400, 'item 1 of inputs is a number, not a text'),
    ('{"inputs": [null]}', JSON, 400, 'item 0 of inputs is null'),
    ('{"inputs": {"text": "ok"}}', JSON, 400, 'inputs is an object'),
    ('{"text": "ok"}', JSON, 400, "key(s), not just 'inputs'"),
    ('{"inputs": "ok", "parameters": {}}', JSON, 400, "key(s), not just 'inputs'"),
    ('{"inputs": ["ok", "  "]}', JSON, 400, 'text 1 of inputs is empty'),
    ('12', JSON, 400, 'inputs is a number'),
    ('i feel happy', 'text/plain', 415, 'content type text/plain is not supported'),
    ('{"inputs": "ok"}', None, 415, 'content type none is not supported'),
    ('a,b', 'text/csv', 415, 'as application/json'),
]


@pytest.mark.parametrize('body,ctype,status,says', BAD, ids=[b[3] + f' ({i})' for i, b in enumerate(BAD)])
def test_bad_requests_get_one_line_4xx(body, ctype, status, says):
    with pytest.raises(RequestError) as e: input_fn(body, ctype)
    err = e.value
    assert err.status_code == status and says in str(err) and '\n' not in str(err)
    assert err.message == err.phrase == str(err)   # what the toolkit puts in the reason phrase and the body
    assert isinstance(err, ValueError)


def test_accept_without_json_is_406():
    with pytest.raises(RequestError) as e: output_fn([{'label': 'joy', 'score': 0.9}], 'text/csv')
    assert e.value.status_code == 406 and 'application/json' in str(e.value)


def test_model_folder_checks(tmp_path):
    "A folder without label names, config, weights or tokenizer is refused with one line naming the fix, before any load."
    no_names = tiny_bert(tmp_path/'no-names', ['hello', 'world'])   # transformers 5 writes no id2label then; 4.x writes LABEL_0, LABEL_1
    for fn in (check_model_folder, model_fn):
        with pytest.raises(ModelFolderError, match=r'names no labels \(id2label: (none|LABEL_0, LABEL_1)\): set id2label'): fn(no_names)
    cfg = Path(no_names)/'config.json'
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), 'id2label': {'0': 'LABEL_0', '1': 'LABEL_1'}}))
    with pytest.raises(ModelFolderError, match=r'names no labels \(id2label: LABEL_0, LABEL_1\): set id2label, e.g.'): model_fn(no_names)
    named = Path(tiny_bert(tmp_path/'named', ['hello', 'world'], labels=['neg', 'pos']))
    assert check_model_folder(named) == ['neg', 'pos'] and trained_lengths(named) is None   # not trained by `train`: no lengths
    clf = model_fn(str(named))
    assert clf.lengths is None and clf.max_length == 128   # the tiny config's max_position_embeddings
    for f in ('tokenizer.json', 'tokenizer_config.json', 'vocab.txt'): (named/f).unlink(missing_ok=True)
    with pytest.raises(ModelFolderError, match='has no tokenizer'): model_fn(str(named))
    (named/'model.safetensors').unlink()
    with pytest.raises(ModelFolderError, match='has no weights'): model_fn(str(named))
    with pytest.raises(ModelFolderError, match='has no config.json'): model_fn(str(tmp_path))
    with pytest.raises(UsageError, match='names no labels'): trace(no_names)
    with pytest.raises(UsageError, match='names no labels'): package(no_names, str(tmp_path/'x.tar.gz'))
    assert not (tmp_path/'x.tar.gz').exists()


def test_handler_is_self_contained(trained_model, tmp_path):
    "code/inference.py imports only the standard library, torch, transformers and (optionally) the toolkit, and runs alone."
    tree = ast.parse(Path(handler.__file__).read_text())
    mods = {a.name.split('.')[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split('.')[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))   # no relative imports
    assert mods - set(sys.stdlib_module_names) == {'torch', 'transformers', 'sagemaker_inference', 'torch_neuronx'}
    code = unpacked(trained_model, tmp_path/'opt-ml-model')/'code'
    script = ("import sys; sys.modules['trn_tutorials'] = None; sys.modules['sagemaker_inference'] = None\n"
              "import inference as h, json\n"
              "m = h.model_fn(sys.argv[1])\n"
              "print(h.output_fn(h.predict_fn(h.input_fn(json.dumps({'inputs': ['i feel happy']}), 'application/json'), m), '*/*')[0])\n"
              "try: h.input_fn('{', 'application/json')\n"
              "except h.RequestError as e: print(e.status_code, e.phrase)\n")
    r = subprocess.run([sys.executable, '-c', script, str(code.parent)], cwd=code, capture_output=True, text=True, timeout=300,
                       env={**os.environ, 'PYTHONPATH': str(code)})
    assert r.returncode == 0, r.stderr[-2000:]
    first, second = r.stdout.splitlines()[-2:]
    assert json.loads(first)[0]['label'] in EMOTION_LABELS and second.startswith('400 malformed JSON')


# ---------------------------------------------------------------------------------------------------------------
# TorchScript
# ---------------------------------------------------------------------------------------------------------------
def test_torchscript_agrees_with_eager(trained_model, tmp_path, capfd, monkeypatch):
    d = tmp_path/'traced'
    shutil.copytree(trained_model, d, ignore=shutil.ignore_patterns('checkpoint-*'))
    eager = predict_fn(TEXTS, model_fn(str(d)))
    info = trace(str(d))
    lengths = trained_lengths(d)
    assert info['max_abs_diff'] <= 1e-4 and info['lengths'] == lengths
    assert sorted(map(tuple, info['checked_shapes'])) == sorted((b, n) for n in lengths for b in (1, 3))
    assert json.loads((d/TRACE_INFO).read_text()) == info
    clf = model_fn(str(d))
    assert clf.traced and clf.lengths == lengths and type(clf.model).__name__ == 'RecursiveScriptModule'
    got = predict_fn(TEXTS, clf)
    assert [g['label'] for g in got] == [e['label'] for e in eager]
    assert max(abs(g['score'] - e['score']) for g, e in zip(got, eager)) <= SCORE_TOL
    # refused above the tolerance, and nothing is left behind: a trace whose logits are 0.001 off (a fault put in here,
    # as a shape-specialised trace would be off), then a tolerance that is no tolerance
    real = torch.jit.trace
    def off_a_little(*a, **kw):
        t = real(*a, **kw)
        return lambda ids, mask: {'logits': t(ids, mask)['logits'] + 1e-3}
    with monkeypatch.context() as m:
        m.setattr(torch.jit, 'trace', off_a_little)
        with pytest.raises(UsageError, match=r"differ from the eager model's by 0.001 \(> tolerance 0.0001\)"): trace(str(d))
    assert not (d/TORCHSCRIPT).exists() and not (d/TRACE_INFO).exists()
    with pytest.raises(UsageError, match=r"--tolerance -1 is out of range: use 0 or more"): trace(str(d), tolerance=-1)
    # which model is served, the log says; a model.pt that does not load stops the worker with one line (no silent eager fallback)
    trace(str(d)); capfd.readouterr()
    model_fn(str(d))
    assert f"inference.py: serving TorchScript {TORCHSCRIPT} (torch.jit, torch " in capfd.readouterr().err
    (d/TORCHSCRIPT).write_bytes(b'not a TorchScript file')
    with pytest.raises(ModelFolderError) as e: model_fn(str(d))
    assert str(e.value).startswith(f'cannot load {TORCHSCRIPT} (torch.jit, torch ') and 'package the folder with torchscript=False' in str(e.value)
    assert '\n' not in str(e.value)
    (d/TORCHSCRIPT).unlink(); (d/TRACE_INFO).unlink()
    model_fn(str(d))
    assert 'inference.py: serving the eager BertForSequenceClassification on cpu' in capfd.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# the SageMaker inference toolkit's own handler service, in-process
# ---------------------------------------------------------------------------------------------------------------
def request(ctx, body, content_type=JSON, accept=JSON):
    "One request as Multi Model Server hands it to the handler service: the body as bytes, the headers in a RequestProcessor."
    from mms.context import RequestProcessor
    ctx.request_processor = [RequestProcessor({'Content-Type': content_type, 'Accept': accept} if content_type else {'Accept': accept})]
    return [{'body': body.encode() if isinstance(body, str) else body}]


def test_toolkit_handler_service_in_process(trained_model, tmp_path, monkeypatch):
    from mms.context import Context
    from sagemaker_inference.default_handler_service import DefaultHandlerService
    from sagemaker_inference.errors import BaseInferenceToolkitError
    assert issubclass(RequestError, BaseInferenceToolkitError)   # the toolkit is installed here: its error class is the base
    model_dir = unpacked(trained_model, tmp_path/'opt-ml-model', torchscript=False)
    monkeypatch.syspath_prepend(str(model_dir/'code'))   # what the container's PYTHONPATH holds
    monkeypatch.setenv('PYTHONPATH', os.environ.get('PYTHONPATH', ''))   # initialize() prepends code/ to it
    monkeypatch.delitem(sys.modules, 'inference', raising=False)
    try:
        ctx = Context('model', str(model_dir), {}, 1, None, '1.1.11')
        service = DefaultHandlerService()
        service.initialize(ctx)
        assert sys.modules['inference'].__file__ == str(model_dir/'code'/'inference.py')   # the packaged copy, not this package
        out = service.handle(request(ctx, json.dumps({'inputs': TEXTS})), ctx)
        assert ctx.get_response_status(0) == (200, None) and ctx.get_response_content_type(0) == JSON
        assert json.loads(out[0]) == predict_fn(TEXTS, model_fn(str(trained_model)))
        for body, ctype, status, says in [b for b in BAD if isinstance(b[0], str)]:   # the toolkit itself decodes application/json bodies
            out = service.handle(request(ctx, body, ctype), ctx)
            code, phrase = ctx.get_response_status(0)
            assert (code, says in phrase, out[0].split('\n')[0]) == (status, True, phrase), (body, ctype, out[0][:300])
        service.handle(request(ctx, '{"inputs": "ok"}', JSON, accept='text/csv'), ctx)
        assert ctx.get_response_status(0)[0] == 406
    finally:
        sys.modules.pop('inference', None)


# ---------------------------------------------------------------------------------------------------------------
# served over HTTP by Multi Model Server, as sagemaker_inference.model_server.start_model_server starts it
# ---------------------------------------------------------------------------------------------------------------
def mms_port() -> int:
    "A free 127.0.0.1 port below 32768: Multi Model Server 1.1 refuses higher ones ('Invalid port number'), i.e. Linux's ephemeral range."
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try: s.bind(('127.0.0.1', port)); return port
            except OSError: continue
    raise RuntimeError('no free port between 20000 and 32000')


@contextmanager
def model_server(model_dir:Path, work:Path, timeout:float=120):
    """Multi Model Server serving `model_dir` through the toolkit's handler service on a free 127.0.0.1 port.

    The same command and configuration as `sagemaker_inference.model_server.start_model_server` (the toolkit's
    default-mms.properties and log4j2.xml, `--model-store /`, `--models model=<model_dir>`, code/ on PYTHONPATH), except: addresses on
    127.0.0.1 and free ports instead of 0.0.0.0:8080, the config file in `work` instead of /etc, its own TMPDIR (MMS keeps a
    pid file and its worker sockets there), `--foreground` and its own process group, so that stopping it stops Java and
    the Python workers; no pip install of code/requirements.txt (this environment has transformers)."""
    import sagemaker_inference
    if not shutil.which('java'):
        pytest.fail(f"Multi Model Server needs a Java runtime (Debian: default-jre-headless): {HINT}", pytrace=False)
    exe = Path(sys.executable).parent/'multi-model-server'
    if not exe.exists(): pytest.fail(f"multi-model-server is not in {exe.parent}: pip install -e '.[dev]' (multi-model-server, sagemaker-inference)", pytrace=False)
    etc = Path(sagemaker_inference.__file__).parent/'etc'
    port, mport = mms_port(), mms_port()
    (work/'tmp').mkdir(parents=True)
    cfg = work/'mms.properties'
    cfg.write_text((etc/'default-mms.properties').read_text() + f"inference_address=http://127.0.0.1:{port}\n"
                   f"management_address=http://127.0.0.1:{mport}\ndefault_service_handler=sagemaker_inference.default_handler_service\n"
                   "default_workers_per_model=1\ndefault_response_timeout=120\n")
    env = {**os.environ, 'PATH': f"{exe.parent}:{os.environ['PATH']}", 'TMPDIR': str(work/'tmp'), 'TEMP': str(work/'tmp'),
           'PYTHONPATH': str(model_dir/'code'), 'LOG_LOCATION': str(work/'logs'), 'METRICS_LOCATION': str(work/'logs')}
    log = open(work/'mms.out', 'wb')
    proc = subprocess.Popen([str(exe), '--start', '--foreground', '--model-store', '/', '--mms-config', str(cfg),
                             '--log-config', str(etc/'log4j2.xml'), '--models', f'model={model_dir}'],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        url, deadline = f'http://127.0.0.1:{port}', time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(url + '/ping', timeout=2) as r:
                    if r.status == 200: break
            except OSError: pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Multi Model Server did not answer /ping: {(work/'mms.out').read_text()[-3000:]}", pytrace=False)
            time.sleep(0.25)
        yield url
    finally:
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
            try: os.killpg(proc.pid, sig)
            except ProcessLookupError: break
            deadline = time.monotonic() + wait
            while procs_mentioning(str(work)) and time.monotonic() < deadline: time.sleep(0.2)
            if not procs_mentioning(str(work)): break
        proc.wait(10)
        log.close()


def post(url, body, content_type=JSON, timeout=120):
    req = urllib.request.Request(url + '/invocations', data=body.encode() if isinstance(body, str) else body, method='POST',
                                 headers={'Content-Type': content_type, 'Accept': JSON})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r: return r.status, r.reason, r.read().decode()
    except urllib.error.HTTPError as e: return e.code, e.reason, e.read().decode()


def test_served_over_http_by_multi_model_server(trained_model, tmp_path):
    "The packaged archive, traced, as SageMaker unpacks it; /ping, /invocations, a one-line 4xx; no process left afterwards."
    d = tmp_path/'traced'
    shutil.copytree(trained_model, d, ignore=shutil.ignore_patterns('checkpoint-*'))
    trace(str(d))
    model_dir, work = unpacked(d, tmp_path/'opt-ml-model'), tmp_path/'mms'
    want = predict_fn(TEXTS, model_fn(str(model_dir)))
    with model_server(model_dir, work) as url:
        status, _, body = post(url, json.dumps({'inputs': TEXTS}))   # the first request waits for the worker's model_fn
        assert status == 200, body[-2000:]
        got = json.loads(body)
        assert [g['label'] for g in got] == [w['label'] for w in want]
        assert max(abs(g['score'] - w['score']) for g, w in zip(got, want)) <= SCORE_TOL
        status, _, body = post(url, json.dumps('i feel happy').encode(), 'application/json; charset=utf-8')
        assert status == 200 and len(json.loads(body)) == 1
        status, reason, body = post(url, '{"inputs": ["i feel')
        line = body.split('\n')[0]
        assert (status, line, reason) == (400, line, line) and line.startswith('malformed JSON') and '{"inputs": ' in line
        status, reason, _ = post(url, '{"inputs": []}')
        assert status == 400 and reason.startswith('the list of texts is empty')
        status, reason, _ = post(url, 'i feel happy', 'text/plain')
        assert status == 415 and reason.startswith('content type text/plain is not supported')
        with urllib.request.urlopen(url + '/ping', timeout=10) as r: assert json.loads(r.read())['status'] == 'Healthy'
    assert not procs_mentioning(str(work)), f"model server processes left: {procs_mentioning(str(work))}"


def test_torchscript_pieces(tmp_path):
    "`trace` lives in trn_tutorials.serving.torchscript (nbs/serving/11b_torchscript.ipynb), and endpoint no longer forwards it; its example rows and its comparison."
    from transformers import AutoModelForSequenceClassification
    from trn_tutorials.sagemaker import endpoint
    from trn_tutorials.serving import torchscript as T
    assert not hasattr(endpoint, 'trace') and endpoint.model_labels is T.model_labels
    ids, mask = T.example_inputs(50, 3, 8, torch.Generator().manual_seed(0))
    assert mask.sum(1).tolist() == [8, 6, 4] and (ids[mask == 0] == 0).all() and (ids[mask == 1] > 0).all()
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert(str(tmp_path/'m'), ['a', 'b'])).eval()
    same = lambda ids, mask: model(input_ids=ids, attention_mask=mask)
    diff, shapes = T.logits_difference(model, same, [8, 16], torch.Generator().manual_seed(0))
    assert diff == 0.0 and shapes == [[1, 8], [3, 8], [1, 16], [3, 16]]


# ---------------------------------------------------------------------------------------------------------------
# issue 41: a Neuron-compiled model that does not load names the real cause; trace records the NeuronCores a copy needs;
# the TorchScript chapter says what the handler does with a trace that does not load
# ---------------------------------------------------------------------------------------------------------------
NEURON_VARS = ('SAGEMAKER_MODEL_SERVER_WORKERS', 'NEURON_RT_NUM_CORES')


def test_neuron_model_that_does_not_load_names_the_cause(tmp_path, monkeypatch):
    """On the Neuron image a compiled model fails to load when its worker finds no free NeuronCore (too many workers, or none
    set and the first took every core), when it needs more cores than the worker has, or with no torch-neuronx at all. The line
    says which; never `torchscript=False`, which ml.inf2 refuses. (torch_neuronx is a stand-in module here; model.pt does not load.)"""
    import types
    d = Path(tiny_bert(tmp_path/'model', 'i feel happy sad'.split(), labels=EMOTION_LABELS))
    (d/TORCHSCRIPT).write_bytes(b'not a TorchScript file')
    record = lambda **kw: (d/TRACE_INFO).write_text(json.dumps({'compiler': 'torch_neuronx 2.9.0.2.15.32035', 'torch': '2.9.0', 'lengths': [8], **kw}))
    monkeypatch.setitem(sys.modules, 'torch_neuronx', types.ModuleType('torch_neuronx'))
    for k in NEURON_VARS: monkeypatch.delenv(k, raising=False)
    cases = [({}, dict(neuron_cores=1), "sets no SAGEMAKER_MODEL_SERVER_WORKERS: TorchServe starts one worker per vCPU and the first takes every NeuronCore"),
             ({'SAGEMAKER_MODEL_SERVER_WORKERS': '4', 'NEURON_RT_NUM_CORES': '1'}, dict(neuron_cores=1),
              "no free NeuronCore for this worker (4 workers, 1 NeuronCore each)"),
             ({'SAGEMAKER_MODEL_SERVER_WORKERS': '2', 'NEURON_RT_NUM_CORES': '1'}, dict(neuron_cores=2, compiled_on='trn2.48xlarge'),
              "compiled for 2 NeuronCores per copy (on trn2.48xlarge), and this worker has NEURON_RT_NUM_CORES=1")]
    for env, rec, says in cases:
        with monkeypatch.context() as m:
            for k, v in env.items(): m.setenv(k, v)
            record(**rec)
            with pytest.raises(ModelFolderError) as e: model_fn(str(d))
        msg = str(e.value)
        assert msg.startswith(f'cannot load {TORCHSCRIPT} (torch_neuronx 2.9.0.2.15.32035, torch 2.9.0)') and says in msg, msg
        assert 'torchscript=False' not in msg and '\n' not in msg and ('deploy' in msg or 'trace(model_dir, neuron=True)' in msg), msg
    monkeypatch.setitem(sys.modules, 'torch_neuronx', None)   # a CPU image: import torch_neuronx fails
    record(neuron_cores=1)
    with pytest.raises(ModelFolderError) as e: model_fn(str(d))
    assert 'this image has no torch-neuronx' in str(e.value) and 'ml.inf2' in str(e.value) and 'torchscript=False' not in str(e.value)


def test_trace_records_neuron_cores(tmp_path, monkeypatch):
    """trace(neuron=True) records how many NeuronCores one copy of the compiled model runs on: the logical NeuronCore of the
    machine it compiled on (1 on a Trn1 or Inf2; 2 on a Trn2 by default), and that machine. torch_neuronx is a stand-in here
    (torch.jit.trace as the compiler), and so is neuron-ls."""
    import types, torch
    import trn_tutorials.serving.torchscript as T
    fake = types.ModuleType('torch_neuronx')
    fake.__version__, fake.trace, fake.dynamic_batch = '2.9.0.2.15.32035', lambda m, ex: torch.jit.trace(m, ex), lambda t: t
    monkeypatch.setitem(sys.modules, 'torch_neuronx', fake)
    d = Path(tiny_bert(tmp_path/'model', 'i feel happy sad'.split(), labels=EMOTION_LABELS))
    trn1 = {'instance_type': 'trn1.2xlarge', 'neuron_devices': [{'neuron_device': 0, 'nc_count': 2}]}
    trn2 = {'instance_type': 'trn2.48xlarge', 'logical_neuroncore_config': 2, 'neuron_devices': [{'neuron_device': 0, 'nc_count': 4}]}
    for ls, cores in ((trn1, 1), (trn2, 2)):
        monkeypatch.setattr(T, 'neuron_ls', lambda ls=ls: ls)
        info = T.trace(str(d), lengths=[8], neuron=True)
        assert (info['compiler'], info['neuron_cores'], info['compiled_on']) == ('torch_neuronx 2.9.0.2.15.32035', cores, ls['instance_type'])
        assert json.loads((d/TRACE_INFO).read_text()) == info


def test_torchscript_chapter_says_what_the_handler_does(trained_model, tmp_path):
    """The archive carries the trace instead of the eager weights, so a trace that does not load stops the worker with one line
    naming the fix; the TorchScript chapter says that, and promises no fallback to the eager model."""
    d = tmp_path/'traced'
    shutil.copytree(trained_model, d, ignore=shutil.ignore_patterns('checkpoint-*'))
    (d/TORCHSCRIPT).write_bytes(b'made by a newer PyTorch than the image holds')
    (d/TRACE_INFO).write_text(json.dumps({'compiler': 'torch.jit', 'torch': '2.13.0', 'lengths': trained_lengths(d)}))
    served = unpacked(d, tmp_path/'opt-ml-model')
    assert (served/TORCHSCRIPT).is_file() and not (served/'model.safetensors').exists()   # nothing to fall back on
    with pytest.raises(ModelFolderError, match='package the folder with torchscript=False'): model_fn(str(served))
    prose = ' '.join('\n'.join(''.join(c['source']) for c in json.loads((Path(__file__).parents[1]/'nbs'/'serving'/'11b_torchscript.ipynb').read_text())['cells']
                               if c['cell_type'] == 'markdown').split())
    assert 'then serves the eager model' not in prose and 'falls back' not in prose
    assert 'torchscript=False' in prose and 'does not start' in prose


# ----------------------------------------------------------------------------------------------------
# Issue 43, serving: sentence pairs, regression and multi-label through the handler (input_fn -> predict_fn -> output_fn), the
# TorchScript trace, transformers' pipeline (what the Hugging Face inference image runs), `predict` and `sm-predict`.
#
# The models are tiny BERTs made here with `config.problem_type` set and saved with their tokenizer, as `train` saves them.
# (was test_serving_kinds.py)

WORDS = 'i feel so happy and proud today am scared of what might happen was furious at him the cat sat on mat a dog'.split()
LABELS = ['anger', 'joy', 'love', 'sadness']
SINGLE = ['i feel so happy today', 'i was furious at him']
PAIRS = [{'text': 'the cat sat on the mat', 'text_pair': 'a cat sat on a mat'},
         {'text': 'i am scared', 'text_pair': 'what might happen to him today and the dog and the cat'}]


def kind_model(path:Path, problem_type:str, labels:list[str], threshold=None, lengths=None) -> str:
    "A tiny random BERT with `problem_type` and `labels` (id2label), saved with its tokenizer; `threshold` in config.json, `lengths` in metrics.json."
    from transformers import AutoConfig, BertForSequenceClassification
    tiny_bert(path, WORDS, labels=['a', 'b'])   # the tokenizer and a config to start from
    cfg = AutoConfig.from_pretrained(path)
    cfg.num_labels, cfg.problem_type = len(labels), problem_type
    cfg.id2label, cfg.label2id = dict(enumerate(labels)), {n: i for i, n in enumerate(labels)}
    if threshold is not None: cfg.multi_label_threshold = threshold
    torch.manual_seed(1)
    model = BertForSequenceClassification(cfg)
    with torch.no_grad():   # token type embeddings that matter: a pair scored without its segment ids would differ
        model.bert.embeddings.token_type_embeddings.weight.normal_(0, 1)
        model.classifier.weight.mul_(20)   # logits spread out, so sigmoids land on both sides of a threshold
        if problem_type == 'regression': model.classifier.bias.fill_(3.0)   # a value a sigmoid could not give
    model.save_pretrained(path)
    if lengths: (path/'metrics.json').write_text(json.dumps({'bucket_lengths': lengths}))
    return str(path)


def eager_logits(model_dir, items) -> torch.Tensor:
    "The model's logits for each text or pair on its own, tokenized by the tokenizer (`tokenizer(text, text_pair)`), unpadded."
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    rows = []
    with torch.no_grad():
        for it in items:
            enc = tok(it['text'], it['text_pair'], return_tensors='pt') if isinstance(it, dict) else tok(it, return_tensors='pt')
            rows.append(model(**enc).logits[0])
    return torch.stack(rows)


def handled(model_dir, body) -> list:
    "The answer of the four functions for one request, as the serving container calls them."
    out, ctype = output_fn(predict_fn(input_fn(json.dumps(body), JSON), model_fn(str(model_dir))), JSON)
    assert ctype == JSON
    return json.loads(out)


@pytest.fixture(scope='module')
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('kinds')
    return {'single': kind_model(tmp/'single', 'single_label_classification', LABELS, lengths=[8, 16, 32]),
            'regression': kind_model(tmp/'regression', 'regression', ['score'], lengths=[8, 16, 32]),
            'multi': kind_model(tmp/'multi', 'multi_label_classification', LABELS, threshold=0.4, lengths=[8, 16, 32]),
            'multi-default': kind_model(tmp/'multi-default', 'multi_label_classification', LABELS)}


# ---------------------------------------------------------------------------------------------------------------
# requests
# ---------------------------------------------------------------------------------------------------------------
def test_pair_requests_are_read():
    one = {'text': 'a', 'text_pair': 'b'}
    assert texts_of({'inputs': one}) == [one]
    assert texts_of({'inputs': [one, one]}) == [one, one]
    assert texts_of({'inputs': ['x', one]}) == ['x', one]   # a mix of single texts and pairs is one request
    assert input_fn(json.dumps({'inputs': one}), JSON) == [one]


BAD_PAIRS = [  # inputs, what the one line must say
    ({'text': 'ok'}, "inputs is an object with key(s) 'text', not a sentence pair {\"text\": \"a text\", \"text_pair\": \"another\"}"),
    ({'sentence1': 'a', 'sentence2': 'b'}, "inputs is an object with key(s) 'sentence1', 'sentence2', not a sentence pair"),
    ({'text': 'a', 'text_pair': 'b', 'label': 1}, "key(s) 'text', 'text_pair', 'label', not a sentence pair"),
    ({}, 'inputs is an object with no keys, not a sentence pair'),
    (['fine', {'text_pair': 'b'}], "item 1 of inputs is an object with key(s) 'text_pair', not a sentence pair"),
    ([{'text': 'a', 'text_pair': 3}], 'text_pair of item 0 of inputs is a number, not a text'),
    ([{'text': ' ', 'text_pair': 'b'}], 'text of item 0 of inputs is empty'),
    (['a', ['b', 'c']], 'item 1 of inputs is a list, not a text or a sentence pair'),
]


@pytest.mark.parametrize('inputs,says', BAD_PAIRS, ids=[str(i) for i in range(len(BAD_PAIRS))])
def test_bad_pair_objects_get_one_line_400(inputs, says):
    with pytest.raises(RequestError) as e: input_fn(json.dumps({'inputs': inputs}), JSON)
    assert e.value.status_code == 400 and says in str(e.value) and '\n' not in str(e.value), str(e.value)


# ---------------------------------------------------------------------------------------------------------------
# the answers of each kind, end to end
# ---------------------------------------------------------------------------------------------------------------
def test_single_label_pairs_score_as_the_tokenizers_pair(models):
    items = SINGLE + PAIRS
    got = handled(models['single'], {'inputs': items})
    want = torch.softmax(eager_logits(models['single'], items), -1)
    assert [g['label'] for g in got] == [LABELS[i] for i in want.argmax(-1).tolist()]
    assert max(abs(g['score'] - w) for g, w in zip(got, want.max(-1).values.tolist())) <= 1.0001e-4
    # the segment ids matter for this model: the pair scored as one text (all segment ids 0) is another answer
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    tok, m = AutoTokenizer.from_pretrained(models['single']), AutoModelForSequenceClassification.from_pretrained(models['single']).eval()
    enc = tok(PAIRS[0]['text'], PAIRS[0]['text_pair'], return_tensors='pt')
    assert enc['token_type_ids'].sum() > 0
    with torch.no_grad(): flat = torch.softmax(m(input_ids=enc['input_ids'], attention_mask=enc['attention_mask']).logits[0], -1)
    assert abs(flat.max().item() - got[2]['score']) > 1e-3 or LABELS[flat.argmax().item()] != got[2]['label']


def test_regression_answers_the_raw_value(models):
    items = SINGLE + PAIRS
    got = handled(models['regression'], {'inputs': items})
    want = eager_logits(models['regression'], items)[:, 0].tolist()
    assert [set(g) for g in got] == [{'label', 'score'}] * len(items) and {g['label'] for g in got} == {'score'}
    assert max(abs(g['score'] - w) for g, w in zip(got, want)) <= 1e-5
    assert any(not 0 <= g['score'] <= 1 for g in got), got   # not squashed: this model's outputs leave [0, 1]
    assert handled(models['regression'], {'inputs': PAIRS[1]})[0]['score'] == pytest.approx(want[3], abs=1e-5)   # one pair alone


def test_multi_label_sigmoid_and_threshold(models):
    items = SINGLE + PAIRS
    for name, threshold in (('multi', 0.4), ('multi-default', 0.5)):
        clf = model_fn(models[name])
        assert (clf.problem_type, clf.threshold) == ('multi_label_classification', threshold)
        assert f'multi-label, threshold {threshold}' in repr(clf)
        got = handled(models[name], {'inputs': items})
        probs = torch.sigmoid(eager_logits(models[name], items)).tolist()
        for g, p in zip(got, probs):
            assert set(g) == {'labels', 'scores'} and list(g['scores']) == LABELS
            assert max(abs(g['scores'][n] - q) for n, q in zip(LABELS, p)) <= 1.0001e-4
            assert g['labels'] == [n for n, q in zip(LABELS, p) if q >= threshold]
        assert {len(g['labels']) for g in got} != {0}, got   # some labels given, so the threshold was applied to real scores


def test_pairs_padded_to_the_trained_lengths(models):
    clf = model_fn(models['regression'])
    seen = []
    clf.model.register_forward_pre_hook(lambda m, a, kw: seen.append((tuple(kw['input_ids'].shape), kw['token_type_ids'].clone())), with_kwargs=True)
    long = {'text': ' '.join(['cat'] * 40), 'text_pair': ' '.join(['dog'] * 40)}
    predict_fn(PAIRS + [long], clf)
    assert {n for (_, n), _ in seen} <= {8, 16, 32}
    types = seen[-1][1][-1].tolist()   # the long pair (the longest, last): cut to 32 tokens, longest text first, both texts kept
    assert types == clf.tokenizer(long['text'], long['text_pair'], truncation='longest_first', max_length=32)['token_type_ids']
    assert len(types) == 32 and 15 <= types.count(1) <= 16, types


def test_model_folder_kinds_refused_in_one_line(models, tmp_path):
    from transformers import AutoConfig
    for change, says in (({'problem_type': 'ranking'}, "problem_type 'ranking': set one of single_label_classification, regression"),
                         ({'multi_label_threshold': 1.5}, 'multi_label_threshold 1.5: set a number between 0 and 1')):
        d = tmp_path/next(iter(change))
        shutil.copytree(models['multi'], d)
        cfg = json.loads((d/'config.json').read_text()); cfg.update(change); (d/'config.json').write_text(json.dumps(cfg))
        with pytest.raises(ModelFolderError) as e: model_fn(str(d))
        assert says in str(e.value) and '\n' not in str(e.value), str(e.value)
    d = tmp_path/'no-problem-type'   # one output and no problem_type: a regression, as transformers' loss reads it
    shutil.copytree(models['regression'], d)
    cfg = json.loads((d/'config.json').read_text()); cfg.pop('problem_type'); (d/'config.json').write_text(json.dumps(cfg))
    assert AutoConfig.from_pretrained(d).problem_type is None and model_fn(str(d)).problem_type == 'regression'


# ---------------------------------------------------------------------------------------------------------------
# TorchScript: the trace takes (input_ids, attention_mask) and derives the segment ids of a pair
# ---------------------------------------------------------------------------------------------------------------
def test_traced_pairs_agree_with_eager(models, tmp_path):
    for name in ('regression', 'multi'):
        d = tmp_path/name
        shutil.copytree(models[name], d)
        items = SINGLE + PAIRS
        eager = predict_fn(items, model_fn(str(d)))
        info = trace(str(d))
        assert info['pairs'] is True and info['segment_ids'].startswith('1 after the first separator') and info['max_abs_diff'] <= 1e-4
        clf = model_fn(str(d))
        assert clf.traced and clf.pairs and not clf.segment_ids
        got = predict_fn(items, clf)
        if name == 'regression': assert max(abs(g['score'] - e['score']) for g, e in zip(got, eager)) <= 1e-4
        else:
            assert [g['labels'] for g in got] == [e['labels'] for e in eager]
            assert max(abs(g['scores'][n] - e['scores'][n]) for g, e in zip(got, eager) for n in LABELS) <= 2e-4
    # a trace made before traces took pairs (no 'pairs' in its record): single texts served, a pair refused in one line
    rec = json.loads((d/TRACE_INFO).read_text()); rec.pop('pairs'); (d/TRACE_INFO).write_text(json.dumps(rec))
    old = model_fn(str(d))
    assert not old.pairs and len(predict_fn(SINGLE, old)) == 2
    with pytest.raises(RequestError) as e: predict_fn(PAIRS, old)
    assert e.value.status_code == 400 and 'traced without segment ids' in str(e.value) and 'trace(model_dir)' in str(e.value)


def test_segments_follow_the_tokenizers_pair_rule(models):
    from transformers import AutoTokenizer
    from trn_tutorials.serving.torchscript import segments
    tok = AutoTokenizer.from_pretrained(models['single'])
    pairs = tok([p['text'] for p in PAIRS], [p['text_pair'] for p in PAIRS], padding=True, return_tensors='pt')
    singles = tok(SINGLE, padding=True, return_tensors='pt')
    for enc in (pairs, singles):
        assert torch.equal(segments(enc['input_ids'], enc['attention_mask'], tok.sep_token_id), enc['token_type_ids'])


def test_distilbert_with_a_bert_tokenizer_serves_pairs(models, distilbert_like):
    "A model without segment ids is given none, even when its tokenizer makes them."
    d = distilbert_like(models['single'])
    cfg = json.loads((Path(d)/'config.json').read_text())
    cfg.update(id2label={'0': 'no', '1': 'yes'}, label2id={'no': 0, 'yes': 1}); (Path(d)/'config.json').write_text(json.dumps(cfg))
    clf = model_fn(d)
    assert not clf.segment_ids and clf.pairs
    assert [set(a) for a in predict_fn(PAIRS, clf)] == [{'label', 'score'}] * 2


# ---------------------------------------------------------------------------------------------------------------
# the Hugging Face inference image: transformers' pipeline, as its toolkit calls it (pipeline(inputs, **parameters))
# ---------------------------------------------------------------------------------------------------------------
def test_what_the_hf_pipeline_answers_for_each_kind(models):
    from transformers import pipeline
    ours = {k: handled(models[k], {'inputs': SINGLE + PAIRS}) for k in ('single', 'regression', 'multi')}
    pipe = {k: pipeline('text-classification', model=models[k], device=-1) for k in ours}
    # single-label and regression: the same answers (the pipeline's scores unrounded); pairs as {"text", "text_pair"} objects
    for k in ('single', 'regression'):
        theirs = pipe[k](SINGLE + PAIRS)
        assert [t['label'] for t in theirs] == [o['label'] for o in ours[k]]
        assert max(abs(t['score'] - o['score']) for t, o in zip(theirs, ours[k])) <= 1.0001e-4
    assert isinstance(pipe['single'](PAIRS[0]), dict)   # one pair alone: one object, not a list (our handler: a list of one)
    # multi-label: by default only the top label and its sigmoid, no threshold; top_k=None gives every label's sigmoid
    top = pipe['multi'](SINGLE + PAIRS)
    for t, o in zip(top, ours['multi']):
        best = max(o['scores'], key=o['scores'].get)
        assert t['label'] == best and abs(t['score'] - o['scores'][best]) <= 1.0001e-4
    every = pipe['multi'](SINGLE + PAIRS, top_k=None)
    for t, o in zip(every, ours['multi']):
        assert {d['label']: round(d['score'], 4) for d in t} == pytest.approx(o['scores'], abs=1.0001e-4)
