"""Checks of `trn_tutorials.core.options`: one-line errors and parsing, numbers checked at construction (`Limit`, `check_numbers`),
one declaration per option (`field_help`, `documented`, `arguments_of`), folders checked before anything is written
(`check_folder`), one run per folder (`folder_lock`, with real processes), and the records that say who wrote a folder
(`folder_record`). The chapter (nbs/reference/90_core.ipynb) shows each function once; these pin it down."""
from __future__ import annotations
import json, math, os, signal, subprocess, sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pytest

from local_services import freeze, unfreeze
from trn_tutorials.core.folders import RECORD, check_folder, folder_lock, folder_record, lock_holder, lock_path
from trn_tutorials.reader import STOP
from trn_tutorials.core.options import (Limit, UsageError, arguments_of, check_number, check_numbers, documented, field_help,
                                        given_options, parse_args)


@dataclass
class _Prep: model_id: str = 'bert-base-uncased'; length: int = 64

@dataclass
class _Fit: model_id: str = 'bert-base-uncased'; bf16: bool = False; lr: float = 5e-5


def test_usage_error_is_a_value_error_with_its_message():
    with pytest.raises(UsageError, match="check the path"): raise UsageError("no such file: x.csv (check the path)")
    assert issubclass(UsageError, ValueError)


def test_parse_args_shared_field_types_and_errors(capsys):
    prep, fit = parse_args([_Prep, _Fit], ['--model_id', 'my-bert', '--bf16', 'false', '--lr', '1e-4'])
    assert (prep.model_id, fit.model_id, fit.bf16, fit.lr) == ('my-bert', 'my-bert', False, 1e-4)
    assert parse_args([_Fit], ['--bf16'])[0].bf16 is True
    with pytest.raises(SystemExit): parse_args([_Fit], ['--lr', 'fast'], prog='fit')
    assert capsys.readouterr().err == "fit: error: argument --lr: invalid float value: 'fast' (see --help)\n"
    with pytest.raises(SystemExit): parse_args([_Fit], ['--learning-rate', '1e-4'], prog='fit')
    assert 'unrecognized arguments: --learning-rate 1e-4 (see --help)' in capsys.readouterr().err


@pytest.mark.parametrize('argv,given', [
    ([], set()),
    (['--lr', '1e-4'], {'lr'}),
    (['--lr=1e-4', '--model_id', 'x'], {'lr', 'model_id'}),
    (['--bf', 'true'], {'bf16'}),            # a unique prefix: the string says `bf`, the parser says `bf16`
    (['--bf16'], {'bf16'}),                   # a flag without a value
    (['--lr', '5e-5'], {'lr'}),               # given, even with the default's value
])
def test_given_options_reads_what_the_parser_read(argv, given):
    assert given_options([_Prep, _Fit], argv) == given


def test_given_options_no_flag_and_errors():
    @dataclass
    class _R: resume: bool = True
    assert given_options([_R], ['--no_resume']) == {'resume'}
    with pytest.raises(SystemExit): given_options([_Fit], ['--lr', 'fast'])


# ----------------------------------------------------------------------------------------------------
# Issue 15, core: numbers checked at construction (`Limit`, `check_number`, `check_numbers`), folders checked before
# anything is written (`check_folder`), and one run per folder (`folder_lock`), with real processes for the lock.
# (was test_core_checks.py)

@dataclass
class Args:
    lr: float = 5e-5
    epochs: float = 3.0
    max_steps: int = -1
    length: int|None = None
    name: str = 'x'
    def __post_init__(self):
        check_numbers(self, {'lr': Limit(0, 1, lo_open=True, example=5e-5), 'max_steps': Limit(1, special=((-1, 'all epochs'),)),
                             'length': Limit(8, example=128)})


def test_limit_words():
    assert Limit(0, 1, lo_open=True).describe() == 'a number in (0, 1]'
    assert Limit(0, 1, hi_open=True).describe() == 'a number in [0, 1)'
    assert Limit(1, 8).describe() == '1 to 8'
    assert Limit(8).describe() == '8 or more' and Limit(0, lo_open=True).describe() == 'more than 0'
    assert Limit(hi=100).describe() == '100 or less'
    assert Limit(1, special=((-1, 'all epochs'),)).describe() == '1 or more, or -1 (all epochs)'
    assert Limit(1, special=((-1, 'all'),)).allows(-1) and not Limit(1).allows(0) and not Limit(0, lo_open=True).allows(0)


@pytest.mark.parametrize('kw, words', [
    ({'lr': float('nan')}, '--lr nan is not a finite number'), ({'lr': float('inf')}, '--lr inf is not a finite number'),
    ({'epochs': -math.inf}, '--epochs -inf is not a finite number'), ({'lr': '5e-5'}, "--lr '5e-5' is a str, not a number"),
    ({'lr': True}, '--lr True is a bool, not a number'), ({'max_steps': 2.0}, '--max_steps 2.0 is a float, not a whole number'),
    ({'max_steps': 0}, '--max_steps 0 is out of range: use 1 or more, or -1 (all epochs)'), ({'lr': 0}, '--lr 0 is out of range'),
    ({'length': 4}, '--length 4 is out of range: use 8 or more (e.g. --length 128)'), ({'max_steps': None}, '--max_steps None is missing'),
])
def test_bad_numbers_are_refused_at_construction(kw, words):
    with pytest.raises(UsageError) as e: Args(**kw)
    msg = str(e.value)
    assert words in msg and '\n' not in msg and ('pass ' in msg or 'use ' in msg), msg


def test_good_numbers_pass_and_ints_become_floats():
    a = Args(lr=np.float32(1e-3), epochs=2, max_steps=np.int64(5), length=None)
    assert a.epochs == 2.0 and isinstance(a.epochs, float) and a.max_steps == 5
    @dataclass(frozen=True)
    class F:
        x: float = 1.0
        def __post_init__(self): check_numbers(self, {})
    assert isinstance(F(x=3).x, float)
    assert check_number('steps', 3, int, Limit(1)) == 3


def test_parse_args_turns_a_refusal_into_one_line(capsys):
    with pytest.raises(SystemExit) as e: parse_args([Args], ['--lr', 'nan'], prog='fit')
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == 'fit: error: --lr nan is not a finite number: pass a number (e.g. --lr 5e-05) (see --help)'
    assert parse_args([Args], ['--lr', '1e-3', '--epochs', '2'])[0].epochs == 2.0


def test_check_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path('notes.txt').write_text('mine')
    for bad, words in [('', '--output_dir is empty'), ('  ', '--output_dir is empty'), (None, '--output_dir is empty'),
                       ('notes.txt', 'notes.txt is a file, not a folder'), ('notes.txt/a/b', 'lies under the file notes.txt')]:
        with pytest.raises(UsageError, match=words): check_folder(bad, 'output_dir')
    assert check_folder('runs/a/b', 'output_dir') == Path('runs/a/b')
    assert sorted(p.name for p in tmp_path.rglob('*')) == ['notes.txt'], 'the check created nothing'


def test_check_folder_not_writable(tmp_path):
    "A folder this process cannot write to (as root: an immutable folder, since permission bits do not stop root)."
    d = tmp_path/'mine'; d.mkdir()
    if not freeze(d): pytest.skip('cannot make a folder unwritable here')
    try:
        for target in (d, d/'run'):
            with pytest.raises(UsageError) as e: check_folder(target, 'output_dir')
            msg = str(e.value)
            assert f'--output_dir {target} is not writable (' in msg and f'at {d}): pass a folder you can write to' in msg, msg
        assert list(d.iterdir()) == []
    finally: unfreeze(d)


HOLD = """import sys, time
from trn_tutorials.core.folders import folder_lock
with folder_lock(sys.argv[1], 'output_dir', root=12345) as lock:
    print('held', flush=True); time.sleep(float(sys.argv[2]))
"""

def _holder(folder, seconds=60) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, '-c', HOLD, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == 'held'
    return p


def test_lock_refuses_a_second_run_and_names_the_first(tmp_path):
    folder = tmp_path/'runs'/'model'
    p = _holder(folder)
    try:
        rec = lock_holder(folder)
        assert rec['pid'] == p.pid and rec['root'] == 12345 and rec['command'].startswith('`-c ')
        with pytest.raises(UsageError) as e:
            with folder_lock(folder, 'output_dir', STOP): pass
        msg = str(e.value)
        assert f'is in use by pid {p.pid} (`-c' in msg and f'trn-tutorials stop --output_dir {folder}' in msg and '\n' not in msg, msg
        with pytest.raises(UsageError) as e:
            with folder_lock(folder, 'output_dir'): pass   # no command named: the base knows none
        assert 'stop it' not in str(e.value) and 'wait for it to finish, or pass another --output_dir' in str(e.value), e.value
    finally: p.kill(); p.wait()


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path):
    folder = tmp_path/'model'
    p = _holder(folder)
    p.send_signal(signal.SIGKILL); p.wait()
    assert lock_path(folder).exists() and lock_holder(folder) is None, 'the file stays, the lock went with the process'
    with folder_lock(folder, 'output_dir') as lock:
        assert lock['stale']['pid'] == p.pid and lock_holder(folder)['pid'] == os.getpid()
    assert not lock_path(folder).exists(), 'released: the lock file is removed'


def test_only_one_of_many_racing_runs_gets_the_lock(tmp_path):
    "Eight processes take and release the lock as fast as they can; at no moment do two hold it."
    code = """import json, os, sys, time
from trn_tutorials.core.folders import folder_lock; from trn_tutorials.core.options import UsageError
got, refused, log = 0, 0, sys.argv[2]
t = time.time()
while time.time() - t < 3:
    try:
        with folder_lock(sys.argv[1], 'output_dir'):
            with open(log, 'a') as f: f.write(f'+{os.getpid()}\\n')
            time.sleep(0.002)
            with open(log, 'a') as f: f.write(f'-{os.getpid()}\\n')
            got += 1
    except UsageError: refused += 1
print(json.dumps([got, refused]))
"""
    log = tmp_path/'log'
    ps = [subprocess.Popen([sys.executable, '-c', code, str(tmp_path/'m'), str(log)], stdout=subprocess.PIPE, text=True) for _ in range(8)]
    counts = [json.loads(p.communicate()[0]) for p in ps]
    assert sum(c[0] for c in counts) > 20 and sum(c[1] for c in counts) > 0, counts
    held = None
    for line in log.read_text().split():
        if line[0] == '+': assert held is None, f'{line[1:]} took the lock while {held} held it'; held = line[1:]
        else: assert held == line[1:]; held = None


# ----------------------------------------------------------------------------------------------------
# One declaration per option: inline comments are the help of --help, of help() and of the docs page; `arguments_of` builds options from a function.
# (was test_core_options.py)

@documented
@dataclass
class _Opts:
    "Options for a test."
    steps: int = 10 # optimizer steps
    # a comment above the field is its help too
    rate: float = 0.5
    name: str = field(default='x', metadata={'help': 'from metadata'})
    plain: bool = False


def _fn(steps:int=3, # how many steps; 100% of them
        names:list[str]=[], # texts to read
        label:str|None=None, # an optional label
        **kw):
    "Run `steps` steps."
    return steps, names, label, kw


def _to(a:int=1, # passed on through **kw
        b:str='b'): pass


def test_field_help_reads_comments_and_metadata():
    assert field_help(_Opts) == {'steps': 'optimizer steps', 'rate': 'a comment above the field is its help too', 'name': 'from metadata', 'plain': None}


def test_documented_puts_the_help_where_show_doc_reads_it():
    from fastcore.docments import docments
    assert docments(_Opts)['steps'] == 'optimizer steps'
    assert _Opts.__doc__.startswith('Options for a test.')


def test_help_text_has_each_comment(capsys):
    with pytest.raises(SystemExit): parse_args([_Opts], ['--help'], prog='t')
    out = ' '.join(capsys.readouterr().out.split())
    assert 'optimizer steps' in out and 'a comment above the field is its help too' in out


def test_arguments_of_a_function():
    A = arguments_of(_fn, {'steps': Limit(1, example=3)}, to=_to, name='RunArguments')
    assert A.__name__ == 'RunArguments' and A.__module__ == __name__
    assert field_help(A) == {'steps': 'how many steps; 100% of them', 'names': 'texts to read', 'label': 'an optional label', 'a': 'passed on through **kw', 'b': None}
    a, = parse_args([A], ['--steps', '5', '--names', 'x', 'y', '--a', '2'])
    assert _fn(**asdict(a)) == (5, ['x', 'y'], None, {'a': 2, 'b': 'b'})
    assert A().names == [] and A().names is not A().names
    with pytest.raises(UsageError, match='--steps 0 is out of range'): A(steps=0)
    with pytest.raises(SystemExit): parse_args([A], ['--help'])   # a '%' in a comment does not break --help


# ----------------------------------------------------------------------------------------------------
# Issue 23: folders the package writes carry a record (which folder a run may write, `check_owner`, is the reader's:
# tests/test_reader_folder.py). `check_numbers` types text, lists and flags, and expands `~` once.
# (was test_records.py)

def test_old_manifests_and_model_folders_are_recognised(tmp_path):
    (tmp_path/'d').mkdir(); (tmp_path/'d'/RECORD).write_text(json.dumps({'label_names': ['a', 'b'], 'rows': {}}))
    assert folder_record(tmp_path/'d')['kind'] == 'prepared data'
    (tmp_path/'m').mkdir(); (tmp_path/'m'/'metrics.json').write_text(json.dumps({'args': {}, 'label_names': [], 'backend': 'cpu'}))
    assert folder_record(tmp_path/'m')['kind'] == 'model'
    (tmp_path/'u').mkdir(); (tmp_path/'u'/'metrics.json').write_text('{"f1": 0.9}')   # the user's own
    assert folder_record(tmp_path/'u') is None

@dataclass
class _A:
    output_dir: str = 'runs/x'
    names: list[str]|None = None
    flag: bool = False
    def __post_init__(self): check_numbers(self, {})

def test_types_and_tilde():
    assert _A(output_dir='~/runs/x').output_dir == os.path.expanduser('~/runs/x')
    assert _A(output_dir=Path('a/b')).output_dir == 'a/b'
    assert _A(names='text').names == ['text']
    for bad, words in (({'output_dir': 3}, "--output_dir 3 is an int, not text"), ({'names': [1]}, '--names 1 is an int'),
                       ({'flag': 'false'}, "--flag 'false' is a str, not true or false"), ({'output_dir': None}, 'is missing')):
        with pytest.raises(UsageError, match=words): _A(**bad)

def test_a_run_interrupted_before_records_is_recognised(tmp_path):
    (tmp_path/'m'/'checkpoint-4').mkdir(parents=True); (tmp_path/'m'/'checkpoint-4'/'trn_tutorials_complete.json').write_text('{}')
    assert folder_record(tmp_path/'m') == {'kind': 'model'}
    (tmp_path/'u'/'checkpoint-4').mkdir(parents=True); (tmp_path/'u'/'checkpoint-4'/'config.json').write_text('{}')   # someone else's
    assert folder_record(tmp_path/'u') is None
