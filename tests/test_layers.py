"""The package's layers (the import-linter contract in .importlinter, explained on nbs/reference/architecture.ipynb) and
the one import line, `from trn_tutorials.all import *`.

`lint-imports` runs as a reader or CI runs it, from this venv; the contract must cover every module, and every name
`trn_tutorials.all` gathers must come from the module that defines it. The last test answers a question the import
raises: `TrainArguments` loads transformers, which reads USE_TORCH_XLA once; does importing `all` in a Jupyter kernel
before `launch` change the run? It launches a real torchrun run after the import and checks what the workers saw.
"""
import ast, configparser, json, os, re, subprocess, sys, textwrap, types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / 'trn_tutorials'
sys.path.insert(0, str(Path(__file__).parent))


def contract():
    ini = configparser.ConfigParser(); ini.read(ROOT / '.importlinter')
    return ini


def layer_rows(part:str='layers') -> list[list[str]]:
    "The rows of a layers contract, top first, each a list of names: the package's parts (`layers`), or a folder's modules (`data`, ...)."
    return [[m.strip() for m in r.split('|')] for r in contract()[f'importlinter:contract:{part}']['layers'].split('\n') if r.strip()]


def modules() -> list[str]:
    "The package's modules, dotted below it: `core`, `data.prepare`, ..."
    return sorted('.'.join(p.relative_to(PKG).with_suffix('').parts) for p in PKG.rglob('*.py') if not p.stem.startswith('_'))


def test_contract_covers_every_module():
    "The top contract places each module or folder once; each folder's own contract places each of its modules once."
    placed = [m for r in layer_rows() for m in r]
    assert len(placed) == len(set(placed)), f'a part is in two layers: {sorted(m for m in placed if placed.count(m) > 1)}'
    tops = sorted({m.split('.')[0] for m in modules()})
    assert sorted(placed) == tops, f'.importlinter\'s layers name {sorted(placed)}, the package has {tops}: one row entry for each (see nbs/reference/architecture.ipynb)'
    for folder in (t for t in tops if (PKG/t).is_dir()):
        inside = sorted(m.split('.', 1)[1] for m in modules() if m.startswith(folder + '.'))
        named = sorted(m for r in layer_rows(folder) for m in r)
        assert named == inside, f'.importlinter\'s contract {folder!r} names {named}, the folder holds {inside}'


def test_lint_imports():
    "Every contract kept, as `lint-imports` reports it; the count it prints is that of the contracts in .importlinter."
    exe = Path(sys.executable).with_name('lint-imports')
    if not exe.exists(): pytest.fail(f'lint-imports is not installed beside {Path(sys.executable).name}: pip install import-linter (settings.ini dev_requirements)')
    r = subprocess.run([str(exe), '--no-cache'], cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    m = re.search(r'Contracts: (\d+) kept, (\d+) broken\.', out)
    assert m, f'lint-imports printed no count (exit {r.returncode}):\n{out[-3000:]}'
    kept, broken = int(m[1]), int(m[2])
    n = sum(1 for s in contract().sections() if s.startswith('importlinter:contract:'))
    assert kept + broken == n, f'lint-imports checked {kept + broken} contracts, .importlinter has {n}'
    assert broken == 0 and r.returncode == 0, f'{broken} of {n} contracts broken:\n' + out[out.find('Broken contracts'):][-3000:]


def test_all_names_from_their_defining_module():
    "`trn_tutorials.all` gathers each name from the module that defines it, and exports exactly what it imports."
    import trn_tutorials.all as everything
    tree = ast.parse((PKG / 'all.py').read_text())
    imported = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert sorted(imported) == sorted(everything.__all__), 'all.py: __all__ and the imports differ'
    wrong = []
    for name, mod in imported.items():
        obj = getattr(everything, name)
        if isinstance(obj, (type, types.FunctionType)): home = obj.__module__
        else:   # a constant (EMOTION_LABELS): the module whose top level assigns it
            home = next(('trn_tutorials.' + '.'.join(p.relative_to(PKG).with_suffix('').parts) for p in sorted(PKG.rglob('*.py'))
                         if p.stem not in ('all', '_modidx', '__init__')
                         and name in {t.id for n in ast.parse(p.read_text()).body if isinstance(n, (ast.Assign, ast.AnnAssign))
                                      for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}), None)
        if home != f'trn_tutorials.{mod}': wrong.append(f'{name}: imported from {mod}, defined in {home}')
    assert not wrong, 'import each name from the module that defines it:\n' + '\n'.join(wrong)


RUN = textwrap.dedent('''
    import json, os, sys
    from trn_tutorials.all import *          # as a reader's first cell: loads transformers in this process
    from transformers.utils import is_torch_xla_available
    env_after_import = {k: os.environ.get(k) for k in ('USE_TORCH_XLA', 'PJRT_DEVICE')}
    res = launch(TrainArguments(dataset_path=sys.argv[1], output_dir=sys.argv[2], max_steps=4, per_device_train_batch_size=8,
                                per_device_eval_batch_size=16, logging_steps=2, save_steps=3, backend='cpu'), nproc_per_node=1, echo=False)
    from trn_tutorials.training.launch import launch_env
    print(json.dumps({'env': env_after_import, 'kernel_xla': is_torch_xla_available(), 'torch_xla_loaded': 'torch_xla' in sys.modules,
                      'f1': res.f1, 'workers_env': launch_env('cpu', 1)['USE_TORCH_XLA']}))
''')


def test_import_all_then_launch(tmp_path, prepared):
    """A process that ran `from trn_tutorials.all import *` (transformers imported, its XLA choice made) launches a real run:
    the import set no backend variable, and the workers, new processes with `launch_env`'s environment, trained."""
    data = tmp_path/'data'; data.symlink_to(prepared/'data')   # conftest's sample, read-only: the run's lock file goes beside the link
    env = {k: v for k, v in os.environ.items() if k not in ('USE_TORCH_XLA', 'PJRT_DEVICE')}
    r = subprocess.run([sys.executable, '-c', RUN, str(data), str(tmp_path / 'model')], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    # the import sets no USE_TORCH_XLA; where torch-xla is installed (the Trn1 venv) transformers has chosen XLA for this
    # process and imported torch_xla, which fills in PJRT_DEVICE (CPU on the stand-in) when nothing set it
    assert got['env']['USE_TORCH_XLA'] is None, f'importing trn_tutorials.all set USE_TORCH_XLA={got["env"]["USE_TORCH_XLA"]}'
    import importlib.util
    if importlib.util.find_spec('torch_xla'): assert got['kernel_xla'] is True and got['torch_xla_loaded'], got
    else: assert got['env']['PJRT_DEVICE'] is None and not got['torch_xla_loaded'], got
    # the workers are new processes: launch_env gives them the run's backend, whatever this process chose, and they trained
    assert got['workers_env'] == '0', got
    assert got['f1'] is not None and 0 <= got['f1'] <= 1, got
