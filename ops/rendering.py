"""Rendering for the commands that act: the stack outputs from their source, the manifests of a
gate or launch run, and the config with another EP backend.

The outputs come from manifests/outputs.py, the one reader of the deployed stacks' outputs:
``--outputs FILE`` (the JSON `cdk deploy --outputs-file` writes), else CloudFormation, else (dry
runs, offline renders) placeholders.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from infra import names
from infra.config import KitConfig, parse_config
from manifests import (
    StackOutputs,
    build_context,
    outputs_from_file,
    outputs_from_stacks,
    placeholder_outputs,
    render,
    write,
)
from manifests.fabric import FABRIC_TIMEOUT_SECONDS
from manifests.efa_env import EfaEnvProfile
from manifests.outputs import RENDER_HINTS, OutputsHints
from manifests.render import check_out_dir
from ops.aws import AwsClients
from ops.image_digest import resolve_digest


def resolve_outputs(cfg: KitConfig, outputs_file: Path | None, *, placeholder: bool,
                    clients: AwsClients, hints: OutputsHints = RENDER_HINTS) -> StackOutputs:
    """From ``outputs_file``, else placeholders when ``placeholder``, else CloudFormation (the
    bundle's cloudformation client, made only then). Raises RenderError, whose fixes name the
    calling command's flags (``hints``)."""
    if outputs_file is not None:
        return outputs_from_file(cfg, outputs_file, hints)
    if placeholder:
        return placeholder_outputs(cfg)
    return outputs_from_stacks(cfg, client=clients.cloudformation, hints=hints)


def render_for_run(cfg: KitConfig, outputs_file: Path | None, out: Path | None, dry_run: bool,
                   clients: AwsClients, echo: Callable[[str], None],
                   reservation_end: datetime | None = None,
                   config_file: Path | None = None,
                   fabric_timeout_s: float = FABRIC_TIMEOUT_SECONDS,
                   block_start_wait_s: float | None = None,
                   hints: OutputsHints = RENDER_HINTS) -> tuple[Any, Path, StackOutputs]:
    """Resolve the stack outputs (placeholders only for a dry run) and render the tree to ``out``
    (default out/<name>); returns the render context, the directory and the outputs (whose
    cluster kubectl must point at). ``reservation_end``: the training group's Capacity Block end,
    rendered into the job; ``fabric_timeout_s``: the gate's wait for each fabric job, which their
    deadline follows; ``block_start_wait_s``: the time until that block starts, which the RL job's
    start deadline adds. Raises RenderError, first (a dry run too) when ``out`` cannot take the
    tree (a file, a link, a directory holding ``config_file``: manifests.render.out_dir_problem).
    A real run pins the image to the digest its tag names now (ops/image_digest.py; RenderError
    when ECR cannot say); a dry run renders the tag."""
    out = out if out is not None else Path("out") / cfg.name
    check_out_dir(out, cfg.name, keep=[config_file] if config_file is not None else [])
    outputs = resolve_outputs(cfg, outputs_file, placeholder=dry_run, clients=clients,
                              hints=hints)
    digest = None
    if dry_run:
        echo("[dry-run] the image is rendered by its tag; the real run pins it to the digest the "
             "tag names then")
    else:
        digest = resolve_digest(cfg, outputs, clients, lambda line: print(line, file=sys.stderr))
    return (render_manifests(cfg, outputs, out, dry_run, echo, reservation_end, fabric_timeout_s,
                             block_start_wait_s=block_start_wait_s, image_digest=digest), out, outputs)


def cluster_to_check(cfg: KitConfig, outputs: StackOutputs) -> str:
    """The EKS cluster kubectl must point at: the outputs' ClusterName, or, when a dry run renders
    with placeholder outputs, the name the cluster stack gives it (names.eks_cluster_name: fixed,
    not generated), so a dry run checks the same cluster the real command will read."""
    if outputs.source == "placeholder":
        return names.eks_cluster_name(cfg.name)
    return outputs.cluster_name


def render_manifests(cfg: KitConfig, outputs: StackOutputs, out: Path, dry_run: bool,
                     echo: Callable[[str], None], reservation_end: datetime | None = None,
                     fabric_timeout_s: float = FABRIC_TIMEOUT_SECONDS, *,
                     block_start_wait_s: float | None = None,
                     image_digest: str | None = None) -> Any:
    """Render (and, unless dry-run, write) the tree; returns the render context."""
    ctx = build_context(cfg, outputs, reservation_end, fabric_timeout_s,
                        block_start_wait_s=block_start_wait_s, image_digest=image_digest)
    files = render(ctx)
    if dry_run:
        echo(f"[dry-run] would render {len(files)} object(s) to {out}/ "
             f"(stack outputs: {outputs.origin})")
    else:
        write(files, out)
        echo(f"Rendered {len(files)} object(s) to {out}/ (stack outputs: {outputs.origin})")
    return ctx


def with_ep_backend(cfg: KitConfig, backend: str | None) -> KitConfig:
    """The config with training.expert_parallel.backend replaced, validated again."""
    if backend is None or backend == cfg.training.expert_parallel.backend:
        return cfg
    data = cfg.model_dump(mode="json")
    ep = data["training"]["expert_parallel"]
    ep["backend"] = backend
    if not backend.startswith("deepep-gin"):
        ep["gin_mode"] = None
    return parse_config(data, f"{cfg.name} with expert_parallel.backend={backend}")


def gin_type_for(cfg: KitConfig) -> str | None:
    """The NCCL_GIN_TYPE the kit's EFA profile sets for this config (None: not a GIN backend)."""
    group = cfg.gpu_node_groups[cfg.training.node_group]
    ep = cfg.training.expert_parallel
    return EfaEnvProfile(group.instance_type, ep.backend, ep.gin_mode).as_dict().get("NCCL_GIN_TYPE")
