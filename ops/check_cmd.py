"""`rlkit check`: is this config ready for `cdk deploy`? One verdict, offline.

1. Validates the config (every problem at once) and prints its warnings, and what the shared
   file system was sized for (weights plus training.checkpoint.keep_local + 1 saves).
2. Runs the preflight checks that need no AWS call: the Kubernetes version (pinned, its kubectl
   layer installed, not about to leave EKS standard support), cluster access (admin roles), and
   per GPU node group the placement group against reservations and whether the instance type's
   catalog facts are verified; for a Capacity Block group, the rule that a deploy must not roll
   it while its nodes run. (`rlkit preflight` adds the checks that read your account, and
   applies that rule to the deployed node group.)
3. Synthesizes every stack into a temporary directory (no AWS calls, no credentials).
4. Renders the Helm charts the cluster stack installs with the exact values in the synthesized
   template, through the real Helm in the kubectl layer package, and checks where every pod would
   land (device plugins on every GPU group; the Ray head, workers and fabric jobs on their group
   with GPUs, EFA devices and huge pages allocatable; the job submitter bound to the head's node,
   with room beside it).

Offline means offline: charts come from --chart-dir, else the locked chart archives in
../shared/charts beside the repository, else the verified artifact cache that `python
scripts/fetch_artifacts.py` fills ($RLKIT_ARTIFACTS or $XDG_CACHE_HOME/rlkit/artifacts), else
charts pulled earlier with --pull. Only --pull reaches the network. When a chart is in none of
these, every other check still runs, and the scheduling check is reported as NOT RUN with the
flag or script that provides the charts.

It makes no AWS call: the checks that read your account (the instance type offered in its AZ, the
vCPU quota, reservations and Capacity Blocks, the deployed stacks) are `rlkit preflight`'s, and the
verdict says they did not run.

Exit code 0 when the check passes (warnings allowed), 1 when a preflight check failed or a pod
would not land where it should, 2 for a bad config, a missing input, or a check that could not
run (the scheduling check without charts). -o json|yaml prints one document (docs/cli.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from infra.config import ConfigError, config_warnings, training_ep_backend_problems
from infra.config.derived import shared_fs_sizing
from ops import artifacts, helm, options
from ops.config_source import describe
from ops.contract import check_cluster_contract
from ops.output import emit
from ops.preflight import FAIL, WARN, offline_checks
from ops.synth import synth_offline

# What `rlkit check` never does: it makes no AWS call (docs/operations.md lists these checks).
AWS_CHECKS = ("the AWS-side checks (the instance type offered in its AZ, the vCPU quota, "
              "reservations and Capacity Blocks, the deployed stacks)")

CHARTS_FIX = (f"pass --chart-dir DIR (a directory of <chart>-<version>.tgz), {artifacts.FETCH_HINT}"
              ", or let the check download them with --pull")


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlkit"


def locked_chart(archive_name: str) -> Path | None:
    """A chart archive whose checksums match the lock: ../shared/charts, then the cache."""
    return artifacts.locate_by_path(f"charts/{archive_name}")[0]


def _run(args: argparse.Namespace) -> int:
    config = options.load_config(args)
    if config is None:
        return 2
    source = describe(args)
    # The gate may benchmark deepep-gin, so loading allows it; a training run may not use it.
    refused = training_ep_backend_problems(config)
    if refused:
        print(ConfigError(refused, str(args.config) if args.config else
                          "the built-in default config"), file=sys.stderr)
        return 2
    warnings = config_warnings(config)
    chart_dir = args.chart_dir
    if chart_dir is not None and not chart_dir.is_dir():
        print(f"error: --chart-dir {chart_dir} is not a directory. Fix: pass a directory of "
              f"<chart>-<version>.tgz, or drop --chart-dir to use the locked charts",
              file=sys.stderr)
        return 2
    preflight = offline_checks(config)
    preflight_failed = [c for c in preflight if c.status == FAIL]
    if args.output == "text":
        print(f"check: environment {config.name!r} from {source}")
        print("  config: valid")
        sizing = shared_fs_sizing(config)
        if sizing is not None:  # validation refused a smaller one; say what it was sized for
            print(f"  shared file system: {sizing}")
        # A warning the preflight lines below repeat is said there, once, with its check.
        told = [c.detail for c in preflight if c.status == WARN]
        for w in warnings:
            if not any(w.startswith(detail) for detail in told):
                print(f"  WARNING: {w}")
        for c in preflight:
            print(f"  preflight {c.status.upper()}: {c.name} ({c.subject}): {c.detail}"
                  + (f". Fix: {c.fix}" if c.status != "pass" and c.fix else ""))
    if preflight_failed:  # e.g. no kubectl layer for this version: synth would fail on it
        if args.output != "text":
            emit(args, {"environment": config.name, "config": source, "ok": False,
                        "warnings": warnings, "preflight": [c.to_dict() for c in preflight],
                        "synth": "not-run", "scheduling": "not-run", "aws_checks": "not-run",
                        "charts": [], "findings": [], "notes": [
                            "synth and the scheduling check did not run"]})
        else:
            print(f"FAILED: {len(preflight_failed)} preflight failure(s); synth and the "
                  "scheduling check did not run. Fix them before `cdk deploy`")
        return 1
    with tempfile.TemporaryDirectory(prefix="rlkit-check-") as tmp:
        synth_offline(config, Path(tmp))
        try:
            report = check_cluster_contract(config, Path(tmp), chart_dir=chart_dir,
                                            cache_dir=args.cache_dir, allow_pull=args.pull,
                                            locate=locked_chart)
        except helm.HelmError as err:
            return _scheduling_not_run(args, config, source, warnings, preflight, err)
    if args.output != "text":
        emit(args, {
            "environment": config.name, "config": source, "ok": report.ok,
            "warnings": warnings, "preflight": [c.to_dict() for c in preflight],
            "shared_filesystem": shared_fs_sizing(config), "synth": "pass",
            "scheduling": "pass" if report.ok else "fail", "aws_checks": "not-run",
            "charts": [f"{r.chart} {r.version}" for r in report.releases],
            "findings": [{"pod": f.pod, "node_group": f.node_group, "problem": f.problem}
                         for f in report.findings],
            "notes": report.notes + [_aws_not_run(args)]})
        return 0 if report.ok else 1
    print("  synth: every stack synthesized offline")
    print("  charts: " + ", ".join(f"{r.chart} {r.version}" for r in report.releases))
    for note in report.notes:
        print(f"  note: {note}")
    if report.ok:
        print("  scheduling: every pod lands exactly where it should")
        warned = warnings or any(c.status == WARN for c in preflight)
        print(f"  not run: {_aws_not_run(args)}")
        print("OK: ready for `cdk deploy` once `rlkit preflight` passes"
              + (" (read the warnings)" if warned else ""))
        return 0
    for finding in report.findings:
        print(f"  FAIL: {finding}")
    print(f"FAILED: {len(report.findings)} scheduling problem(s); fix them before `cdk deploy`")
    return 1


def _aws_not_run(args: argparse.Namespace) -> str:
    return (f"{AWS_CHECKS} are `rlkit preflight`'s and did not run: run "
            f"`rlkit preflight{options.config_flag(args)}` before `cdk deploy`")


def _scheduling_not_run(args: argparse.Namespace, config, source: str, warnings: list[str],
                        preflight: list, err: helm.HelmError) -> int:
    """Everything else ran; the scheduling check could not (no charts): say so, and how to fix
    it, and exit 2 (a check that did not run is not a pass)."""
    why = str(err).split(". Fix:")[0]
    if args.output != "text":
        emit(args, {"environment": config.name, "config": source, "ok": False,
                    "warnings": warnings, "preflight": [c.to_dict() for c in preflight],
                    "shared_filesystem": shared_fs_sizing(config), "synth": "pass",
                    "scheduling": "not-run", "aws_checks": "not-run", "charts": [], "findings": [],
                    "notes": [f"scheduling check not run: {why}. Fix: {CHARTS_FIX}"]})
        return 2
    print("  synth: every stack synthesized offline")
    print(f"  scheduling: NOT RUN: {why}. Fix: {CHARTS_FIX}")
    print("NOT COMPLETE: every other check passed; the scheduling check did not run (above)")
    return 2


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check", help="offline: validate a config, run the offline preflight checks, synthesize "
        "it, render the charts and check where every pod would land", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_config(p)
    p.add_argument("--chart-dir", type=Path, default=None,
                   help="directory of packaged charts (<chart>-<version>.tgz); default: the "
                   "locked charts in ../shared/charts beside the repository, else in the "
                   "verified artifact cache (python scripts/fetch_artifacts.py fills it)")
    p.add_argument("--cache-dir", type=Path, default=default_cache_dir(),
                   help="where the Helm binary is unpacked and charts pulled with --pull are kept")
    pull = p.add_mutually_exclusive_group()
    pull.add_argument("--pull", action="store_true",
                      help="download a chart found nowhere else from its repository (network)")
    pull.add_argument("--offline", action="store_true",
                      help="never download a chart (the default; kept for scripts)")
    options.add_output_option(p)
    p.set_defaults(func=_run)
