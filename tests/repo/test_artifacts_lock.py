"""artifacts.lock.json against ../shared, and scripts/fetch_artifacts.py's verification.

In this repository's CI (CI=true, ../shared beside the clone) the lock and the files cannot drift:
every locked artifact is in ../shared with its checksum, and every chart, CRD folder and upstream
tree in ../shared is either locked or listed under ``not_locked`` with a reason. The fetch
script's refusal of a wrong download is checked offline with file:// URLs.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from infra import addons as registry
from tests.support import artifacts

LOCK = artifacts.load_lock()
ENTRIES = artifacts.entries(LOCK)
KINDS = {"chart": "charts", "crds": "crds", "source": "upstream"}


def fetch_script():
    spec = importlib.util.spec_from_file_location(
        "fetch_artifacts", artifacts.REPO_ROOT / "scripts" / "fetch_artifacts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_root() -> Path:
    """../shared: this repository's CI has it (a failure there without it); elsewhere a skip."""
    if not all((artifacts.SHARED / d).is_dir() for d in KINDS.values()):
        message = (f"{artifacts.SHARED} (charts, crds, upstream) is missing: the lock is checked "
                   "against it in this repository's CI only")
        if artifacts.in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return artifacts.SHARED


def drift(lock: dict, shared: Path) -> list[str]:
    """Every difference between ``lock`` and the artifacts in ``shared``."""
    found = []
    for entry in lock["artifacts"]:
        found += artifacts.problems(entry, shared / entry["path"])
    locked = {e["path"] for e in lock["artifacts"]} | set(lock["not_locked"])
    for kind_dir in KINDS.values():
        for path in sorted((shared / kind_dir).iterdir()):
            rel = path.relative_to(shared).as_posix()
            if path.suffix != ".md" and rel not in locked:
                found.append(f"{rel} is in {shared} but neither locked nor listed under not_locked")
    found += [f"not_locked names {rel}, which is not in {shared}" for rel in lock["not_locked"]
              if not (shared / rel).exists()]
    return found


@pytest.mark.external
def test_lock_matches_shared():
    assert drift(LOCK, shared_root()) == []


@pytest.mark.external
def test_a_changed_or_unlocked_file_in_shared_is_drift(tmp_path):
    shared = shared_root()
    copy = tmp_path / "shared"
    for kind_dir in KINDS.values():
        shutil.copytree(shared / kind_dir, copy / kind_dir)
    sglang = copy / ENTRIES["sglang-0.5.16"]["path"]
    (sglang / "server_args.py").write_text((sglang / "server_args.py").read_text() + "\n# edited\n")
    (copy / "upstream" / "deepep-567632d" / "extra.py").write_text("")
    chart = copy / ENTRIES["kuberay-operator-1.7.0"]["path"]
    data = chart.read_bytes()
    chart.write_bytes(data[:200] + bytes([data[200] ^ 1]) + data[201:])  # one bit flipped
    (copy / "charts" / "new-chart-1.0.0.tgz").write_bytes(b"")
    found = drift(LOCK, copy)
    assert any("sglang-0.5.16: tree digest" in f for f in found), found
    assert any("deepep-567632d: extra.py is in" in f for f in found), found
    assert any("kuberay-operator-1.7.0: sha256 of" in f for f in found), found
    assert "charts/new-chart-1.0.0.tgz is in " + str(copy) + " but neither locked nor listed under not_locked" in found
    assert any("kuberay-operator-1.7.0: " in f and "is not a readable .tgz" in f for f in found), found
    assert len(found) == 5, found


def test_every_chart_version_the_kit_accepts_is_locked():
    """A version config validation accepts is rendered by the chart contract tests, so it must be
    fetchable by a fork: locked, with the kit's chart name, version and repository."""
    charts = {(e["chart"], e["version"]): e for e in LOCK["artifacts"] if e["kind"] == "chart"}
    for spec in registry.ADDONS:
        for version in spec.versions:
            entry = charts.get((spec.chart, version))
            assert entry, f"{spec.chart} {version} is not in artifacts.lock.json"
            assert entry["repository"].rstrip("/") == spec.repository.rstrip("/")
            assert entry["path"] == f"charts/{spec.chart}-{version}.tgz"


def test_lock_entries_are_complete():
    for entry in LOCK["artifacts"]:
        assert entry["kind"] in KINDS and entry["path"].startswith(KINDS[entry["kind"]] + "/"), entry["name"]
        if entry["kind"] == "chart" and entry["repository"].startswith("oci://"):
            # An OCI chart (the DRA driver) has no .tgz URL: helm pulls <repository>:<version>.
            assert entry["url"] == f"{entry['repository']}:{entry['version']}"
            assert len(entry["sha256"]) == len(entry["content_sha256"]) == 64
        elif entry["kind"] == "chart":
            assert entry["url"].startswith("https://") and entry["url"].endswith(Path(entry["path"]).name)
            assert len(entry["sha256"]) == len(entry["content_sha256"]) == 64
        else:
            assert len(entry["tree_sha256"]) == 64 and entry["files"] == sorted(entry["files"])
            if "urls" in entry:
                assert sorted(entry["urls"]) == entry["files"]
            else:
                assert entry["url"].startswith("https://github.com/") and entry["url"].endswith(".tar.gz")


def test_tree_digest_is_over_sorted_paths_and_file_hashes(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.py").write_bytes(b"x")
    (tmp_path / "a.txt").write_bytes(b"a")
    sha = {k: hashlib.sha256(v).hexdigest() for k, v in {"a.txt": b"a", "b/x.py": b"x"}.items()}
    expected = hashlib.sha256(f"a.txt\0{sha['a.txt']}\nb/x.py\0{sha['b/x.py']}\n".encode()).hexdigest()
    assert artifacts.tree_digest(tmp_path) == expected


# --- the fetch script, offline: file:// URLs stand in for GitHub and the chart repository ---


def _github_like_archive(tree: dict[str, bytes], path: Path) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for rel, data in tree.items():
            info = tarfile.TarInfo(f"repo-0123abc/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path.as_uri()


def _tree_entry(tree: dict[str, bytes], url: str, keep: list[str]) -> dict:
    files = {rel: hashlib.sha256(tree[rel]).hexdigest() for rel in keep}
    return {"name": "demo-1", "kind": "source", "path": "upstream/demo-1", "url": url,
            "archive_root": "", "files": sorted(keep), "tree_sha256": artifacts.digest_of(files)}


def test_fetch_keeps_only_the_locked_files_and_refuses_a_changed_tree(tmp_path):
    fetch = fetch_script()
    tree = {"pkg/a.py": b"a = 1\n", "pkg/b.py": b"b = 2\n", "README.md": b"not locked\n"}
    entry = _tree_entry(tree, _github_like_archive(tree, tmp_path / "good.tar.gz"), ["pkg/a.py", "pkg/b.py"])
    target = tmp_path / "cache" / entry["path"]
    fetch.fetch_tree(entry, target)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) == [
        "pkg/a.py", "pkg/b.py"]
    assert artifacts.problems(entry, target) == []

    bad = dict(tree, **{"pkg/b.py": b"b = 3\n"})
    entry["url"] = _github_like_archive(bad, tmp_path / "bad.tar.gz")
    other = tmp_path / "cache2" / entry["path"]
    with pytest.raises(fetch.Refused, match="demo-1: tree digest"):
        fetch.fetch_tree(entry, other)
    assert not other.exists()  # nothing half-written is left for the tests to find


def test_fetch_accepts_a_chart_by_content_and_refuses_other_content(tmp_path):
    fetch = fetch_script()
    files = {"demo/Chart.yaml": b"name: demo\nversion: 1.0.0\n", "demo/values.yaml": b"a: 1\n"}
    local = tmp_path / "local.tgz"
    with tarfile.open(local, "w:gz") as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(rel)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    data = local.read_bytes()
    entry = {"name": "demo-1.0.0", "kind": "chart", "path": "charts/demo-1.0.0.tgz", "chart": "demo",
             "version": "1.0.0", "repository": (tmp_path / "no-repo").as_uri(),
             "sha256": hashlib.sha256(data).hexdigest(),
             "content_sha256": artifacts.digest_of(artifacts.archive_files(data))}
    # Same files, other tar and gzip metadata (as a chart repository's own package would have).
    published = tmp_path / "published" / "demo-1.0.0.tgz"
    published.parent.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, body in files.items():
            info = tarfile.TarInfo(rel)
            info.size, info.mtime = len(body), 1_800_000_000
            tar.addfile(info, io.BytesIO(body))
    published.write_bytes(gzip.compress(buf.getvalue(), mtime=1_800_000_000))
    assert hashlib.sha256(published.read_bytes()).hexdigest() != entry["sha256"]
    entry["url"] = published.as_uri()
    target = tmp_path / "cache" / entry["path"]
    assert "content digest matches" in fetch.fetch_chart(entry, target)
    assert target.read_bytes() == published.read_bytes()

    changed = tmp_path / "changed" / "demo-1.0.0.tgz"
    changed.parent.mkdir()
    with tarfile.open(changed, "w:gz") as tar:
        info = tarfile.TarInfo("demo/Chart.yaml")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"x: "))
    entry["url"] = changed.as_uri()
    with pytest.raises(fetch.Refused, match="neither sha256 nor content digest matches"):
        fetch.fetch_chart(entry, tmp_path / "cache3" / entry["path"])
    assert not (tmp_path / "cache3" / entry["path"]).exists()


def test_lock_file_is_valid_json_with_unique_names():
    names = [e["name"] for e in json.loads(artifacts.LOCK_FILE.read_text())["artifacts"]]
    assert len(names) == len(set(names))
