"""Execute chapters and store their outputs, as the docs show them: the way `nbdev_test` runs them
(from `nbs/`, `IN_TEST=1`, so the local rehearsal stands in for AWS and the instance), skipping the cells
flagged with `tst_flags` (`#| aws`, `#| neuron`, `#| xla`, `#| slow`) and `#| eval: false`, whose
outputs are left as they are (empty, or from a real run). Then `nbdev_clean` the notebook.

Usage: .venv/bin/python tools/run_nb.py nbs/training/04_train.ipynb [more notebooks]
       .venv-trn1/bin/python tools/run_nb.py nbs/training/05_launch.ipynb --flags xla --keep CELL_ID
         (run the `#| xla` cells too, in the Trn1 stand-in with torch-xla, and store only the outputs of cell CELL_ID)
       .venv-trn1/bin/python tools/run_nb.py --check --flags xla -- nbs/training/05_launch.ipynb
         (execute only, as tools/test.sh does: nothing is written; the flagged cells' outputs are printed)
       .venv/bin/python tools/run_nb.py --reader --check --flags aws -- nbs/instance/01_setup.ipynb
         (as a reader's Run All: `IN_TEST` unset, so no hidden rehearsal cell starts a stand-in; the `#| aws` cells
         then talk to whatever AWS the environment points at: tools/journey.py's moto and instance stand-in)
"""
import os, re, sys, time
from pathlib import Path
import execnb.shell
from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell
from fastcore.xtras import working_directory
from nbdev.config import get_config

_dir = re.compile(r'^\s*#\|\s*([\w-]+:?)(.*)$')

_out_nb = execnb.shell._out_nb
def _updated_in_place(o, fmt):
    "As Jupyter shows it: an update of a display (`display_id`, e.g. a progress bar) replaces it, not appends to it."
    keep, where = [], {}
    for x in o.display_objects:
        did = (getattr(x, 'transient', None) or {}).get('display_id')
        if did and getattr(x, 'update', False) and did in where: keep[where[did]] = x
        else:
            if did: where[did] = len(keep)
            keep.append(x)
    o.display_objects[:] = keep
    return _out_nb(o, fmt)
execnb.shell._out_nb = _updated_in_place

def _directives(src: str) -> dict:
    d = {}
    for line in src.splitlines():
        if not (m := _dir.match(line)): break
        d[m.group(1)] = m.group(2).split()
    return d

def _text(cell) -> str:
    "A cell's outputs as text (what a terminal would show)."
    out = []
    for o in cell.get('outputs', []):
        if o.get('output_type') == 'stream': out.append(''.join(o.get('text', '')))
        elif 'data' in o: out.append(''.join(o['data'].get('text/plain', '')))
        elif o.get('output_type') == 'error': out.append(f"{o.get('ename')}: {o.get('evalue')}")
    return '\n'.join(x.rstrip('\n') for x in out)

def run(fn: Path, force=(), keep=(), check=False, reader=False, replace=()):
    flags = set(get_config().tst_flags.split()) - set(force)
    nb = read_nb(fn)
    for c in nb.cells:   # `replace`: (old, new) pairs, applied to the flagged cells run here (tools/journey.py's CI cap)
        if c.cell_type == 'code' and set(force) & _directives(c.source).keys():
            for old, new in replace:
                if old in c.source: c.source = c.source.replace(old, new); print(f"  {fn.name} cell {c.id}: {old!r} -> {new!r} (CI cap)")
    before = {c.id: c.get('outputs') for c in nb.cells}
    def skip(cell):
        if cell.cell_type != 'code': return True
        if 'nbdev_export' + '(' in cell.source: return True
        d = _directives(cell.source)
        if d.get('eval:', [''])[0].lower() == 'false': return True
        return bool(flags & d.keys())
    if reader: os.environ.pop('IN_TEST', None)   # a reader's kernel: the hidden `if IN_TEST` cells do nothing
    else: os.environ['IN_TEST'] = '1'
    k, t0, slow = CaptureShell(fn), [0.0], []
    def start(cell):
        t0[0] = time.monotonic(); return skip(cell)
    def took(cell):   # the cells that take long, for the journey's and CI's timing
        if (s := time.monotonic() - t0[0]) >= 10: slow.append((s, cell.id, cell.source.strip().splitlines()[-1][:70] if cell.source.strip() else ''))
    with working_directory(fn.parent): k.run_all(nb, exc_stop=True, preproc=start, postproc=took)
    for s, i, last in sorted(slow, reverse=True)[:8]: print(f"  {fn.name} cell {i}: {s:.0f} s  ({last})")
    if check:
        for c in nb.cells:
            if c.cell_type == 'code' and set(force) & _directives(c.source).keys():
                print(f'--- {fn.name} cell {c.id} ({" ".join(sorted(set(force) & _directives(c.source).keys()))}):', _text(c), sep='\n')
        return
    if keep:
        for c in nb.cells:
            if c.cell_type == "code" and c.id not in keep: c["outputs"] = before[c.id]
    write_nb(nb, fn)

if __name__ == '__main__':
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('notebooks', nargs='+')
    p.add_argument('--flags', nargs='*', default=[], help='flagged cells to run too, e.g. xla')
    p.add_argument('--keep', nargs='*', default=[], help='store the outputs of these cell ids only')
    p.add_argument('--check', action='store_true', help='execute only (an error fails): write nothing, print the flagged cells\' outputs')
    p.add_argument('--reader', action='store_true', help='as a reader runs it: IN_TEST unset, no hidden rehearsal (tools/journey.py)')
    p.add_argument('--replace', nargs=2, action='append', default=[], metavar=('OLD', 'NEW'),
                   help="in the flagged cells run (--flags), replace OLD by NEW before running (with --check only: nothing so run is stored)")
    a = p.parse_args()
    if a.replace and not a.check: p.error('--replace runs cells other than the chapter holds: use it with --check (nothing is stored)')
    for f in a.notebooks:
        run(Path(f).resolve(), a.flags, set(a.keep), a.check, a.reader, a.replace); print('executed:' if a.check else 'stored outputs:', f)
