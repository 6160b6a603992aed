"""The node AMI release (`node_ami_release_version`): what config accepts, what the stacks set, and
the releases the kit read (infra/versions.py)."""

from __future__ import annotations

import dataclasses

import pytest

from infra.catalog import instances
from infra.config import ConfigError, parse_config
from infra.versions import (
    AMI_RELEASE_RE,
    EKS_AMI_RELEASE_READ_DRIVER,
    EKS_AMI_RELEASES_READ,
    KUBERNETES_VERSIONS,
)
from tests.support.cdk import resources

P5 = {"instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
      "min_size": 0, "desired_size": 2, "max_size": 2}


def problems_of(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    return [str(p) for p in err.value.problems]


def test_a_release_is_read_for_every_supported_kubernetes_version():
    """Every version the kit supports has a read release of its own minor, all of one release day
    (one CHANGELOG entry), and the driver named is of the branch the kit's checks assume."""
    from infra.versions import AL2023_NVIDIA_DRIVER_BRANCH

    assert set(EKS_AMI_RELEASES_READ) == set(KUBERNETES_VERSIONS)
    days = set()
    for version, release in EKS_AMI_RELEASES_READ.items():
        m = AMI_RELEASE_RE.fullmatch(release)
        assert m and m.group(1) == version, release
        days.add(m.group(3))
        assert AL2023_NVIDIA_DRIVER_BRANCH[version] == int(EKS_AMI_RELEASE_READ_DRIVER.split(".")[0])
    assert len(days) == 1


def test_catalog_minimum_releases_are_ami_release_names():
    """As the EKS user guide writes them (v20251103): the rule compares the date."""
    import re

    found = [t.min_ami_release for t in instances.INSTANCE_TYPES.values() if t.min_ami_release]
    assert found and all(re.fullmatch(r"v\d{8}", m) for m in found), found


def test_a_release_must_be_of_the_clusters_kubernetes_version():
    assert problems_of({"node_ami_release_version": "1.34.9-20260714"}) == [
        "node_ami_release_version = '1.34.9-20260714': a release for Kubernetes 1.34, but the node "
        "groups run the cluster's kubernetes_version 1.35. Fix: use a 1.35 release, such as "
        "1.35.6-20260714."]
    assert problems_of({"node_ami_release_version": "v20260714"}) == [
        "node_ami_release_version = 'v20260714': not an EKS AMI release version (<Kubernetes "
        "x.y.z>-<YYYYMMDD>, as the EKS AMI release notes list them). Fix: use one like "
        "1.35.6-20260714, or remove it to let EKS choose."]
    cfg = parse_config({"kubernetes_version": "1.34", "node_ami_release_version": "1.34.9-20260714"})
    assert cfg.node_ami_release_version == "1.34.9-20260714"


def test_the_catalog_minimum_release_is_enforced(monkeypatch):
    """The catalog's min_ami_release (EKS's recommendation for GB200: v20251103, driver 580) is a
    field, never a name: moved onto p5 here, it applies to p5."""
    entry = instances.INSTANCE_TYPES["p5.48xlarge"]
    monkeypatch.setitem(instances.INSTANCE_TYPES, "p5.48xlarge",
                        dataclasses.replace(entry, min_ami_release="v20251103"))
    assert problems_of({"node_ami_release_version": "1.35.1-20251020",
                        "gpu_node_groups": {"p5": P5}}) == [
        "node_ami_release_version = '1.35.1-20251020': group p5 (p5.48xlarge) needs EKS AMI release "
        "v20251103 or later (catalog min_ami_release). Fix: use a release from v20251103 or later, "
        "such as 1.35.6-20260714."]
    parse_config({"node_ami_release_version": "1.35.2-20251103", "gpu_node_groups": {"p5": P5}})


def nodegroups(synth) -> list[dict]:
    return [ng["Properties"] for t in synth.templates.values()
            for ng in resources(t, "AWS::EKS::Nodegroup").values()]


def test_without_a_release_the_node_groups_name_none(synth):
    """The default: EKS chooses the release. The Kubernetes version is named all the same
    (tests/stacks/test_kubernetes_upgrade.py says why)."""
    s = synth("default")
    found = nodegroups(s)
    assert len(found) == 2  # system and p5
    assert all("ReleaseVersion" not in ng for ng in found)
    assert {ng["Version"] for ng in found} == {s.config.kubernetes_version}


def test_a_release_goes_to_every_node_group_with_its_kubernetes_version(synth):
    """The GB200 example pins one: the system group and the GPU group both run it, with the
    Kubernetes version it belongs to (one version update when the cluster is upgraded)."""
    s = synth("p6e-gb200-ultraserver")
    found = nodegroups(s)
    assert len(found) == 2
    assert {(ng["ReleaseVersion"], ng["Version"]) for ng in found} == {
        (s.config.node_ami_release_version, s.config.kubernetes_version)}
