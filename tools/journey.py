"""Walk the book as a reader on a Trn1 does: the instance chapters in reading order, one kernel per chapter, all in one
reader's folder (`TRN_TUTORIALS_DIR`), so what a chapter leaves the next one uses; the `#| neuron` (and `#| xla`) cells
run too, on the Trn1 stand-in. Run it with the stand-in's Python (`.venv-trn1`, which `STAGES=trn1 bash tools/test.sh`
builds from the Neuron 2.31 DLAMI's versions); tools/test.sh runs it in the trn1 stage.

The stand-in for what a Trn1 has and a CPU machine lacks, made in a temporary folder and put first on PATH/PYTHONPATH:
- `neuron-ls`: as the 2.31 DLAMI's tool, it answers `--json-output`/`-j` only (2.34's `--output-format json` is a usage
  error), with the real tool's JSON for a trn1.2xlarge (tests/fixtures/neuron-ls/, its README says where it comes from),
  so `detect()` finds NeuronCores and the backend is `neuron`, as on the instance: nothing in the cells is edited.
- `torch_neuronx`: the package's metadata (the 2.31 DLAMI's torch-neuronx version), which is what `neuron_stack`
  reads; importing it sets nothing. PJRT_DEVICE=CPU puts torch-xla on the CPU, where torch-neuronx would choose the
  NeuronCores.
- NEURON_RT_VISIBLE_CORES=0: one worker (torch-xla has no collectives between CPU processes), as a reader who keeps
  one NeuronCore for something else would set it.
- `neuron_parallel_compile`: runs the trial command as given (on the CPU it executes instead of extracting graphs;
  nothing fills a Neuron compile cache, and the cache status says so).
What this cannot show: neuronx-cc, the device, collectives between NeuronCores, Trainium's speed.

The chapters and the flags run are the `notebooks` and `flags` of the trn1-dlami table in tools/environments.toml.
Usage: .venv-trn1/bin/python tools/journey.py [--store] [--chapters nbs/03_data.ipynb ...]
  --store   write the outputs of the flagged cells into the notebooks (the rest of each notebook is left as it is)
"""
import json, os, re, shutil, subprocess, sys, tempfile, time, tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT/'tools'))
import run_nb  # noqa: E402  (its reading of cell flags)

NEURON_LS = ROOT/'tests'/'fixtures'/'neuron-ls'/'trn1.2xlarge.json'   # the real tool's output on a trn1.2xlarge (fixtures README)
NEURONX_VERSION = '2.9.0.2.15.32035'   # torch-neuronx in the Neuron 2.31 DLAMI's PyTorch 2.9 venv (tools/environments.toml)
REHEARSED = ("> The output above comes from CI's rehearsal on the Trn1 stand-in (torch-xla on the CPU for the NeuronCores, "
             "one worker, the offline data and model), not from a Trn1.")

def table(name:str='trn1-dlami') -> dict:
    "The environment's table in tools/environments.toml: `notebooks` (the journey, in reading order) and `flags`."
    return tomllib.loads((ROOT/'tools'/'environments.toml').read_text())[name]

def stand_in(d:Path) -> dict:
    "Make the Trn1 stand-in's programs and package in `d`; return the environment variables that put them in place."
    (d/'bin').mkdir(parents=True); (d/'site'/'torch_neuronx').mkdir(parents=True)
    tools = {'neuron-ls': ("#!/bin/sh\n# the Neuron 2.31 tool: JSON with --json-output/-j only (2.34's --output-format json is new)\n"
                           f"case \"$*\" in\n  --json-output|-j) cat '{NEURON_LS}'; exit 0 ;;\nesac\n"
                           "echo \"neuron-ls: unrecognized arguments: $*\" >&2; exit 2\n"),
             'neuron_parallel_compile': '#!/bin/sh\n# stand-in: runs the trial as given (nothing is extracted or compiled)\nexec "$@"\n'}
    for name, text in tools.items():
        (d/'bin'/name).write_text(text); (d/'bin'/name).chmod(0o755)
    (d/'site'/'torch_neuronx'/'__init__.py').write_text(f'"The Trn1 stand-in\'s torch-neuronx: its metadata only."\n__version__ = {NEURONX_VERSION!r}\n')
    meta = d/'site'/f'torch_neuronx-{NEURONX_VERSION}.dist-info'; meta.mkdir()
    (meta/'METADATA').write_text(f"Metadata-Version: 2.1\nName: torch-neuronx\nVersion: {NEURONX_VERSION}\n")
    return {'PATH': f"{d/'bin'}{os.pathsep}{os.environ['PATH']}",
            'PYTHONPATH': os.pathsep.join(p for p in (str(d/'site'), os.environ.get('PYTHONPATH', '')) if p),
            'PJRT_DEVICE': 'CPU', 'NEURON_RT_VISIBLE_CORES': '0'}

def flagged(fn:Path, flags:set) -> list[str]:
    "Ids of the code cells of `fn` flagged with any of `flags`."
    nb = json.loads(fn.read_text())
    return [c['id'] for c in nb['cells'] if c['cell_type'] == 'code' and flags & run_nb._directives(''.join(c['source'])).keys()]

def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--store', action='store_true', help="store the flagged cells' outputs in the notebooks")
    p.add_argument('--chapters', nargs='*', help='these chapters instead of the journey (in the order given)')
    p.add_argument('--table', default='trn1-dlami', help='the environment (tools/environments.toml) whose notebooks and flags to run')
    a = p.parse_args(argv)
    t = table(a.table)
    walk, flags = a.chapters or t['notebooks'], set(t['flags'])
    work = Path(tempfile.mkdtemp(prefix='trn-tutorials-journey-'))
    os.environ.update(stand_in(work/'stand-in'), TRN_TUTORIALS_DIR=str(work/'reader'))
    print(f"journey: {' -> '.join(Path(c).stem for c in walk)}, in one reader's folder; "
          f"flagged cells run: {', '.join(sorted(flags))}")
    failed, t_all = 0, time.time()
    try:
        for c in walk:
            fn, t0 = (ROOT/c).resolve(), time.time()
            keep = flagged(fn, flags)
            how = ['--keep', *keep] if a.store else ['--check']   # one Python per chapter, as Jupyter gives each its own kernel
            r = subprocess.run([sys.executable, str(ROOT/'tools'/'run_nb.py'), '--flags', *sorted(flags), *how, '--', str(fn)])
            if r.returncode != 0:
                failed += 1
                print(f"FAILED {c} ({time.time() - t0:.0f} s): exit {r.returncode} (the cell's error is above)", flush=True)
                break   # a reader stops at the first chapter that fails: the next ones need what it leaves
            if a.store:
                cleared = unstore_paths(fn, keep)
                note_rehearsed(fn, [i for i in flagged(fn, {'neuron'}) if i not in cleared])
            print(f"ok {c}: {len(keep)} flagged cell(s) run, {time.time() - t0:.0f} s; the reader's folder holds "
                  f"{json.dumps(_contents(work/'reader'))}", flush=True)
    finally: shutil.rmtree(work, ignore_errors=True)
    print(f"journey: {time.time() - t_all:.0f} s")
    return failed

def unstore_paths(fn:Path, ids:list[str]) -> list[str]:
    "Clear the outputs of the cells `ids` of `fn` that hold a machine path (a stored output never does); return their ids."
    nb, cleared = json.loads(fn.read_text()), []
    marks = re.compile('|'.join(rf'(?<![\w/.-]){re.escape(m)}/' for m in (str(ROOT), tempfile.gettempdir(), str(Path.home()))))
    for c in nb['cells']:
        if c.get('id') in ids and marks.search(json.dumps(c.get('outputs', []))):
            c['outputs'], c['execution_count'] = [], None; cleared.append(c['id'])
            print(f"  {fn.name} cell {c['id']}: output not stored (it holds machine paths: the raw log of a run)")
    if cleared: fn.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
    return cleared

def note_rehearsed(fn:Path, ids:list[str]):
    "Put `REHEARSED` under each of the cells `ids` of `fn` (once): their stored outputs come from this rehearsal."
    nb = json.loads(fn.read_text()); cells = nb['cells']
    for i in reversed([k for k, c in enumerate(cells) if c.get('id') in ids]):
        nxt = cells[i + 1] if i + 1 < len(cells) else None
        if nxt and nxt['cell_type'] == 'markdown' and ''.join(nxt['source']).startswith("> The output above comes from CI's rehearsal"): continue
        cells.insert(i + 1, {'cell_type': 'markdown', 'id': f"{cells[i]['id'][:6]}r1", 'metadata': {}, 'source': [REHEARSED]})
    fn.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
    subprocess.run([str(Path(sys.executable).parent/'nbdev_clean'), '--fname', str(fn)], check=False)

def _contents(p:Path) -> dict:
    from trn_tutorials.core import reader_contents
    return reader_contents(p) if p.is_dir() else {}

if __name__ == '__main__': sys.exit(main())
