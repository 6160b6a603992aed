"""Reading what a deployed stack holds, for the preflight checks that compare it with the config:
each read returns the value, or the verdict that ends the check (a pass when the stack is not
deployed yet, a warning naming the permission when it cannot be read). The reads go through the
run's ``ops.preflight_reads.PreflightReads``, so checks that need the same stack share one call."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from infra.problems import PASS, WARN
from ops.aws import AWS_ERRORS, describe_error
from ops.check_result import Check
from ops.preflight_reads import PreflightReads, not_deployed

T = TypeVar("T")


def read_stack(check: str, subject: str, stack: str, read: Callable[[], T], creates: str,
               permission: str) -> T | Check:
    """``read()`` of a deployed stack, or the verdict that ends the check: a pass when the stack
    is not deployed (its first deploy creates ``creates``), a warning when it cannot be read."""
    try:
        return read()
    except AWS_ERRORS as err:
        if not_deployed(err):
            return Check(check, subject, PASS,
                         f"{stack} is not deployed: the first deploy creates {creates}")
        return Check(check, subject, WARN, f"could not read {stack}: {describe_error(err)}",
                     f"allow {permission}, then run preflight again before deploying {stack}")


def deployed_template(reads: PreflightReads, check: str, subject: str, stack: str,
                      creates: str) -> dict | Check:
    """The deployed template of ``stack``, or the verdict that ends the check (``read_stack``)."""
    return read_stack(check, subject, stack, lambda: reads.stack_template(stack), creates,
                      "cloudformation:GetTemplate")


def deployed_resources(reads: PreflightReads, check: str, subject: str, stack: str,
                       creates: str) -> list[dict] | Check:
    """The deployed resources of ``stack``, or the verdict that ends the check (``read_stack``)."""
    return read_stack(check, subject, stack, lambda: reads.stack_resources(stack), creates,
                      "cloudformation:DescribeStackResources")


def nodegroup_id(resources: list[dict]) -> tuple[str, str] | None:
    """(cluster, node group) of the node group among a stack's ``resources``: its physical ID is
    <cluster>/<node group> (CDK's Nodegroup splits its Ref so); None when it has none yet."""
    ids = [r["PhysicalResourceId"] for r in resources if r["ResourceType"] == "AWS::EKS::Nodegroup"
           and "/" in r.get("PhysicalResourceId", "")]
    if not ids:
        return None
    cluster, nodegroup = ids[0].split("/", 1)
    return cluster, nodegroup


def tag_changes(deployed: dict[str, str], wanted: dict[str, str]) -> str:
    """``key: old -> new`` for each tag that differs, sorted, joined with "; "."""
    return "; ".join(sorted(f"{k}: {deployed.get(k, '(none)')} -> {wanted.get(k, '(none)')}"
                            for k in deployed.keys() | wanted.keys()
                            if deployed.get(k) != wanted.get(k)))


def stacks_importing(cfn: Any, export: str) -> list[str]:
    """The stacks that import CloudFormation export ``export`` (ListImports, every page; none is
    an error in ListImports' own answer, "is not imported by any stack")."""
    users, token = [], None
    try:
        while True:
            page = cfn.list_imports(ExportName=export, **({"NextToken": token} if token else {}))
            users += page.get("Imports", [])
            if not (token := page.get("NextToken")):
                return sorted(users)
    except AWS_ERRORS as err:
        if "is not imported by any stack" not in str(err):
            raise
        return []
