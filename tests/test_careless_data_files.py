"""Files as people have them (issue 23, parts 4 and 6): a separator, quoting or encoding that does not fit the extension, a header
without rows, texts holding unquoted commas, splits naming their text column differently, `val.*`, and files left out with a word."""
import pytest
from datasets import DatasetDict

from trn_tutorials.core.options import UsageError
from trn_tutorials.models import local_model
from trn_tutorials.data.sources import DataArguments
from trn_tutorials.data.prepare import prepare
from trn_tutorials.data.files import data_files
from trn_tutorials.data.sources import load_raw
from trn_tutorials.data.checks import validate

ROWS = [('i feel great today', 'joy'), ('i feel so sad', 'sadness'), ('what a lovely morning', 'joy'), ('nothing went right', 'sadness')] * 5

def _lines(sep, rows=ROWS, header=('text', 'label'), quote=False):
    q = (lambda x: f'"{x}"') if quote else (lambda x: x)
    return ''.join(sep.join(map(q, r)) + '\n' for r in ([header] if header else []) + list(rows))

def _commas(n_bad, at=None):
    "100 rows of `text,label`; `n_bad` of them (at `at`, else spread) with an unquoted comma in the text."
    rows = [(f'this is tweet number {i}', 'joy' if i % 2 else 'sadness') for i in range(100)]
    bad = [at] if at is not None else list(range(0, 100, max(1, 100 // n_bad)))[:n_bad]
    return 'text,label\n' + ''.join(f'well, {t},{l}\n' if i in bad else f'{t},{l}\n' for i, (t, l) in enumerate(rows))

# (class, id, {file: str|bytes}, words the one line must hold); a single file is passed as --data, several as their folder
BAD = [
    ('looks valid', 'semicolon csv', {'tweets.csv': _lines(';')}, ['separates its fields with semicolons, not commas', 'with tabs as a .tsv']),
    ('looks valid', 'semicolon csv, quoted', {'tweets.csv': _lines(';', quote=True)}, ['separates its fields with semicolons']),
    ('looks valid', 'semicolon csv without header', {'tweets.csv': _lines(';', header=None)}, ['separates its fields with semicolons']),
    ('looks valid', 'pipe-separated csv', {'tweets.csv': _lines('|')}, ['separates its fields with `|`', 'save it with commas between fields']),
    ('looks valid', 'tab-separated csv', {'tweets.csv': _lines('\t')}, ['separates its fields with tabs', 'rename it to', 'tweets.tsv']),
    ('looks valid', 'tab-separated txt with header', {'tweets.txt': _lines('\t')}, ['separates its fields with tabs, not semicolons', 'tweets.tsv']),
    ('looks valid', 'tab-separated txt', {'tweets.txt': _lines('\t', header=None)}, ['tabs, not semicolons', 'tweets.tsv and pass --column_names']),
    ('looks valid', 'comma-separated txt', {'tweets.txt': _lines(',')}, ['separates its fields with commas, not semicolons', 'tweets.csv']),
    ('looks valid', 'comma-separated tsv', {'tweets.tsv': _lines(',')}, ['separates its fields with commas, not tabs', 'tweets.csv']),
    ('looks valid', 'semicolon tsv', {'tweets.tsv': _lines(';')}, ['separates its fields with semicolons, not tabs', 'save it with tabs']),
    ('looks valid', 'latin-1 csv', {'tweets.csv': ('text,label\ni feel great,joy\ni feel low,sadness\nun café crème,joy\n').encode('latin-1')},
     ['is not UTF-8 (byte 0xe9 at line 4; it looks like Latin-1/cp1252): save it as UTF-8']),
    ('looks valid', 'cp1252 tsv', {'tweets.tsv': _lines('\t').replace('sad', 'sad \u2013 so sad').encode('cp1252')},
     ['is not UTF-8 (byte 0x96 at line 3; it looks like Latin-1/cp1252)']),
    ('looks valid', 'latin-1 txt', {'tweets.txt': _lines(';', header=None).replace('great', 'très bien').encode('latin-1')},
     ['is not UTF-8 (byte 0xe8 at line 1', 'save it as UTF-8']),
    ('looks valid', 'latin-1 jsonl', {'tweets.jsonl': '{"text": "un café", "label": "joy"}\n'.encode('latin-1')}, ['is not UTF-8', 'save it as UTF-8']),
    ('looks valid', 'utf-16 csv', {'tweets.csv': _lines(',').encode('utf-16')}, ['is UTF-16', 'save it as UTF-8']),
    ('looks valid', 'utf-16 csv without BOM', {'tweets.csv': _lines(',').encode('utf-16-le')}, ['holds NUL bytes', 'save it as UTF-8']),
    ('looks valid', 'header-only csv', {'tweets.csv': 'text,label\n'}, ['has column names but no rows: add rows']),
    ('looks valid', 'header-only tsv', {'tweets.tsv': 'text\tlabel\n'}, ['has column names but no rows: add rows']),
    ('looks valid', 'header-only txt', {'tweets.txt': 'text;label\n'}, ['has column names but no rows: add rows']),
    ('looks valid', 'header-only csv, blank lines after', {'tweets.csv': 'text,label\n\n\n'}, ['has column names but no rows']),
    ('looks valid', 'only blank lines', {'tweets.csv': '\n\n'}, ['holds only blank lines: add rows']),
    ('looks valid', 'unquoted comma in 1 of 100 rows', {'tweets.csv': _commas(1, at=57)},
     ['line 59 of', '(1 of its 100 rows) has 3 fields but its header names 2: quote texts holding commas ("a, b") or save it as .tsv']),
    ('looks valid', 'unquoted commas in every row', {'tweets.csv': _commas(100)}, ['line 2 of', '(100 of its 100 rows) has 3 fields']),
    ('looks valid', 'unquoted comma in the first row', {'tweets.csv': _commas(1, at=0)}, ['line 2 of', 'quote texts holding commas']),
    ('looks valid', 'unquoted commas, headerless with --column_names', {'tweets.csv': _commas(1, at=50).split('\n', 1)[1], 'args': dict(column_names=['text', 'label'])},
     ['has 3 fields but --column_names names 2']),
    ('looks valid', 'trailing commas', {'tweets.csv': 'text,label\n' + _lines(',', header=None).replace('\n', ',\n')}, ['has 3 fields but its header names 2: remove the separator after its last field']),
    ('looks valid', 'tab inside a tsv text', {'tweets.tsv': _lines('\t') + 'i feel\tfine\tjoy\n'}, ['has 3 fields', 'remove the tabs from its texts']),
    ('files as people have them', 'validation.xlsx beside train.csv', {'train.csv': _lines(','), 'validation.xlsx': b'PK\x03\x04'},
     ["unknown file type '.xlsx'", 'validation.xlsx', 'save it as one of']),
    ('files as people have them', 'text column ambiguous in one split',
     {'train.tsv': _lines('\t', [(t, t, l) for t, l in ROWS], ('sentence', 'review', 'label')), 'dev.tsv': _lines('\t', header=('content', 'label'))},
     ['name their text column differently: train has sentence and review; validation has content', 'one name in every file']),
    ('files as people have them', 'no usual text column in train, content in dev',
     {'train.tsv': _lines('\t', header=('words', 'label')), 'dev.tsv': _lines('\t', header=('content', 'label'))},
     ["train has none of the usual text columns (columns: words, label); validation has content"]),
    ('files as people have them', '--text_column sentence, dev names it content',
     {'train.tsv': _lines('\t', header=('sentence', 'label')), 'dev.tsv': _lines('\t', header=('content', 'label')), 'args': dict(text_column=['sentence'])},
     ['train has sentence; validation has content', 'pass it as --text_column']),
]

def _write(d, files):
    d.mkdir()
    for name, text in files.items():
        if name != 'args': (d/name).write_bytes(text if isinstance(text, bytes) else text.encode())
    names = [n for n in files if n != 'args']
    return str(d/names[0]) if len(names) == 1 else str(d)

@pytest.mark.parametrize('cls,id,files,words', BAD, ids=[f'{c}: {i}' for c, i, _, _ in BAD])
def test_refused_in_one_line_naming_the_cause(cls, id, files, words, tmp_path):
    "`prepare` refuses in one line that names the cause and the fix, with the path as given, before the tokenizer is loaded."
    data = _write(tmp_path/'data', files)
    before = {p: p.read_bytes() for p in (tmp_path/'data').iterdir()}
    with pytest.raises(UsageError) as e:
        prepare(DataArguments(data=data, model_id=str(tmp_path/'no-model-here'), dataset_path=str(tmp_path/'prep'), **files.get('args', {})))
    msg = str(e.value)
    assert '\n' not in msg and 'no such model' not in msg, msg
    for w in words: assert w in msg, msg
    assert data in msg or str(tmp_path/'data') in msg, msg   # the path as given, never shortened
    assert not (tmp_path/'prep').exists() and before == {p: p.read_bytes() for p in (tmp_path/'data').iterdir()}


def test_glue_splits_naming_the_text_column_differently(tmp_path):
    "files as people have them: `sentence` in train.tsv, `content` in dev.tsv and test.tsv (unlabelled): each read as the text, said in `text_from`."
    d = tmp_path/'glue'; d.mkdir()
    (d/'train.tsv').write_text(_lines('\t', header=('sentence', 'label')))
    (d/'dev.tsv').write_text(_lines('\t', ROWS[:8], header=('content', 'label')))
    (d/'test.tsv').write_text('index\tcontent\n0\tso it goes\n1\tfine\n')
    raw = load_raw(str(d))
    assert raw.text_from == {'train': 'sentence', 'validation': 'content'}   # the unlabelled test split is left out by validate
    ds = validate(raw)
    assert len(ds['validation']) == 8 and ds['validation'][0]['text'] == ROWS[0][0] and 'test' not in ds
    # capitalised, and in a save_to_disk folder: found the same way
    t = load_raw(str(d/'train.tsv'), text_column='sentence')['train']
    DatasetDict(train=t.rename_column('sentence', 'Tweet'), validation=t.rename_column('sentence', 'text')).save_to_disk(str(tmp_path/'saved'))
    assert load_raw(str(tmp_path/'saved')).text_from == {'train': 'Tweet'}
    # every split names it alike: nothing is copied, and --text_column is the fix that validate names
    (d/'dev.tsv').write_text(_lines('\t', ROWS[:8], header=('sentence', 'label')))
    assert load_raw(str(d)).text_from == {} and load_raw(str(d))['train'].column_names == ['sentence', 'label']
    with pytest.raises(UsageError, match=r"no text column 'text' in split 'train' \(columns: sentence, label\): pass --text_column"): validate(load_raw(str(d)))
    # a name given is kept: no synonyms then
    assert load_raw(str(d/'train.tsv'), text_column='sentence').text_from == {}

def test_val_is_validation(tmp_path):
    "files as people have them: val.tsv beside train.tsv is the validation split, not 10% of train."
    d = tmp_path/'data'; d.mkdir()
    (d/'train.tsv').write_text(_lines('\t'))
    (d/'val.tsv').write_text(_lines('\t', ROWS[:6]))
    ds = validate(load_raw(str(d)))
    assert (len(ds['train']), len(ds['validation'])) == (len(ROWS), 6)

def test_every_file_used_or_left_out_with_why(tmp_path):
    "files as people have them: README, notes.csv, train.xlsx beside train.csv, a subfolder: each named with its reason."
    d = tmp_path/'data'; d.mkdir()
    (d/'train.csv').write_text(_lines(','))
    (d/'validation.csv').write_text(_lines(',', ROWS[:4]))
    (d/'README.md').write_text('# my data')
    (d/'notes.csv').write_text('a,b\n1,2\n')
    (d/'train.xlsx').write_bytes(b'PK')
    (d/'.DS_Store').write_bytes(b'\0')
    (d/'old').mkdir()
    files, left = data_files(str(d))
    assert {s: [f.name for f in fs] for s, fs in files.items()} == {'train': ['train.csv'], 'validation': ['validation.csv']}
    assert left == [('.DS_Store', 'not a data file'), ('README.md', 'not a data file'),
                    ('notes.csv', 'its name names no split (train, validation/valid/val/dev, test)'), ('old', 'a folder'),
                    ('train.xlsx', 'unknown type .xlsx (train.csv read instead)')]
    assert {s: len(x) for s, x in load_raw(str(d)).items()} == {'train': len(ROWS), 'validation': 4}

def test_files_that_read_right(tmp_path):
    "looks valid and is: a UTF-8 BOM, a `.txt` starting with `text;label`, quoted commas, a `;` inside a .txt text, a CSV with `;` inside texts."
    cases = {'bom.csv': '\ufefftext,label\n' + _lines(',', header=None), 'header.txt': _lines(';'),
             'quoted.csv': 'text,label\n"well, fine",joy\n' + _lines(',', header=None),
             'semi.txt': 'i feel; oddly calm;joy\n' + _lines(';', header=None),
             'semis.csv': 'text,label\ni feel; oddly calm,joy\nso; so,sadness\n' + _lines(',', header=None)}
    for name, text in cases.items():
        (tmp_path/name).write_text(text, encoding='utf-8')
        rows = load_raw(str(tmp_path/name))['train'].to_list()
        assert len(rows) == len(text.strip().splitlines()) - (name != 'semi.txt') and rows[-1] == dict(zip(('text', 'label'), ROWS[-1])), (name, rows[:2])
        assert all(r['label'] in ('joy', 'sadness') for r in rows), name

def test_glue_folder_prepared(tmp_path):
    "The GLUE-style folder, prepared end to end with the local MiniLM tokenizer: validation from dev.tsv's `content`."
    d = tmp_path/'glue'; d.mkdir()
    (d/'train.tsv').write_text(_lines('\t', header=('sentence', 'label')))
    (d/'val.tsv').write_text(_lines('\t', ROWS[:8], header=('content', 'label')))
    (d/'README.md').write_text('# glue-ish')
    m = prepare(DataArguments(data=str(d), model_id=local_model(), dataset_path=str(tmp_path/'prep')))
    assert m['rows'] == {'train': len(ROWS), 'validation': 8}


# ------------------------------------------------------------------------------------------- the careless-input harness
# The same classes through `trn-tutorials prep`, as a user meets them; each refusal's fix is then done (`follow`) and prep re-run.
import csv, io, json
from pathlib import Path

from careless import Case, make_test, tiny_csv, tiny_model

def _rows(d:Path) -> list[list[str]]:
    "The rows (header first) of a `tiny_csv`, made in `d/src` (outside the data folder)."
    return list(csv.reader(io.StringIO(Path(tiny_csv(d/'src')).read_text())))

def _table(rows, sep=',', header=None) -> str:
    return ''.join(sep.join(r) + '\n' for r in ([header] if header else []) + rows)

def _prep(d:Path, files:dict, *more) -> list[str]:
    "Write `files` ({name: str|bytes|callable(rows)}) into `d/data` and return the prep argv for that folder."
    rows = _rows(d)
    (d/'data').mkdir()
    for name, content in files.items():
        content = content(rows) if callable(content) else content
        (d/'data'/name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return ['prep', '--data', str(d/'data'), '--model_id', tiny_model(d), '--dataset_path', str(d/'prepared'), *more]

def _resave(name, sep=',', encoding='utf-8', header=('text', 'label'), rename=None):
    "The fix a user makes: `data/name` saved again from its rows, with `sep`, as UTF-8 (and renamed to `rename`)."
    def fix(d:Path):
        rows = _rows(d)[1:]
        (d/'data'/name).unlink()
        (d/'data'/(rename or name)).write_text(_table(rows, sep, list(header) if header else None), encoding=encoding)
    return fix

def _quote_commas(name):
    "The fix: quote every text (a `,` inside one is then a character)."
    def fix(d:Path):
        p = d/'data'/name
        lines = p.read_text().splitlines()
        p.write_text(lines[0] + '\n' + ''.join(f'"{l.rsplit(",", 1)[0]}",{l.rsplit(",", 1)[1]}\n' for l in lines[1:]))
    return fix

def _rename_column(name, old, new):
    def fix(d:Path):
        p = d/'data'/name
        p.write_text(p.read_text().replace(old, new, 1))
    return fix

def _rows_of(**want):
    "A check of a run that works: the prepared record's rows per split."
    def check(d:Path, r):
        rows = json.loads((d/'prepared'/'trn_tutorials.json').read_text())['rows']
        assert all(rows.get(s) == n for s, n in want.items()), f"rows {rows}, expected {want}: {r.stdout[-400:]}"
    return check

def _train(rows): return _table(rows[1:], ',', rows[0])
def _commas_in(k):
    "The tiny csv with an unquoted comma in the text of `k` evenly spread rows."
    return lambda rows: _table([[r[0].replace(' ', ', ', 1) if i % max(1, len(rows) // k) == 0 else r[0], r[1]] for i, r in enumerate(rows[1:])], ',', rows[0])

CASES = [
    Case('looks valid', 'semicolon-separated .csv', lambda d: _prep(d, {'train.csv': lambda rows: _table(rows, ';')}),
         ['train.csv separates its fields with semicolons, not commas'], follow=_resave('train.csv')),
    Case('looks valid', 'pipe-separated .csv, quoted', lambda d: _prep(d, {'train.csv': lambda rows: _table([[f'"{x}"' for x in r] for r in rows], '|')}),
         ['separates its fields with `|`, not commas', 'save it with commas between fields'], follow=_resave('train.csv')),
    Case('looks valid', 'tab-separated .txt with a header', lambda d: _prep(d, {'train.txt': lambda rows: _table(rows, '\t')}),
         ['train.txt separates its fields with tabs, not semicolons', 'rename it to', 'train.tsv'],
         follow=_resave('train.txt', '\t', rename='train.tsv')),
    Case('looks valid', 'comma-separated .tsv', lambda d: _prep(d, {'train.tsv': _train}),
         ['train.tsv separates its fields with commas, not tabs', 'train.csv'], follow=_resave('train.tsv', rename='train.csv')),
    Case('looks valid', 'Latin-1 .csv', lambda d: _prep(d, {'train.csv': lambda rows: _train(rows).replace('happy', 'très happy').encode('latin-1')}),
         ['train.csv is not UTF-8 (byte 0xe8 at line 2; it looks like Latin-1/cp1252): save it as UTF-8'], follow=_resave('train.csv')),
    Case('looks valid', 'cp1252 .tsv (a dash)', lambda d: _prep(d, {'train.tsv': lambda rows: _table(rows, '\t').replace('sad ', 'sad \u2013 ').encode('cp1252')}),
         ['train.tsv is not UTF-8 (byte 0x96 at line 3', 'save it as UTF-8'], follow=_resave('train.tsv', '\t')),
    Case('looks valid', 'UTF-16 .csv (Excel Unicode Text)', lambda d: _prep(d, {'train.csv': lambda rows: _train(rows).encode('utf-16')}),
         ['train.csv is UTF-16', 'save it as UTF-8'], follow=_resave('train.csv')),
    Case('looks valid', 'header-only validation.csv', lambda d: _prep(d, {'train.csv': _train, 'validation.csv': 'text,label\n'}),
         ['validation.csv has column names but no rows: add rows'], follow=lambda d: (d/'data'/'validation.csv').write_text(_train(_rows(d)))),
    Case('looks valid', 'header-only test.txt (text;label)', lambda d: _prep(d, {'train.csv': _train, 'test.txt': 'text;label\n'}),
         ['test.txt has column names but no rows: add rows'],
         follow=lambda d: (d/'data'/'test.txt').write_text('text;label\n' + _table(_rows(d)[1:], ';'))),
    Case('looks valid', 'unquoted comma in 1 of 48 rows', lambda d: _prep(d, {'train.csv': _commas_in(1)}),
         ['line 2 of', 'train.csv (1 of its 48 rows) has 3 fields but its header names 2: quote texts holding commas'],
         follow=_quote_commas('train.csv')),
    Case('looks valid', 'unquoted commas in every row', lambda d: _prep(d, {'train.csv': _commas_in(48)}),
         ['(48 of its 48 rows) has 3 fields', 'or save it as .tsv'],
         follow=lambda d: ((d/'data'/'train.tsv').write_text(''.join(l.rsplit(',', 1)[0] + '\t' + l.rsplit(',', 1)[1] + '\n'
                                                            for l in (d/'data'/'train.csv').read_text().splitlines())), (d/'data'/'train.csv').unlink())),
    Case('files as people have them', 'GLUE-style: sentence in train.tsv, content in dev.tsv',
         lambda d: _prep(d, {'train.tsv': lambda rows: _table(rows[1:], '\t', ['sentence', 'label']),
                             'dev.tsv': lambda rows: _table(rows[1:13], '\t', ['content', 'label']),
                             'test.tsv': lambda rows: _table([[str(i), r[0]] for i, r in enumerate(rows[1:5])], '\t', ['index', 'content'])}),
         [], status=0, check=_rows_of(train=48, validation=12)),
    Case('files as people have them', 'val.tsv beside train.tsv', lambda d: _prep(d, {'train.tsv': lambda rows: _table(rows, '\t'),
                                                                                   'val.tsv': lambda rows: _table(rows[:13], '\t')}),
         [], status=0, check=_rows_of(train=48, validation=12)),
    Case('files as people have them', 'README, notes and a spreadsheet beside the splits',
         lambda d: _prep(d, {'train.csv': _train, 'README.md': '# tweets', 'notes.csv': 'who,when\nme,today\n', 'train.xlsx': b'PK\x03\x04'}),
         [], status=0, check=_rows_of(train=48 - 5, validation=5)),
    Case('files as people have them', 'validation.xlsx beside train.csv', lambda d: _prep(d, {'train.csv': _train, 'validation.xlsx': b'PK\x03\x04'}),
         ["unknown file type '.xlsx'", 'validation.xlsx', 'save it as one of'],
         follow=lambda d: (d/'data'/'validation.csv').write_text(_train(_rows(d)[:13]))),
    Case('files as people have them', 'two text-like columns in train, content in dev',
         lambda d: _prep(d, {'train.tsv': lambda rows: _table([[r[0], r[0], r[1]] for r in rows[1:]], '\t', ['sentence', 'review', 'label']),
                             'dev.tsv': lambda rows: _table(rows[1:13], '\t', ['content', 'label'])}),
         ['name their text column differently: train has sentence and review; validation has content', 'one name in every file'],
         follow=lambda d: (_rename_column('train.tsv', 'sentence', 'text')(d), _rename_column('dev.tsv', 'content', 'text')(d))),
    Case('files as people have them', '--text_column sentence, dev.tsv names it content',
         lambda d: _prep(d, {'train.tsv': lambda rows: _table(rows[1:], '\t', ['sentence', 'label']),
                             'dev.tsv': lambda rows: _table(rows[1:13], '\t', ['content', 'label'])}, '--text_column', 'sentence'),
         ['train has sentence; validation has content', 'pass it as --text_column'], follow=_rename_column('dev.tsv', 'content', 'sentence')),
]

test_careless = make_test(CASES)
