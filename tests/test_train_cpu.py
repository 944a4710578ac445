"""The training script's checks that run in this process, or need a Python without torch-xla: the .venv's pytest runs them
(tests/test_train.py runs in the Trn1 stand-in, where torch-xla is installed and transformers is imported before a test could
set USE_TORCH_XLA; its XLA counterpart of the relaunch: tests/test_xla.py)."""
import errno, os, subprocess, sys

import pytest

import trn_tutorials.training.checkpoints as K
import trn_tutorials.training.train as T
from test_train import ENV, linked, neuron_stub, work  # noqa: F401  (neuron_stub, work: fixtures)
from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.training.train import ERROR_PREFIX


# ------------------------------------------------------------------------------ 2. no Neuron worker without torchrun
def test_python_m_relaunches_itself_under_torchrun(work, neuron_stub):
    """`python -m trn_tutorials.training.train --backend neuron` outside torchrun starts torchrun with one worker. Here (no torch-xla)
    that worker fails its runtime check: the failure is a torchrun worker's, and nothing trained in the first process."""
    out = work/'relaunched'
    env = ENV | {'PYTHONPATH': os.pathsep.join([str(neuron_stub), *filter(None, [os.environ.get('PYTHONPATH')])])}
    r = subprocess.run([sys.executable, '-m', 'trn_tutorials.training.train', '--backend', 'neuron', '--dataset_path', str(work/'data'),
                        '--output_dir', str(out), '--max_steps', '2', '--save_steps', '0'],
                       env=env, capture_output=True, text=True, timeout=300, cwd=work)
    said = r.stdout + r.stderr
    relaunch = [l for l in said.splitlines() if 'torchrun' in l and 'hangs' in l]
    assert len(relaunch) == 1 and 'transformers' in relaunch[0] and '--nproc_per_node 1' in relaunch[0], said[-3000:]
    assert r.returncode != 0
    # the worker's one line, then torchrun's report of its worker (rank 0, exit status 2)
    assert any(l.startswith(ERROR_PREFIX) for l in r.stderr.splitlines()), said[-3000:]
    assert 'local_rank: 0' in r.stderr and 'exitcode  : 2' in r.stderr, said[-3000:]
    assert said.index(relaunch[0]) < said.index(ERROR_PREFIX)
    assert not (out/'metrics.json').exists() and not list(out.glob('checkpoint-*'))



def test_a_full_disk_is_one_line(work, monkeypatch, capsys):
    "ENOSPC while writing: one line naming the disk, what was kept and the fix; status 2."
    tmp = work
    import trn_tutorials.training.train as T
    def full(*a, **kw): raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(T, 'save_plots', full)
    monkeypatch.delenv('RANK', raising=False); monkeypatch.delenv('WORLD_SIZE', raising=False)
    with pytest.raises(SystemExit) as e:
        T.main(['--dataset_path', str(tmp/'data'), '--output_dir', str(tmp/'full'), '--max_steps', '2', '--save_steps', '0', '--backend', 'cpu'])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith(ERROR_PREFIX + f"the disk holding {tmp/'full'} is full"), err
    assert 'no checkpoint' in err[0] and 'free space' in err[0]
