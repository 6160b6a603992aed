"""Offline validation (kubernetes-validate + KubeRay CRD schemas) and the render/validate CLI."""

from __future__ import annotations

import argparse
import copy
import functools
import json
from pathlib import Path

import jsonschema
import pytest

from infra import names
from infra.config import load_config
from infra.names import OutputKeys
from infra.addons import addon
from infra.versions import KUBERNETES_VERSIONS
from manifests import build_context, placeholder_outputs, render
from manifests.validate import crd_to_jsonschema, schema_version_for, validate_objects
from ops import cli, render_cmd, validate_cmd, validation
from tests.support import artifacts
from tests.support import REPO_ROOT

EXAMPLES = sorted(p.stem for p in (REPO_ROOT / "examples").glob("*.yaml"))


KUBERAY = addon("kuberay_operator").version
DRA_CRDS = f"dra-driver-nvidia-gpu-v{addon('dra_driver').version}"


@pytest.fixture(scope="module")
def crd_dir() -> Path:
    """The folder holding kuberay-v<pinned> and the DRA driver's CRDs (ComputeDomain)
    (../shared/crds, else the artifact cache): required in CI, an explained skip elsewhere."""
    artifacts.require(f"kuberay-v{KUBERAY}", what=f"KubeRay {KUBERAY} CRD schemas")
    artifacts.require(DRA_CRDS, what="NVIDIA DRA driver CRD schemas")
    return artifacts.common_root((f"kuberay-v{KUBERAY}", DRA_CRDS), "crds")


def test_default_crd_dir_is_the_pinned_operators(crd_dir):
    # rlkit validate finds them through the same locator (../shared, then the verified cache)
    assert validation.default_crd_dir() == (crd_dir, None)


@functools.cache
def rendered(name: str):
    cfg = load_config(REPO_ROOT / "examples" / f"{name}.yaml")
    return cfg, tuple(render(build_context(cfg, placeholder_outputs(cfg))))


def rayjob(name: str = "default") -> dict:
    return copy.deepcopy(next(f.obj for f in rendered(name)[1] if f.kind == "RayJob"))


def check(obj, crd_dir, strict=True, version="1.34"):
    return validate_objects([("x.yaml", obj)], kubernetes_version=version, crd_dir=crd_dir,
                            strict=strict).results[0]


# --- every rendered object passes ---------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_rendered_object_is_valid(name, crd_dir):
    cfg, files = rendered(name)
    report = validate_objects([(f.path, f.obj) for f in files],
                              kubernetes_version=cfg.kubernetes_version, crd_dir=crd_dir,
                              strict=True)
    assert report.ok, report.format()
    checked = {r.kind: r.checked_with for r in report.results}
    assert checked["RayJob"] == "CRD ray.io_rayjobs.yaml (v1)"
    assert checked["Job"] == f"kubernetes-validate {cfg.kubernetes_version} strict"
    for kind in ("PersistentVolume", "PersistentVolumeClaim", "NetworkPolicy"):
        assert checked[kind] == f"kubernetes-validate {cfg.kubernetes_version} strict"
    assert not report.skipped


def test_broken_shared_fs_mount_in_a_worker_fails_the_crd(crd_dir):
    """The workers' pod template is checked against KubeRay's CRD, not just passed through."""
    import copy

    cfg, files = rendered("default")
    rayjob = copy.deepcopy(next(f.obj for f in files if f.kind == "RayJob"))
    [volume] = [v for v in _spec_of(rayjob, "worker")["volumes"] if "persistentVolumeClaim" in v]
    del volume["persistentVolumeClaim"]["claimName"]  # required by the PodSpec schema
    report = validate_objects([("rl-job/04-rayjob.yaml", rayjob)],
                              kubernetes_version=cfg.kubernetes_version, crd_dir=crd_dir,
                              strict=True)
    assert not report.ok
    assert "claimName" in report.format()


def _spec_of(obj: dict, where: str) -> dict:
    if where == "worker":
        return obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    if where == "submitter":
        return obj["spec"]["submitterPodTemplate"]["spec"]
    return obj["spec"]["template"]["spec"]  # a fabric Job


@pytest.mark.parametrize("kind,where", [("RayJob", "worker"), ("RayJob", "submitter"),
                                        ("Job", "fabric")])
def test_the_credential_field_is_checked_by_the_real_schemas(kind, where, crd_dir):
    """automountServiceAccountToken is checked where the API server checks it (KubeRay's CRD,
    the Kubernetes schema): a misspelt key or a string "false" would be refused, so the rendered
    ones are proven well-formed, not passed through."""
    cfg, files = rendered("default")
    original = next(f.obj for f in files if f.kind == kind)
    spec = _spec_of(original, where)
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    for break_it in ("type", "name"):
        obj = copy.deepcopy(original)
        spec = _spec_of(obj, where)
        if break_it == "type":
            spec["automountServiceAccountToken"] = "false"
        else:
            spec["automountServiceAccountTokens"] = spec.pop("automountServiceAccountToken")
        result = check(obj, crd_dir, version=cfg.kubernetes_version)
        assert result.status == "error", (break_it, result.messages)
        assert "automountServiceAccountToken" in " ".join(result.messages)


def test_every_kit_kubernetes_version_has_exact_schemas():
    for version in KUBERNETES_VERSIONS:
        assert schema_version_for(version) == (version, None)


def test_newer_kubernetes_falls_back_with_a_note_and_older_is_refused():
    version, note = schema_version_for("1.99")
    assert version == "1.37" and "no schemas for Kubernetes 1.99" in note
    with pytest.raises(ValueError, match="nothing for Kubernetes 1.20"):
        schema_version_for("1.20")


# --- the validator catches what the API server would reject -------------------------------------


def test_unknown_field_in_a_builtin_kind_is_an_error(crd_dir):
    _, files = rendered("default")
    job = copy.deepcopy(next(f.obj for f in files if f.kind == "Job"))
    job["spec"]["template"]["spec"]["containers"][0]["gpus"] = 8
    result = check(job, crd_dir)
    assert result.status == "error"
    assert result.messages == [
        "spec.template.spec.containers.0: Additional properties are not allowed "
        "('gpus' was unexpected)"]


def test_unknown_field_in_the_rayjob_is_an_error(crd_dir):
    obj = rayjob()
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["numGpus"] = 8
    result = check(obj, crd_dir)
    assert result.messages == [
        "spec.rayClusterSpec.workerGroupSpecs.0: Additional properties are not allowed "
        "('numGpus' was unexpected)"]


def test_wrong_type_and_missing_required_field_in_the_rayjob(crd_dir):
    obj = rayjob()
    group = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    group["replicas"] = "two"
    del group["groupName"]
    result = check(obj, crd_dir)
    assert result.messages == [
        "spec.rayClusterSpec.workerGroupSpecs.0: 'groupName' is a required property",
        "spec.rayClusterSpec.workerGroupSpecs.0.replicas: 'two' is not of type 'integer'"]


def test_required_fields_with_defaults_may_be_omitted(crd_dir):
    obj = rayjob()  # minReplicas/maxReplicas are required in the CRD but default to 0/MaxInt32
    group = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    del group["minReplicas"], group["maxReplicas"]
    assert check(obj, crd_dir).status == "ok"


def test_custom_resource_metadata_is_checked_as_object_meta(crd_dir):
    obj = rayjob()
    obj["metadata"]["labels"]["replicas"] = 2
    assert check(obj, crd_dir).messages == [
        "metadata.labels.replicas: 2 is not of type 'string', 'null' (ObjectMeta)"]


def test_unserved_crd_version_is_an_error(crd_dir):
    obj = rayjob()
    obj["apiVersion"] = "ray.io/v2"
    assert check(obj, crd_dir).messages[0].endswith(
        "does not serve version v2 (served: v1, v1alpha1)")


def test_service_names_must_be_dns_1035_labels(crd_dir):
    _, files = rendered("default")
    service = copy.deepcopy(next(f.obj for f in files if f.kind == "Service"))
    service["metadata"]["name"] = "1-fabric"
    assert check(service, crd_dir).messages == [
        "metadata.name: '1-fabric' is not a DNS-1035 label (Service names start with a letter, "
        "then lowercase letters, digits and '-', at most 63 characters)"]


# --- a kind without a schema is never a silent pass ---------------------------------------------


def test_kind_without_schema_is_an_explained_skip_outside_ci():
    result = check(rayjob(), crd_dir=None, strict=False)
    assert result.status == "skipped"
    assert result.messages == [
        "NOT VALIDATED: no schema for RayJob (ray.io/v1): kubernetes-validate knows only built-in "
        "kinds and no CRD directory was given. To validate it, pass --crd-dir with a directory "
        "holding the operator's CustomResourceDefinition YAML, or run `python "
        "scripts/fetch_artifacts.py` (it puts the pinned KubeRay CRDs in the artifact cache, where "
        "rlkit looks after ../shared/crds)"]


def test_kind_without_schema_is_an_error_in_strict_mode(tmp_path):
    result = check(rayjob(), crd_dir=tmp_path, strict=True)  # a CRD dir without KubeRay's CRDs
    assert result.status == "error"
    assert result.messages[0].startswith(
        f"no CustomResourceDefinition for RayJob (ray.io/v1) under {tmp_path}. Fix: pass --crd-dir")


def test_a_crd_file_reads_the_same_as_json_and_a_broken_one_is_named(crd_dir, tmp_path):
    """kubectl writes CRDs as JSON (`rlkit render` from the cluster): read as JSON, they give the
    schemas their YAML gives; a file that is neither is a problem naming the file."""
    import yaml

    from manifests.validate import load_crds

    source = crd_dir / DRA_CRDS / "resource.nvidia.com_computedomains.yaml"
    (tmp_path / "computedomains.json").write_text(json.dumps(yaml.safe_load(source.read_text())))
    (tmp_path / "broken.json").write_text('{"kind": "CustomResourceDefinition", ')
    from_json, from_yaml = load_crds(tmp_path), load_crds(source.parent)
    key = ("resource.nvidia.com", "ComputeDomain")
    assert from_json.by_kind[key].keys() == from_yaml.by_kind[key].keys()
    assert [v.schema for v in from_json.by_kind[key].values()] == \
        [v.schema for v in from_yaml.by_kind[key].values()]
    assert len(from_json.problems) == 1
    assert from_json.problems[0].startswith(f"{tmp_path / 'broken.json'}: not valid YAML (")


# --- CRD schema translation ---------------------------------------------------------------------


def test_translation_of_kubernetes_schema_extensions():
    schema = crd_to_jsonschema({
        "type": "object",
        "required": ["name", "port", "mode"],
        "properties": {
            "name": {"type": "string"},
            "port": {"x-kubernetes-int-or-string": True},
            "mode": {"type": "string", "default": "fast"},
            "note": {"type": "string", "nullable": True},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                     "properties": {"known": {"type": "integer"}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    })
    v = jsonschema.Draft4Validator(schema)
    ok = {"name": "a", "port": "http", "note": None, "free": {"known": 1, "extra": True},
          "labels": {"a": "b"}}
    assert list(v.iter_errors(ok)) == []
    assert v.is_valid({**ok, "port": 8080})
    assert not v.is_valid({**ok, "port": 1.5})
    assert not v.is_valid({**ok, "surprise": 1})  # strict: unknown fields rejected
    assert not v.is_valid({k: x for k, x in ok.items() if k != "name"})
    assert not v.is_valid({**ok, "labels": {"a": 1}})


# --- CLI ----------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlkit")
    sub = p.add_subparsers(dest="command", required=True)
    render_cmd.register(sub)
    validate_cmd.register(sub)
    return p


def run(*argv: str) -> int:
    args = parser().parse_args(list(argv))
    return args.func(args)


def test_cli_lists_the_commands():
    assert {"ops.render_cmd", "ops.validate_cmd"} <= set(cli.COMMAND_MODULES)


def test_cli_render_writes_validates_and_prints_the_tree(tmp_path, crd_dir, capsys):
    cfg = load_config(REPO_ROOT / "examples" / "p5-2node.yaml")
    stacks = names.stack_names(cfg.name)
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps({
        stacks["data"]: {OutputKeys.BUCKET_NAME: "p5-team-data",
                         OutputKeys.ECR_REPOSITORY_URI: "123456789012.dkr.ecr.us-west-2.amazonaws.com/t",
                         OutputKeys.TRAINER_ROLE_ARN: "arn:aws:iam::123456789012:role/t"},
        stacks["cluster"]: {OutputKeys.CLUSTER_NAME: "p5-team", OutputKeys.REGION: "us-west-2",
                            OutputKeys.TRAINER_NAMESPACE: names.TRAINER_NAMESPACE,
                            OutputKeys.TRAINER_SERVICE_ACCOUNT: names.TRAINER_SERVICE_ACCOUNT},
        names.gpu_stack_name(cfg.name, "p5"): {OutputKeys.NODEGROUP_NAME: "p5-team-p5"},
        stacks["storage"]: {OutputKeys.SHARED_FS_ID: "fs-0123456789abcdef0",
                            OutputKeys.SHARED_FS_DNS_NAME:
                                "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
                            OutputKeys.SHARED_FS_MOUNT_NAME: "abcdefgh"},
    }))
    out = tmp_path / "out"
    code = run("render", "--config", str(REPO_ROOT / "examples" / "p5-2node.yaml"),
               "--outputs", str(outputs), "--out", str(out), "--crd-dir", str(crd_dir), "--strict")
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "├── rl-job/" in printed and "04-rayjob.yaml" in printed
    # the PodDisruptionBudget (policy/v1) is validated like the rest
    assert "15 object(s): 15 valid, 0 invalid, 0 NOT validated (no schema)" in printed
    assert f"kubectl apply -f {out}/rl-job" in printed
    assert (out / "rl-job" / "04-rayjob.yaml").is_file()


def test_cli_render_reports_a_bad_config(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("training:\n  extra_env: {RDMAV_FORK_SAFE: '1'}\n")
    code = run("render", "--config", str(config), "--out", str(tmp_path / "out"))
    assert code == 2
    assert "RDMAV_FORK_SAFE" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_validate_fails_in_ci_without_crd_schemas(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert run("render", "--out", str(out), "--no-validate") == 0
    empty = tmp_path / "no-crds"
    empty.mkdir()
    monkeypatch.setenv("CI", "true")
    assert run("validate", str(out), "--crd-dir", str(empty)) == 1
    captured = capsys.readouterr()
    assert "ERROR   rl-job/04-rayjob.yaml: RayJob" in captured.out
    monkeypatch.setenv("CI", "false")
    assert run("validate", str(out), "--crd-dir", str(empty)) == 0
    captured = capsys.readouterr()
    assert "SKIPPED rl-job/04-rayjob.yaml: RayJob" in captured.out
    assert "1 NOT validated" in captured.out
    assert "warning: 1 object(s) NOT validated" in captured.err


def test_cli_validate_reports_an_invalid_file(tmp_path, crd_dir, capsys):
    bad = tmp_path / "job.yaml"
    bad.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\n"
                   "spec: {template: {spec: {containers: [{name: a, image: b, gpu: 1}]}}}\n")
    assert run("validate", str(bad), "--crd-dir", str(crd_dir), "--kubernetes-version", "1.33") == 1
    assert "'gpu' was unexpected" in capsys.readouterr().out


def test_cli_validate_refuses_a_missing_crd_dir(tmp_path, capsys):
    assert run("validate", str(tmp_path), "--crd-dir", str(tmp_path / "nope")) == 2
    assert "no such directory" in capsys.readouterr().err


def test_an_alias_bomb_is_refused_not_expanded(tmp_path):
    from manifests.validate import load_objects
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}]" for i in range(8)]
    (tmp_path / "bomb.yaml").write_text("\n".join(bomb) + "\n")
    objects, broken = load_objects(tmp_path)
    assert objects == []
    assert "YAML aliases are not allowed in manifests" in broken[0].messages[0]
