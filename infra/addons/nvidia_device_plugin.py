"""The NVIDIA device plugin: makes ``nvidia.com/gpu`` allocatable on the GPU nodes."""

from __future__ import annotations

from infra.addons import dra_driver
from infra.addons.record import (
    GPU_NODES,
    SYSTEM_NODES,
    AddonContext,
    ChartVersion,
    HelmAddon,
    Placement,
    Workload,
)

# NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin, tag v0.20.0 (1b826ac), read
# 2026-11-30. The AL2023 NVIDIA AMI ships the driver and container toolkit, not the device
# plugin [EKS user guide, AL2023 accelerated AMIs]. Its required node affinity wants
# nvidia.com/gpu.present=true or NFD labels: the kit labels GPU nodes (infra/names.py).
V0_20_0 = ChartVersion("0.20.0", read="NVIDIA/k8s-device-plugin "
                       "deployments/helm/nvidia-device-plugin, tag v0.20.0 (1b826ac), read "
                       "2026-11-30")
# The same chart folder at tag v0.17.1 (3c37819), as packaged in ../shared/charts.
V0_17_1 = ChartVersion("0.17.1", read="NVIDIA/k8s-device-plugin "
                       "deployments/helm/nvidia-device-plugin, tag v0.17.1 (3c37819)")
PINNED = V0_20_0
RELEASE = "nvidia-device-plugin"


# With GPU feature discovery on, the chart also renders GFD (top-level placement, like the plugin)
# and its bundled node-feature-discovery 0.19.0 (NVIDIA/k8s-device-plugin@1b826acc6af3
# deployments/helm/nvidia-device-plugin/Chart.yaml:11-15, dependency alias nfd, condition
# nfd.enabled,gfd.enabled): GFD writes its labels to features.d on the host (same commit,
# templates/daemonset-gfd.yml:186,202), which the NFD worker on that node reads, so the worker
# runs on the GPU nodes; master, gc and the post-delete prune Job (master's placement) on the
# system nodes.
GFD = f"{RELEASE}-gpu-feature-discovery"
NFD = f"{RELEASE}-node-feature-discovery"
# Chart versions that bundle NFD 0.19.0 (0.20.0); 0.17.1 bundles NFD 0.15.3. The bundled subcharts
# are kubernetes-sigs/node-feature-discovery deployment/helm/node-feature-discovery at tag v0.19.0
# (45d276ed9d3f) and v0.15.3 (d2f13c34b83c): the files in ../shared/charts match those trees (only
# Chart.yaml is re-serialized by helm). Paths below are in that folder. They differ in two things
# the kit sets:
# - gc: node-feature-discovery@45d276ed9d3f templates/nfd-gc.yaml:1 renders the gc Deployment
#   with `gc.enable` (default true, values.yaml:1067); node-feature-discovery@d2f13c34b83c
#   templates/nfd-gc.yaml:1 renders it only with `enableNodeFeatureApi` or
#   `topologyUpdater.enable`, and the device plugin chart sets `nfd.enableNodeFeatureApi: false`
#   (k8s-device-plugin@3c378193fceb deployments/helm/nvidia-device-plugin/values.yaml:120): no gc
#   to place, so the kit sends no gc values there (the chart contract's drop-one-key test found
#   them ignored).
# - PriorityClass: node-feature-discovery@45d276ed9d3f has a chart-wide `priorityClassName`
#   (values.yaml:40) for master, worker, gc and topology updater (templates/master.yaml:40,
#   worker.yaml:43, nfd-gc.yaml:36, topologyupdater.yaml:40), plus `worker.priorityClassName`
#   (worker.yaml:207), which with the chart-wide one set would write the field twice;
#   node-feature-discovery@d2f13c34b83c has only `worker.priorityClassName` (worker.yaml:159).
NFD_0_19_VERSIONS = frozenset({V0_20_0.version})
# The device plugin's and GFD's own pods are system-node-critical (the chart's default); NFD's
# pods get the same, so a node under pressure evicts training pods before the worker that keeps
# the GPU clique labels, and the master that writes them (the kubelet ranks pods for eviction by
# usage over requests, then Pod Priority: kubernetes.io, "Node-pressure Eviction").
NFD_PRIORITY_CLASS = "system-node-critical"


def values(ctx: AddonContext) -> dict:
    # NVIDIA k8s-device-plugin chart: top-level `tolerations` and `nodeSelector`. The chart's
    # required affinity is met by the kit's nvidia.com/gpu.present=true node label. GPU feature
    # discovery (and the NFD it needs) only where UltraServers are configured: it sets
    # nvidia.com/gpu.clique (NVIDIA/k8s-device-plugin@1b826acc6af3 internal/lm/imex.go:39),
    # which the NVIDIA DRA driver's ComputeDomains and the run's podAffinity use [EKS P6e-GB200
    # page; ultraservers.md 1.6, 2.2].
    gfd = dra_driver.ultraservers_configured(ctx.gpu_instance_types)
    nfd: dict = {"enabled": gfd}
    if gfd:
        nfd.update({"master": {"nodeSelector": SYSTEM_NODES},
                    "worker": {"nodeSelector": GPU_NODES, "tolerations": ctx.gpu_tolerations}})
        if (ctx.settings.version or PINNED.version) in NFD_0_19_VERSIONS:
            nfd["gc"] = {"nodeSelector": SYSTEM_NODES}
            nfd["priorityClassName"] = NFD_PRIORITY_CLASS
        else:
            nfd["worker"]["priorityClassName"] = NFD_PRIORITY_CLASS
    return {"tolerations": ctx.gpu_tolerations, "nodeSelector": GPU_NODES,
            "nfd": nfd, "gfd": {"enabled": gfd}}


ADDON = HelmAddon(
    key="nvidia_device_plugin",
    repository="https://nvidia.github.io/k8s-device-plugin",
    chart="nvidia-device-plugin",
    namespace="nvidia-device-plugin",
    release=RELEASE,
    pinned=PINNED,
    tested=(V0_20_0, V0_17_1),
    enabled_by_default=True,
    # Anything else the chart renders (the MPS control daemon, for MPS-labelled nodes only)
    # serves no node group.
    workloads=(Workload(RELEASE, Placement.GPU, advertises="nvidia.com/gpu"),
               Workload(GFD, Placement.GPU, conditional=True),
               Workload(f"{NFD}-worker", Placement.GPU, conditional=True),
               Workload(f"{NFD}-master", Placement.SYSTEM, conditional=True),
               Workload(f"{NFD}-gc", Placement.SYSTEM, conditional=True),
               Workload(f"{NFD}-prune", Placement.SYSTEM, conditional=True)),
    values=values,
    # A DaemonSet installed without waiting, like the EFA plugin.
    waits_for=(),
)
