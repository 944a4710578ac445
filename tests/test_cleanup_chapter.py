"""The checks that used to sit in the cleanup chapter (nbs/cleanup/06_cleanup.ipynb), against a real moto_server and sshd.

The chapter removes one run, shows that a second run survives, removes it with `all_project=True` and ends on
`leftovers()`; the exact values it used to assert, the resources made by hand that must survive, and a Jupyter
session handed to `cleanup` (the chapter's reader has none open in that kernel) are checked here.
"""
import inspect
from dataclasses import fields
from pathlib import Path

import boto3, pytest

from trn_tutorials.core import UsageError
from trn_tutorials.cleanup import CleanupArguments, cleanup, leftovers
from trn_tutorials.instance import find_instances, launch_instance
from trn_tutorials.remote_jupyter import open_jupyter
import trn_tutorials.endpoint   # registers the SageMaker cleaners (training jobs, S3, endpoints), as `trn-tutorials down` does
from local_services import MY_IP, free_port, jupyter_command

NOTHING = {'instances': [], 'volumes': [], 'security_groups': [], 'key_pairs': [],
           'training_jobs': [], 'endpoints': [], 'endpoint_configs': [], 'models': [], 's3_objects': []}


def test_the_chapters_cleanup(moto_server, sshd, tmp_path, monkeypatch):
    monkeypatch.setenv('HOME', str(tmp_path))        # as in the rehearsal: ~/.ssh in a temporary folder
    a = launch_instance(my_ip=MY_IP, wait_ssh=False)
    b = launch_instance(my_ip=MY_IP, wait_ssh=False)
    ec2 = boto3.client('ec2')
    # made by hand, without tags: not ours to delete
    vpc = ec2.describe_vpcs(Filters=[{'Name': 'is-default', 'Values': ['true']}])['Vpcs'][0]['VpcId']
    mine_sg = ec2.create_security_group(GroupName='my-own-group', Description='not made by trn-tutorials', VpcId=vpc)['GroupId']
    ec2.create_key_pair(KeyName='my-own-key')

    assert [i.run_id for i in find_instances()] == [a.run_id, b.run_id]            # oldest first
    assert {k: len(v) for k, v in leftovers(a.run_id).items()} == {'instances': 1, 'volumes': 1, 'security_groups': 1, 'key_pairs': 1,
        'training_jobs': 0, 'endpoints': 0, 'endpoint_configs': 0, 'models': 0, 's3_objects': 0}
    assert len(leftovers()['instances']) == 2

    # a Jupyter session to another host (the test sshd) is handed over and stopped first
    work = tmp_path/'work'; work.mkdir()
    s = open_jupyter('127.0.0.1', sshd.key, free_port(), free_port(), sshd.user, sshd.port, str(tmp_path/'known_hosts'),
                     jupyter=jupyter_command(), venv=None, workdir=str(work))
    assert s.tunnel.alive
    rep = cleanup(a.run_id, sessions=[s])
    assert rep.terminated == [a.instance_id]
    assert rep.key_pairs == [f'trn-tutorials-{a.run_id}']
    assert rep.key_files == [a.key_path] == [f'~/.ssh/trn-tutorials-{a.run_id}.pem']    # as the user names the folder
    assert not Path(a.key_path).expanduser().exists()
    assert rep.clean and not s.tunnel.alive and len(rep.stopped) == 1
    assert round(rep.cost_usd, 4) == round(1.34 / 60, 4)
    assert 'key files:        ~/.ssh/trn-tutorials-' in str(rep)

    # the other run and the resources made by hand are untouched
    assert [i.instance_id for i in find_instances(b.run_id)] == [b.instance_id]
    assert Path(b.key_path).expanduser().exists()
    assert [g['GroupId'] for g in ec2.describe_security_groups(GroupIds=[mine_sg])['SecurityGroups']] == [mine_sg]
    assert [k['KeyName'] for k in ec2.describe_key_pairs(KeyNames=['my-own-key'])['KeyPairs']] == ['my-own-key']

    again = cleanup(a.run_id)
    assert (again.terminated, again.security_groups, again.key_pairs, again.key_files, again.clean, again.cost_usd) == \
           ([], [], [], [], True, 0.0)

    rep_all = cleanup(all_project=True)
    assert (rep_all.terminated, rep_all.clean) == ([b.instance_id], True)
    assert leftovers() == NOTHING
    assert ec2.describe_security_groups(GroupIds=[mine_sg])['SecurityGroups']
    assert ec2.describe_key_pairs(KeyNames=['my-own-key'])['KeyPairs']
    with pytest.raises(UsageError, match="pass --run_id RUN"): cleanup()
    with pytest.raises(UsageError, match="is not valid"): cleanup('a b')


def test_cleanup_arguments_match_cleanup():
    params = [(k, p) for k, p in inspect.signature(cleanup).parameters.items() if k != 'sessions']   # all but `sessions`
    assert [f.name for f in fields(CleanupArguments)] == [k for k, _ in params]
    assert {f.name: f.default for f in fields(CleanupArguments)} == {k: p.default for k, p in params}


def test_every_module_that_registers_a_cleaner_is_listed():
    "`declared_cleaners` imports the modules of `CLEANER_MODULES`, no search of the source: each module that calls `register` is listed."
    import re, trn_tutorials
    from trn_tutorials.cleanup import CLEANER_MODULES
    pkg = Path(trn_tutorials.__file__).parent
    calls = {f'trn_tutorials.{p.stem}' for p in pkg.glob('*.py') if re.search(r'^register\(', p.read_text(), re.M)}
    assert calls == set(CLEANER_MODULES), calls


def test_later_chapters_register_their_cleaners():
    "Chapter 06 names no later chapter: the SageMaker chapters register how to find and remove what they tag; endpoints first."
    from trn_tutorials.cleanup import CLEANERS, Scope, register
    assert [c.name for c in CLEANERS] == ['endpoints', 'training jobs']
    register('a test', lambda scope: {'test_things': [scope.run_id]}, lambda scope: {'things removed': ['x']}, order=99)
    try:
        assert [c.name for c in CLEANERS][-1] == 'a test'
        register('a test', lambda scope: {}, lambda scope: {}, order=0)   # declared again: replaced, not added
        assert [c.name for c in CLEANERS].count('a test') == 1 and CLEANERS[0].name == 'a test'
    finally: CLEANERS[:] = [c for c in CLEANERS if c.name != 'a test']


def test_every_option_has_help():
    "Each option of the AWS commands is documented once, as an inline comment (docments), which --help and the docs read."
    from trn_tutorials.core import field_help
    from trn_tutorials.instance import InstanceArguments, StatusArguments
    from trn_tutorials.remote_jupyter import TunnelArguments
    from trn_tutorials.training_job import JobArguments
    for cls in (CleanupArguments, InstanceArguments, StatusArguments, TunnelArguments, JobArguments):
        assert [k for k, v in field_help(cls).items() if not v] == [], cls
