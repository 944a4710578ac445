"""Checks of `trn_tutorials.data.sources`: where the data comes from and how it is asked for. `DataArguments` (its options the
same on the command line and in Python, each with its help; its numbers checked when it is made), the default data (the Hub's
emotion, else the bundled sample), the known datasets a name or `--preset` fills the options for, and `load_raw` of a file of
each kind, a folder of split files, a `save_to_disk` folder, or a Hub name with no Hub."""
from __future__ import annotations
import json, math
from dataclasses import fields
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict
from transformers import HfArgumentParser

from local_services import one_line
from trn_tutorials.core.options import MAX_BUCKETS, UsageError, parse_args
from trn_tutorials.data.files import KNOWN_DATA
from trn_tutorials.data.sources import DATA_LIMITS, DataArguments, default_data, known_defaults, load_raw, sample_data
from trn_tutorials.data.checks import validate


# ----------------------------------------------------------------------------------------- DataArguments: the options
def test_parser_types_and_defaults():
    p = HfArgumentParser(DataArguments)
    a, = p.parse_args_into_dataclasses(['--percentile', '100', '--max_length', '64', '--data', 'd.csv'])
    assert (a.percentile, a.max_length, a.data, a.model_id) == (100.0, 64, 'd.csv', None)
    assert p.parse_args_into_dataclasses([])[0] == DataArguments()
    assert p.parse_args_into_dataclasses(['--percentile', '100'])[0].percentile == 100.0
    assert p.parse_args_into_dataclasses(['--max_length', '64', '--data', 'x.csv'])[0] == DataArguments(data='x.csv', max_length=64)


def test_split_seed_is_its_own_option():
    "The validation split's seed is `--split_seed`; `--seed` is training's and not an option of the data step."
    p = HfArgumentParser(DataArguments)
    assert p.parse_args_into_dataclasses(['--split_seed', '7'])[0].split_seed == 7
    with pytest.raises(SystemExit): parse_args([DataArguments], ['--seed', '7'], prog='trn-tutorials prep')


def test_options_have_one_name_and_one_type_on_the_cli_and_in_python():
    from trn_tutorials.core.options import _parser
    p = _parser([DataArguments], 'trn-tutorials prep')   # the CLI's HfArgumentParser, each field's help in place (alone, not after another test)
    a, = p.parse_args_into_dataclasses(['--text_column', 'title', 'content', '--label_names', 'negative', 'positive',
                                        '--column_names', 'a', 'b', '--preset', 'cola'])
    assert a == DataArguments(text_column=['title', 'content'], label_names=['negative', 'positive'], column_names=['a', 'b'], preset='cola')
    assert DataArguments(text_column='review').text_column == ['review']   # from Python, one column may be a str
    helps = {act.dest: act.help for act in p._actions}
    assert all(k in helps['preset'] for k in KNOWN_DATA)
    with pytest.raises(SystemExit): parse_args([DataArguments], ['--text_columns', 'a'], prog='trn-tutorials prep')


def test_every_data_option_has_help_and_the_modules_layer():
    "`prep --help` and the docs read each DataArguments field's comment; data_files and data_checks never import data (no cycle)."
    import subprocess, sys
    from trn_tutorials.core.options import field_help
    assert all(field_help(DataArguments).values()), field_help(DataArguments)
    code = "import sys, trn_tutorials.data.checks, trn_tutorials.data.files; print('trn_tutorials.data.prepare' in sys.modules)"
    assert subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.strip() == 'False'


# -------------------------------------------------------------------------------------- numbers, at construction
def test_every_numeric_field_has_a_limit():
    import typing
    hints = typing.get_type_hints(DataArguments)
    numeric = {f.name for f in fields(DataArguments) if any(t in (int, float) for t in (typing.get_args(hints[f.name]) or (hints[f.name],)))}
    assert numeric == set(DATA_LIMITS) == {'percentile', 'pad_multiple', 'max_length', 'buckets', 'eval_fraction', 'split_seed', 'min_label_rows',
                                                'row_length', 'max_texts'}
    assert all(DATA_LIMITS[k].example is not None and DATA_LIMITS[k].allows(getattr(DataArguments(), k) or DATA_LIMITS[k].example)
               for k in DATA_LIMITS)   # every default is allowed, every limit suggests a value


@pytest.mark.parametrize('kw,words', [
    (dict(percentile='99'), "--percentile '99' is a str, not a number: pass a number (e.g. --percentile 99.9)"),
    (dict(percentile=float('nan')), "--percentile nan is not a finite number"),
    (dict(percentile=math.inf), "--percentile inf is not a finite number"),
    (dict(percentile=0), "--percentile 0 is out of range: use a number in (0, 100]"),
    (dict(percentile=100.5), "--percentile 100.5 is out of range"),
    (dict(percentile=0.999), "--percentile 0.999 is in percent: it would pad to cover only 0.999% of the train rows and cut the rest: "
                             "use --percentile 99.9"),   # issue 42: a share where a percentage is meant, said at once
    (dict(pad_multiple=0), "--pad_multiple 0 is out of range: use 1 to 512"),
    (dict(pad_multiple=8.0), "--pad_multiple 8.0 is a float, not a whole number"),
    (dict(max_length=4), "--max_length 4 is out of range: use 8 or more"),
    (dict(buckets=True), "--buckets True is a bool, not a whole number"),
    (dict(buckets=MAX_BUCKETS + 1), f"--buckets {MAX_BUCKETS + 1} is out of range: use 1 to {MAX_BUCKETS}"),
    (dict(eval_fraction=1), "--eval_fraction 1 is out of range: use a number in (0, 1)"),
    (dict(eval_fraction=0.0), "--eval_fraction 0.0 is out of range"),
    (dict(split_seed=-1), "--split_seed -1 is out of range: use 0 to 4294967295"),
    (dict(split_seed=2**32), "--split_seed 4294967296 is out of range"),
    (dict(min_label_rows=0), "--min_label_rows 0 is out of range: use 1 or more"),
])
def test_bad_numbers_refused_when_made(kw, words):
    with pytest.raises(UsageError) as e: DataArguments(**kw)
    assert words in one_line(e)


def test_good_numbers_pass_and_ints_become_floats():
    a = DataArguments(percentile=100, eval_fraction=0.5, max_length=None, split_seed=0, min_label_rows=1, accept_labels='Joy')
    assert (a.percentile, type(a.percentile), a.accept_labels) == (100.0, float, ['Joy'])
    assert HfArgumentParser(DataArguments).parse_args_into_dataclasses(['--accept_labels', 'Joy', 'very good'])[0].accept_labels == ['Joy', 'very good']


@pytest.mark.parametrize('argv,words', [
    (['--percentile', 'nan'], '--percentile nan is not a finite number'), (['--percentile', 'inf'], '--percentile inf is not a finite number'),
    (['--buckets', 'inf'], "argument --buckets: invalid int value: 'inf'"), (['--eval_fraction', '1'], '--eval_fraction 1.0 is out of range'),
    (['--min_label_rows', '0'], '--min_label_rows 0 is out of range'),
])
def test_parse_args_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as e: parse_args([DataArguments], argv, prog='trn-tutorials prep')
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and words in err and err.endswith('(see --help)'), err


# ----------------------------------------------------------------------------- known datasets, the sample, the Hub
def test_default_data_and_sample():
    assert default_data(online=True) == 'dair-ai/emotion'
    assert default_data(online=False) == sample_data()
    assert [len(Path(sample_data(), f'{s}.txt').read_text().splitlines()) for s in ('train', 'validation', 'test')] == [360, 72, 72]


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


def test_glue_presets():
    for name, cols, labels, kind in [('mrpc', ['sentence1', 'sentence2'], ['not_equivalent', 'equivalent'], None),
                                     ('rte', ['sentence1', 'sentence2'], ['entailment', 'not_entailment'], None),
                                     ('stsb', ['sentence1', 'sentence2'], None, 'regression')]:
        a = known_defaults(DataArguments(data=name))
        assert (a.preset, a.text_column, a.label_names, a.problem_type, a.join_texts) == (name, cols, labels, kind, False)
        assert (KNOWN_DATA[name].hub_id, KNOWN_DATA[name].config) == ('nyu-mll/glue', name)
    assert known_defaults(DataArguments(data='amazon_polarity')).join_texts is True   # a title and a review: joined, as before
    assert known_defaults(DataArguments(data='amazon_polarity', text_column=['content'])).join_texts is False


def test_hub_names_need_the_hub(monkeypatch):
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    for name in ('amazon_polarity', 'cola'):
        with pytest.raises(UsageError, match=f"'{name}' is not a local path and the Hub is unreachable"): load_raw(name)


# -------------------------------------------------------------------------------------------------------- load_raw
ROWS = [{'text': 'i feel; oddly "calm"', 'label': 'joy'}, {'text': 'null', 'label': 'sadness'}]


def _write_rows(d: Path):
    (d/'rows.txt').write_text(''.join(f"{r['text']};{r['label']}\n" for r in ROWS))
    (d/'rows.csv').write_text('text,label\n' + ''.join(f'''"{r['text'].replace('"', '""')}",{r['label']}\n''' for r in ROWS))
    (d/'rows.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in ROWS))
    (d/'rows.json').write_text(json.dumps(ROWS))
    Dataset.from_list(ROWS).to_parquet(str(d/'rows.parquet'))


def test_load_raw_sample(raw):
    assert {s: len(d) for s, d in raw.items()} == {'train': 360, 'validation': 72, 'test': 72}
    assert raw['train'].column_names == ['text', 'label']


def test_load_raw_every_format_folder_and_saved(raw, tmp_path):
    _write_rows(tmp_path)
    for f in tmp_path.iterdir(): assert load_raw(str(f))['train'].to_list() == ROWS, f.name
    folder = tmp_path/'splits'; folder.mkdir()
    (folder/'train.jsonl').write_text((tmp_path/'rows.jsonl').read_text())
    (folder/'dev.csv').write_text((tmp_path/'rows.csv').read_text())
    (folder/'README.md').write_text('not data: ignored')
    assert list(load_raw(str(folder))) == ['train', 'validation']
    raw.save_to_disk(str(tmp_path/'saved'))
    assert {s: len(d) for s, d in load_raw(str(tmp_path/'saved')).items()} == {'train': 360, 'validation': 72, 'test': 72}


def test_load_raw_bad_input(tmp_path, monkeypatch):
    _write_rows(tmp_path)
    folder = tmp_path/'splits'; folder.mkdir()
    (folder/'train.jsonl').write_text((tmp_path/'rows.jsonl').read_text())
    (folder/'dev.csv').write_text((tmp_path/'rows.csv').read_text())
    with pytest.raises(UsageError, match="no such file or folder"): load_raw(str(tmp_path/'missing.csv'))
    (tmp_path/'rows.xlsx').write_bytes(b'PK')
    with pytest.raises(UsageError, match=r"unknown file type '\.xlsx'"): load_raw(str(tmp_path/'rows.xlsx'))
    with monkeypatch.context() as m:
        m.setenv('HF_HUB_OFFLINE', '1')
        with pytest.raises(UsageError, match="the Hub is unreachable: pass a local path"): load_raw('someone/some-dataset')
    (folder/'validation.txt').write_text('')
    with pytest.raises(UsageError, match="two files for split 'validation'"): load_raw(str(folder))
    (folder/'dev.csv').unlink()
    with pytest.raises(UsageError, match="split 'validation' is empty"): load_raw(str(folder))
    (folder/'train.jsonl').unlink()
    with pytest.raises(UsageError, match=r"no train\.\* file"): load_raw(str(folder))
    (tmp_path/'broken.csv').write_text('text,label\ni feel fine,joy\ni feel, well, fine,joy\n')
    with pytest.raises(UsageError, match=r"line 3 of .*broken\.csv \(1 of its 2 rows\) has 4 fields but its header names 2: quote texts holding commas"): load_raw(str(tmp_path/'broken.csv'))
