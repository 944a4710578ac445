"""What `launch` reports on Neuron beyond the CPU: graphs loaded from the compile cache told apart from graphs compiled,
and the run's warnings in its `Results` (not only in train.log)."""
from pathlib import Path

from trn_tutorials.launch import Results
from trn_tutorials.torchrun import cache_status, graphs_from_cache


def graph(root:Path, name:str, done:bool=True):
    d = root/'neuronxcc-2.26.6360.0+9f7b3c1e'/name; d.mkdir(parents=True)
    for f in ['model.hlo_module.pb', 'compile_flags.json'] + (['model.neff', 'model.done'] if done else []): (d/f).write_bytes(b'\0')


def metrics(**extra) -> dict:
    return {'final_split': 'test', 'test': {'f1': 0.91, 'accuracy': 0.92}, 'train': {'samples_per_second': 96.3, 'runtime_s': 510.0},
            'world_size': 2, 'backend': 'neuron', 'args': {'output_dir': 'runs/emotion-model'}, 'beats_baseline': True,
            'compiled_graphs': {'train': 9, 'eval': 6}, 'compile_s': {'train': 40.0, 'eval': 12.0}, **extra}


def test_cache_loads_told_apart_from_compiles(tmp_path):
    cache = tmp_path/'neuron-compile-cache'
    for i in range(14): graph(cache, f'MODULE_{i:020d}+39f12043')   # a precompile left 14 graphs
    before = cache_status(cache)
    graph(cache, 'MODULE_99999999999999999999+39f12043')           # the run compiled one more
    graph(cache, 'MODULE_88888888888888888888+39f12043', done=False)   # and one failed: not a compile
    loaded = graphs_from_cache({'train': 9, 'eval': 6}, before, cache_status(cache))
    assert loaded == 14
    r = Results.from_metrics(metrics(), wall_s=600.0, instance_type='trn1.2xlarge', from_cache=loaded)
    row = dict(r.rows())['graphs']
    assert '1 compiled, 14 loaded from the Neuron cache' in row, row
    # what cannot be told is not guessed: an S3 cache, or no cache status
    s3 = cache_status('s3://bucket/neuron-cache')
    assert graphs_from_cache({'train': 9, 'eval': 6}, s3, s3) is None and graphs_from_cache({'train': 9, 'eval': 6}, None, None) is None
    assert 'graphs compiled' in dict(Results.from_metrics(metrics(), 600.0).rows())
    # a cache that holds no graph after the run supplied none: no neuronx-cc ran (the Trn1 stand-in's torch-xla on the CPU)
    empty = cache_status(tmp_path/'empty-cache')
    assert graphs_from_cache({'train': 9, 'eval': 6}, empty, empty) is None   # said "15 loaded from the Neuron cache" before


def test_warnings_shown_in_results():
    w = 'only 93 optimizer steps planned: use fewer workers'
    r = Results.from_metrics(metrics(warnings=[w]), wall_s=600.0)
    assert ('warning', w) in r.rows() and w in r._repr_markdown_()
    assert not [k for k, _ in Results.from_metrics(metrics(), 600.0).rows() if k == 'warning']
