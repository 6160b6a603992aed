"""Validating a rendered manifest tree offline: which CRD schemas to use, strictness, the report.

Built-in kinds go through kubernetes-validate (strict) for the cluster's Kubernetes version;
custom kinds (RayJob, RayCluster) through CRD schemas: --crd-dir, else the locked copy of the
pinned operator's CRDs (``ops.artifacts``: ../shared/crds next to the repository, where CI keeps
them, then the verified artifact cache `scripts/fetch_artifacts.py` fills), or those installed on
the cluster kubectl points at (``crds_from_cluster``, for `rlkit render --from-cluster`). The
report says which, and where that choice came from.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from infra.addons import addon
from manifests.validate import ValidationReport, load_objects, validate_path
from ops import artifacts
from ops.cluster_crds import context_name, custom_kinds, fetch_crds
from ops.kube import Kubectl, KubectlError

SHARED_CRDS = artifacts.SHARED / "crds"  # the layout CI and dev machines use


def default_crd_dir() -> tuple[Path | None, str | None]:
    """The CRDs of the KubeRay operator version the kit installs, and a note when not exact.

    The locked kuberay-v<pinned version> CRDs, in ../shared or the verified artifact cache
    (``ops.artifacts.locate``), or the folder holding them and the pinned DRA driver's CRDs
    (ComputeDomain, rendered for UltraServers) when it holds nothing else; else ../shared/crds as a whole (with a note: the schemas may
    belong to another operator version); else nothing, with a note naming the fix.
    """
    version = addon("kuberay_operator").version
    name = f"kuberay-v{version}"
    found, why = artifacts.locate(name)
    if found is not None:
        dra, _ = artifacts.locate(f"dra-driver-nvidia-gpu-v{addon('dra_driver').version}")
        both = {found.name, dra.name} if dra is not None and dra.parent == found.parent else None
        if both and {p.name for p in found.parent.iterdir() if p.is_dir()} == both:
            return found.parent, None
        return found, None
    if SHARED_CRDS.is_dir():
        return SHARED_CRDS, (f"no verified {name} CRDs for the pinned KubeRay operator {version} "
                             f"({'; '.join(why)}); validating with whatever CRDs are in "
                             f"{SHARED_CRDS}")
    return None, (f"no CRD schemas for the pinned KubeRay operator {version} ({'; '.join(why)}). "
                  f"Fix: pass --crd-dir DIR, or {artifacts.FETCH_HINT}")


def strict_from_env(flag: bool) -> bool:
    """--strict, or CI=true: a kind without a schema is then an error, not a skip."""
    return flag or os.environ.get("CI", "").lower() == "true"


def resolve_crd_dir(args: argparse.Namespace) -> tuple[Path | None, str | None]:
    """The CRD directory to use, or an error message for a --crd-dir that does not exist."""
    if args.crd_dir is not None:
        if not args.crd_dir.is_dir():
            return None, (f"--crd-dir {args.crd_dir}: no such directory (it should hold the "
                          "operator's CRD YAML, e.g. ../shared/crds)")
        args.crd_origin = "--crd-dir"
        return args.crd_dir, None
    crd_dir, note = default_crd_dir()
    if note:
        print(f"note: {note}")
    args.crd_origin = ("the verified artifact cache" if crd_dir is not None and
                       not crd_dir.is_relative_to(artifacts.SHARED) else
                       "../shared beside the repository" if crd_dir is not None else None)
    return crd_dir, None


def report_document(report: ValidationReport) -> dict:
    """The shape of `rlkit validate -o json|yaml` (and of `validation` in `rlkit render -o ...`)."""
    return {"ok": report.ok, "kubernetes_version": report.kubernetes_version,
            "crd_source": report.crd_source or (str(report.crd_dir) if report.crd_dir else None),
            "strict": report.strict, "summary": report.summary(),
            "objects": [{"source": r.source, "kind": r.kind, "name": r.name, "status": r.status,
                         "checked_with": r.checked_with, "messages": r.messages}
                        for r in report.results], "notes": report.notes}


def run_validation(path: Path, args: argparse.Namespace, kubernetes_version: str, *,
                   rendered: bool = False) -> int:
    """Validate ``path`` and print the report; 0 = valid, 1 = invalid, 2 = could not run. The
    report is kept in ``args.validation_report`` (for -o json|yaml). ``rendered``: ``path`` is
    what `rlkit render` just wrote (read with the fast loader)."""
    crd_dir, problem = resolve_crd_dir(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    strict = strict_from_env(args.strict)
    origin = getattr(args, "crd_origin", None)
    source = getattr(args, "crd_source", None) or (
        f"{crd_dir} (from {origin})" if crd_dir is not None and origin else None)
    try:
        report: ValidationReport = validate_path(
            path, kubernetes_version=kubernetes_version, crd_dir=crd_dir, strict=strict,
            crd_source=source, trusted=rendered)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args.validation_report = report
    print(report.format())
    if not report.ok:
        print(f"validation FAILED: {len(report.errors)} object(s) invalid", file=sys.stderr)
        return 1
    if report.skipped:
        print(f"warning: {len(report.skipped)} object(s) NOT validated (see above)",
              file=sys.stderr)
    return 0


def crds_from_cluster(staged: Path, directory: Path, args: argparse.Namespace) -> bool:
    """Fetch the CRDs of the rendered custom kinds into ``directory`` and point the validation
    at them; False (after printing the error) when the cluster cannot be asked."""
    kubectl = Kubectl(context=args.context)
    kinds = custom_kinds(load_objects(staged, trusted=True)[0])
    try:
        context = context_name(kubectl)
        found, missing = fetch_crds(kubectl, kinds, directory)
    except KubectlError as err:
        print(f"error: could not read the CRDs from the cluster: {err}", file=sys.stderr)
        return False
    where = f"the cluster of kubectl context {context}"
    print(f"CRD schemas from {where}: {', '.join(found) or 'none'}")
    for name in missing:
        print(f"NOT VALIDATED: {where} has no CustomResourceDefinition {name}, so its kind is "
              "not validated (below). Fix: install the operator that defines it (the cluster "
              "stack installs KubeRay), check the context, or pass --crd-dir instead.")
    args.crd_dir, args.crd_source = directory, where
    return True
