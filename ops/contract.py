"""The cluster contract: render what the stacks install and check where every pod would land.

Inputs are a synthesized cloud assembly (``cdk.out``) and the config it came from. The Helm
releases and their values are read from the cluster template (``ops.helm``); the kit's own
manifests are rendered from the config with placeholder outputs (placement does not depend on
them); ``ops.scheduling`` models the node groups from the templates and checks every pod.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from infra import addons as registry
from infra import names
from infra.config import KitConfig
from infra.versions import FSX_CSI_ADDON_NAME, NODE_MONITORING_ADDON
from ops import dra_contract, helm, observability, scheduling


@dataclass
class ContractReport:
    findings: list[scheduling.Finding]
    releases: list[helm.ChartRelease]
    nodes: list[scheduling.NodeGroupModel]
    notes: list[str] = field(default_factory=list)
    # Pod name -> the node groups it would land on (rendered charts and kit manifests).
    lands: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.findings


def assembly_templates(cdk_out: Path) -> dict[str, dict]:
    """Stack name -> template of every stack in a cloud assembly directory."""
    manifest = json.loads((cdk_out / "manifest.json").read_text())
    templates = {}
    for artifact in manifest.get("artifacts", {}).values():
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        props = artifact["properties"]
        name = props.get("stackName") or artifact.get("displayName")
        templates[name] = json.loads((cdk_out / props["templateFile"]).read_text())
    return templates


def intended_chart_targets(config: KitConfig) -> dict[str, frozenset[str]]:
    """Chart workload name -> the node groups it serves, from each add-on record's workloads
    (GPU: every GPU group; system: the system group; both). Anything else a chart renders
    (e.g. the NVIDIA plugin's MPS daemon, for MPS-labelled nodes only) serves none."""
    gpu = frozenset(config.gpu_node_groups)
    system = frozenset({scheduling.SYSTEM_GROUP})
    return {w.name: (gpu if w.lands.on_gpu else frozenset())
            | (system if w.lands.on_system else frozenset())
            for addon in registry.ADDONS for w in addon.workloads}


def chart_advertised_resources() -> dict[str, str]:
    """Device plugin workload name -> the extended resource it makes allocatable."""
    return {w.name: w.advertises for addon in registry.ADDONS for w in addon.workloads
            if w.advertises}


def render_charts(releases: list[helm.ChartRelease], *, kubernetes_version: str,
                  chart_dir: Path | None, cache_dir: Path, allow_pull: bool,
                  locate: Callable[[str], Path | None] | None = None) -> list[dict]:
    """Every object the releases render, through the real Helm."""
    binary = helm.helm_binary(kubernetes_version, cache_dir)
    objects: list[dict] = []
    for release in releases:
        archive = helm.chart_archive(release, chart_dir=chart_dir, helm=binary,
                                     cache_dir=cache_dir / "charts", allow_pull=allow_pull,
                                     locate=locate)
        objects += helm.render_release(release, archive=archive, helm=binary,
                                       kubernetes_version=kubernetes_version)
    return objects


def kit_objects(config: KitConfig) -> list[dict]:
    """The kit's rendered manifests (placeholder outputs: placement does not depend on them)."""
    from manifests import placeholder_outputs, render_config

    return [f.obj for f in render_config(config, placeholder_outputs(config))]


# The FSx CSI node DaemonSet's scheduling in chart aws-fsx-csi-driver 1.17.0 (5b22712)
# values.yaml and templates/node-daemonset.yaml: with `node.tolerateAllTaints` (default true) it
# tolerates everything; otherwise `node.tolerations` (default: NoExecute for 300 s) plus the
# startup taint's key, always. Linux nodes only, never Fargate. tests/ops/test_fsx_startup_taint.py
# renders the real chart with the add-on's values and compares.
_FSX_NODE_DEFAULT_TOLERATIONS = [{"operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 300}]
_FSX_NODE_DEFAULT_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["fargate"]}]}]}}}


def fsx_node_plugin_spec(cluster_template: dict) -> dict | None:
    """The scheduling part of the FSx CSI node DaemonSet's pod spec as the managed add-on's
    configuration (in the cluster template) makes it; None when the add-on is not installed."""
    values = scheduling.managed_addon_values(cluster_template, FSX_CSI_ADDON_NAME)
    if values is None:
        return None
    node = values.get("node") or {}
    if node.get("tolerateAllTaints", True):
        tolerations = [{"operator": "Exists"}]
    else:
        tolerations = [*node.get("tolerations", _FSX_NODE_DEFAULT_TOLERATIONS),
                       {"key": names.FSX_AGENT_NOT_READY_TAINT.key, "operator": "Exists"}]
    return {"nodeSelector": {"kubernetes.io/os": "linux", **(node.get("nodeSelector") or {})},
            "affinity": node.get("affinity", _FSX_NODE_DEFAULT_AFFINITY),
            "tolerations": tolerations}


def check_cluster_contract(config: KitConfig, cdk_out: Path, *, chart_dir: Path | None,
                           cache_dir: Path, allow_pull: bool = False,
                           locate: Callable[[str], Path | None] | None = None,
                           chart_objects: list[dict] | None = None,
                           templates: dict[str, dict] | None = None) -> ContractReport:
    """Render the synthesized charts and the kit's manifests, and check every pod's placement.

    ``chart_objects`` / ``templates`` replace the rendered charts / the assembly's templates
    (tests use this to break one input on purpose).
    """
    templates = templates if templates is not None else assembly_templates(cdk_out)
    cluster_template = templates[names.stack_names(config.name)["cluster"]]
    releases = helm.chart_releases(cluster_template)
    if chart_objects is None:
        chart_objects = render_charts(releases, kubernetes_version=config.kubernetes_version,
                                      chart_dir=chart_dir, cache_dir=cache_dir,
                                      allow_pull=allow_pull, locate=locate)
    nodes = scheduling.node_groups(config, templates)
    chart_pods = scheduling.chart_pods(chart_objects, intended_chart_targets(config),
                                       chart_advertised_resources())
    kit_pods = scheduling.kit_pods(kit_objects(config),
                                   training_group=config.training.node_group)
    placed = scheduling.schedule(nodes, chart_pods, kit_pods)
    findings = placed.findings
    # ComputeDomain claims (UltraServers): template, DeviceClasses, kubelet plugin placement.
    findings += dra_contract.dra_findings(chart_objects, kit_objects(config), placed.lands)
    # The CloudWatch observability add-on is a managed add-on, not a rendered chart: its
    # DaemonSets' tolerations are read from the add-on's configuration in the template.
    addon_template = observability.addon_template(config, templates)
    findings += observability.addon_findings(addon_template, nodes)
    # The EKS node monitoring agent: its agent DaemonSet tolerates every taint; its DCGM
    # DaemonSet serves the GPU nodes and tolerates nothing unless told [aws/eks-node-monitoring-
    # agent 51af549 charts/eks-node-monitoring-agent/values.yaml `dcgmAgent.tolerations: []`].
    findings += scheduling.managed_addon_findings(
        scheduling.managed_addon_values(cluster_template, NODE_MONITORING_ADDON), nodes,
        pod=f"EKS add-on {NODE_MONITORING_ADDON} DCGM DaemonSet", key=("dcgmAgent", "tolerations"),
        default=[], serves=set(config.gpu_node_groups),
        fix="no GPU health checks there; pass the GPU tolerations as dcgmAgent.tolerations "
            "(infra/constructs/cluster.py)")
    # Startup taints an agent removes by itself (the FSx CSI node plugin): it must start on the
    # node, and the kit's pods must wait for it.
    findings += scheduling.startup_taint_findings(
        nodes, {names.FSX_AGENT_NOT_READY_TAINT.key: fsx_node_plugin_spec(cluster_template)},
        kit_pods)
    notes = [f"node group {n.name!r}: {note}" for n in nodes for note in n.notes]
    if config.node_health.monitoring_agent:
        notes.append("the EKS node monitoring agent is an EKS managed add-on, not a rendered "
                     "chart: its DCGM DaemonSet's tolerations are checked above; the rest of its "
                     "scheduling is not modelled here")
    if observability.addon_configuration(addon_template) is not None:
        notes.append("the CloudWatch observability add-on (GPU, EFA and container metrics, "
                     "container logs) is an EKS managed add-on: its DaemonSets take the chart's "
                     "root tolerations, checked above against every node group's taints; its "
                     "pods' other scheduling is not modelled here")
    return ContractReport(findings=findings, releases=releases, nodes=nodes, notes=notes,
                          lands=placed.lands)
