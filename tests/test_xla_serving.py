"""The handler on PyTorch/XLA's device, in the Trn1 stand-in (torch-xla for torch-neuronx): `predict_fn` answers there as on
the CPU (`batch_logits` runs under `no_grad`: XLA tensors refuse inference mode), and `bench_serve.py --device xla` counts
the graphs each request size compiles once warmed up: none where one padded length serves every request."""
import json, os, shutil, subprocess, sys
from pathlib import Path

import pytest

pytest.importorskip('torch_xla', reason="the XLA serving rehearsal runs in the Trn1 stand-in (.venv-trn1: STAGES=trn1 bash tools/test.sh)")

from trn_tutorials.data.sources import load_raw, sample_data

ROOT = Path(__file__).parent.parent


@pytest.fixture(scope='module')
def tiny(prepared, tmp_path_factory):
    "A copy of the shared tiny BERT with a `metrics.json` saying the lengths it pads to."
    tmp = tmp_path_factory.mktemp('xla-serve')
    path = str(shutil.copytree(prepared/'tiny-bert', tmp/'tiny-bert'))
    (Path(path)/'metrics.json').write_text(json.dumps({'max_length': 40, 'bucket_lengths': [16, 40]}))
    return tmp, path


def test_predict_fn_answers_on_the_xla_device_as_on_the_cpu(tiny):
    import torch_xla
    from trn_tutorials.serving.inference import model_fn, predict_fn
    texts = [t for t in load_raw(sample_data())['test']['text'][:40]]
    clf = model_fn(tiny[1])
    cpu = predict_fn(texts, clf)
    clf.device = torch_xla.device(); clf.model = clf.model.to(clf.device)
    xla = predict_fn(texts, clf)
    assert [a['label'] for a in xla] == [a['label'] for a in cpu]
    assert max(abs(a['score'] - b['score']) for a, b in zip(xla, cpu)) < 1e-3


def test_bench_serve_on_xla_compiles_nothing_once_one_length_is_warm(tiny):
    tmp, model = tiny
    r = subprocess.run([sys.executable, str(ROOT/'benchmarks/bench_serve.py'), '--data', str(sample_data()), '--model', model,
                        '--out', str(tmp/'out'), '--results', str(tmp/'results.json'), '--device', 'xla', '--forms', 'eager',
                        '--settings', 'chosen', '2 buckets', '--batch_sizes', '1', '8', '--requests', '4', '--warmup', '2'],
                       env=os.environ | {'OMP_NUM_THREADS': '1'}, capture_output=True, text=True, timeout=900, cwd=tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp/'results.json').read_text())['serving']['xla:0']
    assert res['versions']['torch_xla'] and res['device'] == 'xla:0'
    rows = {(x['setting'], x['batch_size']): x for x in res['rows']}
    assert set(rows) == {(s, b) for s in ('chosen', '2 buckets') for b in (1, 8)}
    assert all(isinstance(x['graphs_compiled'], int) and x['graphs_compiled'] >= 0 for x in rows.values())
    # one padded length: the warm-up compiled each request size's graphs, the timed requests none
    assert rows['chosen', 1]['graphs_compiled'] == rows['chosen', 8]['graphs_compiled'] == 0
    r = subprocess.run([sys.executable, str(ROOT/'benchmarks/bench_serve.py'), '--data', str(sample_data()), '--model', model,
                        '--results', str(tmp/'never.json'), '--device', 'xla', '--forms', 'torchscript'], capture_output=True, text=True, timeout=300, cwd=tmp)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == '--device xla serves the eager model: pass --forms eager'
    assert not (tmp/'never.json').exists()
