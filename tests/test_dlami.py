"""Checks of `trn_tutorials.instance.dlami`: which Neuron DLAMI a reader gets (found by SSM parameter, name and SDK filters, or given), and what happens when AWS deprecates it or the instance lacks its environment.

- Deprecation: AWS hides a deprecated image from `DescribeImages` unless the request names its id or sets
  `IncludeDeprecated`, and still launches it by id. moto 5.2 does not model deprecation (no `EnableImageDeprecation`,
  no `DeprecationTime`, `IncludeDeprecated` ignored), so `AwsDeprecation` does what AWS does on the client side of the
  real moto_server, through botocore's event system on the default boto3 session: it records each `DescribeImages`
  request and, in the parsed answer, marks the chosen images with a `DeprecationTime` and drops the deprecated ones a
  request did not ask for. The library is not touched.
- The manifest's compiler pair: `DLAMI['trn1'].neuron` equals the Neuron 2.31 pair in tools/environments.toml and
  is what the DLAMI chapter (nbs/instance/01a_dlami.ipynb) shows.
- The module: `trn_tutorials.instance.dlami` loads without `trn_tutorials.instance.ec2`, which re-exports its names (cli, tests).
- An instance without the environment (a Trn1 from a Neuron 2.32+ DLAMI): one line naming the fix, before anything
  starts, against a real OpenSSH sshd on 127.0.0.1.
"""
import dataclasses, json, subprocess, sys
from datetime import datetime, timezone
from pathlib import Path

import boto3, pytest

from trn_tutorials.core.options import UsageError
from trn_tutorials.backends import instance_family
from trn_tutorials.instance.dlami import DLAMI, Dlami, dlami_for, find_ami
from trn_tutorials.instance.ec2 import launch_instance
from trn_tutorials.aws import tag_filters
from local_services import AMIS, MY_IP, NO_XLA_DLAMI, TRN1_DLAMI, TRN2_DLAMI, free_port, one_line, procs_mentioning

ROOT = Path(__file__).resolve().parents[1]
PAIR = ('torch-neuronx==2.9.0.2.15.32035', 'neuronx-cc==2.26.6360.0')   # the Neuron 2.31 release manifest's pair
PAST, FUTURE = '2026-11-01T00:00:00.000Z', '2028-08-12T00:00:00.000Z'    # a deprecation that happened, one still to come
SDK_231 = [a['ami_id'] for a in AMIS if 'Neuron SDK 2.31' in a.get('description', '')]
OLDER_PT = 'ami-0dl4m1pt2310707'   # the older SDK 2.31 PyTorch 2.9 DLAMI


class AwsDeprecation:
    "AWS's handling of deprecated images, applied to the answers of the real moto_server (see the module docstring)."
    def __init__(self, times: dict):
        self.times, self.requests = dict(times), []   # image id -> DeprecationTime; every DescribeImages request's parameters
        self.now = datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.000Z')
        ev = boto3.DEFAULT_SESSION.events
        ev.register('before-parameter-build.ec2.DescribeImages', self._request)
        ev.register('after-call.ec2.DescribeImages', self._answer)

    def _request(self, params, **kw): self.requests.append(dict(params))

    def _answer(self, parsed, **kw):
        req, shown = self.requests[-1], []
        for im in parsed.get('Images', []):
            t = self.times.get(im['ImageId'])
            if t: im['DeprecationTime'] = t
            if t and t <= self.now and not (req.get('IncludeDeprecated') or req.get('ImageIds')): continue   # hidden, as AWS does
            shown.append(im)
        parsed['Images'] = shown


@pytest.fixture
def deprecate(moto_server, monkeypatch):
    "`deprecate({ami: DeprecationTime})`: a fresh default boto3 session whose DescribeImages answers follow AWS's deprecation rules."
    monkeypatch.setattr(boto3, 'DEFAULT_SESSION', None)   # restored afterwards: other tests keep their session
    boto3.setup_default_session()
    return AwsDeprecation


def test_asks_for_deprecated_images(deprecate):
    "Every DescribeImages that find_ami makes (filters, an SSM-resolved id, a given id) includes deprecated images."
    aws = deprecate({})
    assert find_ami()['id'] == TRN1_DLAMI
    ssm = boto3.client('ssm')
    ssm.put_parameter(Name='/trn-tutorials-test/pytorch-2.9/image_id', Value=OLDER_PT, Type='String')
    assert find_ami(dlami=dataclasses.replace(DLAMI['trn1'], ssm='/trn-tutorials-test/pytorch-2.9/image_id'))['found_by'] == 'ssm'
    assert find_ami(ami=OLDER_PT)['found_by'] == 'given'
    assert len(aws.requests) == 3 and all(r.get('IncludeDeprecated') is True for r in aws.requests), aws.requests


def test_deprecated_dlami_found_and_reported(deprecate):
    "AWS deprecated every Neuron 2.31 DLAMI: a Trn1 still gets the newest 2.31 PyTorch image, reported as deprecated."
    deprecate({i: PAST for i in SDK_231})
    im = find_ami(instance_type='trn1.2xlarge')
    assert (im['id'], im['found_by'], im['deprecated']) == (TRN1_DLAMI, 'filter', PAST)


def test_not_deprecated_preferred(deprecate):
    "With a deprecated and a current 2.31 image, the current one wins even if older; a future DeprecationTime is not deprecated yet."
    deprecate({TRN1_DLAMI: PAST, OLDER_PT: FUTURE})
    im = find_ami()
    assert (im['id'], im['deprecated']) == (OLDER_PT, None)
    deprecate({})   # nothing deprecated: the newest, and None
    assert find_ami()['deprecated'] is None


def test_ssm_image_deprecated(deprecate):
    "The SSM parameter names a deprecated image and nothing current exists: it is taken, and reported."
    deprecate({i: PAST for i in SDK_231})
    boto3.client('ssm').put_parameter(Name='/trn-tutorials-test/pt/image_id', Value=TRN1_DLAMI, Type='String')
    im = find_ami(dlami=dataclasses.replace(DLAMI['trn1'], ssm='/trn-tutorials-test/pt/image_id'))
    assert (im['id'], im['found_by'], im['deprecated']) == (TRN1_DLAMI, 'ssm', PAST)
    assert find_ami(ami=TRN1_DLAMI)['deprecated'] == PAST   # a given id is reported too


def test_launch_says_deprecated_in_one_line(deprecate, tmp_path, capsys):
    deprecate({i: PAST for i in SDK_231})
    inst = launch_instance('trn1.2xlarge', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False, max_hours=1)
    assert inst.image_id == TRN1_DLAMI
    out = capsys.readouterr().out.strip()
    assert '\n' not in out and out, out
    assert all(s in out for s in ('deprecated by AWS since 2026-11-01', 'still launches', 'last', DLAMI['trn1'].venv)), out


def test_current_image_launches_quietly(deprecate, tmp_path, capsys):
    deprecate({TRN1_DLAMI: FUTURE})
    launch_instance('trn1.2xlarge', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False, max_hours=1)
    assert capsys.readouterr().out == ''


def test_no_image_message_is_accurate(deprecate, tmp_path):
    "With deprecated images included, none found means deregistered (or never in that region): the line says so and names the ways on."
    ec2 = boto3.client('ec2')
    for i in SDK_231: ec2.deregister_image(ImageId=i)
    deprecate({})
    with pytest.raises(UsageError) as e: find_ami()
    msg = one_line(e)
    assert 'may have retired' not in msg and 'deprecated ones included' in msg and 'deregistered' in msg, msg
    assert 'pass --ami with an image that has /opt/aws_neuronx_venv_pytorch_2_9' in msg and all(p in msg for p in PAIR), msg
    with pytest.raises(UsageError): launch_instance('trn1.2xlarge', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False)
    assert ec2.describe_key_pairs()['KeyPairs'] == [] and list(tmp_path.iterdir()) == []
    assert ec2.describe_security_groups(Filters=tag_filters())['SecurityGroups'] == []


def _environments() -> dict:
    import tomllib
    f = ROOT/'tools/environments.toml'
    assert f.exists(), 'tools/environments.toml (the environments helper writes it) is missing'
    return tomllib.loads(f.read_text())


def test_manifest_pair():
    "One place holds the Neuron 2.31 pair: DLAMI['trn1'].neuron, equal to the rehearsal file's and shown by the DLAMI chapter."
    assert tuple(DLAMI['trn1'].neuron) == PAIR
    assert sorted(_environments()['trn1-dlami']['neuron']) == sorted(PAIR)
    chapter = json.loads((ROOT/'nbs/instance/01a_dlami.ipynb').read_text())
    text = '\n'.join(''.join(c['source']) + ''.join(''.join(o.get('text', '') or o.get('data', {}).get('text/plain', ''))
                                                   for o in c.get('outputs', [])) for c in chapter['cells'])
    assert '2.27.5334.0' not in text   # the 2.32 compiler is not paired with the 2.31 torch-neuronx
    assert all(p in text for p in PAIR)


def test_missing_venv_names_the_fix(sshd, tmp_path):
    "A Trn1 from a DLAMI without /opt/aws_neuronx_venv_pytorch_2_9: one line naming the 2.31 DLAMI (deprecated or not) or the pair; nothing starts."
    from trn_tutorials.instance import ssh as S
    from trn_tutorials.instance import jupyter as J
    work = tmp_path/'work'; work.mkdir()
    assert not Path(J.NEURON_VENV).exists()
    with pytest.raises(UsageError) as e:
        J.open_jupyter('127.0.0.1', str(sshd.key), free_port(), free_port(), user=sshd.user, port=sshd.port,
                       known_hosts=str(sshd.known_hosts), workdir=str(work))
    msg = one_line(e)
    assert msg.startswith('127.0.0.1 has no /opt/aws_neuronx_venv_pytorch_2_9'), msg
    assert all(s in msg for s in ('`trn-tutorials up`', 'Neuron 2.31 DLAMI', 'deprecated', *PAIR, 'pip.repos.neuron.amazonaws.com')), msg
    assert not (work/'.trn-tutorials').exists() and procs_mentioning(str(work)) == [] and S.LIVE == []


def test_module_apart():
    "The image lookup has its own module, which does not load the launch code."
    code = "import sys, trn_tutorials.instance.dlami; print('trn_tutorials.instance.ec2' in sys.modules)"
    assert subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.strip() == 'False'


def test_newest_by_creation_date(moto_server):
    "Of the two SDK 2.31 PyTorch 2.9 images, the newer `created` wins; the chapter shows the choice, not the timestamp."
    assert {a['ami_id'] for a in AMIS} >= {TRN1_DLAMI, OLDER_PT}
    im = find_ami(instance_type='trn1.2xlarge')
    assert (im['id'], im['created']) == (TRN1_DLAMI, '2026-08-12T00:00:00.000Z')
    assert find_ami(ami=OLDER_PT)['created'] < im['created']
    cells = json.loads((ROOT/'nbs/instance/01a_dlami.ipynb').read_text())['cells']
    shown = json.dumps([o for c in cells for o in c.get('outputs', [])])
    assert TRN1_DLAMI in shown and '2026-08-12T' not in shown and "'created'" not in shown


def test_trn2_takes_the_newest_torchneuron_dlami_on_either_ubuntu(tmp_path, monkeypatch):
    """The torch-neuronx 2.14 DLAMI ships on Ubuntu 24.04 and 26.04 (Neuron 2.33 docs, setup/pytorch/update-dlami.rst):
    a Trn2/Trn3 gets the newest of them, whichever its Ubuntu. A moto_server of its own holds two more images, named
    as the 24.04 one is (the docs give no 26.04 image name; ids and dates made up): a 26.04 image of 2026-11-11 and a
    24.04 image of 2026-11-20, both SDK 2.33.1 (released 2026-11-11)."""
    import local_services as L
    u2604, u2404 = 'ami-0dl4m1tn2602611', 'ami-0dl4m1tn2402611'
    monkeypatch.setattr(L, 'AMIS', L.AMIS + [
        L._dlami(u2604, 'Deep Learning AMI Neuron torch-neuronx 2.14.0 (Ubuntu 26.04) 20261111', '2.33.1'),
        L._dlami(u2404, 'Deep Learning AMI Neuron torch-neuronx 2.14.0 (Ubuntu 24.04) 20261120', '2.33.1')])
    (tmp_path/'moto').mkdir()
    with L.MotoServer(tmp_path/'moto') as srv:
        for k in L.AWS_VARS_TO_DROP: monkeypatch.delenv(k, raising=False)
        for k, v in srv.env.items(): monkeypatch.setenv(k, v)
        monkeypatch.setattr(boto3, 'DEFAULT_SESSION', None)
        im = find_ami(instance_type='trn2.3xlarge')
        assert (im['id'], im['sdk'], im['venv']) == (u2404, '2.33.1', DLAMI['trn2'].venv)   # the newest, on 24.04
        boto3.client('ec2').deregister_image(ImageId=u2404)
        im = find_ami(instance_type='trn2.48xlarge')   # then the 26.04 one, newer than the rehearsal's 24.04 of 2026-10-19
        assert (im['id'], im['name']) == (u2604, 'Deep Learning AMI Neuron torch-neuronx 2.14.0 (Ubuntu 26.04) 20261111')
        assert find_ami(instance_type='trn1.2xlarge')['id'] == TRN1_DLAMI   # Trn1 keeps its 2.31 image


def test_the_canonical_stack_block():
    "The one 'Which stack is current' block of the book: dated, which stack on which Trainium, and what this package does."
    cells = json.loads((ROOT/'nbs/instance/01a_dlami.ipynb').read_text())['cells']
    blocks = [''.join(c['source']) for c in cells if c['cell_type'] == 'markdown' and ''.join(c['source']).startswith('## Which stack is current')]
    assert len(blocks) == 1
    for s in ('Checked 2026-11-24', '| Trn1', '| Trn2, Trn3', 'Neuron **2.31** DLAMI', 'torch-neuronx` 2.9', '2026-05-20', 'Neuron 2.30',
              'Neuron 2.32', 'TorchNeuron', 'Neuron 2.33 (2026-10-19)', '"Deep Learning AMI Neuron torch-neuronx 2.14"', 'Neuron 2.33.1',
              '--output-format json', '512 GB', 'pip install "trn-tutorials[trn1]"', 'pip install "trn-tutorials[trn2]"',
              'backend `neuron`', 'backend `torchneuron`'):
        assert s in blocks[0], s
    for nb in sorted(ROOT.glob('nbs/**/*.ipynb')):   # the other chapters link to it
        if nb.name == '01a_dlami.ipynb': continue
        heads = [l for c in json.loads(nb.read_text())['cells'] if c['cell_type'] == 'markdown' for l in ''.join(c['source']).splitlines()]
        assert not any(l.startswith('#') and 'which stack is current' in l.lower() for l in heads), nb


def test_find_ami(moto_server):
    image = find_ami(instance_type='trn1.2xlarge')
    assert (image['found_by'], image['sdk'], image['venv']) == ('filter', '2.31.1', '/opt/aws_neuronx_venv_pytorch_2_9')
    assert image['name'] == 'Deep Learning AMI Neuron PyTorch 2.9 (Ubuntu 24.04) 20260812'
    assert find_ami(ami=image['id'])['found_by'] == 'given'
    with pytest.raises(UsageError, match="leave --ami out"): find_ami(ami='ami-0123456789abcdef0')
    trn2 = find_ami(instance_type='trn2.48xlarge')
    assert (trn2['name'], trn2['venv']) == ('Deep Learning AMI Neuron torch-neuronx 2.14.0 (Ubuntu 24.04) 20261019',
                                            '/opt/aws_neuronx_venv_torch_neuronx_2_14_0')


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


def test_trn2_and_trn3_take_torchneuron(moto_server):
    for t in ('trn2.3xlarge', 'trn2.48xlarge', 'trn2u.48xlarge', 'trn3.48xlarge'):
        im = find_ami(instance_type=t)
        assert (im['id'], im['venv'], im['sdk']) == (TRN2_DLAMI, '/opt/aws_neuronx_venv_torch_neuronx_2_14_0', '2.33.0'), t
    assert find_ami(region='us-east-2', instance_type='trn2.48xlarge')['id'] == TRN2_DLAMI


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
    with pytest.raises(UsageError) as e: launch_instance('trn1.2xlarge', my_ip=MY_IP, key_dir=str(tmp_path), wait_ssh=False)
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
