"""The DCGM exporter (optional): per-GPU Prometheus metrics on every GPU node."""

from __future__ import annotations

from pydantic import Field

from infra.addons.record import (
    GPU_NODES,
    AddonConfig,
    AddonContext,
    ChartVersion,
    HelmAddon,
    Placement,
    Workload,
)

# NVIDIA/dcgm-exporter deployment/ chart 4.8.2 at commit d5e5f51 (2026-05-12), read 2026-11-30.
# Optional, off by default. Its ServiceMonitor (on by default in the chart) needs the Prometheus
# Operator CRDs, so the kit renders it only when the config says they exist.
V4_8_2 = ChartVersion("4.8.2", read="NVIDIA/dcgm-exporter deployment/ at d5e5f51 (2026-05-12), "
                      "read 2026-11-30")
RELEASE = "dcgm-exporter"


class DcgmExporterConfig(AddonConfig):
    service_monitor: bool = Field(
        False, description="Also create the chart's Prometheus ServiceMonitor. Needs the "
        "Prometheus Operator CRDs (monitoring.coreos.com) on the cluster, which the kit does not "
        "install; without them the chart install fails and the cluster stack rolls back. Install "
        "them before the deploy that turns this on, so never on a first deploy (`rlkit check` "
        "warns while it is on)."
    )


def values(ctx: AddonContext) -> dict:
    return {"tolerations": ctx.gpu_tolerations, "nodeSelector": GPU_NODES,
            "serviceMonitor": {"enabled": ctx.settings.service_monitor}}


ADDON = HelmAddon(
    key="dcgm_exporter",
    repository="https://nvidia.github.io/dcgm-exporter/helm-charts",
    chart="dcgm-exporter",
    namespace="gpu-monitoring",
    release=RELEASE,
    pinned=V4_8_2,
    tested=(V4_8_2,),
    enabled_by_default=False,
    workloads=(Workload(RELEASE, Placement.GPU),),
    values=values,
    waits_for=(),
    settings=DcgmExporterConfig,
)
