"""The book's shape, per chapter, in reading order: where the result first shows, how long exported code runs without a
cell that uses it, how long the exported cells are, and how long the sentences are.

    .venv/bin/python tools/book_metrics.py          # a table
    .venv/bin/python tools/book_metrics.py --json   # the same numbers as JSON

Definitions (cells counted from 0, as in the notebook's JSON):
- result: the first visible code cell that shows the chapter's step working: it calls a name the chapter's own module
  exports (`#| default_exp`; for a notebook without a module, any name the package exports), runs that module
  (`!torchrun ... -m trn_tutorials.MODULE`, after any `VAR=value` the shell sets for it) or a CLI command it defines (`!trn-tutorials CMD` for `CMD_cmd`), and it or the
  next visible code cell has a stored output (a `#| neuron`/`#| aws` call whose output the next cell shows). `-` when
  there is none.
- shown: the same cell's place among the cells the page renders (markdown, visible code, and exported cells that
  define a public name, which nbdev documents); hidden cells, `#| default_exp` and import-only exported cells render nothing.
- run: the longest run of exported cells with no visible cell in between that uses a name those cells define (a
  `!trn-tutorials CMD` line uses `CMD_cmd`).
- exported cell lines: code lines of the `#| export`/`#| exports`/`#| exporti` cells (no blank lines, no `#|` lines).
- sentences: the markdown cells' prose (code, tables, headings and link targets left out), split at . ! ? and at
  paragraph and list breaks; words are runs of letters or digits.
"""
import argparse, ast, json, re, statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORDER = ['', 'instance', 'data', 'training', 'serving', 'sagemaker', 'reference']
EXPORT = re.compile(r'^#\|\s*(export|exports|exporti)\s*$', re.M)
HIDDEN = re.compile(r'^#\|\s*(hide|export|exporti|default_exp)(\s|$)', re.M)   # `#| exports` cells are shown
DEFAULT_EXP = re.compile(r'^#\|\s*default_exp\s+(\S+)', re.M)


def chapters(root=ROOT):
    "The notebooks in reading order: the index, then each section's, by file name."
    nbs = root / 'nbs'
    out = [nbs / 'index.ipynb'] if (nbs / 'index.ipynb').exists() else []
    for sec in ORDER[1:]: out += sorted((nbs / sec).glob('*.ipynb'))
    rest = sorted(p for p in nbs.rglob('*.ipynb') if p not in out and '.ipynb_checkpoints' not in p.parts)
    return out + rest


def src(c): return ''.join(c['source'])


def code_of(text):
    "The cell's Python, `#|` and `%`/`!` lines blanked, or None when it does not parse."
    lines = ['' if re.match(r'\s*(#\||%|!)', l) else l for l in text.split('\n')]
    try: return ast.parse('\n'.join(lines))
    except SyntaxError: return None


def defined(tree):
    "Top-level names an exported cell defines."
    names = set()
    for n in (tree.body if tree else []):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): names.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                names |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
    return {n for n in names if not n.startswith('_')} or names


def used(tree):
    "Names a cell reads (plain names and attributes)."
    if tree is None: return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def called(tree):
    "Names a cell calls (`f(...)`, `m.f(...)`)."
    if tree is None: return set()
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            out.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None)
    return out - {None}


def package_names(root=ROOT):
    "Every public top-level name the package's modules define."
    names = set()
    for p in (root / 'trn_tutorials').glob('*.py'):
        if p.name.startswith('_'): continue
        try: names |= {n for n in defined(ast.parse(p.read_text())) if not n.startswith('_')}
        except SyntaxError: pass
    return names


def sentences(md):
    "Words in each prose sentence of a markdown text."
    md = re.sub(r'```.*?```', '\n\n', md, flags=re.S)
    md = re.sub(r'<[^>]+>', ' ', md)
    blocks, cur = [], []
    for line in md.split('\n'):
        s = line.strip()
        item = re.match(r'^([-*+]|\d+\.)\s+', s)
        if not s or s.startswith(('|', '#', ':::')) or item:   # a blank line, table, heading or list item ends a block
            if cur: blocks.append(' '.join(cur)); cur = []
            if item: cur = [s[item.end():]]
            continue
        cur.append(re.sub(r'^>\s*', '', s))
    if cur: blocks.append(' '.join(cur))
    out = []
    for b in blocks:
        b = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', b)   # links: their text
        b = re.sub(r'`([^`]*)`', lambda m: m[1].replace('.', '_'), b)   # code: its dots end no sentence
        b = re.sub(r'\b(e\.g|i\.e|etc|vs|cf)\.', r'\1', b)
        for sent in re.split(r'(?<=[.!?])\s+', b):
            words = re.findall(r"[A-Za-z0-9]+(?:['’_-][A-Za-z0-9]+)*", sent)
            if words: out.append(len(words))
    return out


def measure(nb_path, pkg=None):
    cells = json.loads(Path(nb_path).read_text())['cells']
    module = next((m[1] for c in cells if c['cell_type'] == 'code' for m in [DEFAULT_EXP.search(src(c))] if m), None)
    exported = set()
    for c in cells:
        if c['cell_type'] == 'code' and EXPORT.search(src(c)): exported |= defined(code_of(src(c)))
    own = exported if module else (pkg if pkg is not None else package_names())
    result, shown, rendered, pending, run, longest, run_names, lines = None, None, [], None, 0, 0, set(), []
    for i, c in enumerate(cells):
        s = src(c)
        if c['cell_type'] != 'code':
            if s.strip(): rendered.append(i)
            continue
        tree = code_of(s)
        if EXPORT.search(s):
            run += 1; longest = max(longest, run); run_names |= defined(tree)
            lines.append(sum(1 for l in s.split('\n') if l.strip() and not l.lstrip().startswith('#|')))
            if any(not n.startswith('_') for n in defined(tree)) or re.search(r'^#\|\s*exports\s*$', s, re.M): rendered.append(i)
            continue
        if HIDDEN.search(s): continue
        rendered.append(i)
        shell = {c.replace('-', '_') + '_cmd' for c in re.findall(r'^\s*!trn-tutorials\s+([a-z][\w-]*)', s, re.M)}   # `!trn-tutorials detect` uses `detect_cmd`
        if run and (used(tree) | shell) & run_names: run, run_names = 0, set()
        if result is None:
            runs_module = module is not None and re.search(rf'^\s*!(?:\w+=\S*\s+)*torchrun\b.*-m\s+trn_tutorials\.{module}\b', s, re.M | re.S)
            step = bool(called(tree) & own or shell & own or runs_module)
            if c.get('outputs') and step: result = i
            elif c.get('outputs') and pending is not None: result = pending   # the call's output, shown by the next cell
            else: pending = i if step else None
    if result is not None: shown = rendered.index(result)
    words = [n for c in cells if c['cell_type'] == 'markdown' for n in sentences(src(c))]
    share = lambda k: round(100 * sum(n > k for n in words) / len(words), 1) if words else 0.0
    return dict(chapter=str(Path(nb_path).relative_to(ROOT / 'nbs')) if ROOT / 'nbs' in Path(nb_path).parents else str(nb_path),
                module=module, cells=len(cells), result=result, shown=shown, rendered=len(rendered), export_run=longest, exported_cells=len(lines),
                export_median=statistics.median(lines) if lines else 0, export_longest=max(lines, default=0),
                sentences=len(words), words_median=statistics.median(words) if words else 0,
                over40_pct=share(40), over30_pct=share(30), words=sum(words))


def totals(rows):
    allw = sum(r['words'] for r in rows); n = sum(r['sentences'] for r in rows)
    return dict(chapter='ALL', words=allw, sentences=n,
                over40_pct=round(sum(r['over40_pct'] * r['sentences'] for r in rows) / n, 1) if n else 0.0,
                over30_pct=round(sum(r['over30_pct'] * r['sentences'] for r in rows) / n, 1) if n else 0.0,
                export_run=max((r['export_run'] for r in rows), default=0))


def table(rows):
    head = f"{'chapter':34} {'result':>11} {'shown':>7} {'run':>4} {'exp med/max':>11} {'w/sent med':>10} {'>40%':>5} {'>30%':>5} {'words':>6}"
    out = [head, '-' * len(head)]
    for r in rows:
        res = f"{r['result']}/{r['cells']}" if r['result'] is not None else f"-/{r['cells']}"
        sh = f"{r['shown']}/{r['rendered']}" if r['shown'] is not None else f"-/{r['rendered']}"
        out.append(f"{r['chapter']:34} {res:>11} {sh:>7} {r['export_run']:>4} {r['export_median']:>5g}/{r['export_longest']:<5} "
                   f"{r['words_median']:>10g} {r['over40_pct']:>5} {r['over30_pct']:>5} {r['words']:>6}")
    t = totals(rows)
    out.append('-' * len(head))
    out.append(f"{'ALL':34} {'':>11} {'':>7} {t['export_run']:>4} {'':11} {'':>10} {t['over40_pct']:>5} {t['over30_pct']:>5} {t['words']:>6}")
    return '\n'.join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--json', action='store_true', help='print JSON instead of a table')
    p.add_argument('notebooks', nargs='*', help='notebooks to measure (default: every chapter, in reading order)')
    a = p.parse_args(argv)
    pkg = package_names()
    rows = [measure(Path(n).resolve(), pkg) for n in (a.notebooks or chapters())]
    print(json.dumps(dict(chapters=rows, all=totals(rows)), indent=1) if a.json else table(rows))


if __name__ == '__main__': main()
