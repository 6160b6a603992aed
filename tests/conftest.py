"""Shared fixtures: every example config is synthesized once per test session."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

# Before aws_cdk is imported: no Node EOL banner, and no built-in CloudFormation validation
# plugin during synth (cfn-lint runs on the templates in test_cfn_lint.py instead).
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ["CDK_VALIDATION"] = "false"

import pytest  # noqa: E402

from infra.config import KitConfig, load_config  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.stem for p in (REPO_ROOT / "examples").glob("*.yaml"))


@dataclass
class Synth:
    config: KitConfig
    outdir: Path
    templates: dict[str, dict]  # stack name -> template
    manifest: dict

    def template(self, kind: str, group: str | None = None) -> dict:
        from infra import names
        if kind == "gpu":
            return self.templates[names.gpu_stack_name(self.config.name, group)]
        return self.templates[names.stack_names(self.config.name)[kind]]


@functools.cache
def _synth(example: str, outdir: str) -> Synth:
    import json

    from stacks.kit import build_stacks, make_app

    config = load_config(REPO_ROOT / "examples" / f"{example}.yaml")
    app = make_app(outdir=outdir)
    stacks = build_stacks(app, config)
    assembly = app.synth()
    templates = {s.stack_name: assembly.get_stack_by_name(s.stack_name).template
                 for s in stacks.all()}
    manifest = json.loads((Path(outdir) / "manifest.json").read_text())
    return Synth(config=config, outdir=Path(outdir), templates=templates, manifest=manifest)


@pytest.fixture(scope="session")
def synth(tmp_path_factory):
    """synth(example_name) -> Synth, cached for the session."""
    base = tmp_path_factory.mktemp("cdk")

    def get(example: str) -> Synth:
        return _synth(example, str(base / example))

    return get


def resources(template: dict, type_: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def only(template: dict, type_: str) -> dict:
    found = resources(template, type_)
    assert len(found) == 1, f"expected one {type_}, found {len(found)}"
    return next(iter(found.values()))
