"""The fabric EP job never asks DeepEP for a group size the pinned DeepEP cannot configure.

DeepEP 567632d's ``Buffer.get_dispatch_config`` / ``get_combine_config`` know only the sizes in
``DEEPEP_RANK_COUNTS`` and assert otherwise (deep_ep/buffer.py:245-259; the trainer's tests check
the set against that source). The job's ``--span`` groups and its ``--acceptance`` pass over every
GPU each build one DeepEP buffer of their size.
"""

from __future__ import annotations

import itertools

import pytest

from infra.catalog import INSTANCE_TYPES
from infra.config import ConfigError, parse_config
from infra.trainer_contract import DEEPEP_RANK_COUNTS
from manifests.fabric import fabric_jobs

P5 = INSTANCE_TYPES["p5.48xlarge"]
KNOWN = "2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160"


def config(nodes: int, backend: str = "deepep-nvshmem", model: str = "qwen3-30b-a3b", **training):
    return parse_config({
        "gpu_node_groups": {"p5": {"instance_type": "p5.48xlarge", "max_size": 64,
                                   "availability_zone": "us-east-1a", "capacity": {"type": "on-demand"}}},
        "storage": {"shared_filesystem": {"capacity_gib": 48000}},
        "training": {"nodes": nodes, "model": model, "expert_parallel": {"backend": backend}, **training}})


def ep_job(cfg):
    jobs, problems = fabric_jobs(cfg, P5)
    job = next((j for j in jobs if j.key == "ep"), None)
    return job, problems


def deepep_groups(command: list[str], world: int) -> list[int]:
    """The size of every DeepEP buffer the job's command builds: each --span's, and the
    every-GPU pass (--acceptance, or the model's shape when no --span is given)."""
    tail = command[command.index("rltrainer.bench") + 1:]
    sizes = [int(tail[i + 1].split(":")[1]) for i, a in enumerate(tail) if a == "--span"]
    if "--acceptance" in tail or not sizes:
        sizes.append(world)
    return sizes


def test_32_hgx_nodes_render_no_deepep_acceptance():
    """256 GPUs divide DeepEP's 256 published experts, but DeepEP has no config for 256 ranks."""
    job, problems = ep_job(config(32))
    assert problems == []
    assert "--acceptance" not in job.command
    assert job.description.endswith(
        f"; DeepEP's published shape not measured over 256 GPUs (DeepEP configures only {KNOWN} ranks)")
    job, _ = ep_job(config(32, backend="nccl"))  # NCCL's all-to-all takes any size
    assert job.command[-1] == "--acceptance"
    job, _ = ep_job(config(16))
    assert job.command[-1] == "--acceptance"


def test_a_deepep_training_group_deepep_cannot_configure_is_named():
    job, problems = ep_job(config(32, model="deepseek-v3", parallel={"ep": 256}))
    assert job is None
    (p,) = problems
    assert p.subject == "training.parallel.ep = 256"
    assert p.rule == (
        "with expert_parallel.backend deepep-nvshmem, Megatron builds DeepEP's buffer for its EP group of "
        f"256 GPUs and the pinned DeepEP configures only {KNOWN} ranks (DeepEP 567632d "
        "deep_ep/buffer.py:245-259 Buffer.get_dispatch_config / get_combine_config: 'Unsupported number of "
        "EP ranks'; megatron-lm 37f9161 megatron/core/transformer/moe/fused_a2a.py:46-47)")
    assert p.fix == f"choose an EP group size among {KNOWN}, or use expert_parallel.backend nccl"


BATCHES = ({}, {"rollout_batch_size": 96, "global_batch_size": 768})
ROLLOUTS = ({}, {"placement": "disaggregated", "nodes": 1}, {"gpus_per_engine": 16, "ep": 16},
            {"placement": "disaggregated", "nodes": 2, "gpus_per_engine": 16, "ep": 16})


@pytest.mark.parametrize("backend", ["deepep-nvshmem", "deepep-gin"])
def test_every_rendered_deepep_group_is_a_size_deepep_configures(backend):
    rendered = refused = 0
    for model, nodes, ep, etp, grpo, rollout in itertools.product(
            ("qwen3-30b-a3b", "deepseek-v3"), range(1, 33), (1, 2, 4, 8, 16, 32, 64, 128, 256), (1, 2),
            BATCHES, ROLLOUTS):
        try:
            cfg = config(nodes, backend=backend, model=model, parallel={"ep": ep, "etp": etp},
                         grpo=grpo, rollout=rollout)
        except ConfigError:
            continue
        job, problems = ep_job(cfg)
        if job is None:
            refused += any("the pinned DeepEP configures only" in p.rule for p in problems)
            continue
        rendered += 1
        sizes = deepep_groups(job.command, nodes * P5.gpu_count)
        assert set(sizes) <= set(DEEPEP_RANK_COUNTS), (model, nodes, ep, etp, rollout, job.command)
    # the sweep reaches both outcomes: rendered jobs, and groups DeepEP cannot configure refused
    assert rendered > 50 and refused > 0
