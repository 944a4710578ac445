"""Packaging, deploying, querying and deleting an endpoint, against a real moto_server on 127.0.0.1 (the `moto_server` fixture).

What moto does not do, and how each test deals with it:
- it starts no container: `invoke_endpoint` answers from a queue of canned results (POST
  /moto-api/static/sagemaker/endpoint-results); the answer queued is what the handler itself answers for the same texts;
- it accepts any CreateEndpoint whose configuration exists: to make that real call fail, a botocore
  `provide-client-params` hook (boto3's event system) points it at a configuration that does not exist;
- its CreateEndpointConfig knows an older list of instance types than botocore (no ml.inf2): deploying to ml.inf2.xlarge
  therefore fails after CreateModel succeeded — a real failure in the middle, used as such.
"""
import io, json, os, re, shutil, tarfile
from pathlib import Path

import boto3
import pytest

import trn_tutorials.serving.inference as handler
from trn_tutorials.core.options import UsageError
from trn_tutorials.models import tiny_bert
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.sagemaker.model_package import (DEFAULT_INSTANCE_TYPE, IMAGES, check_instance_type, image_kind,
                                                   inference_image, package, requirements)
from trn_tutorials.sagemaker.endpoint import Endpoint, check_endpoint_name, delete, deploy, endpoint_requests, predict
from trn_tutorials.serving.inference import JSON, model_fn, output_fn, predict_fn
from trn_tutorials.instance.cleanup import leftovers
from trn_tutorials.aws import run_tags
from local_services import queue_answer, sagemaker_role as role

REGION, ACCOUNT = 'us-east-1', '123456789012'   # moto's default account
BUCKET = f'sagemaker-{REGION}-{ACCOUNT}'
NOTHING = {'endpoints': [], 'endpoint_configs': [], 'models': []}


def tagged(run_id: str) -> dict:
    "What cleanup finds of the run's endpoints, endpoint configurations and models (by their tags)."
    return {k: v for k, v in leftovers(run_id, ec2=False).items() if k in NOTHING}


@pytest.fixture
def folder(tmp_path, prepared):
    "A model folder as `train` leaves it: model, tokenizer, label names, metrics.json, and leftovers the endpoint does not need."
    d = Path(shutil.copytree(prepared/'tiny-bert', tmp_path/'model'))   # conftest's tiny BERT, copied: the fixture is read-only
    (d/'metrics.json').write_text(json.dumps({'max_length': 16, 'bucket_lengths': [8, 16], 'label_names': EMOTION_LABELS}))
    (d/'checkpoint-10').mkdir(); (d/'checkpoint-10'/'model.safetensors').write_bytes(b'x')
    for f in ('curves.png', 'train.log', 'training_args.bin', 'old.tar.gz', '.shapes-0.json'): (d/f).write_bytes(b'x')
    return d


def everything() -> dict:
    "Every SageMaker endpoint, endpoint configuration and model in the region, and every S3 object, tagged or not."
    sm, s3 = boto3.client('sagemaker', region_name=REGION), boto3.client('s3', region_name=REGION)
    objects = [f"{b['Name']}/{o['Key']}" for b in s3.list_buckets()['Buckets'] for o in s3.list_objects_v2(Bucket=b['Name']).get('Contents', [])]
    return {'endpoints': [e['EndpointName'] for e in sm.list_endpoints()['Endpoints']],
            'endpoint_configs': [c['EndpointConfigName'] for c in sm.list_endpoint_configs()['EndpointConfigs']],
            'models': [m['ModelName'] for m in sm.list_models()['Models']], 'objects': objects}


def tags_of(arn:str) -> dict:
    return {t['Key']: t['Value'] for t in boto3.client('sagemaker', region_name=REGION).list_tags(ResourceArn=arn)['Tags']}


# ---------------------------------------------------------------------------------------------------------------
# no AWS: the archive, the instance types, the images, the requests
# ---------------------------------------------------------------------------------------------------------------
def test_package_members(folder, tmp_path):
    (folder/'model.pt').write_bytes(b'traced'); (folder/'torchscript.json').write_text('{}')
    archive = package(str(folder), str(tmp_path/'out'/'model.tar.gz'))
    with tarfile.open(archive) as t:
        names = t.getnames()
        assert sorted(names) == sorted(['config.json', 'metrics.json', 'model.pt', 'torchscript.json',   # the trace instead of the weights
                                        *[p.name for p in folder.iterdir() if p.name.startswith(('tokenizer', 'vocab', 'special'))],
                                        'code/inference.py', 'code/requirements.txt'])
        assert t.extractfile('code/inference.py').read() == Path(handler.__file__).read_bytes()   # the handler, as it is
        req = t.extractfile('code/requirements.txt').read().decode()
    assert req == requirements() == 'transformers==5.5.3\n'
    with tarfile.open(package(str(folder), str(tmp_path/'eager.tar.gz'), torchscript=False)) as t:
        assert 'model.pt' not in t.getnames() and 'torchscript.json' not in t.getnames()
    # the archive written into the model folder itself is not packed into itself
    with tarfile.open(package(str(folder), str(folder/'model.tar.gz'))) as t: assert 'model.tar.gz' not in t.getnames()


def test_instance_types_and_images():
    assert check_instance_type(DEFAULT_INSTANCE_TYPE) == 'ml.m5.large' and check_instance_type('ml.c6i.large') == 'ml.c6i.large'
    assert {t: image_kind(t) for t in ('ml.m5.large', 'ml.c7i.xlarge', 'ml.t2.medium', 'ml.g5.xlarge', 'ml.p4d.24xlarge', 'ml.c7g.large',
                                       'ml.m6gd.large', 'ml.inf2.xlarge', 'ml.trn1.2xlarge')} == {
        'ml.m5.large': 'cpu', 'ml.c7i.xlarge': 'cpu', 'ml.t2.medium': 'cpu', 'ml.g5.xlarge': 'gpu', 'ml.p4d.24xlarge': 'gpu',
        'ml.c7g.large': 'arm64', 'ml.m6gd.large': 'arm64', 'ml.inf2.xlarge': 'neuron', 'ml.trn1.2xlarge': 'neuron'}
    assert inference_image('ml.m5.large', 'us-east-1') == \
        '763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-inference:2.6.0-cpu-py312-ubuntu22.04-sagemaker'
    assert inference_image('ml.inf2.xlarge', 'eu-central-2') == \
        '380420809688.dkr.ecr.eu-central-2.amazonaws.com/pytorch-inference-neuronx:2.9.0-neuronx-py312-sdk2.31.1-ubuntu24.04'
    assert inference_image('ml.m5.large', 'cn-north-1').startswith('727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/')
    assert {kind for kind in IMAGES} == {'cpu', 'gpu', 'arm64', 'neuron'}
    for bad, says in [('ml.m5.larg', "did you mean ml.m5.large"), ('m5.large', 'did you mean ml.m5.large'),
                      ('ml.inf1.xlarge', 'Inferentia 1) needs a model compiled with torch-neuron: use ml.inf2.xlarge'),
                      ('banana', 'is not an instance type SageMaker endpoints run on')]:
        with pytest.raises(UsageError) as e: image_kind(bad)
        assert says in str(e.value) and '\n' not in str(e.value), (bad, str(e.value))
    with pytest.raises(UsageError, match="pytorch-inference:2.6.0-cpu-py312-ubuntu22.04-sagemaker is not published in us-iso-east-1"):
        inference_image('ml.m5.large', 'us-iso-east-1')


def test_requests_are_tagged():
    req = endpoint_requests('ep', 's3://b/k/model.tar.gz', 'arn:aws:iam::1:role/r', run_id='r1')
    tags = [{'Key': k, 'Value': v} for k, v in run_tags('r1').items()]
    assert all(req[k]['Tags'] == tags for k in req)
    c = req['create_model']['PrimaryContainer']
    assert c['Environment']['SAGEMAKER_PROGRAM'] == 'inference.py' and c['Environment']['SAGEMAKER_SUBMIT_DIRECTORY'] == '/opt/ml/model/code'
    assert req['create_endpoint_config']['ProductionVariants'][0]['InstanceType'] == DEFAULT_INSTANCE_TYPE


# ---------------------------------------------------------------------------------------------------------------
# against moto_server
# ---------------------------------------------------------------------------------------------------------------
def test_deploy_predict_delete(moto_server, folder):
    arn = role()
    ep = deploy(str(folder), role=arn, run_id='run-a')
    assert isinstance(ep, Endpoint) and (ep.name, ep.status, ep.run_id, ep.region) == ('trn-tutorials-run-a', 'InService', 'run-a', REGION)
    key = 'trn-tutorials/run-a/endpoint/model.tar.gz'
    assert ep.model_data == f's3://{BUCKET}/{key}' and ep.image == inference_image(DEFAULT_INSTANCE_TYPE, REGION)
    sm, s3 = boto3.client('sagemaker', region_name=REGION), boto3.client('s3', region_name=REGION)
    m, c, e = (sm.describe_model(ModelName=ep.name), sm.describe_endpoint_config(EndpointConfigName=ep.name),
               sm.describe_endpoint(EndpointName=ep.name))
    assert m['ExecutionRoleArn'] == arn and m['PrimaryContainer']['Image'] == ep.image and m['PrimaryContainer']['ModelDataUrl'] == ep.model_data
    assert m['PrimaryContainer']['Environment']['SAGEMAKER_PROGRAM'] == 'inference.py'
    assert c['ProductionVariants'][0]['InstanceType'] == 'ml.m5.large' and c['ProductionVariants'][0]['ModelName'] == ep.name
    assert e['EndpointConfigName'] == ep.name and e['EndpointStatus'] == 'InService'
    for arn_ in (m['ModelArn'], c['EndpointConfigArn'], e['EndpointArn']): assert tags_of(arn_) == run_tags('run-a')
    assert {t['Key']: t['Value'] for t in s3.get_object_tagging(Bucket=BUCKET, Key=key)['TagSet']} == run_tags('run-a')
    # the uploaded archive is what `package` makes of the folder
    archive = s3.get_object(Bucket=BUCKET, Key=key)['Body'].read()
    with tarfile.open(fileobj=io.BytesIO(archive)) as t:
        assert {'config.json', 'model.safetensors', 'code/inference.py', 'code/requirements.txt'} <= set(t.getnames())
        assert not any(n.startswith('checkpoint') or n.endswith(('.png', '.log')) for n in t.getnames())
    assert tagged('run-a') == {k: [ep.name] for k in NOTHING} and tagged('other-run') == NOTHING
    # predict: the texts go out as the handler reads them; moto hands back what the handler answers for them
    texts = ['i feel happy today', 'so very scared']
    answer = output_fn(predict_fn(texts, model_fn(str(folder))), JSON)[0]
    queue_answer(moto_server, answer)
    assert predict(ep.name, texts) == json.loads(answer)
    # delete: endpoint, configuration, model; the archive stays for cleanup (the run's S3 prefix)
    assert delete(ep.name) == [f'endpoint {ep.name}', f'endpoint config {ep.name}', f'model {ep.name}']
    assert everything() == {**NOTHING, 'objects': [f'{BUCKET}/{key}']} and tagged('run-a') == NOTHING
    assert delete(ep.name) == []   # again: nothing to do


def test_bad_input_creates_nothing(moto_server, folder, tmp_path):
    "Each refused before anything is created or uploaded, with one line; a taken name is refused with the taken resource intact."
    arn = role()
    no_trust = role('Ec2Only', 'ec2.amazonaws.com')
    no_names = tiny_bert(tmp_path/'no-names', ['hello'])
    cases = [
        (dict(model_dir=str(folder), role=arn, instance_type='ml.m5.huge'), "'ml.m5.huge' is not an instance type SageMaker endpoints run on"),
        (dict(model_dir=str(folder), role=arn, instance_type='ml.inf1.xlarge'), 'needs a model compiled with torch-neuron'),
        (dict(model_dir=no_names, role=arn), 'config.json names no labels'),
        (dict(model_dir=str(tmp_path/'nowhere'), role=arn), 'has no config.json'),
        (dict(model_dir=str(folder), role=None), 'no role'),
        (dict(model_dir=str(folder), role='NoSuchRole'), "IAM role 'NoSuchRole' does not exist"),
        (dict(model_dir=str(folder), role=no_trust), 'does not trust sagemaker.amazonaws.com'),
        (dict(model_dir=str(folder), role=arn, endpoint_name='bad_name!'), "endpoint name 'bad_name!' is not valid"),
        (dict(model_dir=str(folder), role=arn, region='us-iso-east-1'), 'is not published in us-iso-east-1'),
        (dict(model_dir=str(folder), role=arn, instance_count=0), '--instance_count 0 is out of range: use 1 or more'),
        (dict(model_dir=str(folder), role=arn, instance_count='2'), "--instance_count '2' is a str, not a whole number"),
        (dict(model_dir=str(folder), role=arn, run_id='bad run/id'), "run id 'bad run/id' is not valid"),
    ]
    for kw, says in cases:
        with pytest.raises(UsageError) as e: deploy(**kw)
        assert says in str(e.value) and '\n' not in str(e.value), (kw, str(e.value))
        assert everything() == {**NOTHING, 'objects': []}, kw
    # a name in use: by an endpoint, and by a model or configuration left without one
    taken = deploy(str(folder), role=arn, run_id='run-a')
    before = everything()
    with pytest.raises(UsageError, match=rf"an endpoint named '{taken.name}' already exists in us-east-1: pass another endpoint name"):
        deploy(str(folder), role=arn, endpoint_name=taken.name, run_id='run-b')
    boto3.client('sagemaker', region_name=REGION).delete_endpoint(EndpointName=taken.name)
    with pytest.raises(UsageError, match=rf"an endpoint configuration named '{taken.name}' already exists"): check_endpoint_name(taken.name)
    assert everything() == {**before, 'endpoints': []}
    assert delete(taken.name) == [f'endpoint config {taken.name}', f'model {taken.name}']   # delete also removes what is left


def test_failure_midway_leaves_nothing(moto_server, folder):
    arn = role()
    # CreateEndpointConfig fails after CreateModel succeeded: moto's list of instance types lacks ml.inf2 (the folder passes for compiled)
    fake_trace(folder, '2.9.0', 'torch_neuronx 2.9.0.2.15.32035')
    with pytest.raises(UsageError, match=r"AWS refused CreateEndpointConfig \(ValidationException\).*ml\.inf2\.xlarge"):
        deploy(str(folder), role=arn, instance_type='ml.inf2.xlarge', run_id='run-a')
    assert everything() == {**NOTHING, 'objects': []}
    (folder/'model.pt').unlink(); (folder/'torchscript.json').unlink()
    # CreateEndpoint fails after the model and the configuration were made
    boto3.setup_default_session()   # a fresh default session, whose clients (deploy's) carry the hook below
    def no_such_config(params, **kw): params['EndpointConfigName'] = 'no-such-config'
    boto3.DEFAULT_SESSION.events.register('provide-client-params.sagemaker.CreateEndpoint', no_such_config)
    try:
        with pytest.raises(UsageError, match=r"AWS refused CreateEndpoint \(ValidationException\)"):
            deploy(str(folder), role=arn, run_id='run-b')
    finally: boto3.DEFAULT_SESSION = None
    assert everything() == {**NOTHING, 'objects': []}


def test_predict_checks_texts_before_calling(moto_server):
    for texts, says in [([], 'the list of texts is empty'), (['ok', 3], 'item 1 of inputs is a number'), ({'x': 1}, "'x' key(s)")]:
        with pytest.raises(UsageError, match=re.escape(says)): predict('no-such-endpoint', texts)
    queue_answer(moto_server, '[{"label": "joy", "score": 0.9}]')
    assert predict('any', 'one text') == [{'label': 'joy', 'score': 0.9}]   # a single text is sent as a list of one


# ---------------------------------------------------------------------------------------------------------------
# issue 22: pinned requirements, which trace is shipped, Inferentia 2 only for a Neuron-compiled model, images per region,
# the endpoint's name before the wait and Ctrl-C during it
# ---------------------------------------------------------------------------------------------------------------
def test_requirements_pinned_per_image():
    "Every instance installs the same transformers, one that exists with the image's torch (not whatever is newest that day)."
    from trn_tutorials.sagemaker.model_package import IMAGE_TORCH, REQUIREMENTS
    assert requirements() == 'transformers==5.5.3\n' == requirements('ml.m5.large')
    assert requirements('ml.inf2.xlarge') == 'transformers==4.57.6\n'
    assert IMAGE_TORCH == {'cpu': '2.6', 'gpu': '2.6', 'arm64': '2.6', 'neuron': '2.9'} and set(REQUIREMENTS) == set(IMAGES)
    assert all(re.fullmatch(r'(\S+==[\d.]+\n)+', r) for r in REQUIREMENTS.values())


def fake_trace(folder, torch_version:str, compiler:str='torch.jit', **recorded):
    "A model.pt and the torchscript.json `trace` writes beside it; for Neuron, the one NeuronCore a copy needs, as on a Trn1 or Inf2 (`recorded`: other values, None drops one)."
    (folder/'model.pt').write_bytes(b'traced')
    info = {'torch': torch_version, 'compiler': compiler, 'lengths': [8, 16], **({'neuron_cores': 1} if compiler.startswith('torch_neuronx') else {})}
    info = {k: v for k, v in {**info, **recorded}.items() if v is not None}
    (folder/'torchscript.json').write_text(json.dumps(info))


def test_trace_shipped_once(folder, tmp_path, capsys):
    """A trace is shipped instead of the eager weights, never beside them (tests/containers/test_sm_pytorch_inference.py shows a
    trace made here with torch 2.13 loading in the image's torch 2.6); a Neuron-compiled one only to a Neuron image."""
    eager_weights = {'model.safetensors'}
    with tarfile.open(package(str(folder), str(tmp_path/'a.tar.gz'))) as t: names = set(t.getnames())
    assert 'model.pt' not in names and eager_weights <= names   # not traced: the eager model
    fake_trace(folder, '2.13.0')
    with tarfile.open(package(str(folder), str(tmp_path/'b.tar.gz'))) as t: names = set(t.getnames())
    assert {'model.pt', 'torchscript.json'} <= names and not (eager_weights & names)
    with tarfile.open(package(str(folder), str(tmp_path/'c.tar.gz'), torchscript=False)) as t: names = set(t.getnames())
    assert 'model.pt' not in names and eager_weights <= names
    capsys.readouterr()
    fake_trace(folder, '2.9.0', 'torch_neuronx 2.9.0.2.15.32035')   # compiled for Neuron: not for a CPU image; the only thing for inf2
    with tarfile.open(package(str(folder), str(tmp_path/'d.tar.gz'))) as t: names = set(t.getnames())
    assert 'model.pt' not in names and eager_weights <= names
    out = capsys.readouterr().out
    assert out == "model.pt is compiled for Neuron (torch_neuronx 2.9.0.2.15.32035): left out for ml.m5.large, which serves the eager model\n"
    with tarfile.open(package(str(folder), str(tmp_path/'e.tar.gz'), instance_type='ml.inf2.xlarge')) as t: names = set(t.getnames())
    assert {'model.pt', 'torchscript.json'} <= names and not (eager_weights & names)
    assert 'code/requirements.txt' in names


def test_inf2_only_for_a_neuron_compiled_model(moto_server, folder, tmp_path):
    "ml.inf2 with a folder not compiled for Neuron (no trace, or a plain torch.jit one): one line, nothing created or uploaded."
    arn = role()
    for prepare in (lambda: None, lambda: fake_trace(folder, '2.9.0')):
        prepare()
        for call in (lambda: deploy(str(folder), role=arn, instance_type='ml.inf2.xlarge', run_id='run-a'),
                     lambda: package(str(folder), str(tmp_path/'x.tar.gz'), instance_type='ml.inf2.xlarge')):
            with pytest.raises(UsageError) as e: call()
            msg = str(e.value)
            assert 'ml.inf2.xlarge serves only a model compiled for Neuron' in msg and 'trace(model_dir, neuron=True)' in msg and '\n' not in msg
            assert everything() == {**NOTHING, 'objects': []}
    assert not (tmp_path/'x.tar.gz').exists()


def test_image_not_published_in_region(moto_server, folder):
    "An image tag that does not exist in the region: one line before anything is uploaded or created."
    from trn_tutorials.sagemaker.model_package import IMAGE_REGIONS
    assert 'us-east-1' in IMAGE_REGIONS['neuron'] and 'eu-north-1' not in IMAGE_REGIONS['neuron'] and 'eu-north-1' in IMAGE_REGIONS['cpu']
    with pytest.raises(UsageError) as e: inference_image('ml.inf2.xlarge', 'eu-north-1')
    assert "pytorch-inference-neuronx:2.9.0-neuronx-py312-sdk2.31.1-ubuntu24.04 is not published in eu-north-1" in str(e.value)
    assert 'us-east-1' in str(e.value) and '\n' not in str(e.value)
    fake_trace(folder, '2.9.0', 'torch_neuronx 2.9.0.2.15.32035')
    with pytest.raises(UsageError, match='is not published in eu-north-1'):
        deploy(str(folder), role=role(), instance_type='ml.inf2.xlarge', region='eu-north-1', run_id='run-a')
    assert everything() == {**NOTHING, 'objects': []}


def test_name_printed_and_ctrl_c_during_the_wait(moto_server, folder, capsys):
    "The endpoint's name is printed before the wait; Ctrl-C in the wait prints the exact commands that remove it, and re-raises."
    arn = role()
    boto3.setup_default_session()   # deploy's clients come from this session: its hooks reach them
    created = []
    boto3.DEFAULT_SESSION.events.register('after-call.sagemaker.CreateEndpoint', lambda **kw: created.append(1))
    def ctrl_c(**kw):
        if created: raise KeyboardInterrupt   # inside the waiter's DescribeEndpoint, after the endpoint was created
    boto3.DEFAULT_SESSION.events.register('before-call.sagemaker.DescribeEndpoint', ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt): deploy(str(folder), role=arn, run_id='run-a')
    finally: boto3.DEFAULT_SESSION = None
    out = capsys.readouterr().out
    name = 'trn-tutorials-run-a'
    lines = out.strip().splitlines()
    assert lines[0].startswith(f'endpoint {name}: creating') and 'Ctrl-C' in lines[0]
    assert lines[-1] == (f"interrupted: endpoint {name} is still being created and bills once in service; remove it with "
                         f"delete('{name}'), or the whole run (endpoint, model, its S3 files) with: trn-tutorials sm-down --run_id run-a")
    # what the lines say is there, is there; delete removes it
    assert tagged('run-a') == {k: [name] for k in NOTHING}
    assert delete(name) == [f'endpoint {name}', f'endpoint config {name}', f'model {name}']


def test_archive_under_the_run_prefix(moto_server, folder):
    from trn_tutorials.sagemaker.resources import run_prefix
    ep = deploy(str(folder), role=role(), run_id='run-a', wait=False)
    assert ep.model_data.split('/', 3)[3].startswith(run_prefix('run-a') + '/')
    delete(ep.name)


# ---------------------------------------------------------------------------------------------------------------
# issue 41: one TorchServe worker per NeuronCore on Inferentia 2, a model compiled for another core count refused before
# anything is made, and what to do where the endpoint cannot reach PyPI
# ---------------------------------------------------------------------------------------------------------------
WORKER_VARS = ('SAGEMAKER_MODEL_SERVER_WORKERS', 'NEURON_RT_NUM_CORES')


def test_inf2_one_worker_per_neuroncore():
    """Without SAGEMAKER_MODEL_SERVER_WORKERS the PyTorch toolkit lets TorchServe start one worker per vCPU (4 on ml.inf2.xlarge),
    and the first takes every NeuronCore: each Neuron type gets one worker per NeuronCore (2 per Inferentia2 or Trainium chip), one core each."""
    env = lambda t: endpoint_requests('n', 's3://b/model.tar.gz', f'arn:aws:iam::{ACCOUNT}:role/r', t)['create_model']['PrimaryContainer']['Environment']
    for t, cores in {'ml.inf2.xlarge': 2, 'ml.inf2.8xlarge': 2, 'ml.inf2.24xlarge': 12, 'ml.inf2.48xlarge': 24,
                     'ml.trn1.2xlarge': 2, 'ml.trn1.32xlarge': 32, 'ml.trn1n.32xlarge': 32}.items():
        assert {k: env(t).get(k) for k in WORKER_VARS} == {'SAGEMAKER_MODEL_SERVER_WORKERS': str(cores), 'NEURON_RT_NUM_CORES': '1'}, t
    for t in ('ml.m5.large', 'ml.g5.xlarge', 'ml.c7g.large'): assert not set(WORKER_VARS) & set(env(t)), t   # CPU and GPU: the toolkit's defaults


def test_neuron_model_for_other_cores_refused(moto_server, folder, tmp_path):
    "A compiled model that needs another NeuronCore count than a worker gets (or records none), or a Neuron type of another core generation: one line, nothing made."
    arn = role()
    cases = [(dict(neuron_cores=2, compiled_on='trn2.48xlarge'), 'ml.inf2.xlarge',
              'model.pt is compiled for 2 NeuronCores per copy (on trn2.48xlarge), and each worker on ml.inf2.xlarge gets 1'),
             (dict(neuron_cores=None), 'ml.inf2.24xlarge', 'records no NeuronCore count'),
             (dict(neuron_cores=1, compiled_on='trn2.48xlarge'), 'ml.inf2.xlarge', 'model.pt is compiled on trn2.48xlarge, whose NeuronCores differ'),
             (dict(neuron_cores=1), 'ml.trn2.48xlarge', 'ml.trn2.48xlarge has NeuronCore-v3')]
    for extra, itype, says in cases:
        fake_trace(folder, '2.9.0', 'torch_neuronx 2.9.0.2.15.32035', **extra)
        for call in (lambda: deploy(str(folder), role=arn, instance_type=itype, run_id='run-a'),
                     lambda: package(str(folder), str(tmp_path/'x.tar.gz'), instance_type=itype)):
            with pytest.raises(UsageError) as e: call()
            msg = str(e.value)
            assert says in msg and '\n' not in msg, msg
            assert 'trace(model_dir, neuron=True)' in msg or 'ml.inf2' in msg, msg   # it names the fix
            assert everything() == {**NOTHING, 'objects': []}
    assert not (tmp_path/'x.tar.gz').exists()


def _markdown(nb:str) -> str:
    return '\n'.join(''.join(c['source']) for c in json.loads(next((Path(__file__).parents[1]/'nbs').rglob(nb)).read_text())['cells'] if c['cell_type'] == 'markdown')


def _wheel(dest:Path, name:str, version:str) -> Path:
    "A minimal pure-Python wheel (no dependencies), by hand: a zip with its dist-info."
    import base64, hashlib, zipfile
    dist = f'{name}-{version}.dist-info'
    files = {f'{name}/__init__.py': b'', f'{dist}/METADATA': f'Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n'.encode(),
             f'{dist}/WHEEL': b'Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n'}
    digest = lambda b: 'sha256=' + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()
    record = ''.join(f'{p},{digest(b)},{len(b)}\n' for p, b in files.items()) + f'{dist}/RECORD,,\n'
    w = dest/f'{name}-{version}-py3-none-any.whl'
    with zipfile.ZipFile(w, 'w') as z:
        for p, b in {**files, f'{dist}/RECORD': record.encode()}.items(): z.writestr(p, b)
    return w


def test_no_egress_said_where_packages_are_installed(tmp_path):
    """The PyTorch image installs code/requirements.txt from PyPI at every start: the endpoint chapter says what fails without a
    route to PyPI and what to do instead; its vendored requirements.txt installs from code/wheels with the index unreachable."""
    import subprocess, sys
    text = _markdown('12a_model_package.ipynb')   # what an endpoint runs: its package and where its requirements come from
    for says in ('network isolation', 'failed to install required packages', 'CA_REPOSITORY_ARN', 'hf_endpoint.html', 'pip download'):
        assert says in text, says
    import textwrap
    block = re.search(r'```text\n(.*?)\n *```', text, re.S)
    req = textwrap.dedent(block.group(1)) + '\n' if block else ''
    assert req.startswith('--no-index\n--find-links wheels\n'), 'the chapter shows the requirements.txt of vendored wheels'
    assert 'installs nothing' in _markdown('13_hf_endpoint.ipynb')   # the Hugging Face image: nothing to fetch at start
    # the requirements.txt the chapter shows, in code/ beside code/wheels, with no index to reach: pip installs from the wheels
    code = tmp_path/'opt'/'ml'/'model'/'code'
    (code/'wheels').mkdir(parents=True)
    name, version = re.search(r'^(\S+)==(\S+)$', req, re.M).groups()
    _wheel(code/'wheels', name, version)
    (code/'requirements.txt').write_text(req)
    r = subprocess.run([sys.executable, '-m', 'pip', 'install', '--dry-run', '--ignore-installed', '--report', str(tmp_path/'r.json'),
                        '-r', str(code/'requirements.txt')], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, 'PIP_INDEX_URL': 'http://127.0.0.1:9/simple', 'PIP_DISABLE_PIP_VERSION_CHECK': '1'})
    assert r.returncode == 0, r.stderr[-2000:]
    installed = json.loads((tmp_path/'r.json').read_text())['install']
    assert [(i['metadata']['name'], i['metadata']['version'], i['download_info']['url'].rsplit('/', 2)[-2]) for i in installed] == [(name, version, 'wheels')]


# ---------------------------------------------------------------------------------------------------------------
# predict and sm-predict: the pair form goes out; each kind is printed
# ---------------------------------------------------------------------------------------------------------------
# sm-predict and predict with sentence pairs: the pair form goes out; each kind is printed
PAIR = {'text': 'the cat sat on the mat', 'text_pair': 'a cat sat on a mat'}


def sent_bodies():
    "Capture the bodies `predict` sends (boto3's default session, as the CLI uses)."
    import boto3
    bodies = []
    boto3.setup_default_session()
    boto3.DEFAULT_SESSION.events.register('provide-client-params.sagemaker-runtime.InvokeEndpoint',
                                          lambda params, **kw: bodies.append(json.loads(params['Body'])))
    return bodies


def test_predict_sends_pairs(moto_server):
    import boto3
    from trn_tutorials.sagemaker.endpoint import predict
    with pytest.raises(UsageError, match=re.escape("item 0 of inputs is an object with key(s) 'text', 'second', not a sentence pair")):
        predict('any', [{'text': 'a', 'second': 'b'}])
    bodies = sent_bodies()
    try:
        queue_answer(moto_server, [{'label': 'score', 'score': 4.2}])
        assert predict('any', [PAIR]) == [{'label': 'score', 'score': 4.2}]
        queue_answer(moto_server, [{'label': 'score', 'score': 4.2}])
        assert predict('any', {'inputs': PAIR}) == [{'label': 'score', 'score': 4.2}]   # a whole request
        assert bodies == [{'inputs': [PAIR]}] * 2   # always a list: the Hugging Face image answers a list then too
    finally: boto3.DEFAULT_SESSION = None


def test_sm_predict_text_pair(moto_server, capsys):
    import boto3
    from trn_tutorials.cli import run
    bodies = sent_bodies()
    try:
        queue_answer(moto_server, [{'label': 'score', 'score': 4.25}, {'label': 'score', 'score': -0.5}])
        run(['sm-predict', '--endpoint_name', 'ep', '--text', 'the cat sat', 'i am scared', '--text_pair', 'a cat sat', 'what might happen'])
        assert bodies[-1] == {'inputs': [{'text': 'the cat sat', 'text_pair': 'a cat sat'}, {'text': 'i am scared', 'text_pair': 'what might happen'}]}
        assert [l.split() for l in capsys.readouterr().out.splitlines()] == [
            ['score', '4.250', 'the', 'cat', 'sat', '||', 'a', 'cat', 'sat'], ['score', '-0.500', 'i', 'am', 'scared', '||', 'what', 'might', 'happen']]
        queue_answer(moto_server, [{'labels': ['joy', 'love'], 'scores': {'anger': 0.01, 'joy': 0.91, 'love': 0.62}}, {'labels': [], 'scores': {'anger': 0.2}}])
        run(['sm-predict', '--endpoint_name', 'ep', '--text', 'i feel so happy', 'meh'])
        assert bodies[-1] == {'inputs': ['i feel so happy', 'meh']}
        out = capsys.readouterr().out.splitlines()
        assert out[0].split() == ['joy', '0.910,', 'love', '0.620', 'i', 'feel', 'so', 'happy'] and out[1].split() == ['(no', 'label)', 'meh']
        queue_answer(moto_server, [{'label': 'joy', 'score': 0.9}])
        run(['sm-predict', '--endpoint_name', 'ep', '--text', 'i feel great'])
        assert capsys.readouterr().out.split() == ['joy', '0.900', 'i', 'feel', 'great']
        n = len(bodies)
        with pytest.raises(SystemExit) as e: run(['sm-predict', '--endpoint_name', 'ep', '--text', 'a', 'b', '--text_pair', 'c'])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count('\n') == 1 and '--text_pair has 1 text(s) for 2 --text: pass one --text_pair per --text' in err
        assert len(bodies) == n   # refused before any call
    finally: boto3.DEFAULT_SESSION = None
    from trn_tutorials.cli import PredictArguments
    from trn_tutorials.core.options import parse_args
    assert parse_args([PredictArguments], ['--text', 'a', '--text_pair', 'b'])[0].text_pair == ['b']
