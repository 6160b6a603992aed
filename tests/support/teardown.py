"""The moto environment the teardown tests share: the stacks `cdk deploy` makes for an
environment, tagged as the kit tags them, and a CloudFormation client that records deletions.

``aws`` (autouse where imported) runs each test inside moto with test credentials."""

from __future__ import annotations

import argparse
import json

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from ops import teardown_cmd
from ops.aws import AwsClients

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

    imports: dict[str, list[str]] = {}  # export name -> importing stacks (moto lacks ListImports)

    def delete_stack(self, **kw):
        self.deleted.append(kw["StackName"])
        return self._client.delete_stack(**kw)

    def list_imports(self, ExportName):  # noqa: N803 - boto3's parameter name
        if not self.imports.get(ExportName):  # what CloudFormation answers for an unused export
            raise ClientError({"Error": {"Code": "ValidationError", "Message": f"Export "
                               f"'{ExportName}' is not imported by any stack."}}, "ListImports")
        return {"Imports": self.imports[ExportName]}

    def __getattr__(self, name):
        return getattr(self._client, name)


def env_tags(env):
    return [{"Key": "rlkit:environment", "Value": env}] if env is not None else []


def make_stack(stack, env, resources=None, outputs=None):
    template = {"Resources": resources or TOPIC, **({"Outputs": outputs} if outputs else {})}
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=stack, TemplateBody=json.dumps(template), Tags=env_tags(env))


def make_env(name="tt", data=None, extra_gpu=(), data_outputs=None):
    """The stacks `cdk deploy` makes for environment ``name``, tagged as the kit tags them."""
    cfn = boto3.client("cloudformation", region_name=REGION)
    for stack in (f"{name}-network", f"{name}-cluster", f"{name}-gpu-p5", *extra_gpu):
        make_stack(stack, name)
    make_stack(f"{name}-data", name, data or DATA, data_outputs)
    resources = cfn.list_stack_resources(StackName=f"{name}-data")["StackResourceSummaries"]
    return {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources}


def live_names():
    cfn = boto3.client("cloudformation", region_name=REGION)
    return sorted(s["StackName"] for s in cfn.list_stacks()["StackSummaries"]
                  if s["StackStatus"] != "DELETE_COMPLETE")


def fill_bucket(bucket: str) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key="checkpoints/a", Body=b"1")
    s3.put_object(Bucket=bucket, Key="checkpoints/a", Body=b"2")
    s3.delete_object(Bucket=bucket, Key="checkpoints/a")  # leaves a delete marker


def push_image(repo: str, tag: str) -> None:
    """An image of its own (moto's digest is its layers' digests hashed)."""
    digest = f"sha256:{tag * 64}"[:71]
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"digest": digest, "size": 1,
                           "mediaType": "application/vnd.docker.container.image.v1+json"},
                "layers": [{"digest": digest, "size": 1,
                            "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip"}]}
    boto3.client("ecr", region_name=REGION).put_image(
        repositoryName=repo, imageManifest=json.dumps(manifest), imageTag=tag)


def write_config(tmp_path, ephemeral=False, name="tt", account=None):
    text = f"name: {name}\n"
    if account:
        text += f"account: '{account}'\n"
    if ephemeral:
        text += "ephemeral: true\ncost_guard: {max_gpu_nodes: 2, ttl_hours: 6}\n"
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def run(tmp_path, *flags, ephemeral=False, answer=None, name="tt", account=None, cfn=None,
        config_text=None, ask=None, sleep=None, tagging=None, ec2=None):
    """`rlkit teardown --config <config> --poll 0 FLAGS` on moto: (exit code, the CloudFormation
    client). The config is ``config_text``, or one written from ``name``/``ephemeral``/``account``;
    the prompt answers ``answer`` (or calls ``ask``); waits call ``sleep`` (default: none);
    ``tagging`` replaces the Resource Groups Tagging API client, ``ec2`` the EC2 client."""
    parser = argparse.ArgumentParser(prog="rlkit")
    teardown_cmd.register(parser.add_subparsers(dest="command"))
    if config_text is None:
        config = write_config(tmp_path, ephemeral, name=name, account=account)
    else:
        config = tmp_path / "c.yaml"
        config.write_text(config_text)
    args = parser.parse_args(["teardown", "--config", str(config), "--poll", "0", *flags])
    cfn = cfn or Recording(boto3.client("cloudformation", region_name=REGION))
    clients = AwsClients(REGION, cloudformation=cfn, s3=boto3.client("s3", region_name=REGION),
                         ecr=boto3.client("ecr", region_name=REGION),
                         tagging=tagging or boto3.client("resourcegroupstaggingapi",
                                                         region_name=REGION),
                         sts=boto3.client("sts", region_name=REGION),
                         ec2=ec2 or boto3.client("ec2", region_name=REGION))
    args.clients_factory = lambda region, profile: clients
    args.sleep = sleep or (lambda seconds: None)  # the leftover re-reads: no real waiting
    if answer is not None:
        args.ask = lambda prompt: answer
    if ask is not None:
        args.ask = ask
    return args.func(args), cfn
