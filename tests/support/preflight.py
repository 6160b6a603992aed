"""AWS fakes shared by the preflight tests: moto for what it models, botocore's Stubber for
the service-quota answers it does not, and the preflight command driven as the CLI drives it.

``fake_credentials`` is autouse where it is imported; ``aws`` runs a test inside moto."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from ops.aws import AwsClients
from ops.preflight_reads import PreflightReads


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def aws():
    with mock_aws():
        yield


def stubbed(service, region="us-east-1"):
    client = boto3.client(service, region_name=region)
    return client, Stubber(client)


def reads(**clients) -> PreflightReads:
    """A preflight run's reads over the given clients (``AwsClients(**clients)``)."""
    return PreflightReads(AwsClients(**clients))


def _quota(value):
    quotas, stub = stubbed("service-quotas")
    stub.add_response("get_service_quota", {"Quota": {"QuotaCode": "L-417A185B", "Value": value}},
                      {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"})
    return quotas, stub


def parse(argv):
    """The preflight parser alone (ops.cli imports every command module, some still in work)."""
    import argparse

    from ops import preflight_cmd

    parser = argparse.ArgumentParser(prog="rlkit")
    preflight_cmd.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def _factory(quotas):
    def make(region, profile):
        return AwsClients(sts=boto3.client("sts", region_name=region),
                       ec2=boto3.client("ec2", region_name=region), quotas=quotas,
                       cloudformation=boto3.client("cloudformation", region_name=region),
                       logs=boto3.client("logs", region_name=region))
    return make
