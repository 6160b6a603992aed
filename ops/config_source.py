"""Which environment a command acts on, and where its config came from.

The config is ``--config FILE``, else the file named by the RLKIT_CONFIG environment variable
(as kubectl has KUBECONFIG; only the CLI entry, ops/cli.py, reads it and records the origin in
``args.config_origin``), else the built-in default config. Commands that delete or bill say which
before they act, so nobody tears down or launches into the built-in ``moe-rl`` by accident.
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


def announce(cfg: KitConfig, args: argparse.Namespace, action: str,
             region: str | None = None, file: TextIO | None = None) -> None:
    """One line, before acting: the environment, its account/region and its config (stdout
    unless ``file``; JSON output sends it to stderr)."""
    account = f"account {cfg.account}, " if cfg.account else ""
    print(f"{action} environment {cfg.name!r} ({account}{region or cfg.region}); config: "
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
