"""`rlkit render`: write the Kubernetes manifests of one environment, then validate them.

Every value comes from the kit config, the instance catalog and the deployed stacks' outputs:
--outputs reads the JSON `cdk deploy --outputs-file` wrote, --from-stacks asks CloudFormation
(credentials needed). With neither, outputs are placeholders and every object says so: good for
review and CI, not for `kubectl apply`.
"""

from __future__ import annotations

import argparse
import sys
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
from ops import aws
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

    def validate_staged(staged: Path) -> bool:
        print(f"Validating before writing to {out}/:")
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
    p.set_defaults(func=_run)
