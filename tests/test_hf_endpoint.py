"""The Hugging Face inference container path (hf_endpoint): the archive, the image, the requests, and deploy/predict/delete
against a real moto_server on 127.0.0.1 (moto starts no container: invoke_endpoint answers from a queue of canned results,
here what transformers' pipeline answers for the same folder). tests/containers/test_sm_hf_inference.py serves the archive."""
import io, json, shutil, tarfile
from pathlib import Path

import boto3
import pytest

from trn_tutorials.core.options import UsageError
from trn_tutorials.models import tiny_bert
from trn_tutorials.data.files import EMOTION_LABELS
from trn_tutorials.sagemaker.endpoint import delete, predict
from trn_tutorials.sagemaker.hf_endpoint import HF_IMAGES, HF_REGIONS, HF_TASK, hf_deploy, hf_image, hf_package, hf_requests
from trn_tutorials.aws import run_tags
from trn_tutorials.sagemaker.resources import DLC_ACCOUNTS
from local_services import queue_answer, sagemaker_role as role

REGION, BUCKET = 'us-east-1', 'sagemaker-us-east-1-123456789012'
WORDS = 'i feel happy sad angry scared today so very'.split()


@pytest.fixture
def folder(tmp_path, prepared):
    d = Path(shutil.copytree(prepared/'tiny-bert', tmp_path/'model'))   # conftest's tiny BERT, copied: the fixture is read-only
    for f in ('metrics.json', 'curves.png', 'train.log', 'training_args.bin', 'model.pt'): (d/f).write_bytes(b'{}')
    (d/'checkpoint-10').mkdir()
    return d


def everything() -> dict:
    sm, s3 = boto3.client('sagemaker', region_name=REGION), boto3.client('s3', region_name=REGION)
    objects = [f"{b['Name']}/{o['Key']}" for b in s3.list_buckets()['Buckets'] for o in s3.list_objects_v2(Bucket=b['Name']).get('Contents', [])]
    return {'endpoints': [e['EndpointName'] for e in sm.list_endpoints()['Endpoints']],
            'endpoint_configs': [c['EndpointConfigName'] for c in sm.list_endpoint_configs()['EndpointConfigs']],
            'models': [m['ModelName'] for m in sm.list_models()['Models']], 'objects': objects}

NOTHING = {'endpoints': [], 'endpoint_configs': [], 'models': [], 'objects': []}


def test_package_holds_the_pipeline_files_only(folder, tmp_path):
    with tarfile.open(hf_package(str(folder), tmp_path/'out'/'model.tar.gz')) as t: names = sorted(t.getnames())
    assert names == ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'vocab.txt']   # no code/, no leftovers


def test_package_refuses_a_folder_the_pipeline_cannot_serve(tmp_path, folder):
    no_labels = tiny_bert(tmp_path/'no-labels', WORDS)
    no_tok = tmp_path/'no-tok'; no_tok.mkdir()
    for f in ('config.json', 'model.safetensors'): (no_tok/f).write_bytes((folder/f).read_bytes())
    for d, says in [(no_labels, 'config.json names no labels'), (no_tok, 'has no tokenizer'), (tmp_path/'nowhere', 'has no config.json')]:
        with pytest.raises(UsageError, match=says) as e: hf_package(str(d), tmp_path/'x.tar.gz')
        assert '\n' not in str(e.value) and not (tmp_path/'x.tar.gz').exists()


def test_images_and_regions():
    assert hf_image('ml.m5.large', 'us-east-1') == \
        '763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-inference:2.6.0-transformers5.5.3-cpu-py312-ubuntu22.04'
    assert hf_image('ml.g5.xlarge', 'eu-west-1').endswith(':2.6.0-transformers5.5.3-gpu-py312-cu124-ubuntu22.04')
    assert hf_image('ml.c5.xlarge', 'cn-north-1').startswith('727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/')
    for t, says in [('ml.inf2.xlarge', 'compiled for Neuron'), ('ml.trn1.2xlarge', 'compiled for Neuron'), ('ml.m6g.large', 'no Hugging Face arm64'),
                    ('ml.inf1.xlarge', 'torch-neuron'), ('ml.m5.huge', 'is not an instance type')]:
        with pytest.raises(UsageError, match=says): hf_image(t, 'us-east-1')
    for r in ('ap-southeast-5', 'mx-central-1', 'xx-nowhere-1'):
        with pytest.raises(UsageError, match=f"not published in region '{r}'"): hf_image('ml.m5.large', r)


def test_regions_and_tags_are_the_sdks():
    "HF_REGIONS and the tags are what SageMaker SDK 3's image_uri_config lists for transformers 5.5.3 / torch 2.6.0."
    import sagemaker.core
    cfg = json.loads((Path(sagemaker.core.__file__).parent/'image_uri_config'/'huggingface.json').read_text())['inference']['versions']['5.5.3']
    sdk = cfg['pytorch2.6.0']
    assert HF_REGIONS == set(sdk['registries'])
    assert all(DLC_ACCOUNTS[r] == a for r, a in sdk['registries'].items() if r in DLC_ACCOUNTS)
    assert {k: t for k, (_, t) in HF_IMAGES.items()} == {
        k: f"2.6.0-transformers5.5.3-{k}-py312-{sdk['container_version'][k]}" for k in ('cpu', 'gpu')}
    assert {repo for repo, _ in HF_IMAGES.values()} == {sdk['repository']}


def test_requests():
    req = hf_requests('ep', 's3://b/k/model.tar.gz', 'arn:aws:iam::111122223333:role/R', run_id='run-a')
    assert req['create_model']['PrimaryContainer'] == {'Image': hf_image('ml.m5.large', 'us-east-1'), 'ModelDataUrl': 's3://b/k/model.tar.gz',
                                                       'Environment': {'HF_TASK': 'text-classification'}}
    tags = [{'Key': k, 'Value': v} for k, v in run_tags('run-a').items()]
    assert all(req[k]['Tags'] == tags for k in req)
    assert req['create_endpoint_config']['ProductionVariants'][0]['InstanceType'] == 'ml.m5.large'


def test_deploy_predict_delete(moto_server, folder, capsys):
    arn = role()
    ep = hf_deploy(str(folder), role=arn, run_id='run-a')
    assert (ep.name, ep.status, ep.image) == ('trn-tutorials-run-a', 'InService', hf_image('ml.m5.large', REGION))
    assert "endpoint trn-tutorials-run-a: creating (run run-a); waiting until it is in service" in capsys.readouterr().out
    sm, s3 = boto3.client('sagemaker', region_name=REGION), boto3.client('s3', region_name=REGION)
    m = sm.describe_model(ModelName=ep.name)
    assert m['PrimaryContainer']['Image'] == ep.image and m['PrimaryContainer']['Environment'] == {'HF_TASK': HF_TASK}
    assert m['ExecutionRoleArn'] == arn
    key = 'trn-tutorials/run-a/endpoint/model.tar.gz'
    assert ep.model_data == f's3://{BUCKET}/{key}'
    with tarfile.open(fileobj=io.BytesIO(s3.get_object(Bucket=BUCKET, Key=key)['Body'].read())) as t:
        assert not any(n.startswith('code') for n in t.getnames()) and 'tokenizer.json' in t.getnames()
    from transformers import pipeline
    texts = ['i feel happy today', 'so very scared']
    answer = json.dumps(pipeline(task=HF_TASK, model=str(folder), device=-1)(texts))
    queue_answer(moto_server, answer, REGION)
    got = predict(ep.name, texts)
    assert got == json.loads(answer) and all(r['label'] in EMOTION_LABELS for r in got)
    assert delete(ep.name) == [f'endpoint {ep.name}', f'endpoint config {ep.name}', f'model {ep.name}']
    assert everything() == {**NOTHING, 'objects': [f'{BUCKET}/{key}']}


def test_bad_input_creates_nothing(moto_server, folder, tmp_path):
    arn = role()
    cases = [
        (dict(model_dir=str(tiny_bert(tmp_path/'no-labels', WORDS)), role=arn), 'config.json names no labels'),
        (dict(model_dir=str(folder), role=arn, instance_type='ml.inf2.xlarge'), 'compiled for Neuron'),
        (dict(model_dir=str(folder), role=arn, instance_type='ml.m6g.large'), 'no Hugging Face arm64'),
        (dict(model_dir=str(folder), role=arn, region='ap-southeast-5'), "not published in region 'ap-southeast-5'"),
        (dict(model_dir=str(folder), role='NoSuchRole'), "IAM role 'NoSuchRole' does not exist"),
        (dict(model_dir=str(folder), role=arn, endpoint_name='bad_name!'), "endpoint name 'bad_name!' is not valid"),
        (dict(model_dir=str(folder), role=arn, instance_count=0), 'out of range'),
    ]
    for kw, says in cases:
        with pytest.raises(UsageError) as e: hf_deploy(**kw)
        assert says in str(e.value) and '\n' not in str(e.value), (kw, str(e.value))
        assert everything() == NOTHING, kw


def test_the_cli_deploys_to_the_hf_image(moto_server, folder, capsys):
    "`trn-tutorials sm-deploy --container huggingface`: the same command, the Hugging Face image, HF_TASK only; a typo is one line."
    from trn_tutorials.cli import run
    run(['sm-deploy', '--container', 'huggingface', '--model_dir', str(folder), '--role', role(), '--run_id', 'cli-hf', '--region', REGION])
    m = boto3.client('sagemaker', region_name=REGION).describe_model(ModelName='trn-tutorials-cli-hf')['PrimaryContainer']
    assert m['Image'] == hf_image('ml.m5.large', REGION) and m['Environment'] == {'HF_TASK': HF_TASK}
    assert 'next: trn-tutorials sm-predict --endpoint_name trn-tutorials-cli-hf' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        run(['sm-deploy', '--container', 'hugginface', '--model_dir', str(folder), '--region', REGION])
    err = capsys.readouterr().err
    assert "invalid choice: 'hugginface'" in err and 'huggingface' in err
