"""`rlkit plan`: size the cluster and pick the parallel layout before paying for GPUs.

    rlkit plan --model qwen3-30b-a3b --instance p5.48xlarge --nodes 4
    rlkit plan --model deepseek-v3 --instance p5en.48xlarge --max-nodes 32 --precision fp8 --json
    rlkit plan --model qwen3-30b-a3b --instance p5.48xlarge --nodes 2 \\
        --write-config examples/p5-2node.yaml --node-group p5
    rlkit plan --rl --model qwen3-30b-a3b --instance p5en.48xlarge --max-nodes 8 --plot plan.png
    rlkit plan --rl --placement disaggregated --off-policy-steps 2 --nodes 8
    rlkit plan --rl --off-policy-steps 2 --max-nodes 8 --write-config my-env.yaml --node-group p5
    rlkit plan                     # model, instance, nodes and GRPO shape from the config

Without --model/--instance/--nodes, --global-batch and the GRPO options, the plan takes them from
the config (--config, else $RLKIT_CONFIG, else the built-in default); a flag overrides its config
value.

The model behind the numbers (sources, calibration, limits) is described in docs/planner.md.
Every number is checked as it is parsed (``--seq-len 0`` or a negative price is a one-line usage
error naming the flag). The table fits the terminal, dropping its least important columns first;
in a pipe it prints plain aligned columns; -o json|yaml prints one document. --write-config
creates the file when it does not exist yet; with --rl it writes the plan's placement, rollout
pool and overlap (training.rollout), which `rlkit launch` runs and `--config` reads back; a
training plan for a config with colocated rollout is planned beside its engines (ops.plan_write).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from infra.catalog.instances import INSTANCE_TYPES
from infra.catalog.releases import RELEASES
from infra.planner import (
    MODEL_CATALOG,
    Pins,
    PlannerError,
    PlanRequest,
    RLPlanRequest,
    TrainingSetup,
    load_model_file,
    plan,
)
from infra.planner.config_writer import launcher_problem
from infra.planner.errors import field as named
from infra.planner.request import COLOCATED_MEM_FRACTION
from infra.trainer_contract import DEFAULT_KEEP_LOCAL, DEFAULT_MAX_TOKENS_PER_GPU, EP_BACKENDS
from infra.catalog.fsx import plan_for_model
from infra.planner.layout import PRECISIONS
from infra.planner.plot import draw, from_rl_plan, from_training_plan
from infra.planner.rl import DEFAULT_RL_MAX_NODES, RLSetup, plan_rl
from infra.planner.search import DEFAULT_MAX_NODES, PlanResult
from ops.plan_write import training_engine, write_rl_config, write_training_config
from infra.config.values import MAX_GPU_NODES_PER_GROUP
from ops.options import (
    add_config,
    fraction,
    load_config,
    non_negative_float,
    non_negative_int,
    positive_int,
)
from ops.config_source import describe, say_source, to_be_created
from ops.output import add_output_option, emit, make_console, wants_json
from ops.plan_output import print_plan_table, print_rl_plan_table


# The planner's errors name request fields; the CLI names its flags instead.
FLAGS = {
    "nodes": "--nodes",
    "max_nodes": "--max-nodes",
    "precision": "--precision",
    "price_per_hour": "--price-per-hour",
    "max_response_len": "--max-response-len",
    "off_policy_steps": "--off-policy-steps",
    "engine_gpus": "--engine-gpus",
    "engine_ep": "--engine-ep",
    "optimizer_bf16_moments": "--bf16-moments",
    "schedule": "--schedule",
    "release": "--release",
    "write_config": "--write-config",
    "memory_headroom_gib": "--headroom-gib",
    "seq_len": "--seq-len",
    "ep_backend": "--ep-backend",
    "max_tokens_per_gpu": "--max-tokens-per-gpu",
    **{size: f"--{size}" for size in ("tp", "pp", "ep", "etp", "cp", "vpp", "mbs", "recompute")},
}
OVERLAP_CHOICES = ("none", "batch", "stream")


def node_count(text: str) -> int:
    """A node count the kit can run: 1 to MAX_GPU_NODES_PER_GROUP (the search is linear in it)."""
    value = positive_int(text)
    if value > MAX_GPU_NODES_PER_GROUP:
        raise argparse.ArgumentTypeError(
            f"{text} is not allowed: it must be at most {MAX_GPU_NODES_PER_GROUP}, the most nodes "
            "a kit GPU node group may have (MAX_GPU_NODES_PER_GROUP, infra/config/values.py)")
    return value


node_count.__name__ = "int"  # argparse names the type in its own messages


def _plot_problem(path: str | None) -> str | None:
    """--plot writes a PNG: a name without .png would be refused by matplotlib (x.txt) or
    written under another name (myplot -> myplot.png)."""
    if path is None or Path(path).suffix.lower() == ".png":
        return None
    return (f"--plot {path}: the plot is a PNG image, written to exactly the file named; name a "
            f".png file, e.g. {Path(path).with_suffix('.png') if Path(path).suffix else path + '.png'}")


def _error(err: PlannerError) -> int:
    print(f"rlkit plan: error: {err.naming(FLAGS)}", file=sys.stderr)
    return 2


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan",
        help="size the cluster and choose the parallel layout (no AWS calls)",
        description="Predict memory, step time, expert-parallel backend and cost of MoE training "
                    "layouts on an EC2 GPU instance type, and pick the best.",
    )
    what = p.add_argument_group("what to train")
    src = what.add_mutually_exclusive_group()
    src.add_argument("--model", metavar="KEY",
                     help=f"catalog model: {', '.join(sorted(MODEL_CATALOG))} (default: the "
                          "config's training.model)")
    src.add_argument("--model-file", metavar="YAML", help="a custom MoE model described in YAML")
    what.add_argument("--seq-len", type=positive_int, help="tokens per sequence (4096)")
    what.add_argument("--global-batch", type=positive_int,
                      help="sequences per optimizer step (default: the config's "
                           "training.grpo.global_batch_size, 256 without one)")
    what.add_argument("--max-tokens-per-gpu", type=positive_int, metavar="N",
                      help="tokens per GPU in one training micro-batch: the launcher runs Miles' "
                           "dynamic batching with this cap, which sizes activation memory "
                           "(default: the config's training.parallel.max_tokens_per_gpu, "
                           f"{DEFAULT_MAX_TOKENS_PER_GPU} without one); --write-config writes it")
    what.add_argument("--precision", choices=PRECISIONS, default="bf16",
                      help="training precision; mxfp8 needs Blackwell (p6) (bf16)")
    what.add_argument("--bf16-moments", action="store_true",
                      help="Adam moments in BF16 (Megatron --exp-avg-dtype bf16); not with "
                           "--write-config: the launcher keeps them in FP32")
    what.add_argument("--keep-local", type=positive_int, metavar="K",
                      help="finished saves kept on the shared file system (training.checkpoint."
                           f"keep_local); it is sized for the weights plus K + 1 saves (the "
                           f"config's, {DEFAULT_KEEP_LOCAL} without one); a new --write-config "
                           "file keeps K")
    what.add_argument("--colocate", action="store_true",
                      help="RL: the rollout engine shares the training GPUs")
    what.add_argument("--rollout-mem-fraction", type=fraction, default=None,
                      help="GPU memory the engine claims (SGLang mem_fraction_static; default "
                           "0.7 colocated, SGLang's standalone default on its own GPUs)")
    what.add_argument("--rollout-kv-tokens", type=non_negative_int,
                      help="with --colocate: size the engine's KV cache by resident tokens per "
                           "GPU instead of --rollout-mem-fraction")
    what.add_argument("--no-rollout-offload", action="store_true",
                      help="with --colocate: the engine keeps its memory while training")

    rl = p.add_argument_group("RL (GRPO step = rollout + weight sync + training)")
    rl.add_argument("--rl", action="store_true",
                    help="plan a GRPO step: rank colocated and disaggregated layouts by cost "
                         "per step; the trained sequence and batch come from the options below")
    rl.add_argument("--prompts", type=positive_int,
                    help="prompts per rollout (config grpo.rollout_batch_size)")
    rl.add_argument("--samples-per-prompt", type=positive_int,
                    help="samples per prompt (config grpo.n_samples_per_prompt)")
    rl.add_argument("--prompt-len", type=positive_int, help="prompt tokens (512)")
    rl.add_argument("--max-response-len", type=positive_int,
                    help="maximum response tokens (config grpo.rollout_max_response_len)")
    rl.add_argument("--mean-response-len", type=non_negative_int,
                    help="mean response tokens (default 60%% of the maximum)")
    rl.add_argument("--steps-per-rollout", type=positive_int,
                    help="optimizer steps per rollout (config grpo.num_steps_per_rollout)")
    rl.add_argument("--logprob-passes", type=non_negative_int,
                    help="forward-only log-prob passes before training (1; 2 when the config "
                         "has a KL term)")
    rl.add_argument("--placement", choices=("both", "colocated", "disaggregated"),
                    help="rollout placement to consider (default: the config's "
                         "training.rollout.placement where the file sets it and the instance "
                         "type, node count and mode all come from the config; else both)")
    rl.add_argument("--overlap", nargs="?", const="batch", choices=OVERLAP_CHOICES,
                    help="how generation overlaps training (disaggregated only): batch (the "
                         "next batch generates while this one trains; Miles train_async.py; "
                         "--overlap alone) or stream (engines never drain, in-flight weight "
                         "updates; Miles --fully-async); default: stream with "
                         "--off-policy-steps, else none")
    rl.add_argument("--off-policy-steps", type=non_negative_int, metavar="K",
                    help="generation may run up to K optimizer steps ahead (0 = on-policy, the "
                         "default; 1 with --overlap)")
    rl.add_argument("--engine-gpus", type=positive_int, help="pin GPUs per SGLang engine")
    rl.add_argument("--engine-ep", type=positive_int, help="pin expert-parallel size inside an engine")

    where = p.add_argument_group("where")
    where.add_argument("--instance", metavar="TYPE",
                       help=f"EC2 instance type: {', '.join(INSTANCE_TYPES)} (default: that of "
                            "the config's training.node_group)")
    where.add_argument("--nodes", type=node_count,
                       help="node count (default: the config's training.nodes when the instance "
                            "type comes from the config too, else search 1..--max-nodes)")
    where.add_argument("--max-nodes", type=node_count,
                       help=f"node quota; the search never exceeds it (default "
                            f"{DEFAULT_MAX_NODES}; {DEFAULT_RL_MAX_NODES} with --rl)")
    where.add_argument("--headroom-gib", type=non_negative_float, default=0.0,
                       help="GPU memory to keep free beyond the model's own reserve (0)")
    where.add_argument("--price-per-hour", type=non_negative_float,
                       help="USD per node-hour (default: the dated on-demand table)")

    how = p.add_argument_group("layout (pin any part; the rest is searched)")
    for name in ("tp", "pp", "ep", "etp", "cp", "vpp", "mbs"):
        how.add_argument(f"--{name}", type=positive_int)
    how.add_argument("--recompute", choices=("none", "selective", "full"))
    how.add_argument("--ep-backend", choices=EP_BACKENDS,
                     help="override the recommended expert-parallel backend")
    how.add_argument("--schedule", choices=("1f1b", "a2a-overlap", "dualpipe"), default="1f1b",
                     help="pipeline schedule / all-to-all overlap (1f1b)")
    how.add_argument("--release", choices=tuple(RELEASES), default="baseline",
                     help="software release the training step assumes: baseline (as "
                          "calibrated; what the kit's launcher runs) or mb-26.06 (full-iteration "
                          "CUDA graphs, all-to-all overlap, fused grouped MLP, FP8 attention)")
    how.add_argument("--objective", choices=("cost", "throughput"), default="cost",
                     help="rank by $ per token (cost) or by total tokens/s (throughput)")

    add_config(where)  # model, instance, nodes and GRPO shape default to the config's

    out = p.add_argument_group("output")
    out.add_argument("--top", type=positive_int, default=5, help="layouts to show (5)")
    add_output_option(out)
    out.add_argument("--write-config", metavar="PATH",
                     help="write the best layout into this kit config file (refused with "
                          "--precision other than bf16, --bf16-moments, --schedule other than "
                          "1f1b or --release other than baseline: the launcher runs none of them)")
    out.add_argument("--node-group", metavar="NAME",
                     help="with --write-config: the gpu_node_groups entry to run on")
    out.add_argument("--plot", metavar="FILE",
                     help="draw cost per million trained tokens against node count and the "
                          "chosen layout's step-time breakdown (PNG)")
    # not a flag: the NVLink domain of the config's node group (its UltraServer type), read
    # with the instance type from the config
    p.set_defaults(func=run, ultraserver_type=None, run_rollout=None, rollout_engine_gpus=0)


# flags that shape a GRPO step: only --rl plans one (checked before the config fills its GRPO
# shape and mode into the same options, so only what the user typed is refused)
_RL_ONLY = (
    ("prompts", "--prompts"), ("samples_per_prompt", "--samples-per-prompt"),
    ("prompt_len", "--prompt-len"), ("max_response_len", "--max-response-len"),
    ("mean_response_len", "--mean-response-len"), ("steps_per_rollout", "--steps-per-rollout"),
    ("logprob_passes", "--logprob-passes"), ("placement", "--placement"),
    ("overlap", "--overlap"), ("off_policy_steps", "--off-policy-steps"),
    ("engine_gpus", "--engine-gpus"), ("engine_ep", "--engine-ep"),
)
# flags of a training plan's colocated rollout engine (refused with --rl by _NOT_WITH_RL)
_COLOCATE_ONLY = (("rollout_kv_tokens", "--rollout-kv-tokens"),
                  ("no_rollout_offload", "--no-rollout-offload"))


def _typed(value) -> bool:
    """An option the command line set (its default is None, or False for a switch)."""
    return value is not None and value is not False


def _ignored_flag_problem(args: argparse.Namespace) -> str | None:
    """A typed flag the plan would ignore: GRPO options without --rl, a training plan's
    rollout-engine options without --colocate."""
    if args.rl:
        return None

    def typed_of(options) -> list[tuple[str, object]]:
        return [(flag, getattr(args, dest)) for dest, flag in options
                if _typed(getattr(args, dest))]

    def sentence(typed: list[tuple[str, object]], needs: str, does: str, fix: str) -> str:
        many = len(typed) > 1
        shown = ", ".join(flag if value is True else
                          f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"
                          for flag, value in typed)
        return (f"{shown} need{'' if many else 's'} {needs}: {'they' if many else 'it'} "
                f"{does if many else does.replace('shape', 'shapes').replace('size', 'sizes')}; "
                f"{fix}, or drop {'them' if many else typed[0][0]}")

    typed = typed_of(_RL_ONLY)
    if typed:
        return sentence(typed, "--rl", "shape a GRPO step, which a training plan ignores",
                        "add --rl")
    if args.colocate:
        return None
    typed = typed_of((("rollout_mem_fraction", "--rollout-mem-fraction"), *_COLOCATE_ONLY))
    if not typed:
        return None
    with_rl = [flag for flag, _ in typed] == ["--rollout-mem-fraction"]  # the only one --rl takes
    return sentence(typed, "--colocate or --rl" if with_rl else "--colocate",
                    "size a rollout engine, and this training plan has none",
                    "add --colocate (the engine shares the training GPUs)"
                    + (" or plan a GRPO step with --rl" if with_rl else ""))


def run(args: argparse.Namespace) -> int:
    """Plan, print, and optionally write the config and the plot."""
    ignored = _ignored_flag_problem(args) or _plot_problem(args.plot)
    if ignored:
        print(f"rlkit plan: error: {ignored}", file=sys.stderr)
        return 2
    if not _config_defaults(args):
        return 2
    if args.keep_local is None:  # the config was not read (nothing else was left out)
        args.keep_local = DEFAULT_KEEP_LOCAL
    if args.write_config:  # before the search: a plan the launcher cannot run is not written
        problem = launcher_problem(args.write_config, precision=args.precision,
                                   optimizer_bf16_moments=args.bf16_moments,
                                   schedule=args.schedule, release=args.release)
        if problem:
            return _error(PlannerError(problem))
    if args.rl:
        return _run_rl(args)
    written = ""
    try:
        engine_note = training_engine(args)  # the config's colocated engine, planned beside
        result = _plan(args)
        if args.plot:
            draw(from_training_plan(result, _best_per_nodes(args)), args.plot)
        if args.write_config:
            written = write_training_config(args, result, engine_note)
    except PlannerError as err:
        return _error(err)
    return _report(args, result, print_plan_table, written)


def _config_defaults(args: argparse.Namespace) -> bool:
    """Fill what the command line left out from the config: model, instance type (of the
    config's node group), node count (only when the instance type came from the config too and
    no --max-nodes is given) and the GRPO shape. The config is read only when something is left
    out. False (problems printed) on a bad config."""
    rl_fields = ("prompts", "samples_per_prompt", "max_response_len", "steps_per_rollout",
                 "logprob_passes")
    if to_be_created(args, args.write_config):  # e.g. RLKIT_CONFIG names the file being started
        print(f"config: {describe(args)} does not exist yet: --write-config creates it from the "
              "built-in default config, whose values the plan uses", file=sys.stderr)
        args.config = None
    # a training plan trains the config's global batch (the trainer refuses a data-parallel size
    # that does not divide it); a named config is read for it even when nothing else is missing
    batch_from_config = not args.rl and args.global_batch is None and args.config is not None
    if (args.model or args.model_file) and args.instance and not batch_from_config and \
            (not args.rl or all(getattr(args, f) is not None for f in rl_fields)):
        return True
    cfg = load_config(args)  # validated: its node group exists
    if cfg is None:
        return False
    say_source(args)  # values below may come from a file RLKIT_CONFIG named
    t, g = cfg.training, cfg.training.grpo
    if args.max_tokens_per_gpu is None:  # the cap the config's run launches with
        args.max_tokens_per_gpu = t.parallel.max_tokens_per_gpu
    if args.keep_local is None:  # the saves the config's run keeps, which its storage holds
        args.keep_local = t.checkpoint.keep_local
    if args.model is None and args.model_file is None:
        args.model = t.model
    whole_run = False  # the config's run as it is: its instance type and node count
    if args.instance is None:
        group = cfg.gpu_node_groups[t.node_group]
        args.instance = group.instance_type
        args.ultraserver_type = group.capacity.ultraserver_type
        if args.nodes is None and args.max_nodes is None:
            args.nodes = t.nodes
            whole_run = True
            # a training plan of the config's run shares its GPUs with the config's engine
            args.run_rollout = t.rollout.model_dump(exclude_unset=True)
            if not args.rl and t.rollout.placement == "disaggregated" and t.rollout.nodes:
                # A training plan trains on the training pool; the rollout engines have theirs.
                args.nodes = t.nodes - t.rollout.nodes
                print(f"note: training.rollout is disaggregated: planning training on its "
                      f"{args.nodes} of training.nodes {t.nodes} (the other {t.rollout.nodes} run "
                      "the rollout engines); --rl plans the whole GRPO step", file=sys.stderr)
    if not args.rl and args.global_batch is None:
        args.global_batch = g.global_batch_size
    for dest, value in zip(rl_fields, (
            g.rollout_batch_size, g.n_samples_per_prompt, g.rollout_max_response_len,
            g.num_steps_per_rollout,
            2 if g.kl_loss_coef > 0 else 1)):  # the launcher loads a reference model for KL only
        if getattr(args, dest) is None:
            setattr(args, dest, value)
    if args.overlap is None and args.off_policy_steps is None:
        # the config's mode as a whole (--overlap or --off-policy-steps replaces it), and for the
        # config's whole run the placement the file names (written for a disaggregated plan);
        # without one both placements are ranked, as before the field existed
        ro = t.rollout
        args.overlap, args.off_policy_steps = ro.overlap, ro.off_policy_steps
        if whole_run and args.placement is None and "placement" in ro.model_fields_set:
            args.placement = ro.placement
    if args.node_group is None and args.write_config and args.config is not None \
            and Path(args.write_config).resolve() == Path(args.config).resolve():
        args.node_group = t.node_group  # rewriting the config itself: its own node group
    return True


def _best_per_nodes(args: argparse.Namespace) -> list:
    """Best training candidate at each searched node count (for the plot)."""
    full = _plan(args, top=10**9)
    best: dict[int, object] = {}
    for c in full.candidates:
        best.setdefault(c.nodes, c)
    return [best[n] for n in sorted(best)]


def _rl_setup(args: argparse.Namespace) -> RLSetup:
    return RLSetup(prompts=args.prompts, samples_per_prompt=args.samples_per_prompt,
                   prompt_len=args.prompt_len or RLSetup.prompt_len,
                   max_response_len=args.max_response_len,
                   mean_response_len=args.mean_response_len or 0,
                   steps_per_rollout=args.steps_per_rollout, logprob_passes=args.logprob_passes,
                   mem_fraction=args.rollout_mem_fraction, overlap=args.overlap,
                   off_policy_steps=args.off_policy_steps or 0)


# training-step options that a GRPO plan derives itself, and what to use instead
_NOT_WITH_RL = (
    ("seq_len", "--seq-len", "the packed sequence comes from --prompt-len and --mean-response-len"),
    ("global_batch", "--global-batch", "the batch is --prompts x --samples-per-prompt / "
                                       "--steps-per-rollout"),
    ("colocate", "--colocate", "use --placement colocated"),
    ("rollout_kv_tokens", "--rollout-kv-tokens", "the KV cache is what --rollout-mem-fraction "
                                                 "leaves after the engine's weights"),
    ("no_rollout_offload", "--no-rollout-offload", "a colocated GRPO plan assumes offload, as "
                                                   "Miles --colocate does"),
)


def _run_rl(args: argparse.Namespace) -> int:
    try:
        for dest, flag, instead in _NOT_WITH_RL:
            if _typed(getattr(args, dest)):
                raise PlannerError(f"{flag} does not apply with --rl: {instead}")
        if (args.engine_gpus is None) != (args.engine_ep is None):
            raise PlannerError("--engine-gpus and --engine-ep go together; pass both or neither")
        model = load_model_file(args.model_file) if args.model_file else args.model
        pins = Pins(tp=args.tp, pp=args.pp, ep=args.ep, etp=args.etp, cp=args.cp, vpp=args.vpp,
                    mbs=args.mbs, recompute=args.recompute)
        placements = (("colocated", "disaggregated") if args.placement in (None, "both")
                      else (args.placement,))
        result = plan_rl(RLPlanRequest(
            model, args.instance, _rl_setup(args), nodes=args.nodes,
            max_nodes=args.max_nodes, precision=args.precision,
            placements=placements, objective=args.objective, top=args.top, pins=pins,
            max_tokens_per_gpu=args.max_tokens_per_gpu or DEFAULT_MAX_TOKENS_PER_GPU,
            engine=(args.engine_gpus, args.engine_ep) if args.engine_gpus else None,
            ep_backend=args.ep_backend, price_per_hour=args.price_per_hour,
            release=args.release, ultraserver_type=args.ultraserver_type,
            schedule=args.schedule, optimizer_bf16_moments=args.bf16_moments))
        if args.plot:
            draw(from_rl_plan(result), args.plot)
        if args.write_config:
            write_rl_config(args, result)
    except PlannerError as err:
        return _error(err)
    return _report(args, result, print_rl_plan_table,
                   "training.{model,node_group,nodes,parallel,expert_parallel.backend,rollout,grpo}")


def _report(args: argparse.Namespace, result, print_table: Callable[[Any], None],
            written: str) -> int:
    """Print a plan (training or RL) with the shared file system it needs, as a table or JSON,
    then what --write-config (the fields ``written``) and --plot wrote."""
    shared_fs = plan_for_model(result.model, keep_local=args.keep_local)
    if wants_json(args):
        emit(args, {**result.to_dict(), "shared_filesystem": shared_fs.to_dict()})
    else:
        print_table(result)
        make_console().print(shared_fs.describe(), markup=False, highlight=False)
    if args.write_config:
        print(f"wrote {written} to {args.write_config}", file=sys.stderr)
    if args.plot:
        print(f"wrote plot to {args.plot}", file=sys.stderr)
    return 0


def _plan(args: argparse.Namespace, top: int | None = None) -> PlanResult:
    model = load_model_file(args.model_file) if args.model_file else args.model
    pins = Pins(tp=args.tp, pp=args.pp, ep=args.ep, etp=args.etp, cp=args.cp, vpp=args.vpp,
                mbs=args.mbs, recompute=args.recompute)
    engine = args.rollout_engine_gpus  # the config's colocated engine (training_engine)
    colocate = args.colocate or bool(engine)
    seq_len = args.seq_len or 4096
    # what the launcher runs: micro-batches of up to the cap per GPU; a GRPO sample (the config's
    # longest response after a prompt) longer than the cap x cp runs alone
    longest = RLSetup.prompt_len + (args.max_response_len or RLSetup.max_response_len)
    setup = TrainingSetup(
        seq_len=seq_len, global_batch=args.global_batch or 256,
        max_tokens_per_gpu=args.max_tokens_per_gpu or DEFAULT_MAX_TOKENS_PER_GPU,
        longest_sample=max(seq_len, longest),
        precision=args.precision, schedule=args.schedule, release=args.release,
        optimizer_bf16_moments=args.bf16_moments,
        colocate_rollout=colocate, rollout_offload=not args.no_rollout_offload,
        rollout_mem_fraction=(COLOCATED_MEM_FRACTION if args.rollout_mem_fraction is None
                              else args.rollout_mem_fraction) if colocate else 0.0,
        rollout_tokens_per_gpu=(args.rollout_kv_tokens or 0) if colocate else 0,
        rollout_engine_gpus=engine,
    )
    result = plan(PlanRequest(
        model, args.instance, nodes=args.nodes, max_nodes=args.max_nodes, setup=setup,
        pins=pins, ep_backend=args.ep_backend, objective=args.objective,
        top=10**9 if engine else top or args.top,
        price_per_hour=args.price_per_hour, memory_headroom_gib=args.headroom_gib,
        ultraserver_type=args.ultraserver_type,
    ))
    if not engine:
        return result
    # the engines tile the run's GPUs (the trainer's rule): keep the node counts they tile
    gpn = result.system.gpus_per_node
    tiled = [c for c in result.candidates if c.nodes * gpn % engine == 0]
    if not tiled:
        raise PlannerError(
            f"no layout fits on a node count whose GPUs the colocated engines of {engine} GPUs "
            f"(training.rollout.gpus_per_engine) tile: {engine} must divide nodes x {gpn}; plan "
            f"a multiple of {max(1, engine // gpn)} nodes ({named('nodes')}, {named('max_nodes')})")
    return replace(result, candidates=tuple(tiled[:top or args.top]))
