"""Checks of `trn_tutorials.data.tokenizers`: a tokenizer's fingerprint (what a prepared folder records of the tokenizer that
made it), and the tokenizers `prepare` refuses before writing anything: a model folder without tokenizer files, and one whose
vocabulary maps the data's words to [UNK]."""
from __future__ import annotations
import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from local_services import prep_args
from trn_tutorials.core.options import UsageError
from trn_tutorials.models import local_model, tiny_bert
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.tokenizers import tokenizer_fingerprint


def test_tokenizer_fingerprint():
    tok = AutoTokenizer.from_pretrained(local_model())
    fp = tokenizer_fingerprint(tok)
    assert fp == {'vocab_size': 30522, 'special_ids': {'pad': 0, 'cls': 101, 'sep': 102, 'unk': 100, 'mask': 103, 'bos': None, 'eos': None}}
    tok.add_tokens(['trainium'])
    assert tokenizer_fingerprint(tok)['vocab_size'] == 30523 and json.loads(json.dumps(fp)) == fp


def _no_tokenizer(tmp_path, name='bare', keep=()):
    "A tiny model folder (config.json and weights) whose tokenizer files were removed, but `keep`."
    p = Path(tiny_bert(tmp_path/name, ['i', 'feel', 'happy', 'sad']))
    for f in ('tokenizer.json', 'vocab.txt', 'tokenizer_config.json', 'special_tokens_map.json'):
        if f not in keep and (p/f).exists(): (p/f).unlink()
    return str(p)


@pytest.mark.parametrize('keep', [(), ('tokenizer_config.json',)])
def test_model_folder_without_tokenizer_files_refused(tmp_path, keep):
    model = _no_tokenizer(tmp_path, keep=keep)
    with pytest.raises(UsageError) as e: prepare(prep_args(tmp_path, model_id=model))
    msg = str(e.value)
    assert f"{model} has no tokenizer files (tokenizer.json or vocab.txt)" in msg and f"e.g. --model_id {local_model()}" in msg, msg
    assert not (tmp_path/'prep').exists()


def test_tokenizer_that_maps_most_words_to_unk_refused(tmp_path):
    model = tiny_bert(tmp_path/'few-words', ['zebra', 'quartz'])   # tokenizer files, but not one word of the data
    with pytest.raises(UsageError, match=r"maps 100% of the train tokens to \[UNK\]") as e: prepare(prep_args(tmp_path, model_id=model))
    assert f"e.g. --model_id {local_model()}" in str(e.value) and not (tmp_path/'prep').exists()
