"""The careless-input harness reads suggestions as a user does: the command in backticks, else the first concrete option group."""
from pathlib import Path
from careless import apply_options, follow_argv, suggested_options

def test_suggested_options():
    assert suggested_options("holds checkpoints (newest: checkpoint-4): pass --resume true to continue from it, or another --output_dir") == ['--resume', 'true']
    assert suggested_options("makes batches of 400 rows: use --per_device_train_batch_size 360 or less") == ['--per_device_train_batch_size', '360']
    assert suggested_options("look suspect: pass --accept_labels Joy sadnes, or fix the rows") == ['--accept_labels', 'Joy', 'sadnes']
    assert suggested_options("collapsed: lower it (e.g. --learning_rate 5e-05)") == ['--learning_rate', '5e-05']
    assert suggested_options("retry with --bf16 false (or NEURON_RT_STOCHASTIC_ROUNDING_EN=1)") == ['--bf16', 'false']
    assert suggested_options("is not writable: pass a folder you can write to") is None

def test_follow_argv(tmp_path):
    assert follow_argv("was prepared from x: run `trn-tutorials prep --data '/a b/x.csv' --dataset_path /d` again", ['train'], tmp_path) == \
        ['prep', '--data', '/a b/x.csv', '--dataset_path', '/d']
    assert follow_argv("in use: stop it (`python -m trn_tutorials.training.train --output_dir o`)", [], tmp_path) == ['-m', 'trn_tutorials.training.train', '--output_dir', 'o']
    assert follow_argv("holds files trn-tutorials did not write (a): pass another --output_dir (a new or empty folder)",
                       ['train', '--output_dir', 'o', '--num_train_epochs', '1'], tmp_path) == ['train', '--output_dir', str(tmp_path/'another-output_dir'), '--num_train_epochs', '1']
    assert apply_options(['prep', '--accept_labels', 'a', '--data', 'x'], ['--accept_labels', 'b', 'c']) == ['prep', '--accept_labels', 'b', 'c', '--data', 'x']
