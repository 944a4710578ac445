"""The `torchneuron` backend (TorchNeuron: native PyTorch device `neuron`, Trn2/Trn3) in the versions its DLAMI pairs it with.

`tools/test.sh` runs this file in `.venv-trn2`, the stand-in of the "Deep Learning AMI Neuron torch-neuronx 2.14" venv:
Python 3.12, torch 2.14, and this package installed with its `[trn2]` extra (transformers >= 5.4, accelerate >= 1.13).
There is no NeuronCore here, so torch-neuronx itself is stood in for: by its package metadata (all `detect` and
`check_backend` read) and by a `torch_neuronx` package that, like the real one, registers the device only when it is
imported ("import torch_neuronx  # Registers the Neuron device and distributed backend.", Neuron's torch.distributed
guide): PyTorch's PrivateUse1 backend renamed `neuron`, a `torch.neuron` module with what transformers and accelerate
read, and a process-group backend `neuron` (gloo underneath). It has no entry point, so PyTorch's autoload of device
backends does not import it: only an explicit import does. transformers and accelerate never import it; they ask
`hasattr(torch, "neuron")` and remember the answer. What cannot be shown without the hardware: a tensor on the device,
a compiled graph, a collective on NeuronCores.
"""
import importlib.metadata, json, os, subprocess, sys, tomllib
from pathlib import Path

from packaging.version import Version

from local_services import free_port
from test_train import linked
from trn_tutorials.backends import STACKS

ROOT = Path(__file__).parents[1]
# one Trainium2 as the neuron-ls guide reports it (LNC=2: nc_count 4 logical cores): what a trn2.3xlarge has
TRN2_3XL = json.loads((ROOT/'tests'/'fixtures'/'neuron-ls'/'trn2n.48xlarge-j.json').read_text())[:1]
TORCHRUN_VARS = ('TORCHELASTIC_RUN_ID', 'LOCAL_RANK', 'RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'GROUP_RANK', 'ROLE_RANK', 'ROLE_WORLD_SIZE',
                 'MASTER_ADDR', 'MASTER_PORT', 'TORCHELASTIC_USE_AGENT_STORE', 'TORCHELASTIC_RESTART_COUNT', 'TORCHELASTIC_MAX_RESTARTS')

REGISTERS = '''"A stand-in for torch-neuronx 2.14 (TorchNeuron) without NeuronCores: what its import registers, and only on import."
import sys, types
import torch, torch.distributed as dist

after_transformers = 'transformers' in sys.modules   # too late: transformers and accelerate remember that `torch.neuron` was missing
torch.utils.rename_privateuse1_backend('neuron')   # PyTorch's PrivateUse1 device becomes `neuron`
_neuron = types.ModuleType('torch.neuron')   # what transformers (TrainingArguments) and accelerate (state, random, checkpointing) read
_neuron.__dict__.update(
    is_available=lambda: True, device_count=lambda: 1, current_device=lambda: 0, set_device=lambda device: None,
    is_bf16_supported=lambda: True, manual_seed=lambda seed: None, manual_seed_all=lambda seed: None, empty_cache=lambda: None,
    get_rng_state=lambda device='neuron': torch.get_rng_state(), set_rng_state=lambda state, device='neuron': None,
    get_rng_state_all=lambda: [torch.get_rng_state()], set_rng_state_all=lambda states: None)
torch._register_device_module('neuron', _neuron)   # torch.neuron
# the distributed backend `neuron` that accelerate's torchrun workers ask for (`init_process_group(backend="neuron")`): gloo here
dist.Backend.register_backend('neuron', lambda store, rank, size, timeout: dist.ProcessGroupGloo(store, rank, size, timeout),
                              devices=['cpu', 'neuron'])
'''
SILENT = '"A torch_neuronx whose import registers nothing: a worker that finds no NeuronCore."\n'


def stub_neuronx(root:Path, version:str='2.14.3', registers:bool=True) -> Path:
    "A folder holding a `torch_neuronx` package (`registers`: the device, on import only) and its metadata, to put first on the path."
    (root/'torch_neuronx').mkdir(parents=True)
    (root/'torch_neuronx'/'__init__.py').write_text(REGISTERS if registers else SILENT)
    d = root/f'torch_neuronx-{version}.dist-info'; d.mkdir()
    (d/'METADATA').write_text(f"Metadata-Version: 2.1\nName: torch-neuronx\nVersion: {version}\n")
    return root


def stub_env(stub:Path, **extra) -> dict:
    "This environment without torchrun's variables, with `stub` first on the path, and `extra`."
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    return env | {'PYTHONPATH': os.pathsep.join([str(stub), os.environ.get('PYTHONPATH', '')]), 'USE_TORCH_XLA': '0', 'HF_HUB_OFFLINE': '1'} | extra


def run(code:str, stub:Path, tmp:Path, **env) -> dict:
    "Run `code` in a fresh Python (the `neuron` rename is for good) with the stub first on the path; return its last line as JSON."
    r = subprocess.run([sys.executable, '-c', code], env=stub_env(stub, **env), cwd=tmp, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_this_python_holds_what_torchneuron_needs():
    for pkg, lowest in STACKS['torchneuron'].needs: assert Version(importlib.metadata.version(pkg)) >= Version(lowest), pkg
    if os.environ.get('TRN_TUTORIALS_STANDIN') == 'trn2-torchneuron':   # in the stand-in: the image's torch, as listed
        env = tomllib.loads((ROOT/'tools'/'environments.toml').read_text())['trn2-torchneuron']
        pin = next(p for p in env['image'] if p.startswith('torch=='))
        import torch
        assert torch.__version__.split('+')[0] == pin.split('==')[1], (torch.__version__, pin)


def test_backend_found_and_checked(tmp_path):
    out = run(f"""
import json
from trn_tutorials.backends import check_backend, detect
acc = detect({TRN2_3XL!r}, env={{}})
print(json.dumps({{'auto': check_backend('auto', acc, 'trn2.3xlarge'), 'forced': check_backend('torchneuron'), 'workers': acc.workers}}))
""", stub_neuronx(tmp_path/'stub'), tmp_path)
    assert out == {'auto': 'torchneuron', 'forced': 'torchneuron', 'workers': 4}


def test_the_stand_in_registers_the_device_only_when_imported(tmp_path):
    out = run("""
import json, torch, torch.distributed as dist
before = {'torch.neuron': hasattr(torch, 'neuron'), 'device': torch._C._get_privateuse1_backend_name(), 'dist': 'neuron' in dist.Backend.backend_list}
import torch_neuronx
after = {'torch.neuron': hasattr(torch, 'neuron'), 'device': torch._C._get_privateuse1_backend_name(), 'dist': 'neuron' in dist.Backend.backend_list}
print(json.dumps({'before': before, 'after': after, 'available': torch.neuron.is_available(), 'device_count': torch.neuron.device_count()}))
""", stub_neuronx(tmp_path/'stub'), tmp_path)
    assert out['before'] == {'torch.neuron': False, 'device': 'privateuseone', 'dist': False}, out   # nothing before the import
    assert out['after'] == {'torch.neuron': True, 'device': 'neuron', 'dist': True} and out['available'] and out['device_count'] == 1, out


WORKER = """
import json, os, sys
from trn_tutorials.training.train import _as_worker
backend = _as_worker(['--backend', 'torchneuron'], relaunch=False)   # what `main` does first, before transformers is imported
import torch_neuronx
first = 'torch_neuronx' in sys.modules and not torch_neuronx.after_transformers
from trn_tutorials.training.arguments import TrainArguments, training_arguments
from trn_tutorials.training.train import check_device
from accelerate import PartialState
from accelerate.utils import DistributedType
t = training_arguments(TrainArguments(output_dir='model', backend=backend), backend)
check_device(t, backend)   # `train` calls it before the model is loaded
with open(f"out-{os.environ['RANK']}.json", 'w') as f:   # a file per worker: their stdout is one pipe
    json.dump({'backend': backend, 'first': first, 'device': str(t.device), 'world_size': t.world_size, 'WORLD_SIZE': os.environ['WORLD_SIZE'],
               'distributed': str(PartialState().distributed_type), 'multi_neuron': str(DistributedType.MULTI_NEURON),
               'use_cpu': t.use_cpu, 'optim': str(t.optim.value), 'drop_last': t.dataloader_drop_last}, f)
"""


def test_torchrun_workers_train_on_the_neuron_device(tmp_path):
    "Two workers as torchrun starts them: torch_neuronx imported before transformers, the Trainer on `neuron:0`, both in one process group."
    (tmp_path/'worker.py').write_text(WORKER)
    r = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2', '--master_addr', '127.0.0.1',
                        '--master_port', str(free_port()), 'worker.py'],
                       env=stub_env(stub_neuronx(tmp_path/'stub'), OMP_NUM_THREADS='1'), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    outs = [json.loads((tmp_path/f'out-{rank}.json').read_text()) for rank in (0, 1)]
    for out in outs:   # transformers >= 5.4 places the Trainer on `neuron:0`; accelerate >= 1.13 joins the workers over the backend `neuron`
        assert (out['backend'], out['first'], out['device'], out['world_size'], out['WORLD_SIZE']) == ('torchneuron', True, 'neuron:0', 2, '2'), out
        assert out['distributed'] == out['multi_neuron'], out
        assert (out['use_cpu'], out['optim'], out['drop_last']) == (False, 'adamw_torch', False), out


def train_worker(stub:Path, data:Path, tmp:Path, **env) -> subprocess.CompletedProcess:
    "`python -m trn_tutorials.training.train --backend torchneuron` in a torchrun worker's environment (one process, no process group)."
    argv = ['--backend', 'torchneuron', '--dataset_path', str(data), '--output_dir', str(tmp/'model'), '--per_device_train_batch_size', '4']
    env = stub_env(stub, TORCHELASTIC_RUN_ID='test', RANK='0', **env)
    return subprocess.run([sys.executable, '-m', 'trn_tutorials.training.train', *argv], env=env, cwd=tmp, capture_output=True, text=True, timeout=300)


def test_a_worker_without_the_device_is_refused_in_one_line(tmp_path, prepared):
    "torch_neuronx imported, but no `neuron` device registered: the Trainer would train on the CPU; refused before the model is loaded."
    from trn_tutorials.training.train import ERROR_PREFIX
    r = train_worker(stub_neuronx(tmp_path/'stub', registers=False), linked(prepared, tmp_path, 'data')/'data', tmp_path, WORLD_SIZE='1')
    errors = [line for line in r.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert r.returncode == 2 and len(errors) == 1 and 'Traceback' not in r.stderr, r.stderr[-3000:]
    assert "the Trainer's device is cpu, not `neuron`" in errors[0] and 'neuron-ls' in errors[0], errors[0]
    assert not list((tmp_path/'model').glob('*.safetensors')), 'nothing of the model is written'


def test_a_worker_short_of_its_process_group_is_refused_in_one_line(tmp_path, prepared):
    "WORLD_SIZE 2 but no process group (a worker not started by torchrun's rendezvous): each would train alone; refused."
    from trn_tutorials.training.train import ERROR_PREFIX
    r = train_worker(stub_neuronx(tmp_path/'stub'), linked(prepared, tmp_path, 'data')/'data', tmp_path, WORLD_SIZE='2')
    errors = [line for line in r.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert r.returncode == 2 and len(errors) == 1 and 'Traceback' not in r.stderr, r.stderr[-3000:]
    assert 'WORLD_SIZE 2' in errors[0] and 'holds 1' in errors[0] and 'torchrun --nproc_per_node 2' in errors[0], errors[0]


def test_packed_rows_load_eager_attention_on_torchneuron(tmp_path, prepared):
    "Packed rows carry a 4-D float mask: on TorchNeuron the model loads with eager attention, as on XLA; unpacked rows keep SDPA."
    out = run(f"""
import json
from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.training.train import _model
from trn_tutorials.training.preflight import Run
from trn_tutorials.data.prepared import Prepared, load_prepared
data = load_prepared({str(prepared/'data')!r})
run = lambda backend, packing: Run(TrainArguments(output_dir='m', backend=backend), 1, None, Prepared(data.path, data.splits, data.manifest | {{'packing': packing}}))
attention = lambda backend, packing: _model(run(backend, packing))[2].config._attn_implementation
print(json.dumps({{'packed': attention('torchneuron', {{'rows': {{'train': 1}}}}), 'padded': attention('torchneuron', None)}}))
""", stub_neuronx(tmp_path/'stub'), tmp_path)
    assert out == {'packed': 'eager', 'padded': 'sdpa'}, out
