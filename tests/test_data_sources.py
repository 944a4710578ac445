"""The datasets of the SageMaker tutorials through the data chapter (issue 14, item 4): amazon_polarity and CoLA.

Every file here is written by the test itself, shaped like the real data (columns, header or not, quotes, labels) but with
made-up rows: the real files are for research use and stay out of the repository. Each set is prepared with a tiny BERT
whose vocabulary holds the fixtures' words, and the test reads back what training reads: `load_prepared`'s splits and
manifest (label names = the model's id2label, labels, rows) and the token ids of the text.
"""
from __future__ import annotations
import json, os, re, subprocess, sys
from pathlib import Path

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
from transformers import AutoTokenizer

from trn_tutorials.core import UsageError, parse_args
from trn_tutorials.models import tiny_bert
from trn_tutorials.data_files import KNOWN_DATA, known_defaults, load_raw
from trn_tutorials.data import DataArguments, load_prepared, prepare
from trn_tutorials.data_checks import label_maps, validate

TRN = str(Path(sys.executable).parent/'trn-tutorials')   # the console script of the Python running the tests
ENV = dict(os.environ, HF_HUB_OFFLINE='1')

# ------------------------------------------------------------------------------------------------ amazon_polarity
# label (0 negative, 1 positive), title, content; titles with and without end punctuation, one empty, quotes and commas
AMAZON_TRAIN = [
    (1, 'Great CD', 'My lovely Pat has one of the great voices of her generation.'),
    (0, 'Broke in a week!', 'The handle snapped on day six, and support never answered.'),
    (1, 'Works as "advertised"', 'Does what it says on the tin; "five stars" from me.'),
    (0, 'Avoid', 'Cheap plastic, cheap sound, expensive mistake.'),
    (1, '', 'No title, but a very happy buyer: it arrived early.'),
    (0, 'Not again?', 'Second one that failed. I give up'),
    (1, 'Lovely book', 'A quiet, warm story that I read twice.'),
    (0, 'Boring', 'I fell asleep at page ten, twice.'),
] * 3
AMAZON_TEST = [(1, 'Happy', 'It works, and it looks great.'), (0, 'Sad "gift"', 'It broke before the party.'),
               (1, 'Fine.', 'Good value'), (0, 'Meh', 'Slow, loud and hot.')]
AMAZON_TEXT = {  # title + content as the tutorial trains on it: joined as sentences
    'Happy': 'Happy. It works, and it looks great.', 'Sad "gift"': 'Sad "gift". It broke before the party.',
    'Fine.': 'Fine. Good value', 'Meh': 'Meh. Slow, loud and hot.'}


def _amazon(rows): return {'label': [r[0] for r in rows], 'title': [r[1] for r in rows], 'content': [r[2] for r in rows]}


def write_amazon(folder:Path, kind:str) -> str:
    "An amazon_polarity-shaped split set (train.KIND, test.KIND) in `folder`; labels as plain integers."
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in (('train', AMAZON_TRAIN), ('test', AMAZON_TEST)):
        d = Dataset.from_dict(_amazon(rows))
        if kind == 'parquet': d.to_parquet(str(folder/'train.parquet' if split == 'train' else folder/'test.parquet'))
        elif kind == 'csv': d.to_csv(str(folder/f'{split}.csv'), index=False)
        else: (folder/f'{split}.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in d.to_list()))
    return str(folder)

# ----------------------------------------------------------------------------------------------------------- CoLA
# sentence_source, label (0/1), label_notes, sentence: a tab between fields, no quoting, lone `"`s in sentences (one opens a field)
COLA_TRAIN = [
    ('gj04', 1, '', "Our friends won't buy this analysis, let alone the next one we propose."),
    ('gj04', 0, '*', '"The more we study verbs, the crazier they get.'),       # an unbalanced quote: must not swallow rows
    ('gj04', 1, '', 'Day by day the facts are getting murkier.'),
    ('gj04', 0, '*', 'They drank the pub.'),
    ('bc01', 1, '', 'He said "hello" and left.'),
    ('bc01', 0, '??', 'Her "hi, was.'),
] * 3
COLA_DEV = [('clc95', 1, '', 'Somebody just left "the room".'), ('clc95', 0, '*', 'Them left "'),
            ('clc95', 1, '', 'The sailors rode the breeze.'), ('clc95', 0, '*', 'Rode the sailors breeze the.')]
COLA_HEADER = 'sentence_source\tlabel\tlabel_notes\tsentence\n'


def _tsv(rows): return ''.join(f'{s}\t{l}\t{n}\t{t}\n' for s, l, n, t in rows)


def write_cola(folder:Path, header:bool=False) -> str:
    "A CoLA-shaped folder: in_domain_train.tsv and in_domain_dev.tsv, headerless as CoLA ships them (or with a header line)."
    folder.mkdir(parents=True, exist_ok=True)
    (folder/'in_domain_train.tsv').write_text(COLA_HEADER * header + _tsv(COLA_TRAIN))
    (folder/'in_domain_dev.tsv').write_text(COLA_HEADER * header + _tsv(COLA_DEV))
    return str(folder)


def words_of(*texts) -> list[str]:
    "The fixtures' words as BERT's basic tokenizer splits them (lower case, punctuation apart): the tiny BERT's vocabulary."
    return sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})


@pytest.fixture(scope='module')
def tiny(tmp_path_factory) -> str:
    texts = [t for r in AMAZON_TRAIN + AMAZON_TEST for t in r[1:]] + [r[3] for r in COLA_TRAIN + COLA_DEV]
    return tiny_bert(tmp_path_factory.mktemp('tiny')/'tiny-bert', words_of(*texts), labels=['negative', 'positive'])


def args(tmp_path, data, tiny, **kw) -> DataArguments:
    return DataArguments(data=data, model_id=tiny, dataset_path=str(tmp_path/'prep'), **kw)


def read_back(tmp_path):
    "What training reads: the tokenized splits and the manifest."
    return load_prepared(str(tmp_path/'prep'))


def ids(tiny, text, length): return AutoTokenizer.from_pretrained(tiny)(text, padding='max_length', max_length=length)['input_ids']


# -------------------------------------------------------------------------------------------------------- options
def test_options_have_one_name_and_one_type_on_the_cli_and_in_python():
    from trn_tutorials.core import _parser
    p = _parser([DataArguments], 'trn-tutorials prep')   # the CLI's HfArgumentParser, each field's help in place (alone, not after another test)
    a, = p.parse_args_into_dataclasses(['--text_column', 'title', 'content', '--label_names', 'negative', 'positive',
                                        '--column_names', 'a', 'b', '--preset', 'cola'])
    assert a == DataArguments(text_column=['title', 'content'], label_names=['negative', 'positive'], column_names=['a', 'b'], preset='cola')
    assert DataArguments(text_column='review').text_column == ['review']   # from Python, one column may be a str
    helps = {act.dest: act.help for act in p._actions}
    assert all(k in helps['preset'] for k in KNOWN_DATA)
    with pytest.raises(SystemExit): parse_args([DataArguments], ['--text_columns', 'a'], prog='trn-tutorials prep')


def test_known_defaults():
    "A known name in --data, or --preset, fills what the user left out; what the user gave wins; other data keeps `text`."
    a = known_defaults(DataArguments(data='amazon_polarity'))
    assert (a.preset, a.text_column, a.label_names, a.column_names) == ('amazon_polarity', ['title', 'content'], ['negative', 'positive'], None)
    assert known_defaults(DataArguments(data='fancyzhx/amazon_polarity')).preset == 'amazon_polarity'
    c = known_defaults(DataArguments(preset='cola'))
    assert (c.data, c.text_column, c.label_names) == ('cola', ['sentence'], ['unacceptable', 'acceptable'])
    assert c.column_names == ['sentence_source', 'label', 'label_notes', 'sentence']
    assert known_defaults(DataArguments(data='x.csv', preset='cola', text_column=['body'])).text_column == ['body']
    assert known_defaults(DataArguments(data='nyu-mll/glue')).preset is None    # GLUE holds many tasks: only `cola` names one
    plain = known_defaults(DataArguments(data='reviews.csv'))
    assert (plain.preset, plain.text_column, plain.label_names) == (None, ['text'], None)
    with pytest.raises(UsageError, match="unknown --preset 'sst2': use one of emotion, amazon_polarity, cola"):
        known_defaults(DataArguments(preset='sst2'))
    with pytest.raises(UsageError, match="--label_names pos pos names a label twice"):   # `validate` called on its own checks too
        validate(DatasetDict(train=Dataset.from_dict({'text': ['a', 'b'], 'label': [0, 1]})), label_names=['pos', 'pos'])


def test_hub_names_need_the_hub(monkeypatch):
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    for name in ('amazon_polarity', 'cola'):
        with pytest.raises(UsageError, match=f"'{name}' is not a local path and the Hub is unreachable"): load_raw(name)


# --------------------------------------------------------------------------------------------------- amazon_polarity
@pytest.mark.parametrize('kind', ['parquet', 'csv', 'jsonl'])
def test_amazon_polarity_shape(kind, tmp_path, tiny, capsys):
    "train/test files: title + content become the text, 0/1 get the names negative/positive, a validation split comes off train."
    data = write_amazon(tmp_path/'amazon', kind)
    m = prepare(args(tmp_path, data, tiny, preset='amazon_polarity'))
    assert 'text: title + content, joined as sentences' in capsys.readouterr().out
    pds, pm = read_back(tmp_path)
    assert pm == m and m['label_names'] == ['negative', 'positive'] and m['text_column'] == ['title', 'content']
    assert label_maps(pds) == ({0: 'negative', 1: 'positive'}, {'negative': 0, 'positive': 1})
    assert m['rows'] == {'train': 21, 'validation': 3, 'test': 4} and sum(m['rows'].values()) == len(AMAZON_TRAIN) + len(AMAZON_TEST)
    assert list(pds['test']['labels']) == [r[0] for r in AMAZON_TEST]
    assert sorted(list(pds['train']['labels']) + list(pds['validation']['labels'])) == sorted(r[0] for r in AMAZON_TRAIN)
    for row, (_, title, _) in zip(pds['test'], AMAZON_TEST):   # the test split keeps its order: each row is title + content
        assert row['input_ids'] == ids(tiny, AMAZON_TEXT[title], m['max_length'])


def test_amazon_polarity_text_joined_as_sentences(tmp_path):
    ds = validate(load_raw(write_amazon(tmp_path, 'jsonl')), ['title', 'content'], label_names=['negative', 'positive'], join_texts=True)
    assert list(ds['test']['text']) == [AMAZON_TEXT[r[1]] for r in AMAZON_TEST]
    texts = set(ds['train']['text']) | set(ds['validation']['text'])
    assert 'Broke in a week! The handle snapped on day six, and support never answered.' in texts   # `!` ends the title already
    assert 'No title, but a very happy buyer: it arrived early.' in texts                             # an empty title is left out
    assert ds['train'].features['label'] == ClassLabel(names=['negative', 'positive'])


def test_amazon_polarity_with_options_instead_of_the_preset(tmp_path, tiny):
    "The same result from the options a user would type for any dataset of this shape."
    data = write_amazon(tmp_path/'amazon', 'parquet')
    m = prepare(args(tmp_path, data, tiny, text_column=['title', 'content'], join_texts=True, label_names=['negative', 'positive']))
    assert (m['label_names'], m['rows']['test']) == (['negative', 'positive'], 4)
    # without names, integer labels keep their ids as names
    assert prepare(args(tmp_path, data, tiny, text_column=['title', 'content'], join_texts=True))['label_names'] == ['0', '1']


def test_hub_shaped_amazon_polarity(tmp_path, tiny):
    "As the Hub holds it: parquet shards named train-0000N-of-0000M with a ClassLabel, and an unlabelled test split left out."
    feats = Features({'label': ClassLabel(names=['negative', 'positive']), 'title': Value('string'), 'content': Value('string')})
    d = tmp_path/'hub'; d.mkdir()
    Dataset.from_dict(_amazon(AMAZON_TRAIN[:12]), features=feats).to_parquet(str(d/'train-00000-of-00002.parquet'))
    Dataset.from_dict(_amazon(AMAZON_TRAIN[12:]), features=feats).to_parquet(str(d/'train-00001-of-00002.parquet'))
    Dataset.from_dict({**_amazon(AMAZON_TEST), 'label': [-1] * 4}, features=feats).to_parquet(str(d/'test-00000-of-00001.parquet'))
    raw = load_raw(str(d))
    assert {s: len(x) for s, x in raw.items()} == {'train': 24, 'test': 4}
    m = prepare(args(tmp_path, str(d), tiny, preset='amazon_polarity'))
    assert m['rows'] == {'train': 21, 'validation': 3} and m['label_names'] == ['negative', 'positive']
    # the data's own ClassLabel names, renamed by --label_names (same count)
    assert prepare(args(tmp_path, str(d), tiny, preset='amazon_polarity', label_names=['neg', 'pos']))['label_names'] == ['neg', 'pos']


# ------------------------------------------------------------------------------------------------------------- CoLA
def test_cola_headerless_tsv(tmp_path, tiny):
    "CoLA's files as shipped: no header, four columns; a lone quote stays in its sentence and every row is kept."
    data = write_cola(tmp_path/'cola_public'/'raw')
    raw = load_raw(data, column_names=KNOWN_DATA['cola'].column_names)
    assert raw['train'].column_names == ['sentence_source', 'label', 'label_notes', 'sentence']
    assert list(raw['train']['sentence']) == [r[3] for r in COLA_TRAIN]            # first row kept, quotes not merged
    assert list(raw['validation']['sentence']) == [r[3] for r in COLA_DEV]
    m = prepare(args(tmp_path, data, tiny, preset='cola'))
    pds, pm = read_back(tmp_path)
    assert m['label_names'] == ['unacceptable', 'acceptable'] and label_maps(pds)[0] == {0: 'unacceptable', 1: 'acceptable'}
    assert m['rows'] == {'train': len(COLA_TRAIN), 'validation': len(COLA_DEV)}
    assert list(pds['validation']['labels']) == [r[1] for r in COLA_DEV]
    assert pds['validation'][1]['input_ids'] == ids(tiny, 'Them left "', m['max_length'])


def test_cola_with_a_header(tmp_path, tiny):
    "The same files with a header line: read by their own names, with or without the preset's names, and no row lost."
    data = write_cola(tmp_path/'cola', header=True)
    assert len(load_raw(data)['train']) == len(COLA_TRAIN)
    assert len(load_raw(data, column_names=KNOWN_DATA['cola'].column_names)['train']) == len(COLA_TRAIN)
    m = prepare(args(tmp_path, data, tiny, text_column=['sentence'], label_names=['unacceptable', 'acceptable']))
    assert m['rows'] == {'train': len(COLA_TRAIN), 'validation': len(COLA_DEV)}
    assert list(read_back(tmp_path)[0]['validation']['labels']) == [r[1] for r in COLA_DEV]


def test_quoting_is_off_for_tsv(tmp_path):
    "With csv quoting a lone `\"` would swallow the rows up to the next quote; in a .tsv it is a character."
    f = tmp_path/'train.tsv'
    f.write_text(COLA_HEADER + _tsv(COLA_TRAIN[:6]))
    assert list(load_raw(str(f))['train']['sentence']) == [r[3] for r in COLA_TRAIN[:6]]
    import pandas as pd
    assert len(pd.read_csv(f, sep='\t')) < 6   # what default quoting would have done with the same file


def test_glue_cola_folder(tmp_path, tiny, capsys):
    "GLUE's CoLA folder: train.tsv and dev.tsv headerless, test.tsv with a header `index<TAB>sentence` and no labels (left out)."
    d = tmp_path/'CoLA'; d.mkdir()
    (d/'train.tsv').write_text(_tsv(COLA_TRAIN)); (d/'dev.tsv').write_text(_tsv(COLA_DEV))
    (d/'test.tsv').write_text('index\tsentence\n0\tBill whistled past the house.\n1\tThe car honked "its way.\n')
    raw = load_raw(str(d), column_names=KNOWN_DATA['cola'].column_names)
    assert raw['test'].column_names == ['index', 'sentence'] and len(raw['test']) == 2
    m = prepare(args(tmp_path, str(d), tiny, preset='cola'))
    assert m['rows'] == {'train': len(COLA_TRAIN), 'validation': len(COLA_DEV)}
    assert "left out: split 'test' (it has no labels)" in capsys.readouterr().out
    # test.tsv as the training file: no labels to train on, said in one line
    with pytest.raises(UsageError, match=r"no label column 'label' in split 'train' \(columns: index, sentence\).*cannot train"):
        prepare(args(tmp_path, str(d/'test.tsv'), tiny, preset='cola'))


def test_in_domain_and_out_of_domain_dev_make_one_validation_split(tmp_path):
    d = Path(write_cola(tmp_path/'raw'))
    (d/'out_of_domain_dev.tsv').write_text(_tsv(COLA_DEV[:2]))
    raw = load_raw(str(d), column_names=KNOWN_DATA['cola'].column_names)
    assert list(raw['validation']['sentence']) == [r[3] for r in COLA_DEV + COLA_DEV[:2]]
    (d/'dev.tsv').write_text(_tsv(COLA_DEV))   # a bare `dev` file is the whole split: with others it is ambiguous
    with pytest.raises(UsageError, match="two files for split 'validation'.*keep one"):
        load_raw(str(d), column_names=KNOWN_DATA['cola'].column_names)


# ---------------------------------------------------------------------------------------------------------- bad input
def test_headerless_file_read_as_if_it_had_a_header_is_refused(tmp_path):
    data = write_cola(tmp_path/'cola')
    with pytest.raises(UsageError) as e: load_raw(data)
    msg = str(e.value)
    assert msg.startswith("the first line of ") and "in_domain_train.tsv is a row of data, not column names (gj04 | 1 |  | Our friends" in msg
    assert msg.endswith("pass --column_names with a name for each of its 4 columns, or --preset cola if it is a cola file")
    (tmp_path/'reviews.csv').write_text('1,Great CD,My lovely Pat has one of the great voices\n0,Avoid,Cheap\n')
    with pytest.raises(UsageError, match=r"reviews.csv is a row of data.*each of its 3 columns$"): load_raw(str(tmp_path/'reviews.csv'))
    # a header that looks like data (a number, a sentence) is still a header when it is exactly the names given
    (tmp_path/'odd.tsv').write_text('id\t2024\ttext of the review here\n7\t1\tFine\n')
    assert load_raw(str(tmp_path/'odd.tsv'), column_names=['id', '2024', 'text of the review here'])['train'].to_list() == \
        [{'id': 7, '2024': 1, 'text of the review here': 'Fine'}]


BAD = [  # (files to write, DataArguments fields, words of the one line)
    ({'t.tsv': _tsv(COLA_TRAIN)}, dict(column_names=['label', 'sentence', 'x']),
     "t.tsv has 4 columns (gj04 | 1 |  | Our friends won't buy this an…) but --column_names names 3 (label, sentence, x): pass one name per column"),
    ({'a.csv': 'label,title,content\n0,a,b\n1,c,d\n'}, dict(text_column=['title', 'body']),
     "no text column 'body' in split 'train' (columns: label, title, content): pass --text_column with one of them"),
    ({'a.csv': 'label,title,content\n0,a,b\n1,c,d\n'}, dict(text_column=['title', 'content'], label_names=['negative', 'neutral', 'positive']),
     "--label_names negative neutral positive gives 3 names but split 'train' has labels 0, 1: pass one name per label id 0..1, in id order"),
    ({'a.csv': 'text,label\nhi,joy\nho,sad\n'}, dict(label_names=['joy', 'anger']),
     "--label_names joy anger does not match the labels of split 'train' (joy, sad): pass exactly those"),
    ({'a.csv': 'text,label\nhi,joy\nho,sad\n'}, dict(label_names=['joy', 'joy']), "--label_names names 'joy' twice: give each one once"),
    ({'t.tsv': _tsv(COLA_TRAIN)}, dict(column_names=['a', 'label', 'a', 'sentence']), "--column_names names 'a' twice: give each one once"),
    ({'a.csv': 'text,label\nhi,joy\nho,sad\n'}, dict(preset='imdb'), "unknown --preset 'imdb': use one of emotion, amazon_polarity, cola"),
    ({'train-00000-of-00002.csv': 'text,label\nhi,0\n', 'train-00001-of-00002.csv': 'body,label\nho,1\n'}, {},
     "train-00001-of-00002.csv has columns body, label but train-00000-of-00002.csv has text, label: give the files of split 'train' the same columns"),
]

@pytest.mark.parametrize('files,kw,words', BAD, ids=[w.split(':')[0][:50] for _, _, w in BAD])
def test_bad_input_one_line_before_tokenizing(files, kw, words, tmp_path, monkeypatch):
    "Each is refused by `prepare` in one line naming the fix, before the tokenizer is loaded (the model folder does not exist)."
    d = tmp_path/'data'; d.mkdir()
    for name, text in files.items(): (d/name).write_text(text)
    data = str(d/next(iter(files))) if len(files) == 1 else str(d)
    with pytest.raises(UsageError) as e: prepare(args(tmp_path, data, str(tmp_path/'no-model-here'), **kw))
    msg = str(e.value)
    assert words in msg and '\n' not in msg and 'no such model' not in msg, msg
    assert not (tmp_path/'prep').exists()


# ---------------------------------------------------------------------------------------------------------------- CLI
def test_prep_cli_cola_then_train(tmp_path, tiny):
    "`trn-tutorials prep` with the options typed as a user types them, then a short real training run on what it wrote."
    data = write_cola(tmp_path/'cola_public'/'raw')
    r = subprocess.run([TRN, 'prep', '--data', data, '--column_names', 'sentence_source', 'label', 'label_notes', 'sentence',
                        '--text_column', 'sentence', '--label_names', 'unacceptable', 'acceptable', '--model_id', tiny,
                        '--dataset_path', 'prep'], capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f'rows: train {len(COLA_TRAIN)}, validation {len(COLA_DEV)}' in r.stdout
    pds, m = read_back(tmp_path)
    assert m['label_names'] == ['unacceptable', 'acceptable'] and m['text_column'] == ['sentence'] and len(pds['train']) == len(COLA_TRAIN)
    r = subprocess.run([TRN, 'train', '--dataset_path', 'prep', '--output_dir', 'model', '--max_steps', '2', '--logging_steps', '1'],
                       capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    metrics = json.loads((tmp_path/'model'/'metrics.json').read_text())
    assert metrics['label_names'] == ['unacceptable', 'acceptable'] and metrics['final_split'] == 'validation'
    assert json.loads((tmp_path/'model'/'config.json').read_text())['id2label'] == {'0': 'unacceptable', '1': 'acceptable'}


def test_prep_cli_bad_input(tmp_path):
    data = write_cola(tmp_path/'cola')
    r = subprocess.run([TRN, 'prep', '--data', data], capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and 'Traceback' not in r.stderr, r.stderr
    assert lines[0].startswith('trn-tutorials prep: error: the first line of ') and 'in_domain_train.tsv is a row of data' in lines[0] and '--preset cola' in lines[0]
