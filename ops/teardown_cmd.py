"""`rlkit teardown`: delete an environment's stacks and list anything still tagged with it.

Only this environment's stacks: a stack is deleted when its name is one of the environment's
exact stack names (<name>-network, -cluster, -data, -storage, -storage-access, -observability,
-gpu-<group>) AND its rlkit:environment tag equals the name; anything else is left alone and
named. Refuses, with exit 2 and nothing deleted, when the caller's account (STS) differs from the
config's account (or --account's); warns when --region differs from the config's region.

Order, one stage after the other: the GPU node-group stacks with the storage-access and
observability stacks; then the cluster, with the storage stack (the shared file system) when it
goes; then the network; the data stack last. The storage stack goes only with its file system:
with an ephemeral config, or with --delete-data when the file system is not retained (otherwise
it is kept, with the network its file system lives in and, with --delete-data, the data it
links to). The data stack (bucket and ECR repository) is kept unless the config is ephemeral or
--delete-data is given; it goes last, after every other stack is gone: only then are its buckets
emptied (every object version and delete marker) and its images deleted, since CloudFormation
refuses to delete a bucket that holds data (and a repository that holds images, unless it has
EmptyOnDelete, which the kit sets on the repositories it does not retain; a data stack deployed
by an older kit lacks it). A failed cluster delete therefore never leaves a running environment
without its data.

Before the GPU stacks, the cluster and the network, it deletes the network interfaces the VPC
CNI left in the environment's VPC (available, tagged cluster.k8s.amazonaws.com/name=<cluster>)
and detached ones in the environment's security groups, listing each first; once the cluster stack
is gone, the cluster security group EKS may leave (eks-cluster-sg-<cluster>-*, tagged
aws:eks:cluster-name=<cluster>). Either would fail a security group's or the VPC's delete.
Interfaces in use or not provably the environment's are named, never touched.

An On-Demand Capacity Reservation the config names (capacity.reservation_id; by name, the one a
deployed GPU stack's launch template targets) is not the kit's and is never cancelled; teardown
names it, since it bills until it ends or is cancelled, with the command that cancels it.

It also keeps, and says why: a storage stack whose deployed file system is still retained (the
config's storage.retain: false not deployed yet), and a data stack another stack still imports
from (CloudFormation would refuse its delete after the bucket was emptied).

When the config no longer validates (written for an older kit, say), teardown still works: it
reads the environment's name and region from the file, or from --name with --region and
--account, and finds the stacks by their exact names and tag; it then keeps the data unless
--delete-data, whatever the config said, and reads from the deployed storage stack whether its
file system is retained: a retained one is kept with its network and the data it links to, one
that is not goes with --delete-data like the rest.

Asks you to type the environment name unless --yes. --dry-run prints what it would delete, and
exits non-zero where the real teardown would refuse or leave a stack. Afterwards it lists what is
still tagged with the environment, re-reading for up to 3 minutes (the tagging API lags deletes).
Exit code 0 when everything is gone, 1 when something is left or a deletion failed, 2 for a bad
config, --name without --region or --account, credentials for another account, stacks that
could not be listed, or a missing confirmation (nothing deleted), 130 when interrupted
(CloudFormation carries on; run again).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

from infra import names
from infra.config import ConfigError, read_config_file
from ops import aws, options
from ops.aws import AwsClients
from ops.config_source import describe
from ops.teardown import (
    Target,
    TeardownError,
    delete_stacks,
    empty_data_stack,
    importers_problem,
    outside_importers,
    plan_teardown,
)
from ops.teardown_leftovers import (
    belongs_to,
    cluster_log_groups,
    kept_physical_ids,
    retained_by_its_stack,
    scheduled_key_deletions,
    split_leftovers,
    tagged_resources,
)
from ops.teardown_network import NetworkSweep, announcement




def _confirm(name: str, args: argparse.Namespace, ask: Callable[[str], str]) -> bool:
    if args.yes or args.dry_run:
        return True
    if not sys.stdin.isatty() and ask is input:
        print("error: teardown needs confirmation and stdin is not a terminal. Fix: pass --yes "
              "(CI) or run it interactively.", file=sys.stderr)
        return False
    try:
        answer = ask(f"Type the environment name ({name}) to delete these stacks: ").strip()
    except EOFError:  # Ctrl-D, or stdin closed
        answer = ""
    if answer != name:
        print(f"Not confirmed ({answer!r} is not {name!r}); nothing deleted.", file=sys.stderr)
        return False
    return True


def _target(args: argparse.Namespace) -> Target | None:
    """The environment to tear down: --name (with --region), else the config; a config that no
    longer validates still names its environment (its problems are printed as a warning)."""
    if args.name is not None:
        # Tags prove the environment's name, not its account: a profile for another account
        # holding an environment of the same name would match them too.
        missing = [flag for flag, value in (("--region", args.region), ("--account", args.account))
                   if value is None]
        if missing:
            print(f"error: --name {args.name} needs {' and '.join(missing)} (the region its "
                  "stacks are in and the account they belong to; teardown refuses credentials "
                  "for any other account); nothing deleted", file=sys.stderr)
            return None
        return Target.by_name(args.name, args.region, args.account)
    cfg = options.load_config(args)
    if cfg is not None:
        return Target.of(cfg)
    if args.config is None:
        return None
    try:
        raw = read_config_file(args.config)
    except ConfigError:
        return None  # not even YAML: printed above
    name, region = raw.get("name"), args.region or raw.get("region")
    if not isinstance(name, str) or not isinstance(region, str):
        print(f"error: {args.config} does not validate and names no environment and region to "
              "tear down. Fix: rlkit teardown --name ENV --region REGION --account ACCOUNT_ID",
              file=sys.stderr)
        return None
    print(f"warning: the config does not validate (above); tearing down by name and tags: "
          f"environment {name!r} in {region}. Its data is kept unless --delete-data, and a file "
          "system the deployed storage stack retains is kept with its network and data.",
          file=sys.stderr)
    return Target.by_name(name, region, raw.get("account") if isinstance(
        raw.get("account"), str) else None)


def _run(args: argparse.Namespace) -> int:
    cfg = _target(args)
    if cfg is None:
        return 2
    region = args.region or cfg.region
    account_text = f"account {cfg.account}, " if cfg.account else ""
    source = (f"--name {args.name}" if args.name is not None else describe(args))
    print(f"{'[dry-run] ' if args.dry_run else ''}Teardown of environment {cfg.name!r} "
          f"({account_text}{region}{' from --region' if args.region else ''}); "
          f"{'config' if cfg.from_config else 'from'}: {source}")
    if region != cfg.region:
        print(f"warning: --region {region} differs from the config's region {cfg.region}; "
              f"tearing down stacks named for {cfg.name!r} in {region}.", file=sys.stderr)
    echo: Callable[[str], None] = print
    dry = "[dry-run] would delete " if args.dry_run else ""
    try:
        c = options.aws_clients(args, region)
        account = c.sts.get_caller_identity()["Account"]
        if cfg.account is not None and account != cfg.account:
            print(f"error: these credentials are for account {account}, but the config's account "
                  f"is {cfg.account}; nothing deleted. Fix: use credentials (--profile) for "
                  f"account {cfg.account}.", file=sys.stderr)
            return 2
        plan = plan_teardown(c.cloudformation, cfg, args.delete_data,
                             None if args.name is not None else args.config)
    except aws.AWS_ERRORS as err:
        print(f"error: could not list stacks in {region}: {aws.describe_error(err)}. Fix: "
              f"{aws.CREDENTIALS_FIX}", file=sys.stderr)
        return 2

    for stack, why in plan.refused.items():
        print(f"warning: not deleting {stack}: {why}; it was not deployed by this environment "
              "(or its tags were changed). Check it by hand.", file=sys.stderr)
    for stack, why in plan.ignored.items():
        echo(f"Leaving {stack} alone: {why}.")
    for stack, why in plan.blocked.items():
        print(f"warning: not deleting {stack}: {why}.", file=sys.stderr)

    if plan.stacks:
        echo(f"Teardown of {cfg.name!r} in account {account}, {region}, in this order:")
        for i, stage in enumerate(plan.stages, 1):
            echo(f"  {i}. {', '.join(stage)}")
        if note := announcement(cfg.name, plan.stacks):
            echo(note)
    else:
        echo(f"No stacks of {cfg.name!r} to delete in {region}.")
    for kept in plan.kept:
        if kept in plan.blocked:
            continue  # warned above
        if kept in plan.why_kept:
            echo(f"Keeping {kept}: {plan.why_kept[kept]}.")
            continue
        echo(f"Keeping {kept} (bucket and ECR repository outlive clusters). Pass --delete-data "
             "to delete it too, data included.")
    for group, reservation in plan.odcrs:
        echo(f"Not cancelling capacity reservation {reservation} (gpu_node_groups.{group}.capacity"
             ".reservation_id): it is not the kit's. An On-Demand Capacity Reservation bills for "
             "its instances, used or not, until it ends or is cancelled: aws ec2 "
             f"cancel-capacity-reservation --capacity-reservation-id {reservation} --region "
             f"{cfg.region}")
    if plan.stacks and not _confirm(cfg.name, args, args.ask):
        return 2

    kept_ids: list[str] = []
    kept_stacks = list(plan.kept)
    network = NetworkSweep(c.cloudformation, c.ec2, cfg.name, plan.stacks, plan.kept, echo,
                           dry_run=args.dry_run, sleep=args.sleep,
                           warn=lambda line: print(line, file=sys.stderr))
    try:
        for stage in plan.stages:
            network.before(stage)  # leftover interfaces, EKS's group: they would fail the delete
            if stage == [plan.data_stack]:
                # Data last: every other stack is gone by now, so emptying the bucket can no
                # longer leave a running environment without its data, unless a stack outside
                # the plan imports from it (asked again: the plan was made before the deletes).
                if not args.dry_run and (importers := outside_importers(c.cloudformation,
                                                                        plan.data_stack)):
                    raise TeardownError(f"not emptying or deleting {plan.data_stack}: "
                                        + importers_problem(plan.data_stack, importers))
                kept_ids += empty_data_stack(c.cloudformation, c.s3, c.ecr, plan.data_stack,
                                             args.dry_run, echo, dry)
            if args.dry_run:
                for s in stage:
                    echo(f"[dry-run] would run: aws cloudformation delete-stack --stack-name {s} "
                         f"--region {region} (and wait)")
                network.after(stage)
                continue
            delete_stacks(c.cloudformation, stage, echo, poll_s=args.poll, timeout_s=args.timeout)
            network.after(stage)
    except TeardownError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except aws.AWS_ERRORS as err:
        print(f"error: {aws.describe_error(err)}. Fix: check the permissions listed in "
              "docs/operations.md, then run teardown again (it picks up where it stopped).",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Interrupted. CloudFormation keeps deleting any stack it started on in the "
              "background; run `rlkit teardown` again to wait for it and delete the rest "
              f"({', '.join(plan.stacks)}).", file=sys.stderr)
        return 130

    incomplete = len(plan.refused) + len(plan.blocked)
    if incomplete:
        print(f"Not complete: {incomplete} stack(s) of this environment, or named like its "
              "stacks, were left (see the warnings above).", file=sys.stderr)
    if args.dry_run:
        echo(f"[dry-run] would list resources still tagged {names.ENVIRONMENT_TAG}={cfg.name} "
             "(resourcegroupstaggingapi get-resources)")
        return 1 if incomplete else 0
    code = report_leftovers(c, cfg.name, kept_stacks, kept_ids, echo, sleep=args.sleep)
    if code == 0 and not incomplete:
        echo("Teardown complete.")
    return 1 if incomplete else code


# The Resource Groups Tagging API lists a deleted resource for a while ("a few minutes"):
# leftovers are read again before they count, so a clean teardown does not fail on that lag.
LEFTOVER_SETTLE_S = 180
LEFTOVER_POLL_S = 30


def report_leftovers(c: AwsClients, name: str, kept_stacks: list[str], retained_ids: list[str],
                     echo: Callable[[str], None],
                     sleep: Callable[[float], None] = time.sleep) -> int:
    """List what still carries the environment tag, less what is kept on purpose (every
    resource of a kept stack; what a deleted stack retained, in this run or an earlier one); 0
    when nothing is left. What is left is read again every LEFTOVER_POLL_S seconds, up to
    LEFTOVER_SETTLE_S."""
    waited = 0
    kept_ids = None  # read once: the kept stacks do not change while the tagging API catches up
    while True:
        try:
            if kept_ids is None:
                kept_ids = kept_physical_ids(c.cloudformation, kept_stacks, [])
                read: dict[str, set[str] | None] = {}
            tags = tagged_resources(c.tagging, name)
            kept, left = split_leftovers(list(tags), kept_stacks, kept_ids)
            scheduled = scheduled_key_deletions(c.kms, left)
            retained = [a for a in left if a not in scheduled and (
                belongs_to(a, [], retained_ids)
                or retained_by_its_stack(c.cloudformation, name, tags[a], read))]
            groups = cluster_log_groups(c.logs, names.eks_cluster_name(name))
        except aws.AWS_ERRORS as err:
            print(f"warning: could not list what is left: {aws.describe_error(err)}. Check by "
                  f"hand: aws resourcegroupstaggingapi get-resources --tag-filters "
                  f"Key={names.ENVIRONMENT_TAG},Values={name}, and aws logs describe-log-groups "
                  f"--log-group-name-prefix /aws/containerinsights/{names.eks_cluster_name(name)}/",
                  file=sys.stderr)
            return 1
        left = [a for a in left if a not in scheduled and a not in retained]
        left += [f"log group {g}" for g in groups if not any(g in a for a in left)]
        if not left or waited >= LEFTOVER_SETTLE_S:
            break
        echo(f"{len(left)} resource(s) still tagged {names.ENVIRONMENT_TAG}={name}; the tagging "
             f"API lags deletions, reading again in {LEFTOVER_POLL_S} s (up to "
             f"{LEFTOVER_SETTLE_S - waited} s more)")
        sleep(LEFTOVER_POLL_S)
        waited += LEFTOVER_POLL_S
    for a in kept:
        echo(f"kept on purpose: {a}")
    for a in retained:
        echo(f"kept on purpose (retained by the stack's policy): {a}")
    if retained:
        echo("CloudFormation left these in place when it deleted their stack (DeletionPolicy "
             "Retain: storage.retain: true keeps the data, and the key that encrypts it, beyond "
             "the environment, and a shared file system with its security group and its links "
             "to the bucket); they are not counted as left.")
    for a in scheduled:
        echo(f"scheduled for deletion by KMS: {a}")
    if not left:
        echo(f"Nothing else is tagged {names.ENVIRONMENT_TAG}={name}, and no log group is left "
             "for its cluster.")
        return 0
    echo(f"Still tagged {names.ENVIRONMENT_TAG}={name} ({len(left)}), {waited} s after the "
         "deletes:")
    for a in left:
        echo(f"  {a}")
    echo("These were created outside the stacks (e.g. load balancers or volumes made by "
         "Kubernetes, or log groups a still-running Fluent Bit recreated), or are still being "
         "deleted. Delete what remains in the console or with the service's CLI.")
    return 1


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "teardown", help="delete the environment's stacks (the data on request) and list "
        "leftovers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_config(p)
    options.add_aws(p)
    p.add_argument("--name", default=None, metavar="ENV",
                   help="tear down the environment of this name without a config (needs --region "
                   "and --account), found by its stacks' names and rlkit:environment tag")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation (CI)")
    p.add_argument("--delete-data", action="store_true",
                   help="delete the data stack too: empties the bucket (all versions) and the ECR "
                   "repository (always done when the config is ephemeral)")
    p.add_argument("--account", default=None, metavar="ACCOUNT_ID",
                   help="with --name: the AWS account the environment belongs to (teardown "
                   "refuses credentials for any other)")
    options.add_dry_run(p, "print what would be deleted; change nothing")
    p.add_argument("--poll", type=float, default=15.0, help="seconds between status polls")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds to wait for each stage (default 3600)")
    p.set_defaults(func=_run, ask=input, sleep=time.sleep)
