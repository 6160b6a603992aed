"""What `rlkit launch` and `rlkit status` decide from what they read: whether the last fabric gate
allows a launch, which EP backend the run uses, and a RayJob's state in one line.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from infra.catalog import INSTANCE_TYPES
from infra.names import RAY_CLUSTER_LABEL, TRAINER_NAMESPACE
from infra.trainer_contract import EXIT_CONFIG, EXIT_PREPARE, EXIT_RESERVATION_END, EXIT_UPLOAD
from infra.config import KitConfig
from infra.config.ep_spans import ep_spans
from ops.gate.record import instance_id, measurement_passed
from ops.gate.runner import why_not_started
from ops.image_digest import split_reference

# Every JobDeploymentStatus of KubeRay v1.7.0 (ray-project/kuberay@59d663aeec13, the commit tag
# v1.7.0 points to: ray-operator/apis/ray/v1/rayjob_types.go:48-59) and what `rlkit status` makes
# of it; a test reads the enum from that file (tests/fixtures/kuberay) and fails on a value missing
# here. Transitions: rayjob_controller.go. In this module, rayjob_controller.go and utils/ are
# ray-operator/controllers/ray/rayjob_controller.go and ray-operator/controllers/ray/utils/ at
# kuberay@59d663aeec13.
DEPLOYMENT_STATES: dict[str, str] = {
    "": "starting",              # New: just created, a retry or a resumed suspension starting over
    "Initializing": "starting",  # the Ray cluster's pods start; then the submitter Job
    "Waiting": "starting",       # InteractiveMode only (the kit's RayJob is K8sJobMode)
    "Running": "running",
    "Retrying": "running",       # a failed attempt: KubeRay deletes its cluster, then New again
    "Suspending": "suspending",  # spec.suspend set: KubeRay deletes the cluster (:366-410)
    "Suspended": "suspended",    # not done: nothing runs until spec.suspend is false (:411-419)
    "Complete": "ended",         # the Ray job ended SUCCEEDED or STOPPED (:333-341)
    "Failed": "failed",
    "ValidationFailed": "failed",  # KubeRay refused the spec before any pod ran
}
# The states KubeRay leaves a RayJob in until someone acts: a watch ends there. Suspended is one
# (KubeRay does not requeue it), but it is not the job's end: `rlkit status` says how to resume it.
TERMINAL_DEPLOYMENT_STATUS = frozenset(
    state for state, kind in DEPLOYMENT_STATES.items() if kind in ("ended", "failed", "suspended"))
RESUME_SUSPENDED = """kubectl patch rayjob {job} -n {ns} --type merge -p '{{"spec":{{"suspend":false}}}}'"""


def gate_verdict(state: dict[str, Any] | None, cfg: KitConfig, state_path: Path,
                 config_flag: str = " --config <this config>") -> str | None:
    """Why launch must not start (None = the last gate passed for this node group and size).
    ``config_flag``: how the gate command it suggests names the config (``options.config_flag``)."""
    group = cfg.gpu_node_groups[cfg.training.node_group]
    gate = f"rlkit gate{config_flag} --outputs cdk-outputs.json"
    if state is None:
        return (f"no fabric gate has run for {cfg.name!r} (no {state_path}). Run `{gate}` first: "
                "it checks the EFA fabric in minutes before the job spends GPU hours. Or pass "
                "--force to launch without it")
    if state.get("in_progress"):
        return (f"the last fabric gate for {cfg.name!r} did not finish (started "
                f"{state.get('started_at', '?')}): it was stopped (Ctrl-C, a kubectl error, the "
                "process killed) before its verdict, so it has none, and the gate before it no "
                f"longer counts. Run `{gate}` again until it passes, or pass --force to launch "
                "anyway")
    if not state.get("ok"):
        # load_state checked each finding's shape: check and status always, the rest if present
        failed = [f"{f['check']} ({f.get('measured', '?')}; expected {f.get('expected', '?')})"
                  for f in state.get("findings", []) if f.get("status") == "fail"]
        return (f"the last fabric gate for {cfg.name!r} FAILED ({state.get('finished_at', '?')}): "
                f"{'; '.join(failed[:3]) or 'see ' + str(state_path)}. Fix what it reported "
                f"(`rlkit gate --logs-dir {state_path.parent / 'gate-logs'}` shows it again), run "
                f"`{gate}` until it passes, or pass --force to launch anyway")
    if (state.get("instance_type"), state.get("nodes")) != (group.instance_type,
                                                           cfg.training.nodes):
        return (f"the last gate measured {state.get('nodes')} x {state.get('instance_type')}, but "
                f"the job runs on {cfg.training.nodes} x {group.instance_type}. Run `{gate}` for "
                "this shape, or pass --force")
    return None


# The taints the node lifecycle controller puts on a node whose Ready condition is False
# (not-ready) or Unknown (unreachable: its kubelet stopped posting status)
# [kubernetes/api@3f662f327b94 core/v1/well_known_taints.go:22,27, TaintNodeNotReady and
# TaintNodeUnreachable; tag v0.35.6 = Kubernetes 1.35.6, the default version's AMI release in
# infra/versions.py].
DOWN_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def not_schedulable(node: dict[str, Any]) -> str | None:
    """Why a job's pod cannot start on ``node`` now (None: it can): cordoned (``--isolate`` does
    this), its Ready condition not True (or none reported), or a not-ready/unreachable taint."""
    spec = node.get("spec") or {}
    why = []
    if spec.get("unschedulable"):
        why.append("cordoned")
    ready = next((c for c in (node.get("status") or {}).get("conditions") or []
                  if c.get("type") == "Ready"), None)
    if ready is None:
        why.append("no Ready condition reported")
    elif ready.get("status") != "True":
        why.append(f"Ready is {ready.get('status') or '?'}"
                   + (f" ({ready['reason']})" if ready.get("reason") else ""))
    why += [f"taint {t.get('key')}:{t.get('effect', '')}" for t in spec.get("taints") or []
            if t.get("key") in DOWN_TAINTS]
    return ", ".join(why) or None


def gate_nodes_verdict(state: dict[str, Any], nodes_doc: dict[str, Any] | None, cfg: KitConfig,
                       config_flag: str = " --config <this config>") -> tuple[str | None, str]:
    """(why launch must not start, None when it may; a line on the nodes) from the nodes the
    passing gate measured and the training group's nodes now (``kubectl get nodes -l <group
    labels> -o json``). Nodes that joined since and are schedulable (``not_schedulable``: not
    cordoned, Ready, no not-ready/unreachable taint) were never
    measured, and the job may land on them: a Capacity Block renewed on other hosts, a node
    replaced by auto-repair, a group scaled up. Measured nodes that left matter only when fewer
    than the job needs are left: the others would join later, unmeasured."""
    group = cfg.training.node_group
    measured = state.get("measured_nodes") or []
    if not measured:
        return None, (f"note: the last gate ({state.get('finished_at', '?')}) recorded no node "
                      "names (an older rlkit wrote it), so launch cannot tell whether the nodes "
                      f"changed since; `rlkit gate{config_flag}` records them")
    instances = {m["instance"] for m in measured if m.get("instance")}
    by_name = {m["name"] for m in measured if not m.get("instance")}
    kept, new, skipped = 0, [], []
    for item in (nodes_doc or {}).get("items", []):
        name = item.get("metadata", {}).get("name", "?")
        why = not_schedulable(item)
        if why:  # cordoned, NotReady or unreachable: the job cannot start there now
            skipped.append(f"{name} ({instance_id(item) or 'no instance ID'}): {why}")
            continue
        if instance_id(item) in instances or name in by_name:
            kept += 1
        else:
            new.append(f"{name} ({instance_id(item) or 'no instance ID'})")
    when, wanted = state.get("finished_at", "?"), cfg.training.nodes
    gate = f"`rlkit gate{config_flag} --outputs cdk-outputs.json`"
    aside = f". Not counted as schedulable: {'; '.join(skipped)}" if skipped else ""
    if new and kept >= wanted:  # enough measured nodes: the others are spares the job may take
        return (f"gpu_node_groups.{group} offers {kept + len(new)} schedulable nodes, the job "
                f"and the last gate ({when}) use {wanted}, and the job may land on one the gate "
                f"did not measure: {', '.join(new)}. Cordon those (kubectl cordon <node>) to keep the job "
                f"on the measured nodes, or pass --force{aside}"), ""
    if new:
        return (f"{len(new)} schedulable node(s) of gpu_node_groups.{group} were not measured by "
                f"the last gate ({when}), and the job may land on them: {', '.join(new)}. Run "
                f"{gate} to measure the nodes the group has now, or pass --force{aside}"), ""
    if kept < wanted:
        return (f"only {kept} of the {len(measured)} node(s) the last gate measured ({when}) are "
                f"still schedulable in gpu_node_groups.{group}, and the job needs {wanted}: the "
                f"rest would be nodes that join later, unmeasured. When the group has its nodes "
                f"again, run {gate}, or pass --force{aside}"), ""
    gone = len(measured) - kept
    return None, (f"Fabric gate: passed {when} on these nodes ({kept} schedulable now"
                  + (f"; {gone} measured node(s) left, cordoned or not Ready since)" if gone else ")")
                  + (f"{aside}." if skipped else ""))


def gate_image_verdict(state: dict[str, Any], backend: str, image: str, *, configured: str,
                       placeholder: bool = False,
                       config_flag: str = " --config <this config>") -> tuple[str | None, str]:
    """(why launch must not start, None when it may; a line on the image) from the image the job
    would run for EP ``backend`` and the one the passing gate measured for it (gate.json
    ``ep.measurements.<backend>.image``, else the top-level ``image`` when ``backend`` is the
    gate's own). The kit's repository has immutable tags, so another reference is another build
    (another EFA installer, aws-ofi-nccl, NCCL, NVSHMEM): a fabric stack the gate never ran.
    ``configured``: the config's own backend (the gate measures it without --ep-backend);
    ``placeholder``: ``image`` was rendered from placeholder stack outputs (a dry run), so only
    its tag is compared. Pinned references (``<name>:<tag>@<digest>``: ops/image_digest.py)
    compare by digest: the same tag with another digest is another image."""
    when = state.get("finished_at", "?")
    gate = f"rlkit gate{config_flag} --outputs cdk-outputs.json"
    if backend != configured:
        gate += f" --ep-backend {backend}"
    if "image" not in state:
        return None, (f"note: the last gate ({when}) recorded no image (an older rlkit wrote it), "
                      f"so launch cannot tell whether {image} is the image it measured; "
                      f"`rlkit gate{config_flag}` records it")
    measurement = ((state.get("ep") or {}).get("measurements") or {}).get(backend)
    if measurement is not None and "image" in measurement:
        then = measurement["image"]
    elif backend == state.get("ep_backend_measured"):
        then = state["image"]
    elif measurement is None:
        return (f"the last gate ({when}) ran {state['image'] or 'an image it did not record'} (EP "
                f"backend {state.get('ep_backend_measured', '?')}), never the image of EP backend "
                f"{backend} ({image}). Run `{gate}` to measure it, or pass --force"), ""
    else:  # measured by an older rlkit, kept in a newer record
        return None, (f"note: the last gate recorded no image for EP backend {backend} (an older "
                      f"rlkit measured it), so launch cannot tell whether {image} is the one "
                      f"measured; `{gate}` records it")
    if then is None:
        return None, (f"note: the last gate ({when}) judged saved logs (--logs-dir), which do not say "
                      f"which image ran them, so launch cannot tell whether {image} is the one "
                      "measured")
    (then_name, then_digest), (name, digest) = split_reference(then), split_reference(image)
    if placeholder:  # a dry run renders the tag only: compare tags
        same = then_name.rsplit(":", 1)[-1] == name.rsplit(":", 1)[-1]
    elif then_digest and digest:  # content: a tag pushed again names other content
        same = then_digest == digest
        if not same and then_name == name:
            return (f"the job would run image {image} (EP backend {backend}), but the last gate "
                    f"({when}) measured {then}: the same tag, other content (the image was "
                    "deleted, or the repository emptied by a teardown, and built again since), a "
                    f"fabric stack the gate never ran. Run `{gate}` to measure this image, or "
                    "pass --force"), ""
    elif digest and then_name == name:  # recorded by tag only: the tag may name other content now
        return (f"the last gate ({when}) recorded the image by its tag only ({then}; an rlkit "
                "before digests were recorded), so launch cannot tell whether the tag still names "
                f"the content it measured (now {digest}). Run `{gate}` to measure it, or pass "
                "--force"), ""
    else:
        same = then == image
    if not same:
        return (f"the job would run image {image} (EP backend {backend}), but the last gate "
                f"({when}) measured {then}: an image built since (another EFA installer, "
                "aws-ofi-nccl, NCCL or NVSHMEM) is a fabric stack the gate never ran. Run "
                f"`{gate}` to measure this image, or pass --force"), ""
    return None, f"Image: {image} (the one the last gate measured, {when})"


def choose_backend(state: dict[str, Any] | None, cfg: KitConfig,
                   override: str | None) -> tuple[str, str]:
    """(backend, why) in order: --ep-backend, the gate's faster backend (among measurements taken
    by a gate that passed: ``measurement_passed``), the config."""
    configured = cfg.training.expert_parallel.backend
    if override is not None:
        return override, "--ep-backend"
    ep = (state or {}).get("ep") or {}
    measurements = ep.get("measurements") or {}
    # Only a measurement taken by a gate that passed may choose; gate.json's own "faster" is not
    # trusted (an older rlkit chose it among failed gates' figures too).
    passed = {b: m for b, m in measurements.items() if measurement_passed(b, m, state)}
    faster = min(passed, key=lambda b: passed[b]["time_us"]) if passed else None
    layout = ep.get("layout")
    if faster and layout is not None:
        # The gate measured the run's own EP groups; a config whose groups changed since then
        # (another EP size, another node count) takes a path the measurement never took.
        itype = INSTANCE_TYPES[cfg.gpu_node_groups[cfg.training.node_group].instance_type]
        # The groups depend on the backend (DeepEP with expert TP runs on Megatron's tp-ep group):
        # compare with what this config runs on the backend the recorded layout was measured with.
        measured = (state or {}).get("ep_backend_measured") or configured
        t = cfg.training
        run_cfg = cfg if measured == configured else cfg.model_copy(update={"training": t.model_copy(
            update={"expert_parallel": t.expert_parallel.model_copy(update={"backend": measured})})})
        now = {s.name: s.size for s in ep_spans(run_cfg, itype)}
        then = {p: s.get("ep_size") for p, s in layout.items() if p != "model"}
        if now != then:
            return configured, (f"config: the gate measured EP groups {then or 'over every GPU'}, this "
                                f"config runs {now or 'none'}; run `rlkit gate` again to choose from a "
                                "measurement of this layout")
    times = ", ".join(f"{b} {m['time_us'] / 1000:.2f} ms" for b, m in sorted(passed.items()))
    failed = "; ".join(f"{b} {m['time_us'] / 1000:.2f} ms, "
                       + ("its gate failed" if "passed" in m else
                          "its gate's verdict not recorded (an older rlkit)")
                       for b, m in sorted(measurements.items()) if b not in passed)
    if faster and failed:
        where = f", measured {ep['decided_by']}" if ep.get("decided_by") else ""
        if faster == configured:
            return faster, (f"config; the gate measured it fastest of the backends it passed with "
                            f"({failed}; {times}{where})")
        return faster, (f"measured faster by the gate among the backends it passed with ({failed}; "
                        f"{times}{where}); the config says {configured}; --ep-backend overrides")
    if faster:
        where = f", measured {ep['decided_by']}" if ep.get("decided_by") else ""
        if faster == configured:
            return faster, f"config; the gate measured it fastest ({times}{where})"
        return faster, (f"measured faster by the gate ({times}{where}); the config says {configured}; "
                        "--ep-backend overrides")
    if failed:
        return configured, (f"config: no EP measurement comes from a gate that passed ({failed}); "
                            "run `rlkit gate` until it passes to choose from a measurement")
    return configured, "config (the gate measured no EP backend)"


# Ray's message can be 20,000 characters of the driver's log (Ray's job supervisor appends the
# log's tail to "Job entrypoint command failed with exit code N"): the status line shows its first
# line and its last, each cut to this many characters, and says where the whole text is.
MESSAGE_LINE_CHARS = 200


def rayjob_yaml_command(doc: dict[str, Any], namespace: str) -> str:
    return f"kubectl get rayjob {doc.get('metadata', {}).get('name', '?')} -n {namespace} -o yaml"


def short_message(doc: dict[str, Any], namespace: str) -> str:
    """The RayJob's status.message, readable on one line: whole when short, else its first and
    last lines, cut, and the command that prints all of it."""
    text = ((doc.get("status") or {}).get("message") or "").strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) <= 1 and len(text) <= MESSAGE_LINE_CHARS:
        return text

    def cut(line: str, keep_end: bool = False) -> str:
        if len(line) <= MESSAGE_LINE_CHARS:
            return line
        return ("..." + line[-MESSAGE_LINE_CHARS:]) if keep_end else (line[:MESSAGE_LINE_CHARS] + "...")

    shown = cut(lines[0]) + (f" [...] {cut(lines[-1], keep_end=True)}" if len(lines) > 1 else "")
    return (f"{shown} ({len(text):,} characters in all: {rayjob_yaml_command(doc, namespace)}, "
            "status.message)")


def describe_rayjob(doc: dict[str, Any], namespace: str = TRAINER_NAMESPACE) -> str:
    st = doc.get("status", {})
    fields = [("jobStatus", st.get("jobStatus") or "-"),
              ("jobDeploymentStatus", st.get("jobDeploymentStatus") or "-"),
              ("rayCluster", st.get("rayClusterName") or "-"),
              ("started", st.get("startTime") or "-"),
              ("ended", st.get("endTime") or "-")]
    text = ", ".join(f"{k} {v}" for k, v in fields)
    if st.get("message"):
        text += f"; message: {short_message(doc, namespace)}"
    return f"{doc.get('metadata', {}).get('name', '?')}: {text}"


def finished(doc: dict[str, Any]) -> bool:
    """Whether KubeRay is done with the RayJob. Its deployment status decides: KubeRay v1.7.0 copies
    the Ray job's status whatever the deployment's (rayjob_controller.go:353), so a failed attempt
    reads jobStatus FAILED while it is being retried (deployment Running, then Retrying,
    :452 and :555) until the retry resets it (:366-403)."""
    return doc.get("status", {}).get("jobDeploymentStatus") in TERMINAL_DEPLOYMENT_STATUS


def retrying(doc: dict[str, Any]) -> bool:
    """A failed attempt that KubeRay retries (backoffLimit): not the job's end."""
    st = doc.get("status", {})
    return st.get("jobDeploymentStatus") == "Retrying" or (
        st.get("jobStatus") == "FAILED" and not finished(doc))


# Failure reasons KubeRay v1.7.0 never retries, whatever backoffLimit says
# (rayjob_controller.go:543-552): a job past its activeDeadlineSeconds, and one whose Ray head did
# not answer status checks for RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS (300 s by default,
# utils/constant.go:289-290), as when the head's node is lost.
NOT_RETRIED_REASONS = {
    "DeadlineExceeded": "it ran past its activeDeadlineSeconds",
    "JobStatusCheckTimeoutExceeded": "its Ray head did not answer KubeRay's status checks for 5 "
                                     "minutes (the head's node lost or replaced?)",
}

# Ray's job supervisor starts a failed entrypoint's message with its exit code ("Job entrypoint
# command failed with exit code 5, last available logs (truncated to 20,000 chars):", or "... exit
# code 5. No logs available."), and KubeRay v1.7.0 copies the message to the RayJob's status
# (rayjob_controller.go:356). The image does not pin Ray (radixark/miles@78527b9102b3, tag
# v0.1.0, requirements.txt:23 asks for any `ray[default]`), so the wording was read where the code
# index holds ray-project/ray: python/ray/dashboard/modules/job/job_supervisor.py@06a58f817505
# (the same at @1cee661a7ab2). The pattern needs only the prefix.
ENTRYPOINT_EXIT = re.compile(r"Job entrypoint command failed with exit code (-?\d+)")


def entrypoint_exit_code(doc: dict[str, Any]) -> int | None:
    """The launcher's exit code, read from a failed RayJob's message (None: not there)."""
    found = ENTRYPOINT_EXIT.match(((doc.get("status") or {}).get("message") or "").lstrip())
    return int(found.group(1)) if found else None


def failure_advice(doc: dict[str, Any], flag: str, namespace: str) -> str:
    """What `rlkit status` says of a RayJob whose deployment status is Failed or ValidationFailed:
    why, when the kit knows (KubeRay's reason, the launcher's own exit codes), and the next step.
    ``flag``: how the commands it suggests name the config."""
    st = doc.get("status") or {}
    job = doc.get("metadata", {}).get("name", "?")
    logs, replace = f"rlkit logs{flag}", f"rlkit launch --replace{flag}"
    if st.get("jobDeploymentStatus") == "ValidationFailed":
        # Set before any pod exists (rayjob_controller.go:140-153): there is no output to read.
        return (f"KubeRay refused the RayJob before any pod ran (ValidationFailed): "
                f"{short_message(doc, namespace) or 'no message'}. Fix what it names (a RayJob "
                f"edited by hand, or a KubeRay operator other than v1.7.0?), then launch again: "
                f"{replace}")
    if st.get("reason") == "PreRunningDeadlineExceeded":
        # rayjob_controller.go:1247-1261: not Running within spec.preRunningDeadlineSeconds of the
        # attempt's start; KubeRay retried it like any failure until backoffLimit ran out.
        # The reason is the last attempt's: an earlier one may have trained (and saved) first.
        deadline = doc.get("spec", {}).get("preRunningDeadlineSeconds", "?")
        attempts = st.get("failed")
        earlier = (f"; of its {attempts} failed attempts, earlier ones may have trained and "
                   "saved, and a launch resumes from the newest save"
                   if isinstance(attempts, int) and attempts > 1 else "")
        return (f"The job's last attempt never started: KubeRay failed it after {deadline} s "
                f"without reaching Running (PreRunningDeadlineExceeded; "
                f"training.start_deadline_minutes){earlier}. Its pods go with its Ray cluster; "
                f"`rlkit status` names the pods not running and why while a start waits, and "
                f"`kubectl get events -n {namespace}` keeps the scheduler's reasons for about an "
                f"hour. Fix that, then launch again: {replace}")
    why = NOT_RETRIED_REASONS.get(st.get("reason", ""))
    if why:
        return (f"The job failed and KubeRay will not retry it ({st['reason']}: {why}; KubeRay "
                f"retries no such failure, whatever backoffLimit says). Resume from its newest "
                f"save: {replace}")
    code = entrypoint_exit_code(doc)
    if code == EXIT_RESERVATION_END:
        return (f"The job stopped for its Capacity Block's end (launcher exit {code}): not a crash. "
                "The launcher stopped training once the save it asked for before EKS drains the "
                "block's nodes was in S3 (or at the drain, if none made it) and switched KubeRay's "
                f"retries off (a retry would start on nodes being drained); {logs} shows the last "
                "save. Launch again on the next block "
                f"once its nodes are up (docs/operations.md, \"A reservation's end\"): {replace}; "
                "it resumes from the newest save in S3")
    if code == EXIT_CONFIG:
        return (f"The launcher refused the run (exit {code}: the run config, the image's EP "
                "backend or the checkpoint directory's file system) and switched KubeRay's retries "
                f"off, as each would fail alike. {logs} lists every problem; fix the kit config, "
                f"then {replace}")
    if code == EXIT_UPLOAD:
        return (f"Training finished, but a finished save could not be uploaded to S3 (launcher "
                f"exit {code}). {logs} shows the `rltrainer checkpoint upload` command that "
                "finishes the job")
    if code == EXIT_PREPARE:
        return (f"Training never started (launcher exit {code}): staging the inputs or restoring "
                "the checkpoint failed, the file system lacks room for the saves to come, or the "
                "Ray head restarted more than once in one attempt (the launcher allows 2 starts "
                "per attempt: rltrainer/attempts.py). "
                f"{logs} names the error and its fix; then {replace}")
    exit_code = f" (exit code {code})" if code is not None else ""
    return (f"The job failed{exit_code}. Read its output: {logs}; Ray's view: kubectl describe "
            f"rayjob {job} -n {namespace}")


# A RayJob Initializing longer than this has its Ray cluster's pods read and the ones not running
# named: pulling the trainer image onto a fresh node takes minutes, a pod that waits for a node
# (Pending), an image it cannot pull or a taint it does not tolerate waits until KubeRay ends
# Initializing at preRunningDeadlineSeconds (rayjob_controller.go:179-190;
# training.start_deadline_minutes, an hour by default) or, where the kit renders none (a Capacity
# Block run rendered without its window, start_deadline_minutes 0), never.
STUCK_AFTER = timedelta(minutes=5)
PODS_NAMED = 4


def start_is_slow(doc: dict[str, Any], now: datetime) -> bool:
    """The RayJob has been Initializing for more than STUCK_AFTER (KubeRay sets status.startTime
    when it enters Initializing, again for each retry: rayjob_controller.go:915-916)."""
    st = doc.get("status") or {}
    if st.get("jobDeploymentStatus") != "Initializing" or not st.get("startTime"):
        return False
    try:
        started = datetime.fromisoformat(str(st["startTime"]).replace("Z", "+00:00"))
    except ValueError:
        return False
    return now - started > STUCK_AFTER


def stuck_pods_line(doc: dict[str, Any], pods: list[dict[str, Any]], namespace: str) -> str:
    """One line for a slow start: each pod of the Ray cluster that is not running (or runs with a
    container waiting: a crash loop), and why; the command that shows more."""
    st = doc.get("status") or {}
    cluster = st.get("rayClusterName") or "?"
    since = f"Initializing since {st.get('startTime')}, over {STUCK_AFTER.seconds // 60} min"
    if not pods:
        return (f"Still starting ({since}): Ray cluster {cluster} has no pods yet. Why: kubectl "
                f"describe raycluster {cluster} -n {namespace}")
    stuck = []
    for pod in sorted(pods, key=lambda p: p.get("metadata", {}).get("name", "")):
        status = pod.get("status") or {}
        waiting = any((c.get("state") or {}).get("waiting")
                      for c in (status.get("initContainerStatuses") or [])
                      + (status.get("containerStatuses") or []))
        if status.get("phase") != "Running" or waiting:
            stuck.append(f"{pod.get('metadata', {}).get('name', '?')} {why_not_started(pod)}")
    if not stuck:
        return (f"Still starting ({since}): all {len(pods)} pods of Ray cluster {cluster} run; "
                f"KubeRay waits for the cluster to be ready. Why not: kubectl describe raycluster "
                f"{cluster} -n {namespace}")
    more = f"; and {len(stuck) - PODS_NAMED} more" if len(stuck) > PODS_NAMED else ""
    return (f"Still starting ({since}): {len(stuck)} of {len(pods)} pods of Ray cluster "
            f"{cluster} not running: {'; '.join(stuck[:PODS_NAMED])}{more}. More: kubectl "
            f"describe pods -n {namespace} -l {RAY_CLUSTER_LABEL}={cluster}")
