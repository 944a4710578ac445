"""Issue 23: folders the package writes carry a record; `check_owner` lets a run write only into a new, empty or own folder,
and never nests a recorded folder in another. `check_numbers` types text, lists and flags, and expands `~` once."""
import json, os
from dataclasses import dataclass
from pathlib import Path
import pytest
from trn_tutorials.core import RECORD, UsageError, check_numbers, check_owner, folder_record, write_record

def test_new_empty_and_own_folders_pass(tmp_path):
    assert check_owner(tmp_path/'new', 'model', 'output_dir') == tmp_path/'new'
    (tmp_path/'empty').mkdir(); (tmp_path/'empty'/'.ipynb_checkpoints').mkdir()   # hidden entries do not count
    check_owner(tmp_path/'empty', 'model', 'output_dir')
    write_record(tmp_path/'m', {'kind': 'model'}); (tmp_path/'m'/'config.json').write_text('{}')
    check_owner(tmp_path/'m', 'model', 'output_dir')

@pytest.mark.parametrize('files', [{'config.json': '{}'}, {'metrics.json': '{"f1": 1}'}, {'train.log': 'mine'}, {'notes/a.txt': 'x'}])
def test_unrecorded_files_are_refused_and_kept(tmp_path, files):
    for n, t in files.items(): (tmp_path/'out'/n).parent.mkdir(parents=True, exist_ok=True); (tmp_path/'out'/n).write_text(t)
    with pytest.raises(UsageError, match=r"holds files trn-tutorials did not write .*pass another --output_dir"): check_owner(tmp_path/'out', 'model', 'output_dir')
    assert all((tmp_path/'out'/n).read_text() == t for n, t in files.items())

def test_other_kind_damaged_and_nesting_are_refused(tmp_path):
    write_record(tmp_path/'data', {'kind': 'prepared data'})
    with pytest.raises(UsageError, match=r'is prepared data \(written by trn-tutorials prep\), not a model folder'): check_owner(tmp_path/'data', 'model', 'output_dir')
    with pytest.raises(UsageError, match=r'lies inside .*data, prepared data .*pass another --output_dir, outside it'): check_owner(tmp_path/'data'/'model', 'model', 'output_dir')
    with pytest.raises(UsageError, match=r'holds .*data, prepared data .*pass another --output_dir \(a new or empty folder of its own\)'): check_owner(tmp_path, 'model', 'output_dir')
    (tmp_path/'bad').mkdir(); (tmp_path/'bad'/RECORD).write_text('{not json')
    with pytest.raises(UsageError, match='is damaged'): check_owner(tmp_path/'bad', 'model', 'output_dir')

def test_old_manifests_and_model_folders_are_recognised(tmp_path):
    (tmp_path/'d').mkdir(); (tmp_path/'d'/RECORD).write_text(json.dumps({'label_names': ['a', 'b'], 'rows': {}}))
    assert folder_record(tmp_path/'d')['kind'] == 'prepared data'
    (tmp_path/'m').mkdir(); (tmp_path/'m'/'metrics.json').write_text(json.dumps({'args': {}, 'label_names': [], 'backend': 'cpu'}))
    assert folder_record(tmp_path/'m')['kind'] == 'model'
    (tmp_path/'u').mkdir(); (tmp_path/'u'/'metrics.json').write_text('{"f1": 0.9}')   # the user's own
    assert folder_record(tmp_path/'u') is None

@dataclass
class _A:
    output_dir: str = 'runs/x'
    names: list[str]|None = None
    flag: bool = False
    def __post_init__(self): check_numbers(self, {})

def test_types_and_tilde():
    assert _A(output_dir='~/runs/x').output_dir == os.path.expanduser('~/runs/x')
    assert _A(output_dir=Path('a/b')).output_dir == 'a/b'
    assert _A(names='text').names == ['text']
    for bad, words in (({'output_dir': 3}, "--output_dir 3 is an int, not text"), ({'names': [1]}, '--names 1 is an int'),
                       ({'flag': 'false'}, "--flag 'false' is a str, not true or false"), ({'output_dir': None}, 'is missing')):
        with pytest.raises(UsageError, match=words): _A(**bad)

def test_a_run_interrupted_before_records_is_recognised(tmp_path):
    (tmp_path/'m'/'checkpoint-4').mkdir(parents=True); (tmp_path/'m'/'checkpoint-4'/'trn_tutorials_complete.json').write_text('{}')
    assert folder_record(tmp_path/'m') == {'kind': 'model'}
    (tmp_path/'u'/'checkpoint-4').mkdir(parents=True); (tmp_path/'u'/'checkpoint-4'/'config.json').write_text('{}')   # someone else's
    assert folder_record(tmp_path/'u') is None
