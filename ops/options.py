"""The options several commands share, declared once, and the config every command loads.

- ``--config`` (``add_config``): the kit config; ops/cli.py fills it from RLKIT_CONFIG when not
  given (ops/config_source.py), else the built-in default config is used.
- ``--region``/``--profile`` (``add_aws``) where a command calls AWS, with ``clients_factory`` (an
  ``ops.aws.AwsClients`` by default; tests put a bundle of stubbed clients there).
- The stack-outputs source (``add_outputs_source``): ``--outputs FILE``, else CloudFormation (or,
  for `rlkit render`, ``--from-stacks``; without either it renders with placeholders).
- ``-o/--output json`` (``add_output_option``, defined with the printing in ops/output.py).
- ``--dry-run`` (``add_dry_run``), whose help says what the command would do: it previews, and
  exits non-zero when the real command would refuse.
- ``--state-dir`` (``add_run_options``): where gate results live, default the XDG state
  directory (``ops.gate.record.default_state_root``).
- Number types (``positive_int``, ``non_negative_float``, ...) whose errors name the flag, the
  value and the rule on one line.
- ``config_flag``: how a hint names this environment's config (``--config FILE``, or nothing when
  RLKIT_CONFIG or the default chose it), so hints use rlkit's own flags.

``load_config`` loads and validates the config of ``args``; on a bad config it prints the
problems on stderr and returns None, and the command exits 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from infra import config as kit_config
from infra.config import ConfigError, KitConfig
from infra.trainer_contract import EP_BACKENDS
from manifests.outputs import OutputsHints
from ops.aws import AwsClients
from ops.config_source import describe
from ops.output import add_output_option

__all__ = [
    "CONFIG_HELP", "add_aws", "config_flag", "non_negative_float", "positive_float",
    "positive_int", "add_config", "add_dry_run", "add_output_option",
    "add_outputs_source", "add_run_options", "add_run_source", "add_validation_options",
    "aws_clients", "load_config", "outputs_hints",
]

CONFIG_HELP = "kit config YAML (default: the built-in default config)"
REGION_HELP = "AWS region (default: the config's region)"
PROFILE_HELP = "AWS profile (default: the usual chain)"


# --- declaring ------------------------------------------------------------------------------------


def add_config(parser, help: str = CONFIG_HELP) -> None:
    """--config FILE (``parser`` may be a mutually exclusive group)."""
    parser.add_argument("--config", type=Path, default=None, help=help)


def add_aws(parser: argparse.ArgumentParser, *, region: bool = True,
            profile_help: str = PROFILE_HELP,
            factory: Callable[..., AwsClients] = AwsClients) -> None:
    """--region (optional) and --profile, and the factory of the command's AWS client bundle."""
    if region:
        parser.add_argument("--region", default=None, help=REGION_HELP)
    parser.add_argument("--profile", default=None, help=profile_help)
    parser.set_defaults(clients_factory=factory)


def add_outputs_source(parser: argparse.ArgumentParser, help: str, *,
                       from_stacks: bool = False) -> None:
    """--outputs FILE (the JSON `cdk deploy --outputs-file` writes); with ``from_stacks``, a
    --from-stacks flag excludes it (and neither means placeholders)."""
    target = parser.add_mutually_exclusive_group() if from_stacks else parser
    target.add_argument("--outputs", type=Path, default=None, help=help)
    if from_stacks:
        target.add_argument("--from-stacks", action="store_true",
                            help="read the outputs from CloudFormation (DescribeStacks)")
    parser.set_defaults(clients_factory=AwsClients)


def add_dry_run(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--dry-run", action="store_true", help=help)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of the commands that act on the cluster (gate, launch, status, logs)."""
    add_config(parser)
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where gate results live, one subdirectory per environment "
                        "(default: $XDG_STATE_HOME/rlkit, else ~/.local/state/rlkit)")
    parser.add_argument("--context", default=None,
                        help="kubectl context (default: the current one; it must point at this "
                        "environment's cluster)")
    parser.add_argument("--request-timeout", type=positive_float, default=10.0, metavar="SECONDS",
                        help="how long to wait for the cluster's API server to answer before "
                        "saying it is unreachable (default 10)")
    parser.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)


def add_run_source(parser: argparse.ArgumentParser) -> None:
    """What gate and launch render from (and the AWS account that has it), where to, with which
    EP backend, and --dry-run."""
    add_outputs_source(parser, "the JSON written by `cdk deploy --outputs-file` (default: read "
                       "the outputs from CloudFormation)")
    add_aws(parser)
    parser.add_argument("--out", type=Path, default=None,
                        help="where to render the manifests (default: out/<config name>)")
    parser.add_argument("--ep-backend", choices=EP_BACKENDS, default=None,
                        help="override training.expert_parallel.backend for this run")
    add_dry_run(parser, "print the kubectl commands instead of running them; when the real "
                "command would refuse, exit as it would (1 or 2)")


def add_validation_options(parser: argparse.ArgumentParser) -> None:
    """How `rlkit render` and `rlkit validate` validate custom kinds."""
    parser.add_argument(
        "--crd-dir", type=Path, default=None,
        help="directory of CustomResourceDefinition YAML for custom kinds (RayJob, RayCluster); "
        "default: the pinned KubeRay CRDs in ../shared/crds next to the repository, else in the "
        "verified artifact cache (python scripts/fetch_artifacts.py fills it)")
    parser.add_argument(
        "--strict", action="store_true",
        help="a kind without a schema is an error (always on when CI=true)")


# --- numbers: one-line errors naming the flag, the value and the rule ------------------------------


def _number(kind: type, rule: str, ok: Callable[[float], bool]) -> Callable[[str], float]:
    def parse(text: str):  # noqa: ANN202
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a {'whole number' if kind is int else 'number'}") from None
        if value != value or value in (float("inf"), float("-inf")) or not ok(value):
            raise argparse.ArgumentTypeError(f"{text} is not allowed: {rule}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


positive_int = _number(int, "it must be at least 1", lambda v: v >= 1)
non_negative_int = _number(int, "it must be 0 or more", lambda v: v >= 0)
positive_float = _number(float, "it must be greater than 0", lambda v: v > 0)
non_negative_float = _number(float, "it must be 0 or more", lambda v: v >= 0)


def fraction(text: str) -> float:
    """A number in (0, 1]."""
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text} is not allowed: it is a fraction of the GPU's "
                                         "memory, greater than 0 and at most 1")
    return value


# --- reading --------------------------------------------------------------------------------------


def load_config(args: argparse.Namespace,
                adjust: Callable[[KitConfig], KitConfig] | None = None) -> KitConfig | None:
    """The validated config of ``args.config`` (then ``adjust``ed, e.g. another EP backend);
    None after printing every problem on stderr (the command then exits 2)."""
    try:
        cfg = kit_config.load_config(args.config)
        return adjust(cfg) if adjust is not None else cfg
    except ConfigError as err:
        if getattr(args, "config", None) is not None:  # where the file name came from
            print(f"config: {describe(args)}", file=sys.stderr)
        print(err, file=sys.stderr)
        return None


def config_flag(args: argparse.Namespace) -> str:
    """`` --config FILE`` when the config came from --config, else "" (RLKIT_CONFIG or the
    built-in default choose it again): appended to the commands a hint names."""
    if getattr(args, "config", None) is not None and \
            getattr(args, "config_origin", "--config") == "--config":
        return f" --config {args.config}"
    return ""


def outputs_hints(args: argparse.Namespace, command: str) -> OutputsHints:
    """How `rlkit <command>`'s stack-outputs errors name a retry: its own flags (only render has
    --from-stacks), its --config when one was typed, and the config file in the `cdk deploy`
    hint."""
    return OutputsHints(command=f"rlkit {command}{config_flag(args)}",
                        from_stacks=command == "render", config=getattr(args, "config", None))


def aws_clients(args: argparse.Namespace, region: str) -> AwsClients:
    """The command's AWS client bundle: in --region when given, else ``region`` (clients made on
    first use), with --profile."""
    factory = getattr(args, "clients_factory", AwsClients)
    return factory(getattr(args, "region", None) or region, getattr(args, "profile", None))
