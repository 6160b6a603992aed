"""The trainer image build: the CodeBuild project in every example's data stack, the buildspec
against the real Dockerfile, the buildspec's shell run with stand-in `aws`/`docker`, the build
context, and the dry run's exact commands."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.support.cdk import EXAMPLES, REPO_ROOT
from infra import names
from infra.config import EP_BACKENDS, LOG_RETENTION_DAYS, ConfigError, parse_config
from infra.names import OutputKeys
from infra.versions import IMAGE_BUILD_BUILDKIT_IMAGE, IMAGE_BUILD_HOST_IMAGE
from manifests.context import image_tag_for
from ops.image_build import (
    BuildTarget,
    base_image,
    build_args_passed,
    buildspec_commands,
    check_reuse_revision,
    describe_plan,
    dockerfile_args,
    load_buildspec,
    plan_build,
    trainer_unchanged,
)
from ops.image_context import TRAINER_DIR, context_files, context_key, context_zip

DIGEST = base_image()[1]  # what images/trainer/Dockerfile pins (plan_build refuses another)
OTHER_DIGEST = "sha256:" + "cd" * 32


def resources_of(template: dict, kind: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def only(template: dict, kind: str, contains: str = "") -> tuple[str, dict]:
    found = [(k, v) for k, v in resources_of(template, kind).items() if contains in k]
    assert len(found) == 1, (kind, contains, [k for k, _ in found])
    return found[0]


def env_vars(project: dict) -> dict[str, object]:
    variables = project["Properties"]["Environment"]["EnvironmentVariables"]
    return {v["Name"]: v["Value"] for v in variables}


# --- the CDK side --------------------------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES)
def test_data_stack_carries_the_build_project(synth, example):
    s = synth(example)
    t = s.template("data")
    project_id, project = only(t, "AWS::CodeBuild::Project")
    props = project["Properties"]
    env = props["Environment"]
    assert env["ComputeType"] == "BUILD_GENERAL1_2XLARGE"
    assert env["PrivilegedMode"] is True
    assert env["Image"] == IMAGE_BUILD_HOST_IMAGE
    assert props["Source"]["Type"] == "S3"
    assert props["Source"]["BuildSpec"] == "buildspec.yml"
    assert props["Artifacts"] == {"Type": "NO_ARTIFACTS"}
    assert props["TimeoutInMinutes"] == 240

    trainer_repo, _ = only(t, "AWS::ECR::Repository", "TrainerImage")
    cache_repo, cache = only(t, "AWS::ECR::Repository", "Cache")
    variables = env_vars(project)
    assert trainer_repo in json.dumps(variables["REPOSITORY_URI"])
    assert cache_repo in json.dumps(variables["CACHE_REPOSITORY_URI"])
    assert variables["BUILDKIT_IMAGE"] == IMAGE_BUILD_BUILDKIT_IMAGE
    assert variables["EP_BACKEND"] == s.config.training.expert_parallel.backend
    assert variables["IMAGE_TAG"] == image_tag_for(s.config)  # what the manifests pull
    # The cache repository's tags are rewritten by every build; the trainer's stay immutable.
    assert cache["Properties"]["ImageTagMutability"] == "MUTABLE"
    assert t["Resources"][trainer_repo]["Properties"]["ImageTagMutability"] == "IMMUTABLE"

    log_id, log_group = only(t, "AWS::Logs::LogGroup", "ImageBuild")
    assert log_group["Properties"]["RetentionInDays"] == s.config.image_build.log_retention_days
    assert log_group["DeletionPolicy"] == "Delete"
    assert props["LogsConfig"]["CloudWatchLogs"] == {"GroupName": {"Ref": log_id},
                                                      "Status": "ENABLED"}

    outputs = t["Outputs"]
    assert outputs[OutputKeys.IMAGE_BUILD_PROJECT]["Value"] == {"Ref": project_id}
    assert outputs[OutputKeys.IMAGE_BUILD_LOG_GROUP]["Value"] == {"Ref": log_id}
    assert cache_repo in json.dumps(outputs[OutputKeys.IMAGE_CACHE_REPOSITORY_URI]["Value"])


@pytest.mark.parametrize("example", EXAMPLES)
def test_build_role_reaches_only_its_repositories_contexts_and_logs(synth, example):
    s = synth(example)
    t = s.template("data")
    project_id, project = only(t, "AWS::CodeBuild::Project")
    role_id = project["Properties"]["ServiceRole"]["Fn::GetAtt"][0]
    trainer_repo, _ = only(t, "AWS::ECR::Repository", "TrainerImage")
    cache_repo, _ = only(t, "AWS::ECR::Repository", "Cache")
    log_id, _ = only(t, "AWS::Logs::LogGroup", "ImageBuild")
    bucket_id = [k for k in resources_of(t, "AWS::S3::Bucket") if k.startswith("DataBucket")][0]
    keys = list(resources_of(t, "AWS::KMS::Key"))
    policies = [p for p in resources_of(t, "AWS::IAM::Policy").values()
                if {"Ref": role_id} in p["Properties"]["Roles"]]
    assert policies, "the build role has no policy"
    actions_seen = set()
    for policy in policies:
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            actions_seen.update(actions)
            text = json.dumps(st["Resource"])
            if st["Resource"] == "*":
                # ECR's login call has no resource-level permission.
                assert actions == ["ecr:GetAuthorizationToken"], st
            elif all(a.startswith("ecr:") for a in actions):
                assert set(re.findall(r'"([A-Za-z0-9]+)", "Arn"', text)) <= {trainer_repo,
                                                                          cache_repo}, st
            elif all(a.startswith("logs:") for a in actions):
                assert st["Resource"] == {"Fn::GetAtt": [log_id, "Arn"]}, st
            elif all(a.startswith("s3:") for a in actions):
                assert bucket_id in text, st
                if actions != ["s3:GetBucketAcl", "s3:GetBucketLocation"]:
                    assert actions == ["s3:GetObject", "s3:GetObjectVersion"], st
                    assert f"/{names.IMAGE_BUILDS_PREFIX}*" in text, st
            elif all(a.startswith("kms:") for a in actions):
                assert keys and any(k in text for k in keys), st
            else:
                pytest.fail(f"unexpected statement on the build role: {st}")
            assert "/aws/codebuild/" not in text and "report-group" not in text
    assert {"ecr:PutImage", "ecr:DescribeImageScanFindings", "logs:PutLogEvents",
            "s3:GetObject"} <= actions_seen
    assert not [a for a in actions_seen if a.endswith("*")]
    if s.config.storage.kms:
        assert project["Properties"]["EncryptionKey"] == {"Fn::GetAtt": [keys[0], "Arn"]}
        assert any(a.startswith("kms:") for a in actions_seen)


def test_log_retention_days_are_cloudwatch_periods():
    # cfn-lint ships CloudFormation's resource schema for AWS::Logs::LogGroup; its enum is the
    # list CloudWatch accepts.
    schemas = Path(__import__("cfnlint").__file__).parent / "data" / "schemas" / "resources"
    enum = None
    for path in schemas.glob("*.json"):
        text = path.read_text()
        if '"AWS::Logs::LogGroup"' in text:
            doc = json.loads(text)
            if doc.get("typeName") == "AWS::Logs::LogGroup":
                enum = doc["properties"]["RetentionInDays"]["enum"]
    assert enum is not None, "cfn-lint's AWS::Logs::LogGroup schema not found"
    assert tuple(enum) == LOG_RETENTION_DAYS


def test_bad_log_retention_is_one_clear_problem():
    with pytest.raises(ConfigError) as err:
        parse_config({"image_build": {"log_retention_days": 10}})
    assert (
        "image_build.log_retention_days = 10: not a CloudWatch Logs retention period (1, 3, 5, "
        "7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, "
        "3288, 3653). Fix: use one of those, e.g. 14."
    ) in str(err.value)


# --- the buildspec against the Dockerfile --------------------------------------------------------


def dockerfile_problems(spec: dict, dockerfile: str) -> list[str]:
    """What the buildspec passes that the Dockerfile does not declare, and backends without a
    stage."""
    declared = dockerfile_args(dockerfile)
    problems = [f"--build-arg {a} is not an ARG of the Dockerfile"
                for a in build_args_passed(spec) if a not in declared]
    stages = set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", dockerfile, re.MULTILINE))
    problems += [f"no stage ep-{b}" for b in EP_BACKENDS if f"ep-{b}" not in stages]
    return problems


def test_buildspec_shape():
    spec = load_buildspec()
    assert spec["version"] == 0.2
    assert list(spec["phases"]) == ["pre_build", "build", "post_build"]
    assert spec["env"]["shell"] == "bash"
    assert spec["env"]["exported-variables"] == ["IMAGE_URI", "IMAGE_DIGEST"]
    for phase in ("pre_build", "build", "post_build"):
        assert spec["phases"][phase]["commands"], phase


def test_buildspec_build_args_match_the_dockerfile():
    spec = load_buildspec()
    dockerfile = (TRAINER_DIR / "Dockerfile").read_text()
    assert set(build_args_passed(spec)) == {"EP_BACKEND", "MILES_IMAGE", "DEEPEP_GIN_REF",
                                            "VCS_REF", "BUILD_DATE"}
    assert dockerfile_problems(spec, dockerfile) == []
    # The backends the buildspec accepts are the config's.
    text = "\n".join(cmd for _, cmd in buildspec_commands(spec))
    case = re.search(r'case "\$\{EP_BACKEND\}" in ([a-z|-]+)\)', text)
    assert case and tuple(case.group(1).split("|")) == EP_BACKENDS


def test_buildspec_check_catches_a_renamed_arg():
    spec = load_buildspec()
    broken = (TRAINER_DIR / "Dockerfile").read_text().replace("ARG EP_BACKEND", "ARG EP_VARIANT")
    broken = broken.replace("AS ep-deepep-gin", "AS ep-gin")
    assert dockerfile_problems(spec, broken) == [
        "--build-arg EP_BACKEND is not an ARG of the Dockerfile", "no stage ep-deepep-gin"]


def test_dockerfile_args_reads_defaults():
    args = dockerfile_args('ARG A=1\nARG B\nARG C="x y"\nRUN true \\\n  ARG D=no\nARG A=2\n')
    assert args == {"A": "1", "B": None, "C": "x y"}


# --- what the build pulls from registries -------------------------------------------------------


def syntax_directive(dockerfile: str) -> str | None:
    """The image a `# syntax=` directive names, read the way BuildKit does
    (moby/buildkit@991535e09734, tag v0.32.2, frontend/dockerfile/parser/directives.go:122-192:
    only the leading `# key=value` comment lines, a shebang skipped, the first word of the
    value)."""
    lines = dockerfile.lstrip("\ufeff").splitlines()
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    for line in lines:
        if not line.startswith("#"):
            break
        m = re.match(r"([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$", line[1:].lstrip())
        if not m or m.group(1).lower() not in ("syntax", "escape", "check"):
            break
        if m.group(1).lower() == "syntax":
            return m.group(2).split(" ")[0]
    return None


def registry_pulls(dockerfile: str, build_lines: list[str]) -> dict[str, str]:
    """Every registry image a build pulls -> where it comes from: the syntax directive's frontend,
    each FROM / COPY --from / RUN --mount from= that is not a stage (ARG defaults filled in), the
    `--build-arg` images and the BuildKit image of the rendered build commands."""
    pulls = {}
    if (ref := syntax_directive(dockerfile)) is not None:
        pulls[ref] = "Dockerfile # syntax directive"
    args = {k: v or "" for k, v in dockerfile_args(dockerfile).items()}
    build_args = {}
    for line in build_lines:
        build_args.update(re.findall(r"--build-arg ([A-Z_]+)=(\S+)", line))
        for ref in re.findall(r"--driver-opt image=(\S+)", line):
            pulls[ref] = "buildx --driver-opt image (BUILDKIT_IMAGE)"
    expand = lambda ref: re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?",
                                lambda m: build_args.get(m.group(1), args.get(m.group(1), "")), ref)
    stages = set()
    text = re.sub(r"\\\n", " ", dockerfile)
    for line in text.splitlines():
        refs = []
        if m := re.match(r"\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", line, re.I):
            refs.append(m.group(1))
            if m.group(2):
                stages.add(m.group(2).lower())
        refs += re.findall(r"--from=([^\s,]+)", line)
        refs += re.findall(r"--mount=\S*\bfrom=([^\s,]+)", line)
        for ref in refs:
            ref = expand(ref)
            if ref.lower() not in stages and ref != "scratch" and not re.fullmatch(r"ep-\S*", ref):
                pulls[ref] = f"Dockerfile: {line.strip()[:60]}"
    return pulls


def mirror_paragraph(docs: str) -> str:
    """docs/operations.md's paragraph on Docker Hub's pull limits and mirroring."""
    found = [p for p in docs.split("\n\n") if "toomanyrequests" in p]
    assert len(found) == 1, "docs/operations.md has no (or more than one) mirror paragraph"
    return found[0]


def unmirrorable_pulls(pulls: dict[str, str], paragraph: str) -> list[str]:
    """Pulls neither pinned by digest nor named (repository) in the mirror paragraph."""
    problems = []
    for ref, where in sorted(pulls.items()):
        if re.search(r"@sha256:[0-9a-f]{64}$", ref):
            continue
        repository = re.sub(r":[^/:]+$", "", ref.split("@")[0])
        if f"`{repository}" not in paragraph:
            problems.append(f"{ref} ({where}) is pulled by tag and not named in the mirror "
                            "paragraph of docs/operations.md")
    return problems


def _rendered_build_lines() -> list[str]:
    plan = plan_build(parse_config({}), TARGET, backend="nccl", vcs_ref="x", context=b"z",
                      files=1)
    return describe_plan(plan, "us-east-1")


def test_every_registry_pull_is_pinned_or_in_the_mirror_paragraph():
    dockerfile = (TRAINER_DIR / "Dockerfile").read_text()
    lines = _rendered_build_lines()
    pulls = registry_pulls(dockerfile, lines)
    # What the build pulls: the base by digest, the BuildKit image by tag, and no frontend image
    # (the Dockerfile has no syntax directive: the pinned BuildKit's built-in frontend parses it).
    assert set(pulls) == {f"radixark/miles:v0.1.0@{DIGEST}", IMAGE_BUILD_BUILDKIT_IMAGE}
    docs = (REPO_ROOT / "docs" / "operations.md").read_text()
    assert unmirrorable_pulls(pulls, mirror_paragraph(docs)) == []


def test_registry_pull_check_catches_a_syntax_directive_and_an_unpinned_image():
    dockerfile = (TRAINER_DIR / "Dockerfile").read_text()
    lines = _rendered_build_lines()
    paragraph = mirror_paragraph((REPO_ROOT / "docs" / "operations.md").read_text())
    with_syntax = "# syntax=docker/dockerfile:1.7\n" + dockerfile
    assert syntax_directive(with_syntax) == "docker/dockerfile:1.7"
    assert syntax_directive("# escape=`\n# syntax = docker/dockerfile:1 --x\nFROM a\n") == \
        "docker/dockerfile:1"
    assert syntax_directive("# hello\n# syntax=docker/dockerfile:1\nFROM a\n") is None
    assert unmirrorable_pulls(registry_pulls(with_syntax, lines), paragraph) == [
        "docker/dockerfile:1.7 (Dockerfile # syntax directive) is pulled by tag and not named in "
        "the mirror paragraph of docs/operations.md"]
    extra = dockerfile.replace("FROM base AS build\n", "FROM base AS build\n"
                               "COPY --from=nvidia/cuda:13.0.0-devel /usr/local/cuda /cuda\n")
    assert unmirrorable_pulls(registry_pulls(extra, lines), paragraph) == [
        "nvidia/cuda:13.0.0-devel (Dockerfile: COPY --from=nvidia/cuda:13.0.0-devel "
        "/usr/local/cuda /cuda) is pulled by tag and not named in the mirror paragraph of docs/operations.md"]


# --- the buildspec's shell, with stand-in aws and docker -----------------------------------------


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def run_phases(tmp_path: Path, *, dockerfile_ref: str, resolved: str, existing_tag: bool,
               env: dict[str, str], phases=("pre_build", "build", "post_build"),
               base_digests: tuple[str, ...] = (DIGEST, OTHER_DIGEST), metadata: str | None = None):
    """Run the buildspec's commands in one bash, as CodeBuild does, with `aws` and `docker`
    replaced by scripts that log their arguments. The base repository holds ``base_digests``;
    its tag resolves to ``resolved``; ``metadata``: the digest this build's push recorded
    (/tmp/build-metadata.json; None: no file)."""
    work = tmp_path / "src"
    work.mkdir()
    (work / "Dockerfile").write_text(f"ARG MILES_IMAGE={dockerfile_ref}\nFROM scratch\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    _stub(bin_dir, "aws", f"""echo "aws $*" >> {log}
case "$*" in
  "ecr describe-images"*) {"echo " + DIGEST + "; exit 0" if existing_tag else
    "echo 'An error occurred (ImageNotFoundException) when calling the DescribeImages "
    "operation: not found' >&2; exit 254"};;
  "ecr get-login-password"*) echo token;;
esac
exit 0
""")
    _stub(bin_dir, "docker", f"""echo "docker $*" >> {log}
case "$*" in
  "buildx imagetools inspect "*@sha256:*)
    ref="${{4}}"; digest="${{ref##*@}}"
    case " {' '.join(base_digests)} " in *" $digest "*)
      echo '{{"mediaType":"x","digest":"'"$digest"'","size":1}}';;
    *) echo "ERROR: $ref: not found" >&2; exit 1;; esac;;
  "buildx imagetools inspect"*) echo '{{"mediaType":"x","digest":"{resolved}","size":1}}';;
  "login"*) cat >/dev/null;;
  "buildx build"*) echo '{{"containerimage.digest":"{DIGEST}"}}' > /tmp/build-metadata.json;;
esac
exit 0
""")
    spec = load_buildspec()
    script = "\n".join(cmd for phase, cmd in buildspec_commands(spec) if phase in phases)
    script += '\necho "IMAGE_URI=${IMAGE_URI:-} IMAGE_DIGEST=${IMAGE_DIGEST:-}"\n'
    base_env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "AWS_DEFAULT_REGION": "us-east-1",
                "REPOSITORY_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/kit-trainer",
                "CACHE_REPOSITORY_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/kit-cache",
                "BUILDKIT_IMAGE": IMAGE_BUILD_BUILDKIT_IMAGE, "VCS_REF": "abc",
                "CODEBUILD_BUILD_SUCCEEDING": "1"}
    # The buildspec's metadata file has a fixed path: one run at a time, whichever pytest worker
    # runs it (tests of this file run side by side without --dist loadfile).
    with open("/tmp/build-metadata.json.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        Path("/tmp/build-metadata.json").unlink(missing_ok=True)
        if metadata is not None:
            Path("/tmp/build-metadata.json").write_text(json.dumps({"containerimage.digest": metadata}))
        result = subprocess.run(["bash", "-c", script], cwd=work, env={**base_env, **env},
                                capture_output=True, text=True, timeout=60)
        Path("/tmp/build-metadata.json").unlink(missing_ok=True)
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls


def test_buildspec_runs_through_with_a_pinned_base(tmp_path):
    result, calls = run_phases(tmp_path, dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}",
                               resolved=DIGEST, existing_tag=False,
                               env={"EP_BACKEND": "nccl", "IMAGE_TAG": "0.1.0-nccl"})
    assert result.returncode == 0, result.stderr
    build = [c for c in calls if c.startswith("docker buildx build")]
    # built, the tag looked at again, then the same build pushed (from the builder's cache)
    assert len(build) == 2
    assert build[1] == build[0].removesuffix(" .") + " --metadata-file /tmp/build-metadata.json --push ."
    # between them: the tag's look-up, then a fresh ECR login for the push
    between = calls[calls.index(build[0]) + 1:calls.index(build[1])]
    # (the login is a pipe, `aws ecr get-login-password | docker login`: its two ends start
    # together and log in either order)
    looked, *login = [c.split(" --")[0] for c in between]
    assert looked == "aws ecr describe-images"
    assert sorted(login) == ["aws ecr get-login-password", "docker login"]
    build = build[1:]
    assert f"--build-arg MILES_IMAGE=radixark/miles:v0.1.0@{DIGEST}" in build[0]
    assert "--tag 123456789012.dkr.ecr.us-east-1.amazonaws.com/kit-trainer:0.1.0-nccl" in build[0]
    assert ("--cache-to type=registry,ref=123456789012.dkr.ecr.us-east-1.amazonaws.com/"
            "kit-cache:buildcache-nccl,mode=max,image-manifest=true,oci-mediatypes=true,"
            "ignore-error=true") in build[0]
    assert ("aws ecr wait image-scan-complete --repository-name kit-trainer --image-id "
            f"imageDigest={DIGEST}") in calls
    assert any(c.startswith("aws ecr describe-image-scan-findings") for c in calls)
    assert (f"IMAGE_URI=123456789012.dkr.ecr.us-east-1.amazonaws.com/kit-trainer:0.1.0-nccl "
            f"IMAGE_DIGEST={DIGEST}") in result.stdout


@pytest.mark.parametrize("case, kwargs, message", [
    ("pinned digest not in the repository",
     dict(dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}", resolved=OTHER_DIGEST,
          existing_tag=False, env={}, base_digests=(OTHER_DIGEST,)),
     f"ERROR: cannot read the base image radixark/miles:v0.1.0@{DIGEST}, which the build pulls: "
     f"ERROR: radixark/miles:v0.1.0@{DIGEST}: not found. Fix: if the registry refused "
     "(toomanyrequests, a network error), rerun or mirror it (docs/operations.md, Trainer image "
     "build); if the digest is not in the repository, pin one that is: read it with 'docker "
     "buildx imagetools inspect radixark/miles:v0.1.0' and set ARG MILES_IMAGE=radixark/miles:"
     "v0.1.0@sha256:... in images/trainer/Dockerfile (or pass rlkit image build --base-digest)"),
    ("unpinned", dict(dockerfile_ref="radixark/miles:v0.1.0", resolved=DIGEST,
                      existing_tag=False, env={}),
     "base image radixark/miles:v0.1.0 has no pinned digest"),
    ("override differs", dict(dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}", resolved=DIGEST,
                              existing_tag=False, env={"BASE_IMAGE_DIGEST": OTHER_DIGEST}),
     f"BASE_IMAGE_DIGEST={OTHER_DIGEST} differs from the Dockerfile's pin {DIGEST}"),
    ("tag exists", dict(dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}", resolved=DIGEST,
                        existing_tag=True, env={}),
     "kit-trainer:0.1.0-nccl already exists and tags are immutable"),
    ("tag without backend", dict(dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}",
                                 resolved=DIGEST, existing_tag=False,
                                 env={"IMAGE_TAG": "0.1.0"}),
     "IMAGE_TAG=0.1.0 does not end in -nccl"),
])
def test_buildspec_pre_build_refuses(tmp_path, case, kwargs, message):
    env = {"EP_BACKEND": "nccl", "IMAGE_TAG": "0.1.0-nccl", **kwargs.pop("env")}
    result, calls = run_phases(tmp_path, env=env, phases=("pre_build",), **kwargs)
    assert result.returncode != 0, case
    assert message in result.stderr
    assert "Fix: " in result.stderr.split(message.split(". Fix: ")[0], 1)[1], case
    assert not any(c.startswith("docker buildx build") for c in calls)


def test_buildspec_builds_on_the_pinned_digest_after_the_tag_was_re_pushed(tmp_path):
    """radixark/miles:v0.1.0 re-pushed upstream: the build pulls name:tag@digest, which still
    exists, yet pre_build refused every build because the tag no longer equalled the pin."""
    result, calls = run_phases(tmp_path, dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}",
                               resolved=OTHER_DIGEST, existing_tag=False,
                               env={"EP_BACKEND": "nccl", "IMAGE_TAG": "0.1.0-nccl"})
    assert result.returncode == 0, result.stderr
    assert f"docker buildx imagetools inspect radixark/miles:v0.1.0@{DIGEST} --format " \
        "{{json .Manifest}}" in calls
    assert f"base image radixark/miles:v0.1.0@{DIGEST} (the pinned digest exists)" in result.stdout
    assert (f"WARNING: radixark/miles:v0.1.0 now resolves to {OTHER_DIGEST}, not the pinned "
            f"{DIGEST}: the tag was re-pushed upstream (or the pin was never its digest). This "
            "build uses the pinned digest.") in result.stdout
    build = [c for c in calls if c.startswith("docker buildx build")]
    assert len(build) == 2 and f"--build-arg MILES_IMAGE=radixark/miles:v0.1.0@{DIGEST}" in build[1]


def test_buildspec_says_nothing_of_the_tag_when_it_still_is_the_pin(tmp_path):
    result, _ = run_phases(tmp_path, dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}",
                           resolved=DIGEST, existing_tag=False,
                           env={"EP_BACKEND": "nccl", "IMAGE_TAG": "0.1.0-nccl"},
                           phases=("pre_build",))
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stdout + result.stderr


def test_buildspec_unpinned_base_with_an_override_digest(tmp_path):
    result, calls = run_phases(tmp_path, dockerfile_ref="radixark/miles:v0.1.0", resolved=DIGEST,
                               existing_tag=False,
                               env={"EP_BACKEND": "deepep-nvshmem",
                                    "IMAGE_TAG": "0.1.0-deepep-nvshmem",
                                    "BASE_IMAGE_DIGEST": DIGEST})
    assert result.returncode == 0, result.stderr
    assert any(f"MILES_IMAGE=radixark/miles:v0.1.0@{DIGEST}" in c for c in calls)


# --- build context and dry run -------------------------------------------------------------------


def test_context_respects_dockerignore():
    files = context_files()
    assert {"Dockerfile", "buildspec.yml", "pyproject.toml", "README.md",
            "docker/install-efa.sh", "src/rltrainer/launch.py"} <= set(files)
    assert not [f for f in files if f.startswith("tests/") or "__pycache__" in f
                or f.endswith(".pyc") or ".egg-info/" in f]


def test_dockerignore_rules(tmp_path):
    for rel in ("keep.txt", "tests/t.py", "src/a/__pycache__/x.pyc", "src/a/b.pyc", "src/a/b.py",
                "docs/x.md", "docs/keep.md", "deep/tests/t.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    (tmp_path / ".dockerignore").write_text(
        "# comment\n**/__pycache__\n**/*.pyc\ntests\ndocs\n!docs/keep.md\n")
    assert context_files(tmp_path) == [".dockerignore", "deep/tests/t.py", "docs/keep.md",
                                       "keep.txt", "src/a/b.py"]


def test_context_zip_is_reproducible(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "run.sh").write_text("echo\n")
    (tmp_path / "run.sh").chmod(0o755)
    first = context_zip(tmp_path)
    assert context_zip(tmp_path) == first
    with zipfile.ZipFile(__import__("io").BytesIO(first)) as zf:
        assert zf.namelist() == ["Dockerfile", "run.sh"]
        assert (zf.getinfo("run.sh").external_attr >> 16) & 0o111
    (tmp_path / "Dockerfile").write_text("FROM scratch\nRUN true\n")
    assert context_key(context_zip(tmp_path)) != context_key(first)
    assert context_key(first).startswith(names.IMAGE_BUILDS_PREFIX)


TARGET = BuildTarget(stack="kit-data", bucket="kit-data-bucket",
                     repository_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/kit-trainer",
                     cache_repository_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/kit-cache",
                     project="kit-image-build", log_group="kit-image-build-logs")


@pytest.mark.parametrize("backend", EP_BACKENDS)
def test_dry_run_renders_the_exact_build_command(backend):
    cfg = parse_config({"training": {"image_tag": "1.2.3"}})
    data = context_zip()
    gin = "0123abc" * 5 + "01234" if backend == "deepep-gin" else None
    plan = plan_build(cfg, TARGET, backend=backend, vcs_ref="deadbeef", context=data, files=3,
                      base_digest=DIGEST, deepep_gin_ref=gin)
    assert plan.image_tag == f"1.2.3-{backend}"
    lines = describe_plan(plan, "us-east-1")
    repo, cache = TARGET.repository_uri, TARGET.cache_repository_uri
    expected = (
        "   [build] docker buildx build --progress plain --platform linux/amd64 "
        "--provenance=false --sbom=false "
        f"--build-arg EP_BACKEND={backend} --build-arg MILES_IMAGE=radixark/miles:v0.1.0@{DIGEST} "
        f"--build-arg DEEPEP_GIN_REF={gin or ''} --build-arg VCS_REF=deadbeef "
        "--build-arg BUILD_DATE=${BUILD_DATE} "
        f"--cache-from type=registry,ref={cache}:buildcache-{backend} "
        f"--cache-to type=registry,ref={cache}:buildcache-{backend},mode=max,image-manifest=true,"
        "oci-mediatypes=true,ignore-error=true "
        f"--tag {repo}:1.2.3-{backend} --metadata-file /tmp/build-metadata.json --push ."
    )
    assert expected in lines
    assert (f"   [pre_build] docker buildx create --name rltrainer --driver docker-container "
            f"--driver-opt image={IMAGE_BUILD_BUILDKIT_IMAGE} --use") in lines
    assert lines[0].endswith(f"s3://kit-data-bucket/{context_key(data)} (skipped when that key "
                             "exists: the name is the content's hash)")
    assert f"     IMAGE_TAG=1.2.3-{backend}" in lines
    assert f"     EP_BACKEND={backend}" in lines


def test_dry_run_tag_is_the_one_the_manifests_pull():
    from manifests.context import image_tag_for

    for example in EXAMPLES:
        cfg = __import__("infra.config", fromlist=["load_config"]).load_config(
            REPO_ROOT / "examples" / f"{example}.yaml")
        plan = plan_build(cfg, TARGET, backend=None, vcs_ref="x", context=b"z", files=1,
                          base_digest=DIGEST,
                          deepep_gin_ref="0123abc" * 5 + "01234"
                          if cfg.training.expert_parallel.backend == "deepep-gin" else None)
        assert plan.image_tag == image_tag_for(cfg)


def test_yaml_is_valid_for_codebuild():
    # CodeBuild reads the file as YAML 1.1 (PyYAML agrees); a tab or a bad indent fails here.
    text = (TRAINER_DIR / "buildspec.yml").read_text()
    assert "\t" not in text
    assert yaml.safe_load(text)["version"] == 0.2


def test_bad_image_tag_is_refused():
    # Config validation refuses it first (tests/infra/test_config.py); the build checks the tag
    # with the same rule for a config made without validation.
    cfg = parse_config({})
    cfg = cfg.model_copy(update={"training": cfg.training.model_copy(
        update={"image_tag": "v1 beta"})})
    with pytest.raises(__import__("ops.image_build", fromlist=["x"]).ImageBuildError) as err:
        plan_build(cfg, TARGET, backend="nccl", vcs_ref="x", context=b"z", files=1,
                   base_digest=DIGEST)
    assert str(err.value) == (
        "  - training.image_tag v1 beta: v1 beta-nccl is not an image tag (letters, digits, _ . -, "
        "at most 128, not starting with . or -). Fix: use a version such as 0.1.0")


def test_buildspec_post_build_after_a_failed_build_pushes_and_scans_nothing(tmp_path):
    # pre_build found the tag free, the build failed before its push: the tag is still absent.
    result, calls = run_phases(tmp_path, dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}",
                               resolved=DIGEST, existing_tag=False,
                               env={"EP_BACKEND": "nccl", "IMAGE_TAG": "0.1.0-nccl",
                                    "CODEBUILD_BUILD_SUCCEEDING": "0", "TAG_WAS_FREE": "1",
                                    "REPOSITORY_NAME": "kit-trainer"},
                               phases=("post_build",))
    assert result.returncode == 0, result.stderr
    assert "build failed: nothing pushed" in result.stdout
    assert "IMAGE_URI= IMAGE_DIGEST=" in result.stdout  # nothing exported
    assert calls == ["aws ecr describe-images --repository-name kit-trainer --image-ids "
                     "imageTag=0.1.0-nccl --query imageDetails[0].imageDigest --output text"]


def test_buildspec_post_build_before_the_tag_check_looks_nothing_up(tmp_path):
    # pre_build refused (here: the tag exists already): this build pushed nothing.
    result, calls = run_phases(tmp_path, dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}",
                               resolved=DIGEST, existing_tag=True,
                               env={"EP_BACKEND": "nccl", "IMAGE_TAG": "0.1.0-nccl",
                                    "CODEBUILD_BUILD_SUCCEEDING": "0"},
                               phases=("post_build",))
    assert result.returncode == 0, result.stderr
    assert "build failed before the push: nothing pushed" in result.stdout
    assert calls == []


def test_buildspec_post_build_after_a_failure_past_the_push_says_it_was_pushed(tmp_path):
    """The image push and the cache export run side by side in BuildKit; a failure after the
    push (a cache export without ignore-error, a post_build command) left the tag in ECR while
    post_build said "nothing pushed", and a rerun was refused because the tag existed."""
    result, calls = run_phases(tmp_path, dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}",
                               resolved=DIGEST, existing_tag=True,
                               env={"EP_BACKEND": "nccl", "IMAGE_TAG": "0.1.0-nccl",
                                    "CODEBUILD_BUILD_SUCCEEDING": "0", "TAG_WAS_FREE": "1",
                                    "REPOSITORY_NAME": "kit-trainer"},
                               phases=("post_build",), metadata=DIGEST)
    assert result.returncode == 0, result.stderr
    assert "nothing pushed" not in result.stdout
    assert ("build failed, but 123456789012.dkr.ecr.us-east-1.amazonaws.com/kit-trainer:0.1.0-nccl "
            f"was pushed ({DIGEST}) and tags are immutable: if the log shows the failure came "
            "after the push, 'rlkit image build --reuse' uses it; otherwise bump "
            "training.image_tag and build again") in result.stdout
    assert not any("scan" in c for c in calls)


# --- --reuse: which commit the existing image was built from -------------------------------------


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
                          ).stdout.strip()


def test_trainer_unchanged_compares_images_trainer_only(tmp_path):
    repo = tmp_path / "repo"
    (repo / "images" / "trainer").mkdir(parents=True)
    (repo / "docs").mkdir()
    _git(repo, "init", "-q")
    (repo / "images" / "trainer" / "Dockerfile").write_text("FROM scratch\n")
    (repo / "docs" / "a.md").write_text("a\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "docs" / "a.md").write_text("b\n")
    _git(repo, "commit", "-qam", "docs only")
    docs_only = _git(repo, "rev-parse", "HEAD")
    (repo / "images" / "trainer" / "Dockerfile").write_text("FROM scratch\nRUN true\n")
    _git(repo, "commit", "-qam", "trainer")
    trainer = _git(repo, "rev-parse", "HEAD")
    assert trainer_unchanged(first, docs_only, repo) is True
    assert trainer_unchanged(first, trainer, repo) is False
    assert trainer_unchanged(first, "f" * 40, repo) is None  # not in this clone
    assert trainer_unchanged(first, f"{docs_only}-dirty", repo) is None
    assert trainer_unchanged("unknown", docs_only, repo) is None


REF = "r/trainer:0.1.0-nccl@sha256:ab"
A, B = "a" * 40, "b" * 40


@pytest.mark.parametrize("image_rev, this_rev, unchanged, ok, warn, message", [
    (A, A, None, True, False, f"{REF} was built from this commit ({A})"),
    (A, B, True, True, False, f"{REF} was built from {A}; images/trainer is the same at {B}"),
    (A, B, False, False, False,
     f"cannot reuse {REF}: it was built from {A} (its org.opencontainers.image.revision label), "
     f"this run builds {B}, and images/trainer differs between them; the pods would run other "
     "code than this checkout's. Fix: set a new training.image_tag in the config and run `rlkit "
     f"image build` again (tags are immutable), or reuse it from a checkout of {A}."),
    (A, f"{A}-dirty", None, False, False, None),
    (None, A, None, True, True,
     f"could not tell which commit {REF} was built from (its org.opencontainers.image.revision "
     "label is missing); reusing it unchecked. If images/trainer changed since, set a new "
     "training.image_tag and build."),
    ("unknown", A, None, True, True, None),
    (A, "unknown", None, True, True,
     f"this checkout's commit is unknown (no git), so {REF}, built from {A}, is reused "
     "unchecked. If images/trainer changed since, set a new training.image_tag and build."),
    (f"{A}-dirty", f"{A}-dirty", None, True, True, None),
])
def test_reuse_revision_rules(image_rev, this_rev, unchanged, ok, warn, message):
    asked = []

    def compare(old, new):
        asked.append((old, new))
        return unchanged

    verdict = check_reuse_revision(REF, image_rev, this_rev, compare)
    assert (verdict.ok, verdict.warn) == (ok, warn)
    if message is not None:
        assert verdict.message == message
    # git is asked only when both sides name a commit and they differ
    assert bool(asked) == (image_rev not in (None, "unknown") and this_rev != "unknown"
                           and image_rev != this_rev)


def test_the_dockerfile_records_the_revision_the_reuse_check_reads():
    text = (TRAINER_DIR / "Dockerfile").read_text()
    assert 'org.opencontainers.image.revision="${VCS_REF}"' in text
    assert "--build-arg VCS_REF=${VCS_REF}" in "\n".join(
        cmd for _, cmd in buildspec_commands(load_buildspec()))


# --- two builds of one tag ----------------------------------------------------------------------

RACE_ENV = {"EP_BACKEND": "nccl", "IMAGE_TAG": "0.1.0-nccl", "TAG_WAS_FREE": "1",
            "REPOSITORY_NAME": "kit-trainer", "BASE_NAME": "radixark/miles",
            "BASE_IMAGE_DIGEST": DIGEST, "BUILD_DATE": "2026-01-01T00:00:00Z"}


def test_buildspec_pushes_nothing_when_another_build_pushed_the_tag_meanwhile(tmp_path):
    """Two builds of one tag both passed pre_build's check; the second to finish failed at the
    push on the immutable tag after hours. It now looks again before pushing."""
    result, calls = run_phases(tmp_path, dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}",
                               resolved=DIGEST, existing_tag=True, env=RACE_ENV,
                               phases=("build",))
    assert result.returncode != 0
    builds = [c for c in calls if c.startswith("docker buildx build")]
    assert len(builds) == 1 and "--push" not in builds[0]  # built, never pushed
    assert (f"kit-trainer:0.1.0-nccl was pushed by another build while this one built ({DIGEST}); "
            "this build pushes nothing") in result.stderr


def test_buildspec_post_build_without_its_own_digest_does_not_claim_the_push(tmp_path):
    """The tag holds an image, but this build recorded no digest (its push never ran): it
    said "was pushed (digest) ... --reuse uses it" of another build's image."""
    result, _ = run_phases(tmp_path, dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}",
                           resolved=DIGEST, existing_tag=True,
                           env={**RACE_ENV, "CODEBUILD_BUILD_SUCCEEDING": "0"},
                           phases=("post_build",))
    assert result.returncode == 0, result.stderr
    assert "was pushed (" not in result.stdout
    assert "this build recorded no digest of its own" in result.stdout


def test_buildspec_post_build_names_another_builds_image(tmp_path):
    result, _ = run_phases(tmp_path, dockerfile_ref=f"radixark/miles:v0.1.0@{DIGEST}",
                           resolved=DIGEST, existing_tag=True,
                           env={**RACE_ENV, "CODEBUILD_BUILD_SUCCEEDING": "0"},
                           phases=("post_build",), metadata=OTHER_DIGEST)
    assert "was pushed (" not in result.stdout
    assert (f"build failed and pushed nothing: 123456789012.dkr.ecr.us-east-1.amazonaws.com/"
            f"kit-trainer:0.1.0-nccl holds {DIGEST}, which another build of the tag pushed (this "
            f"build's own digest: {OTHER_DIGEST})") in result.stdout
