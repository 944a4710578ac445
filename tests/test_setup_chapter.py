"""The checks that used to sit in the setup chapter (nbs/instance/01_setup.ipynb), against a real moto_server.

The chapter shows each step once and ends on its value; the edge cases and exact values it used to assert
with `test_eq`/`test_fail` live here, in the chapter's order.
"""
import base64, inspect, subprocess, sys
from dataclasses import fields
from datetime import timedelta
from pathlib import Path

import boto3, pytest
from botocore.exceptions import ClientError

from trn_tutorials.core import UsageError
from trn_tutorials.instance import (InstanceArguments, StatusArguments, caller_ip, ensure_key_pair, find_instance,
                                    find_instances, guard_user_data, launch_instance, launch_subnets, ssh_cidr,
                                    wait_for_ssh)
from trn_tutorials.aws import aws_errors, aws_region, check_run_id, new_run_id, run_tags, tag_filters
from trn_tutorials.dlami import find_ami
from local_services import MY_IP, free_port


def test_run_ids():
    rid = new_run_id()
    assert check_run_id(rid) == rid
    assert tag_filters('r1')[1] == {'Name': 'tag:run-id', 'Values': ['r1']}
    assert len(tag_filters()) == 1
    with pytest.raises(UsageError, match="use letters, digits"): check_run_id('my run')


def test_aws_errors():
    quota = ClientError({'Error': {'Code': 'VcpuLimitExceeded', 'Message': 'You have requested more vCPU capacity than your current '
                                   'vCPU limit of 0 allows for the instance bucket that the specified instance type belongs to.'}}, 'RunInstances')
    def _raise(e):
        with aws_errors('eu-west-1'): raise e
    with pytest.raises(UsageError, match="Service Quotas"): _raise(quota)
    with pytest.raises(UsageError) as e: _raise(ClientError({'Error': {'Code': 'Weird', 'Message': 'two\n lines'}}, 'RunInstances'))
    assert "(Weird): two lines" in str(e.value)
    assert aws_region('eu-north-1') == 'eu-north-1'


def test_find_ami(moto_server):
    image = find_ami(instance_type='trn1.2xlarge')
    assert (image['found_by'], image['sdk'], image['venv']) == ('filter', '2.31.1', '/opt/aws_neuronx_venv_pytorch_2_9')
    assert image['name'] == 'Deep Learning AMI Neuron PyTorch 2.9 (Ubuntu 24.04) 20260812'
    assert find_ami(ami=image['id'])['found_by'] == 'given'
    with pytest.raises(UsageError, match="leave --ami out"): find_ami(ami='ami-0123456789abcdef0')
    trn2 = find_ami(instance_type='trn2.48xlarge')
    assert (trn2['name'], trn2['venv']) == ('Deep Learning AMI Neuron torch-neuronx 2.14.0 (Ubuntu 24.04) 20261019',
                                            '/opt/aws_neuronx_venv_torch_neuronx_2_14_0')


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
    import trn_tutorials.instance as i
    from trn_tutorials.cli import command
    from trn_tutorials.core import field_help
    assert dataclasses.is_dataclass(StatusArguments) and StatusArguments.__module__ == 'trn_tutorials.instance'
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


def _cells(name):
    import json
    return json.loads((Path(__file__).resolve().parents[1]/'nbs/instance'/name).read_text())['cells']

def _flags(c): return {l.split('|', 1)[1].split()[0] for l in ''.join(c['source']).splitlines() if l.startswith('#|') and l[2:].strip()}

def _out(c): return ''.join(''.join(o.get('text', '')) + ''.join(o.get('data', {}).get('text/plain', '')) for o in c.get('outputs', []))

def longest_unused_run(cells) -> int:
    "The longest run of exported cells with no visible, non-exported code cell between them."
    run = longest = 0
    for c in cells:
        if c['cell_type'] != 'code': continue
        f = _flags(c)
        if f & {'export', 'exports'}: run += 1; longest = max(longest, run)
        elif not f & {'hide', 'default_exp'} and 'import' not in ''.join(c['source']).split('\n')[0]: run = 0
    return longest

@pytest.mark.parametrize('name, shows', [('01_setup.ipynb', "Instance(instance_id='i-"), ('02_ssh.ipynb', 'ssh -L 8888:localhost:8888 -i ~/.ssh/')])
def test_chapters_show_their_result_first(name, shows):
    "Each chapter opens with its step working: the CLI line, then the call's stored output within the first ten cells."
    cells = _cells(name)
    assert ''.join(cells[0]['source']).startswith('# ') and '> **Where:** your laptop' in ''.join(cells[2]['source'])
    assert 'trn-tutorials ' in ''.join(cells[2]['source'])   # the command line
    assert any(shows in _out(c) for c in cells[:10]), name
    assert longest_unused_run(cells) <= 4
