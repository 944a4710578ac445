"""`trn_tutorials.training.arguments`: the training script speaks Hugging Face's names. `TrainArguments` is transformers'
`TrainingArguments` with the tutorial's defaults; every flag a Hugging Face user knows parses, travels through `launch` (argv)
and the SageMaker job (hyperparameters), and trains; `--epochs`/`--lr` still work with a note; flags a backend cannot run are
refused in one line. And, by class, an accepted option is honoured or refused: every field of the installed transformers'
`TrainingArguments` is placed once (read by the Trainer, by our replacements, done anyway, or refused); each refused field is
refused in one line through the CLI's own parser; each field our replacements read changes what they do. Runs under
transformers 5 (.venv); fields of only the 4.57 line are covered where that line is installed."""
import dataclasses, json, subprocess, sys
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import torch
from fastcore.test import test_eq as eq, test_fail as fails
from transformers import TrainingArguments, default_data_collator

from test_train import linked
from trn_tutorials.core.options import UsageError, parse_args
from trn_tutorials.training.launch import launch_env, torchrun_command
from trn_tutorials.training.arguments import (DONE_ANYWAY, OUR_FIELDS, REFUSED, TRAINER_FIELDS, TrainArguments, _LOADER_KEYS, alias_notes,
                                     changed_options, check_args, check_flags, needs_use_cpu, option_argv, refused_option,
                                     training_arguments)
from trn_tutorials.training.checkpoints import CheckpointGuard
from trn_tutorials.training.trainer import BucketBatches, Guards, loader_options

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
    from trn_tutorials.training.xla_loop import LoopArguments   # the plain loop takes the same names and aliases
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


def test_hf_flags_train_through_torchrun(prepared, tmp_path):
    "Gradient accumulation, a cosine schedule, evaluation every N steps: a real run (one CPU worker, one epoch) does what the flags say."
    a, = parse_args([TrainArguments], ['--dataset_path', str(linked(prepared, tmp_path, 'data')/'data'), '--output_dir', str(tmp_path/'model'), '--backend', 'cpu',
                                       '--num_train_epochs', '1', '--per_device_train_batch_size', '8', '--gradient_accumulation_steps', '2',
                                       '--lr_scheduler_type', 'cosine', '--eval_strategy', 'steps', '--eval_steps', '6', '--logging_steps', '3',
                                       '--learning_rate', '1e-3', '--save_steps', '0'])
    r = subprocess.run(torchrun_command(a, 1), env=launch_env('cpu', 1), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads(Path(a.output_dir, 'metrics.json').read_text())
    assert m['train']['steps'] == 23   # 45 batches of 8 an epoch, 2 accumulated a step: 23 steps
    assert (m['args']['gradient_accumulation_steps'], m['args']['lr_scheduler_type'], m['args']['eval_strategy']) == (2, 'cosine', 'steps')
    assert [h['step'] for h in m['history'] if 'eval_loss' in h] == [6, 12, 18, 23]   # and the last step's
    lrs = [h['learning_rate'] for h in m['history'] if 'learning_rate' in h]
    assert lrs[-1] < 0.1 * max(lrs)   # cosine: near zero at the end


def test_the_job_hyperparameters_carry_hf_flags(prepared):
    from trn_tutorials.sagemaker.training_job import job_hyperparameters
    hp = job_hyperparameters(TrainArguments(dataset_path=str(prepared/'data'), gradient_accumulation_steps=4, lr_scheduler_type='cosine', bf16=True), None)
    assert (hp['gradient_accumulation_steps'], hp['lr_scheduler_type'], hp['bf16']) == (4, 'cosine', True)
    assert 'use_cpu' not in hp and hp['dataset_path'] == '/opt/ml/input/data/train'


def test_the_entry_points_leave_transformers_unloaded():
    "transformers reads USE_TORCH_XLA once, when first imported: what torchrun and the SageMaker job load before `main` must not import it."
    code = ("import sys, trn_tutorials.training.train, trn_tutorials.training.launch, trn_tutorials.training.precompile, trn_tutorials.sagemaker.training_job, trn_tutorials.training.xla_loop; "
            "print('transformers' in sys.modules)")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == 'False', r.stdout + r.stderr


def test_arguments_parse_with_their_types():
    targs = parse_args([TrainArguments], ['--epochs', '2', '--bf16', 'False', '--per_device_train_batch_size', '8'])[0]
    eq((targs.num_train_epochs, targs.bf16, targs.per_device_train_batch_size), (2.0, False, 8))
    eq(parse_args([TrainArguments], ['--lr', '3e-5'])[0].learning_rate, 3e-5)   # the original tutorial's name, an alias
    fails(lambda: parse_args([TrainArguments], ['--learning_rate', 'fast']), exc=SystemExit)


def test_check_args():
    "Numbers are refused when the arguments are made (`TRAIN_LIMITS`); `check_args` keeps what the limits cannot say."
    fails(lambda: TrainArguments(learning_rate=0), contains="--learning_rate 0 is out of range: use a number in (0, 1000]")
    fails(lambda: TrainArguments(num_train_epochs=-1), contains="--num_train_epochs")
    fails(lambda: TrainArguments(max_steps=0), contains="--max_steps 0 is out of range: use 1 or more, or -1 (all epochs)")
    fails(lambda: TrainArguments(save_steps=-1), contains="--save_steps -1 is out of range: use 1 or more, or 0 (no checkpoints)")
    fails(lambda: TrainArguments(save_total_limit=0), contains="--save_total_limit")
    fails(lambda: check_args(TrainArguments(backend='tpu')), contains="--backend 'tpu' is not one of")
    eq(check_args(TrainArguments()).num_train_epochs, 3.0)


def test_training_arguments_per_backend(tmp_path):
    ta = training_arguments(TrainArguments(output_dir=str(tmp_path/'a')), 'neuron')
    eq((ta.dataloader_drop_last, ta.eval_do_concat_batches), (True, False))
    ta_cpu = training_arguments(TrainArguments(output_dir=str(tmp_path/'b')), 'cpu')
    eq((ta_cpu.eval_do_concat_batches, ta.use_cpu), (True, False))
    eq((ta.save_strategy, ta.save_steps, ta.save_total_limit), ('steps', 500, 2))
    eq(training_arguments(TrainArguments(output_dir=str(tmp_path/'c'), save_steps=0), 'cpu').save_strategy, 'no')
    eq(ta_cpu.average_tokens_across_devices, False)   # the loss is a batch mean: not scaled by the worker count


FIELDS = [f.name for f in dataclasses.fields(TrainingArguments)]


CLASSES = {'trainer': TRAINER_FIELDS, 'ours': OUR_FIELDS, 'done anyway': DONE_ANYWAY, 'refused': REFUSED}


def test_every_field_is_placed_exactly_once():
    "A field of a newer transformers fails here until someone decides who reads it."
    placed = {k: [c for c, names in CLASSES.items() if k in names] for k in FIELDS}
    assert {k: v for k, v in placed.items() if len(v) != 1} == {}
    for name, names in CLASSES.items():   # the places hold field names only (of this transformers or the other supported line)
        assert all(isinstance(k, str) and k.isidentifier() for k in names), name


# a value away from the default for each refused field, as the command line gives it (`None`: not expressible there)
NON_DEFAULT = {
    'hub_token': ['hf_NotARealToken0123456789'], 'push_to_hub_token': ['hf_NotARealToken0123456789'],
    'resume_from_checkpoint': ['runs/other/checkpoint-8'], 'overwrite_output_dir': ['true'], 'use_cpu': ['true'], 'no_cuda': ['true'],
    'use_mps_device': ['true'], 'per_gpu_train_batch_size': ['8'], 'per_gpu_eval_batch_size': ['8'], 'push_to_hub_model_id': ['m'],
    'push_to_hub_organization': ['org'], 'group_by_length': ['true'], 'train_sampling_strategy': ['group_by_length'],
    'length_column_name': ['n_tokens'], 'prediction_loss_only': ['true'], 'include_for_metrics': ['inputs'],
    'include_inputs_for_metrics': ['true'], 'batch_eval_metrics': ['true'], 'use_legacy_prediction_loop': ['true'], 'past_index': ['1'],
    'save_only_model': ['true'], 'save_on_each_node': ['true'], 'enable_jit_checkpoint': ['true'],
    'accelerator_config': ['{"split_batches": true}'], 'parallelism_config': None, 'deepspeed': ['ds_config.json'],
    'tpu_num_cores': ['8'], 'ray_scope': ['all'], 'mp_parameters': ['--pipeline 2']}


REFUSED_HERE = [k for k in REFUSED if k in FIELDS]


def refusal(argv:list[str], capsys) -> str|None:
    "The one line that refuses `argv` as `trn-tutorials train` would (parsing, then `check_args`), or `None` if accepted."
    try: a, = parse_args([TrainArguments], argv, prog='trn_tutorials.training.train')
    except SystemExit as e:
        err = capsys.readouterr().err.strip().splitlines()
        assert e.code == 2 and len(err) == 1, err
        return err[0]
    try: check_args(a, here=False)
    except UsageError as e: return str(e)


def test_every_refused_field_has_a_case():
    assert set(REFUSED_HERE) <= set(NON_DEFAULT)


@pytest.mark.parametrize('k', REFUSED_HERE)
def test_a_refused_field_is_refused_in_one_line(k, capsys):
    if NON_DEFAULT[k] is None:   # no command-line form: made in Python
        with pytest.raises(UsageError) as e: TrainArguments(**{k: SimpleNamespace(tp_size=2)})
        line = str(e.value)
    else: line = refusal([f'--{k}', *NON_DEFAULT[k]], capsys)
    assert line and '\n' not in line and f'--{k}' in line, line
    assert any(w in line for w in ('drop', 'use --', 'remove it', 'pass --')), line   # the fix is named
    if k == 'hub_token': assert 'hf_NotAReal' not in line   # the secret is not echoed


@pytest.mark.parametrize('k', REFUSED_HERE)
def test_a_refused_field_at_its_default_is_accepted(k, capsys):
    d = TrainArguments.__dataclass_fields__[k].default
    if isinstance(d, bool): argv = [f'--{k}', str(d).lower()]
    elif isinstance(d, (int, str)) and not isinstance(d, bool): argv = [f'--{k}', str(d)]
    else: argv = []   # None, or a factory: a default the command line cannot spell; leaving it out is the default
    assert refusal(argv, capsys) is None


def test_refused_once_set_later_and_conditions(capsys):
    "`check_args` refuses a value set after the arguments were made; some refusals hold only with another option."
    a = TrainArguments(); a.prediction_loss_only = True
    with pytest.raises(UsageError, match='--prediction_loss_only would leave'): check_args(a, here=False)
    b = TrainArguments(); b.use_cpu = True   # the backend decides: refused by check_args (training_arguments sets it on its copy)
    with pytest.raises(UsageError, match='pass --backend cpu'): check_args(b, here=False)
    assert refusal(['--save_only_model', 'true', '--resume', 'false'], capsys) is None   # no run continues from its checkpoints
    assert refusal(['--accelerator_config', '{"non_blocking": true}'], capsys) is None   # accelerate's, not the loaders'
    assert 'split_batches' in refusal(['--accelerator_config', '{"split_batches": true}'], capsys)
    assert refusal(['--do_train', '--do_eval', '--do_predict', '--remove_unused_columns', 'true'], capsys) is None   # done anyway
    for k, v in (('dataloader_persistent_workers', 'true'), ('dataloader_prefetch_factor', '4')):
        assert 'add --dataloader_num_workers 2' in refusal([f'--{k}', v], capsys)
        assert refusal([f'--{k}', v, '--dataloader_num_workers', '2'], capsys) is None
    assert refused_option(TrainArguments()) is None


def test_the_loader_keys_are_accelerates_defaults():
    from transformers.trainer_pt_utils import AcceleratorConfig
    assert {k: getattr(AcceleratorConfig(), k) for k in _LOADER_KEYS} == _LOADER_KEYS


@pytest.mark.parametrize('kw,refused_on,runs_on,words', [
    ({'ddp_bucket_cap_mb': 25}, ('neuron', 'xla'), ('cpu', 'cuda', 'torchneuron'), "DistributedDataParallel, which"),
    ({'eval_use_gather_object': True}, ('neuron', 'xla'), ('cpu', 'cuda'), 'gathers no Python objects'),
    ({'ddp_find_unused_parameters': True}, ('neuron', 'xla'), ('cpu', 'cuda'), "DistributedDataParallel, which"),
    ({'use_liger_kernel': True}, ('neuron', 'cpu', 'torchneuron'), (), 'Triton kernels')])
def test_flags_refused_where_the_backend_cannot_run_them(kw, refused_on, runs_on, words):
    a = TrainArguments(**kw)
    for b in refused_on:
        with pytest.raises(UsageError, match=words): check_flags(a, b)
    for b in runs_on: check_flags(a, b)


class Model(torch.nn.Module):
    def forward(self, input_ids=None, attention_mask=None, labels=None): return input_ids


class Stub(BucketBatches):
    "`BucketBatches` on what it reads of a Trainer (no model loaded): accelerate's `prepare` as the identity."
    def __init__(self, args, ds, train_batch_size=None):
        self.args, self.train_dataset, self.eval_dataset, self.model, self.label_names = args, ds, ds, Model(), args.label_names
        self.accelerator = SimpleNamespace(even_batches=True, prepare=lambda dl: dl)
        self.data_collator, self.pad_id, self.epoch_callback, self.callbacks = default_data_collator, 0, None, []
        if train_batch_size: self._train_batch_size = train_batch_size   # as the Trainer's loop sets it

    def add_callback(self, cb): self.callbacks.append(cb)


def split(n=37):
    "`n` rows in two buckets (8 and 16 tokens); each row's label is its index, a column the model does not take besides."
    L = [8 if i % 3 else 16 for i in range(n)]
    return datasets.Dataset.from_dict({'input_ids': [[5] * l for l in L], 'attention_mask': [[1] * l for l in L],
                                       'labels': list(range(n)), 'source': ['x'] * n})


def order(**kw) -> list[list[int]]:
    "The training batches (row indices) `BucketBatches` feeds for arguments `kw`."
    a = TrainArguments(per_device_train_batch_size=4, dataloader_pin_memory=False, **kw)   # nothing to pin for: no accelerator here
    return [b['labels'].tolist() for b in Stub(a, split()).get_train_dataloader()]


def test_data_seed_sets_the_training_order():
    assert order(data_seed=1) == order(data_seed=1) != order(data_seed=2)
    assert order(data_seed=1, seed=5) == order(data_seed=1, seed=6)   # --data_seed wins over --seed, as in the Trainer
    assert order(seed=5) != order(seed=6) and order(seed=5) == order(seed=5, data_seed=5)   # without it: --seed
    assert sorted(i for b in order(data_seed=2) for i in b) == list(range(37))   # every row once, whatever the order


def test_batch_sizes_and_drop_last():
    sizes = lambda **kw: [len(b) for b in order(**kw)]
    assert max(sizes()) == 4 and sizes()[-1] != 4   # 37 rows: a smaller last batch
    assert set(sizes(dataloader_drop_last=True)) == {4}   # none smaller: completed with repeated rows
    half = Stub(TrainArguments(per_device_train_batch_size=4, dataloader_pin_memory=False), split(), train_batch_size=2).get_train_dataloader()   # --auto_find_batch_size's halving
    assert max(len(b['labels']) for b in half) == 2
    ev = Stub(TrainArguments(per_device_eval_batch_size=5, dataloader_pin_memory=False), split()).get_eval_dataloader()
    assert {len(b['labels']) for b in ev} == {5}   # every evaluation batch of 5 rows (the last ones filled up)


def test_the_dataloader_gets_its_options():
    five = {k: v for k, v in (('dataloader_multiprocessing_context', 'fork'), ('dataloader_in_order', False)) if k in FIELDS}   # transformers 5's
    a = TrainArguments(dataloader_num_workers=2, dataloader_persistent_workers=True, dataloader_prefetch_factor=3, dataloader_pin_memory=False, **five)
    dl = Stub(a, split()).get_train_dataloader()
    assert (dl.num_workers, dl.persistent_workers, dl.prefetch_factor, dl.pin_memory) == (2, True, 3, False)
    if five: assert dl.multiprocessing_context.get_start_method() == 'fork' and dl.in_order is False
    assert sorted(i for b in dl for i in b['labels'].tolist()) == list(range(37))   # two worker processes load every row
    plain = Stub(TrainArguments(dataloader_pin_memory=False), split()).get_train_dataloader()
    assert (plain.num_workers, plain.persistent_workers, plain.prefetch_factor) == (0, False, None)
    assert loader_options(TrainArguments(dataloader_pin_memory=False)) == {'num_workers': 0, 'pin_memory': False}


def test_label_names_keep_their_columns():
    cols = lambda **kw: set(Stub(TrainArguments(**kw), split()).model_columns(split()).column_names)
    assert cols() == {'input_ids', 'attention_mask', 'labels'}   # `source` is not the model's
    assert cols(label_names=['source']) == {'input_ids', 'attention_mask', 'labels', 'source'}


def test_save_total_limit_reaches_the_checkpoint_guard():
    class Base:
        def __init__(self, args): self.args, self.callbacks = args, []
        def add_callback(self, cb): self.callbacks.append(cb)
    G = type('G', (Guards, Base), {})
    g = G(TrainArguments(save_total_limit=3), run_args={})
    guard = next(c for c in g.callbacks if isinstance(c, CheckpointGuard))
    assert guard.keep == 3 and g.args.save_total_limit is None   # the guard prunes after sealing; the Trainer's rotation is off


# where the rest of `OUR_FIELDS` is shown to change what happens
ELSEWHERE = {'output_dir': 'every run in tests/test_train.py writes its model and checkpoints there',
             'seed': "test_data_seed_sets_the_training_order here; the head's weights: tests/test_train.py's same-seed runs"}


SHOWN_HERE = {'per_device_train_batch_size', 'per_device_eval_batch_size', 'auto_find_batch_size', 'data_seed', 'dataloader_drop_last',
              'dataloader_num_workers', 'dataloader_pin_memory', 'dataloader_persistent_workers', 'dataloader_prefetch_factor',
              'dataloader_multiprocessing_context', 'dataloader_in_order', 'label_names', 'save_total_limit'}


def test_every_field_of_ours_is_shown():
    assert set(OUR_FIELDS) == SHOWN_HERE | set(ELSEWHERE)


def test_no_resume_help_is_its_own(capsys):
    with pytest.raises(SystemExit): parse_args([TrainArguments], ['--help'], prog='trn_tutorials.training.train')
    out = capsys.readouterr().out
    yes, no = out.split('options:')[1].split('--resume [RESUME]')[1].split('--no_resume, --no-resume')
    no = no.split('--backend')[0]
    assert 'continue from the newest' in ' '.join(yes.split()) and 'start' in no and 'continue from the newest' not in ' '.join(no.split()), out
