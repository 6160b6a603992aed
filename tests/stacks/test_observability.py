"""CloudWatch observability: the add-on, log groups and dashboard in every example's cluster
stack; the add-on's tolerations against every GPU group; `rlkit status` / `rlkit logs` reading
CloudWatch (botocore Stubber, no AWS)."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json

import pytest
from botocore.stub import ANY

from tests.support.cdk import EXAMPLES, REPO_ROOT, resources
from tests.support.preflight import stubbed  # a client answered by botocore's Stubber
from infra import names
from infra.config import ConfigError, load_config, parse_config
from infra.constructs import observability as obs_construct
from infra.versions import CLOUDWATCH_OBSERVABILITY_ADDON
from ops import observability, scheduling

import yaml


def addon(template: dict) -> tuple[str, dict]:
    found = {k: v for k, v in resources(template, "AWS::EKS::Addon").items()
             if v["Properties"]["AddonName"] == CLOUDWATCH_OBSERVABILITY_ADDON}
    assert len(found) == 1, found
    return next(iter(found.items()))


def log_groups(template: dict) -> dict[str, dict]:
    return {v["Properties"]["LogGroupName"]: v for v in
            resources(template, "AWS::Logs::LogGroup").values()
            if isinstance(v["Properties"].get("LogGroupName"), str)}


@pytest.mark.parametrize("example", EXAMPLES)
def test_cluster_stack_carries_addon_log_groups_and_dashboard(synth, example):
    s = synth(example)
    cfg = s.config
    t = s.template("cluster")
    cluster_name = names.eks_cluster_name(cfg.name)

    # The add-on, in a stack of its own that waits for the cluster stack (a configuration EKS
    # rejects fails that stack only; helm-charts#173): Pod Identity with a role that has the
    # policy the CloudWatch docs name, and no export from the cluster stack.
    o = s.template("observability")
    assert not [v for v in resources(t, "AWS::EKS::Addon").values()
                if v["Properties"]["AddonName"] == CLOUDWATCH_OBSERVABILITY_ADDON]
    addon_id, a = addon(o)
    props = a["Properties"]
    assert props["ClusterName"] == cluster_name
    assert "AddonVersion" not in props  # EKS default: the stack of its own is why that is safe
    assert cfg.stack_names["cluster"] in s.manifest["artifacts"][cfg.stack_names[
        "observability"]]["dependencies"]
    [association] = props["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "cloudwatch-agent"
    role = o["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]
    assert "pods.eks.amazonaws.com" in json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
    assert "sts:TagSession" in json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
    assert "CloudWatchAgentServerPolicy" in json.dumps(role["Properties"]["ManagedPolicyArns"])

    # Log groups: the fixed names, the config's retention, the kit's key.
    groups = log_groups(t)
    expected = {names.control_plane_log_group(cluster_name)} | {
        names.container_insights_log_group(cluster_name, kind)
        for kind in (*names.CONTAINER_INSIGHTS_LOG_KINDS, names.TRAINING_METRICS_LOG_KIND)}
    assert expected <= set(groups)
    for name in expected:
        g = groups[name]["Properties"]
        assert g["RetentionInDays"] == cfg.observability.log_retention_days, name
        assert "Fn::GetAtt" in g["KmsKeyId"], name
        assert g["KmsKeyId"]["Fn::GetAtt"][0] in t["Resources"]
    key = t["Resources"][groups[names.control_plane_log_group(cluster_name)]["Properties"]
                         ["KmsKeyId"]["Fn::GetAtt"][0]]
    assert key["Properties"]["EnableKeyRotation"] is True
    assert "logs." in json.dumps(key["Properties"]["KeyPolicy"])
    # Fluent Bit and the agent run on the nodes and write into the groups: the system nodes
    # (the cluster's last) come after the groups, so teardown deletes them before the groups and
    # nothing is left to recreate a group (the GPU stacks and the add-on's go first).
    group_ids = {k for k, v in resources(t, "AWS::Logs::LogGroup").items()
                 if json.dumps(v["Properties"].get("LogGroupName")).strip('"') in expected}
    [system_nodes] = resources(t, "AWS::EKS::Nodegroup").values()
    assert group_ids <= set(system_nodes["DependsOn"])

    # EKS writes its control-plane logs to the group named after the cluster: fixed name, and
    # the cluster is created after the group.
    [(cluster_id, cluster)] = resources(t, "AWS::EKS::Cluster").items()
    assert cluster["Properties"]["Name"] == cluster_name
    control_plane_id = next(k for k, v in resources(t, "AWS::Logs::LogGroup").items()
                            if v["Properties"].get("LogGroupName") ==
                            names.control_plane_log_group(cluster_name))  # == on dicts is safe
    assert control_plane_id in cluster["DependsOn"]

    # The dashboard and its output.
    dashboard = next(iter(resources(t, "AWS::CloudWatch::Dashboard").values()))
    # Dashboards are account-global: the name carries the region, so one environment name in
    # two regions keeps two dashboards.
    assert dashboard["Properties"]["DashboardName"] == f"{cfg.name}-{cfg.region}-run"
    assert dashboard["Properties"]["DashboardName"] == names.dashboard_name(cfg.name, cfg.region)
    assert t["Outputs"][names.OutputKeys.DASHBOARD_NAME]


def test_fluent_bit_output_sends_emf_lines_to_the_training_metrics_group():
    """The kit's own Fluent Bit file: EMF lines re-tagged out of the application stream and sent
    alone with the json/emf format (what makes CloudWatch extract metrics), to the group the
    stack creates."""
    config = obs_construct.addon_configuration()
    extra = config["containerLogs"]["fluentBit"]["config"]["extraFiles"]
    file_name = obs_construct.TRAINING_METRICS_FLUENT_BIT_FILE
    text = extra[file_name]
    assert sorted(extra)[-1] == file_name  # included after the application input
    assert "Match               application.*" in text
    assert 'Rule                $log ^\\{"_aws": training-metrics.$TAG false' in text
    assert "log_format          json/emf" in text and "log_key             log" in text
    group = text.split("log_group_name")[1].split("\n")[0].strip()
    assert group == names.container_insights_log_group("${CLUSTER_NAME}",
                                                       names.TRAINING_METRICS_LOG_KIND)
    # The launcher's EMF lines start with the marker the rule matches.
    from rltrainer import metrics as trainer_metrics
    line = "[2026-11-30 10:00:00.000 x] log_utils.py:542 - step 3: {'train/loss': 0.5}\n"
    [(_, emf)] = list(trainer_metrics.emf_lines([line], environment="e", run="r"))
    assert emf.startswith('{"_aws":')


# --- the add-on's tolerations on every GPU group ------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES)
def test_addon_daemonsets_tolerate_every_gpu_group(synth, example):
    s = synth(example)
    nodes = scheduling.node_groups(s.config, s.templates)
    gpu = [n for n in nodes if n.name in s.config.gpu_node_groups]
    assert gpu and all(n.taints for n in gpu)  # the check has taints to check
    assert observability.addon_findings(s.template("observability"), nodes) == []
    tolerations = observability.addon_configuration(s.template("observability"))["tolerations"]
    for taint in {t["key"] for n in gpu for t in n.taints}:
        assert any(scheduling._tolerates(tol, {"key": taint, "value": "x", "effect": "NoSchedule"})
                   for tol in tolerations)


def test_narrowed_tolerations_are_reported_per_gpu_group(synth):
    s = synth("p5-2node")
    template = json.loads(json.dumps(s.template("observability")))
    _, a = addon(template)
    values = json.loads(a["Properties"]["ConfigurationValues"])
    values["tolerations"] = [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    a["Properties"]["ConfigurationValues"] = json.dumps(values)
    nodes = scheduling.node_groups(s.config, s.templates)
    findings = observability.addon_findings(template, nodes)
    assert sorted(f.node_group for f in findings) == sorted(s.config.gpu_node_groups)
    assert "nvidia.com/gpu" in str(findings[0]) and "ADDON_TOLERATIONS" in str(findings[0])


# --- config --------------------------------------------------------------------------------------


def test_observability_off_removes_addon_groups_and_dashboard(synth_config):
    cfg = load_config(REPO_ROOT / "examples" / "default.yaml")
    cfg = cfg.model_copy(update={"observability": cfg.observability.model_copy(
        update={"enabled": False})})
    s = synth_config(cfg)
    stacks = s.stacks
    t = s.templates[cfg.stack_names["cluster"]]
    assert cfg.stack_names["observability"] not in s.templates  # no add-on stack at all
    assert not [v for v in resources(t, "AWS::EKS::Addon").values()
                if v["Properties"]["AddonName"] == CLOUDWATCH_OBSERVABILITY_ADDON]
    assert not resources(t, "AWS::CloudWatch::Dashboard")
    assert not [g for g in log_groups(t) if g.startswith(("/aws/eks/", "/aws/containerinsights/"))]
    assert names.OutputKeys.DASHBOARD_NAME not in t["Outputs"]
    [cluster] = resources(t, "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["Name"] == cfg.name  # toggling never renames (replaces) it
    # No control-plane logging either: EKS would create /aws/eks/<name>/cluster itself, with no
    # retention, outliving the stack (and blocking the kit's own group when turned back on).
    assert "Logging" not in cluster["Properties"]
    assert stacks


def test_control_plane_logs_go_only_to_the_group_the_kit_creates(synth):
    t = synth("default").template("cluster")
    [cluster] = resources(t, "AWS::EKS::Cluster").values()
    enabled = cluster["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]
    assert {e["Type"] for e in enabled} == {"api", "audit", "authenticator", "controllerManager",
                                            "scheduler"}
    assert names.control_plane_log_group(cluster["Properties"]["Name"]) in log_groups(t)



@pytest.mark.parametrize("enabled", [True, False])
def test_every_log_group_of_the_kit_keeps_the_configured_retention(synth_config, enabled):
    """Every CloudWatch log group in the kit's stacks expires its events after
    observability.log_retention_days; the one exception is the trainer image build's group (in the
    data stack), which has a setting of its own (image_build.log_retention_days). Before: the VPC
    flow-log group and the kubectl provider's two Lambda groups kept CDK's default, 731 days, and
    the flow-log group lives on with a network stack kept for a retained file system. With the
    add-on off the groups that remain (flow logs, kubectl provider) follow the setting too."""
    cfg = load_config(REPO_ROOT / "examples" / "default.yaml")
    cfg = cfg.model_copy(update={
        "observability": cfg.observability.model_copy(update={"enabled": enabled,
                                                              "log_retention_days": 14}),
        "image_build": cfg.image_build.model_copy(update={"log_retention_days": 7})})
    s = synth_config(cfg)
    data = cfg.stack_names["data"]
    found = {(stack, lid): (r["Properties"].get("RetentionInDays"), 7 if stack == data else 14)
             for stack, t in s.templates.items()
             for lid, r in resources(t, "AWS::Logs::LogGroup").items()}
    wrong = {k: v for k, v in found.items() if v[0] != v[1]}
    assert not wrong, f"(stack, log group): (retention, expected): {wrong}"
    stacks = {stack for stack, _ in found}
    # The groups this test was written for are among those it checked.
    assert {cfg.stack_names["network"], cfg.stack_names["cluster"], data} <= stacks
    assert len([lid for stack, lid in found if "KubectlProvider" in lid]) == 2
def test_retention_must_be_a_cloudwatch_period():
    raw = yaml.safe_load((REPO_ROOT / "examples" / "default.yaml").read_text())
    raw["observability"] = {"log_retention_days": 45}
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert ("observability.log_retention_days = 45: not a CloudWatch Logs retention period "
            "(1, 3, 5, 7, 14, 30, 60, 90, 120,") in str(err.value)
    assert "Fix: use one of those, e.g. 60." in str(err.value)


def test_two_dcgm_exporters_are_warned_about():
    from infra.config import config_warnings

    raw = yaml.safe_load((REPO_ROOT / "examples" / "default.yaml").read_text())
    assert not [w for w in config_warnings(parse_config(raw)) if "dcgm_exporter" in w]
    raw["addons"] = {**(raw.get("addons") or {}), "dcgm_exporter": {"enabled": True}}
    [warning] = [w for w in config_warnings(parse_config(raw)) if "dcgm_exporter" in w]
    assert warning.startswith("addons.dcgm_exporter is on (with no ServiceMonitor) and so is "
                              "observability: the CloudWatch observability add-on already runs a "
                              "DCGM exporter")
    raw["observability"] = {"enabled": False}
    assert not [w for w in config_warnings(parse_config(raw)) if "dcgm_exporter" in w]
    # A Prometheus of the team's own scrapes it: not two exporters, but its ServiceMonitor needs
    # the Prometheus Operator's CRDs, which the kit does not install (warned on its own).
    raw["observability"] = {"enabled": True}
    raw["addons"]["dcgm_exporter"]["service_monitor"] = True
    [warning] = [w for w in config_warnings(parse_config(raw)) if "dcgm_exporter" in w]
    assert warning.startswith("addons.dcgm_exporter.service_monitor is true")


# --- rlkit status: dashboard URL and health line ------------------------------------------------


CFG = load_config(REPO_ROOT / "examples" / "p5-2node.yaml")
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)


def test_dashboard_url_names_region_and_dashboard():
    assert observability.dashboard_url(CFG) == (
        f"https://{CFG.region}.console.aws.amazon.com/cloudwatch/home?region={CFG.region}"
        f"#dashboards/dashboard/{names.dashboard_name(CFG.name, CFG.region)}")


def test_health_line_reports_latest_values_and_problems():
    cw, stub = stubbed("cloudwatch")
    queries, dims = observability.health_queries(CFG)
    assert dims["gpu"] == [{"Name": "ClusterName", "Value": names.eks_cluster_name(CFG.name)}]
    assert dims["reward"] == [{"Name": "Environment", "Value": CFG.name},
                              {"Name": "Run", "Value": CFG.training.run_name}]
    restarts = observability._query(queries[3], dims["restarts"])
    assert restarts["Expression"] == (
        "MAX(SEARCH('{ContainerInsights,ClusterName,Namespace,PodName} MetricName="
        f"\"pod_number_of_container_restarts\" ClusterName=\"{names.eks_cluster_name(CFG.name)}\" "
        "Namespace=\"rl-training\"', 'Maximum', 60))")
    values = {"gpu": [87.4, 50.0], "efadrop": [0.0], "failed": [1.0], "restarts": [],
              "reward": [0.6251], "steptime": [305.7]}
    stub.add_response("get_metric_data", {"MetricDataResults": [
        {"Id": k, "Values": v, "Timestamps": [NOW] * len(v), "StatusCode": "Complete"}
        for k, v in values.items()]}, {
        "MetricDataQueries": ANY, "StartTime": NOW - observability.HEALTH_WINDOW, "EndTime": NOW,
        "ScanBy": "TimestampDescending"})
    with stub:
        line = observability.health_line(cw, CFG, now=NOW)
    assert line == ("health, last 15 min: problem (failed nodes): GPU util 87%, EFA rx drops 0, "
                    "failed nodes 1, container restarts in rl-training n/a, reward 0.625, step time 306 s")


def test_two_environments_with_one_run_name_read_their_own_training_metrics():
    """The training namespace is the account's and the default run name is every environment's
    (docs/operations.md runs two environments in one account): the health line's reward and step
    time name the environment, and name exactly the metric the trainer's EMF line makes."""
    from rltrainer import metrics as trainer_metrics

    staging = CFG.model_copy(update={"name": "staging"})
    prod = CFG.model_copy(update={"name": "prod"})
    assert staging.training.run_name == prod.training.run_name

    def queried(cfg) -> set[tuple]:
        queries, dims = observability.health_queries(cfg)
        stats = [observability._query(q, dims[q.id])["MetricStat"]["Metric"] for q in queries
                 if q.namespace == trainer_metrics.NAMESPACE]
        return {(m["Namespace"], m["MetricName"],
                 tuple((d["Name"], d["Value"]) for d in m["Dimensions"])) for m in stats}

    def emitted(cfg) -> set[tuple]:
        # the rollout line twice: the second time it is a retry's replay (the ledger has it)
        lines = ["x - rollout 3: {'rollout/raw_reward': 0.5}\n", "x - perf 3: {'perf/step_time': 90.0}\n",
                 "x - rollout 3: {'rollout/raw_reward': 0.5}\n"]
        records = [json.loads(emf) for _, emf in trainer_metrics.emf_lines(
            lines, environment=cfg.name, run=cfg.training.run_name,
            ledger=trainer_metrics.EmittedLedger(None))]
        return {(d["Namespace"], m["Name"], tuple((k, r[k]) for k in ks))
                for r in records for d in r["_aws"]["CloudWatchMetrics"]
                for ks in d["Dimensions"] for m in d["Metrics"]}

    assert queried(staging) == emitted(staging) and queried(prod) == emitted(prod)
    assert not queried(staging) & queried(prod)
    assert ("RLKit/Training", "reward", (("Environment", "prod"), ("Run", prod.training.run_name))) \
        in queried(prod)


def test_health_line_without_data():
    cw, stub = stubbed("cloudwatch")
    stub.add_response("get_metric_data", {"MetricDataResults": []}, None)
    with stub:
        assert "no data yet" in observability.health_line(cw, CFG, now=NOW)


# --- rlkit logs from CloudWatch ------------------------------------------------------------------


def record(log: str, pod: str = "qwen3-30b-a3b-grpo-x7k2p", container: str = "ray-job-submitter"):
    return json.dumps({"log": log + "\n", "stream": "stdout",
                       "kubernetes": {"pod_name": pod, "container_name": container,
                                      "namespace_name": "rl-training"}})


def test_parse_since():
    assert observability.parse_since("90s") == dt.timedelta(seconds=90)
    assert observability.parse_since("2h") == dt.timedelta(hours=2)
    assert observability.parse_since("3d") == dt.timedelta(days=3)
    for bad in ("2 hours", "0m", "-1h", "1w", ""):
        with pytest.raises(ValueError, match="use a number and a unit, e.g. 30m, 2h or 3d"):
            observability.parse_since(bad)


def test_log_query_submitter_or_node():
    q = observability.log_query(CFG, node=None, submitter_container="ray-job-submitter")
    cluster = names.eks_cluster_name(CFG.name)
    assert q.group == f"/aws/containerinsights/{cluster}/application"
    assert q.filter_pattern == (
        '{ $.kubernetes.namespace_name = "rl-training" && $.kubernetes.container_name = '
        f'"ray-job-submitter" && $.kubernetes.pod_name = "{CFG.training.run_name}*" }}')
    assert q.stream_prefix is None
    n = observability.log_query(CFG, node="ip-10-0-1-5.ec2.internal", submitter_container="x")
    assert n.filter_pattern == '{ $.kubernetes.namespace_name = "rl-training" }'
    assert n.stream_prefix == "ip-10-0-1-5.ec2.internal-" and n.show_source


def test_read_logs_prints_page_by_page_and_follows_without_repeats_or_losses():
    logs, stub = stubbed("logs")
    q = observability.log_query(CFG, node="node-a", submitter_container="ray-job-submitter")
    start = NOW - dt.timedelta(hours=1)
    t0 = int(start.timestamp() * 1000)
    base = {"logGroupName": q.group, "startTime": t0, "filterPattern": q.filter_pattern,
            "logStreamNamePrefix": "node-a-"}
    # FilterLogEvents returns events sorted by event time, page after page
    stub.add_response("filter_log_events", {
        "events": [{"eventId": "1", "timestamp": t0 + 10, "message": record("first", container="w")}],
        "nextToken": "p2"}, base)
    stub.add_response("filter_log_events", {
        "events": [{"eventId": "2", "timestamp": t0 + 20, "message": record("second", container="w")}]},
        {**base, "nextToken": "p2"})
    # The follow poll reads the last two minutes again (here from the start): events 1 and 2
    # come again and are not printed again; event 4 is older than event 3 but became searchable
    # only now (late ingestion, another node's batch): printed, not lost.
    stub.add_response("filter_log_events", {"events": [
        {"eventId": "1", "timestamp": t0 + 10, "message": record("first", container="w")},
        {"eventId": "2", "timestamp": t0 + 20, "message": record("second", container="w")},
        {"eventId": "3", "timestamp": t0 + 30, "message": "not json"}]},
        {**base, "startTime": t0})
    later = t0 + 300_000  # five minutes on: the window is the last two minutes before event 5
    stub.add_response("filter_log_events", {"events": [
        {"eventId": "5", "timestamp": later, "message": "fifth"}]}, {**base, "startTime": t0})
    stub.add_response("filter_log_events", {"events": [
        {"eventId": "4", "timestamp": later - 1_000, "message": "fourth, late"},
        {"eventId": "5", "timestamp": later, "message": "fifth"}]},
        {**base, "startTime": later - 120_000})
    out, sleeps, printed_before_call = io.StringIO(), [], []

    class Recording:  # what was printed when each page was asked for
        def filter_log_events(self, **kwargs):
            printed_before_call.append(len(out.getvalue().splitlines()))
            return logs.filter_log_events(**kwargs)

    with stub:
        n = observability.read_logs(Recording(), q, start=start, out=out, follow=True,
                                    sleep=sleeps.append, max_polls=4)
    stub.assert_no_pending_responses()
    # page by page: the first page's line is out before the second page is read
    assert printed_before_call == [0, 1, 2, 3, 4]
    assert out.getvalue().splitlines() == ["[qwen3-30b-a3b-grpo-x7k2p/w] first",
                                           "[qwen3-30b-a3b-grpo-x7k2p/w] second", "not json",
                                           "fifth", "fourth, late"]
    assert n == 5 and sleeps == [5.0] * 3


def test_read_logs_tail_leaves_out_the_older_lines_for_good():
    """--tail N -f: the first poll prints its last N lines; the lines before them are not
    printed either when a follow poll reads them again."""
    logs, stub = stubbed("logs")
    q = observability.log_query(CFG, node=None, submitter_container="ray-job-submitter")
    start = NOW - dt.timedelta(hours=1)
    t0 = int(start.timestamp() * 1000)
    base = {"logGroupName": q.group, "startTime": t0, "filterPattern": q.filter_pattern}
    events = [{"eventId": str(i), "timestamp": t0 + i, "message": f"line {i}"} for i in (1, 2, 3)]
    stub.add_response("filter_log_events", {"events": events}, base)
    stub.add_response("filter_log_events", {"events": events + [
        {"eventId": "4", "timestamp": t0 + 4, "message": "line 4"}]}, base)
    out = io.StringIO()
    with stub:
        n = observability.read_logs(logs, q, start=start, out=out, follow=True, tail=1,
                                    sleep=lambda s: None, max_polls=2)
    assert out.getvalue().splitlines() == ["line 3", "line 4"] and n == 2


def run_logs(tmp_path, monkeypatch, *flags, logs_client=None):
    from ops import aws, logs_cmd

    cfg = tmp_path / "c.yaml"
    cfg.write_text((REPO_ROOT / "examples" / "p5-2node.yaml").read_text())
    if logs_client is not None:
        monkeypatch.setattr(aws, "client", lambda sess, service: logs_client)
    parser = argparse.ArgumentParser(prog="rlkit")
    logs_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["logs", "--config", str(cfg), *flags])
    return args.func(args)


def test_rlkit_logs_from_cloudwatch_says_its_source(tmp_path, monkeypatch, capsys):
    logs, stub = stubbed("logs")
    stub.add_response("filter_log_events", {"events": [
        {"eventId": "1", "timestamp": 1, "message": record("rollout 3 done")}]},
        {"logGroupName": ANY, "startTime": ANY, "filterPattern": ANY})
    with stub:
        assert run_logs(tmp_path, monkeypatch, "--source", "cloudwatch", "--since", "2h",
                        logs_client=logs) == 0
    out, err = capsys.readouterr()
    assert out == "rollout 3 done\n"
    assert err.startswith(f"source: CloudWatch Logs /aws/containerinsights/"
                          f"{names.eks_cluster_name(CFG.name)}/application, all nodes, filter {{ ")


def test_rlkit_logs_missing_group_and_bad_since(tmp_path, monkeypatch, capsys):
    logs, stub = stubbed("logs")
    stub.add_client_error("filter_log_events", "ResourceNotFoundException", "not there")
    with stub:
        assert run_logs(tmp_path, monkeypatch, "--node", "n1", logs_client=logs) == 2
    assert "does not exist: the cluster stack is not deployed" in capsys.readouterr().err
    assert run_logs(tmp_path, monkeypatch, "--since", "yesterday") == 2
    assert "--since 'yesterday': not a duration" in capsys.readouterr().err


def test_pinned_addon_build_must_look_like_one():
    with pytest.raises(ConfigError) as err:
        parse_config({"observability": {"addon_version": "6.4.0"}})
    assert str(err.value.problems[0]) == (
        "observability.addon_version = '6.4.0': not an EKS add-on build "
        "(vMAJOR.MINOR.PATCH-eksbuild.N). Fix: copy one from `aws eks describe-addon-versions "
        "--addon-name amazon-cloudwatch-observability`, or leave it empty for EKS's default.")
    cfg = parse_config({"observability": {"addon_version": "v6.4.0-eksbuild.1"}})
    assert cfg.observability.addon_version == "v6.4.0-eksbuild.1"
    assert cfg.observability.application_signals is False
