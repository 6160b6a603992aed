"""Cluster add-ons: pinned Helm charts whose tolerations and selectors match the node groups."""

from __future__ import annotations

import json

import pytest

from tests.support.cdk import EXAMPLES, REPO_ROOT, resources
from infra import addons as registry
from infra import names
from infra.addons import Wait
from infra.config import ConfigError, parse_config

HELM = "Custom::AWSCDK-EKS-HelmChart"


def charts(s) -> dict[str, dict]:
    """Helm chart resources of the cluster stack, keyed by chart name."""
    t = s.template("cluster")
    return {r["Properties"]["Chart"]: {**r["Properties"], "_id": lid,
                                       "_depends": r.get("DependsOn", [])}
            for lid, r in resources(t, HELM).items()}


def values(chart: dict) -> dict:
    return json.loads(chart["Values"]) if isinstance(chart["Values"], str) else chart["Values"]


@pytest.mark.parametrize("key", [a.key for a in registry.ADDONS if a.enabled_by_default])
def test_default_charts_repository_version_namespace(synth, key):
    spec = registry.addon(key)
    chart = charts(synth("default"))[spec.chart]
    assert chart["Repository"] == spec.repository
    assert chart["Version"] == spec.version
    assert chart["Namespace"] == spec.namespace
    assert chart["Release"] == spec.release
    assert chart["CreateNamespace"] is True


def test_default_charts_are_the_records_on_by_default(synth):
    assert list(charts(synth("default"))) == [a.chart for a in registry.ADDONS
                                              if a.enabled_by_default]
    assert [a.key for a in registry.ADDONS if a.enabled_by_default] == [
        "efa_device_plugin", "nvidia_device_plugin", "kuberay_operator"]


def test_pinned_versions():
    # v0.5.30's instance-type allowlist has p6-b200/p6-b300 (v0.5.7's does not).
    assert registry.addon("efa_device_plugin").version == "v0.5.30"
    assert registry.addon("nvidia_device_plugin").version == "0.20.0"
    # Must match the CRDs the manifests are validated against (../shared/crds/kuberay-v1.7.0).
    assert registry.addon("kuberay_operator").version == "1.7.0"


def test_device_plugin_values(synth):
    c = charts(synth("default"))
    efa = values(c["aws-efa-k8s-device-plugin"])
    # The chart's instance-type allowlist is the configured GPU groups' types, not the chart
    # release's own list (which cannot know a type a fork adds to the catalog).
    assert efa == {"tolerations": [names.GPU_TAINT.toleration()],
                   "nodeSelector": {names.EFA_LABEL: "true"},
                   "supportedInstanceLabels": {"keys": [names.INSTANCE_TYPE_LABEL],
                                               "values": ["p5.48xlarge"]}}
    nvidia = values(c["nvidia-device-plugin"])
    assert nvidia["tolerations"] == [names.GPU_TAINT.toleration()]
    assert nvidia["nodeSelector"] == {names.NODE_ROLE_LABEL: names.NODE_ROLE_GPU}
    kuberay = values(c["kuberay-operator"])
    assert kuberay == {"nodeSelector": {names.NODE_ROLE_LABEL: names.NODE_ROLE_SYSTEM}}


@pytest.mark.parametrize("example", EXAMPLES)
def test_chart_tolerations_match_every_gpu_node_group(synth, example):
    """Compares the synthesized node groups with the synthesized charts, so changing the node
    group's taint without the charts' tolerations (or the reverse) fails here."""
    s = synth(example)
    on_gpu = {a.chart for a in registry.ADDONS if any(w.lands.on_gpu for w in a.workloads)}
    assert on_gpu == {"aws-efa-k8s-device-plugin", "nvidia-device-plugin", "dcgm-exporter",
                      "dra-driver-nvidia-gpu"}
    gpu_charts = [c for name, c in charts(s).items() if name in on_gpu]
    for group in s.config.gpu_node_groups:
        ng = next(iter(resources(s.template("gpu", group), "AWS::EKS::Nodegroup").values()))
        labels = ng["Properties"]["Labels"]
        for chart in gpu_charts:
            v = values(chart)
            if chart["Chart"] == "dra-driver-nvidia-gpu":
                # Its GPU DaemonSet's placement sits under kubeletPlugin: a required node
                # affinity on nvidia.com/gpu.present=true, which every kit GPU group carries.
                v = v["kubeletPlugin"]
                (term,) = v["affinity"]["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                v = {**v, "nodeSelector": {e["key"]: e["values"][0]
                                           for e in term["matchExpressions"]}}
            for taint in ng["Properties"]["Taints"]:  # the kit's and the user's
                if taint["Key"] in names.SELF_REMOVING_TAINTS:
                    continue  # the FSx CSI startup taint only delays them (test_fsx_startup_taint)
                assert {"key": taint["Key"], "operator": "Exists"} in v["tolerations"]
            for key, value in v["nodeSelector"].items():
                assert labels.get(key) == value, (chart["Chart"], key)


def test_device_plugins_do_not_wait_for_gpu_nodes(synth):
    """GPU groups may sit at desired 0: device plugins install without waiting for pods, and
    nothing in the cluster stack depends on a GPU stack."""
    s = synth("default")
    c = charts(s)
    assert [a.key for a in registry.ADDONS if a.waits_for] == ["kuberay_operator"]
    for name in ("aws-efa-k8s-device-plugin", "nvidia-device-plugin"):
        assert c[name].get("Wait") in (None, False)
        assert not any("Nodegroup" in d for d in c[name]["_depends"])
    kuberay = c["kuberay-operator"]
    assert kuberay["Wait"] is True
    assert any("NodegroupSystemNodes" in d for d in kuberay["_depends"])
    for a in registry.ADDONS:  # every chart on the cluster follows its record
        if a.chart in c:
            assert bool(c[a.chart].get("Wait")) == bool(a.waits_for)
            assert any("NodegroupSystemNodes" in d for d in c[a.chart]["_depends"]) == (
                Wait.SYSTEM_NODES in a.waits_for)
    assert names.gpu_stack_name(s.config.name, "p5") not in json.dumps(s.template("cluster"))


def test_overrides_and_optional_dcgm(synth, synth_config):
    import yaml

    c = charts(synth("p5-2node"))
    assert c["nvidia-device-plugin"]["Version"] == "0.17.1"
    # the example needs no CRDs from outside the kit: no dcgm exporter, so no ServiceMonitor
    assert "dcgm-exporter" not in c and "dcgm-exporter" not in charts(synth("default"))
    raw = yaml.safe_load((REPO_ROOT / "examples" / "p5-2node.yaml").read_text())
    raw["addons"]["dcgm_exporter"] = {"enabled": True, "service_monitor": True}
    dcgm = charts(synth_config(parse_config(raw)))["dcgm-exporter"]
    assert dcgm["Repository"] == registry.addon("dcgm_exporter").repository
    assert values(dcgm)["tolerations"] == [names.GPU_TAINT.toleration()]
    assert values(dcgm)["serviceMonitor"] == {"enabled": True}  # the config opts in


def test_pinning_a_version_does_not_enable_an_addon_that_is_off_by_default(tmp_path):
    cfg = parse_config({"addons": {"dcgm_exporter": {"version": "4.8.2"}}})
    assert not cfg.addons.enabled("dcgm_exporter")
    assert cfg.addons.enabled("nvidia_device_plugin")
    cfg = parse_config({"addons": {"dcgm_exporter": {"version": "4.8.2", "enabled": True}}})
    assert cfg.addons.enabled("dcgm_exporter")
    assert cfg.addons.dcgm_exporter.service_monitor is False


def test_user_taints_are_tolerated_by_the_gpu_charts():
    from infra.config.derived import chart_values
    cfg = parse_config({"gpu_node_groups": {"p5": {
        "instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
        "taints": [{"key": "team.example.com/reserved", "value": "rl", "effect": "NoExecute"}]}}})
    values = chart_values("efa_device_plugin", cfg)
    assert values["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"},
                                     {"key": "team.example.com/reserved", "operator": "Exists"}]


def test_disable_an_addon(synth_config):
    cfg = parse_config({"addons": {"nvidia_device_plugin": {"enabled": False}}})
    s = synth_config(cfg)
    template = s.templates[s.stacks.cluster.stack_name]
    chart_names = {r["Properties"]["Chart"] for r in resources(template, HELM).values()}
    assert chart_names == {"aws-efa-k8s-device-plugin", "kuberay-operator"}


def test_unknown_chart_version_is_refused_with_fix():
    with pytest.raises(ConfigError) as err:
        parse_config({"addons": {"kuberay_operator": {"version": "1.3.0"}}})
    assert [str(p) for p in err.value.problems] == [
        "addons.kuberay_operator.version = '1.3.0': not a version the kit knows for chart "
        "kuberay-operator (1.7.0). Fix: use one of those, or add the version to `tested` in "
        "infra/addons/kuberay_operator.py once the chart contract test passes for it."]


def test_kubectl_layer_matches_kubernetes_version(synth):
    s = synth("default")
    assert s.config.kubernetes_version == "1.35"
    t = s.template("cluster")
    layers = [r["Properties"].get("Description", "") for r in
              resources(t, "AWS::Lambda::LayerVersion").values()]
    assert any("kubectl" in d.lower() and s.config.kubernetes_version in d for d in layers), layers
