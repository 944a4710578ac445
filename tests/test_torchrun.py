"""`trn_tutorials.training.torchrun`: process trees ended across sessions, a command's output streamed and logged line by line, a worker's
error read from its lines and from torchrun's error records; a worker's end reaches whoever started it (its failure as
torchrun's record, SIGTERM and SIGHUP as a line naming the checkpoint kept), with real torchrun runs."""
import os, re, shlex, signal, subprocess, sys, time
from pathlib import Path

import pytest
from fastcore.test import test_eq as eq

from local_services import free_port

from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.core.options import UsageError
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.sources import sample_data
from trn_tutorials.training.launch import LaunchError, launch, launch_env, torchrun_command
from trn_tutorials.training.torchrun import end_tree, failure_records, process_tree, stream, worker_error
from trn_tutorials.training.train import ERROR_PREFIX
from trn_tutorials.training.checkpoints import checkpoints
from test_train import linked

OFFLINE = ("import os\n"
           "if os.environ.get('FAIL_OFFLINE'):\n"
           "    import transformers\n"
           "    from huggingface_hub.errors import OfflineModeIsEnabled\n"
           "    def train(self, *a, **k): raise OfflineModeIsEnabled('Cannot reach https://huggingface.co/api/models/m: offline mode is enabled.')\n"
           "    transformers.Trainer.train = train\n")


def test_a_failure_named_unlike_an_error_reaches_launch_as_the_workers_record(prepared, tmp_path, monkeypatch):
    "huggingface_hub's `OfflineModeIsEnabled` ends in neither Error nor Exception: read from the log it was lost, from the record it is named."
    (tmp_path/'sitecustomize.py').write_text(OFFLINE)
    monkeypatch.setenv('PYTHONPATH', str(tmp_path)); monkeypatch.setenv('FAIL_OFFLINE', '1')
    args = TrainArguments(dataset_path=str(linked(prepared, tmp_path, 'data')/'data'), output_dir=str(tmp_path/'m'), max_steps=2, backend='cpu')
    with pytest.raises(LaunchError) as e: launch(args, nproc_per_node=1, echo=False)
    assert e.value.cause == 'OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/m: offline mode is enabled.', e.value
    assert str(e.value).endswith(f"a worker failed with {e.value.cause}") and '\n' not in str(e.value), str(e.value)


def test_failure_records_read_torchruns_error_files(prepared, tmp_path):
    "Each worker's record, first failure first: a worker's bad input comes as `UsageError` with its one line."
    logs = tmp_path/'logs'
    args = TrainArguments(dataset_path=str(linked(prepared, tmp_path, 'data')/'data'), output_dir=str(tmp_path/'m'), max_steps=2, backend='cpu',
                          per_device_train_batch_size=5000)   # refused by each worker, after torchrun started it
    env = launch_env('cpu', 2) | {'PET_LOG_DIR': str(logs)}
    r = subprocess.run(torchrun_command(args, 2), env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    recs = failure_records(logs)
    assert sorted(x['rank'] for x in recs) == [0, 1] and {x['error'] for x in recs} == {'UsageError'}, recs
    said = [l[len(ERROR_PREFIX):] for l in r.stderr.splitlines() if l.startswith(ERROR_PREFIX)]
    assert recs[0]['message'] == said[0], (recs, said)
    assert failure_records(tmp_path/'nothing-here') == []


def _tiny_run(prepared, tmp_path, name):
    args = TrainArguments(dataset_path=str(linked(prepared, tmp_path)/'data'), output_dir=str(tmp_path/name), num_train_epochs=2, learning_rate=1e-3,
                          save_steps=4, logging_steps=1, backend='cpu')
    env = launch_env('cpu', 2) | {'PET_MASTER_PORT': str(free_port())}
    return args, env


@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_to_torchrun_says_what_was_kept_and_the_command_continues(prepared, tmp_path, sig):
    "A SageMaker stop or a spot interruption sends SIGTERM to torchrun: the first worker says in one line what was kept and how to go on."
    args, env = _tiny_run(prepared, tmp_path, 'm')
    cmd = torchrun_command(args, 2)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    t0 = time.time()
    while not any(ok for _, ok in checkpoints(args.output_dir)):
        assert p.poll() is None and time.time() - t0 < 300, p.stderr.read()[-3000:] if p.poll() is not None else 'no checkpoint'
        time.sleep(0.05)
    # while it runs, its data cannot be replaced: each node's first worker holds it for reading
    with pytest.raises(UsageError, match=f"{tmp_path/'data'} is being read by pid"):
        prepare(DataArguments(data=sample_data(), model_id=str(tmp_path/'tiny-bert'), dataset_path=str(tmp_path/'data'), buckets=2))
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    ours = [l for l in err.splitlines() if l.startswith(ERROR_PREFIX)]
    assert len(ours) == 1, err[-4000:]   # the first worker speaks; the other ends as quietly
    name = signal.Signals(sig).name
    m = re.match(rf"{re.escape(ERROR_PREFIX)}stopped by {name}: kept (\S+/checkpoint-\d+), the newest complete checkpoint; run `(.+)` to continue$",
                 ours[0])
    assert m and Path(m[1]).is_dir(), ours[0]
    again = shlex.split(m[2])
    assert again[:5] == ['torchrun', '--nproc_per_node', '2', '-m', 'trn_tutorials.training.train'], again
    if sig != signal.SIGTERM: return   # the same command as SIGTERM's: followed once, there (resumed bit-exactly: tests/test_chaos.py)
    r = subprocess.run(again, env=env, capture_output=True, text=True, timeout=600)   # followed as printed: it continues
    assert r.returncode == 0, r.stderr[-3000:]
    import json
    assert json.loads((Path(args.output_dir)/'metrics.json').read_text())['train']['resumed_from'], r.stderr[-2000:]


def test_process_tree_and_stream():
    sleeper = subprocess.Popen([sys.executable, '-c', 'import subprocess, sys; subprocess.run([sys.executable, "-c", "import time; time.sleep(60)"])'])
    time.sleep(1)
    tree = process_tree(sleeper.pid)
    eq((len(tree), tree[0]), (2, sleeper.pid))
    for p in reversed(tree): os.kill(p, signal.SIGKILL)
    sleeper.wait()
    eq(stream([sys.executable, '-c', 'import sys; print("x"); sys.exit(3)'], echo=False), (3, ['x']))
    seen = []
    eq(stream([sys.executable, '-c', 'print("a"); print("b")'], echo=False, on_line=seen.append), (0, ['a', 'b']))
    eq(seen, ['a', 'b'])


def test_worker_error():
    eq(worker_error(['Traceback (most recent call last):', '  File "x.py", line 1', "OSError: no such model 'm'",
                     'torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ', 'trn_tutorials.training.train FAILED']),
       "OSError: no such model 'm'")
    eq(worker_error(['KeyboardInterrupt']), 'KeyboardInterrupt')
    eq(worker_error(['all fine', 'Error rate: 3%']), None)
    eq(str(LaunchError(1, ['a', 'b'])), 'torchrun exited with status 1: last lines:\na\nb')
    eq(str(LaunchError(1, ['torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15'])),
       'torchrun exited with status 1: stopped by signal 15 (SIGTERM); launch again with the same arguments to continue from its newest checkpoint, if it wrote one')


# a process that starts two children in sessions of their own, as torchrun starts its workers; the second ignores SIGTERM
TREE = """import signal, subprocess, sys, time
kids = [subprocess.Popen([sys.executable, '-c', c + '; print(1, flush=True); time.sleep(60)'], start_new_session=True, stdout=subprocess.PIPE)
        for c in ('import time', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN)')]
for k in kids: k.stdout.readline()   # both ready
print(' '.join(str(k.pid) for k in kids), flush=True)
time.sleep(60)
"""


def alive(pid): return Path(f'/proc/{pid}').exists() and Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z'


def test_end_tree_reaches_other_sessions_and_kills_what_ignores_sigterm():
    p = subprocess.Popen([sys.executable, '-c', TREE], stdout=subprocess.PIPE, text=True)
    kids = [int(k) for k in p.stdout.readline().split()]
    t0 = time.time()
    ended = end_tree(p.pid, timeout=1)
    eq(sorted(ended), sorted([p.pid, *kids]))
    p.wait()
    eq([q for q in ended if alive(q)], [])
    assert 1 <= time.time() - t0 < 10   # SIGKILL for the one that ignored SIGTERM, after the timeout


def test_stream_ends_with_a_killed_launcher(tmp_path):
    "`die_with_parent` as `preexec_fn`: kill -9 of the process running `stream` takes its command down (a dead kernel, a closed terminal)."
    pidfile = tmp_path/'pid'
    launcher = subprocess.Popen([sys.executable, '-c', f"""
import sys
from trn_tutorials.core.processes import die_with_parent
from trn_tutorials.training.torchrun import stream
stream([sys.executable, '-c', 'import time; time.sleep(60)'], preexec_fn=die_with_parent,
       on_start=lambda p: open({str(pidfile)!r}, 'w').write(str(p.pid)))
"""])
    while not pidfile.exists() or not pidfile.read_text(): time.sleep(0.05)
    child = int(pidfile.read_text())
    assert alive(child)
    os.kill(launcher.pid, signal.SIGKILL); launcher.wait()
    t0 = time.time()
    while alive(child) and time.time() - t0 < 5: time.sleep(0.05)
    assert not alive(child)


def test_log_is_written_line_by_line(tmp_path):
    "`tail -f train.log` shows a live run as it goes: each line is in the file before the next one is printed."
    import threading
    log = tmp_path/'train.log'
    cmd = [sys.executable, '-c', 'import sys, time; print("first", flush=True); time.sleep(4); print("second")']
    t = threading.Thread(target=stream, args=(cmd,), kwargs={'log': log, 'echo': False}); t.start()
    deadline, seen = time.time() + 3, ''
    while time.time() < deadline and 'first' not in seen:
        seen = log.read_text() if log.exists() else ''; time.sleep(0.1)
    t.join()
    assert 'first' in seen and 'second' not in seen, seen
