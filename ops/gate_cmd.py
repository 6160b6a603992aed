"""`rlkit gate`: run the fabric acceptance jobs on the GPU nodes and judge the results.

Renders the manifests (like `rlkit render`), then one job at a time: node check, NCCL
all-reduce, expert-parallel dispatch/combine. Each job is applied with kubectl, waited for with
progress, its pod logs collected and the job deleted. A failed node check stops the gate before
the benchmarks. The figures are compared with infra/acceptance.py; the verdict and the EP
figures go to .rlkit/<name>/gate.json, which `rlkit launch` reads (it refuses to launch after a
failed gate, and uses the faster measured EP backend).

After the node check it also reads the GPU nodes (kubectl get nodes -o json) and compares each
node's allocatable vpc.amazonaws.com/efa with what the pods request.

Ctrl-C deletes the job it applied, or prints exactly what is left and how to delete it.
--logs-dir judges logs collected earlier (no cluster needed). --compare puts the figures of
recorded gate.json files side by side (no config, no cluster). docs/gate.md explains each number
and where its threshold comes from.

Exit code 0 when the gate passed (warnings allowed), 1 when it failed, 2 when it could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from infra import names
from infra.catalog import INSTANCE_TYPES
from infra.config import ConfigError, KitConfig, load_config, parse_config
from infra.trainer_contract import EP_BACKENDS
from manifests import (
    RenderError,
    build_context,
    outputs_from_file,
    outputs_from_stacks,
    placeholder_outputs,
    render,
    write,
)
from manifests.context import FABRIC_DEADLINE_SECONDS
from manifests.efa_env import EfaEnvProfile
from ops.gate import (
    FAIL,
    JOB_KEYS,
    PASS,
    RECORDED,
    WARN,
    Finding,
    GateReport,
    compare,
    evaluate,
    judge_allocatable,
    judge_nodecheck,
    state_document,
)
from ops.config_source import announce
from ops.output import add_output_option, make_console, print_table, wants_json
from ops import aws
from ops.kube import Kubectl, KubectlError, check_cluster, objects_in

STATE_DIR = Path(".rlkit")
_STYLE = {PASS: "green", WARN: "yellow", FAIL: "bold red", RECORDED: "cyan"}


class GateInterrupted(Exception):
    """Ctrl-C during the gate; the message says what was cleaned up or is left."""


# --- helpers shared with `rlkit launch` -----------------------------------------------------------


def state_dir(args: argparse.Namespace, cfg: KitConfig) -> Path:
    return Path(args.state_dir) / cfg.name


def with_ep_backend(cfg: KitConfig, backend: str | None) -> KitConfig:
    """The config with training.expert_parallel.backend replaced, validated again."""
    if backend is None or backend == cfg.training.expert_parallel.backend:
        return cfg
    data = cfg.model_dump(mode="json")
    ep = data["training"]["expert_parallel"]
    ep["backend"] = backend
    if not backend.startswith("deepep-gin"):
        ep["gin_mode"] = None
    return parse_config(data, f"{cfg.name} with expert_parallel.backend={backend}")


def resolve_outputs(cfg: KitConfig, args: argparse.Namespace, allow_placeholder: bool):
    """Stack outputs from --outputs, else CloudFormation; placeholders only for a dry run."""
    if args.outputs is not None:
        return outputs_from_file(cfg, args.outputs)
    if allow_placeholder:
        return placeholder_outputs(cfg)
    return outputs_from_stacks(cfg, client=aws.client(aws.session(cfg.region), "cloudformation"))


def render_for_run(cfg: KitConfig, args: argparse.Namespace, echo) -> tuple[Any, Path, Any]:
    """Resolve the stack outputs and render the tree to ``--out`` (default out/<name>); returns
    the render context, the directory and the outputs (whose cluster kubectl must point at).
    Raises RenderError."""
    outputs = resolve_outputs(cfg, args, allow_placeholder=args.dry_run)
    out = args.out if args.out is not None else Path("out") / cfg.name
    return render_manifests(cfg, outputs, out, args.dry_run, echo), out, outputs


def render_manifests(cfg: KitConfig, outputs, out: Path, dry_run: bool, echo) -> Any:
    """Render (and, unless dry-run, write) the tree; returns the render context."""
    ctx = build_context(cfg, outputs)
    files = render(ctx)
    if dry_run:
        echo(f"[dry-run] would render {len(files)} object(s) to {out}/ "
             f"(stack outputs: {outputs.origin})")
    else:
        write(files, out)
        echo(f"Rendered {len(files)} object(s) to {out}/ (stack outputs: {outputs.origin})")
    return ctx


class GateStateError(ValueError):
    """A gate.json that cannot be trusted; the message names the file and the fix."""


# gate.json fields `rlkit launch` reads, with the types they must have.
_STATE_FIELDS: dict[str, tuple[type, ...]] = {
    "ok": (bool,), "instance_type": (str,), "nodes": (int,), "findings": (list,),
    "ep": (dict, type(None)),
}


def load_state(path: Path) -> dict[str, Any] | None:
    """The last gate result, None when no gate ran; GateStateError when the file is corrupt."""
    if not path.is_file():
        return None

    def corrupt(why: str) -> GateStateError:
        return GateStateError(
            f"{path} is corrupt ({why}), so the last gate result cannot be trusted. Fix: delete "
            f"it and run `rlkit gate` again (or judge saved logs: rlkit gate --logs-dir "
            f"{path.parent / 'gate-logs'})")

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise corrupt(f"not JSON: {str(err)[:120]}") from None
    if not isinstance(doc, dict):
        raise corrupt("not a JSON object")
    for key, types in _STATE_FIELDS.items():
        if key in doc and (not isinstance(doc[key], types)
                           or (bool not in types and isinstance(doc[key], bool))):
            raise corrupt(f"{key} is {type(doc[key]).__name__}")
    if not all(isinstance(f, dict) for f in doc.get("findings", [])):
        raise corrupt("findings must be objects")
    ep = doc.get("ep") or {}
    if not isinstance(ep.get("measurements", {}), dict) or not all(
            isinstance(m, dict) and isinstance(m.get("time_us", 0), (int, float))
            for m in ep.get("measurements", {}).values()):
        raise corrupt("ep.measurements must map backends to figures")
    return doc


# --- running the jobs ----------------------------------------------------------------------------


class GateRunner:
    """Applies one fabric job at a time, waits, collects logs, deletes it."""

    def __init__(self, kubectl: Kubectl, namespace: str, out: Path,
                 jobs: list[tuple[str, str]], instance_type: str, nodes: int,
                 timeout_s: float, poll_s: float, echo: Callable[[str], None],
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 node_selector: str | None = None):
        self.k = kubectl
        self.ns = namespace
        self.out = out
        self.jobs = jobs
        self.instance_type = instance_type
        self.nodes = nodes
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.echo = echo
        self.sleep = sleep
        self.clock = clock
        self.node_selector = node_selector
        self.applied: list[Path] = []
        self.problems: list[Finding] = []

    def job_dir(self, key: str) -> Path:
        return self.out / "fabric" / key

    def run(self) -> dict[str, str]:
        logs: dict[str, str] = {}
        try:
            self.k.apply([self.out / "00-namespace.yaml", self.out / "01-serviceaccount.yaml"])
            for key, name in self.jobs:
                directory = self.job_dir(key)
                # A finished Job of an earlier run would not run again: remove it first.
                self.k.delete([directory])
                self.applied.append(directory)
                self.k.apply([directory])
                state = self.wait(key, name)
                if self.k.dry_run:
                    self.k.run(["logs", "-n", self.ns, "-l", f"job-name={name}",
                                "--all-containers", "--tail=-1"])
                else:
                    logs[key] = self.collect(name)
                self.k.delete([directory], wait=False)
                self.applied.remove(directory)
                if key == "nodecheck" and self.node_selector is not None and not self.k.dry_run:
                    # Read even when the job did not finish: a node offering fewer EFA devices
                    # than the pod requests is the usual reason a pod stays Pending.
                    nodes = self.k.get_json(["nodes", "-l", self.node_selector]) or {}
                    logs["nodes"] = json.dumps(nodes, indent=1)
                if state != "complete":
                    self.problems.append(self._job_problem(key, name, state))
                    break
                if key == "nodecheck" and not self.k.dry_run:
                    itype = INSTANCE_TYPES[self.instance_type]
                    findings = judge_nodecheck(logs[key], self.nodes, itype.efa_devices)
                    if "nodes" in logs:
                        findings += judge_allocatable(logs["nodes"], itype.efa_devices)
                    if any(f.status == FAIL for f in findings):
                        self.echo("Node check failed: the benchmarks are skipped.")
                        break
        except KeyboardInterrupt:
            raise GateInterrupted(self.cleanup()) from None
        return logs

    def _job_problem(self, key: str, name: str, state: str) -> Finding:
        if state == "timeout":
            return Finding(f"{key} job", FAIL, f"still running after {self.timeout_s:.0f} s",
                           "finished", f"job {name} did not finish in time (deleted)",
                           "look for pods stuck Pending (kubectl describe pods -n "
                           f"{self.ns} -l job-name={name}); raise --timeout if the nodes are slow "
                           "to join")
        return Finding(f"{key} job", FAIL, "failed", "complete",
                       f"job {name} failed; its logs are judged below and kept in gate-logs/",
                       "read the job's log for the error")

    def _pods(self, name: str) -> list[dict[str, Any]]:
        doc = self.k.get_json(["pods", "-n", self.ns, "-l", f"job-name={name}"])
        return sorted((doc or {}).get("items", []), key=lambda p: p["metadata"]["name"])

    def wait(self, key: str, name: str) -> str:
        """complete | failed | timeout, printing progress when something changes."""
        if self.k.dry_run:
            self.k.run(["wait", "-n", self.ns, f"job/{name}", "--for=condition=Complete",
                        f"--timeout={self.timeout_s:.0f}s"])
            return "complete"
        start = self.clock()
        last = None
        while True:
            job = self.k.get_json(["job", name, "-n", self.ns]) or {}
            status = job.get("status", {})
            conditions = {c["type"]: c.get("status") for c in status.get("conditions", [])}
            elapsed = self.clock() - start
            pods = self._pods(name)
            phases: dict[str, int] = {}
            for p in pods:
                phase = p.get("status", {}).get("phase", "Unknown")
                phases[phase] = phases.get(phase, 0) + 1
            line = (f"  {key}: {status.get('succeeded', 0)} succeeded, {status.get('failed', 0)} "
                    f"failed, pods {', '.join(f'{n} {ph}' for ph, n in sorted(phases.items())) or 'none yet'}")
            pending = [p for p in pods if p.get("status", {}).get("phase") == "Pending"]
            for p in pending[:1]:
                for c in p.get("status", {}).get("conditions", []):
                    if c.get("type") == "PodScheduled" and c.get("status") == "False":
                        line += f" ({c.get('message', c.get('reason', 'unschedulable'))})"
            if line != last:
                self.echo(f"{line} [{elapsed:.0f} s]")
                last = line
            if conditions.get("Complete") == "True" or conditions.get("SuccessCriteriaMet") == "True":
                return "complete"
            if conditions.get("Failed") == "True":
                return "failed"
            if elapsed >= self.timeout_s:
                return "timeout"
            self.sleep(self.poll_s)

    def collect(self, name: str) -> str:
        parts = []
        for p in self._pods(name):
            pod = p["metadata"]["name"]
            parts.append(self.k.logs(pod, self.ns))
        return "\n".join(parts)

    def cleanup(self) -> str:
        """After Ctrl-C: delete what this run applied, or say exactly what is left."""
        if not self.applied:
            return "Interrupted; nothing of the gate is left on the cluster."
        objects = [f"{kind.lower()}/{name}" for d in self.applied
                   for kind, name, _ in objects_in(d)]
        try:
            self.k.delete(self.applied, wait=True, timeout_s=60)
        except (KubectlError, KeyboardInterrupt) as err:
            cmd = " ".join(f"-f {d}" for d in self.applied)
            why = "interrupted again" if isinstance(err, KeyboardInterrupt) else str(err)
            return (f"Interrupted; could not delete what the gate applied ({why}). Left in "
                    f"namespace {self.ns}: {', '.join(objects)}. Delete them with: kubectl delete "
                    f"--ignore-not-found {cmd}")
        return f"Interrupted; deleted {', '.join(objects)} from namespace {self.ns}."


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
             for b, m in sorted(ep["measurements"].items())]
    say = plain(console)
    say("EP backends measured for the model's shape: " + "; ".join(parts))
    say(f"Faster: {ep['faster']} (`rlkit launch` uses it unless --ep-backend says "
                  "otherwise)")


def finish(report: GateReport, cfg: KitConfig, sdir: Path, logs: dict[str, str],
           console: Console, extra: list[Finding] | None = None, as_json: bool = False) -> int:
    report.findings[:0] = extra or []
    sdir.mkdir(parents=True, exist_ok=True)
    logdir = sdir / "gate-logs"
    logdir.mkdir(exist_ok=True)
    for key, text in logs.items():
        (logdir / (f"{key}.json" if key == "nodes" else f"{key}.log")).write_text(text)
    path = sdir / "gate.json"
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        previous = load_state(path)
    except GateStateError as err:  # this run's result replaces it
        plain(console)(f"warning: {err}; writing a fresh one.")
        previous = None
    doc = state_document(report, cfg.name, now, previous)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    if as_json:  # the document gate.json holds; the verdict is also the exit code
        print(json.dumps(doc, indent=2))
        return 0 if report.ok else 1
    print_report(report, console, f"fabric gate: {cfg.name} ({report.nodes} x "
                                  f"{report.instance_type}, EP {report.ep_backend})")
    _print_ep(doc, console)
    say = plain(console)
    if report.ok:
        say(f"Gate PASSED. Recorded in {path}. Next: rlkit launch --config <config>")
        return 0
    say(f"Gate FAILED: {sum(f.status == FAIL for f in report.findings)} failure(s) "
                  f"above, each with its fix. Recorded in {path}; `rlkit launch` refuses to start "
                  "until a gate passes (or --force).")
    return 1


def gin_type_for(cfg: KitConfig) -> str | None:
    """The NCCL_GIN_TYPE the kit's EFA profile sets for this config (None: not a GIN backend)."""
    group = cfg.gpu_node_groups[cfg.training.node_group]
    ep = cfg.training.expert_parallel
    return EfaEnvProfile(group.instance_type, ep.backend, ep.gin_mode).as_dict().get("NCCL_GIN_TYPE")


def run_compare(paths: list[Path], console: Console, as_json: bool = False) -> int:
    """`rlkit gate --compare`: the figures of recorded gate.json files side by side."""
    documents = []
    for path in paths:
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            print(f"error: --compare {path}: not a readable gate.json ({err})", file=sys.stderr)
            return 2
        if not isinstance(doc, dict) or "figures" not in doc:
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
    try:
        cfg = with_ep_backend(load_config(args.config), args.ep_backend)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    t = cfg.training
    group = cfg.gpu_node_groups[t.node_group]
    backend = t.expert_parallel.backend
    sdir = state_dir(args, cfg)
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
        return finish(report, cfg, sdir, logs, console, as_json=as_json)

    try:
        ctx, out, outputs = render_for_run(cfg, args, echo)
    except RenderError as err:
        print(err, file=sys.stderr)
        return 2

    kubectl = Kubectl(context=args.context, dry_run=args.dry_run, echo=echo)
    try:  # before anything is applied or deleted: kubectl must point at this environment
        check_cluster(kubectl, outputs.cluster_name, outputs.region)
    except KubectlError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    jobs = [(j.key, j.name) for j in ctx.fabric]
    selector = ",".join(f"{k}={v}" for k, v in names.gpu_node_labels(t.node_group).items())
    runner = GateRunner(kubectl, ctx.namespace, out, jobs, group.instance_type, t.nodes,
                        args.timeout, args.poll, echo, node_selector=selector)
    echo(f"Fabric gate on {t.nodes} x {group.instance_type} ({t.node_group}), EP backend "
         f"{backend}: {', '.join(k for k, _ in jobs)}")
    try:
        logs = runner.run()
    except GateInterrupted as err:
        print(err, file=sys.stderr)
        return 130
    except KubectlError as err:
        print(f"error: {err}", file=sys.stderr)
        left = [str(d) for d in runner.applied]
        if left:
            print(f"Applied and maybe still present: {', '.join(left)} (kubectl delete "
                  f"--ignore-not-found {' '.join('-f ' + d for d in left)})", file=sys.stderr)
        return 2
    if args.dry_run:
        echo(f"[dry-run] would judge the logs against infra/acceptance.py and write "
             f"{sdir / 'gate.json'}")
        return 0
    report = evaluate(logs, group.instance_type, t.nodes, backend, gin_type)
    return finish(report, cfg, sdir, logs, console, runner.problems, as_json)


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, default=None,
                   help="kit config YAML (default: the built-in default config)")
    p.add_argument("--state-dir", default=str(STATE_DIR),
                   help="where gate results live (default .rlkit; one subdirectory per config)")
    p.add_argument("--context", default=None, help="kubectl context (default: the current one)")
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)


def add_render_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--outputs", type=Path, default=None,
                   help="the JSON written by `cdk deploy --outputs-file` (default: read the "
                   "outputs from CloudFormation)")
    p.add_argument("--out", type=Path, default=None,
                   help="where to render the manifests (default: out/<config name>)")
    p.add_argument("--ep-backend", choices=EP_BACKENDS, default=None,
                   help="override training.expert_parallel.backend for this run")
    p.add_argument("--dry-run", action="store_true",
                   help="print the kubectl commands instead of running them")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "gate", help="run the fabric acceptance jobs and compare with published figures",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(p)
    add_render_source(p)
    p.add_argument("--timeout", type=float, default=FABRIC_DEADLINE_SECONDS,
                   help=f"seconds to wait for each job (default {FABRIC_DEADLINE_SECONDS})")
    p.add_argument("--poll", type=float, default=10.0, help="seconds between status polls")
    p.add_argument("--logs-dir", type=Path, default=None,
                   help="judge the logs in this directory (nodecheck.log, allreduce.log, ep.log, "
                   "nodes.json) instead of running the jobs")
    p.add_argument("--compare", type=Path, nargs="+", default=None, metavar="GATE_JSON",
                   help="print the figures of recorded gate.json files side by side and exit")
    add_output_option(p)
    p.set_defaults(func=_run)
