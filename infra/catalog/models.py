"""The MoE model catalog: public model configurations, the arithmetic derived from them, and
the checkpoint sizes that size the shared file system.

Config validation reads this module (the shared file system must hold a model's weights and two
checkpoints); the planner reads it to size layouts. It imports nothing from either.

Every number below is copied from the model's published Hugging Face ``config.json`` (URL next to
each entry); the comment names the config key when our field name differs. Parameter counts are
derived, not copied, and ``tests/planner/test_planner.py`` checks them against the totals the authors
publish (e.g. DeepSeek-V3: 671B total, 37B activated).

Two attention families are modelled:

- ``gqa``: grouped-query attention (Qwen3, Mixtral): q/k/v/o projections with ``num_kv_heads``
  key/value heads of ``head_dim``.
- ``mla``: DeepSeek multi-head latent attention (DeepSeek-V3, Kimi K2): low-rank query
  (``q_lora_rank``) and key/value (``kv_lora_rank``) compressions; query/key heads are
  ``qk_nope_head_dim + qk_rope_head_dim`` wide, value heads ``v_head_dim``.

All feed-forward blocks are SwiGLU (three matrices: gate, up, down).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from infra.trainer_contract import DEFAULT_KEEP_LOCAL


@dataclass(frozen=True)
class MoEModel:
    """Architecture of one MoE decoder-only model (what the resource model needs, nothing else)."""

    key: str
    name: str
    source: str  # where the numbers come from
    num_layers: int  # decoder layers, MTP modules excluded
    hidden: int
    vocab: int
    num_heads: int
    attention: Literal["gqa", "mla"]
    # GQA
    num_kv_heads: int = 0
    head_dim: int = 0
    # MLA
    q_lora_rank: int = 0  # 0: full-rank query projection
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # feed-forward
    dense_layers: int = 0  # leading dense (non-MoE) layers (DeepSeek: first_k_dense_replace)
    dense_ffn: int = 0  # intermediate size of those dense layers
    num_experts: int = 0  # routed experts per MoE layer
    top_k: int = 0  # routed experts per token
    expert_ffn: int = 0  # intermediate size of one routed expert
    num_shared_experts: int = 0
    shared_expert_ffn: int = 0  # intermediate size of one shared expert
    # routing restrictions: experts grouped into ``route_groups``; a token may use at most
    # ``route_group_topk`` groups (DeepSeek-V3 n_group / topk_group, "node-limited routing")
    route_groups: int = 1
    route_group_topk: int = 1
    mtp_layers: int = 0  # multi-token-prediction modules (DeepSeek-V3: 1)
    tie_embeddings: bool = False
    published_total_b: float | None = None  # total parameters the authors publish, billions
    published_active_b: float | None = None  # activated parameters per token, billions
    notes: tuple[str, ...] = field(default_factory=tuple)

    # --- shapes -----------------------------------------------------------------------------

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.dense_layers

    @property
    def qk_head_dim(self) -> int:
        return self.head_dim if self.attention == "gqa" else self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def v_dim(self) -> int:
        return self.head_dim if self.attention == "gqa" else self.v_head_dim

    @property
    def hf_repo(self) -> str | None:
        """The Hugging Face repository ``source`` points at ('Qwen/Qwen3-30B-A3B'), or None."""
        m = re.match(r"https://huggingface\.co/([^/\s]+/[^/\s]+)/", self.source)
        return m.group(1) if m else None

    @property
    def kv_groups(self) -> int:
        """Key/value heads that tensor parallelism must split (MLA: every head has its own)."""
        return self.num_kv_heads if self.attention == "gqa" else self.num_heads

    def attention_gemms(self) -> tuple[tuple[int, int, bool], ...]:
        """The attention block's weight matrices as (in, out, split_by_tp) per layer.

        ``split_by_tp`` is False for MLA's down-projections, which Megatron keeps replicated
        across tensor-parallel ranks (they are small; the heads live in the up-projections).
        """
        h = self.hidden
        if self.attention == "gqa":
            q = self.num_heads * self.head_dim
            kv = 2 * self.num_kv_heads * self.head_dim
            return ((h, q + kv, True), (q, h, True))
        heads_qk = self.num_heads * self.qk_head_dim
        gemms = []
        if self.q_lora_rank:
            gemms += [(h, self.q_lora_rank, False), (self.q_lora_rank, heads_qk, True)]
        else:
            gemms += [(h, heads_qk, True)]
        gemms += [
            (h, self.kv_lora_rank + self.qk_rope_head_dim, False),
            (self.kv_lora_rank, self.num_heads * (self.qk_nope_head_dim + self.v_head_dim), True),
            (self.num_heads * self.v_head_dim, h, True),
        ]
        return tuple(gemms)

    # --- parameter counts (per layer) -----------------------------------------------------------

    @cached_property
    def attention_params(self) -> int:
        return sum(i * o for i, o, _ in self.attention_gemms()) + 2 * self.hidden  # + 2 norms

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden * self.dense_ffn

    @property
    def expert_params(self) -> int:
        """One routed expert."""
        return 3 * self.hidden * self.expert_ffn

    @property
    def shared_params(self) -> int:
        """All shared experts of one MoE layer."""
        return 3 * self.hidden * self.shared_expert_ffn * self.num_shared_experts

    @property
    def router_params(self) -> int:
        return self.hidden * self.num_experts

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        return 0 if self.tie_embeddings else self.vocab * self.hidden

    @property
    def mtp_extra_params(self) -> int:
        """One MTP module beyond its transformer layer: the 2h -> h projection and two norms
        (DeepSeek-V3 report, section 2.2; embedding and output head are shared)."""
        return 2 * self.hidden * self.hidden + 2 * self.hidden

    # --- totals -------------------------------------------------------------------------------

    @cached_property
    def total_params(self) -> int:
        """Parameters of the main model (MTP modules excluded, as the authors count them)."""
        per_moe = self.attention_params + self.shared_params + self.router_params
        per_moe += self.num_experts * self.expert_params
        per_dense = self.attention_params + self.dense_mlp_params
        return (self.moe_layers * per_moe + self.dense_layers * per_dense
                + self.embedding_params + self.head_params + self.hidden)

    @cached_property
    def active_params(self) -> int:
        """Parameters one token touches (embedding row counted in full, as authors do)."""
        per_moe = (self.attention_params + self.shared_params + self.router_params
                   + self.top_k * self.expert_params)
        per_dense = self.attention_params + self.dense_mlp_params
        return (self.moe_layers * per_moe + self.dense_layers * per_dense
                + self.embedding_params + self.head_params + self.hidden)

    @cached_property
    def mtp_params(self) -> int:
        per_moe = (self.attention_params + self.shared_params + self.router_params
                   + self.num_experts * self.expert_params)
        return self.mtp_layers * (per_moe + self.mtp_extra_params)

    @cached_property
    def expert_params_total(self) -> int:
        """Routed-expert parameters (the part expert parallelism splits), MTP included."""
        return (self.moe_layers + self.mtp_layers) * self.num_experts * self.expert_params

    # --- FLOPs ---------------------------------------------------------------------------------

    def attention_core_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs of softmax(QK^T)V for one token in one layer, causal mask.

        Per head, QK^T costs 2*d_qk and AV 2*d_v multiply-adds per context token; with a causal
        mask a token sees on average seq_len/2 keys, hence heads * (d_qk + d_v) * seq_len.
        """
        return self.num_heads * (self.qk_head_dim + self.v_dim) * seq_len

    def model_flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward = 3x forward), MTP included, no recompute.

        Forward matmul FLOPs are 2 x the weights a token multiplies (embedding lookup excluded),
        plus the causal attention core (Narayanan et al. 2021, "Efficient Large-Scale Language
        Model Training on GPU Clusters", appendix; causal halving as in Megatron-Bridge's
        accounting).
        """
        per_moe = (self.attention_params + self.shared_params + self.router_params
                   + self.top_k * self.expert_params)
        per_dense = self.attention_params + self.dense_mlp_params
        matmul = self.moe_layers * per_moe + self.dense_layers * per_dense + self.vocab * self.hidden
        matmul += self.mtp_layers * (per_moe + self.mtp_extra_params + self.vocab * self.hidden)
        attn = (self.num_layers + self.mtp_layers) * self.attention_core_flops_per_token(seq_len)
        return 3.0 * (2.0 * matmul + attn)

    # --- rollout (inference) KV cache ---------------------------------------------------------

    @property
    def kv_cache_bytes_per_token(self) -> int:
        """KV-cache bytes per token for all layers in BF16 (GQA: K and V per KV head;
        MLA: the compressed latent plus the shared RoPE key, as SGLang stores it)."""
        if self.attention == "gqa":
            per_layer = 2 * self.num_kv_heads * self.head_dim
        else:
            per_layer = self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * per_layer * self.num_layers


_HF = "https://huggingface.co/{}/blob/main/config.json"

MODEL_CATALOG: dict[str, MoEModel] = {
    # Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, num_hidden_layers 48,
    # num_attention_heads 32, num_key_value_heads 4, head_dim 128, num_experts 128,
    # num_experts_per_tok 8, moe_intermediate_size 768, vocab_size 151936,
    # tie_word_embeddings false, decoder_sparse_step 1 and mlp_only_layers [] (every layer MoE).
    # Qwen3 tech report (arXiv 2505.09388), table 2: 30.5B total, 3.3B activated.
    "qwen3-30b-a3b": MoEModel(
        key="qwen3-30b-a3b", name="Qwen3-30B-A3B", source=_HF.format("Qwen/Qwen3-30B-A3B"),
        num_layers=48, hidden=2048, vocab=151936, num_heads=32, attention="gqa",
        num_kv_heads=4, head_dim=128, num_experts=128, top_k=8, expert_ffn=768,
        published_total_b=30.5, published_active_b=3.3,
    ),
    # Qwen/Qwen3-235B-A22B config.json: hidden_size 4096, num_hidden_layers 94,
    # num_attention_heads 64, num_key_value_heads 4, head_dim 128, num_experts 128,
    # num_experts_per_tok 8, moe_intermediate_size 1536, vocab_size 151936, untied.
    # Qwen3 tech report table 2: 235B total, 22B activated.
    "qwen3-235b-a22b": MoEModel(
        key="qwen3-235b-a22b", name="Qwen3-235B-A22B", source=_HF.format("Qwen/Qwen3-235B-A22B"),
        num_layers=94, hidden=4096, vocab=151936, num_heads=64, attention="gqa",
        num_kv_heads=4, head_dim=128, num_experts=128, top_k=8, expert_ffn=1536,
        published_total_b=235, published_active_b=22,
    ),
    # deepseek-ai/DeepSeek-V3 config.json: hidden_size 7168, num_hidden_layers 61,
    # first_k_dense_replace 3, intermediate_size 18432, moe_intermediate_size 2048,
    # n_routed_experts 256, n_shared_experts 1, num_experts_per_tok 8, n_group 8, topk_group 4,
    # num_attention_heads 128, q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128,
    # qk_rope_head_dim 64, v_head_dim 128, vocab_size 129280, num_nextn_predict_layers 1.
    # DeepSeek-V3 technical report (arXiv 2412.19437): 671B total, 37B activated, MTP +14B.
    "deepseek-v3": MoEModel(
        key="deepseek-v3", name="DeepSeek-V3", source=_HF.format("deepseek-ai/DeepSeek-V3"),
        num_layers=61, hidden=7168, vocab=129280, num_heads=128, attention="mla",
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, dense_layers=3, dense_ffn=18432, num_experts=256, top_k=8,
        expert_ffn=2048, num_shared_experts=1, shared_expert_ffn=2048,
        route_groups=8, route_group_topk=4, mtp_layers=1,
        published_total_b=671, published_active_b=37,
    ),
    # mistralai/Mixtral-8x7B-v0.1 config.json: hidden_size 4096, num_hidden_layers 32,
    # num_attention_heads 32, num_key_value_heads 8, intermediate_size 14336,
    # num_local_experts 8, num_experts_per_tok 2, vocab_size 32000, untied.
    # Mixtral paper (arXiv 2401.04088): 47B total, 13B active.
    "mixtral-8x7b": MoEModel(
        key="mixtral-8x7b", name="Mixtral 8x7B", source=_HF.format("mistralai/Mixtral-8x7B-v0.1"),
        num_layers=32, hidden=4096, vocab=32000, num_heads=32, attention="gqa",
        num_kv_heads=8, head_dim=128, num_experts=8, top_k=2, expert_ffn=14336,
        published_total_b=46.7, published_active_b=12.9,
    ),
    # mistral-community/Mixtral-8x22B-v0.1 config.json: hidden_size 6144, num_hidden_layers 56,
    # num_attention_heads 48, num_key_value_heads 8, intermediate_size 16384,
    # num_local_experts 8, num_experts_per_tok 2, vocab_size 32000, untied.
    # Mistral's announcement: 141B total, 39B active.
    "mixtral-8x22b": MoEModel(
        key="mixtral-8x22b", name="Mixtral 8x22B",
        source=_HF.format("mistral-community/Mixtral-8x22B-v0.1"),
        num_layers=56, hidden=6144, vocab=32000, num_heads=48, attention="gqa",
        num_kv_heads=8, head_dim=128, num_experts=8, top_k=2, expert_ffn=16384,
        published_total_b=141, published_active_b=39,
    ),
    # moonshotai/Kimi-K2-Instruct config.json: DeepSeek-V3 architecture with hidden_size 7168,
    # num_hidden_layers 61, first_k_dense_replace 1, intermediate_size 18432,
    # moe_intermediate_size 2048, n_routed_experts 384, n_shared_experts 1,
    # num_experts_per_tok 8, n_group 1, topk_group 1, num_attention_heads 64, q_lora_rank 1536,
    # kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
    # vocab_size 163840, num_nextn_predict_layers 0.
    # Kimi K2 tech report (arXiv 2507.20534): 1.04T total, 32.6B activated.
    "kimi-k2": MoEModel(
        key="kimi-k2", name="Kimi K2", source=_HF.format("moonshotai/Kimi-K2-Instruct"),
        num_layers=61, hidden=7168, vocab=163840, num_heads=64, attention="mla",
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, dense_layers=1, dense_ffn=18432, num_experts=384, top_k=8,
        expert_ffn=2048, num_shared_experts=1, shared_expert_ffn=2048,
        published_total_b=1040, published_active_b=32.6,
    ),
}


# --- checkpoint sizes --------------------------------------------------------------------------
# Bytes on disk of one training checkpoint and of the reference weights: they size the shared
# file system. A Megatron-Core checkpoint with the distributed optimizer (what Miles saves with
# ``--save``) holds, for every trained parameter, the BF16 model weight plus the optimizer state:
# the FP32 master weight and Adam's two FP32 moments (megatron-core user guide, "Distributed
# Optimizer"; the same per-parameter figures ``infra.planner.memory`` uses for GPU memory, where
# they are sharded, while on disk every shard is written once). Gradients are not saved. MTP
# modules are trained, so they are saved too. The Hugging Face reference weights are BF16.

BF16_BYTES = 2
FP32_BYTES = 4
# BF16 weight + FP32 master weight + two FP32 Adam moments. The moments are FP32 in every run the
# kit's launcher makes (it never passes --exp-avg-dtype, default fp32: megatron-lm 37f9161
# megatron/training/arguments.py:2960), so the file system is sized for them even when a plan
# assumed BF16 moments (`rlkit plan --bf16-moments`, which --write-config refuses).
CHECKPOINT_BYTES_PER_PARAM = BF16_BYTES + FP32_BYTES + 2 * FP32_BYTES

GIB = 1 << 30


def trained_params(model: MoEModel) -> int:
    """Parameters the training saves: the main model plus its MTP modules."""
    return model.total_params + model.mtp_params


def checkpoint_bytes(model: MoEModel) -> int:
    """Bytes of one complete checkpoint (weights + optimizer state) of ``model``."""
    return trained_params(model) * CHECKPOINT_BYTES_PER_PARAM


def reference_weights_bytes(model: MoEModel) -> int:
    """Bytes of the BF16 Hugging Face weights the run starts from."""
    return model.total_params * BF16_BYTES


# Saves on the file system at once: the launcher keeps the newest ``keep_local`` finished saves
# (training.checkpoint.keep_local; it deletes older ones once S3 holds them complete) while
# Megatron writes the next one beside them. The trainer's default keeps one: two saves on disk.
CHECKPOINTS_KEPT = DEFAULT_KEEP_LOCAL + 1


def saves_on_disk(keep_local: int = DEFAULT_KEEP_LOCAL) -> int:
    """Saves the shared file system holds at once with ``keep_local`` kept: those plus the one being written."""
    return keep_local + 1


def shared_fs_bytes(model: MoEModel, *, keep_local: int = DEFAULT_KEEP_LOCAL) -> int:
    """Bytes the shared file system must hold for a run of ``model``: the reference weights plus
    ``saves_on_disk(keep_local)`` checkpoints."""
    return reference_weights_bytes(model) + saves_on_disk(keep_local) * checkpoint_bytes(model)
