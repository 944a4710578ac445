"Checks of `trn_tutorials.data` beyond the notebook's: the CLI parser, crash safety of `prepare`, the real emotion files."
from __future__ import annotations
import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer, HfArgumentParser

from trn_tutorials.core import UsageError, local_model
from trn_tutorials.data import (DataArguments, EMOTION_LABELS, choose_length, length_stats, load_prepared, load_raw,
                                prepare, sample_data, token_lengths, validate)

EMOTION = Path(__file__).resolve().parents[2]/'shared'/'data'/'emotion'  # research licence: read here, never copied


def _args(tmp_path, **kw):
    return DataArguments(**{'data': sample_data(), 'model_id': local_model(), 'dataset_path': str(tmp_path/'prep'), **kw})


def test_parser_types_and_defaults():
    p = HfArgumentParser(DataArguments)
    a, = p.parse_args_into_dataclasses(['--percentile', '100', '--max_length', '64', '--data', 'd.csv'])
    assert (a.percentile, a.max_length, a.data, a.model_id) == (100.0, 64, 'd.csv', None)
    assert p.parse_args_into_dataclasses([])[0] == DataArguments()


def test_failed_save_leaves_old_result_and_no_temp(tmp_path, monkeypatch):
    first = prepare(_args(tmp_path))
    import datasets
    def boom(self, *a, **k): raise RuntimeError('disk full')
    monkeypatch.setattr(datasets.DatasetDict, 'save_to_disk', boom)
    with pytest.raises(RuntimeError): prepare(_args(tmp_path, max_length=128))
    assert [p.name for p in tmp_path.iterdir()] == ['prep']
    assert load_prepared(str(tmp_path/'prep'))[1] == first


def test_failed_first_save_leaves_nothing(tmp_path, monkeypatch):
    import datasets
    monkeypatch.setattr(datasets.DatasetDict, 'save_to_disk', lambda self, *a, **k: 1/0)
    with pytest.raises(ZeroDivisionError): prepare(_args(tmp_path))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError, match='run `trn-tutorials prep'): load_prepared(str(tmp_path/'prep'))


def test_manifest_is_json_with_the_interface_keys(tmp_path):
    m = prepare(_args(tmp_path, percentile=100))
    assert set(m) == {'model_id', 'max_length', 'percentile', 'label_names', 'rows', 'truncated', 'length_stats', 'data',
                      'text_column', 'label_column', 'trn_tutorials_version', 'bucket_lengths', 'bucket_rows', 'padding_share'}
    assert m['bucket_lengths'] == [m['max_length']] and m['bucket_rows']['train'] == [m['rows']['train']]
    assert json.loads((tmp_path/'prep'/'trn_tutorials.json').read_text()) == m
    assert m['truncated'] == {'train': 0, 'validation': 0, 'test': 0}


@pytest.mark.skipif(not (EMOTION/'train.txt').exists(), reason='the emotion files are not here')
def test_real_emotion_lengths(monkeypatch):
    import datasets.config, tempfile
    cache = tempfile.TemporaryDirectory()  # keep datasets' Arrow copy of the research-licensed files out of ~/.cache
    monkeypatch.setattr(datasets.config, 'HF_DATASETS_CACHE', Path(cache.name))
    ds = validate(load_raw(str(EMOTION)))
    assert {s: len(d) for s, d in ds.items()} == {'train': 16000, 'validation': 2000, 'test': 2000}
    assert ds['train'].features['label'].names == EMOTION_LABELS
    assert ds['train'][0] == {'text': 'i didnt feel humiliated', 'label': 0}
    lengths = token_lengths(ds['train'], AutoTokenizer.from_pretrained(local_model()))
    assert (length_stats(lengths)['p99.9'], length_stats(lengths)['max']) == (66, 87)
    assert choose_length(lengths) == (72, 4)
    assert choose_length(lengths, percentile=100) == (88, 0)
    cache.cleanup()
