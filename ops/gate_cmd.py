"""`rlkit gate`: run the fabric acceptance jobs on the GPU nodes and judge the results.

Renders the manifests (like `rlkit render`), then one job at a time: node check, NCCL
all-reduce, expert-parallel dispatch/combine. Each job is applied with kubectl, waited for with
progress, its pod logs collected and the job deleted. A failed node check stops the gate before
the benchmarks. The figures are compared with infra/catalog/acceptance.py; the verdict and the EP
figures go to <state dir>/<name>/gate.json ($XDG_STATE_HOME/rlkit, or --state-dir), which `rlkit launch` reads (it refuses to launch after a
failed gate, and uses the faster measured EP backend, among those measured by a gate that
passed).

After the node check it also reads the GPU nodes (kubectl get nodes -o json) and compares each
node's allocatable vpc.amazonaws.com/efa with what the pods request.

Before anything is written or applied it looks for a run that holds the group's GPUs (a RayJob in
the kit's namespace KubeRay is not done with, a pod asking for GPUs on the group's nodes): with
one, the jobs would wait Pending until --timeout and record a FAIL, so it exits 2 naming it and
leaves gate.json as it was.

Ctrl-C, SIGTERM and SIGHUP delete the job it applied, or print exactly what is left and how to
delete it; a gate first deletes the fabric jobs an earlier one of this environment left (saying
which), and stops (exit 2) while one of them still runs (another gate's, or one killed before it
cleaned up). A kubectl call that fails is tried again a few times; a pod log that still cannot be read
ends the gate (exit 2), never a fabric verdict. The jobs' own deadline follows --timeout. Before
the first job, gate.json is set to "under way, not passed" (in_progress), so a gate cut short
(Ctrl-C, a kubectl error, the process killed) leaves that, and `rlkit launch` refuses, saying the
last gate did not finish, rather than trusting an earlier pass.
--logs-dir judges logs collected earlier (no cluster needed). --compare puts the figures of
recorded gate.json files side by side (no config, no cluster); a passing gate also updates its
instance type's baseline (per size, the median all-reduce busbw of the last five passing gates), a
gate.json-like file --compare reads.

Finding the bad node: the EFA port counters name a node with an idle or missing NIC directly. When
the all-reduce or EP benchmark fails or is slow and nothing names a node, the gate reruns it on
halves of the nodes, then on pairs with a node seen healthy, judging each rerun against the
published figure and the baseline, until the node(s) that drag it down are named; it names only
a node a rerun proves bad (one that failed beside nodes proven healthy), and reports nodes the
reruns cannot tell apart as such, never isolating them (--no-bisect skips this). It prints the cordon and taint commands for each; --isolate runs them (only on this
environment's GPU nodes, saying so first) and reruns the benchmarks on the remaining nodes. A
cordon does not get a node replaced (EKS node auto-repair acts on node conditions, not on
cordons): for each named node it also prints the command that replaces its instance (aws
autoscaling terminate-instance-in-auto-scaling-group ... --no-should-decrement-desired-capacity),
which you run; the kit never terminates an instance.
docs/gate.md explains each number and where its threshold comes from.

--dry-run renders and prints every kubectl command without running any; it checks the kubectl
context as the real gate does (the kubeconfig only) and exits 2 when it points at another
cluster; with no kubectl context at all it says the check did not run (docs/cli.md).

Exit code 0 when the gate passed (warnings allowed), 1 when it failed, 2 when it could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from infra.config import KitConfig
from manifests import RenderError
from manifests.fabric import FABRIC_DEADLINE_MARGIN_SECONDS, FABRIC_TIMEOUT_SECONDS
from ops import options
from ops.config_source import announce
from ops.gate import (
    FAIL,
    JOB_KEYS,
    PASS,
    RECORDED,
    WARN,
    Finding,
    GateReport,
    GateStateError,
    compare,
    evaluate,
    load_state,
    state_dir,
    write_record,
    write_started,
)
from ops.gate.nodes import (REPLACEMENT_NOTE, find_bad, gpu_holders, isolate, isolation_advice,
                            replacement_advice, rerun_remaining)
from ops.gate.record import load_baseline, update_baseline
from ops.gate.runner import GateInterrupted, GateRunner
from ops.kube import (Kubectl, KubectlError, check_cluster, gpu_group_selector,
                      preview_cluster_check)
from ops.output import emit, make_console, print_table, wants_json
from ops.rendering import cluster_to_check, gin_type_for, render_for_run, with_ep_backend

_STYLE = {PASS: "green", WARN: "yellow", FAIL: "bold red", RECORDED: "cyan"}


# --- output --------------------------------------------------------------------------------------


def plain(console: Console) -> Callable[[str], None]:
    """Print through rich without reading [brackets] in paths and messages as markup."""
    return lambda text: console.print(text, markup=False, highlight=False, soft_wrap=True)


def print_report(report: GateReport, console: Console, title: str) -> None:
    print_table(console, title, ("status", "check", "measured", "expected", "detail", "fix"),
                [[f.status.upper(), f.check, f.measured, f.expected, f.detail, f.fix]
                 for f in report.findings], {s.upper(): style for s, style in _STYLE.items()})


def _print_ep(doc: dict[str, Any], console: Console) -> None:
    ep = doc.get("ep")
    if not ep:
        return
    parts = [f"{b}: {m['time_us'] / 1000:.2f} ms per dispatch + combine"
             + ("" if m.get("passed") else " (its gate failed: never chosen)")
             for b, m in sorted(ep["measurements"].items())]
    say = plain(console)
    where = f" ({ep['decided_by']})" if ep.get("decided_by") else ""
    say(f"EP backends measured for the model's shape{where}: " + "; ".join(parts))
    if ep.get("faster"):
        say(f"Faster: {ep['faster']} (`rlkit launch` uses it unless --ep-backend says "
            "otherwise)")
    else:
        say("Faster: none (no EP backend was measured by a gate that passed; `rlkit launch` "
            "uses the config's)")


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _kubectl_failed(err: KubectlError, runner: GateRunner) -> int:
    """Exit 2 on a kubectl error mid-gate, naming what was applied and may still hold nodes."""
    print(f"error: {err}", file=sys.stderr)
    left = [str(d) for d in runner.applied]
    if left:
        print(f"Applied and maybe still present: {', '.join(left)} (kubectl delete "
              f"--ignore-not-found {' '.join('-f ' + d for d in left)})", file=sys.stderr)
    return 2


def finish(report: GateReport, cfg: KitConfig, sdir: Path, logs: dict[str, str],
           console: Console, extra: list[Finding] | None = None, as_json: bool = False,
           root: Path | None = None, flag: str = "",
           args: argparse.Namespace | None = None, baseline: bool = False) -> int:
    """Record the verdict and print it. ``baseline``: a passing run updates its instance type's
    baseline (bisection's bar) under ``root`` (--state-dir; None: the default state root, the one
    ``load_baseline`` reads then). Saved logs judged with --logs-dir do not."""
    report.findings[:0] = extra or []
    path, doc = write_record(report, cfg.name, sdir, logs, _utc_now(), warn=plain(console))
    if baseline:
        update_baseline(root, doc)
    if as_json:  # the document gate.json holds; the verdict is also the exit code
        emit(args or argparse.Namespace(output="json"), doc)
        return 0 if report.ok else 1
    print_report(report, console, f"fabric gate: {cfg.name} ({report.nodes} x "
                                  f"{report.instance_type}, EP {report.ep_backend})")
    _print_ep(doc, console)
    say = plain(console)
    isolated = {f.check.removeprefix("isolate ") for f in report.findings
                if f.check.startswith("isolate ") and f.status == PASS}
    if report.bad_nodes:
        say("Bad node(s): " + "; ".join(f"{n} ({why}{', isolated' if n in isolated else ''})"
                                         for n, why in report.bad_nodes.items())
            + ("" if set(report.bad_nodes) <= isolated else
               ". Isolate them (or run `rlkit gate --isolate`):"))
        for command in isolation_advice(report, isolated):
            say(f"  {command}")
        say(REPLACEMENT_NOTE)
        for line in replacement_advice(report, logs.get("nodes"), cfg.region):
            say(f"  {line}")
    if report.image:
        say(f"Image measured: {report.image} (`rlkit launch` refuses another for EP backend "
            f"{report.ep_backend} until a gate measures it)")
    if report.ok:
        say(f"Gate PASSED. Recorded in {path}. Next: rlkit launch{flag}")
        return 0
    say(f"Gate FAILED: {sum(f.status == FAIL for f in report.findings)} failure(s) "
                  f"above, each with its fix. Recorded in {path}; `rlkit launch` refuses to start "
                  "until a gate passes (or --force).")
    return 1


def busy_message(group: str, holders: list[str], fixes: list[str], timeout: float, state: Path,
                 flag: str) -> str:
    """Why the gate does not start while something else holds the node group's GPUs."""
    return (f"error: the GPUs of gpu_node_groups.{group} are in use: {'; '.join(holders)}. The "
            f"gate's jobs would wait Pending for them for up to {timeout:g} s each and then record "
            f"a FAIL. Nothing was applied, and {state} is unchanged (`rlkit launch` still reads "
            "the last gate's verdict). Fix: wait until it ends (`rlkit status"
            f"{flag} --watch` follows the kit's RayJob), or, if you mean to stop it, run: "
            f"{'; '.join(fixes)}. Then run `rlkit gate{flag}` again.")


def run_compare(paths: list[Path], console: Console, as_json: bool = False) -> int:
    """`rlkit gate --compare`: the figures of recorded gate.json files side by side."""
    documents = []
    for path in paths:
        try:  # the reader `rlkit launch` trusts: the same shape checks, the same message
            doc = load_state(path)
        except GateStateError as err:
            print(f"error: --compare {err}", file=sys.stderr)
            return 2
        if doc is None:
            print(f"error: --compare {path}: no such file. Fix: pass gate.json files `rlkit gate` "
                  "wrote (or a baseline under <state dir>/.baselines/)", file=sys.stderr)
            return 2
        if "figures" not in doc:
            print(f"error: --compare {path}: no 'figures' (written by an older rlkit, or not a "
                  "gate.json); run `rlkit gate` again to record one", file=sys.stderr)
            return 2
        documents.append((doc.get("config") or path.parent.name, doc))
    header, rows = compare(documents)
    if as_json:
        print(json.dumps({"runs": [{"label": label, **{k: d.get(k) for k in (
            "instance_type", "nodes", "finished_at", "ok", "figures")}} for label, d in documents],
            "header": header, "rows": rows}, indent=2))
        return 0

    print_table(console, "fabric gate runs compared", header, rows)
    kinds = {(d.get("instance_type"), d.get("nodes")) for _, d in documents}
    if len(kinds) > 1:
        plain(console)("Note: these runs differ in instance type or node count; compare like with like.")
    return 0


def _run(args: argparse.Namespace) -> int:
    as_json = wants_json(args)  # then progress goes to stderr, the JSON document to stdout
    console = make_console(args.width, stderr=as_json)
    echo = plain(console)
    if args.compare:
        return run_compare(args.compare, console, as_json)
    cfg = options.load_config(args, lambda c: with_ep_backend(c, args.ep_backend))
    if cfg is None:
        return 2
    t = cfg.training
    group = cfg.gpu_node_groups[t.node_group]
    backend = t.expert_parallel.backend
    sdir = state_dir(args.state_dir, cfg.name)
    announce(cfg, args, "Judging saved gate logs for" if args.logs_dir is not None else
             f"{'[dry-run] ' if args.dry_run else ''}Fabric gate on",
             file=sys.stderr if as_json else None)

    gin_type = gin_type_for(cfg)
    if args.logs_dir is not None:
        logs = {k: (args.logs_dir / f"{k}.log").read_text() for k in JOB_KEYS
                if (args.logs_dir / f"{k}.log").is_file()}
        if not logs:
            print(f"error: {args.logs_dir} holds none of {', '.join(k + '.log' for k in JOB_KEYS)}"
                  "; pass the gate-logs directory of an earlier run", file=sys.stderr)
            return 2
        if (args.logs_dir / "nodes.json").is_file():
            logs["nodes"] = (args.logs_dir / "nodes.json").read_text()
        report = evaluate(logs, group.instance_type, t.nodes, backend, gin_type)
        return finish(report, cfg, sdir, logs, console, as_json=as_json,
                      flag=options.config_flag(args), args=args)

    try:
        ctx, out, outputs = render_for_run(cfg, args.outputs, args.out, args.dry_run,
                                           options.aws_clients(args, cfg.region), echo,
                                           config_file=args.config, fabric_timeout_s=args.timeout,
                                           hints=options.outputs_hints(args, "gate"))
    except RenderError as err:
        print(err, file=sys.stderr)
        return 2

    previewed: list[str] = []  # a dry run's kubectl commands, for -o json|yaml

    def kubectl_echo(line: str) -> None:
        if line.startswith("[dry-run] kubectl"):
            previewed.append(line.removeprefix("[dry-run] "))
        echo(line)

    kubectl = Kubectl(context=args.context, dry_run=args.dry_run, echo=kubectl_echo,
                      request_timeout_s=args.request_timeout)
    cluster = cluster_to_check(cfg, outputs)
    refused = 0  # a dry run's verdict: the exit code the real gate would stop with
    if args.dry_run:  # the same context check; the preview goes on either way
        refused = preview_cluster_check(kubectl, cluster, outputs.region, "gate")
    else:
        try:  # before anything is applied or deleted: kubectl must point at this environment
            check_cluster(kubectl, cluster, outputs.region)
        except KubectlError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    jobs = [(j.key, j.name) for j in ctx.fabric]
    selector = gpu_group_selector(t.node_group)
    runner = GateRunner(kubectl, ctx.namespace, out, jobs, group.instance_type, t.nodes,
                        args.timeout, args.poll, echo, node_selector=selector,
                        shared_fs=ctx.shared_fs)
    echo(f"Fabric gate on {t.nodes} x {group.instance_type} ({t.node_group}), EP backend "
         f"{backend}: {', '.join(k for k, _ in jobs)}")
    unfinished = ""  # what gate.json says when the run is cut short (a dry run writes nothing)
    if not args.dry_run:
        # Before gate.json is touched or anything applied: a run that holds the group's GPUs
        # would leave the gate's pods Pending until --timeout, a FAIL in place of the last PASS.
        try:
            holders, fixes = runner.retry("read what holds the group's GPUs", lambda: gpu_holders(
                kubectl, ctx.namespace, selector, runner.owns))
        except KubectlError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if holders:
            print(busy_message(t.node_group, holders, fixes, args.timeout, sdir / "gate.json",
                               options.config_flag(args)), file=sys.stderr)
            return 2
        try:
            running, fabric = runner.running_fabric_jobs()
        except KubectlError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if running:
            print(f"error: a fabric gate of this environment is running: {', '.join(running)}; "
                  "another `rlkit gate` (a second terminal, a CI job), or one killed before it "
                  f"could delete its jobs. Nothing was applied, and {sdir / 'gate.json'} is "
                  "unchanged. Fix: wait for that gate to finish; if none runs, delete its jobs "
                  f"(kubectl delete jobs,services -n {ctx.namespace} -l '{fabric}') and run the "
                  "gate again", file=sys.stderr)
            return 2
        # Until this run's verdict replaces it, gate.json says a gate is under way (not passed):
        # one cut short must not leave an earlier PASS for `rlkit launch` to trust.
        try:
            started = write_started(cfg.name, sdir, _utc_now(), group.instance_type, t.nodes,
                                    backend, plain(console), image=ctx.worker.image)
        except OSError as err:
            print(f"error: cannot record in {sdir / 'gate.json'} that a gate is under way ({err}), "
                  "so nothing was run. Fix: make the state directory writable, or pass "
                  "--state-dir with one that is", file=sys.stderr)
            return 2
        unfinished = (f"{started} records that this gate did not finish: `rlkit launch` refuses "
                      f"until a gate passes. Run `rlkit gate{options.config_flag(args)}` again.")
    try:
        logs = runner.run()
    except GateInterrupted as err:
        print(err, file=sys.stderr)
        if unfinished:
            print(unfinished, file=sys.stderr)
        return 130
    except KubectlError as err:
        code = _kubectl_failed(err, runner)
        if unfinished:
            print(unfinished, file=sys.stderr)
        return code
    if args.dry_run:
        echo(f"[dry-run] would judge the logs against infra/catalog/acceptance.py and write "
             f"{sdir / 'gate.json'}")
        if as_json:  # the plan of the run, as one document (docs/cli.md)
            emit(args, {"environment": cfg.name, "dry_run": True, "nodes": t.nodes,
                        "instance_type": group.instance_type, "node_group": t.node_group,
                        "ep_backend": backend, "jobs": [k for k, _ in jobs], "out": str(out),
                        "state": str(sdir / "gate.json"),
                        "commands": previewed,
                        # the checked context, None when unchecked or refused (exit code says)
                        "context": None if refused else kubectl.context})
        if refused:
            echo(f"[dry-run] preview only: without --dry-run this gate would refuse (exit "
                 f"{refused}): see the REFUSE line(s) above.")
        return refused
    report = evaluate(logs, group.instance_type, t.nodes, backend, gin_type)
    report.image = ctx.worker.image  # what its jobs ran: `rlkit launch` holds the job to it
    report.findings[:0] = runner.problems  # a job that failed or hung is a node suspect too
    if not report.ok and not args.no_bisect:
        # Failed whatever bisection finds: recorded first, so that bisection cut short (hours of
        # subset jobs, Ctrl-C, a kubectl error) cannot leave an earlier PASS for `rlkit launch`.
        path, _ = write_record(report, cfg.name, sdir, logs, _utc_now(), warn=plain(console))
        stopped = (f"The gate FAILED (recorded in {path}); bisection stopped before naming a "
                   "node. Run `rlkit gate` again to bisect.")
        baseline = load_baseline(args.state_dir, group.instance_type).get("figures", {})
        try:
            report.add(*find_bad(report, logs, runner.run_subset, baseline, gin_type, echo,
                                 region=cfg.region))
            if args.isolate and report.bad_nodes:
                isolated, done = isolate(kubectl, report.bad_nodes, selector, echo, cfg.region)
                report.add(*done)
                if isolated:
                    report.add(*rerun_remaining(report, logs, isolated, runner.run_subset, baseline,
                                                gin_type, echo))
        except GateInterrupted as err:
            print(f"{err}\n{stopped}", file=sys.stderr)
            return 130
        except KubectlError as err:
            code = _kubectl_failed(err, runner)
            print(stopped, file=sys.stderr)
            return code
    return finish(report, cfg, sdir, logs, console, as_json=as_json, root=args.state_dir,
                  flag=options.config_flag(args), args=args, baseline=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "gate", help="run the fabric acceptance jobs and compare with published figures",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_run_options(p)
    options.add_run_source(p)
    p.add_argument("--timeout", type=float, default=FABRIC_TIMEOUT_SECONDS,
                   help=f"seconds to wait for each job (default {FABRIC_TIMEOUT_SECONDS}); the "
                   "jobs' own deadline (activeDeadlineSeconds) is this plus "
                   f"{FABRIC_DEADLINE_MARGIN_SECONDS} s")
    p.add_argument("--poll", type=float, default=10.0, help="seconds between status polls")
    p.add_argument("--logs-dir", type=Path, default=None,
                   help="judge the logs in this directory (nodecheck.log, allreduce.log, ep.log, "
                   "nodes.json) instead of running the jobs")
    p.add_argument("--no-bisect", action="store_true",
                   help="after a failed or slow all-reduce or EP run, do not rerun it on halves and "
                   "pairs of the nodes to name the node that drags it down")
    p.add_argument("--isolate", action="store_true",
                   help="cordon and taint the nodes the gate names (only this environment's GPU "
                   "nodes; it says what it runs first), then rerun the benchmarks on the others; "
                   "it does not replace them (it prints the command that does, for you to run)")
    p.add_argument("--compare", type=Path, nargs="+", default=None, metavar="GATE_JSON",
                   help="print the figures of recorded gate.json files side by side and exit")
    options.add_output_option(p)
    p.set_defaults(func=_run)
