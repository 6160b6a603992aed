"""Network interfaces and the EKS cluster security group that would keep teardown's deletes from
finishing.

The VPC CNI creates and attaches the nodes' secondary interfaces itself, tagged
``cluster.k8s.amazonaws.com/name=<cluster>`` (and ``node.k8s.amazonaws.com/instance_id``); one
it fails to attach or to delete stays behind, status ``available``, in the node's security groups
(the CNI's own clean-up looks for exactly these: available, in the VPC, with both tags;
aws/amazon-vpc-cni-k8s pkg/awsutils/awsutils.go ``getLeakedENIs``
@b52188387f2e2f10bf289ace929d6a63b176a4fa). CloudFormation cannot delete a security group an
interface still uses (DependencyViolation), so one left in a GPU stack's EFA group fails that
stack's delete (eksctl-io/eksctl#1849, pulumi/pulumi-eks#779), and one in the cluster security
group EKS creates (``eks-cluster-sg-<cluster>-*``, which no stack owns) makes EKS's asynchronous
cluster delete leave that group behind, so the VPC's delete fails next (aws/aws-k8s-tester#416,
which deletes such interfaces before the cluster for that reason).

So, before the GPU stacks, the cluster and the network are deleted, teardown deletes the
interfaces in the environment's VPC that provably belong to it: ``available`` and either tagged
by the CNI for this cluster, or detached and in a security group of one of the environment's
stacks being deleted (CloudFormation lists it) or in the cluster security group (EKS tags it
``aws:eks:cluster-name=<cluster>``, a tag no user can set). Each is listed before it is deleted.
Once the cluster stack is gone, the cluster security group EKS left (that tag, this VPC, its
``eks-cluster-sg-<cluster>-`` name) is deleted too. Anything else is never touched: an interface
in use, one tagged for another cluster, one an AWS service manages, one nothing ties to this
environment; those that matter are named with what to do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from infra import names
from ops.aws import AWS_ERRORS, describe_error, error_code, tag_dict
from ops.teardown import _gpu_group_of, stack_resources, stack_status

CNI_CLUSTER_TAG = "cluster.k8s.amazonaws.com/name"
EKS_CLUSTER_TAG = "aws:eks:cluster-name"
# Deleting an interface just detached, or a group whose last interface was just deleted, can
# answer DependencyViolation for a while: retried after these waits (about 4 min in all).
RETRY_DELAYS_S = (5, 10, 20, 40, 60, 60, 60)
SHOWN_IN_USE = 5  # in-use interfaces named one by one; more are counted


@dataclass(frozen=True)
class Interface:
    id: str
    groups: tuple[str, ...]
    description: str
    why: str  # why it is deleted, or why it is not touched
    # Whether anything ties it to the environment (its cluster tag, one of its groups): one that
    # is not matters only to the VPC's delete.
    related: bool = True

    def line(self) -> str:
        desc = f" {self.description!r}" if self.description else ""
        return f"{self.id} [{', '.join(self.groups) or 'no security group'}]{desc}: {self.why}"


@dataclass
class Found:
    delete: list[Interface] = field(default_factory=list)
    untouched: list[Interface] = field(default_factory=list)  # worth naming: listed with a fix
    in_use: list[Interface] = field(default_factory=list)  # attached, in the environment's groups


def classify(interfaces: list[dict[str, Any]], cluster: str, owned: dict[str, str]) -> Found:
    """Which interfaces teardown deletes. ``owned``: security group ID -> what proves it is the
    environment's (its stack, or EKS's tag)."""
    found = Found()
    for ni in interfaces:
        groups = tuple(g["GroupId"] for g in ni.get("Groups", []))
        tagged = tag_dict(ni.get("TagSet")).get(CNI_CLUSTER_TAG)
        ours = [g for g in groups if g in owned]
        available = ni.get("Status") == "available" and not ni.get("Attachment")

        def entry(why: str, related: bool = True) -> Interface:
            return Interface(ni["NetworkInterfaceId"], groups, ni.get("Description", ""), why,
                             related)

        if not available:
            if tagged is not None or ours:
                attached = (ni.get("Attachment") or {}).get("InstanceId") or ni.get(
                    "InterfaceType", "")
                found.in_use.append(entry(f"{ni.get('Status')}, attached to {attached or '?'}"))
            continue  # an interface of something else (a NAT gateway): its own stack's
        if ni.get("RequesterManaged"):
            if tagged is not None or ours:
                found.untouched.append(entry(
                    f"available, but managed by {ni.get('RequesterId', 'an AWS service')}, which "
                    "deletes it"))
            continue
        if tagged is not None and tagged != cluster:  # the CNI's tag says whose it is
            found.untouched.append(entry(
                f"available, but tagged {CNI_CLUSTER_TAG}={tagged}, not {cluster}: another "
                "cluster's"))
        elif tagged == cluster:
            found.delete.append(entry(f"available, tagged {CNI_CLUSTER_TAG}={cluster}"))
        elif ours:
            found.delete.append(entry(f"available, detached, in {ours[0]} ({owned[ours[0]]})"))
        else:
            found.untouched.append(entry(
                f"available, but nothing proves it is this environment's (no {CNI_CLUSTER_TAG}="
                f"{cluster} tag, and none of its security groups)", related=False))
    return found


def announcement(env_name: str, stacks: list[str]) -> str | None:
    """The plan's line for this clean-up (said before the confirmation), when a stage has it."""
    stack = names.stack_names(env_name)
    if not any(s in (stack["cluster"], stack["network"]) or _gpu_group_of(env_name, s)
               for s in stacks):
        return None
    cluster = names.eks_cluster_name(env_name)
    return (f"  Before the GPU, cluster and network stages: delete the network interfaces left "
            f"in {env_name}'s VPC (available, and tagged {CNI_CLUSTER_TAG}={cluster} or detached "
            f"in one of its stacks' security groups), listed first; after the cluster: the "
            f"security group EKS may leave (eks-cluster-sg-{cluster}-*, tagged "
            f"{EKS_CLUSTER_TAG}={cluster}). Interfaces in use or of anything else are not touched.")


def _retry(call: Callable[[], Any], sleep: Callable[[float], None]) -> None:
    """``call`` until it stops answering DependencyViolation, RETRY_DELAYS_S apart; the last
    DependencyViolation is raised."""
    for delay in (*RETRY_DELAYS_S, None):
        try:
            call()
            return
        except AWS_ERRORS as err:
            if error_code(err) != "DependencyViolation" or delay is None:
                raise
        sleep(delay)


class NetworkSweep:
    """The clean-up around teardown's stages: ``before(stage)`` and ``after(stage)``.

    ``stacks``: the stacks the teardown deletes (the security groups that prove an interface is
    the environment's are theirs; a kept stack's are not); ``kept``: those it keeps (a kept
    network still says which VPC is the environment's)."""

    def __init__(self, cfn: Any, ec2: Any, env_name: str, stacks: list[str], kept: list[str],
                 echo: Callable[[str], None], dry_run: bool = False,
                 sleep: Callable[[float], None] = time.sleep,
                 warn: Callable[[str], None] | None = None) -> None:
        self.cfn, self.ec2, self.echo, self.dry_run, self.sleep = cfn, ec2, echo, dry_run, sleep
        self.warn = warn or echo
        self.env = env_name
        self.cluster = names.eks_cluster_name(env_name)
        self.stack = names.stack_names(env_name)
        self.stacks, self.kept = list(stacks), list(kept)
        self.vpcs: set[str] = set()  # every VPC found so far: a later stage may no longer show it
        self.listed = False  # a dry run lists the interfaces once
        self.reported: set[str] = set()  # interfaces named as not touched, named once

    # --- the stages ----------------------------------------------------------------------------

    def before(self, stage: list[str]) -> None:
        network = self.stack["network"] in stage
        if network or self._nodes_or_cluster(stage):
            self._guarded(final=network, groups=network)

    def after(self, stage: list[str]) -> None:
        """After the cluster stack's stage, when no network stage follows (an existing VPC, or a
        network kept with the file system): EKS's group would outlast the teardown."""
        if self.stack["cluster"] in stage and self.stack["network"] not in self.stacks:
            self._guarded(final=False, groups=True)

    def _guarded(self, final: bool, groups: bool) -> None:
        """The clean-up; an AWS error (a role without these permissions) is a warning, not a
        stop: the stack deletes, which usually succeed without it, stop the GPU nodes' billing."""
        try:
            if not (self.dry_run and self.listed):
                self.interfaces(final=final)
            if groups:
                self.cluster_security_groups()
        except AWS_ERRORS as err:
            self.warn(f"warning: could not clean up the network interfaces and security groups "
                      f"that would fail the next deletes ({describe_error(err)}); deleting the "
                      "stacks all the same. Fix: grant the ec2 permissions of docs/operations.md's "
                      "teardown row; if a delete then fails on a security group or the VPC, run "
                      "teardown again")

    def _nodes_or_cluster(self, stage: list[str]) -> bool:
        return any(s == self.stack["cluster"] or _gpu_group_of(self.env, s) for s in stage)

    # --- what is the environment's ---------------------------------------------------------------

    def owned_groups(self) -> dict[str, str]:
        """Security group ID -> why it is the environment's: those of its stacks still deployed
        (CloudFormation's resource list), and the cluster security group EKS tagged for its
        cluster in its VPC."""
        owned = {}
        for stack in self.stacks:
            if stack_status(self.cfn, stack) is None:
                continue
            for r in stack_resources(self.cfn, stack, {}):
                if r.type == "AWS::EC2::SecurityGroup" and r.physical_id.startswith("sg-"):
                    owned[r.physical_id] = f"{r.logical_id} of {stack}"
        self.vpcs |= self._vpcs(list(owned))
        owned.update({g["GroupId"]: f"EKS's cluster security group {g['GroupName']}"
                      for g in self._eks_groups()})
        return owned

    def _vpcs(self, groups: list[str]) -> set[str]:
        """The environment's VPC: the network stack's (deleted or kept); with an existing VPC (no
        network stack), the VPC of the environment's security groups."""
        network = self.stack["network"]
        if network in self.stacks + self.kept and stack_status(self.cfn, network) is not None:
            found = {r.physical_id for r in stack_resources(self.cfn, network, {})
                     if r.type == "AWS::EC2::VPC"}
            if found:
                return found
        if not groups:
            return set()
        return {g["VpcId"] for g in self.ec2.describe_security_groups(GroupIds=groups).get(
            "SecurityGroups", []) if g.get("VpcId")}

    def _eks_groups(self) -> list[dict[str, Any]]:
        if not self.vpcs:
            return []
        prefix = f"eks-cluster-sg-{self.cluster}-"
        return [g for page in self.ec2.get_paginator("describe_security_groups").paginate(
                    Filters=[{"Name": f"tag:{EKS_CLUSTER_TAG}", "Values": [self.cluster]},
                             {"Name": "vpc-id", "Values": sorted(self.vpcs)}])
                for g in page.get("SecurityGroups", [])
                if tag_dict(g.get("Tags")).get(EKS_CLUSTER_TAG) == self.cluster
                and g.get("VpcId") in self.vpcs and g.get("GroupName", "").startswith(prefix)]

    # --- the clean-up ----------------------------------------------------------------------------

    def interfaces(self, final: bool) -> None:
        """List, then delete, the environment's leftover interfaces; name the others that matter.
        ``final``: the network's delete comes next, so any interface left in the VPC blocks it."""
        owned = self.owned_groups()
        if not self.vpcs:
            return
        self.listed = True
        vpcs = sorted(self.vpcs)
        interfaces = [ni for page in self.ec2.get_paginator("describe_network_interfaces").paginate(
            Filters=[{"Name": "vpc-id", "Values": vpcs}]) for ni in page.get("NetworkInterfaces", [])]
        found = classify(interfaces, self.cluster, owned)
        dry = "[dry-run] would delete" if self.dry_run else "Deleting"
        if found.delete:
            self.echo(f"{dry} {len(found.delete)} network interface(s) left in {', '.join(vpcs)} "
                      f"that are {self.env}'s (CloudFormation cannot delete a security group or "
                      "VPC an interface still uses):")
            for ni in found.delete:
                self.echo(f"  {ni.line()}")
        for ni in [] if self.dry_run else found.delete:
            try:
                _retry(lambda i=ni.id: self.ec2.delete_network_interface(NetworkInterfaceId=i),
                       self.sleep)
                self.echo(f"  deleted {ni.id}")
            except AWS_ERRORS as err:
                code = error_code(err)
                if code == "InvalidNetworkInterfaceID.NotFound":
                    self.echo(f"  {ni.id} is gone already")
                elif code == "InvalidNetworkInterface.InUse":
                    found.untouched.append(Interface(ni.id, ni.groups, ni.description,
                                                     "attached again since it was listed"))
                elif code == "DependencyViolation":  # named below; the stacks still go
                    found.untouched.append(Interface(
                        ni.id, ni.groups, ni.description,
                        f"could not be deleted: still DependencyViolation after "
                        f"{sum(RETRY_DELAYS_S)} s"))
                else:
                    raise
        # Each named once; one nothing ties to the environment only before the VPC's delete, and
        # one in use again there, when nothing of the environment should hold it any more.
        untouched = [ni for ni in found.untouched
                     if ni.id not in self.reported and (final or ni.related)]
        in_use = [ni for ni in found.in_use if final or ni.id not in self.reported]
        self.reported |= {ni.id for ni in untouched + in_use}
        for ni in untouched:
            self.echo(f"Not touching network interface {ni.line()}.")
        if untouched:
            self.echo(
                "  Fix: check each (aws ec2 describe-network-interfaces --network-interface-ids "
                "ID); if it is not needed, delete it (aws ec2 delete-network-interface "
                "--network-interface-id ID) and run teardown again. One left in a security group "
                "of a stack being deleted fails that stack's delete, and any left in the VPC keeps "
                "it (and the network stack) from being deleted.")
        if in_use:
            shown = "; ".join(ni.line() for ni in in_use[:SHOWN_IN_USE])
            more = len(in_use) - SHOWN_IN_USE
            self.echo(f"Not touching {len(in_use)} network interface(s) still in use that carry "
                      f"{self.env}'s cluster tag or security groups: {shown}"
                      + (f"; and {more} more" if more > 0 else "") + ".")
            self.echo(
                "  They are still attached, so the VPC cannot be deleted under them. Fix: find "
                "what holds each (the Attachment of aws ec2 describe-network-interfaces), stop "
                "or detach it, then run teardown again." if final else
                "  Their instances go with the stacks deleted next, and their interfaces with "
                "them; one the CNI leaves behind is deleted before the next stage.")

    def cluster_security_groups(self) -> None:
        """Delete the cluster security group EKS left once the cluster stack is gone."""
        self.owned_groups()  # the VPC, when this is the first look
        groups = self._eks_groups()
        if not groups:
            return
        if self.dry_run:
            for g in groups:
                self.echo(f"[dry-run] would delete security group {g['GroupId']} "
                          f"({g['GroupName']}, tagged {EKS_CLUSTER_TAG}={self.cluster}) if EKS "
                          "leaves it once the cluster stack is gone")
            return
        if stack_status(self.cfn, self.stack["cluster"]) is not None:
            for g in groups:
                self.echo(f"Not deleting security group {g['GroupId']} ({g['GroupName']}): stack "
                          f"{self.stack['cluster']} still exists, and EKS deletes the group with "
                          "its cluster.")
            return
        for g in groups:
            self.echo(f"Deleting security group {g['GroupId']} ({g['GroupName']}, tagged "
                      f"{EKS_CLUSTER_TAG}={self.cluster}, in {g['VpcId']}): EKS left it after "
                      "deleting the cluster, and no stack owns it")
            try:
                _retry(lambda i=g["GroupId"]: self.ec2.delete_security_group(GroupId=i),
                       self.sleep)
            except AWS_ERRORS as err:
                code = error_code(err)
                if code == "InvalidGroup.NotFound":
                    self.echo(f"  {g['GroupId']} is gone already (EKS deleted it)")
                    continue
                if code != "DependencyViolation":
                    raise
                # The network's delete goes ahead: it fails on the VPC, but only after
                # CloudFormation deleted what bills (the NAT gateways).
                self.warn(
                    f"warning: security group {g['GroupId']} ({g['GroupName']}) could not be "
                    f"deleted: still DependencyViolation after {sum(RETRY_DELAYS_S)} s, so the "
                    "VPC's delete will fail. Fix: aws ec2 describe-network-interfaces --filters "
                    f"Name=group-id,Values={g['GroupId']} lists the interfaces that use it (and "
                    "aws ec2 describe-security-groups --filters "
                    f"Name=ip-permission.group-id,Values={g['GroupId']} the groups whose rules "
                    "name it); remove those, then run teardown again")
                continue
            self.echo(f"  deleted {g['GroupId']}")
