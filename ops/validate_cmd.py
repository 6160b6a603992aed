"""`rlkit validate`: check a rendered manifest tree offline against real schemas.

Built-in kinds go through kubernetes-validate (strict) for the cluster's Kubernetes version;
RayJob/RayCluster through the KubeRay CRD schemas in --crd-dir (default: ../shared/crds next to
the repository, where CI keeps them). A kind without a schema fails in CI (CI=true) or with
--strict, and is reported as NOT VALIDATED otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from infra.config import ConfigError, load_config
from infra.versions import DEFAULT_KUBERNETES_VERSION, HELM_CHARTS
from manifests.validate import ValidationReport, validate_path

REPO_ROOT = Path(__file__).resolve().parents[1]


SHARED_CRDS = REPO_ROOT.parent / "shared" / "crds"  # the layout CI and dev machines use


def default_crd_dir() -> tuple[Path | None, str | None]:
    """The CRDs of the KubeRay operator version the kit installs, and a note when not exact.

    ../shared/crds/kuberay-v<pinned version> when it exists; else ../shared/crds as a whole
    (with a note: the schemas may belong to another operator version); else nothing.
    """
    version = HELM_CHARTS["kuberay_operator"]["version"]
    exact = SHARED_CRDS / f"kuberay-v{version}"
    if exact.is_dir():
        return exact, None
    if SHARED_CRDS.is_dir():
        return SHARED_CRDS, (f"no {exact.name} under {SHARED_CRDS} for the pinned KubeRay "
                             f"operator {version}; validating with whatever CRDs are there")
    return None, None


def strict_from_env(flag: bool) -> bool:
    """--strict, or CI=true: a kind without a schema is then an error, not a skip."""
    return flag or os.environ.get("CI", "").lower() == "true"


def add_validation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--crd-dir", type=Path, default=None,
        help="directory of CustomResourceDefinition YAML for custom kinds (RayJob, RayCluster); "
        "default: ../shared/crds/kuberay-v<pinned operator version> next to the repository")
    parser.add_argument(
        "--strict", action="store_true",
        help="a kind without a schema is an error (always on when CI=true)")


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


def _run(args: argparse.Namespace) -> int:
    version = args.kubernetes_version
    if version is None and args.config is not None:
        try:
            version = load_config(args.config).kubernetes_version
        except ConfigError as err:
            print(err, file=sys.stderr)
            return 2
    if version is None:
        version = DEFAULT_KUBERNETES_VERSION
        print(f"Kubernetes version: {version} (the kit default; pass --kubernetes-version or "
              "--config to match your cluster)")
    return run_validation(args.path, args, version)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate", help="validate rendered manifests offline (kubernetes-validate + CRD schemas)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path, help="a rendered tree (out/<name>) or one YAML file")
    version = p.add_mutually_exclusive_group()
    version.add_argument("--kubernetes-version", default=None,
                         help=f"cluster version to validate for (default {DEFAULT_KUBERNETES_VERSION})")
    version.add_argument("--config", type=Path, default=None,
                         help="take the Kubernetes version from this kit config")
    add_validation_options(p)
    p.set_defaults(func=_run)
