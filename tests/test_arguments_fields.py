"""Issue 42, principle 1, by class: an accepted option is honoured, or refused. Every field of the installed transformers'
`TrainingArguments` is placed once (`trn_tutorials.arguments`: read by the Trainer, by our replacements, done anyway, or
refused); each refused field is refused in one line through the CLI's own parser; each field our replacements read
changes what they do. Runs under transformers 5 (.venv) and 4.57 (.venv-trn1): fields of only one line are covered there."""
import dataclasses
from types import SimpleNamespace

import datasets
import pytest
import torch
from transformers import TrainingArguments, default_data_collator

from trn_tutorials.core import UsageError, parse_args
from trn_tutorials.arguments import (DONE_ANYWAY, OUR_FIELDS, REFUSED, TRAINER_FIELDS, TrainArguments, check_args, check_flags,
                                     refused_option, _LOADER_KEYS)
from trn_tutorials.checkpoints import CheckpointGuard
from trn_tutorials.trainer import BucketBatches, Guards, loader_options

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
    try: a, = parse_args([TrainArguments], argv, prog='trn_tutorials.train')
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


# --- the fields our replacements read: each changes what they do ---

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
