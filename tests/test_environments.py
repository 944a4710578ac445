"""The reader environments agree everywhere they are written: tools/environments.toml (what CI's stand-ins hold, with
sources and dates), settings.ini's extras (what `pip install "trn-tutorials[trn1]"` installs, through setup.py), and
the README's Install section (the lines a reader copies). Files only, and one `setup.py egg_info`: seconds.
"""
import configparser, datetime, re, shlex, subprocess, sys, tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
ENVS = tomllib.loads((ROOT/'tools/environments.toml').read_text())
KEYS = {'title', 'venv', 'python', 'checked', 'source', 'image', 'neuron', 'stands_in', 'not_stated', 'reader_install',
        'extra', 'unchanged', 'tests', 'notebooks', 'flags'}
CONTAINER_KEYS = {'kind', 'title', 'image_uri', 'python', 'checked', 'source', 'base', 'image', 'neuron', 'stands_in',
                  'not_stated', 'unchanged', 'start', 'tests'}
DLAMIS = sorted(n for n, e in ENVS.items() if e.get('kind') not in ('container', 'laptop'))
LAPTOPS = sorted(n for n, e in ENVS.items() if e.get('kind') == 'laptop')
CONTAINERS = sorted(n for n, e in ENVS.items() if e.get('kind') == 'container')


def settings():
    c = configparser.ConfigParser(delimiters=['=']); c.read(ROOT/'settings.ini')
    return c['DEFAULT']

def extra_reqs(extra:str) -> dict:
    return {Requirement(r).name: Requirement(r) for r in shlex.split(settings()[f'{extra}_requirements'])}

def install_section() -> str:
    readme = (ROOT/'README.md').read_text()
    return readme.split('\n## Install\n', 1)[1].split('\n## ', 1)[0]

def readme_commands() -> list[list[str]]:
    "Every line of the Install section's shell blocks, split as the shell would."
    blocks = re.findall(r'```sh\n(.*?)```', install_section(), re.S)
    return [shlex.split(l) for b in blocks for l in b.splitlines() if l.strip()]


def test_both_environments_listed():
    assert {'trn1-dlami', 'trn2-torchneuron'} <= set(DLAMIS)
    assert {'sm-training', 'sm-pytorch-inference', 'sm-hf-inference'} <= set(CONTAINERS)


def _dated_source(e):
    checked = datetime.date.fromisoformat(e['checked'])
    assert datetime.date(2026, 1, 1) <= checked <= datetime.date.today(), checked
    assert len(e['source'].split()) > 20 and re.search(r'\d{4}-\d\d-\d\d|\d\d/\d\d/\d{4}', e['source']), 'a source names where and when'
    assert re.fullmatch(r'3\.1\d', e['python'])
    assert e['image'] and all(re.fullmatch(r'[a-z0-9-]+==[0-9.]+', p) for p in e['image']), e['image']


@pytest.mark.parametrize('name', CONTAINERS)
def test_container_has_source_and_date(name):
    "A container's stand-in: the image's pins with their source and date, the shared base among them, tests that exist."
    e = ENVS[name]
    assert CONTAINER_KEYS <= set(e), f'{name}: missing {sorted(CONTAINER_KEYS - set(e))}'
    _dated_source(e)
    assert set(e['base']) <= set(e['image']) and any(p.startswith('torch==') for p in e['base'])
    assert set(e['unchanged']) <= {p.split('==')[0] for p in e['image']} and 'torch' in e['unchanged']
    assert re.fullmatch(r'763104351884\.dkr\.ecr\.<region>\.amazonaws\.com/[a-z-]+:[\w.-]+', e['image_uri'])
    assert e['tests'] and all(t.startswith('tests/containers/test_') and (ROOT/t).is_file() for t in e['tests'])


@pytest.mark.parametrize('name', DLAMIS)
def test_environment_has_source_and_date(name):
    e = ENVS[name]
    assert KEYS <= set(e), f'{name}: missing {sorted(KEYS - set(e))}'
    _dated_source(e)   # the stand-in's base: exact pins only (its freeze is compared before and after the reader's install)
    assert e['neuron'] and all(p.split('==')[0] in ('torch-neuronx', 'neuronx-cc') for p in e['neuron'])
    assert set(e['unchanged']) <= {p.split('==')[0] for p in e['image']} and 'torch' in e['unchanged']
    assert e['venv'].startswith('/opt/aws_neuronx_venv_')
    assert e['tests'] and all(t.startswith('tests/test_') and t.endswith('.py') for t in e['tests'])
    assert all((ROOT/n).is_file() for n in e['notebooks'])
    assert set(e['flags']) <= set(settings()['tst_flags'].split())


def test_laptop_journey():
    "The laptop's table: the chapters a reader runs there, in reading order, which exist, with the `#| aws` cells run."
    assert LAPTOPS == ['laptop']
    e = ENVS['laptop']
    assert {'kind', 'title', 'python', 'stands_in', 'notebooks', 'flags'} <= set(e)
    assert e['notebooks'] == sorted(e['notebooks'], key=lambda n: Path(n).name) and all((ROOT/n).is_file() for n in e['notebooks'])
    assert e['flags'] == ['aws'] and set(e['flags']) <= set(settings()['tst_flags'].split())


@pytest.mark.parametrize('name', DLAMIS)
def test_reader_install_is_the_extra(name):
    e = ENVS[name]
    assert e['reader_install'] == f'pip install "trn-tutorials[{e["extra"]}]"'
    assert f'{e["extra"]}_requirements' in settings()
    cmd = shlex.split(e['reader_install'])
    assert cmd[:2] == ['pip', 'install'] and Requirement(cmd[2]).extras == {e['extra']}


def test_extras_hold_the_lines():
    "trn1 stays on transformers 4.57.x (never 5); trn2 starts where the `neuron` device is known (5.4, accelerate 1.13)."
    t1, t2 = extra_reqs('trn1'), extra_reqs('trn2')
    assert set(t1) == set(t2) == {'transformers', 'accelerate'}
    ok = lambda r, v: r.specifier.contains(Version(v), prereleases=False)
    assert ok(t1['transformers'], '4.57.6') and ok(t1['transformers'], '4.57.1') and not ok(t1['transformers'], '4.57.0')
    assert not ok(t1['transformers'], '4.56.2') and not ok(t1['transformers'], '4.58.0') and not ok(t1['transformers'], '5.0.0')
    assert ok(t1['accelerate'], '1.9.0') and not ok(t1['accelerate'], '2.0.0')
    assert ok(t2['transformers'], '5.4.0') and not ok(t2['transformers'], '5.3.0') and not ok(t2['transformers'], '6.0.0')
    assert ok(t2['accelerate'], '1.13.0') and not ok(t2['accelerate'], '1.12.0')
    # neither extra nor the base pins torch beyond a floor: the image's torch stays
    base = {Requirement(r).name: Requirement(r) for r in shlex.split(settings()['requirements'])}
    assert 'torch' not in t1 | t2 and ok(base['torch'], '2.9.0') and ok(base['torch'], '2.14.0')
    assert ok(base['transformers'], '4.57.1') and ok(base['transformers'], '5.4.0')


def test_setup_py_exposes_the_extras(tmp_path):
    "The wheel's metadata (setup.py, from settings.ini) has extras trn1 and trn2 beside dev and sagemaker."
    subprocess.run([sys.executable, 'setup.py', '-q', 'egg_info', '--egg-base', str(tmp_path)], cwd=ROOT, check=True,
                   capture_output=True)
    req = next(tmp_path.glob('*.egg-info')).joinpath('requires.txt').read_text()
    sections = dict(re.findall(r'^\[(\w+)\]\n(.*?)(?=^\[|\Z)', req, re.M | re.S))
    assert {'dev', 'sagemaker', 'trn1', 'trn2'} <= set(sections)
    for extra in ('trn1', 'trn2'):
        assert {Requirement(l).name: str(Requirement(l).specifier) for l in sections[extra].split()} == \
               {k: str(r.specifier) for k, r in extra_reqs(extra).items()}


def test_readme_install_lines():
    "The Install section: each environment's venv and install line, as tools/environments.toml has them; all parse."
    cmds = readme_commands()
    assert cmds, 'no ```sh block in the README Install section'
    for c in cmds:
        assert c[0] in ('pip', 'source'), c
        if c[0] == 'pip':
            assert c[1] == 'install'
            for a in c[2:]:
                if not a.startswith('-') and not a.startswith('http'): Requirement(a)   # each argument parses
    lines = [shlex.join(c) for c in cmds]
    for name in DLAMIS:
        e = ENVS[name]
        line = shlex.join(shlex.split(e['reader_install']))
        assert line in lines, f'README Install lacks {e["reader_install"]} ({name})'
        i = lines.index(line)
        assert lines[i - 1] == f'source {e["venv"]}/bin/activate', f'README: {e["reader_install"]} not right after activating {e["venv"]}'
    # the other extras the README names exist too
    for extra in re.findall(r'trn-tutorials\[([\w,]+)\]', install_section()):
        for x in extra.split(','): assert f'{x}_requirements' in settings(), x
    # on a CPU machine: the CPU build of torch first, then the package
    assert ['pip', 'install', 'torch', '--index-url', 'https://download.pytorch.org/whl/cpu'] in cmds
    assert cmds.index(['pip', 'install', 'torch', '--index-url', 'https://download.pytorch.org/whl/cpu']) + 1 == cmds.index(['pip', 'install', 'trn-tutorials'])


def test_readme_dates_the_stacks():
    "The Install section says which stack is current, with dates."
    s = ' '.join(install_section().split())
    assert 'Neuron 2.30' in s and 'Neuron 2.31' in s and 'Neuron 2.33 (2026-10-19)' in s and 'checked 2026-11-24' in s


def test_ci_has_the_stand_ins_python():
    "The GitHub workflow installs the Python each stand-in is built on (tools/test.sh finds it as python3.X on PATH)."
    import yaml
    wf = yaml.safe_load((ROOT/'.github/workflows/test.yaml').read_text())
    steps = [s for job in wf['jobs'].values() for s in job.get('steps', [])]
    versions = [v for s in steps if s.get('uses', '').startswith('actions/setup-python') for v in str(s['with']['python-version']).split()]
    for name, e in ENVS.items(): assert e['python'] in versions, f'{name}: Python {e["python"]} not installed by the workflow'


def test_core_stacks_agree():
    """core.STACKS (what check_backend's refusals name) has each environment's venv and install line, and its minimum
    versions are what the extra installs; XLA_INSTALL is the Trn1 image's pins plus the same extra."""
    from trn_tutorials.backends import STACKS, XLA_INSTALL
    by_extra = {ENVS[n]['extra']: ENVS[n] for n in DLAMIS}
    for backend, s in STACKS.items():
        e = by_extra[s.family]
        assert (s.venv, s.install) == (e['venv'], e['reader_install']), backend
        reqs = extra_reqs(e['extra'])
        for name, lowest in s.needs:
            assert reqs[name].specifier.contains(Version(lowest)), (backend, name, lowest, str(reqs[name].specifier))
    trn1 = by_extra['trn1']
    assert XLA_INSTALL == 'pip install ' + ' '.join(trn1['image']) + ' "trn-tutorials[trn1]"'
