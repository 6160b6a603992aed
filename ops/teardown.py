"""Delete an environment's stacks in dependency order and prove nothing is left billing.

Order: GPU node-group stacks and the storage-access stack (they use the cluster), then the cluster
(and the storage stack, when it goes), then the network. The data stack (bucket, ECR repository)
outlives clusters on purpose and goes only when the config is ephemeral or the operator asks for
it, and never while a kept storage stack imports its bucket. The storage stack (the shared file
system) goes with the data, and only when its file system is not retained; while the file system
stays, so does the network it lives in. CloudFormation cannot delete a bucket that holds objects,
and the kit adds no auto-delete Lambda (design.md: no custom resource where a native way exists),
so teardown empties it first: every object version and delete marker. For the ECR repositories
there is a native way, EmptyOnDelete, which the kit sets on every repository it does not retain;
teardown deletes their images first all the same, for a data stack deployed before it did.

Afterwards the Resource Groups Tagging API (GetResources filtered on the kit's
``rlkit:environment`` tag) lists whatever still carries the environment's tag
(``ops.teardown_leftovers`` tells what was retained on purpose from what was left).

What is torn down is a ``Target``: the environment's name, region and account and the few config
facts teardown reads. It comes from a validated config, or, when the config no longer validates
(one written for an older kit), from the environment's name alone: the stacks are then found by
their exact names and ``rlkit:environment`` tag, and what the config would have said is assumed
the safe way (not ephemeral), except whether the file system is retained: the deployed storage
stack's template says that (its file system's DeletionPolicy).

Functions take boto3 clients; ``ops.teardown_cmd`` builds them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from infra import names
from infra.cdk_cli import cdk_command
from infra.config import KitConfig, config_cost
from ops.aws import AWS_ERRORS, tag_dict
from ops.deployed import stacks_importing

_GONE = {"DELETE_COMPLETE"}
_FAILED = {"DELETE_FAILED"}
# A stack that shows no DELETE_* status this long after DeleteStack was refused (its status is the
# one it had before); a poll right after the call may still show the old status, DELETE_FAILED
# included (a stack deleted again after a failed delete): that too counts only after this long.
REFUSED_AFTER_S = 30.0


@dataclass(frozen=True)
class Target:
    """The environment to tear down and the config facts teardown reads."""

    name: str
    region: str
    account: str | None = None
    gpu_groups: tuple[str, ...] = ()  # besides these, tagged <name>-gpu-* stacks are found live
    ephemeral: bool = False
    storage_retain: bool = True
    from_config: bool = True
    # (GPU group, cr-... ID) of each On-Demand Capacity Reservation the config names: not the
    # kit's, never cancelled, but it bills until it ends or is cancelled.
    odcrs: tuple[tuple[str, str], ...] = ()
    shared_fs_cost: str | None = None  # the configured file system's size and monthly cost

    @classmethod
    def of(cls, cfg: "KitConfig | Target") -> "Target":
        if isinstance(cfg, Target):
            return cfg
        return cls(name=cfg.name, region=cfg.region, account=cfg.account,
                   gpu_groups=tuple(cfg.gpu_node_groups), ephemeral=cfg.ephemeral,
                   storage_retain=cfg.storage.retain,
                   odcrs=tuple((g, group.capacity.reservation_id)
                               for g, group in cfg.gpu_node_groups.items()
                               if group.capacity.type == "odcr" and group.capacity.reservation_id),
                   shared_fs_cost=(cost.describe() if (cost := config_cost(cfg)) else None))

    @classmethod
    def by_name(cls, name: str, region: str, account: str | None = None) -> "Target":
        """No usable config: name and tags only, every unknown assumed the safe way
        (``storage_retain`` is not read: ``plan_teardown`` asks the deployed storage stack)."""
        return cls(name=name, region=region, account=account, from_config=False)


class TeardownError(RuntimeError):
    """A step that failed; the message names the stack or resource and what to do."""


@dataclass
class Plan:
    stages: list[list[str]]  # stacks to delete, stage by stage; the data stack, if any, is last
    kept: list[str] = field(default_factory=list)  # stacks deliberately left
    why_kept: dict[str, str] = field(default_factory=dict)  # stack -> why (when not the data's)
    data_stack: str | None = None  # last stage: empty its bucket(s) and repository, then delete
    # Stacks with one of this environment's names that do not carry its environment tag: never
    # deleted, reported (stack name -> why).
    refused: dict[str, str] = field(default_factory=dict)
    # Stacks that only look like ``<name>-gpu-<group>`` and are not tagged for this environment.
    ignored: dict[str, str] = field(default_factory=dict)
    # (GPU group, cr-... ID) of the On-Demand Capacity Reservations the GPU groups use: from the
    # config, or by name from the deployed GPU stacks' launch templates. Never cancelled.
    odcrs: list[tuple[str, str]] = field(default_factory=list)
    # Stacks of this environment the teardown was asked to delete but keeps, because deleting
    # them now would lose or strand something (stack name -> why): the teardown is incomplete.
    blocked: dict[str, str] = field(default_factory=dict)

    @property
    def stacks(self) -> list[str]:
        return [s for stage in self.stages for s in stage]


def live_stacks(cfn: Any) -> dict[str, tuple[str, dict[str, str]]]:
    """Name -> (status, tags) of every stack in the region that is not deleted."""
    found = {}
    for page in cfn.get_paginator("describe_stacks").paginate():
        for s in page.get("Stacks", []):
            if s["StackStatus"] not in _GONE:
                found[s["StackName"]] = (s["StackStatus"], tag_dict(s.get("Tags")))
    return found


def _gpu_group_of(env_name: str, stack: str) -> str | None:
    """The group of a stack named exactly ``<env>-gpu-<group>`` with a valid group name."""
    prefix = names.gpu_stack_name(env_name, "")
    if not stack.startswith(prefix):
        return None
    group = stack[len(prefix):]
    return group if names.GPU_GROUP_NAME_RE.fullmatch(group) else None


def plan_teardown(cfn: Any, cfg: "KitConfig | Target", delete_data: bool,
                  config: str | Path | None = None) -> Plan:
    """Which stacks to delete, in order. A stack is this environment's only when its name is one
    of the environment's stack names AND its ``rlkit:environment`` tag equals the environment
    name: a neighbouring environment (``moe-rl-2``, ``moe-rl-gpu``) or a foreign stack that
    happens to match ``<name>-gpu-*`` (``moe-rl-gpu-monitoring``) is never touched. ``config``:
    the config file, which the deploy commands a kept stack's reason names pass to CDK (CDK
    builds the built-in default config without it)."""
    cfg = Target.of(cfg)
    live = live_stacks(cfn)
    stack = names.stack_names(cfg.name)
    configured_gpu = {names.gpu_stack_name(cfg.name, g) for g in cfg.gpu_groups}
    plan = Plan(stages=[])

    def ours(name: str) -> bool:
        if name not in live:
            return False
        env = live[name][1].get(names.ENVIRONMENT_TAG)
        if env == cfg.name:
            return True
        why = (f"its {names.ENVIRONMENT_TAG} tag is {env!r}, not {cfg.name!r}"
               if env is not None else f"it has no {names.ENVIRONMENT_TAG} tag")
        if name in configured_gpu or name in stack.values():
            plan.refused[name] = why  # one of this config's own names: worth an error
        else:
            plan.ignored[name] = why  # merely looks like a GPU stack of a removed group
        return False

    # GPU stacks of groups since removed from the config still depend on the cluster: include
    # them, but only when their tag says they belong here (a name match alone proves nothing).
    candidates = configured_gpu | {s for s in live if _gpu_group_of(cfg.name, s) is not None}
    gpu = sorted(s for s in candidates if ours(s))
    plan.odcrs = (list(cfg.odcrs) if cfg.from_config else
                  [(_gpu_group_of(cfg.name, s) or s, r) for s in gpu for r in odcrs_of(cfn, s)])
    access = [stack["storage_access"]] if ours(stack["storage_access"]) else []
    # The observability add-on's stack depends on the cluster stack, like the GPU stacks.
    access += [stack["observability"]] if ours(stack["observability"]) else []
    # A file system CloudFormation retains would outlive its stack and keep the network in use, so
    # the storage stack goes only when its file system goes with it.
    storage = ours(stack["storage"])
    # By name, nothing says whether the file system is retained but the deployed stack itself.
    fs_retained = (bool(retained_file_systems(cfn, stack["storage"]))
                   if storage and not cfg.from_config else cfg.storage_retain)
    storage_deletable = cfg.ephemeral or (delete_data and not fs_retained)
    if storage and storage_deletable and retained_file_systems(cfn, stack["storage"]):
        # The config says the file system may go, but the deployed stack still retains it (the
        # config changed without a deploy): deleting the stack would leave the file system
        # billing outside any stack, and its network interfaces would block the VPC's delete.
        storage_deletable = False
        plan.blocked[stack["storage"]] = plan.why_kept[stack["storage"]] = (
            "the deployed file system still has DeletionPolicy Retain (the config's "
            "storage.retain: false or ephemeral: true was not deployed yet), so CloudFormation "
            "would leave it billing outside any stack. Fix: "
            f"{cdk_command('deploy', '--exclusively', stack['storage'], config=config)}, then "
            "run teardown again")
    stages = [gpu + access,
              ([stack["cluster"]] if ours(stack["cluster"]) else [])
              + ([stack["storage"]] if storage and storage_deletable else [])]
    if storage and not storage_deletable:
        plan.kept.append(stack["storage"])
        plan.why_kept.setdefault(stack["storage"], (
            "the shared file system stays with the data; "
            + ("its deployed file system is not retained (no DeletionPolicy Retain)"
               if not cfg.from_config else "storage.retain is false")
            + ", so --delete-data deletes it too")
            if not fs_retained else (
            "the shared file system is retained with the data"
            f"{'' if cfg.from_config else ' (its deployed DeletionPolicy is Retain)'}; with "
            "storage.retain: false (and the storage stack redeployed) --delete-data deletes it too"))
        if cfg.shared_fs_cost:
            plan.why_kept[stack["storage"]] += f". It bills while it stays: {cfg.shared_fs_cost}"
    if ours(stack["network"]):
        if storage and not storage_deletable:
            plan.kept.append(stack["network"])
            plan.why_kept[stack["network"]] = "the kept shared file system lives in this VPC"
            nat = nat_gateways(cfn, stack["network"])
            if nat:
                deploy = cdk_command("deploy", "--exclusively", stack["storage"], config=config)
                first = ("" if not fs_retained else
                         f"set storage.retain: false and deploy it ({deploy}); then ")
                plan.why_kept[stack["network"]] += (
                    f". Its {nat} NAT gateway(s) bill by the hour (and per GB they process) for as "
                    f"long as it stays. Once the file system is no longer wanted: {first}teardown "
                    "--delete-data deletes the file system, then the network, and the data; to keep "
                    f"the data, {first and 'after that deploy '}delete only the storage stack (aws "
                    f"cloudformation delete-stack --stack-name {stack['storage']}) and run teardown "
                    "again, which then deletes the network")
        else:
            stages.append([stack["network"]])
    plan.stages = [s for s in stages if s]
    if ours(stack["data"]):
        if storage and not storage_deletable and delete_data:
            # The kept storage stack imports the bucket and its key (the file system's data
            # repository associations): CloudFormation would refuse the delete ("Export ...
            # cannot be deleted as it is in use"), after teardown had emptied the bucket.
            plan.kept.append(stack["data"])
            plan.why_kept[stack["data"]] = (
                f"the kept {stack['storage']} links its file system to this stack's bucket (it "
                "imports the bucket and its key), so the data stays with it; with storage.retain: "
                "false (and the storage stack redeployed) --delete-data deletes both")
        elif cfg.ephemeral or delete_data:
            importers = outside_importers(cfn, stack["data"], plan.stacks)
            if importers:
                plan.kept.append(stack["data"])
                plan.blocked[stack["data"]] = plan.why_kept[stack["data"]] = importers_problem(
                    stack["data"], importers)
            else:
                plan.stages.append([stack["data"]])
                plan.data_stack = stack["data"]
        else:
            plan.kept.append(stack["data"])
    return plan


def retained_file_systems(cfn: Any, stack: str) -> list[str]:
    """Logical IDs of the deployed stack's file systems that CloudFormation retains."""
    return sorted(k for k, r in _template(cfn, stack).get("Resources", {}).items()
                  if r.get("Type") == "AWS::FSx::FileSystem" and r.get("DeletionPolicy") in _RETAIN)


def odcrs_of(cfn: Any, stack: str) -> list[str]:
    """The On-Demand Capacity Reservations a deployed GPU stack's launch templates target (a
    literal cr-... ID, and not a Capacity Block's: no capacity-block market type)."""
    found = []
    for r in _template(cfn, stack).get("Resources", {}).values():
        data = (r.get("Properties") or {}).get("LaunchTemplateData") or {}
        if r.get("Type") != "AWS::EC2::LaunchTemplate" or (
                (data.get("InstanceMarketOptions") or {}).get("MarketType") == "capacity-block"):
            continue
        target = ((data.get("CapacityReservationSpecification") or {})
                  .get("CapacityReservationTarget") or {}).get("CapacityReservationId")
        if isinstance(target, str):
            found.append(target)
    return sorted(set(found))


def nat_gateways(cfn: Any, stack: str) -> int:
    """How many NAT gateways the deployed network stack holds (each bills by the hour)."""
    return sum(r.get("Type") == "AWS::EC2::NatGateway"
               for r in _template(cfn, stack).get("Resources", {}).values())


def outside_importers(cfn: Any, stack: str, deleting: list[str] = ()) -> dict[str, list[str]]:
    """Export name -> the stacks importing it, of ``stack``'s exports, less ``deleting`` (stacks
    gone by then). CloudFormation refuses to delete a stack whose export is in use, and only says
    so after the delete was asked for: by then teardown would have emptied the data stack."""
    found = cfn.describe_stacks(StackName=stack).get("Stacks", [])
    exports = [o["ExportName"] for o in (found[0].get("Outputs", []) if found else [])
               if o.get("ExportName")]
    importers = {}
    for export in exports:
        users = [s for s in stacks_importing(cfn, export) if s not in deleting]
        if users:
            importers[export] = users
    return importers


def importers_problem(stack: str, importers: dict[str, list[str]]) -> str:
    users = sorted({s for v in importers.values() for s in v})
    export = next(iter(importers))
    return (f"{', '.join(users)} still import(s) its outputs (e.g. {export}), so CloudFormation "
            "would refuse to delete it after teardown had emptied its bucket and repository. "
            f"Fix: delete {', '.join(users)} (or remove the imports), then run teardown again")


# --- emptying the data stack ---------------------------------------------------------------------


@dataclass(frozen=True)
class DataResource:
    kind: str  # "bucket" | "repository"
    name: str
    retained: bool  # DeletionPolicy Retain: CloudFormation leaves it in place
    log_target: bool = False  # another bucket of the stack delivers its access logs here


def _template(cfn: Any, stack: str) -> dict[str, Any]:
    body = cfn.get_template(StackName=stack).get("TemplateBody", {})
    if isinstance(body, str):
        try:
            return json.loads(body)
        except json.JSONDecodeError:
            import yaml  # CloudFormation YAML short forms are not needed for Resources/DeletionPolicy

            return yaml.safe_load(body) or {}
    return body


@dataclass(frozen=True)
class StackResource:
    type: str  # AWS::S3::Bucket, ...
    physical_id: str
    retained: bool  # DeletionPolicy Retain: CloudFormation leaves it in place
    logical_id: str = ""


_RETAIN = {"Retain", "RetainExceptOnCreate"}  # both keep the resource when its stack is deleted


def stack_resources(cfn: Any, stack: str, template: dict[str, Any] | None = None
                    ) -> list[StackResource]:
    """Every resource of a deployed stack that has a physical ID and still exists, with whether it
    is retained. A stack left DELETE_FAILED (or ROLLBACK_COMPLETE) still lists the resources
    CloudFormation deleted already, with their physical IDs: their ResourceStatus is
    DELETE_COMPLETE, and they are left out."""
    resources = (template if template is not None else _template(cfn, stack)).get("Resources", {})
    return [StackResource(r["ResourceType"], r["PhysicalResourceId"],
                          resources.get(r["LogicalResourceId"], {}).get("DeletionPolicy") in _RETAIN,
                          r["LogicalResourceId"])
            for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack)
            for r in page.get("StackResourceSummaries", [])
            if r.get("PhysicalResourceId") and r.get("ResourceStatus") not in _GONE]


def data_resources(cfn: Any, stack: str) -> list[DataResource]:
    """Buckets and ECR repositories of the data stack, with whether CloudFormation keeps them and
    whether a bucket receives another's access logs (read from the deployed template, which still
    says so after a first teardown turned the logging off)."""
    kinds = {"AWS::S3::Bucket": "bucket", "AWS::ECR::Repository": "repository"}
    template = _template(cfn, stack)
    log_ids = set()
    for res in template.get("Resources", {}).values():
        props = res.get("Properties") or {}
        target = (props.get("LoggingConfiguration") or {}).get("DestinationBucketName")
        if res.get("Type") == "AWS::S3::Bucket" and isinstance(target, dict) and "Ref" in target:
            log_ids.add(target["Ref"])
    return sorted((DataResource(kinds[r.type], r.physical_id, r.retained, r.logical_id in log_ids)
                   for r in stack_resources(cfn, stack, template) if r.type in kinds),
                  key=lambda d: (d.kind, d.name))


def _gone_already(err: Exception) -> bool:
    """Whether S3 or ECR answered that the bucket or repository does not exist."""
    code = getattr(err, "response", {}).get("Error", {}).get("Code")
    return code in ("NoSuchBucket", "RepositoryNotFoundException")


def empty_bucket(s3: Any, bucket: str, dry_run: bool = False) -> int:
    """Delete every object version and delete marker (a versioned bucket keeps both)."""
    count = 0
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        keys = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        # One ListObjectVersions page holds at most 1000 entries, DeleteObjects' limit.
        if keys and not dry_run:
            result = s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
            errors = result.get("Errors", [])
            if errors:
                e = errors[0]
                raise TeardownError(
                    f"bucket {bucket}: could not delete {len(errors)} object version(s), e.g. "
                    f"{e.get('Key')} ({e.get('Code')}: {e.get('Message')}). Fix: check for S3 "
                    "Object Lock or a bucket policy that denies s3:DeleteObjectVersion, then run "
                    "teardown again")
        count += len(keys)
    return count


def delete_images(ecr: Any, repository: str, dry_run: bool = False) -> int:
    """Delete every image of ``repository`` (by digest, so each once whatever its tags); returns
    how many. ECR refuses to delete an image that a multi-arch image index still lists
    (ImageReferencedByManifestList, botocore's ecr ImageFailureCode): those are tried again once
    the indexes are gone. Any other failure stops the teardown, naming it: CloudFormation cannot
    delete a repository that still holds an image (unless it has EmptyOnDelete, which a data
    stack deployed by an older kit lacks)."""
    digests = sorted({i["imageDigest"] for page in ecr.get_paginator("list_images").paginate(
        repositoryName=repository) for i in page.get("imageIds", []) if i.get("imageDigest")})
    pending = [] if dry_run else digests
    while pending:
        referenced = []
        for i in range(0, len(pending), 100):  # BatchDeleteImage takes at most 100 IDs
            result = ecr.batch_delete_image(repositoryName=repository, imageIds=[
                {"imageDigest": d} for d in pending[i:i + 100]])
            for failure in result.get("failures", []):
                code = failure.get("failureCode")
                if code == "ImageReferencedByManifestList":
                    referenced.append(failure["imageId"]["imageDigest"])
                elif code != "ImageNotFound":  # gone already: what teardown wants
                    raise TeardownError(
                        f"ECR repository {repository}: could not delete image "
                        f"{failure.get('imageId', {}).get('imageDigest', '?')} ({code}: "
                        f"{failure.get('failureReason', '')}). Fix: delete it by hand (aws ecr "
                        "batch-delete-image), then run teardown again")
        if len(referenced) == len(pending):  # no index left to delete first: no progress
            raise TeardownError(
                f"ECR repository {repository}: {len(referenced)} image(s) are still listed by an "
                "image index that could not be deleted. Fix: delete the index by hand (aws ecr "
                "batch-delete-image), then run teardown again")
        pending = referenced
    return len(digests)


# --- deleting stacks -----------------------------------------------------------------------------


def stack_status(cfn: Any, stack: str) -> tuple[str, str] | None:
    """(status, status reason) of a stack, None when it is gone."""
    try:
        found = cfn.describe_stacks(StackName=stack).get("Stacks", [])
    except AWS_ERRORS as err:
        if "does not exist" in str(err):
            return None
        raise
    return (found[0]["StackStatus"], found[0].get("StackStatusReason", "")) if found else None


def failure_reasons(cfn: Any, stack: str, limit: int = 3) -> list[str]:
    events = cfn.describe_stack_events(StackName=stack).get("StackEvents", [])
    reasons = [f"{e['LogicalResourceId']} ({e['ResourceType']}): {e.get('ResourceStatusReason', '?')}"
               for e in events if e.get("ResourceStatus") == "DELETE_FAILED"
               and e["LogicalResourceId"] != stack]
    return reasons[:limit]


def _wait_until_settled(cfn: Any, stack: str, echo: Callable[[str], None], poll_s: float,
                        deadline: float, sleep: Callable[[float], None],
                        clock: Callable[[], float]) -> None:
    """Wait while ``stack`` is being created, updated or rolled back (not deleted)."""
    shown = None
    while True:
        state = stack_status(cfn, stack)
        status = state[0] if state else "DELETE_COMPLETE"
        if not status.endswith("_IN_PROGRESS") or status == "DELETE_IN_PROGRESS":
            return
        if status != shown:
            echo(f"  {stack} is {status}: waiting for it to finish before deleting it")
            shown = status
        if clock() >= deadline:
            raise TeardownError(
                f"{stack} is still {status}; CloudFormation cannot delete a stack in the middle "
                "of an operation. Fix: wait for it to finish (or cancel an update: aws "
                f"cloudformation cancel-update-stack --stack-name {stack}), then run teardown again")
        sleep(poll_s)


def delete_stacks(cfn: Any, stacks: list[str], echo: Callable[[str], None],
                  poll_s: float = 15, timeout_s: float = 3600,
                  sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic) -> None:
    """Delete these stacks together and wait until all are gone, printing progress. A stack in
    the middle of an update (a `cdk deploy` stopped with Ctrl-C carries on) is waited for first:
    CloudFormation refuses to delete a stack while it is UPDATE_IN_PROGRESS."""
    start = clock()
    requested: dict[str, float] = {}
    for s in stacks:
        try:
            cfn.delete_stack(StackName=s)
            requested[s] = start
        except AWS_ERRORS as err:
            if "cannot be deleted while in status" not in str(err):
                raise
            _wait_until_settled(cfn, s, echo, poll_s, start + timeout_s, sleep, clock)
            cfn.delete_stack(StackName=s)
            requested[s] = clock()
        echo(f"  deleting {s}")
    pending = list(stacks)
    last: dict[str, str | None] = {}
    while pending:
        for s in list(pending):
            state = stack_status(cfn, s)
            status, reason = state or ("DELETE_COMPLETE", "")
            if status in _GONE:
                echo(f"  {s}: deleted [{clock() - start:.0f} s]")
                pending.remove(s)
            elif not status.startswith("DELETE_") and (
                    last.get(s) == "DELETE_IN_PROGRESS" or clock() - requested[s] >= REFUSED_AFTER_S):
                # A refused delete ends in the status the stack had before, not in DELETE_FAILED
                # (an export another stack imports: aws/aws-cdk#604, boto/botocore#2590).
                raise TeardownError(
                    f"CloudFormation did not delete stack {s}: it is {status} again"
                    f"{': ' + reason if reason else ''}. Fix: delete or update what it names "
                    "first (a stack that imports this one's outputs), then run teardown again")
            elif status in _FAILED and last.get(s) != "DELETE_IN_PROGRESS" and (
                    clock() - requested[s] < REFUSED_AFTER_S):
                # A stack that was DELETE_FAILED before (a retry) may still show it right after
                # DeleteStack, like any old status: only a DELETE_FAILED that follows
                # DELETE_IN_PROGRESS, or outlasts the grace, is this delete's.
                if last.get(s) != status:
                    echo(f"  {s}: still {status} from before; waiting for CloudFormation to start "
                         "deleting it again")
            elif status in _FAILED:
                reasons = "; ".join(failure_reasons(cfn, s)) or "see the stack's events"
                raise TeardownError(
                    f"stack {s} is DELETE_FAILED: {reasons}. Fix: resolve the resource named "
                    f"(or delete it by hand), then run teardown again; aws cloudformation "
                    f"describe-stack-events --stack-name {s} shows the full history")
            elif last.get(s) != status:
                echo(f"  {s}: {status} [{clock() - start:.0f} s]")
            last[s] = status
        if not pending:
            return
        if clock() - start >= timeout_s:
            raise TeardownError(
                f"still deleting after {timeout_s:.0f} s: {', '.join(pending)}. CloudFormation "
                "carries on in the background; run teardown again to keep waiting")
        sleep(poll_s)


def empty_data_stack(cfn: Any, s3: Any, ecr: Any, stack: str, dry_run: bool,
                     echo: Callable[[str], None], dry: str) -> list[str]:
    """Empty the data stack's buckets and repository; returns the IDs CloudFormation keeps.

    Server access logging is turned off first and the buckets that receive access logs are
    emptied last: S3 delivers access logs late (best effort), and a record landing in an emptied
    log bucket fails CloudFormation's delete of it (BucketNotEmpty)."""
    resources = data_resources(cfn, stack)
    # What CloudFormation retains stays on purpose: the data, and a KMS key with storage.retain.
    kept_ids = [r.physical_id for r in stack_resources(cfn, stack) if r.retained]
    log_targets = {r.name for r in resources if r.log_target}
    gone = set()
    for res in resources:
        if res.kind == "bucket" and not res.retained:
            try:
                logging = s3.get_bucket_logging(Bucket=res.name)
            except AWS_ERRORS as err:
                if not _gone_already(err):
                    raise
                gone.add(res.name)
                continue
            target = logging.get("LoggingEnabled", {}).get("TargetBucket")
            if target:
                log_targets.add(target)
                if not dry_run:
                    s3.put_bucket_logging(Bucket=res.name, BucketLoggingStatus={})
                echo(f"{'[dry-run] would turn' if dry_run else 'Turned'} off access logging of "
                     f"bucket {res.name} (to {target})")
    for res in sorted(resources, key=lambda r: r.name in log_targets):
        what = "bucket" if res.kind == "bucket" else "ECR repository"
        if res.retained:
            echo(f"{res.kind} {res.name} has DeletionPolicy Retain (storage.retain: true): "
                 "CloudFormation keeps it, with its data, when it deletes the stack; teardown "
                 "leaves it alone.")
            continue
        n = None
        if res.name not in gone:
            try:
                n = (empty_bucket(s3, res.name, dry_run) if res.kind == "bucket"
                     else delete_images(ecr, res.name, dry_run))
            except AWS_ERRORS as err:
                if not _gone_already(err):
                    raise
        if n is None:
            echo(f"{what} {res.name} is gone already (deleted by a teardown before this one, or "
                 "by hand)")
        elif res.kind == "bucket":
            echo(f"{dry or 'Deleted: '}{n} object version(s) and delete marker(s) in "
                 f"bucket {res.name}")
        else:
            echo(f"{dry or 'Deleted: '}{n} image(s) in ECR repository {res.name}")
    return kept_ids
