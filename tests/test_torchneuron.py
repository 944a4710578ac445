"""The `torchneuron` backend (TorchNeuron: native PyTorch device `neuron`, Trn2/Trn3) in the versions its DLAMI pairs it with.

`tools/test.sh` runs this file in `.venv-trn2`, the stand-in of the "Deep Learning AMI Neuron torch-neuronx 2.14" venv:
Python 3.12, torch 2.14, and this package installed with its `[trn2]` extra (transformers >= 5.4, accelerate >= 1.13).
There is no NeuronCore here, so torch-neuronx itself is stood in for: by its package metadata (all `detect` and
`check_backend` read) and, for the Trainer's device, by a `torch.neuron` module that reports one device, with PyTorch's
PrivateUse1 backend renamed `neuron` as torch-neuronx does. What cannot be shown without the hardware: a tensor on the
device, a compiled graph, a collective between workers.
"""
import importlib.metadata, json, os, subprocess, sys, tomllib
from pathlib import Path

from packaging.version import Version

from trn_tutorials.core import STACKS

ROOT = Path(__file__).parents[1]
TRN2_3XL = {"instance_type": "trn2.3xlarge", "logical_neuroncore_config": 2, "neuron_devices": [{"neuron_device": 0, "nc_count": 8}]}


def stub_neuronx(root:Path, version:str='2.14.3') -> Path:
    (root/'torch_neuronx').mkdir(parents=True)
    (root/'torch_neuronx'/'__init__.py').write_text('')
    d = root/f'torch_neuronx-{version}.dist-info'; d.mkdir()
    (d/'METADATA').write_text(f"Metadata-Version: 2.1\nName: torch-neuronx\nVersion: {version}\n")
    return root


def run(code:str, stub:Path, tmp:Path) -> dict:
    "Run `code` in a fresh Python (the `neuron` rename is for good) with the stub first on the path; return its last line as JSON."
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(stub), os.environ.get('PYTHONPATH', '')]), 'USE_TORCH_XLA': '0'}
    r = subprocess.run([sys.executable, '-c', code], env=env, cwd=tmp, capture_output=True, text=True, timeout=300)
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
from trn_tutorials.core import check_backend, detect
acc = detect({TRN2_3XL!r}, env={{}})
print(json.dumps({{'auto': check_backend('auto', acc, 'trn2.3xlarge'), 'forced': check_backend('torchneuron'), 'workers': acc.workers}}))
""", stub_neuronx(tmp_path/'stub'), tmp_path)
    assert out == {'auto': 'torchneuron', 'forced': 'torchneuron', 'workers': 4}


def test_trainer_configuration_on_the_neuron_device(tmp_path):
    out = run("""
import json, os, types, torch
torch.utils.rename_privateuse1_backend('neuron')          # what torch-neuronx does on import
calls = []
torch.neuron = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 1, current_device=lambda: 0,
                                     set_device=lambda d: calls.append(str(d)))
from trn_tutorials.train import TrainArguments, training_arguments
from accelerate.utils import DistributedType
t = training_arguments(TrainArguments(output_dir='model'), 'torchneuron')
print(json.dumps({'device': str(t.device), 'set_device': calls, 'use_cpu': t.use_cpu, 'optim': str(t.optim.value),
                  'drop_last': t.dataloader_drop_last, 'neuron_ddp': hasattr(DistributedType, 'MULTI_NEURON')}))
""", stub_neuronx(tmp_path/'stub'), tmp_path)
    # transformers >= 5.4 places the Trainer on `neuron:0`; accelerate >= 1.13 has the distributed mode for its workers
    assert out['device'] == 'neuron:0' and set(out['set_device']) == {'neuron:0'} and out['neuron_ddp'], out   # once per TrainingArguments object made
    assert (out['use_cpu'], out['optim'], out['drop_last']) == (False, 'adamw_torch', False), out
