"""Issue 42, principle 2: secrets are nowhere on disk. A Hugging Face token reaches a run through the environment (`HF_TOKEN`, or
`hf auth login`'s file), never as an option: `--hub_token` would be pickled into training_args.bin (the model folder, every
checkpoint, the Hub with --push_to_hub). And what a run needs from outside (the Hub and a token for --push_to_hub, a tracker
for --report_to) is asked for before anything slow starts."""
import secrets, subprocess
from pathlib import Path

import pytest

from careless import ENV, FAST, TRN
from trn_tutorials.training.arguments import check_args
from trn_tutorials.core.options import UsageError, parse_args
from trn_tutorials.training.arguments import TrainArguments


def test_a_token_in_the_environment_is_in_no_file_the_run_makes(tmp_path, prepared):
    "A real run with HF_TOKEN set: the token is in no file of the run's folders, nor in what it prints; training_args.bin holds no token."
    token = 'hf_' + secrets.token_hex(16)
    data = tmp_path/'data'; data.symlink_to(prepared/'data')   # conftest's, read-only: the run's lock file goes beside the link
    r = subprocess.run([TRN, 'train', '--dataset_path', str(data), '--output_dir', 'model', *FAST, '--max_steps', '4'], cwd=tmp_path, capture_output=True,
                       text=True, env={**ENV, 'HF_TOKEN': token}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    files = [p for p in tmp_path.rglob('*') if p.is_file()]
    assert any(p.name == 'training_args.bin' for p in files) and any(p.parent.name.startswith('checkpoint-') for p in files)
    assert not [str(p) for p in files if token.encode() in p.read_bytes()]
    assert token not in r.stdout + r.stderr
    import torch
    saved = torch.load(tmp_path/'model'/'training_args.bin', weights_only=False)
    assert saved.hub_token is None


def test_a_token_as_an_option_is_refused_and_never_echoed(tmp_path, capsys):
    token = 'hf_' + secrets.token_hex(16)
    with pytest.raises(UsageError) as e: TrainArguments(output_dir=str(tmp_path), hub_token=token)
    assert '--hub_token' in str(e.value) and token not in str(e.value)
    with pytest.raises(SystemExit) as e: parse_args([TrainArguments], ['--hub_token', token], prog='trn-tutorials train')
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and token not in err
    late = TrainArguments(output_dir=str(tmp_path))
    late.hub_token = token   # set after the arguments were made: launch, precompile, the job and the worker check again
    with pytest.raises(UsageError, match='--hub_token would be saved') as e: check_args(late)
    assert token not in str(e.value)


def test_push_to_hub_asks_for_a_token_then_for_the_hub(monkeypatch, tmp_path):
    monkeypatch.delenv('HF_TOKEN', raising=False)
    monkeypatch.setenv('HF_HOME', str(tmp_path/'hf'))   # no token file from `hf auth login` either
    args = TrainArguments(output_dir=str(tmp_path/'out'), push_to_hub=True)
    with pytest.raises(UsageError, match=r'needs a Hugging Face token .*HF_TOKEN=hf_\.\.\. or run `hf auth login`'): check_args(args)
    monkeypatch.setenv('HF_TOKEN', 'hf_' + secrets.token_hex(16))
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    with pytest.raises(UsageError, match=r'cannot reach .*remove --push_to_hub.*`hf upload REPO_ID OUTPUT_DIR`'): check_args(args)
    assert check_args(args, here=False) is args   # a run elsewhere (a SageMaker job) is checked there


def test_a_sagemaker_job_with_push_to_hub_is_refused_before_anything_is_made(tmp_path, prepared):
    from trn_tutorials.sagemaker.training_job import JobArguments, check_submit
    args = TrainArguments(dataset_path=str(prepared/'data'), output_dir=str(tmp_path/'out'), push_to_hub=True)
    with pytest.raises(UsageError, match=r'no Hugging Face token from here.*remove --push_to_hub'):
        check_submit(args, JobArguments(role='arn:aws:iam::123456789012:role/SageMakerExecution', region='us-east-1'))
    assert not (tmp_path/'out').exists()


def test_report_to_an_installed_tracker_passes():
    from transformers.integrations import get_available_reporting_integrations
    have = get_available_reporting_integrations()
    if not have: pytest.skip('no tracker installed in this venv')
    args = TrainArguments(output_dir='out', report_to=have[0])
    assert check_args(args) is args
