"""`rlkit image build` and `rlkit image status` against Stubber-wrapped clients (moto has no
CodeBuild builds or ECR scan findings): every call and its parameters are checked."""

from __future__ import annotations

import datetime as dt
import functools
import json

import boto3
import pytest
from botocore.stub import ANY, Stubber

from infra.names import OutputKeys
from tests.support import REPO_ROOT
from ops import cli
from ops.image_build import BACKEND_LABEL, base_image, follow_build
from ops.image_context import context_key, context_zip
from ops.aws import AwsClients

REGION = "us-east-1"
ACCOUNT = "123456789012"
REPO = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/moe-rl-trainer"
CACHE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/moe-rl-cache"
DIGEST = base_image()[1]  # the base digest images/trainer/Dockerfile pins (--base-digest may repeat it)
IMAGE_DIGEST = "sha256:" + "12" * 32
BUILD_ID = "ImageBuildProject-abc:0f1e2d3c"
GIN_REF = "0123456789abcdef0123456789abcdef01234567"  # a DeepEP fork commit, in full
OUTPUTS = {"moe-rl-data": {
    OutputKeys.BUCKET_NAME: "moe-rl-data-bucket", OutputKeys.ECR_REPOSITORY_URI: REPO,
    OutputKeys.TRAINER_ROLE_ARN: f"arn:aws:iam::{ACCOUNT}:role/t",
    OutputKeys.IMAGE_BUILD_PROJECT: "ImageBuildProject-abc",
    OutputKeys.IMAGE_BUILD_LOG_GROUP: "moe-rl-image-build",
    OutputKeys.IMAGE_CACHE_REPOSITORY_URI: CACHE,
}}


@pytest.fixture(autouse=True)
def credentials(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)


class Stubbed:
    """Five Stubber-wrapped clients; every queued response must be used."""

    def __init__(self):
        services = ("cloudformation", "s3", "codebuild", "logs", "ecr")
        self.clients = AwsClients(**{s: boto3.client(s, region_name=REGION) for s in services})
        self.stubs = {s: Stubber(getattr(self.clients, s)) for s in services}
        for s in self.stubs.values():
            s.activate()

    def __getattr__(self, name):
        return self.stubs[name]

    def done(self):
        for s in self.stubs.values():
            s.assert_no_pending_responses()


@pytest.fixture
def outputs_file(tmp_path):
    path = tmp_path / "cdk-outputs.json"
    path.write_text(json.dumps(OUTPUTS))
    return path


def run(argv, stubbed):
    args = cli.build_parser().parse_args(argv)
    args.clients_factory = lambda region, profile: stubbed.clients
    return args.func(args)


BASE = ["image", "build", "--base-digest", DIGEST, "--vcs-ref", "c0ffee"]


def expect_new_tag(st, tag="0.1.0-nccl"):
    st.ecr.add_client_error("describe_images", "ImageNotFoundException", expected_params={
        "repositoryName": "moe-rl-trainer", "imageIds": [{"imageTag": tag}]})


def expect_upload(st):
    key = context_key(context_zip())
    st.s3.add_client_error("head_object", "404", http_status_code=404,
                           expected_params={"Bucket": "moe-rl-data-bucket", "Key": key})
    st.s3.add_response("put_object", {}, expected_params={
        "Bucket": "moe-rl-data-bucket", "Key": key, "Body": ANY,
        "ContentType": "application/zip", "ChecksumAlgorithm": "SHA256"})
    return key


def expect_start(st, key, backend="nccl", extra=(), listed=True):
    overrides = [{"name": "EP_BACKEND", "value": backend, "type": "PLAINTEXT"},
                 {"name": "IMAGE_TAG", "value": f"0.1.0-{backend}", "type": "PLAINTEXT"},
                 {"name": "VCS_REF", "value": "c0ffee", "type": "PLAINTEXT"},
                 {"name": "BASE_IMAGE_DIGEST", "value": DIGEST, "type": "PLAINTEXT"}, *extra]
    if listed:  # no build of the tag is running
        st.codebuild.add_response("list_builds_for_project", {}, expected_params={
            "projectName": "ImageBuildProject-abc", "sortOrder": "DESCENDING"})
    st.codebuild.add_response("start_build", {"build": {"id": BUILD_ID}}, expected_params={
        "projectName": "ImageBuildProject-abc", "sourceTypeOverride": "S3",
        "sourceLocationOverride": f"moe-rl-data-bucket/{key}",
        "environmentVariablesOverride": overrides})


def build_doc(status, phase, phases=(), exported=()):
    return {"builds": [{"id": BUILD_ID, "buildStatus": status, "currentPhase": phase,
                        "buildComplete": status != "IN_PROGRESS",
                        "logs": {"groupName": "moe-rl-image-build", "streamName": "s1"},
                        "phases": list(phases),
                        "exportedEnvironmentVariables": list(exported)}]}


def expect_log_page(st, messages, token_in, token_out):
    params = {"logGroupName": "moe-rl-image-build", "logStreamName": "s1", "startFromHead": True}
    if token_in:
        params["nextToken"] = token_in
    st.logs.add_response("get_log_events", {
        "events": [{"timestamp": 1, "message": m, "ingestionTime": 1} for m in messages],
        "nextForwardToken": token_out, "nextBackwardToken": "b"}, expected_params=params)


def test_build_wait_streams_logs_and_prints_the_image(outputs_file, capsys):
    st = Stubbed()
    expect_new_tag(st)
    key = expect_upload(st)
    expect_start(st, key)
    st.codebuild.add_response("batch_get_builds", build_doc("IN_PROGRESS", "PRE_BUILD"),
                              expected_params={"ids": [BUILD_ID]})
    expect_log_page(st, ["base image radixark/miles:v0.1.0@... (the pinned digest exists)"], None,
                    "f1")
    expect_log_page(st, [], "f1", "f1")
    st.codebuild.add_response("batch_get_builds", build_doc(
        "SUCCEEDED", "COMPLETED",
        phases=[{"phaseType": "BUILD", "phaseStatus": "SUCCEEDED"}],
        exported=[{"name": "IMAGE_URI", "value": f"{REPO}:0.1.0-nccl"},
                  {"name": "IMAGE_DIGEST", "value": IMAGE_DIGEST}]),
        expected_params={"ids": [BUILD_ID]})
    expect_log_page(st, ["pushed it", "CRITICAL 0"], "f1", "f2")
    expect_log_page(st, [], "f2", "f2")
    expect_log_page(st, [], "f2", "f2")
    code = run([*BASE, "--outputs", str(outputs_file), "--wait", "--poll", "0"], st)
    out = capsys.readouterr().out
    assert code == 0, out
    st.done()
    assert f"uploaded: s3://moe-rl-data-bucket/{key}" in out
    assert f"started build {BUILD_ID} of {REPO}:0.1.0-nccl (backend nccl)" in out
    assert "--- phase PRE_BUILD" in out and "--- phase COMPLETED" in out
    assert "base image radixark/miles:v0.1.0@... (the pinned digest exists)\n" in out
    assert "pushed it\nCRITICAL 0\n" in out
    assert out.rstrip().endswith(f"image: {REPO}:0.1.0-nccl@{IMAGE_DIGEST}")


def test_build_without_wait_starts_and_returns(outputs_file, capsys):
    st = Stubbed()
    expect_new_tag(st, "0.1.0-deepep-gin")
    key = expect_upload(st)
    expect_start(st, key, "deepep-gin",
                 extra=[{"name": "DEEPEP_GIN_REF", "value": GIN_REF, "type": "PLAINTEXT"}])
    code = run([*BASE, "--outputs", str(outputs_file), "--backend", "deepep-gin",
                "--deepep-gin-ref", GIN_REF], st)
    assert code == 0
    st.done()
    assert f"aws codebuild batch-get-builds --ids {BUILD_ID}" in capsys.readouterr().out


def running(build_id, tag="0.1.0-nccl", key=None, **env):
    """A BatchGetBuilds entry of a running build: this run's inputs unless ``key``/``env`` say."""
    variables = {"EP_BACKEND": "nccl", "IMAGE_TAG": tag, "VCS_REF": "c0ffee",
                 "BASE_IMAGE_DIGEST": DIGEST, **env}
    return {"id": build_id, "buildStatus": "IN_PROGRESS",
            "source": {"type": "S3",
                       "location": f"moe-rl-data-bucket/{key or context_key(context_zip())}"},
            "environment": {
                "type": "LINUX_CONTAINER", "image": "aws/codebuild/standard:7.0",
                "computeType": "BUILD_GENERAL1_2XLARGE",
                "environmentVariables": [{"name": k, "value": v, "type": "PLAINTEXT"}
                                         for k, v in variables.items() if v is not None]}}


def test_a_build_an_interrupted_run_left_running_is_followed_not_started_again(outputs_file, capsys):
    """Ctrl-C on `rlkit image build --wait` leaves CodeBuild building; a rerun (or a CI retry)
    found no pushed tag and started a second build, whose push of the immutable tag failed."""
    st = Stubbed()
    expect_new_tag(st)
    older = "ImageBuildProject-abc:0f0f"
    st.codebuild.add_response("list_builds_for_project", {"ids": [BUILD_ID, older]})
    # Started without --base-digest: the buildspec takes the Dockerfile's pin, this run's digest.
    st.codebuild.add_response("batch_get_builds", {"builds": [
        running(BUILD_ID, BASE_IMAGE_DIGEST=None),
        running(older, tag="0.0.9-nccl", key="image-builds/trainer-old.zip")]},
        expected_params={"ids": [BUILD_ID, older]})
    code = run([*BASE, "--outputs", str(outputs_file)], st)  # no upload, no StartBuild stubbed
    out = capsys.readouterr().out
    assert code == 0, out
    st.done()
    assert (f"a build of {REPO}:0.1.0-nccl from the same source and inputs is already running "
            f"({BUILD_ID}, started by an earlier `rlkit image build`): following it instead of "
            "starting a second one") in out
    assert f"aws codebuild batch-get-builds --ids {BUILD_ID}" in out


def test_a_running_build_past_the_newest_twenty_is_found(outputs_file, capsys):
    """Only the newest 20 builds were looked at: a running build of the tag behind 20 newer
    ones (other tags, CI retries) was missed, and a second build of the tag raced it to the
    immutable tag. Every page is read, until builds older than a build can last."""
    st = Stubbed()
    expect_new_tag(st)
    now = dt.datetime.now(dt.timezone.utc)
    newer = [f"ImageBuildProject-abc:{i:04x}" for i in range(20)]
    page2 = ["ImageBuildProject-abc:running", "ImageBuildProject-abc:ancient"]
    st.codebuild.add_response("list_builds_for_project", {"ids": newer, "nextToken": "t2"},
                              expected_params={"projectName": "ImageBuildProject-abc",
                                               "sortOrder": "DESCENDING"})
    st.codebuild.add_response("batch_get_builds", {"builds": [
        {**running(b, tag="0.0.9-nccl"), "buildStatus": "SUCCEEDED", "startTime": now}
        for b in newer]}, expected_params={"ids": newer})
    st.codebuild.add_response("list_builds_for_project", {"ids": page2, "nextToken": "t3"},
                              expected_params={"projectName": "ImageBuildProject-abc",
                                               "sortOrder": "DESCENDING", "nextToken": "t2"})
    st.codebuild.add_response("batch_get_builds", {"builds": [
        {**running(page2[0], BASE_IMAGE_DIGEST=None), "startTime": now - dt.timedelta(hours=3)},
        # older than the queued + build timeouts: ended, and no later page is read
        {**running(page2[1]), "startTime": now - dt.timedelta(hours=12)}]},
        expected_params={"ids": page2})
    code = run([*BASE, "--outputs", str(outputs_file)], st)  # no upload, no StartBuild stubbed
    out = capsys.readouterr().out
    assert code == 0, out
    st.done()
    assert f"is already running ({page2[0]}, started by an earlier `rlkit image build`)" in out


def test_a_running_build_of_the_tag_from_other_inputs_is_refused_not_followed(outputs_file,
                                                                              capsys):
    """Ctrl-C, a fix under images/trainer and a rerun with the same image_tag: the rerun followed
    the old build (the unfixed source) and printed its digest as if it were the new image."""
    st = Stubbed()
    expect_new_tag(st)
    old = "ImageBuildProject-abc:0e0e"
    st.codebuild.add_response("list_builds_for_project", {"ids": [old]})
    st.codebuild.add_response("batch_get_builds", {"builds": [
        running(old, key="image-builds/trainer-unfixed.zip", VCS_REF="bad1dea",
                BASE_IMAGE_DIGEST=None)]},
        expected_params={"ids": [old]})
    code = run([*BASE, "--outputs", str(outputs_file), "--wait"], st)  # nothing started
    captured = capsys.readouterr()
    assert code == 2, captured.out
    st.done()
    assert captured.err == (
        f"error: a build of {REPO}:0.1.0-nccl is already running ({old}) from other inputs: "
        "source s3://moe-rl-data-bucket/image-builds/trainer-unfixed.zip (this run: "
        f"s3://moe-rl-data-bucket/{context_key(context_zip())}); VCS_REF bad1dea (this run: "
        "c0ffee). It would push its image under the tag first, and the tag is immutable, so "
        f"this run's could never be pushed. Fix: stop it (`aws codebuild stop-build --id {old}`) "
        "and rerun, or set a new training.image_tag.\n")
    assert "image:" not in captured.out


@pytest.mark.parametrize("env, differs", [
    ({"IMAGE_PLATFORMS": "linux/amd64,linux/arm64"},
     "IMAGE_PLATFORMS linux/amd64,linux/arm64 (this run: linux/amd64)"),
    ({"DEEPEP_GIN_REF": "a" * 40}, f"DEEPEP_GIN_REF {'a' * 40} (this run: (empty))"),
    ({"BASE_IMAGE_DIGEST": "sha256:" + "cd" * 32},
     f"BASE_IMAGE_DIGEST sha256:{'cd' * 32} (this run: {DIGEST})"),
])
def test_every_build_input_is_compared(outputs_file, capsys, env, differs):
    st = Stubbed()
    expect_new_tag(st)
    st.codebuild.add_response("list_builds_for_project", {"ids": [BUILD_ID]})
    st.codebuild.add_response("batch_get_builds", {"builds": [running(BUILD_ID, **env)]})
    assert run([*BASE, "--outputs", str(outputs_file)], st) == 2
    st.done()
    assert f"from other inputs: {differs}. It would push" in capsys.readouterr().err


def test_without_permission_to_list_builds_it_warns_and_starts_one(outputs_file, capsys):
    st = Stubbed()
    expect_new_tag(st)
    key = expect_upload(st)
    st.codebuild.add_client_error("list_builds_for_project", "AccessDeniedException")
    expect_start(st, key, listed=False)
    assert run([*BASE, "--outputs", str(outputs_file)], st) == 0
    st.done()
    assert "warning: could not look for a running build of 0.1.0-nccl" in capsys.readouterr().err


def test_failed_build_names_the_phase(outputs_file, capsys):
    st = Stubbed()
    expect_new_tag(st)
    key = expect_upload(st)
    expect_start(st, key)
    st.codebuild.add_response("batch_get_builds", build_doc(
        "FAILED", "COMPLETED", phases=[
            {"phaseType": "PRE_BUILD", "phaseStatus": "SUCCEEDED"},
            {"phaseType": "BUILD", "phaseStatus": "FAILED", "contexts": [
                {"statusCode": "COMMAND_EXECUTION_ERROR",
                 "message": "Error while executing command: docker buildx build ... exit 1"}]}]))
    expect_log_page(st, ["ERROR: Miles refused --moe-token-dispatcher-type"], None, "f1")
    expect_log_page(st, [], "f1", "f1")
    expect_log_page(st, [], "f1", "f1")
    expect_new_tag(st)  # after the failure: the tag is still free
    code = run([*BASE, "--outputs", str(outputs_file), "--wait", "--poll", "0"], st)
    captured = capsys.readouterr()
    assert code == 1
    st.done()
    assert "ERROR: Miles refused --moe-token-dispatcher-type" in captured.out
    assert (f"error: build {BUILD_ID} FAILED in phase BUILD: Error while executing command: "
            "docker buildx build ... exit 1. The log above says why.\n") == captured.err
    assert f"nothing pushed: {REPO}:0.1.0-nccl is not in the repository" in captured.out


def expect_failed_build(st, phase="POST_BUILD"):
    st.codebuild.add_response("batch_get_builds", build_doc(
        "FAILED", "COMPLETED", phases=[
            {"phaseType": "BUILD", "phaseStatus": "SUCCEEDED" if phase != "BUILD" else "FAILED"},
            {"phaseType": phase, "phaseStatus": "FAILED", "contexts": [
                {"statusCode": "COMMAND_EXECUTION_ERROR", "message": "exit status 255"}]}]))
    expect_log_page(st, [], None, "f1")
    expect_log_page(st, [], "f1", "f1")


def test_a_build_that_failed_after_its_push_says_the_image_was_pushed(outputs_file, capsys):
    """The push finished, then a later step failed (a cache export, a post_build command): the
    CLI said only "FAILED", the log "nothing pushed", and a rerun was refused as the tag existed."""
    st = Stubbed()
    expect_new_tag(st)
    key = expect_upload(st)
    expect_start(st, key)
    expect_failed_build(st)
    st.ecr.add_response("describe_images", {"imageDetails": [
        {"imageDigest": IMAGE_DIGEST, "imageTags": ["0.1.0-nccl"]}]}, expected_params={
        "repositoryName": "moe-rl-trainer", "imageIds": [{"imageTag": "0.1.0-nccl"}]})
    code = run([*BASE, "--outputs", str(outputs_file), "--wait", "--poll", "0", "-o", "json"], st)
    captured = capsys.readouterr()
    assert code == 1
    st.done()
    message = (
        f"build {BUILD_ID} FAILED in phase POST_BUILD: exit status 255. The log above says why. "
        f"But the tag is in the repository: {REPO}:0.1.0-nccl@{IMAGE_DIGEST}, pushed by this "
        "build before the failure or by another build of the tag (the log's last lines say "
        "which), and tags are immutable, so a rerun with this training.image_tag is refused. "
        "Fix: if the log above says this build pushed it after the image's own steps passed, or "
        "another build of the same inputs did, `rlkit image build --reuse` uses it; otherwise "
        "set a new training.image_tag and build again.")
    assert captured.err.endswith(f"error: {message}\n")
    doc = json.loads(captured.out)
    assert (doc["ok"], doc["build_id"], doc["status"], doc["pushed"], doc["image"],
            doc["error"]) == (False, BUILD_ID, "FAILED", True,
                              f"{REPO}:0.1.0-nccl@{IMAGE_DIGEST}", message)


def test_a_failed_build_whose_tag_cannot_be_read_warns(outputs_file, capsys):
    st = Stubbed()
    expect_new_tag(st)
    key = expect_upload(st)
    expect_start(st, key)
    expect_failed_build(st, "BUILD")
    st.ecr.add_client_error("describe_images", "AccessDeniedException", "no")
    code = run([*BASE, "--outputs", str(outputs_file), "--wait", "--poll", "0", "-o", "json"], st)
    captured = capsys.readouterr()
    assert code == 1
    st.done()
    assert (f"warning: could not check whether build {BUILD_ID} pushed {REPO}:0.1.0-nccl "
            "(DescribeImages failed: AccessDeniedException: no)") in captured.err
    doc = json.loads(captured.out)
    assert (doc["ok"], doc["build_id"], doc["pushed"]) == (False, BUILD_ID, None)


def _started(st):
    expect_new_tag(st)
    key = expect_upload(st)
    expect_start(st, key)


def test_json_gets_one_document_when_the_wait_times_out(outputs_file, capsys):
    st = Stubbed()
    _started(st)
    st.codebuild.add_response("batch_get_builds", build_doc("IN_PROGRESS", "BUILD"))
    expect_log_page(st, [], None, "f1")
    code = run([*BASE, "--outputs", str(outputs_file), "--wait", "--poll", "0", "--timeout", "0",
                "-o", "json"], st)
    captured = capsys.readouterr()
    assert code == 1
    st.done()
    doc = json.loads(captured.out)  # exactly one document
    message = (f"build {BUILD_ID} still BUILD after 0 s; it keeps running in CodeBuild. Fix: wait "
               f"for it (`aws codebuild batch-get-builds --ids {BUILD_ID}`) or raise --timeout")
    assert (doc["ok"], doc["build_id"], doc["status"], doc["error"]) == (
        False, BUILD_ID, "IN_PROGRESS", message)
    assert f"error: {message}\n" in captured.err


def test_json_gets_one_document_when_the_build_is_lost(outputs_file, capsys):
    st = Stubbed()
    _started(st)
    st.codebuild.add_client_error("batch_get_builds", "ThrottlingException", "slow down")
    code = run([*BASE, "--outputs", str(outputs_file), "--wait", "--poll", "0", "-o", "json"], st)
    captured = capsys.readouterr()
    assert code == 1
    st.done()
    doc = json.loads(captured.out)
    assert (doc["ok"], doc["build_id"], doc["status"]) == (False, BUILD_ID, None)
    assert doc["error"] == (
        f"lost track of build {BUILD_ID}: BatchGetBuilds failed: ThrottlingException: slow down; "
        "it keeps running in CodeBuild. Fix: follow it with `aws codebuild batch-get-builds --ids "
        f"{BUILD_ID}`; `rlkit image status` lists the pushed image")
    # the help's exit codes say so (they said 2 for any call AWS refused)
    from ops import image_cmd
    assert ("1 the build failed or timed out, or --wait lost track of it (an AWS error while "
            "following it; the build keeps running), 2 bad input or AWS refused a call before the "
            "build started") in " ".join(image_cmd.__doc__.split())


def test_without_wait_the_status_is_started_not_codebuilds(outputs_file, capsys):
    st = Stubbed()
    _started(st)
    assert run([*BASE, "--outputs", str(outputs_file), "-o", "json"], st) == 0
    st.done()  # started, never read back: no CodeBuild status to report
    doc = json.loads(capsys.readouterr().out)
    assert (doc["ok"], doc["build_id"], doc["status"]) == (True, BUILD_ID, "STARTED")
    # docs/cli.md's document row says so (it said `status` was CodeBuild's)
    row = next(line for line in (REPO_ROOT / "docs" / "cli.md").read_text().splitlines()
               if line.startswith("| `image build` |"))
    assert "without `--wait`, `STARTED`: the build was started, not followed" in row


def test_json_gets_one_document_on_ctrl_c(outputs_file, capsys, monkeypatch):
    st = Stubbed()
    _started(st)
    st.codebuild.add_response("batch_get_builds", build_doc("IN_PROGRESS", "BUILD"))
    st.logs.add_client_error("get_log_events", "ResourceNotFoundException")

    def ctrl_c(_seconds):
        raise KeyboardInterrupt

    # Ctrl-C while it sleeps between two polls.
    monkeypatch.setattr("ops.image_cmd.follow_build",
                        functools.partial(follow_build, sleep=ctrl_c))
    code = run([*BASE, "--outputs", str(outputs_file), "--wait", "--poll", "0", "-o", "json"], st)
    captured = capsys.readouterr()
    assert code == 130
    st.done()
    doc = json.loads(captured.out)
    assert (doc["ok"], doc["build_id"], doc["status"]) == (False, BUILD_ID, None)
    assert doc["error"] == (f"interrupted; build {BUILD_ID} keeps running in CodeBuild "
                            f"(`aws codebuild stop-build --id {BUILD_ID}` stops it)")


def test_json_gets_one_document_when_no_digest_was_exported(outputs_file, capsys):
    st = Stubbed()
    _started(st)
    st.codebuild.add_response("batch_get_builds", build_doc(
        "SUCCEEDED", "COMPLETED", phases=[{"phaseType": "BUILD", "phaseStatus": "SUCCEEDED"}]))
    expect_log_page(st, [], None, "f1")
    expect_log_page(st, [], "f1", "f1")
    code = run([*BASE, "--outputs", str(outputs_file), "--wait", "--poll", "0", "-o", "json"], st)
    captured = capsys.readouterr()
    assert code == 1
    st.done()
    doc = json.loads(captured.out)
    assert (doc["ok"], doc["build_id"], doc["status"]) == (False, BUILD_ID, "SUCCEEDED")
    assert doc["error"] == (f"build {BUILD_ID} succeeded but exported no IMAGE_URI/IMAGE_DIGEST. "
                            "Fix: check the buildspec's post_build phase in the log above.")


def expect_platforms(st, manifest, config_blob=False, digest=IMAGE_DIGEST):
    """The existing image's manifest (and, for a single manifest, its config blob's URL)."""
    st.ecr.add_response("batch_get_image", {"images": [{"imageManifest": json.dumps(manifest)}]},
                        expected_params={
        "repositoryName": "moe-rl-trainer", "imageIds": [{"imageDigest": digest}],
        "acceptedMediaTypes": ["application/vnd.oci.image.index.v1+json",
                               "application/vnd.docker.distribution.manifest.list.v2+json",
                               "application/vnd.oci.image.manifest.v1+json",
                               "application/vnd.docker.distribution.manifest.v2+json"]})
    if config_blob:
        st.ecr.add_response("get_download_url_for_layer", {"downloadUrl": "https://config"},
                            expected_params={"repositoryName": "moe-rl-trainer",
                                             "layerDigest": "sha256:cfg"})


AMD64_MANIFEST = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "config": {"digest": "sha256:cfg"}}


def expect_labels(st, manifest=AMD64_MANIFEST, digest=IMAGE_DIGEST):
    """--reuse reads the image's labels: its manifest (an index's first platform image), then
    its config blob's URL."""
    st.ecr.add_response("batch_get_image", {"images": [{"imageManifest": json.dumps(manifest)}]},
                        expected_params={
        "repositoryName": "moe-rl-trainer", "imageIds": [{"imageDigest": digest}],
        "acceptedMediaTypes": ["application/vnd.oci.image.index.v1+json",
                               "application/vnd.docker.distribution.manifest.list.v2+json",
                               "application/vnd.docker.distribution.manifest.v2+json",
                               "application/vnd.oci.image.manifest.v1+json"]})
    st.ecr.add_response("get_download_url_for_layer", {"downloadUrl": "https://config"},
                        expected_params={"repositoryName": "moe-rl-trainer",
                                         "layerDigest": "sha256:cfg"})


def amd64_blob(revision="c0ffee"):
    """An image config blob: linux/amd64, built from ``revision`` (None: no revision label)."""
    labels = {BACKEND_LABEL: "nccl"}
    if revision is not None:
        labels["org.opencontainers.image.revision"] = revision
    return {"os": "linux", "architecture": "amd64", "config": {"Labels": labels}}


def run_with_config_blob(argv, st, blob):
    args = cli.build_parser().parse_args(argv)
    args.clients_factory = lambda region, profile: st.clients
    args.fetch = lambda url: json.dumps(blob).encode()
    return args.func(args)


def test_existing_tag_is_refused_or_reused(outputs_file, capsys):
    st = Stubbed()
    detail = {"imageDetails": [{"imageDigest": IMAGE_DIGEST, "imageTags": ["0.1.0-nccl"]}]}
    blob = {"os": "linux", "architecture": "amd64"}
    st.ecr.add_response("describe_images", detail)
    expect_platforms(st, AMD64_MANIFEST, config_blob=True)
    assert run_with_config_blob([*BASE, "--outputs", str(outputs_file)], st, blob) == 2
    assert (f"error: {REPO}:0.1.0-nccl already exists ({IMAGE_DIGEST}) and the repository's tags "
            "are immutable. Fix: set a new training.image_tag in the config, or pass --reuse to "
            "use the existing image.") in capsys.readouterr().err
    st.ecr.add_response("describe_images", detail)
    expect_platforms(st, AMD64_MANIFEST, config_blob=True)
    expect_labels(st)
    assert run_with_config_blob([*BASE, "--outputs", str(outputs_file), "--reuse"], st,
                                amd64_blob("c0ffee")) == 0
    captured = capsys.readouterr()
    assert f"image: {REPO}:0.1.0-nccl@{IMAGE_DIGEST}" in captured.out
    assert f"{REPO}:0.1.0-nccl@{IMAGE_DIGEST} was built from this commit (c0ffee)" in captured.out
    assert captured.err == ""
    st.done()  # nothing uploaded, nothing started


OLD = "0" * 40  # the commit an existing image was built from
NEW = "1" * 40  # the commit this run builds


def test_reuse_refuses_an_image_built_from_other_code(outputs_file, capsys):
    """0.1.0-nccl built from one commit, images/trainer changed, the same image_tag: --reuse
    checked platforms only and reused the old image for the new code."""
    st = Stubbed()
    st.ecr.add_response("describe_images", {"imageDetails": [
        {"imageDigest": IMAGE_DIGEST, "imageTags": ["0.1.0-nccl"]}]})
    expect_platforms(st, AMD64_MANIFEST, config_blob=True)
    expect_labels(st)
    argv = ["image", "build", "--base-digest", DIGEST, "--vcs-ref", NEW, "--outputs",
            str(outputs_file), "--reuse", "-o", "json"]
    code = run_with_config_blob(argv, st, amd64_blob(OLD))
    captured = capsys.readouterr()
    assert code == 2, captured
    st.done()  # nothing uploaded, nothing started
    assert captured.out == ""  # a refusal before any build: exit 2, no document
    assert captured.err.endswith(
        f"error: cannot reuse {REPO}:0.1.0-nccl@{IMAGE_DIGEST}: it was built from {OLD} (its "
        f"org.opencontainers.image.revision label), this run builds {NEW}, and git here cannot "
        "tell whether images/trainer differs (uncommitted changes on either side, or a commit "
        "this clone does not have); the pods would run other code than this checkout's. Fix: "
        "set a new training.image_tag in the config and run `rlkit image build` again (tags are "
        f"immutable), or reuse it from a checkout of {OLD}.\n")


def test_reuse_of_an_image_without_a_revision_warns(outputs_file, capsys):
    st = Stubbed()
    st.ecr.add_response("describe_images", {"imageDetails": [
        {"imageDigest": IMAGE_DIGEST, "imageTags": ["0.1.0-nccl"]}]})
    expect_platforms(st, AMD64_MANIFEST, config_blob=True)
    expect_labels(st)
    code = run_with_config_blob([*BASE, "--outputs", str(outputs_file), "--reuse", "-o", "json"],
                                st, amd64_blob(None))
    captured = capsys.readouterr()
    assert code == 0
    st.done()
    assert (f"warning: could not tell which commit {REPO}:0.1.0-nccl@{IMAGE_DIGEST} was built "
            "from (its org.opencontainers.image.revision label is missing); reusing it "
            "unchecked. If images/trainer changed since, set a new training.image_tag and "
            "build.") in captured.err
    doc = json.loads(captured.out)
    assert (doc["ok"], doc["reused"], doc["revision"]) == (True, True, None)


def test_reuse_with_unreadable_labels_warns(outputs_file, capsys):
    st = Stubbed()
    st.ecr.add_response("describe_images", {"imageDetails": [
        {"imageDigest": IMAGE_DIGEST, "imageTags": ["0.1.0-nccl"]}]})
    expect_platforms(st, AMD64_MANIFEST, config_blob=True)
    st.ecr.add_client_error("batch_get_image", "AccessDeniedException", "no")
    code = run_with_config_blob([*BASE, "--outputs", str(outputs_file), "--reuse"], st,
                                amd64_blob())
    assert code == 0
    st.done()
    assert (f"warning: could not read the labels of {REPO}:0.1.0-nccl@{IMAGE_DIGEST} "
            "(BatchGetImage failed: AccessDeniedException: no), so not which commit it was "
            "built from; reusing it unchecked.") in capsys.readouterr().err


@pytest.fixture
def gb200(tmp_path):
    """The GB200 example (an arm64 GPU group) and its data stack's outputs."""
    outputs = tmp_path / "gb200-outputs.json"
    outputs.write_text(json.dumps({"gb200-us-data": OUTPUTS["moe-rl-data"]}))
    return ["--config", str(REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml"),
            "--outputs", str(outputs)]


def test_reuse_refuses_a_tag_without_the_platforms_the_config_needs(gb200, capsys):
    """0.1.0-nccl built for an x86-only config, then an arm64 (GB200) group added: --reuse
    passed and the arm64 pods could not pull the image."""
    st = Stubbed()
    st.ecr.add_response("describe_images", {"imageDetails": [
        {"imageDigest": IMAGE_DIGEST, "imageTags": ["0.1.0-nccl"]}]})
    expect_platforms(st, AMD64_MANIFEST, config_blob=True)
    code = run_with_config_blob([*BASE, *gb200, "--reuse"], st,
                                {"os": "linux", "architecture": "amd64"})
    captured = capsys.readouterr()
    assert code == 2, captured.out
    st.done()  # nothing uploaded, nothing started
    assert captured.err == (
        f"error: {REPO}:0.1.0-nccl already exists ({IMAGE_DIGEST}) and holds linux/amd64, not "
        "linux/arm64, which the config needs (linux/amd64, linux/arm64: the system nodes' "
        "linux/amd64 and each GPU group's platform); pods there could not pull it, and the "
        "repository's tags are immutable. Fix: set a new training.image_tag in the config, then "
        "run `rlkit image build` again.\n")
    assert "image:" not in captured.out


def test_reuse_reads_a_multi_arch_index_and_skips_attestations(gb200, capsys):
    st = Stubbed()
    st.ecr.add_response("describe_images", {"imageDetails": [
        {"imageDigest": IMAGE_DIGEST, "imageTags": ["0.1.0-nccl"]}]})
    expect_platforms(st, {"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"digest": "sha256:a", "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": "sha256:b", "platform": {"os": "linux", "architecture": "arm64",
                                            "variant": "v8"}},
        {"digest": "sha256:c", "platform": {"os": "unknown", "architecture": "unknown"}}]})
    # The labels: the index, then its first platform image, then that image's config blob.
    st.ecr.add_response("batch_get_image", {"images": [{"imageManifest": json.dumps(
        {"manifests": [{"digest": "sha256:a", "platform": {"os": "linux",
                                                          "architecture": "amd64"}}]})}]})
    st.ecr.add_response("batch_get_image", {"images": [{"imageManifest": json.dumps(
        AMD64_MANIFEST)}]}, expected_params={
        "repositoryName": "moe-rl-trainer", "imageIds": [{"imageDigest": "sha256:a"}],
        "acceptedMediaTypes": ["application/vnd.docker.distribution.manifest.v2+json",
                               "application/vnd.oci.image.manifest.v1+json"]})
    st.ecr.add_response("get_download_url_for_layer", {"downloadUrl": "https://config"})
    assert run_with_config_blob([*BASE, *gb200, "--reuse"], st, amd64_blob()) == 0
    st.done()
    assert f"image: {REPO}:0.1.0-nccl@{IMAGE_DIGEST}" in capsys.readouterr().out
    # An index of amd64 and an attestation only: arm64 is missing.
    st.ecr.add_response("describe_images", {"imageDetails": [
        {"imageDigest": IMAGE_DIGEST, "imageTags": ["0.1.0-nccl"]}]})
    expect_platforms(st, {"manifests": [
        {"digest": "sha256:a", "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": "sha256:c", "platform": {"os": "unknown", "architecture": "unknown"}}]})
    assert run([*BASE, *gb200, "--reuse"], st) == 2
    assert "holds linux/amd64, not linux/arm64" in capsys.readouterr().err


def test_unreadable_platforms_refuse_an_arm64_reuse_and_warn_on_x86(gb200, outputs_file, capsys):
    st = Stubbed()
    detail = {"imageDetails": [{"imageDigest": IMAGE_DIGEST, "imageTags": ["0.1.0-nccl"]}]}
    st.ecr.add_response("describe_images", detail)
    st.ecr.add_client_error("batch_get_image", "AccessDeniedException", "no")
    assert run([*BASE, *gb200, "--reuse"], st) == 2
    assert capsys.readouterr().err == (
        f"error: cannot reuse {REPO}:0.1.0-nccl@{IMAGE_DIGEST}: could not read its platforms "
        "(BatchGetImage failed: AccessDeniedException: no), and the config needs linux/amd64, "
        "linux/arm64; a tag built before an arm64 GPU group was added holds linux/amd64 only. "
        "Fix: allow ecr:BatchGetImage and ecr:GetDownloadUrlForLayer on the repository and "
        "rerun, or set a new training.image_tag and build.\n")
    # x86 only: every image the build pushes holds linux/amd64, so it warns and reuses.
    st.ecr.add_response("describe_images", detail)
    st.ecr.add_client_error("batch_get_image", "AccessDeniedException", "no")
    assert run([*BASE, "--outputs", str(outputs_file), "--reuse"], st) == 0
    st.done()
    captured = capsys.readouterr()
    assert ("warning: could not read the platforms of "
            f"{REPO}:0.1.0-nccl@{IMAGE_DIGEST} (BatchGetImage failed: AccessDeniedException: no); "
            "reusing it, as the config needs only linux/amd64") in captured.err
    assert f"image: {REPO}:0.1.0-nccl@{IMAGE_DIGEST}" in captured.out


def test_unpinned_base_is_refused_before_anything_happens(outputs_file, tmp_path, capsys):
    st = Stubbed()  # no responses queued: any AWS call would fail the test
    unpinned = tmp_path / "trainer"  # a build context whose Dockerfile pins the tag only
    unpinned.mkdir()
    (unpinned / "Dockerfile").write_text("ARG MILES_IMAGE=radixark/miles:v0.1.0\nFROM scratch\n")
    code = run(["image", "build", "--outputs", str(outputs_file), "--backend", "deepep-gin",
                "--context", str(unpinned)], st)
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        "error: cannot build the trainer image:\n"
        "  - --backend deepep-gin needs --deepep-gin-ref: the amazon-contributing/DeepEP fork "
        "has no release tags, so the Dockerfile refuses to build without a commit. Fix: pass "
        "--deepep-gin-ref <40-hex commit> (see images/trainer/README.md)\n"
        "  - the base image radixark/miles:v0.1.0 (images/trainer/Dockerfile ARG MILES_IMAGE) has "
        "no pinned digest, and the build refuses an unpinned base. Fix: read it with `docker "
        "buildx imagetools inspect radixark/miles:v0.1.0` (or the registry's page) and pin it "
        "there (radixark/miles:v0.1.0@sha256:...), or pass --base-digest sha256:...\n")
    assert "Traceback" not in err


@pytest.mark.parametrize("ref", ["main", "0123abc", GIN_REF.upper(), GIN_REF + "0"])
def test_deepep_gin_ref_must_be_a_full_commit(outputs_file, capsys, ref):
    """--deepep-gin-ref main built whatever main was that day, under an immutable tag."""
    st = Stubbed()  # no responses queued: any AWS call would fail the test
    assert run([*BASE, "--outputs", str(outputs_file), "--backend", "deepep-gin",
                "--deepep-gin-ref", ref], st) == 2
    assert capsys.readouterr().err == (
        "error: cannot build the trainer image:\n"
        f"  - --deepep-gin-ref {ref}: not a full commit SHA (40 lowercase hex digits); a branch, "
        "tag or short SHA can build other code each time. Fix: pass the commit, e.g. from `git "
        "ls-remote https://github.com/amazon-contributing/DeepEP refs/heads/main`\n")


def test_a_base_digest_other_than_the_pin_is_refused(outputs_file, capsys):
    other = "sha256:" + "cd" * 32
    assert run([*BASE[:2], "--outputs", str(outputs_file), "--base-digest", other], Stubbed()) == 2
    assert (f"--base-digest {other} differs from the digest images/trainer/Dockerfile pins for "
            f"radixark/miles:v0.1.0 ({DIGEST}). Fix: drop --base-digest, or change the "
            "Dockerfile's pin") in capsys.readouterr().err


def test_bad_digest_text(outputs_file, capsys):
    st = Stubbed()
    assert run(["image", "build", "--outputs", str(outputs_file), "--base-digest", "latest"],
               st) == 2
    assert ("--base-digest latest: not an image digest (sha256: and 64 hex digits)"
            in capsys.readouterr().err)


def test_outputs_without_the_build_keys(tmp_path, capsys):
    old = {"moe-rl-data": {k: v for k, v in OUTPUTS["moe-rl-data"].items()
                           if k not in (OutputKeys.IMAGE_BUILD_PROJECT,
                                        OutputKeys.IMAGE_BUILD_LOG_GROUP)}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert run([*BASE, "--outputs", str(path)], Stubbed()) == 2
    assert (f"error: {path}: stack moe-rl-data has no output ImageBuildProjectName, "
            "ImageBuildLogGroupName (a data stack deployed before the image build existed). Fix: "
            "deploy it with every stack of the config (`npx aws-cdk@2.1148.1 deploy --all -c "
            "config=<your config file> --outputs-file cdk-outputs.json`)") in capsys.readouterr().err


def test_outputs_of_another_environment_name_it(tmp_path, capsys):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"p5-team-data": OUTPUTS["moe-rl-data"]}))
    assert run([*BASE, "--outputs", str(path)], Stubbed()) == 2
    assert capsys.readouterr().err.endswith(
        f"error: {path} holds the outputs of environment 'p5-team' (p5-team-data), not 'moe-rl'. "
        "Fix: pass moe-rl's outputs file, or that environment's --config\n")


def test_outputs_from_cloudformation_and_dry_run(capsys):
    st = Stubbed()
    st.cloudformation.add_response("describe_stacks", {"Stacks": [{
        "StackName": "moe-rl-data", "CreationTime": dt.datetime(2026, 11, 30),
        "StackStatus": "CREATE_COMPLETE",
        "Outputs": [{"OutputKey": k, "OutputValue": v}
                    for k, v in OUTPUTS["moe-rl-data"].items()]}]},
        expected_params={"StackName": "moe-rl-data"})
    assert run([*BASE, "--dry-run"], st) == 0
    st.done()  # only the outputs were read: no upload, no build
    out = capsys.readouterr().out
    head, _, out = out.partition("\n")  # the environment is named before anything happens
    assert head == ("[dry-run] Image build for environment 'moe-rl' (us-east-1); config: the "
                    "built-in default config (no --config given and RLKIT_CONFIG not set)")
    assert out.startswith(f"[dry-run] rlkit image build would, for {REPO}:0.1.0-nccl:\n")
    assert f"--tag {REPO}:0.1.0-nccl --metadata-file" in out
    assert out.rstrip().endswith("[dry-run] nothing uploaded or started")
    # -o json: the same plan as one document on stdout, the progress on stderr
    st = Stubbed()
    st.cloudformation.add_response("describe_stacks", {"Stacks": [{
        "StackName": "moe-rl-data", "CreationTime": dt.datetime(2026, 11, 30),
        "StackStatus": "CREATE_COMPLETE",
        "Outputs": [{"OutputKey": k, "OutputValue": v}
                    for k, v in OUTPUTS["moe-rl-data"].items()]}]})
    assert run([*BASE, "--dry-run", "-o", "json"], st) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert (doc["dry_run"], doc["ok"], doc["image_uri"]) == (True, True, f"{REPO}:0.1.0-nccl")
    assert any("--metadata-file" in step for step in doc["steps"])
    assert "[dry-run] nothing uploaded or started" in captured.err


def test_an_undeployed_data_stack_names_the_deploy_of_this_config(capsys):
    """Before: the fix said `cdk deploy moe-rl-data`, which without -c config=... builds app.py's
    built-in default config: a second, billing environment instead of this one's data stack."""
    config = REPO_ROOT / "examples" / "default.yaml"
    st = Stubbed()
    st.cloudformation.add_client_error("describe_stacks", "ValidationError",
                                       "Stack with id moe-rl-data does not exist")
    assert run([*BASE, "--config", str(config), "--dry-run"], st) == 2
    assert ("Fix: deploy the data stack (`npx aws-cdk@2.1148.1 deploy moe-rl-data -c "
            f"config={config}`)") in capsys.readouterr().err


def test_follow_build_times_out():
    st = Stubbed()
    st.codebuild.add_response("batch_get_builds", build_doc("IN_PROGRESS", "BUILD"))
    st.logs.add_client_error("get_log_events", "ResourceNotFoundException")
    ticks = iter([0.0, 0.0, 5.0, 10.0])
    with pytest.raises(TimeoutError, match=f"build {BUILD_ID} still BUILD after 3 s"):
        follow_build(st.clients.codebuild, st.clients.logs, BUILD_ID, echo=lambda _: None,
                     poll_s=0, timeout_s=3, sleep=lambda _: None, clock=lambda: next(ticks))


# --- status --------------------------------------------------------------------------------------


def image_detail(digest, tags, pushed, scan=None):
    d = {"registryId": ACCOUNT, "repositoryName": "moe-rl-trainer", "imageDigest": digest,
         "imageTags": tags, "imageSizeInBytes": 21_000_000_000,
         "imagePushedAt": dt.datetime(2026, 11, pushed, tzinfo=dt.timezone.utc)}
    if scan is not None:
        d["imageScanStatus"] = {"status": "COMPLETE"}
        d["imageScanFindingsSummary"] = {"findingSeverityCounts": scan}
    return d


def test_status_lists_tags_backends_and_scans(outputs_file, capsys):
    st = Stubbed()
    other = "sha256:" + "34" * 32
    st.ecr.add_response("describe_images", {"imageDetails": [
        image_detail(IMAGE_DIGEST, ["0.1.0-nccl"], 29, {"HIGH": 2, "CRITICAL": 1}),
        image_detail(other, ["0.1.0-deepep-nvshmem"], 30, {}),
    ]}, expected_params={"repositoryName": "moe-rl-trainer"})
    # Newest first: the deepep-nvshmem image's labels cannot be read, so its tag says.
    st.ecr.add_client_error("batch_get_image", "AccessDeniedException")
    st.ecr.add_response("batch_get_image", {"images": [{"imageManifest": json.dumps(
        {"config": {"digest": "sha256:cfg"}})}]}, expected_params={
        "repositoryName": "moe-rl-trainer", "imageIds": [{"imageDigest": IMAGE_DIGEST}],
        "acceptedMediaTypes": ANY})
    st.ecr.add_response("get_download_url_for_layer", {"downloadUrl": "https://layer"},
                        expected_params={"repositoryName": "moe-rl-trainer",
                                         "layerDigest": "sha256:cfg"})
    args = cli.build_parser().parse_args(["image", "status", "--outputs", str(outputs_file)])
    args.clients_factory = lambda region, profile: st.clients
    fetched = []

    def fetch(url):
        fetched.append(url)
        return json.dumps({"config": {"Labels": {BACKEND_LABEL: "nccl"}}}).encode()

    args.fetch = fetch
    assert args.func(args) == 0
    st.done()
    captured = capsys.readouterr()
    assert fetched == ["https://layer"]
    lines = captured.out.splitlines()
    assert lines[0] == f"{REPO}: 2 image(s)"
    assert lines[1].split() == ["TAGS", "DIGEST", "BACKEND", "PUSHED", "SIZE", "MB", "SCAN"]
    assert lines[2].split()[:3] == ["0.1.0-deepep-nvshmem", other[:19], "deepep-nvshmem"]
    assert "(tag)" in lines[2] and lines[2].rstrip().endswith("no findings")
    assert lines[3].split()[:4] == ["0.1.0-nccl", IMAGE_DIGEST[:19], "nccl", "(label)"]
    assert lines[3].rstrip().endswith("1 critical, 2 high")
    # what the repository holds in all, and how to delete what no run uses (no lifecycle rule)
    assert lines[4] == (
        "  42,000 MB in all (ECR's compressed sizes), kept until deleted: delete a tag no run, "
        "gate record or retry still uses with `aws ecr batch-delete-image --repository-name "
        "moe-rl-trainer --image-ids imageTag=<tag> --region us-east-1`")
    assert "could not read the labels" in captured.err



def test_status_reads_a_multi_arch_tags_labels_through_a_platform_image(outputs_file, capsys):
    """An arm64 GPU group makes the tag an index, which has no config blob: the labels are read
    through its first platform image (the attestation's unknown/unknown is skipped). Before, the
    index could not be read as a manifest and the backend came from the tag with a warning."""
    st = Stubbed()
    st.ecr.add_response("describe_images", {"imageDetails": [
        image_detail(IMAGE_DIGEST, ["0.1.0-custom"], 29, {})]})
    amd64 = "sha256:" + "56" * 32
    st.ecr.add_response("batch_get_image", {"images": [{"imageManifest": json.dumps({
        "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
            {"digest": "sha256:" + "78" * 32, "platform": {"os": "unknown",
                                                           "architecture": "unknown"}},
            {"digest": amd64, "platform": {"os": "linux", "architecture": "amd64"}}]})}]},
        expected_params={"repositoryName": "moe-rl-trainer",
                         "imageIds": [{"imageDigest": IMAGE_DIGEST}], "acceptedMediaTypes": ANY})
    st.ecr.add_response("batch_get_image", {"images": [{"imageManifest": json.dumps(
        AMD64_MANIFEST)}]}, expected_params={"repositoryName": "moe-rl-trainer",
                                             "imageIds": [{"imageDigest": amd64}],
                                             "acceptedMediaTypes": ANY})
    st.ecr.add_response("get_download_url_for_layer", {"downloadUrl": "https://layer"},
                        expected_params={"repositoryName": "moe-rl-trainer",
                                         "layerDigest": "sha256:cfg"})
    args = cli.build_parser().parse_args(["image", "status", "--outputs", str(outputs_file)])
    args.clients_factory = lambda region, profile: st.clients
    args.fetch = lambda url: json.dumps({"config": {"Labels": {BACKEND_LABEL: "nccl"}}}).encode()
    assert args.func(args) == 0
    st.done()
    captured = capsys.readouterr()
    assert "could not read the labels" not in captured.err
    assert "nccl" in captured.out and "label" in captured.out


def test_status_of_an_empty_repository(outputs_file, capsys):
    st = Stubbed()
    st.ecr.add_response("describe_images", {"imageDetails": []})
    assert run(["image", "status", "--outputs", str(outputs_file)], st) == 0
    assert "none yet: `rlkit image build --wait` builds and pushes one" in capsys.readouterr().out


def test_cli_lists_image_commands():
    help_text = cli.build_parser().format_help()
    assert "image" in help_text
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["image", "build", "--backend", "none"])


def test_status_json_parses(outputs_file, capsys):
    st = Stubbed()
    st.ecr.add_response("describe_images", {"imageDetails": [
        image_detail(IMAGE_DIGEST, ["0.1.0-nccl"], 29, {"HIGH": 2})]})
    assert run(["image", "status", "--outputs", str(outputs_file), "--no-labels", "-o", "json"],
               st) == 0
    st.done()
    doc = json.loads(capsys.readouterr().out)
    assert doc["repository"] == REPO and doc["total_size_mb"] == doc["images"][0]["size_mb"]
    assert [(i["tags"], i["digest"], i["backend"], i["backend_from"]) for i in doc["images"]] == \
        [(["0.1.0-nccl"], IMAGE_DIGEST, "nccl", "tag")]


# --- build contexts expire (the data bucket's image-builds/ rule) -------------------------------


@pytest.mark.parametrize("age_days, uploaded", [(1, False), (11.9, False), (12.1, True), (30, True)])
def test_a_context_near_its_expiry_is_put_again(age_days, uploaded):
    """The bucket expires build contexts 14 days after their upload; a key about to go is put
    again (its age starts over), so no build starts on a context S3 removes meanwhile."""
    from ops.image_build import upload_context

    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    st = Stubbed()
    st.s3.add_response("head_object", {"LastModified": now - dt.timedelta(days=age_days)},
                       expected_params={"Bucket": "b", "Key": "image-builds/k.zip"})
    if uploaded:
        st.s3.add_response("put_object", {}, expected_params={
            "Bucket": "b", "Key": "image-builds/k.zip", "Body": b"zip",
            "ContentType": "application/zip", "ChecksumAlgorithm": "SHA256"})
    assert upload_context(st.clients.s3, "b", "image-builds/k.zip", b"zip", now=now) is uploaded
    st.done()
