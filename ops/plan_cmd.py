"""`rlkit plan`: size the cluster and pick the parallel layout before paying for GPUs.

    rlkit plan --model qwen3-30b-a3b --instance p5.48xlarge --nodes 4
    rlkit plan --model deepseek-v3 --instance p5en.48xlarge --max-nodes 32 --precision fp8 --json
    rlkit plan --model qwen3-30b-a3b --instance p5.48xlarge --nodes 2 \\
        --write-config examples/p5-2node.yaml --node-group p5

The model behind the numbers (sources, calibration, limits) is described in docs/planner.md.
"""

from __future__ import annotations

import argparse
import json
import sys

from infra.planner import MODEL_CATALOG, SYSTEMS, PlannerError, Pins, load_model_file, plan
from infra.planner.config_writer import write_config
from infra.config import EP_BACKENDS
from infra.planner.search import DEFAULT_MAX_NODES, PlanResult


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan",
        help="size the cluster and choose the parallel layout (no AWS calls)",
        description="Predict memory, step time, expert-parallel backend and cost of MoE training "
                    "layouts on an EC2 GPU instance type, and pick the best.",
    )
    what = p.add_argument_group("what to train")
    src = what.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="KEY",
                     help=f"catalog model: {', '.join(sorted(MODEL_CATALOG))}")
    src.add_argument("--model-file", metavar="YAML", help="a custom MoE model described in YAML")
    what.add_argument("--seq-len", type=int, default=4096, help="tokens per sequence (4096)")
    what.add_argument("--global-batch", type=int, default=256,
                      help="sequences per optimizer step (256)")
    what.add_argument("--precision", choices=("bf16", "fp8"), default="bf16")
    what.add_argument("--bf16-moments", action="store_true",
                      help="Adam moments in BF16 (Megatron --use-precision-aware-optimizer)")
    what.add_argument("--colocate", action="store_true",
                      help="RL: the rollout engine shares the training GPUs")
    what.add_argument("--rollout-mem-fraction", type=float, default=0.7,
                      help="with --colocate: GPU memory the engine claims (SGLang "
                           "mem_fraction_static, 0.7)")
    what.add_argument("--rollout-kv-tokens", type=int, default=0,
                      help="with --colocate: size the engine's KV cache by resident tokens per "
                           "GPU instead of --rollout-mem-fraction")
    what.add_argument("--no-rollout-offload", action="store_true",
                      help="with --colocate: the engine keeps its memory while training")

    where = p.add_argument_group("where")
    where.add_argument("--instance", required=True, metavar="TYPE",
                       help=f"EC2 instance type: {', '.join(SYSTEMS)}")
    where.add_argument("--nodes", type=int, help="node count (default: search 1..--max-nodes)")
    where.add_argument("--max-nodes", type=int,
                       help=f"node quota; the search never exceeds it (default {DEFAULT_MAX_NODES})")
    where.add_argument("--headroom-gib", type=float, default=0.0,
                       help="GPU memory to keep free beyond the model's own reserve (0)")
    where.add_argument("--price-per-hour", type=float,
                       help="USD per node-hour (default: the dated on-demand table)")

    how = p.add_argument_group("layout (pin any part; the rest is searched)")
    for name in ("tp", "pp", "ep", "etp", "cp", "vpp", "mbs"):
        how.add_argument(f"--{name}", type=int)
    how.add_argument("--recompute", choices=("none", "selective", "full"))
    how.add_argument("--ep-backend", choices=EP_BACKENDS,
                     help="override the recommended expert-parallel backend")
    how.add_argument("--schedule", choices=("1f1b", "a2a-overlap", "dualpipe"), default="1f1b",
                     help="pipeline schedule / all-to-all overlap (1f1b)")
    how.add_argument("--objective", choices=("cost", "throughput"), default="cost",
                     help="rank by $ per token (cost) or by total tokens/s (throughput)")

    out = p.add_argument_group("output")
    out.add_argument("--top", type=int, default=5, help="layouts to show (5)")
    out.add_argument("--json", action="store_true", help="machine-readable output")
    out.add_argument("--write-config", metavar="PATH",
                     help="write the best layout into this kit config file")
    out.add_argument("--node-group", metavar="NAME",
                     help="with --write-config: the gpu_node_groups entry to run on")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        result = _plan(args)
        if args.write_config:
            if not args.node_group:
                raise PlannerError("--write-config needs --node-group NAME (a gpu_node_groups "
                                   "entry of the config file)")
            write_config(args.write_config, result.best, result.model.key, result.system.name,
                         args.node_group)
    except PlannerError as err:
        print(f"rlkit plan: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        _print_table(result)
    if args.write_config:
        print(f"wrote training.{{model,node_group,nodes,parallel,expert_parallel.backend}} "
              f"to {args.write_config}", file=sys.stderr)
    return 0


def _plan(args: argparse.Namespace) -> PlanResult:
    model = load_model_file(args.model_file) if args.model_file else args.model
    pins = Pins(tp=args.tp, pp=args.pp, ep=args.ep, etp=args.etp, cp=args.cp, vpp=args.vpp,
                mbs=args.mbs, recompute=args.recompute)
    return plan(
        model, args.instance, nodes=args.nodes, max_nodes=args.max_nodes, seq_len=args.seq_len,
        global_batch=args.global_batch, precision=args.precision, ep_backend=args.ep_backend,
        objective=args.objective, top=args.top, pins=pins, price_per_hour=args.price_per_hour,
        memory_headroom_gib=args.headroom_gib,
        schedule=args.schedule, optimizer_bf16_moments=args.bf16_moments,
        colocate_rollout=args.colocate, rollout_offload=not args.no_rollout_offload,
        rollout_mem_fraction=args.rollout_mem_fraction if args.colocate else 0.0,
        rollout_tokens_per_gpu=args.rollout_kv_tokens if args.colocate else 0,
    )


def _money(x: float | None, fmt: str = "{:,.2f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def _print_table(result: PlanResult) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 140))
    m, s, setup = result.model, result.system, result.setup
    searched = (f"{result.node_counts[0]} node(s)" if len(result.node_counts) == 1
                else f"1-{result.node_counts[-1]} nodes")
    console.print(
        f"[bold]{m.name}[/bold] ({m.total_params / 1e9:.0f}B total, {m.active_params / 1e9:.1f}B "
        f"active) on [bold]{s.name}[/bold] ({s.gpus_per_node}x {s.gpu.name} "
        f"{s.gpu_memory_gib:g} GiB): seq {setup.seq_len}, global batch {setup.global_batch}, "
        f"{setup.precision}; searched {searched}, {result.evaluated} layouts in "
        f"{result.search_seconds:.2f} s, ranked by {result.objective}")
    table = Table(show_lines=False)
    for col, justify in (("#", "right"), ("nodes", "right"), ("layout", "left"),
                         ("recompute", "left"), ("mem GiB", "right"), ("step s", "right"),
                         ("tok/s/GPU", "right"), ("MFU", "right"), ("EP backend", "left"),
                         ("$/h", "right"), ("$/M tok", "right")):
        table.add_column(col, justify=justify)
    for i, c in enumerate(result.candidates, 1):
        table.add_row(
            str(i), str(c.nodes), c.layout.label(), c.layout.recompute,
            f"{c.memory.peak:.1f}/{c.memory.capacity:g}", f"{c.time.step:.2f}",
            f"{c.time.tokens_per_s_per_gpu:,.0f}", f"{c.time.mfu * 100:.0f}%",
            c.backend.backend, _money(c.cost.dollars_per_hour, "{:,.0f}"),
            _money(c.cost.dollars_per_million_tokens),
        )
    console.print(table)
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
        + f" of {mem.capacity:g}")
    console.print(
        f"  step {t.step:.2f} s: compute {t.compute:.2f}, tensor-parallel {t.tp_comm:.2f}, "
        f"all-to-all {t.ep_comm_exposed:.2f} exposed of {t.ep_comm:.2f}, bubble "
        f"{t.pp_bubble:.2f}, pipeline p2p {t.pp_comm_exposed:.2f}, data-parallel "
        f"{t.dp_comm_exposed:.2f}, optimizer {t.optimizer:.2f}; {t.micro_batches} micro-batches; "
        f"expert group spans {t.ep_span_nodes} node(s)")
    if b.cost.dollars_per_hour is not None:
        console.print(f"  cost ${b.cost.dollars_per_hour:,.2f}/h, "
                      f"${b.cost.dollars_per_million_tokens:,.2f} per million trained tokens "
                      f"({b.cost.source})")
    rejections = result.closest_rejections(5)
    if rejections:
        console.print(f"[bold]Rejected[/bold] {len(result.rejected)} layouts, for example:")
        for r in rejections:
            console.print(f"  {r.nodes} node(s) {r.layout.label()}: {r.reason}")
    for w in result.warnings:
        console.print(f"[yellow]warning[/yellow]: {w}")
