"""The endpoint's archive served as SageMaker's `pytorch-inference:2.6.0-cpu-py312` image serves it, in a stand-in venv holding
that image's versions (Python 3.12, torch 2.6.0, TorchServe 0.12.0, sagemaker-pytorch-inference 2.0.25; tools/environments.toml).

Host side (this process, the main .venv): a model folder traced here with this venv's torch (2.13), `package()`d as for
ml.m5.large, unpacked as SageMaker unpacks it into /opt/ml/model. Container side (`$TRN_TUTORIALS_CONTAINER/bin/python`):
what the image's `dockerd-entrypoint.py serve` runs — `sagemaker_pytorch_serving_container.serving.main()`, which writes
TorchServe's configuration, installs `code/requirements.txt` with a plain `pip install -r` into the container's Python, and
starts TorchServe (Java) with the toolkit's handler service. Changed from the image, and only this: /opt/ml is a temporary
folder (the toolkit's own `SAGEMAKER_BASE_DIR`), the port a free one (`SAGEMAKER_BIND_TO_PORT`), the configuration file
outside /etc and its addresses 127.0.0.1 instead of 0.0.0.0 (the toolkit has no setting for either: its module constant and
generated text are replaced in the launcher below). Then `/ping`, and `/invocations` with the request `endpoint.predict`
sends; the answer must be the handler's answer here. Then `verify` scores the bundled sample's test split through it beside
the eager model and the trace: no answer may flip. The server is always stopped, and no process is left.

The stage `STAGES=sm-pytorch-inference bash tools/test.sh` hands this test a fresh copy of the stand-in (the pip install
goes into that copy, never into the base).
"""
import json, os, shutil, signal, socket, subprocess, sys, tarfile, time, urllib.error, urllib.request
from pathlib import Path

import pytest

from trn_tutorials.models import tiny_bert
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.data.sources import load_raw, sample_data
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.serving.verify import verify
from trn_tutorials.sagemaker.model_package import IMAGE_TORCH, REQUIREMENTS, package
from trn_tutorials.sagemaker.endpoint import endpoint_requests
from trn_tutorials.serving.torchscript import trace
from trn_tutorials.serving.inference import JSON, model_fn, output_fn, predict_fn
from local_services import procs_mentioning

TEXTS = ['i feel happy today', 'so very scared', 'i feel sad and angry']
SCORE_TOL = 1.0001e-4
LAUNCHER = '''
import sys
from sagemaker_pytorch_serving_container import serving, torchserve
torchserve.TS_CONFIG_FILE = sys.argv[1]   # the image writes /etc/sagemaker-ts.properties
generated = torchserve._generate_ts_config_properties
torchserve._generate_ts_config_properties = lambda handler: generated(handler).replace('0.0.0.0', '127.0.0.1')   # loopback only
serving.main()
'''


def container() -> Path:
    c = os.environ.get('TRN_TUTORIALS_CONTAINER')
    if not c:
        pytest.fail('this test drives the pytorch-inference stand-in venv: STAGES=sm-pytorch-inference bash tools/test.sh runs it', pytrace=False)
    return Path(c)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


def stop(proc, work:Path):
    "TorchServe's Java process and its Python workers: the whole session, TERM then KILL."
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try: os.killpg(proc.pid, sig)
        except ProcessLookupError: pass
        deadline = time.monotonic() + wait
        while procs_mentioning(str(work)) and time.monotonic() < deadline: time.sleep(0.3)
        if not procs_mentioning(str(work)): break
    try: proc.wait(10)
    except subprocess.TimeoutExpired: pass


def test_archive_served_by_the_images_torchserve(tmp_path):
    py = container()/'bin'/'python'
    t0 = time.monotonic()
    versions = subprocess.run([str(py), '-c', 'import sys, torch, importlib.metadata as m; print(sys.version.split()[0], torch.__version__, '
                               'm.version("torchserve"), m.version("sagemaker-pytorch-inference"))'], capture_output=True, text=True, timeout=120)
    assert versions.returncode == 0, versions.stderr[-2000:]
    pyv, torchv, tsv, tkv = versions.stdout.split()
    assert (pyv.rsplit('.', 1)[0], '.'.join(torchv.split('.')[:2]), tsv, tkv) == ('3.12', IMAGE_TORCH['cpu'], '0.12.0', '2.0.25'), versions.stdout
    if not shutil.which('java'): pytest.fail('TorchServe needs a Java runtime (Debian: default-jre-headless)', pytrace=False)

    # host side: a folder as train leaves it, traced here (this venv's torch), packaged for ml.m5.large, unpacked as /opt/ml/model
    words = sorted({w for split in load_raw(sample_data()).values() for t in split['text'] for w in t.split()})   # verify's texts decode whole
    folder = Path(tiny_bert(tmp_path/'model', words, labels=EMOTION_LABELS))
    (folder/'metrics.json').write_text(json.dumps({'max_length': 16, 'bucket_lengths': [8, 16], 'label_names': EMOTION_LABELS}))
    want = json.loads(output_fn(predict_fn(TEXTS, model_fn(str(folder))), JSON)[0])   # the eager model's answer, here
    info = trace(str(folder))
    work = tmp_path/'container'
    model_dir = work/'opt'/'ml'/'model'
    with tarfile.open(package(str(folder), str(tmp_path/'model.tar.gz'), 'ml.m5.large')) as t:
        names = set(t.getnames()); t.extractall(model_dir, filter='data')
    assert 'model.pt' in names and 'model.safetensors' not in names   # the trace made with torch 2.13, the weights once
    assert (model_dir/'code'/'requirements.txt').read_text() == REQUIREMENTS['cpu']

    # container side: dockerd-entrypoint.py serve
    port, logs = free_port(), work/'logs'
    for d in (work/'tmp', logs): d.mkdir(parents=True)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(('PYTHON', 'VIRTUAL_ENV', 'TRN_TUTORIALS'))},
           'PATH': f"{py.parent}:{os.environ['PATH']}", 'SAGEMAKER_BASE_DIR': str(work/'opt'/'ml'), 'SAGEMAKER_BIND_TO_PORT': str(port),
           'SAGEMAKER_PROGRAM': 'inference.py', 'SAGEMAKER_SUBMIT_DIRECTORY': str(model_dir/'code'),   # what deploy's CreateModel sets
           'SAGEMAKER_CONTAINER_LOG_LEVEL': '20', 'SAGEMAKER_REGION': 'us-east-1',
           'TMPDIR': str(work/'tmp'), 'TEMP': str(work/'tmp'), 'LOG_LOCATION': str(logs), 'METRICS_LOCATION': str(logs),
           'PIP_DISABLE_PIP_VERSION_CHECK': '1'}
    out = open(work/'serve.out', 'wb')
    proc = subprocess.Popen([str(py), '-c', LAUNCHER, str(work/'sagemaker-ts.properties')], cwd=work, env=env, stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f'http://127.0.0.1:{port}'
    try:
        deadline = time.monotonic() + 420   # pip install of transformers, Java start, the worker's model_fn
        answer = None
        while answer is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the container's serve did not answer: {(work/'serve.out').read_text(errors='replace')[-4000:]}"
                            f"{(logs/'model_log.log').read_text(errors='replace')[-3000:] if (logs/'model_log.log').exists() else ''}", pytrace=False)
            try:
                with urllib.request.urlopen(url + '/ping', timeout=3) as r: r.read()
                req = urllib.request.Request(url + '/invocations', data=json.dumps({'inputs': TEXTS}).encode(), method='POST',
                                             headers={'Content-Type': JSON, 'Accept': JSON})   # what endpoint.predict sends
                with urllib.request.urlopen(req, timeout=120) as r: answer = (r.status, r.headers.get('Content-Type'), json.loads(r.read()))
            except urllib.error.HTTPError as e:
                if e.code not in (404, 503): pytest.fail(f'/invocations answered {e.code}: {e.read()[:2000]!r}', pytrace=False)
                time.sleep(1)   # the model is still loading
            except OSError: time.sleep(1)
        status, ctype, got = answer
        assert status == 200 and ctype.startswith(JSON)
        assert [g['label'] for g in got] == [w['label'] for w in want]
        assert max(abs(g['score'] - w['score']) for g, w in zip(got, want)) <= SCORE_TOL
        # `verify` through TorchServe: the bundled sample's test split, the served answers beside the eager model and the trace here
        prepare(DataArguments(data=sample_data(), model_id=str(folder), dataset_path=str(tmp_path/'data'), buckets=2))
        v = verify(str(folder), str(tmp_path/'data'), endpoint=url + '/invocations', record=False)
        served = v.forms['endpoint']
        assert served['status'] == 'ran' and served['flips'] == 0 and served['f1'] == v.forms['eager']['f1'] and not v.failing(), v.table()
        assert served['max_score_diff'] <= SCORE_TOL and served['texts_as_trained'] == v.rows == 72, served
        print(v.table())
        bad = urllib.request.Request(url + '/invocations', data=b'{"inputs": [', method='POST', headers={'Content-Type': JSON, 'Accept': JSON})
        with pytest.raises(urllib.error.HTTPError) as e: urllib.request.urlopen(bad, timeout=60)
        assert e.value.code == 400 and e.value.reason.startswith('malformed JSON')
    finally:
        stop(proc, work)
        out.close()
        keep = os.environ.get('TRN_TUTORIALS_LOG_DIR')
        if keep:
            for f in [work/'serve.out', *logs.glob('*.log')]:
                if f.exists(): shutil.copy(f, Path(keep)/f'pytorch-inference-{f.name}')
    log = (work/'serve.out').read_text(errors='replace') + ''.join(f.read_text(errors='replace') for f in logs.glob('*.log'))
    freeze = subprocess.run([str(py), '-m', 'pip', 'freeze'], capture_output=True, text=True, timeout=120).stdout
    assert 'transformers==5.5.3' in freeze.splitlines() and f"torch=={torchv.split('+')[0]}" in freeze.splitlines()   # installed; torch untouched
    assert f'inference.py: serving TorchScript model.pt (torch.jit, torch {info["torch"]}) on cpu with torch 2.6.0' in log
    assert not procs_mentioning(str(work)), f'processes left: {procs_mentioning(str(work))}'
    print(f'{time.monotonic() - t0:.0f} s: Python {pyv}, torch {torchv}, TorchServe {tsv}, toolkit {tkv}; trace from torch {info["torch"]}')


def test_neuron_workers_reach_torchserve(tmp_path):
    """The model environment deploy gives ml.inf2.xlarge sets TorchServe's workers through the image's own toolkit: 2, one per
    NeuronCore. Without SAGEMAKER_MODEL_SERVER_WORKERS the toolkit writes no worker count and TorchServe starts one per vCPU."""
    py = container()/'bin'/'python'
    env = endpoint_requests('n', 's3://b/model.tar.gz', 'arn:aws:iam::123456789012:role/r', 'ml.inf2.xlarge')['create_model']['PrimaryContainer']['Environment']
    code = 'from sagemaker_pytorch_serving_container import torchserve; print(torchserve._generate_ts_config_properties("h"))'
    def properties(model_env:dict) -> list[str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(('PYTHON', 'VIRTUAL_ENV', 'TRN_TUTORIALS', 'SAGEMAKER', 'NEURON'))}
        r = subprocess.run([str(py), '-W', 'ignore', '-c', code], capture_output=True, text=True, timeout=120,
                           env={**base, **model_env, 'SAGEMAKER_BASE_DIR': str(tmp_path/'opt'/'ml')})
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout.splitlines()
    assert (env['SAGEMAKER_MODEL_SERVER_WORKERS'], env['NEURON_RT_NUM_CORES']) == ('2', '1')
    assert 'default_workers_per_model=2' in properties(env)
    assert not [l for l in properties({k: v for k, v in env.items() if k != 'SAGEMAKER_MODEL_SERVER_WORKERS'}) if 'workers' in l]
