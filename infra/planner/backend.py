"""Which expert-parallel all-to-all backend to use: a rule taken from published EFA results.

Measurements this rule follows (design.md "DeepEP over EFA"; awslabs/awsome-distributed-ai
micro-benchmarks/expert-parallelism and the megatron-bridge README):

- On 2-8 nodes over EFA plain NCCL all-to-all matches or beats DeepEP end to end
  (Qwen3-30B-A3B on 8x p5.48xlarge, EP32: DeepEP +86% step time).
- At 16-32+ nodes DeepEP wins (DeepSeek-V3-shaped model on 32x p6-b300, EP32: DeepEP-style
  dispatch ~36% faster than NCCL all-to-all at micro-batch >= 4).
- DeepEP V2 over NCCL GIN has its GPU-initiated path only on p5en and the p6 family; on p5/p5e
  the route is DeepEP V1 over NVSHMEM/libfabric (host proxy).

Between 9 and 15 nodes nothing was measured; the rule keeps NCCL there and says so. The time
model does not reproduce DeepEP's small-scale slowdown on EFA (it models DeepEP by its byte
savings only), which is why the recommendation is a rule and not an argmin of predicted time.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.planner.errors import PlannerError
from infra.catalog.instances import supports_gin_gpu
from infra.trainer_contract import EP_BACKENDS

DEEPEP_MIN_NODES = 16  # DeepEP measured ahead from here
# DeepEP at the pinned commit addresses at most 8 NVLink peers in normal mode
# (deepseek-ai/DeepEP@567632d csrc/kernels/configs.cuh:3, NUM_MAX_NVL_PEERS 8;
# ../shared/upstream/ultraservers.md section 6): an NVLink domain beyond 8 GPUs (NVL72) cannot
# run it; NCCL all-to-all over multi-node NVLink can.
DEEPEP_MAX_NVL_PEERS = 8
NCCL_MAX_MEASURED_NODES = 8  # NCCL measured at least as fast up to here


def flex_dispatcher_problem(backend: str, etp: int, ep: int) -> str | None:
    """DeepEP runs under Megatron's flex token dispatcher, which asserts expert-TP x EP > 1
    (megatron-lm 37f9161 megatron/core/transformer/moe/token_dispatcher.py:1354; its tp is the
    expert tensor-parallel group, line 75); the kit's trainer refuses such a config too."""
    if not backend.startswith("deepep") or etp * ep > 1:
        return None
    return (f"expert-parallel backend {backend} runs Megatron's flex token dispatcher, which needs "
            f"expert-TP x EP > 1 (megatron-lm 37f9161 megatron/core/transformer/moe/"
            f"token_dispatcher.py:1354), but etp {etp} x ep {ep} = {etp * ep}")


@dataclass(frozen=True)
class BackendChoice:
    backend: str
    recommended: str
    reason: str
    warning: str | None = None


def recommend_backend(instance_type: str, nodes: int, ep_span_nodes: int,
                      override: str | None = None, nvlink_gpus: int = 8,
                      domain: str = "") -> BackendChoice:
    """Recommend (and, with ``override``, check) the expert-parallel backend for a job.
    ``ep_span_nodes`` counts NVLink reaches (nodes, or NVLink domains of ``nvlink_gpus``);
    ``domain`` names that domain for messages (``System.describe_domain``)."""
    if nvlink_gpus > DEEPEP_MAX_NVL_PEERS:
        named_domain = f" ({domain})" if domain else ""
        if override is not None and override.startswith("deepep"):
            raise PlannerError(
                f"expert-parallel backend {override!r} cannot run on {instance_type}: its NVLink "
                f"domain{named_domain} holds {nvlink_gpus} GPUs and the pinned DeepEP (567632d) "
                f"addresses at most {DEEPEP_MAX_NVL_PEERS} NVLink peers (NUM_MAX_NVL_PEERS); use "
                "nccl (all-to-all over multi-node NVLink)")
        return BackendChoice("nccl", "nccl", (
            f"NCCL all-to-all over multi-node NVLink: the pinned DeepEP addresses at most "
            f"{DEEPEP_MAX_NVL_PEERS} NVLink peers, and this NVLink domain{named_domain} holds "
            f"{nvlink_gpus}"
            + ("" if ep_span_nodes <= 1 else
               f"; expert groups span {ep_span_nodes} domains, the rest over EFA")))
    if ep_span_nodes <= 1:
        rec, why = "nccl", ("expert groups stay inside one node, so the all-to-all runs on NVLink "
                            "and DeepEP's inter-node savings do not apply")
    elif nodes >= DEEPEP_MIN_NODES:
        # DeepEP V1 over NVSHMEM on every type: V2 over NCCL GIN (deepep-gin) cannot train yet
        # (infra.config training_ep_backend_problems); the fabric gate may still benchmark it.
        rec = "deepep-nvshmem"
        route = "DeepEP V1 over NVSHMEM/libfabric (V2 over GIN cannot train yet)"
        why = (f"{nodes} nodes: published EFA runs show DeepEP ahead of NCCL all-to-all from "
               f"{DEEPEP_MIN_NODES}-32 nodes; {route}")
    elif nodes <= NCCL_MAX_MEASURED_NODES:
        rec, why = "nccl", (f"{nodes} nodes: on 2-8 EFA nodes NCCL all-to-all matches or beats "
                            "DeepEP (Qwen3-30B-A3B, 8x p5, EP32: DeepEP +86% step time)")
    else:
        rec, why = "nccl", (f"{nodes} nodes: between 8 and {DEEPEP_MIN_NODES} nodes neither "
                            "backend has a published EFA measurement; NCCL is the safe default "
                            "until the fabric gate measures both")
    if override is None or override == rec:
        return BackendChoice(rec, rec, why)
    if override not in EP_BACKENDS:
        raise PlannerError(f"unknown expert-parallel backend {override!r}; "
                           f"use one of {', '.join(EP_BACKENDS)}")
    warning = f"backend {override} overrides the recommended {rec} ({why})"
    if override.startswith("deepep") and ep_span_nodes > 1 and nodes <= NCCL_MAX_MEASURED_NODES:
        warning += ("; the time model does not include DeepEP's measured small-scale slowdown on "
                    "EFA, so this step time is optimistic")
    if override == "deepep-gin" and not supports_gin_gpu(instance_type):
        warning += f"; on {instance_type} deepep-gin runs its CPU-proxy path (gin_mode: proxy)"
    return BackendChoice(override, rec, why, warning)
