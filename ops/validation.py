"""Validating a rendered manifest tree offline: which CRD schemas to use, strictness, the report.

Built-in kinds go through kubernetes-validate (strict) for the cluster's Kubernetes version;
custom kinds (RayJob, RayCluster) through CRD schemas: --crd-dir, else ../shared/crds next to the
repository (where CI keeps them), or those installed on the cluster kubectl points at
(``crds_from_cluster``, for `rlkit render --from-cluster`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from infra.addons import addon
from manifests.validate import ValidationReport, load_objects, validate_path
from ops.cluster_crds import context_name, custom_kinds, fetch_crds
from ops.kube import Kubectl, KubectlError

REPO_ROOT = Path(__file__).resolve().parents[1]


SHARED_CRDS = REPO_ROOT.parent / "shared" / "crds"  # the layout CI and dev machines use


def default_crd_dir() -> tuple[Path | None, str | None]:
    """The CRDs of the KubeRay operator version the kit installs, and a note when not exact.

    ../shared/crds when it holds exactly kuberay-v<pinned> and the DRA driver's
    dra-driver-nvidia-gpu-v<pinned> (ComputeDomain); else ../shared/crds/kuberay-v<pinned version>
    when it exists; else ../shared/crds as a whole
    (with a note: the schemas may belong to another operator version); else nothing.
    """
    version = addon("kuberay_operator").version
    exact = SHARED_CRDS / f"kuberay-v{version}"
    # With the pinned DRA driver's CRDs beside it (ComputeDomain, rendered for UltraServers),
    # the folder holding both, when it holds nothing else.
    dra = SHARED_CRDS / f"dra-driver-nvidia-gpu-v{addon('dra_driver').version}"
    if exact.is_dir() and dra.is_dir() and \
            {p.name for p in SHARED_CRDS.iterdir() if p.is_dir()} == {exact.name, dra.name}:
        return SHARED_CRDS, None
    if exact.is_dir():
        return exact, None
    if SHARED_CRDS.is_dir():
        return SHARED_CRDS, (f"no {exact.name} under {SHARED_CRDS} for the pinned KubeRay "
                             f"operator {version}; validating with whatever CRDs are there")
    return None, None


def strict_from_env(flag: bool) -> bool:
    """--strict, or CI=true: a kind without a schema is then an error, not a skip."""
    return flag or os.environ.get("CI", "").lower() == "true"


def resolve_crd_dir(args: argparse.Namespace) -> tuple[Path | None, str | None]:
    """The CRD directory to use, or an error message for a --crd-dir that does not exist."""
    if args.crd_dir is not None:
        if not args.crd_dir.is_dir():
            return None, (f"--crd-dir {args.crd_dir}: no such directory (it should hold the "
                          "operator's CRD YAML, e.g. ../shared/crds)")
        return args.crd_dir, None
    crd_dir, note = default_crd_dir()
    if note:
        print(f"note: {note}")
    return crd_dir, None


def run_validation(path: Path, args: argparse.Namespace, kubernetes_version: str) -> int:
    """Validate ``path`` and print the report; 0 = valid, 1 = invalid, 2 = could not run."""
    crd_dir, problem = resolve_crd_dir(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    strict = strict_from_env(args.strict)
    try:
        report: ValidationReport = validate_path(
            path, kubernetes_version=kubernetes_version, crd_dir=crd_dir, strict=strict,
            crd_source=getattr(args, "crd_source", None))
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
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
    kinds = custom_kinds(load_objects(staged)[0])
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
