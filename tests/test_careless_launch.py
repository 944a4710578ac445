"""Issue 23 where it lands in launching and the CLI: quickstart keeps the user's prepared data, a failed retrain keeps the last
metrics, Ctrl-C ends in one line saying what was kept and the command that goes on, messages true to the state (which
checkpoint a relaunch continues from, or none), and a log that a person can follow while the run is live.

What runs where (careless.py): the refusals, the runs that must work and every fix followed run in this process (torchrun and
its worker are still real processes); the runs that a signal or a `stop` ends are processes of their own. A fix that is a
fresh run trains one step (`MIN`), and one fix is followed once: the four refusals of `keep_user_data` print the same
`--dataset_path runs/quickstart-data`, run once (`CSV`; the others assert theirs is that command); Ctrl-C during quickstart's
prep leaves nothing, so its rerun is a first quickstart (that run) after a first prep's Ctrl-C (`Ctrl-C during a first prep`,
followed). A continue after a stop signal is followed once, after Ctrl-C (`Ctrl-C during the torchrun run`); the same continue
after SIGTERM to the launcher and after `trn-tutorials stop` is not followed again: the continue after SIGTERM is followed in
tests/test_torchrun.py, and a relaunch's bit-exact continue after a kill at any moment in tests/test_chaos.py."""
import json, shutil, signal, threading, time
from pathlib import Path

from careless import FAST, MIN, Case, make_test, tiny_csv, tiny_model, tiny_prepared
from trn_tutorials.core.folders import RECORD, lock_holder
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.training.launch import stop
from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.training.checkpoints import checkpoints
from trn_tutorials.training.preflight import claim_output_dir

EPOCHS = '4'   # 24 steps, a checkpoint every 3: the step a Ctrl-C or a stop lands on is far from the end, and the fix that goes on is short
LONG = [*FAST, '--num_train_epochs', EPOCHS]   # a run long enough to be interrupted on the way (seconds, on the tiny fixtures)
STEP = r'training:.*\| *[1-9]\d*/\d+ '   # the progress bar once a step is done


def quick(d:Path, data:str, *more, opts=MIN) -> list:
    "quickstart on `data` with the tiny model, into the default --dataset_path (runs/emotion-data); `opts`: the training (one step)."
    return ['quickstart', '--data', data, '--model_id', tiny_model(d), '--output_dir', 'model', *opts, *more]

def mine(d:Path, data:str, **kw) -> str:
    "The user's own data, prepared by `prep` into quickstart's default folder."
    return tiny_prepared(d, data=data, dataset_path='runs/emotion-data', **kw)

def parquet(d:Path) -> str:
    import datasets
    p = d/'mine.parquet'
    datasets.Dataset.from_csv(tiny_csv(d, 'mine-src.csv', labels=('joy', 'anger'))).to_parquet(str(p))
    (d/'mine-src.csv').unlink()
    return str(p)

def older(d:Path, keep_data:bool) -> Path:
    "The user's data prepared by an older trn-tutorials: a manifest with no kind and no options (and, older still, no data)."
    p = Path(mine(d, tiny_csv(d, 'mine.csv', labels=('joy', 'anger'))))
    rec = json.loads((p/RECORD).read_text())
    for k in ('kind', 'options', 'content_sha256') + (() if keep_data else ('data',)): rec.pop(k, None)
    (p/RECORD).write_text(json.dumps(rec))
    return p

def other_files(d:Path) -> Path:
    p = d/'runs'/'emotion-data'; p.mkdir(parents=True)
    (p/'notes.txt').write_text('my notes\n'); return p

def has_metrics(d, r): assert (d/'model'/'metrics.json').exists(), r.stderr[-800:]


# a failed retrain: the last run's metrics.json stays until a run writes its own
OLD = '{"final_split": "validation", "note": "the last run\'s metrics"}'

def retrain(d:Path) -> list:
    data = tiny_prepared(d)
    args = TrainArguments(dataset_path=data, output_dir=str(d/'model'))
    claim_output_dir(args, load_prepared(data)); (d/'model'/'metrics.json').write_text(OLD)
    shutil.copytree(d/'tiny-model', d/'new-model'); (d/'new-model'/'model.safetensors').rename(d/'weights.safetensors')
    return ['train', '--dataset_path', data, '--output_dir', 'model', '--model_id', str(d/'new-model'), *MIN]

def weights_back(d:Path):
    assert (d/'model'/'metrics.json').read_text() == OLD, 'the failed retrain lost the last run\'s metrics.json'
    shutil.copy(d/'weights.safetensors', d/'new-model'/'model.safetensors')


# `trn-tutorials stop` from another terminal: before the first checkpoint, or after one
def stop_when(d:Path, checkpoint:bool):
    def watch():
        t0 = time.time()
        while time.time() - t0 < 1500:
            rec = lock_holder(d/'model')
            if rec and rec.get('root') and (not checkpoint or any(ok for _, ok in checkpoints(d/'model'))):
                stop(str(d/'model')); return
            time.sleep(0.05)
    threading.Thread(target=watch, daemon=True).start()

def stopped(d:Path, checkpoint:bool) -> list:
    "A run that `stop` ends (before any checkpoint: as soon as torchrun is up, so one epoch is plenty)."
    argv = ['train', '--dataset_path', tiny_prepared(d), '--output_dir', 'model', *(LONG if checkpoint else FAST), '--save_steps', '3' if checkpoint else '1000']
    stop_when(d, checkpoint)
    return argv


# `tail -f train.log` while the run is live: what the log held while the lock was held
LIVE: dict = {}

def live(d:Path, argv:list) -> list:
    "Watch `d/model/train.log` while `argv` (a training into `model`) runs, as `tail -f` would."
    def watch():
        t0, log = time.time(), d/'model'/'train.log'
        while time.time() - t0 < 1500:
            held = lock_holder(d/'model') is not None
            if held and log.exists(): LIVE[d] = log.read_text()
            elif LIVE.get(d): return   # the run is over
            time.sleep(0.05)
    threading.Thread(target=watch, daemon=True).start()
    return argv

def followed_live(d, r):
    seen = LIVE.get(d, '')
    assert '"event": "begin"' in seen and '"event": "step"' in seen, f"train.log while the run was live: {seen[-300:]!r}"


def majority(d, r):
    assert 'Matthews correlation' in r.stdout, r.stdout[-500:]
    assert any(l.startswith('warning: ') and 'learning_rate' in l for l in r.stderr.splitlines()), r.stderr[-800:]


CSV = 'quickstart over data prepared from a csv'

CASES = [
    # quickstart prepares its data into runs/emotion-data: what the user prepared there from other data is kept ...
    Case('owned folders', CSV, lambda d: (mine(d, tiny_csv(d, 'mine.csv', labels=('joy', 'anger'))),
         quick(d, tiny_csv(d)))[1], ['mine.csv', 'quickstart would replace', '--dataset_path']),
    # ... the same fix (`--dataset_path runs/quickstart-data`), followed once, above
    Case('owned folders', 'quickstart over data prepared from a parquet', lambda d: (mine(d, parquet(d)), quick(d, tiny_csv(d)))[1],
         ['mine.parquet', '--dataset_path'], same_fix_as=CSV),
    Case('owned folders', 'quickstart over data an older version prepared', lambda d: (older(d, True), quick(d, tiny_csv(d)))[1],
         ['mine.csv', '--dataset_path'], same_fix_as=CSV),
    Case('owned folders', 'quickstart over data an older version prepared, source not recorded',
         lambda d: (older(d, False), quick(d, tiny_csv(d)))[1], ['does not record', '--dataset_path'], same_fix_as=CSV),
    Case('owned folders', 'quickstart over the user\'s own files', lambda d: (other_files(d), quick(d, tiny_csv(d)))[1],
         ['notes.txt', '--dataset_path']),
    Case('owned folders', 'quickstart over its own data prepared before', lambda d: (mine(d, tiny_csv(d)), quick(d, tiny_csv(d)))[1],
         [], status=0, check=has_metrics),
    Case('owned folders', 'a failed retrain keeps the last metrics.json', retrain, ['a worker failed with OSError'], status=1,
         follow=weights_back, here=True),
    # Ctrl-C: one line of what was kept, and the command that goes on (followed: it must finish)
    Case('no traceback', 'Ctrl-C during prep over prepared data', lambda d: (tiny_prepared(d, data=tiny_csv(d, n=6000)),
         ['prep', '--data', str(d/'tweets.csv'), '--model_id', str(d/'tiny-model'), '--dataset_path', 'data'])[1],
         ['as it was', 'nothing half-written', '`trn-tutorials prep'], status=130, interrupt=r'^preparing ', follow=True),
    Case('no traceback', 'Ctrl-C during a first prep', lambda d: ['prep', '--data', tiny_csv(d, n=6000), '--model_id', tiny_model(d),
         '--dataset_path', 'data'], ['nothing was written', '`trn-tutorials prep'], status=130, interrupt=r'^preparing ', follow=True),
    Case('no traceback', 'Ctrl-C during the torchrun run', lambda d: ['train', '--dataset_path', tiny_prepared(d), '--output_dir', 'model',
         *LONG], ['run the same command again', '`trn-tutorials train'], status=130, interrupt=STEP, follow=True),
    Case('no traceback', 'Ctrl-C during the final evaluation', lambda d: ['train', '--dataset_path', tiny_prepared(d), '--output_dir',
         'model', *FAST, '--num_train_epochs', '2'], ['run the same command again', '`trn-tutorials train'], status=130, interrupt=r'training: 100%', follow=True),
    Case('no traceback', 'Ctrl-C during quickstart\'s prep', lambda d: quick(d, tiny_csv(d, n=6000)),
         ['nothing was written', '`trn-tutorials quickstart'], status=130, interrupt=r'^preparing ',
         follow=False),   # nothing written: its rerun is a first quickstart (followed in CSV) after a first prep's Ctrl-C (followed above)
    Case('no traceback', 'Ctrl-C during quickstart\'s training', lambda d: quick(d, tiny_csv(d), opts=LONG),
         ['run the same command again', '`trn-tutorials quickstart'], status=130, interrupt=STEP, follow=True),
    # SIGTERM and SIGHUP to the launcher alone (`kill PID`, a SageMaker stop or a spot interruption; a closed terminal): as Ctrl-C
    Case('no traceback', 'SIGTERM to the launcher during the torchrun run', lambda d: ['train', '--dataset_path', tiny_prepared(d),
         '--output_dir', 'model', *LONG], ['stopped by SIGTERM', 'run the same command again', '`trn-tutorials train'], status=143,
         interrupt=STEP, interrupt_with=signal.SIGTERM, follow=False),   # its continue: followed after Ctrl-C above, test_torchrun, test_chaos
    Case('no traceback', 'SIGHUP to the launcher during quickstart\'s training', lambda d: quick(d, tiny_csv(d), opts=LONG),
         ['stopped by SIGHUP', 'run the same command again', '`trn-tutorials quickstart'], status=129, interrupt=STEP,
         interrupt_with=signal.SIGHUP, follow=False),
    # messages true to the state they describe
    Case('files as people have them', 'stop before the first checkpoint', lambda d: stopped(d, False),
         ['stopped by signal 15', 'no checkpoint was written', 'to start over', '`trn-tutorials train'], status=1, follow=True, here=False),
    Case('files as people have them', 'stop after a checkpoint', lambda d: stopped(d, True),
         ['stopped by signal 15', 'continue from checkpoint-', '`trn-tutorials train'], status=1, follow=False,
         here=False),   # its continue: followed after Ctrl-C above, test_chaos
    # one run for both (once two runs): a log followed while it runs, and a run that says it learned nothing
    Case('files as people have them', 'train.log read while the run is live; a learning rate that stalls at the majority label',
         lambda d: live(d, ['train', '--dataset_path', tiny_prepared(d, data=tiny_csv(d, labels=('joy', 'joy', 'joy', 'anger'))), '--output_dir',
                            'model', *FAST, '--num_train_epochs', '3', '--learning_rate', '5']), [], status=0,
         check=lambda d, r: (followed_live(d, r), majority(d, r))),
]

test_careless = make_test(CASES)
