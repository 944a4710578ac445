"""The SageMaker training job (nbs/sagemaker/09_training_job.ipynb) against a real moto_server.

`ModelTrainer` creates the job in moto; the test reads the request back from moto (instance type and count, spot
and max wait, checkpoints, image, tags, torchrun's processes per node from the driver config the SDK uploaded) and
parses the hyperparameters the way the container does (SageMaker's own `hyperparameters_to_cli_args`, then the
script's `HfArgumentParser`). moto runs no job: `SageMakerStandIn` (tests/local_services.py) runs its container side
here, SageMaker's torchrun driver included, so `wait_job` and `job_results` read a real run's log and model.

Boundaries of moto bypassed, and only these: IAM `SimulatePrincipalPolicy` (SAGEMAKER_VALIDATE_ROLE=false, set by
`SageMakerStandIn`) and the SDK's default-bucket STS call (the bucket is passed).
"""
import hashlib, json, re
from dataclasses import replace
from pathlib import Path

import boto3, pytest

from trn_tutorials.core.options import UsageError, parse_args
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.training.launch import Results, train_argv
from trn_tutorials.training.arguments import TrainArguments
import trn_tutorials.sagemaker.endpoint   # registers the SageMaker cleaners (training jobs, S3, endpoints), as `trn-tutorials down` does
from trn_tutorials.sagemaker.resources import run_prefix
from trn_tutorials.sagemaker.training_job import CONTAINER, JobArguments, JobError, job_results, stop_job, submit, wait_job
from trn_tutorials.sagemaker.job_image import export_model, sm_cost, stage_source
from local_services import SageMakerStandIn, queue_answer

try: import sagemaker.train as _sdk
except ImportError as e: _sdk, _why = None, f"{type(e).__name__}: {e}"


@pytest.fixture(autouse=True)
def sdk():
    "These tests need the SageMaker SDK 3: without it each fails with this line (a skip would count as nothing)."
    if _sdk is None: pytest.fail(f"the SageMaker SDK 3 is not importable ({_why}): pip install -e '.[sagemaker]'", pytrace=False)


@pytest.fixture
def aws(moto_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = SageMakerStandIn()
    yield s
    s.stop()


def objects(bucket='trn-tutorials-rehearsal') -> list[str]:
    s3 = boto3.client('s3')
    try: return [o['Key'] for o in s3.list_objects_v2(Bucket=bucket).get('Contents', [])]
    except s3.exceptions.NoSuchBucket: return []


def digests(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob('*')) if p.is_file()}


def test_the_request_read_back(aws, prepared):
    role, bucket = aws.role(), aws.bucket()
    args = TrainArguments(dataset_path=str(prepared/'data'), learning_rate=3e-5, num_train_epochs=2.5, bf16=True, save_steps=0,
                          resume=False, per_device_train_batch_size=8)
    job = JobArguments(role=role, bucket=bucket, instance_type='ml.trn1.32xlarge', instance_count=2, spot=True,
                       max_run_hours=3, max_wait_hours=6, run_id='r1')
    name = submit(args, job)
    sm = boto3.client('sagemaker')
    d = sm.describe_training_job(TrainingJobName=name)
    assert d['ResourceConfig'] == {'InstanceType': 'ml.trn1.32xlarge', 'InstanceCount': 2, 'VolumeSizeInGB': 100}
    assert d['EnableManagedSpotTraining'] is True
    assert d['StoppingCondition'] == {'MaxRuntimeInSeconds': 3 * 3600, 'MaxWaitTimeInSeconds': 6 * 3600}
    assert d['CheckpointConfig'] == {'S3Uri': f's3://{bucket}/trn-tutorials/r1/checkpoints', 'LocalPath': '/opt/ml/checkpoints'}
    assert d['AlgorithmSpecification']['TrainingImage'] == \
        '763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.30.0-ubuntu24.04'
    assert d['RoleArn'] == role and name.startswith('trn-tutorials-r1-')
    tags = {t['Key']: t['Value'] for t in sm.list_tags(ResourceArn=d['TrainingJobArn'])['Tags']}
    assert tags == {'project': 'trn-tutorials', 'run-id': 'r1', 'Name': 'trn-tutorials-r1'}

    # torchrun's processes per node: the NeuronCores of ml.trn1.32xlarge, in the driver config the SDK uploaded
    ch = {c['ChannelName']: c['DataSource']['S3DataSource']['S3Uri'] for c in d['InputDataConfig']}
    assert set(ch) == {'train', 'model', 'code', 'sm_drivers'}
    key = ch['sm_drivers'].split('/', 3)[3] + '/distributed.json'
    assert json.loads(boto3.client('s3').get_object(Bucket=bucket, Key=key)['Body'].read())['process_count_per_node'] == 32

    # the hyperparameters, read as the container reads them, are the local CLI's arguments
    from sagemaker.train.container_drivers.common.utils import hyperparameters_to_cli_args
    theirs, = parse_args([TrainArguments], hyperparameters_to_cli_args(d['HyperParameters']))
    local, = parse_args([TrainArguments], train_argv(args))
    moved = dict(dataset_path=CONTAINER['data'], output_dir=CONTAINER['checkpoints'], model_id=CONTAINER['model'])
    if getattr(theirs, 'logging_dir', None):   # transformers 4.57 derives an unset one from output_dir, dated: under the checkpoints
        assert theirs.logging_dir.startswith(CONTAINER['checkpoints'] + '/runs/'); moved['logging_dir'] = theirs.logging_dir
    assert theirs == replace(local, **moved)

    # the data channel holds exactly the files prepare saved; the model channel the local model
    got = Path('got'); aws._download(boto3.client('s3'), ch['train'], got/'data'); aws._download(boto3.client('s3'), ch['model'], got/'model')
    assert digests(got/'data') == digests(prepared/'data')
    assert digests(got/'model') == digests(prepared/'tiny-bert')
    # the code channel: this package and the entry script that runs trn_tutorials.training.train
    code = [k for k in objects() if '/input/code/' in k]
    assert any(k.endswith('/code/sm_train.py') for k in code) and any(k.endswith('/code/trn_tutorials/training/train.py') for k in code)
    assert all(k.startswith(run_prefix('r1') + '/') for k in objects())


def test_a_job_end_to_end(aws, prepared):
    """Submit, the container side run by SageMaker's torchrun driver here, logs streamed, model.tar.gz read back. On the driver's
    two workers (ml.trn1.2xlarge's NeuronCores), 8 rows each a step: enough steps to beat the baseline on half the rows of
    16 a step; no evaluation between epochs: the final scores are what it reads."""
    args = TrainArguments(dataset_path=str(prepared/'data'), num_train_epochs=4, per_device_train_batch_size=8, learning_rate=3e-3,
                          logging_steps=20, save_steps=40, eval_strategy='no')
    name = submit(args, JobArguments(role=aws.role(), bucket=aws.bucket(), run_id='e2e'))
    assert aws.run(name) == 0, '\n'.join(aws.output[-30:])
    assert any('torchrun --nnodes=1 --nproc_per_node=2' in l for l in aws.output)   # the SDK's driver, 2 NeuronCores
    d = wait_job(name, log='train.log', poll_s=0.1, echo=False)
    assert any(l.startswith('trn_tutorials.training.train: progress: ') for l in Path('train.log').read_text().splitlines())
    r = job_results(name, 'dl', description=d)
    assert isinstance(r, Results) and r.workers == 2 and r.split == 'test'
    m = r.metrics
    assert r.f1 > m['baseline']['f1'] and m['args']['output_dir'].endswith('/opt/ml/checkpoints')
    assert r.output_dir == f'dl/{name}' and (Path(r.output_dir)/'model.safetensors').exists()
    assert not any(p.name.startswith('checkpoint-') for p in Path(r.output_dir).iterdir())
    assert r.cost_usd == sm_cost('ml.trn1.2xlarge', m['train']['runtime_s'])
    # the model that came back loads and predicts
    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained(r.output_dir)
    assert model.config.id2label[0] == EMOTION_LABELS[0]
    # the checkpoints went to the run's checkpoint prefix in S3 (SageMaker syncs /opt/ml/checkpoints there) ...
    ck = [k for k in objects() if k.startswith('trn-tutorials/e2e/checkpoints/checkpoint-')]
    newest = max({k.split('/')[3] for k in ck}, key=lambda c: int(c.split('-')[1]))
    assert newest == f"checkpoint-{m['train']['steps']}"   # the Trainer saves the last step too
    # ... so a job started again for the same run (a reclaimed spot job, a relaunch) resumes from them
    again = submit(args, JobArguments(role=aws.role(), bucket=aws.bucket(), run_id='e2e'))
    assert aws.run(again) == 0, '\n'.join(aws.output[-30:])
    assert any(f"resuming from {newest}" in l for l in aws.output), aws.output[-30:]


def test_a_failed_job_names_the_reason(aws, prepared):
    "A model the container cannot load: the driver exits non-zero and the log names the worker's exception."
    args = TrainArguments(dataset_path=str(prepared/'data'), model_id='no-such-org/no-such-model', max_steps=1)
    name = submit(args, JobArguments(role=aws.role(), bucket=aws.bucket()))
    assert aws.run(name) != 0
    assert any('no-such-org/no-such-model' in l and 'Error' in l for l in aws.output), aws.output[-20:]


def test_dry_run_creates_nothing(aws, prepared, capsys, monkeypatch):
    "A dry run creates and uploads nothing, and reads the prepared folder once (its preflight's `Prepared` is passed down)."
    import trn_tutorials.data.prepared as P
    reads, real = [], P.load_from_disk
    monkeypatch.setattr(P, 'load_from_disk', lambda path: reads.append(path) or real(path))
    bucket = aws.bucket()
    args = TrainArguments(dataset_path=str(prepared/'data'), num_train_epochs=1)
    plan = submit(args, JobArguments(role=aws.role(), bucket=bucket, spot=True, max_wait_hours=4, dry_run=True))
    assert reads == [str(prepared/'data')], reads
    req = plan['request']
    assert req['ResourceConfig']['InstanceType'] == 'ml.trn1.2xlarge' and req['EnableManagedSpotTraining'] is True
    assert req['HyperParameters']['num_train_epochs'] == '1.0' and req['Environment']['TRN_TUTORIALS_PROGRESS'] == '1'
    assert [t['Key'] for t in req['Tags']] == ['project', 'run-id', 'Name']
    assert set(plan['uploads'].values()) == {f"s3://{bucket}/trn-tutorials/{req['Tags'][1]['Value']}/{c}" for c in ('data', 'model')}
    assert objects(bucket) == []
    assert boto3.client('sagemaker').list_training_jobs()['TrainingJobSummaries'] == []
    # without --bucket: SageMaker's default bucket is named in the request, and not created
    plan = submit(args, JobArguments(role=aws.role(), dry_run=True))
    assert plan['request']['OutputDataConfig']['S3OutputPath'].startswith('s3://sagemaker-us-east-1-123456789012/trn-tutorials/')
    assert [b['Name'] for b in boto3.client('s3').list_buckets()['Buckets']] == [bucket]


def changed(job, **kw):
    "`job` with fields set after it was made (as a notebook might): `submit` checks them again."
    for k, v in kw.items(): setattr(job, k, v)
    return job


def test_bad_input_is_refused_before_anything_is_made(aws, prepared):
    bucket, role = aws.bucket(), aws.role()
    args = TrainArguments(dataset_path=str(prepared/'data'))
    other = aws.role('Ec2Only', service='ec2.amazonaws.com')
    cases = [
        (JobArguments(bucket=bucket), "no role: pass --role"),
        (JobArguments(role=other, bucket=bucket), "does not trust sagemaker.amazonaws.com"),
        (JobArguments(role='arn:aws:iam::123456789012:role/Nope', bucket=bucket), "IAM role 'Nope' does not exist"),
        (JobArguments(role=role, bucket=bucket, region='af-south-1'), "no Neuron training image is listed for af-south-1"),
        (JobArguments(role=role, bucket=bucket, instance_type='ml.trn1.4xlarge'), "unknown SageMaker training instance type"),
        (JobArguments(role=role, bucket=bucket, instance_type='trn1.2xlarge'), "use --instance_type ml.trn1.2xlarge"),
        (JobArguments(role=role, bucket=bucket, spot=True), "--spot needs --max_wait_hours"),
        (JobArguments(role=role, bucket=bucket, spot=True, max_wait_hours=1, max_run_hours=2), "must be at least --max_run_hours"),
        (JobArguments(role=role, bucket=bucket, max_wait_hours=3), "applies to spot jobs only"),
        (JobArguments(role=role, bucket=bucket, job_name='bad_name!'), "is not valid"),
        (changed(JobArguments(role=role, bucket=bucket), instance_count=0), "--instance_count 0 is out of range: use 1 or more"),
        (changed(JobArguments(role=role, bucket=bucket), max_run_hours=float('nan')), "--max_run_hours nan is not a finite number"),
    ]
    for job, msg in cases:
        with pytest.raises(UsageError, match=msg.replace('(', r'\(').replace('[', r'\[')) as e: submit(args, job)
        assert '\n' not in str(e.value)
    with pytest.raises(UsageError, match='does not run on ml.trn1.2xlarge'):
        submit(replace(args, backend='cpu'), JobArguments(role=role, bucket=bucket))
    with pytest.raises(UsageError): submit(replace(args, dataset_path='missing'), JobArguments(role=role, bucket=bucket))
    with pytest.raises(UsageError, match='neither a folder here nor a Hub id'):
        submit(replace(args, model_id='./deleted-model'), JobArguments(role=role, bucket=bucket))
    assert objects(bucket) == [] and boto3.client('sagemaker').list_training_jobs()['TrainingJobSummaries'] == []
    # a name that is taken: the exact name of an earlier job
    name = submit(args, JobArguments(role=role, bucket=bucket, run_id='first'))
    before = objects(bucket)
    with pytest.raises(UsageError, match=f"training job name '{name}' is taken"):
        submit(args, JobArguments(role=role, bucket=bucket, job_name=name))
    assert objects(bucket) == before
    assert stop_job(name) == 'Completed'   # stopping an ended job does nothing


def test_export_model_leaves_the_checkpoints(tmp_path):
    out = tmp_path/'out'; (out/'checkpoint-10').mkdir(parents=True)
    for n in ('config.json', 'model.safetensors', 'metrics.json', 'train.log'): (out/n).write_text(n)
    (out/'checkpoint-10'/'model.safetensors').write_text('x')
    assert export_model(out, tmp_path/'model') == ['config.json', 'metrics.json', 'model.safetensors']
    assert sorted(p.name for p in (tmp_path/'model').iterdir()) == ['config.json', 'metrics.json', 'model.safetensors']


def test_stage_source_is_this_package(tmp_path):
    import trn_tutorials
    src = stage_source(tmp_path/'src')
    pkg = Path(trn_tutorials.__file__).parent
    assert digests(src/'trn_tutorials') == {k: v for k, v in digests(pkg).items() if '__pycache__' not in k}
    assert 'job_main()' in (src/'sm_train.py').read_text()
    req = (src/'requirements.txt').read_text().split()
    import configparser
    extra = configparser.ConfigParser(); extra.read(Path(__file__).parent.parent/'settings.ini')
    assert set(extra['DEFAULT']['trn1_requirements'].split()) <= set(req)   # transformers 4.57: what the package needs on Neuron
    assert 'numpy<2' in req and not any(r.startswith(('torch', 'numpy=', 'numpy>')) for r in req)   # the image's torch and numpy stay
    assert any(r.startswith('fastcore') for r in req)   # the package's modules read their options' help with it when they load


def test_cleanup_removes_the_runs_sagemaker_resources_twice(aws, prepared):
    "Cleanup finds the run's job, model, endpoint config, endpoint and S3 prefix by its tags; other runs and files stay."
    from trn_tutorials.instance.cleanup import cleanup, leftovers
    from trn_tutorials.aws import run_tags
    bucket, role = aws.bucket(), aws.role()
    args = TrainArguments(dataset_path=str(prepared/'data'))
    submit(args, JobArguments(role=role, bucket=bucket, run_id='gone'))
    submit(args, JobArguments(role=role, bucket=bucket, run_id='kept'))
    s3, sm = boto3.client('s3'), boto3.client('sagemaker')
    s3.put_object(Bucket=bucket, Key='trn-tutorials/gone-not-a-run/mine.txt', Body=b'not the run')   # a prefix that only looks alike
    s3.put_object(Bucket=bucket, Key='trn-tutorials/gone/output/model.tar.gz', Body=b'x')
    tags = [{'Key': k, 'Value': v} for k, v in run_tags('gone').items()]
    sm.create_model(ModelName='gone-model', ExecutionRoleArn=role, Tags=tags,
                    PrimaryContainer={'Image': 'img', 'ModelDataUrl': f's3://{bucket}/trn-tutorials/gone/output/model.tar.gz'})
    sm.create_endpoint_config(EndpointConfigName='gone-config', Tags=tags, ProductionVariants=[
        {'VariantName': 'AllTraffic', 'ModelName': 'gone-model', 'InitialInstanceCount': 1, 'InstanceType': 'ml.m5.large'}])
    sm.create_endpoint(EndpointName='gone-endpoint', EndpointConfigName='gone-config', Tags=tags)
    left = leftovers('gone', ec2=False)
    assert (left['models'], left['endpoint_configs'], left['endpoints']) == (['gone-model'], ['gone-config'], ['gone-endpoint'])
    assert left['s3_objects'] and all(o.startswith(f's3://{bucket}/trn-tutorials/gone/') for o in left['s3_objects'])
    kept = leftovers('kept', ec2=False)['s3_objects']

    rep = cleanup('gone', ec2=False)
    assert rep.clean and rep.sagemaker['endpoints'] == ['gone-endpoint'] and rep.sagemaker['models'] == ['gone-model']
    assert rep.s3_objects == len(left['s3_objects'])
    assert 'S3 objects:       %d deleted' % rep.s3_objects in str(rep)
    assert not any(leftovers('gone').values())
    again = cleanup('gone')   # idempotent
    assert again.clean and again.s3_objects == 0 and not any(again.sagemaker.values())
    assert leftovers('kept', ec2=False)['s3_objects'] == kept   # another run untouched
    assert s3.get_object(Bucket=bucket, Key='trn-tutorials/gone-not-a-run/mine.txt')['Body'].read() == b'not the run'


def test_the_cli(aws, prepared, tmp_path):
    """sm-train --dry_run prints the request and creates nothing; a bad option is one line and status 2; sm-down cleans up.
    sm-deploy, sm-predict and sm-down once each in a process of its own (sm-train's: tests/test_cli.py's refusal test); sm-train,
    the refusals and the second sm-down in-process through the CLI's entry (careless' `run_here`)."""
    import os, subprocess, sys
    from careless import run_here
    exe = str(Path(sys.executable).parent/'trn-tutorials')
    bucket, role = aws.bucket(), aws.role()
    # IAM's AccessDenied on iam:SimulatePrincipalPolicy in the CLI's processes too (tests/standin_site/sitecustomize.py; here: the stand-in's)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent/'standin_site'))
    cli = lambda *a: subprocess.run([exe, *a], capture_output=True, text=True, env=env, timeout=300)
    here = lambda *a: run_here(list(a), tmp_path)
    r = here('sm-train', '--dataset_path', str(prepared/'data'), '--num_train_epochs', '2', '--bf16', 'true', '--role', role,
             '--bucket', bucket, '--spot', '--max_wait_hours', '4', '--run_id', 'cli', '--dry_run')
    assert r.returncode == 0, r.stderr
    req = json.loads(r.stdout)['request']
    assert req['HyperParameters']['bf16'] == 'true' and req['HyperParameters']['num_train_epochs'] == '2.0'
    assert req['StoppingCondition']['MaxWaitTimeInSeconds'] == 4 * 3600
    assert objects(bucket) == []
    r = here('sm-train', '--dataset_path', str(prepared/'data'), '--role', role, '--bucket', bucket, '--spot')
    assert r.returncode == 2 and r.stderr.strip().count('\n') == 0 and '--spot needs --max_wait_hours' in r.stderr
    name = submit(TrainArguments(dataset_path=str(prepared/'data')), JobArguments(role=role, bucket=bucket, run_id='cli'))
    assert objects(bucket)
    # an endpoint of the same run: deployed, asked (moto answers what it is given), then removed by sm-down too
    r = cli('sm-deploy', '--model_dir', str(prepared/'tiny-bert'), '--role', role, '--bucket', bucket, '--run_id', 'cli',
            '--endpoint_name', 'cli-endpoint')
    assert r.returncode == 0, r.stderr
    queue_answer(os.environ['AWS_ENDPOINT_URL'], [{'label': 'joy', 'score': 0.9}])
    r = cli('sm-predict', '--endpoint_name', 'cli-endpoint', '--text', 'i feel great')
    assert r.returncode == 0 and r.stdout.split() == ['joy', '0.900', 'i', 'feel', 'great'], (r.stdout, r.stderr)
    r = here('sm-predict', '--endpoint_name', 'cli-endpoint')
    assert r.returncode == 2 and 'pass --text' in r.stderr
    r = cli('sm-down', '--run_id', 'cli')
    assert r.returncode == 0, r.stderr
    assert 'endpoints:        cli-endpoint' in r.stdout and 'still tagged:     nothing' in r.stdout
    assert objects(bucket) == []
    assert here('sm-down', '--run_id', 'cli').returncode == 0   # twice: nothing to do


# --- issue 22 ---------------------------------------------------------------------------------------------------

def _sdk_registries(name: str, scope: str) -> dict:
    "region -> account of the newest image of `scope` ('training', 'inference') in the SDK's image_uri_config file `name`."
    import sagemaker.core.image_uris as iu
    versions = json.loads((Path(iu.__file__).parent/'image_uri_config'/name).read_text())[scope]['versions']
    newest = versions[max(versions, key=lambda v: tuple(int(x) for x in v.split('.')))]
    while 'registries' not in newest: newest = next(v for k, v in newest.items() if k != 'version_aliases')
    return newest['registries']


def test_the_registry_table_is_the_sdks():
    "DLC_ACCOUNTS holds every region the SDK lists for the PyTorch and Neuron DLCs, with the SDK's account."
    from trn_tutorials.sagemaker import job_image as tj
    from trn_tutorials.sagemaker.resources import DLC_ACCOUNTS
    sdk = {**_sdk_registries('pytorch.json', 'training'), **_sdk_registries('pytorch.json', 'inference')}
    assert DLC_ACCOUNTS == sdk
    neuron = _sdk_registries('huggingface-neuronx.json', 'training')
    assert sorted(tj.NEURON_TRAINING_REGIONS) == sorted(neuron) and all(sdk[r] == a for r, a in neuron.items())
    assert re.fullmatch(r'\d{4}-\d\d-\d\d', tj.IMAGES_CHECKED)
    assert tj.training_image('ap-southeast-5') == \
        '550225433462.dkr.ecr.ap-southeast-5.amazonaws.com/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.30.0-ubuntu24.04'
    assert tj.training_image('cn-north-1').startswith('727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/')


def test_an_image_that_is_not_in_the_regions_registry_is_refused():
    from trn_tutorials.sagemaker.job_image import training_image
    img = 'pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.30.0-ubuntu24.04'
    ok = f'763104351884.dkr.ecr.us-west-2.amazonaws.com/{img}'
    assert training_image('us-west-2', ok) == ok
    assert training_image('us-west-2', '111122223333.dkr.ecr.us-west-2.amazonaws.com/mine:1') == '111122223333.dkr.ecr.us-west-2.amazonaws.com/mine:1'
    for region, uri, msg in [
        ('eu-west-1', ok, "is in us-west-2's registry and the job runs in eu-west-1"),   # ECR pulls from the job's region
        ('eu-central-2', f'763104351884.dkr.ecr.eu-central-2.amazonaws.com/{img}', "the Deep Learning Containers in eu-central-2 are in account 380420809688"),
        ('af-south-1', None, 'no Neuron training image is listed for af-south-1'),
    ]:
        with pytest.raises(UsageError, match=msg) as e: training_image(region, uri)
        assert '\n' not in str(e.value)


DATASETS_3_TYPES = {'Array2D', 'Array3D', 'Array4D', 'Array5D', 'Audio', 'ClassLabel', 'Image', 'LargeList', 'Sequence',
                    'Translation', 'TranslationVariableLanguages', 'Value'}   # datasets 3.0.0's _FEATURE_TYPES


def saved_feature_types(folder: Path) -> set:
    "Every feature `_type` a saved folder names: in each split's dataset_info.json and in its arrow files' schemas."
    import pyarrow as pa
    found = set()
    def walk(d):
        if isinstance(d, dict):
            if '_type' in d: found.add(d['_type'])
            for v in d.values(): walk(v)
    for info in folder.rglob('dataset_info.json'): walk(json.loads(info.read_text()))
    for f in folder.rglob('*.arrow'):
        with pa.memory_map(str(f)) as m: walk(json.loads(pa.ipc.open_stream(m).schema.metadata[b'huggingface']))
    return found


def test_prepared_data_names_only_what_datasets_3_reads(prepared):
    "The container's datasets 3.0.0 cannot read a datasets >= 4 `List` feature (huggingface/datasets#7739)."
    import datasets
    types = saved_feature_types(prepared/'data')
    assert types and types <= DATASETS_3_TYPES, (datasets.__version__, types)
    from trn_tutorials.data.prepared import load_prepared
    prepared = load_prepared(str(prepared/'data'))   # and this datasets still reads it, with the same values
    ds, _ = prepared.splits, prepared.manifest
    assert len(ds['train'][0]['input_ids']) == ds['train'].features['input_ids'].length > 0


def test_a_folder_the_container_cannot_read_is_refused(aws, prepared, tmp_path):
    "A folder saved by datasets >= 4 as it is (its `List` types): one line naming the fix, nothing uploaded or created."
    from datasets import load_from_disk
    import shutil
    bad = tmp_path/'bad'
    load_from_disk(str(prepared/'data')).save_to_disk(str(bad))
    shutil.copy(prepared/'data'/'trn_tutorials.json', bad/'trn_tutorials.json')
    bucket = aws.bucket()
    import datasets
    if int(datasets.__version__.split('.')[0]) < 4:   # datasets 3 here (the floors stage) saves `Sequence`, which the container reads
        assert 'List' not in saved_feature_types(bad)
        assert submit(TrainArguments(dataset_path=str(bad)), JobArguments(role=aws.role(), bucket=bucket, dry_run=True))
        return
    assert 'List' in saved_feature_types(bad)
    with pytest.raises(UsageError, match=r"datasets 3\.0\.0 .*cannot read.*trn-tutorials prep") as e:
        submit(TrainArguments(dataset_path=str(bad)), JobArguments(role=aws.role(), bucket=bucket))
    assert '\n' not in str(e.value)
    assert objects(bucket) == [] and boto3.client('sagemaker').list_training_jobs()['TrainingJobSummaries'] == []


def deny_get_role(event_name='before-call.iam.GetRole'):
    "AccessDenied on iam:GetRole for clients of boto3's default session (check_role's), as IAM answers a caller without it."
    session = boto3._get_default_session()
    def deny(**kw):
        from botocore.awsrequest import AWSResponse
        return (AWSResponse('https://iam.amazonaws.com/', 403, {}, None),
                {'Error': {'Code': 'AccessDenied', 'Message': 'User: arn:aws:iam::123456789012:user/least is not authorized to '
                           'perform: iam:GetRole on resource: role SageMakerExecution'}, 'ResponseMetadata': {'HTTPStatusCode': 403}})
    session.events.register(event_name, deny, unique_id='deny-get-role')
    return lambda: session.events.unregister(event_name, unique_id='deny-get-role')


def test_access_denied_on_get_role_warns_and_goes_on(aws, prepared):
    "Creating a job needs iam:PassRole, not iam:GetRole: a caller without GetRole gets one warning and a job."
    from trn_tutorials.sagemaker.resources import check_role
    role, bucket = aws.role(), aws.bucket()
    boto3.setup_default_session()
    undo = deny_get_role()
    try:
        with pytest.warns(UserWarning) as w: assert check_role(role) == role
        assert len(w) == 1 and 'iam:GetRole' in str(w[0].message) and '\n' not in str(w[0].message)
        with pytest.raises(UsageError, match='pass its full ARN'): check_role('SageMakerExecution')   # a bare name: its path unknown
        with pytest.warns(UserWarning): name = submit(TrainArguments(dataset_path=str(prepared/'data')), JobArguments(role=role, bucket=bucket))
        assert boto3.client('sagemaker').describe_training_job(TrainingJobName=name)['RoleArn'] == role
    finally: undo()
    # a role that cannot be passed is still refused, before anything is uploaded
    with pytest.raises(UsageError, match="does not exist"): check_role('arn:aws:iam::123456789012:role/Nope')


def test_one_compile_cache_for_the_project(aws, prepared):
    "Every job of the project reads and fills one Neuron compile cache, which cleanup keeps."
    from trn_tutorials.sagemaker.resources import COMPILE_CACHE_PREFIX
    bucket = aws.bucket()
    plans = [submit(TrainArguments(dataset_path=str(prepared/'data')), JobArguments(role=aws.role(), bucket=bucket, run_id=r, dry_run=True))
             for r in ('c1', 'c2')]
    urls = {p['request']['Environment']['NEURON_COMPILE_CACHE_URL'] for p in plans}
    assert urls == {f's3://{bucket}/{COMPILE_CACHE_PREFIX}'} and COMPILE_CACHE_PREFIX == 'trn-tutorials/neuron-compile-cache'


def test_sdk_3s_current_import_path():
    "sagemaker.train.configs is a deprecated shim in SDK 3.2x; its classes live in sagemaker.core.training.configs."
    import inspect
    from trn_tutorials.sagemaker import training_job
    src = inspect.getsource(training_job)
    assert 'sagemaker.train.configs' not in src and 'from sagemaker.core.training.configs import' in src
    from sagemaker.core.training import configs
    assert all(hasattr(configs, n) for n in ('CheckpointConfig', 'Compute', 'OutputDataConfig', 'SourceCode', 'StoppingCondition', 'InputData'))


def test_this_file_fails_without_the_sdk(tmp_path):
    "Without the SDK these tests fail with a line naming the extra (a skip would count as nothing)."
    import os, subprocess, sys
    fake = tmp_path/'no-sdk'/'sagemaker'; fake.mkdir(parents=True)
    (fake/'__init__.py').write_text("raise ModuleNotFoundError(\"No module named 'sagemaker'\", name='sagemaker')\n")   # as if not installed
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(fake.parent), os.environ.get('PYTHONPATH', '')])}
    r = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-rs', str(Path(__file__)), '-k', 'stage_source_is_this_package'],
                       capture_output=True, text=True, env=env, cwd=str(Path(__file__).parent.parent), timeout=300)
    assert r.returncode not in (0, 5), r.stdout[-2000:]
    assert 'skipped' not in r.stdout.splitlines()[-1] and "pip install -e '.[sagemaker]'" in r.stdout, r.stdout[-2000:]


GATHER = r'''
import json, os, sys
from types import SimpleNamespace
import torch.distributed as dist
from trn_tutorials.training.trainer import gather_shapes
dist.init_process_group('gloo')
rank, world, folder = dist.get_rank(), dist.get_world_size(), sys.argv[1]
trainer = SimpleNamespace(args=SimpleNamespace(process_index=rank, world_size=world),
                          shapes={'train': {(8, 16 * (rank + 1)): 3}, 'eval': {(4, 16): 1}},
                          accelerator=SimpleNamespace(wait_for_everyone=dist.barrier), is_world_process_zero=lambda: rank == 0)
got = gather_shapes(trainer)   # each node has its own folder: nothing shared on disk
if rank == 0: open(os.path.join(folder, 'gathered.json'), 'w').write(json.dumps(got))
dist.destroy_process_group()
'''


def test_shapes_are_gathered_across_nodes(tmp_path):
    "Two nodes (two torchrun launchers on loopback, one worker each), each with its own output folder, as on SageMaker."
    import os, subprocess, sys
    from local_services import free_port
    script = tmp_path/'gather.py'; script.write_text(GATHER)
    port, procs = free_port(), []
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    for node in (0, 1):
        (tmp_path/f'node{node}').mkdir()
        procs.append(subprocess.Popen([sys.executable, '-m', 'torch.distributed.run', '--nnodes=2', '--nproc_per_node=1', f'--node_rank={node}',
                                       '--master_addr=127.0.0.1', f'--master_port={port}', str(script), str(tmp_path/f'node{node}')],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-3000:]
    got = json.loads((tmp_path/'node0'/'gathered.json').read_text())
    assert got == {'input_shapes': [[8, 16], [8, 32]], 'shapes_per_worker': [1, 1], 'eval_shapes': [[4, 16]], 'train_rows_fed': 48}
    assert not list(tmp_path.rglob('.shapes-*'))


def test_the_sdk_gives_no_public_job_name():
    "`submit` reads the job's name from the CreateTrainingJob request (a botocore event): ModelTrainer has no public way to it."
    from sagemaker.train import ModelTrainer
    assert [n for n in dir(ModelTrainer) if 'job' in n.lower() and not n.startswith('_')] == []   # a public one appeared: use it
    assert '_latest_training_job' in ModelTrainer.__private_attributes__   # where the SDK keeps the job, privately


# --- issue 41 ---------------------------------------------------------------------------------------------------

ONE_PROCESS = r'''
import json, sys
from dataclasses import replace
from trn_tutorials.aws import new_run_id
from trn_tutorials.training.arguments import TrainArguments
from trn_tutorials.sagemaker.training_job import JobArguments, submit
data, role, bucket, tests = sys.argv[1:]
sys.path.insert(0, tests); __import__('local_services').deny_simulate_principal_policy()   # moto lacks the call (the stand-in's bypass)
args = TrainArguments(dataset_path=data, num_train_epochs=1)
job = JobArguments(role=role, bucket=bucket, run_id=new_run_id())
out = {}
def step(key, call):
    try: out[key] = call()
    except Exception as e: out[key] = f'{type(e).__name__}: {str(e)[:300]}'
step('plan', lambda: sorted(submit(args, replace(job, dry_run=True))))   # the chapter's dry run ...
step('first', lambda: submit(args, job))                                 # ... then its job, in the same kernel
step('second', lambda: submit(args, replace(job, run_id=new_run_id())))  # ... and its second job
print(json.dumps(out))
'''


def test_dry_run_then_two_jobs_in_one_process(aws, prepared, tmp_path):
    """The chapter's order in one fresh Python: a dry run, then a real job, then a second one. Each real submit uploads
    the data and creates its job. sagemaker-core 2.20-2.23 keep one process-wide `SageMakerClient`, made from the first
    (dry run's) session: the real job then goes through the dry run's hooks (the data uploaded, the job never created)
    and the second fails with KeyError: 'name'. Run by the floor stage with the lowest SDK the extra allows."""
    import subprocess, sys
    script = tmp_path/'one_process.py'; script.write_text(ONE_PROCESS)
    r = subprocess.run([sys.executable, str(script), str(prepared/'data'), aws.role(), aws.bucket(), str(Path(__file__).parent)],
                       capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    from importlib.metadata import version
    jobs = sorted(j['TrainingJobName'] for j in boto3.client('sagemaker').list_training_jobs()['TrainingJobSummaries'])
    assert out['plan'] == ['request', 'uploads'] and jobs == sorted([out['first'], out['second']]), (version('sagemaker-core'), out, jobs)


def test_two_nodes_of_every_efa_type_get_the_efa_settings(aws, prepared):
    """SDK 3's torchrun driver sets FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1 and RDMAV_FORK_SAFE=1 only for the types in
    its lists (ml.trn1.32xlarge, not ml.trn1n.32xlarge): a multi-node job on any Trainium type with EFA gets them from
    the job's environment; ml.trn1.2xlarge (no EFA) and a single node get none."""
    from sagemaker.train.container_drivers.common.utils import SM_EFA_NCCL_INSTANCES, SM_EFA_RDMA_INSTANCES
    from trn_tutorials.sagemaker.job_image import SM_INSTANCES
    efa = {'FI_PROVIDER': 'efa', 'FI_EFA_USE_DEVICE_RDMA': '1', 'RDMAV_FORK_SAFE': '1'}
    args, role, bucket = TrainArguments(dataset_path=str(prepared/'data')), aws.role(), aws.bucket()
    env = lambda t, n: submit(args, JobArguments(role=role, bucket=bucket, instance_type=t, instance_count=n, dry_run=True))['request']['Environment']
    for t in ('ml.trn1.32xlarge', 'ml.trn1n.32xlarge'):
        assert {k: env(t, 2).get(k) for k in efa} == efa, t
        assert not set(env(t, 1)) & set(efa), t
    assert not set(env('ml.trn1.2xlarge', 2)) & set(efa)
    assert 'ml.trn1n.32xlarge' not in SM_EFA_NCCL_INSTANCES + SM_EFA_RDMA_INSTANCES   # why: the SDK's lists leave it out
    assert set(SM_INSTANCES) == {'ml.trn1.2xlarge', 'ml.trn1.32xlarge', 'ml.trn1n.32xlarge'}   # a new type: decide its EFA here


def test_each_job_the_chapter_creates_has_its_own_run():
    """A job submitted with an earlier job's run id resumes that run's checkpoints (test_a_job_end_to_end): after a
    finished run it trains nothing and pays for the start-up. The chapter's cells that create jobs, run in order with
    `submit`, `sm_train` and `cleanup` recording the run ids they get, must give each job a new one, and clean each up."""
    from trn_tutorials.aws import new_run_id
    nb = json.loads((Path(__file__).parent.parent/'nbs'/'sagemaker'/'09_training_job.ipynb').read_text())
    got, cleaned = [], []
    record = lambda args, job: got.append(job.run_id) or 'name'
    ns = {'job': JobArguments(role='r', run_id='first'), 'args': None, 'submit': record, 'sm_train': record, 'replace': replace,
          'JobArguments': JobArguments, 'TrainArguments': lambda **kw: None, 'role': 'r', 'bucket': None,   # the chapter's first job makes its own
          'new_run_id': new_run_id, 'cleanup': lambda run_id, **kw: cleaned.append(run_id), 'print': lambda *a, **k: None}
    cells = [''.join(c['source']) for c in nb['cells'] if c['cell_type'] == 'code' and not ''.join(c['source']).startswith('#| export')]
    calls = [c for c in cells if re.search(r'\b(submit|sm_train|cleanup)\(', c) and 'dry_run=True' not in c]
    assert len(calls) >= 3   # the step-by-step job, the job in one call (a dry run creates no job), the cleanup
    for c in calls: exec(c, ns)
    assert len(got) >= 2 and len(set(got)) == len(got), got
    assert set(cleaned) == set(got), (got, cleaned)   # and each run is cleaned up


def test_list_values_reach_the_script_as_separate_arguments(aws, prepared):
    "`--label_names a b` on the job: the hyperparameters, the container's argv (the SDK's driver), the script's arguments."
    from sagemaker.train.container_drivers.common.utils import hyperparameters_to_cli_args
    from trn_tutorials.sagemaker.job_image import job_argv
    args = TrainArguments(dataset_path=str(prepared/'data'), label_names=['labels', 'other labels'], num_train_epochs=1)
    req = submit(args, JobArguments(role=aws.role(), bucket=aws.bucket(), dry_run=True))['request']
    argv = hyperparameters_to_cli_args(req['HyperParameters'])   # what SageMaker's torchrun driver passes the entry script
    theirs, = parse_args([TrainArguments], job_argv(argv))
    assert theirs.label_names == ['labels', 'other labels'] and theirs.num_train_epochs == 1
    local, = parse_args([TrainArguments], train_argv(args))
    moved = dict(dataset_path=CONTAINER['data'], output_dir=CONTAINER['checkpoints'], model_id=CONTAINER['model'])
    if getattr(theirs, 'logging_dir', None):   # transformers 4.57 derives an unset one from output_dir, dated: under the checkpoints
        assert theirs.logging_dir.startswith(CONTAINER['checkpoints'] + '/runs/'); moved['logging_dir'] = theirs.logging_dir
    assert theirs == replace(local, **moved)


def test_a_role_name_that_cannot_be_read_is_refused(aws, prepared):
    """With GetRole denied, a bare role name cannot become its ARN: a console-made role's ARN holds a path
    (`role/service-role/<name>`). One line asking for the full ARN, before anything is uploaded or created."""
    bucket = aws.bucket()
    iam = boto3.client('iam')
    trust = {'Version': '2012-10-17', 'Statement': [{'Effect': 'Allow', 'Principal': {'Service': 'sagemaker.amazonaws.com'}, 'Action': 'sts:AssumeRole'}]}
    arn = iam.create_role(RoleName='AmazonSageMaker-ExecutionRole-20261127T101500', Path='/service-role/',
                          AssumeRolePolicyDocument=json.dumps(trust))['Role']['Arn']
    assert ':role/service-role/' in arn
    boto3.setup_default_session()
    undo = deny_get_role()
    try:
        with pytest.raises(UsageError, match=r"pass its full ARN.*--role") as e:
            submit(TrainArguments(dataset_path=str(prepared/'data')), JobArguments(role='AmazonSageMaker-ExecutionRole-20261127T101500', bucket=bucket))
        assert '\n' not in str(e.value)
        assert objects(bucket) == [] and boto3.client('sagemaker').list_training_jobs()['TrainingJobSummaries'] == []
        with pytest.warns(UserWarning): name = submit(TrainArguments(dataset_path=str(prepared/'data')), JobArguments(role=arn, bucket=bucket))
        assert boto3.client('sagemaker').describe_training_job(TrainingJobName=name)['RoleArn'] == arn   # the full ARN works
    finally: undo()
