"""`rlkit render --from-cluster`: RayJob validated against the CRD the cluster has installed.

A fake kubectl answers `kubectl get crd rayjobs.ray.io -o json` with what the API server returns
for the real KubeRay v1.7.0 CRD (../shared/crds/kuberay-v1.7.0 or the artifact cache, plus the fields the server adds),
so the schema that decides is KubeRay's own; a CRD altered on "the cluster" must change the
verdict, which proves the cluster's copy is the one used.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from manifests.validate import crd_documents
from ops.cli import main as rlkit
from tests.support.fakes import FakeKubectl
from tests.support import artifacts

CONTEXT = "arn:aws:eks:us-east-1:123456789012:cluster/rr-cluster"


def _parsed_crd(path: Path) -> dict:
    # 1.4 MB of YAML: parsed once per process (the validator's cache), copied per test.
    return next(d for d in crd_documents(path.read_bytes()) if d)


@pytest.fixture
def rayjob_crd() -> dict:
    path = artifacts.require("kuberay-v1.7.0", what="the KubeRay v1.7.0 RayJob CRD (needed to test "
                             "--from-cluster)") / "ray.io_rayjobs.yaml"
    crd = copy.deepcopy(_parsed_crd(path))
    # What `kubectl get crd -o json` adds to the applied object.
    crd["metadata"].update({"uid": "0f8e2c1a-0000-4000-8000-000000000001",
                            "resourceVersion": "4242", "generation": 1,
                            "creationTimestamp": "2026-11-30T10:00:00Z"})
    crd["status"] = {"acceptedNames": crd["spec"]["names"], "storedVersions": ["v1"],
                     "conditions": [{"type": "Established", "status": "True",
                                     "reason": "InitialNamesAccepted"}]}
    return crd


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    fake = FakeKubectl(tmp_path, monkeypatch)
    fake.rule(["config", "current-context"], stdout=CONTEXT + "\n")
    return fake


def serve(kubectl, tmp_path: Path, crd: dict) -> None:
    path = tmp_path / "served-crd.json"
    path.write_text(json.dumps(crd))
    kubectl.rule(["get", "crd", "rayjobs.ray.io"], stdout_file=str(path))


def render(tmp_path: Path, *flags: str) -> int:
    config = tmp_path / "kit.yaml"
    config.write_text("name: rr\n")
    return rlkit(["render", "--config", str(config), "--out", str(tmp_path / "out"),
                  "--from-cluster", *flags])


def test_rayjob_is_validated_against_the_clusters_crd(tmp_path, kubectl, rayjob_crd, capsys):
    serve(kubectl, tmp_path, rayjob_crd)
    assert render(tmp_path) == 0
    out = capsys.readouterr().out
    assert f"CRD schemas from the cluster of kubectl context {CONTEXT}: rayjobs.ray.io" in out
    rayjob = [l for l in out.splitlines() if ": RayJob " in l]
    assert len(rayjob) == 1 and rayjob[0].startswith("OK")
    assert rayjob[0].endswith("[CRD rayjobs.ray.io.json (v1)]")
    assert ["get", "crd", "rayjobs.ray.io", "-o", "json", "--ignore-not-found"] in kubectl.calls
    assert ", 0 NOT validated (no schema)" in out and (tmp_path / "out" / "rl-job").is_dir()


def test_a_crd_without_a_field_the_job_uses_fails_the_render(tmp_path, kubectl, rayjob_crd,
                                                             capsys):
    older = copy.deepcopy(rayjob_crd)
    spec = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    del spec["properties"]["entrypoint"]  # an operator version without this field
    serve(kubectl, tmp_path, older)
    assert render(tmp_path) == 1
    captured = capsys.readouterr()
    assert "'entrypoint' was unexpected" in captured.out
    assert "Nothing written" in captured.err and not (tmp_path / "out").exists()


def test_a_kind_the_cluster_has_no_crd_for_is_said_to_be_not_validated(tmp_path, kubectl,
                                                                       capsys):
    assert render(tmp_path) == 0  # not strict outside CI: written, and said plainly
    captured = capsys.readouterr()
    assert (f"NOT VALIDATED: the cluster of kubectl context {CONTEXT} has no "
            "CustomResourceDefinition rayjobs.ray.io") in captured.out
    assert (f"NOT VALIDATED: no CustomResourceDefinition for RayJob (ray.io/v1) on the cluster "
            f"of kubectl context {CONTEXT}") in captured.out
    assert "object(s) NOT validated" in captured.err


def test_in_ci_a_missing_crd_on_the_cluster_is_an_error(tmp_path, kubectl, monkeypatch, capsys):
    monkeypatch.setenv("CI", "true")
    assert render(tmp_path) == 1
    assert not (tmp_path / "out").exists()


def test_an_unreachable_cluster_writes_nothing(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "crd"], rc=1, stderr="Unable to connect to the server: dial tcp: i/o "
                 "timeout\n")
    assert render(tmp_path) == 2
    err = capsys.readouterr().err
    assert "could not read the CRDs from the cluster" in err and "i/o timeout" in err
    assert not (tmp_path / "out").exists()


def test_from_cluster_and_crd_dir_exclude_each_other(tmp_path, capsys):
    assert render(tmp_path, "--crd-dir", str(tmp_path)) == 2
    assert "cannot be combined with --crd-dir or --no-validate" in capsys.readouterr().err
