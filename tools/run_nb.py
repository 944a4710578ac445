"""Execute chapters and store their outputs, as the docs show them: the way `nbdev_test` runs them
(from `nbs/`, `IN_TEST=1`, so the local rehearsal stands in for AWS and the instance), skipping the cells
flagged with `tst_flags` (`#| aws`, `#| neuron`, `#| xla`, `#| slow`) and `#| eval: false`, whose
outputs are left as they are (empty, or from a real run). Then `nbdev_clean` the notebook.

Usage: .venv/bin/python tools/run_nb.py nbs/04_train.ipynb [more notebooks]
"""
import os, re, sys
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

def run(fn: Path):
    flags = set(get_config().tst_flags.split())
    nb = read_nb(fn)
    def skip(cell):
        if cell.cell_type != 'code': return True
        if 'nbdev_export' + '(' in cell.source: return True
        d = _directives(cell.source)
        if d.get('eval:', [''])[0].lower() == 'false': return True
        return bool(flags & d.keys())
    os.environ['IN_TEST'] = '1'
    k = CaptureShell(fn)
    with working_directory(fn.parent): k.run_all(nb, exc_stop=True, preproc=skip)
    write_nb(nb, fn)

if __name__ == '__main__':
    for f in sys.argv[1:]:
        run(Path(f).resolve()); print('stored outputs:', f)
