"""Checks of `trn_tutorials.data.files`: the files people have, read as they are. First the datasets of the SageMaker tutorials
through the data chapter (issue 14, item 4): amazon_polarity and CoLA.

Every file here is written by the test itself, shaped like the real data (columns, header or not, quotes, labels) but with
made-up rows: the real files are for research use and stay out of the repository. Each set is prepared with a tiny BERT
whose vocabulary holds the fixtures' words, and the test reads back what training reads: `load_prepared`'s splits and
manifest (label names = the model's id2label, labels, rows) and the token ids of the text.

Then the messages, in the user's terms (issue 42): a bad row named by its line in the user's file, a spreadsheet's empty
rows, a malformed JSON line, columns of another kind said in words, a full disk where the datasets cache is.
"""
from __future__ import annotations
import errno, json, re, subprocess
from pathlib import Path

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value
from transformers import AutoTokenizer

from careless import ENV, TRN
from conftest import LABELS, rows, write
from local_services import REPR, refused
from trn_tutorials.core.options import UsageError
from trn_tutorials.models import local_model, tiny_bert
from trn_tutorials.data.files import KNOWN_DATA
from trn_tutorials.data.sources import DataArguments, load_raw
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.prepared import load_prepared
from trn_tutorials.data.labels import label_maps
from trn_tutorials.data.checks import validate


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
    prepared = load_prepared(str(tmp_path/'prep'))
    return prepared.splits, prepared.manifest


def ids(tiny, text, length): return AutoTokenizer.from_pretrained(tiny)(text, padding='max_length', max_length=length)['input_ids']


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


# ----------------------------------------------------------------------------------------------------
# Messages speak the user's terms (issue 42, principle 6): a bad row is named by its line in the user's file and every bad row is
# counted; a spreadsheet's empty rows are left out with a note; a malformed JSON line is named by its line; labels and text columns of
# another kind are said in words, never as a `datasets` feature's repr; a full disk of the datasets cache is said so.
def said(lines:list[int]) -> str:
    "`lines 4, 9 and 12` (no runs, at most five) as the messages say them."
    return f"line {lines[0]}" if len(lines) == 1 else f"lines {', '.join(map(str, lines[:-1]))} and {lines[-1]}"


KINDS = ['csv', 'tsv', 'txt', 'jsonl', 'json-lines']


@pytest.mark.parametrize('kind', KINDS)
@pytest.mark.parametrize('what', ['label', 'text'])
def test_bad_rows_named_by_their_lines_and_counted(tmp_path, kind, what):
    "Three rows without a label (or a text), after blank lines (and a quoted text over three lines in the .csv): each named by its line."
    bad = (5, 11, 17)
    rs = rows(no_label=bad if what == 'label' else (), no_text=bad if what == 'text' else (), multiline=(2,) if kind == 'csv' else ())
    f, at = write(tmp_path, kind, rs, blank_after=(0, 8))
    msg = refused(validate, load_raw(str(f)))
    assert msg == f"{f}: 3 rows have no {what} ({said([at[i] for i in bad])}): give every row {'one' if what == 'label' else 'some'}", msg
    assert 'split' not in msg


@pytest.mark.parametrize('kind', KINDS)
def test_one_bad_row_and_many(tmp_path, kind):
    f, at = write(tmp_path, kind, rows(no_label=(9,)))
    assert refused(validate, load_raw(str(f))) == f"{f}: 1 row has no label (line {at[9]}): give every row one"
    bad = [3, 6, 7, 8, 12, 15, 18, 20, 23]   # 7 and 8 follow 6: one run
    f, at = write(tmp_path, kind, rows(no_label=bad))
    lines = [at[i] for i in bad]
    run = f"{lines[1]}-{lines[3]}" if lines[3] - lines[1] == 2 else None
    msg = refused(validate, load_raw(str(f)))
    assert msg.startswith(f"{f}: 9 rows have no label (lines {lines[0]}, ") and msg.endswith(" more): give every row one"), msg
    if run: assert f"lines {lines[0]}, {run}, {lines[4]}, {lines[5]}, {lines[6]} and 2 more)" in msg, msg


def test_the_cli_names_the_line(tmp_path, capsys):
    "As a user runs it: `trn-tutorials prep --data train.csv ...`, one line on stderr, status 2."
    import trn_tutorials.cli as C
    f, at = write(tmp_path, 'csv', rows(no_text=(9, 12, 18), multiline=(1,)), blank_after=(4,))
    with pytest.raises(SystemExit) as e:
        C.run(['prep', '--data', str(f), '--dataset_path', str(tmp_path/'prep'), '--model_id', local_model()])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == [f"trn-tutorials prep: error: {f}: 3 rows have no text ({said([at[9], at[12], at[18]])}): give every row some"], err
    assert not (tmp_path/'prep').exists()


def test_rows_of_a_split_in_several_files(tmp_path):
    "Each file of a split named with its own lines; a file without lines (parquet) by its rows, counted from 0."
    d = tmp_path/'glue'; d.mkdir()
    write(d, 'csv', rows(), name='train')
    a, at_a = write(d, 'tsv', rows(8, no_label=(2,)), name='in_domain_dev')
    b, at_b = write(d, 'tsv', rows(8, no_label=(1, 5)), name='out_of_domain_dev')
    msg = refused(validate, load_raw(str(d)))
    assert msg == f"3 rows of split 'validation' have no label ({a} line {at_a[2]}; {b} lines {at_b[1]} and {at_b[5]}): give every row one", msg
    p = tmp_path/'pq'; p.mkdir()
    Dataset.from_dict({'text': [t for t, _ in rows(8)], 'label': [l for _, l in rows(8, no_label=(3, 6))]}).to_parquet(str(p/'train.parquet'))
    assert refused(validate, load_raw(str(p))) == f"{p/'train.parquet'}: 2 rows have no label (rows 3 and 6, counted from 0): give every row one"


def test_data_not_from_files_keeps_row_numbers(tmp_path):
    "A Hub-like `DatasetDict` and a `save_to_disk` folder have no lines: rows are named by their index in the split, and counted."
    rs = rows(no_label=(4, 9, 10, 11))
    d = DatasetDict(train=Dataset.from_dict({'text': [t for t, _ in rs], 'label': [l for _, l in rs]}))
    assert refused(validate, d) == "4 rows of split 'train' have no label (rows 4 and 9-11): give every row one"
    d.save_to_disk(str(tmp_path/'saved'))
    assert refused(validate, load_raw(str(tmp_path/'saved'))) == "4 rows of split 'train' have no label (rows 4 and 9-11): give every row one"
    one = DatasetDict(train=Dataset.from_dict({'text': ['a', None, 'c', 'd'], 'label': LABELS * 2}))
    assert refused(validate, one) == "row 1 of split 'train' has no text: give every row some"


def test_lines_are_not_trusted_once_the_split_changed(tmp_path):
    "The lines `load_raw` noted describe the rows it read: a split changed since is named by its rows."
    f, at = write(tmp_path, 'csv', rows(no_label=(7,)))
    raw = load_raw(str(f))
    raw['train'] = raw['train'].select(range(2, 24))
    assert refused(validate, raw) == "row 5 of split 'train' has no label: give every row one"


# --- a spreadsheet's empty rows
@pytest.mark.parametrize('kind,empty', [('csv', ',\n'), ('csv', ', \n'), ('tsv', '\t\n'), ('txt', ';\n'), ('jsonl', '{}\n'),
                                        ('jsonl', '{"text": null, "label": null}\n')])
def test_wholly_empty_rows_are_left_out_with_a_note(tmp_path, capsys, kind, empty):
    "Excel saves trailing rows of bare separators: they are left out with one note naming the file, their lines and how many."
    f, at = write(tmp_path, kind, rows())
    f.write_text(f.read_text() + empty * 3)
    raw = load_raw(str(f))
    assert len(raw['train']) == 24 and None not in raw['train']['label']
    n = at[-1] + 1
    assert [l for l in capsys.readouterr().err.splitlines() if l.startswith('note:')] == [f"note: left out 3 rows of {f} with no value in any column (lines {n}-{n + 2}; a spreadsheet's empty rows)"]
    assert len(validate(raw)['train']) > 0


def test_empty_rows_between_rows_keep_the_lines_of_the_rest(tmp_path, capsys):
    f = tmp_path/'train.csv'
    f.write_text('text,label\n' + ''.join(f'row {i},{LABELS[i % 2]}\n' if i not in (4, 5, 9) else ',\n' for i in range(20)).replace('row 12,joy', 'row 12,'))
    msg = refused(validate, load_raw(str(f)))
    assert msg == f"{f}: 1 row has no label (line 14): give every row one", msg
    assert "left out 3 rows of" in capsys.readouterr().err


def test_only_empty_rows_refused_as_such(tmp_path):
    (tmp_path/'train.csv').write_text('text,label\n' + ',\n' * 5)
    assert refused(load_raw, str(tmp_path/'train.csv')) == (f"{tmp_path/'train.csv'} holds only empty rows (5 rows with no value in any column, "
                                                            f"lines 2-6): add rows or remove the file")


def test_prep_says_the_note_and_prepares_the_rest(tmp_path, capsys):
    f, at = write(tmp_path, 'csv', rows(40))
    f.write_text(f.read_text() + ',\n' * 2)
    m = prepare(DataArguments(data=str(f), model_id=local_model(), dataset_path=str(tmp_path/'prep')))
    assert sum(m['rows'].values()) == 40
    assert f"note: left out 2 rows of {f} with no value in any column" in capsys.readouterr().err


# --- JSON that is not
BAD_JSON = [
    ('trailing brace', '{"text": "oops", "label": "joy"}}', 'more after the end of the record at column 33'),
    ('missing comma', '{"text": "oops" "label": "joy"}', 'a comma is missing at column 17'),
    ('name not quoted', '{text: "oops", "label": "joy"}', 'a name not in double quotes at column 2'),
    ('unclosed string', '{"text": "oops, "label": "joy"}', "a comma is missing"),
    ('a list, not a record', '["oops", "joy"]', 'is not a record'),
    ('cut off', '{"text": "oops", "label": ', 'a value is missing'),
]


@pytest.mark.parametrize('kind', ['jsonl', 'json-lines'])
@pytest.mark.parametrize('how,line,why', BAD_JSON, ids=[b[0] for b in BAD_JSON])
def test_a_malformed_json_line_is_named(tmp_path, kind, how, line, why):
    f, at = write(tmp_path, kind, rows(), blank_after=(1,))
    text = f.read_text().split('\n')
    text[at[6] - 1] = line
    f.write_text('\n'.join(text))
    msg = refused(load_raw, str(f))
    assert msg.startswith(f"{f} line {at[6]}: not valid JSON (") and why in msg and msg.endswith(': fix it, one record a line'), msg
    assert 'position' not in msg


def test_every_malformed_json_line_is_counted(tmp_path):
    f, at = write(tmp_path, 'jsonl', rows())
    text = f.read_text().split('\n')
    column = len(text[at[3] - 1]) + 1
    for i in (3, 10, 11): text[at[i] - 1] = text[at[i] - 1] + '}'
    f.write_text('\n'.join(text))
    assert refused(load_raw, str(f)) == (f"{f} line {at[3]}: not valid JSON (more after the end of the record at column {column}); 3 of its 24 lines "
                                         f"are not (lines {at[3]} and {at[10]}-{at[11]}): fix them, one record a line")


def test_a_json_list_names_its_line(tmp_path):
    f = tmp_path/'train.json'
    f.write_text('[\n' + ',\n'.join(json.dumps({'text': t, 'label': l}) for t, l in rows(6)) + ',\n]\n')
    assert refused(load_raw, str(f)).startswith(f"{f} line 8: not valid JSON (a value is missing at column 1)")


# --- labels and texts of another kind, in words
KIND_CASES = [   # (file name, content, words the message holds)
    ('bool.jsonl', ''.join(json.dumps({'text': f'tweet {i}', 'label': i % 2 == 0}) + '\n' for i in range(8)),
     ["the label column 'label' of", 'holds true/false values (false, true)', 'label name', 'integer class id']),
    ('float.csv', 'text,label\n' + ''.join(f'tweet {i},{i % 3 + 0.5}\n' for i in range(8)), ['holds numbers with decimals (0.5)', 'integer class id']),
    ('score.csv', 'text,label\n' + ''.join(f'tweet {i},{[1, 1.5, 2][i % 3]}\n' for i in range(8)), ['holds numbers with decimals (1.5)']),
    ('list.jsonl', ''.join(json.dumps({'text': f'tweet {i}', 'label': ['joy']}) + '\n' for i in range(8)), ['holds lists (["joy"])']),
    ('dict.jsonl', ''.join(json.dumps({'text': f'tweet {i}', 'label': {'name': 'joy'}}) + '\n' for i in range(8)), ['holds records with fields name']),
    ('mixed.jsonl', ''.join(json.dumps({'text': f'tweet {i}', 'label': [1, 'joy', True][i % 3]}) + '\n' for i in range(8)), ['holds a mix of']),
    ('texts.jsonl', ''.join(json.dumps({'text': [f'tweet {i}'], 'label': LABELS[i % 2]}) + '\n' for i in range(8)), ["column 'text' of", 'holds lists', 'not text']),
    ('numbers.csv', 'text,label\n' + ''.join(f'{i},{LABELS[i % 2]}\n' for i in range(8)), ["column 'text' of", 'holds whole numbers (0, 1), not text']),
]


@pytest.mark.parametrize('name,content,words', KIND_CASES, ids=[c[0] for c in KIND_CASES])
def test_columns_of_another_kind_said_in_words(tmp_path, name, content, words):
    (tmp_path/name).write_text(content)
    classes = {'problem_type': 'single_label_classification'} if name in ('float.csv', 'score.csv', 'list.jsonl') else {}   # else a score, a label set
    msg = refused(validate, load_raw(str(tmp_path/name)), **classes)
    assert all(w in msg for w in words), msg


FEATURES = [Value('bool'), Value('float64'), Value('int64'), Value('timestamp[s]'), Sequence(Value('string')), {'a': Value('string')},
            ClassLabel(names=['x', 'y'])]


@pytest.mark.parametrize('ft', FEATURES, ids=lambda ft: type(ft).__name__ + getattr(ft, 'dtype', ''))
@pytest.mark.parametrize('column', ['label', 'text'])
def test_no_message_holds_a_feature_repr(ft, column):
    "Data from the Hub or `save_to_disk` holds any feature type: a text or label column of each is refused (or read) in words."
    import datetime
    sample = {'bool': True, 'float64': 1.5, 'int64': 3, 'timestamp[s]': datetime.datetime(2024, 1, 1)}
    v = (sample[ft.dtype] if isinstance(ft, Value) else ['a'] if isinstance(ft, Sequence) else {'a': 'b'} if isinstance(ft, dict) else 1)
    other = {'text': Value('string'), 'label': ClassLabel(names=LABELS)}
    feats = Features({**other, column: ft})
    d = Dataset.from_dict({'text': ['a'] * 6, 'label': [0, 1] * 3, column: [v] * 6}, features=feats)
    try: validate(DatasetDict(train=d, validation=d), min_label_rows=1)
    except UsageError as e: assert not REPR.search(str(e)) and '\n' not in str(e), str(e)


def test_files_of_one_split_with_different_kinds(tmp_path):
    "Shards where one holds integer ids and one names: the mix is said in words (the ids read as text), never as a cast error."
    d = tmp_path/'shards'; d.mkdir()
    (d/'train-00000-of-00002.csv').write_text('text,label\n' + ''.join(f'tweet {i},{i % 2}\n' for i in range(6)))
    (d/'train-00001-of-00002.csv').write_text('text,label\n' + ''.join(f'tweet {i},{LABELS[i % 2]}\n' for i in range(6)))
    msg = refused(validate, load_raw(str(d)))
    assert 'mix integer ids (0, 1) with names (joy, sadness)' in msg, msg
    (d/'train-00001-of-00002.csv').write_text('text,label\n' + ''.join(f'tweet {i},"[1, 2]"\n' for i in range(6)))
    (d/'train-00001-of-00002.jsonl').write_text(''.join(json.dumps({'text': f'tweet {i}', 'label': [i]}) + '\n' for i in range(6)))
    (d/'train-00001-of-00002.csv').unlink()
    msg = refused(load_raw, str(d))
    assert "hold different kinds of values in column 'label'" in msg and 'holds whole numbers (0, 1)' in msg and 'holds lists ([0])' in msg, msg


# --- a full disk where the datasets cache is
def test_full_disk_while_reading_names_the_datasets_cache(tmp_path, monkeypatch):
    "Reading a file writes an Arrow copy to the datasets cache: a full disk there is said so, not `could not read ... valid .csv`."
    import datasets, trn_tutorials.data.files as F
    def full(*a, **k): raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(F, 'load_dataset', full)
    f, _ = write(tmp_path, 'csv', rows())
    msg = refused(load_raw, str(f))
    assert msg.startswith(f"the disk holding the datasets cache {datasets.config.HF_DATASETS_CACHE} is full (reading {f} writes a copy there)"), msg
    assert 'HF_DATASETS_CACHE' in msg and 'valid' not in msg
