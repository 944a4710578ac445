"""Checks on the docs as committed: the notebooks' stored outputs, the lesson ratio of every chapter, the site's
configuration, README.md, and the two GitHub workflows.

They read files only (README.md is regenerated into a temporary folder), so they run in seconds.
"""
import configparser, json, re, shutil, subprocess, sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
NBS = sorted(p for p in (ROOT / 'nbs').rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts)
CFG = configparser.ConfigParser(interpolation=None)
CFG.read(ROOT / 'settings.ini')
INI = CFG['DEFAULT']
SITE = INI['doc_host'].rstrip('/') + INI['doc_baseurl'].rstrip('/')   # https://trn-tutorials.github.io/trn-tutorials


def cells(nb_path):
    return json.loads(nb_path.read_text())['cells']


def src(cell): return ''.join(cell['source'])


# ---------------------------------------------------------------------------------------------------------------
# (a) stored outputs show what a reader should see: no build machine, no library noise
# ---------------------------------------------------------------------------------------------------------------
NOISE = {
    'temporary folder': r'/tmp/tmp\w*',
    'build machine path': r'/work/\S*',
    'virtual environment': r'\S*\.venv\b\S*',
    'installed library path': r'\S*site-packages\S*',
    "root's home": r'/root\b\S*',
    'jupyter run as root': r'--allow-root',
    'root user': r"\broot@[\w.-]*|(?i:\buser(?:name)?)\W{0,3}root\b|\b(?:as|of) root\b|^\W*root\b|\(root\)",
    'ANSI escape': r'\x1b\[?[0-9;]*[A-Za-z]?',
    "transformers' load report": r'LOAD REPORT',
    'runner script': r'run_nb\.py',
}
_NOISE = re.compile('|'.join(f'(?P<g{i}>{p})' for i, p in enumerate(NOISE.values())), re.M)


def output_texts(out):
    "The text a stored output holds (binary images left out: their base64 could match anything)."
    for k in ('text', 'ename', 'evalue', 'traceback'):
        v = out.get(k)
        if v: yield k, ''.join(v) if isinstance(v, list) else str(v)
    for mime, v in out.get('data', {}).items():
        if mime.startswith('image/') and mime != 'image/svg+xml': continue
        yield mime, ''.join(v) if isinstance(v, list) else json.dumps(v)


def noise_in(nb_path):
    found = []
    for c in cells(nb_path):
        for out in c.get('outputs', []):
            for where, text in output_texts(out):
                for m in _NOISE.finditer(text):
                    what = list(NOISE)[int(m.lastgroup[1:])]
                    line = text[text.rfind('\n', 0, m.start()) + 1:].split('\n')[0]
                    found.append(f"{nb_path.name} cell {c.get('id')} ({out['output_type']} {where}): {what}: "
                                 f"{m.group()!r} in {line[:160]!r}")
    return found


@pytest.mark.parametrize('nb', NBS, ids=lambda p: p.name)
def test_outputs_are_clean(nb):
    found = noise_in(nb)
    assert not found, f'{len(found)} stored outputs show the build machine or library noise:\n' + '\n'.join(found)


def test_noise_patterns():
    "The patterns catch what they are for, and not prose about a repository's root or a `root_dir`."
    for bad in ['/tmp/tmpab12cd/model', '/work/main/nbs', 'x/.venv/bin/python', 'lib/python3.11/site-packages/x.py',
                '/root/.cache', 'jupyter lab --allow-root', 'root@127.0.0.1', "user='root'", 'logged in as root',
                'root on vm in /bin/bash', 'uid=0(root)', 'User: root', 'root', '\x1b[31mred', '*** LOAD REPORT ***', 'run_nb.py: error']:
        assert _NOISE.search(bad), bad
    for good in ['from the repository root', 'root_dir', 'square root of', 'runs/emotion-model', 'ubuntu@10.0.0.1']:
        assert not _NOISE.search(good), good


# ---------------------------------------------------------------------------------------------------------------
# (b) a chapter is a lesson: at most one visible check line for every four other visible code lines
# ---------------------------------------------------------------------------------------------------------------
CHECK = re.compile(r'^\s*(test_\w*\(|assert\b|test_fail|expect_fail)')
HIDDEN = re.compile(r'^#\|\s*(hide|export|exporti|default_exp)(\s|$)', re.M)   # `#| exports` cells are shown


def lesson_counts(nb_path):
    "Visible code lines that are checks, the other visible code lines, and the visible cells that end on a check."
    checks, other, ends = [], 0, []
    for c in cells(nb_path):
        if c['cell_type'] != 'code' or HIDDEN.search(src(c)): continue
        lines = [l for l in src(c).split('\n') if l.strip() and not l.strip().startswith('#')]
        checks += [(c.get('id'), l.strip()) for l in lines if CHECK.match(l)]
        other += sum(not CHECK.match(l) for l in lines)
        if lines and CHECK.match(lines[-1]): ends.append(c.get('id'))
    return checks, other, ends


@pytest.mark.parametrize('nb', NBS, ids=lambda p: p.name)
def test_lesson_ratio(nb):
    checks, other, ends = lesson_counts(nb)
    shown = '\n'.join(f'  cell {i}: {l[:100]}' for i, l in checks)
    assert 4 * len(checks) <= other, (
        f'{nb.name}: {len(checks)} visible check lines for {other} other visible code lines (at most 1 per 4: '
        f'move checks that teach nothing to tests/); cells ending on a check: {ends}\n{shown}')


# ---------------------------------------------------------------------------------------------------------------
# (c) the site's configuration follows settings.ini (nbdev_docs rewrites nbs/nbdev.yml from it)
# ---------------------------------------------------------------------------------------------------------------
def test_nbdev_yml_matches_settings():
    y = yaml.safe_load((ROOT / 'nbs/nbdev.yml').read_text())
    w = y['website']
    assert w['title'] == INI['title']
    assert w['site-url'] == INI['doc_host'] + INI['doc_baseurl']
    assert w['repo-url'] == INI['git_url']
    assert w['repo-branch'] == INI['branch']
    assert y['project']['output-dir'] == INI['doc_path']
    from nbdev.quarto import _nbdev_yml   # the template nbdev_docs writes: the committed file is what it would write
    vals = {k: INI[k] for k in ['title', 'description', 'branch', 'git_url', 'doc_host', 'doc_baseurl']}
    assert (ROOT / 'nbs/nbdev.yml').read_text() == _nbdev_yml.format(doc_path=Path(INI['doc_path']).name, **vals)


def test_build_folders_ignored():
    ignored = (ROOT / '.gitignore').read_text().split()
    for d in ('_proc/', '_docs/'): assert d in ignored, f'{d} missing from .gitignore'


# ---------------------------------------------------------------------------------------------------------------
# (d) README.md: links to the site are absolute, it is what tools/readme.sh makes, and nbdev_readme would agree
# ---------------------------------------------------------------------------------------------------------------
_LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)[^)]*\)|<(https?://[^>]+)>|href="([^"]+)"')


def page_of(nb_path):
    "A notebook's page on the site: its section folder, then its name without its number (nbdev's output-file)."
    rel = nb_path.relative_to(ROOT / 'nbs')
    name = re.sub(r'^\d+[a-zA-Z0-9]*_', '', rel.stem.lower()) + '.html'   # as nbdev names them: 03b_data_files -> data_files
    return str(rel.parent / name) if rel.parent != Path('.') else name


def pages():
    "The site's pages, by their path under the site (data/data_files.html)."
    return {page_of(p) for p in NBS}


def test_readme_links_absolute():
    links = [next(g for g in m.groups() if g) for m in _LINK.finditer((ROOT / 'README.md').read_text())]
    assert any(l.startswith(SITE + '/') for l in links), 'README.md links to no page of the site'
    for l in links:
        assert re.match(r'https?://|mailto:', l), f'README.md: relative link {l!r} (README.md is read on GitHub and PyPI)'
        host = INI['doc_host'].split('://')[1]
        if host in l:
            assert l.startswith(SITE + '/'), f'README.md: {l!r} is not under the published site {SITE}/'
            page = l[len(SITE) + 1:].split('#')[0]
            assert page in pages() | {'', 'index.html'}, f'README.md: {l!r} is not a page of the site ({sorted(pages())})'


def test_readme_is_generated(tmp_path):
    "README.md is tools/readme.sh's fallback (nbconvert) output of nbs/index.ipynb, as committed."
    subprocess.run([sys.executable, '-m', 'jupyter', 'nbconvert', '--log-level', 'WARN', '--to', 'markdown',
                    '--output-dir', str(tmp_path), '--output', 'README', str(ROOT / 'nbs/index.ipynb')], check=True)
    assert 'nbconvert --log-level WARN --to markdown --output-dir . --output README nbs/index.ipynb' in \
        (ROOT / 'tools/readme.sh').read_text(), 'tools/readme.sh changed: update this test'
    assert (tmp_path / 'README.md').read_text() == (ROOT / 'README.md').read_text(), 'README.md is stale: run tools/readme.sh'


def test_readme_links_as_nbdev_readme_makes_them():
    "nbdev_readme runs nbdev's processors first, which link `name` to the docs: the index's markdown is left as written."
    from nbdev.doclinks import NbdevLookup
    nl = NbdevLookup()
    for c in cells(ROOT / 'nbs' / INI['readme_nb']):
        if c['cell_type'] != 'markdown': continue
        assert nl.linkify(src(c)) == src(c), f"nbdev would add links to cell {c.get('id')}: write them out absolute"


# ---------------------------------------------------------------------------------------------------------------
# (e) the GitHub workflows: valid YAML, actions at versions that exist, what tools/test.sh needs
# ---------------------------------------------------------------------------------------------------------------
# major versions published (tags checked July 2026); a branch (@master) moves under you
EXISTING = {'actions/checkout': range(1, 8), 'actions/setup-python': range(1, 8), 'peaceiris/actions-gh-pages': range(1, 5),
            'quarto-dev/quarto-actions/setup': range(1, 3)}
NODE24 = {'actions/checkout': 5, 'actions/setup-python': 6, 'peaceiris/actions-gh-pages': 4}   # older majors run on Node 20
WORKFLOWS = sorted((ROOT / '.github/workflows').glob('*.y*ml'))


def steps(wf):
    return [s for job in wf['jobs'].values() for s in job.get('steps', [])]


def run_text(wf): return '\n'.join(s.get('run', '') for s in steps(wf))


@pytest.mark.parametrize('path', WORKFLOWS, ids=lambda p: p.name)
def test_workflow_actions_exist(path):
    wf = yaml.safe_load(path.read_text())
    assert wf.get('jobs') and (wf.get('on') or wf.get(True)), f'{path.name}: no jobs or no trigger'
    for s in steps(wf):
        if 'uses' not in s: continue
        m = re.fullmatch(r'([\w.-]+/[\w./-]+)@v(\d+)(?:\.\d+){0,2}', s['uses'])
        assert m, f"{path.name}: {s['uses']!r}: pin a released version (@vN), not a branch"
        action, major = m[1], int(m[2])
        assert action in EXISTING, f'{path.name}: {action} not reviewed: add it to EXISTING with its released majors'
        assert major in EXISTING[action], f"{path.name}: {s['uses']}: no such version"
        assert major >= NODE24.get(action, 0), f"{path.name}: {s['uses']} runs on Node 20, which GitHub retires"


def test_test_workflow_gives_test_sh_what_it_needs():
    wf = yaml.safe_load((ROOT / '.github/workflows/test.yaml').read_text())
    pys = [str(s['with']['python-version']) for s in steps(wf) if s.get('uses', '').startswith('actions/setup-python')]
    assert pys, 'no actions/setup-python step'
    versions = pys[-1].split()
    assert versions[-1] == '3.11', 'Python 3.11 must be the default python3 (listed last)'
    assert '3.10' in versions, 'tools/test.sh compiles the package with python3.10 (the DLAMI line): install it too'
    run = run_text(wf)
    # .ci/services.sh installs OpenSSH with apt-get, as root; a runner's user is not root but has sudo
    assert re.search(r'sudo apt-get install[^\n]*openssh-server', run), 'install openssh-server with sudo'
    assert 'sudo mkdir -p /run/sshd' in run, "create sshd's /run/sshd with sudo (tests run sshd as the runner's user)"
    assert re.search(r'make test|tools/test\.sh', run)
    assert 'download.pytorch.org/whl/cpu' in run, 'install the CPU build of torch (PyPI would pull CUDA)'


def test_deploy_workflow_builds_the_site():
    wf = yaml.safe_load((ROOT / '.github/workflows/deploy.yaml').read_text())
    uses = [s.get('uses', '') for s in steps(wf)]
    run = run_text(wf)
    assert any(u.startswith('quarto-dev/quarto-actions/setup@') for u in uses), 'install Quarto (nbdev_docs needs it)'
    assert re.search(r'pip install[^\n]*torch[^\n]*--index-url https://download.pytorch.org/whl/cpu', run), 'CPU torch first'
    assert run.index('download.pytorch.org/whl/cpu') < run.index('pip install -e ".[dev]"'), 'CPU torch before the package'
    assert 'nbdev_docs' in run
    deploy = [s for s in steps(wf) if s.get('uses', '').startswith('peaceiris/actions-gh-pages@')]
    assert deploy and deploy[0]['with']['publish_dir'].rstrip('/').endswith(INI['doc_path'])
    assert wf['permissions']['contents'] == 'write'


# ---------------------------------------------------------------------------------------------------------------
# (f) the hand-written sidebar (custom_sidebar = True): every notebook is in it, and everything in it exists
# ---------------------------------------------------------------------------------------------------------------
def sidebar_entries(node):
    "The files a sidebar's `contents` names, in order: plain entries, `href`/`file` entries, and those inside sections."
    if isinstance(node, str): yield node; return
    if isinstance(node, list):
        for n in node: yield from sidebar_entries(n)
        return
    if isinstance(node, dict):
        for k in ('href', 'file'):
            if isinstance(node.get(k), str): yield node[k]
        if 'contents' in node: yield from sidebar_entries(node['contents'])


def test_sidebar_lists_every_notebook():
    assert INI.getboolean('custom_sidebar'), 'settings.ini: custom_sidebar is off, so nbdev_docs would overwrite nbs/sidebar.yml'
    y = yaml.safe_load((ROOT / 'nbs/sidebar.yml').read_text())
    entries = list(sidebar_entries(y['website']['sidebar']['contents']))
    nbs = [str(p.relative_to(ROOT / 'nbs')) for p in NBS]
    twice = sorted({e for e in entries if entries.count(e) > 1})
    missing = [n for n in nbs if n not in entries]
    absent = [e for e in entries if not re.match(r'https?://', e) and not (ROOT / 'nbs' / e).exists()]
    assert not twice, f'nbs/sidebar.yml lists these twice: {twice}'
    assert not missing, f'nbs/sidebar.yml lacks these notebooks (add each under its section): {missing}'
    assert not absent, f'nbs/sidebar.yml names files that do not exist: {absent}'


def test_sidebar_entries():
    "`sidebar_entries` reads every form an entry takes."
    c = ['index.ipynb', {'section': 'A', 'contents': ['a/1.ipynb', {'href': 'a/2.ipynb', 'text': 'Two'}]}, {'file': 'b.ipynb'}]
    assert list(sidebar_entries(c)) == ['index.ipynb', 'a/1.ipynb', 'a/2.ipynb', 'b.ipynb']


# ---------------------------------------------------------------------------------------------------------------
# (g) every visible cell runs as written after the chapter's imports: no helper defined in a hidden cell is used in one
# ---------------------------------------------------------------------------------------------------------------
_DIRECTIVE = lambda name: re.compile(rf'^#\|\s*{name}(\s|$)', re.M)
_HIDE, _EXPORT, _NO_ECHO = _DIRECTIVE('hide'), _DIRECTIVE('(export|exporti)'), re.compile(r'^#\|\s*echo:\s*false', re.M)


def _tree(source):
    import ast
    try: return ast.parse('\n'.join('' if l.lstrip().startswith(('!', '%')) else l for l in source.splitlines()))
    except SyntaxError: return None


def hidden_helpers_used(nb_path):
    "(cell index, names) of the visible code cells that call a function or class defined in a hidden cell."
    import ast
    cs, helpers, found = cells(nb_path), set(), []
    for c in cs:
        if c['cell_type'] == 'code' and _HIDE.search(src(c)) and (t := _tree(src(c))):
            helpers |= {n.name for n in t.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for i, c in enumerate(cs):
        s = src(c)
        if c['cell_type'] != 'code' or _HIDE.search(s) or _EXPORT.search(s) or _NO_ECHO.search(s) or not (t := _tree(s)): continue
        if used := sorted({n.id for n in ast.walk(t) if isinstance(n, ast.Name)} & helpers): found.append((i, used))
    return found


@pytest.mark.parametrize('nb', NBS, ids=lambda p: str(p.relative_to(ROOT / 'nbs')))
def test_visible_cells_use_no_hidden_helper(nb):
    assert not (bad := hidden_helpers_used(nb)), f'{nb.name}: visible cells use helpers defined in hidden cells (export them, or show them): {bad}'


def test_hidden_helpers_used_finds_one(tmp_path):
    nb = tmp_path / 'x.ipynb'
    code = lambda s: {'cell_type': 'code', 'source': s, 'outputs': []}
    nb.write_text(json.dumps({'cells': [code('#| hide\ndef said(e): print(e)'), code('said(1)'), code('#| export\ndef f(): pass'), code('f()')]}))
    assert hidden_helpers_used(nb) == [(1, ['said'])]


def _flags(c): return {l.split('|', 1)[1].split()[0] for l in ''.join(c['source']).splitlines() if l.startswith('#|') and l[2:].strip()}


def _out(c): return ''.join(''.join(o.get('text', '')) + ''.join(o.get('data', {}).get('text/plain', '')) for o in c.get('outputs', []))


def longest_unused_run(cells) -> int:
    "The longest run of exported cells with no visible, non-exported code cell between them."
    run = longest = 0
    for c in cells:
        if c['cell_type'] != 'code': continue
        f = _flags(c)
        if f & {'export', 'exports'}: run += 1; longest = max(longest, run)
        elif not f & {'hide', 'default_exp'} and 'import' not in ''.join(c['source']).split('\n')[0]: run = 0
    return longest


@pytest.mark.parametrize('name, shows', [('01_setup.ipynb', "Instance(instance_id='i-"), ('02_ssh.ipynb', 'ssh -L 8888:localhost:8888 -i ~/.ssh/')])
def test_chapters_show_their_result_first(name, shows):
    "Each chapter opens with its step working: the CLI line, then the call's stored output within the first ten cells."
    cs = cells(ROOT/'nbs/instance'/name)
    assert ''.join(cs[0]['source']).startswith('# ') and '> **Where:** your laptop' in ''.join(cs[2]['source'])
    assert 'trn-tutorials ' in ''.join(cs[2]['source'])   # the command line
    assert any(shows in _out(c) for c in cs[:10]), name
    assert longest_unused_run(cs) <= 4
