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

from infra.cdk_cli import CDK_CLI  # noqa: E402
from infra.config import ConfigError, config_warnings, load_config, shorten  # noqa: E402


# The CDK CLI version the README pins (infra.cdk_cli).
CDK_SYNTH = f"{CDK_CLI} synth"

# The context keys the kit reads. Any other key is CDK's own or is refused (see below): `-c
# conifg=FILE` used to build the built-in default without a word.
KIT_CONTEXT_KEYS = ("config",)
# CDK's own keys: feature flags (@aws-cdk/...), the keys the CLI sets for every app (aws:cdk:...,
# e.g. aws:cdk:enable-path-metadata, aws:cdk:bundling-stacks) and the one `cdk acknowledge`
# keeps in cdk.context.json; cdk.json's keys are accepted too.
CDK_CONTEXT_PREFIXES = ("@aws-cdk/", "aws:cdk:", "aws-cdk:")
CDK_CONTEXT_KEYS = ("acknowledged-issue-numbers",)


def foreign_context_key(key: str, cdk_json_keys, *, only_near_misses: bool) -> str | None:
    """The refusal of context key ``key``, or None when the kit or CDK reads it.

    With ``only_near_misses`` (context the CDK CLI handed over), a foreign key is refused only
    when it looks like a misspelt kit key: the CLI also passes the context of the user's
    ~/.cdk.json, which may hold other apps' keys (aws-cdk-cli lib/cli/user-configuration.ts,
    loadConfigFiles). Keys typed on `python app.py`'s own command line are all judged."""
    from infra.config.errors import close_match

    if key in KIT_CONTEXT_KEYS or key in CDK_CONTEXT_KEYS or key in cdk_json_keys or \
            key.startswith(CDK_CONTEXT_PREFIXES) or ":" in key:  # ":": a CDK lookup's cache key
        return None
    close = close_match(key, KIT_CONTEXT_KEYS) or close_match(key.lower(), KIT_CONTEXT_KEYS)
    if only_near_misses and close is None:
        return None
    hint = f"did you mean -c {close}=...?" if close else \
        "remove it; the config file is -c config=FILE."
    return (f"context key {key!r} is neither the kit's ({', '.join(KIT_CONTEXT_KEYS)}) nor "
            "CDK's own (a misspelt key would be ignored and the built-in default config built). "
            f"Fix: {hint} Nothing was written.")


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
    from stacks.feature_flags import cdk_json_context

    try:
        cli_context = context_from_args(list(argv))
        cdk_json_keys = set(cdk_json_context())
        refusals = [r for key in cli_context
                    if (r := foreign_context_key(key, cdk_json_keys, only_near_misses=False))]
        if refusals:
            raise ValueError("\nerror: ".join(f"app.py: {r}" for r in refusals))
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
        # What the CDK CLI handed over (CDK_CONTEXT_JSON, or the file CONTEXT_OVERFLOW_LOCATION_ENV
        # names: aws-cdk-lib core/lib/app.js loadContext) merged with cdk.json's.
        refusals = [r for key in app.node.get_all_context()
                    if (r := foreign_context_key(key, cdk_json_keys, only_near_misses=True))]
        if refusals:
            print("\n".join(f"error: {r}" for r in refusals), file=sys.stderr)
            return _cleanup(outdir, outdir_existed)
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
    return _cleanup(outdir, outdir_existed)


def _cleanup(outdir: Path, outdir_existed: bool) -> int:
    if not outdir_existed:  # leave nothing half-created behind
        shutil.rmtree(outdir, ignore_errors=True)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
