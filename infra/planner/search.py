"""Layout search and the public ``plan()`` entry point.

For each candidate node count the search enumerates tp, cp, pp, vpp, ep, etp and the micro-batch
size, drops layouts that break a divisibility rule (``layout_problem``), drops those whose
weights and optimizer alone exceed GPU memory, then picks the lightest recompute setting that
fits (none, then selective, then full) and predicts the step time. Survivors are ranked by cost
per trained token (equivalently tokens/s per GPU for one instance type) or by total throughput;
every rejected layout keeps the sentence that explains why.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Iterable

from infra.planner.backend import BackendChoice, flex_dispatcher_problem, recommend_backend
from infra.planner.errors import PlannerError, field as named
from infra.planner.hardware import PRICE_DATE, System, get_system
from infra.planner.layout import (
    INTERLEAVING_RULE, Layout, Recompute, TrainingSetup, layout_problem, pipeline_split_problem,
    uneven_split_note,
)
from infra.planner.memory import (
    ENGINE_SIZES, MemoryBreakdown, estimate_memory, rollout_engine_gpus, static_memory_gib,
)
from infra.planner.models import MoEModel, get_model
from infra.planner.request import Objective, Pins, PlanRequest
from infra.planner.timing import StepTime, ep_span, step_time

RECOMPUTE_ORDER: tuple[Recompute, ...] = ("none", "selective", "full")
DEFAULT_MAX_NODES = 32
_TP = (1, 2, 4, 8)
_VPP = (1, 2, 3, 4, 6, 8)


@dataclass(frozen=True)
class Cost:
    price_per_node_hour: float | None
    dollars_per_hour: float | None
    dollars_per_million_tokens: float | None
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Candidate:
    """One layout that fits, with its predicted memory, time, backend and cost."""

    nodes: int
    layout: Layout
    memory: MemoryBreakdown
    time: StepTime
    backend: BackendChoice
    cost: Cost

    @property
    def gpus(self) -> int:
        return self.layout.world

    def to_dict(self) -> dict:
        return {
            "nodes": self.nodes, "gpus": self.gpus, "layout": self.layout.to_dict(),
            "label": self.layout.label(), "memory_gib": self.memory.to_dict(),
            "time": self.time.to_dict(), "ep_backend": asdict(self.backend),
            "cost": self.cost.to_dict(),
        }


@dataclass(frozen=True)
class Rejection:
    nodes: int
    layout: Layout
    reason: str
    needed_gib: float | None = None  # memory it would need, when memory is the reason
    # True when needed_gib is weights, gradients and optimizer only (a lower bound: activations
    # were never estimated), False when it is the whole estimate
    static_only: bool = False
    # the whole estimate (full recompute, or the pinned one) when known: every memory rejection
    # estimated in full, and the lowest weights-only ones (``_with_whole_estimates``)
    whole_gib: float | None = None

    def to_dict(self) -> dict:
        return {"nodes": self.nodes, "label": self.layout.label(), "layout": self.layout.to_dict(),
                "reason": self.reason, "needed_gib": self.needed_gib,
                "weights_only": self.static_only, "whole_estimate_gib": self.whole_gib}


@dataclass(frozen=True)
class PlanResult:
    model: MoEModel
    system: System
    setup: TrainingSetup
    objective: Objective
    candidates: tuple[Candidate, ...]  # ranked, best first (top K)
    rejected: tuple[Rejection, ...]  # every rejected layout
    evaluated: int
    search_seconds: float
    node_counts: tuple[int, ...]
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    def closest_rejections(self, n: int = 5) -> list[Rejection]:
        """Memory rejections nearest to fitting, then the others (for display). Whole estimates
        are ranked among themselves: a weights-only figure is a lower bound (activations never
        estimated), so those without a whole estimate come after them, by their bound."""
        whole = sorted((r for r in self.rejected if r.whole_gib is not None),
                       key=lambda r: r.whole_gib)
        bound = sorted((r for r in self.rejected if r.needed_gib is not None
                        and r.whole_gib is None), key=lambda r: r.needed_gib)
        other = [r for r in self.rejected if r.needed_gib is None]
        mem = whole + bound
        seen, out = set(), []
        for r in mem + other:
            if r.reason in seen:
                continue
            seen.add(r.reason)
            out.append(r)
            if len(out) == n:
                break
        return out

    def to_dict(self) -> dict:
        return {
            "model": self.model.key, "instance_type": self.system.name,
            "setup": asdict(self.setup), "objective": self.objective,
            "node_counts_searched": list(self.node_counts), "evaluated_layouts": self.evaluated,
            "search_seconds": round(self.search_seconds, 4),
            "candidates": [c.to_dict() for c in self.candidates],
            "rejected_count": len(self.rejected),
            "rejected_examples": [r.to_dict() for r in self.closest_rejections(10)],
            "warnings": list(self.warnings), "price_date": PRICE_DATE,
        }


def _divisors(n: int) -> list[int]:
    """Divisors of ``n``, ascending, in O(sqrt n) (expert counts come from user model files)."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _enumerate(model: MoEModel, system: System, nodes: int, setup: TrainingSetup,
               pins: Pins, even_pipeline: bool = False,
               interleaving: bool = False) -> Iterable[Layout]:
    gpus = nodes * system.gpus_per_node
    tps = [pins.tp] if pins.tp else [t for t in _TP if t <= system.nvlink_gpus]
    # context parallelism only for long sequences (>= 4096 tokens per CP rank); cp=1 always
    cps = [pins.cp] if pins.cp else [1] + [c for c in (2, 4, 8) if setup.seq_len // c >= 4096]
    # dynamic batching packs micro-batches up to the token cap whatever mbs is: one layout
    capped = bool(setup.max_tokens_per_gpu)
    mbss = [pins.mbs] if pins.mbs else (
        [1] if capped else [1, 2, 4] if setup.seq_len <= 2048 else [1, 2])
    ep_all = _divisors(model.num_experts)
    for tp in tps:
        for cp in cps:
            if gpus % (tp * cp):
                continue
            rest = gpus // (tp * cp)
            pps = [pins.pp] if pins.pp else [
                p for p in _divisors(rest) if p <= model.num_layers
                and not (even_pipeline and pipeline_split_problem(model, p))]
            for pp in pps:
                if rest % pp:
                    continue
                dp = rest // pp
                stage = tp * cp * dp
                etps = [pins.etp] if pins.etp else sorted({1, tp})
                vpps = [pins.vpp] if pins.vpp else (
                    [1] if pp == 1 or not interleaving
                    else [v for v in _VPP if pp * v <= model.num_layers])
                for etp in etps:
                    eps = [pins.ep] if pins.ep else [e for e in ep_all if stage % (e * etp) == 0]
                    for ep in eps:
                        for vpp in vpps:
                            for mbs in mbss:
                                yield Layout(tp=tp, pp=pp, ep=ep, dp=dp, cp=cp, etp=etp,
                                             vpp=vpp, mbs=mbs, token_capped=capped)


def check_pins(m: MoEModel, system: System, pins: Pins, counts: tuple[int, ...],
                setup: TrainingSetup, even_pipeline: bool = False,
                interleaving: bool = False, ep_backend: str | None = None) -> None:
    """Fail fast, with the rule broken, when the caller pinned sizes that cannot divide (the
    GPU count too when ``counts`` is one node count) or that the pinned backend cannot run."""
    fixed = pins.fixed()
    if not fixed:
        return
    if pins.mbs and setup.max_tokens_per_gpu:
        raise PlannerError(
            f"{named('mbs')} {pins.mbs}: the kit's launcher runs Miles' dynamic batching, which "
            f"packs each micro-batch up to {named('max_tokens_per_gpu')} "
            f"({setup.max_tokens_per_gpu}) tokens per GPU and ignores the micro-batch size "
            "(radixark/miles@78527b9102b3 miles/backends/training_utils/data.py:490-498); drop "
            f"{named('mbs')}, and size micro-batches with {named('max_tokens_per_gpu')}")
    # etp is searched over {1, tp}: pinned ep 1 with etp (or tp) 1 leaves DeepEP nothing to run
    etp_max = pins.etp or pins.tp
    if ep_backend and pins.ep == 1 and etp_max == 1:
        problem = flex_dispatcher_problem(ep_backend, 1, 1)
        if problem:
            raise PlannerError(f"requested layout: {problem}; raise {named('ep')} (or "
                               f"{named('etp')}), or use {named('ep_backend')} nccl")
    split = pipeline_split_problem(m, pins.pp) if even_pipeline and pins.pp else None
    if split:
        raise PlannerError(f"requested layout does not divide: {split}")
    if pins.vpp and pins.vpp > 1 and not interleaving:
        raise PlannerError(f"requested layout: {named('vpp')} {pins.vpp}: {INTERLEAVING_RULE}; "
                           f"drop {named('vpp')}")
    # Check the pinned sizes alone (dp = 1; whatever fails here fails for every dp, except the
    # expert-group-vs-stage rule, which depends on dp and is left to the search).
    probe = Layout(**fixed)
    problem = layout_problem(m, probe, setup, system.nvlink_gpus)
    if problem and "pipeline stage" not in problem:
        raise PlannerError(f"requested layout does not divide: {problem}")
    model_parallel = (pins.tp or 1) * (pins.cp or 1) * (pins.pp or 1)
    if len(counts) == 1:
        gpus = counts[0] * system.gpus_per_node
        if gpus % model_parallel:
            raise PlannerError(
                f"requested layout does not divide: tp x cp x pp = {model_parallel} does not "
                f"divide the {gpus} GPUs of {counts[0]} x {system.name}")


def check_precision(system: System, precision: str) -> None:
    """MXFP8 needs Blackwell's microscaling tensor cores; say so instead of predicting BF16."""
    if precision == "mxfp8" and not system.efficiency.supports_mxfp8:
        raise PlannerError(
            f"precision='mxfp8' needs Blackwell tensor cores (B200/B300); {system.name} has "
            f"{system.gpu.name}, which supports bf16, fp8; use {named('precision')} fp8 or a p6 "
            "type")


def _cost(system: System, nodes: int, t: StepTime, price_override: float | None) -> Cost:
    price = price_override if price_override is not None else system.price_per_hour
    source = "--price-per-hour" if price_override is not None else system.price_source
    if price is None:
        return Cost(None, None, None, f"no public on-demand price for {system.name}; "
                                      "pass --price-per-hour")
    per_hour = price * nodes
    tokens_per_hour = t.tokens_per_s_per_gpu * nodes * system.gpus_per_node * 3600
    return Cost(price, per_hour, per_hour / tokens_per_hour * 1e6, source)


def _node_counts(nodes: int | None, max_nodes: int | None,
                 cap: int | None = None) -> tuple[int, ...]:
    if nodes is not None:
        return (nodes,)
    top = max_nodes or DEFAULT_MAX_NODES
    return tuple(range(1, min(top, cap or top) + 1))


def check_domain(system: System, nodes: int | None, max_nodes: int | None,
                 default_max: int) -> str | None:
    """Refuse a fixed node count beyond one NVLink domain (``System.max_run_nodes``); return
    the warning to print when the search range is cut to it (None when it is not)."""
    if nodes is not None:
        problem = system.domain_cap_problem(nodes)
        if problem:
            raise PlannerError(f"{named('nodes')} {nodes}: {problem}; plan "
                               f"{system.max_run_nodes} nodes or fewer")
        return None
    top = max_nodes or default_max
    problem = system.domain_cap_problem(top)
    return (f"searched up to {system.max_run_nodes} nodes, not {top}: {problem}"
            if problem else None)


def check_node_counts(nodes: int | None, max_nodes: int | None) -> None:
    """Refuse node counts below 1 and a node count beyond the ``max_nodes`` quota."""
    if nodes is not None and nodes < 1:
        raise PlannerError(f"{named('nodes')} must be at least 1, got {nodes}")
    if max_nodes is not None and max_nodes < 1:
        raise PlannerError(f"{named('max_nodes')} must be at least 1, got {max_nodes}")
    if nodes is not None and max_nodes is not None and nodes > max_nodes:
        raise PlannerError(f"{named('nodes')} {nodes} exceeds the quota given by "
                           f"{named('max_nodes')} ({max_nodes})")


def plan(request: PlanRequest) -> PlanResult:
    """Size the cluster and pick the parallel layout for ``request.model`` on
    ``request.instance_type`` (see :class:`PlanRequest`).

    Raises :class:`PlannerError` with a sentence meant for the user, naming the request's fields,
    when the request cannot be planned.
    """
    started = time.perf_counter()
    r = request
    m = get_model(r.model) if isinstance(r.model, str) else r.model
    system = get_system(r.instance_type, allow_reference=r.allow_reference_systems,
                        ultraserver_type=r.ultraserver_type)
    check_node_counts(r.nodes, r.max_nodes)
    capped = check_domain(system, r.nodes, r.max_nodes, DEFAULT_MAX_NODES)
    setup = r.setup
    check_precision(system, setup.precision)
    pins = r.pins
    counts = _node_counts(r.nodes, r.max_nodes, system.max_run_nodes)
    objective, ep_backend, memory_headroom_gib = r.objective, r.ep_backend, r.memory_headroom_gib

    candidates: list[Candidate] = []
    rejected: list[Rejection] = []
    evaluated = 0
    warnings: list[str] = [capped] if capped else []
    engine_blocked: list[int] = []  # node counts where layouts fit but no colocated engine does
    if objective not in ("cost", "throughput"):
        raise PlannerError(f"objective must be cost or throughput, got {objective!r}")
    check_pins(m, system, pins, counts, setup, r.even_pipeline, r.interleaving, ep_backend)

    for n in counts:
        no_engine = _no_engine(m, system, setup, n * system.gpus_per_node)
        for L in _enumerate(m, system, n, setup, pins, r.even_pipeline, r.interleaving):
            evaluated += 1
            problem = layout_problem(m, L, setup, system.nvlink_gpus)
            if problem:
                rejected.append(Rejection(n, L, problem))
                continue
            _, span = ep_span(L, system.nvlink_gpus)
            choice = recommend_backend(system.name, n, span, ep_backend, system.nvlink_gpus,
                                       system.describe_domain())
            problem = flex_dispatcher_problem(choice.backend, L.etp, L.ep)
            if problem:
                rejected.append(Rejection(n, L, problem))
                continue
            static = static_memory_gib(m, L, setup)
            if static + memory_headroom_gib > system.gpu_memory_gib:
                rejected.append(Rejection(
                    n, L, f"weights, gradients and optimizer alone need {static:.0f} GiB per GPU, "
                          f"{system.name} has {system.gpu_memory_gib:.1f} usable"
                          + _headroom_clause(memory_headroom_gib), static, static_only=True))
                continue
            fitted = None
            tries = [pins.recompute] if pins.recompute else list(RECOMPUTE_ORDER)
            for rc in tries:
                mem = estimate_memory(m, system, replace(L, recompute=rc), setup, choice.backend)
                if mem.peak + memory_headroom_gib <= mem.capacity:
                    fitted = (replace(L, recompute=rc), mem)
                    break
            if fitted is None:
                if mem.rollout_peak > mem.training_peak:
                    why = (f"the colocated rollout phase needs {mem.rollout_peak:.0f} GiB per GPU "
                           f"(engine weights {mem.rollout_weights:.0f} + KV cache "
                           f"{mem.rollout_kv_cache:.0f}), {system.name} has "
                           f"{system.gpu_memory_gib:.1f} usable")
                else:
                    why = (f"needs {mem.peak:.0f} GiB per GPU even with {tries[-1]} recompute, "
                           f"{system.name} has {system.gpu_memory_gib:.1f} usable")
                why += _headroom_clause(memory_headroom_gib)
                rejected.append(Rejection(n, replace(L, recompute=tries[-1]), why, mem.peak,
                                          whole_gib=mem.peak))
                continue
            Lf, mem = fitted
            if no_engine:  # it fits, but no rollout engine could share its GPUs
                rejected.append(Rejection(n, Lf, no_engine))
                engine_blocked.append(n)
                continue
            t = step_time(m, system, Lf, setup, choice.backend)
            candidates.append(Candidate(n, Lf, mem, t, choice,
                                        _cost(system, n, t, r.price_per_hour)))

    rejected = _with_whole_estimates(m, system, setup, rejected, ep_backend,
                                     pins.recompute or "full")
    if not candidates:
        where = f"{counts[0]} node(s)" if len(counts) == 1 else f"1 to {counts[-1]} nodes"
        also = f" ({capped})" if capped else ""
        if engine_blocked:  # layouts fit, but without an engine beside them
            n = engine_blocked[-1]
            why = _no_engine(m, system, setup, n * system.gpus_per_node)
            raise PlannerError(f"no valid layout for {m.key} on {where} of {system.name}: "
                               f"training fits on {n} node(s), but {why}; plan a node count "
                               f"whose GPUs such an engine tiles{also}")
        closest = _closest(m, system, setup, rejected, ep_backend)
        if closest is not None:
            rej, mem = closest
            raise PlannerError(
                f"{m.key} does not fit on {where} of {system.name}: the closest layout "
                f"({rej.layout.label()}, {rej.nodes} node(s)) "
                f"{_too_big(mem, system, setup, memory_headroom_gib, rej.layout.recompute)}{also}")
        reason = rejected[0].reason if rejected else "no layout could be formed"
        raise PlannerError(f"no valid layout for {m.key} on {where} of {system.name}: "
                           f"{reason}{also}")

    if objective == "throughput":
        candidates.sort(key=lambda c: (-c.time.tokens_per_s_per_gpu * c.gpus, c.nodes))
    else:  # cost: one instance type, so $ per token ranks like tokens/s per GPU
        candidates.sort(key=lambda c: (-c.time.tokens_per_s_per_gpu, c.nodes))
    best = candidates[0]
    if best.backend.warning:
        warnings.append(best.backend.warning)
    chunks = best.layout.pp * best.layout.vpp
    if best.layout.vpp == 1 and uneven_split_note(m, best.layout.pp):
        warnings.append(uneven_split_note(m, best.layout.pp))
    elif best.layout.pp > 1 and m.num_layers % chunks:
        warnings.append(
            f"{m.num_layers} layers do not split evenly over pp x vpp = {chunks} chunks: Megatron "
            f"needs --pipeline-model-parallel-layout (or --decoder-first/last-pipeline-num-layers); "
            f"the step time includes the imbalance")
    if best.cost.dollars_per_hour is None:
        warnings.append(best.cost.source)
    if setup.colocate_rollout and setup.rollout_offload:
        warnings.append("colocated rollout assumes the engine's weights and KV cache are released "
                        "while training (Miles/slime offload); pass --no-rollout-offload "
                        "(rollout_offload=False from Python) if not")
    return PlanResult(
        model=m, system=system, setup=setup, objective=objective,
        candidates=tuple(candidates[:max(1, r.top)]), rejected=tuple(rejected),
        evaluated=evaluated, search_seconds=time.perf_counter() - started,
        node_counts=counts, warnings=tuple(warnings),
    )


def _no_engine(m: MoEModel, system: System, setup: TrainingSetup, gpus: int) -> str | None:
    """Why no colocated rollout engine can run beside training on ``gpus`` GPUs (the engine
    rule, ``memory.rollout_engine_gpus``), or None (also when no engine is colocated)."""
    if not setup.colocate_rollout or rollout_engine_gpus(m, system, setup, gpus):
        return None
    return (f"no colocated SGLang engine of {', '.join(map(str, ENGINE_SIZES))} GPUs divides the "
            f"{gpus} GPUs, splits the {m.num_heads} attention heads and keeps {m.key}'s BF16 "
            f"weights within 90% of its {setup.rollout_mem_fraction:g} memory share")


_RECHECKED = 16  # weights-only rejections estimated in full after the search (the lowest first)


def _headroom_clause(headroom_gib: float, error: bool = False) -> str:
    """The headroom a memory verdict subtracts (in an error, naming the field that sets it)."""
    if not headroom_gib:
        return ""
    return (f" less the {headroom_gib:g} GiB {named('memory_headroom_gib')} keeps free" if error
            else f" less {headroom_gib:g} GiB of headroom")


def _with_whole_estimates(m: MoEModel, system: System, setup: TrainingSetup,
                          rejected: list[Rejection], ep_backend: str | None,
                          recompute: Recompute) -> list[Rejection]:
    """``rejected`` with the lowest weights-only rejections estimated in full (with
    ``recompute``), so that they can be ranked with the layouts estimated in full: their figure
    is a lower bound (activations never estimated)."""
    static = sorted((i for i, r in enumerate(rejected) if r.static_only),
                    key=lambda i: rejected[i].needed_gib)[:_RECHECKED]
    out = list(rejected)
    for i in static:
        r = out[i]
        L = replace(r.layout, recompute=recompute)
        out[i] = replace(r, layout=L,
                         whole_gib=_full_memory(m, system, r.nodes, L, setup, ep_backend).peak)
    return out


def _closest(m: MoEModel, system: System, setup: TrainingSetup, rejected: list[Rejection],
             ep_backend: str | None) -> tuple[Rejection, MemoryBreakdown] | None:
    """The memory rejection nearest to fitting, by whole estimates (``_with_whole_estimates``)."""
    whole = [r for r in rejected if r.whole_gib is not None]
    if not whole:
        return None
    rej = min(whole, key=lambda r: r.whole_gib)
    return rej, _full_memory(m, system, rej.nodes, rej.layout, setup, ep_backend)


def _full_memory(m: MoEModel, system: System, nodes: int, L: Layout, setup: TrainingSetup,
                 ep_backend: str | None) -> MemoryBreakdown:
    _, span = ep_span(L, system.nvlink_gpus)
    choice = recommend_backend(system.name, nodes, span, ep_backend, system.nvlink_gpus,
                               system.describe_domain())
    return estimate_memory(m, system, L, setup, choice.backend)


def _too_big(mem: MemoryBreakdown, system: System, setup: TrainingSetup, headroom_gib: float,
             recompute: str) -> str:
    """Why ``mem`` does not fit, naming its largest part and the fix for that part."""
    has = f"{system.name} has {system.gpu_memory_gib:.1f} usable{_headroom_clause(headroom_gib, True)}"
    if mem.rollout_peak > mem.training_peak:
        return (f"the colocated rollout phase needs {mem.rollout_peak:.0f} GiB per GPU (engine "
                f"weights {mem.rollout_weights:.0f} + KV cache {mem.rollout_kv_cache:.0f}), {has}")
    static = mem.weights + mem.gradients + mem.optimizer + mem.fp8_weight_cache
    if headroom_gib and mem.peak <= mem.capacity:
        fix = f"keep less free ({named('memory_headroom_gib')})"
    elif mem.activations > static:
        fix = (f"activations ({mem.activations:.0f} GiB) are the largest part: train shorter "
               f"sequences ({named('seq_len')} {setup.seq_len}) or spread them over more GPUs")
    else:
        fix = (f"weights, gradients and optimizer ({static:.0f} GiB) are the largest part: "
               "spread them over more nodes")
    return (f"needs {mem.peak:.0f} GiB per GPU even with {recompute} recompute, {has}; {fix}")


def evaluate(model: str | MoEModel, instance_type: str, nodes: int, layout: Layout,
             setup: TrainingSetup, ep_backend: str | None = None,
             allow_reference_systems: bool = False) -> Candidate:
    """Predict one given layout (no search); raise PlannerError if it does not divide."""
    m = get_model(model) if isinstance(model, str) else model
    system = get_system(instance_type, allow_reference=allow_reference_systems)
    if layout.world != nodes * system.gpus_per_node:
        raise PlannerError(
            f"layout {layout.label()} does not divide: tp x cp x pp x dp = {layout.world} GPUs, "
            f"but {nodes} node(s) of {system.name} have {nodes * system.gpus_per_node}")
    check_precision(system, setup.precision)
    problem = layout_problem(m, layout, setup, system.nvlink_gpus)
    if problem:
        raise PlannerError(f"layout {layout.label()} does not divide: {problem}")
    _, span = ep_span(layout, system.nvlink_gpus)
    choice = recommend_backend(system.name, nodes, span, ep_backend, system.nvlink_gpus,
                               system.describe_domain())
    problem = flex_dispatcher_problem(choice.backend, layout.etp, layout.ep)
    if problem:
        raise PlannerError(f"layout {layout.label()}: {problem}; use ep or etp above 1, or "
                           "ep_backend nccl")
    mem = estimate_memory(m, system, layout, setup, choice.backend)
    t = step_time(m, system, layout, setup, choice.backend)
    return Candidate(nodes, layout, mem, t, choice, _cost(system, nodes, t, None))
