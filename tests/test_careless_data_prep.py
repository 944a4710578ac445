"""The second ring of careless input for `prep` (issue 23): where it writes, the fixes it suggests, inputs that look valid but are not,
and no traceback. Each case runs `trn-tutorials` as a user would; the harness then follows the suggested fix (tests/careless.py)."""
from __future__ import annotations
import json, string
from pathlib import Path

import careless
from careless import Case, tiny_csv, tiny_model, tiny_prepared
from trn_tutorials.models import tiny_bert
from trn_tutorials.core.folders import write_record


def _mine(d, name='mine'):
    p = Path(d)/name; p.mkdir(parents=True, exist_ok=True)
    (p/'notes.txt').write_text('my notes'); (p/'results.csv').write_text('a,b\n1,2\n')
    return str(p)

def _prep(d, dest, *more):
    return ['prep', '--data', tiny_csv(d), '--model_id', tiny_model(d), '--dataset_path', str(dest), *more]

def _bare_model(d, keep=()):
    "A model folder with config.json and weights whose tokenizer files were removed (but `keep`)."
    p = Path(tiny_model(d, 'bare-model'))
    for f in ('tokenizer.json', 'vocab.txt', 'tokenizer_config.json', 'special_tokens_map.json'):
        if f not in keep and (p/f).exists(): (p/f).unlink()
    return str(p)

def _labelled(d, labels, name='topics.csv', per=6):
    rows = ''.join(f'i feel so happy today {i} {l},{l}\n' for l in labels for i in range(per))
    (Path(d)/name).write_text('text,label\n' + rows)
    return str(Path(d)/name)

def _model_record(d):
    p = Path(d)/'out'; p.mkdir()
    (p/'config.json').write_text('{}'); write_record(p, {'kind': 'model'})
    return str(p)


CASES = [
    # ---- owned folders: prep writes only into a new or empty folder, or one holding prepared data
    Case('owned folders', 'prep into a folder of the user\'s files', lambda d: _prep(d, _mine(d)),
         ['holds files trn-tutorials did not write', 'notes.txt', 'pass another --dataset_path']),
    Case('owned folders', 'prep into a model folder (config.json, weights, tokenizer)', lambda d: _prep(d, tiny_model(d)),
         ['holds files trn-tutorials did not write', 'config.json']),
    Case('owned folders', 'prep into a folder inside a model folder', lambda d: _prep(d, Path(tiny_model(d))/'data'),
         ['lies inside the model folder', 'pass another --dataset_path']),
    Case('owned folders', 'prep into a folder inside a prepared folder', lambda d: _prep(d, Path(tiny_prepared(d))/'more'),
         ['lies inside', 'prepared data', 'pass another --dataset_path, outside it']),
    Case('owned folders', 'prep into a folder holding a prepared folder', lambda d: tiny_prepared(d, dataset_path='runs/data') and _prep(d, Path(d)/'runs'),
         ['holds', 'runs/data', 'prepared data', 'pass another --dataset_path (a new or empty folder of its own)']),
    Case('owned folders', 'prep into a folder train wrote', lambda d: _prep(d, _model_record(d)),
         ['is a model folder', 'not prepared data', 'pass another --dataset_path']),
    Case('owned folders', 'prep into a relative folder of the user\'s files', lambda d: (_mine(d, 'data'), _prep(d, 'data'))[1],
         ['--dataset_path data holds files trn-tutorials did not write']),
    # ---- safe fixes: the suggestion, run as printed, works and keeps what the user had
    Case('safe fixes', 'prep without --data over data prepared from a csv', lambda d: ['prep', '--model_id', tiny_model(d), '--dataset_path', tiny_prepared(d)],
         ['holds data prepared from', 'tweets.csv', 'pass --data', 'trn-tutorials prep --dataset_path']),
    Case('safe fixes', 'prep without --data, new options, over data prepared from a csv',
         lambda d: ['prep', '--model_id', tiny_model(d), '--dataset_path', tiny_prepared(d, text_column='text'), '--max_length', '32', '--buckets', '2'],
         ['holds data prepared from', '--max_length 32', '--buckets 2']),
    Case('safe fixes', 'prep without --data or --model_id over data prepared from a csv', lambda d: ['prep', '--dataset_path', tiny_prepared(d)],
         ['holds data prepared from', 'tweets.csv']),
    Case('safe fixes', 'train on a prepared folder missing a split\'s state', 
         lambda d: (Path(tiny_prepared(d))/'validation'/'state.json').unlink() or
                   ['train', '--dataset_path', str(Path(d)/'data'), '--output_dir', str(Path(d)/'out'), *careless.FAST],
         ['could not read the prepared data', 'trn-tutorials prep --dataset_path', '--data']),
    Case('safe fixes', 'many look-alike labels and a rare one: one --accept_labels for all',
         lambda d: ['prep', '--data', str(_write(Path(d)/'labels.csv', ['good'] * 30 + ['bad'] * 30 +
                    [w for w in ('goad', 'gond', 'gold', 'goot', 'bsd', 'bda', 'god') for _ in range(2)] + ['fine'])),
                    '--model_id', tiny_model(d), '--dataset_path', 'data', '--eval_fraction', '0.3'],
         ['--accept_labels', 'goad', 'goot', 'fine']),
    Case('safe fixes', 'train-only data with a one-row class',
         lambda d: ['prep', '--data', str(_write(Path(d)/'one.csv', ['joy'] * 20 + ['sadness'] * 20 + ['anger'])), '--model_id', tiny_model(d),
                    '--dataset_path', 'data'],
         ["'anger' (1 row)", '--accept_labels anger', 'stays in train only']),
    Case('safe fixes', 'train-only data, a one-row class and too few rows for validation',
         lambda d: ['prep', '--data', str(_write(Path(d)/'few.csv', ['joy'] * 3 + ['sadness'] * 3 + ['love'] * 3 + ['anger'])),
                    '--model_id', tiny_model(d), '--dataset_path', 'data'],
         ["'anger' (1 row)", '--accept_labels anger --eval_fraction 0.34']),
    # ---- looks valid: inputs that would give a wrong result with status 0
    Case('looks valid', 'model folder without tokenizer files', lambda d: _prep(d, Path(d)/'data')[:4] + [_bare_model(d), '--dataset_path', 'data'],
         ['has no tokenizer files (tokenizer.json or vocab.txt)', 'e.g. --model_id']),
    Case('looks valid', 'model folder with tokenizer_config.json only', lambda d: _prep(d, Path(d)/'data')[:4] + [_bare_model(d, ('tokenizer_config.json',)), '--dataset_path', 'data'],
         ['has no tokenizer files']),
    Case('looks valid', 'tokenizer whose vocabulary misses the text', lambda d: _prep(d, Path(d)/'data')[:4] + [tiny_bert(Path(d)/'zoo', ['zebra', 'quartz']), '--dataset_path', 'data'],
         ['maps 100% of the train tokens to [UNK]', 'e.g. --model_id']),
    Case('looks valid', 'labels topic_01..topic_20 are a series, not typos',
         lambda d: ['prep', '--data', _labelled(d, [f'topic_{i:02d}' for i in range(1, 21)]), '--model_id', tiny_model(d), '--dataset_path', 'data', '--eval_fraction', '0.2'],
         ['prepared '], status=0, check=lambda d, r: _names(d) == [f'topic_{i:02d}' for i in range(1, 21)]),
    Case('looks valid', 'labels class_a..class_z are a series, not typos',
         lambda d: ['prep', '--data', _labelled(d, [f'class_{c}' for c in string.ascii_lowercase]), '--model_id', tiny_model(d), '--dataset_path', 'data', '--eval_fraction', '0.2'],
         ['prepared '], status=0, check=lambda d, r: len(_names(d)) == 26),
    Case('looks valid', 'labels typeA/typeB, size_S/size_XL, L1..L12',
         lambda d: ['prep', '--data', _labelled(d, ['typeA', 'typeB', 'size_S', 'size_XL', *(f'L{i}' for i in range(1, 13))]), '--model_id', tiny_model(d),
                    '--dataset_path', 'data', '--eval_fraction', '0.3'],
         ['prepared '], status=0, check=lambda d, r: len(_names(d)) == 16),
    # ---- no traceback: the Python API with wrong types, one line each
    Case('no traceback', 'prep_command of a list', lambda d: (lambda: __import__('trn_tutorials.data.prepared').data.prepared.prep_command([])), ['not a prepared folder\'s record']),
    Case('no traceback', 'data_fingerprint of a path', lambda d: (lambda: __import__('trn_tutorials.data.prepared').data.prepared.data_fingerprint(str(d))), ['not a prepared folder\'s record']),
]


def _write(p:Path, labels) -> Path:
    p.write_text('text,label\n' + ''.join(f'i feel so happy today {i},{l}\n' for i, l in enumerate(labels)))
    return p

def _names(d) -> list:
    return json.loads((Path(d)/'data'/'trn_tutorials.json').read_text())['label_names']


test_careless = careless.make_test(CASES)
