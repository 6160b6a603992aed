"""Kubernetes manifests for the kit, rendered from the typed config and the stack outputs.

    cfg = infra.config.load_config("examples/p5-2node.yaml")
    outputs = outputs_from_file(cfg, "cdk-outputs.json")   # or placeholder_outputs(cfg)
    files = render(build_context(cfg, outputs))
    write(files, "out/p5-team")
    report = manifests.validate.validate_path(
        "out/p5-team", kubernetes_version=cfg.kubernetes_version, crd_dir="../shared/crds",
        strict=True)

Layering: imports infra (config, catalog, names) and never aws_cdk; reads no environment
variables (the CLI decides strictness and paths and passes them in).
"""

from manifests.context import RenderContext, build_context
from manifests.errors import RenderError, RenderProblem
from manifests.outputs import (
    PLACEHOLDER,
    StackOutputs,
    outputs_from_file,
    outputs_from_stacks,
    placeholder_outputs,
)
from manifests.render import RenderedFile, render, tree, write


def render_config(cfg, outputs: StackOutputs) -> list[RenderedFile]:
    """Config + outputs -> rendered files (not written)."""
    return render(build_context(cfg, outputs))


__all__ = [
    "PLACEHOLDER",
    "RenderContext",
    "RenderError",
    "RenderProblem",
    "RenderedFile",
    "StackOutputs",
    "build_context",
    "outputs_from_file",
    "outputs_from_stacks",
    "placeholder_outputs",
    "render",
    "render_config",
    "tree",
    "write",
]
