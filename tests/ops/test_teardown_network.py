"""Teardown deletes the network interfaces the VPC CNI leaves behind, and the cluster security
group EKS leaves, before the deletes they would fail; it touches nothing else (moto).

moto deletes a security group or a VPC whatever still uses it, so the CloudFormation client here
refuses a stack's delete the way CloudFormation would end it: DependencyViolation while a detached
interface uses one of the stack's security groups, or, for the network stack, while the VPC still
holds this cluster's leftover interfaces or EKS's cluster security group."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError

from ops.teardown_network import RETRY_DELAYS_S, NetworkSweep, classify
from tests.support.teardown import (  # noqa: F401 (aws: autouse fixture)
    DATA, REGION, Recording, aws, env_tags, run)

CNI = "cluster.k8s.amazonaws.com/name"


def _violation(op: str, what: str) -> ClientError:
    return ClientError({"Error": {"Code": "DependencyViolation",
                                  "Message": f"resource {what} has a dependent object"}}, op)


class Ec2(Recording):
    """EC2 that records deletes in ``events``; ``busy[id]``: how many more deletes of that
    security group or interface answer DependencyViolation (something still going away)."""

    def __init__(self, client, events):
        super().__init__(client)
        self.events, self.busy = events, {}

    def delete_network_interface(self, **kw):
        if self.busy.get(kw["NetworkInterfaceId"], 0) > 0:
            self.busy[kw["NetworkInterfaceId"]] -= 1
            raise _violation("DeleteNetworkInterface", kw["NetworkInterfaceId"])
        self.events.append(("eni", kw["NetworkInterfaceId"]))
        return self._client.delete_network_interface(**kw)

    def delete_security_group(self, **kw):
        if self.busy.get(kw["GroupId"], 0) > 0:
            self.busy[kw["GroupId"]] -= 1
            raise _violation("DeleteSecurityGroup", kw["GroupId"])
        self.events.append(("sg", kw["GroupId"]))
        return self._client.delete_security_group(**kw)


class Cfn(Recording):
    """CloudFormation that refuses a delete what it would fail on (see the module docstring)."""

    def __init__(self, client, ec2, events, cluster="tt"):
        super().__init__(client)
        self.ec2, self.events, self.cluster = ec2, events, cluster

    def delete_stack(self, **kw):
        stack = kw["StackName"]
        resources = self._client.list_stack_resources(StackName=stack)["StackResourceSummaries"]
        groups = {r["PhysicalResourceId"] for r in resources
                  if r["ResourceType"] == "AWS::EC2::SecurityGroup"}
        vpcs = {r["PhysicalResourceId"] for r in resources if r["ResourceType"] == "AWS::EC2::VPC"}
        for ni in self.ec2.describe_network_interfaces()["NetworkInterfaces"]:
            detached = ni["Status"] == "available"
            used = {g["GroupId"] for g in ni["Groups"]} & groups
            leaked = {"Key": CNI, "Value": self.cluster} in ni.get("TagSet", [])
            if detached and (used or (ni["VpcId"] in vpcs and leaked)):
                raise _violation("DeleteStack", ni["NetworkInterfaceId"])
        if vpcs and self.ec2.describe_security_groups(Filters=[
                {"Name": "tag:aws:eks:cluster-name", "Values": [self.cluster]},
                {"Name": "vpc-id", "Values": sorted(vpcs)}])["SecurityGroups"]:
            raise _violation("DeleteStack", "the VPC")
        self.events.append(("stack", stack))
        return super().delete_stack(**kw)


def _stack(name, resources):
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.create_stack(StackName=name, TemplateBody=json.dumps({"Resources": resources}),
                     Tags=env_tags("tt"))
    return {r["LogicalResourceId"]: r["PhysicalResourceId"]
            for r in cfn.list_stack_resources(StackName=name)["StackResourceSummaries"]}


def _eni(ec2, subnet, groups, tags=None, description=""):
    spec = [{"ResourceType": "network-interface",
             "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    return ec2.create_network_interface(SubnetId=subnet, Groups=groups, Description=description,
                                        TagSpecifications=spec)["NetworkInterface"][
        "NetworkInterfaceId"]


def _sg(ec2, name, vpc, tags=None):
    spec = [{"ResourceType": "security-group",
             "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    return ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc,
                                     TagSpecifications=spec)["GroupId"]


@pytest.fixture
def world():
    """Environment tt: its network (VPC, subnet), cluster (control-plane group), GPU (EFA group)
    and data stacks, EKS's cluster security group, and the interfaces left in the VPC."""
    ec2 = boto3.client("ec2", region_name=REGION)
    net = _stack("tt-network", {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
        "Private": {"Type": "AWS::EC2::Subnet",
                    "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.0.0.0/20"}}})
    vpc, subnet = net["Vpc"], net["Private"]
    sg = {"Type": "AWS::EC2::SecurityGroup", "Properties": {"GroupDescription": "g", "VpcId": vpc}}
    w = {"vpc": vpc, "subnet": subnet,
         "control": _stack("tt-cluster", {"ControlPlaneSecurityGroup": sg})[
             "ControlPlaneSecurityGroup"],
         "efa": _stack("tt-gpu-p5", {"EfaSecurityGroup": sg})["EfaSecurityGroup"]}
    _stack("tt-data", DATA)
    other_vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    w["eks_sg"] = _sg(ec2, "eks-cluster-sg-tt-1a2b3c", vpc, {"aws:eks:cluster-name": "tt"})
    # Decoys: another cluster's group (its name starts like tt's), tt's name in another VPC.
    w["tt2_sg"] = _sg(ec2, "eks-cluster-sg-tt-2-9z8y", vpc, {"aws:eks:cluster-name": "tt-2"})
    w["far_sg"] = _sg(ec2, "eks-cluster-sg-tt-7f7f", other_vpc, {"aws:eks:cluster-name": "tt"})
    foreign = _sg(ec2, "someone-elses", vpc)
    w["leak"] = _eni(ec2, subnet, [w["efa"], w["eks_sg"]], {CNI: "tt", "node.k8s.amazonaws.com/"
                     "instance_id": "i-0123456789abcdef0"}, "aws-K8S-i-0123456789abcdef0")
    w["detached"] = _eni(ec2, subnet, [w["control"]])
    w["other_cluster"] = _eni(ec2, subnet, [foreign], {CNI: "tt-2"}, "aws-K8S-i-0fedcba987654321")
    w["unproven"] = _eni(ec2, subnet, [foreign], description="made by hand")
    w["in_use"] = _eni(ec2, subnet, [w["efa"]], {CNI: "tt"})
    instance = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                 SubnetId=subnet)["Instances"][0]["InstanceId"]
    ec2.attach_network_interface(NetworkInterfaceId=w["in_use"], InstanceId=instance,
                                 DeviceIndex=1)
    events: list = []
    w["events"], w["ec2"] = events, Ec2(ec2, events)
    w["cfn"] = Cfn(boto3.client("cloudformation", region_name=REGION), ec2, events)
    return w


def _run(tmp_path, w, *flags, sleep=None):
    return run(tmp_path, *flags, cfn=w["cfn"], ec2=w["ec2"], sleep=sleep)[0]


def _enis(w):
    return {ni["NetworkInterfaceId"] for ni in w["ec2"].describe_network_interfaces()[
        "NetworkInterfaces"]}


def _groups(w):
    return {g["GroupId"] for g in w["ec2"].describe_security_groups()["SecurityGroups"]}


def test_leftover_interfaces_and_the_eks_group_go_before_the_deletes_they_would_fail(
        tmp_path, capsys, world):
    w = world
    code = _run(tmp_path, w, "--yes")
    out = capsys.readouterr().out
    assert code == 0, out
    events = w["events"]
    # Listed, then deleted, before the GPU stack; EKS's group after the cluster, before the VPC.
    assert set(events[:2]) == {("eni", w["leak"]), ("eni", w["detached"])}
    assert events[2:] == [("stack", "tt-gpu-p5"), ("stack", "tt-cluster"), ("sg", w["eks_sg"]),
                          ("stack", "tt-network")]
    listing = out.index("Deleting 2 network interface(s)")
    assert listing < out.index(f"deleted {w['leak']}") < out.index("deleting tt-gpu-p5")
    assert (f"{w['leak']} [{w['efa']}, {w['eks_sg']}] 'aws-K8S-i-0123456789abcdef0': available, "
            f"tagged {CNI}=tt") in out
    assert f"{w['detached']} [{w['control']}]: available, detached, in {w['control']} " in out
    # Untouched, and named with the fix: another cluster's, one nothing ties to tt, one in use.
    left = _enis(w)
    assert {w["other_cluster"], w["unproven"], w["in_use"]} <= left
    assert not {w["leak"], w["detached"]} & left
    assert f"Not touching network interface {w['other_cluster']}" in out
    assert f"tagged {CNI}=tt-2, not tt: another cluster's" in out
    assert f"Not touching network interface {w['unproven']}" in out
    assert "still in use that carry tt's cluster tag or security groups" in out
    assert "keeps it (and the network stack) from being deleted" in out
    # Each named once; the one in use again before the network, when nothing should hold it.
    assert out.count(f"Not touching network interface {w['other_cluster']}") == 1
    assert out.count(f"Not touching network interface {w['unproven']}") == 1
    assert out.index(f"Not touching network interface {w['unproven']}") > out.index(
        "deleting tt-cluster")  # it matters to the VPC's delete only
    assert out.count(f"{w['in_use']} [{w['efa']}]: in-use, attached to i-") == 2
    assert "They are still attached, so the VPC cannot be deleted under them" in out
    # Only the group EKS tagged for tt in tt's VPC.
    assert w["eks_sg"] not in _groups(w) and {w["tt2_sg"], w["far_sg"]} <= _groups(w)
    assert "Before the GPU, cluster and network stages" in out  # said before the confirmation


def test_a_dry_run_lists_them_and_deletes_nothing(tmp_path, capsys, world):
    w = world
    before = _enis(w)
    code = _run(tmp_path, w, "--dry-run")
    out = capsys.readouterr().out
    assert code == 0, out
    assert w["events"] == [] and _enis(w) == before and w["eks_sg"] in _groups(w)
    assert out.count("[dry-run] would delete 2 network interface(s)") == 1
    assert w["leak"] in out and w["detached"] in out
    assert f"[dry-run] would delete security group {w['eks_sg']}" in out
    assert w["tt2_sg"] not in out and w["far_sg"] not in out


def test_the_eks_group_is_retried_while_an_interface_still_holds_it(tmp_path, capsys, world):
    w = world
    w["ec2"].busy[w["eks_sg"]] = 2
    slept: list[float] = []
    code = _run(tmp_path, w, "--yes", sleep=slept.append)
    assert code == 0, capsys.readouterr().out
    assert slept[:2] == list(RETRY_DELAYS_S[:2])
    assert w["events"][-2:] == [("sg", w["eks_sg"]), ("stack", "tt-network")]


def test_a_group_still_held_after_the_retries_is_named_and_the_network_delete_goes_ahead(
        tmp_path, capsys, world):
    """The network's delete then fails on the VPC (refused here, as CloudFormation would fail
    it), but CloudFormation deletes the NAT gateways before that: they bill by the hour."""
    w = world
    w["ec2"].busy[w["eks_sg"]] = len(RETRY_DELAYS_S) + 1
    slept: list[float] = []
    code = _run(tmp_path, w, "--yes", sleep=slept.append)
    err = capsys.readouterr().err
    assert code == 1
    assert slept == list(RETRY_DELAYS_S)
    assert (f"warning: security group {w['eks_sg']} (eks-cluster-sg-tt-1a2b3c) could not be "
            "deleted") in err
    assert f"Name=group-id,Values={w['eks_sg']}" in err  # the fix names how to find the holder
    assert "DeleteStack failed: DependencyViolation" in err  # the network's delete was asked


def test_with_an_existing_vpc_the_groups_say_which_vpc_and_eks_group_goes_after_the_cluster(
        world):
    """No network stack (vpc.existing): the environment's security groups name the VPC, and
    EKS's group goes once the cluster stack is gone, since no network stage follows."""
    w = world
    out: list[str] = []
    sweep = NetworkSweep(w["cfn"], w["ec2"], "tt", ["tt-gpu-p5", "tt-cluster"], [], out.append,
                         sleep=lambda s: None)
    sweep.before(["tt-gpu-p5"])
    assert sweep.vpcs == {w["vpc"]}
    assert set(w["events"]) == {("eni", w["leak"]), ("eni", w["detached"])}
    w["cfn"].delete_stack(StackName="tt-gpu-p5")
    w["cfn"].delete_stack(StackName="tt-cluster")
    sweep.after(["tt-cluster"])
    assert w["events"][-1] == ("sg", w["eks_sg"])


def test_only_provable_interfaces_are_deleted():
    def ni(eni, status="available", groups=(), tags=None, **more):
        return {"NetworkInterfaceId": eni, "Status": status, "Description": "",
                "Groups": [{"GroupId": g} for g in groups],
                "TagSet": [{"Key": k, "Value": v} for k, v in (tags or {}).items()], **more}

    owned = {"sg-own": "EfaSecurityGroup of tt-gpu-p5"}
    found = classify([
        ni("eni-cni", tags={CNI: "tt"}),
        ni("eni-sg", groups=["sg-own"]),
        ni("eni-lambda", groups=["sg-own"], RequesterManaged=True, RequesterId="AROAEXAMPLE"),
        ni("eni-other", tags={CNI: "tt-2"}, groups=["sg-own"]),
        ni("eni-used", status="in-use", tags={CNI: "tt"},
           Attachment={"InstanceId": "i-0123456789abcdef0"}),
        ni("eni-nat", status="in-use", InterfaceType="nat_gateway"),
        ni("eni-foreign", groups=["sg-x"]),
    ], "tt", owned)
    assert [i.id for i in found.delete] == ["eni-cni", "eni-sg"]
    # Another cluster's tag wins over a shared group: the CNI tag says whose it is.
    assert [i.id for i in found.untouched] == ["eni-lambda", "eni-other", "eni-foreign"]
    assert [i.id for i in found.in_use] == ["eni-used"]  # the NAT gateway's is not ours to name


def test_a_role_without_the_ec2_permissions_warns_and_deletes_the_stacks_all_the_same(world):
    """Stopping there would leave the GPU nodes billing; the stack deletes usually succeed."""
    w = world

    class Denied(Ec2):
        def get_paginator(self, name):
            raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "no"}}, name)

    out, warned = [], []
    sweep = NetworkSweep(w["cfn"], Denied(w["ec2"]._client, []), "tt", ["tt-gpu-p5"], [],
                         out.append, warn=warned.append)
    sweep.before(["tt-gpu-p5"])
    assert out == [] and len(warned) == 1
    assert "UnauthorizedOperation" in warned[0] and "deleting the stacks all the same" in warned[0]


def test_an_interface_still_going_away_is_retried_then_named_not_fatal(world):
    w = world
    w["ec2"].busy[w["leak"]] = 1
    w["ec2"].busy[w["detached"]] = len(RETRY_DELAYS_S) + 1
    out, slept = [], []
    NetworkSweep(w["cfn"], w["ec2"], "tt", ["tt-gpu-p5", "tt-cluster"], [], out.append,
                 sleep=slept.append).before(["tt-gpu-p5"])
    assert w["events"] == [("eni", w["leak"])]
    assert sorted(slept) == sorted([RETRY_DELAYS_S[0], *RETRY_DELAYS_S])
    assert any(line.startswith(f"Not touching network interface {w['detached']}")
               and "still DependencyViolation" in line for line in out)
