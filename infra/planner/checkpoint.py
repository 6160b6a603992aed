"""Bytes on disk of one training checkpoint and of the reference weights: sizes the shared file
system that holds them.

A Megatron-Core checkpoint with the distributed optimizer (what Miles saves with ``--save``) holds,
for every trained parameter, the BF16 model weight plus the optimizer state: the FP32 master
weight and Adam's two FP32 moments (megatron-core user guide, "Distributed Optimizer"; the same
per-parameter figures ``infra.planner.memory`` uses for GPU memory, where they are sharded, while
on disk every shard is written once). Gradients are not saved. MTP modules are trained, so they
are saved too. The Hugging Face reference weights the run starts from are BF16.
"""

from __future__ import annotations

from infra.planner.models import MoEModel

BF16_BYTES = 2
FP32_BYTES = 4
# BF16 weight + FP32 master weight + two FP32 Adam moments; with BF16 moments
# (--use-precision-aware-optimizer) the moments take 2 x 2 bytes instead.
CHECKPOINT_BYTES_PER_PARAM = BF16_BYTES + FP32_BYTES + 2 * FP32_BYTES
CHECKPOINT_BYTES_PER_PARAM_BF16_MOMENTS = BF16_BYTES + FP32_BYTES + 2 * BF16_BYTES

GIB = 1 << 30


def trained_params(model: MoEModel) -> int:
    """Parameters the training saves: the main model plus its MTP modules."""
    return model.total_params + model.mtp_params


def checkpoint_bytes(model: MoEModel, *, optimizer_bf16_moments: bool = False) -> int:
    """Bytes of one complete checkpoint (weights + optimizer state) of ``model``."""
    per_param = (CHECKPOINT_BYTES_PER_PARAM_BF16_MOMENTS if optimizer_bf16_moments
                 else CHECKPOINT_BYTES_PER_PARAM)
    return trained_params(model) * per_param


def reference_weights_bytes(model: MoEModel) -> int:
    """Bytes of the BF16 Hugging Face weights the run starts from."""
    return model.total_params * BF16_BYTES


# A save is written while the newest complete one is kept (restore needs a whole save).
CHECKPOINTS_KEPT = 2


def shared_fs_bytes(model: MoEModel, *, optimizer_bf16_moments: bool = False) -> int:
    """Bytes the shared file system must hold for a run of ``model``: the reference weights plus
    ``CHECKPOINTS_KEPT`` checkpoints."""
    return (reference_weights_bytes(model)
            + CHECKPOINTS_KEPT * checkpoint_bytes(model,
                                                  optimizer_bf16_moments=optimizer_bf16_moments))
