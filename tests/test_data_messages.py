"""Messages speak the user's terms (issue 42, principle 6): a bad row is named by its line in the user's file and every bad row is
counted; a spreadsheet's empty rows are left out with a note; a malformed JSON line is named by its line; labels and text columns of
another kind are said in words, never as a `datasets` feature's repr; a full disk is the disk of the folder being written; the
space check counts what the save needs, not an old copy that is not there."""
from __future__ import annotations
import errno, json, re, shutil
from collections import namedtuple
from pathlib import Path

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value

from trn_tutorials.core import UsageError
from trn_tutorials.models import local_model
from trn_tutorials.data import DataArguments, load_prepared, prepare
from trn_tutorials.data_files import load_raw
from trn_tutorials.data_checks import validate

LABELS = ['joy', 'sadness']
REPR = re.compile(r"\b(Value|ClassLabel|List|LargeList|Sequence|Features|Json)\(")   # a datasets feature's repr


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


def said(lines:list[int]) -> str:
    "`lines 4, 9 and 12` (no runs, at most five) as the messages say them."
    return f"line {lines[0]}" if len(lines) == 1 else f"lines {', '.join(map(str, lines[:-1]))} and {lines[-1]}"


def refused(fn, *a, **kw) -> str:
    with pytest.raises(UsageError) as e: fn(*a, **kw)
    msg = str(e.value)
    assert '\n' not in msg and not REPR.search(msg), msg
    return msg


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


def test_integer_ids_with_a_missing_one_name_the_line(tmp_path):
    "pandas reads integer labels as floats when one is missing: that row is named, not `numbers with decimals`."
    (tmp_path/'ids.csv').write_text('text,label\n' + ''.join(f"tweet {i},{'' if i == 6 else i % 2}\n" for i in range(12)))
    assert refused(validate, load_raw(str(tmp_path/'ids.csv'))) == f"{tmp_path/'ids.csv'}: 1 row has no label (line 8): give every row one"
    (tmp_path/'ids.csv').write_text('text,label\n' + ''.join(f"tweet {i}.,{float(i % 2)}\n" for i in range(12)))
    assert validate(load_raw(str(tmp_path/'ids.csv')))['train'].features['label'].names == ['0', '1']


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


# --- a full disk: the folder being written, on the disk that is full
def parsed(cmd:str, **kw):
    from trn_tutorials.cli import command
    from trn_tutorials.core import parse_args
    argv = [x for k, v in kw.items() for x in (f'--{k}', str(v))]
    return parse_args(command(cmd)[1], argv, prog='t')


@pytest.fixture
def two_disks(tmp_path, monkeypatch):
    "Folders `a` and `b` on two disks: `b`'s is full (1 kB free), `a`'s has room."
    import trn_tutorials.cli as C
    (tmp_path/'a').mkdir(); (tmp_path/'b').mkdir()
    on_b = lambda p: Path(p) == tmp_path/'b' or tmp_path/'b' in Path(p).parents
    monkeypatch.setattr(C, '_device', lambda p: 2 if on_b(C._existing(p)) else 1)
    usage = namedtuple('usage', 'total used free')
    monkeypatch.setattr(shutil, 'disk_usage', lambda p: usage(10**12, 10**12, 1000) if on_b(p) else usage(10**12, 0, 10**12))
    return tmp_path


def test_full_disk_names_the_folder_written_not_the_data_read(two_disks):
    "`train` reads --dataset_path on one disk and writes --output_dir on the full one: the line names the output folder only."
    from trn_tutorials.cli import disk_full
    t = two_disks
    p = parsed('train', dataset_path=t/'a'/'data', output_dir=t/'b'/'model')
    msg = disk_full(OSError(errno.ENOSPC, 'No space left on device'), p)
    assert msg.startswith(f"the disk holding {t/'b'/'model'} is full") and str(t/'a') not in msg, msg
    p = parsed('train', dataset_path=t/'b'/'data', output_dir=t/'a'/'model')   # the data's disk is full, but training only reads it
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device', str(t/'a'/'model'/'checkpoint-2'/'x')), p).startswith(
        f"the disk holding {t/'a'/'model'} is full")


def test_full_disk_of_a_command_writing_two_folders(two_disks):
    "`quickstart` writes both: without a file named, the one on the disk with no room; with one, the folder that holds it."
    from trn_tutorials.cli import disk_full
    t = two_disks
    p = parsed('quickstart', dataset_path=t/'a'/'data', output_dir=t/'b'/'model')
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device'), p).startswith(f"the disk holding {t/'b'/'model'} is full")
    p = parsed('quickstart', dataset_path=t/'b'/'data', output_dir=t/'a'/'model')
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device'), p).startswith(f"the disk holding {t/'b'/'data'} is full")
    tmp = t/'b'/'.data.tmp-1a2b3c4d'/'train'/'data-00000-of-00001.arrow'   # prep saves beside the folder first
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device', str(tmp)), p).startswith(f"the disk holding {t/'b'/'data'} is full")
    cache = t/'b'/'cache'/'x.arrow'   # a cache on the full disk, which holds the data folder too: that is named
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device', str(cache)), p).startswith(f"the disk holding {t/'b'/'data'} is full")
    p = parsed('prep', dataset_path=t/'a'/'data')
    assert disk_full(OSError(errno.ENOSPC, 'No space left on device', str(cache)), p).startswith(f"the disk holding {t/'b'/'cache'} is full")


def test_full_disk_while_reading_names_the_datasets_cache(tmp_path, monkeypatch):
    "Reading a file writes an Arrow copy to the datasets cache: a full disk there is said so, not `could not read ... valid .csv`."
    import datasets, trn_tutorials.data_files as F
    def full(*a, **k): raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(F, 'load_dataset', full)
    f, _ = write(tmp_path, 'csv', rows())
    msg = refused(load_raw, str(f))
    assert msg.startswith(f"the disk holding the datasets cache {datasets.config.HF_DATASETS_CACHE} is full (reading {f} writes a copy there)"), msg
    assert 'HF_DATASETS_CACHE' in msg and 'valid' not in msg


# --- the space check: what the save needs
def test_space_estimate_covers_the_save(tmp_path, monkeypatch):
    "The bytes `check_space` asks for cover the save's peak (the new copy and one rewrite of its largest file), with no room for an old copy."
    import trn_tutorials.data as D
    from trn_tutorials.data_files import _folder_bytes, _space_needed
    peak, real = [], D.datasets3_form
    def measure(folder):
        arrows = [f.stat().st_size for f in Path(folder).rglob('*.arrow')]
        peak.append(_folder_bytes(Path(folder)) + max(arrows))
        return real(folder)
    monkeypatch.setattr(D, 'datasets3_form', measure)
    for kw in (dict(), dict(buckets=3)):
        m = prepare(DataArguments(data=str(write(tmp_path, 'csv', rows(400))[0]), model_id=local_model(), dataset_path=str(tmp_path/'prep'), **kw))
        need, data = _space_needed(m['rows'], m['max_length'], 3)
        assert peak[-1] <= need + 64_000 and need < 2 * data, (peak, need, data)


def test_a_new_folder_needs_no_room_for_an_old_copy(tmp_path, monkeypatch):
    import trn_tutorials.data_files as F
    from trn_tutorials.data_files import _space_needed
    f, _ = write(tmp_path, 'csv', rows(400))
    args = lambda: DataArguments(data=str(f), model_id=local_model(), dataset_path=str(tmp_path/'prep'), max_length=32)
    need, data = _space_needed({'train': 360, 'validation': 40}, 32, 3)
    usage = namedtuple('usage', 'total used free')
    monkeypatch.setattr(F.shutil, 'disk_usage', lambda p: usage(10**12, 10**12, need + 1000))   # less than two copies: enough
    assert need + 1000 < 2 * data and prepare(args())['rows'] == {'train': 360, 'validation': 40}
    monkeypatch.setattr(F.shutil, 'disk_usage', lambda p: usage(10**12, 10**12, 50_000))
    msg = refused(prepare, args())   # the data prepared before: named, its size said
    old = F.size_text(F._folder_bytes(tmp_path/'prep'))
    assert f"the data prepared there before ({old}) is removed only once the new copy is whole) but 50 kB are free" in msg, msg
    shutil.rmtree(tmp_path/'prep')
    msg = refused(prepare, args())   # a new folder: no old copy in the message
    assert re.fullmatch(rf"saving the prepared data needs about [\d.]+ kB free at {re.escape(str(tmp_path))} \([\d.]+ kB of data, and room to rewrite "
                        r"its largest file once\) but 50 kB are free: free some space there, or pass another --dataset_path on a disk with more room", msg), msg
    assert not (tmp_path/'prep').exists()
