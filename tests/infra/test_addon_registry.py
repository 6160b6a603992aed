"""The add-on registry (infra/addons/): records drive config, synth and the scheduling contract,
and adding an add-on is one module plus one registry line plus its chart in ../shared/charts."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from tests.support import FIXTURES as TEST_FIXTURES
from tests.support.cdk import REPO_ROOT
from infra import addons as registry
from infra.addons import ChartVersion, HelmAddon, Placement, Workload
from infra.addons.config import AddonsConfig
from infra.config import json_schema

FORK_ADDONS = TEST_FIXTURES / "addons"


def test_config_fields_follow_the_registry_in_order():
    keys = [a.key for a in registry.ADDONS]
    assert len(set(keys)) == len(keys)
    assert list(AddonsConfig.model_fields) == keys
    assert list(json_schema()["$defs"]["AddonsConfig"]["properties"]) == keys


def test_every_version_says_where_it_was_read():
    for a in registry.ADDONS:
        for v in a.tested:
            assert v.read.strip(), (a.key, v.version)


def test_a_pinned_version_must_be_a_tested_one():
    kuberay = registry.addon("kuberay_operator")
    with pytest.raises(ValueError, match="the pinned version 9.9.9 must be one of its tested"):
        HelmAddon(**{**kuberay.__dict__, "pinned": ChartVersion("9.9.9", read="nowhere")})


def test_the_add_on_layer_imports_no_config():
    """Ground layer order: infra.config builds its addons section from the records, never the
    reverse (and the records need neither the version table nor CDK)."""
    for path in (REPO_ROOT / "infra" / "addons").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for mod in mods:
                assert not mod.startswith(("infra.config", "infra.versions", "aws_cdk",
                                           "infra.constructs", "ops")), (path.name, mod)


# The fork's side, run in a fresh interpreter: its add-on module (tests/fixtures/addons), then
# the one registry line, before anything reads the registry. Then config, synth and the
# scheduling contract, each of which must pick the new add-on up by itself.
_FORK = r'''
import dataclasses, json, os, sys
from pathlib import Path
os.environ["CDK_VALIDATION"] = "false"
fixtures, chart_dir, outdir, cache = (Path(a) for a in sys.argv[1:5])
sys.path.insert(0, str(fixtures))
import fsx_csi_driver
import infra.addons
infra.addons.ADDONS = (*infra.addons.ADDONS, fsx_csi_driver.ADDON)  # the registry line

from infra.addons import Placement, Workload
from infra.config import ConfigError, json_schema, parse_config
from ops import contract, helm
from stacks.kit import build_stacks, make_app

out = {"schema_fields": list(json_schema()["$defs"]["AddonsConfig"]["properties"])}
try:
    parse_config({"addons": {"fsx_csi_driver": {"version": "9.9.9"}}})
except ConfigError as err:
    out["refused"] = [str(p) for p in err.problems]
out["off_by_default"] = not parse_config({}).addons.enabled("fsx_csi_driver")
cfg = parse_config({"addons": {"fsx_csi_driver": {"enabled": True}}})
out["enabled"] = cfg.addons.enabled("fsx_csi_driver")
app = make_app(outdir=str(outdir))
build_stacks(app, cfg)
app.synth()
templates = contract.assembly_templates(outdir)
cluster = templates[cfg.stack_names["cluster"]]
out["charts"] = {r["Properties"]["Chart"]: {"id": lid, "props": r["Properties"],
                                            "depends": r.get("DependsOn", [])}
                 for lid, r in cluster["Resources"].items() if r["Type"] == helm.HELM_CHART_TYPE}
report = contract.check_cluster_contract(cfg, outdir, chart_dir=chart_dir, cache_dir=cache)
out["findings"] = [str(f) for f in report.findings]
out["lands"] = report.lands
# The contract reads where pods must land from the record: a record that says the node
# DaemonSet serves only GPU groups must make the check object to it on the system nodes.
wrong = dataclasses.replace(fsx_csi_driver.ADDON, workloads=(
    Workload("fsx-csi-controller", Placement.SYSTEM), Workload("fsx-csi-node", Placement.GPU)))
infra.addons.ADDONS = (*infra.addons.ADDONS[:-1], wrong)
report = contract.check_cluster_contract(cfg, outdir, chart_dir=chart_dir, cache_dir=cache,
                                         templates=templates)
out["wrong_findings"] = [str(f) for f in report.findings]
(outdir / "fork-result.json").write_text(json.dumps(out))
'''


@pytest.mark.external
def test_a_new_add_on_is_one_module_and_one_registry_line(chart_dir, tmp_path):
    outdir = tmp_path / "cdk.out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), str(REPO_ROOT / "images" / "trainer" / "src"),
         os.environ.get("PYTHONPATH", "")]),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    done = subprocess.run([sys.executable, "-c", _FORK, str(FORK_ADDONS), str(chart_dir),
                           str(outdir), str(tmp_path / "cache")],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads((outdir / "fork-result.json").read_text())

    # Config: a new field, after the others, with the record's defaults and versions.
    assert out["schema_fields"] == [a.key for a in registry.ADDONS] + ["fsx_csi_driver"]
    assert out["refused"] == [
        "addons.fsx_csi_driver.version = '9.9.9': not a version the kit knows for chart "
        "aws-fsx-csi-driver (1.17.0). Fix: use one of those, or add the version to `tested` "
        "in infra/addons/fsx_csi_driver.py once the chart contract test passes for it."]
    assert out["off_by_default"] and out["enabled"]

    # Synth: its Helm chart resource, with the record's values and wait.
    chart = out["charts"]["aws-fsx-csi-driver"]
    props = chart["props"]
    assert (props["Repository"], props["Version"], props["Namespace"], props["Release"]) == (
        "https://kubernetes-sigs.github.io/aws-fsx-csi-driver", "1.17.0", "kube-system",
        "aws-fsx-csi-driver")
    assert json.loads(props["Values"]) == {
        "controller": {"nodeSelector": {"rlkit.aws/node-role": "system"}}}
    assert props["Wait"] is True
    assert any("NodegroupSystemNodes" in d for d in chart["depends"])
    assert chart["id"].startswith("Addonsfsxcsidriver")
    assert list(out["charts"])[:3] == ["aws-efa-k8s-device-plugin", "nvidia-device-plugin",
                                       "kuberay-operator"]

    # Scheduling contract: it rendered the real chart and placed its pods where the record says.
    assert out["findings"] == []
    assert out["lands"]["DaemonSet kube-system/fsx-csi-node"] == ["system", "p5"]
    assert out["lands"]["Deployment kube-system/fsx-csi-controller"] == ["system"]
    assert out["wrong_findings"] == [
        "DaemonSet kube-system/fsx-csi-node on node group 'system': would run here, but it "
        "serves only ['p5']"]


def test_contract_targets_come_from_the_records():
    from infra.config import parse_config
    from ops import contract, scheduling

    cfg = parse_config({})
    targets = contract.intended_chart_targets(cfg)
    for a in registry.ADDONS:
        for w in a.workloads:
            want = set()
            if w.lands in (Placement.GPU, Placement.BOTH):
                want |= set(cfg.gpu_node_groups)
            if w.lands in (Placement.SYSTEM, Placement.BOTH):
                want.add(scheduling.SYSTEM_GROUP)
            assert targets[w.name] == want, w.name
    assert contract.chart_advertised_resources() == {
        "aws-efa-k8s-device-plugin": scheduling.EFA_RESOURCE,
        "nvidia-device-plugin": scheduling.GPU_RESOURCE}
    assert Workload("x", Placement.BOTH).lands.on_gpu and Placement.BOTH.on_system
