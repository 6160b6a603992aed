"""What is left of an environment after its stacks are deleted: what still carries its
``rlkit:environment`` tag (the Resource Groups Tagging API), what its deleted stacks retained on
purpose (CloudFormation's 90-day history of deleted stacks, then the resources' own
aws:cloudformation:* tags), KMS keys already scheduled for deletion, and log groups a running
agent recreated by name. ``ops.teardown_cmd`` reports them; nothing here deletes anything."""

from __future__ import annotations

from typing import Any

from infra import names
from ops.aws import tag_dict
from ops.teardown import _GONE, _RETAIN, _gpu_group_of, _template, stack_resources, stack_status


def tagged_resources(tagging: Any, env_name: str) -> dict[str, dict[str, str]]:
    """ARN -> tags of what is still tagged rlkit:environment=<name> in this region (GetResources,
    paginated; its tags include the aws:cloudformation:* ones CloudFormation adds)."""
    found = {}
    for page in tagging.get_paginator("get_resources").paginate(
            TagFilters=[{"Key": names.ENVIRONMENT_TAG, "Values": [env_name]}]):
        for r in page.get("ResourceTagMappingList", []):
            found[r["ResourceARN"]] = tag_dict(r.get("Tags"))
    return dict(sorted(found.items()))


def _own_stack_name(env_name: str, stack: str) -> bool:
    return stack in names.stack_names(env_name).values() or _gpu_group_of(env_name, stack) is not None


def retained_by_its_stack(cfn: Any, env_name: str, tags: dict[str, str],
                          read: dict[str, set[str] | None]) -> bool:
    """Whether a deleted stack of this environment left the resource with ``tags`` in place on
    purpose. CloudFormation tags what it creates with aws:cloudformation:stack-name, stack-id and
    logical-id; while it remembers the deleted stack (90 days: DescribeStacks, GetTemplate and
    ListStackResources by stack ID) the resource counts only if the template gave it
    DeletionPolicy Retain and CloudFormation did not delete it: a resource someone chose to retain
    when deleting a failed stack (DELETE_SKIPPED, no such policy) is a leftover like any other.
    A stack CloudFormation no longer knows was deleted over 90 days ago, so the resource outlived
    it: retained. ``read`` caches each stack's retained logical IDs (None: forgotten), so the
    calls follow the leftovers, not the environment's history of deleted stacks."""
    stack, stack_id = (tags.get("aws:cloudformation:stack-name"),
                       tags.get("aws:cloudformation:stack-id"))
    if not stack or not stack_id or not _own_stack_name(env_name, stack):
        return False
    if stack_id not in read:
        status = stack_status(cfn, stack_id)
        read[stack_id] = (None if status is None else
                          _retained_logical_ids(cfn, stack_id) if status[0] in _GONE else set())
    retained = read[stack_id]
    return retained is None or tags.get("aws:cloudformation:logical-id") in retained


def _retained_logical_ids(cfn: Any, stack_id: str) -> set[str]:
    """The logical IDs a deleted stack left in place by its DeletionPolicy."""
    template = _template(cfn, stack_id).get("Resources", {})
    kept = set()
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack_id):
        for r in page.get("StackResourceSummaries", []):
            lid = r["LogicalResourceId"]
            if (template.get(lid, {}).get("DeletionPolicy") in _RETAIN
                    and r.get("ResourceStatus") not in _GONE):
                kept.add(lid)
    return kept


def scheduled_key_deletions(kms: Any, arns: list[str]) -> list[str]:
    """The KMS keys among ``arns`` already scheduled for deletion. Deleting a key schedules it
    (KMS waits 7-30 days) and it keeps its tags meanwhile, so the tagging API still lists it."""
    return [a for a in arns if ":kms:" in a and ":key/" in a and kms.describe_key(KeyId=a)[
        "KeyMetadata"]["KeyState"] in ("PendingDeletion", "PendingReplicaDeletion")]


def cluster_log_groups(logs: Any, cluster_name: str) -> list[str]:
    """Log groups still named for the cluster. Found by name, not by tag: a Fluent Bit or an EKS
    control plane still running while its stack's groups were deleted recreates them, untagged
    and with no retention."""
    prefixes = (names.control_plane_log_group(cluster_name).rsplit("/", 1)[0] + "/",
                names.container_insights_log_group(cluster_name, ""))
    found = []
    for prefix in prefixes:
        for page in logs.get_paginator("describe_log_groups").paginate(
                logGroupNamePrefix=prefix):
            found += [g["logGroupName"] for g in page.get("logGroups", [])]
    return sorted(found)


def belongs_to(arn: str, stacks: list[str], physical_ids: list[str]) -> bool:
    """Whether an ARN is one of these stacks or a resource with one of these physical IDs: the
    ID is the ARN (an SNS topic's) or ends it after a / (key/ID, project/NAME) or a :
    (arn:aws:s3:::BUCKET, ...:log-group:NAME, which may also end in :*)."""
    if any(f":stack/{stack}/" in arn for stack in stacks):
        return True
    arn = arn.removesuffix(":*")
    return any(arn == pid or arn.endswith((f"/{pid}", f":{pid}")) for pid in physical_ids)


def kept_physical_ids(cfn: Any, kept_stacks: list[str], kept_ids: list[str]) -> list[str]:
    """What stays on purpose: every resource of a kept stack (its bucket and repository, and its
    build project, log group and key as well) and ``kept_ids`` (what a deleted stack retains)."""
    return list(kept_ids) + [r.physical_id for stack in kept_stacks
                             for r in stack_resources(cfn, stack)]


def split_leftovers(arns: list[str], kept_stacks: list[str], kept_ids: list[str]
                    ) -> tuple[list[str], list[str]]:
    """(kept on purpose, left) of the ARNs still tagged with the environment: those of the kept
    stacks and of ``kept_ids`` (``kept_physical_ids``) are kept on purpose."""
    kept = [a for a in arns if belongs_to(a, kept_stacks, kept_ids)]
    return kept, [a for a in arns if a not in kept]
