"""The job submitter (a CPU pod that mounts /fsx) runs in the shared file system's AZ.

System nodes span every AZ of the VPC; without a zone term KubeRay's submitter lands in any of
them and reads /fsx across AZs (cross-AZ transfer and latency on every read). The AZ comes from
the file system's subnet in the synthesized templates, not from the config alone.
"""

from __future__ import annotations

import copy

import pytest

from infra import names
from infra.config import config_warnings, parse_config
from manifests import build_context, placeholder_outputs, render
from ops import contract, scheduling
from tests.support.cdk import EXAMPLES, resources


def file_system_zone(s) -> str:
    """The AZ of the FSx file system's subnet, followed through the stack exports."""
    storage = s.template("storage")
    [fs] = resources(storage, "AWS::FSx::FileSystem").values()
    [subnet] = fs["Properties"]["SubnetIds"]
    if isinstance(subnet, str):  # an existing VPC: subnets by ID, their AZs in the config
        [zone] = [z for z, sid in s.config.vpc.existing.private_subnet_ids.items()
                  if sid == subnet]
        return zone
    export = subnet["Fn::ImportValue"]
    for template in s.templates.values():
        for output in template.get("Outputs", {}).values():
            if output.get("Export", {}).get("Name") == export:
                resource = template["Resources"][output["Value"]["Ref"]]
                return resource["Properties"]["AvailabilityZone"]
    raise AssertionError(f"no stack exports {export}")


def submitter(cfg) -> dict:
    files = render(build_context(cfg, placeholder_outputs(cfg)))
    job = next(f.obj for f in files if f.kind == "RayJob")
    return job["spec"]["submitterPodTemplate"]["spec"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_submitter_is_pinned_to_the_file_systems_zone(synth, example):
    s = synth(example)
    zone = file_system_zone(s)
    spec = submitter(s.config)
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": names.ZONE_LABEL, "operator": "In", "values": [zone]}]
    # It mounts the file system (the reason it is pinned).
    assert any(v.get("persistentVolumeClaim") for v in spec["volumes"])


def test_contract_places_the_submitter_and_catches_a_wrong_zone(synth, chart_dir, tmp_path):
    s = synth("default")
    report = contract.check_cluster_contract(s.config, s.outdir, chart_dir=chart_dir,
                                             cache_dir=tmp_path)
    name = "RayJob qwen3-30b-a3b-grpo submitter"
    assert report.ok and report.lands[name] == [scheduling.SYSTEM_GROUP]
    # Deliberately broken: the submitter pinned to another AZ finds no system node there.
    nodes = scheduling.node_groups(s.config, s.templates)
    [system] = [n for n in nodes if n.name == scheduling.SYSTEM_GROUP]
    assert system.labels[names.ZONE_LABEL] == file_system_zone(s)
    spec = copy.deepcopy(submitter(s.config))
    other = next(z for z in s.config.availability_zones if z != file_system_zone(s))
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = [other]
    assert scheduling.placement_problem(spec, system).startswith(
        f"required node affinity unmet: no term matches ({names.ZONE_LABEL} In ['{other}']")


def test_no_pin_without_a_file_system():
    cfg = parse_config({"storage": {"shared_filesystem": {"type": "none"}},
                        "training": {"nodes": 1, "hf_checkpoint": "/models/Qwen3-30B-A3B"}})
    assert "affinity" not in submitter(cfg)


def test_too_few_system_nodes_for_every_zone_is_warned_about():
    cfg = parse_config({"availability_zones": ["us-east-1a", "us-east-1b", "us-east-1c"]})
    [warning] = [w for w in config_warnings(cfg) if w.startswith("system_nodes.min_size")]
    assert warning == (
        "system_nodes.min_size is 2 across 3 AZs: the job submitter runs on a system node in the "
        "shared file system's AZ (us-east-1a), and the Auto Scaling group keeps one there only "
        "with at least one node per AZ. Fix: set system_nodes.min_size (and desired_size) to 3 "
        "or more.")
