"""`rlkit logs`: the trainer's output.

logs prints the trainer's output: the KubeRay submitter Job (named like the RayJob) runs
`ray job submit`, which follows the driver's log; -f keeps following. Once the pods are gone
(or with --node NODE, or --source cloudwatch) it reads the same output from CloudWatch Logs,
where the observability add-on's Fluent Bit ships every container's output; it says which
source it used; from CloudWatch, a replaced submitter pod's replay of the job log (it prints the
log again from its start) is left out. --since limits either source to the last 30m, 2h, 3d, ...; --tail N, --timestamps,
--previous and -c CONTAINER mean what they mean for kubectl logs.

Like status and launch, it first checks that kubectl points at this environment's EKS cluster (or
--context does), and that its API server answers within --request-timeout seconds.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta, timezone

from infra import names
from infra.config import KitConfig
from manifests.render import SUBMITTER_CONTAINER
from ops import aws, observability, options
from ops.kube import KubectlError, pinned_kubectl
from ops.launching import describe_rayjob, finished


def _logs(args: argparse.Namespace) -> int:
    cfg = options.load_config(args)
    if cfg is None:
        return 2
    try:
        since = observability.parse_since(args.since) if args.since else None
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.source == "cloudwatch" or (args.source == "auto" and args.node):
        return _logs_from_cloudwatch(args, cfg, since)
    job, ns = cfg.training.run_name, names.TRAINER_NAMESPACE
    flag = options.config_flag(args)
    try:
        k = pinned_kubectl(args, cfg)
        if k.get_json(["job", job, "-n", ns]) is None:
            doc = k.get_json(["rayjob", job, "-n", ns])
            if doc is not None and not finished(doc):
                print(f"The RayJob has no submitter yet ({describe_rayjob(doc)}); the Ray cluster "
                      f"is probably still starting. Try again in a minute, or watch it with: rlkit "
                      f"status{flag} --watch", file=sys.stderr)
                return 1
            if args.source == "kubectl":
                print(f"No submitter Job {job} in namespace {ns}: its pods are gone. Read its "
                      f"output from CloudWatch Logs: rlkit logs{flag} --source cloudwatch",
                      file=sys.stderr)
                return 1
            print(f"No submitter Job {job} in namespace {ns} (the pods are gone"
                  + ("" if doc is None else f"; {describe_rayjob(doc)}") + ").", file=sys.stderr)
            return _logs_from_cloudwatch(args, cfg, since)
        argv = ["logs", "-n", ns, f"job/{job}"]
        argv += ["-c", args.container] if args.container else ["--all-containers"]
        if since is not None:
            argv.append(f"--since={int(since.total_seconds())}s")
        if args.tail is not None:
            argv.append(f"--tail={args.tail}")
        if args.timestamps:
            argv.append("--timestamps")
        if args.previous:
            argv.append("--previous")
        if args.follow:
            argv.append("-f")
        print(f"source: kubectl logs job/{job} in namespace {ns} (the submitter pod exists)",
              file=sys.stderr)
        return k.stream(argv)
    except KubectlError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


# CloudWatch Logs with no --since: the last day.
CLOUDWATCH_DEFAULT_SINCE = timedelta(days=1)


def _logs_from_cloudwatch(args: argparse.Namespace, cfg: KitConfig, since: timedelta | None) -> int:
    if not cfg.observability.enabled:
        print("error: no CloudWatch logs: observability.enabled is false in the config, so no "
              "add-on ships container output. Fix: read the pods with --source kubectl while they "
              "exist, or enable observability and deploy the cluster stack", file=sys.stderr)
        return 1
    if getattr(args, "previous", False) or getattr(args, "container", None):
        print("note: --previous and -c apply to the pod's log; CloudWatch Logs holds every "
              "container's lines, previous ones included", file=sys.stderr)
    query = observability.log_query(cfg, node=args.node, submitter_container=SUBMITTER_CONTAINER)
    start = datetime.now(timezone.utc) - (since or CLOUDWATCH_DEFAULT_SINCE)
    print(f"source: {query.describe()}, since {start:%Y-%m-%d %H:%M:%S} UTC", file=sys.stderr)
    try:
        logs_client = options.aws_clients(args, cfg.region).logs
        printed = observability.read_logs(logs_client, query, start=start, out=sys.stdout,
                                          follow=args.follow, tail=getattr(args, "tail", None),
                                          timestamps=getattr(args, "timestamps", False),
                                          notes=sys.stderr)
    except aws.AWS_ERRORS as err:
        if aws.error_code(err) == "ResourceNotFoundException":
            print(f"error: log group {query.group} does not exist: the cluster stack is not "
                  "deployed (its log groups go with it) or was deployed without observability. "
                  "Fix: check the config and region", file=sys.stderr)
        else:
            print(f"error: {aws.describe_error(err)}. Fix: {aws.CREDENTIALS_FIX}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if printed == 0:
        print("No matching log lines in that window; widen it with --since (e.g. --since 3d)",
              file=sys.stderr)
        return 1
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    lg = subparsers.add_parser("logs", help="the trainer's output (the RayJob's submitter)",
                               description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_run_options(lg)
    lg.add_argument("-f", "--follow", action="store_true", help="keep following the log")
    lg.add_argument("--since", default=None,
                    help="only the last 30m, 2h, 3d, ... (default: all of the pod's log; the last "
                    "day from CloudWatch)")
    lg.add_argument("--node", default=None,
                    help="every container of the run on this node (Kubernetes node name), from "
                    "CloudWatch Logs")
    lg.add_argument("--source", choices=("auto", "kubectl", "cloudwatch"), default="auto",
                    help="where to read: the pod (kubectl) or CloudWatch Logs; auto: the pod "
                    "while it exists")
    lg.add_argument("--tail", type=options.non_negative_int, default=None, metavar="N",
                    help="only the last N lines (kubectl logs --tail; also from CloudWatch)")
    lg.add_argument("--timestamps", action="store_true",
                    help="prefix each line with its time (RFC 3339, as kubectl logs "
                    "--timestamps)")
    lg.add_argument("-p", "--previous", action="store_true",
                    help="the previous, crashed container's log (kubectl logs --previous; the pod "
                    "source only)")
    lg.add_argument("-c", "--container", default=None,
                    help="one container of the submitter pod (default: all of them; the pod "
                    "source only)")
    options.add_aws(lg, region=False, profile_help="AWS profile for CloudWatch Logs")
    lg.set_defaults(func=_logs)
