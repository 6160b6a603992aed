"""MoE layer shapes the expert-parallel benchmark needs, per model key of the kit.

The dispatch/combine benchmark moves tokens of ``hidden`` width to ``topk`` of ``experts``
experts, so it measures what the model's MoE layers will move. Values are the fields of each
model's Hugging Face ``config.json``:

- qwen3-30b-a3b (Qwen/Qwen3-30B-A3B): hidden_size 2048, num_experts 128, num_experts_per_tok 8.
- qwen3-235b-a22b (Qwen/Qwen3-235B-A22B): hidden_size 4096, num_experts 128,
  num_experts_per_tok 8.
- deepseek-v3 (deepseek-ai/DeepSeek-V3): hidden_size 7168, n_routed_experts 256,
  num_experts_per_tok 8 (the shape DeepEP's own README benchmarks with).

The planner (infra/planner/) is expected to own the model catalog later; this table then becomes
a read of it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoeShape:
    hf_repo: str
    hidden: int
    experts: int
    topk: int


MODEL_SHAPES: dict[str, MoeShape] = {
    "qwen3-30b-a3b": MoeShape(hf_repo="Qwen/Qwen3-30B-A3B", hidden=2048, experts=128, topk=8),
    "qwen3-235b-a22b": MoeShape(hf_repo="Qwen/Qwen3-235B-A22B", hidden=4096, experts=128, topk=8),
    "deepseek-v3": MoeShape(hf_repo="deepseek-ai/DeepSeek-V3", hidden=7168, experts=256, topk=8),
}
