"""Issue 21, the training script on a NeuronCore: checkpoints sealed before the workers meet, no Neuron worker without
torchrun, and a warning when the global batch leaves too few optimizer steps."""
import json, os, socket, subprocess, sys, time
from pathlib import Path

import pytest

from trn_tutorials.core import UsageError
from trn_tutorials.models import tiny_bert
from trn_tutorials.data_files import EMOTION_LABELS, load_raw, sample_data
from trn_tutorials.data import DataArguments, prepare
from trn_tutorials.checkpoints import COMPLETE
from trn_tutorials.train import ERROR_PREFIX
from trn_tutorials.arguments import TrainArguments

TORCHRUN_VARS = ('TORCHELASTIC_RUN_ID', 'LOCAL_RANK', 'RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT',
                 'TORCHELASTIC_USE_AGENT_STORE', 'TORCHELASTIC_RESTART_COUNT')
ENV = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS} | {'HF_HUB_OFFLINE': '1'}


def free_port() -> int:
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    "A tiny BERT and the sample prepared for it."
    tmp = tmp_path_factory.mktemp('rules')
    words = sorted({w for split in load_raw(sample_data()).values() for t in split['text'] for w in t.split()})
    model = tiny_bert(tmp/'tiny-bert', words, labels=EMOTION_LABELS)
    prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'data')))
    return tmp


@pytest.fixture
def neuron_stub(tmp_path):
    "A folder holding an empty `torch_neuronx` package: enough for `check_backend('neuron')`, which only looks for it."
    d = tmp_path/'stub'; (d/'torch_neuronx').mkdir(parents=True); (d/'torch_neuronx'/'__init__.py').write_text('')
    return d


# ------------------------------------------------------------------------------------ 1. seal, then meet
WORKER = r'''
import json, os, sys, time, types
from pathlib import Path
import torch, torch.distributed as dist
from safetensors.torch import save_file
from trn_tutorials import checkpoints as train   # `CheckpointGuard` looks up `seal_checkpoint` and `host_store` in its own module
from trn_tutorials.core import die_with_parent

die_with_parent()
out, mode = Path(sys.argv[1]), sys.argv[2]
rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
if mode in ('gloo', 'device'):   # as the Trainer's arguments make it on CPU workers: accelerate's state over a gloo process group
    from accelerate import PartialState
    PartialState(cpu=True)
    assert dist.is_initialized() and PartialState().num_processes == world
if mode == 'device': train.host_store = lambda: None   # the fallback through accelerate's collectives
real_seal = train.seal_checkpoint
def slow_seal(d): time.sleep(4); return real_seal(d)   # a slow volume: fsync and sha256 of a large checkpoint
def broken_seal(d): raise OSError(28, 'No space left on device')
guard = train.CheckpointGuard({'learning_rate': 1000.0})
for case, step in (('slow', 10), ('nan', 20), ('broken', 30), ('slow', 40)):
    d = out/f'checkpoint-{step}'; d.mkdir(parents=True, exist_ok=True)
    # every worker writes its part, as the Trainer does (the first one the weights); the second one is slower
    if rank == 0: save_file({'w': torch.full((4,), float('nan') if case == 'nan' else 1.0)}, str(d/'model.safetensors'))
    else: time.sleep(1)
    (d/f'rng_state_{rank}.pth').write_bytes(b'x' * 100)
    train.seal_checkpoint = {'slow': slow_seal, 'broken': broken_seal}.get(case, real_seal)
    args = types.SimpleNamespace(output_dir=str(out), learning_rate=1000.0, bf16=False, world_size=world, process_index=rank)
    state = types.SimpleNamespace(global_step=step, is_world_process_zero=rank == 0, best_model_checkpoint=None)
    err = None
    try: guard.on_save(args, state, None)
    except Exception as e: err = f'{type(e).__name__}: {e}'
    rec = d/train.COMPLETE
    (out/f'{step}-{rank}.json').write_text(json.dumps({
        'error': err, 'sealed': rec.exists(), 'exists': d.exists(), 'returned': time.time(),
        'files': sorted(json.loads(rec.read_text())['files']) if rec.exists() else None}))
if dist.is_initialized(): dist.barrier(); dist.destroy_process_group()   # a clean exit (gloo may abort one left open)
'''


@pytest.mark.parametrize('mode', ['gloo', 'agent', 'device'])
def test_seal_then_meet(tmp_path, mode):
    """Two real torchrun workers: the second returns from `on_save` only once the first has sealed; a nan checkpoint or a
    failed seal stops both (neither waits forever). `gloo`: with a process group (CPU, GPU, Neuron once transformers made
    its XLA group), still torchrun's store; `agent`: no process group; `device`: no host store, accelerate's collectives."""
    script = tmp_path/'worker.py'; script.write_text(WORKER)
    out = tmp_path/'run'
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2', '--master_addr', '127.0.0.1',
           '--master_port', str(free_port()), str(script), str(out), mode]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=240)
    res = {p.stem: json.loads(p.read_text()) for p in out.glob('*-*.json')}
    assert len(res) == 8, (sorted(res), r.stderr[-3000:])
    for step in (10, 40):   # the slow seal: the second worker left only after the record was there
        first, second = res[f'{step}-0'], res[f'{step}-1']
        assert first['error'] is None and second['error'] is None, (first, second)
        assert second['sealed'], f'checkpoint-{step}: the second worker went on before the first had sealed it'
        assert first['files'] == ['model.safetensors', 'rng_state_0.pth', 'rng_state_1.pth', 'trn_tutorials_args.json'], first   # the second's part is in
    # nan weights: deleted, and both workers stop with the same line
    for rank in (0, 1):
        e = res[f'20-{rank}']
        assert e['error'] and e['error'].startswith('UsageError: the weights became nan or inf at step 20'), (rank, e)
        assert not e['exists'], (rank, e)
    # the first worker fails to seal: it raises, and the second stops too, without a record
    assert res['30-0']['error'].startswith('OSError') and not res['30-0']['sealed']
    assert res['30-1']['error'] and res['30-1']['error'].startswith('UsageError') and 'checkpoint-30' in res['30-1']['error'], res['30-1']
    assert r.returncode == 0, r.stderr[-3000:]


# ------------------------------------------------------------------------------ 2. no Neuron worker without torchrun
def test_python_m_relaunches_itself_under_torchrun(tiny, neuron_stub):
    """`python -m trn_tutorials.train --backend neuron` outside torchrun starts torchrun with one worker. Here (no torch-xla)
    that worker fails its runtime check: the failure is a torchrun worker's, and nothing trained in the first process."""
    out = tiny/'relaunched'
    env = ENV | {'PYTHONPATH': os.pathsep.join([str(neuron_stub), *filter(None, [os.environ.get('PYTHONPATH')])])}
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.train', '--backend', 'neuron', '--dataset_path', str(tiny/'data'),
                        '--output_dir', str(out), '--max_steps', '2', '--save_steps', '0'],
                       env=env, capture_output=True, text=True, timeout=300, cwd=tiny)
    said = r.stdout + r.stderr
    relaunch = [l for l in said.splitlines() if 'torchrun' in l and 'hangs' in l]
    assert len(relaunch) == 1 and 'transformers' in relaunch[0] and '--nproc_per_node 1' in relaunch[0], said[-3000:]
    assert r.returncode != 0
    # the worker's one line, then torchrun's report of its worker (rank 0, exit status 2)
    assert any(l.startswith(ERROR_PREFIX) for l in r.stderr.splitlines()), said[-3000:]
    assert 'local_rank: 0' in r.stderr and 'exitcode  : 2' in r.stderr, said[-3000:]
    assert said.index(relaunch[0]) < said.index(ERROR_PREFIX)
    assert not (out/'metrics.json').exists() and not list(out.glob('checkpoint-*'))


@pytest.fixture
def kernel(neuron_stub, tmp_path, monkeypatch):
    "This Python as a notebook kernel would be: not under torchrun, torch_neuronx findable, a scratch folder as cwd."
    monkeypatch.syspath_prepend(str(neuron_stub))
    for k in TORCHRUN_VARS + ('USE_TORCH_XLA', 'PJRT_DEVICE'): monkeypatch.delenv(k, raising=False)
    work = tmp_path/'work'; work.mkdir(); monkeypatch.chdir(work)
    return work


def test_train_in_a_kernel_refuses_neuron(kernel):
    from trn_tutorials.train import train
    before = dict(os.environ)
    for backend in ('neuron',):
        with pytest.raises(UsageError) as e: train(TrainArguments(backend=backend, dataset_path='data', output_dir='out'))
        msg = str(e.value)
        assert '\n' not in msg and 'torchrun --nproc_per_node 1 -m trn_tutorials.train' in msg and 'launch(' in msg, msg
        assert '4.44' in msg, msg
    assert list(kernel.iterdir()) == [] and dict(os.environ) == before   # nothing written, no variable set


def test_main_in_a_kernel_refuses_neuron(kernel, capsys):
    from trn_tutorials.train import main
    before = dict(os.environ)
    with pytest.raises(SystemExit) as e: main(['--backend', 'neuron', '--dataset_path', 'data', '--output_dir', 'out'])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith(ERROR_PREFIX), err
    assert 'torchrun --nproc_per_node 1 -m trn_tutorials.train' in err, err
    assert list(kernel.iterdir()) == [] and dict(os.environ) == before


def test_which_backends_need_torchrun(monkeypatch):
    from trn_tutorials.train import check_torchrun, relaunch_command
    for backend in ('cpu', 'cuda', 'xla'): assert check_torchrun(backend, env={}) is None
    for backend in ('neuron', 'torchneuron'):
        with pytest.raises(UsageError, match='torchrun --nproc_per_node 1'): check_torchrun(backend, env={})
        assert check_torchrun(backend, env={'TORCHELASTIC_RUN_ID': 'x', 'LOCAL_RANK': '0'}) is None
    cmd = relaunch_command(['--backend', 'neuron', '--epochs', '1'], port=29555)
    assert cmd == [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '1', '--master_addr', '127.0.0.1',
                   '--master_port', '29555', '-m', 'trn_tutorials.train', '--backend', 'neuron', '--epochs', '1']


# ------------------------------------------------------------------------- 3. too few steps for the global batch
def test_few_steps_warning_numbers():
    from trn_tutorials.samplers import MIN_OPTIMIZER_STEPS, REFERENCE_GLOBAL_BATCH, few_steps_warning, planned_steps
    assert (MIN_OPTIMIZER_STEPS, REFERENCE_GLOBAL_BATCH) == (200, 32)
    args = TrainArguments(num_train_epochs=3, per_device_train_batch_size=16)
    # emotion on a trn1.32xlarge: 16,000 rows in global batches of 32 x 16 = 512: 31 full ones and one of 128 rows an epoch
    assert planned_steps(args, [66] * 16000, 32) == 96
    w = few_steps_warning(args, 16000, 32)
    assert w and '\n' not in w and w.startswith('warning: '), w
    for part in ('96 optimizer steps', '16000 training rows', '32 workers', '512', '200',
                 '8 workers', '--per_device_train_batch_size 4', '--num_train_epochs 7', '--learning_rate'):
        assert part in w, (part, w)
    assert few_steps_warning(args, 16000, 2) is None            # the recipe: 2 x 16, 1500 steps
    assert few_steps_warning(args, 360, 2) is None              # few steps, but a global batch of 32: nothing to scale
    assert few_steps_warning(TrainArguments(num_train_epochs=1), 16000, 4) is None   # 64 rows a step, 250 steps
    assert few_steps_warning(TrainArguments(num_train_epochs=1), 16000, 8) is not None   # 128 rows a step, 125 steps
    assert few_steps_warning(TrainArguments(max_steps=50), 16000, 32) is None   # a step count chosen on purpose
    # no worker count reaches 200 steps: the line names the other fixes only
    w = few_steps_warning(TrainArguments(num_train_epochs=1, per_device_train_batch_size=64), 1000, 2)
    assert w and 'workers (' not in w and '--num_train_epochs' in w, w


def test_the_warning_reaches_metrics_and_summary(tiny):
    "One CPU worker with batches of 48: 8 steps, a global batch above 32. The note at the start, then metrics and the summary."
    out = tiny/'few-steps'
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.train', '--dataset_path', str(tiny/'data'), '--output_dir', str(out),
                        '--num_train_epochs', '1', '--per_device_train_batch_size', '48', '--save_steps', '0', '--learning_rate', '1e-3'],
                       env=ENV, capture_output=True, text=True, timeout=300, cwd=tiny)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((out/'metrics.json').read_text())
    few = [w for w in m['warnings'] if w.startswith('warning: 8 optimizer steps')]   # beside it, maybe: no better than the majority
    assert len(few) == 1 and all(w in few or 'majority' in w for w in m['warnings']), m['warnings']
    assert m['torchrun'] is False
    lines = r.stdout.splitlines()
    assert lines.count(few[0]) == 2, r.stdout   # at the start, and in the summary at the end
    assert lines[-1] == few[0] or few[0] in lines[-3:], lines[-5:]
    from trn_tutorials.progress import summary
    assert few[0] in summary(m).splitlines()
    assert few[0] not in summary(m | {'warnings': []})
