"Training through a real torchrun: a tiny BERT built here (no download), two workers, metrics.json checked."
import json, math, os, shutil, signal, subprocess, sys, time
from dataclasses import replace
from pathlib import Path

import pytest

from trn_tutorials.models import tiny_bert
from trn_tutorials.data_files import EMOTION_LABELS, load_raw, sample_data
from trn_tutorials.data import DataArguments, load_prepared, prepare
from trn_tutorials.launch import launch, torchrun_command, launch_env
from trn_tutorials.torchrun import process_tree
from trn_tutorials.core import UsageError
from trn_tutorials.progress import PLOTS
from trn_tutorials.samplers import BucketBatchSampler
from trn_tutorials.arguments import TrainArguments
from trn_tutorials.checkpoints import checkpoints


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
    "The bundled sample, prepared for a tiny BERT whose vocabulary is the sample's words."
    tmp = tmp_path_factory.mktemp('train')
    words = sorted({w for split in load_raw(sample_data()).values() for t in split['text'] for w in t.split()})
    model = tiny_bert(tmp/'tiny-bert', words, labels=EMOTION_LABELS)
    manifest = prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'data')))
    prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'data-3'), buckets=3))
    return tmp, manifest


def torchrun(args, n=2, **kw):
    return subprocess.run(torchrun_command(args, n), env=launch_env('cpu', n), capture_output=True, text=True, timeout=600, **kw)


def metrics(args): return json.loads(Path(args.output_dir, 'metrics.json').read_text())


def test_torchrun_two_workers(prepared):
    tmp, manifest = prepared
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'model'), num_train_epochs=2, learning_rate=1e-3,
                          per_device_train_batch_size=8, logging_steps=5)
    cmd = torchrun_command(args, 2)
    r = subprocess.run(cmd, env=launch_env('cpu', 2), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((tmp/'model'/'metrics.json').read_text())
    assert (m['world_size'], m['backend'], m['final_split']) == (2, 'cpu', 'test')
    # 360 rows over 2 workers x 8 per batch = 23 steps an epoch (the sampler pads the last one)
    assert m['train']['steps'] == 2 * 23
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
    assert [h['step'] for h in m['history'] if 'loss' in h] == list(range(5, 2 * 23 + 1, 5))
    assert sum(map(sum, m['test']['confusion'])) == manifest['rows']['test']
    for name in PLOTS: assert (tmp/'model'/name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    # the saved model is complete: pipeline loads it and answers with label names
    from transformers import pipeline
    out = pipeline('text-classification', model=str(tmp/'model'))('i feel wonderful today')
    assert out[0]['label'] in manifest['label_names']


def test_launch_returns_results(prepared, capsys):
    tmp, _ = prepared
    # `backend='cpu'` on purpose: with `auto`, a Trainium instance type on a machine without NeuronCores is refused
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'launched'), max_steps=3, logging_steps=1, backend='cpu')
    res = launch(args, nproc_per_node=1, instance_type='trn1.32xlarge')
    assert res.workers == 1 and res.metrics['train']['steps'] == 3
    out, err = capsys.readouterr()   # in a terminal: a tqdm bar on stderr; the workers' own lines only in train.log
    assert '3/3' in err and 'trn_tutorials.train: progress:' not in out + err and "{'loss'" not in out + err
    assert res.cost_usd == pytest.approx(21.50 * res.wall_s / 3600)
    assert (tmp/'launched'/'train.log').read_text().strip()


def test_bf16_false_means_false(prepared):
    tmp, _ = prepared
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '1', '-m', 'trn_tutorials.train',
           '--dataset_path', str(tmp/'data'), '--output_dir', str(tmp/'bf16'), '--max_steps', '1', '--bf16', 'false']
    r = subprocess.run(cmd, env=launch_env('cpu', 1), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp/'bf16'/'metrics.json').read_text())['args']['bf16'] is False


def test_buckets_two_workers(prepared):
    "Three length buckets on two workers: the batches, steps and input shapes are the sampler's, and every row is used."
    tmp, _ = prepared
    args = TrainArguments(dataset_path=str(tmp/'data-3'), output_dir=str(tmp/'buckets'), num_train_epochs=2, learning_rate=1e-3,
                          per_device_train_batch_size=8, logging_steps=50)
    r = torchrun(args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = metrics(args)
    ds, manifest = load_prepared(args.dataset_path)
    rows = [len(x) for x in ds['train']['input_ids']]
    workers = [BucketBatchSampler(rows, 8, 2, rank) for rank in range(2)]
    assert sorted(i for w in workers for b in w for i in b) == list(range(len(rows)))   # every row once an epoch
    assert m['train']['steps'] == 2 * len(workers[0]) and m['world_size'] == 2
    shapes = {tuple(s) for s in m['train']['input_shapes']}
    assert shapes == workers[0].shapes() | workers[1].shapes(), (shapes, workers[0].shapes(), workers[1].shapes())
    assert all(n <= len(manifest['bucket_lengths']) + 1 for n in m['train']['shapes_per_worker'])
    assert {l for _, l in shapes} <= set(manifest['bucket_lengths']) and len(manifest['bucket_lengths']) == 3
    assert not list(Path(args.output_dir).glob('.shapes-*'))


def test_resume_after_kill_9(prepared):
    "kill -9 of the whole torchrun process group mid-epoch, a half-written checkpoint, relaunch: same end as an uninterrupted run."
    tmp, _ = prepared
    base = TrainArguments(dataset_path=str(tmp/'data-3'), num_train_epochs=3, learning_rate=1e-3, per_device_train_batch_size=8,
                          logging_steps=1, save_steps=5, save_total_limit=2, seed=7)
    whole = replace(base, output_dir=str(tmp/'whole'))
    r = torchrun(whole)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    total, per_epoch = metrics(whole)['train']['steps'], metrics(whole)['train']['steps_per_epoch']
    assert len(checkpoints(whole.output_dir)) == 2   # save_total_limit

    cut = replace(base, output_dir=str(tmp/'cut'))
    log = open(tmp/'cut.log', 'w')
    p = subprocess.Popen(torchrun_command(cut, 2), env=launch_env('cpu', 2), stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    deadline, target = time.time() + 300, per_epoch + 5   # a checkpoint inside the second epoch
    while time.time() < deadline and p.poll() is None:
        done = [int(c.name.split('-')[1]) for c, ok in checkpoints(cut.output_dir) if ok]
        if done and max(done) >= target: break
        time.sleep(0.1)
    assert p.poll() is None, f"training ended before it could be killed: {(tmp/'cut.log').read_text()[-2000:]}"
    # like a host that dies: SIGKILL to torchrun's group and to every worker (torchrun starts each in its own session)
    tree = process_tree(p.pid)
    assert len(tree) >= 3, tree   # torchrun and two workers
    for pid in tree: os.kill(pid, signal.SIGKILL)
    p.wait(); log.close()
    time.sleep(0.5)
    assert not [pid for pid in tree if Path(f'/proc/{pid}').exists() and 'Z' not in Path(f'/proc/{pid}/stat').read_text().split()[2]]
    assert not Path(cut.output_dir, 'metrics.json').exists()
    newest = next(c for c, ok in checkpoints(cut.output_dir) if ok)
    step = int(newest.name.split('-')[1])
    assert per_epoch < step < total and step % per_epoch, (step, per_epoch)   # mid-epoch
    # a checkpoint the kill cut short while it was being written: state missing, optimizer truncated
    torn = Path(cut.output_dir, f'checkpoint-{step + 100}')
    shutil.copytree(newest, torn)
    (torn/'trainer_state.json').unlink()
    (torn/'optimizer.pt').write_bytes((torn/'optimizer.pt').read_bytes()[:100])

    r = torchrun(cut)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert f'warning: {torn.name} is incomplete (' in out and f'): resuming from {newest.name}' in out
    assert not torn.exists()   # removed before training went on
    m, w = metrics(cut), metrics(whole)
    assert m['train']['resumed_from'] == newest.name
    assert m['train']['steps'] == total
    # the same batches in the same order, the same random state: the same model as the uninterrupted run
    from safetensors.torch import load_file
    got, want = (load_file(Path(a.output_dir, 'model.safetensors')) for a in (cut, whole))
    assert max(float((got[k] - want[k]).abs().max()) for k in want) < 1e-6
    for split in ('validation', 'test'): assert m[split]['accuracy'] == w[split]['accuracy'], (split, m[split], w[split])
    # its checkpoints belong to this run: refused without resuming, and on another worker count, before torchrun starts
    with pytest.raises(UsageError, match='pass --resume true'): launch(replace(cut, resume=False), nproc_per_node=2, echo=False)
    with pytest.raises(UsageError, match='relaunch with that run'): launch(cut, nproc_per_node=1, echo=False)


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
    tmp, _ = prepared
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp_path/'model'), max_steps=2, save_steps=0)
    env = launch_env('cpu', 2) | {'SAVE_MARKS': str(marks), 'PYTHONPATH': str(tmp_path)}
    r = subprocess.run(torchrun_command(args, 2), env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in marks.iterdir()) == ['rank0', 'rank1']


def test_graph_extraction_skips_padding_across_workers(prepared, monkeypatch):
    "`neuron_parallel_compile`'s trial (NEURON_EXTRACT_GRAPHS_ONLY) feeds placeholders: accelerate's padding is patched out."
    tmp, manifest = prepared
    from transformers import AutoModelForSequenceClassification
    from trn_tutorials.trainer import trainer_class
    from trn_tutorials.arguments import training_arguments
    import torch
    model = AutoModelForSequenceClassification.from_pretrained(manifest['model_id'], num_labels=6, ignore_mismatched_sizes=True)
    targs = training_arguments(TrainArguments(output_dir=str(tmp/'extract')), 'cpu')
    t, ds = torch.ones(3, 2), load_prepared(str(tmp/'data'))[0]
    make = lambda: trainer_class()(model=model, args=targs, eval_dataset=ds['validation'])
    monkeypatch.setenv('NEURON_EXTRACT_GRAPHS_ONLY', '1')
    acc = make().accelerator
    assert 'pad_across_processes' in vars(acc) and acc.pad_across_processes(t, dim=1, pad_index=-100) is t
    monkeypatch.setenv('NEURON_EXTRACT_GRAPHS_ONLY', '0')
    assert 'pad_across_processes' not in vars(make().accelerator)   # accelerate's own, everywhere else


def test_launcher_hands_the_backend_to_the_workers(prepared):
    tmp, _ = prepared
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'handed'), max_steps=1)
    res = launch(args, nproc_per_node=1, echo=False)
    assert res.metrics['args']['backend'] == 'cpu'   # resolved once by the launcher, not 'auto' detected again per worker
    assert res.compiled_graphs is None and res.metrics['compiled_graphs'] is None


def test_neuron_environment_and_worker_counts():
    from trn_tutorials.backends import Accelerator
    from trn_tutorials.core import UsageError
    from trn_tutorials.launch import workers
    env = launch_env('neuron', 2, base={'NEURON_CC_FLAGS': '--retry_failed_compilation', 'PATH': '/usr/bin'}, python='/venv/bin/python')
    assert env['NEURON_CC_FLAGS'] == '--retry_failed_compilation --model-type transformer'
    assert env['PATH'].split(':')[0] == '/venv/bin' and env['USE_TORCH_XLA'] == '1'
    assert launch_env('cpu', 1, base={})['USE_TORCH_XLA'] == '0'
    trn1_32 = Accelerator('neuron', 32, '32 NeuronCore(s)')
    assert [workers(n, trn1_32) for n in (1, 2, 8, 32)] == [1, 2, 8, 32]
    for n in (3, 4, 16):
        with pytest.raises(UsageError, match='1, 2, 8, 32'): workers(n, trn1_32)
    assert workers(2, Accelerator('neuron', 2, '2 NeuronCore(s)')) == 2


def test_torchneuron_needs_transformers_5():
    "transformers 5 places the model on TorchNeuron's `neuron` device; 4.57 (the compat run) is refused in one line."
    import transformers
    from trn_tutorials.core import UsageError
    from trn_tutorials.arguments import TrainArguments
    from trn_tutorials.train import _check_runtime
    if int(transformers.__version__.split('.')[0]) >= 5: assert _check_runtime('torchneuron', 1, TrainArguments()) is None
    else:
        with pytest.raises(UsageError, match="transformers>=5"): _check_runtime('torchneuron', 1, TrainArguments())


def test_cpu_resume_overrides_a_pinned_private_hook():
    "`CpuResume` overrides `Trainer._load_optimizer_and_scheduler` (no public hook loads a checkpoint's optimizer state): "
    "its name, its one argument and its `map_location` must stay, on transformers 4.57 and 5."
    import inspect
    from transformers import Trainer
    from trn_tutorials.trainer import CpuResume
    assert [p for p in inspect.signature(Trainer._load_optimizer_and_scheduler).parameters] == ['self', 'checkpoint']
    assert 'map_location' in inspect.getsource(Trainer._load_optimizer_and_scheduler)
    assert '_load_optimizer_and_scheduler' in vars(CpuResume)


def test_model_columns_without_private_api(prepared):
    "With `remove_unused_columns=False`, `BucketBatches.model_columns` keeps what `forward` takes (and the labels), via `select_columns`."
    tmp, manifest = prepared
    from transformers import AutoModelForSequenceClassification
    from trn_tutorials.trainer import trainer_class
    from trn_tutorials.arguments import training_arguments
    model = AutoModelForSequenceClassification.from_pretrained(manifest['model_id'], num_labels=6, ignore_mismatched_sizes=True)
    targs = training_arguments(TrainArguments(output_dir=str(tmp/'columns')), 'cpu')
    assert targs.remove_unused_columns is False
    ds = load_prepared(str(tmp/'data'))[0]['validation']
    kept = trainer_class()(model=model, args=targs, eval_dataset=ds).model_columns(ds.add_column('note', ['x'] * len(ds))).column_names
    assert 'note' not in kept and 'labels' in kept and 'input_ids' in kept and set(kept) <= set(ds.column_names)


def test_old_checkpoints_go_only_once_a_newer_one_is_sealed(prepared):
    "The Trainer's own rotation deletes old checkpoints before the new one is sealed: a crash there left none sealed with "
    "`save_total_limit 1`. The guard prunes after the seal instead: whenever a checkpoint is written, the last sealed one is there."
    tmp, manifest = prepared
    from transformers import AutoModelForSequenceClassification, TrainerCallback
    from trn_tutorials.trainer import trainer_class
    from trn_tutorials.arguments import training_arguments
    seen = []
    class Watch(TrainerCallback):   # runs before the guard's on_save: the new checkpoint is written, not sealed yet
        def on_save(self, args, state, control, **kw): seen.append([(c.name, ok) for c, ok in checkpoints(args.output_dir)])
    from transformers.utils import is_torch_xla_available
    backend = 'xla' if is_torch_xla_available() else 'cpu'   # the Trn1 stand-in's tests run in-process on torch-xla's device
    model = AutoModelForSequenceClassification.from_pretrained(manifest['model_id'], num_labels=6, ignore_mismatched_sizes=True)
    targs = training_arguments(TrainArguments(output_dir=str(tmp/'pruned'), max_steps=6, save_steps=2, save_total_limit=1), backend)
    ds = load_prepared(str(tmp/'data'))[0]
    trainer = trainer_class()(model=model, args=targs, train_dataset=ds['train'], eval_dataset=ds['validation'], callbacks=[Watch()])
    trainer.train()
    assert seen == [[('checkpoint-2', False)], [('checkpoint-4', False), ('checkpoint-2', True)],
                    [('checkpoint-6', False), ('checkpoint-4', True)]], seen
    assert [(c.name, ok) for c, ok in checkpoints(targs.output_dir)] == [('checkpoint-6', True)]
