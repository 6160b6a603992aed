"""Which GPUs one expert-parallel group of the run holds: the span the EP all-to-all crosses.

The fabric gate measures the EP backend where the run's all-to-all really goes, not over every
GPU of every node. Two groups matter, both read from the config:

- **training** (Megatron ``--expert-model-parallel-size``): the pinned Megatron (37f9161,
  ``megatron/core/parallel_state.py``) builds the expert groups with
  ``RankGenerator(tp=etp, ep=ep, dp=expert_dp, pp=pp, cp=1, order="tp-cp-ep-dp-pp")``; its
  ``generate_masked_orthogonal_rank_groups`` makes each EP group ``ep`` ranks ``etp`` apart inside a
  block of ``etp x ep`` consecutive ranks. Miles v0.1.0 gives training rank ``r`` the ``r``-th GPU
  of its placement group sorted by node IP and GPU id (``miles/ray/placement_group.py``
  ``sort_key``; ``miles/ray/train/actor_factory.py``: ``reordered_bundle_indices[rank]``), so rank
  ``r`` sits on node ``r // gpus_per_node``. With a DeepEP backend and expert TP > 1 the DeepEP
  all-to-all runs on the ``tp-ep`` group instead: ``etp x ep`` consecutive ranks, each routed
  expert's tokens going to all ``etp`` shards (``token_dispatcher.py:1356-1361``,
  ``MoEFlexTokenDispatcher``: ``_DeepepManager(group=self.tp_ep_group, router_topk=tp x topk,
  num_experts=tp x experts)``).
- **rollout** (SGLang ``--sglang-ep-size`` inside one engine): with ``--colocate`` the rollout
  GPUs start at the same offset 0 (``_get_placement_group_layout``), disaggregated right after
  the training GPUs (``training.rollout.nodes`` of the run's nodes); engine ``i`` holds the
  ``gpus_per_engine`` consecutive sorted GPUs from ``i x gpus_per_engine``
  (``miles/ray/rollout/server_group.py``), and its EP group is ``ep`` of them ``gpus_per_engine /
  ep`` apart (SGLang's MoE EP groups inside the engine's TP group).

A span is inside the NVLink domain when every GPU of a group is in one domain of
``InstanceType.nvlink_domain_gpus`` (8 for an HGX node, 72 for a GB200 NVL72 UltraServer);
otherwise its all-to-all crosses EFA.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.catalog.instances import InstanceType
from infra.config.model import KitConfig
from infra.trainer_contract import BenchSpan, span_groups

MEGATRON_ORDER = "tp-cp-ep-dp-pp"  # initialize_model_parallel's default order at 37f9161


@dataclass(frozen=True)
class EpSpan:
    """One EP group of the run: ``size`` ranks ``stride`` apart in blocks of size x stride."""

    name: str  # "training" | "rollout"
    size: int
    stride: int
    world: int  # GPUs the groups tile (the run's, or one pool's when rollout is disaggregated)
    gpus_per_node: int
    nvlink_domain_gpus: int
    first: int = 0  # index of the pool's first GPU in node order (a disaggregated rollout's)
    # GPUs each routed expert's tokens go to: Megatron's DeepEP group is expert-TP x EP wide and
    # hands DeepEP top-k x etp of experts x etp (every expert-TP shard of a routed expert)
    tp: int = 1

    def groups(self) -> list[list[int]]:
        """Every group, as global ranks (= the GPU's index in node order): the groups the bench
        forms for the same span (the trainer's contract defines both)."""
        return span_groups(self.world, self.size, self.stride, self.first)

    @property
    def nodes(self) -> int:
        """Nodes one group spans (the most of any group)."""
        return max(len({r // self.gpus_per_node for r in g}) for g in self.groups())

    @property
    def inside_nvlink(self) -> bool:
        return all(len({r // self.nvlink_domain_gpus for r in g}) == 1 for g in self.groups())

    @property
    def where(self) -> str:
        if self.inside_nvlink:
            return (f"inside one NVLink domain ({self.nodes} node{'s' if self.nodes > 1 else ''}, "
                    f"{self.nvlink_domain_gpus} GPUs per domain)")
        return f"across EFA ({self.nodes} nodes)"

    def bench_arg(self, total: int) -> str:
        """``rltrainer bench ep --span`` value in a world of ``total`` GPUs, written by the trainer's
        contract (``rltrainer.contract.spans``): NAME:SIZE:STRIDE, plus :FIRST:COUNT when the groups
        tile only part of it (either pool of a disaggregated run) or carry a TP, so the bench forms
        exactly :meth:`groups` (tests/infra/test_ep_spans.py checks it does)."""
        whole = self.first == 0 and self.world == total and self.tp == 1
        return BenchSpan(self.name, self.size, self.stride, self.first,
                         None if whole else self.world, self.tp).text()


def ep_spans(cfg: KitConfig, itype: InstanceType) -> list[EpSpan]:
    """The training and rollout EP groups of ``cfg`` on ``itype`` (a group of 1 has no all-to-all
    and is left out)."""
    t = cfg.training
    r = t.rollout
    world = t.nodes * itype.gpu_count
    # A disaggregated rollout pool is the GPUs after the training ones (Miles v0.1.0
    # miles/ray/placement_group.py:105): each side's groups tile its own GPUs.
    pool = (r.nodes or 0) * itype.gpu_count if r.placement == "disaggregated" else 0
    train_world = world - pool if 0 < pool < world else world
    spans = []
    p = t.parallel
    if t.expert_parallel.backend.startswith("deepep") and p.etp > 1:
        # Megatron's flex dispatcher runs DeepEP on the expert-TP x EP group, not the EP group
        # (megatron/core/transformer/moe/token_dispatcher.py:1356-1361: group=tp_ep_group,
        # router_topk and num_experts times the expert-TP size; tp_ep is RankGenerator's "tp-ep",
        # parallel_state.py:1223, moe_utils.py:1364): etp x ep consecutive ranks.
        spans.append(EpSpan("training", p.etp * p.ep, 1, train_world, itype.gpu_count,
                            itype.nvlink_domain_gpus, tp=p.etp))
    elif p.ep > 1:
        spans.append(EpSpan("training", p.ep, p.etp, train_world, itype.gpu_count,
                            itype.nvlink_domain_gpus))
    if r.ep > 1 and r.gpus_per_engine % r.ep == 0:
        first = train_world if train_world < world else 0
        spans.append(EpSpan("rollout", r.ep, r.gpus_per_engine // r.ep, world - first,
                            itype.gpu_count, itype.nvlink_domain_gpus, first))
    return [s for s in spans if s.world % (s.size * s.stride) == 0]
