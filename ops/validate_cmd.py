"""`rlkit validate`: check a rendered manifest tree offline against real schemas.

Built-in kinds go through kubernetes-validate (strict) for the cluster's Kubernetes version;
RayJob/RayCluster through the KubeRay CRD schemas in --crd-dir (default: the pinned operator's
locked CRDs in ../shared/crds next to the repository, else in the verified artifact cache that
`python scripts/fetch_artifacts.py` fills). A kind without a schema fails in CI (CI=true) or with
--strict, and is reported as NOT VALIDATED otherwise. -o json|yaml prints the report as one
document (docs/cli.md). Exit code 0 valid, 1 invalid, 2 could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from infra.versions import DEFAULT_KUBERNETES_VERSION
from ops import options
from ops.config_source import say_source
from ops.output import add_output_option, emit, wants_json
from ops.validation import report_document, run_validation


def _run(args: argparse.Namespace) -> int:
    # With -o json|yaml the text goes to stderr and stdout holds the one document.
    with contextlib.redirect_stdout(sys.stderr) if wants_json(args) else contextlib.nullcontext():
        version, origin = args.kubernetes_version, "--kubernetes-version"
        if version is None and args.config is not None:
            cfg = options.load_config(args)
            if cfg is None:
                return 2
            say_source(args)
            version, origin = cfg.kubernetes_version, f"the config {args.config}"
        if version is None:
            version, origin = DEFAULT_KUBERNETES_VERSION, "the kit default"
            print(f"Kubernetes version: {version} (the kit default; pass --kubernetes-version or "
                  "--config to match your cluster)")
        code = run_validation(args.path, args, version)
    report = getattr(args, "validation_report", None)
    if wants_json(args) and report is not None:
        emit(args, {**report_document(report), "kubernetes_version_from": origin})
    return code


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
    add_output_option(p)
    p.set_defaults(func=_run)
