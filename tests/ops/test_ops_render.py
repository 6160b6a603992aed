"""`rlkit render` writes nothing until the tree validates, and no user string reaches the manifest
text unescaped (issue 12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from infra.config import load_config
from ops.cli import main as rlkit
from tests.support import YAML_LOADER
from tests.support.fakes import kubectl, run, run_gate, write_state  # noqa: F401 (a fixture)
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


# --- --out must be a directory of its own: refused before anything is read or written ------------

OUT_FIX = "Fix: pass a directory such as out/rr to --out."
SWEPT = ("the manifests would land among its files and the render would remove any file an "
         "earlier render wrote anywhere under it")


def _out_cases(tmp_path: Path, config: Path) -> dict[str, tuple[Path, str]]:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    return {
        "the config file": (config, f"output directory {config}: is a file, not a directory; "
                            f"rendering there would replace it with a directory of manifests. "
                            f"{OUT_FIX}"),
        "a symbolic link": (link, f"output directory {link}: is a symbolic link (to "
                            f"{tmp_path / 'elsewhere'}); the render swaps in a new directory under "
                            "this name, which would replace the link instead of writing where it "
                            f"points. {OUT_FIX[:-1]}, or the directory the link points to."),
        "the config's directory": (tmp_path, f"output directory {tmp_path}: holds the config file "
                                   f"{config}; {SWEPT}. {OUT_FIX}"),
        "a repository's root": (repo, f"output directory {repo}: is the root of a git repository; "
                                "the manifests would land among its files and the render would "
                                f"remove any file an earlier render wrote anywhere in it. {OUT_FIX}"),
    }


def _snapshot(root: Path) -> dict[str, bytes | str]:
    return {str(p.relative_to(root)): (str(p.readlink()) if p.is_symlink() else
                                       b"" if p.is_dir() else p.read_bytes())
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("case", ["the config file", "a symbolic link", "the config's directory",
                                  "a repository's root"])
def test_render_refuses_an_out_that_is_not_a_directory_of_its_own(tmp_path, capsys, case):
    config = write_config(tmp_path)
    out, message = _out_cases(tmp_path, config)[case]
    before = _snapshot(tmp_path)
    assert rlkit(["render", "--config", str(config), "--out", str(out), "--no-validate"]) == 2
    assert capsys.readouterr().err == f"--out: 1 problem(s):\n  - {message}\n"
    assert _snapshot(tmp_path) == before  # byte for byte, nothing added or removed


def test_render_refuses_the_working_directory(tmp_path, capsys, monkeypatch):
    config = write_config(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert rlkit(["render", "--config", str(config), "--out", ".", "--no-validate"]) == 2
    assert capsys.readouterr().err == (
        f"--out: 1 problem(s):\n  - output directory .: is the working directory or a directory "
        f"above it; {SWEPT}. {OUT_FIX}\n")
    assert list((tmp_path / "work").iterdir()) == []


@pytest.mark.parametrize("command", ["gate", "launch"])
def test_gate_and_launch_refuse_an_out_that_is_a_file(tmp_path, capsys, kubectl, command):
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"keep me\r\n\x00")
    fix = "Fix: pass a directory such as out/gt to --out."
    if command == "gate":
        # --timeout: where --out were not refused, jobs on the fake cluster would never finish
        code = run_gate(tmp_path, "--out", str(notes), "--timeout", "1")
    else:
        write_state(tmp_path)
        code = run(tmp_path, "launch", "--out", str(notes))
    assert code == 2
    assert (f"--out: 1 problem(s):\n  - output directory {notes}: is a file, not a directory; "
            f"rendering there would replace it with a directory of manifests. {fix}\n"
            ) in capsys.readouterr().err
    assert notes.read_bytes() == b"keep me\r\n\x00"
    assert kubectl.calls == []  # refused before anything reached the cluster


def test_render_keeps_the_image_tag_and_says_so(tmp_path, capsys):
    """Offline: no ECR read, so no digest; the tag can name other content later (gate and launch
    pin it: ops/image_digest.py)."""
    out = tmp_path / "out"
    assert rlkit(["render", "--config", str(write_config(tmp_path)), "--out", str(out),
                  "--no-validate"]) == 0
    assert ("Image: placeholder-run-cdk-deploy:0.1.0-nccl (by its tag; `rlkit gate` and `rlkit "
            "launch` pin it to the digest the tag names then)") in capsys.readouterr().out
    assert "@sha256:" not in (out / "rl-job" / "04-rayjob.yaml").read_text()
