"""`rlkit launch`, `rlkit status`: start the RL job and follow it (`rlkit logs`: ops.logs_cmd).

launch renders the manifests (RayJob and its run config) and applies them with kubectl. It
refuses when the last fabric gate of this config failed, did not finish (cut short before its
verdict), or when none ran, or when the training
group now has a schedulable node the gate did not measure (by EC2 instance ID) or fewer measured
nodes than the job needs (cordoned, NotReady and unreachable nodes do not count; it names them), or when the image it would run for the chosen EP backend is not the
one the gate measured for it (gate.json records it with its digest; an image built since, or the same
tag pushed again with other content, is a fabric stack the gate never ran; the pods pull the image
by the digest its tag names at launch), unless --force (which overrides these gate refusals, not the Capacity Block one
below); --dry-run always previews and says whether, and why, the real run would refuse. On a Capacity
Block, launch reads the block's end (DescribeCapacityReservations), refuses a run that cannot have
one complete save in S3 before EKS drains the block's nodes (40 minutes before the end), and
renders the end into the job so that the launcher saves and stops in time; a dry run that the
real launch would refuse for this exits 1. The
expert-parallel backend is, in order: --ep-backend, the backend the gate measured faster for
these shapes (<state dir>/<name>/gate.json; only measurements taken by a gate that passed), the
config's training.expert_parallel.backend.

status and launch (and logs) first check that kubectl points at this environment's EKS cluster (or
--context does), and that its API server answers within --request-timeout seconds. launch
--dry-run makes the same context check (the kubeconfig only, no API server) and exits 2 when the
context points elsewhere; with no kubectl context at all (a CI job before the cluster exists) it
says the check did not run and exits on the other checks (docs/cli.md).

status prints the RayJob's jobStatus and jobDeploymentStatus (KubeRay); --watch polls until the
job ends, is suspended (exit 1, with the command that resumes it) or fails (exit 1, with the next
step for KubeRay's reason or the launcher's exit code) or is stopped (exit 1: `ray job stop`, or the
head's preStop when its pod is deleted; a drain is named when its head pod or node shows one, and
`rlkit launch --replace` resumes from the newest complete save); with --watch a failed read of the RayJob
is a missed poll, tried again at the next one, and 5 failures in a row end the watch (exit 2). A
start slower than 5 minutes has its pods that are not running named, with why (a failed read of
the pods is said, and the watch goes on). KubeRay calls a RayJob Running once its submitter Job
exists, and waits for a submitter pod that never starts for ever: a RayJob Running with no Ray
job 5 minutes after its attempt began has its submitter pod named, and one stuck (unschedulable,
an image it cannot pull) for 10 minutes ends the watch with exit 1 and the fix; -o json|yaml prints the RayJob's state as one document. For Capacity Block groups it first shows the block's window on stderr (start, end, time
left, when EKS drains the nodes). Then, on stderr, the environment's CloudWatch dashboard URL and
a one-line health summary (GPU use, EFA drops, failed nodes, restarts, reward, step time; a
RUNNING job whose run reported no training step for a while is a problem; --no-health skips it).
When the run is over and the training group is on-demand, it says that the group's GPU nodes
keep billing until the group is scaled down.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from infra import names
from infra.cdk_cli import cdk_command
from infra.config import ConfigError, KitConfig, training_ep_backend_problems
from manifests import RenderError
from manifests.render import LEGACY_HEAD_POLICY_SELECTOR, NAMESPACE_FILES, RAYJOB_FILE, plan_files
from ops import aws, observability, options, reservations, stopped_job
from ops.config_source import announce
from ops.gate import GateStateError, legacy_results, load_state, results_path
from ops.gate.runner import POLL_FAILURES_TOLERATED
from ops.kube import (Kubectl, KubectlError, check_cluster, gpu_group_selector, kubectl_for, objects_in,
                      pinned_kubectl, preview_cluster_check)
from ops.launching import (DEPLOYMENT_STATES, RESUME_SUSPENDED, choose_backend, describe_rayjob,
                           RAY_CLUSTER_LABEL, failure_advice, finished, gate_image_verdict,
                           gate_nodes_verdict, gate_verdict, not_schedulable, retrying,
                           start_is_slow, stuck_pods_line)
from ops.output import add_output_option, emit, wants_json
from ops.rendering import cluster_to_check, render_for_run, with_ep_backend
from ops.shared_volume import SharedVolumeConflict, ensure_shared_volume
from ops.submitter import SUBMITTER_JOB_LABEL, awaiting_submission, submitter_verdict


REPLACE_TIMEOUT_S = 600  # --replace: the old RayJob, its Ray cluster and its submitter Job


def utcnow() -> datetime:
    return datetime.now(timezone.utc)  # tests replace it: a block's end is a matter of the clock


# --- launch --------------------------------------------------------------------------------------


def _launch(args: argparse.Namespace) -> int:
    cfg = options.load_config(args)
    if cfg is None:
        return 2
    announce(cfg, args, f"{'[dry-run] ' if args.dry_run else ''}Launch into")
    path = results_path(cfg.name, args.state_dir)
    legacy = legacy_results(cfg.name)
    if legacy is not None and not path.is_file():
        print(f"note: {legacy} is a gate result from an older rlkit (relative to the working "
              f"directory); results now live in {path.parent}. Move it there to use it.",
              file=sys.stderr)
    try:
        state = load_state(path)
    except GateStateError as err:
        print(f"Not launching: {err}.", file=sys.stderr)
        return 2
    problem = gate_verdict(state, cfg, path, options.config_flag(args))
    if problem and not args.force and not args.dry_run:
        print(f"Not launching: {problem}.", file=sys.stderr)
        return 1
    # A dry run's verdict: the exit code of the first check the real launch would stop at, in
    # the real launch's order (gate, Capacity Block window, kubectl context).
    verdict = 1 if problem and not args.force else 0
    if problem and args.force:
        print(f"WARNING (--force): {problem}.", file=sys.stderr)
    elif problem:  # a dry run always previews, and says what the real run would do
        print(f"[dry-run] the real launch would REFUSE: {problem}.")
    backend, why = choose_backend(state, cfg, args.ep_backend)
    configured = cfg.training.expert_parallel.backend
    try:
        cfg = with_ep_backend(cfg, backend)
    except ConfigError as err:
        print(f"The EP backend {backend} ({why}) does not fit this config:\n{err}\nPass "
              "--ep-backend with a backend that does.", file=sys.stderr)
        return 2
    if refused := training_ep_backend_problems(cfg):
        print(f"Not launching: EP backend {backend} ({why}) cannot train:\n"
              + "\n".join(f"  - {p}" for p in refused), file=sys.stderr)
        return 2
    print(f"EP backend: {backend} ({why})")
    window, too_short = _training_window(args, cfg)
    if too_short and not args.dry_run:
        print(f"Not launching: {too_short}.", file=sys.stderr)
        return 1
    if too_short:
        print(f"[dry-run] the real launch would REFUSE: {too_short}.")
        verdict = verdict or 1
    try:
        ctx, out, outputs = render_for_run(cfg, args.outputs, args.out, args.dry_run,
                                           options.aws_clients(args, cfg.region), print,
                                           reservation_end=window.end if window else None,
                                           config_file=args.config,
                                           block_start_wait_s=_block_start_wait_s(window),
                                           hints=options.outputs_hints(args, "launch"))
    except RenderError as err:
        print(err, file=sys.stderr)
        return 2
    if state is not None and not problem:  # the gate passed: with the image this job runs?
        wrong, line = gate_image_verdict(
            state, backend, ctx.worker.image, configured=configured,
            placeholder=outputs.is_placeholder and cfg.training.image is None,
            config_flag=options.config_flag(args))
        if wrong and not args.force and not args.dry_run:
            print(f"Not launching: {wrong}.", file=sys.stderr)
            return 1
        if wrong and args.force:
            print(f"WARNING (--force): {wrong}.", file=sys.stderr)
        elif wrong:
            print(f"[dry-run] the real launch would REFUSE: {wrong}.")
            verdict = verdict or 1
        else:
            print(line, file=sys.stderr if line.startswith("note:") else sys.stdout)
    k = kubectl_for(args)
    ns, job = ctx.namespace, ctx.rayjob_name
    try:
        # Before anything is read, deleted (--replace) or applied: kubectl must point at this
        # environment's cluster, and stays pinned to that context for the calls below. A dry
        # run makes the same check and previews the rest either way.
        cluster = cluster_to_check(cfg, outputs)
        if args.dry_run:
            context_verdict = preview_cluster_check(k, cluster, outputs.region, "launch")
            verdict = verdict or context_verdict  # an earlier refusal's code comes first
        else:
            check_cluster(k, cluster, outputs.region)
        if state is not None and not problem:  # the gate passed: on the nodes there now?
            nodes_doc = k.get_json(["nodes", "-l", gpu_group_selector(cfg.training.node_group)])
            if not args.dry_run:  # a dry run reads nothing: the command above is its preview
                moved, line = gate_nodes_verdict(state, nodes_doc, cfg, options.config_flag(args))
                if moved and not args.force:
                    print(f"Not launching: {moved}.", file=sys.stderr)
                    return 1
                print(f"WARNING (--force): {moved}." if moved else line,
                      file=sys.stderr if moved or line.startswith("note:") else sys.stdout)
        existing = k.get_json(["rayjob", job, "-n", ns])
        if existing is not None:
            st = existing.get("status", {})
            if not args.replace:
                print(f"Not launching: a RayJob named {job} already exists in {ns} (jobStatus "
                      f"{st.get('jobStatus', '-')}, jobDeploymentStatus "
                      f"{st.get('jobDeploymentStatus', '-')}). Pass --replace to delete it and "
                      "start again, or set a new training.run_name.", file=sys.stderr)
                return 1
            # Foreground: KubeRay names the submitter Job like the RayJob and adopts one that
            # still exists (KubeRay v1.7.0, ray-project/kuberay@59d663aeec13
            # ray-operator/controllers/ray/rayjob_controller.go:560-580, createK8sJobIfNeed), so
            # the new RayJob would read the old run's Job (and its failure) if the old one were
            # deleted behind the call's back. The old Ray cluster's GPU pods take a while to stop.
            print(_replace_notice(existing, out, ns))
            try:
                k.delete([out / "rl-job"], timeout_s=REPLACE_TIMEOUT_S, cascade="foreground")
            except KubectlError as err:
                if not _wait_ran_out(err):
                    raise
                print(_still_terminating(k, err, ns, job, options.config_flag(args)),
                      file=sys.stderr)
                return 2
        k.apply([out / name for name in NAMESPACE_FILES])
        # The namespace-wide NetworkPolicy now admits what the Ray-head-only policy of earlier
        # renders did (same peers, every pod): those are redundant and go, this run's and any
        # other's (kit labels, kit namespace).
        k.run(["delete", "networkpolicy", "-n", ns, "-l", LEGACY_HEAD_POLICY_SELECTOR,
               "--ignore-not-found"])
        # The claim the head and workers mount, and its volume: created once, then checked.
        ensure_shared_volume(k, out, ctx.shared_fs, ns)
        # The RayJob only once everything it needs was accepted (run config, retry Role and
        # binding, ComputeDomain): `kubectl apply` carries on past a refused object.
        k.apply([out / f.path for f in plan_files(ctx)
                 if f.path.startswith("rl-job/") and f.path != RAYJOB_FILE])
        k.apply([out / RAYJOB_FILE])
    except SharedVolumeConflict as err:
        print(f"Not launching: {err}", file=sys.stderr)
        return 1
    except KubectlError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        if verdict:
            print(f"[dry-run] preview only: without --dry-run this launch would refuse (exit "
                  f"{verdict}): see the REFUSE line(s) above.")
        return verdict
    ro = cfg.training.rollout
    mode = ""  # the rollout mode, when it is not the default colocated on-policy one
    if ro.placement == "disaggregated":
        mode = f" ({cfg.training.nodes - (ro.nodes or 0)} training + {ro.nodes} rollout"
        mode += (f", {ro.overlap} overlap, up to {ro.off_policy_steps} step(s) off-policy)"
                 if ro.overlap != "none" else ")")
    print(f"Launched RayJob {job} in namespace {ns} on {cfg.training.nodes} x "
          f"{cfg.gpu_node_groups[cfg.training.node_group].instance_type}{mode}.")
    flag = options.config_flag(args)
    print(f"Follow it with: rlkit status{flag} --watch   and   rlkit logs{flag} -f")
    return 0


def _replace_notice(existing: dict, out: Path, ns: str) -> str:
    """What --replace deletes, and how long it may wait, said before it starts."""
    st = existing.get("status", {})
    objects = [f"{kind} {name}" for kind, name, _ in objects_in(out / "rl-job")]
    return (f"Replacing: deleting RayJob {existing.get('metadata', {}).get('name', '?')} "
            f"(jobStatus {st.get('jobStatus') or '-'}, jobDeploymentStatus "
            f"{st.get('jobDeploymentStatus') or '-'}) and the run's other objects in {ns} "
            f"({', '.join(o for o in objects if not o.startswith('RayJob ')) or 'none'}), and "
            f"waiting until they and what they own (the Ray cluster's pods, the submitter Job) are "
            f"gone: up to {REPLACE_TIMEOUT_S // 60} minutes while its GPU pods stop.")


def _wait_ran_out(err: KubectlError) -> bool:
    """The --replace delete failed because its wait ran out (kubectl's own --timeout, or the
    kit's limit on the kubectl process), not because kubectl could not reach the cluster."""
    return "timed out waiting for the condition" in err.message or \
        err.message.startswith("no answer within")


def _still_terminating(k: Kubectl, err: KubectlError, ns: str, job: str, flag: str) -> str:
    """After --replace's wait ran out: what is still being deleted, on which nodes and why, and
    what the user may do. Falls back to kubectl's error when the cluster cannot be read."""
    head = (f"error: the old run was not gone after {REPLACE_TIMEOUT_S // 60} minutes "
            f"(`{err.command}`: {err.message.removeprefix('error: ')}); nothing new was applied.")
    again = f"rlkit launch --replace{flag}"
    try:
        pods = (k.get_json(["pods", "-n", ns]) or {}).get("items", [])
        rj = k.get_json(["rayjob", job, "-n", ns])
        stuck = [p for p in pods if (p.get("metadata") or {}).get("deletionTimestamp")]
        nodes = {n: k.get_json(["node", n]) for n in sorted(
            {(p.get("spec") or {}).get("nodeName") for p in stuck} - {None})}
    except KubectlError as read:
        return f"{head} Reading what is left failed too ({read.message}). Fix: {read.fix}."
    lines, gone_pods = [head], []
    if rj is not None:
        fin = (rj.get("metadata") or {}).get("finalizers") or []
        lines.append(f"RayJob {job} is still there"
                     + (f" (finalizers: {', '.join(fin)}: KubeRay and the garbage collector remove "
                        "them once what it owns is gone)" if fin else ""))
    for p in stuck:
        name = p["metadata"].get("name", "?")
        node = (p.get("spec") or {}).get("nodeName")
        if node is None:
            where = "never scheduled"
        elif nodes.get(node) is None:
            where = f"on {node}, a node that is gone"
            gone_pods.append(name)
        else:
            where = f"on {node} ({not_schedulable(nodes[node]) or 'Ready: still stopping'})"
        lines.append(f"Still terminating: pod {ns}/{name} {where}")
    if not stuck and rj is None:
        lines.append(f"Nothing in {ns} is terminating now: the deletion may have finished since. "
                     f"Run `{again}` again")
        return "\n".join(lines) + "."
    down = [n for n, doc in nodes.items() if doc is not None and not_schedulable(doc)]
    fix = (f"Fix: wait until the old run's pods are gone (`kubectl get pods -n {ns}`), then run "
           f"`{again}` again.")
    if down:
        fix += (f" A pod on a node that is not Ready ({', '.join(down)}) ends only when its "
                "kubelet answers again, or when the node is replaced and its Node object goes "
                f"(`kubectl get nodes`).")
    if gone_pods:
        fix += (" Your choice, for pods whose node is gone (nothing runs them any more): remove "
                "them from the API with " + "; ".join(
                    f"kubectl delete pod {n} -n {ns} --force --grace-period=0" for n in gone_pods)
                + " (never for a pod on a node that is only unreachable: its containers may "
                "still hold the GPUs and write to the run's storage).")
    return "\n".join(lines) + "\n" + fix


def _training_window(args: argparse.Namespace, cfg: KitConfig
                     ) -> tuple[reservations.Window | None, str | None]:
    """The training group's Capacity Block window (None when it is not on one, or unreadable),
    and why a run launched now cannot save before its end (None: it can)."""
    group = cfg.training.node_group
    rid = reservations.capacity_block_groups(cfg).get(group)
    if rid is None:
        return None, None
    try:
        window = reservations.read_window(options.aws_clients(args, cfg.region).ec2, group, rid)
    except aws.AWS_ERRORS as err:
        print(f"WARNING: could not read the window of capacity block {rid} "
              f"({aws.describe_error(err)}): the job gets no end time, and the launcher reads it "
              "only if its role may call ec2:DescribeCapacityReservations", file=sys.stderr)
        return None, None
    if window is None:
        return None, (f"capacity block {rid} (gpu_node_groups.{group}) not found in {cfg.region}; "
                      "check it with rlkit preflight")
    now = utcnow()
    print(reservations.describe(window, now))
    return window, reservations.first_save_problem(cfg, window, now)


def _block_start_wait_s(window: reservations.Window | None) -> float | None:
    """Seconds until the training group's Capacity Block starts (0 once it has; None: not read),
    which the RayJob's start deadline adds (manifests.context.pre_running_deadline_seconds)."""
    if window is None or window.start is None:
        return None
    return max(0.0, (window.start - utcnow()).total_seconds())


def _print_windows(args: argparse.Namespace, cfg: KitConfig) -> None:
    """Each Capacity Block group's window, on stderr (stdout stays the job state)."""
    groups = reservations.capacity_block_groups(cfg)
    if not groups:
        return
    try:
        ec2 = options.aws_clients(args, cfg.region).ec2
        for group, rid in groups.items():
            window = reservations.read_window(ec2, group, rid)
            print(reservations.describe(window, utcnow()) if window else
                  f"capacity block {rid} (gpu_node_groups.{group}): not found in {cfg.region}",
                  file=sys.stderr)
    except aws.AWS_ERRORS as err:
        print(f"capacity block window: unavailable ({aws.describe_error(err)})", file=sys.stderr)


# --- status --------------------------------------------------------------------------------------


def idle_nodes_note(cfg: KitConfig, config: str | Path | None = None) -> str | None:
    """What keeps billing once the run is over: the training group's on-demand GPU nodes, which
    nothing scales down (KubeRay deletes only the Ray cluster). None for reserved capacity, which
    bills whether nodes run or not, and for a group already at zero. ``config``: the config
    file, which the deploy command it names passes to CDK."""
    t = cfg.training
    g = cfg.gpu_node_groups[t.node_group]
    if g.capacity.type != "on-demand" or g.desired_size == 0:
        return None
    return (f"The run no longer uses gpu_node_groups.{t.node_group}, but its {g.desired_size} "
            f"{g.instance_type} node(s) keep running, and billing, until the group is scaled "
            f"down: set gpu_node_groups.{t.node_group}.desired_size: 0 and min_size: 0 and deploy "
            f"({cdk_command('deploy', names.gpu_stack_name(cfg.name, t.node_group), config=config)}"
            "), or rlkit teardown when the environment is done")



def _status(args: argparse.Namespace, sleep: Callable[[float], None] = time.sleep) -> int:
    cfg = options.load_config(args)
    if cfg is None:
        return 2
    _print_windows(args, cfg)
    job, ns = cfg.training.run_name, names.TRAINER_NAMESPACE
    flag = options.config_flag(args)
    last = last_stuck = None
    failures = 0
    submitter_stuck = False
    try:
        k = pinned_kubectl(args, cfg)
        while True:
            try:
                doc = k.get_json(["rayjob", job, "-n", ns])
            except KubectlError as err:
                # Watching, one refused or timed-out read (the API server throttling or
                # restarting) is a missed poll, not the job's end; several in a row are.
                failures += 1
                if not args.watch or failures >= POLL_FAILURES_TOLERATED:
                    raise
                print(f"could not read the RayJob ({err.message}); trying again ({failures} of "
                      f"{POLL_FAILURES_TOLERATED - 1})", file=sys.stderr)
                sleep(args.poll)
                continue
            failures = 0
            if doc is None:
                print(f"No RayJob named {job} in namespace {ns}. Start it with: rlkit launch"
                      f"{flag}", file=sys.stderr)
                return 1
            stuck, submitter_stuck = None, False
            if start_is_slow(doc, utcnow()):
                stuck = _stuck_pods_line(k, doc, ns)
            elif awaiting_submission(doc, utcnow()):
                stuck, submitter_stuck = _submitter_line(k, doc, ns, flag)
            line = describe_rayjob(doc, ns)
            if wants_json(args):
                if not args.watch or finished(doc) or submitter_stuck:
                    emit(args, _status_document(cfg, doc, stuck if submitter_stuck else None))
            elif line != last:
                print(line)
                last = line
            if stuck is not None and stuck != last_stuck:
                print(stuck, file=sys.stderr)
                last_stuck = stuck
            # A submitter that cannot start is never failed by KubeRay: the watch ends there,
            # with exit 1, instead of following a run that holds its GPU nodes for nothing.
            if not args.watch or finished(doc) or submitter_stuck:
                break
            sleep(args.poll)
    except KubectlError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("Stopped watching; the job keeps running.", file=sys.stderr)
        return 130
    _print_health(args, cfg, doc)
    if submitter_stuck:
        return 1
    st = doc.get("status", {})
    if retrying(doc):
        print(f"An attempt failed; KubeRay is retrying it (failed attempts so far: "
              f"{st.get('failed', '?')}, backoffLimit {doc.get('spec', {}).get('backoffLimit', '?')}). "
              f"Its output: rlkit logs{flag}", file=sys.stderr)
        return 0
    state = st.get("jobDeploymentStatus") or ""
    idle = idle_nodes_note(cfg, args.config)
    if idle and (finished(doc) or DEPLOYMENT_STATES.get(state) == "suspended"):
        print(idle, file=sys.stderr)
    if DEPLOYMENT_STATES.get(state) in ("suspending", "suspended"):
        # KubeRay v1.7.0 deletes the Ray cluster and resets jobStatus to ""
        # (ray-project/kuberay@59d663aeec13 ray-operator/controllers/ray/rayjob_controller.go
        # :366-410), and runs nothing until spec.suspend is false: not a finished run.
        being = "being " if state == "Suspending" else ""
        print(f"The job is {being}suspended (spec.suspend is true; jobDeploymentStatus {state}): "
              f"KubeRay deletes its Ray cluster and runs nothing until it is resumed, so it has "
              f"not finished. Resume it: {RESUME_SUSPENDED.format(job=job, ns=ns)} (KubeRay starts "
              f"it over on a new Ray cluster, whose launcher resumes from the newest save in S3)",
              file=sys.stderr)
        return 1
    if state in ("Failed", "ValidationFailed"):
        print(failure_advice(doc, flag, ns), file=sys.stderr)
        return 1
    # `ray job stop`: KubeRay ends the RayJob Complete with jobStatus STOPPED
    # (ray-project/kuberay@59d663aeec13 ray-operator/controllers/ray/rayjob_controller.go
    # :333-341); a suspension resets jobStatus to "" instead (above). Not done either way.
    if st.get("jobStatus") == "STOPPED":
        # A drain or a node's deletion ends it so too (the head's preStop): say how it goes on.
        heads, nodes = stopped_job.read_heads(k, doc, ns)
        print(stopped_job.stopped_advice(doc, heads, nodes, utcnow(), flag), file=sys.stderr)
        return 1
    return 0


def _stuck_pods_line(k: Kubectl, doc: dict, ns: str) -> str:
    """For a RayJob slow to start: its Ray cluster's pods that are not running, and why. A read
    that fails is said, not fatal: the watch goes on."""
    cluster = (doc.get("status") or {}).get("rayClusterName")
    if not cluster:
        return "Still starting: KubeRay has not named the Ray cluster yet"
    try:
        pods = (k.get_json(["pods", "-n", ns, "-l", f"{RAY_CLUSTER_LABEL}={cluster}"]) or {})
    except KubectlError as err:
        return f"Still starting; could not read the pods of Ray cluster {cluster}: {err.message}"
    return stuck_pods_line(doc, pods.get("items") or [], ns)


def _submitter_line(k: Kubectl, doc: dict, ns: str, flag: str) -> tuple[str, bool]:
    """For a RayJob Running with no Ray job status: its submitter pod, and whether it is stuck
    (``ops.submitter``). A read that fails is said, not fatal, and judges nothing."""
    job = doc.get("metadata", {}).get("name", "?")
    try:
        pods = k.get_json(["pods", "-n", ns, "-l", f"{SUBMITTER_JOB_LABEL}={job}"]) or {}
    except KubectlError as err:
        return f"Submitting; could not read the pods of submitter Job {job}: {err.message}", False
    return submitter_verdict(doc, pods.get("items") or [], ns, utcnow(),
                             f"rlkit launch --replace{flag}")


def _status_document(cfg: KitConfig, doc: dict, stuck: str | None = None) -> dict:
    """`rlkit status -o json|yaml`: the RayJob's state (docs/cli.md lists the shape);
    ``stuck``: the line on a submitter that cannot start."""
    st = doc.get("status", {})
    return {"environment": cfg.name, "namespace": names.TRAINER_NAMESPACE,
            "rayjob": doc.get("metadata", {}).get("name", cfg.training.run_name),
            "jobStatus": st.get("jobStatus"),
            "jobDeploymentStatus": st.get("jobDeploymentStatus"),
            "rayCluster": st.get("rayClusterName"), "startTime": st.get("startTime"),
            "endTime": st.get("endTime"), "message": st.get("message"),
            "finished": finished(doc), "stuck": stuck}


def _print_health(args: argparse.Namespace, cfg: KitConfig, rayjob: dict | None = None) -> None:
    """The dashboard URL and the health line, on stderr (stdout stays the job state); with the
    RayJob RUNNING, the line also says when its run reports no training step."""
    if not cfg.observability.enabled:
        print("dashboard: none (observability.enabled is false in the config)", file=sys.stderr)
        return
    print(f"dashboard: {observability.dashboard_url(cfg)}", file=sys.stderr)
    if args.no_health:
        return
    try:
        cloudwatch = options.aws_clients(args, cfg.region).cloudwatch
        line = observability.health_line(cloudwatch, cfg, now=datetime.now(timezone.utc),
                                         running_from=observability.running_since(rayjob))
    except aws.AWS_ERRORS as err:
        line = f"health: unavailable ({aws.describe_error(err)})"
    print(line, file=sys.stderr)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "launch", help="apply the RayJob (refuses after a failed or missing fabric gate)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_run_options(p)
    options.add_run_source(p)
    p.add_argument("--force", action="store_true",
                   help="launch despite the gate's refusals, each then printed as a WARNING: the "
                   "last gate failed, did not finish or none ran; the image differs from the one "
                   "the gate measured; the training group has a node the gate did not measure, or "
                   "fewer measured nodes than the job needs. It does not override the Capacity "
                   "Block refusal (a run that cannot save before the block ends)"),
    p.add_argument("--replace", action="store_true",
                   help="delete an existing RayJob of the same name first and wait (up to "
                   f"{REPLACE_TIMEOUT_S // 60} minutes) until its Ray cluster and submitter Job are "
                   "gone; it says what it deletes first, and names what is stuck if the wait runs out")
    p.set_defaults(func=_launch)

    s = subparsers.add_parser("status", help="the RayJob's state (KubeRay jobStatus)",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_run_options(s)
    s.add_argument("--watch", action="store_true", help="poll until the job ends")
    s.add_argument("--poll", type=float, default=15.0, help="seconds between polls")
    options.add_aws(s, region=False, profile_help="AWS profile for the health line and the "
                    "Capacity Block window")
    s.add_argument("--no-health", action="store_true",
                   help="skip the CloudWatch health line (no AWS call)")
    add_output_option(s)
    s.set_defaults(func=_status)
