#!/usr/bin/env python3
"""CDK entry point: read the config once, validate it, build the stacks.

    python app.py                                  # built-in default config
    npx cdk synth -c config=examples/p5-2node.yaml # a config file

Offline: no AWS calls, no credentials, no context lookups.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from infra.config import ConfigError, load_config  # noqa: E402
from stacks.kit import build_stacks, make_app  # noqa: E402


def main() -> None:
    # `cdk` sets CDK_OUTDIR; plain `python app.py` writes to ./cdk.out like the CLI would.
    app = make_app(outdir=os.environ.get("CDK_OUTDIR", "cdk.out"))
    config_path = app.node.try_get_context("config")
    try:
        config = load_config(config_path)
    except ConfigError as err:
        print(err, file=sys.stderr)
        sys.exit(2)
    build_stacks(app, config)
    app.synth()


if __name__ == "__main__":
    main()
