"""The KubeRay operator: runs the RayJob the kit's manifests submit (RL on EKS runs on Ray)."""

from __future__ import annotations

from infra.addons.record import (
    SYSTEM_NODES,
    AddonContext,
    ChartVersion,
    HelmAddon,
    Placement,
    Wait,
    Workload,
)

# ray-project/kuberay helm-chart/kuberay-operator, tag v1.7.0 (59d663a), read 2026-11-30. It
# ships the RayJob/RayCluster CRDs the manifests are validated against
# (../shared/crds/kuberay-v1.7.0).
V1_7_0 = ChartVersion("1.7.0", read="ray-project/kuberay helm-chart/kuberay-operator, tag v1.7.0 "
                      "(59d663a), read 2026-11-30")
RELEASE = "kuberay-operator"


def values(ctx: AddonContext) -> dict:
    # The operator is CPU-only: it belongs on the system nodes, never on a GPU node.
    return {"nodeSelector": SYSTEM_NODES}


ADDON = HelmAddon(
    key="kuberay_operator",
    repository="https://ray-project.github.io/kuberay-helm/",
    chart="kuberay-operator",
    namespace="kuberay-system",
    release=RELEASE,
    pinned=V1_7_0,
    tested=(V1_7_0,),
    enabled_by_default=True,
    workloads=(Workload(RELEASE, Placement.SYSTEM),),
    values=values,
    # A Deployment on the system nodes: its install waits for that node group.
    waits_for=(Wait.SYSTEM_NODES,),
)
