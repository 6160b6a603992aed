"""CustomResourceDefinitions read from the live cluster, for `rlkit render --from-cluster`.

The rendered custom kinds (RayJob) are validated against the CRDs the cluster really has
installed, not a directory only CI keeps: ``kubectl get crd <plural>.<group> -o json`` for each
custom kind, written as JSON into a directory that manifests/validate.py's CrdIndex reads like
any CRD directory (same openAPIV3Schema translation, same served-version rules). Read-only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from ops.kube import Kubectl


def custom_kinds(objects: Iterable[tuple[str, Any]]) -> list[tuple[str, str]]:
    """(group, kind) of every object whose API group is not a built-in one. Built-in groups are
    the core group, the dot-less ones (apps, batch, ...) and *.k8s.io; a CRD's group always has
    a dot."""
    found = set()
    for _, obj in objects:
        if not isinstance(obj, dict):
            continue
        group, _, _ = str(obj.get("apiVersion", "")).rpartition("/")
        if "." in group and not group.endswith(".k8s.io") and obj.get("kind"):
            found.add((group, str(obj["kind"])))
    return sorted(found)


def crd_name(group: str, kind: str) -> str:
    """The CRD's object name, ``<plural>.<group>``, with the lower-case ``<kind>s`` plural that
    the operators the kit installs use (KubeRay: rayjobs.ray.io, rayclusters.ray.io)."""
    return f"{kind.lower()}s.{group}"


def fetch_crds(kubectl: Kubectl, kinds: list[tuple[str, str]],
               directory: Path) -> tuple[list[str], list[str]]:
    """Write each kind's CRD from the cluster into ``directory``; returns (found, missing) CRD
    names. Raises KubectlError when the cluster cannot be asked."""
    found, missing = [], []
    for group, kind in kinds:
        name = crd_name(group, kind)
        doc = kubectl.get_json(["crd", name])
        if doc is None:
            missing.append(name)
            continue
        (directory / f"{name}.json").write_text(json.dumps(doc))
        found.append(name)
    return found, missing


def context_name(kubectl: Kubectl) -> str:
    """The kubectl context the CRDs come from (--context, else the current one)."""
    if kubectl.context:
        return kubectl.context
    return kubectl.run(["config", "current-context"]).stdout.strip() or "?"
