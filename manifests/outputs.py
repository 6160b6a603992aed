"""The deployed stacks' outputs the manifests need, from one of three places.

- ``outputs_from_file``: the JSON ``cdk deploy --outputs-file`` writes,
  ``{"<stackName>": {"<OutputKey>": "value"}}``.
- ``outputs_from_stacks``: CloudFormation ``DescribeStacks`` through a client the caller passes
  (the CLI's ``ops.aws.AwsClients`` bundle; needs credentials; only when the operator asks).
- ``placeholder_outputs``: offline rendering before anything is deployed. Every value that would
  come from a stack is ``placeholder-run-cdk-deploy`` and the renderer marks every object.

Stack names come from ``infra.names.stack_names`` / ``gpu_stack_name`` and keys from
``infra.names.OutputKeys``, the same names the stacks declare. A missing stack or key is an error
naming the stack, the key and the command that produces it; all of them are reported at once.
A file holding none of the config's stacks but another environment's is one problem naming that
environment (``other_environments``). Files are read as UTF-8 only (``read_outputs_json``).

This is the kit's one reader of stack outputs: the renderer (and so `rlkit render`, `gate` and
`launch`) takes a ``StackOutputs``; `rlkit image` takes the data stack's image-build outputs
(``image_build_outputs``), read from the same two sources (``load_outputs_json``,
``describe_stack_outputs``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from infra import names
from infra.cdk_cli import OUTPUTS_FILE, deploy_all_command
from infra.config import KitConfig, has_shared_fs
from infra.names import OutputKeys
from manifests.errors import RenderError, RenderProblem
from manifests.frozen import FrozenModel

# Lowercase on purpose: it lands in S3 URIs and image references, which must be lowercase.
PLACEHOLDER = "placeholder-run-cdk-deploy"

OutputsSource = Literal["placeholder", "file", "cloudformation"]


@dataclass(frozen=True)
class OutputsHints:
    """How an outputs error's fix names the retry: the calling command (with its ``--config FILE``
    when one was typed), whether it has render's --from-stacks (gate, launch and image build read
    CloudFormation whenever --outputs is left out), and the config file the `cdk deploy` hint
    names (None: ``<your config file>``). The default is `rlkit render`'s."""

    command: str = "rlkit render"
    from_stacks: bool = True
    config: str | Path | None = None

    def deploy(self) -> str:
        return deploy_all_command(self.config)

    def with_file(self) -> str:
        return f"`{self.command} --outputs {OUTPUTS_FILE}`"

    def with_stacks(self) -> str:
        if self.from_stacks:
            return f"`{self.command} --from-stacks`"
        return f"`{self.command}` without --outputs (it reads the deployed stacks' outputs)"


RENDER_HINTS = OutputsHints()


class StackOutputs(FrozenModel):
    """The stack outputs one render uses, already checked for presence."""

    source: OutputsSource
    origin: str  # the file path, "CloudFormation (<region>)" or "placeholder"
    bucket_name: str
    ecr_repository_uri: str | None  # None only when training.image is set
    cluster_name: str
    region: str
    trainer_namespace: str
    trainer_service_account: str
    trainer_role_arn: str
    nodegroup_name: str
    # The shared file system (storage stack); None when the config has none.
    shared_fs_id: str | None = None
    shared_fs_dns_name: str | None = None
    shared_fs_mount_name: str | None = None

    @property
    def is_placeholder(self) -> bool:
        return self.source == "placeholder"


# field of StackOutputs -> (which stack, output key)
_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("bucket_name", "data", OutputKeys.BUCKET_NAME),
    ("ecr_repository_uri", "data", OutputKeys.ECR_REPOSITORY_URI),
    ("cluster_name", "cluster", OutputKeys.CLUSTER_NAME),
    ("region", "cluster", OutputKeys.REGION),
    ("trainer_namespace", "cluster", OutputKeys.TRAINER_NAMESPACE),
    ("trainer_service_account", "cluster", OutputKeys.TRAINER_SERVICE_ACCOUNT),
    ("trainer_role_arn", "data", OutputKeys.TRAINER_ROLE_ARN),  # the role lives with the bucket
    ("nodegroup_name", "gpu", OutputKeys.NODEGROUP_NAME),
    ("shared_fs_id", "storage", OutputKeys.SHARED_FS_ID),
    ("shared_fs_dns_name", "storage", OutputKeys.SHARED_FS_DNS_NAME),
    ("shared_fs_mount_name", "storage", OutputKeys.SHARED_FS_MOUNT_NAME),
)


def needed_stacks(cfg: KitConfig) -> dict[str, str]:
    """Role ("data", "cluster", "gpu", "storage") -> CloudFormation stack name for this config."""
    stacks = names.stack_names(cfg.name)
    needed = {
        "data": stacks["data"],
        "cluster": stacks["cluster"],
        "gpu": names.gpu_stack_name(cfg.name, cfg.training.node_group),
    }
    if has_shared_fs(cfg):
        needed["storage"] = stacks["storage"]
    return needed


def _needed_fields(cfg: KitConfig) -> list[tuple[str, str, str]]:
    fields = list(_FIELDS)
    if cfg.training.image is not None:  # the ECR repository is only the default image
        fields = [f for f in fields if f[0] != "ecr_repository_uri"]
    if not has_shared_fs(cfg):
        fields = [f for f in fields if f[1] != "storage"]
    return fields


def _fix(stack: str, how: str, hints: OutputsHints, verb: str = "deploy") -> str:
    # --all: an --outputs-file deploy of some stacks writes a file with only theirs (cdk_cli)
    return f"{verb} it with every stack of the config (`{hints.deploy()}`), then {how}"


def outputs_from_mapping(cfg: KitConfig, data: Any, source: OutputsSource,
                         origin: str, hints: OutputsHints = RENDER_HINTS) -> StackOutputs:
    """Pick the needed outputs from ``{stack: {key: value}}``; raise RenderError if any lack."""
    how = "run " + (hints.with_file() if source == "file" else hints.with_stacks()) + " again"
    if not isinstance(data, dict):
        raise RenderError([RenderProblem(
            origin, "not a stack-outputs mapping ({\"<stackName>\": {\"<OutputKey>\": \"value\"}})",
            "pass the file `cdk deploy --outputs-file` wrote")], "stack outputs")
    stacks = needed_stacks(cfg)
    if (other := other_environments(cfg, data)) is not None:
        subject = f"outputs file {origin}" if source == "file" else origin
        raise RenderError([RenderProblem(subject, *other)], "stack outputs")
    problems: list[RenderProblem] = []
    values: dict[str, str | None] = {"ecr_repository_uri": None}
    missing_stacks: set[str] = set()
    for field, role, key in _needed_fields(cfg):
        stack = stacks[role]
        outputs = data.get(stack)
        if not isinstance(outputs, dict):
            if stack not in missing_stacks:
                missing_stacks.add(stack)
                problems.append(RenderProblem(
                    f"stack {stack}", f"not found in {origin} (its outputs are needed: "
                    f"{', '.join(k for _, r, k in _needed_fields(cfg) if r == role)})",
                    _fix(stack, how, hints)))
            continue
        value = outputs.get(key)
        if not isinstance(value, str) or not value:
            problems.append(RenderProblem(
                f"stack {stack}, output {key}", f"missing from {origin} (the deployed stack is "
                "older than this kit, or the outputs were edited)", _fix(stack, how, hints, "redeploy")))
            continue
        values[field] = value
    if problems:
        raise RenderError(problems, "stack outputs")
    outputs = StackOutputs(source=source, origin=origin, **values)
    _check_agreement(cfg, outputs)
    return outputs


def other_environments(cfg: KitConfig, data: Any) -> tuple[str, str] | None:
    """(rule, fix) when ``data`` holds none of this config's stacks but other environments'
    stacks (named as ``infra.names.stack_names`` names them): the file, or the --config, is the
    wrong one, and deploying the missing stacks is not the fix. None otherwise."""
    if not isinstance(data, dict) or any(s in data for s in needed_stacks(cfg).values()):
        return None
    others: dict[str, list[str]] = {}
    for stack in sorted(str(k) for k in data):
        env = names.environment_of_stack(stack)
        if env is not None and env != cfg.name:
            others.setdefault(env, []).append(stack)
    if not others:
        return None
    held = " and ".join(f"{env!r} ({', '.join(stacks)})" for env, stacks in others.items())
    rule = (f"holds the outputs of environment{'s' if len(others) > 1 else ''} {held}, "
            f"not {cfg.name!r}")
    config = ("that environment's --config" if len(others) == 1
              else "the --config of the environment you meant")
    return rule, f"pass {cfg.name}'s outputs file, or {config}"


def _check_agreement(cfg: KitConfig, outputs: StackOutputs) -> None:
    """Deployed stacks must agree with this config and with infra.names."""
    stacks = needed_stacks(cfg)
    problems = []
    if outputs.region != cfg.region:
        problems.append(RenderProblem(
            f"stack {stacks['cluster']}, output {OutputKeys.REGION} = {outputs.region!r}",
            f"the config says region {cfg.region!r}: these outputs belong to another environment",
            "pass the outputs of this config's deployment, or fix the config's region"))
    for value, expected, key in (
        (outputs.trainer_namespace, names.TRAINER_NAMESPACE, OutputKeys.TRAINER_NAMESPACE),
        (outputs.trainer_service_account, names.TRAINER_SERVICE_ACCOUNT,
         OutputKeys.TRAINER_SERVICE_ACCOUNT),
    ):
        if value != expected:
            problems.append(RenderProblem(
                f"stack {stacks['cluster']}, output {key} = {value!r}",
                f"the kit names it {expected!r} (infra.names); the stack's Pod Identity "
                "association and these manifests would not match",
                "redeploy the cluster stack from this version of the kit"))
    if problems:
        raise RenderError(problems, "stack outputs")


# A byte-order mark the file starts with -> the encoding it names (UTF-8's own is accepted).
_UTF16_BOMS = {b"\xff\xfe": "UTF-16 (little-endian)", b"\xfe\xff": "UTF-16 (big-endian)"}


def read_outputs_json(path: str | Path, hints: OutputsHints = RENDER_HINTS) -> Any:
    """The JSON of a `cdk deploy --outputs-file` file, read as UTF-8 (with or without a
    byte-order mark); a RenderProblem (the file, what is wrong, the fix) raised in a RenderError
    when it is missing, unreadable, not UTF-8 or not JSON. The one reader of such files:
    ``outputs_from_file`` and ``load_outputs_json`` both use it."""
    path = Path(path)
    subject = f"outputs file {path}"
    unedited = "pass the file `cdk deploy --outputs-file` wrote, unedited"
    if not path.is_file():
        raise RenderError([RenderProblem(
            subject, "does not exist" if not path.exists() else "is not a file",
            f"run `{hints.deploy()}` and pass that file, or run {hints.with_stacks()}")],
            "stack outputs")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise RenderError([RenderProblem(subject, f"cannot be read ({err.strerror})",
                                         "make it readable, or " + unedited)],
                          "stack outputs") from None
    try:
        # utf-8-sig: UTF-8 with a byte-order mark (PowerShell 5's `-Encoding utf8`) is UTF-8 too
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        bom = _UTF16_BOMS.get(raw[:2])
        what = (f"is {bom} text, not UTF-8 JSON (Windows PowerShell's `>` writes UTF-16)" if bom
                else f"is not UTF-8 text (byte {raw[err.start]:#04x} at offset {err.start}), "
                "so not the JSON cdk writes")
        raise RenderError([RenderProblem(subject, what, (
            f"re-save it as UTF-8 (`iconv -f {'UTF-16' if bom else '<its encoding>'} -t UTF-8 "
            f"{path} > cdk-outputs.json`, or in PowerShell `Get-Content {path} | Set-Content "
            "-Encoding utf8 cdk-outputs.json`), or pass the file `cdk deploy --outputs-file` "
            "wrote"))], "stack outputs") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise RenderError([RenderProblem(subject, f"not valid JSON ({err})", unedited)],
                          "stack outputs") from None


def outputs_from_file(cfg: KitConfig, path: str | Path,
                      hints: OutputsHints = RENDER_HINTS) -> StackOutputs:
    """The outputs a render needs, from the file `cdk deploy --outputs-file` wrote."""
    return outputs_from_mapping(cfg, read_outputs_json(path, hints), "file", str(path), hints)


def describe_stack_outputs(client: Any, stack: str) -> dict[str, str] | None:
    """One stack's outputs ``{OutputKey: OutputValue}`` through CloudFormation DescribeStacks;
    None when CloudFormation lists no such stack. botocore's errors reach the caller."""
    response = client.describe_stacks(StackName=stack)
    for described in response.get("Stacks", [])[:1]:
        return {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    return None


def outputs_from_stacks(cfg: KitConfig, client: Any,
                        hints: OutputsHints = RENDER_HINTS) -> StackOutputs:
    """Read the outputs with CloudFormation DescribeStacks through ``client`` (a boto3
    CloudFormation client; the CLI passes the one of its ``ops.aws.AwsClients`` bundle, with the
    kit's timeouts and retries). Credentials needed."""
    from botocore.exceptions import BotoCoreError, ClientError

    data: dict[str, dict[str, str]] = {}
    for stack in dict.fromkeys(needed_stacks(cfg).values()):
        try:
            found = describe_stack_outputs(client, stack)
        except ClientError as err:
            message = err.response.get("Error", {}).get("Message", str(err))
            if "does not exist" in message:
                continue  # reported as a missing stack below
            raise RenderError([RenderProblem(
                f"stack {stack}", f"CloudFormation DescribeStacks failed in {cfg.region}: {message}",
                f"check your AWS credentials and region, or run {hints.with_file()}")],
                "stack outputs") from None
        except BotoCoreError as err:
            raise RenderError([RenderProblem(
                f"stack {stack}", f"could not call CloudFormation in {cfg.region}: {err}",
                f"configure AWS credentials, or run {hints.with_file()}")],
                "stack outputs") from None
        if found is not None:
            data[stack] = found
    return outputs_from_mapping(cfg, data, "cloudformation", f"CloudFormation ({cfg.region})",
                                hints)


def placeholder_outputs(cfg: KitConfig) -> StackOutputs:
    """Stand-in outputs for rendering before deployment, marked as such everywhere."""
    return StackOutputs(
        source="placeholder",
        origin="placeholder",
        bucket_name=PLACEHOLDER,
        ecr_repository_uri=None if cfg.training.image is not None else PLACEHOLDER,
        cluster_name=PLACEHOLDER,
        region=cfg.region,
        trainer_namespace=names.TRAINER_NAMESPACE,
        trainer_service_account=names.TRAINER_SERVICE_ACCOUNT,
        trainer_role_arn=PLACEHOLDER,
        nodegroup_name=PLACEHOLDER,
        **({"shared_fs_id": PLACEHOLDER, "shared_fs_dns_name": PLACEHOLDER,
            "shared_fs_mount_name": PLACEHOLDER} if has_shared_fs(cfg) else {}),
    )


# --- the data stack's image-build outputs (`rlkit image`) -----------------------------------------


class StackOutputsError(ValueError):
    """Outputs that are missing or unreadable; the message names the source, the stack and the
    fix (one line, unlike RenderError's list)."""


@dataclass(frozen=True)
class ImageBuildOutputs:
    """The data stack's outputs a trainer image build needs."""

    stack: str
    bucket: str
    repository_uri: str
    cache_repository_uri: str
    project: str
    log_group: str

    @property
    def repository_name(self) -> str:
        return self.repository_uri.split("/", 1)[1]


# field of ImageBuildOutputs -> output key (all on the data stack)
_IMAGE_BUILD_KEYS = {"bucket": OutputKeys.BUCKET_NAME,
                     "repository_uri": OutputKeys.ECR_REPOSITORY_URI,
                     "cache_repository_uri": OutputKeys.IMAGE_CACHE_REPOSITORY_URI,
                     "project": OutputKeys.IMAGE_BUILD_PROJECT,
                     "log_group": OutputKeys.IMAGE_BUILD_LOG_GROUP}


def load_outputs_json(path: str | Path, hints: OutputsHints = RENDER_HINTS) -> Any:
    """The JSON of a `cdk deploy --outputs-file` file (``read_outputs_json``); StackOutputsError,
    one line naming the file, what is wrong and the fix, when it cannot be read."""
    try:
        return read_outputs_json(path, hints)
    except RenderError as err:
        problem = err.problems[0]
        raise StackOutputsError(f"--outputs {path}: {problem.rule}. Fix: {problem.fix}") from None


def image_build_outputs(cfg: KitConfig, data: Any, origin: str,
                        hints: OutputsHints = RENDER_HINTS) -> ImageBuildOutputs:
    """Pick the data stack's image-build outputs from ``{stack: {key: value}}``."""
    stack = names.stack_names(cfg.name)["data"]
    fix = (f"deploy it with every stack of the config (`{hints.deploy()}`), then run "
           f"{hints.with_file()} or {hints.with_stacks()}")
    found = data.get(stack) if isinstance(data, dict) else None
    if (other := other_environments(cfg, data)) is not None:
        raise StackOutputsError(f"{origin} {other[0]}. Fix: {other[1]}")
    if not isinstance(found, dict):
        raise StackOutputsError(f"{origin}: no outputs for stack {stack}. Fix: {fix}")
    missing = [key for key in _IMAGE_BUILD_KEYS.values() if not found.get(key)]
    if missing:
        raise StackOutputsError(
            f"{origin}: stack {stack} has no output {', '.join(missing)} (a data stack deployed "
            f"before the image build existed). Fix: {fix}")
    return ImageBuildOutputs(stack=stack, **{f: found[k] for f, k in _IMAGE_BUILD_KEYS.items()})


def image_build_outputs_from_stacks(cfg: KitConfig, client: Any,
                                    hints: OutputsHints = RENDER_HINTS) -> ImageBuildOutputs:
    """The same, read with CloudFormation DescribeStacks (botocore's errors reach the caller)."""
    stack = names.stack_names(cfg.name)["data"]
    found = describe_stack_outputs(client, stack)
    return image_build_outputs(cfg, {stack: found} if found is not None else {},
                               f"CloudFormation ({cfg.region})", hints)
