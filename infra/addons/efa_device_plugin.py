"""The EFA device plugin: makes ``vpc.amazonaws.com/efa`` allocatable on the EFA GPU nodes."""

from __future__ import annotations

from infra.addons.record import (
    EFA_NODES,
    AddonContext,
    ChartVersion,
    HelmAddon,
    Placement,
    Workload,
)
from infra.names import INSTANCE_TYPE_LABEL, KUBE_SYSTEM_NAMESPACE

# aws/eks-charts stable/aws-efa-k8s-device-plugin, chart v0.5.30 at commit 5239609 (2026-08-03),
# read 2026-11-30. Its DaemonSet is placed by a required node affinity on an instance-type
# allowlist (`supportedInstanceLabels`); v0.5.30's list has every catalog type (p5, p5e, p5en,
# p6-b200, p6-b300), v0.5.7's has no p6. Default tolerations are empty, so the kit passes the
# GPU groups' tolerations.
V0_5_30 = ChartVersion("v0.5.30", read="aws/eks-charts stable/aws-efa-k8s-device-plugin at "
                       "5239609 (2026-08-03), read 2026-11-30")
RELEASE = "aws-efa-k8s-device-plugin"


def values(ctx: AddonContext) -> dict:
    # eks-charts aws-efa-k8s-device-plugin: `tolerations` and `nodeSelector` are top level. The
    # chart also requires a node affinity on its own instance-type allowlist
    # (`supportedInstanceLabels`, templates/daemonset.yaml); the kit replaces that list with the
    # configured GPU groups' types, so an instance type added to the catalog gets its EFA plugin
    # without waiting for a chart release that lists it.
    return {"tolerations": ctx.gpu_tolerations, "nodeSelector": EFA_NODES,
            "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL],
                                        "values": list(ctx.gpu_instance_types)}}


ADDON = HelmAddon(
    key="efa_device_plugin",
    repository="https://aws.github.io/eks-charts",
    chart="aws-efa-k8s-device-plugin",
    namespace=KUBE_SYSTEM_NAMESPACE,
    release=RELEASE,
    pinned=V0_5_30,
    tested=(V0_5_30,),
    enabled_by_default=True,
    workloads=(Workload(RELEASE, Placement.GPU, advertises="vpc.amazonaws.com/efa"),),
    values=values,
    # A DaemonSet installed without waiting: it must not block cluster creation while GPU node
    # groups are at desired 0 (its pods appear when GPU nodes join).
    waits_for=(),
)
