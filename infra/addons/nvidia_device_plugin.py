"""The NVIDIA device plugin: makes ``nvidia.com/gpu`` allocatable on the GPU nodes."""

from __future__ import annotations

from infra.addons.record import (
    GPU_NODES,
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
RELEASE = "nvidia-device-plugin"


def values(ctx: AddonContext) -> dict:
    # NVIDIA k8s-device-plugin chart: top-level `tolerations` and `nodeSelector`; node feature
    # discovery stays off. The chart's required affinity is met by the kit's
    # nvidia.com/gpu.present=true node label.
    return {"tolerations": ctx.gpu_tolerations, "nodeSelector": GPU_NODES,
            "nfd": {"enabled": False}, "gfd": {"enabled": False}}


ADDON = HelmAddon(
    key="nvidia_device_plugin",
    repository="https://nvidia.github.io/k8s-device-plugin",
    chart="nvidia-device-plugin",
    namespace="nvidia-device-plugin",
    release=RELEASE,
    pinned=V0_20_0,
    tested=(V0_20_0, V0_17_1),
    enabled_by_default=True,
    # Anything else the chart renders (the MPS control daemon, for MPS-labelled nodes only)
    # serves no node group.
    workloads=(Workload(RELEASE, Placement.GPU, advertises="nvidia.com/gpu"),),
    values=values,
    # A DaemonSet installed without waiting, like the EFA plugin.
    waits_for=(),
)
