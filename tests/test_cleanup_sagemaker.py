"""Cleanup on SageMaker and S3 (nbs/cleanup/06_cleanup.ipynb), against a real moto_server on 127.0.0.1.

The resources are made with boto3 as the training job and endpoint chapters make them (names `trn-tutorials-<run id>`,
tags `project` and `run-id`, files under `trn-tutorials/<run id>/` in SageMaker's default bucket). moto cannot be told
to refuse one call, so refusals (AccessDenied on the tagging API or ListTags, a failing DescribeTrainingJob) are a
botocore `before-call` hook on that one operation, registered on a fresh default boto3 session (the one
`boto3.client` uses): the hook answers with the error AWS sends and the client raises it as for a real answer.
"""
import json, re, warnings

import boto3, pytest
from botocore.awsrequest import AWSResponse

from trn_tutorials.cleanup import CleanupArguments, cleanup, leftovers
from trn_tutorials.sagemaker_aws import COMPILE_CACHE_PREFIX
from trn_tutorials.core import UsageError
from trn_tutorials.aws import run_tags
import trn_tutorials.endpoint   # registers the SageMaker cleaners (training jobs, S3, endpoints), as `trn-tutorials down` does
from local_services import sagemaker_role

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
    code = ("import sys; from trn_tutorials.cleanup import CLEANERS, declared_cleaners; before = [c.name for c in CLEANERS]; "
            "print(before, [c.name for c in declared_cleaners()])")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[] ['endpoints', 'training jobs']", out


# --- issue 41: the names SDK 3 gives training jobs -------------------------------------------------------------
@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
    from trn_tutorials.models import tiny_bert
    from trn_tutorials.data_files import EMOTION_LABELS, load_raw, sample_data
    from trn_tutorials.data import DataArguments, prepare
    tmp = tmp_path_factory.mktemp('names')
    raw = load_raw(sample_data())
    words = sorted({w for split in raw.values() for t in split['text'] for w in t.split()})
    prepare(DataArguments(data=sample_data(), model_id=tiny_bert(tmp/'tiny-bert', words, labels=EMOTION_LABELS), dataset_path=str(tmp/'data')))
    return tmp/'data'


@pytest.fixture
def sdk_name(moto_server, prepared):
    "run_id -> the name `ModelTrainer` gives that run's job, read from `submit`'s dry run (SDK 3: `<base>-%Y%m%d%H%M%S`)."
    from local_services import SageMakerStandIn
    from trn_tutorials.arguments import TrainArguments
    from trn_tutorials.training_job import JobArguments, submit
    stand_in = SageMakerStandIn()
    def name(run_id):
        plan = submit(TrainArguments(dataset_path=str(prepared)), JobArguments(role=stand_in.role(), bucket=BUCKET, run_id=run_id, dry_run=True))
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
