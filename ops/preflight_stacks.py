"""Preflight checks of what a deploy of this config leaves as it is: stacks it no longer builds,
and log groups it would fail to create.

- **Stacks left out** (CloudFormation ListStacks, DescribeStacks): the app builds the
  observability, storage and network stacks, and one per GPU group, only when the config asks
  (``stacks/kit.py``; ``app_stack_names`` says which). `cdk deploy --all` deploys the app's stacks
  and never deletes one that left it (aws/aws-cdk-cli#787, open), and `cdk destroy` selects only
  from the stacks the app builds [aws/aws-cdk-cli@7ff50e77
  packages/@aws-cdk/toolkit-lib/lib/toolkit/toolkit.ts ``_destroy``: ``assembly.selectStacksV2``].
  So turning ``observability.enabled`` off, removing the shared file system or a GPU group leaves
  its stack deployed and billing; for observability worse: the same deploy deletes the cluster
  stack's log groups while the add-on still writes to them, and its CloudWatch agent creates the
  performance group again on its own, without the kit's key or retention, which then fails the
  deploy that turns observability back on.
- **Log groups outside the stack** (CloudWatch Logs DescribeLogGroups, CloudFormation
  DescribeStackResources): a group the cluster stack creates (``AWS::Logs::LogGroup`` with a fixed
  name) that already exists outside it fails that create, and the cluster stack update rolls back.

Both read through the run's ``PreflightReads``; neither changes anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra import names
from infra.cdk_cli import cdk_command
from infra.config import KitConfig, has_shared_fs
from infra.problems import FAIL, PASS, WARN
from ops.aws import AWS_ERRORS, describe_error, tag_dict
from ops.check_result import Check
from ops.preflight_reads import PreflightReads, not_deployed

LEFT_OUT = "stacks left out"
LOG_GROUPS = "log groups outside the stack"
_CDK_787 = "aws/aws-cdk-cli#787"
# The CloudWatch agent creates a log group it finds missing, with CreateLogGroup's defaults (no
# KMS key) [aws/amazon-cloudwatch-agent@0792a3d plugins/outputs/cloudwatchlogs/internal/pusher/
# target.go createLogGroupAndStream, createLogGroup].
_AGENT_CREATES = ("amazon-cloudwatch-agent@0792a3d plugins/outputs/cloudwatchlogs/internal/"
                  "pusher/target.go createLogGroupAndStream")


def app_stack_names(cfg: KitConfig) -> list[str]:
    """The stacks ``stacks.kit.build_stacks`` builds for ``cfg``, in its order
    (tests/ops/test_preflight_stacks.py compares the two for every example)."""
    stack = names.stack_names(cfg.name)
    built = [stack["network"]] if cfg.vpc.existing is None else []
    built += [stack["data"], stack["cluster"]]
    if cfg.observability.enabled:
        built.append(stack["observability"])
    if has_shared_fs(cfg):
        built += [stack["storage"], stack["storage_access"]]
    return built + [names.gpu_stack_name(cfg.name, g) for g in cfg.gpu_node_groups]


def _role(cfg: KitConfig, stack: str) -> str:
    """Which of the environment's stacks ``stack`` is: a ``stack_names`` key, or ``gpu``."""
    for role, name in names.stack_names(cfg.name).items():
        if name == stack:
            return role
    return "gpu"


def _left_out_because(cfg: KitConfig, stack: str) -> str:
    role = _role(cfg, stack)
    if role == "observability":
        performance = names.container_insights_log_group(names.eks_cluster_name(cfg.name),
                                                         "performance")
        return ("observability.enabled is false; the add-on's CloudWatch agent and Fluent Bit keep "
                "running on every node and billing, while a deploy of this config deletes (or "
                "did delete) the cluster stack's log groups they write to: Fluent Bit then drops "
                f"the lines, and the agent creates {performance} again itself, with no KMS key "
                f"and none of the kit's retention ({_AGENT_CREATES}), which then fails the "
                "deploy that turns observability back on")
    if role in ("storage", "storage_access"):
        return ("storage.shared_filesystem.type is none; the file system keeps billing for its "
                "storage and throughput")
    if role == "network":
        return "vpc.existing is set"
    group = stack[len(names.gpu_stack_name(cfg.name, "")):]
    return (f"gpu_node_groups has no group {group!r}; its node group keeps its nodes, billed by "
            "the hour")


def _delete(stack: str, region: str) -> str:
    return (f"aws cloudformation delete-stack --stack-name {stack} --region {region} && aws "
            f"cloudformation wait stack-delete-complete --stack-name {stack} --region {region}")


def check_stacks_left_out(reads: PreflightReads, cfg: KitConfig, region: str,
                          config: str | Path | None = None) -> Check:
    """FAIL when a deployed stack of this environment (by name and by its ``rlkit:environment``
    tag) is one this config no longer builds: the deploy would leave it running, billed."""
    subject = f"name = {cfg.name!r}"
    try:
        listed = reads.prefixed_stacks(cfg.name)
    except AWS_ERRORS as err:
        return Check(LEFT_OUT, subject, WARN, describe_error(err),
                     "allow cloudformation:ListStacks, then run preflight again")
    built = set(app_stack_names(cfg))
    candidates = [s["name"] for s in listed if s["name"] not in built
                  and names.environment_of_stack(s["name"]) == cfg.name]
    ours, others, unread = [], [], []
    for stack in candidates:
        try:
            described = reads.stack_description(stack) or {}
        except AWS_ERRORS as err:
            if not not_deployed(err):  # deleted since the listing: nothing left out
                unread.append(f"{stack} ({describe_error(err)})")
            continue
        env = tag_dict(described.get("Tags")).get(names.ENVIRONMENT_TAG)
        (ours if env == cfg.name else others).append(stack)
    # A stack named like ours whose tag says otherwise is someone else's: a name alone proves
    # nothing (the same rule as teardown's).
    note = (f"; {', '.join(others)} look like stacks of {cfg.name} but lack its "
            f"{names.ENVIRONMENT_TAG} tag: left alone" if others else "")
    if not ours and unread:
        return Check(LEFT_OUT, subject, WARN,
                     f"could not read {', '.join(unread)}, which this config does not build{note}",
                     "allow cloudformation:DescribeStacks, then run preflight again")
    if not ours:
        return Check(LEFT_OUT, subject, PASS,
                     f"every deployed stack of {cfg.name} is one this config builds{note}")
    why = "; ".join(f"{s}: {_left_out_because(cfg, s)}" for s in ours)
    detail = (f"deployed, but this config no longer builds them: {why}. `cdk deploy --all` never "
              f"deletes a stack that left the app ({_CDK_787}), and `cdk destroy` selects only "
              f"the stacks the app builds{note}")
    network = names.stack_names(cfg.name)["network"]
    if network in ours:
        return Check(LEFT_OUT, subject, FAIL, detail,
                     f"an environment cannot move to vpc.existing in place: the cluster, storage "
                     f"and GPU stacks import {network}'s subnets, so it cannot be deleted first, "
                     "and the deploy would move them to another VPC. Remove vpc.existing, or tear "
                     "the environment down (rlkit teardown) and deploy it again")
    # The storage-access stack opens the file system's ports, so it goes before the storage stack.
    order = sorted(ours, key=lambda s: _role(cfg, s) == "storage")
    restore = cdk_command("destroy", *order, config=config)
    fix = (f"before deploying, delete {'them' if len(order) > 1 else 'it'}: "
           + "; then ".join(_delete(s, region) for s in order)
           + f". Or, with the config as it was when they were deployed: {restore}. Then deploy")
    if any(_role(cfg, s) == "storage" for s in order):
        fix += (". Deleting the storage stack deletes its file system, with every file not yet "
                "in the data bucket, unless the deployed stack retains it (storage.retain): a "
                "retained one stays, billed, outside any stack; delete it with aws fsx "
                "delete-file-system once its data is in the bucket")
    return Check(LEFT_OUT, subject, FAIL, detail, fix)


def kit_log_group_names(cluster_name: str) -> list[str]:
    """The log groups the cluster stack creates (``infra.constructs.observability.
    ClusterLogGroups``; tests/ops/test_preflight_stacks.py compares with the template)."""
    return [names.control_plane_log_group(cluster_name)] + [
        names.container_insights_log_group(cluster_name, kind)
        for kind in (*names.CONTAINER_INSIGHTS_LOG_KINDS, names.TRAINING_METRICS_LOG_KIND)]


def _existing_log_groups(logs: Any, wanted: list[str]) -> dict[str, dict]:
    """Name -> DescribeLogGroups' entry, of the ``wanted`` groups that exist."""
    found: dict[str, dict] = {}
    for prefix in sorted({name.rsplit("/", 1)[0] + "/" for name in wanted}):
        for page in logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=prefix):
            found.update({g["logGroupName"]: g for g in page.get("logGroups", [])
                          if g["logGroupName"] in wanted})
    return found


def _describe_group(group: dict) -> str:
    days = group.get("retentionInDays")
    kept = f"kept {days} days" if days else "kept forever (no retention)"
    key = "a KMS key" if group.get("kmsKeyId") else "no KMS key"
    return f"{group['logGroupName']} ({kept}, {key}, {group.get('storedBytes', 0)} bytes stored)"


def check_log_groups_outside_stack(reads: PreflightReads, cfg: KitConfig, region: str) -> Check:
    """The kit's log groups that exist outside the cluster stack: FAIL when this config creates
    them (the create fails, the update rolls back), WARN otherwise (billed, and in the way of
    turning observability on)."""
    cluster = names.eks_cluster_name(cfg.name)
    stack = names.stack_names(cfg.name)["cluster"]
    subject = f"observability.enabled = {str(cfg.observability.enabled).lower()}"
    try:
        existing = _existing_log_groups(reads.clients.logs, kit_log_group_names(cluster))
    except AWS_ERRORS as err:
        return Check(LOG_GROUPS, subject, WARN, f"could not list log groups: {describe_error(err)}",
                     "allow logs:DescribeLogGroups, then run preflight again")
    if not existing:
        return Check(LOG_GROUPS, subject, PASS, f"no log group of cluster {cluster} exists yet")
    try:
        held = {r.get("PhysicalResourceId") for r in reads.stack_resources(stack)
                if r.get("ResourceType") == "AWS::Logs::LogGroup"}
    except AWS_ERRORS as err:
        if not not_deployed(err):
            return Check(LOG_GROUPS, subject, WARN,
                         f"{', '.join(existing)} exist; could not read {stack}'s resources to "
                         f"tell whether it holds them: {describe_error(err)}",
                         "allow cloudformation:DescribeStackResources, then run preflight again")
        held = set()
    outside = [existing[name] for name in sorted(existing) if name not in held]
    if not outside:
        return Check(LOG_GROUPS, subject, PASS, f"{stack} holds every log group of {cluster}")
    groups = "; ".join(_describe_group(g) for g in outside)
    delete = "; ".join(f"aws logs delete-log-group --log-group-name {g['logGroupName']} "
                       f"--region {region}" for g in outside)
    why = (f"created outside {stack}: by the add-on's CloudWatch agent after the stack had deleted "
           f"its group ({_AGENT_CREATES}), by an EKS control plane logging with no group, or left "
           "by an earlier environment of this name")
    if not cfg.observability.enabled:
        return Check(LOG_GROUPS, subject, WARN,
                     f"{groups}: {why}. They bill for what they store, and they would fail the "
                     "deploy that turns observability on again",
                     f"delete them once their events are no longer wanted: {delete}")
    observability = names.stack_names(cfg.name)["observability"]
    try:
        agent_runs = any(s["name"] == observability for s in reads.prefixed_stacks(cfg.name))
    except AWS_ERRORS:
        agent_runs = True  # cannot tell: name the safe order
    first = (f"{observability}'s agent creates the performance group again as soon as it is gone, "
             f"so first delete that stack ({_delete(observability, region)}); then "
             if agent_runs else "")
    return Check(LOG_GROUPS, subject, FAIL,
                 f"{groups}: {why}. This config's {stack} creates these groups (fixed names, the "
                 "kit's key and retention); CloudFormation's create fails on a group that already "
                 "exists, and the cluster stack update rolls back",
                 f"{first}delete the groups (export their events first if you need them: aws logs "
                 f"create-export-task): {delete}; then deploy")
