#!/usr/bin/env python3
"""CDK entry point: read the config once, validate it, build the stacks.

    python app.py                                  # built-in default config
    npx cdk synth -c config=examples/p5-2node.yaml # a config file

Offline: no AWS calls, no credentials, no context lookups.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from infra.config import ConfigError, load_config  # noqa: E402
from stacks.kit import build_stacks, make_app  # noqa: E402


def main() -> None:
    # `cdk` sets CDK_OUTDIR; plain `python app.py` writes to ./cdk.out like the CLI would.
    outdir = Path(os.environ.get("CDK_OUTDIR", "cdk.out"))
    outdir_existed = outdir.exists()
    app = make_app(outdir=str(outdir))
    try:
        config = load_config(app.node.try_get_context("config"))
    except ConfigError as err:
        print(err, file=sys.stderr)
        if not outdir_existed:  # leave nothing half-created behind
            shutil.rmtree(outdir, ignore_errors=True)
        sys.exit(2)
    build_stacks(app, config)
    app.synth()


if __name__ == "__main__":
    main()
