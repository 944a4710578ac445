"""Issue 23, the training script as a careless user meets it: folders it does not own, resuming onto changed data or options,
a run that looks fine but learned nothing, Ctrl-C, and suggested fixes that must work as printed.

The module runs as torchrun starts it, in this process through its `main` (careless' `run_here`: one CPU worker, as without
torchrun): the refusals, the runs that must work, the runs a case sets up and the fixes followed. Only Ctrl-C is sent to a
process of its own. A fix that starts a fresh training in a new --output_dir trains one step (careless' `MIN`)."""
import json, os, sys
from pathlib import Path

from careless import FAST, MIN, WORDS, Case, make_test, run_here, tiny_csv, tiny_prepared
from trn_tutorials.models import tiny_bert
from trn_tutorials.core.folders import write_record
from trn_tutorials.training.progress import PROGRESS_ENV, read_progress

VENV = {'PATH': f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}   # an activated venv: `python` is this one
TRAIN = ['-m', 'trn_tutorials.training.train']

def train_argv(d, out='m', *more, opts=FAST):
    "The module as torchrun starts it, on `d/data`, the training `opts` (default `FAST`) with `more` set over them."
    fast = [a for i, a in enumerate(opts) if not (a in more[::2] or i and opts[i - 1] in more[::2])]
    return [*TRAIN, '--dataset_path', str(d/'data'), '--output_dir', out, *fast, *more]

def user_files(d, out, *names):
    "The prepared data, and the user's own files in `out`."
    tiny_prepared(d); (d/out).mkdir(parents=True, exist_ok=True)
    for n in names: (d/out/n).write_text('{"mine": true}\n' if n.endswith('.json') else 'my notes\n')
    return train_argv(d, out, opts=MIN)

def trained(d, *more):
    "The prepared data and a finished run in `m` (checkpoints in it, at steps 3 and 6), then the same command's argv."
    tiny_prepared(d)
    r = run_here(train_argv(d, 'm', *more), d)
    assert r.returncode == 0, r.stderr[-2000:]
    return train_argv(d, 'm', *more)

def reprepared(d, data=None, model=None):
    "A run in `m`, then its data folder prepared again: `data(d)` and `model(d)` make the other csv or model."
    argv = trained(d)
    tiny_prepared(d, data=data and data(d), model=model and model(d))
    return argv

def other_tokenizer(d): return tiny_bert(d/'tiny-other', WORDS + ['extra', 'words'])   # a vocabulary that covers the texts, and differs
def other_labels(d): return reprepared(d, data=lambda d: tiny_csv(d, 'reviews.csv', labels=('neg', 'pos')))
def other_rows(d): return reprepared(d, data=lambda d: tiny_csv(d, 'more.csv', n=72))
def other_tok(d): return reprepared(d, model=other_tokenizer)

def metrics(d, out='m'): return json.loads((d/out/'metrics.json').read_text())

def collapsed(words):
    def check(d, r):
        line = [l for l in r.stderr.splitlines() if 'no better than always predicting the majority label' in l]
        assert len(line) == 1 and words in line[0] and (words != 'lower it' or 'raise' not in line[0]), r.stderr[-1500:]
        assert line[0] in metrics(d)['warnings'] and 'mcc' in metrics(d)[metrics(d)['final_split']]
    return check

def real_epochs(d, r):
    begin = next(e for e in map(read_progress, r.stdout.splitlines()) if e and e['event'] == 'begin')
    assert begin['max_steps'] == 2 and 0 < begin['epochs'] < 1, begin

def recorded_model(d, r):
    rec = json.loads((d/'m'/'trn_tutorials.json').read_text())
    assert rec['kind'] == 'model' and rec['data']['dataset_path'] == str(d/'data') and rec['data']['fingerprint']['label_names'], rec

STEP = r'"event": "step", "step": ([4-9]|\d\d)'   # a progress line after the first checkpoint (step 3) was sealed
# (step lines come at most every 0.5 s, so a busy machine may already be past the second, step 6: either is kept)

CASES = [
    # ---- owned folders: train writes only a new, empty or own model folder, never nested in or around the data
    Case('owned folders', "output_dir holds the user's config.json", lambda d: user_files(d, 'm', 'config.json'),
         ['holds files trn-tutorials did not write', 'config.json']),
    Case('owned folders', "output_dir holds the user's metrics.json and train.log", lambda d: user_files(d, 'm', 'metrics.json', 'train.log'),
         ['holds files trn-tutorials did not write', 'metrics.json']),
    Case('owned folders', 'output_dir is the parent of the dataset', lambda d: (tiny_prepared(d), train_argv(d, '.', opts=MIN))[1],
         ['holds the prepared data folder', 'never nest', f'--output_dir ']),
    Case('owned folders', 'output_dir inside the dataset', lambda d: (tiny_prepared(d), train_argv(d, 'data/model', opts=MIN))[1],
         ['is inside the prepared data folder']),
    Case('owned folders', 'output_dir is another prepared data folder', lambda d: (tiny_prepared(d), tiny_prepared(d, dataset_path='other'),
         train_argv(d, 'other', opts=MIN))[2], ['is prepared data', 'not a model folder']),
    Case('owned folders', 'output_dir inside another model folder', lambda d: (tiny_prepared(d), write_record(d/'m', {'kind': 'model'}),
         train_argv(d, 'm/run2', opts=MIN))[2], ['lies inside', 'a model folder', 'pass another --output_dir, outside it']),
    # ---- resume: a checkpoint continues only on the data and options it was made with
    Case('resume', 'data prepared again with other labels', other_labels, ['was trained on other data', 'labels were anger, joy, sadness; now neg, pos']),
    Case('resume', 'data prepared again with more rows', other_rows, ['was trained on other data', 'rows were']),
    Case('resume', 'data prepared again with another tokenizer', other_tok, ['was trained on other data', 'the tokenizer differs']),
    Case('resume', 'resumed with another learning rate', lambda d: trained(d) + ['--learning_rate', '1e-4'],
         ['written by a run with --learning_rate 5e-05', 'use --learning_rate 5e-05 to continue it']),
    Case('resume', '--no_resume over checkpoints', lambda d: trained(d) + ['--no_resume'], ['holds checkpoints', '--resume true']),
    # ---- looks valid: status 0, but the run learned nothing: said on stderr and in metrics.json, in the right direction
    Case('looks valid', 'learning rate 5 for 5e-5', lambda d: (tiny_prepared(d), train_argv(d, 'm', '--learning_rate', '5'))[1], [],
         status=0, check=lambda d, r: (collapsed('lower it (e.g. --learning_rate 5e-05)')(d, r), recorded_model(d, r))),
    Case('looks valid', '--max_steps ends the run before the epochs', lambda d: (tiny_prepared(d), train_argv(d, 'm', '--max_steps', '2',
         '--num_train_epochs', '3'))[1], [], status=0, env={PROGRESS_ENV: '1'}, check=real_epochs),
    # ---- no traceback: Ctrl-C says what was kept and the command that continues (followed: it must finish)
    Case('no traceback', 'Ctrl-C after a checkpoint', lambda d: (tiny_prepared(d), train_argv(d, 'm', '--max_steps', '30'))[1],
         ['interrupted: kept', '/m/checkpoint-', 'the newest complete checkpoint'], status=130, interrupt=STEP, env={PROGRESS_ENV: '1', **VENV}),
    Case('no traceback', 'Ctrl-C before any checkpoint', lambda d: (tiny_prepared(d), train_argv(d, 'm', '--max_steps', '30', '--save_steps', '100'))[1],
         ['interrupted: no checkpoint was kept'], status=130, interrupt=r'"event": "step", "step": [2-9]', env={PROGRESS_ENV: '1', **VENV}),
    # ---- safe fixes: what the message suggests works as printed and keeps the user's files
    Case('safe fixes', 'a model whose tokenizer differs from the data', lambda d: (tiny_prepared(d), train_argv(d, 'm', '--model_id',
         other_tokenizer(d)))[1], ['was prepared with the tokenizer of', '`trn-tutorials prep --dataset_path']),
    Case('safe fixes', 'a batch larger than the training split', lambda d: (tiny_prepared(d), train_argv(d, 'm', '--per_device_train_batch_size', '500'))[1],
         ['more than the', 'use --per_device_train_batch_size']),
]

test_careless = make_test(CASES)
