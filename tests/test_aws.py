"""The setup and cleanup chapters against a real moto_server (AWS APIs on 127.0.0.1 through AWS_ENDPOINT_URL).

moto starts no machines, so launches here use `wait_ssh=False`; `wait_for_ssh` is tested against a real
sshd in test_ssh.py. Addresses are from the documentation range 203.0.113.0/24.
"""
import base64, dataclasses, http.server, stat, threading
from dataclasses import fields
from pathlib import Path

import boto3, pytest
from botocore.exceptions import ClientError

from trn_tutorials import core
from trn_tutorials.core import UsageError, parse_args
from trn_tutorials.dlami import DLAMI, Dlami, dlami_for, find_ami
from trn_tutorials.instance import (InstanceArguments, StatusArguments, caller_ip, find_instance, find_instances,
                                    launch_instance, launch_subnets)
from trn_tutorials.aws import explain, tag_filters
from trn_tutorials.backends import instance_family
from trn_tutorials.cleanup import CleanupArguments, cleanup, leftovers
import trn_tutorials.endpoint   # registers the SageMaker cleaners (training jobs, S3, endpoints), as `trn-tutorials down` does
from local_services import LATEST_DLAMI, NO_XLA_DLAMI, TRN1_DLAMI, TRN2_DLAMI, free_port

IP = '203.0.113.7'


def one_line(e) -> str:
    msg = str(e.value)
    assert '\n' not in msg and msg, msg
    return msg


def tags_of(resource) -> dict:
    return {t['Key']: t['Value'] for t in resource.get('Tags', [])}


def test_launch_describe_cleanup(moto_server, tmp_path):
    ec2 = boto3.client('ec2')
    # made by hand, without tags: cleanup must leave them alone
    vpc = ec2.describe_vpcs(Filters=[{'Name': 'is-default', 'Values': ['true']}])['Vpcs'][0]['VpcId']
    own_sg = ec2.create_security_group(GroupName='users-own', Description='not ours', VpcId=vpc)['GroupId']
    ec2.create_key_pair(KeyName='users-own-key')

    inst = launch_instance('trn1.2xlarge', my_ip=IP, key_dir=str(tmp_path), wait_ssh=False, max_hours=8)
    other = launch_instance('trn1.2xlarge', my_ip=IP, key_dir=str(tmp_path), wait_ssh=False)
    assert (inst.state, inst.user, inst.instance_type, inst.region) == ('running', 'ubuntu', 'trn1.2xlarge', 'us-east-1')
    assert inst.host and inst.launch_time.tzinfo is not None
    assert inst.image_id == TRN1_DLAMI     # the SDK 2.31 PyTorch 2.9 DLAMI, not the newer ones without PyTorch/XLA

    # the private key: new, mode 0400
    key = Path(inst.key_path)
    assert key.name == f'trn-tutorials-{inst.run_id}.pem' and stat.S_IMODE(key.stat().st_mode) == 0o400
    assert key.read_text().startswith('-----BEGIN OPENSSH PRIVATE KEY-----')

    d = ec2.describe_instances(InstanceIds=[inst.instance_id])['Reservations'][0]['Instances'][0]
    assert d['Placement']['AvailabilityZone'] in ('us-east-1c', 'us-east-1f')   # zones that offer trn1 (moto's AWS data)
    want = {'project': 'trn-tutorials', 'run-id': inst.run_id}
    assert want.items() <= tags_of(d).items()

    # security group: exactly one ingress rule, TCP 22 from a /32
    (sg,) = ec2.describe_security_groups(GroupIds=[g['GroupId'] for g in d['SecurityGroups']])['SecurityGroups']
    assert want.items() <= tags_of(sg).items()
    (rule,) = sg['IpPermissions']
    assert (rule['IpProtocol'], rule['FromPort'], rule['ToPort']) == ('tcp', 22, 22)
    assert [r['CidrIp'] for r in rule['IpRanges']] == [f'{IP}/32']
    assert not rule.get('Ipv6Ranges') and not rule.get('UserIdGroupPairs') and not rule.get('PrefixListIds')

    # key pair and root volume tagged; volume 512 GB gp3 (the minimum the Neuron setup guides ask for)
    (kp,) = ec2.describe_key_pairs(KeyNames=[d['KeyName']])['KeyPairs']
    assert want.items() <= tags_of(kp).items()
    (vol,) = ec2.describe_volumes(Filters=[{'Name': 'attachment.instance-id', 'Values': [inst.instance_id]}])['Volumes']
    assert want.items() <= tags_of(vol).items() and (vol['Size'], vol['VolumeType']) == (512, 'gp3')

    # cost guard: shutdown behaviour terminate + a scheduled power-off in user data
    attr = lambda a: ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute=a)
    assert attr('instanceInitiatedShutdownBehavior')['InstanceInitiatedShutdownBehavior']['Value'] == 'terminate'
    user_data = base64.b64decode(attr('userData')['UserData']['Value']).decode()
    assert user_data.startswith('#!/bin/bash\n') and 'shutdown -h +480 ' in user_data

    # found again by tags
    assert find_instance(inst.run_id).instance_id == inst.instance_id
    assert {i.instance_id for i in find_instances()} == {inst.instance_id, other.instance_id}

    rep = cleanup(inst.run_id, key_dir=str(tmp_path), known_hosts=str(tmp_path/'kh'))
    assert rep.terminated == [inst.instance_id]
    assert rep.security_groups == [sg['GroupId']] and rep.key_pairs == [kp['KeyName']] and rep.key_files == [str(key)]
    assert rep.clean and not any(leftovers(inst.run_id).values())
    assert not key.exists()
    assert rep.cost_usd == pytest.approx(1.34 / 60, abs=0.01)   # one-minute minimum at $1.34/h
    assert ec2.describe_instances(InstanceIds=[inst.instance_id])['Reservations'][0]['Instances'][0]['State']['Name'] == 'terminated'
    assert 'still tagged:     nothing' in str(rep)

    # cleanup twice is harmless
    again = cleanup(inst.run_id, key_dir=str(tmp_path), known_hosts=str(tmp_path/'kh'))
    assert (again.terminated, again.security_groups, again.key_pairs, again.key_files, again.clean) == ([], [], [], [], True)

    # the other run and the untagged resources survive
    assert [i.instance_id for i in find_instances(other.run_id)] == [other.instance_id]
    assert ec2.describe_security_groups(GroupIds=[own_sg])['SecurityGroups']
    assert ec2.describe_key_pairs(KeyNames=['users-own-key'])['KeyPairs']

    everything = cleanup(all_project=True, key_dir=str(tmp_path), known_hosts=str(tmp_path/'kh'))
    assert everything.terminated == [other.instance_id] and everything.clean
    assert not any(leftovers().values())
    assert ec2.describe_security_groups(GroupIds=[own_sg])['SecurityGroups']
    assert ec2.describe_key_pairs(KeyNames=['users-own-key'])['KeyPairs']
    assert list(tmp_path.glob('*.pem')) == []


def test_options(moto_server, tmp_path):
    inst = launch_instance('trn1.32xlarge', region='us-west-2', my_ip=f'{IP}/32', key_dir=str(tmp_path), wait_ssh=False,
                  volume_gb=120, max_hours=0, run_id='my-run.1')
    ec2 = boto3.client('ec2', region_name='us-west-2')
    assert (inst.run_id, inst.instance_type, inst.region) == ('my-run.1', 'trn1.32xlarge', 'us-west-2')
    ud = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute='userData')['UserData']
    assert not ud.get('Value')    # max_hours=0: no guard
    (vol,) = ec2.describe_volumes(Filters=tag_filters('my-run.1'))['Volumes']
    assert vol['Size'] == 120
    assert cleanup('my-run.1', region='us-west-2', key_dir=str(tmp_path), known_hosts=str(tmp_path/'kh')).clean


def test_ami_lookup(moto_server):
    # AWS's public parameters are not in moto (names under /aws/ are reserved), so the name and SDK filters find the DLAMI
    im = find_ami()
    assert (im['id'], im['found_by'], im['root_device'], im['sdk']) == (TRN1_DLAMI, 'filter', '/dev/sda1', '2.31.1')
    assert im['venv'] == '/opt/aws_neuronx_venv_pytorch_2_9'
    assert find_ami(ami=NO_XLA_DLAMI)['found_by'] == 'given'     # an explicit id wins, whatever it is
    with pytest.raises(UsageError) as e: find_ami(ami='ami-0123456789abcdef0')
    assert 'leave --ami out' in one_line(e)


def test_trn1_never_takes_latest(moto_server):
    "Newer DLAMIs (SDK 2.32, 2.33: JAX and vLLM only) exist; a Trn1 still gets the newest SDK 2.31 PyTorch 2.9 image."
    ec2 = boto3.client('ec2')
    newest = max(ec2.describe_images(Owners=['amazon'], Filters=[{'Name': 'name', 'Values': ['Deep Learning AMI Neuron*']}])['Images'],
                 key=lambda i: i['CreationDate'])
    assert newest['ImageId'] not in (TRN1_DLAMI, TRN2_DLAMI) and 'Neuron SDK 2.3' in newest['Description']
    for t in ('trn1.2xlarge', 'trn1.32xlarge', 'trn1n.32xlarge'):
        assert find_ami(instance_type=t)['id'] == TRN1_DLAMI, t
    # the PyTorch 2.9 DLAMI preferred; without it, the 2.31 multi-framework DLAMI (which has the same environment)
    only_mf = dataclasses.replace(DLAMI['trn1'], names=DLAMI['trn1'].names[1:])
    assert find_ami(dlami=only_mf)['name'] == 'Deep Learning AMI Neuron (Ubuntu 24.04) 20260707'


def test_trn1_launch_picks_the_pytorch_image(moto_server, tmp_path):
    inst = launch_instance('trn1.2xlarge', my_ip=IP, key_dir=str(tmp_path), wait_ssh=False, max_hours=1)
    assert inst.image_id == TRN1_DLAMI != LATEST_DLAMI
    assert cleanup(inst.run_id, key_dir=str(tmp_path), known_hosts=str(tmp_path/'kh')).clean


def test_trn2_and_trn3_take_torchneuron(moto_server):
    for t in ('trn2.3xlarge', 'trn2.48xlarge', 'trn2u.48xlarge', 'trn3.48xlarge'):
        im = find_ami(instance_type=t)
        assert (im['id'], im['venv'], im['sdk']) == (TRN2_DLAMI, '/opt/aws_neuronx_venv_torch_neuronx_2_14_0', '2.33.0'), t
    assert find_ami(region='us-east-2', instance_type='trn2.48xlarge')['id'] == TRN2_DLAMI


@pytest.mark.skipif('trn2.48xlarge' not in (getattr(core, 'CATALOG', None) or getattr(core, 'TRN1', {})),
                    reason='the instance catalog (core) has no Trn2 rows yet')
def test_trn2_launch_picks_the_torchneuron_image(moto_server, tmp_path):
    inst = launch_instance('trn2.48xlarge', region='us-east-2', my_ip=IP, key_dir=str(tmp_path), wait_ssh=False, max_hours=1)
    assert inst.image_id == TRN2_DLAMI
    assert cleanup(inst.run_id, region='us-east-2', key_dir=str(tmp_path), known_hosts=str(tmp_path/'kh')).clean


def test_families():
    assert [instance_family(t) for t in ('trn1.2xlarge', 'trn1n.32xlarge', 'trn2.3xlarge', 'trn2u.48xlarge', 'trn3.48xlarge')] == \
           ['trn1', 'trn1', 'trn2', 'trn2', 'trn3']
    assert dlami_for('trn1.32xlarge').venv == '/opt/aws_neuronx_venv_pytorch_2_9' and dlami_for('trn1.2xlarge').sdk == '2.31'
    assert dlami_for('trn3.48xlarge') is DLAMI['trn2']
    assert DLAMI['trn1'].description == '*Neuron SDK 2.31*'
    with pytest.raises(UsageError) as e: instance_family('inf2.xlarge')
    assert 'not a Trainium instance type' in one_line(e)


def test_no_image_names_ami(moto_server, tmp_path):
    gone = Dlami(('Deep Learning AMI Neuron PyTorch 2.9 (Ubuntu 24.04) *',), '2.30', '/opt/aws_neuronx_venv_pytorch_2_9')
    with pytest.raises(UsageError) as e: find_ami(dlami=gone)
    msg = one_line(e)
    assert 'no Neuron SDK 2.30 DLAMI with /opt/aws_neuronx_venv_pytorch_2_9 in us-east-1' in msg and 'pass --ami' in msg
    # a launch in a region where the image is gone stops there, before anything is created
    ec2 = boto3.client('ec2')
    for im in ec2.describe_images(Owners=['amazon'], Filters=[{'Name': 'name', 'Values': ['Deep Learning AMI Neuron*']}])['Images']:
        ec2.deregister_image(ImageId=im['ImageId'])
    with pytest.raises(UsageError) as e: launch_instance('trn1.2xlarge', my_ip=IP, key_dir=str(tmp_path), wait_ssh=False)
    assert 'pass --ami with an image that has /opt/aws_neuronx_venv_pytorch_2_9' in one_line(e)
    assert ec2.describe_key_pairs()['KeyPairs'] == [] and list(tmp_path.iterdir()) == []
    assert ec2.describe_security_groups(Filters=tag_filters())['SecurityGroups'] == []


def test_ssm_parameter_is_checked(moto_server):
    "The SSM parameter is read first, but its image is taken only if it passes the name and SDK filters."
    ssm = boto3.client('ssm')
    with_param = lambda name: dataclasses.replace(DLAMI['trn1'], ssm=name)
    ssm.put_parameter(Name='/trn-tutorials-test/pytorch-2.9/image_id', Value='ami-0dl4m1pt2310707', Type='String')
    im = find_ami(dlami=with_param('/trn-tutorials-test/pytorch-2.9/image_id'))
    assert (im['id'], im['found_by']) == ('ami-0dl4m1pt2310707', 'ssm')
    # a parameter that moved on to an image without PyTorch/XLA is not followed
    ssm.put_parameter(Name='/trn-tutorials-test/moved/image_id', Value=NO_XLA_DLAMI, Type='String')
    im = find_ami(dlami=with_param('/trn-tutorials-test/moved/image_id'))
    assert (im['id'], im['found_by']) == (TRN1_DLAMI, 'filter')
    # a parameter that does not exist (a region without it), or names a deleted image
    assert find_ami(dlami=with_param('/trn-tutorials-test/missing/image_id'))['found_by'] == 'filter'
    ssm.put_parameter(Name='/trn-tutorials-test/deleted/image_id', Value='ami-0123456789abcdef0', Type='String')
    assert find_ami(dlami=with_param('/trn-tutorials-test/deleted/image_id'))['found_by'] == 'filter'
    assert DLAMI['trn1'].ssm == '/aws/service/neuron/dlami/pytorch-2.9/ubuntu-24.04/latest/image_id'


def test_type_not_offered_creates_nothing(moto_server, tmp_path):
    with pytest.raises(UsageError) as e: launch_instance(region='eu-west-1', my_ip=IP, key_dir=str(tmp_path), wait_ssh=False)
    assert 'not offered in eu-west-1' in one_line(e)
    ec2 = boto3.client('ec2', region_name='eu-west-1')
    assert ec2.describe_key_pairs()['KeyPairs'] == [] and list(tmp_path.iterdir()) == []
    assert [g['GroupName'] for g in ec2.describe_security_groups()['SecurityGroups']] == ['default']
    assert ec2.describe_instances()['Reservations'] == []


def test_subnet_in_wrong_zone(moto_server, tmp_path):
    ec2 = boto3.client('ec2')
    wrong = ec2.describe_subnets(Filters=[{'Name': 'availability-zone', 'Values': ['us-east-1a']}])['Subnets'][0]['SubnetId']
    with pytest.raises(UsageError) as e: launch_subnets('trn1.2xlarge', subnet_id=wrong)
    assert 'use a subnet in us-east-1c, us-east-1f' in one_line(e)


def test_no_default_vpc(moto_server, tmp_path):
    ec2 = boto3.client('ec2', region_name='us-west-2')
    vpc = ec2.describe_vpcs(Filters=[{'Name': 'is-default', 'Values': ['true']}])['Vpcs'][0]['VpcId']
    for s in ec2.describe_subnets(Filters=[{'Name': 'vpc-id', 'Values': [vpc]}])['Subnets']: ec2.delete_subnet(SubnetId=s['SubnetId'])
    for g in ec2.describe_internet_gateways(Filters=[{'Name': 'attachment.vpc-id', 'Values': [vpc]}])['InternetGateways']:
        ec2.detach_internet_gateway(InternetGatewayId=g['InternetGatewayId'], VpcId=vpc)
        ec2.delete_internet_gateway(InternetGatewayId=g['InternetGatewayId'])
    ec2.delete_vpc(VpcId=vpc)
    with pytest.raises(UsageError) as e: launch_instance(region='us-west-2', my_ip=IP, key_dir=str(tmp_path), wait_ssh=False)
    assert 'aws ec2 create-default-vpc --region us-west-2' in one_line(e)
    assert ec2.describe_key_pairs()['KeyPairs'] == [] and list(tmp_path.iterdir()) == []


def test_key_pairs(moto_server, tmp_path):
    ec2 = boto3.client('ec2')
    ec2.create_key_pair(KeyName='exists-remotely')
    with pytest.raises(UsageError) as e: launch_instance(key_name='exists-remotely', my_ip=IP, key_dir=str(tmp_path), wait_ssh=False)
    assert 'exists in us-east-1 but its private key is not at' in one_line(e)
    (tmp_path/'only-local.pem').write_text('precious\n')
    with pytest.raises(UsageError) as e: launch_instance(key_name='only-local', my_ip=IP, key_dir=str(tmp_path), wait_ssh=False)
    assert 'refusing to overwrite' in one_line(e)
    assert (tmp_path/'only-local.pem').read_text() == 'precious\n'
    assert ec2.describe_security_groups(Filters=tag_filters())['SecurityGroups'] == []   # nothing created on the way
    # reuse: a pair of the user's with its key file where we look
    (tmp_path/'exists-remotely.pem').write_text('the user keeps this\n')
    inst = launch_instance(key_name='exists-remotely', my_ip=IP, key_dir=str(tmp_path), wait_ssh=False)
    assert inst.key_path == str(tmp_path/'exists-remotely.pem')
    rep = cleanup(inst.run_id, key_dir=str(tmp_path), known_hosts=str(tmp_path/'kh'))
    assert rep.clean and rep.key_pairs == [] and rep.key_files == []
    assert ec2.describe_key_pairs(KeyNames=['exists-remotely'])['KeyPairs']
    assert (tmp_path/'exists-remotely.pem').read_text() == 'the user keeps this\n'


def test_bad_input_fails_before_any_aws_call(monkeypatch, tmp_path):
    # boto3 would fail with "cannot reach AWS" on this closed port: these errors come first
    monkeypatch.setenv('AWS_ENDPOINT_URL', f'http://127.0.0.1:{free_port()}')
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'testing'); monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'testing')
    monkeypatch.setenv('AWS_DEFAULT_REGION', 'us-east-1')
    cases = [(dict(instance_type='trn9.xlarge'), 'use one of trn1.2xlarge'), (dict(volume_gb=100), 'use 120 or more'),
             (dict(max_hours=-1), '--max_hours -1 is out of range'), (dict(run_id='two words'), 'is not valid'),
             (dict(my_ip='0.0.0.0/0'), 'to one address'), (dict(my_ip='2001:db8::1'), 'IPv6'),
             (dict(my_ip='0.0.0.0'), 'is unspecified'), (dict(my_ip='192.168.1.20'), 'is a private address'),
             (dict(max_hours='8'), "--max_hours '8' is a str"), (dict(volume_gb=float('nan')), '--volume_gb nan is a float'),
             (dict(timeout=0), '--timeout 0 is out of range'), (dict(max_hours=float('inf')), 'is not a finite number'),
             (dict(key_dir=''), '--key_dir is empty')]
    for kw, msg in cases:
        with pytest.raises(UsageError) as e: launch_instance(**{'my_ip': IP, 'key_dir': str(tmp_path), 'wait_ssh': False, **kw})
        assert msg in one_line(e), kw
    with pytest.raises(UsageError) as e: launch_instance(my_ip=IP, key_dir=str(tmp_path), wait_ssh=False)
    assert 'cannot reach AWS at' in one_line(e)
    with pytest.raises(UsageError) as e: cleanup(key_dir=str(tmp_path))
    assert 'pass --run_id RUN' in one_line(e)


def test_error_messages():
    quota = ClientError({'Error': {'Code': 'VcpuLimitExceeded', 'Message': 'You have requested more vCPU capacity than your current vCPU limit of 0 allows.'}}, 'RunInstances')
    assert 'Service Quotas' in explain(quota, 'us-east-1', 'trn1.2xlarge')
    novpc = ClientError({'Error': {'Code': 'VPCIdNotSpecified', 'Message': 'No default VPC for this user'}}, 'RunInstances')
    assert 'create-default-vpc --region eu-north-1' in explain(novpc, 'eu-north-1')
    other = ClientError({'Error': {'Code': 'Odd', 'Message': 'a\nb'}}, 'RunInstances')
    assert explain(other, 'us-east-1') == 'AWS refused RunInstances (Odd): a b'


class _IpHandler(http.server.BaseHTTPRequestHandler):
    answer = b'203.0.113.9\n'
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(self.answer)
    def log_message(self, *a): pass


def test_caller_ip():
    srv = http.server.HTTPServer(('127.0.0.1', 0), _IpHandler)
    t = threading.Thread(target=srv.serve_forever, daemon=True); t.start()
    try:
        url = f'http://127.0.0.1:{srv.server_port}/'
        assert caller_ip(url, timeout=5) == '203.0.113.9'
        _IpHandler.answer = b'<html>proxy login</html>'
        with pytest.raises(UsageError) as e: caller_ip(url, timeout=5)
        assert 'not an IPv4 address: pass --my_ip' in one_line(e)
    finally:
        srv.shutdown(); srv.server_close(); _IpHandler.answer = b'203.0.113.9\n'
    with pytest.raises(UsageError) as e: caller_ip(f'http://127.0.0.1:{free_port()}/', timeout=2)
    assert 'pass --my_ip yourself' in one_line(e)


def test_cli_arguments_parse():
    (a,) = parse_args([InstanceArguments], ['--instance_type', 'trn1.32xlarge', '--max_hours', '2.5', '--wait_ssh', 'false',
                                            '--my_ip', IP, '--volume_gb', '300'])
    assert (a.instance_type, a.max_hours, a.wait_ssh, a.my_ip, a.volume_gb, a.region) == ('trn1.32xlarge', 2.5, False, IP, 300, None)
    s, c = parse_args([StatusArguments, CleanupArguments], ['--run_id', 'r1', '--region', 'us-west-2', '--all_project', 'false'])
    assert (s.run_id, s.region, c.run_id, c.region, c.all_project) == ('r1', 'us-west-2', 'r1', 'us-west-2', False)
    assert {f.name for f in fields(InstanceArguments)} == set(launch_instance.__code__.co_varnames[:launch_instance.__code__.co_argcount])
    help_ = {f.name: f.metadata['help'] for f in fields(InstanceArguments)}
    assert all(t in help_['instance_type'] for t in ('trn1.2xlarge', 'trn1n.32xlarge', 'trn2.3xlarge', 'trn2.48xlarge', 'trn2u.48xlarge'))
