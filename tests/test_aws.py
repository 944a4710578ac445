"""Checks of `trn_tutorials.aws`: run ids and their tags, and AWS's refusals said in one line that names the fix."""
import pytest
from botocore.exceptions import ClientError

from trn_tutorials.core.options import UsageError
from trn_tutorials.aws import aws_errors, aws_region, check_run_id, explain, new_run_id, tag_filters


def test_error_messages():
    quota = ClientError({'Error': {'Code': 'VcpuLimitExceeded', 'Message': 'You have requested more vCPU capacity than your current vCPU limit of 0 allows.'}}, 'RunInstances')
    assert 'Service Quotas' in explain(quota, 'us-east-1', 'trn1.2xlarge')
    novpc = ClientError({'Error': {'Code': 'VPCIdNotSpecified', 'Message': 'No default VPC for this user'}}, 'RunInstances')
    assert 'create-default-vpc --region eu-north-1' in explain(novpc, 'eu-north-1')
    other = ClientError({'Error': {'Code': 'Odd', 'Message': 'a\nb'}}, 'RunInstances')
    assert explain(other, 'us-east-1') == 'AWS refused RunInstances (Odd): a b'


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
