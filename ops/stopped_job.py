"""`rlkit status` on a RayJob whose Ray job ended STOPPED: who stops one, whether this one looks
like a drain, and how the run goes on.

Two things stop the Ray job and end the RayJob ``Complete`` with jobStatus STOPPED, which KubeRay
does not retry (ray-project/kuberay@59d663aeec13 ray-operator/controllers/ray/rayjob_controller.go
:333-341): a `ray job stop`, and the Ray head's preStop, which stops the job when the head pod is
deleted (a node drain, a node group update or scale-down, a Capacity Block's end:
manifests/templates/rayjob.yaml.j2, docs/manifests.md "When the head is stopped"). The second
leaves traces for a while: KubeRay deletes the finished cluster only ``ttlSecondsAfterFinished``
after the job's ``endTime`` (rayjob_controller.go:1515-1520, handleShutdownAfterJobFinishes), and
until then the head pod is being deleted, or gone, or a new one replaced
it, or its node is cordoned (a drain cordons first), NotReady or gone. A `ray job stop` leaves
the head that ran the job where it was.

Either way the launcher of the next attempt resumes from the newest complete save: the one the
shared file system's tracker points at (uploaded first when S3 lacks it: a save the stop's
480 s did not get out) or a newer one in S3 (rltrainer.checkpoints.resume.prepare_resume).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from infra.names import RAY_CLUSTER_LABEL, RAY_HEAD_NODE_TYPE, RAY_NODE_TYPE_LABEL
from ops.kube import Kubectl, KubectlError



def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def drain_signs(rayjob: dict, heads: list[dict] | None, nodes: dict[str, dict | None],
                now: datetime) -> list[str]:
    """What, in the cluster as it is now, says the head pod was deleted under the job (empty: none
    seen, or nothing could be read). ``heads`` are the Ray cluster's head pods (None: not read);
    ``nodes`` maps a head's node name to the Node (None: it does not exist)."""
    if heads is None:
        return []
    end = _time((rayjob.get("status") or {}).get("endTime"))
    signs: list[str] = []
    if not heads:
        ttl = (rayjob.get("spec") or {}).get("ttlSecondsAfterFinished")
        # After the TTL KubeRay deletes the whole cluster itself: no head then says nothing.
        if end is not None and isinstance(ttl, int) and (now - end).total_seconds() < ttl:
            signs.append(f"its Ray cluster has no head pod {int((now - end).total_seconds() // 60)} "
                         f"min after the job ended, though KubeRay deletes the cluster only {ttl} s "
                         "after that")
        return signs
    for pod in heads:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        name = meta.get("name", "?")
        if meta.get("deletionTimestamp"):
            signs.append(f"its head pod {name} is being deleted")
        created = _time(meta.get("creationTimestamp"))
        if created is not None and end is not None and created > end:
            signs.append(f"its head pod {name} was created after the job ended (a new one: the "
                         "head that ran the job was deleted)")
        node_name = spec.get("nodeName")
        if node_name and node_name in nodes:
            node = nodes[node_name]
            if node is None:
                signs.append(f"the head's node {node_name} is gone")
            elif (node.get("spec") or {}).get("unschedulable"):
                signs.append(f"the head's node {node_name} is cordoned, as a drain does first")
            elif not _ready(node):
                signs.append(f"the head's node {node_name} is NotReady")
    return signs


def stopped_advice(rayjob: dict, heads: list[dict] | None, nodes: dict[str, dict | None],
                   now: datetime, flag: str) -> str:
    """What `rlkit status` says of a RayJob whose Ray job ended STOPPED."""
    signs = drain_signs(rayjob, heads, nodes, now)
    cause = ("This one looks like the head pod's deletion (a drain): " + "; ".join(signs) + ". "
             if signs else "")
    return ("The job was stopped before it finished (jobStatus STOPPED): by `ray job stop`, or by "
            "the Ray head's preStop when its pod was deleted (a node drain, a node group update or "
            "scale-down, a Capacity Block's end), and KubeRay does not retry it. " + cause +
            f"`rlkit launch --replace{flag}` starts the run again from its newest complete save (in "
            "S3, or one on the shared file system that the stop left unuploaded, which the "
            f"launcher uploads first). Read its output: rlkit logs{flag}")


def read_heads(k: Kubectl, rayjob: dict, ns: str) -> tuple[list[dict] | None, dict[str, dict | None]]:
    """The Ray cluster's head pods and their nodes; (None, {}) when the cluster is not named or a
    read fails (the advice then names no cause)."""
    cluster = (rayjob.get("status") or {}).get("rayClusterName")
    if not cluster:
        return None, {}
    selector = f"{RAY_CLUSTER_LABEL}={cluster},{RAY_NODE_TYPE_LABEL}={RAY_HEAD_NODE_TYPE}"
    try:
        heads = (k.get_json(["pods", "-n", ns, "-l", selector]) or {}).get("items") or []
        nodes = {n: k.get_json(["node", n])
                 for n in {(p.get("spec") or {}).get("nodeName") for p in heads} if n}
    except KubectlError:
        return None, {}
    return heads, nodes
