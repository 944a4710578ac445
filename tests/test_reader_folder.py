"""The reader's folders (`reader_folder`, `made_before`, `scratch`; which folder a run may write, `check_owner`) and the journey
that walks the chapters in it."""
import json, os, re, shutil, subprocess, sys, tomllib
from pathlib import Path

import pytest

from trn_tutorials.reader import READER_ENV, check_owner, made_before, reader_contents, reader_folder, reader_path, scratch
from trn_tutorials.core.options import UsageError
from trn_tutorials.core.folders import RECORD, write_record

ROOT = Path(__file__).parents[1]


@pytest.fixture
def back_here():
    here = Path.cwd()
    yield
    os.chdir(here)


def test_the_setting_names_the_folder_and_the_default_is_in_home(tmp_path, monkeypatch, back_here):
    monkeypatch.setenv('HOME', str(tmp_path/'home')); monkeypatch.delenv(READER_ENV, raising=False)
    assert reader_path() == tmp_path/'home'/'trn-tutorials'
    assert reader_folder() == tmp_path/'home'/'trn-tutorials' == Path.cwd()
    monkeypatch.setenv(READER_ENV, str(tmp_path/'mine'/'deeper'))
    assert reader_folder() == Path.cwd() == tmp_path/'mine'/'deeper'
    assert reader_contents() == {}


def test_a_folder_that_cannot_be_written_is_refused_in_one_line_and_the_fix_works(tmp_path, monkeypatch, back_here):
    (tmp_path/'a-file').write_text('mine')
    monkeypatch.setenv(READER_ENV, str(tmp_path/'a-file'/'trn'))
    with pytest.raises(UsageError) as e: reader_folder()
    msg = str(e.value)
    assert '\n' not in msg and f"set {READER_ENV} to a folder you can write to" in msg, msg
    assert (tmp_path/'a-file').read_text() == 'mine' and Path.cwd() != tmp_path/'a-file'   # nothing of the user's touched
    monkeypatch.setenv(READER_ENV, str(tmp_path/'ok'))   # the fix, as printed: another folder
    assert reader_folder() == tmp_path/'ok'


def test_a_chapter_run_before_the_one_it_needs_is_told_which_to_run(tmp_path, monkeypatch, back_here):
    monkeypatch.setenv(READER_ENV, str(tmp_path/'r'))
    reader_folder()
    with pytest.raises(UsageError, match=r"has no runs/emotion-data: run the data chapter \(03_data.ipynb\) first, or `trn-tutorials prep --dataset_path runs/emotion-data`"):
        made_before('runs/emotion-data', 'prepared data')
    write_record('runs/emotion-data', {'kind': 'model'})
    with pytest.raises(UsageError, match='has a model folder'): made_before('runs/emotion-data', 'prepared data')
    write_record('runs/emotion-data', {'kind': 'prepared data'})
    write_record('runs/emotion-model', {'kind': 'model'})
    assert made_before('runs/emotion-data', 'prepared data') == 'runs/emotion-data'
    assert reader_contents() == {'runs/emotion-data': 'prepared data', 'runs/emotion-model': 'model'}


def test_scratch_gives_the_folder_back_even_when_the_demo_fails(tmp_path, back_here):
    os.chdir(tmp_path)
    with pytest.raises(ZeroDivisionError):
        with scratch() as demo:
            assert Path.cwd() == demo.path != tmp_path
            Path('made-by-the-demo').mkdir(); 1 / 0
    assert Path.cwd() == tmp_path and not demo.path.exists()
    demo = scratch(); os.chdir(tmp_path)   # the reader moved away by hand: close() removes the demo, stays where they are
    demo.close()
    assert Path.cwd() == tmp_path and not demo.path.exists()


def _journey() -> list[str]:
    return tomllib.loads((ROOT/'tools'/'environments.toml').read_text())['trn1-dlami']['notebooks']


def test_the_journey_chapters_keep_their_demos_in_scratch_folders_and_their_trn1_cells_in_yours():
    chapters = _journey()
    assert chapters[0] == 'nbs/data/03_data.ipynb' and chapters == sorted(chapters, key=lambda c: Path(c).name)   # reading order
    for c in chapters:
        cells = [''.join(x['source']) for x in json.loads((ROOT/c).read_text())['cells'] if x['cell_type'] == 'code']
        assert not any('mkdtemp()' in s and 'chdir' in s for s in cells), f"{c}: a demo moves the kernel away for good: use scratch()"
        trn1 = [s for s in cells if s.startswith('#| neuron')]
        for s in trn1:   # the data an earlier chapter left: asked for by name, with the line that says what to run first
            if re.search(r"runs/emotion-data(?![\w-])", s): assert "made_before('runs/emotion-data', 'prepared data')" in s, (c, s)
        makes_its_own = any('prepare(' in s for s in trn1)   # the XLA loop chapter prepares its rows itself: it needs nothing before it
        assert not trn1 or makes_its_own or any('made_before(' in s for s in trn1), c


def test_the_journey_stand_in_makes_this_machine_a_trn1_with_one_visible_core(tmp_path):
    sys.path.insert(0, str(ROOT/'tools'))
    try: import journey
    finally: sys.path.pop(0)
    env = {**os.environ, **journey.stand_in(tmp_path/'s')}
    ls = subprocess.run(['neuron-ls', '--json-output'], env=env, capture_output=True, text=True, check=True).stdout
    assert ls == journey.NEURON_LS.read_text()   # the real tool's output, verbatim
    assert subprocess.run(['neuron-ls', '--output-format', 'json'], env=env, capture_output=True).returncode == 2   # 2.34's flag: not on 2.31
    code = ("import json; from trn_tutorials.backends import detect, neuron_stack; a = detect(); "
            "print(json.dumps([neuron_stack(), a.backend, a.workers, a.neuron_cores]))")
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == ['neuron', 'neuron', 1, 1]


def test_every_chapter_opens_with_where_it_runs_and_what_it_needs():
    for fn in sorted((ROOT/'nbs').glob('*/[0-9]*.ipynb'), key=lambda p: p.name):
        cells = [''.join(c['source']) for c in json.loads(fn.read_text())['cells'] if c['cell_type'] == 'markdown']
        title = next(i for i, s in enumerate(cells) if s.startswith('# '))
        line = cells[title + 1]
        assert line.startswith(('> **Where:**', '> **Reference:**')) and '**Needs:**' in line, f"{fn.name}: {line[:80]!r}"


def test_the_journey_chapters_deploy_the_launch_chapters_model_from_your_folder():
    "The endpoint chapters' `#| aws` cells deploy `runs/emotion-model`, asked for by name with the line that says what to run first."
    for c in ('nbs/sagemaker/12_endpoint.ipynb', 'nbs/sagemaker/13_hf_endpoint.ipynb'):
        assert c in _journey()
        cells = [''.join(x['source']) for x in json.loads((ROOT/c).read_text())['cells'] if x['cell_type'] == 'code']
        aws = [s for s in cells if s.startswith('#| aws')]
        assert "made_before('runs/emotion-model', 'model')" in aws[0] and 'deploy(model, role=role)' in aws[0], c
        i = cells.index(aws[0])
        assert 'demo.close()' in cells[:i] and 'reader_folder()' in cells[i - 1], c   # the demo gave the folder back first


def test_the_journey_answers_an_endpoint_with_its_archives_handler(tmp_path, monkeypatch, back_here, prepared):
    """journey.py's AWS for the instance: moto with the reader's role, and `Endpoints` answering what the deployed archive's
    handler (PyTorch image) or pipeline (Hugging Face image) answers for the texts sent; after delete and cleanup nothing is left."""
    sys.path.insert(0, str(ROOT/'tools'))
    try: import journey
    finally: sys.path.pop(0)
    for k in ('AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME'): monkeypatch.delenv(k, raising=False)
    saved = dict(os.environ)   # the stand-in sets the walk's variables in os.environ itself (boto3's sessions read that
    # object): put them back afterwards
    aws = journey.InstanceAws(tmp_path)
    try:
        aws.start()
        from trn_tutorials.instance.cleanup import cleanup
        from trn_tutorials.sagemaker.endpoint import delete, deploy, predict
        from trn_tutorials.sagemaker.hf_endpoint import hf_deploy
        from trn_tutorials.serving.inference import model_fn, predict_fn
        from transformers import pipeline
        model = str(shutil.copytree(prepared/'tiny-bert', tmp_path/'model'))   # conftest's tiny BERT, copied: it is read-only
        texts = ['i feel so happy today', 'i am scared']
        with pytest.raises(UsageError, match='no endpoint named'): predict('trn-tutorials-none', texts)
        ep = deploy(model, role='arn:aws:iam::111122223333:role/SageMakerExecution')
        assert predict(ep.name, texts) == predict_fn(texts, model_fn(model))   # the archive's handler, not a queued answer
        hf = hf_deploy(model, role='SageMakerExecution')
        assert predict(hf.name, texts) == pipeline('text-classification', model=model, tokenizer=model, device=-1)(texts)
        assert aws.endpoints.served == {ep.name: 1, hf.name: 1}
        for e in (ep, hf): delete(e.name); cleanup(e.run_id, ec2=False)
        assert aws.left() == {}
    finally:
        aws.stop(); os.environ.clear(); os.environ.update(saved)


# Issue 23: `check_owner` lets a run write only into a new, empty or own folder, and never nests a recorded folder in another
# (was test_core.py)

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
