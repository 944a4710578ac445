"""The serving preflight (`trn_tutorials.serving.preflight`): what `predict` and `verify` check before a model loads, in one
order, and the prepared data `verify` scores opened once. On the shared tiny BERT and the sample prepared for it (conftest's
`prepared`); the chapter (nbs/serving/11a_preflight.ipynb) shows each refusal once."""
import json, shutil

import pytest

import trn_tutorials.data.prepared as prepared_mod
from trn_tutorials.core.options import UsageError
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.serving.inference import TORCHSCRIPT, TRACE_INFO
from trn_tutorials.serving.preflight import Served, neuron_model, serving_preflight


def test_a_model_alone_and_a_model_with_its_split(prepared, monkeypatch):
    model, data = str(prepared/'tiny-bert'), str(prepared/'data')
    assert serving_preflight(model, 'cpu') == Served(model, EMOTION_LABELS)   # predict's: no data opened
    reads = []
    real = prepared_mod.load_from_disk
    monkeypatch.setattr(prepared_mod, 'load_from_disk', lambda *a, **k: reads.append(a) or real(*a, **k))
    s = serving_preflight(model, dataset_path=data, split='test')
    assert reads == [(data,)] and s.split == 'test' and len(s.data['test']) == 72 and s.problem_type == 'single_label_classification'


@pytest.mark.parametrize('case, says', [
    ('missing', 'no model folder at {d}/nowhere: pass --model_dir, the folder train wrote (its --output_dir)'),
    ('data', '{d}/data is prepared data (trn-tutorials prep writes them), not a model folder: pass --model_dir'),
    ('no labels', 'config.json names no labels'),
    ('neuron', 'on Neuron, predict runs the compiled model and'),
    ('no record of its data', 'has no metrics.json naming its data: pass --dataset_path'),
    ('split', "has no 'tests' split (it has train, validation, test): pass --split with one of them"),
    ('other labels', 'has the labels sadness, joy, love, anger, fear, surprise and'),
])
def test_each_refusal_is_one_line(prepared, tmp_path, case, says):
    model = tmp_path/'model'
    shutil.copytree(prepared/'tiny-bert', model)
    d = str(prepared)
    call = {'missing': lambda: serving_preflight(f'{d}/nowhere'),
            'data': lambda: serving_preflight(f'{d}/data'),
            'no labels': lambda: serving_preflight(str(model)),
            'neuron': lambda: serving_preflight(str(model), 'neuron'),
            'no record of its data': lambda: serving_preflight(str(model), split='test'),
            'split': lambda: serving_preflight(str(model), dataset_path=f'{d}/data', split='tests'),
            'other labels': lambda: serving_preflight(str(model), dataset_path=f'{d}/data', split='test')}[case]
    config = json.loads((model/'config.json').read_text())
    if case == 'no labels': config['id2label'] = {'0': 'LABEL_0', '1': 'LABEL_1'}
    if case == 'other labels': config['id2label'] = {str(i): n for i, n in enumerate(reversed(EMOTION_LABELS))}
    (model/'config.json').write_text(json.dumps(config))
    with pytest.raises(UsageError) as e: call()
    assert says.format(d=d) in str(e.value) and '\n' not in str(e.value), str(e.value)


def test_a_compiled_model_is_told_by_its_compiler(prepared, tmp_path):
    model = shutil.copytree(prepared/'tiny-bert', tmp_path/'model')
    assert not neuron_model(str(model))
    (model/TORCHSCRIPT).write_bytes(b'')
    (model/TRACE_INFO).write_text(json.dumps({'compiler': 'torch.jit.trace'}))   # a TorchScript trace: not for a NeuronCore
    assert not neuron_model(str(model))
    (model/TRACE_INFO).write_text(json.dumps({'compiler': 'torch_neuronx 2.9.0', 'lengths': [40]}))
    assert neuron_model(str(model)) and serving_preflight(str(model), 'neuron').label_names == EMOTION_LABELS
