"""`rlkit plan`'s tables: the ranked layouts (a training plan) or placements (a GRPO step), the
best one's memory, time and cost, and what was rejected. They fit the terminal's width, dropping
the least needed columns first, and print plain columns in a pipe (-o json has everything)."""

from __future__ import annotations

from infra.planner.rl import RLPlan, RLSetup
from infra.planner.search import PlanResult
from ops.output import make_console, print_fitted_table


def _money(x: float | None, fmt: str = "{:,.2f}") -> str:
    return "n/a" if x is None else fmt.format(x)


# Columns dropped first when the terminal is too narrow (the rest always shows; -o json has all).
DROP_ORDER = ("recompute", "MFU", "$/h", "tok/s/GPU", "mem GiB", "step s")
RL_DROP_ORDER = ("engines", "sync", "train", "rollout", "train+rollout", "samples/s", "$/step",
                 "training layout", "bound")


def _dropped_note(console, dropped: list[str]) -> None:
    if dropped:
        console.print(f"(not shown at {console.width} columns: {', '.join(dropped)}; widen the "
                      "terminal, or use -o json)", markup=False, highlight=False)


def print_plan_table(result: PlanResult) -> None:
    console = make_console()  # the terminal's width; a pipe gets plain columns
    m, s, setup = result.model, result.system, result.setup
    searched = (f"{result.node_counts[0]} node(s)" if len(result.node_counts) == 1
                else f"1-{result.node_counts[-1]} nodes")
    console.print(
        f"[bold]{m.name}[/bold] ({m.total_params / 1e9:.0f}B total, {m.active_params / 1e9:.1f}B "
        f"active) on [bold]{s.name}[/bold] ({s.gpus_per_node}x {s.gpu.name} "
        f"{s.nominal_memory_gib:g} GiB, {s.gpu_memory_gib:.1f} usable): seq {setup.seq_len}, "
        f"global batch {setup.global_batch}, "
        f"{setup.precision}; searched {searched}, {result.evaluated} layouts in "
        f"{result.search_seconds:.2f} s, ranked by {result.objective}")
    columns = ("#", "nodes", "layout", "recompute", "mem GiB", "step s", "tok/s/GPU", "MFU",
               "EP backend", "$/h", "$/M tok")
    rows = [[str(i), str(c.nodes), c.layout.label(), c.layout.recompute,
             f"{c.memory.peak:.1f}/{c.memory.capacity:.1f}", f"{c.time.step:.2f}",
             f"{c.time.tokens_per_s_per_gpu:,.0f}", f"{c.time.mfu * 100:.0f}%",
             c.backend.backend, _money(c.cost.dollars_per_hour, "{:,.0f}"),
             _money(c.cost.dollars_per_million_tokens)]
            for i, c in enumerate(result.candidates, 1)]
    dropped = print_fitted_table(console, columns, rows, DROP_ORDER, right=(
        "#", "nodes", "mem GiB", "step s", "tok/s/GPU", "MFU", "$/h", "$/M tok"))
    _dropped_note(console, dropped)
    b = result.best
    mem, t = b.memory, b.time
    console.print(
        f"[bold]Best[/bold]: {b.nodes} x {s.name}, {b.layout.label()}, recompute "
        f"{b.layout.recompute}, EP backend [bold]{b.backend.backend}[/bold] ({b.backend.reason}).")
    console.print(
        f"  memory per GPU ({mem.stage} stage): weights {mem.weights:.1f} + grads "
        f"{mem.gradients:.1f} + optimizer {mem.optimizer:.1f} + fp8 cache "
        f"{mem.fp8_weight_cache:.1f} + activations {mem.activations:.1f} + buffers "
        f"{mem.comm_buffers:.1f} + reserve {mem.runtime_reserve:.1f}"
        + (f" + rollout {mem.rollout_weights + mem.rollout_kv_cache:.1f}"
           if mem.rollout_weights and not setup.rollout_offload else "")
        + f" = {mem.training_peak:.1f} GiB"
        + (f"; rollout phase {mem.rollout_peak:.1f} GiB" if mem.rollout_peak else "")
        + f" of {mem.capacity:.1f} usable"
        + (f"; activations for micro-batches of {mem.micro_batch_tokens:,.0f} tokens per GPU "
           f"(dynamic batching, cap {mem.max_tokens_per_gpu:,})" if mem.max_tokens_per_gpu else ""))
    console.print(
        f"  step {t.step:.2f} s: compute {t.compute:.2f}, tensor-parallel {t.tp_comm:.2f}, "
        f"all-to-all {t.ep_comm_exposed:.2f} exposed of {t.ep_comm:.2f}, bubble "
        f"{t.pp_bubble:.2f}, pipeline p2p {t.pp_comm_exposed:.2f}, data-parallel "
        f"{t.dp_comm_exposed:.2f}, optimizer {t.optimizer:.2f}; {t.micro_batches} micro-batches"
        + (f" packed up to {mem.max_tokens_per_gpu:,} tokens per GPU (dynamic batching)"
           if mem.max_tokens_per_gpu else "") + "; "
        f"expert group spans {t.ep_span_nodes} NVLink domain(s) (a node on HGX types)")
    if b.cost.dollars_per_hour is not None:
        console.print(f"  cost ${b.cost.dollars_per_hour:,.2f}/h, "
                      f"${b.cost.dollars_per_million_tokens:,.2f} per million trained tokens "
                      f"({b.cost.source})")
    rejections = result.closest_rejections(5)
    if rejections:
        console.print(f"[bold]Rejected[/bold] {len(result.rejected)} layouts, for example:")
        for r in rejections:
            whole = (f" ({r.whole_gib:.0f} GiB in all with {r.layout.recompute} recompute)"
                     if r.static_only and r.whole_gib is not None else "")
            console.print(f"  {r.nodes} node(s) {r.layout.label()}: {r.reason}{whole}")
    for w in result.warnings:
        console.print(f"[yellow]warning[/yellow]: {w}")


def _mode_text(rl: RLSetup) -> str:
    if rl.mode == "on-policy":
        return "on-policy"
    return f"{rl.staleness}-step off-policy, {rl.mode} overlap"


def print_rl_plan_table(result: RLPlan) -> None:
    console = make_console()  # the terminal's width; a pipe gets plain columns
    m, s, rl = result.model, result.system, result.rl
    console.print(
        f"[bold]GRPO step[/bold] for [bold]{m.name}[/bold] on [bold]{s.name}[/bold]: "
        f"{rl.prompts} prompts x {rl.samples_per_prompt} samples, prompt {rl.prompt_len}, "
        f"response mean {rl.mean_response} / max {rl.max_response_len} tokens, "
        f"{rl.steps_per_rollout} optimizer step(s), training {result.precision}, "
        f"{_mode_text(rl)}; searched in {result.search_seconds:.2f} s")
    columns = ("#", "placement", "nodes", "train+rollout", "engines", "training layout", "step s",
               "rollout", "sync", "train", "bound", "samples/s", "$/step", "$/M tok")
    rows = []
    for i, c in enumerate(result.candidates, 1):
        split = "shared" if c.placement == "colocated" else f"{c.train_nodes}+{c.rollout_nodes}"
        rows.append([str(i), c.placement, str(c.nodes), split, c.engine.label(),
                     c.training.layout.label(), f"{c.time.step:.1f}", f"{c.time.rollout:.1f}",
                     f"{c.time.sync:.1f}", f"{c.time.train:.1f}", c.time.bound,
                     f"{c.samples_per_s:.2f}",
                     _money(c.dollars_per_step), _money(c.dollars_per_million_tokens)])
    dropped = print_fitted_table(console, columns, rows, RL_DROP_ORDER, right=(
        "#", "nodes", "train+rollout", "step s", "rollout", "sync", "train", "samples/s",
        "$/step", "$/M tok"))
    _dropped_note(console, dropped)
    b, t = result.best, result.best.time
    console.print(
        f"[bold]Best placement[/bold]: {b.placement}, {b.nodes} x {s.name}"
        + ("" if b.placement == "colocated" else
           f" ({b.train_nodes} training, {b.rollout_nodes} rollout)")
        + f"; rollout engines {b.engine.label()}; training {b.training.layout.label()} recompute "
          f"{b.training.layout.recompute}, EP backend {b.training.backend.backend}.")
    combine = {"on-policy": "in turn (sum)", "batch": "max(rollout, training) + sync / K",
               "stream": "max(training + sync, rollout + sync, sync)"}[t.mode]
    console.print(
        f"  step {t.step:.1f} s, bound by {t.bound}: rollout {t.rollout:.1f} "
        f"({t.decode_iterations} decode iterations at {t.iteration_ms:.1f} ms, mean batch "
        f"{t.mean_batch:.0f} per engine, engine memory share {t.mem_fraction:g}), weight sync "
        f"{t.sync:.1f}, training {t.train:.1f}; combined {combine}")
    console.print("  Miles: " + " ".join(b.miles_args(rl, s.gpus_per_node)))
    if b.dollars_per_step is not None:
        console.print(f"  ${b.dollars_per_step:,.2f} per step, "
                      f"${b.dollars_per_million_tokens:,.2f} "
                      f"per million trained tokens, {b.samples_per_s:.2f} samples/s "
                      f"({b.training.cost.source})")
    for w in result.warnings:
        console.print(f"[yellow]warning[/yellow]: {w}")
