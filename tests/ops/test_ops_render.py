"""`rlkit render` writes nothing until the tree validates, and no user string reaches the manifest
text unescaped (issue 12)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from infra.config import load_config
from ops.cli import main as rlkit
from tests.support import YAML_LOADER
from tests.support.outputs import real_outputs


def write_config(tmp_path: Path) -> Path:
    path = tmp_path / "kit.yaml"
    path.write_text("name: rr\n")
    return path


def all_objects(out: Path) -> dict[str, dict]:
    return {str(p.relative_to(out)): yaml.load(p.read_text(), Loader=YAML_LOADER)
            for p in sorted(out.rglob("*.yaml"))}


def test_newline_in_the_outputs_path_cannot_inject_keys(tmp_path, capsys):
    config = write_config(tmp_path)
    cfg = load_config(config)
    plain = tmp_path / "plain" / "cdk-outputs.json"
    evil_dir = tmp_path / "x\ndata:\n  injected: pwned\nmetadata:\n  name: evil\n#"
    for path in (plain, evil_dir / "cdk-outputs.json"):
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(real_outputs(cfg)))
    assert rlkit(["render", "--config", str(config), "--outputs", str(plain),
                  "--out", str(tmp_path / "a"), "--no-validate"]) == 0
    assert rlkit(["render", "--config", str(config), "--outputs",
                  str(evil_dir / "cdk-outputs.json"), "--out", str(tmp_path / "b"),
                  "--no-validate"]) == 0
    a, b = all_objects(tmp_path / "a"), all_objects(tmp_path / "b")
    assert a.keys() == b.keys()
    for name in a:
        # Only the annotation naming the outputs file may differ; no key, no name changes.
        assert _without_origin(a[name]) == _without_origin(b[name]), name
    configmap = b["rl-job/00-run-config.yaml"]
    assert list(configmap["data"]) == ["run.yaml"] and configmap["metadata"]["name"] != "evil"
    text = (tmp_path / "b" / "rl-job" / "00-run-config.yaml").read_text()
    assert "\\ndata:\\n  injected: pwned" in text  # escaped, kept readable in the comment


def _without_origin(obj: dict) -> dict:
    obj = json.loads(json.dumps(obj))
    for meta in _metas(obj):
        for key in list((meta.get("annotations") or {})):
            if "outputs" in key:
                del meta["annotations"][key]
    return obj


def _metas(node):
    if isinstance(node, dict):
        if isinstance(node.get("metadata"), dict):
            yield node["metadata"]
        for value in node.values():
            yield from _metas(value)
    elif isinstance(node, list):
        for value in node:
            yield from _metas(value)


def test_failed_validation_writes_nothing(tmp_path, capsys):
    config = write_config(tmp_path)
    out = tmp_path / "out"
    empty_crds = tmp_path / "crds"
    empty_crds.mkdir()
    # --strict with a CRD directory that lacks RayJob's schema: validation fails.
    code = rlkit(["render", "--config", str(config), "--out", str(out), "--crd-dir",
                  str(empty_crds), "--strict"])
    assert code == 1
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crds", "kit.yaml"]


def test_failed_validation_keeps_the_previous_tree(tmp_path, capsys):
    config = write_config(tmp_path)
    out = tmp_path / "out"
    assert rlkit(["render", "--config", str(config), "--out", str(out), "--no-validate"]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (tmp_path / "crds").mkdir()
    config.write_text("name: rr\ntraining: {run_name: other-run}\n")
    code = rlkit(["render", "--config", str(config), "--out", str(out), "--crd-dir",
                  str(tmp_path / "crds"), "--strict"])
    assert code == 1
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crds", "kit.yaml", "out"]


def test_successful_render_replaces_the_tree_and_keeps_foreign_files(tmp_path, capsys):
    config = write_config(tmp_path)
    out = tmp_path / "out"
    assert rlkit(["render", "--config", str(config), "--out", str(out), "--no-validate"]) == 0
    (out / "mine.yaml").write_text("kind: ConfigMap\n")
    config.write_text("name: rr\ntraining: {run_name: other-run}\n")
    assert rlkit(["render", "--config", str(config), "--out", str(out), "--no-validate"]) == 0
    assert (out / "mine.yaml").read_text() == "kind: ConfigMap\n"
    rayjob = yaml.safe_load((out / "rl-job" / "04-rayjob.yaml").read_text())
    assert rayjob["metadata"]["name"] == "other-run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kit.yaml", "out"]


def test_render_warns_when_the_instance_facts_are_unverified(tmp_path, capsys, monkeypatch):
    from dataclasses import replace

    from infra import catalog

    config = write_config(tmp_path)
    group = next(iter(load_config(config).gpu_node_groups.values()))
    entry = catalog.INSTANCE_TYPES[group.instance_type]
    monkeypatch.setitem(catalog.INSTANCE_TYPES, group.instance_type,
                        replace(entry, facts_verified=False, note="card layout inferred"))
    assert rlkit(["render", "--config", str(config), "--out", str(tmp_path / "a"),
                  "--no-validate"]) == 0
    assert (f"WARNING: the catalog's facts for {group.instance_type} are not verified: card "
            "layout inferred. Fix: after deploying, run `rlkit gate`") in capsys.readouterr().err
