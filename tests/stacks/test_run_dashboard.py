"""The run dashboard (infra/constructs/observability.py): its panels answer "is my run healthy?",
and the node replacements panel is a count from a metric filter on the control-plane group, not a
Logs Insights query over it.

The panel used to be a Logs Insights query over the whole control-plane group (all five log
types, the dashboard's range), billed per GB scanned on every load and refresh."""

from __future__ import annotations

import json

from infra import names
from infra.constructs import observability as obs_construct
from tests.support.cdk import dashboard_widgets, resources


def test_node_replacements_are_counted_by_a_metric_filter_not_a_query(synth):
    """A metric filter counts Node deletes in the audit events as they arrive."""
    s = synth("p5-2node")
    t = s.template("cluster")
    cluster_name = names.eks_cluster_name(s.config.name)
    control_plane = names.control_plane_log_group(cluster_name)
    widgets = dashboard_widgets(t)
    assert not [w for w in widgets if w["type"] == "log"
                and control_plane in w["properties"]["query"]]
    [panel] = [w for w in widgets if "Node replacements" in w["properties"].get("title", "")]
    assert panel["type"] == "metric"
    [metric_filter] = resources(t, "AWS::Logs::MetricFilter").values()
    props = metric_filter["Properties"]
    # on the kit's own control-plane group, which exists before the cluster (and the filter)
    group = t["Resources"][props["LogGroupName"]["Ref"]]
    assert group["Properties"]["LogGroupName"] == control_plane
    assert props["FilterPattern"] == obs_construct.NODE_DELETE_PATTERN
    [transform] = props["MetricTransformations"]
    assert transform["MetricNamespace"] == f"RLKit/ControlPlane/{cluster_name}"
    assert transform["MetricName"] == obs_construct.NODE_DELETES_METRIC
    assert transform["MetricValue"] == "1" and "DefaultValue" not in transform
    assert [transform["MetricNamespace"], transform["MetricName"]] == \
        panel["properties"]["metrics"][0][:2]


def test_dashboard_answers_is_my_run_healthy(synth):
    s = synth("p5-2node")
    cluster_name = names.eks_cluster_name(s.config.name)
    widgets = dashboard_widgets(s.template("cluster"))
    metric_exprs = " ".join(json.dumps(w["properties"].get("metrics", [])) for w in widgets)
    titles = [w["properties"].get("title", "") for w in widgets]
    for metric in ("node_gpu_utilization", "node_gpu_memory_utilization", "node_gpu_power_draw",
                   "node_efa_rx_bytes", "node_efa_tx_bytes", "node_efa_rx_dropped",
                   "node_status_condition_ready", "cluster_failed_node_count",
                   "pod_number_of_container_restarts"):
        assert metric in metric_exprs, metric
    # Every metric is this environment's cluster only; per-node panels split by node.
    assert metric_exprs.count(f'ClusterName=\\\\\\"{cluster_name}\\\\\\"') >= 8 or \
        metric_exprs.count(f'ClusterName=\\"{cluster_name}\\"') >= 8, metric_exprs[:400]
    assert metric_exprs.count("InstanceId,NodeName}") >= 6
    assert any("Node replacements" in t for t in titles)
    logs_widgets = [w for w in widgets if w["type"] == "log"]
    training = [w for w in logs_widgets if names.container_insights_log_group(
        cluster_name, names.TRAINING_METRICS_LOG_KIND) in w["properties"]["query"]]
    assert len(training) == len(obs_construct.TRAINING_QUERIES)
    fields = " ".join(w["properties"]["query"] for w in training)
    from rltrainer import metrics as trainer_metrics  # the names the launcher writes
    emitted = {name for name, _ in trainer_metrics.METRICS.values()}
    for field in ("reward", "loss", "grad_norm", "rollout_tokens_per_gpu_per_s", "step_time"):
        assert field in fields and field in emitted, field
