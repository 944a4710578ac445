"""bench_serve.py end to end on the bundled sample and a tiny BERT, in .venv: every setting, form and request size timed
through the handler's `predict_fn`, priced, and written only where `--out` and `--results` say; `--reuse` keeps the rows
not run again; `--device xla` without torch-xla stops in one line that names the Trn1 stand-in. (The page's numbers come
from the real data and MiniLM; here only the plumbing is checked. The XLA run is tests/test_xla_serving.py.)"""
import hashlib, json, os, subprocess, sys
from pathlib import Path

import pytest

from trn_tutorials.data.sources import sample_data

ROOT = Path(__file__).parent.parent
ENV = os.environ | {'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}
SETTINGS = ['fixed 128', 'chosen', '2 buckets', '4 buckets']


@pytest.fixture(scope='module')
def tiny(prepared, tmp_path_factory):
    "A scratch folder and the shared tiny BERT (read only: bench_serve writes its model folders under --out)."
    return tmp_path_factory.mktemp('serve'), str(prepared/'tiny-bert')


def bench(tmp: Path, model: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT/'benchmarks/bench_serve.py'), '--data', str(sample_data()), '--model', model,
                           '--out', str(tmp/'out'), '--results', str(tmp/'results.json'), '--requests', '3', '--warmup', '1',
                           '--batch_sizes', '1', '8', *args], env=ENV, capture_output=True, text=True, timeout=600, cwd=tmp)


def test_every_setting_form_and_size_is_timed_priced_and_written_where_asked(tiny):
    tmp, model = tiny
    repo = hashlib.sha256((ROOT/'benchmarks/results.json').read_bytes()).hexdigest()
    r = bench(tmp, model)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp/'results.json').read_text())['serving']['cpu']
    assert res == json.loads((tmp/'out/results.json').read_text())
    assert [(x['setting'], x['form'], x['batch_size']) for x in res['rows']] == \
        [(s, f, b) for s in SETTINGS for f in ('eager', 'torchscript') for b in (1, 8)]
    assert res['command'].startswith(f"{Path(sys.executable).absolute().relative_to(ROOT.absolute())} benchmarks/bench_serve.py --data ")
    assert res['settings']['fixed 128'] == [128] and len(res['settings']['4 buckets']) == 4
    assert res['settings']['chosen'] == res['settings']['2 buckets'][-1:] == res['settings']['4 buckets'][-1:]
    for x in res['rows']:
        assert x['requests'] == 3 and 0 < x['p50_ms'] <= x['p99_ms'] and x['texts_per_s'] > 0 and 'graphs_compiled' not in x
        want = 1.34 * 1e6 / x['texts_per_s'] / 3600   # the price is rounded to 4 places (half a unit: 5e-5), texts_per_s to its own
        assert abs(x['usd_per_million_texts']['trn1.2xlarge'] - want) <= 5e-5 + 1e-3 * want, (x['usd_per_million_texts'], want)
    assert hashlib.sha256((ROOT/'benchmarks/results.json').read_bytes()).hexdigest() == repo   # the repo's file untouched

    # --reuse: one setting again, the other settings' rows kept, in the settings' order
    before = {(x['setting'], x['form'], x['batch_size']): x for x in res['rows']}
    r = bench(tmp, model, '--settings', 'chosen', '--forms', 'eager', '--reuse')
    assert r.returncode == 0, r.stderr[-2000:]
    again = json.loads((tmp/'results.json').read_text())['serving']['cpu']
    assert again['earlier_commands'] == [res['command']] and again['command'].endswith('--reuse')
    rows = again['rows']
    assert [(x['setting'], x['form'], x['batch_size']) for x in rows] == list(before)
    assert all(x == before[k] for x in rows if (k := (x['setting'], x['form'], x['batch_size']))[:2] != ('chosen', 'eager'))


def test_xla_without_torch_xla_is_one_line_naming_the_stand_in(tiny):
    pytest.importorskip('transformers')
    try: import torch_xla  # noqa: F401
    except ImportError: pass
    else: pytest.skip('torch-xla is installed here: tests/test_xla_serving.py runs the XLA path')
    tmp, model = tiny
    r = bench(tmp, model, '--device', 'xla', '--forms', 'eager')
    assert r.returncode == 1 and r.stderr.strip().splitlines() == ['--device xla needs torch-xla: run this in the Trn1 stand-in (.venv-trn1/bin/python)']
