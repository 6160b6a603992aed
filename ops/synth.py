"""Synthesizing the kit's stacks from the CLI, offline: no AWS call, no credentials."""

from __future__ import annotations

import os
from pathlib import Path

from infra.config import KitConfig


def synth_offline(config: KitConfig, outdir: Path) -> None:
    """Every stack of ``config`` synthesized into ``outdir`` (cdk.out layout)."""
    os.environ.setdefault("CDK_VALIDATION", "false")  # cfn-lint/checkov run in the tests instead
    from stacks.kit import build_stacks, make_app  # CDK loads only for the commands that synth

    app = make_app(outdir=str(outdir))
    build_stacks(app, config)
    app.synth()
