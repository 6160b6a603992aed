"""A change of ``kubernetes_version`` moves the control plane and every managed node group, in that
order; it moves no EKS add-on (the kit pins no build), which is why preflight reads the add-ons
(ops/preflight_upgrade.py). Read from the synthesized templates.

Before: a node group named its Version only when the config named an AMI release, so a version
change moved the control plane alone; the groups kept theirs and EKS refused the next upgrade
(UpdateClusterVersion requires every managed node group at the cluster's version)."""

from __future__ import annotations

import pytest

from infra import names
from tests.support import REPO_ROOT
from tests.support.cdk import EXAMPLES, resources


def _nodegroups(synth) -> dict[tuple[str, str], dict]:
    return {(stack, lid): r for stack, t in synth.templates.items()
            for lid, r in resources(t, "AWS::EKS::Nodegroup").items()}


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_node_group_names_the_clusters_kubernetes_version(synth, example):
    s = synth(example)
    groups = _nodegroups(s)
    assert len(groups) == 1 + len(s.config.gpu_node_groups)  # the system group and each GPU group
    versions = {key: r["Properties"].get("Version") for key, r in groups.items()}
    assert set(versions.values()) == {s.config.kubernetes_version}, versions


def test_a_version_change_moves_the_cluster_then_each_node_group_and_no_addon(synth, synth_config):
    """default at 1.35 and at 1.34: the cluster's and every group's Version differ, and nothing
    else of a group (CloudFormation refuses a Version change combined with another change of the
    group). The system group names the cluster by Ref (updated after it, in the same stack); a
    GPU group imports the cluster stack's export (its stack deploys after the cluster stack).
    Every add-on is the same: CloudFormation leaves add-ons at the builds they have."""
    from infra.config import load_config

    new = synth("default")
    cfg = load_config(REPO_ROOT / "examples" / "default.yaml")
    old = synth_config(cfg.model_copy(update={"kubernetes_version": "1.34"}))
    assert new.config.kubernetes_version == "1.35"
    cluster_stack = names.stack_names(cfg.name)["cluster"]
    [(cluster_id, cluster)] = resources(new.templates[cluster_stack], "AWS::EKS::Cluster").items()
    assert cluster["Properties"]["Version"] == "1.35"
    assert resources(old.templates[cluster_stack], "AWS::EKS::Cluster")[cluster_id][
        "Properties"]["Version"] == "1.34"
    before, after = _nodegroups(old), _nodegroups(new)
    assert before.keys() == after.keys()
    for key, group in after.items():
        props, was = group["Properties"], before[key]["Properties"]
        assert (was["Version"], props["Version"]) == ("1.34", "1.35"), key
        assert {k: v for k, v in props.items() if k != "Version"} == {
            k: v for k, v in was.items() if k != "Version"}, key
        stack = key[0]
        if stack == cluster_stack:
            assert props["ClusterName"] == {"Ref": cluster_id}
        else:
            assert "Fn::ImportValue" in props["ClusterName"]
    for stack, template in new.templates.items():
        for lid, addon in resources(template, "AWS::EKS::Addon").items():
            assert resources(old.templates[stack], "AWS::EKS::Addon")[lid] == addon, lid
