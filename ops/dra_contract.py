"""The DRA part of the cluster contract: ComputeDomain claims on UltraServer node groups.

A GPU pod that claims a ComputeDomain's IMEX channel starts only when (1) its
ResourceClaimTemplate is the one a ComputeDomain the kit renders names (the NVIDIA DRA driver's
controller creates that template from ``spec.channel.resourceClaimTemplate.name``), (2) the
driver's DeviceClasses exist (the EKS P6e-GB200 page: `kubectl get deviceclasses` shows
``compute-domain-daemon.nvidia.com`` and ``compute-domain-default-channel.nvidia.com``), and
(3) the driver's kubelet plugin runs on the pod's node (it allocates the channel there). These
are checked on the rendered charts and manifests; what a live cluster does is not modelled.
"""

from __future__ import annotations

from infra.addons import dra_driver
from ops.scheduling import Finding


def _claiming_pods(kit_objects: list[dict]) -> list[tuple[str, dict]]:
    """(pod name as the scheduling check names it, pod spec) of every kit pod with claims."""
    pods = []
    for obj in kit_objects:
        kind, name = obj.get("kind"), obj.get("metadata", {}).get("name")
        if kind == "RayJob":
            # The head is the run's first GPU node and claims the channel like the workers (the
            # names are ops.scheduling's, so ``lands`` knows where each pod may run).
            pods.append((f"RayJob {name} head",
                         obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]))
            for wg in obj["spec"]["rayClusterSpec"].get("workerGroupSpecs", []):
                pods.append((f"RayJob {name} worker group {wg['groupName']}",
                             wg["template"]["spec"]))
        elif kind == "Job":
            pods.append((f"Job {name}", obj["spec"]["template"]["spec"]))
    return [(n, s) for n, s in pods if s.get("resourceClaims")]


def dra_findings(chart_objects: list[dict], kit_objects: list[dict],
                 lands: dict[str, list[str]]) -> list[Finding]:
    """Every claim that could not be satisfied, per the three rules above."""
    templates = {d["spec"]["channel"]["resourceClaimTemplate"]["name"]
                 for d in kit_objects if d.get("kind") == "ComputeDomain"}
    classes = {o["metadata"]["name"] for o in chart_objects if o.get("kind") == "DeviceClass"}
    plugin = next((groups for pod, groups in lands.items()
                   if pod.endswith(f"/{dra_driver.KUBELET_PLUGIN}")), None)
    findings = []
    for pod, spec in _claiming_pods(kit_objects):
        groups = lands.get(pod) or ["(none)"]
        for claim in spec["resourceClaims"]:
            template = claim.get("resourceClaimTemplateName")
            if template not in templates:
                findings.append(Finding(pod, groups[0], (
                    f"claim {claim['name']!r} names ResourceClaimTemplate {template!r}, which no "
                    "rendered ComputeDomain creates; fix the manifests (manifests/context.py)")))
        missing = [c for c in dra_driver.DEVICE_CLASSES if c not in classes]
        if missing:
            findings.append(Finding(pod, groups[0], (
                f"claims a ComputeDomain channel, but no rendered chart creates DeviceClass(es) "
                f"{', '.join(missing)}; enable addons.dra_driver (infra/addons/dra_driver.py)")))
        for group in lands.get(pod, []):
            if plugin is None or group not in plugin:
                findings.append(Finding(pod, group, (
                    f"claims a ComputeDomain channel, but the DRA kubelet plugin "
                    f"({dra_driver.KUBELET_PLUGIN}) does not run on this node group, so the claim "
                    "cannot be allocated; check its tolerations and node affinity "
                    "(infra/addons/dra_driver.py)")))
    return findings
