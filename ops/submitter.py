"""What `rlkit status` makes of a RayJob that KubeRay calls Running before its Ray job exists.

In the kit's K8sJobMode KubeRay v1.7.0 moves a RayJob from Initializing to Running as soon as it
has created the submitter Job, before that Job's pod has run anything
(ray-project/kuberay@59d663a ray-operator/controllers/ray/rayjob_controller.go:231-236). Its
start deadline, preRunningDeadlineSeconds, is checked only while Initializing (:188, defined
:1252); in Running a Ray job not found, with the submitter Job not finished, is only requeued
(:302-316), and the submitter Job counts as failed only once it has a Failed condition
(:1138-1172, :1183-1190). A submitter pod that never starts (no room beside the Ray head, its
image cannot be pulled) fails no Job, so the RayJob stays Running with no jobStatus for ever while its
Ray cluster holds the GPU nodes. This module names that pod and why.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ops.gate.runner import why_not_started

# The Job controller labels each pod of a Job with the Job's name [kubernetes/api@10b39a39b
# batch/v1/types.go:49, JobNameLabel]; KubeRay names the submitter Job like the RayJob
# (rayjob_controller.go createNewK8sJob).
SUBMITTER_JOB_LABEL = "batch.kubernetes.io/job-name"
# A RayJob Running with no jobStatus for longer than this since its attempt began has its
# submitter pods read: the cluster is up by then, and the submitter normally submits in seconds
# once its pod runs.
SUBMIT_WAIT_AFTER = timedelta(minutes=5)
# A submitter pod this old that still waits for a node, an image or a restart is stuck: kubelet
# retries a failed pull with a back-off of at most 5 minutes, so a pull that fails this long is
# not a passing hiccup. The submitter runs beside the Ray head, whose node already holds the
# trainer image; a pull still under way there (ContainerCreating) is said as slow, not stuck.
SUBMITTER_STUCK_AFTER = timedelta(minutes=10)
# Waiting reasons of a container that does not get better by itself (kubelet's own reasons).
STUCK_REASONS = {
    "ImagePullBackOff": "its image cannot be pulled",
    "ErrImagePull": "its image cannot be pulled",
    "InvalidImageName": "its image reference is not valid",
    "CrashLoopBackOff": "its container keeps crashing",
    "CreateContainerConfigError": "its container cannot be configured",
    "CreateContainerError": "its container cannot be created",
    "RunContainerError": "its container cannot be started",
}


def _when(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def awaiting_submission(doc: dict[str, Any], now: datetime) -> bool:
    """The RayJob is Running, its Ray job has no status yet (KubeRay has found no Ray job: the
    submitter has not submitted it), and its attempt began more than SUBMIT_WAIT_AFTER ago."""
    st = doc.get("status") or {}
    if st.get("jobDeploymentStatus") != "Running" or st.get("jobStatus"):
        return False
    started = _when(st.get("startTime"))
    return started is not None and now - started > SUBMIT_WAIT_AFTER


def _waiting_reason(pod: dict[str, Any]) -> str | None:
    status = pod.get("status") or {}
    for c in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        reason = ((c.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return reason
    return None


def _unschedulable(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _fix(pod: dict[str, Any], reason: str | None, namespace: str) -> str:
    name = (pod.get("metadata") or {}).get("name", "?")
    images = ", ".join(c.get("image", "?") for c in (pod.get("spec") or {}).get("containers") or [])
    describe = f"kubectl describe pod {name} -n {namespace}"
    if reason in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
        return (f"check that the image ({images or '?'}) exists and that the GPU nodes may "
                f"pull it; the pull error: {describe}")
    if reason == "CrashLoopBackOff":
        return f"read why it exits: kubectl logs {name} -n {namespace} --previous"
    if reason is None and _unschedulable(pod):
        return (f"no node fits it beside the Ray head (its pod affinity to the head, the GPU "
                f"tolerations, CPU and memory requests): make room on the head's node, or see "
                f"{describe}")
    return f"see {describe}"


def submitter_verdict(doc: dict[str, Any], pods: list[dict[str, Any]], namespace: str,
                      now: datetime, replace: str) -> tuple[str, bool]:
    """(one line on the submitter of a RayJob ``awaiting_submission``, whether it is stuck).
    ``pods``: the submitter Job's pods; the newest one is the one that matters (the Job replaces a
    failed pod, up to its backoffLimit). ``replace``: the command that starts the run over."""
    st = doc.get("status") or {}
    job = (doc.get("metadata") or {}).get("name", "?")
    since = f"Running with no Ray job status; attempt started {st.get('startTime')}"
    if not pods:
        return (f"Submitting ({since}): the submitter Job {job} has no pod yet. Why: kubectl "
                f"describe job {job} -n {namespace}"), False
    pod = max(pods, key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "",
                                   (p.get("metadata") or {}).get("name", "")))
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    reason = _waiting_reason(pod)
    born = _when((pod.get("metadata") or {}).get("creationTimestamp")) or _when(st.get("startTime"))
    old = born is not None and now - born > SUBMITTER_STUCK_AFTER
    blocked = reason in STUCK_REASONS or (status.get("phase") == "Pending" and _unschedulable(pod))
    if blocked and old:
        why = STUCK_REASONS.get(reason or "", "no node can take it")
        cluster = st.get("rayClusterName") or "?"
        return (f"Stuck: RayJob {job} is Running but its Ray job was never submitted: submitter "
                f"pod {name} {why_not_started(pod)} ({why}). KubeRay applies the start deadline "
                f"(training.start_deadline_minutes) only until it creates the submitter, and "
                f"waits for a submitter that never starts for ever, while Ray cluster {cluster} "
                f"holds the run's GPU nodes, billing. Fix: {_fix(pod, reason, namespace)}; the "
                f"pod then starts by itself (the scheduler and kubelet keep trying). To free the "
                f"GPU nodes now: kubectl delete rayjob {job} -n {namespace} (its Ray cluster "
                f"goes with it); {replace} starts the run over"), True
    if status.get("phase") == "Pending":
        pulling = " (pulling its image can take many minutes)" \
            if reason in ("ContainerCreating", None) else ""
        return (f"Submitting ({since}): submitter pod {name} is still starting: "
                f"{why_not_started(pod)}{pulling}"), False
    return (f"Submitting ({since}): submitter pod {name} is {status.get('phase', 'Unknown')}; "
            f"KubeRay has not found the Ray job yet. Its output: kubectl logs {name} -n "
            f"{namespace}"), False
