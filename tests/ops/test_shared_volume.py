"""The shared file system's volume and claim over a deployment's life (ops/shared_volume.py):
created once, then checked against the deployed file system, never blindly re-applied.

The cluster side is a fake kubectl; the rules it stands for are the API server's, read in
kubernetes/kubernetes (module docstring): a claim without a StorageClass cannot grow, a volume's
source cannot change, and a Released volume keeps its deleted claim's UID."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from manifests.context import SharedFs
from ops.shared_volume import SharedVolumeConflict, plan_shared_volume
from tests.support.fakes import FakeKubectl, run, run_gate, script_cluster, write_state

PV_GET = ["get", "pv", "gt-shared-fs"]
PVC_GET = ["get", "pvc", "shared-fs"]


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    return FakeKubectl(tmp_path, monkeypatch)


@pytest.fixture
def rendered(tmp_path, kubectl):
    """The volume and claim a launch renders from the test outputs (fs-0123456789abcdef0), on
    a cluster that has neither yet; the calls of that launch are forgotten."""
    write_state(tmp_path)
    assert run(tmp_path, "launch") == 0
    kubectl.log.unlink()
    out = tmp_path / "out"
    return (yaml.safe_load((out / "02-shared-fs-pv.yaml").read_text()),
            yaml.safe_load((out / "03-shared-fs-pvc.yaml").read_text()))


def plan(rendered, live_pv, live_pvc):
    """plan_shared_volume for what the test config renders: the launch tests below hold these
    values to the real render context."""
    pv, pvc = rendered
    csi = pv["spec"]["csi"]
    want = SharedFs(pv_name="gt-shared-fs", pvc_name="shared-fs", volume_name="shared-fs",
                    volume_handle="fs-0123456789abcdef0", dns_name=csi["volumeAttributes"]["dnsname"],
                    mount_name="abcdefgh", capacity=pv["spec"]["capacity"]["storage"],
                    mount_path="/fsx")
    return plan_shared_volume(want, "rl-training", live_pv, live_pvc)


def live(doc, *, uid="uid-1", phase="Bound", **spec):
    """``doc`` as the API server returns it once created and bound: a UID, a phase, the volume's
    claimRef completed with the claim's UID (``claim_uid``)."""
    got = copy.deepcopy(doc)
    got["metadata"]["uid"] = uid
    got["status"] = {"phase": phase}
    for key, value in spec.items():
        got["spec"][key] = value
    return got


def bound_pair(pv, pvc):
    live_pvc = live(pvc, uid="claim-1")
    live_pv = live(pv, uid="vol-1", claimRef={**pv["spec"]["claimRef"], "uid": "claim-1"})
    return live_pv, live_pvc


def answer(kubectl, live_pv=None, live_pvc=None):
    if live_pv is not None:
        kubectl.rule(PV_GET, stdout=json.dumps(live_pv))
    if live_pvc is not None:
        kubectl.rule(PVC_GET, stdout=json.dumps(live_pvc))


def applied(kubectl, tmp_path):
    return [[a for a in c[1:] if a != "-f"] for c in kubectl.calls if c[0] == "apply"]


# --- the plan ------------------------------------------------------------------------------------


def test_nothing_there_creates_both(rendered):
    got = plan(rendered, None, None)
    assert got.create_claim and not got.release and got.notes == []


def test_a_bound_claim_is_kept_and_a_grown_file_system_only_noted(rendered):
    pv, pvc = rendered
    live_pv, live_pvc = bound_pair(pv, pvc)
    live_pv["spec"]["capacity"]["storage"] = "600Gi"
    live_pvc["spec"]["resources"]["requests"]["storage"] = "600Gi"
    got = plan(rendered, live_pv, live_pvc)
    assert not got.create_claim and not got.release
    size = pv["spec"]["capacity"]["storage"]
    assert got.notes == [
        f"PersistentVolume gt-shared-fs: capacity 600Gi -> {size} (the file system's size changed)",
        f"claim shared-fs keeps its request of 600Gi (not {size}): a claim without a StorageClass "
        "cannot be resized, and the pods mount the whole file system either way"]


def test_the_api_servers_canonical_quantity_is_no_change(rendered):
    """The API server writes a quantity back in its canonical form (76800Gi reads back as 75Ti):
    the same size, so no note on every launch."""
    pv, pvc = rendered
    live_pv, live_pvc = bound_pair(pv, pvc)
    size = pv["spec"]["capacity"]["storage"]  # e.g. 1200Gi
    gib = int(size.removesuffix("Gi"))
    live_pv["spec"]["capacity"]["storage"] = f"{gib * 1024}Mi"
    live_pvc["spec"]["resources"]["requests"]["storage"] = f"{gib * 1024}Mi"
    assert plan(rendered, live_pv, live_pvc).notes == []


def test_a_replaced_file_system_is_refused_naming_both_objects(rendered):
    pv, pvc = rendered
    live_pv, live_pvc = bound_pair(pv, pvc)
    live_pv["spec"]["csi"]["volumeHandle"] = "fs-0aaaaaaaaaaaaaaaa"
    live_pv["spec"]["csi"]["volumeAttributes"]["dnsname"] = "fs-0aaaaaaaaaaaaaaaa.fsx.example"
    with pytest.raises(SharedVolumeConflict) as err:
        plan(rendered, live_pv, live_pvc)
    text = str(err.value)
    assert text.startswith(
        "PersistentVolume gt-shared-fs mounts file system fs-0aaaaaaaaaaaaaaaa "
        "(fs-0aaaaaaaaaaaaaaaa.fsx.example), but the storage stack's is fs-0123456789abcdef0 "
        "(fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com): the file system was replaced")
    assert "kubectl delete pvc shared-fs -n rl-training && kubectl delete pv gt-shared-fs" in text
    assert "reclaim policy is Retain" in text


@pytest.mark.parametrize("key", ["mountname", "dnsname"])
def test_any_part_of_the_source_counts(rendered, key):
    pv, pvc = rendered
    live_pv, live_pvc = bound_pair(pv, pvc)
    live_pv["spec"]["csi"]["volumeAttributes"][key] = "other"
    with pytest.raises(SharedVolumeConflict):
        plan(rendered, live_pv, live_pvc)


def test_a_volume_released_by_a_deleted_claim_is_freed(rendered):
    pv, pvc = rendered
    live_pv, _ = bound_pair(pv, pvc)
    live_pv["status"]["phase"] = "Released"
    assert plan(rendered, live_pv, None).release  # the claim went with its namespace
    again = live(pvc, uid="claim-2", phase="Pending")  # recreated by hand: still another UID
    got = plan(rendered, live_pv, again)
    assert got.release and not got.create_claim


def test_a_lost_or_misbound_claim_is_refused(rendered):
    pv, pvc = rendered
    live_pv, live_pvc = bound_pair(pv, pvc)
    lost = live(pvc, uid="claim-1", phase="Lost")
    with pytest.raises(SharedVolumeConflict, match=r"^claim shared-fs in rl-training lost its "
                       r"volume gt-shared-fs \(phase Lost"):
        plan(rendered, live_pv, lost)
    with pytest.raises(SharedVolumeConflict, match="phase Bound: the volume was deleted"):
        plan(rendered, None, live_pvc)  # deleted, the controller not yet caught up
    live_pvc["spec"]["volumeName"] = "pvc-1234"
    with pytest.raises(SharedVolumeConflict, match="bound to volume pvc-1234, not gt-shared-fs"):
        plan(rendered, live_pv, live_pvc)
    live_pv["spec"]["claimRef"] = {"name": "scratch", "namespace": "default"}
    with pytest.raises(SharedVolumeConflict, match="reserved for claim scratch in default"):
        plan(rendered, live_pv, None)


def test_an_object_being_deleted_is_waited_for(rendered):
    pv, pvc = rendered
    live_pv, live_pvc = bound_pair(pv, pvc)
    live_pvc["metadata"]["deletionTimestamp"] = "2026-12-02T10:00:00Z"
    with pytest.raises(SharedVolumeConflict, match="PersistentVolumeClaim shared-fs in "
                       "rl-training is being deleted"):
        plan(rendered, live_pv, live_pvc)


# --- launch and gate -----------------------------------------------------------------------------


def test_launch_after_the_file_system_grew_applies_the_volume_only(tmp_path, kubectl, rendered,
                                                                   capsys):
    live_pv, live_pvc = bound_pair(*rendered)
    live_pvc["spec"]["resources"]["requests"]["storage"] = "600Gi"
    answer(kubectl, live_pv, live_pvc)
    capsys.readouterr()
    assert run(tmp_path, "launch") == 0
    out = tmp_path / "out"
    assert [str(out / "02-shared-fs-pv.yaml")] in applied(kubectl, tmp_path)
    assert not any(str(out / "03-shared-fs-pvc.yaml") in c for c in applied(kubectl, tmp_path))
    assert "note: claim shared-fs keeps its request of 600Gi" in capsys.readouterr().out


def test_launch_frees_a_released_volume_before_creating_the_claim(tmp_path, kubectl, rendered,
                                                                  capsys):
    live_pv, _ = bound_pair(*rendered)
    live_pv["status"]["phase"] = "Released"
    answer(kubectl, live_pv)
    assert run(tmp_path, "launch") == 0
    calls = kubectl.calls
    patch = ["patch", "pv", "gt-shared-fs", "--type", "merge", "-p",
             '{"spec": {"claimRef": {"uid": null, "resourceVersion": null}}}']
    out = tmp_path / "out"
    create = ["apply", "-f", str(out / "02-shared-fs-pv.yaml"), "-f",
              str(out / "03-shared-fs-pvc.yaml")]
    assert patch in calls and create in calls and calls.index(patch) < calls.index(create)
    assert ("PersistentVolume gt-shared-fs still names a deleted claim (it was Released): "
            "clearing that claim's UID") in capsys.readouterr().out


def test_launch_refuses_a_volume_of_a_replaced_file_system(tmp_path, kubectl, rendered, capsys):
    live_pv, live_pvc = bound_pair(*rendered)
    live_pv["spec"]["csi"]["volumeHandle"] = "fs-0aaaaaaaaaaaaaaaa"
    answer(kubectl, live_pv, live_pvc)
    capsys.readouterr()
    assert run(tmp_path, "launch") == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("Not launching: PersistentVolume gt-shared-fs mounts "
                                           "file system fs-0aaaaaaaaaaaaaaaa")
    assert "Traceback" not in err
    assert not any("rl-job" in a for c in applied(kubectl, tmp_path) for a in c)


def test_the_gate_stops_on_the_same_conflict(tmp_path, kubectl, rendered, capsys):
    script_cluster(kubectl, "pass-p5-2node")
    live_pv, live_pvc = bound_pair(*rendered)
    live_pvc["status"]["phase"] = "Lost"
    answer(kubectl, live_pv, live_pvc)
    capsys.readouterr()
    assert run_gate(tmp_path) == 2
    err = capsys.readouterr().err
    assert "claim shared-fs in rl-training lost its volume gt-shared-fs" in err
    assert not any("fabric" in a for c in applied(kubectl, tmp_path) for a in c)
