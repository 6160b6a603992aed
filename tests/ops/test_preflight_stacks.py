"""Preflight: stacks a deploy of this config leaves behind, and log groups it would fail to create
(ops/preflight_stacks.py).

Turning ``observability.enabled`` off on a deployed environment used to pass preflight: the app
no longer builds ``<name>-observability``, `cdk deploy --all` never deletes it
(aws/aws-cdk-cli#787), its add-on kept running and billing, the deploy deleted the log groups it
writes to, its CloudWatch agent created one again without the kit's key or retention, and
turning the flag back on then failed the cluster stack on that group ("already exists").
CloudFormation and CloudWatch Logs answer through botocore's Stubber, or moto for a whole run.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import boto3
import yaml

from infra.cdk_cli import cdk_command
from infra.config import parse_config
from infra.problems import FAIL, PASS, WARN
from ops.preflight import check_existing_stacks
from ops.preflight_stacks import (
    app_stack_names,
    check_log_groups_outside_stack,
    check_stacks_left_out,
    kit_log_group_names,
)
from tests.support.cdk import REPO_ROOT, resources
from tests.support import preflight as support
from tests.support.preflight import _factory, _quota, parse, reads, stubbed

fake_credentials = support.fake_credentials  # autouse: no call reaches AWS
aws = support.aws  # a test inside moto

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
TAG = "rlkit:environment"


def config(**over):
    data = {"name": "pf", "region": "us-east-1", "availability_zones": ["us-east-1a", "us-east-1b"]}
    data.update(over)
    return parse_config(data)


OFF = {"observability": {"enabled": False}}
NO_FS = {"storage": {"shared_filesystem": {"type": "none"}},
         "training": {"nodes": 1, "hf_checkpoint": "/models/Qwen3-30B-A3B"}}


def _listed(stub, *stacks):
    stub.add_response("list_stacks", {"StackSummaries": [
        {"StackName": n, "StackStatus": "UPDATE_COMPLETE", "CreationTime": NOW} for n in stacks]})


def _described(stub, stack, env="pf"):
    tags = [{"Key": TAG, "Value": env}] if env else []
    stub.add_response("describe_stacks", {"Stacks": [{
        "StackName": stack, "StackStatus": "UPDATE_COMPLETE", "CreationTime": NOW,
        "Tags": tags}]}, {"StackName": stack})


# --- which stacks the app builds -------------------------------------------------------------------


def test_app_stack_names_are_the_stacks_build_stacks_builds():
    """Every branch of stacks/kit.py: all optional stacks on (the default example), then off
    (observability, the file system, the kit's VPC) with two GPU groups."""
    from stacks.kit import build_stacks, make_app

    on = yaml.safe_load((REPO_ROOT / "examples" / "default.yaml").read_text())
    off = yaml.safe_load((REPO_ROOT / "examples" / "existing-vpc.yaml").read_text())
    off["observability"] = {"enabled": False}
    off.update(NO_FS)
    off["gpu_node_groups"]["b"] = dict(off["gpu_node_groups"]["p5"])
    for data in (on, off):
        cfg = parse_config(data)
        built = [s.stack_name for s in build_stacks(make_app(), cfg).all()]
        assert sorted(app_stack_names(cfg)) == sorted(built), data.get("name")
    assert len(app_stack_names(parse_config(on))) == 7
    assert len(app_stack_names(parse_config(off))) == 4  # data, cluster, two GPU stacks


# --- stacks left out ---------------------------------------------------------------------------------


def test_observability_turned_off_while_its_stack_is_deployed_fails():
    cfn, stub = stubbed("cloudformation")
    _listed(stub, "pf-cluster", "pf-data", "pf-network", "pf-observability")
    _described(stub, "pf-observability")
    with stub:
        c = check_stacks_left_out(reads(cloudformation=cfn), config(**OFF), "us-east-1",
                                  "envs/pf.yaml")
    stub.assert_no_pending_responses()
    assert c.status == FAIL
    assert c.detail.startswith("deployed, but this config no longer builds them: "
                               "pf-observability: observability.enabled is false;")
    assert "aws/aws-cdk-cli#787" in c.detail
    assert "/aws/containerinsights/pf/performance again itself" in c.detail
    assert c.fix.startswith(
        "before deploying, delete it: aws cloudformation delete-stack --stack-name "
        "pf-observability --region us-east-1 && aws cloudformation wait stack-delete-complete "
        "--stack-name pf-observability --region us-east-1.")
    assert cdk_command("destroy", "pf-observability", config="envs/pf.yaml") in c.fix


def test_a_removed_gpu_group_and_the_file_system_are_left_out_too():
    cfn, stub = stubbed("cloudformation")
    _listed(stub, "pf-cluster", "pf-gpu-old", "pf-storage", "pf-storage-access")
    for stack in ("pf-gpu-old", "pf-storage", "pf-storage-access"):
        _described(stub, stack)
    cfg = config(**NO_FS)
    with stub:
        c = check_stacks_left_out(reads(cloudformation=cfn), cfg, "us-east-1")
    assert c.status == FAIL
    assert "pf-gpu-old: gpu_node_groups has no group 'old'" in c.detail
    assert "pf-storage: storage.shared_filesystem.type is none" in c.detail
    # the access stack opens the file system's ports: deleted first
    assert c.fix.index("--stack-name pf-storage-access") < c.fix.index("--stack-name pf-storage ")
    assert "aws fsx delete-file-system" in c.fix


def test_a_stack_named_like_ours_with_another_tag_is_left_alone():
    cfn, stub = stubbed("cloudformation")
    _listed(stub, "pf-cluster", "pf-gpu-monitoring", "pf-prod-cluster")
    _described(stub, "pf-gpu-monitoring", env=None)  # pf-prod-cluster: another environment's
    with stub:
        c = check_stacks_left_out(reads(cloudformation=cfn), config(), "us-east-1")
    assert c.status == PASS
    assert c.detail == ("every deployed stack of pf is one this config builds; pf-gpu-monitoring "
                        "look like stacks of pf but lack its rlkit:environment tag: left alone")


def test_the_kits_own_vpc_replaced_by_an_existing_one_is_not_deleted_first():
    cfn, stub = stubbed("cloudformation")
    _listed(stub, "pf-cluster", "pf-network")
    _described(stub, "pf-network")
    cfg = config(vpc={"existing": {
        "vpc_id": "vpc-0a1b2c3d4e5f60718",
        "private_subnet_ids": {"us-east-1a": "subnet-0a1b2c3d4e5f60001",
                               "us-east-1b": "subnet-0a1b2c3d4e5f60002"},
        "public_subnet_ids": {"us-east-1a": "subnet-0a1b2c3d4e5f60101",
                              "us-east-1b": "subnet-0a1b2c3d4e5f60102"}}})
    with stub:
        c = check_stacks_left_out(reads(cloudformation=cfn), cfg, "us-east-1")
    assert c.status == FAIL and "delete-stack" not in c.fix
    assert "Remove vpc.existing, or tear the environment down" in c.fix


def test_existing_stacks_no_longer_says_a_deploy_updates_a_stack_left_out():
    cfn, stub = stubbed("cloudformation")
    _listed(stub, "pf-cluster", "pf-observability")
    with stub:
        c = check_existing_stacks(cfn, config(**OFF))
    assert c.status == WARN
    assert c.detail.endswith("; pf-observability this config no longer builds: a deploy leaves "
                             "them (the stacks left out check)")


def test_both_checks_share_one_stack_listing():
    cfn, stub = stubbed("cloudformation")
    _listed(stub, "pf-cluster")  # one ListStacks answer: a second call would find none queued
    run = reads(cloudformation=cfn)
    with stub:
        left_out = check_stacks_left_out(run, config(), "us-east-1")
        existing = check_existing_stacks(cfn, config(), run)
    assert (left_out.status, existing.status) == (PASS, WARN)


def test_the_command_fails_when_observability_is_off_but_its_stack_runs(aws, tmp_path, capsys):
    """Through `rlkit preflight` (moto): the old preflight only warned that stacks exist."""
    cfn = boto3.client("cloudformation", region_name="us-east-1")
    template = json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})
    for stack in ("pf-cluster", "pf-observability"):
        cfn.create_stack(StackName=stack, TemplateBody=template, Tags=[{"Key": TAG, "Value": "pf"}])
    quotas, stub = _quota(400.0)
    path = tmp_path / "c.yaml"
    path.write_text("name: pf\nobservability: {enabled: false}\n")
    args = parse(["preflight", "--config", str(path), "--json"])
    args.clients_factory = _factory(quotas)
    with stub:
        code = args.func(args)
    out = json.loads(capsys.readouterr().out)
    failed = {c["name"]: c for c in out["checks"] if c["status"] == "fail"}
    assert code == 1 and list(failed) == ["stacks left out"]
    assert f"-c config={path}" in failed["stacks left out"]["fix"]


# --- log groups outside the stack ----------------------------------------------------------------------


def _groups(stub, *groups):
    """DescribeLogGroups for the two prefixes of cluster pf's groups; ``groups``: (name, extra)."""
    for prefix in ("/aws/containerinsights/pf/", "/aws/eks/pf/"):
        stub.add_response("describe_log_groups", {"logGroups": [
            {"logGroupName": n, **extra} for n, extra in groups if n.startswith(prefix)]},
            {"logGroupNamePrefix": prefix})


def _cluster_resources(stub, *groups):
    stub.add_response("describe_stack_resources", {"StackResources": [
        {"LogicalResourceId": f"G{i}", "PhysicalResourceId": g, "ResourceType": "AWS::Logs::LogGroup",
         "Timestamp": NOW, "ResourceStatus": "CREATE_COMPLETE"} for i, g in enumerate(groups)]},
        {"StackName": "pf-cluster"})


PERFORMANCE = "/aws/containerinsights/pf/performance"


def test_turning_observability_back_on_fails_on_the_group_the_agent_created():
    logs, logs_stub = stubbed("logs")
    _groups(logs_stub, (PERFORMANCE, {"storedBytes": 5_000_000}))
    cfn, stub = stubbed("cloudformation")
    _cluster_resources(stub)  # the cluster stack, deployed with observability off, holds none
    _listed(stub, "pf-cluster", "pf-observability")  # the add-on was never deleted
    with stub, logs_stub:
        c = check_log_groups_outside_stack(reads(cloudformation=cfn, logs=logs), config(),
                                           "us-east-1")
    assert c.status == FAIL
    assert c.detail.startswith(f"{PERFORMANCE} (kept forever (no retention), no KMS key, "
                               "5000000 bytes stored): created outside pf-cluster")
    assert "already exists, and the cluster stack update rolls back" in c.detail
    # the agent would create it again at once: its stack goes first, then the group
    assert c.fix.index("delete-stack --stack-name pf-observability") < c.fix.index(
        f"aws logs delete-log-group --log-group-name {PERFORMANCE} --region us-east-1")


def test_groups_the_cluster_stack_holds_pass():
    logs, logs_stub = stubbed("logs")
    every = kit_log_group_names("pf")
    _groups(logs_stub, *[(g, {"retentionInDays": 30, "kmsKeyId": "arn:aws:kms:k"}) for g in every])
    cfn, stub = stubbed("cloudformation")
    _cluster_resources(stub, *every)
    with stub, logs_stub:
        c = check_log_groups_outside_stack(reads(cloudformation=cfn, logs=logs), config(),
                                           "us-east-1")
    assert (c.status, c.detail) == (PASS, "pf-cluster holds every log group of pf")


def test_with_observability_off_a_group_outside_the_stack_warns():
    logs, logs_stub = stubbed("logs")
    _groups(logs_stub, (PERFORMANCE, {}))
    cfn, stub = stubbed("cloudformation")
    _cluster_resources(stub)
    with stub, logs_stub:
        c = check_log_groups_outside_stack(reads(cloudformation=cfn, logs=logs), config(**OFF),
                                           "us-east-1")
    assert c.status == WARN
    assert "would fail the deploy that turns observability on again" in c.detail
    assert f"aws logs delete-log-group --log-group-name {PERFORMANCE}" in c.fix


def test_the_groups_checked_are_the_groups_the_cluster_stack_creates(synth):
    s = synth("default")
    created = {v["Properties"]["LogGroupName"] for v in resources(
        s.template("cluster"), "AWS::Logs::LogGroup").values()
        if isinstance(v["Properties"].get("LogGroupName"), str)
        and v["Properties"]["LogGroupName"].startswith(("/aws/eks/", "/aws/containerinsights/"))}
    assert created == set(kit_log_group_names(s.config.name))
