"""Offline check (`rlkit check`, `rlkit preflight`): the CloudWatch observability add-on collects
GPU metrics on each GPU group's instance type.

The add-on's GPU metrics come from its DCGM exporter, which runs only on the instance types its
chart lists: the chart renders a ``DcgmExporter`` resource whose affinity requires
``node.kubernetes.io/instance-type`` In a fixed list [chart amazon-cloudwatch-observability 6.4.0
values.yaml ``dcgmExporter.affinity``], and the add-on's operator gives the exporter's DaemonSet
that affinity [aws/amazon-cloudwatch-agent-operator@a8d766c
internal/manifests/dcgmexporter/daemonset.go: ``Affinity: params.DcgmExp.Spec.Affinity``]. A GPU
type missing from the list gets no exporter pod: no GPU panel of the dashboard shows its nodes,
and nothing fails to say so. tests/stacks/test_observability_chart.py renders the real chart with
the kit's values and checks that this list is the rendered one and admits every catalog type.
"""

from __future__ import annotations

import json

from infra.config import KitConfig
from infra.problems import PASS, WARN
from ops.check_result import Check
from ops.preflight_reservation import group_subject

GPU_METRICS = "gpu metrics"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# The EC2 names of that list in chart 6.4.0 (it also lists SageMaker's ml.* names).
DCGM_EXPORTER_INSTANCE_TYPES = frozenset({
    "g3.4xlarge", "g3.8xlarge", "g3.16xlarge", "g3s.xlarge",
    "g4ad.xlarge", "g4ad.2xlarge", "g4ad.4xlarge", "g4ad.8xlarge", "g4ad.16xlarge",
    "g4dn.xlarge", "g4dn.2xlarge", "g4dn.4xlarge", "g4dn.8xlarge", "g4dn.12xlarge",
    "g4dn.16xlarge", "g4dn.metal",
    "g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.12xlarge", "g5.16xlarge",
    "g5.24xlarge", "g5.48xlarge",
    "g5g.xlarge", "g5g.2xlarge", "g5g.4xlarge", "g5g.8xlarge", "g5g.16xlarge", "g5g.metal",
    "g6.xlarge", "g6.2xlarge", "g6.4xlarge", "g6.8xlarge", "g6.12xlarge", "g6.16xlarge",
    "g6.24xlarge", "g6.48xlarge",
    "g6e.xlarge", "g6e.2xlarge", "g6e.4xlarge", "g6e.8xlarge", "g6e.12xlarge", "g6e.16xlarge",
    "g6e.24xlarge", "g6e.48xlarge",
    "gr6.4xlarge", "gr6.8xlarge",
    "p2.xlarge", "p2.8xlarge", "p2.16xlarge", "p3.2xlarge", "p3.8xlarge", "p3.16xlarge",
    "p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge",
    "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
    "p6-b200.48xlarge", "p6-b300.48xlarge", "p6e-gb200.36xlarge",
})


def dcgm_exporter_affinity(extra_types: list[str]) -> dict:
    """The add-on configuration value that replaces the chart's exporter affinity with its list
    plus ``extra_types`` (the chart's other term, no Fargate, kept)."""
    values = sorted(DCGM_EXPORTER_INSTANCE_TYPES | set(extra_types))
    return {"dcgmExporter": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
            "matchExpressions": [
                {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": values},
                {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn",
                 "values": ["fargate"]}]}]}}}}}


def check_gpu_metrics(cfg: KitConfig) -> list[Check]:
    """One check per GPU group when observability is on: its instance type is in the DCGM
    exporter's list (PASS), or its nodes get no GPU metrics (WARN, with the override)."""
    if not cfg.observability.enabled:
        return []
    missing = sorted({g.instance_type for g in cfg.gpu_node_groups.values()}
                     - DCGM_EXPORTER_INSTANCE_TYPES)
    checks = []
    for name, group in cfg.gpu_node_groups.items():
        subject, itype = group_subject(name), group.instance_type
        if itype in DCGM_EXPORTER_INSTANCE_TYPES:
            checks.append(Check(GPU_METRICS, subject, PASS,
                                f"the add-on's DCGM exporter runs on {itype} (its chart's "
                                "instance-type list, chart 6.4.0)"))
            continue
        checks.append(Check(
            GPU_METRICS, subject, WARN,
            f"{itype} is not in the instance types the add-on's DCGM exporter may run on (a "
            f"required node affinity on {INSTANCE_TYPE_LABEL}, chart "
            "amazon-cloudwatch-observability 6.4.0 values.yaml dcgmExporter.affinity): the "
            f"group's nodes get no exporter pod, so no GPU utilisation, memory or power metrics, "
            "and the dashboard's GPU panels leave them out. The add-on build EKS picks may list "
            "more types than that chart",
            "the add-on's configuration values can replace that affinity: merge "
            f"ops.preflight_observability.dcgm_exporter_affinity({json.dumps(missing)}) (the "
            "chart's list plus the missing types) into the values addon_configuration() returns "
            "in infra/constructs/observability.py (check first that the "
            "add-on build accepts the key: aws eks describe-addon-configuration --addon-name "
            "amazon-cloudwatch-observability --addon-version <build>), or pin "
            "observability.addon_version to a build whose chart lists the type"))
    return checks
