"""Checks of `trn_tutorials.instance.cleanup` (nbs/instance/06_cleanup.ipynb) against a real moto_server and sshd.

The chapter removes one run, shows that a second run survives, removes it with `all_project=True` and ends on
`leftovers()`; the exact values it used to assert, the resources made by hand that must survive, and a Jupyter
session handed to `cleanup` (the chapter's reader has none open in that kernel) are checked here; then cleanup on
SageMaker and S3 (below).
"""
import inspect, re, warnings
from dataclasses import fields
from pathlib import Path

import boto3, pytest
from botocore.awsrequest import AWSResponse

from trn_tutorials.core.options import UsageError
from trn_tutorials.aws import run_tags
from trn_tutorials.instance.cleanup import CleanupArguments, cleanup, leftovers
from trn_tutorials.instance.ec2 import find_instances, launch_instance
from trn_tutorials.instance.jupyter import open_jupyter
from trn_tutorials.sagemaker.resources import COMPILE_CACHE_PREFIX
import trn_tutorials.sagemaker.endpoint   # registers the SageMaker cleaners (training jobs, S3, endpoints), as `trn-tutorials down` does
from local_services import MY_IP, free_port, jupyter_command, sagemaker_role

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
    from trn_tutorials.instance.cleanup import CLEANER_MODULES
    pkg = Path(trn_tutorials.__file__).parent
    calls = {'trn_tutorials.' + '.'.join(p.relative_to(pkg).with_suffix('').parts) for p in pkg.rglob('*.py') if re.search(r'^register\(', p.read_text(), re.M)}
    assert calls == set(CLEANER_MODULES), calls


def test_later_chapters_register_their_cleaners():
    "Chapter 06 names no later chapter: the SageMaker chapters register how to find and remove what they tag; endpoints first."
    from trn_tutorials.instance.cleanup import CLEANERS, Scope, register
    assert [c.name for c in CLEANERS] == ['endpoints', 'training jobs']
    register('a test', lambda scope: {'test_things': [scope.run_id]}, lambda scope: {'things removed': ['x']}, order=99)
    try:
        assert [c.name for c in CLEANERS][-1] == 'a test'
        register('a test', lambda scope: {}, lambda scope: {}, order=0)   # declared again: replaced, not added
        assert [c.name for c in CLEANERS].count('a test') == 1 and CLEANERS[0].name == 'a test'
    finally: CLEANERS[:] = [c for c in CLEANERS if c.name != 'a test']


def test_every_option_has_help():
    "Each option of the AWS commands is documented once, as an inline comment (docments), which --help and the docs read."
    from trn_tutorials.core.options import field_help
    from trn_tutorials.instance.ec2 import InstanceArguments, StatusArguments
    from trn_tutorials.instance.jupyter import TunnelArguments
    from trn_tutorials.sagemaker.training_job import JobArguments
    for cls in (CleanupArguments, InstanceArguments, StatusArguments, TunnelArguments, JobArguments):
        assert [k for k, v in field_help(cls).items() if not v] == [], cls


# ----------------------------------------------------------------------------------------------------
# Cleanup on SageMaker and S3 (nbs/instance/06_cleanup.ipynb), against a real moto_server on 127.0.0.1.
#
# The resources are made with boto3 as the training job and endpoint chapters make them (names `trn-tutorials-<run id>`,
# tags `project` and `run-id`, files under `trn-tutorials/<run id>/` in SageMaker's default bucket). moto cannot be told
# to refuse one call, so refusals (AccessDenied on the tagging API or ListTags, a failing DescribeTrainingJob) are a
# botocore `before-call` hook on that one operation, registered on a fresh default boto3 session (the one
# `boto3.client` uses): the hook answers with the error AWS sends and the client raises it as for a real answer.
# (was test_cleanup_sagemaker.py)

REGION, ACCOUNT = 'us-east-1', '123456789012'   # moto's default account
BUCKET = f'sagemaker-{REGION}-{ACCOUNT}'       # SageMaker's default bucket, where the chapters put a run's files
RUN_FILES = ['endpoint/model.tar.gz', 'data/train/data-00000-of-00001.arrow', 'code/sm_train.py',
             'output/trn-tutorials-r1-2026-11-24-16-23-00-123/output/model.tar.gz', 'checkpoints/checkpoint-10/model.safetensors']


def put(key, bucket=BUCKET, body=b'x'):
    s3 = boto3.client('s3', region_name=REGION)
    try: s3.head_bucket(Bucket=bucket)
    except s3.exceptions.ClientError: s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key=key, Body=body)


def keys(bucket=BUCKET) -> list[str]:
    s3 = boto3.client('s3', region_name=REGION)
    return sorted(o['Key'] for p in s3.get_paginator('list_objects_v2').paginate(Bucket=bucket) for o in p.get('Contents', []))


def endpoint(run_id: str, name: str | None = None) -> str:
    "An endpoint as `endpoint.deploy` makes it: model, configuration and endpoint named `trn-tutorials-<run id>`, tagged."
    sm, name = boto3.client('sagemaker', region_name=REGION), name or f'trn-tutorials-{run_id}'
    tags = [{'Key': k, 'Value': v} for k, v in run_tags(run_id).items()]
    sm.create_model(ModelName=name, ExecutionRoleArn=sagemaker_role(), Tags=tags, PrimaryContainer={
        'Image': 'img', 'ModelDataUrl': f's3://{BUCKET}/trn-tutorials/{run_id}/endpoint/model.tar.gz'})
    sm.create_endpoint_config(EndpointConfigName=name, Tags=tags, ProductionVariants=[
        {'VariantName': 'AllTraffic', 'ModelName': name, 'InitialInstanceCount': 1, 'InstanceType': 'ml.m5.large'}])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name, Tags=tags)
    return name


def training_job(run_id: str, name: str | None = None) -> str:
    "A training job tagged as `training_job.submit` tags it, named `name` (default: as SDK 2 named jobs); moto marks it Completed at once."
    name = name or f'trn-tutorials-{run_id}-2026-11-24-16-23-00-123'
    boto3.client('sagemaker', region_name=REGION).create_training_job(
        TrainingJobName=name, RoleArn=sagemaker_role(), Tags=[{'Key': k, 'Value': v} for k, v in run_tags(run_id).items()],
        AlgorithmSpecification={'TrainingImage': 'img', 'TrainingInputMode': 'File'},
        OutputDataConfig={'S3OutputPath': f's3://{BUCKET}/trn-tutorials/{run_id}/output'},
        ResourceConfig={'InstanceType': 'ml.trn1.2xlarge', 'InstanceCount': 1, 'VolumeSizeInGB': 100},
        StoppingCondition={'MaxRuntimeInSeconds': 3600})
    return name


def endpoints() -> list[str]: return [e['EndpointName'] for e in boto3.client('sagemaker', region_name=REGION).list_endpoints()['Endpoints']]


@pytest.fixture
def refuse(moto_server):
    "refuse('sagemaker.ListTags', 'AccessDeniedException'): that one operation answers with that error from now on."
    boto3.setup_default_session()   # a fresh default session: the clients cleanup makes carry the hooks
    def register(operation, code='AccessDeniedException', status=400):
        def answer(**kw):
            return AWSResponse('https://refused.invalid', status, {}, None), {
                'Error': {'Code': code, 'Message': f'User: arn:aws:iam::{ACCOUNT}:user/reader is not authorized to perform: {operation}'},
                'ResponseMetadata': {'HTTPStatusCode': status}}
        boto3.DEFAULT_SESSION.events.register(f'before-call.{operation}', answer)
    yield register
    boto3.DEFAULT_SESSION = None


# --- every object under the run's S3 prefix ---------------------------------------------------------------------
def test_the_runs_s3_prefix_is_listed_and_emptied(moto_server):
    "The endpoint's archive (and data, code, output, checkpoints) is found with nothing in SageMaker pointing at it."
    for f in RUN_FILES: put(f'trn-tutorials/r1/{f}')
    for k in ('trn-tutorials/r10/endpoint/model.tar.gz', 'trn-tutorials/r1.txt', 'mine/trn-tutorials/r1/x', f'{COMPILE_CACHE_PREFIX}/neff/a.neff'):
        put(k)   # another run, files that only look alike, the project's compile cache: not this run's
    left = leftovers('r1', ec2=False)
    assert left['s3_objects'] == sorted(f's3://{BUCKET}/trn-tutorials/r1/{f}' for f in RUN_FILES)
    rep = cleanup('r1', ec2=False)
    assert rep.s3_objects == len(RUN_FILES) and rep.clean and not any(leftovers('r1', ec2=False).values())
    assert keys() == sorted(['trn-tutorials/r10/endpoint/model.tar.gz', 'trn-tutorials/r1.txt', 'mine/trn-tutorials/r1/x',
                             f'{COMPILE_CACHE_PREFIX}/neff/a.neff'])
    assert cleanup('r1', ec2=False).s3_objects == 0   # again: nothing to do


def test_more_than_one_page_and_batch(moto_server):
    "1001 objects: two pages of list_objects_v2 and two delete_objects batches (at most 1000 keys each)."
    s3 = boto3.client('s3', region_name=REGION)
    put('trn-tutorials/r1/checkpoints/0')
    for i in range(1, 1001): s3.put_object(Bucket=BUCKET, Key=f'trn-tutorials/r1/checkpoints/{i}', Body=b'')
    assert len(leftovers('r1', ec2=False)['s3_objects']) == 1001
    assert cleanup('r1', ec2=False).s3_objects == 1001 and keys() == []


def test_a_bucket_passed_and_a_versioned_bucket(moto_server):
    "A bucket named with `bucket` is looked at too; in a versioned bucket every version and delete marker goes."
    s3 = boto3.client('s3', region_name=REGION)
    s3.create_bucket(Bucket='my-bucket')
    s3.put_bucket_versioning(Bucket='my-bucket', VersioningConfiguration={'Status': 'Enabled'})
    put('trn-tutorials/r1/endpoint/model.tar.gz', 'my-bucket', b'one')
    put('trn-tutorials/r1/endpoint/model.tar.gz', 'my-bucket', b'two')
    put('trn-tutorials/r1/data/gone.arrow', 'my-bucket')
    s3.delete_object(Bucket='my-bucket', Key='trn-tutorials/r1/data/gone.arrow')   # a delete marker over a version
    put('other/keep.txt', 'my-bucket')
    assert leftovers('r1', ec2=False)['s3_objects'] == []   # not SageMaker's default bucket, and nothing names it
    left = leftovers('r1', ec2=False, bucket='my-bucket')['s3_objects']
    assert left == ['s3://my-bucket/trn-tutorials/r1/data/gone.arrow', 's3://my-bucket/trn-tutorials/r1/endpoint/model.tar.gz']
    rep = cleanup('r1', ec2=False, bucket='my-bucket')
    assert rep.clean and rep.s3_objects == 4   # two versions of the archive, the arrow file's version and its delete marker
    v = s3.list_object_versions(Bucket='my-bucket')
    assert [x['Key'] for x in v.get('Versions', []) + v.get('DeleteMarkers', [])] == ['other/keep.txt']


def test_every_run_prefix_of_the_project(moto_server):
    "run_id=None (all_project): every run's prefix goes; the compile cache stays; files outside trn-tutorials/ stay."
    for r in ('r1', '20261124-162300-88d8'): put(f'trn-tutorials/{r}/endpoint/model.tar.gz')
    put(f'{COMPILE_CACHE_PREFIX}/neff/a.neff'); put('mine/keep.txt')
    assert leftovers(ec2=False)['s3_objects'] == [f's3://{BUCKET}/trn-tutorials/20261124-162300-88d8/endpoint/model.tar.gz',
                                                  f's3://{BUCKET}/trn-tutorials/r1/endpoint/model.tar.gz']
    rep = cleanup(all_project=True, ec2=False)
    assert rep.clean and rep.s3_objects == 2 and keys() == sorted([f'{COMPILE_CACHE_PREFIX}/neff/a.neff', 'mine/keep.txt'])


# --- billed endpoints first ------------------------------------------------------------------------------------
def test_endpoints_go_before_anything_else_fails(refuse):
    "A failure after the endpoints (here StopTrainingJob refused for a running job) cannot leave an endpoint billing."
    training_job('r1'); endpoint('r1')
    def running(parsed, **kw): parsed['TrainingJobStatus'] = 'InProgress'   # moto marks every job Completed at once
    boto3.DEFAULT_SESSION.events.register('after-call.sagemaker.DescribeTrainingJob', running)
    refuse('sagemaker.StopTrainingJob', 'ThrottlingException')
    with pytest.raises(UsageError, match=r'StopTrainingJob \(ThrottlingException\)'): cleanup('r1', ec2=False)
    assert endpoints() == []


# --- the tagging API denied --------------------------------------------------------------------------------------
@pytest.mark.parametrize('operation', ['resource-groups-tagging-api.GetResources', 'sagemaker.ListTags'])
def test_tagging_denied_falls_back_to_names(refuse, operation):
    "AccessDenied on the tagging API or ListTags: one warning, resources found by name, the billed endpoint deleted."
    job = training_job('r1'); endpoint('r1'); endpoint('r2'); endpoint('other', name='my-own-endpoint')
    put('trn-tutorials/r1/endpoint/model.tar.gz')
    refuse(operation)
    with pytest.warns(UserWarning) as w: left = leftovers('r1', ec2=False)
    assert len(w) == 1 and 'by name' in str(w[0].message) and 'trn-tutorials-r1' in str(w[0].message)
    assert (left['endpoints'], left['endpoint_configs'], left['models']) == (['trn-tutorials-r1'],) * 3
    assert left['s3_objects'] == [f's3://{BUCKET}/trn-tutorials/r1/endpoint/model.tar.gz']
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        rep = cleanup('r1', ec2=False)
    assert len([x for x in w if 'by name' in str(x.message)]) == 1   # once per cleanup
    assert rep.clean and rep.sagemaker['endpoints'] == ['trn-tutorials-r1'] and rep.s3_objects == 1
    assert sorted(endpoints()) == ['my-own-endpoint', 'trn-tutorials-r2']   # another run, and an endpoint of yours
    assert boto3.client('sagemaker', region_name=REGION).describe_training_job(TrainingJobName=job)   # history stays


# --- one compile cache for the project, kept unless asked ------------------------------------------------------
def test_compile_cache_is_kept_unless_asked(moto_server):
    for f in ('neff/a.neff', 'neff/b.neff'): put(f'{COMPILE_CACHE_PREFIX}/{f}', body=b'x' * 1500)
    put('trn-tutorials/r1/endpoint/model.tar.gz')
    rep = cleanup(all_project=True, ec2=False)
    assert rep.clean and rep.kept == [f's3://{BUCKET}/{COMPILE_CACHE_PREFIX}/ (2 objects, 3.0 kB)']
    assert f'kept:             s3://{BUCKET}/{COMPILE_CACHE_PREFIX}/ (2 objects, 3.0 kB): the Neuron compile cache' in str(rep)
    assert 'compile_cache=True' in str(rep)
    assert keys() == [f'{COMPILE_CACHE_PREFIX}/neff/a.neff', f'{COMPILE_CACHE_PREFIX}/neff/b.neff']
    assert cleanup('r1', ec2=False).kept == rep.kept   # one run's cleanup keeps it too
    assert leftovers(ec2=False, compile_cache=True)['s3_objects'] == [f's3://{BUCKET}/{COMPILE_CACHE_PREFIX}/neff/a.neff',
                                                                     f's3://{BUCKET}/{COMPILE_CACHE_PREFIX}/neff/b.neff']
    dropped = cleanup('r1', ec2=False, compile_cache=True)
    assert dropped.clean and dropped.s3_objects == 2 and dropped.kept == [] and keys() == []


def test_the_cli_option():
    assert {f.name: f.default for f in CleanupArguments.__dataclass_fields__.values()}['compile_cache'] is False
    assert CleanupArguments(run_id='r1', compile_cache=True).compile_cache is True


def test_a_fresh_kernel_cleans_what_every_chapter_declared():
    "cleanup() in a new Python, before any SageMaker chapter is imported, still runs the endpoints' and jobs' cleaners."
    import subprocess, sys
    code = ("import sys; from trn_tutorials.instance.cleanup import CLEANERS, declared_cleaners; before = [c.name for c in CLEANERS]; "
            "print(before, [c.name for c in declared_cleaners()])")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[] ['endpoints', 'training jobs']", out


# --- issue 41: the names SDK 3 gives training jobs -------------------------------------------------------------
@pytest.fixture
def sdk_name(moto_server, prepared):
    "run_id -> the name `ModelTrainer` gives that run's job, read from `submit`'s dry run (SDK 3: `<base>-%Y%m%d%H%M%S`)."
    from local_services import SageMakerStandIn
    from trn_tutorials.training.arguments import TrainArguments
    from trn_tutorials.sagemaker.training_job import JobArguments, submit
    stand_in = SageMakerStandIn()
    def name(run_id):
        plan = submit(TrainArguments(dataset_path=str(prepared/'data')), JobArguments(role=stand_in.role(), bucket=BUCKET, run_id=run_id, dry_run=True))
        return plan['request']['TrainingJobName']
    yield name
    stand_in.stop()


@pytest.mark.parametrize('operation', ['resource-groups-tagging-api.GetResources', 'sagemaker.ListTags'])
def test_tagging_denied_finds_the_jobs_sdk_3_names(sdk_name, refuse, operation):
    "AccessDenied on the tagging API or ListTags: the run's running jobs are found by name, as SDK 3 names them and as SDK 2 did."
    sdk3 = sdk_name('r1')
    assert re.fullmatch(r'trn-tutorials-r1-\d{14}', sdk3), sdk3
    ours = sorted([training_job('r1', sdk3), training_job('r1')])   # SDK 3's name, and SDK 2's
    others = [training_job('r10', sdk_name('r10')), training_job('r1', 'trn-tutorials-r1-mine')]   # another run; a name that only looks alike
    endpoint('r1')   # ListTags is asked about endpoints: its refusal turns the whole cleanup to names
    def running(parsed, **kw): parsed['TrainingJobStatus'] = 'InProgress'   # moto marks every job Completed at once
    boto3.DEFAULT_SESSION.events.register('after-call.sagemaker.DescribeTrainingJob', running)
    refuse(operation)
    with pytest.warns(UserWarning, match='by name'): left = leftovers('r1', ec2=False)
    assert sorted(left['training_jobs']) == ours, (left['training_jobs'], others)
    assert left['endpoints'] == ['trn-tutorials-r1']
