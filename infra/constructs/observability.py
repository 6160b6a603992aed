"""See the run: CloudWatch metrics and logs for the cluster, and one dashboard per environment.

- ``ClusterLogGroups``: every log group the control plane, the add-on and the trainer write to,
  created by the stack (retention from the config, encrypted with a kit key) so that nothing
  creates them on the fly with no retention. EKS writes to /aws/eks/<cluster>/cluster only, so
  the cluster has a fixed name and is created after that group.
- ``CloudWatchObservability``: the amazon-cloudwatch-observability EKS managed add-on (CloudWatch
  agent with Container Insights, enhanced observability: GPU metrics through its DCGM exporter,
  EFA metrics, pod and node metrics; Fluent Bit for container logs) with its role through Pod
  Identity, in a stack of its own; its Fluent Bit files (``fluent_bit``) create no log group and
  send the launcher's EMF lines to their own group in the ``json/emf`` format, which is what
  makes CloudWatch extract metrics from them.
- ``RunDashboard``: GPU utilisation, memory and power per node; EFA bytes and drops per node;
  node failures and replacements (a metric filter on the audit log, not a query that scans it);
  pod restarts; training progress.

Synth stays offline: names come from the config, nothing is looked up.
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import ArnFormat, Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra import names
from infra.constructs import fluent_bit
from infra.constructs.nag import acknowledge, managed_policy_finding
from infra.constructs.pod_identity import pod_identity_principal

# The add-on's agent and Fluent Bit run as this service account [chart amazon-cloudwatch-
# observability 6.4.0 templates/_helpers.tpl "cloudwatch-agent.serviceAccountName": the agent's
# name, cloudwatch-agent; the chart's namespace is amazon-cloudwatch].
ADDON_NAMESPACE = "amazon-cloudwatch"
ADDON_SERVICE_ACCOUNT = "cloudwatch-agent"
# The AWS-managed policy the CloudWatch docs attach for the add-on [CloudWatch user guide, "Quick
# start with the Amazon CloudWatch Observability EKS add-on"].
AGENT_POLICY = "CloudWatchAgentServerPolicy"
# Every DaemonSet of the add-on inherits the chart's root tolerations unless it sets its own
# [chart 6.4.0 values.yaml `tolerations` and each component's "Override root tolerations"]. The
# kit passes the chart's own default explicitly, so a change of default cannot strand the GPU
# nodes; tests/stacks/test_observability.py checks it tolerates every GPU group's taints.
ADDON_TOLERATIONS = [{"operator": "Exists"}]
# Fluent Bit: the kit replaces the chart's three Linux files with its own (same inputs and log
# groups, no output may create a group) and adds one for the launcher's EMF lines
# (infra/constructs/fluent_bit.py says why). tests/stacks/test_observability_chart.py renders the
# real chart 6.4.0 with these values.
TRAINING_METRICS_FLUENT_BIT_FILE = fluent_bit.TRAINING_METRICS_FILE


def addon_configuration(*, application_signals: bool = False) -> dict[str, Any]:
    """The add-on's configuration values (the chart's values; the add-on takes the same keys
    [CloudWatch user guide, "Configuring the add-on and the Helm chart"]).

    Application Signals (APM through auto-instrumentation of Java, Python, .NET and Node.js pods)
    is on in the chart, and its AutoMonitor instruments every such service it finds [chart 6.4.0
    values.yaml `applicationSignals.enabled: true`, `manager.applicationSignals.autoMonitor`;
    RELEASE_NOTES 5.0.0 "Enable Application Signals AutoMonitor by default"]: the kit's pods are
    Python, so it would restart-annotate the trainer and bill for traces nobody asked for. Off
    unless the config asks (``observability.application_signals``); when off, AutoMonitor's
    ``monitorAllServices`` is set false as well, which also holds on add-on builds older than the
    ``applicationSignals`` switch."""
    files = fluent_bit.extra_files()
    values: dict[str, Any] = {
        "tolerations": ADDON_TOLERATIONS,
        "containerLogs": {"fluentBit": {
            "config": {"extraFiles": files["config"]},
            "configWindows": {"extraFiles": files["configWindows"]}}},
        "applicationSignals": {"enabled": application_signals},
    }
    if not application_signals:
        values["manager"] = {"applicationSignals": {"autoMonitor": {"monitorAllServices": False}}}
    return values


class ClusterLogGroups(Construct):
    """The control-plane, Container Insights and training-metric log groups of one cluster,
    encrypted with one rotating KMS key that only CloudWatch Logs (for these groups) may use."""

    def __init__(self, scope: Construct, id: str, *, cluster_name: str, retention_days: int,
                 removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        # The key follows the groups it encrypts: kept with them, or scheduled for deletion.
        self.key = kms.Key(self, "Key", enable_key_rotation=True,
                           description=f"CloudWatch Logs of EKS cluster {cluster_name}",
                           removal_policy=removal_policy)
        self.names = {"control-plane": names.control_plane_log_group(cluster_name)}
        self.names.update({kind: names.container_insights_log_group(cluster_name, kind)
                           for kind in (*names.CONTAINER_INSIGHTS_LOG_KINDS,
                                        names.TRAINING_METRICS_LOG_KIND)})
        # CloudWatch Logs encrypts with the key as its regional service principal, and only for
        # these groups [CloudWatch Logs user guide, "Encrypt log data in CloudWatch Logs using
        # AWS KMS": key policy and the aws:logs:arn encryption context].
        group_arns = [stack.format_arn(service="logs", resource="log-group", resource_name=name,
                                       arn_format=ArnFormat.COLON_RESOURCE_NAME)
                      for name in self.names.values()]
        self.key.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchLogsOfThisCluster",
            principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*",
                     "kms:Describe*"],
            resources=["*"],
            conditions={"ArnEquals": {"kms:EncryptionContext:aws:logs:arn": group_arns}},
        ))
        self.groups: dict[str, logs.LogGroup] = {}
        for kind, name in self.names.items():
            group = logs.LogGroup(self, _construct_id(kind), log_group_name=name,
                                  encryption_key=self.key, removal_policy=removal_policy)
            # The config's number of days (infra.config.LOG_RETENTION_DAYS, CloudWatch's list).
            group.node.default_child.retention_in_days = retention_days
            self.groups[kind] = group

    @property
    def control_plane(self) -> logs.LogGroup:
        return self.groups["control-plane"]


def _construct_id(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("-"))


class CloudWatchObservability(Construct):
    """The amazon-cloudwatch-observability managed add-on with its own role (Pod Identity).

    It lives in a stack of its own (stacks/observability_stack.py), which depends on the cluster
    stack: the log groups it writes to, the Pod Identity agent and the system nodes all exist
    before it, and it is deleted before any of them."""

    def __init__(self, scope: Construct, id: str, *, cluster_name: str, addon_name: str,
                 addon_version: str | None, application_signals: bool) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self, "Role",
            assumed_by=pod_identity_principal(cluster_name=cluster_name,
                                              namespace=ADDON_NAMESPACE,
                                              service_account=ADDON_SERVICE_ACCOUNT),
            description="CloudWatch agent and Fluent Bit of the amazon-cloudwatch-observability add-on",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(AGENT_POLICY)],
        )
        acknowledge(self.role, managed_policy_finding(AGENT_POLICY),
                    "The CloudWatch user guide attaches the AWS-managed CloudWatchAgentServerPolicy "
                    "for this add-on; it follows the agent's needs as the add-on changes.")
        if not application_signals:  # Application Signals writes groups of its own
            self.role.add_to_policy(own_log_groups_only(self, cluster_name))
        self.addon = eks.CfnAddon(
            self, "Addon",
            # The cluster's fixed name (infra.names.eks_cluster_name): no cross-stack export.
            cluster_name=cluster_name,
            addon_name=addon_name,
            addon_version=addon_version,
            configuration_values=json.dumps(addon_configuration(
                application_signals=application_signals)),
            pod_identity_associations=[eks.CfnAddon.PodIdentityAssociationProperty(
                role_arn=self.role.role_arn, service_account=ADDON_SERVICE_ACCOUNT)],
            # The add-on owns the fields it manages; a value changed by hand is put back.
            resolve_conflicts="OVERWRITE",
        )
        # The role's ARN orders the add-on after the role only, not after its policy, a resource
        # of its own: the agent could start with the managed policy's log writes on every group
        # and without the Deny that narrows them. (Not on the role itself: the ARN already does
        # that, and cfn-lint warns of the repeat, W3005.)
        policy = self.role.node.try_find_child("DefaultPolicy")
        if policy is not None:
            self.addon.node.add_dependency(policy)


# The log writes CloudWatchAgentServerPolicy allows on every log group of the account
# (logs:CreateLogGroup, CreateLogStream, PutLogEvents, PutRetentionPolicy on "*").
LOG_WRITE_ACTIONS = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents",
                     "logs:PutRetentionPolicy", "logs:DeleteRetentionPolicy"]


def own_log_groups_only(scope: Construct, cluster_name: str) -> iam.PolicyStatement:
    """Deny the add-on's role every log write outside this cluster's Container Insights groups
    (the agent's performance group, Fluent Bit's application, dataplane and host groups and the
    training metrics, all ``/aws/containerinsights/<cluster>/...``). The managed policy allows
    them on every group of the account: a compromised agent pod could shorten another
    environment's audit-log retention to a day or forge its training metrics. A Deny keeps the
    managed policy (and what it adds as the add-on changes) for everything else."""
    return iam.PolicyStatement(
        sid="OnlyThisClustersLogGroups", effect=iam.Effect.DENY, actions=LOG_WRITE_ACTIONS,
        not_resources=[Stack.of(scope).format_arn(
            service="logs", resource="log-group", arn_format=ArnFormat.COLON_RESOURCE_NAME,
            resource_name=names.container_insights_log_group(cluster_name, "*"))])


# Node deletions in the API audit log, counted as they arrive by a metric filter on the
# control-plane group. A dashboard panel that queried the group instead (Logs Insights) would scan
# all five log types over the dashboard's range on every load and refresh, billed per GB scanned;
# a metric filter costs nothing to run, and its metric bills only for the hours it has data.
# JSON filter fields are the audit event's (audit.k8s.io/v1 Event: objectRef, verb, stage,
# responseStatus.code); the final stage only, so one delete counts once.
NODE_DELETE_PATTERN = ('{ ($.objectRef.resource = "nodes") && ($.verb = "delete") && '
                       '($.stage = "ResponseComplete") && ($.responseStatus.code < 300) }')
NODE_DELETES_METRIC = "NodeObjectsDeleted"


def control_plane_namespace(cluster_name: str) -> str:
    """The metric namespace of a cluster's control-plane counts. A metric filter's dimensions
    can only be fields of the event, so the cluster is in the namespace: two environments in one
    account and region keep their own counts."""
    return f"RLKit/ControlPlane/{cluster_name}"


def node_deletes_metric(scope: Construct, control_plane: logs.LogGroup,
                        cluster_name: str) -> cw.Metric:
    """A metric filter on the control-plane group (the kit creates it before the cluster, so the
    filter's create never waits on EKS) and its count, summed per 5 minutes."""
    metric_filter = logs.MetricFilter(
        scope, "NodeDeletes", log_group=control_plane,
        filter_pattern=logs.FilterPattern.literal(NODE_DELETE_PATTERN),
        metric_namespace=control_plane_namespace(cluster_name),
        metric_name=NODE_DELETES_METRIC, metric_value="1")
    return metric_filter.metric(statistic="Sum", period=Duration.minutes(5), label="deleted")


def _search(namespace_dims: str, metric: str, filters: dict[str, str], stat: str) -> str:
    terms = " ".join(f'{k}="{v}"' for k, v in filters.items())
    return f"SEARCH('{{{namespace_dims}}} MetricName=\"{metric}\" {terms}', '{stat}', 60)"


# Training-progress panels: Logs Insights over this environment's training-metrics group (the
# EMF lines themselves), so the panels show this environment's runs only; the same numbers are
# CloudWatch metrics in trainer_contract.METRICS_NAMESPACE for alarms.
TRAINING_QUERIES = {
    "Reward (mean per rollout)": "stats avg(reward) as reward by bin(5m)",
    "Loss and gradient norm": "stats avg(loss) as loss, avg(grad_norm) as grad_norm by bin(5m)",
    "Rollout throughput (tokens/s per GPU)":
        "stats avg(rollout_tokens_per_gpu_per_s) as tokens_per_gpu_per_s by bin(5m)",
    "Step time (s)": "stats avg(step_time) as step_time, avg(rollout_time) as rollout_time "
                     "by bin(5m)",
}


class RunDashboard(Construct):
    """One CloudWatch dashboard for one environment: is the run healthy?"""

    def __init__(self, scope: Construct, id: str, *, dashboard_name: str, cluster_name: str,
                 log_groups: ClusterLogGroups, trainer_namespace: str) -> None:
        super().__init__(scope, id)
        node = "{ContainerInsights,ClusterName,InstanceId,NodeName}"

        def per_node(title: str, metrics: list[tuple[str, str]], *, stat: str = "Average",
                     left_label: str = "") -> cw.GraphWidget:
            return cw.GraphWidget(
                title=title, width=8, height=6, left_y_axis=cw.YAxisProps(label=left_label,
                                                                          show_units=False),
                left=[cw.MathExpression(
                    expression=_search(node[1:-1], metric, {"ClusterName": cluster_name}, stat),
                    label=label, period=Duration.minutes(1)) for metric, label in metrics])

        training_group = log_groups.names[names.TRAINING_METRICS_LOG_KIND]
        node_deletes = node_deletes_metric(self, log_groups.control_plane, cluster_name)
        self.dashboard = cw.Dashboard(
            self, "Dashboard", dashboard_name=dashboard_name,
            default_interval=Duration.hours(6),
            widgets=[
                [cw.TextWidget(width=24, height=2, markdown=(
                    f"# Run health: EKS cluster `{cluster_name}`\n"
                    "GPU and EFA panels need the GPU nodes up (Container Insights, one point per "
                    "node per minute). Training panels read the launcher's EMF lines; "
                    "`rlkit logs` reads the same logs after the pods are gone."))],
                [per_node("GPU utilisation per node (%)", [("node_gpu_utilization", "")]),
                 per_node("GPU memory used per node (%)", [("node_gpu_memory_utilization", "")]),
                 per_node("GPU power per node (W)", [("node_gpu_power_draw", "")])],
                [per_node("EFA bytes per node (B/s)", [("node_efa_rx_bytes", "rx"),
                                                       ("node_efa_tx_bytes", "tx")]),
                 per_node("EFA received packets dropped per node (/s)",
                          [("node_efa_rx_dropped", "")], stat="Sum"),
                 per_node("Node Ready (1 = Ready; 0 before a repair)",
                          [("node_status_condition_ready", "")], stat="Minimum")],
                [cw.GraphWidget(
                    title="Failed nodes in the cluster", width=8, height=6,
                    left=[cw.Metric(namespace="ContainerInsights",
                                    metric_name="cluster_failed_node_count",
                                    dimensions_map={"ClusterName": cluster_name},
                                    statistic="Maximum", period=Duration.minutes(1))]),
                 cw.GraphWidget(
                    title="Node replacements (Node objects deleted, from the API audit log)",
                    width=8, height=6, left=[node_deletes]),
                 cw.GraphWidget(
                    title=f"Container restarts per pod ({trainer_namespace})", width=8, height=6,
                    left=[cw.MathExpression(expression=_search(
                        "ContainerInsights,ClusterName,Namespace,PodName",
                        "pod_number_of_container_restarts",
                        {"ClusterName": cluster_name, "Namespace": trainer_namespace}, "Maximum"),
                        label="", period=Duration.minutes(1))])],
                [cw.LogQueryWidget(title=title, width=6, height=6,
                                   log_group_names=[training_group],
                                   view=cw.LogQueryVisualizationType.LINE,
                                   query_lines=[f"filter ispresent(Run) | {query}"])
                 for title, query in TRAINING_QUERIES.items()],
            ],
        )
