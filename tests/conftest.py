"""Fixtures with real components: a moto_server for the AWS APIs and an OpenSSH sshd on 127.0.0.1.

A missing program fails the test with the command that installs it (`.ci/services.sh`); nothing is skipped.
"""
import time
import pytest
from local_services import AWS_VARS_TO_DROP, MissingService, MotoServer, Sshd, alive, procs_mentioning


@pytest.fixture(scope='session')
def _moto(tmp_path_factory):
    try: srv = MotoServer(tmp_path_factory.mktemp('moto')).start()
    except MissingService as e: pytest.fail(str(e), pytrace=False)
    yield srv
    srv.stop()
    assert not alive(srv.proc.pid), "moto_server still running"


@pytest.fixture
def moto_server(_moto, monkeypatch):
    "A real moto_server on 127.0.0.1, emptied, with boto3 pointed at it (AWS_ENDPOINT_URL, fake credentials, us-east-1)."
    _moto.reset()
    for k in AWS_VARS_TO_DROP: monkeypatch.delenv(k, raising=False)
    for k, v in _moto.env.items(): monkeypatch.setenv(k, v)
    return _moto


@pytest.fixture(scope='session')
def sshd(tmp_path_factory):
    "A real OpenSSH sshd on 127.0.0.1 accepting `sshd.key` for the current user; checks at the end that nothing it served is left running."
    try: srv = Sshd(tmp_path_factory.mktemp('sshd')).start()
    except MissingService as e: pytest.fail(str(e), pytrace=False)
    yield srv
    deadline = time.monotonic() + 10
    while srv.children() and time.monotonic() < deadline: time.sleep(0.1)
    left = srv.children()
    srv.stop()
    assert not left, f"sshd sessions still open at the end: {left}"
    assert not alive(srv.proc.pid), "sshd still running"
    assert not procs_mentioning(str(srv.dir)), f"processes left behind: {procs_mentioning(str(srv.dir))}"


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
    "The bundled sample, prepared for a tiny BERT (one bucket, and four): the launch and precompile tests share it."
    from trn_tutorials.data_files import EMOTION_LABELS, load_raw, sample_data
    from trn_tutorials.data import DataArguments, prepare
    from trn_tutorials.models import tiny_bert
    tmp = tmp_path_factory.mktemp('launch')
    raw = load_raw(sample_data())
    words = sorted({w for split in raw.values() for t in split['text'] for w in t.split()})
    model = tiny_bert(tmp/'tiny-bert', words, labels=EMOTION_LABELS)
    prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'data')))
    prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/'data-4'), buckets=4))
    return tmp


@pytest.fixture
def distilbert_like(tmp_path):
    "A function that saves a tiny DistilBERT (a family packing runs since issue 43) with the tokenizer of the model `like`; its folder."
    def make(like):
        from transformers import AutoTokenizer, DistilBertConfig, DistilBertForSequenceClassification
        tok, path = AutoTokenizer.from_pretrained(like), tmp_path/'tiny-distilbert'
        DistilBertForSequenceClassification(DistilBertConfig(vocab_size=tok.vocab_size, dim=32, hidden_dim=64, n_layers=1, n_heads=2)).save_pretrained(path)
        tok.save_pretrained(path)
        return str(path)
    return make


@pytest.fixture
def modernbert_like(tmp_path):
    "A function that saves a tiny ModernBERT (a family packing does not support) with the tokenizer of the model `like`; its folder."
    def make(like):
        from transformers import AutoTokenizer, ModernBertConfig, ModernBertForSequenceClassification
        tok, path = AutoTokenizer.from_pretrained(like), tmp_path/'tiny-modernbert'
        ids = dict(pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
        ModernBertForSequenceClassification(ModernBertConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                             num_attention_heads=2, **ids)).save_pretrained(path)
        tok.save_pretrained(path)
        return str(path)
    return make
