"""`rlkit render`: write the Kubernetes manifests of one environment, then validate them.

Every value comes from the kit config, the instance catalog and the deployed stacks' outputs:
--outputs reads the JSON `cdk deploy --outputs-file` wrote, --from-stacks asks CloudFormation
(credentials needed). With neither, outputs are placeholders and every object says so: good for
review and CI, not for `kubectl apply`.

Custom kinds (RayJob) are validated against CRD schemas from --crd-dir (default: the pinned
KubeRay CRDs in ../shared/crds where CI keeps them, else in the verified artifact cache), or with
--from-cluster against the CRDs installed on the cluster kubectl points at (read-only `kubectl get
crd`). A kind with no schema is reported as NOT validated.

The tree is rendered into a fresh directory beside --out, validated there, and swapped in only
when valid: no stale file of an earlier render survives, and a failed render changes nothing.
--out must be a directory of its own: a file, a symbolic link, a repository's root, the working
directory or a directory holding the config file is refused (exit 2) before anything is read.
-o json|yaml prints what was written as one document (docs/cli.md). Exit code 0 written, 1 the
manifests failed validation (nothing written), 2 bad input or could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

from manifests import RenderError, build_context, render, tree, write
from manifests.render import check_out_dir, comment_line
from ops import options
from ops.config_source import say_source
from ops.output import add_output_option, emit, wants_json
from ops.preflight import PASS, check_instance_facts
from ops.rendering import resolve_outputs
from ops.validation import crds_from_cluster, report_document, run_validation


def _run(args: argparse.Namespace) -> int:
    # With -o json|yaml the text goes to stderr and stdout holds the one document.
    with contextlib.redirect_stdout(sys.stderr) if wants_json(args) else contextlib.nullcontext():
        code, doc = _render(args)
    if wants_json(args) and doc is not None:
        emit(args, doc)
    return code


def _render(args: argparse.Namespace) -> tuple[int, dict | None]:
    cfg = options.load_config(args)
    if cfg is None:
        return 2, None
    say_source(args)
    out = args.out if args.out is not None else Path("out") / cfg.name
    try:
        check_out_dir(out, cfg.name, keep=[args.config] if args.config is not None else [])
        outputs = resolve_outputs(cfg, args.outputs, placeholder=not args.from_stacks,
                                  clients=options.aws_clients(args, cfg.region),
                                  hints=options.outputs_hints(args, "render"))
        ctx = build_context(cfg, outputs)
        files = render(ctx)
    except RenderError as err:
        print(err, file=sys.stderr)
        return 2, None

    codes: list[int] = []
    if args.from_cluster and (args.crd_dir is not None or args.no_validate):
        print("error: --from-cluster validates against the cluster's CRDs; it cannot be combined "
              "with --crd-dir or --no-validate. Fix: drop one of them", file=sys.stderr)
        return 2, None
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
            codes.append(run_validation(staged, args, cfg.kubernetes_version, rendered=True))
        return codes[-1] == 0

    try:
        written = write(files, out, check=None if args.no_validate else validate_staged)
    except OSError as err:
        print(f"error: could not write {out}: {err.strerror}. Fix: pass --out with a writable "
              "directory", file=sys.stderr)
        return 2, None
    except RenderError as err:  # the directory changed into something else since the check
        print(err, file=sys.stderr)
        return 2, None
    if written is None:
        print(f"Nothing written to {out}/: the rendered manifests failed validation (above).",
              file=sys.stderr)
        return (codes[-1] if codes else 1), None
    print(f"Rendered {len(files)} object(s) for {cfg.name!r} (stack outputs: "
          f"{comment_line(outputs.origin).removeprefix('# ')}):")
    print(tree(out))
    # Offline: no ECR read, so the tag, which can name other content later (ops/image_digest.py).
    print(f"Image: {ctx.worker.image} (by its tag; `rlkit gate` and `rlkit launch` pin it to the "
          "digest the tag names then)")
    if outputs.is_placeholder:
        print("WARNING: stack outputs are PLACEHOLDERS (placeholder-run-cdk-deploy). Deploy the "
              "stacks and render again with --outputs cdk-outputs.json or --from-stacks before "
              "applying.", file=sys.stderr)
    print()
    if outputs.is_placeholder:
        print("Do not apply placeholder manifests. Once rendered with real outputs, apply with:")
    else:
        print("Apply (namespace, its NetworkPolicy and service account first, then one workload at "
              "a time):")
        print(f"  aws eks update-kubeconfig --name {outputs.cluster_name} --region {outputs.region}")
    print(f"  kubectl apply -f {out}")
    print(f"  kubectl apply -f {out}/fabric/nodecheck    # then allreduce, then ep")
    print(f"  kubectl apply -f {out}/rl-job")
    report = getattr(args, "validation_report", None)
    return 0, {"environment": cfg.name, "out": str(out),
               "outputs": {"origin": outputs.origin, "placeholder": outputs.is_placeholder},
               "files": sorted(str(p) for p in written),
               "validation": report_document(report) if report is not None else None}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "render", help="render the Kubernetes manifests (RL job, fabric jobs) and validate them",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_config(p)
    options.add_outputs_source(p, "the JSON written by `cdk deploy --outputs-file`",
                               from_stacks=True)
    options.add_aws(p)
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default: out/<config name>)")
    p.add_argument("--no-validate", action="store_true", help="skip offline validation")
    options.add_validation_options(p)
    p.add_argument("--from-cluster", action="store_true",
                   help="validate custom kinds (RayJob) against the CRDs installed on the cluster "
                   "kubectl points at, instead of --crd-dir")
    p.add_argument("--context", default=None,
                   help="kubectl context for --from-cluster (default: the current one)")
    add_output_option(p)
    p.set_defaults(func=_run)
