"""Which backend a Trainium instance gets, as its reader meets it: `detect` and `check_backend` on the `neuron-ls`
output of a Trn1/Trn2, with torch-neuronx present or not (a stand-in package: its metadata is all `detect` reads),
and the wrong-venv mistake refused through `launch` and the CLI before anything is written.
"""
import importlib, importlib.metadata, json, os, stat, subprocess, sys
from pathlib import Path

import pytest

from trn_tutorials.core import UsageError, check_backend, detect
from trn_tutorials.train import TrainArguments

TRN1_2XL = json.dumps([{"neuron_device": 0, "nc_count": 2, "memory_size": 34359738368}])
TRN2_3XL = json.dumps({"instance_type": "trn2.3xlarge", "logical_neuroncore_config": 2,
                       "neuron_devices": [{"neuron_device": 0, "nc_count": 8}]})


def fake_neuronx(root:Path, version:str|None) -> Path:
    "A `torch_neuronx` that imports nothing, with `version` in its metadata (None: no metadata at all)."
    (root/'torch_neuronx').mkdir(parents=True)
    (root/'torch_neuronx'/'__init__.py').write_text("raise ImportError('a stand-in: detect must not import it')\n")
    if version:
        d = root/f'torch_neuronx-{version}.dist-info'; d.mkdir()
        (d/'METADATA').write_text(f"Metadata-Version: 2.1\nName: torch-neuronx\nVersion: {version}\n")
    return root


@pytest.fixture
def neuronx(tmp_path, monkeypatch):
    def put(version):
        monkeypatch.syspath_prepend(str(fake_neuronx(tmp_path/f'site-{version}', version)))
        importlib.invalidate_caches()
    return put


@pytest.fixture
def no_device_opened(monkeypatch):
    "Record every call that would open the Neuron runtime in this process through PyTorch."
    import torch
    calls = []
    for name in ('is_available', 'device_count', 'current_accelerator'):
        if hasattr(torch.accelerator, name):
            monkeypatch.setattr(torch.accelerator, name, lambda *a, _n=name, **k: calls.append(_n) or 0)
    return calls


def test_torchneuron_found_without_opening_a_device(neuronx, no_device_opened):
    neuronx('2.14.3')   # torch-neuronx 2.13+ is TorchNeuron (Neuron 2.33)
    acc = detect(TRN2_3XL, env={})
    assert (acc.backend, acc.workers) == ('torchneuron', 4), acc   # 8 physical cores, two per logical core
    assert no_device_opened == [], f"detect opened the Neuron runtime in the launcher: {no_device_opened}"


def test_trn1_xla_stack_found(neuronx, no_device_opened):
    neuronx('2.9.0.2.15.32035')
    acc = detect(TRN1_2XL, env={})
    assert (acc.backend, acc.workers) == ('neuron', 2) and no_device_opened == []


def test_wrong_venv_on_a_trn1_is_refused():
    acc = detect(TRN1_2XL, env={})   # NeuronCores visible, no torch-neuronx in this Python
    with pytest.raises(UsageError) as e: check_backend('auto', acc, 'trn1.2xlarge')
    msg = str(e.value)
    assert '\n' not in msg and '2 NeuronCore(s)' in msg and '--backend cpu' in msg
    assert '/opt/aws_neuronx_venv_pytorch_2_9' in msg   # the venv to activate, or the image that still has it


def test_trn_instance_type_with_a_cpu_venv_is_refused():
    with pytest.raises(UsageError) as e: check_backend('auto', detect(env={}), 'trn1.2xlarge')
    msg = str(e.value)
    assert 'source /opt/aws_neuronx_venv_pytorch_2_9/bin/activate' in msg and 'pip install "trn-tutorials[trn1]"' in msg
    assert check_backend('cpu', detect(env={}), 'trn1.2xlarge') == 'cpu'   # on purpose: allowed


@pytest.mark.parametrize('backend, versions, line', [
    ('torchneuron', {'transformers': '5.3.0', 'accelerate': '1.15.0'}, 'pip install "trn-tutorials[trn2]"'),
    ('torchneuron', {'transformers': '5.5.3', 'accelerate': '1.12.0'}, 'pip install "trn-tutorials[trn2]"'),
    ('neuron', {'transformers': '4.53.2', 'accelerate': '1.9.0'}, 'pip install "trn-tutorials[trn1]"')])
def test_too_old_for_the_backend(neuronx, monkeypatch, backend, versions, line):
    neuronx('2.14.3' if backend == 'torchneuron' else '2.9.0.2.15.32035')
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, 'version', lambda p: versions.get(p) or real(p))
    with pytest.raises(UsageError) as e: check_backend(backend)
    msg = str(e.value)
    assert '\n' not in msg and line in msg and next(p for p, v in versions.items() if v in msg)


def test_new_enough_passes(neuronx, monkeypatch):
    neuronx('2.14.3')
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, 'version', lambda p: {'transformers': '5.4.0', 'accelerate': '1.13.0'}.get(p) or real(p))
    assert check_backend('torchneuron') == 'torchneuron'


@pytest.fixture
def neuron_ls_on_path(tmp_path):
    "A `neuron-ls` that prints a trn1.2xlarge's devices, first on PATH: the instance, minus the hardware."
    b = tmp_path/'bin'; b.mkdir()
    exe = b/'neuron-ls'
    exe.write_text(f"#!/bin/sh\ncat <<'EOF'\n{TRN1_2XL}\nEOF\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, 'PATH': f"{b}{os.pathsep}{os.environ['PATH']}"}


def test_wrong_venv_refused_by_launch_and_cli(tmp_path, neuron_ls_on_path, monkeypatch):
    monkeypatch.setenv('PATH', neuron_ls_on_path['PATH'])
    from trn_tutorials.launch import launch
    out = tmp_path/'model'
    with pytest.raises(UsageError) as e: launch(TrainArguments(dataset_path=str(tmp_path/'data'), output_dir=str(out)))
    assert 'NeuronCore' in str(e.value) and not out.exists()
    r = subprocess.run([str(Path(sys.executable).parent/'trn-tutorials'), 'train', '--dataset_path', str(tmp_path/'data'),
                        '--output_dir', str(out)], env=neuron_ls_on_path, capture_output=True, text=True, timeout=300)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and 'torch-neuronx' in err and 'Traceback' not in r.stderr, r.stderr
    assert not out.exists()
