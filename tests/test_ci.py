"""CI's scheduler (tools/ci.py): jobs on slots, longest chain first, budgets that fail loudly, a budget file that names
what exists. The jobs here are small shell scripts standing in for `tools/test.sh --stage JOB`; the real jobs run in CI."""
import json, sys, textwrap
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'tools'))
import ci  # noqa: E402


@pytest.fixture
def sched(tmp_path, monkeypatch):
    "Run ci.main on a budget file of fake jobs: each job JOB runs `jobs/JOB.sh` (it writes its own counts, as test.sh does)."
    monkeypatch.setattr(ci, 'CACHED', tmp_path/'cache'/'ci-times.json')
    monkeypatch.setattr(ci, 'COMMITTED', tmp_path/'ci_times.json')
    monkeypatch.setattr(ci, 'STAGE_CMD', ['bash', '-c', f'exec bash {tmp_path}/jobs/$0.sh'])
    monkeypatch.setenv('CI_DIR', str(tmp_path/'ci'))
    monkeypatch.delenv('CI_SETUP_S', raising=False); monkeypatch.delenv('CI_SLOTS', raising=False)
    (tmp_path/'jobs').mkdir()
    def run(toml:str, scripts:dict, argv=()) -> tuple[int, str]:
        cfg = tmp_path/'ci.toml'; cfg.write_text(textwrap.dedent(toml))
        for name, body in scripts.items():
            (tmp_path/'jobs'/f'{name}.sh').write_text(f'set -u\n{body}\n')
        import io, contextlib
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf): rc = ci.main(list(argv), config=cfg)
        return rc, buf.getvalue()
    run.dir = tmp_path
    return run

def counts(p, f=0): return f'echo "{p} {f}" > "$CI_DIR/counts/$CI_JOB"'


def test_the_budget_file_names_real_jobs():
    "tools/ci.toml loads, every job has a budget, and test.sh knows each job (its run_job)."
    cfg = ci.load_config()
    text = (ROOT/'tools'/'test.sh').read_text()
    for name in cfg['jobs']:
        assert any(p.strip() and __import__('fnmatch').fnmatch(name, p.strip()) for line in text.split('run_job() {')[1].split('esac')[0].splitlines()
                   if ')' in line for p in line.split(')')[0].split('|')), f"tools/test.sh's run_job does not know {name}"
    assert ci.expand(cfg, ['trn1']) == [j for j in cfg['jobs'] if j.startswith('trn1-')]


def test_a_job_that_does_not_exist_fails(sched):
    rc, out = sched('''
        total_budget = 60
        [jobs.a]
        budget = 10
        needs = ["nope"]
        ''', {})
    assert rc == 1 and "needs 'nope', which is not a job" in out and out.strip().endswith('0 passed, 1 failed')
    rc, out = sched('''
        total_budget = 60
        [jobs.a]
        budget = 10
        ''', {'a': counts(1)}, argv=['b'])
    assert rc == 1 and "unknown job 'b'" in out and out.strip().endswith('0 passed, 1 failed')


def test_longest_chain_first_over_budget_fails_with_its_slowest_tests(sched):
    junit = ('cat > "$CI_DIR/junit/$CI_JOB--x.xml" <<X\n<testsuite tests="2"><testcase classname="test_m" name="test_slow" time="1.5"/>'
             '<testcase classname="test_m" name="test_fast" time="0.1"/></testsuite>\nX\n')
    rc, out = sched('''
        total_budget = 60
        slots = 1
        [jobs.short]
        budget = 30
        [jobs.first]
        budget = 15
        [jobs.after]
        budget = 20
        needs = ["first"]
        [jobs.slow]
        budget = 1
        ''', {'short': counts(1), 'first': counts(1), 'after': counts(2), 'slow': junit + 'sleep 2\n' + counts(2)})
    starts = [l.split()[2] for l in out.splitlines() if l.startswith('ci: start')]
    assert starts[0] == 'first' and starts.index('first') < starts.index('after')   # its chain (15 + 20) outweighs short's 30
    assert starts[-1] == 'slow'
    assert rc == 1 and 'FAILED: slow: over its budget' in out and 'test_m::test_slow' in out.split('FAILED: slow')[1]
    assert 'FAILED job slow' in out and out.strip().endswith('6 passed, 1 failed')
    times = json.loads((sched.dir/'cache'/'ci-times.json').read_text())
    assert set(times['jobs']) == {'short', 'first', 'after', 'slow'} and (sched.dir/'ci_times.json').exists()   # a full run: the committed table too


def test_a_failed_need_and_the_run_budget_stop_loudly(sched):
    rc, out = sched('''
        total_budget = 2
        [jobs.broken]
        budget = 10
        [jobs.after]
        budget = 10
        needs = ["broken"]
        [jobs.long]
        budget = 100
        ''', {'broken': counts(0, 1) + '\nexit 1', 'after': counts(1), 'long': 'sleep 30\n' + counts(1)})
    assert rc == 1 and 'FAILED: after: not run: broken failed' in out
    assert 'stopped: the run passed its budget of 2 s' in out and 'FAILED job long' in out


def test_shards_balance_the_files():
    cfg = {'pytest': {'elsewhere': ['tests/test_ci.py'], 'unknown_file_s': 1}}
    groups = ci.shards(cfg, 3, {'tests/test_docs.py': 500, 'tests/test_core.py': 300})
    flat = [f for g in groups for f in g]
    assert 'tests/test_ci.py' not in flat and len(flat) == len(set(flat)) == len(list((ROOT/'tests').glob('test_*.py'))) - 1
    assert ['tests/test_docs.py'] in groups or any('tests/test_docs.py' in g and 'tests/test_core.py' not in g for g in groups)


def test_the_test_ids_ci_names_exist():
    "Each test id or file tools/ci.toml names (the version ranges' tests, the files run elsewhere) is there: a rename fails here, not in CI."
    import re, tomllib
    cfg = tomllib.loads((ROOT/'tools'/'ci.toml').read_text())
    ids = [i for v in cfg['ranges'].values() for i in v] + cfg['pytest']['elsewhere']
    for i in ids:
        f, _, name = i.partition('::')
        assert (ROOT/f).is_file(), f"tools/ci.toml names {f}, which is not there"
        if name: assert re.search(rf'^def {re.escape(name.split("[")[0])}\(', (ROOT/f).read_text(), re.M), f"tools/ci.toml names {i}, which is not there"
