"""The trainer's contract as the kit config sees it: which expert-parallel backend can train, and
the trainer's own run-config validation run on the run.yaml this config renders.

The trainer owns the rules (``rltrainer.contract``, imported through ``infra.trainer_contract``);
this module maps its problems onto the kit config's field paths.
"""

from __future__ import annotations

from infra.catalog.instances import INSTANCE_TYPES
from infra.catalog.models import MODEL_CATALOG
from infra.config.errors import problem
from infra.config.model import KitConfig
from infra.config.run_config import run_config_document
from infra.config.values import MAX_GPU_NODES_PER_GROUP
from infra.problems import Problem
from infra.trainer_contract import (
    EP_BACKENDS,
    GIN_TRAINING_RULE,
    TRAINING_EP_BACKENDS,
    RunConfigError,
    engine_heads_problem,
    parse_run_config,
    pipeline_split_problem,
)


def training_ep_backend_problems(cfg: KitConfig) -> list[Problem]:
    """Why ``cfg`` cannot *train* with its expert-parallel backend (empty = it can).

    Not part of ``validate``: the same config, with ``--ep-backend deepep-gin``, is what the
    fabric gate benchmarks. Call it where a training job is launched.
    """
    backend = cfg.training.expert_parallel.backend
    if backend in TRAINING_EP_BACKENDS or backend not in EP_BACKENDS:
        return []
    # The trainer's own rule text; the fix names the kit's command for benchmarking it.
    return [problem(
        "training.expert_parallel.backend", backend, GIN_TRAINING_RULE,
        "use deepep-nvshmem (DeepEP V1 over NVSHMEM/libfabric) or nccl for training; "
        "`rlkit gate --ep-backend deepep-gin` may still benchmark it")]


# Where each run-config field comes from in the kit config (rltrainer's paths -> ours).
_RUN_CONFIG_PATHS = (
    ("parallel.training", "training.parallel"),
    ("parallel.rollout", "training.rollout"),
    ("parallel.nodes", "training.nodes"),
    ("parallel.gpus_per_node", "gpu_node_groups.<training.node_group>.instance_type"),
    ("model.hf_checkpoint", "training.hf_checkpoint"),
    ("model.name", "training.model"),
    ("data.prompt_data", "training.prompt_data"),
    ("data.rm_type", "training.reward_model"),
    ("run_name", "training.run_name"),
    ("checkpoint.save_interval", "training.checkpoint.save_interval"),
    ("checkpoint.keep_local", "training.checkpoint.keep_local"),
    ("checkpoint.keep_s3", "training.checkpoint.keep_s3"),
    ("grpo", "training.grpo"),
    ("expert_parallel", "training.expert_parallel"),
    ("parallel", "training.parallel"),
)


def _kit_path(run_config_path: str) -> str:
    for theirs, ours in _RUN_CONFIG_PATHS:
        if run_config_path == theirs or run_config_path.startswith(theirs + "."):
            return ours + run_config_path[len(theirs):]
    return f"training ({run_config_path})"


def trainer_problems(cfg: KitConfig, already: list[Problem]) -> list[Problem]:
    """The trainer's own run-config validation (rltrainer.contract), run on the run.yaml this
    config renders, so that what the trainer would refuse after the GPUs start fails here. Its
    problems are reported with the kit config's field paths; those the kit already reported are
    left out."""
    group = cfg.gpu_node_groups.get(cfg.training.node_group)
    itype = INSTANCE_TYPES.get(group.instance_type) if group is not None else None
    if itype is None:
        return []  # reported already (unknown group or instance type)
    if not 1 <= cfg.training.nodes <= min(group.max_size, MAX_GPU_NODES_PER_GROUP):
        # Reported already; and the trainer's hints enumerate divisors of the GPU count, which
        # must stay small (10**9 nodes would take minutes).
        return []
    # The bucket is known only after deploy; any valid name stands in for it.
    doc = run_config_document(cfg, itype, bucket="rlkit-config-check",
                              prompt_data=cfg.training.prompt_data if
                              cfg.training.prompt_data.startswith(("s3://", "/"))
                              else f"s3://rlkit-config-check/{cfg.training.prompt_data}")
    reported = [p.path for p in already]
    found = []
    # The run.yaml carries no layer count (the launcher takes it from Miles' model_args() in the
    # image), so the trainer's pipeline-split rule is run here with the catalog's.
    model = MODEL_CATALOG.get(cfg.training.model)
    split = model and pipeline_split_problem(
        cfg.training.parallel.pp, model.num_layers,
        f"training.model {model.key} has {model.num_layers} layers", "training.parallel.pp")
    if split and "training.parallel.pp" not in reported:
        found.append(problem(split.path, split.value, f"the trainer refuses it: {split.rule}",
                             split.fix))
    # Likewise the head counts, for the trainer's engine-size rule (rltrainer.contract.heads).
    heads = model and engine_heads_problem(
        cfg.training.rollout.gpus_per_engine, model.num_heads,
        model.num_kv_heads if model.attention == "gqa" else None,
        f"training.model {model.key} has {model.num_heads} attention heads"
        + (f" and {model.num_kv_heads} KV heads" if model.attention == "gqa" else " (MLA)"),
        "training.rollout.gpus_per_engine")
    if heads and "training.rollout.gpus_per_engine" not in reported:
        found.append(problem(heads.path, heads.value, f"the trainer refuses it: {heads.rule}",
                             heads.fix))
    try:
        parse_run_config(doc, "run config")
    except RunConfigError as err:
        for rp in err.problems:
            if rp.path == "expert_parallel.backend":
                # The kit checks the backend itself; the fabric gate renders configs with
                # deepep-gin to benchmark it, which the trainer refuses only for training.
                continue
            path = _kit_path(rp.path)
            if any(path == r or path.startswith(r + ".") or r.startswith(path + ".")
                   for r in reported):
                continue
            found.append(problem(path, rp.value, f"the trainer refuses it: {rp.rule}", rp.fix))
    return found
