"Issue 23, the training script: owned folders, resume onto the same data, a collapse said where it is seen, no traceback."
import errno, json, os, re, shutil, signal, subprocess, sys, time
from pathlib import Path

import pytest

from careless import ctrl_c_default
from trn_tutorials.core import UsageError, parse_args
from trn_tutorials.models import tiny_bert
from trn_tutorials.data_files import EMOTION_LABELS, load_raw, sample_data
from trn_tutorials.data import DataArguments, prepare
from trn_tutorials.train import ERROR_PREFIX, check_output_dir, check_space
from trn_tutorials.progress import (PROGRESS_ENV, classification_metrics, collapse_warning, majority_baseline,
                                    read_progress)
from trn_tutorials.arguments import TrainArguments

ENV = dict(os.environ, HF_HUB_OFFLINE='1')
PY = [sys.executable, '-m', 'trn_tutorials.train']


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    "A tiny BERT and the sample prepared with it."
    tmp = tmp_path_factory.mktemp('ring2')
    words = sorted({w for split in load_raw(sample_data()).values() for t in split['text'] for w in t.split()})
    a = tiny_bert(tmp/'tiny-a', words, labels=EMOTION_LABELS)
    prepare(DataArguments(data=sample_data(), model_id=a, dataset_path=str(tmp/'data')))
    return tmp, a


def run(tmp, *opts, env=None):
    return subprocess.run([*PY, *opts], capture_output=True, text=True, env=ENV | (env or {}), cwd=tmp, timeout=600)


def one_line(r, code=2):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code and len(lines) == 1 and 'Traceback' not in r.stderr, r.stderr[-3000:]
    return lines[0]


def test_matthews_correlation_beside_accuracy_and_f1():
    m = classification_metrics([0, 0, 1, 1], [0, 0, 1, 0], ['neg', 'pos'])
    assert m['mcc'] == pytest.approx(0.5774, abs=1e-4)
    assert majority_baseline([0, 0, 1], [0, 1, 1], ['neg', 'pos'])['mcc'] == 0.0


def test_no_resume_help_is_its_own(capsys):
    with pytest.raises(SystemExit): parse_args([TrainArguments], ['--help'], prog='trn_tutorials.train')
    out = capsys.readouterr().out
    yes, no = out.split('options:')[1].split('--resume [RESUME]')[1].split('--no_resume, --no-resume')
    no = no.split('--backend')[0]
    assert 'continue from the newest' in ' '.join(yes.split()) and 'start' in no and 'continue from the newest' not in ' '.join(no.split()), out


@pytest.mark.parametrize('lr, bf16, words', [(5.0, False, 'lower it (e.g. --learning_rate 5e-05)'), (50.0, False, 'lower it'),
                                             (1e-9, False, 'raise it (e.g. --learning_rate 5e-05)'), (5e-5, True, '--bf16 false')])
def test_collapse_names_the_right_direction(lr, bf16, words):
    m = {'final_split': 'test', 'test': {'accuracy': 0.1667, 'f1': 0.05}, 'baseline': {'label': 'sadness', 'accuracy': 0.1667},
         'beats_baseline': False, 'args': {'learning_rate': lr, 'bf16': bf16}}
    w = collapse_warning(m)
    assert w.startswith('warning: ') and '\n' not in w and words in w and 'majority' in w, w
    if lr > 1: assert 'raise' not in w
    assert collapse_warning(m | {'beats_baseline': True}) is None


def test_output_dir_and_data_never_nest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for out, words in (('runs', 'holds the prepared data folder'), ('.', 'holds the prepared data folder'),
                       ('runs/data', 'is the prepared data folder'), ('runs/data/m', 'inside the prepared data folder')):
        with pytest.raises(UsageError, match=words) as e: check_output_dir(TrainArguments(dataset_path='runs/data', output_dir=out))
        assert f"--output_dir {tmp_path/'runs'/'data-model'}" in str(e.value), e.value
    assert list(tmp_path.iterdir()) == []


def test_free_space_checked_first(tiny, monkeypatch):
    tmp, a = tiny
    args = TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'space'), model_id=a)
    assert check_space(args) is None
    monkeypatch.setattr(shutil, 'disk_usage', lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(UsageError, match=r'the disk holding .*space has 1.0 kB free, and this run writes about [\d.]+ [kMG]B'): check_space(args)


def test_a_collapsed_run_says_so_on_stderr_and_in_metrics(tiny):
    "lr 5 for 5e-5: the tiny BERT predicts one class; stderr and metrics['warnings'] say lower the rate; begin shows the real epochs."
    tmp, a = tiny
    r = run(tmp, '--dataset_path', 'data', '--output_dir', 'lr5', '--learning_rate', '5', '--max_steps', '3', '--save_steps', '0',
            env={PROGRESS_ENV: '1'})
    w = one_line(r, 0)
    assert 'no better than always predicting' in w and '--learning_rate 5e-05' in w and 'raise' not in w, w
    m = json.loads((tmp/'lr5'/'metrics.json').read_text())
    assert w in m['warnings'] and 'mcc' in m['test'] and 'Matthews' in r.stdout
    begin = next(p for p in map(read_progress, r.stdout.splitlines()) if p and p['event'] == 'begin')
    assert begin['max_steps'] == 3 and 0 < begin['epochs'] < 1, begin   # 3 steps of 23 per epoch, not the 3 epochs configured
    assert not [p for p in (tmp/'lr5').iterdir() if '.tmp' in p.name]


def test_a_full_disk_is_one_line(tiny, monkeypatch, capsys):
    "ENOSPC while writing: one line naming the disk, what was kept and the fix; status 2."
    tmp, a = tiny
    import trn_tutorials.train as T
    def full(*a, **kw): raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(T, 'save_plots', full)
    monkeypatch.delenv('RANK', raising=False); monkeypatch.delenv('WORLD_SIZE', raising=False)
    with pytest.raises(SystemExit) as e:
        T.main(['--dataset_path', str(tmp/'data'), '--output_dir', str(tmp/'full'), '--max_steps', '2', '--save_steps', '0', '--backend', 'cpu'])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith(ERROR_PREFIX + f"the disk holding {tmp/'full'} is full"), err
    assert 'no checkpoint' in err[0] and 'free space' in err[0]


def test_ctrl_c_is_one_line(tiny):
    tmp, a = tiny
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


def test_resume_refuses_data_prepared_again_with_other_labels(tiny):
    "The checkpoint remembers its data's fingerprint: re-prepared with other labels, the run is refused, naming them; the fix runs."
    tmp, a = tiny
    prepare(DataArguments(data=sample_data(), model_id=a, dataset_path=str(tmp/'d2')))
    opts = ['--dataset_path', 'd2', '--output_dir', 'r', '--max_steps', '4', '--save_steps', '2', '--logging_steps', '2']
    assert run(tmp, *opts).returncode == 0
    assert json.loads((tmp/'r'/'checkpoint-4'/'trn_tutorials_args.json').read_text())['data']['label_names'] == EMOTION_LABELS
    rec = json.loads((tmp/'r'/'trn_tutorials.json').read_text())
    assert rec['kind'] == 'model' and rec['options']['dataset_path'] == str(tmp/'d2') and rec['data']['fingerprint']['label_names'] == EMOTION_LABELS
    csv = tmp/'pos.csv'
    ws = sorted({w for t in load_raw(sample_data())['train']['text'] for w in t.split() if w.isalpha() and w.islower()})   # words tiny-a knows
    csv.write_text('text,label\n' + ''.join(f"{ws[i % len(ws)]} {ws[(7 * i) % len(ws)]},{'pos' if i % 2 else 'neg'}\n" for i in range(96)))
    prepare(DataArguments(data=str(csv), model_id=a, dataset_path=str(tmp/'d2')))
    line = one_line(run(tmp, *opts))
    assert 'was trained on other data than d2 holds now (labels were sadness, joy, love, anger, fear, surprise; now ' in line, line
    assert line.endswith(f"pass another --output_dir, e.g. --output_dir {tmp/'r-2'} to start over"), line
    assert run(tmp, *opts[:3], str(tmp/'r-2'), *opts[4:]).returncode == 0


@pytest.mark.parametrize('names', [['config.json'], ['metrics.json', 'notes.txt'], ['train.log']])
def test_output_dir_with_the_users_files_is_refused(tiny, names):
    tmp, a = tiny
    out = tmp/f"mine-{names[0]}"; out.mkdir()
    for n in names: (out/n).write_text('mine')
    line = one_line(run(tmp, '--dataset_path', 'data', '--output_dir', str(out), '--max_steps', '1', '--save_steps', '0'))
    assert 'holds files trn-tutorials did not write' in line and names[0] in line, line
    assert sorted(p.name for p in out.iterdir()) == sorted(names) and all((out/n).read_text() == 'mine' for n in names)


def test_the_torchrun_fix_is_a_complete_command(tmp_path, monkeypatch):
    "Outside torchrun on a NeuronCore: the command printed is the run's own, paths in full, not a sketch with '...'."
    from trn_tutorials.train import check_torchrun
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as e:
        check_torchrun('neuron', env={}, args=TrainArguments(dataset_path='d', learning_rate=3e-5, bf16=True, backend='neuron'))
    assert str(e.value).endswith(f"`torchrun --nproc_per_node 1 -m trn_tutorials.train --dataset_path {tmp_path/'d'} "   # both folders, in full
                                 f"--output_dir {tmp_path/'runs'/'emotion-model'} --learning_rate 3e-05 --bf16 true --backend neuron`"), e.value
    with pytest.raises(UsageError) as e: check_torchrun('neuron', env={}, args=['--output_dir=m', '--epochs', '2'])
    assert f"`torchrun --nproc_per_node 1 -m trn_tutorials.train --output_dir={tmp_path/'m'} --epochs 2`" in str(e.value)
