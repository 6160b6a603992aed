#!/usr/bin/env python3
"""CDK entry point: read the config once, validate it, build the stacks.

    python app.py                                  # built-in default config
    python app.py -c config=examples/p5-2node.yaml # a config file, as `cdk synth -c` passes it
    npx aws-cdk@2.1148.1 synth -c config=examples/p5-2node.yaml

Offline: no AWS calls, no credentials, no context lookups.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from infra.config import ConfigError, config_warnings, load_config, shorten  # noqa: E402


# The CDK CLI version the README pins.
CDK_SYNTH = "npx aws-cdk@2.1148.1 synth"


def context_from_args(argv: list[str]) -> dict[str, str]:
    """``-c KEY=VALUE`` / ``--context KEY=VALUE`` pairs, the context arguments ``cdk synth`` takes.

    Anything else raises ValueError: silently ignoring an argument would synthesize the default.
    """
    context: dict[str, str] = {}
    for i in range(0, len(argv), 2):
        flag, pair = argv[i], argv[i + 1] if i + 1 < len(argv) else ""
        key, sep, value = pair.partition("=")
        if flag not in ("-c", "--context") or not sep or not key:
            raise ValueError(
                f"app.py: argument {' '.join(argv[i:i + 2])!r} is not -c KEY=VALUE; app.py takes "
                f"only the context arguments `cdk synth` takes. Fix: python app.py -c "
                f"config=FILE, or {CDK_SYNTH} -c config=FILE")
        context[key] = value
    return context


def main(argv: list[str] = ()) -> int:
    """Synthesize the app for ``-c config=...``; exit code 0, or 2 on any failure."""
    try:
        cli_context = context_from_args(list(argv))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # Imported here, not at the top: refusing an argument then needs no CDK (seconds of startup).
    from stacks.kit import make_app

    # `cdk` sets CDK_OUTDIR; plain `python app.py` writes to ./cdk.out like the CLI would.
    outdir = Path(os.environ.get("CDK_OUTDIR", "cdk.out"))
    outdir_existed = outdir.exists()
    try:
        app = make_app(outdir=str(outdir))
        for key, value in cli_context.items():  # as `cdk synth -c KEY=VALUE` hands them over
            app.node.set_context(key, value)
        config_path = app.node.try_get_context("config")
    except Exception as err:  # noqa: BLE001 - e.g. malformed CDK_CONTEXT_JSON
        return _fail(err, outdir, outdir_existed)
    return synthesize(app, config_path, outdir=outdir, outdir_existed=outdir_existed)


def synthesize(app, config_path: str | None, *, outdir: Path, outdir_existed: bool) -> int:
    """Load and validate the config, build the stacks, synth. Any failure exits 2 with one
    message, no traceback, and no cdk.out residue (unless the directory existed before)."""
    from stacks.kit import build_stacks

    try:
        config = load_config(config_path)
        for warning in config_warnings(config):  # loud, on stderr: synth output stays clean
            print(f"WARNING: {warning}", file=sys.stderr)
        build_stacks(app, config)
        app.synth()
    except Exception as err:  # noqa: BLE001 - the user gets one message, never a traceback
        return _fail(err, outdir, outdir_existed)
    return 0


def _fail(err: Exception, outdir: Path, outdir_existed: bool) -> int:
    if isinstance(err, ConfigError):
        print(err, file=sys.stderr)
    else:
        print(f"error: synth failed: {type(err).__name__}: {shorten(str(err), 500)}\n"
              "Nothing was written. This is a bug in the kit if the config validated: please "
              "report it with the config.", file=sys.stderr)
    if not outdir_existed:  # leave nothing half-created behind
        shutil.rmtree(outdir, ignore_errors=True)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
