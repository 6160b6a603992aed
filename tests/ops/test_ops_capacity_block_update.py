"""`rlkit preflight` refuses a deploy that would roll a Capacity Block group while its nodes run.

Upstream failure this prevents: "When upgrading managed node groups with Capacity Blocks, make
sure that the desired size of the node group is set to 0" [EKS user guide, capacity-blocks-mng].
A CloudFormation update that changes the group's launch template or node group while its nodes
run asks EKS to replace nodes the block has no spare instance for, under the running job.
CloudFormation DescribeStacks and EKS DescribeNodegroup are answered by botocore's Stubber.
"""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from infra.config import parse_config
from ops.aws import AwsClients
from ops.preflight import FAIL, PASS, WARN, check_capacity_block_update, offline_checks
from ops.preflight_reads import PreflightReads
from tests.support import REPO_ROOT

RID = "cr-0123456789abcdef0"


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-2"}.items():
        monkeypatch.setenv(key, value)


def cb_config(ctype="capacity-block", min_size=0):
    return parse_config({
        "name": "cb", "region": "us-east-2", "availability_zones": ["us-east-2a", "us-east-2b"],
        "gpu_node_groups": {"p5en": {
            "instance_type": "p5en.48xlarge", "availability_zone": "us-east-2b", "min_size": min_size,
            "desired_size": 2, "max_size": 2,
            "capacity": {"type": ctype, "reservation_id": RID}}},
        "training": {"node_group": "p5en", "nodes": 2, "parallel": {"ep": 8}}})


def stack(name, outputs):
    return {"Stacks": [{"StackName": name, "CreationTime": "2026-12-01T00:00:00Z",
                        "StackStatus": "UPDATE_COMPLETE",
                        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]}]}


def check(desired=None, deployed=True, deployed_min=0, config_min=0):
    cfg = cb_config(min_size=config_min)
    cfn = boto3.client("cloudformation", region_name="us-east-2")
    eks = boto3.client("eks", region_name="us-east-2")
    with Stubber(cfn) as cfn_stub, Stubber(eks) as eks_stub:
        if not deployed:
            cfn_stub.add_client_error("describe_stacks", "ValidationError",
                                      "Stack with id cb-gpu-p5en does not exist",
                                      expected_params={"StackName": "cb-gpu-p5en"})
        else:
            cfn_stub.add_response("describe_stacks", stack("cb-gpu-p5en", {"NodegroupName": "p5en-ng"}),
                                  {"StackName": "cb-gpu-p5en"})
            cfn_stub.add_response("describe_stacks", stack("cb-cluster", {"ClusterName": "cb-cluster"}),
                                  {"StackName": "cb-cluster"})
            eks_stub.add_response("describe_nodegroup", {"nodegroup": {
                "nodegroupName": "p5en-ng",
                "scalingConfig": {"maxSize": 2, "desiredSize": desired,
                                  **({} if deployed_min is None else {"minSize": deployed_min})}}},
                {"clusterName": "cb-cluster", "nodegroupName": "p5en-ng"})
        reads = PreflightReads(AwsClients(cloudformation=cfn, eks=eks))
        result = check_capacity_block_update(reads, cfg, "p5en", cfg.gpu_node_groups["p5en"])
        cfn_stub.assert_no_pending_responses()
        eks_stub.assert_no_pending_responses()
    return result


def test_a_deploy_while_the_blocks_nodes_run_is_refused_with_the_fix():
    c = check(desired=2)
    assert c.status == FAIL
    assert c.detail == (
        "node group p5en-ng runs at desired size 2; EKS updates a Capacity Block node group only at "
        "desired size 0 [EKS user guide, capacity-blocks-mng], so a deploy that changes its launch "
        "template or node group in cb-gpu-p5en rolls nodes the block cannot replace, under the "
        "running job")
    assert c.fix == (
        "while the block's nodes run, deploy the other stacks only (`npx aws-cdk@2.1148.1 deploy "
        "--exclusively <every stack but cb-gpu-p5en> -c config=<your config file>`); to update this group, stop the run (its last save is in S3), "
        "scale to 0 with `aws eks update-nodegroup-config --cluster-name cb-cluster --nodegroup-name "
        "p5en-ng --scaling-config desiredSize=0 --region us-east-2`, deploy, and scale back up with "
        "`aws eks update-nodegroup-config --cluster-name cb-cluster --nodegroup-name p5en-ng "
        "--scaling-config desiredSize=2 --region us-east-2` (docs/operations.md, \"A reservation's "
        "end\")")


@pytest.mark.parametrize("deployed_min, config_min, scaling", [
    (1, 0, "minSize=0,desiredSize=0"),  # the deployed minimum would hold a node
    (0, 1, "desiredSize=0"),  # the config's minimum is not what EKS checks
    (None, 1, "minSize=0,desiredSize=0"),  # EKS gave none: the config's is all there is
])
def test_the_scale_down_command_follows_the_deployed_groups_minimum(deployed_min, config_min,
                                                                     scaling):
    c = check(desired=2, deployed_min=deployed_min, config_min=config_min)
    assert c.status == FAIL
    assert ("scale to 0 with `aws eks update-nodegroup-config --cluster-name cb-cluster "
            f"--nodegroup-name p5en-ng --scaling-config {scaling} --region us-east-2`, deploy, and "
            "scale back up with `aws eks update-nodegroup-config --cluster-name cb-cluster "
            "--nodegroup-name p5en-ng --scaling-config desiredSize=2 --region us-east-2`") in c.fix


def test_at_desired_size_0_a_deploy_may_update_the_group():
    c = check(desired=0)
    assert c.status == PASS and "desired size 0" in c.detail


def test_a_group_not_deployed_yet_passes():
    assert check(deployed=False).status == PASS


def test_unreadable_node_group_is_a_warning_that_says_which_permissions():
    cfg = cb_config()
    cfn = boto3.client("cloudformation", region_name="us-east-2")
    with Stubber(cfn) as stub:
        stub.add_client_error("describe_stacks", "AccessDenied", "not allowed")
        c = check_capacity_block_update(PreflightReads(AwsClients(cloudformation=cfn)), cfg, "p5en",
                                        cfg.gpu_node_groups["p5en"])
    assert c.status == WARN and "eks:DescribeNodegroup" in c.fix


def test_other_capacity_types_are_not_checked_and_rlkit_check_names_the_rule():
    odcr = cb_config("odcr")
    assert check_capacity_block_update(PreflightReads(AwsClients()), odcr, "p5en",
                                       odcr.gpu_node_groups["p5en"]) is None
    notes = [c for c in offline_checks(cb_config(), installed=lambda p: True)
             if c.name == "capacity block update"]
    assert [(c.status, c.subject) for c in notes] == [(PASS, "gpu_node_groups.p5en")]
    assert "`rlkit preflight` reads the deployed group" in notes[0].detail


def test_the_fix_points_at_a_section_that_exists():

    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    over_time = text[text.index("\n## Over time\n"):]
    over_time = over_time[:over_time.index("\n## ", 1)]
    assert "\n### A reservation's end\n" in over_time
    for topic in ("**The window.**", "**Save before the end.**", "**No update while the block's nodes run.**",
                  "**No drift fight.**", "**Scale-up at the block's start.**", "**On-demand groups**"):
        assert topic in over_time
