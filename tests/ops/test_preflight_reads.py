"""`rlkit preflight` reads each deployed stack once per run (ops/preflight_reads.py).

Before: the checks of one GPU group each asked CloudFormation for themselves, so every GPU stack
was read several times per run (DescribeStackResources by the placement group, AMI release and
node roll checks; GetTemplate by the taint and node roll checks), the cluster stack's outputs once
per Capacity Block group, and a node group was described once by each check that needed it. On a
workstation with several GPU groups each call is latency and a throttling risk.

The fakes here count the calls per operation and stack: CloudFormation and EKS answer for a
deployed environment (or none), EC2 for its placement groups; every other call is refused (its
checks warn or fail, which is not what this file is about, and the run goes on).
"""

from __future__ import annotations

from collections import Counter

import pytest
from botocore.exceptions import ClientError

from infra.config import parse_config
from infra.config.derived import resource_tags
from infra.problems import PASS, WARN
from ops.aws import AwsClients
from ops.preflight import run_preflight
from ops.preflight_reads import PreflightReads

RID = "cr-0123456789abcdef0"
RELEASE = "1.35.6-20260714"


def config():
    """Three GPU groups (two on-demand with the kit's placement group, one Capacity Block), a
    shared file system and a named AMI release: every check that reads a stack runs."""
    group = {"instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
             "desired_size": 2, "max_size": 2}
    return parse_config({
        "name": "pf", "node_ami_release_version": RELEASE,
        "gpu_node_groups": {"a": group, "b": group, "cb": {
            "instance_type": "p5en.48xlarge", "availability_zone": "us-east-1b", "min_size": 0,
            "desired_size": 2, "max_size": 2,
            "capacity": {"type": "capacity-block", "reservation_id": RID}}},
        "training": {"node_group": "a", "nodes": 2}})


def _error(operation: str, code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


class Refusing:
    """A client that refuses every call, paginated or not."""

    def __getattr__(self, name):
        def refuse(*args, **kwargs):
            raise _error(name, "AccessDenied", "not in this test")
        return refuse

    def get_paginator(self, name):
        return self

    def paginate(self, **kwargs):
        raise _error("Paginate", "AccessDenied", "not in this test")


class Sts:
    def get_caller_identity(self):
        return {"Account": "123456789012", "Arn": "arn:aws:iam::123456789012:user/pf"}


class CloudFormation(Refusing):
    """The deployed ``stacks`` (name -> outputs, template, resources); any other name does not
    exist. ``calls`` counts (operation, stack)."""

    def __init__(self, stacks: dict[str, dict]):
        self.stacks = stacks
        self.calls: Counter = Counter()

    def _stack(self, operation: str, name: str) -> dict:
        self.calls[operation, name] += 1
        if name not in self.stacks:
            raise _error(operation, "ValidationError", f"Stack with id {name} does not exist")
        return self.stacks[name]

    def describe_stacks(self, StackName):
        outputs = self._stack("DescribeStacks", StackName).get("outputs", {})
        return {"Stacks": [{"StackName": StackName, "StackStatus": "UPDATE_COMPLETE",
                            "Outputs": [{"OutputKey": k, "OutputValue": v}
                                        for k, v in outputs.items()]}]}

    def get_template(self, StackName):
        return {"TemplateBody": self._stack("GetTemplate", StackName).get(
            "template", {"Resources": {}})}

    def describe_stack_resources(self, StackName):
        return {"StackResources": self._stack("DescribeStackResources", StackName).get(
            "resources", [])}

    def get_paginator(self, name):  # ListStacks: the existing stacks check
        return _Pages([{"StackSummaries": [{"StackName": s, "StackStatus": "UPDATE_COMPLETE"}
                                           for s in self.stacks]}])


class _Pages:
    def __init__(self, pages):
        self.pages = pages

    def paginate(self, **kwargs):
        return self.pages


class Ec2(Refusing):
    """Placement groups with the config's tags, any reservation a usable block, every instance
    type offered in us-east-1a and b; ``calls`` counts (operation, resource)."""

    def __init__(self):
        self.calls: Counter = Counter()

    def describe_placement_groups(self, GroupNames):
        return {"PlacementGroups": [{"GroupName": n, "Tags": [
            {"Key": k, "Value": v} for k, v in resource_tags(config()).items()]}
            for n in GroupNames]}

    def describe_capacity_reservations(self, CapacityReservationIds):
        [rid] = CapacityReservationIds
        self.calls["DescribeCapacityReservations", rid] += 1
        return {"CapacityReservations": [{
            "CapacityReservationId": rid, "InstanceType": "p5en.48xlarge",
            "AvailabilityZone": "us-east-1b", "State": "active", "TotalInstanceCount": 2,
            "AvailableInstanceCount": 2, "ReservationType": "capacity-block"}]}

    def get_paginator(self, name):
        return self if name == "describe_instance_type_offerings" else Refusing()

    def paginate(self, LocationType, Filters):
        [instance_type] = Filters[0]["Values"]
        self.calls["DescribeInstanceTypeOfferings", instance_type] += 1
        return [{"InstanceTypeOfferings": [{"Location": z} for z in ("us-east-1a", "us-east-1b")]}]


class Eks(Refusing):
    """The cluster at 1.35 with the kit's four node groups and one add-on, offered for 1.35;
    ``calls`` counts (operation, resource)."""

    def __init__(self):
        self.calls: Counter = Counter()

    def describe_nodegroup(self, clusterName, nodegroupName):
        self.calls["DescribeNodegroup", nodegroupName] += 1
        return {"nodegroup": {"nodegroupName": nodegroupName, "releaseVersion": RELEASE,
                              "version": "1.35",
                              "scalingConfig": {"minSize": 0, "desiredSize": 0, "maxSize": 2}}}

    def describe_cluster(self, name):
        self.calls["DescribeCluster", name] += 1
        return {"cluster": {"name": name, "version": "1.35"}}

    def describe_addon(self, clusterName, addonName):
        self.calls["DescribeAddon", addonName] += 1
        return {"addon": {"addonName": addonName, "addonVersion": "v1.20.1-eksbuild.1"}}

    def get_paginator(self, name):
        return _Counted(self.calls, name, {
            "list_nodegroups": {"nodegroups": [f"ng-{g}" for g in ("system", "a", "b", "cb")]},
            "list_addons": {"addons": ["vpc-cni"]},
            "describe_addon_versions": {"addons": [{"addonName": "vpc-cni", "addonVersions": [
                {"addonVersion": "v1.20.1-eksbuild.1", "compatibilities": [
                    {"clusterVersion": "1.35", "defaultVersion": True}]}]}]}}[name])


class _Counted:
    """One paginated operation's single page, each request counted."""

    def __init__(self, calls: Counter, name: str, page: dict):
        self.calls, self.name, self.page = calls, name, page

    def paginate(self, **params):
        self.calls[self.name, params.get("clusterName") or params.get("addonName")] += 1
        return [self.page]


def _resources(*resources: tuple[str, str]) -> list[dict]:
    return [{"LogicalResourceId": f"R{i}", "PhysicalResourceId": physical, "ResourceType": kind}
            for i, (kind, physical) in enumerate(resources)]


def deployed_environment() -> dict[str, dict]:
    """Every stack of ``config()`` deployed, each GPU group's node group at desired size 0."""
    gpu = {g: {"outputs": {"NodegroupName": f"ng-{g}"},
               "resources": _resources(("AWS::EKS::Nodegroup", f"pf-cluster/ng-{g}"),
                                       ("AWS::EC2::PlacementGroup", f"pf-pg-{g}"))}
           for g in ("a", "b", "cb")}
    return {"pf-network": {}, "pf-data": {},
            "pf-cluster": {"outputs": {"ClusterName": "pf-cluster"},
                           "resources": _resources(("AWS::EKS::Nodegroup", "pf-cluster/ng-system"))},
            "pf-storage": {"outputs": {"SharedFileSystemId": "fs-0123456789abcdef0"}},
            **{f"pf-gpu-{g}": stack for g, stack in gpu.items()}}


def run(stacks: dict[str, dict], cfg=None):
    """The checks of one run, and the calls it made: CloudFormation's, then EKS's and EC2's."""
    cfn, eks, ec2 = CloudFormation(stacks), Eks(), Ec2()
    clients = AwsClients(sts=Sts(), cloudformation=cfn, eks=eks, ec2=ec2,
                         quotas=Refusing(), fsx=Refusing(), kms=Refusing(), logs=Refusing())
    checks = run_preflight(cfg or config(), clients, installed=lambda package: True)
    return checks, cfn.calls, eks.calls + ec2.calls


def test_each_deployed_stack_is_read_once_per_run():
    """Before: each GPU stack's resources were read three times and its template twice, the
    cluster stack's outputs once per Capacity Block group, each node group described twice."""
    checks, calls, described = run(deployed_environment())
    repeated = {key: n for key, n in calls.items() if n > 1}
    assert repeated == {}, f"read more than once in one run: {repeated}"
    for group in ("a", "b", "cb"):
        stack = f"pf-gpu-{group}"
        assert calls["GetTemplate", stack] == calls["DescribeStackResources", stack] == 1
    assert calls["DescribeStacks", "pf-gpu-cb"] == calls["DescribeStacks", "pf-cluster"] == 1
    # one description per node group, per reservation, per instance type (groups a and b: p5)
    # the Kubernetes upgrade and add-on checks read the cluster, its node group list and its
    # add-ons once, and share the node groups' descriptions with the node group checks
    assert described == Counter({**{("DescribeNodegroup", f"ng-{g}"): 1
                                    for g in ("a", "b", "cb", "system")},
                                 ("DescribeCapacityReservations", RID): 1,
                                 ("DescribeInstanceTypeOfferings", "p5.48xlarge"): 1,
                                 ("DescribeInstanceTypeOfferings", "p5en.48xlarge"): 1,
                                 ("DescribeCluster", "pf-cluster"): 1,
                                 ("list_nodegroups", "pf-cluster"): 1,
                                 ("list_addons", "pf-cluster"): 1,
                                 ("DescribeAddon", "vpc-cni"): 1,
                                 ("describe_addon_versions", "vpc-cni"): 1})
    upgrade = {c.name: c.status for c in checks if c.name in ("kubernetes upgrade",
                                                               "add-on version")}
    assert upgrade == {"kubernetes upgrade": PASS, "add-on version": PASS}
    # what was read is what each check judged on: nothing read fails or warns on a stack
    assert not [c for c in checks if c.status == WARN and "could not read pf-" in c.detail]


def test_a_first_deploy_reads_each_stack_once_and_every_check_says_not_deployed():
    """No stack exists yet: the first read of each says so, and every other check of that
    stack reads that answer, with no call and no traceback."""
    checks, calls, described = run({})
    per_stack = Counter(stack for _, stack in calls.elements())
    assert per_stack == Counter({s: 1 for s in per_stack}), dict(calls)
    assert set(per_stack) == {"pf-cluster", "pf-network", "pf-storage",
                              "pf-gpu-a", "pf-gpu-b", "pf-gpu-cb"}
    assert not [key for key in described if key[0] == "DescribeNodegroup"]
    stack_checks = [c for c in checks if "(pf-" in c.subject]
    assert stack_checks and {c.status for c in stack_checks} == {PASS}
    assert all("is not deployed: the first deploy creates" in c.detail for c in stack_checks)
    [update] = [c for c in checks if c.name == "capacity block update"]
    assert (update.status, update.detail) == (
        PASS, "pf-gpu-cb is not deployed: the first deploy creates the group")


def test_an_unreadable_answer_is_asked_once_and_given_to_every_reader():
    """An error other than "does not exist" (a missing permission) is kept too: each check
    still warns with its own fix, from one call; the stack's other reads still go out."""
    cfn = CloudFormation({"pf-gpu-a": {}})

    def refused(StackName):
        cfn.calls["GetTemplate", StackName] += 1
        raise _error("GetTemplate", "AccessDenied", "not allowed")

    cfn.get_template = refused
    reads = PreflightReads(AwsClients(cloudformation=cfn))
    for _ in range(3):
        with pytest.raises(ClientError, match="AccessDenied"):
            reads.stack_template("pf-gpu-a")
    assert reads.stack_resources("pf-gpu-a") == []
    assert cfn.calls == Counter({("GetTemplate", "pf-gpu-a"): 1,
                                 ("DescribeStackResources", "pf-gpu-a"): 1})


def test_two_runs_read_afresh():
    """The record is one run's: a second run (a redeploy in between) asks again."""
    cfn = CloudFormation({"pf-data": {"outputs": {"DataBucketName": "pf-bucket"}}})
    clients = AwsClients(cloudformation=cfn)
    for _ in range(2):
        assert PreflightReads(clients).stack_outputs("pf-data") == {"DataBucketName": "pf-bucket"}
    assert cfn.calls == Counter({("DescribeStacks", "pf-data"): 2})


def test_an_ultraserver_blocks_reservation_is_read_once_for_both_its_checks():
    """Before: the reservation checks and the UltraServer block checks each described it."""
    from infra.config import load_config
    from tests.support import REPO_ROOT

    cfg = load_config(REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml")
    [rid] = [g.capacity.reservation_id for g in cfg.gpu_node_groups.values()]
    checks, _, described = run({}, cfg)
    assert described["DescribeCapacityReservations", rid] == 1
    assert [c.name for c in checks if c.name.startswith("ultraserver type")] == ["ultraserver type"]
