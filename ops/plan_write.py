"""`rlkit plan --write-config`: what a plan writes into a kit config, and how a new one starts.

A training plan written into a config whose rollout runs colocated (the default) is planned
beside that config's SGLang engine, as the launcher runs it (``infra.planner.colocated``); a GRPO
plan writes its own engines, placement and mode.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from infra.catalog.fsx import SHARED_FS_MIN_CAPACITY_GIB, plan_for_model
from infra.planner import PlannerError, get_model, get_system, load_model_file
from infra.planner.colocated import (
    DEFAULT_ENGINE_EP, DEFAULT_ENGINE_GPUS, colocated_engine, config_rollout, engine_ep,
    is_colocated,
)
from infra.planner.config_writer import write_config
from infra.planner.request import COLOCATED_MEM_FRACTION
from infra.planner.rl import RLPlan, RLSetup
from infra.planner.rl_modes import engine_mem_fraction
from infra.planner.search import PlanResult
from infra.trainer_contract import DEFAULT_KEEP_LOCAL
from ops.config_source import starter_config


def _need_node_group(args: argparse.Namespace) -> None:
    if not args.node_group:
        raise PlannerError("--write-config needs --node-group NAME (a gpu_node_groups entry of "
                           "the config file)")


def training_engine(args: argparse.Namespace) -> str | None:
    """Before a training plan: the GPUs per engine of the colocated rollout it runs beside, set
    on ``args.rollout_engine_gpus`` (0 when none). The engine is the --write-config file's (its
    training.rollout; a new file's defaults), else that of the config whose run is planned
    (``args.run_rollout``); a disaggregated rollout has none (write_config refuses writing a
    training plan over it). Returns the note when the engine had to change."""
    args.rollout_engine_gpus = 0
    if args.write_config:
        _need_node_group(args)
        rollout, where = config_rollout(args.write_config), args.write_config
        if args.rollout_kv_tokens or (args.rollout_mem_fraction is not None and
                                      args.rollout_mem_fraction != COLOCATED_MEM_FRACTION):
            flag = ("--rollout-kv-tokens" if args.rollout_kv_tokens else
                    f"--rollout-mem-fraction {args.rollout_mem_fraction:g}")
            raise PlannerError(
                f"not writing {where}: {flag}, but the launcher gives colocated engines "
                f"mem_fraction_static {COLOCATED_MEM_FRACTION:g} of each GPU and the config has "
                f"no field for another share; re-plan without {flag.split()[0]} to write the "
                "config")
    else:
        rollout, where = args.run_rollout, args.config or "the config"
    if rollout is None or not is_colocated(rollout):
        return None
    model = load_model_file(args.model_file) if args.model_file else get_model(args.model)
    system = get_system(args.instance, ultraserver_type=args.ultraserver_type)
    args.rollout_engine_gpus, note = colocated_engine(model, system, rollout, str(where))
    return note


def write_training_config(args: argparse.Namespace, result: PlanResult,
                          engine_note: str | None) -> str:
    """Write the best training plan; with a colocated rollout also the engine it was planned
    beside (training.rollout.gpus_per_engine and ep) when that differs from the file's. Returns
    the keys written, for the closing line."""
    _need_node_group(args)
    best = result.best
    start = new_config_text(args, result.system.name, best.nodes, result.model)
    notes: list[str] = [engine_note] if engine_note else []
    rollout = None
    g = args.rollout_engine_gpus
    if g:
        kept = config_rollout(args.write_config) if start is None else {}
        ep = engine_ep(result.model, g, best.backend.backend, kept)
        if (kept.get("gpus_per_engine", DEFAULT_ENGINE_GPUS), kept.get("ep", DEFAULT_ENGINE_EP)) \
                != (g, ep):
            rollout = {"gpus_per_engine": g, "ep": ep}
    write_config(args.write_config, best, result.model.key, result.system.name,
                 args.node_group, rollout=rollout, new_file_text=start, notes=notes)
    say_created(args, start, notes)
    return ("training.{model,node_group,nodes,parallel,expert_parallel.backend"
            + (",rollout.gpus_per_engine,rollout.ep}" if rollout else "}"))


def write_rl_config(args: argparse.Namespace, result: RLPlan) -> None:
    """Write the best GRPO plan: training layout, engines, batch shape and the mode (placement,
    rollout pool, overlap, off-policy steps: training.rollout), which the launcher turns into the
    Miles flags ``best.miles_args`` prints."""
    _need_node_group(args)
    best, rl = result.best, result.rl
    launcher = engine_mem_fraction(RLSetup(), result.system, best.placement, best.engine.gpus)
    if rl.mem_fraction is not None and abs(rl.mem_fraction - launcher) > 1e-9:
        # the launcher sets 0.7 colocated and leaves SGLang's own default on a pool of its own;
        # the config has no field for another share
        raise PlannerError(
            f"--rollout-mem-fraction {rl.mem_fraction:g}: the config has no field for the "
            f"engines' memory share, and the launcher runs {best.placement} engines with "
            f"{launcher:g}; drop --rollout-mem-fraction to plan what the launcher runs")
    start = new_config_text(args, result.system.name, best.nodes, result.model)
    notes: list[str] = []
    rollout = {"gpus_per_engine": best.engine.gpus, "ep": best.engine.ep}
    if best.placement != "colocated":
        rollout.update(placement=best.placement, nodes=best.rollout_nodes)
    if rl.mode != "on-policy":
        rollout.update(overlap=rl.mode, off_policy_steps=rl.staleness)
    write_config(args.write_config, best.training, result.model.key, result.system.name,
                 args.node_group, rollout=rollout, nodes=best.nodes,
                 grpo={"rollout_batch_size": rl.prompts,
                       "n_samples_per_prompt": rl.samples_per_prompt,
                       "global_batch_size": rl.train_batch,
                       "num_steps_per_rollout": rl.steps_per_rollout,
                       "rollout_max_response_len": rl.max_response_len},
                 new_file_text=start, notes=notes)
    say_created(args, start, notes)


def new_config_text(args: argparse.Namespace, instance_type: str, nodes: int,
                    model) -> str | None:
    """--write-config names a file that does not exist yet: the text that starts it (the README's
    first command), with the node group the plan runs on and the shared file system the plan
    sizes for ``model`` and --keep-local (written as training.checkpoint.keep_local); write_config merges the plan into it and creates the file only when the
    result validates. None when the file exists."""
    path = Path(args.write_config)
    if os.path.lexists(path):
        return None
    if not path.parent.is_dir():
        raise PlannerError(f"--write-config {path}: the directory {path.parent} does not exist; "
                           "create it or write the config elsewhere")
    fs = plan_for_model(model, keep_local=args.keep_local).cost.capacity_gib
    text = starter_config(path, instance_type, args.node_group, nodes,
                          fs if fs > SHARED_FS_MIN_CAPACITY_GIB else None)
    if args.keep_local != DEFAULT_KEEP_LOCAL:
        # the file system above is sized for K kept saves: the launcher's retention must keep K
        text += (f"training:\n  checkpoint:\n    keep_local: {args.keep_local}  # --keep-local: "
                 "the shared file system is sized for it\n")
    return text


def say_created(args: argparse.Namespace, start: str | None, notes: list[str]) -> None:
    if start is not None:
        path = Path(args.write_config)
        print(f"created {path}: a new config for environment {path.stem!r} (edit name, region "
              "and account before deploying)", file=sys.stderr)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
