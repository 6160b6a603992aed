"""Looking up a model for the planner: a catalog key or a ``--model-file`` YAML.

The model records themselves live in ``infra.catalog.models``; this module turns a user's
request into one, raising ``PlannerError`` with the fix when it cannot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infra.catalog.models import MODEL_CATALOG, MoEModel
from infra.planner.errors import PlannerError

__all__ = ["MODEL_CATALOG", "MoEModel", "get_model", "load_model_file"]


def get_model(key: str) -> MoEModel:
    """Return a catalog model or raise PlannerError naming the known keys."""
    try:
        return MODEL_CATALOG[key]
    except KeyError:
        raise PlannerError(
            f"unknown model {key!r}; known models: {', '.join(sorted(MODEL_CATALOG))} "
            "(or describe your own with --model-file)"
        ) from None


# --- custom models from YAML -----------------------------------------------------------------


# Upper bounds of a --model-file's sizes: far above any published MoE model (the catalog's
# largest: 94 layers, 128 heads, 384 routed experts, 163,840 vocabulary), and low enough that
# every search over them (divisors, engine sizes, pipeline splits) answers within a second.
MAX_LAYERS = 1024
MAX_HEADS = 1024
MAX_EXPERTS = 16384
MAX_WIDTH = 1 << 20  # hidden, FFN and head sizes, LoRA ranks
MAX_VOCAB = 1 << 24


class _ModelFile(BaseModel):
    """Schema of a ``--model-file`` YAML (field names follow MoEModel; HF names accepted)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    key: str
    name: str | None = None
    source: str = "user-supplied model file"
    num_layers: int = Field(gt=0, le=MAX_LAYERS, alias="num_hidden_layers")
    hidden: int = Field(gt=0, le=MAX_WIDTH, alias="hidden_size")
    vocab: int = Field(gt=0, le=MAX_VOCAB, alias="vocab_size")
    num_heads: int = Field(gt=0, le=MAX_HEADS, alias="num_attention_heads")
    attention: Literal["gqa", "mla"] = "gqa"
    num_kv_heads: int = Field(0, ge=0, le=MAX_HEADS, alias="num_key_value_heads")
    head_dim: int = Field(0, ge=0, le=MAX_WIDTH)
    q_lora_rank: int = Field(0, ge=0, le=MAX_WIDTH)
    kv_lora_rank: int = Field(0, ge=0, le=MAX_WIDTH)
    qk_nope_head_dim: int = Field(0, ge=0, le=MAX_WIDTH)
    qk_rope_head_dim: int = Field(0, ge=0, le=MAX_WIDTH)
    v_head_dim: int = Field(0, ge=0, le=MAX_WIDTH)
    dense_layers: int = Field(0, ge=0, alias="first_k_dense_replace")
    dense_ffn: int = Field(0, ge=0, le=MAX_WIDTH, alias="intermediate_size")
    num_experts: int = Field(gt=0, le=MAX_EXPERTS, alias="n_routed_experts")
    top_k: int = Field(gt=0, alias="num_experts_per_tok")
    expert_ffn: int = Field(gt=0, le=MAX_WIDTH, alias="moe_intermediate_size")
    num_shared_experts: int = Field(0, ge=0, le=MAX_EXPERTS, alias="n_shared_experts")
    shared_expert_ffn: int = Field(0, ge=0, le=MAX_WIDTH)
    route_groups: int = Field(1, ge=1, le=MAX_EXPERTS, alias="n_group")
    route_group_topk: int = Field(1, ge=1, le=MAX_EXPERTS, alias="topk_group")
    mtp_layers: int = Field(0, ge=0, le=MAX_LAYERS, alias="num_nextn_predict_layers")
    tie_embeddings: bool = Field(False, alias="tie_word_embeddings")

    @model_validator(mode="after")
    def _check(self) -> "_ModelFile":
        if self.attention == "gqa" and (self.num_kv_heads == 0 or self.head_dim == 0):
            raise ValueError("gqa attention needs num_kv_heads and head_dim")
        if self.attention == "mla" and not (self.kv_lora_rank and self.qk_nope_head_dim
                                            and self.v_head_dim):
            raise ValueError("mla attention needs kv_lora_rank, qk_nope_head_dim and v_head_dim")
        if self.top_k > self.num_experts:
            raise ValueError("top_k cannot exceed num_experts")
        if self.dense_layers >= self.num_layers:
            # the layers after the leading dense ones carry the experts; none left is no MoE
            raise ValueError(f"first_k_dense_replace (dense_layers) {self.dense_layers} must be "
                             f"below num_hidden_layers {self.num_layers}: the layers after the "
                             "leading dense ones are the MoE layers, and a MoE model needs one; "
                             f"use at most {self.num_layers - 1}")
        if self.dense_layers and not self.dense_ffn:
            raise ValueError("dense_layers > 0 needs dense_ffn (intermediate_size)")
        if self.num_shared_experts and not self.shared_expert_ffn:
            self.shared_expert_ffn = self.expert_ffn
        return self


def _problem(e: dict) -> str:
    """One validation problem: the field and its value, and the rule (a whole-model rule's
    sentence names its fields itself)."""
    where = ".".join(str(p) for p in e["loc"])
    msg = e["msg"].removeprefix("Value error, ")
    if not where:
        return msg
    value = e.get("input")
    shown = f" {value!r}" if isinstance(value, (int, float, str, bool)) else ""
    return f"{where}{shown}: {msg}"


def load_model_file(path: str | Path) -> MoEModel:
    """Read a custom model from YAML; raise PlannerError with every problem found."""
    path = Path(path)
    if not path.is_file():
        raise PlannerError(f"model file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise PlannerError(f"model file {str(path)!r} is not UTF-8 text (byte "
                           f"0x{err.object[err.start]:02x} at offset {err.start}): YAML model "
                           "files are read as UTF-8; save it as UTF-8") from None
    except OSError as err:
        raise PlannerError(f"model file {str(path)!r} cannot be read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise PlannerError(f"model file {str(path)!r} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise PlannerError(f"model file {str(path)!r} must be a YAML mapping")
    try:
        spec = _ModelFile.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(_problem(e) for e in err.errors())
        raise PlannerError(f"model file {str(path)!r} is invalid: {problems}; fix the file"
                           ) from None
    values = spec.model_dump(by_alias=False)
    values["name"] = values["name"] or values["key"]
    return MoEModel(**values)
