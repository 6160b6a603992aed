"""`rlkit image`: build the trainer image in AWS CodeBuild and list what the repository holds.

`rlkit image build` needs only AWS credentials and the deployed data stack: it zips images/trainer
(less .dockerignore) into the data bucket under image-builds/, starts the data stack's CodeBuild
project for one EP backend (default: the config's training.expert_parallel.backend), and with
--wait streams the build's log until it ends, then prints the pushed image URI and digest. The
tag is the one the manifests pull, <training.image_tag>-<backend>. The build (images/trainer/
buildspec.yml) refuses a tag that exists, an unpinned base image or a pin the registry cannot serve
(a tag moved since the pin only warns), and fails
when the Dockerfile's contract check fails; after the push it prints ECR's scan findings.
--reuse takes an existing tag instead, if it holds every platform the config needs (linux/amd64,
and linux/arm64 with a P6e-GB200 group) and was built from this commit, or from one with the same
images/trainer (its org.opencontainers.image.revision label; unknown warns).
--dry-run prints the upload, the build's overrides and every command with its values; it calls
AWS only to read the stack outputs (none with --outputs).

`rlkit image status` lists the repository's images: tags, digest, EP backend (from the image's
io.moe-rl-eks-kit.ep-backend label, else the tag's suffix), push time, size and scan summary.

Both print through the shared output helpers (ops/output.py): progress on stdout as text, or on
stderr with -o json|yaml, where stdout holds one document (docs/cli.md lists its shape).

Exit codes: 0 done (without --wait: the build started), 1 the build failed or timed out, or
--wait lost track of it (an AWS error while following it; the build keeps running), 2 bad input
or AWS refused a call before the build started, 130 Ctrl-C while following a build (it keeps
running).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Callable

from infra.cdk_cli import cdk_command
from infra.config import KitConfig
from infra.trainer_contract import EP_BACKENDS
from ops import aws, options
from ops.aws import AwsClients
from ops.config_source import announce
from ops.output import add_output_option, emit, make_console, plain_table, wants_json
from ops.image_build import (
    DEFAULT_PLATFORM,
    REVISION_LABEL,
    BuildPlan,
    BuildTarget,
    ImageBuildError,
    check_reuse_revision,
    describe_plan,
    existing_image,
    follow_build,
    image_platforms,
    plan_build,
    running_build,
    start_build,
    target_from_cloudformation,
    target_from_file,
    upload_context,
    vcs_ref,
)
from ops.image_context import TRAINER_DIR, context_files, context_zip
from ops.image_status import fetch_url, image_labels, image_platforms_held, list_images

DEFAULT_TIMEOUT_S = 5 * 3600  # the project's 4 h build timeout plus queueing




def _target(args: argparse.Namespace, cfg: KitConfig, clients: AwsClients) -> BuildTarget:
    hints = options.outputs_hints(args, "image build")
    if args.outputs is not None:
        return target_from_file(cfg, args.outputs, hints)
    return target_from_cloudformation(cfg, clients.cloudformation, hints)


def _build(args: argparse.Namespace) -> int:
    cfg = options.load_config(args)
    if cfg is None:
        return 2
    region = args.region or cfg.region
    announce(cfg, args, f"{'[dry-run] ' if args.dry_run else ''}Image build for", region,
             file=sys.stderr if wants_json(args) else None)
    clients = options.aws_clients(args, region)  # each client made on first use
    as_doc = wants_json(args)  # progress then goes to stderr; stdout holds the one document
    console = make_console(stderr=as_doc)
    echo: Callable[[str], None] = lambda text: console.print(
        text, markup=False, highlight=False, soft_wrap=True)
    result_doc: dict = {"environment": cfg.name, "region": region, "dry_run": args.dry_run}

    def done(code: int, **fields: object) -> int:
        if as_doc:
            emit(args, {**result_doc, **fields, "ok": code == 0})
        return code

    try:
        target = _target(args, cfg, clients)
        data = context_zip(args.context)
        plan = plan_build(cfg, target, backend=args.backend, vcs_ref=args.vcs_ref or vcs_ref(),
                          context=data, files=len(context_files(args.context)),
                          base_digest=args.base_digest, deepep_gin_ref=args.deepep_gin_ref,
                          root=args.context)
    except ImageBuildError as err:
        print(f"error: cannot build the trainer image:\n{err}" if str(err).startswith("  - ")
              else f"error: {err}", file=sys.stderr)
        return 2
    except aws.AWS_ERRORS as err:
        print(f"error: could not read stack {cfg.stack_names['data']}'s outputs: "
              f"{aws.describe_error(err)}. Fix: deploy the data stack (`"
              f"{cdk_command('deploy', cfg.stack_names['data'], config=args.config)}`) and "
              f"{aws.CREDENTIALS_FIX}", file=sys.stderr)
        return 2

    result_doc.update(image_uri=plan.image_uri, backend=plan.backend)
    if args.dry_run:
        echo(f"[dry-run] rlkit image build would, for {plan.image_uri}:")
        steps = list(describe_plan(plan, region, args.context))
        for line in steps:
            echo(line)
        echo("[dry-run] nothing uploaded or started")
        return done(0, steps=steps)

    c = clients
    try:
        existing = existing_image(c.ecr, target.repository_name, plan.image_tag)
        if existing is not None:
            digest = existing["imageDigest"]
            ref = f"{plan.image_uri}@{digest}"
            wanted = image_platforms(cfg).split(",")
            held, unread = _platforms_held(c.ecr, target.repository_name, digest, args.fetch)
            missing = [p for p in wanted if held is not None and p not in held]
            if missing:
                print(f"error: {plan.image_uri} already exists ({digest}) and holds "
                      f"{', '.join(sorted(held or ())) or 'no platform'}, not "
                      f"{', '.join(missing)}, which the config needs ({', '.join(wanted)}: the "
                      "system nodes' linux/amd64 and each GPU group's platform); pods there could "
                      "not pull it, and the repository's tags are immutable. Fix: set a new "
                      "training.image_tag in the config, then run `rlkit image build` again.",
                      file=sys.stderr)
                return 2
            if args.reuse:
                if unread is not None and wanted != [DEFAULT_PLATFORM]:
                    print(f"error: cannot reuse {ref}: could not read its platforms ({unread}), "
                          f"and the config needs {', '.join(wanted)}; a tag built before an arm64 "
                          "GPU group was added holds linux/amd64 only. Fix: allow "
                          "ecr:BatchGetImage and ecr:GetDownloadUrlForLayer on the repository and "
                          "rerun, or set a new training.image_tag and build.", file=sys.stderr)
                    return 2
                if unread is not None:
                    # Every image `rlkit image build` pushes holds linux/amd64, all this config needs.
                    print(f"warning: could not read the platforms of {ref} ({unread}); reusing it, "
                          f"as the config needs only {DEFAULT_PLATFORM}", file=sys.stderr)
                # The tag may hold an image of other code (an older commit under the same
                # training.image_tag): compare the commit it records with this run's.
                try:
                    labels = image_labels(c.ecr, target.repository_name, digest, args.fetch)
                except (*aws.AWS_ERRORS, OSError, ValueError, KeyError) as err:
                    revision = None
                    print(f"warning: could not read the labels of {ref} "
                          f"({aws.describe_error(err)}), so not which commit it was built from; "
                          "reusing it unchecked. If images/trainer changed since, set a new "
                          "training.image_tag and build.", file=sys.stderr)
                else:
                    revision = labels.get(REVISION_LABEL)
                    verdict = check_reuse_revision(ref, revision, plan.vcs_ref)
                    if not verdict.ok:
                        print(f"error: {verdict.message}", file=sys.stderr)
                        return 2
                    if verdict.warn:
                        print(f"warning: {verdict.message}", file=sys.stderr)
                    else:
                        echo(verdict.message)
                echo(f"reusing {ref} (the tag exists; --reuse)")
                echo(f"image: {ref}")
                return done(0, image=ref, reused=True, revision=revision)
            print(f"error: {plan.image_uri} already exists ({digest}) and the "
                  "repository's tags are immutable. Fix: set a new training.image_tag in the "
                  "config, or pass --reuse to use the existing image.", file=sys.stderr)
            return 2
        build_id = _running_build(c.codebuild, plan)
        if build_id is not None:
            echo(f"a build of {plan.image_uri} from the same source and inputs is already running "
                 f"({build_id}, started by an earlier `rlkit image build`): following it instead "
                 "of starting a second one, which could not push the immutable tag")
        else:
            uploaded = upload_context(c.s3, target.bucket, plan.context_key, data)
            echo(f"{'uploaded' if uploaded else 'already uploaded'}: s3://{target.bucket}/"
                 f"{plan.context_key} ({plan.context_files} files, {plan.context_bytes} bytes)")
            build_id = start_build(c.codebuild, plan)
            echo(f"started build {build_id} of {plan.image_uri} (backend {plan.backend}); logs in "
                 f"CloudWatch log group {target.log_group}")
    except ImageBuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except aws.AWS_ERRORS as err:
        print(f"error: {aws.describe_error(err)}. Fix: check that stack {target.stack} is "
              f"deployed and your credentials may use it; {aws.CREDENTIALS_FIX}", file=sys.stderr)
        return 2
    result_doc["build_id"] = build_id
    if not args.wait:
        echo(f"follow it with `aws codebuild batch-get-builds --ids {build_id}` or the CodeBuild "
             "console; `rlkit image status` lists the pushed image")
        return done(0, status="STARTED")

    def failed(code: int, message: str, status: str | None, **fields: object) -> int:
        """Print ``message`` as the error and end with the document (ok false, the build ID)."""
        print(f"error: {message}", file=sys.stderr)
        return done(code, status=status, error=message, **fields)

    try:
        result = follow_build(c.codebuild, c.logs, build_id, echo=echo, poll_s=args.poll,
                              timeout_s=args.timeout)
    except TimeoutError as err:
        return failed(1, f"{err}; it keeps running in CodeBuild. Fix: wait for it (`aws codebuild "
                      f"batch-get-builds --ids {build_id}`) or raise --timeout", "IN_PROGRESS")
    except aws.AWS_ERRORS as err:
        return failed(1, f"lost track of build {build_id}: {aws.describe_error(err)}; it keeps "
                      "running in CodeBuild. Fix: follow it with `aws codebuild batch-get-builds "
                      f"--ids {build_id}`; `rlkit image status` lists the pushed image", None)
    except KeyboardInterrupt:
        return failed(130, f"interrupted; build {build_id} keeps running in CodeBuild "
                      f"(`aws codebuild stop-build --id {build_id}` stops it)", None)
    if result.status != "SUCCEEDED":
        where = f" in phase {result.failed_phase}" if result.failed_phase else ""
        why = f": {result.message}" if result.message else ""
        message = f"build {build_id} {result.status}{where}{why}. The log above says why."
        # A build can fail after its push (a step after it failed): the tag is then taken.
        try:
            pushed = existing_image(c.ecr, target.repository_name, plan.image_tag)
        except aws.AWS_ERRORS as err:
            print(f"warning: could not check whether build {build_id} pushed {plan.image_uri} "
                  f"({aws.describe_error(err)}); `rlkit image status` lists the repository's "
                  "tags.", file=sys.stderr)
            return failed(1, message, result.status, pushed=None)
        if pushed is None:
            echo(f"nothing pushed: {plan.image_uri} is not in the repository")
            return failed(1, message, result.status, pushed=False)
        ref = f"{plan.image_uri}@{pushed['imageDigest']}"
        # Whose push: this build's before the failure, or another build's of the tag (a race);
        # only the build's own log can say (its post_build compares the digests).
        return failed(1, f"{message} But the tag is in the repository: {ref}, pushed by this "
                      "build before the failure or by another build of the tag (the log's last "
                      "lines say which), and tags are immutable, so a rerun with this "
                      "training.image_tag is refused. Fix: if the log above says this build "
                      "pushed it after the image's own steps passed, or another build of the same "
                      "inputs did, `rlkit image build --reuse` uses it; otherwise set a new "
                      "training.image_tag and build again.",
                      result.status, pushed=True, image=ref)
    if not (result.image_uri and result.image_digest):
        return failed(1, f"build {build_id} succeeded but exported no IMAGE_URI/IMAGE_DIGEST. "
                      "Fix: check the buildspec's post_build phase in the log above.",
                      result.status)
    echo(f"image: {result.image_uri}@{result.image_digest}")
    return done(0, status=result.status, image=f"{result.image_uri}@{result.image_digest}")


def _status(args: argparse.Namespace) -> int:
    cfg = options.load_config(args)
    if cfg is None:
        return 2
    region = args.region or cfg.region
    clients = options.aws_clients(args, region)
    try:
        target = _target(args, cfg, clients)
        rows = list_images(clients.ecr, target.repository_name, labels=not args.no_labels,
                           fetch=args.fetch,
                           warn=lambda m: print(f"warning: {m}", file=sys.stderr))
    except ImageBuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except aws.AWS_ERRORS as err:
        print(f"error: {aws.describe_error(err)}. Fix: {aws.CREDENTIALS_FIX}", file=sys.stderr)
        return 2
    total_mb = sum(r.size_mb for r in rows)
    if wants_json(args):
        emit(args, {"repository": target.repository_uri, "total_size_mb": total_mb,
                    "images": [dataclasses.asdict(r) for r in rows]})
        return 0
    print(f"{target.repository_uri}: {len(rows)} image(s)")
    if not rows:
        print("  none yet: `rlkit image build --wait` builds and pushes one")
        return 0
    table = plain_table(None, ("tags", "digest", "backend", "pushed", "size MB", "scan"),
                        [(",".join(r.tags) or "<untagged>", r.digest[:19],
                          r.backend + (f" ({r.backend_from})" if r.backend_from != "-" else ""),
                          r.pushed[:19], str(r.size_mb), r.scan) for r in rows])
    for line in table.splitlines():
        print("  " + line)
    # The repository expires nothing (infra/constructs/trainer_repository.py): a lifecycle rule
    # could delete an image a RayJob's retry pulls by digest, or a multi-arch tag's platform images.
    print(f"  {total_mb:,} MB in all (ECR's compressed sizes), kept until deleted: delete a tag no "
          "run, gate record or retry still uses with `aws ecr batch-delete-image --repository-name "
          f"{target.repository_name} --image-ids imageTag=<tag> --region {region}`")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    options.add_config(p)
    options.add_outputs_source(p, "cdk --outputs-file JSON (default: read the data stack from "
                               "CloudFormation)")
    options.add_aws(p)


def _platforms_held(ecr, repository: str, digest: str,
                    fetch: Callable[[str], bytes]) -> tuple[set[str] | None, str | None]:
    """(the platforms image ``digest`` holds, None) or (None, why they could not be read)."""
    try:
        return image_platforms_held(ecr, repository, digest, fetch), None
    except (*aws.AWS_ERRORS, OSError, ValueError, KeyError) as err:
        return None, aws.describe_error(err)


def _running_build(codebuild, plan: BuildPlan) -> str | None:
    """A running build of this plan, or None; a caller without codebuild:ListBuildsForProject
    gets a warning and a new build, as before the check existed."""
    tag = plan.image_tag
    try:
        return running_build(codebuild, plan)
    except aws.AWS_ERRORS as err:
        print(f"warning: could not look for a running build of {tag} ({aws.describe_error(err)}); "
              "starting one. If an interrupted `rlkit image build` left one running, this one "
              "cannot push the same tag.", file=sys.stderr)
        return None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "image", help="build the trainer image in CodeBuild (no local Docker) and list images",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="image_command", metavar="SUBCOMMAND", required=True)

    b = sub.add_parser("build", help="upload images/trainer, build and push one EP variant",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(b)
    b.add_argument("--backend", choices=EP_BACKENDS, default=None,
                   help="EP backend variant (default: the config's expert_parallel.backend)")
    b.add_argument("--wait", action="store_true",
                   help="stream the build's log until it ends; print the image URI and digest")
    options.add_dry_run(b, "print the upload, the overrides and every build command; start "
                        "nothing")
    b.add_argument("--reuse", action="store_true",
                   help="when the tag already exists, holds every platform the config needs "
                   "and was built from this commit's images/trainer, print it and succeed "
                   "instead of refusing")
    b.add_argument("--base-digest", default=None,
                   help="sha256 digest the base image (Dockerfile MILES_IMAGE) must have, when "
                   "the Dockerfile pins none")
    b.add_argument("--deepep-gin-ref", default=None,
                   help="amazon-contributing/DeepEP commit, the full 40-hex SHA (required with "
                   "--backend deepep-gin)")
    b.add_argument("--vcs-ref", default=None,
                   help="commit recorded in the image (default: git rev-parse HEAD, -dirty when "
                   "images/trainer has changes)")
    b.add_argument("--context", type=Path, default=TRAINER_DIR, help=argparse.SUPPRESS)
    add_output_option(b)
    b.add_argument("--poll", type=float, default=10.0, help="seconds between log polls")
    b.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds to follow the build with --wait (default {DEFAULT_TIMEOUT_S})")
    b.set_defaults(func=_build, fetch=fetch_url)

    s = sub.add_parser("status", help="the repository's images: tags, digests, backend, scan",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(s)
    s.add_argument("--no-labels", action="store_true",
                   help="take the backend from the tag only (no image config download)")
    options.add_output_option(s)
    s.set_defaults(func=_status, fetch=fetch_url)
