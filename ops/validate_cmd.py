"""`rlkit validate`: check a rendered manifest tree offline against real schemas.

Built-in kinds go through kubernetes-validate (strict) for the cluster's Kubernetes version;
RayJob/RayCluster through the KubeRay CRD schemas in --crd-dir (default: ../shared/crds next to
the repository, where CI keeps them). A kind without a schema fails in CI (CI=true) or with
--strict, and is reported as NOT VALIDATED otherwise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from infra.versions import DEFAULT_KUBERNETES_VERSION
from ops import options
from ops.validation import run_validation


def _run(args: argparse.Namespace) -> int:
    version = args.kubernetes_version
    if version is None and args.config is not None:
        cfg = options.load_config(args)
        if cfg is None:
            return 2
        version = cfg.kubernetes_version
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
    options.add_config(version, help="take the Kubernetes version from this kit config")
    options.add_validation_options(p)
    p.set_defaults(func=_run)
