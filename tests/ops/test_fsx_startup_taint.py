"""The FSx CSI startup taint on GPU nodes: pods that mount /fsx wait for the FSx CSI node plugin,
which removes the taint from its node once it runs [kubernetes-sigs/aws-fsx-csi-driver@5b227125add7,
tag helm-chart-aws-fsx-csi-driver-1.17.0, docs/install.md:79 "Configure node startup taint"].
Without it a worker can start on a fresh node before the node plugin and fail its /fsx mount
(kubernetes/kubernetes#95911, which the driver's taint removal cites).
The scheduling contract treats the taint as self-removing: the FSx node DaemonSet must tolerate
it and land on every GPU group (checked against the real chart 1.17.0, rendered with the add-on's
configuration from the template), and no kit pod may tolerate it.
"""

from __future__ import annotations

import copy
import json

import pytest

from infra import names
from infra.config import ConfigError, load_config, parse_config
from infra.versions import FSX_CSI_ADDON_NAME
from ops import contract, helm, scheduling
from tests.support import artifacts
from tests.support.cdk import EXAMPLES, REPO_ROOT, resources

TAINT = names.FSX_AGENT_NOT_READY_TAINT


def nodegroup(template: dict) -> dict:
    [ng] = resources(template, "AWS::EKS::Nodegroup").values()
    return ng["Properties"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_gpu_groups_start_tainted_until_the_fsx_node_plugin_runs(synth, example):
    s = synth(example)
    for group in s.config.gpu_node_groups:
        taints = nodegroup(s.template("gpu", group))["Taints"]
        assert {"Key": TAINT.key, "Effect": "NO_EXECUTE"} in taints, group
    # The system nodes run CoreDNS and the FSx controller: never tainted by the kit.
    assert not nodegroup(s.template("cluster")).get("Taints")


def test_no_taint_without_the_file_system(synth_config):
    cfg = load_config(REPO_ROOT / "examples" / "default.yaml")
    cfg = cfg.model_copy(update={"storage": cfg.storage.model_copy(update={
        "shared_filesystem": cfg.storage.shared_filesystem.model_copy(update={"type": "none"})})})
    s = synth_config(cfg)
    for group in cfg.gpu_node_groups:
        keys = [t["Key"] for t in nodegroup(s.template("gpu", group))["Taints"]]
        assert TAINT.key not in keys  # nothing would ever remove it


def test_a_user_taint_with_the_key_is_refused():
    with pytest.raises(ConfigError) as err:
        parse_config({"gpu_node_groups": {"p5": {
            "instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
            "taints": [{"key": TAINT.key, "value": "x", "effect": "NoSchedule"}]}}})
    assert any(str(p) == f"gpu_node_groups.p5.taints[0].key = '{TAINT.key}': the kit already "
               "sets this taint on every GPU node. Fix: remove this taint." for p in err.value.problems), \
        [str(p) for p in err.value.problems]


# --- the real chart: the node DaemonSet tolerates the taint; the model agrees -------------------


@pytest.fixture(scope="module")
def render_fsx(chart_dir, tmp_path_factory):
    archive = artifacts.unlocked_chart(chart_dir, "aws-fsx-csi-driver-1.17.0.tgz")
    binary = helm.helm_binary("1.35", tmp_path_factory.mktemp("helm"))

    def run(values: dict) -> dict:
        release = helm.ChartRelease(
            chart="aws-fsx-csi-driver", version="1.17.0", release="aws-fsx-csi-driver",
            repository="https://kubernetes-sigs.github.io/aws-fsx-csi-driver",
            namespace="kube-system", values=values)
        objects = helm.render_release(release, archive=archive, helm=binary,
                                      kubernetes_version="1.35")
        [ds] = [o for o in objects if o["kind"] == "DaemonSet"
                and o["metadata"]["name"] == names.SELF_REMOVING_TAINTS[TAINT.key]]
        return ds["spec"]["template"]["spec"]

    return run


@pytest.mark.parametrize("node_values", [None, {"tolerateAllTaints": False}])
def test_the_rendered_node_plugin_starts_on_every_tainted_group(synth, render_fsx, node_values):
    s = synth("p5en-capacity-block")
    cluster = copy.deepcopy(s.template("cluster"))
    addon = next(r for r in resources(cluster, "AWS::EKS::Addon").values()
                 if r["Properties"]["AddonName"] == FSX_CSI_ADDON_NAME)
    if node_values is not None:  # a variant the kit does not use today: the model must follow
        addon["Properties"]["ConfigurationValues"] = json.dumps({"node": node_values})
    values = scheduling.managed_addon_values(cluster, FSX_CSI_ADDON_NAME)
    rendered = render_fsx(values)
    model = contract.fsx_node_plugin_spec(cluster)
    nodes = scheduling.node_groups(s.config, {**s.templates, s.config.stack_names["cluster"]:
                                              cluster})
    tainted = [n for n in nodes if any(t["key"] == TAINT.key for t in n.taints)]
    assert {n.name for n in tainted} == set(s.config.gpu_node_groups)
    for node in nodes:
        # The model reads the add-on's values as the real chart does...
        assert (scheduling.placement_problem(model, node, at_startup=True) is None) == \
            (scheduling.placement_problem(rendered, node, at_startup=True) is None), node.name
        # ...and with the kit's values (none) the plugin starts on every node, taints and all.
        if node_values is None:
            assert scheduling.placement_problem(rendered, node, at_startup=True) is None
    if node_values is not None:  # then only the startup taint's key is tolerated for sure
        assert {"key": TAINT.key, "operator": "Exists"} in rendered["tolerations"]


def test_a_plugin_that_does_not_tolerate_the_taint_is_caught(synth, render_fsx):
    """Deliberately broken input: the rendered DaemonSet without its tolerations."""
    s = synth("default")
    spec = render_fsx({})
    spec["tolerations"] = [names.GPU_TAINT.toleration()]  # the GPU taint only
    nodes = scheduling.node_groups(s.config, s.templates)
    [finding] = scheduling.startup_taint_findings(
        [n for n in nodes if n.name == "p5"], {TAINT.key: spec}, [])
    assert str(finding).startswith(
        f"DaemonSet fsx-csi-node on node group 'p5': cannot start, so the startup taint "
        f"{TAINT.key}:NoExecute it removes stays and no other pod starts here: taint "
        f"{TAINT.key}=:NoExecute is not tolerated")


# --- the contract: the taint delays pods, it does not strand them --------------------------------


def test_contract_passes_and_workers_wait_for_the_plugin(synth, chart_dir, tmp_path):
    s = synth("default")
    report = contract.check_cluster_contract(s.config, s.outdir, chart_dir=chart_dir,
                                             cache_dir=tmp_path)
    assert report.ok, "\n".join(map(str, report.findings))
    worker = "RayJob qwen3-30b-a3b-grpo worker group p5"
    assert report.lands[worker] == ["p5"]
    # Read as an ordinary taint (today's check), every worker would be stranded.
    nodes = scheduling.node_groups(s.config, s.templates)
    [p5] = [n for n in nodes if n.name == "p5"]
    [pod] = [p for p in scheduling.kit_pods(contract.kit_objects(s.config),
                                             training_group="p5") if p.name == worker]
    assert scheduling.placement_problem(pod.spec, p5, at_startup=True).startswith(
        f"taint {TAINT.key}=:NoExecute is not tolerated")


def test_contract_fails_without_the_plugin_or_with_a_worker_that_skips_the_wait(
        synth, chart_dir, tmp_path):
    s = synth("default")
    templates = copy.deepcopy(s.templates)
    cluster = templates[s.config.stack_names["cluster"]]
    for key in [k for k, r in cluster["Resources"].items()
                if r["Type"] == "AWS::EKS::Addon"
                and r["Properties"]["AddonName"] == FSX_CSI_ADDON_NAME]:
        del cluster["Resources"][key]
    report = contract.check_cluster_contract(s.config, s.outdir, chart_dir=chart_dir,
                                             cache_dir=tmp_path, templates=templates)
    assert [str(f) for f in report.findings] == [
        f"DaemonSet fsx-csi-node on node group 'p5': is not installed, and only it removes the "
        f"startup taint {TAINT.key}:NoExecute: no other pod would ever start here. Fix: install "
        "it, or drop the taint"]

    nodes = scheduling.node_groups(s.config, s.templates)
    kit = scheduling.kit_pods(contract.kit_objects(s.config), training_group="p5")
    eager = [scheduling.PodModel(p.name, {**p.spec, "tolerations": [{"operator": "Exists"}]},
                                 p.intended, kit_image=True) for p in kit if "worker" in p.name]
    findings = scheduling.startup_taint_findings(
        nodes, {TAINT.key: contract.fsx_node_plugin_spec(s.template("cluster"))}, eager)
    assert [str(f) for f in findings] == [
        f"RayJob qwen3-30b-a3b-grpo worker group p5 on node group 'p5': tolerates the startup "
        f"taint {TAINT.key}:NoExecute, so it may start before fsx-csi-node is ready"]
