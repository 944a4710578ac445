"""bench_graphs end to end in the Trn1 stand-in (torch-xla on the CPU): one length and packed rows of the bundled sample,
each trained for two epochs by the tutorial's script under torchrun with a tiny BERT; the graphs torch-xla compiled, read
from its debug report, and written only where `--results` and `--out` say. (The page's numbers come from the real data.)"""
import hashlib, json, subprocess, sys
from pathlib import Path

import pytest

pytest.importorskip('torch_xla', reason="the XLA rehearsal runs in the Trn1 stand-in (.venv-trn1: STAGES=trn1 bash tools/test.sh)")

from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.sources import sample_data
from trn_tutorials.data.packing import rows_for_texts, texts_per_row

ROOT = Path(__file__).parent.parent


def digest(p: Path) -> str: return hashlib.sha256(p.read_bytes()).hexdigest()


def test_bench_graphs_counts_the_graphs_of_one_length_and_of_packed_rows(tmp_path):
    before, results, out = digest(ROOT/'benchmarks'/'results.json'), tmp_path/'results.json', tmp_path/'out'
    results.write_text(json.dumps({'kept': 1}))
    # 16 texts a step: 23 steps an epoch (25 of packed rows), and a log every 10 steps, so the first log (whose gather
    # compiles small graphs) falls in the first epoch, and the second epoch's logs find their graphs compiled
    cmd = [sys.executable, str(ROOT/'benchmarks'/'bench_graphs.py'), '--data', str(sample_data()), '--model', 'tiny',
           '--buckets', '1', '--no_decay_buckets', '--packed', '--batch_size', '16', '--eval_batch_size', '8', '--logging_steps', '10',
           '--out', str(out), '--results', str(results), '--python', sys.executable]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1500)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    full = json.loads(results.read_text())
    assert full['kept'] == 1 and digest(ROOT/'benchmarks'/'results.json') == before   # other keys kept; the repo's file untouched
    g = full['graphs']
    assert list(g['settings']) == ['1 bucket', 'packed'] and g['workers'] == 1
    one, packed = g['settings']['1 bucket'], g['settings']['packed']
    for s in (one, packed):   # one shape in training and one in evaluation (XLA fills the epoch's last batch)
        assert len(s['input_shapes']) == 1 and len(s['eval_shapes']) == 1, s
        c = s['compiled_graphs']
        assert c['per_epoch'][1] == 0 and not any(c['per_evaluation'][1:]), c   # the second epoch and later evaluations: nothing new
        assert 1 <= s['model_graphs']['train'] <= c['train'] and s['model_graphs']['eval'] >= 1, s
    assert packed['model_graphs']['train'] <= one['model_graphs']['train']   # packing compiles no more model graphs than one length
    # packed rows hold about --batch_size texts a step, by the rule the train script's metrics use (texts a row unrounded)
    m = load_prepared(str(out/'data'/'packed')).manifest
    assert packed['texts_per_row'] == texts_per_row(m) > 1 and packed['batch_rows'] == rows_for_texts(16, m)
    assert packed['input_shapes'] == [[packed['batch_rows'], m['packing']['row_length']]]
    assert str(out) not in json.dumps(g) and '<out>' in g['command'] and '<out>' in packed['command']   # no scratch paths kept
