"""What one `rlkit preflight` run reads from AWS, each answer read once.

Several checks need the same answer: the GPU stack's template (node taints, the GPU node roll),
its resources (placement group kept, node AMI release, the node roll), the cluster stack's
outputs (the capacity block update of each Capacity Block group), a node group's description,
a reservation (its own checks and the UltraServer block's), an instance type's offerings (each
group of that type), a Local Zone (each UltraServer group in it), the environment's stack
listing (the existing stacks and the stacks left out checks) and the cluster's version, node
groups and add-ons (ops.preflight_upgrade). ``run_preflight`` makes one ``PreflightReads`` and
passes it down, so each of those is one AWS call per run, not one per check: on a workstation
with several GPU groups every call is latency and a throttling risk.
It is a record of one run, never global: the next run reads afresh.

An answer that is an AWS error is kept too and raised again for each later reader, so every
check that needs it still gives its own verdict (a warning naming its permission) from one call.
A stack CloudFormation says does not exist (before its first deploy) is asked about once: its
other reads raise the same error without a call, and each check reads it as "not deployed".
"""

from __future__ import annotations

import json
from typing import Any, Callable, TypeVar

from ops.aws import AWS_ERRORS, AwsClients, describe_error

T = TypeVar("T")


def not_deployed(err: BaseException) -> bool:
    """Does ``err`` say the stack does not exist? CloudFormation answers DescribeStacks,
    GetTemplate and DescribeStackResources for an unknown stack with a ValidationError "Stack
    with id <name> does not exist"."""
    return "does not exist" in describe_error(err)


class PreflightReads:
    """One preflight run's reads: the clients, and every answer read so far."""

    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients
        self._answers: dict[tuple, Any] = {}  # (operation, resource) -> value or the AWS error
        self._missing: dict[str, BaseException] = {}  # stack -> the error that said so

    def _once(self, key: tuple, read: Callable[[], T]) -> T:
        if key not in self._answers:
            try:
                self._answers[key] = read()
            except AWS_ERRORS as err:
                self._answers[key] = err
        answer = self._answers[key]
        if isinstance(answer, BaseException):
            raise answer.with_traceback(None)  # each reader's own traceback, not a growing one
        return answer

    def _stack(self, operation: str, stack: str, read: Callable[[], T]) -> T:
        if stack in self._missing:
            raise self._missing[stack].with_traceback(None)
        try:
            return self._once((operation, stack), read)
        except AWS_ERRORS as err:
            if not_deployed(err):
                self._missing[stack] = err
            raise

    # --- CloudFormation (the kit's stacks) ----------------------------------------------------

    def stack_description(self, stack: str) -> dict | None:
        """DescribeStacks' description of ``stack`` (its outputs, tags, status); None when none
        is listed."""
        def read() -> dict | None:
            described = self.clients.cloudformation.describe_stacks(StackName=stack)
            return next(iter(described.get("Stacks", [])), None)
        return self._stack("DescribeStacks", stack, read)

    def stack_outputs(self, stack: str) -> dict[str, str] | None:
        """``{OutputKey: OutputValue}`` of ``stack`` (DescribeStacks); None when none is listed."""
        described = self.stack_description(stack)
        if described is None:
            return None
        return {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}

    def prefixed_stacks(self, prefix: str) -> list[dict[str, str]]:
        """``{"name", "status"}`` of every live (not DELETE_COMPLETE) stack named ``<prefix>-*``
        (ListStacks, every page), sorted by name."""
        return self._once(("ListStacks", prefix),
                          lambda: list_prefixed_stacks(self.clients.cloudformation, prefix))

    def stack_resources(self, stack: str) -> list[dict]:
        """The resources of ``stack`` (DescribeStackResources)."""
        return self._stack("DescribeStackResources", stack,
                           lambda: self.clients.cloudformation.describe_stack_resources(
                               StackName=stack)["StackResources"])

    def stack_template(self, stack: str) -> dict:
        """The deployed template of ``stack`` (GetTemplate), parsed."""
        def read() -> dict:
            body = self.clients.cloudformation.get_template(StackName=stack)["TemplateBody"]
            # botocore parses a JSON template body itself; a stubbed answer may be the string
            return body if isinstance(body, dict) else json.loads(body)
        return self._stack("GetTemplate", stack, read)

    # --- EKS and EC2 --------------------------------------------------------------------------

    def nodegroup(self, cluster: str, nodegroup: str) -> dict:
        """EKS DescribeNodegroup's ``nodegroup`` of ``cluster``/``nodegroup``."""
        return self._once(("DescribeNodegroup", cluster, nodegroup),
                          lambda: self.clients.eks.describe_nodegroup(
                              clusterName=cluster, nodegroupName=nodegroup)["nodegroup"])

    def cluster(self, cluster: str) -> dict:
        """EKS DescribeCluster's ``cluster`` (its Kubernetes ``version``)."""
        return self._once(("DescribeCluster", cluster),
                          lambda: self.clients.eks.describe_cluster(name=cluster)["cluster"])

    def nodegroup_names(self, cluster: str) -> list[str]:
        """Every managed node group of ``cluster`` (EKS ListNodegroups, every page), the kit's
        and any other: EKS's version rules count them all."""
        return self._once(("ListNodegroups", cluster), lambda: _pages(
            self.clients.eks.get_paginator("list_nodegroups"), "nodegroups", clusterName=cluster))

    def addon_names(self, cluster: str) -> list[str]:
        """Every EKS add-on of ``cluster`` (ListAddons, every page)."""
        return self._once(("ListAddons", cluster), lambda: _pages(
            self.clients.eks.get_paginator("list_addons"), "addons", clusterName=cluster))

    def addon(self, cluster: str, addon: str) -> dict:
        """EKS DescribeAddon's ``addon`` (its ``addonVersion``)."""
        return self._once(("DescribeAddon", cluster, addon),
                          lambda: self.clients.eks.describe_addon(
                              clusterName=cluster, addonName=addon)["addon"])

    def addon_versions(self, addon: str, kubernetes_version: str) -> list[dict]:
        """The builds of ``addon`` EKS offers for ``kubernetes_version`` (DescribeAddonVersions,
        every page): AddonVersionInfo items, with their ``compatibilities``."""
        def read() -> list[dict]:
            infos = _pages(self.clients.eks.get_paginator("describe_addon_versions"), "addons",
                           addonName=addon, kubernetesVersion=kubernetes_version)
            return [v for info in infos for v in info.get("addonVersions", [])]
        return self._once(("DescribeAddonVersions", addon, kubernetes_version), read)

    def capacity_reservations(self, reservation_id: str) -> list[dict]:
        """EC2 DescribeCapacityReservations of ``reservation_id`` (an empty list: none listed)."""
        return self._once(("DescribeCapacityReservations", reservation_id),
                          lambda: self.clients.ec2.describe_capacity_reservations(
                              CapacityReservationIds=[reservation_id]).get(
                                  "CapacityReservations", []))

    def offered_zones(self, instance_type: str) -> list[str]:
        """The zones that offer ``instance_type`` (DescribeInstanceTypeOfferings, every page)."""
        def read() -> list[str]:
            zones: list[str] = []
            paginator = self.clients.ec2.get_paginator("describe_instance_type_offerings")
            for page in paginator.paginate(LocationType="availability-zone", Filters=[
                    {"Name": "instance-type", "Values": [instance_type]}]):
                zones += [o["Location"] for o in page.get("InstanceTypeOfferings", [])]
            return sorted(set(zones))
        return self._once(("DescribeInstanceTypeOfferings", instance_type), read)

    def availability_zone(self, zone: str) -> list[dict]:
        """EC2 DescribeAvailabilityZones of ``zone`` (all zones, opted in or not)."""
        return self._once(("DescribeAvailabilityZones", zone),
                          lambda: self.clients.ec2.describe_availability_zones(
                              ZoneNames=[zone], AllAvailabilityZones=True).get(
                                  "AvailabilityZones", []))


def _pages(paginator: Any, key: str, **params: Any) -> list:
    """``key`` of every page ``paginator`` reads."""
    return [item for page in paginator.paginate(**params) for item in page.get(key, [])]


def list_prefixed_stacks(cfn: Any, prefix: str) -> list[dict[str, str]]:
    """Live (not DELETE_COMPLETE) stacks whose names start with ``<prefix>-``."""
    out = []
    for page in cfn.get_paginator("list_stacks").paginate():
        for s in page.get("StackSummaries", []):
            if s["StackStatus"] != "DELETE_COMPLETE" and s["StackName"].startswith(prefix + "-"):
                out.append({"name": s["StackName"], "status": s["StackStatus"]})
    return sorted(out, key=lambda s: s["name"])
