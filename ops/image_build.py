"""The trainer image build without a local Docker engine: context zip, build plan, CodeBuild run
and log streaming (what the repository holds: ``ops.image_status``).

Plain functions over boto3 clients that the caller passes in (from the command's
``ops.aws.AwsClients`` bundle), so tests hand in Stubber-wrapped clients. The commands the build runs are images/trainer/buildspec.yml;
``render_buildspec`` fills in the values a plan knows, which is what ``--dry-run`` prints.
"""

from __future__ import annotations

import re
import subprocess
import time
from datetime import datetime, timedelta, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from infra import names
from infra.config import KitConfig
from infra.config.values import IMAGE_TAG_RE
from infra.catalog import INSTANCE_TYPES
from infra.trainer_contract import EP_BACKENDS
from infra.versions import IMAGE_BUILD_BUILDKIT_IMAGE
from manifests.context import image_tag_for
from manifests.outputs import (
    ImageBuildOutputs,
    OutputsHints,
    StackOutputsError,
    image_build_outputs,
    image_build_outputs_from_stacks,
    load_outputs_json,
)
from ops.image_context import TRAINER_DIR, context_key

BUILDSPEC = "buildspec.yml"
BASE_IMAGE_ARG = "MILES_IMAGE"
BACKEND_LABEL = "io.moe-rl-eks-kit.ep-backend"
IMAGE_TAG_VAR = "IMAGE_TAG"  # the build's override naming the tag it pushes (buildspec.yml)
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
# A full commit: the DeepEP fork has no release tags, and a branch name builds whatever it is that
# day under an immutable tag.
COMMIT_RE = re.compile(r"[0-9a-f]{40}")


class ImageBuildError(Exception):
    """Something the user must fix; the message names what, the rule and the fix."""


# --- Dockerfile and buildspec --------------------------------------------------------------------


def dockerfile_args(text: str) -> dict[str, str | None]:
    """Every ARG the Dockerfile declares -> its first default (None when declared without one)."""
    text = re.sub(r"\\\n", " ", text)
    args: dict[str, str | None] = {}
    for line in text.splitlines():
        m = re.match(r"\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$", line)
        if m:
            value = m.group(2)
            if value is not None:
                value = value.strip()
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                    value = value[1:-1]
            if args.get(m.group(1)) is None:
                args[m.group(1)] = value
    return args


def base_image(root: Path = TRAINER_DIR) -> tuple[str, str | None]:
    """(name:tag, pinned digest or None) of the Dockerfile's base image default."""
    ref = dockerfile_args((root / "Dockerfile").read_text()).get(BASE_IMAGE_ARG)
    if not ref:
        raise ImageBuildError(f"images/trainer/Dockerfile declares no ARG {BASE_IMAGE_ARG} "
                              "default: the build cannot tell which base image to check")
    name, _, digest = ref.partition("@")
    return name, digest or None


def load_buildspec(root: Path = TRAINER_DIR) -> dict[str, Any]:
    return yaml.safe_load((root / BUILDSPEC).read_text())


def buildspec_commands(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(phase, command) in the order CodeBuild runs them."""
    return [(phase, cmd) for phase, body in spec.get("phases", {}).items()
            for cmd in body.get("commands", [])]


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")


def render_command(command: str, values: dict[str, str]) -> str:
    """``${NAME}`` and ``${NAME:-default}`` replaced where ``values`` has NAME; others kept."""
    def sub(m: re.Match[str]) -> str:
        if m.group(1) in values:
            return values[m.group(1)]
        return m.group(0)
    return _VAR.sub(sub, command)


def build_args_passed(spec: dict[str, Any]) -> list[str]:
    """Names of the ``--build-arg`` the buildspec passes to docker buildx build (once each: the
    build and its push are two runs of one command)."""
    return list(dict.fromkeys(m.group(1) for _, cmd in buildspec_commands(spec)
                              for m in re.finditer(r"--build-arg\s+([A-Za-z_][A-Za-z0-9_]*)=", cmd)))


# --- stack outputs -------------------------------------------------------------------------------


# The data stack's outputs a build needs, read by manifests/outputs.py (the kit's one reader).
BuildTarget = ImageBuildOutputs
IMAGE_HINTS = OutputsHints(command="rlkit image build", from_stacks=False)


def target_from_outputs(cfg: KitConfig, outputs: dict[str, Any], origin: str,
                        hints: OutputsHints = IMAGE_HINTS) -> BuildTarget:
    """Pick the data stack's outputs from ``{stack: {key: value}}`` (cdk --outputs-file form);
    ``hints``: how a fix names `rlkit image build` and the config."""
    try:
        return image_build_outputs(cfg, outputs, origin, hints)
    except StackOutputsError as err:
        raise ImageBuildError(str(err)) from None


def target_from_file(cfg: KitConfig, path: Path, hints: OutputsHints = IMAGE_HINTS) -> BuildTarget:
    """The same from the file `cdk deploy --outputs-file` wrote."""
    try:
        data = load_outputs_json(path, hints)
    except StackOutputsError as err:
        raise ImageBuildError(str(err)) from err.__cause__
    return target_from_outputs(cfg, data, str(path), hints)


def target_from_cloudformation(cfg: KitConfig, cloudformation: Any,
                               hints: OutputsHints = IMAGE_HINTS) -> BuildTarget:
    """The same read from CloudFormation (botocore's errors reach the caller)."""
    try:
        return image_build_outputs_from_stacks(cfg, cloudformation, hints)
    except StackOutputsError as err:
        raise ImageBuildError(str(err)) from None


def vcs_ref(repo_root: Path = TRAINER_DIR.parent.parent) -> str:
    """The commit being built, ``-dirty`` when images/trainer has uncommitted changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root, capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "images/trainer"],
                               cwd=repo_root, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


REVISION_LABEL = "org.opencontainers.image.revision"  # the Dockerfile sets it from VCS_REF


def trainer_unchanged(old: str, new: str,
                      repo_root: Path = TRAINER_DIR.parent.parent) -> bool | None:
    """Whether images/trainer is the same at commits ``old`` and ``new`` (True or False), or None
    when git cannot tell: a ``-dirty`` or unknown ref, a commit this clone lacks, no git."""
    if not (COMMIT_RE.fullmatch(old) and COMMIT_RE.fullmatch(new)):
        return None
    try:
        rc = subprocess.run(["git", "diff", "--quiet", old, new, "--", "images/trainer"],
                            cwd=repo_root, capture_output=True, timeout=30).returncode
    except (OSError, subprocess.SubprocessError):
        return None
    return {0: True, 1: False}.get(rc)


@dataclass(frozen=True)
class ReuseCheck:
    """What the revision label of an image to reuse says: ``ok`` False refuses; ``message`` is
    the refusal, a warning (``warn``) or a note."""

    ok: bool
    message: str
    warn: bool = False


def check_reuse_revision(ref: str, image_rev: str | None, this_rev: str,
                         unchanged: Callable[[str, str], bool | None] | None = None
                         ) -> ReuseCheck:
    """May ``ref``, built from ``image_rev`` (its revision label; None when absent), stand for
    the code this run would build (``this_rev``, the build's VCS_REF)?"""
    if not image_rev or image_rev == "unknown":
        state = "unknown" if image_rev else "missing"
        return ReuseCheck(True, f"could not tell which commit {ref} was built from (its "
                          f"{REVISION_LABEL} label is {state}); reusing it unchecked. If "
                          "images/trainer changed since, set a new training.image_tag and build.",
                          warn=True)
    if this_rev == "unknown":
        return ReuseCheck(True, f"this checkout's commit is unknown (no git), so {ref}, built from "
                          f"{image_rev}, is reused unchecked. If images/trainer changed since, set "
                          "a new training.image_tag and build.", warn=True)
    if image_rev == this_rev:
        if image_rev.endswith("-dirty"):
            return ReuseCheck(True, f"{ref} was built from {image_rev}, and this checkout is "
                              f"{this_rev} too: uncommitted changes cannot be compared, so it is "
                              "reused unchecked. If images/trainer changed since, set a new "
                              "training.image_tag and build.", warn=True)
        return ReuseCheck(True, f"{ref} was built from this commit ({this_rev})")
    same = (unchanged or trainer_unchanged)(image_rev, this_rev)
    if same:
        return ReuseCheck(True, f"{ref} was built from {image_rev}; images/trainer is the same at "
                          f"{this_rev}")
    why = ("images/trainer differs between them" if same is False else
           "git here cannot tell whether images/trainer differs (uncommitted changes on either "
           "side, or a commit this clone does not have)")
    return ReuseCheck(False, f"cannot reuse {ref}: it was built from {image_rev} (its "
                      f"{REVISION_LABEL} label), this run builds {this_rev}, and {why}; the pods "
                      "would run other code than this checkout's. Fix: set a new "
                      "training.image_tag in the config and run `rlkit image build` again (tags "
                      f"are immutable), or reuse it from a checkout of {image_rev}.")


# --- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildPlan:
    """Everything one build does, decided before anything is uploaded or started."""

    target: BuildTarget
    backend: str
    image_tag: str
    vcs_ref: str
    context_key: str
    context_bytes: int
    context_files: int
    base_ref: str  # the Dockerfile's MILES_IMAGE default, as written
    base_name: str
    base_digest: str
    base_digest_from: str  # "Dockerfile" or "--base-digest"
    deepep_gin_ref: str | None
    overrides: list[dict[str, str]] = field(default_factory=list)
    timeout_minutes: int | None = None  # StartBuild's override; None: the project's (x86 only)

    @property
    def image_uri(self) -> str:
        return f"{self.target.repository_uri}:{self.image_tag}"

    @property
    def source_location(self) -> str:
        return f"{self.target.bucket}/{self.context_key}"


DEFAULT_PLATFORM = "linux/amd64"


def image_platforms(cfg: KitConfig) -> str:
    """The platforms one image tag must hold: the GPU groups' (catalog ``architecture``) and
    linux/amd64. No pod of a run needs amd64 on an arm64-only config any more (the job submitter
    runs beside the Ray head), but ``--reuse`` relies on every tag holding amd64 when it cannot
    read a tag's platforms, so the kit keeps building it. An arm64 GPU group (P6e-GB200) makes it a multi-arch
    build, as Miles' own release build is (radixark/miles@78527b9102b3, tag v0.1.0,
    docker/Dockerfile:5: "cu13 ... (amd64+arm64)")."""
    wanted = {DEFAULT_PLATFORM} | {INSTANCE_TYPES[g.instance_type].container_platform
                                   for g in cfg.gpu_node_groups.values()
                                   if g.instance_type in INSTANCE_TYPES}
    return ",".join(sorted(wanted))


def plan_build(cfg: KitConfig, target: BuildTarget, *, backend: str | None, vcs_ref: str,
               context: bytes, files: int, base_digest: str | None = None,
               deepep_gin_ref: str | None = None, root: Path = TRAINER_DIR) -> BuildPlan:
    """Check the request and decide the build; raise ImageBuildError with every problem."""
    problems = []
    backend = backend or cfg.training.expert_parallel.backend
    if backend not in EP_BACKENDS:
        problems.append(f"--backend {backend}: not an EP backend the image builds "
                        f"({', '.join(EP_BACKENDS)}). Fix: pass one of those")
    if backend == "deepep-gin" and not deepep_gin_ref:
        problems.append("--backend deepep-gin needs --deepep-gin-ref: the amazon-contributing/"
                        "DeepEP fork has no release tags, so the Dockerfile refuses to build "
                        "without a commit. Fix: pass --deepep-gin-ref <40-hex commit> (see "
                        "images/trainer/README.md)")
    if deepep_gin_ref and backend != "deepep-gin":
        problems.append(f"--deepep-gin-ref is only for --backend deepep-gin, not {backend}. "
                        "Fix: drop it")
    elif deepep_gin_ref and not COMMIT_RE.fullmatch(deepep_gin_ref):
        problems.append(f"--deepep-gin-ref {deepep_gin_ref}: not a full commit SHA (40 lowercase "
                        "hex digits); a branch, tag or short SHA can build other code each time. "
                        "Fix: pass the commit, e.g. from `git ls-remote "
                        "https://github.com/amazon-contributing/DeepEP refs/heads/main`")
    # The tag the manifests pull for this backend (manifests.context.image_tag_for). Config
    # validation checks it for every backend already; this guards a config built without it.
    tag = image_tag_for(cfg.model_copy(update={"training": cfg.training.model_copy(update={
        "expert_parallel": cfg.training.expert_parallel.model_copy(update={"backend": backend})})}))
    if not IMAGE_TAG_RE.fullmatch(tag):
        problems.append(f"training.image_tag {cfg.training.image_tag}: {tag} is not an image tag "
                        "(letters, digits, _ . -, at most 128, not starting with . or -). Fix: "
                        "use a version such as 0.1.0")
    name, pinned = base_image(root)
    if base_digest is not None and not DIGEST_RE.fullmatch(base_digest):
        problems.append(f"--base-digest {base_digest}: not an image digest (sha256: and 64 hex "
                        "digits). Fix: copy the Digest line of `docker buildx imagetools inspect "
                        f"{name}`")
    elif pinned and base_digest and pinned != base_digest:
        problems.append(f"--base-digest {base_digest} differs from the digest images/trainer/"
                        f"Dockerfile pins for {name} ({pinned}). Fix: drop --base-digest, or "
                        "change the Dockerfile's pin")
    elif not pinned and not base_digest:
        problems.append(f"the base image {name} (images/trainer/Dockerfile ARG {BASE_IMAGE_ARG}) "
                        "has no pinned digest, and the build refuses an unpinned base. Fix: read "
                        f"it with `docker buildx imagetools inspect {name}` (or the registry's "
                        f"page) and pin it there ({name}@sha256:...), or pass --base-digest "
                        "sha256:...")
    if problems:
        raise ImageBuildError("\n".join(f"  - {p}" for p in problems))
    overrides = {"EP_BACKEND": backend, IMAGE_TAG_VAR: tag, "VCS_REF": vcs_ref}
    platforms = image_platforms(cfg)
    if platforms != DEFAULT_PLATFORM:  # the buildspec's default: x86 only
        overrides["IMAGE_PLATFORMS"] = platforms
    if base_digest:
        overrides["BASE_IMAGE_DIGEST"] = base_digest
    if deepep_gin_ref:
        overrides["DEEPEP_GIN_REF"] = deepep_gin_ref
    return BuildPlan(
        target=target, backend=backend, image_tag=tag, vcs_ref=vcs_ref,
        context_key=context_key(context), context_bytes=len(context), context_files=files,
        base_ref=f"{name}@{pinned}" if pinned else name, base_name=name,
        base_digest=(pinned or base_digest or ""),
        base_digest_from="Dockerfile" if pinned else "--base-digest",
        deepep_gin_ref=deepep_gin_ref,
        overrides=[{"name": k, "value": v, "type": "PLAINTEXT"} for k, v in overrides.items()],
        timeout_minutes=(names.IMAGE_BUILD_MULTIARCH_TIMEOUT_HOURS * 60
                         if "arm64" in platforms else None),
    )


def plan_values(plan: BuildPlan, region: str) -> dict[str, str]:
    """The buildspec variables a plan knows before the build runs."""
    repo = plan.target.repository_uri
    values = {
        "REPOSITORY_URI": repo, "CACHE_REPOSITORY_URI": plan.target.cache_repository_uri,
        "BUILDKIT_IMAGE": IMAGE_BUILD_BUILDKIT_IMAGE, "AWS_DEFAULT_REGION": region,
        "REGISTRY": repo.split("/", 1)[0], "REPOSITORY_NAME": plan.target.repository_name,
        "BASE_IMAGE": plan.base_ref, "BASE_NAME": plan.base_name,
        "BASE_IMAGE_DIGEST": plan.base_digest,
        "DEEPEP_GIN_REF": plan.deepep_gin_ref or "",
        "IMAGE_PLATFORMS": DEFAULT_PLATFORM,
    }
    values.update({o["name"]: o["value"] for o in plan.overrides})
    return values


def describe_plan(plan: BuildPlan, region: str, root: Path = TRAINER_DIR) -> list[str]:
    """What ``rlkit image build`` does for ``plan``, step by step, with the exact commands."""
    lines = [
        f"1. upload the build context ({plan.context_files} files from images/trainer, less "
        f".dockerignore; {plan.context_bytes} bytes zipped) to s3://{plan.target.bucket}/"
        f"{plan.context_key} (skipped when that key exists: the name is the content's hash)",
        f"2. start a build of CodeBuild project {plan.target.project} ({region}) with source "
        f"S3 {plan.source_location} and these environment overrides:",
    ]
    lines += [f"     {o['name']}={o['value']}" for o in plan.overrides]
    lines.append(f"   base image {plan.base_name}@{plan.base_digest} (digest from "
                 f"{plan.base_digest_from})")
    lines.append(f"3. the build runs images/trainer/{BUILDSPEC} (BUILD_DATE and IMAGE_DIGEST are "
                 "known only when it runs):")
    values = plan_values(plan, region)
    for phase, cmd in buildspec_commands(load_buildspec(root)):
        rendered = render_command(cmd, values).rstrip("\n")
        first, *rest = rendered.split("\n")
        lines.append(f"   [{phase}] {first}")
        lines += [f"   [{phase}]   {r}" for r in rest]
    lines.append(f"4. push {plan.image_uri} (layer cache "
                 f"{plan.target.cache_repository_uri}:buildcache-{plan.backend}), wait for the "
                 "scan on push and print its findings; logs in CloudWatch log group "
                 f"{plan.target.log_group}")
    return lines


# --- running a build -----------------------------------------------------------------------------


def existing_image(ecr: Any, repository: str, tag: str) -> dict[str, Any] | None:
    """The repository's image with ``tag``, or None."""
    try:
        details = ecr.describe_images(repositoryName=repository,
                                      imageIds=[{"imageTag": tag}])["imageDetails"]
    except ecr.exceptions.ImageNotFoundException:
        return None
    return details[0] if details else None


def upload_context(s3: Any, bucket: str, key: str, data: bytes, *,
                   now: datetime | None = None) -> bool:
    """Put the zip unless the key exists (content-addressed) and is not near the bucket's expiry
    of build contexts (names.IMAGE_BUILD_CONTEXT_EXPIRY_DAYS: put again, its age starts over, so
    the build does not start on a key S3 removes meanwhile). True when uploaded."""
    now = now or datetime.now(timezone.utc)
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
        modified = head.get("LastModified")
        if not (isinstance(modified, datetime) and now - modified > timedelta(
                days=names.IMAGE_BUILD_CONTEXT_EXPIRY_DAYS - names.IMAGE_BUILD_CONTEXT_REFRESH_DAYS)):
            return False
    except s3.exceptions.ClientError as err:
        # 403 too: without s3:ListBucket, S3 answers a missing key with 403. Putting the same
        # bytes again is harmless, and a caller without s3:PutObject learns it from the put.
        if err.response.get("Error", {}).get("Code") not in ("404", "403", "NoSuchKey",
                                                             "NotFound", "Forbidden"):
            raise
    s3.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/zip",
                  ChecksumAlgorithm="SHA256")
    return True


# What decides a build's image besides its source zip: a running build is this plan's only when
# these and the source location match (the buildspec's defaults fill in what a build leaves out).
ADOPT_VARS = ("VCS_REF", "IMAGE_PLATFORMS", "EP_BACKEND", "BASE_IMAGE_DIGEST", "DEEPEP_GIN_REF")


def _adopt_inputs(plan: BuildPlan, env: dict[str, str | None] | None = None,
                  source: str | None = None) -> dict[str, str]:
    """The inputs ``plan`` builds from, or, with ``env`` and ``source``, a build's: the source
    location and ADOPT_VARS as the buildspec sees them."""
    if env is None:
        env = {o["name"]: o["value"] for o in plan.overrides}
        source = plan.source_location
    defaults = {"IMAGE_PLATFORMS": DEFAULT_PLATFORM,
                # The buildspec falls back to the Dockerfile's pin; a build of the same source has
                # the same Dockerfile (another source is a difference already).
                "BASE_IMAGE_DIGEST": plan.base_digest if plan.base_digest_from == "Dockerfile"
                else ""}
    inputs = {"source": f"s3://{source}" if source else "(none)"}
    inputs.update({k: env.get(k) or defaults.get(k, "") for k in ADOPT_VARS})
    return inputs


# BatchGetBuilds takes at most 100 IDs [CodeBuild API reference, BatchGetBuilds, ids].
BATCH_GET_BUILDS_MAX = 100


def running_build(codebuild: Any, plan: BuildPlan, *, now: datetime | None = None) -> str | None:
    """The ID of a still running build of the plan's project that pushes its tag from its
    inputs (one an interrupted `rlkit image build` started: CodeBuild carries on), or None.
    Every build of the project is looked at, newest first, page by page, until one started
    before the longest a build can last (queued plus build timeout): that one and older have
    ended. A running build of the tag from other inputs raises ImageBuildError: it would push
    its image under the immutable tag first."""
    now = now or datetime.now(timezone.utc)
    oldest = now - timedelta(hours=max(names.IMAGE_BUILD_TIMEOUT_HOURS,
                                       names.IMAGE_BUILD_MULTIARCH_TIMEOUT_HOURS)
                             + names.IMAGE_BUILD_QUEUED_TIMEOUT_HOURS)
    builds = []
    pages = codebuild.get_paginator("list_builds_for_project").paginate(
        projectName=plan.target.project, sortOrder="DESCENDING")
    for page in pages:
        ids = page.get("ids") or []  # none for a project with no builds; BatchGetBuilds needs one
        ended = False
        for i in range(0, len(ids), BATCH_GET_BUILDS_MAX):
            chunk = ids[i:i + BATCH_GET_BUILDS_MAX]
            found = {b["id"]: b for b in codebuild.batch_get_builds(ids=chunk).get("builds", [])}
            for build in (found[b] for b in chunk if b in found):  # newest first, as listed
                started = build.get("startTime")
                if isinstance(started, datetime) and started < oldest:
                    ended = True
                    break
                builds.append(build)
            if ended:
                break
        if ended:
            break
    if not builds:
        return None
    wanted = _adopt_inputs(plan)
    others = []
    for build in builds:
        env = {v["name"]: v.get("value")
               for v in build.get("environment", {}).get("environmentVariables", [])}
        if build.get("buildStatus") != "IN_PROGRESS" or env.get(IMAGE_TAG_VAR) != plan.image_tag:
            continue
        found = _adopt_inputs(plan, env, build.get("source", {}).get("location"))
        if found == wanted:
            return build["id"]
        others.append((build["id"], found))
    if not others:
        return None
    build_id, found = others[0]  # the newest
    differs = "; ".join(f"{k} {found[k] or '(empty)'} (this run: {wanted[k] or '(empty)'})"
                        for k in wanted if found[k] != wanted[k])
    raise ImageBuildError(
        f"a build of {plan.image_uri} is already running ({build_id}) from other inputs: "
        f"{differs}. It would push its image under the tag first, and the tag is immutable, so "
        f"this run's could never be pushed. Fix: stop it (`aws codebuild stop-build --id "
        f"{build_id}`) and rerun, or set a new training.image_tag.")


def start_build(codebuild: Any, plan: BuildPlan) -> str:
    timeout = {"timeoutInMinutesOverride": plan.timeout_minutes} if plan.timeout_minutes else {}
    build = codebuild.start_build(
        projectName=plan.target.project, sourceTypeOverride="S3",
        sourceLocationOverride=plan.source_location,
        environmentVariablesOverride=plan.overrides, **timeout,
    )["build"]
    return build["id"]


@dataclass
class BuildResult:
    status: str
    image_uri: str | None = None
    image_digest: str | None = None
    failed_phase: str | None = None
    message: str | None = None


def follow_build(codebuild: Any, logs: Any, build_id: str, *, echo: Callable[[str], None],
                 poll_s: float, timeout_s: float,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> BuildResult:
    """Print phase changes and the build's log lines until it ends; raise TimeoutError after
    ``timeout_s`` (the build keeps running)."""
    deadline = clock() + timeout_s
    phase = None
    token = None
    started = clock()
    while True:
        build = codebuild.batch_get_builds(ids=[build_id])["builds"][0]
        if build.get("currentPhase") != phase:
            phase = build.get("currentPhase")
            echo(f"--- phase {phase} ({int(clock() - started)} s)")
        group = build.get("logs", {}).get("groupName")
        stream = build.get("logs", {}).get("streamName")
        if group and stream:
            token = _print_new_log_events(logs, group, stream, token, echo)
        status = build.get("buildStatus")
        if status != "IN_PROGRESS" and build.get("buildComplete", True):
            if group and stream:
                token = _print_new_log_events(logs, group, stream, token, echo)
            return _result(build)
        if clock() >= deadline:
            raise TimeoutError(f"build {build_id} still {phase} after {int(timeout_s)} s")
        sleep(poll_s)


def _print_new_log_events(logs: Any, group: str, stream: str, token: str | None,
                          echo: Callable[[str], None]) -> str | None:
    while True:
        kwargs: dict[str, Any] = {"logGroupName": group, "logStreamName": stream,
                                  "startFromHead": True}
        if token:
            kwargs["nextToken"] = token
        try:
            page = logs.get_log_events(**kwargs)
        except logs.exceptions.ResourceNotFoundException:
            return token  # the stream appears a few seconds after the build starts
        for event in page.get("events", []):
            echo(event["message"].rstrip("\n"))
        new = page.get("nextForwardToken")
        if new == token or not page.get("events"):
            return new
        token = new


def _result(build: dict[str, Any]) -> BuildResult:
    exported = {v["name"]: v.get("value") for v in build.get("exportedEnvironmentVariables", [])}
    result = BuildResult(status=build.get("buildStatus", "UNKNOWN"),
                         image_uri=exported.get("IMAGE_URI") or None,
                         image_digest=exported.get("IMAGE_DIGEST") or None)
    for p in build.get("phases", []):
        if p.get("phaseStatus") not in (None, "SUCCEEDED"):
            result.failed_phase = p.get("phaseType")
            result.message = "; ".join(c.get("message", "") for c in p.get("contexts", [])
                                       if c.get("message"))
            break
    return result
