"""The moto environment the teardown tests share: the stacks `cdk deploy` makes for an
environment, tagged as the kit tags them, and a CloudFormation client that records deletions.

``aws`` (autouse where imported) runs each test inside moto with test credentials."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

REGION = "us-east-1"
TOPIC = {"T": {"Type": "AWS::SNS::Topic"}}
DATA = {
    "Bucket": {"Type": "AWS::S3::Bucket"},
    "Logs": {"Type": "AWS::S3::Bucket"},
    "Repo": {"Type": "AWS::ECR::Repository", "Properties": {"RepositoryName": "tt-trainer"}},
}


@pytest.fixture(autouse=True)
def aws(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        yield


class Recording:
    """Delegates to a boto3 client and records the stacks it was asked to delete."""

    def __init__(self, client):
        self._client = client
        self.deleted: list[str] = []

    def delete_stack(self, **kw):
        self.deleted.append(kw["StackName"])
        return self._client.delete_stack(**kw)

    def __getattr__(self, name):
        return getattr(self._client, name)


def env_tags(env):
    return [{"Key": "rlkit:environment", "Value": env}] if env is not None else []


def make_stack(stack, env, resources=None):
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=stack, TemplateBody=json.dumps({"Resources": resources or TOPIC}),
        Tags=env_tags(env))


def make_env(name="tt", data=None, extra_gpu=()):
    """The stacks `cdk deploy` makes for environment ``name``, tagged as the kit tags them."""
    cfn = boto3.client("cloudformation", region_name=REGION)
    for stack in (f"{name}-network", f"{name}-cluster", f"{name}-gpu-p5", *extra_gpu):
        make_stack(stack, name)
    make_stack(f"{name}-data", name, data or DATA)
    resources = cfn.list_stack_resources(StackName=f"{name}-data")["StackResourceSummaries"]
    return {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources}


def live_names():
    cfn = boto3.client("cloudformation", region_name=REGION)
    return sorted(s["StackName"] for s in cfn.list_stacks()["StackSummaries"]
                  if s["StackStatus"] != "DELETE_COMPLETE")

