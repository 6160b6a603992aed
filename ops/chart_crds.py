"""The CustomResourceDefinitions a packaged Helm chart carries in its ``crds/`` folders, and which
of them another version of the chart changes.

Helm applies a chart's ``crds/`` (its own and those of each enabled subchart) only when it first
installs a release; ``helm upgrade`` never adds or updates one (Helm docs, Chart Best Practices,
"Custom Resource Definitions", "Some caveats and explanations": no support for upgrading or
deleting CRDs with Helm).
CDK's Helm handler runs ``helm upgrade --install`` on every deploy after the first, so a deploy
that moves an add-on to another chart version leaves the cluster on the CRDs of the version it was
first installed at. ``ops.preflight_replace.check_chart_version_crds`` uses this module to say so
before the deploy, from the chart archives alone (no cluster access).

A subchart's CRDs count only when Helm would enable the subchart with the kit's values: Helm drops
a disabled dependency before it installs CRDs (the ``condition`` paths of the parent's
``Chart.yaml``, read in order against the parent's values merged over its ``values.yaml``; the
first one that is a boolean decides; none: enabled; ``tags`` decide only where no condition does).
tests/ops/test_preflight_replace.py checks the result against ``helm template --include-crds`` of
the real charts with the kit's values.
A subchart packaged as a ``.tgz`` inside ``charts/`` is not read (none of the kit's charts has
one; ``helm pull --untar`` would not unpack it for the fix's ``kubectl apply`` either).
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import yaml

from ops import artifacts

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML has it: CRDs are MBs


@dataclass(frozen=True)
class ChartCrds:
    """The CRDs one chart archive installs with given values: CRD name -> its document (JSON
    text, keys sorted, so equal text is an equal CRD), and the ``crds/`` folders they are in
    (paths inside the archive, as ``helm pull --untar`` lays them out)."""

    crds: dict[str, str]
    folders: tuple[str, ...]


def locked_chart(archive_name: str) -> Path | None:
    """A chart archive whose checksums match the artifact lock (../shared/charts, then the cache
    ``scripts/fetch_artifacts.py`` fills); None when neither has one (``ops.artifacts``)."""
    return artifacts.locate_by_path(f"charts/{archive_name}")[0]


def _merged(defaults: Any, over: Any) -> Any:
    """``over`` merged into ``defaults`` as Helm coalesces values: maps key by key, else ``over``."""
    if isinstance(defaults, dict) and isinstance(over, dict):
        return {**defaults, **{k: _merged(defaults.get(k), v) for k, v in over.items()}}
    return defaults if over is None else over


def _path_value(values: dict, path: str) -> Any:
    node: Any = values
    for part in path.strip().split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _dependency_enabled(dependency: dict, values: dict) -> bool:
    """Helm's verdict on one ``Chart.yaml`` dependency for these (merged) values."""
    for path in str(dependency.get("condition") or "").split(","):
        if path.strip() and isinstance(found := _path_value(values, path), bool):
            return found
    tags = [(values.get("tags") or {}).get(t) for t in dependency.get("tags") or []]
    if any(t is True for t in tags):
        return True
    return not any(t is False for t in tags)


def _subchart_values(dependency: dict, values: dict) -> dict:
    scoped = values.get(dependency.get("alias") or dependency["name"])
    return scoped if isinstance(scoped, dict) else {}


def _chart_crds(files: dict[str, bytes], root: str, user_values: dict,
                found: dict[str, str], folders: list[str]) -> None:
    """Add the CRDs of the chart at ``root`` (a folder inside the archive) and of its enabled
    subcharts to ``found`` and ``folders``."""
    meta = yaml.safe_load(files.get(f"{root}/Chart.yaml", b"") or b"{}") or {}
    defaults = yaml.safe_load(files.get(f"{root}/values.yaml", b"") or b"{}") or {}
    values = _merged(defaults, user_values)
    crd_files = sorted(p for p in files if p.startswith(f"{root}/crds/"))
    if crd_files:
        folders.append(f"{root}/crds/")
    for path in crd_files:
        for doc in yaml.load_all(files[path], Loader=_LOADER):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                found[doc["metadata"]["name"]] = json.dumps(doc, sort_keys=True)
    subcharts = {p[len(root) + len("/charts/"):].split("/", 1)[0] for p in files
                 if p.startswith(f"{root}/charts/") and p.count("/") > root.count("/") + 2}
    for name in sorted(subcharts):
        # A dependency is listed by chart name (its folder); an alias only renames its values.
        listed = [d for d in meta.get("dependencies") or [] if d.get("name") == name]
        enabled = [d for d in listed if _dependency_enabled(d, values)]
        if listed and not enabled:
            continue
        scoped = _subchart_values(enabled[0], values) if enabled else values.get(name) or {}
        _chart_crds(files, f"{root}/charts/{name}", scoped, found, folders)


@lru_cache(maxsize=8)
def _archive_files(path: str, size: int, mtime_ns: int) -> tuple[str, dict[str, bytes]]:
    """(the chart's folder, {path: bytes} of its Chart.yaml, values.yaml and crds/ files at any
    depth) of a chart archive; cached by file identity (a preflight reads each chart once)."""
    wanted = ("/Chart.yaml", "/values.yaml")
    files: dict[str, bytes] = {}
    with tarfile.open(path, mode="r:gz") as tar:
        for member in tar:
            name = member.name.lstrip("./")
            if member.isfile() and ("/crds/" in name or name.endswith(wanted)):
                files[name] = tar.extractfile(member).read()
    roots = {p.split("/", 1)[0] for p in files}
    if len(roots) != 1:
        raise ValueError(f"{path} is not one packaged chart (top folders: {sorted(roots)})")
    return roots.pop(), files


def chart_crds(archive: Path, values: dict) -> ChartCrds:
    """The CRDs Helm would install from ``archive`` with ``values`` (the kit's, merged over the
    chart's defaults). Raises ValueError (or a tar/YAML error) on an archive that is no chart."""
    stat = archive.stat()
    root, files = _archive_files(str(archive), stat.st_size, stat.st_mtime_ns)
    found: dict[str, str] = {}
    folders: list[str] = []
    _chart_crds(files, root, values, found, folders)
    return ChartCrds(found, tuple(folders))


@dataclass(frozen=True)
class CrdChange:
    """What moving a release from ``deployed`` to ``wanted`` does to the chart's CRDs."""

    wanted: ChartCrds
    # CRDs of the wanted version that the deployed version lacks or defines otherwise (all of
    # them when the deployed version's archive is not at hand), sorted.
    changed: tuple[str, ...]
    deployed_read: bool  # whether the deployed version's archive was compared


def crd_change(chart: str, deployed_version: str, wanted_version: str, values: dict,
               locate: Callable[[str], Path | None] = locked_chart,
               deployed_chart: str | None = None) -> CrdChange | None:
    """Compare the CRDs of chart ``chart`` at the two versions (the deployed one under the name
    ``deployed_chart`` where the chart was renamed), both with ``values``; None when the wanted
    version's archive cannot be found (``locate`` by archive name ``<chart>-<version>.tgz``)."""
    archive = locate(f"{chart}-{wanted_version}.tgz")
    if archive is None:
        return None
    wanted = chart_crds(archive, values)
    before = locate(f"{deployed_chart or chart}-{deployed_version}.tgz") if wanted.crds else None
    old = chart_crds(before, values).crds if before is not None else {}
    changed = tuple(sorted(n for n, doc in wanted.crds.items() if old.get(n) != doc))
    return CrdChange(wanted, changed, before is not None)

