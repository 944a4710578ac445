"""Issue 24 item 2: the training script speaks Hugging Face's names. `TrainArguments` is transformers' `TrainingArguments` with the
tutorial's defaults; every flag a Hugging Face user knows parses, travels through `launch` (argv) and the SageMaker job
(hyperparameters), and trains; `--epochs`/`--lr` still work with a note; flags a backend cannot run are refused in one line."""
import json, subprocess, sys
from pathlib import Path

import pytest
from transformers import TrainingArguments

from trn_tutorials.core import UsageError, parse_args
from trn_tutorials.models import tiny_bert
from trn_tutorials.data_files import EMOTION_LABELS, load_raw, sample_data
from trn_tutorials.data import DataArguments, prepare
from trn_tutorials.launch import launch_env, torchrun_command
from trn_tutorials.arguments import TrainArguments
from trn_tutorials.samplers import planned_steps
from trn_tutorials.arguments import alias_notes, changed_options, check_flags, needs_use_cpu, option_argv, training_arguments

HF_FLAGS = ['--num_train_epochs', '2', '--gradient_accumulation_steps', '2', '--lr_scheduler_type', 'cosine', '--report_to', 'none',
            '--eval_strategy', 'steps', '--eval_steps', '7', '--max_grad_norm', '0.5', '--adam_beta2', '0.98', '--label_smoothing_factor', '0.1',
            '--dataloader_num_workers', '0', '--save_strategy', 'steps', '--save_steps', '9', '--warmup_steps', '3']


def test_every_hf_flag_parses():
    a, = parse_args([TrainArguments], ['--dataset_path', 'd', *HF_FLAGS])
    assert (a.num_train_epochs, a.gradient_accumulation_steps, a.lr_scheduler_type.value, a.eval_strategy.value, a.eval_steps) == \
           (2.0, 2, 'cosine', 'steps', 7)
    assert (a.max_grad_norm, a.adam_beta2, a.label_smoothing_factor, a.save_steps) == (0.5, 0.98, 0.1, 9)
    # the tutorial's defaults where a flag is not given
    b, = parse_args([TrainArguments], [])
    assert (b.output_dir, b.per_device_train_batch_size, b.per_device_eval_batch_size, b.eval_strategy.value, b.report_to) == \
           ('runs/emotion-model', 16, 64, 'epoch', [])
    assert b.optim == TrainingArguments('x').optim   # transformers' own default optimizer (fused AdamW with torch >= 2.8)


def test_fused_adamw_only_where_its_kernel_runs():
    "transformers' default fused AdamW stays on the CPU and CUDA (10% faster a step here); the Neuron backends run it unfused."
    fused = TrainArguments(optim='adamw_torch_fused')
    for backend in ('neuron', 'xla', 'torchneuron'): assert training_arguments(fused, backend).optim.value == 'adamw_torch', backend
    for backend in ('cpu', 'cuda'): assert training_arguments(fused, backend).optim.value == 'adamw_torch_fused', backend
    assert training_arguments(TrainArguments(optim='adamw_torch'), 'cpu').optim.value == 'adamw_torch'   # the user's choice stays


def test_the_original_names_still_work_with_a_note():
    a, = parse_args([TrainArguments], ['--epochs', '4', '--lr', '3e-5'])
    assert (a.num_train_epochs, a.learning_rate) == (4.0, 3e-5)
    assert alias_notes(['--epochs', '4', '--lr=3e-5', '--epochs', '5']) == [
        "note: --epochs is transformers' --num_train_epochs; both work", "note: --lr is transformers' --learning_rate; both work"]
    assert alias_notes(['--num_train_epochs', '4']) == []
    from trn_tutorials.xla_loop import LoopArguments   # the plain loop takes the same names and aliases
    loop, = parse_args([LoopArguments], ['--epochs', '2', '--lr', '1e-3'])
    assert (loop.num_train_epochs, loop.learning_rate) == (2.0, 1e-3)


def test_a_run_passed_on_is_the_same_run():
    "`launch` (argv) and the SageMaker job (hyperparameters) carry every option set: parsed back, the same arguments."
    a, = parse_args([TrainArguments], ['--dataset_path', 'd', '--output_dir', 'o', '--bf16', 'true', *HF_FLAGS])
    argv = option_argv(a)
    assert argv[:4] == ['--dataset_path', 'd', '--output_dir', 'o'] and '--use_cpu' not in argv
    b, = parse_args([TrainArguments], argv)
    assert changed_options(b) == changed_options(a)
    assert option_argv(TrainArguments()) == ['--dataset_path', 'runs/emotion-data', '--output_dir', 'runs/emotion-model']
    late = TrainArguments(); late.hub_token = 'hf_secret'   # refused when the arguments are made (tests/test_secrets.py); set later,
    assert 'hub_token' not in changed_options(late)          # it is still not passed on: tokens stay in the environment
    with pytest.raises(UsageError, match='reports to one service'): option_argv(TrainArguments(report_to=['tensorboard', 'wandb']))


def test_flags_a_backend_cannot_run_are_refused():
    for kw, want in [({'optim': 'adamw_bnb_8bit'}, '--optim adamw_bnb_8bit runs kernels that'), ({'torch_compile': True}, 'drop --torch_compile')]:
        with pytest.raises(UsageError, match=want): check_flags(TrainArguments(**kw), 'neuron')
        check_flags(TrainArguments(**kw), 'cpu')   # where it can run, it is the user's choice
    with pytest.raises(UsageError, match='buckets choose the training batches'):
        check_flags(TrainArguments(**({'group_by_length': True} if hasattr(TrainArguments(), 'group_by_length') else
                                      {'train_sampling_strategy': 'group_by_length'})), 'cpu')
    ta = training_arguments(TrainArguments(), 'xla')
    assert ta.dataloader_drop_last and not ta.eval_do_concat_batches and not ta.use_cpu


def test_use_cpu_only_where_the_cpu_run_needs_it(monkeypatch):
    "One fp32 worker on a CPU-only machine runs without `use_cpu` (no DDP wrap); two workers, bf16 or an accelerator need it."
    import torch
    monkeypatch.setattr(torch.accelerator, 'is_available', lambda: False)
    monkeypatch.delenv('WORLD_SIZE', raising=False)
    fp32, bf16 = TrainArguments(), TrainArguments(bf16=True)
    assert not training_arguments(fp32, 'cpu').use_cpu and not training_arguments(fp32, 'cpu', world_size=1).use_cpu
    assert training_arguments(fp32, 'cpu', world_size=2).use_cpu and training_arguments(bf16, 'cpu').use_cpu
    monkeypatch.setenv('WORLD_SIZE', '2'); assert needs_use_cpu(fp32)   # torchrun's count, by default
    monkeypatch.setenv('WORLD_SIZE', '1'); assert not needs_use_cpu(fp32)
    assert not TrainArguments(backend='cpu').use_cpu   # the backend alone no longer sets it: training_arguments decides
    monkeypatch.setattr(torch.accelerator, 'is_available', lambda: True)   # a GPU (or MPS, XPU...) here: stay on the CPU
    assert training_arguments(fp32, 'cpu').use_cpu and not training_arguments(fp32, 'cuda').use_cpu


def test_transformers_own_checks_are_one_line():
    with pytest.raises(UsageError) as e: TrainArguments(eval_strategy='often')
    assert '\n' not in str(e.value) and 'often' in str(e.value)
    r = subprocess.run([str(Path(sys.executable).parent/'trn-tutorials'), 'train', '--eval_strategy', 'often'], capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_planned_steps_count_gradient_accumulation():
    "As the Trainer counts them: ceil(batches / accumulation) steps an epoch."
    rows = [16] * 400   # 25 batches of 16
    assert planned_steps(TrainArguments(num_train_epochs=2, gradient_accumulation_steps=4), rows, 1) == 2 * 7
    assert planned_steps(TrainArguments(num_train_epochs=2, gradient_accumulation_steps=5), rows, 1) == 2 * 5


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('args')
    words = sorted({w for split in load_raw(sample_data()).values() for t in split['text'] for w in t.split()})
    model = tiny_bert(tmp/'tiny-bert', words, labels=EMOTION_LABELS)
    prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'data')))
    return tmp


def test_hf_flags_train_through_torchrun(prepared):
    "Gradient accumulation, a cosine schedule, evaluation every N steps: a real run on two CPU workers does what the flags say."
    a, = parse_args([TrainArguments], ['--dataset_path', str(prepared/'data'), '--output_dir', str(prepared/'model'), '--backend', 'cpu',
                                       '--num_train_epochs', '2', '--per_device_train_batch_size', '8', '--gradient_accumulation_steps', '2',
                                       '--lr_scheduler_type', 'cosine', '--eval_strategy', 'steps', '--eval_steps', '6', '--logging_steps', '3',
                                       '--learning_rate', '1e-3', '--save_steps', '0'])
    r = subprocess.run(torchrun_command(a, 2), env=launch_env('cpu', 2), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads(Path(a.output_dir, 'metrics.json').read_text())
    assert m['train']['steps'] == 2 * 12   # 23 batches of 2 x 8 an epoch, 2 accumulated a step: 12 steps an epoch
    assert (m['args']['gradient_accumulation_steps'], m['args']['lr_scheduler_type'], m['args']['eval_strategy']) == (2, 'cosine', 'steps')
    assert [h['step'] for h in m['history'] if 'eval_loss' in h] == [6, 12, 18, 24]
    lrs = [h['learning_rate'] for h in m['history'] if 'learning_rate' in h]
    assert lrs[-1] < 0.1 * max(lrs)   # cosine: near zero at the end


def test_the_job_hyperparameters_carry_hf_flags(prepared):
    from trn_tutorials.training_job import job_hyperparameters
    hp = job_hyperparameters(TrainArguments(dataset_path=str(prepared/'data'), gradient_accumulation_steps=4, lr_scheduler_type='cosine', bf16=True))
    assert (hp['gradient_accumulation_steps'], hp['lr_scheduler_type'], hp['bf16']) == (4, 'cosine', True)
    assert 'use_cpu' not in hp and hp['dataset_path'] == '/opt/ml/input/data/train'


def test_the_xla_loop_refuses_what_it_does_not_implement(prepared):
    env = dict(launch_env('cpu', 1), PYTHONPATH=str(Path(__file__).parents[1]))
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.xla_loop', '--dataset_path', str(prepared/'data'), '--backend', 'cpu',
                        '--gradient_accumulation_steps', '2'], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "trn_tutorials.xla_loop: error: --gradient_accumulation_steps is a TrainingArguments flag the plain loop does not implement (it keeps "
        "the loop short): train with `python -m trn_tutorials.train`, the Trainer, which takes every one"], r.stderr


def test_the_entry_points_leave_transformers_unloaded():
    "transformers reads USE_TORCH_XLA once, when first imported: what torchrun and the SageMaker job load before `main` must not import it."
    code = ("import sys, trn_tutorials.train, trn_tutorials.launch, trn_tutorials.precompile, trn_tutorials.training_job, trn_tutorials.xla_loop; "
            "print('transformers' in sys.modules)")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == 'False', r.stdout + r.stderr
