"""Helm charts that make GPU nodes useful: EFA and NVIDIA device plugins, KubeRay, DCGM exporter.

Tolerations, node selectors and labels come from ``infra.names`` and the config's node groups,
the same definitions the EFA node group applies, so a chart can never miss the nodes it is meant
for. ``tests/test_chart_contract.py`` renders the real charts with these values and checks where
their pods land.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from infra import names
from infra.config import AddonsConfig
from infra.versions import HELM_CHARTS

EFA_NODES = {names.EFA_LABEL: "true"}
GPU_NODES = {names.NODE_ROLE_LABEL: names.NODE_ROLE_GPU}
SYSTEM_NODES = {names.NODE_ROLE_LABEL: names.NODE_ROLE_SYSTEM}


def chart_values(name: str, *, gpu_tolerations: list[dict[str, str]],
                 addons: AddonsConfig) -> dict[str, Any]:
    """Values the kit passes to each chart (keys from each chart's values.yaml, at the versions
    pinned in infra/versions.py). ``gpu_tolerations`` tolerate every GPU group's taints."""
    if name == "efa_device_plugin":
        # eks-charts aws-efa-k8s-device-plugin: `tolerations` and `nodeSelector` are top level;
        # the chart adds its own instance-type affinity.
        return {"tolerations": gpu_tolerations, "nodeSelector": EFA_NODES}
    if name == "nvidia_device_plugin":
        # NVIDIA k8s-device-plugin chart: top-level `tolerations` and `nodeSelector`; node feature
        # discovery stays off. The chart's required affinity is met by the kit's
        # nvidia.com/gpu.present=true node label.
        return {"tolerations": gpu_tolerations, "nodeSelector": GPU_NODES,
                "nfd": {"enabled": False}, "gfd": {"enabled": False}}
    if name == "kuberay_operator":
        # The operator is CPU-only: it belongs on the system nodes, never on a GPU node.
        return {"nodeSelector": SYSTEM_NODES}
    if name == "dcgm_exporter":
        return {"tolerations": gpu_tolerations, "nodeSelector": GPU_NODES,
                "serviceMonitor": {"enabled": addons.dcgm_exporter.service_monitor}}
    raise KeyError(name)


class ClusterAddons(Construct):
    """Install the enabled charts on ``cluster`` through its kubectl provider.

    Device plugins are DaemonSets installed without waiting: they must not block cluster
    creation while GPU node groups are at desired 0 (their pods appear when GPU nodes join).
    The KubeRay operator is a Deployment on the system nodes, so it waits for that node group.
    """

    def __init__(self, scope: Construct, id: str, *, cluster: eks.Cluster,
                 addons: AddonsConfig, gpu_tolerations: list[dict[str, str]],
                 system_nodegroup: IConstruct) -> None:
        super().__init__(scope, id)
        self.charts: dict[str, eks.HelmChart] = {}
        for name in AddonsConfig.model_fields:
            if not addons.enabled(name):
                continue
            spec = HELM_CHARTS[name]
            waits = name == "kuberay_operator"
            chart = eks.HelmChart(
                self, name,
                cluster=cluster,
                repository=spec["repository"],
                chart=spec["chart"],
                release=spec["release"],
                namespace=spec["namespace"],
                create_namespace=True,
                version=addons.chart_version(name),
                values=chart_values(name, gpu_tolerations=gpu_tolerations, addons=addons),
                wait=waits,
                timeout=Duration.minutes(10) if waits else None,
            )
            if waits:
                chart.node.add_dependency(system_nodegroup)
            self.charts[name] = chart
