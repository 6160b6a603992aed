"""`rlkit render`: write the Kubernetes manifests of one environment, then validate them.

Every value comes from the kit config, the instance catalog and the deployed stacks' outputs:
--outputs reads the JSON `cdk deploy --outputs-file` wrote, --from-stacks asks CloudFormation
(credentials needed). With neither, outputs are placeholders and every object says so: good for
review and CI, not for `kubectl apply`.

Custom kinds (RayJob) are validated against CRD schemas from --crd-dir (default: ../shared/crds
where CI keeps them), or with --from-cluster against the CRDs installed on the cluster kubectl
points at (read-only `kubectl get crd`). A kind with no schema is reported as NOT validated.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from infra.config import ConfigError, load_config
from manifests import (
    RenderError,
    build_context,
    outputs_from_file,
    outputs_from_stacks,
    placeholder_outputs,
    render,
    tree,
    write,
)
from manifests.render import comment_line
from manifests.validate import load_objects
from ops import aws
from ops.cluster_crds import context_name, custom_kinds, fetch_crds
from ops.kube import Kubectl, KubectlError
from ops.preflight import PASS, check_instance_facts
from ops.validate_cmd import add_validation_options, run_validation


def _run(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    try:
        if args.outputs is not None:
            outputs = outputs_from_file(cfg, args.outputs)
        elif args.from_stacks:
            outputs = outputs_from_stacks(
                cfg, client=aws.client(aws.session(cfg.region), "cloudformation"))
        else:
            outputs = placeholder_outputs(cfg)
        files = render(build_context(cfg, outputs))
    except RenderError as err:
        print(err, file=sys.stderr)
        return 2

    out = args.out if args.out is not None else Path("out") / cfg.name
    codes: list[int] = []
    if args.from_cluster and (args.crd_dir is not None or args.no_validate):
        print("error: --from-cluster validates against the cluster's CRDs; it cannot be combined "
              "with --crd-dir or --no-validate. Fix: drop one of them", file=sys.stderr)
        return 2
    for name, group in cfg.gpu_node_groups.items():
        facts = check_instance_facts(name, group)
        if facts.status != PASS:
            print(f"WARNING: {facts.detail}. Fix: {facts.fix}.", file=sys.stderr)

    def validate_staged(staged: Path) -> bool:
        print(f"Validating before writing to {out}/:")
        with tempfile.TemporaryDirectory(prefix="rlkit-crds-") as crds:
            if args.from_cluster and not crds_from_cluster(staged, Path(crds), args):
                codes.append(2)
                return False
            codes.append(run_validation(staged, args, cfg.kubernetes_version))
        return codes[-1] == 0

    try:
        written = write(files, out, check=None if args.no_validate else validate_staged)
    except OSError as err:
        print(f"error: could not write {out}: {err.strerror}. Fix: pass --out with a writable "
              "directory", file=sys.stderr)
        return 2
    if written is None:
        print(f"Nothing written to {out}/: the rendered manifests failed validation (above).",
              file=sys.stderr)
        return codes[-1] if codes else 1
    print(f"Rendered {len(files)} object(s) for {cfg.name!r} (stack outputs: "
          f"{comment_line(outputs.origin).removeprefix('# ')}):")
    print(tree(out))
    if outputs.is_placeholder:
        print("WARNING: stack outputs are PLACEHOLDERS (placeholder-run-cdk-deploy). Deploy the "
              "stacks and render again with --outputs cdk-outputs.json or --from-stacks before "
              "applying.", file=sys.stderr)
    print()
    if outputs.is_placeholder:
        print("Do not apply placeholder manifests. Once rendered with real outputs, apply with:")
    else:
        print("Apply (namespace and service account first, then one workload at a time):")
        print(f"  aws eks update-kubeconfig --name {outputs.cluster_name} --region {outputs.region}")
    print(f"  kubectl apply -f {out}")
    print(f"  kubectl apply -f {out}/fabric/nodecheck    # then allreduce, then ep")
    print(f"  kubectl apply -f {out}/rl-job")
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


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "render", help="render the Kubernetes manifests (RL job, fabric jobs) and validate them",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=None,
                   help="kit config YAML (default: the built-in default config)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--outputs", type=Path, default=None,
                        help="the JSON written by `cdk deploy --outputs-file`")
    source.add_argument("--from-stacks", action="store_true",
                        help="read the outputs from CloudFormation (DescribeStacks)")
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default: out/<config name>)")
    p.add_argument("--no-validate", action="store_true", help="skip offline validation")
    add_validation_options(p)
    p.add_argument("--from-cluster", action="store_true",
                   help="validate custom kinds (RayJob) against the CRDs installed on the cluster "
                   "kubectl points at, instead of --crd-dir")
    p.add_argument("--context", default=None,
                   help="kubectl context for --from-cluster (default: the current one)")
    p.set_defaults(func=_run)
