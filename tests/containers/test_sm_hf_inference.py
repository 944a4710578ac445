"""The Hugging Face inference container (`huggingface-pytorch-inference:2.6.0-transformers5.5.3-cpu-py312-ubuntu22.04`)
serving what `hf_endpoint.hf_package` makes, in a venv holding the image's versions: `STAGES=sm-hf-inference bash tools/test.sh`.

The container side runs as subprocesses of `$TRN_TUTORIALS_CONTAINER/bin/python` (a throwaway copy of the stand-in):
the image's `serve` (`dockerd-entrypoint.py serve` -> `sagemaker_huggingface_inference_toolkit.serving.main()`), which
writes MMS's configuration and starts multi-model-server (Java) with the toolkit's handler service on the unpacked
archive as `/opt/ml/model`. `predict` itself then talks to it: a botocore `before-send` hook (boto3's event system)
hands the InvokeEndpoint request it built to the server's `/invocations`, as SageMaker's front end does.

Stood in for, and why:
- the toolkit: the image installs it from git (aws/sagemaker-huggingface-inference-toolkit@f0c3eb2, "until 2.7.0 is
  released"); no release after 2.6.0 is on PyPI and that commit is not public here. 2.6.0 does not import with
  transformers 5 (`from transformers.file_utils import is_tf_available`: transformers 5 dropped TensorFlow). The stand-in
  holds PyPI's 2.6.0, and this test replaces that one import in the throwaway copy (is_tf_available -> False; test
  `test_pypi_toolkit_needs_the_one_patch` shows the break and that nothing else is changed);
- `/etc/sagemaker-mms.properties` (where the toolkit writes MMS's configuration) -> a file in the test's folder;
- the address: 0.0.0.0:8080 -> 127.0.0.1 (the toolkit's generated configuration, with its host replaced) and a free port
  (SAGEMAKER_BIND_TO_PORT, as SageMaker sets it); Java 17 here, OpenJDK 21 in the image;
- setuptools: the Dockerfile asks for >=81.0.0; sagemaker-inference imports pkg_resources, which setuptools 82 removed:
  the stand-in pins 81.0.0.
"""
import io, json, os, random, signal, socket, subprocess, sys, tarfile, time, urllib.error, urllib.request
from pathlib import Path

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from trn_tutorials.models import tiny_bert
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.sagemaker.endpoint import predict
from trn_tutorials.sagemaker.hf_endpoint import HF_TASK, hf_package

PINS = {'torch': '2.6.0', 'transformers': '5.5.3', 'huggingface_hub': '1.10.0', 'accelerate': '1.12.0',
        'multi-model-server': '1.1.11', 'sagemaker-huggingface-inference-toolkit': '2.6.0'}
BROKEN = 'from transformers.file_utils import is_tf_available, is_torch_available\n'
PATCHED = ('from transformers.utils import is_torch_available\n'
           'def is_tf_available(): return False  # trn-tutorials stand-in: transformers 5 has no TensorFlow (the image runs the toolkit from git)\n')
SERVE = """import sys
import sagemaker_inference.model_server as ms
from sagemaker_huggingface_inference_toolkit import mms_model_server, serving
ms.MMS_CONFIG_FILE = mms_model_server.MMS_CONFIG_FILE = sys.argv[1]   # /etc/sagemaker-mms.properties in the image
_config = ms._generate_mms_config_properties   # 0.0.0.0 in the image; loopback here
ms._generate_mms_config_properties = lambda *a, **k: _config(*a, **k).replace('0.0.0.0', '127.0.0.1')
serving.main()   # what the image's dockerd-entrypoint.py runs for `serve`
"""
START_S, REQUEST_S = 180, 60


@pytest.fixture(scope='module')
def container() -> Path:
    c = os.environ.get('TRN_TUTORIALS_CONTAINER')
    if not c or not (Path(c)/'bin'/'python').exists():
        pytest.fail("needs the sm-hf-inference stand-in (TRN_TUTORIALS_CONTAINER): `STAGES=sm-hf-inference bash tools/test.sh` runs these tests",
                    pytrace=False)
    return Path(c)


def run(container, code:str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(container/'bin'/'python'), '-c', code], capture_output=True, text=True, timeout=120, **kw)


def toolkit_file(container) -> Path:
    r = run(container, "import importlib.util as u; print(u.find_spec('sagemaker_huggingface_inference_toolkit').submodule_search_locations[0])")
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip())/'transformers_utils.py'


def test_pins(container):
    code = "import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in %r}))" % list(PINS)
    r = run(container, code)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == PINS


def test_pypi_toolkit_needs_the_one_patch(container):
    "The PyPI toolkit fails to import with transformers 5 on exactly one line; patched (in the copy, a new file), it imports."
    f = toolkit_file(container)
    text = f.read_text()
    if PATCHED not in text:
        r = run(container, 'import sagemaker_huggingface_inference_toolkit.handler_service')
        assert r.returncode != 0 and "cannot import name 'is_tf_available' from 'transformers.file_utils'" in r.stderr, r.stderr[-500:]
        assert text.count(BROKEN) == 1
        tmp = f.with_name(f.name + '.trn-tutorials')
        tmp.write_text(text.replace(BROKEN, PATCHED)); os.replace(tmp, f)   # a new inode: never writes through a hard link to the base
    r = run(container, 'import sagemaker_huggingface_inference_toolkit.handler_service, sagemaker_huggingface_inference_toolkit.serving')
    assert r.returncode == 0, r.stderr[-2000:]


def free_port() -> int:
    "A free port below 32768: MMS 1.1.11 refuses the kernel's ephemeral ones ('Invalid configuration: Invalid port number')."
    for port in random.Random().sample(range(20000, 32000), 200):
        with socket.socket() as s:
            try: s.bind(('127.0.0.1', port)); return port
            except OSError: continue
    raise RuntimeError('no free port in 20000-32000')


def get(url:str, timeout:float=5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r: return r.status, r.read()
    except urllib.error.HTTPError as e: return e.code, e.read()


def invoke_through(url:str):
    "A botocore before-send hook: InvokeEndpoint's request (body, Content-Type, Accept) goes to the model server's /invocations."
    def send(request, **kw):
        headers = {k: (v.decode() if isinstance(v := request.headers[k], bytes) else v) for k in ('Content-Type', 'Accept') if k in request.headers}
        req = urllib.request.Request(url + '/invocations', data=request.body, headers=headers, method='POST')
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_S) as r: status, body, h = r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e: status, body, h = e.code, e.read(), dict(e.headers)
        send.sent.append((dict(headers), request.body))
        class Raw(io.BytesIO):   # what botocore reads: a file, and its stream() for the error path
            def stream(self, **kw): yield self.getvalue()
        return AWSResponse(request.url, status, {**h, 'Content-Type': h.get('Content-Type', 'application/json')}, Raw(body))
    send.sent = []
    return send


def test_serves_the_archive(container, tmp_path, monkeypatch):
    "The image's serve flow on the unpacked hf_package archive; predict's own request answered with the folder's label names."
    test_pypi_toolkit_needs_the_one_patch(container)
    # the fine-tuned folder (a tiny BERT, saved here) -> model.tar.gz -> /opt/ml/model, as SageMaker unpacks it
    src = tiny_bert(tmp_path/'model', 'i feel so happy and proud today am scared of what might happen'.split(), labels=EMOTION_LABELS)
    opt_ml = tmp_path/'opt'/'ml'
    with tarfile.open(hf_package(src, tmp_path/'model.tar.gz')) as t:
        names = t.getnames(); t.extractall(opt_ml/'model', filter='data')
    assert not any(n.startswith('code') for n in names)
    port = free_port()
    keep = ('PATH', 'HOME', 'LANG', 'JAVA_HOME', 'TMPDIR')
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(PATH=f"{container/'bin'}:{env.get('PATH', '/usr/bin:/bin')}", HF_TASK=HF_TASK,   # the endpoint's Environment: HF_TASK only
               SAGEMAKER_BASE_DIR=str(opt_ml),   # /opt/ml in the image
               SAGEMAKER_BIND_TO_PORT=str(port),   # SageMaker sets it; 8080 by default
               HF_HUB_OFFLINE='1', PYTHONUNBUFFERED='1')
    log = tmp_path/'serve.log'
    t0 = time.monotonic()
    with open(log, 'w') as out:
        proc = subprocess.Popen([str(container/'bin'/'python'), '-c', SERVE, str(tmp_path/'sagemaker-mms.properties')], cwd=tmp_path,
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f'http://127.0.0.1:{port}'
    try:
        up = None
        while time.monotonic() - t0 < START_S and proc.poll() is None:
            try:
                if get(url + '/ping')[0] == 200 and get(url + '/models/model')[0] == 200: up = time.monotonic() - t0; break
            except OSError: pass
            time.sleep(1)
        assert up is not None, f"the model server did not answer /ping within {START_S}s (exit {proc.poll()}):\n{log.read_text()[-4000:]}"
        # predict, as a reader calls it: boto3 builds InvokeEndpoint; the hook hands it to the server, as SageMaker does
        for k, v in {'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing', 'AWS_DEFAULT_REGION': 'us-east-1'}.items():
            monkeypatch.setenv(k, v)
        for k in ('AWS_ENDPOINT_URL', 'AWS_PROFILE', 'AWS_SESSION_TOKEN'): monkeypatch.delenv(k, raising=False)
        boto3.setup_default_session()
        hook = invoke_through(url)
        boto3.DEFAULT_SESSION.events.register('before-send.sagemaker-runtime.InvokeEndpoint', hook)
        texts = ['i feel so happy and proud today', 'i am scared of what might happen', 'today']
        t1 = time.monotonic()
        try:
            got = predict('trn-tutorials-standin', texts)
            one = predict('trn-tutorials-standin', 'i feel so happy')
        finally: boto3.DEFAULT_SESSION = None
        answer_s = time.monotonic() - t1
        assert hook.sent[0] == ({'Content-Type': 'application/json', 'Accept': 'application/json'}, json.dumps({'inputs': texts}).encode())
        assert len(got) == len(texts) and len(one) == 1
        assert all(set(r) == {'label', 'score'} and r['label'] in EMOTION_LABELS and 0 < r['score'] <= 1 for r in got + one), got
        # the same labels and scores as transformers' pipeline on the same folder here
        from transformers import pipeline
        want = pipeline(task=HF_TASK, model=str(opt_ml/'model'), tokenizer=str(opt_ml/'model'), device=-1)(texts)
        assert [r['label'] for r in got] == [r['label'] for r in want]
        assert all(abs(a['score'] - b['score']) < 1e-4 for a, b in zip(got, want))
        lines = log.read_text().splitlines()
        key = [l for l in lines if any(s in l for s in ('multi-model-server', 'Model model loaded', 'No inference script implementation',
                                                         'Inference API bind', 'Management API bind', 'Transform Fn'))]
        print(f"\nstand-in serve: /ping after {up:.1f}s, two predict calls {answer_s:.2f}s; key log lines:\n" + '\n'.join(key[:12]))
    finally:
        stop(proc)


def stop(proc):
    "SIGTERM to the serving process group (the toolkit forwards it to MMS), then SIGKILL whatever is left of it."
    try: os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError: return
    try: proc.wait(timeout=20)
    except subprocess.TimeoutExpired: pass
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try: os.killpg(proc.pid, 0)
        except ProcessLookupError: break
        time.sleep(0.5)
    else:
        try: os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError: pass
    if proc.poll() is None: proc.kill(); proc.wait(timeout=10)
