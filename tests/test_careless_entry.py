"""Issue 23, part 5, at every entry point: a quoted `~` is expanded once, where arguments are made (the launcher and the
workers then agree), and wrong types in the Python API are refused in one line. Every case runs in this process through the
command's entry (careless' `run_here`; `trn-tutorials train` still starts torchrun and its worker); a run is the smallest
training (careless' `MIN`: one step): the cases are about paths, not training."""
from pathlib import Path

from careless import MIN, Case, make_test, shared_data, tiny_csv, tiny_model
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.training.launch import launch
from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.training.train import train

HOME = {'HOME': '{d}/home'}   # the case folder's own home: `~` must land there, never in a literal `./~`

def home(d:Path) -> Path:
    (d/'home').mkdir(exist_ok=True); return d/'home'

def no_literal_tilde(d:Path):
    assert not any(p.name == '~' for p in d.rglob('~')), 'a literal ~ folder was made'

def landed(*parts):
    def check(d, r):
        no_literal_tilde(d)
        assert (home(d).joinpath(*parts)).exists(), f"nothing at ~/{'/'.join(parts)}: {r.stderr[-500:]}"
    return check

CASES = [
    # one run for both folders (once two runs, one a folder): a `~` left unexpanded in either fails it (no data, or a `./~`)
    Case('no traceback', 'train --dataset_path and --output_dir quoted ~', lambda d: ['train', '--dataset_path', '~/data',
         '--output_dir', '~/runs/m', *MIN] if shared_data(home(d)) else [], [], status=0, env=HOME,
         check=landed('runs', 'm', 'metrics.json')),
    Case('no traceback', 'prep --data and --dataset_path quoted ~', lambda d: ['prep', '--data', '~/tweets.csv',
         '--model_id', tiny_model(d), '--dataset_path', '~/prepared'] if tiny_csv(home(d)) else [], [],
         status=0, env=HOME, check=landed('prepared', 'trn_tutorials.json')),
    Case('no traceback', 'torchrun module --output_dir quoted ~', lambda d: (home(d), ['-m', 'trn_tutorials.training.train', '--dataset_path',
         shared_data(d), '--output_dir', '~/m', *MIN])[1], [], status=0, env=HOME, check=landed('m', 'metrics.json')),
    Case('no traceback', 'stop --output_dir quoted ~', lambda d: (home(d), ['stop', '--output_dir', '~/m'])[1], ['nothing holds'],
         status=0, env=HOME),
    # the Python API: a wrong type is refused in one line when the arguments are made, before anything runs
    Case('no traceback', 'TrainArguments output_dir as a number', lambda d: lambda: TrainArguments(output_dir=3),
         ['--output_dir 3 is an int, not text']),
    Case('no traceback', "TrainArguments bf16 as the string 'false'", lambda d: lambda: TrainArguments(bf16='false'),
         ["--bf16 'false' is a str, not true or false"]),
    Case('no traceback', 'TrainArguments resume as 0', lambda d: lambda: TrainArguments(resume=0), ['--resume 0 is an int']),
    Case('no traceback', 'DataArguments text_column as a number', lambda d: lambda: DataArguments(text_column=5),
         ['--text_column 5 is an int']),
    Case('no traceback', 'DataArguments label_names with a number', lambda d: lambda: DataArguments(label_names=['neg', 1]),
         ['--label_names 1 is an int']),
    Case('no traceback', 'prepare given a path, not DataArguments', lambda d: lambda: prepare(tiny_csv(d)),
         ['DataArguments']),
    Case('no traceback', 'train given a dict, not TrainArguments', lambda d: lambda: train({'dataset_path': 'data'}),
         ['TrainArguments']),
    Case('no traceback', 'launch given a path, not TrainArguments', lambda d: lambda: launch('runs/emotion-data'),
         ['TrainArguments']),
]

test_careless = make_test(CASES, fixtures=('prepared',))   # conftest's sample: the runs only read it
