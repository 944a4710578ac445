"""Checks of `trn_tutorials.instance.ec2` (nbs/instance/01_setup.ipynb) against a real moto_server (AWS APIs on 127.0.0.1 through
AWS_ENDPOINT_URL): launch, describe and cleanup of a run; a key pair never outlives a key file that could not be written;
`--my_ip` must be one public host address; every number the AWS and SageMaker entry points take is checked (type, finite,
range) before any call. The edge cases and exact values the setup chapter used to assert live here, in the chapter's order.

moto starts no machines, so launches here use `wait_ssh=False`; `wait_for_ssh` is tested against a real sshd in
test_ssh.py. Addresses are from the documentation range 203.0.113.0/24. "Cannot write" is made real: a key_dir under a
file, a read-only file system (a tmpfs mounted ro), and a file-size limit (RLIMIT_FSIZE) that lets the writability probe (an
empty file) pass but makes writing the key itself fail with EFBIG - the failure between the check and the write.
"""
import base64, http.server, inspect, os, stat, subprocess, sys, threading
from dataclasses import fields
from datetime import timedelta
from pathlib import Path

import boto3, pytest

from trn_tutorials.instance import ec2 as I
from trn_tutorials.instance import jupyter as J
from trn_tutorials.instance import ssh as S
from trn_tutorials.core.options import UsageError, parse_args
from trn_tutorials.instance.ec2 import (InstanceArguments, StatusArguments, caller_ip, ensure_key_pair, find_instance,
                                    find_instances, guard_user_data, launch_instance, launch_subnets, ssh_cidr,
                                    wait_for_ssh)
from trn_tutorials.aws import new_run_id, run_tags, tag_filters
from trn_tutorials.instance.dlami import find_ami
from trn_tutorials.instance.cleanup import CleanupArguments, cleanup, leftovers
from trn_tutorials.sagemaker.endpoint import deploy, endpoint_requests
from trn_tutorials.instance.jupyter import TunnelArguments
from trn_tutorials.sagemaker.training_job import JobArguments, wait_job
from trn_tutorials.sagemaker.job_image import sm_cost
from local_services import LATEST_DLAMI, MY_IP, TRN1_DLAMI, TRN2_DLAMI, free_port, one_line


def test_launch_subnets(moto_server):
    assert [s['AvailabilityZone'] for s in launch_subnets('trn1.2xlarge')] == ['us-east-1c', 'us-east-1f']
    with pytest.raises(UsageError, match="not offered in eu-west-1"): launch_subnets('trn1.2xlarge', 'eu-west-1')
    with pytest.raises(UsageError, match="use one of trn1.2xlarge"): launch_subnets('trn9.xlarge')


def test_ssh_cidr_and_caller_ip():
    assert ssh_cidr('203.0.113.7') == '203.0.113.7/32'
    assert ssh_cidr(' 203.0.113.7/32 ') == '203.0.113.7/32'
    with pytest.raises(UsageError, match="to one address"): ssh_cidr('0.0.0.0/0')
    with pytest.raises(UsageError, match="IPv6"): ssh_cidr('2001:db8::1')
    with pytest.raises(UsageError, match="pass --my_ip"): caller_ip(f'http://127.0.0.1:{free_port()}/', timeout=2)


def test_ensure_key_pair(moto_server, tmp_path):
    rid = new_run_id()
    kp, created = ensure_key_pair(f'demo-{rid}', key_dir=tmp_path, tags=run_tags(rid))
    assert (kp.name, created, oct(kp.stat().st_mode & 0o777)) == (f'demo-{rid}.pem', True, '0o400')
    assert ensure_key_pair(f'demo-{rid}', key_dir=tmp_path) == (kp, False)            # asking again reuses it
    with pytest.raises(UsageError, match="pass --key_dir"): ensure_key_pair(f'demo-{rid}', key_dir=tmp_path/'elsewhere')
    (tmp_path/'mine.pem').write_text('not a key pair of this region\n')
    with pytest.raises(UsageError, match="refusing to overwrite"): ensure_key_pair('mine', key_dir=tmp_path)
    assert (tmp_path/'mine.pem').read_text() == 'not a key pair of this region\n'


def test_guard_user_data():
    assert 'shutdown -h +480 ' in guard_user_data(8)
    assert 'shutdown -h +90 ' in guard_user_data(1.5)
    assert guard_user_data(0) == ''
    with pytest.raises(UsageError, match="is out of range"): guard_user_data(-1)


def test_wait_for_ssh_closed_port():
    closed = free_port()
    with pytest.raises(UsageError, match=f"no SSH answer from 127.0.0.1:{closed}"): wait_for_ssh('127.0.0.1', closed, timeout=1)


def test_arguments_match_the_functions():
    sig = inspect.signature(launch_instance).parameters
    assert [f.name for f in fields(InstanceArguments)] == list(sig)
    assert {f.name: f.default for f in fields(InstanceArguments)} == {k: p.default for k, p in sig.items()}
    assert [f.name for f in fields(StatusArguments)] == list(inspect.signature(find_instances).parameters)[:3]


def test_status_arguments_are_a_plain_dataclass():
    "`StatusArguments` is defined in `instance` as it reads: `find_instances`' first three parameters, with their defaults and help."
    import dataclasses, typing
    import trn_tutorials.instance.ec2 as i
    from trn_tutorials.cli import command
    from trn_tutorials.core.options import field_help
    assert dataclasses.is_dataclass(StatusArguments) and StatusArguments.__module__ == 'trn_tutorials.instance.ec2'
    assert 'StatusArguments' in i.__all__ and not hasattr(i, '__getattr__')
    sig = inspect.signature(find_instances).parameters
    assert {f.name: f.default for f in fields(StatusArguments)} == {k: sig[k].default for k in ('run_id', 'region', 'key_dir')}
    assert typing.get_type_hints(StatusArguments) == {'run_id': str | None, 'region': str | None, 'key_dir': str}
    assert field_help(StatusArguments) == {'run_id': "one run's id; `None` = every instance of this project",
                                           'region': 'AWS region; default: your AWS configuration', 'key_dir': 'folder holding the private keys'}
    assert command('status')[1] == [StatusArguments]
    r = subprocess.run([sys.executable, '-c', "import sys; from trn_tutorials.cli import main; sys.argv = ['trn-tutorials', 'status', '--help']; main()"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--run_id RUN_ID, --run-id RUN_ID" in r.stdout and '(default: ~/.ssh)' in r.stdout, r.stderr[-2000:]


def test_the_chapters_launch(moto_server, tmp_path, monkeypatch):
    "The launch as the chapter's rehearsal makes it (default key folder ~/.ssh, in a temporary HOME), and what it shows."
    monkeypatch.setenv('HOME', str(tmp_path))
    image = find_ami(instance_type='trn1.2xlarge')
    inst = launch_instance('trn1.2xlarge', my_ip=MY_IP, wait_ssh=False)
    ec2 = boto3.client('ec2', region_name=inst.region)
    sg = ec2.describe_security_groups(Filters=tag_filters(inst.run_id))['SecurityGroups'][0]
    assert [(p['IpProtocol'], p['FromPort'], p['ToPort'], [r['CidrIp'] for r in p['IpRanges']]) for p in sg['IpPermissions']] == \
           [('tcp', 22, 22, ['203.0.113.7/32'])]
    attr = lambda a: ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute=a)
    assert attr('instanceInitiatedShutdownBehavior')['InstanceInitiatedShutdownBehavior']['Value'] == 'terminate'
    assert 'shutdown -h +480 ' in base64.b64decode(attr('userData')['UserData']['Value']).decode()
    vol = ec2.describe_volumes(Filters=tag_filters(inst.run_id))['Volumes'][0]
    assert (vol['Size'], vol['VolumeType']) == (512, 'gp3')   # the Neuron setup guides' minimum root volume
    # the key path as the user names its folder (~/.ssh/...), the file itself in the expanded folder, mode 0400
    assert inst.key_path == f'~/.ssh/trn-tutorials-{inst.run_id}.pem'
    key = Path(inst.key_path).expanduser()
    assert key.parent == tmp_path/'.ssh' and oct(key.stat().st_mode & 0o777) == '0o400'
    assert inst.image_id == image['id']
    # found again by its tags
    assert [i.instance_id for i in find_instances()] == [inst.instance_id]
    assert find_instance(inst.run_id).instance_id == inst.instance_id
    assert inst.summary(inst.launch_time + timedelta(hours=2)).endswith('2.0 h  $2.68')
    assert round(inst.cost(inst.launch_time + timedelta(hours=1)), 2) == 1.34
    with pytest.raises(UsageError, match="start one with `trn-tutorials up`"): find_instance('no-such-run')


def test_mistakes_create_nothing(moto_server, tmp_path):
    with pytest.raises(UsageError, match="use one of trn1.2xlarge"): launch_instance('trn1.4xlarge', my_ip=MY_IP)
    with pytest.raises(UsageError, match="use 120 or more"): launch_instance(volume_gb=100, my_ip=MY_IP)
    with pytest.raises(UsageError, match="not offered in eu-west-1"): launch_instance(region='eu-west-1', my_ip=MY_IP, key_dir=tmp_path)
    assert boto3.client('ec2', region_name='eu-west-1').describe_key_pairs()['KeyPairs'] == []


def tags_of(resource) -> dict:
    return {t['Key']: t['Value'] for t in resource.get('Tags', [])}


def test_launch_describe_cleanup(moto_server, tmp_path):
    ec2 = boto3.client('ec2')
    # made by hand, without tags: cleanup must leave them alone
    vpc = ec2.describe_vpcs(Filters=[{'Name': 'is-default', 'Values': ['true']}])['Vpcs'][0]['VpcId']
    own_sg = ec2.create_security_group(GroupName='users-own', Description='not ours', VpcId=vpc)['GroupId']
    ec2.create_key_pair(KeyName='users-own-key')

    inst = launch_instance('trn1.2xlarge', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False, max_hours=8)
    other = launch_instance('trn1.2xlarge', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False)
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
    assert [r['CidrIp'] for r in rule['IpRanges']] == [f'{MY_IP}/32']
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
    inst = launch_instance('trn1.32xlarge', region='us-west-2', my_ip=f'{MY_IP}/32', key_dir=str(tmp_path), wait_ssh=False,
                  volume_gb=120, max_hours=0, run_id='my-run.1')
    ec2 = boto3.client('ec2', region_name='us-west-2')
    assert (inst.run_id, inst.instance_type, inst.region) == ('my-run.1', 'trn1.32xlarge', 'us-west-2')
    ud = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute='userData')['UserData']
    assert not ud.get('Value')    # max_hours=0: no guard
    (vol,) = ec2.describe_volumes(Filters=tag_filters('my-run.1'))['Volumes']
    assert vol['Size'] == 120
    assert cleanup('my-run.1', region='us-west-2', key_dir=str(tmp_path), known_hosts=str(tmp_path/'kh')).clean


def test_trn1_launch_picks_the_pytorch_image(moto_server, tmp_path):
    inst = launch_instance('trn1.2xlarge', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False, max_hours=1)
    assert inst.image_id == TRN1_DLAMI != LATEST_DLAMI
    assert cleanup(inst.run_id, key_dir=str(tmp_path), known_hosts=str(tmp_path/'kh')).clean


def test_trn2_launch_picks_the_torchneuron_image(moto_server, tmp_path):
    inst = launch_instance('trn2.48xlarge', region='us-east-2', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False, max_hours=1)
    assert inst.image_id == TRN2_DLAMI
    assert cleanup(inst.run_id, region='us-east-2', key_dir=str(tmp_path), known_hosts=str(tmp_path/'kh')).clean


def test_type_not_offered_creates_nothing(moto_server, tmp_path):
    with pytest.raises(UsageError) as e: launch_instance(region='eu-west-1', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False)
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
    with pytest.raises(UsageError) as e: launch_instance(region='us-west-2', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False)
    assert 'aws ec2 create-default-vpc --region us-west-2' in one_line(e)
    assert ec2.describe_key_pairs()['KeyPairs'] == [] and list(tmp_path.iterdir()) == []


def test_key_pairs(moto_server, tmp_path):
    ec2 = boto3.client('ec2')
    ec2.create_key_pair(KeyName='exists-remotely')
    with pytest.raises(UsageError) as e: launch_instance(key_name='exists-remotely', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False)
    assert 'exists in us-east-1 but its private key is not at' in one_line(e)
    (tmp_path/'only-local.pem').write_text('precious\n')
    with pytest.raises(UsageError) as e: launch_instance(key_name='only-local', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False)
    assert 'refusing to overwrite' in one_line(e)
    assert (tmp_path/'only-local.pem').read_text() == 'precious\n'
    assert ec2.describe_security_groups(Filters=tag_filters())['SecurityGroups'] == []   # nothing created on the way
    # reuse: a pair of the user's with its key file where we look
    (tmp_path/'exists-remotely.pem').write_text('the user keeps this\n')
    inst = launch_instance(key_name='exists-remotely', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False)
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
        with pytest.raises(UsageError) as e: launch_instance(**{'my_ip': MY_IP, 'key_dir': str(tmp_path), 'wait_ssh': False, **kw})
        assert msg in one_line(e), kw
    with pytest.raises(UsageError) as e: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False)
    assert 'cannot reach AWS at' in one_line(e)
    with pytest.raises(UsageError) as e: cleanup(key_dir=str(tmp_path))
    assert 'pass --run_id RUN' in one_line(e)


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
                                            '--my_ip', MY_IP, '--volume_gb', '300'])
    assert (a.instance_type, a.max_hours, a.wait_ssh, a.my_ip, a.volume_gb, a.region) == ('trn1.32xlarge', 2.5, False, MY_IP, 300, None)
    s, c = parse_args([StatusArguments, CleanupArguments], ['--run_id', 'r1', '--region', 'us-west-2', '--all_project', 'false'])
    assert (s.run_id, s.region, c.run_id, c.region, c.all_project) == ('r1', 'us-west-2', 'r1', 'us-west-2', False)
    assert {f.name for f in fields(InstanceArguments)} == set(launch_instance.__code__.co_varnames[:launch_instance.__code__.co_argcount])
    help_ = {f.name: f.metadata['help'] for f in fields(InstanceArguments)}
    assert all(t in help_['instance_type'] for t in ('trn1.2xlarge', 'trn1n.32xlarge', 'trn2.3xlarge', 'trn2.48xlarge', 'trn2u.48xlarge'))


# ----------------------------------------------------------------------------------------------------
# Issue 15, the AWS side: a key pair never outlives a key file that could not be written, `--my_ip` must be one public
# host address, and every number the AWS and SageMaker entry points take is checked (type, finite, range) before any call.
#
# Against a real moto_server (AWS_ENDPOINT_URL). "Cannot write" is made real: a key_dir under a file, a read-only
# file system (a tmpfs mounted ro), and a file-size limit (RLIMIT_FSIZE) that lets the writability probe (an empty file) pass but
# makes writing the key itself fail with EFBIG - the failure between the check and the write.
# (was test_aws_values.py)

TRN = str(Path(sys.executable).parent/'trn-tutorials')


def nothing_made(region='us-east-1'):
    ec2 = boto3.client('ec2', region_name=region)
    assert ec2.describe_key_pairs()['KeyPairs'] == []
    assert ec2.describe_security_groups(Filters=tag_filters())['SecurityGroups'] == []
    assert [i for r in ec2.describe_instances()['Reservations'] for i in r['Instances']] == []


# ------------------------------------------------------------------------------------------------ the key pair
def test_key_dir_under_a_file_makes_nothing(moto_server, tmp_path):
    (tmp_path/'notes.txt').write_text('mine\n')
    with pytest.raises(UsageError) as e: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path/'notes.txt'/'keys'), wait_ssh=False)
    assert 'lies under the file' in one_line(e) and '--key_dir' in one_line(e)
    with pytest.raises(UsageError) as e: ensure_key_pair('my-key', key_dir=str(tmp_path/'notes.txt'))
    assert 'is a file, not a folder' in one_line(e)
    nothing_made()
    assert sorted(p.name for p in tmp_path.iterdir()) == ['notes.txt']


def _cli(args, env, preexec=None, code='') -> subprocess.CompletedProcess:
    "`trn-tutorials ARGS` in a fresh Python; `code` runs after the imports, just before the command."
    prog = f"from trn_tutorials.cli import main\n{code}\nmain()"   # main reads the arguments after -c
    return subprocess.run([sys.executable, '-c', prog, *args], capture_output=True, text=True, env=env, timeout=120, preexec_fn=preexec,
                          cwd='/')


@pytest.fixture
def read_only_dir(tmp_path):
    "A folder on a read-only file system (a tmpfs mounted ro): not writable, even by root. Needs the right to mount."
    d = tmp_path/'ro'; d.mkdir()
    r = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', str(d)], capture_output=True, text=True)
    if r.returncode: pytest.skip(f'cannot mount a read-only tmpfs here: {r.stderr.strip()}')
    yield d
    subprocess.run(['umount', str(d)], check=True)


def test_key_dir_not_writable_makes_nothing(moto_server, read_only_dir):
    "`up` with a key_dir on a read-only file system: refused before any AWS call (the CLI, in a subprocess)."
    r = _cli(['up', '--my_ip', MY_IP, '--key_dir', str(read_only_dir/'keys'), '--wait_ssh', 'false'], dict(os.environ))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0] == (f"trn-tutorials up: error: --key_dir {read_only_dir}/keys is not writable (a read-only file system at "
                        f"{read_only_dir}): pass a folder you can write to")
    nothing_made()
    # a key pair of the user's, named with --key_name, is checked the same way before it is created
    with pytest.raises(UsageError) as e: ensure_key_pair('named', key_dir=str(read_only_dir))
    assert 'is not writable (a read-only file system' in one_line(e)
    nothing_made()


LIMIT_WRITES = ("import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                "resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))")   # after the imports: a key (~400 bytes) no longer fits


def test_key_write_fails_after_the_check_rolls_the_pair_back(moto_server, tmp_path):
    keys = tmp_path/'keys'
    r = _cli(['up', '--my_ip', MY_IP, '--key_dir', str(keys), '--run_id', 'efbig', '--wait_ssh', 'false'], dict(os.environ),
             code=LIMIT_WRITES)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0] == (f"trn-tutorials up: error: could not write the private key {keys}/trn-tutorials-efbig.pem (file too large), "
                        "so the new key pair 'trn-tutorials-efbig' was deleted again: pass a --key_dir you can write to, "
                        "with free space, and retry")
    nothing_made()
    assert list(keys.iterdir()) == []   # no partial key, no temporary file
    # the same launch, with room to write, works: nothing was left to get in its way
    inst = launch_instance(my_ip=MY_IP, key_dir=str(keys), run_id='efbig', wait_ssh=False)
    assert Path(inst.key_path).read_text().startswith('-----BEGIN') and oct(Path(inst.key_path).stat().st_mode & 0o777) == '0o400'


def test_interrupted_key_write_rolls_the_pair_back(moto_server, tmp_path, monkeypatch):
    "Ctrl-C while the key is written: the pair is deleted and the interrupt goes on."
    def interrupted(path, material): path.write_text(material[:10]); raise KeyboardInterrupt
    monkeypatch.setattr(I, '_write_key', interrupted)
    with pytest.raises(KeyboardInterrupt): ensure_key_pair('half', key_dir=str(tmp_path))
    assert boto3.client('ec2').describe_key_pairs()['KeyPairs'] == []


def test_a_file_that_takes_the_name_is_not_overwritten(moto_server, tmp_path, monkeypatch):
    real = I._write_key
    def race(path, material): path.write_text('precious\n'); real(path, material)
    monkeypatch.setattr(I, '_write_key', race)
    with pytest.raises(UsageError) as e: ensure_key_pair('raced', key_dir=str(tmp_path))
    assert 'a file took its name meanwhile' in one_line(e) and "'raced' was deleted again" in one_line(e)
    assert (tmp_path/'raced.pem').read_text() == 'precious\n' and [p.name for p in tmp_path.iterdir()] == ['raced.pem']
    assert boto3.client('ec2').describe_key_pairs()['KeyPairs'] == []


# ------------------------------------------------------------------------------------------------ --my_ip
@pytest.mark.parametrize('ip,what', [('0.0.0.0', 'unspecified'), ('0.0.0.0/32', 'unspecified'), ('192.168.1.20', 'private'),
    ('10.0.0.5', 'private'), ('172.20.1.1', 'private'), ('100.64.3.4', 'carrier-grade NAT'), ('127.0.0.1', 'loopback'),
    ('169.254.169.254', 'link-local'), ('239.1.2.3', 'multicast'), ('255.255.255.255', 'broadcast'), ('250.1.1.1', 'reserved')])
def test_my_ip_not_a_public_host(ip, what):
    with pytest.raises(UsageError) as e: ssh_cidr(ip)
    assert one_line(e).startswith(f'--my_ip {ip} is ') and what in one_line(e)
    assert 'pass your public IPv4 address (https://checkip.amazonaws.com shows it)' in one_line(e)
    with pytest.raises(UsageError): InstanceArguments(my_ip=ip)


@pytest.mark.parametrize('ip', [MY_IP, '192.0.2.10', '198.51.100.2/32', '8.8.8.8', '100.63.255.255', '172.32.0.1'])
def test_public_and_documentation_addresses_pass(ip):
    assert ssh_cidr(ip) == ip.split('/')[0] + '/32'


# ------------------------------------------------------------------------------------------------ numbers

NAN, INF = float('nan'), float('inf')


@pytest.fixture
def no_aws(monkeypatch):
    "boto3 pointed at a closed port: a call that reached it would fail with 'cannot reach AWS', not with the expected line."
    monkeypatch.setenv('AWS_ENDPOINT_URL', f'http://127.0.0.1:{free_port()}')
    monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'testing'); monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'testing')
    monkeypatch.setenv('AWS_DEFAULT_REGION', 'us-east-1')


@pytest.mark.parametrize('cls,kw,says', [
    (InstanceArguments, dict(max_hours='8'), "--max_hours '8' is a str, not a number: pass a number (e.g. --max_hours 8)"),
    (InstanceArguments, dict(max_hours=NAN), '--max_hours nan is not a finite number'),
    (InstanceArguments, dict(max_hours=-1), '--max_hours -1 is out of range: use a number in (0, 720], or 0 (no cost guard)'),
    (InstanceArguments, dict(max_hours=721), '--max_hours 721 is out of range'),
    (InstanceArguments, dict(volume_gb=100), '--volume_gb 100 is too small for the DLAMI (its snapshot is about 100 GB): use 120 or more'),
    (InstanceArguments, dict(volume_gb=20000), '--volume_gb 20000 is out of range: use 120 to 16384'),
    (InstanceArguments, dict(volume_gb=256.0), '--volume_gb 256.0 is a float, not a whole number'),
    (InstanceArguments, dict(volume_gb=True), '--volume_gb True is a bool'),
    (InstanceArguments, dict(timeout=0), '--timeout 0 is out of range: use a number in (0, 86400]'),
    (InstanceArguments, dict(timeout=INF), '--timeout inf is not a finite number'),
    (TunnelArguments, dict(local_port=70000), '--local_port 70000 is out of range: use 1 to 65535'),
    (TunnelArguments, dict(remote_port=0), '--remote_port 0 is out of range'),
    (TunnelArguments, dict(port='22'), "--port '22' is a str"),
    (TunnelArguments, dict(timeout=-5), '--timeout -5 is out of range'),
    (CleanupArguments, dict(timeout=-1), '--timeout -1 is out of range: use a number in (0, 86400]'),
    (CleanupArguments, dict(timeout=NAN), '--timeout nan is not a finite number'),
    (JobArguments, dict(instance_count=0), '--instance_count 0 is out of range: use 1 or more'),
    (JobArguments, dict(max_run_hours=0), '--max_run_hours 0 is out of range: use a number in (0, 672]'),
    (JobArguments, dict(max_run_hours=673), '--max_run_hours 673 is out of range'),
    (JobArguments, dict(spot=True, max_wait_hours=INF), '--max_wait_hours inf is not a finite number'),
    (JobArguments, dict(volume_gb=0), '--volume_gb 0 is out of range: use 1 to 16384'),
    (JobArguments, dict(poll_s=0), '--poll_s 0 is out of range: use a number in (0, 3600]'),
])
def test_argument_numbers_refused_at_construction(cls, kw, says):
    with pytest.raises(UsageError) as e: cls(**kw)
    assert one_line(e).startswith(says)
    assert any(w in one_line(e) for w in (': use ', ': pass '))


def test_good_numbers_pass_and_ints_become_floats():
    a = InstanceArguments(max_hours=0, volume_gb=120, timeout=60)
    assert (a.max_hours, type(a.max_hours), a.volume_gb) == (0.0, float, 120)
    assert InstanceArguments(max_hours=720).max_hours == 720.0
    assert TunnelArguments(local_port=1, remote_port=65535).local_port == 1
    j = JobArguments(spot=True, max_wait_hours=4, max_run_hours=672)
    assert (j.max_wait_hours, j.max_run_hours) == (4.0, 672.0) and JobArguments().max_wait_hours is None


def test_the_cli_parser_refuses_in_one_line(capsys):
    for types, argv, says in [([InstanceArguments], ['--max_hours', 'nan'], '--max_hours nan is not a finite number'),
                              ([InstanceArguments], ['--my_ip', '0.0.0.0'], '--my_ip 0.0.0.0 is unspecified'),
                              ([J.TunnelArguments], ['--local_port', '70000'], '--local_port 70000 is out of range'),
                              ([CleanupArguments], ['--timeout', '-1'], '--timeout -1.0 is out of range')]:
        with pytest.raises(SystemExit) as e: parse_args(types, argv, prog='trn-tutorials x')
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and err.startswith(f'trn-tutorials x: error: {says}') and err.endswith('(see --help)'), err


def test_functions_refuse_before_any_aws_call(no_aws, tmp_path):
    key = tmp_path/'k.pem'; key.write_text('x'); key.chmod(0o400)
    cases = [
        (lambda: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path), max_hours=NAN), '--max_hours nan is not a finite number'),
        (lambda: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path), volume_gb=INF), '--volume_gb inf is a float'),
        (lambda: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path), timeout=-1), '--timeout -1 is out of range'),
        (lambda: launch_instance(my_ip='192.168.1.20', key_dir=str(tmp_path)), '--my_ip 192.168.1.20 is a private address'),
        (lambda: launch_instance(my_ip=MY_IP, key_dir=str(tmp_path/'k.pem')), '--key_dir'),
        (lambda: guard_user_data(-0.5), '--max_hours -0.5 is out of range'),
        (lambda: guard_user_data('8'), "--max_hours '8' is a str"),
        (lambda: wait_for_ssh('127.0.0.1', 22, timeout=NAN), '--timeout nan is not a finite number'),
        (lambda: wait_for_ssh('127.0.0.1', 0), '--port 0 is out of range'),
        (lambda: caller_ip(timeout=0), '--timeout 0 is out of range'),
        (lambda: cleanup('r1', timeout=-1), '--timeout -1 is out of range'),
        (lambda: cleanup('r1', timeout='600'), "--timeout '600' is a str"),
        (lambda: J.open_jupyter('203.0.113.7', str(key), local_port=70000), '--local_port 70000 is out of range'),
        (lambda: J.open_jupyter('203.0.113.7', str(key), timeout=INF), '--timeout inf is not a finite number'),
        (lambda: S.Tunnel('203.0.113.7', str(key), remote_port=-1), '--remote_port -1 is out of range'),
        (lambda: J.start_jupyter('203.0.113.7', str(key), port=65536), '--port 65536 is out of range'),
        (lambda: S.ssh_command('203.0.113.7', str(key), local_port=8888.5), '--local_port 8888.5 is a float'),
        (lambda: sm_cost('ml.trn1.2xlarge', -60), '--seconds -60 is out of range: use 0 or more'),
        (lambda: sm_cost('ml.trn1.2xlarge', NAN), '--seconds nan is not a finite number'),
        (lambda: sm_cost('ml.trn1.2xlarge', 60, 0), '--count 0 is out of range'),
        (lambda: wait_job('some-job', poll_s=0), '--poll_s 0 is out of range'),
        (lambda: deploy(str(tmp_path), instance_count=0), '--instance_count 0 is out of range: use 1 or more'),
        (lambda: endpoint_requests('e', 's3://b/k', 'arn', instance_count=1.5), '--instance_count 1.5 is a float'),
    ]
    for call, says in cases:
        with pytest.raises(UsageError) as e: call()
        assert one_line(e).startswith(says), (says, one_line(e))
    assert list(tmp_path.iterdir()) == [key]
    assert sm_cost('ml.trn1.2xlarge', 0) == 0 and sm_cost('ml.trn1.2xlarge', 3600, 2) == 3.08 and sm_cost('ml.trn1.32xlarge', 60) is None
