"""Packed rows on PyTorch/XLA (the Trn1 stand-in: torch-xla on the CPU): one shape, so the training step compiles
once and then never again, whatever texts fill the rows; the logits on the device are the CPU's; packed runs (single texts,
pairs, and `quickstart`'s default) feed one shape and score every row. (A packed run of single texts compiling nothing after
its first epoch and evaluation: test_xla_bench_graphs, whose `packed` setting is that run.)"""
import json

import numpy as np, pytest, torch

pytest.importorskip('torch_xla', reason="the XLA rehearsal runs in the Trn1 stand-in (.venv-trn1: STAGES=trn1 bash tools/test.sh)")

from transformers import AutoModelForSequenceClassification, AutoTokenizer

from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.data.sources import load_raw, sample_data
from trn_tutorials.models import tiny_bert
from trn_tutorials.data.packing import choose_packing, pack_lengths, pack_model, pack_texts
from trn_tutorials.training.trainer import xla_compiles
from test_train import linked


def test_packed_steps_compile_once(prepared):
    import torch_xla, torch_xla.core.xla_model as xm
    ds = load_raw(sample_data())
    path = str(prepared/'tiny-bert')
    tok = AutoTokenizer.from_pretrained(path)
    enc = tok(list(ds['train']['text']))['input_ids']
    labels = [EMOTION_LABELS.index(y) if isinstance(y, str) else y for y in ds['train']['label']]
    c = choose_packing([len(e) for e in enc], hidden_size=32)
    rows = pack_lengths([len(e) for e in enc], c['row_length'], c['max_texts'])
    cols = pack_texts(enc, labels, rows, c['row_length'], c['max_texts'], tok.pad_token_id)
    dev = torch_xla.device()
    model = pack_model(AutoModelForSequenceClassification.from_pretrained(path, attn_implementation='eager'))
    cpu_logits = model.eval()(**{k: torch.tensor(v[:8]) for k, v in cols.items()}).logits
    model.to(dev)
    with torch.no_grad(): xla_logits = model(**{k: torch.tensor(v[:8], device=dev) for k, v in cols.items()}).logits.cpu()
    assert xla_logits.shape == (8, c['max_texts'], len(EMOTION_LABELS))
    torch.testing.assert_close(xla_logits, cpu_logits, atol=1e-4, rtol=1e-4)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-4, device=dev))   # a tensor: no recompile as it changes
    per_step, losses = [], []
    for start in range(0, 8 * 8, 8):   # 8 steps of 8 rows, each with other texts
        before = xla_compiles()[0]
        batch = {k: torch.tensor(v[start:start + 8], device=dev) for k, v in cols.items()}
        opt.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        xm.optimizer_step(opt)
        losses.append(loss.detach())
        torch_xla.sync()
        per_step.append(xla_compiles()[0] - before)
    # the first step compiles (it also creates AdamW's state), the second may once more; then nothing
    assert per_step[2:] == [0] * 6, per_step
    assert all(np.isfinite(float(l)) for l in losses)
    assert 1 <= sum(per_step) <= 3, per_step   # the steps' graphs: a handful, not one per batch


def test_quickstart_packs_on_the_xla_rehearsal(prepared, tmp_path):
    "`trn-tutorials quickstart --backend xla`, as a user types it: packed rows by default, the batch of 16 texts trained as rows, one shape."
    import os, subprocess, sys
    from pathlib import Path
    from trn_tutorials.data.prepared import load_prepared
    from trn_tutorials.data.packing import rows_for_texts
    linked(prepared, tmp_path, 'tiny-bert')
    r = subprocess.run([str(Path(sys.executable).parent/'trn-tutorials'), 'quickstart', '--backend', 'xla', '--data', sample_data(),
                        '--model_id', 'tiny-bert', '--num_train_epochs', '1', '--learning_rate', '1e-3'],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900, env=dict(os.environ, HF_HUB_OFFLINE='1'))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rec = load_prepared(str(tmp_path/'runs'/'emotion-data')).manifest
    rows, L = rows_for_texts(16, rec), rec['packing']['row_length']
    assert 'layout: packed rows, the default on xla' in r.stdout and f'batch: 16 texts a step = {rows} packed rows' in r.stdout, r.stdout
    met = json.loads((tmp_path/'runs'/'emotion-model'/'metrics.json').read_text())
    assert met['backend'] == 'xla' and met['train']['input_shapes'] == [[rows, L]], met['train']
    assert (met['validation']['rows'], met['test']['rows'], met['train']['texts_per_row']) == (72, 72, round(360 / rec['packing']['rows']['train'], 3))


def test_packed_pairs_rehearsal_one_shape(tmp_path):
    "Packed pairs through torchrun on the XLA device (the Trn1 stand-in, .venv-trn1): one training shape; the second epoch and later evaluations compile nothing."
    pytest.importorskip('torch_xla', reason="the XLA rehearsal runs in the Trn1 stand-in (.venv-trn1)")
    import subprocess
    from conftest import FIRST, SECOND, pairs_csv
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from trn_tutorials.training.launch import launch_env, torchrun_command
    from trn_tutorials.training.arguments import TrainArguments
    words = sorted({w.lower() for t in FIRST + SECOND for w in t.split()} | {str(i) for i in range(96)})
    model = tiny_bert(tmp_path/'tiny', words, labels=['no', 'yes'])
    m = prepare(DataArguments(data=pairs_csv(tmp_path/'p.csv', n=96), model_id=model, dataset_path=str(tmp_path/'data'), text_column=['s1', 's2'],
                              pack=True, eval_fraction=0.25))
    args = TrainArguments(dataset_path=str(tmp_path/'data'), output_dir=str(tmp_path/'model'), num_train_epochs=2, learning_rate=1e-4,
                          per_device_train_batch_size=4, per_device_eval_batch_size=4, logging_steps=5, backend='xla')
    r = subprocess.run(torchrun_command(args, 1), env=launch_env('xla', 1), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    met = json.loads((tmp_path/'model'/'metrics.json').read_text())
    g, L = met['compiled_graphs'], m['packing']['row_length']
    print('packed pairs on XLA:', met['train']['input_shapes'], g)
    assert met['train']['input_shapes'] == [[4, L]] and g['per_epoch'][1] == 0 and all(n == 0 for n in g['per_evaluation'][1:]), g
    assert met['validation']['rows'] == 24
