"""Issue 4 part 5: bad inputs through every public entry point give one line naming the fix, and leave nothing that looks done.

Each case sets up its own folder (a bad CSV, a key file, ...), snapshots it, runs one bad input, then checks:
- the CLI (`trn-tutorials ...` in-process through its entry `trn_tutorials.cli.run(argv)`: tests/test_cli.py runs each command
  once in a process of its own; `python -m trn_tutorials.training.train ...` in-process through the module's `main(argv)`, one case
  in a subprocess, where `-m` relaunches under torchrun; offline, cwd = the case folder, careless' `run_here`)
  exits with status 2 and prints exactly one stderr line, no traceback; a Python function raises `UsageError`
  (`parse_args` exits 2, as argparse does) with a one-line message;
- the line holds the case's words and names a fix (`FIX`: an imperative such as "use ...", "pass ...", "run ...");
- nothing new in the case folder looks like a finished result: no prepared-data manifest, `metrics.json`, saved
  model, `checkpoint-*/trainer_state.json`, nor a leftover `.NAME.tmp-*`/`.NAME.old-*` folder.
The CLI cases run in one module fixture, in-process one by one while the one subprocess case runs beside them.
"""
from __future__ import annotations
import json, os, re, subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import pytest
from datasets import Dataset, DatasetDict

from local_services import damaged, freeze, hold_lock, unfreeze

from trn_tutorials.training.arguments import check_args
from trn_tutorials.training.launch import LaunchArguments
from trn_tutorials.backends import Accelerator, parse_visible_cores, run_cost
from trn_tutorials.core.options import UsageError, parse_args
from trn_tutorials.core.folders import write_record
from trn_tutorials.models import local_model, tiny_bert
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.shapes import choose_length
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.sources import load_raw, sample_data
from trn_tutorials.data.checks import validate
from trn_tutorials.instance.ec2 import InstanceArguments, ssh_cidr
from trn_tutorials.training.launch import launch
from trn_tutorials.training.preflight import workers
from trn_tutorials.training.precompile import precompile
from trn_tutorials.training.checkpoints import RUN_ARGS
from trn_tutorials.training.arguments import TrainArguments

TRN = str(Path(sys.executable).parent/'trn-tutorials')   # the console script of the Python running the tests
ENV = dict(os.environ, HF_HUB_OFFLINE='1')

# A message names the fix when a clause starts with an imperative (after ':', ';', '(', '`', ', or', 'or'),
# or, for argparse's own errors, ends by pointing at `--help`, which lists the valid options.
FIX = re.compile(r"(?:[:;(`]\s*|,\s*or\s+|\bor\s+)(?:use|pass|run|add|name|check|give|remove|set|fix|keep|change|open|"
                 r"leave|empty|install|pip install|start|move|prepare|save|rename|quote|lower|raise)\b|\(see --help\)$", re.I)

# Looks like a finished result if new since setup.
DONE_FILES = {'trn_tutorials.json', 'metrics.json', 'config.json', 'model.safetensors', 'pytorch_model.bin',
              'train.log'}   # a log in the wrong folder (e.g. the working folder, for --output_dir '')
TEMP_DIR = re.compile(r'^\..+\.(tmp|old)-[0-9a-f]+$')


# ---------------------------------------------------------------------------------------------------- setup helpers
def write(d:Path, name:str, text:str='') -> str:
    p = d/name; p.parent.mkdir(parents=True, exist_ok=True); p.write_text(text)
    return str(p)

def rows(*pairs) -> str:
    "CSV text with columns text,label."
    return 'text,label\n' + ''.join(f'{t},{l}\n' for t, l in pairs)

SIX = [('i feel happy', 'joy'), ('so sad today', 'sadness'), ('i am angry', 'anger'),
       ('what a lovely day', 'joy'), ('i miss you', 'sadness'), ('this is unfair', 'anger')]

def checkpoint(d:Path, out:str='out', step:int=4, max_steps:int=8, **run) -> str:
    "An output folder holding a complete (sealed) `checkpoint-{step}/` of a run planned for `max_steps` (with `run`'s arguments, if any)."
    c = d/out/f'checkpoint-{step}'; c.mkdir(parents=True)
    if run: (c/RUN_ARGS).write_text(json.dumps(asdict(TrainArguments(**run))))
    (c/'trainer_state.json').write_text(f'{{"global_step": {step}, "max_steps": {max_steps}}}\n')
    for f in ('model.safetensors', 'optimizer.pt', 'scheduler.pt'): (c/f).write_bytes(b'\0' * 16)
    (c/'config.json').write_text('{}\n')
    from trn_tutorials.training.checkpoints import seal_checkpoint
    seal_checkpoint(c)   # complete: its record lists every file
    write_record(d/out, {'kind': 'model', 'options': run})   # the folder's record, as the run that wrote it left it
    return str(d/out)

FROZEN: set[Path] = set()

def frozen(path) -> bool:
    "local_services' `freeze`, the folder remembered: only a case folder that holds one is unfrozen after its case (`thaw`)."
    FROZEN.add(Path(path)); return freeze(path)

def thaw(d:Path):
    "`unfreeze` the case folder `d` if a folder under it was frozen (`chattr` is a process: not for every case)."
    if any(f.is_relative_to(d) for f in FROZEN): unfreeze(d)

def key_file(d:Path, mode:int) -> str:
    p = d/'key.pem'; p.write_text('-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----\n'); p.chmod(mode)
    return str(p)

def sample_words() -> list[str]:
    "The words of the bundled sample: a tiny tokenizer that covers them prepares it (its own vocabulary, not MiniLM's)."
    return sorted({w for t in load_raw(sample_data())['train']['text'] for w in t.lower().split()})

def two_labels(*texts_labels) -> DatasetDict:
    t, l = zip(*texts_labels)
    return DatasetDict(train=Dataset.from_dict({'text': list(t), 'label': list(l)}))


# ---------------------------------------------------------------------------------------------------------- the table
@dataclass
class Case:
    id: str
    kind: str          # 'cli' (trn-tutorials), 'module' (python -m trn_tutorials.training.train), 'func' (raises UsageError), 'exit' (SystemExit 2)
    setup: Callable    # (case folder, prepared data folder) -> argv list (cli/module) or a no-argument callable (func/exit)
    words: list[str]   # must all be in the message

M = local_model   # the MiniLM model folder

def prep(d:Path, data:str, **kw) -> Callable:
    "`prepare` of `data` into the case folder, with the local MiniLM tokenizer unless `kw` names another."
    return lambda: prepare(DataArguments(**{'data': data, 'model_id': M(), 'dataset_path': str(d/'prep'), **kw}))

def folder(d:Path, **files) -> str:
    "A folder `raw/` holding `files` (name with '_' for '.' -> text)."
    for name, text in files.items(): write(d, 'raw/' + name.replace('_', '.'), text)
    return str(d/'raw')

CASES = [
    # --- the `trn-tutorials` command, in a subprocess (one per command and kind of check)
    Case('cli prep no text column', 'cli', lambda d, p: ['prep', '--data', write(d, 'd.csv', 'sentence,label\nhi,joy\nho,sadness\n')],
         ["no text column 'text'", '--text_column']),
    Case('cli prep prepared data given as raw', 'cli', lambda d, p: ['prep', '--data', p], ['holds prepared (tokenized) data']),
    Case('cli prep max_length too short', 'cli', lambda d, p: ['prep', '--max_length', '4'], ['--max_length 4', 'use 8 or more']),
    Case('cli prep --buckets 0', 'cli', lambda d, p: ['prep', '--buckets', '0'], ['--buckets', 'use 1 to 8']),
    Case('cli train on raw data', 'cli', lambda d, p: ['train', '--dataset_path', sample_data()],
         ['has no trn_tutorials.json', 'trn-tutorials prep']),
    Case('cli train warmup_steps -1', 'cli', lambda d, p: ['train', '--warmup_steps', '-1'], ['--warmup_steps -1', 'is out of range']),
    Case('cli train --save_steps -1', 'cli', lambda d, p: ['train', '--save_steps', '-1'], ['--save_steps']),
    Case('cli train --save_total_limit 0', 'cli', lambda d, p: ['train', '--save_total_limit', '0'], ['--save_total_limit']),
    Case('cli train checkpoint with --resume false', 'cli',
         lambda d, p: ['train', '--dataset_path', p, '--output_dir', checkpoint(d), '--resume', 'false'], ['--resume']),
    Case('cli train checkpoint of a run with other options', 'cli',
         lambda d, p: ['train', '--dataset_path', p, '--output_dir', checkpoint(d, max_steps=999)], ['999 steps', 'another --output_dir']),
    Case('module checkpoint of a run with other options', 'module',
         lambda d, p: ['--dataset_path', p, '--output_dir', checkpoint(d, max_steps=999)], ['999 steps', 'another --output_dir']),
    Case('cli train checkpoint of a run with another seed', 'cli',
         lambda d, p: ['train', '--dataset_path', p, '--output_dir', checkpoint(d, seed=7)], ['--seed 7, not --seed 42', 'another --output_dir']),
    Case('cli quickstart bad instance type', 'cli', lambda d, p: ['quickstart', '--instance_type', 'p5.48xlarge'],
         ["unknown instance type 'p5.48xlarge'"]),
    Case('cli train --backend xla without torch-xla', 'cli', lambda d, p: ['train', '--dataset_path', p, '--backend', 'xla'],
         ['--backend xla needs torch-xla', 'pip install torch==2.9.0 torch-xla==2.9.0']),
    Case('cli quickstart TorchNeuron on a Trn1', 'cli', lambda d, p: ['quickstart', '--backend', 'torchneuron', '--instance_type', 'trn1.2xlarge'],
         ['TorchNeuron supports Trn2 and Trn3 only', '--backend neuron']),
    Case('cli train unknown backend', 'cli', lambda d, p: ['train', '--dataset_path', p, '--backend', 'tpu'], ["--backend 'tpu' is not one of"]),
    # --- issue 42: a token is never an option; what a run needs from outside, checked before anything slow
    Case('cli train --hub_token', 'cli', lambda d, p: ['train', '--dataset_path', p, '--hub_token', 'hf_NotARealToken0123456789'],
         ['--hub_token would be saved in plain text', 'HF_TOKEN']),
    Case('cli train --push_to_hub without a token or a Hub', 'cli', lambda d, p: ['train', '--dataset_path', p, '--push_to_hub', 'true'],
         ['--push_to_hub needs']),
    Case('module --backend neuron without NeuronCores', 'module', lambda d, p: ['--dataset_path', p, '--backend', 'neuron'],
         ['--backend neuron but this machine has', '/opt/aws_neuronx_venv_pytorch_2_9']),
    Case('cli up volume too small', 'cli', lambda d, p: ['up', '--volume_gb', '50', '--key_dir', str(d)], ['--volume_gb 50']),
    Case('cli up IPv6 address', 'cli', lambda d, p: ['up', '--region', 'us-east-1', '--my_ip', '2001:db8::1', '--key_dir', str(d)], ['is IPv6']),
    Case('cli down run and all', 'cli', lambda d, p: ['down', '--run_id', 'r1', '--all_project', 'true', '--key_dir', str(d)], ['not both']),
    Case('cli tunnel key readable by others', 'cli', lambda d, p: ['tunnel', '--host', '203.0.113.7', '--key_path', key_file(d, 0o644)],
         ['can be read by others', 'chmod 400']),
    Case('cli tunnel host without key', 'cli', lambda d, p: ['tunnel', '--host', '203.0.113.7'], ['--host needs --key_path']),
    # --- the training script as torchrun starts it: python -m trn_tutorials.training.train (calls train.main)
    Case('train.main dataset_path is a file', 'module', lambda d, p: ['--dataset_path', write(d, 'data.csv', rows(*SIX * 10))],
         ['no prepared data at', 'trn-tutorials prep']),
    # --- prepare(DataArguments(...)): what is wrong with the data or the settings
    Case('prepare unknown file type', 'func', lambda d, p: prep(d, write(d, 'tweets.xlsx', 'x')), ["unknown file type '.xlsx'"]),
    Case('prepare folder without train file', 'func', lambda d, p: prep(d, folder(d, validation_txt='a b;joy\n')), ['no train.* file']),
    Case('prepare two files for one split', 'func', lambda d, p: prep(d, folder(d, train_csv=rows(*SIX), train_txt='a;joy\n')),
         ["two files for split 'train'"]),
    Case('prepare empty split file', 'func', lambda d, p: prep(d, folder(d, train_txt='')), ["split 'train' is empty"]),
    Case('prepare row without label', 'func', lambda d, p: prep(d, write(d, 'd.csv', rows(*SIX) + 'no label here,\n')),
         ["d.csv: 1 row has no label (line 8)"]),
    Case('prepare test label missing from train', 'func',
         lambda d, p: prep(d, folder(d, train_csv=rows(*SIX), test_csv=rows(('so scared', 'fear')))), ["unknown label 'fear' in split 'test'"]),
    Case('prepare integer labels with a gap', 'func', lambda d, p: prep(d, write(d, 'd.csv', rows(('a b', 0), ('c d', 2), ('e f', 0), ('g h', 2)))),
         ['ids 0..k-1']),
    Case('prepare only one label', 'func', lambda d, p: prep(d, write(d, 'd.csv', rows(('a b', 'joy'), ('c d', 'joy')))), ['only one label']),
    Case('prepare max_length beyond the model', 'func', lambda d, p: prep(d, sample_data(), max_length=4096), ['--max_length 4096', 'use 512 or less']),
    Case('prepare dataset_path not empty', 'func', lambda d, p: (write(d, 'prep/notes.txt', 'mine'), prep(d, sample_data()))[1],
         ['holds files trn-tutorials did not write', 'pass another --dataset_path']),
    Case('prepare empty dataset_path', 'func', lambda d, p: prep(d, sample_data(), dataset_path=''), ['--dataset_path is empty']),
    Case('prepare Hub model while offline', 'func', lambda d, p: prep(d, sample_data(), model_id='someone/some-model'),
         ["could not load the tokenizer of 'someone/some-model'", 'Hub is unreachable']),
    Case('prepare buckets 9', 'func', lambda d, p: prep(d, sample_data(), buckets=9), ['--buckets', 'use 1 to 8']),
    # --- the other public functions
    Case('load_raw neither path nor Hub id', 'func', lambda d, p: lambda: load_raw('my tweets'), ['no such file or folder: my tweets']),
    Case('validate without train split', 'func', lambda d, p: lambda: validate(DatasetDict(test=two_labels(*SIX)['train'])),
         ['no train split (splits: test)']),
    Case('validate missing label column', 'func', lambda d, p: lambda: validate(two_labels(*SIX), label_column='emotion'),
         ["no label column 'emotion'", '--label_column']),
    Case('validate row without text', 'func', lambda d, p: lambda: validate(two_labels(*SIX, (None, 'joy'))), ["row 6 of split 'train' has no text"]),
    Case('validate too few rows to stratify', 'func', lambda d, p: lambda: validate(two_labels(('a', 'x'), ('b', 'x'), ('c', 'y'), ('d', 'y'), ('e', 'z'), ('f', 'z'))),
         ['cannot give validation one row of each of the 3 labels']),
    Case('choose_length no lengths', 'func', lambda d, p: lambda: choose_length([]), ['no lengths to choose from']),
    Case('parse_visible_cores reversed range', 'func', lambda d, p: lambda: parse_visible_cores('3-1'), ["NEURON_RT_VISIBLE_CORES='3-1'"]),
    Case('ssh_cidr address range', 'func', lambda d, p: lambda: ssh_cidr('198.51.100.0/24'), ['is a range of 256 addresses']),
    Case('TrainArguments hub_token', 'func', lambda d, p: lambda: TrainArguments(output_dir=str(d/'out'), hub_token='hf_example'),
         ['--hub_token would be saved', 'HF_TOKEN']),
    Case('check_args --report_to a tracker not installed', 'func',
         lambda d, p: lambda: check_args(TrainArguments(output_dir=str(d/'out'), report_to='neptune')), ['needs neptune', 'pip install neptune']),
    Case('check_args --report_to a misspelt tracker', 'func',
         lambda d, p: lambda: check_args(TrainArguments(output_dir=str(d/'out'), report_to='tensorbord')), ['is not a tracker transformers knows']),
    Case('TrainArguments resume_from_checkpoint', 'func',   # issue 42: an accepted option is honoured, or refused
         lambda d, p: lambda: TrainArguments(output_dir=str(d/'out'), resume_from_checkpoint=str(d/'runs'/'other'/'checkpoint-8')),
         ['--resume_from_checkpoint is not read', 'use --output_dir ']),
    Case('launch --fp16 on the CPU', 'func',
         lambda d, p: lambda: launch(TrainArguments(dataset_path=p, output_dir=str(d/'out'), fp16=True, backend='cpu'), echo=False),
         ['--fp16 does not run on the CPU', '--bf16 true']),
    Case('launch zero workers', 'func',
         lambda d, p: lambda: launch(TrainArguments(dataset_path=p, output_dir=str(d/'out')), nproc_per_node=0, echo=False),
         ['--nproc_per_node 0']),
    Case('workers: xla runs one', 'func', lambda d, p: lambda: workers(2, Accelerator('cpu', 1, 'cpu'), 'xla'), ['--backend xla runs one worker']),
    Case('workers: 4 on a trn1.32xlarge', 'func', lambda d, p: lambda: workers(4, Accelerator('neuron', 32, '32 NeuronCore(s)')),
         ['Neuron trains on 1, 2, 8, 32']),
    Case('parse_args ambiguous option', 'exit', lambda d, p: lambda: parse_args([TrainArguments], ['--per_device', '8'], prog='trn-tutorials train'),
         ['ambiguous option: --per_device']),
    # --- issue 15: values (core)
    Case('run_cost of a negative duration', 'func', lambda d, p: lambda: run_cost('trn1.2xlarge', -5), ['--seconds -5 is out of range', 'use 0 or more']),
    Case('run_cost of nan seconds', 'func', lambda d, p: lambda: run_cost('trn1.2xlarge', float('nan')), ['--seconds nan is not a finite number']),
    Case('parse_args nan', 'exit', lambda d, p: lambda: parse_args([TrainArguments], ['--learning_rate', 'nan'], prog='trn-tutorials train'),
         ['--learning_rate nan is not a finite number']),
    # --- issue 15: data and labels (03_data)   (helpers: tests/conftest.py)
    Case('cli prep dataset_path is a file', 'cli',
         lambda d, p: ['prep', '--data', sample_data(), '--model_id', M(), '--dataset_path', write(d, 'notes.txt', 'mine')],
         ['--dataset_path', 'notes.txt is a file, not a folder']),
    Case('cli prep dataset_path under a file', 'cli',
         lambda d, p: ['prep', '--data', sample_data(), '--model_id', M(), '--dataset_path', write(d, 'notes.txt', 'mine') + '/prep'],
         ['--dataset_path', 'lies under the file']),
    Case('cli prep dataset_path not writable', 'cli',
         lambda d, p: ['prep', '--data', sample_data(), '--model_id', M(), '--dataset_path', str(d/'ro'/'prep')]
                      if not (d/'ro').mkdir() and frozen(d/'ro') else ['--cannot_freeze'],
         ['--dataset_path', 'is not writable', 'pass a folder you can write to']),
    Case('cli prep dataset_path busy', 'cli',   # a live helper process holds the folder's lock
         lambda d, p: ['prep', '--data', sample_data(), '--model_id', M(), '--dataset_path', str(d/'prep')]
                      if hold_lock(d/'prep') else [],
         ['is in use by pid', 'trn-tutorials stop --dataset_path']),
    Case('cli train manifest not JSON', 'cli', lambda d, p: ['train', '--dataset_path', damaged(d, p, 'not JSON')],
         ['trn_tutorials.json is damaged', 'prepare it again: trn-tutorials prep --dataset_path']),
    Case('cli train manifest missing', 'cli', lambda d, p: ['train', '--dataset_path', damaged(d, p, 'no manifest')],
         ['has no trn_tutorials.json', 'its record is lost']),
    Case('cli train manifest lacks keys', 'cli', lambda d, p: ['train', '--dataset_path', damaged(d, p, 'no label_names')],
         ['lacks model_id, label_names, which training needs', 'run `trn-tutorials prep --dataset_path']),
    Case('cli train data file cut short', 'cli', lambda d, p: ['train', '--dataset_path', damaged(d, p, 'truncated arrow')],
         ['could not read the prepared data', 'run `trn-tutorials prep --dataset_path']),
    Case('cli prep --percentile nan', 'cli', lambda d, p: ['prep', '--percentile', 'nan'], ['--percentile nan is not a finite number']),
    Case('cli prep --percentile inf', 'cli', lambda d, p: ['prep', '--percentile', 'inf'], ['--percentile inf is not a finite number']),
    Case('cli prep --buckets inf', 'cli', lambda d, p: ['prep', '--buckets', 'inf'], ['--buckets', "invalid int value: 'inf'"]),
    Case('cli prep --eval_fraction 1', 'cli', lambda d, p: ['prep', '--eval_fraction', '1'], ['--eval_fraction 1.0 is out of range', 'use a number in (0, 1)']),
    Case('cli prep labels differ by case', 'cli',
         lambda d, p: ['prep', '--data', write(d, 'd.csv', rows(*SIX, ('so glad', 'Joy'))), '--model_id', M(), '--dataset_path', 'prep'],
         ["'Joy' (1 row) and 'joy' (2 rows) differ only in case", '--accept_labels Joy']),
    Case('cli prep label only in test', 'cli',
         lambda d, p: ['prep', '--data', folder(d, train_csv=rows(*SIX), test_csv=rows(('so scared', 'fear'), ('so glad', 'joy'))), '--model_id', M(), '--dataset_path', 'prep'],
         ["unknown label 'fear' in split 'test' (1 row)", '--accept_labels fear']),
    Case('cli prep text column is the label column', 'cli',
         lambda d, p: ['prep', '--data', write(d, 'd.csv', rows(*SIX)), '--text_column', 'label', '--model_id', M(), '--dataset_path', 'prep'],
         ['--text_column label is also the --label_column']),
    Case('prepare labels one letter apart', 'func', lambda d, p: prep(d, write(d, 'd.csv', rows(*SIX, ('so blue', 'sadnes')))),
         ["'sadnes' (1 row) and 'sadness' (2 rows) differ only by one letter", '--accept_labels sadnes']),
    Case('prepare label below --min_label_rows', 'func', lambda d, p: prep(d, write(d, 'd.csv', rows(*SIX, ('i adore it', 'love')))),
         ["label 'love' (1 row) in split 'train' has fewer than --min_label_rows 2", '--accept_labels love']),
    Case('prepare accept_labels names no label', 'func', lambda d, p: prep(d, write(d, 'd.csv', rows(*SIX)), accept_labels=['jyo']),
         ['--accept_labels jyo: no such label in the data']),
    Case('DataArguments percentile as a string', 'func', lambda d, p: lambda: DataArguments(percentile='99'),
         ["--percentile '99' is a str, not a number"]),
    # --- issue 15: training (04_train)
    Case('cli train --learning_rate nan', 'cli', lambda d, p: ['train', '--learning_rate', 'nan'], ['--learning_rate nan is not a finite number']),
    Case('cli train --epochs inf', 'cli', lambda d, p: ['train', '--epochs', 'inf'], ['--num_train_epochs inf is not a finite number']),
    Case('cli train --per_device_train_batch_size 0.5', 'cli', lambda d, p: ['train', '--per_device_train_batch_size', '0.5'],
         ['--per_device_train_batch_size', "invalid int value: '0.5'"]),
    Case('module batch larger than the data', 'module',
         lambda d, p: ['--dataset_path', p, '--output_dir', str(d/'out'), '--per_device_train_batch_size', '1000'],
         ['--per_device_train_batch_size 1000 on 1 worker(s) makes batches of 1000 rows', 'use --per_device_train_batch_size 360 or less']),
    Case("module --output_dir ''", 'module', lambda d, p: ['--dataset_path', p, '--output_dir', ''], ['--output_dir is empty']),
    Case('module output_dir is a file', 'module', lambda d, p: ['--dataset_path', p, '--output_dir', write(d, 'notes.txt', 'mine')],
         ['notes.txt is a file, not a folder']),
    Case('module output_dir under a file', 'module', lambda d, p: ['--dataset_path', p, '--output_dir', write(d, 'notes.txt', 'mine') + '/run'],
         ['lies under the file']),
    Case('module output_dir not writable', 'module',
         lambda d, p: ['--dataset_path', p, '--output_dir', str(d/'ro'/'run')] if not (d/'ro').mkdir() and frozen(d/'ro') else ['--cannot_freeze'],
         ['is not writable', 'pass a folder you can write to']),
    Case('module output_dir inside the prepared data', 'module', lambda d, p: ['--dataset_path', p, '--output_dir', p + '/model'],
         ['inside the prepared data folder', 'pass an --output_dir outside it']),
    Case('module model and data tokenizers differ', 'module',
         lambda d, p: ['--dataset_path', p, '--output_dir', str(d/'out'), '--model_id', tiny_bert(d/'tiny', sample_words())],
         ['was prepared with the tokenizer of', 'vocabulary 30522 vs', '--allow_tokenizer_mismatch true']),
    Case('module output_dir busy', 'module',   # a live process holds the lock (it ends with this test's worker thread)
         lambda d, p: (lambda h: (h.stdout.readline(), ['--dataset_path', p, '--output_dir', str(d/'out')])[1])(subprocess.Popen(
             [sys.executable, '-c', "import sys, time\nfrom trn_tutorials.core.processes import die_with_parent; from trn_tutorials.core.folders import folder_lock\ndie_with_parent()\n"
              "with folder_lock(sys.argv[1], 'output_dir'): print('held', flush=True); time.sleep(120)", str(d/'out')],
             stdout=subprocess.PIPE, text=True)),
         ['out is in use by pid', 'trn-tutorials stop --output_dir']),
    Case("TrainArguments(num_train_epochs='3')", 'func', lambda d, p: lambda: TrainArguments(num_train_epochs='3'), ["--num_train_epochs '3' is a str, not a number", 'pass a number']),
    # --- issue 15: launch, stop and the CLI (05_launch, 07_cli)
    Case('cli train --nproc_per_node 0', 'cli', lambda d, p: ['train', '--dataset_path', p, '--nproc_per_node', '0'],
         ['--nproc_per_node 0 is out of range', 'use 1 or more']),
    Case('cli train --nproc_per_node nan', 'cli', lambda d, p: ['train', '--dataset_path', p, '--nproc_per_node', 'nan'],
         ['--nproc_per_node', "invalid int value: 'nan'"]),
    Case('cli train batch larger than the data', 'cli', lambda d, p: ['train', '--dataset_path', p, '--per_device_train_batch_size', '400'],
         ['--per_device_train_batch_size 400 on 1 worker(s)', 'more than the 360 training rows', 'use --per_device_train_batch_size 360 or less']),
    Case('cli train output_dir is the prepared data', 'cli', lambda d, p: ['train', '--dataset_path', p, '--output_dir', p],
         ['is the prepared data folder', 'pass an --output_dir outside it']),
    Case('cli stop without a folder', 'cli', lambda d, p: ['stop'], ["name the run's folder", '--output_dir FOLDER']),
    Case('cli stop --timeout -1', 'cli', lambda d, p: ['stop', '--output_dir', str(d/'out'), '--timeout', '-1'],
         ['--timeout -1', 'use 0 or more']),
    Case('cli sm-deploy --instance_count 0', 'cli', lambda d, p: ['sm-deploy', '--instance_count', '0'],
         ['--instance_count 0 is out of range', 'use 1 to 100']),
    Case('launch into a busy folder', 'func',   # the lock is held here (the lambda's default keeps it) while launch tries
         lambda d, p: lambda cm=sys.modules['trn_tutorials.core.folders'].folder_lock(d/'out', 'output_dir'):
             (cm.__enter__(), launch(TrainArguments(dataset_path=p, output_dir=str(d/'out')), nproc_per_node=1, echo=False)),
         [f'is in use by pid {os.getpid()}', 'trn-tutorials stop --output_dir', 'or pass another --output_dir']),
    Case('launch --nproc_per_node as a string', 'func',
         lambda d, p: lambda: launch(TrainArguments(dataset_path=p, output_dir=str(d/'out')), nproc_per_node='2', echo=False),
         ["--nproc_per_node '2' is a str, not a whole number"]),
    Case('LaunchArguments nproc_per_node 0', 'func', lambda d, p: lambda: LaunchArguments(nproc_per_node=0),
         ['--nproc_per_node 0 is out of range']),
    Case('precompile steps 0', 'func', lambda d, p: lambda: precompile(TrainArguments(), steps=0),
         ['--steps 0 is out of range', 'use 1 or more']),
    # --- issue 15: AWS and SageMaker (01_setup, 02_ssh, 06_cleanup, 09_training_job, 10_xla_loop, 12_endpoint)
    Case('cli up --my_ip 0.0.0.0', 'cli', lambda d, p: ['up', '--my_ip', '0.0.0.0', '--key_dir', str(d)],
         ['--my_ip 0.0.0.0 is unspecified', 'https://checkip.amazonaws.com']),
    Case('cli up --my_ip private', 'cli', lambda d, p: ['up', '--my_ip', '192.168.1.20', '--key_dir', str(d)],
         ['--my_ip 192.168.1.20 is a private address', 'pass your public IPv4 address']),
    Case('cli up --max_hours nan', 'cli', lambda d, p: ['up', '--max_hours', 'nan', '--key_dir', str(d)], ['--max_hours nan is not a finite number']),
    Case('cli up --volume_gb inf', 'cli', lambda d, p: ['up', '--volume_gb', 'inf', '--key_dir', str(d)], ['--volume_gb']),
    Case('cli up key_dir under a file', 'cli', lambda d, p: ['up', '--my_ip', '203.0.113.7', '--key_dir', write(d, 'notes.txt', 'x') + '/keys'],
         ['--key_dir', 'lies under the file']),
    Case('cli tunnel --local_port 70000', 'cli', lambda d, p: ['tunnel', '--local_port', '70000'], ['--local_port 70000 is out of range', 'use 1 to 65535']),
    Case('cli sm-train --max_run_hours 0', 'cli', lambda d, p: ['sm-train', '--max_run_hours', '0'], ['--max_run_hours 0', 'is out of range']),
    Case('cli sm-train --instance_count 0', 'cli', lambda d, p: ['sm-train', '--instance_count', '0'], ['--instance_count 0 is out of range', 'use 1 or more']),
    Case('cli down --timeout -1', 'cli', lambda d, p: ['down', '--run_id', 'r1', '--timeout', '-1', '--key_dir', str(d)], ['--timeout -1', 'is out of range']),
    Case('InstanceArguments max_hours as a string', 'func',
         lambda d, p: lambda: InstanceArguments(max_hours='8'), ["--max_hours '8' is a str", 'pass a number']),
]

IDS = [c.id for c in CASES]
assert len(set(IDS)) == len(IDS) >= 20


# ------------------------------------------------------------------------------------------------------------ checks
def snapshot(d:Path) -> set:
    return {p.relative_to(d) for p in d.rglob('*')}

def looks_done(d:Path, before:set) -> list[str]:
    "New paths under `d` that look like a finished (or half-finished) result."
    bad = []
    for rel in sorted(snapshot(d) - before):
        if rel.name in DONE_FILES or any(TEMP_DIR.match(part) for part in rel.parts) \
           or (rel.name == 'trainer_state.json' and rel.parent.name.startswith('checkpoint-')):
            bad.append(str(rel))
    return bad

def check_message(case:Case, line:str):
    assert '\n' not in line.strip() and line.strip(), repr(line)
    for w in case.words: assert w in line, f"{w!r} not in: {line}"
    if 'unrecognized arguments' not in ' '.join(case.words):   # an unknown option is no answer to a case about a known one
        assert 'unrecognized arguments' not in line, line
    assert FIX.search(line.strip()), f"message names no fix: {line.strip()}"


# ---------------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope='module')
def prepared(minilm_prepared, tmp_path_factory) -> str:
    "A copy of conftest's read-only `minilm_prepared` (the sample, MiniLM's tokenizer): a followed fix may prepare into it again."
    import shutil
    return str(shutil.copytree(minilm_prepared, tmp_path_factory.mktemp('prepared')/'emotion-data'))


def _run(case:Case, d:Path, prepared:str) -> dict:
    "`case` as a user runs it: `python -m trn_tutorials.training.train ...` in a process of its own, in the case folder."
    cmd = [sys.executable, '-m', 'trn_tutorials.training.train', *case.setup(d, prepared)]
    before = snapshot(d)
    t0 = time.time()
    try: r = subprocess.run(cmd, capture_output=True, text=True, cwd=d, env=ENV, timeout=180)
    except subprocess.TimeoutExpired as e: return {'error': f'timed out: {e}', 'dir': d, 'before': before}
    finally: thaw(d)   # a case may have made a folder unwritable (`frozen`)
    return {'r': r, 'dir': d, 'before': before, 's': time.time() - t0}


def _run_here(case:Case, d:Path, prepared:str) -> dict:
    """`case` in this process, in the case folder, through careless' `run_here`: a `cli` case through the CLI's entry
    `trn_tutorials.cli.run(argv)`, a `module` case through `trn_tutorials.training.train.main(argv)` (the entry `python -m` calls,
    put in `run_here`'s place of the CLI's while it runs: its lock is held, so nothing else calls the CLI meanwhile)."""
    import trn_tutorials.cli as C
    from careless import in_process, run_here
    with in_process():
        argv = case.setup(d, prepared)
        before, t0, cli_run = snapshot(d), time.time(), C.run
        try:
            if case.kind == 'module':
                from trn_tutorials.training.train import main
                C.run = main
            r = run_here(argv, d)
        finally: C.run = cli_run; thaw(d)
    cmd = [TRN, *argv] if case.kind == 'cli' else [sys.executable, '-m', 'trn_tutorials.training.train', *argv]
    return {'r': subprocess.CompletedProcess(cmd, r.returncode, r.stdout, r.stderr), 'dir': d, 'before': before, 's': time.time() - t0}


# The one case run as a process: `python -m trn_tutorials.training.train` on a Neuron backend outside torchrun relaunches itself under
# torchrun (`relaunch=True`), which only a process of its own shows. Every `trn-tutorials` command's process: tests/test_cli.py.
IN_SUBPROCESS = {'module --backend neuron without NeuronCores'}


@pytest.fixture(scope='module')
def cli_results(tmp_path_factory, prepared) -> dict:
    "Every CLI case: the subprocess one started first, the rest in-process one by one meanwhile; id -> result, case folder and its snapshot after setup."
    cases = [c for c in CASES if c.kind in ('cli', 'module')]
    assert IN_SUBPROCESS <= {c.id for c in cases if c.kind == 'module'}
    dirs = {c.id: tmp_path_factory.mktemp(re.sub(r'\W+', '-', c.id)) for c in cases}
    with ThreadPoolExecutor(max_workers=len(IN_SUBPROCESS)) as ex:
        futs = {c.id: ex.submit(_run, c, dirs[c.id], prepared) for c in cases if c.id in IN_SUBPROCESS}
        res = {c.id: _run_here(c, dirs[c.id], prepared) for c in cases if c.id not in IN_SUBPROCESS}
        res.update({k: f.result() for k, f in futs.items()})
    return res


# ------------------------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize('case', CASES, ids=IDS)
def test_bad_input(case, request, tmp_path, monkeypatch):
    if case.kind in ('cli', 'module'):
        res = request.getfixturevalue('cli_results')[case.id]
        assert 'error' not in res, res.get('error')
        r, d = res['r'], res['dir']
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        problems = [f"status {r.returncode}, not 2"] * (r.returncode != 2) + ['a traceback'] * ('Traceback' in r.stderr) \
            + [f"{len(lines)} stderr lines, not 1"] * (len(lines) != 1) + [f"left behind: {b}" for b in looks_done(d, res['before'])]
        assert not problems, '; '.join(problems) + f"\n--- stderr:\n{r.stderr[-3000:]}\n--- stdout:\n{r.stdout[-1500:]}"
        assert re.match(r'trn_tutorials\.training\.train: error: ' if case.kind == 'module' else r'trn-tutorials [\w-]+: error: ', lines[0]), lines[0]
        check_message(case, lines[0])
    else:
        prepared = request.getfixturevalue('prepared') if case.id.startswith('launch') else ''
        monkeypatch.chdir(tmp_path); monkeypatch.setenv('HF_HUB_OFFLINE', '1')
        call = case.setup(tmp_path, prepared)
        request.addfinalizer(lambda: thaw(tmp_path))
        before = snapshot(tmp_path)
        if case.kind == 'exit':
            capsys = request.getfixturevalue('capsys')
            with pytest.raises(SystemExit) as e: call()
            assert e.value.code == 2
            msg = capsys.readouterr().err.strip()
            assert len(msg.splitlines()) == 1, msg
        else:
            with pytest.raises(UsageError) as e: call()
            msg = str(e.value)
            assert len(msg.splitlines()) == 1 and msg == msg.strip(), repr(msg)
        assert not looks_done(tmp_path, before), looks_done(tmp_path, before)
        check_message(case, msg)


def test_the_checks_catch_what_they_should(tmp_path):
    "`looks_done` flags new results (not ones from setup); `FIX` tells a fix from a bare complaint."
    checkpoint(tmp_path, 'old')
    before = snapshot(tmp_path)
    checkpoint(tmp_path, 'new', 2)
    for f in ('runs/emotion-data/trn_tutorials.json', 'runs/m/metrics.json', 'runs/.emotion-data.tmp-1a2b3c4d/data.arrow', 'notes.txt'):
        write(tmp_path, f, '{}')
    assert looks_done(tmp_path, before) == ['new/checkpoint-2/config.json', 'new/checkpoint-2/model.safetensors', 'new/checkpoint-2/trainer_state.json',
        'new/trn_tutorials.json',
        'runs/.emotion-data.tmp-1a2b3c4d', 'runs/.emotion-data.tmp-1a2b3c4d/data.arrow', 'runs/emotion-data/trn_tutorials.json',
        'runs/m/metrics.json']
    assert FIX.search("--epochs 0 is out of range: use a positive number, e.g. 3")
    assert FIX.search("trn-tutorials train: error: unrecognized arguments: --lr 5e-5 (see --help)")
    assert not FIX.search("--epochs must be positive, got 0.0")


# --------------------------------------------------------------------------------------- the suggested fixes, followed
LOCAL = ('prep', 'stop', 'train', 'quickstart')   # the commands that run here (up, down, tunnel, sm-*: AWS, not reachable)

def test_the_suggested_fixes_work(cli_results):
    """Every prep or stop command a CLI case's message suggests (in backticks, or as the first concrete option group applied to
    its command), run as printed in the case folder: status 0, and every file the user had there is still there, byte for byte.
    Suggestions for train and quickstart are followed by tests/test_careless_*.py on fixtures small enough to train in seconds.
    In-process through the CLI's entry (careless' `run_here`), one after another: prep and stop as processes are test_cli's."""
    from careless import files, follow_argv, run_here, users
    fixes = {}   # case id -> (the command a user runs after reading its message, the case folder)
    for c in CASES:
        res = cli_results.get(c.id)
        if not res or 'r' not in res: continue
        r, d = res['r'], res['dir']
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        argv = list(r.args[1:]) if c.kind == 'cli' else ['-m', 'trn_tutorials.training.train', *r.args[3:]]
        fix = follow_argv(re.sub(r'^\S+(?: \S+)?: error: ', '', lines[-1]), argv, d) if lines else None
        if fix and fix[0] in ('prep', 'stop'): fixes[c.id] = (fix, d)
    def follow(item):   # each in its own case folder
        cid, (fix, d) = item
        mine = users(d, files(d))
        r2 = run_here(fix, d)
        problems = [f"{cid}: `{' '.join(fix)}` -> status {r2.returncode}: {r2.stderr.strip().splitlines()[-1:]}"] * (r2.returncode != 0)
        lost = [k for k, v in mine.items() if files(d).get(k) != v]
        return problems + [f"{cid}: `{' '.join(fix)}` lost or changed {lost}"] * bool(lost)
    problems = [p for item in fixes.items() for p in follow(item)]
    followed = len(fixes)
    assert followed >= 8 and not problems, f"{followed} followed; " + '\n'.join(problems)
