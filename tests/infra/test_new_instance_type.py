"""A fork adds an instance type in one catalog entry (plus its GPU's record when the GPU model is
new), and config, synth, render and plan all work; an entry whose GPU has no record is a clear
problem, never a KeyError.

``new_instance_type`` (tests/support/new_instance_type.py) is the one place the entries are
registered: exactly what a fork would add to ``infra/catalog/instances.py`` and
``infra/catalog/gpus.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from infra import names
from infra.catalog import GPUS, INSTANCE_TYPES
from infra.config import ConfigError, parse_config
from infra.planner import PlannerError, PlanRequest, RLPlanRequest, RLSetup, plan, plan_rl
from infra.planner.hardware import plannable_systems
from tests.support import new_instance_type as fork
from tests.support.new_instance_type import NEW_TYPE, P7_R100, R100

new_instance_type = fork.new_instance_type  # the fixture
_config = fork.fork_config


def test_config_synth_render_and_plan_work_for_a_new_instance_type(new_instance_type, chart_dir,
                                                                  tmp_path):
    cfg = parse_config(_config())
    assert cfg.gpu_node_groups["r100"].instance_type == NEW_TYPE

    # synth: the launch template has the new type's interface layout, the node group its AMI type
    from stacks.kit import build_stacks, make_app

    app = make_app(outdir=str(tmp_path / "cdk"))
    stacks = build_stacks(app, cfg)
    assembly = app.synth()
    gpu_stack = names.gpu_stack_name(cfg.name, "r100")
    assert gpu_stack in {s.stack_name for s in stacks.all()}
    resources = assembly.get_stack_by_name(gpu_stack).template["Resources"]
    templates = [r for r in resources.values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    data = templates[0]["Properties"]["LaunchTemplateData"]
    assert data["InstanceType"] == NEW_TYPE
    assert len(data["NetworkInterfaces"]) == 16
    nodegroups = [r for r in resources.values() if r["Type"] == "AWS::EKS::Nodegroup"]
    assert nodegroups[0]["Properties"]["AmiType"] == "AL2023_x86_64_NVIDIA"

    # the scheduling contract, with the real charts through the real Helm: the device plugins
    # land on the new type (the EFA plugin's instance allowlist comes from the config, not from
    # the chart release's list, which cannot know a type added to the catalog)
    from ops.contract import check_cluster_contract

    report = check_cluster_contract(cfg, tmp_path / "cdk", chart_dir=chart_dir,
                                    cache_dir=tmp_path / "helm")
    assert report.ok, [str(f) for f in report.findings]
    lands = {pod: groups for pod, groups in report.lands.items() if "efa" in pod.lower()}
    assert lands and all("r100" in groups for groups in lands.values()), lands

    # render: the trainer pods ask for the new type's GPUs and EFA devices
    from manifests import build_context, placeholder_outputs, render

    files = render(build_context(cfg, placeholder_outputs(cfg)))
    requests = [r for f in files for r in _gpu_requests(yaml.safe_load(f.text))]
    assert requests and all(r[names.GPU_RESOURCE] == 8 and r[names.EFA_RESOURCE] == 16
                            for r in requests)

    # plan: the planner reads the new GPU record and the entry's price
    assert NEW_TYPE in plannable_systems()
    result = plan(PlanRequest("qwen3-30b-a3b", NEW_TYPE, nodes=2))
    assert result.system.gpu is R100 and result.best.cost.price_per_node_hour == 150.0
    rl = plan_rl(RLPlanRequest("qwen3-30b-a3b", NEW_TYPE,
                               RLSetup(prompts=16, samples_per_prompt=8, max_response_len=2048),
                               nodes=2, placements=("colocated",)))
    assert rl.best.nodes == 2


def _gpu_requests(obj) -> list[dict]:
    """Every container resource request that asks for GPUs, anywhere in a manifest."""
    found = []
    if isinstance(obj, dict):
        req = obj.get("requests")
        if isinstance(req, dict) and names.GPU_RESOURCE in req:
            found.append(req)
        for value in obj.values():
            found += _gpu_requests(value)
    elif isinstance(obj, list):
        for value in obj:
            found += _gpu_requests(value)
    return found


def test_an_entry_whose_gpu_has_no_record_is_a_config_problem(monkeypatch):
    monkeypatch.setitem(INSTANCE_TYPES, NEW_TYPE, replace(P7_R100, gpu_model="X999"))
    with pytest.raises(ConfigError) as err:
        parse_config(_config())
    assert [str(p) for p in err.value.problems] == [
        f"gpu_node_groups.r100.instance_type = '{NEW_TYPE}': its catalog entry names GPU model "
        f"'X999', which has no record in the GPU catalog (infra/catalog/gpus.py knows "
        f"{', '.join(GPUS)}). Fix: add a GpuSpec for X999 to GPUS in infra/catalog/gpus.py."]
    # Every other config still loads: the bad entry does not break the catalog.
    parse_config(_config("p5.48xlarge"))


def test_an_entry_whose_gpu_has_no_record_cannot_be_planned_and_breaks_nothing_else(
        monkeypatch):
    monkeypatch.setitem(INSTANCE_TYPES, NEW_TYPE, replace(P7_R100, gpu_model="X999"))
    assert NEW_TYPE not in plannable_systems() and "p5.48xlarge" in plannable_systems()
    with pytest.raises(PlannerError) as err:
        plan(PlanRequest("qwen3-30b-a3b", NEW_TYPE, nodes=1))
    assert str(err.value) == (
        f"cannot plan for {NEW_TYPE}: its GPU model 'X999' has no record in the GPU catalog "
        f"(infra/catalog/gpus.py; known: {', '.join(GPUS)}); add one")
    assert plan(PlanRequest("qwen3-30b-a3b", "p5.48xlarge", nodes=1)).best
