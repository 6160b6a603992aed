"""The trainer's run config (run.yaml) as this kit config renders it, defined once.

The manifests mount this document in the RL job (``manifests.context``), and config validation
hands it to the trainer's own validator (``rltrainer.contract.parse_run_config``) so that a value
the trainer would refuse after the GPUs start fails at ``cdk synth`` / ``rlkit render`` instead.
The trainer package never imports the kit; the kit may call the trainer's validator.
"""

from __future__ import annotations

from typing import Any

from infra import names
from infra.catalog.instances import InstanceType
from infra.config.derived import checkpoint_local_dir
from infra.config.model import KitConfig
from infra.trainer_contract import DEFAULT_MAX_TOKENS_PER_GPU
from infra.trainer_contract import DEFAULT_SAVE_INTERVAL

CHECKPOINT_SAVE_INTERVAL = DEFAULT_SAVE_INTERVAL  # training.checkpoint.save_interval's default


def run_config_document(cfg: KitConfig, itype: InstanceType, *, bucket: str,
                        prompt_data: str) -> dict[str, Any]:
    """The trainer's run.yaml, exactly the schema ``rltrainer`` validates."""
    t = cfg.training
    g = t.grpo
    p = t.parallel
    return {
        "run_name": t.run_name,
        "model": {"name": t.model, "hf_checkpoint": t.hf_checkpoint, "megatron_args": []},
        "checkpoint": {
            "s3_uri": f"s3://{bucket}/{names.CHECKPOINTS_PREFIX}{t.run_name}/",
            # On the shared file system every pod mounts (the head uploads what workers save).
            "local_dir": checkpoint_local_dir(cfg),
            "save_interval": t.checkpoint.save_interval,
            # retention on the shared file system, the same K its size is checked against
            "keep_local": t.checkpoint.keep_local,
            # only when set: a default config renders the run.yaml it always did
            **({"keep_s3": t.checkpoint.keep_s3} if t.checkpoint.keep_s3 else {}),
        },
        "data": {"prompt_data": prompt_data, "input_key": "prompt", "label_key": "label",
                 "rm_type": t.reward_model},
        "grpo": {
            "num_rollout": g.num_rollout,
            "rollout_batch_size": g.rollout_batch_size,
            "n_samples_per_prompt": g.n_samples_per_prompt,
            "global_batch_size": g.global_batch_size,
            "num_steps_per_rollout": g.num_steps_per_rollout,
            "rollout_max_response_len": g.rollout_max_response_len,
            "rollout_temperature": g.rollout_temperature,
            "lr": g.lr,
            "kl_loss_coef": g.kl_loss_coef,
            "eps_clip": g.eps_clip,
        },
        "parallel": {
            "nodes": t.nodes,
            "gpus_per_node": itype.gpu_count,
            "training": {"tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep, "etp": p.etp,
                         "optimizer_cpu_offload": p.optimizer_cpu_offload,
                         # only when not the trainer's default (full): a default config renders
                         # the run.yaml it always did
                         **({"recompute": p.recompute} if p.recompute != "full" else {}),
                         **({"max_tokens_per_gpu": p.max_tokens_per_gpu}
                            if p.max_tokens_per_gpu != DEFAULT_MAX_TOKENS_PER_GPU else {})},
            "rollout": _rollout(t.rollout),
        },
        "expert_parallel": {"backend": t.expert_parallel.backend},
    }


def _rollout(r) -> dict[str, Any]:
    """parallel.rollout: the engine layout, and the mode only when it is not the default
    (colocated, on-policy), so a default config renders the run.yaml it always did."""
    out: dict[str, Any] = {"gpus_per_engine": r.gpus_per_engine, "ep": r.ep}
    if r.placement != "colocated" or r.nodes is not None:
        out["placement"] = r.placement
        out["nodes"] = r.nodes if r.nodes is not None else 0
    if r.overlap != "none" or r.off_policy_steps:
        out["overlap"] = r.overlap
        out["off_policy_steps"] = r.off_policy_steps
    return out
