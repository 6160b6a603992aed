"""Which environment a command acts on, and where its config came from.

The config is ``--config FILE``, else the file named by the RLKIT_CONFIG environment variable
(as kubectl has KUBECONFIG; only the CLI entry, ops/cli.py, reads it and records the origin in
``args.config_origin``), else the built-in default config. Commands that delete or bill say which
before they act, so nobody tears down or launches into the built-in ``moe-rl`` by accident; the
others (render, validate, plan) say ``config: FILE (from RLKIT_CONFIG)`` on stderr when they read a
config the environment variable chose, a file nobody named on that command line (``say_source``;
`rlkit check` names its config in its first line).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from infra.config import KitConfig

CONFIG_ENV = "RLKIT_CONFIG"
DEFAULT_SOURCE = f"the built-in default config (no --config given and {CONFIG_ENV} not set)"


def resolve(args: argparse.Namespace, env_value: str | None) -> None:
    """Fill ``args.config`` from RLKIT_CONFIG when --config was not given; record the origin."""
    if not hasattr(args, "config"):
        return
    if args.config is not None:
        args.config_origin = "--config"
    elif env_value:
        args.config = Path(env_value)
        args.config_origin = CONFIG_ENV
    else:
        args.config_origin = None


def describe(args: argparse.Namespace) -> str:
    """``FILE (from --config)``, ``FILE (from RLKIT_CONFIG)`` or the built-in default, in words."""
    path = getattr(args, "config", None)
    if path is None:
        return DEFAULT_SOURCE
    return f"{path} (from {getattr(args, 'config_origin', None) or '--config'})"


def say_source(args: argparse.Namespace) -> None:
    """``config: FILE (from RLKIT_CONFIG)`` on stderr once a command has read a config that
    RLKIT_CONFIG chose (a --config file was typed on the command line, so it is not repeated)."""
    if getattr(args, "config", None) is not None and \
            getattr(args, "config_origin", None) == CONFIG_ENV:
        print(f"config: {describe(args)}", file=sys.stderr)


def to_be_created(args: argparse.Namespace, target: str | Path | None) -> bool:
    """The config does not exist yet and is the file ``target`` (`rlkit plan --write-config`)
    will create: nothing to read, the new file starts from the built-in default config."""
    path = getattr(args, "config", None)
    return (path is not None and target is not None and not Path(path).exists()
            and Path(target).resolve() == Path(path).resolve())


def announce(cfg: KitConfig, args: argparse.Namespace, action: str,
             region: str | None = None, file: TextIO | None = None) -> None:
    """One line, before acting: the environment, its account/region and its config (stdout
    unless ``file``; JSON output sends it to stderr)."""
    account = f"account {cfg.account}, " if cfg.account else ""
    region = getattr(args, "region", None) or region or cfg.region
    origin = " from --region" if getattr(args, "region", None) else ""
    print(f"{action} environment {cfg.name!r} ({account}{region}{origin}); config: "
          f"{describe(args)}", file=file or sys.stdout)


def document_default(parser: argparse.ArgumentParser) -> None:
    """Say in every subcommand's --config help that RLKIT_CONFIG is the default."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                document_default(sub)
        elif "--config" in action.option_strings and action.help:
            action.help = action.help.replace(
                "(default: the built-in default config)",
                f"(default: ${CONFIG_ENV}, else the built-in default config)")


def starter_config(path: Path, instance_type: str, node_group: str, nodes: int,
                   shared_fs_gib: int | None = None) -> str:
    """The text of a new config for `rlkit plan --write-config FILE` when FILE does not exist:
    the environment named after the file (when that is a valid name), the built-in default's
    region and first zone, one GPU node group of ``instance_type`` sized for ``nodes``, and the
    shared file system's ``shared_fs_gib`` (what the plan sized for the model) when given.
    The planner then merges its training layout in."""
    import re

    from infra.config import load_config

    default = load_config(None)
    stem = re.sub(r"[^a-z0-9-]+", "-", path.stem.lower()).strip("-")[:20].rstrip("-")
    name = stem if re.fullmatch(r"[a-z]([a-z0-9-]*[a-z0-9])?", stem) else default.name
    zone = default.availability_zones[0]
    return (f"# Started by `rlkit plan --write-config {path.name}`; check name, region, zone and\n"
            f"# account before `cdk deploy` (docs/config-reference.md lists every key).\n"
            f"name: {name}\nregion: {default.region}\n"
            f"gpu_node_groups:\n  {node_group}:\n    instance_type: {instance_type}\n"
            f"    availability_zone: {zone}\n    desired_size: {nodes}\n    max_size: {nodes}\n"
            + (f"storage:\n  shared_filesystem:\n    capacity_gib: {shared_fs_gib}  # sized by "
               "rlkit plan for the model's weights and checkpoints\n" if shared_fs_gib else ""))
