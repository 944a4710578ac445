"""`trn_tutorials.training.train`, the training script: real torchrun runs of a tiny BERT (the shared `prepared` fixture, no download)
with metrics.json checked, every worker saving, the checks before anything slow (folders, batch, model against data,
free space, a diverged or collapsed run, the lock), Neuron's rules (no Neuron worker without torchrun; too few steps for
the global batch), and one line for every stop. (Killed at random moments and resumed bit-exactly: tests/test_chaos.py.)"""
import json, math, os, re, shutil, signal, subprocess, sys
from pathlib import Path

import pytest
from fastcore.test import test_eq as eq, test_fail as fails

from careless import ctrl_c_default
from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.training.checkpoints import COMPLETE
from trn_tutorials.core.options import UsageError
from trn_tutorials.core.folders import lock_path
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.data.sources import load_raw, sample_data
from trn_tutorials.training.launch import launch_env, torchrun_command
from trn_tutorials.models import tiny_bert
from trn_tutorials.training.progress import PLOTS, PROGRESS_ENV, read_progress
from trn_tutorials.training.samplers import BucketBatchSampler
from trn_tutorials.training.train import ERROR_PREFIX, LOCK_ENV

TORCHRUN_VARS = ('TORCHELASTIC_RUN_ID', 'LOCAL_RANK', 'RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT',
                 'TORCHELASTIC_USE_AGENT_STORE', 'TORCHELASTIC_RESTART_COUNT')
ENV = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS} | {'HF_HUB_OFFLINE': '1'}
PY = [sys.executable, '-m', 'trn_tutorials.training.train']


def linked(prepared, tmp, *names) -> Path:
    """Links in `tmp` to the shared prepared folders `names` (default `data`, and `tiny-bert`); `tmp` itself. A run holds its
    data folder for reading with a lock file beside it: through the link it lands in `tmp`, not in the read-only fixture."""
    for n in names or ('data', 'tiny-bert'):
        if not (tmp/n).exists(): (tmp/n).symlink_to(prepared/n, target_is_directory=True)
    return tmp


@pytest.fixture
def work(prepared, tmp_path):
    "A scratch folder (the working directory of the script's runs) with links `data` and `tiny-bert` to the shared ones."
    return linked(prepared, tmp_path)


@pytest.fixture(scope='module')
def small_vocab(prepared, tmp_path_factory):
    "A tiny BERT whose vocabulary is 40 of the sample's words: another tokenizer than the one `prepared/data` was made with."
    words = [w for w in (prepared/'tiny-bert'/'vocab.txt').read_text().split() if not w.startswith('[')]
    return tiny_bert(tmp_path_factory.mktemp('small')/'small-vocab', words[:40], labels=EMOTION_LABELS)


def torchrun(args, n=2, **kw):
    return subprocess.run(torchrun_command(args, n), env=launch_env('cpu', n), capture_output=True, text=True, timeout=600, **kw)


def metrics(args): return json.loads(Path(args.output_dir, 'metrics.json').read_text())


def test_buckets_two_workers(prepared, tmp_path):
    "Two workers, three length buckets, two epochs: metrics.json complete; the batches, steps and input shapes are the sampler's; every row used."
    tmp = linked(prepared, tmp_path, 'data-3')
    args = TrainArguments(dataset_path=str(tmp/'data-3'), output_dir=str(tmp/'model'), num_train_epochs=2, learning_rate=1e-3,
                          per_device_train_batch_size=8, logging_steps=5)
    r = torchrun(args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = metrics(args)
    prepared = load_prepared(args.dataset_path)
    ds, manifest = prepared.splits, prepared.manifest
    assert (m['world_size'], m['backend'], m['final_split']) == (2, 'cpu', 'test')
    rows = [len(x) for x in ds['train']['input_ids']]
    workers = [BucketBatchSampler(rows, 8, 2, rank) for rank in range(2)]
    assert sorted(i for w in workers for b in w for i in b) == list(range(len(rows)))   # every row once an epoch
    steps = 2 * len(workers[0])
    assert m['train']['steps'] == steps
    shapes = {tuple(s) for s in m['train']['input_shapes']}
    assert shapes == workers[0].shapes() | workers[1].shapes(), (shapes, workers[0].shapes(), workers[1].shapes())
    assert all(n <= len(manifest['bucket_lengths']) + 1 for n in m['train']['shapes_per_worker'])
    assert {l for _, l in shapes} <= set(manifest['bucket_lengths']) and len(manifest['bucket_lengths']) == 3
    assert not list(Path(args.output_dir).glob('.shapes-*'))
    assert m['train']['samples_per_second'] > 0 and m['train']['runtime_s'] > 0
    assert set(m['test']['per_class']) == set(manifest['label_names']) and len(manifest['label_names']) == 6
    assert sum(c['support'] for c in m['test']['per_class'].values()) == manifest['rows']['test']
    assert 0 <= m['test']['f1'] <= 1 and 0 <= m['validation']['accuracy'] <= 1
    assert m['label_names'] == manifest['label_names'] and m['max_length'] == manifest['max_length']
    assert {'torch', 'transformers', 'python'} <= set(m['versions'])
    assert m['args']['bf16'] is False
    # losses are batch means, not scaled by the worker count (transformers 5 doubled them on 2 workers): about ln 6 at the start
    evals = [h for h in m['history'] if 'eval_loss' in h]
    assert len(evals) == 2 and abs(evals[0]['eval_loss'] - math.log(6)) < 0.3, evals
    assert [h['step'] for h in m['history'] if 'loss' in h] == list(range(5, steps + 1, 5))
    assert sum(map(sum, m['test']['confusion'])) == manifest['rows']['test']
    for name in PLOTS: assert (tmp/'model'/name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    # the saved model is complete: pipeline loads it and answers with label names
    from transformers import pipeline
    out = pipeline('text-classification', model=str(tmp/'model'))('i feel wonderful today')
    assert out[0]['label'] in manifest['label_names']


def test_every_worker_saves_the_model(prepared, tmp_path):
    "On XLA saving is a collective: every worker must call `save_model` (before, only the first did, and it waited forever)."
    (tmp_path/'sitecustomize.py').write_text(
        "import os\n"
        "if os.environ.get('SAVE_MARKS'):\n"
        "    import transformers\n"
        "    orig = transformers.Trainer.save_model\n"
        "    def save_model(self, output_dir=None, _internal_call=False):\n"
        "        if not _internal_call: open(os.path.join(os.environ['SAVE_MARKS'], 'rank' + os.environ.get('RANK', '0')), 'w').close()\n"
        "        return orig(self, output_dir, _internal_call)\n"
        "    transformers.Trainer.save_model = save_model\n")
    marks = tmp_path/'marks'; marks.mkdir()
    args = TrainArguments(dataset_path=str(linked(prepared, tmp_path, 'data')/'data'), output_dir=str(tmp_path/'model'), max_steps=2, save_steps=0)
    env = launch_env('cpu', 2) | {'SAVE_MARKS': str(marks), 'PYTHONPATH': str(tmp_path)}
    r = subprocess.run(torchrun_command(args, 2), env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in marks.iterdir()) == ['rank0', 'rank1']


def test_torchneuron_needs_transformers_5():
    "transformers 5 places the model on TorchNeuron's `neuron` device; 4.57 (the compat run) is refused in one line."
    import transformers
    from trn_tutorials.core.options import UsageError
    from trn_tutorials.training.arguments import TrainArguments
    from trn_tutorials.training.train import _check_runtime
    if int(transformers.__version__.split('.')[0]) >= 5: assert _check_runtime('torchneuron', 1, TrainArguments()) is None
    else:
        with pytest.raises(UsageError, match="transformers>=5"): _check_runtime('torchneuron', 1, TrainArguments())


def test_attention_per_backend_and_packing():
    "Eager attention on the XLA backends, and on TorchNeuron for packed rows (their 4-D float mask); transformers' default elsewhere."
    from trn_tutorials.training.train import attention_for
    eq({b: (attention_for(b, False), attention_for(b, True)) for b in ('neuron', 'xla', 'torchneuron', 'cuda', 'cpu')},
       {'neuron': ('eager', 'eager'), 'xla': ('eager', 'eager'), 'torchneuron': (None, 'eager'), 'cuda': (None, None), 'cpu': (None, None)})


def test_check_device_on_torchneuron():
    "The Trainer's device and world size, as the Trainer's arguments report them: `neuron` and every worker, or one line."
    from types import SimpleNamespace as NS
    from trn_tutorials.training.train import check_device
    seen = lambda device, world: NS(device=NS(type=device), world_size=world)
    eq(check_device(seen('neuron', 2), 'torchneuron', workers=2), None)
    fails(lambda: check_device(seen('cpu', 1), 'torchneuron', workers=1), contains="the Trainer's device is cpu, not `neuron`")
    fails(lambda: check_device(seen('neuron', 1), 'torchneuron', workers=2), contains="WORLD_SIZE 2 asks for 2 workers, but the Trainer's process group holds 1")
    with pytest.raises(UsageError) as e: check_device(seen('cpu', 1), 'torchneuron', workers=1)
    assert '\n' not in str(e.value) and 'neuron-ls' in str(e.value) and 'torchrun --nproc_per_node N -m trn_tutorials.training.train' in str(e.value)
    eq([check_device(seen('cpu', 1), b, workers=2) for b in ('neuron', 'xla', 'cuda', 'cpu')], [None] * 4)   # the other backends: not checked here


@pytest.fixture
def neuron_stub(tmp_path):
    "A folder holding an empty `torch_neuronx` package: enough for `check_backend('neuron')`, which only looks for it."
    d = tmp_path/'stub'; (d/'torch_neuronx').mkdir(parents=True); (d/'torch_neuronx'/'__init__.py').write_text('')
    return d


@pytest.fixture
def kernel(neuron_stub, tmp_path, monkeypatch):
    "This Python as a notebook kernel would be: not under torchrun, torch_neuronx findable, a scratch folder as cwd."
    monkeypatch.syspath_prepend(str(neuron_stub))
    for k in TORCHRUN_VARS + ('USE_TORCH_XLA', 'PJRT_DEVICE'): monkeypatch.delenv(k, raising=False)
    work = tmp_path/'work'; work.mkdir(); monkeypatch.chdir(work)
    return work


def test_train_in_a_kernel_refuses_neuron(kernel):
    from trn_tutorials.training.train import train
    before = dict(os.environ)
    for backend in ('neuron',):
        with pytest.raises(UsageError) as e: train(TrainArguments(backend=backend, dataset_path='data', output_dir='out'))
        msg = str(e.value)
        assert '\n' not in msg and 'torchrun --nproc_per_node 1 -m trn_tutorials.training.train' in msg and 'launch(' in msg, msg
        assert '4.44' in msg, msg
    assert list(kernel.iterdir()) == [] and dict(os.environ) == before   # nothing written, no variable set


def test_main_in_a_kernel_refuses_neuron(kernel, capsys):
    from trn_tutorials.training.train import main
    before = dict(os.environ)
    with pytest.raises(SystemExit) as e: main(['--backend', 'neuron', '--dataset_path', 'data', '--output_dir', 'out'])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith(ERROR_PREFIX), err
    assert 'torchrun --nproc_per_node 1 -m trn_tutorials.training.train' in err, err
    assert list(kernel.iterdir()) == [] and dict(os.environ) == before


def test_which_backends_need_torchrun(monkeypatch):
    from trn_tutorials.training.train import check_torchrun, relaunch_command
    for backend in ('cpu', 'cuda', 'xla'): assert check_torchrun(backend, env={}) is None
    for backend in ('neuron', 'torchneuron'):
        with pytest.raises(UsageError, match='torchrun --nproc_per_node 1'): check_torchrun(backend, env={})
        assert check_torchrun(backend, env={'TORCHELASTIC_RUN_ID': 'x', 'LOCAL_RANK': '0'}) is None
    cmd = relaunch_command(['--backend', 'neuron', '--epochs', '1'], port=29555)
    assert cmd == [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '1', '--master_addr', '127.0.0.1',
                   '--master_port', '29555', '-m', 'trn_tutorials.training.train', '--backend', 'neuron', '--epochs', '1']


def test_the_warning_reaches_metrics_and_summary(work):
    "One CPU worker with batches of 48: 8 steps, a global batch above 32. The note at the start, then metrics and the summary."
    out = work/'few-steps'
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.training.train', '--dataset_path', str(work/'data'), '--output_dir', str(out),
                        '--num_train_epochs', '1', '--per_device_train_batch_size', '48', '--save_steps', '0', '--learning_rate', '1e-3'],
                       env=ENV, capture_output=True, text=True, timeout=300, cwd=work)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((out/'metrics.json').read_text())
    few = [w for w in m['warnings'] if w.startswith('warning: 8 optimizer steps')]   # beside it, maybe: no better than the majority
    assert len(few) == 1 and all(w in few or 'majority' in w for w in m['warnings']), m['warnings']
    assert m['torchrun'] is False
    lines = r.stdout.splitlines()
    assert lines.count(few[0]) == 2, r.stdout   # at the start, and in the summary at the end
    assert lines[-1] == few[0] or few[0] in lines[-3:], lines[-5:]
    from trn_tutorials.training.progress import summary
    assert few[0] in summary(m).splitlines()
    assert few[0] not in summary(m | {'warnings': []})


# --------------------------------------------------------------------------------------------- the model against the data
def test_mismatch_refused_before_anything_is_written(work, small_vocab):
    tmp, b = work, small_vocab
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.training.train', '--dataset_path', str(tmp/'data'), '--output_dir', str(tmp/'out-b'),
                        '--model_id', b], capture_output=True, text=True, env=ENV, cwd=tmp, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().startswith(ERROR_PREFIX) and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp/'out-b').exists() and not lock_path(tmp/'out-b').exists() and not (tmp/'train.log').exists()


# ------------------------------------------------------------------------------------ a run that diverges
@pytest.mark.parametrize('where, opts', [('at a logged loss', ['--logging_steps', '5', '--save_steps', '0']),
                                         ('before sealing a checkpoint', ['--logging_steps', '500', '--save_steps', '15'])])
def test_a_nan_run_stops_and_saves_nothing(work, small_vocab, where, opts):
    "A learning rate of 1000 makes the tiny BERT's loss nan within 15 steps: one line, status 2, nothing saved or sealed."
    tmp = work
    out = tmp/f"nan-{opts[-1]}"
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.training.train', '--dataset_path', str(tmp/'data'), '--output_dir', str(out),
                        '--learning_rate', '1000', '--max_steps', '40', *opts], capture_output=True, text=True, env=ENV, cwd=tmp, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and 'Traceback' not in r.stderr, r.stderr[-3000:]
    want = 'the training loss became nan' if where == 'at a logged loss' else 'the weights became nan or inf at step 15'
    assert lines[0].startswith(ERROR_PREFIX + want) and '--learning_rate 1000 is likely too high; use a lower --learning_rate (e.g. 5e-05)' in lines[0], lines
    assert not (out/'metrics.json').exists() and not (out/'model.safetensors').exists()
    assert not list(out.glob('checkpoint-*/' + COMPLETE)) and not list(out.glob('checkpoint-*')), list(out.iterdir())


# -------------------------------------------------------------------------------------------------- the lock
HOLD = """import sys, time
from trn_tutorials.core.processes import die_with_parent; from trn_tutorials.core.folders import folder_lock
die_with_parent()
with folder_lock(sys.argv[1], 'output_dir'): print('held', flush=True); time.sleep(120)"""


def test_the_lock(work):
    "A busy output_dir is refused; the launcher's own lock (LOCK_ENV naming the folder) is not mistaken for another run."
    tmp = work
    out = tmp/'locked'
    holder = subprocess.Popen([sys.executable, '-c', HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == 'held'
        cmd = [sys.executable, '-m', 'trn_tutorials.training.train', '--dataset_path', str(tmp/'data'), '--output_dir', str(out), '--max_steps', '1', '--save_steps', '0']
        r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
        assert r.returncode == 2 and f'{out} is in use by pid {holder.pid}' in r.stderr and 'trn-tutorials stop --output_dir' in r.stderr, r.stderr
        r = subprocess.run(cmd, capture_output=True, text=True, env=ENV | {LOCK_ENV: os.path.abspath(out)}, timeout=300)
        assert r.returncode == 0 and (out/'metrics.json').exists(), r.stderr[-3000:]
    finally: holder.kill(); holder.wait()


def run(tmp, *opts, env=None):
    return subprocess.run([*PY, *opts], capture_output=True, text=True, env=ENV | (env or {}), cwd=tmp, timeout=600)


def one_line(r, code=2):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code and len(lines) == 1 and 'Traceback' not in r.stderr, r.stderr[-3000:]
    return lines[0]


def test_a_collapsed_run_says_so_on_stderr_and_in_metrics(work):
    "lr 5 for 5e-5: the tiny BERT predicts one class; stderr and metrics['warnings'] say lower the rate; begin shows the real epochs."
    tmp = work
    r = run(tmp, '--dataset_path', 'data', '--output_dir', 'lr5', '--learning_rate', '5', '--max_steps', '3', '--save_steps', '0',
            env={PROGRESS_ENV: '1'})
    w = one_line(r, 0)
    assert 'no better than always predicting' in w and '--learning_rate 5e-05' in w and 'raise' not in w, w
    m = json.loads((tmp/'lr5'/'metrics.json').read_text())
    assert w in m['warnings'] and 'mcc' in m['test'] and 'Matthews' in r.stdout
    begin = next(p for p in map(read_progress, r.stdout.splitlines()) if p and p['event'] == 'begin')
    assert begin['max_steps'] == 3 and 0 < begin['epochs'] < 1, begin   # 3 steps of 23 per epoch, not the 3 epochs configured
    assert not [p for p in (tmp/'lr5').iterdir() if '.tmp' in p.name]


def test_ctrl_c_is_one_line(work):
    tmp = work
    p = subprocess.Popen([*PY, '--dataset_path', 'data', '--output_dir', 'cc', '--max_steps', '100000', '--save_steps', '8'], cwd=tmp,
                         env=ENV | {PROGRESS_ENV: '1'}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_default)
    for line in p.stdout:
        if (e := read_progress(line)) and e['event'] == 'step' and e['step'] >= 9: break
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    # transformers' own note when two checkpoints land within the file system's mtime resolution (a tiny model, seconds apart)
    lines = [l for l in err.strip().splitlines() if not l.startswith('[transformers] mtime may not be reliable')]
    assert p.returncode == 130 and len(lines) == 1 and 'Traceback' not in err, err[-3000:]
    # the signal lands at step 9 or later (a loaded machine may reach the next save first): the newest complete checkpoint is named
    kept = re.search(r'interrupted: kept (\S+/checkpoint-(\d+))', lines[0])
    assert kept and int(kept[2]) >= 8 and int(kept[2]) % 8 == 0 and Path(kept[1]).is_dir(), lines
    assert f"--dataset_path {tmp/'data'}" in lines[0], lines


def test_resume_refuses_data_prepared_again_with_other_labels(work):
    "The checkpoint remembers its data's fingerprint: re-prepared with other labels, the run is refused, naming them; the fix runs."
    tmp, a = work, str(work/'tiny-bert')
    prepare(DataArguments(data=sample_data(), model_id=a, dataset_path=str(tmp/'d2')))
    opts = ['--dataset_path', 'd2', '--output_dir', 'r', '--max_steps', '4', '--save_steps', '2', '--logging_steps', '2']
    assert run(tmp, *opts).returncode == 0
    assert json.loads((tmp/'r'/'checkpoint-4'/'trn_tutorials_args.json').read_text())['data']['label_names'] == EMOTION_LABELS
    rec = json.loads((tmp/'r'/'trn_tutorials.json').read_text())
    assert rec['kind'] == 'model' and rec['options']['dataset_path'] == str(tmp/'d2') and rec['data']['fingerprint']['label_names'] == EMOTION_LABELS
    csv = tmp/'pos.csv'
    ws = sorted({w for t in load_raw(sample_data())['train']['text'] for w in t.split() if w.isalpha() and w.islower()})   # words the tiny BERT knows
    csv.write_text('text,label\n' + ''.join(f"{ws[i % len(ws)]} {ws[(7 * i) % len(ws)]},{'pos' if i % 2 else 'neg'}\n" for i in range(96)))
    prepare(DataArguments(data=str(csv), model_id=a, dataset_path=str(tmp/'d2')))
    line = one_line(run(tmp, *opts))
    assert 'was trained on other data than d2 holds now (labels were sadness, joy, love, anger, fear, surprise; now ' in line, line
    assert line.endswith(f"pass another --output_dir, e.g. --output_dir {tmp/'r-2'} to start over"), line
    assert run(tmp, *opts[:3], str(tmp/'r-2'), *opts[4:]).returncode == 0


@pytest.mark.parametrize('names', [['config.json'], ['metrics.json', 'notes.txt'], ['train.log']])
def test_output_dir_with_the_users_files_is_refused(work, names):
    tmp = work
    out = tmp/f"mine-{names[0]}"; out.mkdir()
    for n in names: (out/n).write_text('mine')
    line = one_line(run(tmp, '--dataset_path', 'data', '--output_dir', str(out), '--max_steps', '1', '--save_steps', '0'))
    assert 'holds files trn-tutorials did not write' in line and names[0] in line, line
    assert sorted(p.name for p in out.iterdir()) == sorted(names) and all((out/n).read_text() == 'mine' for n in names)


def test_the_torchrun_fix_is_a_complete_command(tmp_path, monkeypatch):
    "Outside torchrun on a NeuronCore: the command printed is the run's own, paths in full, not a sketch with '...'."
    from trn_tutorials.training.train import check_torchrun
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as e:
        check_torchrun('neuron', env={}, args=TrainArguments(dataset_path='d', learning_rate=3e-5, bf16=True, backend='neuron'))
    assert str(e.value).endswith(f"`torchrun --nproc_per_node 1 -m trn_tutorials.training.train --dataset_path {tmp_path/'d'} "   # both folders, in full
                                 f"--output_dir {tmp_path/'runs'/'emotion-model'} --learning_rate 3e-05 --bf16 true --backend neuron`"), e.value
    with pytest.raises(UsageError) as e: check_torchrun('neuron', env={}, args=['--output_dir=m', '--epochs', '2'])
    assert f"`torchrun --nproc_per_node 1 -m trn_tutorials.training.train --output_dir={tmp_path/'m'} --epochs 2`" in str(e.value)
