"""`rlkit preflight`: read-only AWS checks before `cdk deploy` (credentials, AZ offering, vCPU
quota, capacity reservations and blocks, placement group, Kubernetes version, existing stacks).
A Capacity Block group whose deployed node group runs nodes fails: EKS updates such a group only at
desired size 0, and the fix names the scale-to-0 command (docs/operations.md, "A reservation's
end"). A config that would make a deploy replace the deployed shared file system (its AZ or
storage.kms changed: both are fixed at creation) fails, before the new, empty one is created and
the old one is left billing with the saves on it. A tag change that would replace a GPU group's
placement group (and so roll its nodes), or a taint that would reach running GPU nodes, is a warning; an admin_role_arns change that moves a role
to another position (its access entry would be created twice: a rollback) fails, and so does an
availability_zones change other than zones added at the end (the VPC's subnets are numbered by
zone position), an UltraServer group added to a cluster whose device plugin release lacks
node-feature-discovery's CRDs, and an add-on moved to a chart version with other CRDs (Helm
installs CRDs only with a release's first install); an imported VPC's DNS, subnets and egress.

Exit code 0 when nothing failed (warnings allowed), 1 when a check failed, 2 for a bad config or
when AWS could not be asked (no or expired credentials, AWS unreachable: the AWS checks did not
run; an offline check that failed still makes it 1).
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from infra.catalog.fsx import PRICE_REGION
from infra.config import config_cost
from ops import aws, options
from ops.output import emit, make_console, wants_json
from ops.output import print_table as print_rows
from ops.preflight import FAIL, PASS, WARN, Check, aws_unanswered, run_preflight, summary

_STYLE = {PASS: "green", WARN: "yellow", FAIL: "bold red"}


def print_table(checks: list[Check], title: str, console: Console) -> None:
    rows = [[c.status.upper(), c.name, c.subject, c.detail, c.fix] for c in checks]
    print_rows(console, title, ("status", "check", "subject", "detail", "fix"), rows,
               {s.upper(): style for s, style in _STYLE.items()})


def _run(args: argparse.Namespace) -> int:
    cfg = options.load_config(args)
    if cfg is None:
        return 2
    region = args.region or cfg.region
    try:
        clients = options.aws_clients(args, region)
    except aws.AWS_ERRORS as err:  # e.g. a mistyped --profile
        print(f"error: {aws.describe_error(err)}. Fix: {aws.CREDENTIALS_FIX}", file=sys.stderr)
        return 2
    checks = run_preflight(cfg, clients, region, config=args.config)
    counts = summary(checks)
    not_run = aws_unanswered(checks)  # nothing on the AWS side was checked: 2, unless another
    code = 1 if counts[FAIL] > not_run else 2 if not_run else 0  # check failed (1)
    shared_fs = config_cost(cfg)
    if wants_json(args):
        emit(args, {"config": cfg.name, "region": region, "ok": counts[FAIL] == 0,
                    "summary": counts, "aws_checks": "not-run" if not_run else "run",
                    "checks": [c.to_dict() for c in checks],
                    "shared_filesystem": shared_fs.to_dict() if shared_fs else None})
    else:
        console = make_console(args.width)
        print_table(checks, f"preflight: {cfg.name} ({region})", console)
        verdict = ("FAILED: fix the failures above before `cdk deploy`" if code == 1
                   else "NOT RUN: AWS could not be asked (the credentials check above), so the "
                   f"AWS checks did not run. Fix: {aws.CREDENTIALS_FIX}" if code == 2
                   else "OK: nothing blocks `cdk deploy`" + (" (read the warnings)"
                                                             if counts[WARN] else ""))
        if shared_fs is not None:
            elsewhere = f" (priced for {PRICE_REGION}, deploying to {region})" \
                if region != PRICE_REGION else ""
            console.print(f"Shared file system: {shared_fs.describe()}{elsewhere}; it runs, and "
                          "bills, until the storage stack is deleted.",
                          markup=False, highlight=False, soft_wrap=True)
        console.print(f"{counts[PASS]} passed, {counts[WARN]} warning(s), {counts[FAIL]} failed. "
                      f"{verdict}", markup=False, highlight=False, soft_wrap=True)
    return code


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "preflight", help="read-only AWS checks before deploying (quota, capacity, AZ, stacks)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_config(p)
    # The session is made at once: a mistyped --profile is reported before any check runs.
    options.add_aws(p, factory=aws.AwsClients.opened)
    options.add_output_option(p)
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=_run)
