"""Validating the run config: ``parse_run_config`` (a parsed document) and ``load_run_config``
(a file) check every field and the cross-field rules below, and raise one ``ConfigError``
with every problem.

The cross-field rules mirror what Miles, Megatron and SGLang would otherwise reject
minutes into a multi-node start (or, worse, silently adjust):

- Miles' batch invariant: ``rollout_batch_size x n_samples_per_prompt =
  global_batch_size x num_steps_per_rollout`` (Miles ``--num-steps-per-rollout`` help:
  it "is equivalent to setting gbs as rollout_batch_size * n_samples_per_prompt //
  num_steps_per_rollout"; radixark/miles miles/utils/arguments.py).
- Megatron's parallel layout (megatron/core/parallel_state.py,
  ``initialize_model_parallel``): ``tp x pp x cp`` divides the world size, and the
  expert grid ``etp x ep x pp`` divides it too ("world_size is not divisible by
  expert_tensor_model_pipeline_parallel size"). With ``dp = world / (tp x pp x cp)``
  the second rule is the same as "ep x etp divides dp x cp x tp", which for cp = etp = 1
  is the familiar "ep divides dp x tp".
- Megatron's batch split (megatron/training/arguments.py ``validate_args``): the global
  batch is a multiple of micro-batch (1 in Miles) x data-parallel size.
- Megatron's split of the layers over pipeline stages (radixark/Megatron-LM 37f9161
  megatron/training/arguments.py:623-636 and megatron/core/transformer/transformer_config.py:
  1462-1521): every stage holds at least one layer, so pp is at most ``--num-layers``. When pp
  does not divide them the launcher passes the uneven split of ``pipeline.pipeline_split``
  (``--decoder-first/last-pipeline-num-layers``), except with ``--account-for-embedding/loss-in-
  pipeline-split``, which Megatron takes only with an even split of the layers plus one each.
- Megatron's flex dispatcher (the DeepEP path) needs expert-TP x EP > 1
  ("Flex token dispatcher requires TPxEP > 1", megatron/core/transformer/moe/token_dispatcher.py).
- SGLang with ``--moe-a2a-backend deepep`` overwrites its expert-parallel size with the
  engine's tensor-parallel size (sglang/srt/server_args.py ``_handle_a2a_moe``: "DeepEP MoE
  is enabled. The expert parallel size is adjusted to be the same as the tensor parallel
  size"); we refuse a config that says otherwise instead of letting SGLang change it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .names import DEFAULT_RM_TYPE, EP_BACKENDS, GIN_TRAINING_FIX, GIN_TRAINING_RULE, RM_TYPES, TRAINING_EP_BACKENDS
from .heads import engine_heads_problems
from .pipeline import pipeline_split_problems
from .problems import MISSING, ConfigError, Problem, close_match
from .reader import Reader
from .schema import (
    CHECKPOINT_KEYS,
    DATA_KEYS,
    DEFAULT_KEEP_LOCAL,
    DEFAULT_KEEP_S3,
    DEFAULT_LOCAL_DIR,
    DEFAULT_MAX_TOKENS_PER_GPU,
    DEFAULT_SAVE_INTERVAL,
    EXPERT_PARALLEL_KEYS,
    GRPO_KEYS,
    MODEL_KEYS,
    OVERLAPS,
    OWNED_FLAGS,
    PARALLEL_KEYS,
    PLACEMENTS,
    RECOMPUTES,
    ROLLOUT_KEYS,
    TOP_KEYS,
    TRAINING_KEYS,
    TRAINING_SIZE_KEYS,
    CheckpointConfig,
    DataConfig,
    ExpertParallelConfig,
    GrpoConfig,
    ModelConfig,
    ParallelConfig,
    RolloutParallel,
    RunConfig,
    TrainingParallel,
    flag_value,
)

_RUN_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# S3 bucket naming rules, simplified: 3-63 chars, lowercase letters, digits, dots, hyphens.
_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<key>.*))?$")


def _check_location(r: Reader, value: str | None, path: str, what: str, example: str) -> None:
    """A location is an absolute local path or an s3:// URI."""
    if value is None:
        return
    if value.startswith("s3://"):
        if not _S3_URI.match(value):
            r.add(path, value, "is not a valid s3:// URI", f"write it as s3://<bucket>/<key>, e.g. {example}")
        return
    if not value.startswith("/"):
        r.add(path, value, f"must be an absolute local path or an s3:// URI ({what})", f"use e.g. {example}")


def parse_run_config(data: Any, source: str = "run config") -> RunConfig:
    """Validate a parsed YAML document and build a ``RunConfig``; raise ``ConfigError``."""
    r = Reader()
    if not isinstance(data, dict):
        raise ConfigError(
            [Problem("(document)", data if data is not None else MISSING, "the run config must be a YAML mapping", "start from the example in images/trainer/README.md")],
            source,
        )
    r.mapping(data, "", TOP_KEYS)

    run_name = r.string(data, "run_name", "", example="qwen3-30b-a3b-grpo")
    if run_name is not None and (len(run_name) > 63 or not _RUN_NAME.match(run_name)):
        r.add(
            "run_name",
            run_name,
            "must be a DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)",
            "use e.g. `qwen3-30b-a3b-grpo`",
        )

    # model
    model = None
    m = r.mapping(data.get("model", MISSING), "model", MODEL_KEYS)
    if m is not None:
        name = r.string(m, "name", "model", example="qwen3-30b-a3b")
        hf = r.string(m, "hf_checkpoint", "model", example="/models/Qwen3-30B-A3B")
        _check_location(r, hf, "model.hf_checkpoint", "Hugging Face weights", "/models/Qwen3-30B-A3B or s3://my-bucket/models/Qwen3-30B-A3B/")
        margs = m.get("megatron_args", [])
        margs_ok: tuple[str, ...] | None = None
        if margs is None:
            margs = []
        if not isinstance(margs, list):
            r.add("model.megatron_args", margs, "must be a list of strings", "write it as a YAML list, e.g. `megatron_args: [--num-layers, \"48\"]`")
        else:
            bad = False
            for i, a in enumerate(margs):
                if isinstance(a, bool) or not isinstance(a, (str, int, float)):
                    r.add(f"model.megatron_args[{i}]", a, "must be a string", "quote each flag and value, e.g. \"--num-layers\", \"48\"")
                    bad = True
            if not bad:
                # Numbers are accepted and stringified: YAML turns `- 48` into an int.
                margs_ok = tuple(a if isinstance(a, str) else str(a) for a in margs)
                for i, a in enumerate(margs_ok):
                    flag = a.split("=", 1)[0]
                    if flag in OWNED_FLAGS:
                        r.add(
                            f"model.megatron_args[{i}]",
                            a,
                            f"the launcher sets {flag} from {OWNED_FLAGS[flag]}",
                            f"remove it from megatron_args and set {OWNED_FLAGS[flag]} instead",
                        )
        if name is not None and hf is not None and margs_ok is not None:
            model = ModelConfig(name=name, hf_checkpoint=hf, megatron_args=margs_ok)

    # checkpoint
    checkpoint = None
    c = r.mapping(data.get("checkpoint", MISSING), "checkpoint", CHECKPOINT_KEYS)
    if c is not None:
        s3 = r.string(c, "s3_uri", "checkpoint", example="s3://my-bucket/checkpoints/<run_name>/")
        if s3 is not None and not (s3.startswith("s3://") and _S3_URI.match(s3) and (_S3_URI.match(s3).group("key") or "")):
            r.add("checkpoint.s3_uri", s3, "must be an s3:// URI with a bucket and a prefix", "use e.g. s3://my-bucket/checkpoints/qwen3-30b-a3b-grpo/")
            s3 = None
        local = r.string(c, "local_dir", "checkpoint", default=DEFAULT_LOCAL_DIR, example=DEFAULT_LOCAL_DIR)
        if local is not None and not local.startswith("/"):
            r.add("checkpoint.local_dir", local, "must be an absolute path", f"use e.g. {DEFAULT_LOCAL_DIR}")
            local = None
        interval = r.integer(c, "save_interval", "checkpoint", default=DEFAULT_SAVE_INTERVAL)
        keep = r.integer(c, "keep_local", "checkpoint", default=DEFAULT_KEEP_LOCAL)
        keep_s3 = r.integer(c, "keep_s3", "checkpoint", default=DEFAULT_KEEP_S3, minimum=0)
        if None not in (s3, local, interval, keep, keep_s3):
            checkpoint = CheckpointConfig(s3_uri=s3 if s3.endswith("/") else s3 + "/", local_dir=local,
                                          save_interval=interval, keep_local=keep, keep_s3=keep_s3)

    # data
    data_cfg = None
    d = r.mapping(data.get("data", MISSING), "data", DATA_KEYS)
    if d is not None:
        prompt = r.string(d, "prompt_data", "data", example="s3://my-bucket/datasets/dapo-math-17k.jsonl")
        _check_location(r, prompt, "data.prompt_data", "a .jsonl prompt file", "/data/dapo-math-17k.jsonl or s3://my-bucket/datasets/dapo-math-17k.jsonl")
        if prompt is not None and prompt.startswith("s3://") and prompt.endswith("/"):
            r.add("data.prompt_data", prompt, "must name one .jsonl object, not a prefix", "point it at the file, e.g. s3://my-bucket/datasets/dapo-math-17k.jsonl")
            prompt = None
        ik = r.string(d, "input_key", "data", default="prompt", example="prompt")
        lk = r.string(d, "label_key", "data", default="label", example="label")
        rm = r.string(d, "rm_type", "data", default=DEFAULT_RM_TYPE, example=DEFAULT_RM_TYPE)
        if rm is not None and rm.removeprefix("boxed_") not in RM_TYPES:
            close = close_match(rm, RM_TYPES)
            r.add("data.rm_type", rm, f"Miles v0.1.0 has no such rule-based reward (one of {', '.join(RM_TYPES)}, "
                  "optionally with a boxed_ prefix)", f"use `{close}`" if close else
                  f"use `{DEFAULT_RM_TYPE}` for DAPO-style math data")
            rm = None
        if prompt is not None and ik is not None and lk is not None and rm is not None:
            data_cfg = DataConfig(prompt_data=prompt, input_key=ik, label_key=lk, rm_type=rm)

    # grpo
    grpo = None
    g = r.mapping(data.get("grpo", MISSING), "grpo", GRPO_KEYS)
    if g is not None:
        vals = {
            "num_rollout": r.integer(g, "num_rollout", "grpo"),
            "rollout_batch_size": r.integer(g, "rollout_batch_size", "grpo"),
            "n_samples_per_prompt": r.integer(g, "n_samples_per_prompt", "grpo"),
            "global_batch_size": r.integer(g, "global_batch_size", "grpo"),
            "num_steps_per_rollout": r.integer(g, "num_steps_per_rollout", "grpo", default=1),
            "rollout_max_response_len": r.integer(g, "rollout_max_response_len", "grpo", default=8192),
            "rollout_temperature": r.number(g, "rollout_temperature", "grpo", default=1.0, exclusive_minimum=0.0),
            "lr": r.number(g, "lr", "grpo", default=1.0e-6, exclusive_minimum=0.0),
            "kl_loss_coef": r.number(g, "kl_loss_coef", "grpo", default=0.0, minimum=0.0),
            "eps_clip": r.number(g, "eps_clip", "grpo", default=0.2, exclusive_minimum=0.0, exclusive_maximum=1.0),
        }
        if all(v is not None for v in vals.values()):
            grpo = GrpoConfig(**vals)  # type: ignore[arg-type]

    # parallel
    parallel = None
    p = r.mapping(data.get("parallel", MISSING), "parallel", PARALLEL_KEYS)
    if p is not None:
        nodes = r.integer(p, "nodes", "parallel")
        gpn = r.integer(p, "gpus_per_node", "parallel")
        training = None
        t = r.mapping(p.get("training", {}), "parallel.training", TRAINING_KEYS)
        if t is not None:
            tv: dict = {k: r.integer(t, k, "parallel.training", default=1) for k in TRAINING_SIZE_KEYS}
            tv["optimizer_cpu_offload"] = r.boolean(t, "optimizer_cpu_offload", "parallel.training")
            tv["recompute"] = _choice(r, t, "recompute", RECOMPUTES, "full", "parallel.training")
            tv["max_tokens_per_gpu"] = r.integer(t, "max_tokens_per_gpu", "parallel.training",
                                                 default=DEFAULT_MAX_TOKENS_PER_GPU)
            if all(v is not None for v in tv.values()):
                training = TrainingParallel(**tv)  # type: ignore[arg-type]
        rollout = None
        ro = r.mapping(p.get("rollout", {}), "parallel.rollout", ROLLOUT_KEYS)
        if ro is not None:
            gpe = r.integer(ro, "gpus_per_engine", "parallel.rollout", default=gpn if gpn is not None else 1)
            rep = r.integer(ro, "ep", "parallel.rollout", default=1)
            mode = _rollout_mode(r, ro)
            if gpe is not None and rep is not None and mode is not None:
                rollout = RolloutParallel(gpus_per_engine=gpe, ep=rep, **mode)
        if nodes is not None and gpn is not None and training is not None and rollout is not None:
            parallel = ParallelConfig(nodes=nodes, gpus_per_node=gpn, training=training, rollout=rollout)

    # expert_parallel
    ep_cfg = None
    e = r.mapping(data.get("expert_parallel", {}), "expert_parallel", EXPERT_PARALLEL_KEYS)
    if e is not None:
        backend = r.string(e, "backend", "expert_parallel", default="nccl", example="nccl")
        if backend is not None and backend not in EP_BACKENDS:
            close = close_match(backend, EP_BACKENDS)
            r.add(
                "expert_parallel.backend",
                backend,
                f"must be one of {', '.join(EP_BACKENDS)}",
                f"use `{close}`" if close else "use `nccl` unless the fabric gate measured DeepEP faster",
            )
        elif backend is not None and backend not in TRAINING_EP_BACKENDS:
            r.add("expert_parallel.backend", backend, GIN_TRAINING_RULE, GIN_TRAINING_FIX)
        elif backend is not None:
            ep_cfg = ExpertParallelConfig(backend=backend)

    _cross_checks(r, model, grpo, parallel, ep_cfg)

    if r.problems:
        raise ConfigError(r.problems, source)
    assert run_name and model and checkpoint and data_cfg and grpo and parallel and ep_cfg
    return RunConfig(
        run_name=run_name,
        model=model,
        checkpoint=checkpoint,
        data=data_cfg,
        grpo=grpo,
        parallel=parallel,
        expert_parallel=ep_cfg,
    )


def _choice(r: Reader, data: dict, key: str, choices: tuple[str, ...], default: str,
            section: str = "parallel.rollout") -> str | None:
    value = data.get(key, default)
    if value not in choices:
        r.add(f"{section}.{key}", value, f"must be one of {', '.join(choices)}",
              f"use `{close_match(str(value), choices) or default}`")
        return None
    return value


def _rollout_mode(r: Reader, ro: dict) -> dict | None:
    """placement, nodes, overlap and off_policy_steps of parallel.rollout, checked together: the
    combinations Miles v0.1.0 refuses at start-up are refused here (train_async.py:23 asserts no
    --colocate; miles/utils/arguments.py:59 refuses --fully-async with --colocate)."""
    placement = _choice(r, ro, "placement", PLACEMENTS, "colocated")
    overlap = _choice(r, ro, "overlap", OVERLAPS, "none")
    nodes = r.integer(ro, "nodes", "parallel.rollout", default=0, minimum=0)
    steps = r.integer(ro, "off_policy_steps", "parallel.rollout", default=0, minimum=0)
    if None in (placement, overlap, nodes, steps):
        return None
    bad = len(r.problems)
    if placement == "colocated" and nodes:
        r.add("parallel.rollout.nodes", nodes, "a colocated rollout runs on the training GPUs and has no pool of its own",
              "remove parallel.rollout.nodes (or set it to 0), or set parallel.rollout.placement: disaggregated")
    if placement == "disaggregated" and not nodes:
        r.add("parallel.rollout.nodes", nodes, "a disaggregated rollout needs its own nodes (Miles --rollout-num-gpus)",
              "set parallel.rollout.nodes to the nodes of parallel.nodes that generate, at least 1")
    if overlap != "none" and placement == "colocated":
        r.add("parallel.rollout.overlap", overlap,
              "an overlapped rollout runs Miles' train_async.py, which refuses --colocate (train_async.py:23; "
              "--fully-async too: miles/utils/arguments.py:59)",
              "set parallel.rollout.placement: disaggregated with parallel.rollout.nodes, or overlap: none")
    if overlap == "none" and steps:
        r.add("parallel.rollout.off_policy_steps", steps, "generation can run ahead of training only when it overlaps it",
              "set parallel.rollout.overlap to batch or stream, or off_policy_steps to 0")
    if overlap != "none" and not steps:
        r.add("parallel.rollout.off_policy_steps", steps, f"overlap {overlap} runs generation at least one step ahead",
              "set off_policy_steps to 1 or more (Miles --update-weights-interval / --max-weight-staleness)")
    if len(r.problems) > bad:
        return None
    return {"placement": placement, "nodes": nodes, "overlap": overlap, "off_policy_steps": steps}


def _up_to(n: int) -> str:
    return "1" if n == 1 else f"1 to {n}"


def _divisors(n: int, limit: int = 12) -> list[int]:
    """Up to ``limit`` of the smallest divisors of ``n``, for fix texts. Scans at most a million
    candidates, so a huge GPU count in a bad config cannot hang validation."""
    small, large = [], []
    d = 1
    while d * d <= n and d <= 1_000_000 and len(small) < limit:
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
        d += 1
    return (small + large[::-1])[:limit]


def _cross_checks(
    r: Reader,
    model: ModelConfig | None,
    grpo: GrpoConfig | None,
    parallel: ParallelConfig | None,
    ep_cfg: ExpertParallelConfig | None,
) -> None:
    if grpo is not None:
        produced = grpo.rollout_batch_size * grpo.n_samples_per_prompt
        consumed = grpo.global_batch_size * grpo.num_steps_per_rollout
        if produced != consumed:
            if produced % grpo.num_steps_per_rollout == 0:
                fix = (
                    f"set grpo.global_batch_size to {produced // grpo.num_steps_per_rollout} "
                    f"({grpo.rollout_batch_size} x {grpo.n_samples_per_prompt} / {grpo.num_steps_per_rollout}), "
                    "or change rollout_batch_size, n_samples_per_prompt or num_steps_per_rollout so the two products match"
                )
            else:
                fix = (
                    f"pick a num_steps_per_rollout that divides {produced} (e.g. 1) and set "
                    f"global_batch_size = {produced} / num_steps_per_rollout"
                )
            r.add(
                "grpo.global_batch_size",
                grpo.global_batch_size,
                "Miles needs rollout_batch_size x n_samples_per_prompt = global_batch_size x num_steps_per_rollout, "
                f"but {grpo.rollout_batch_size} x {grpo.n_samples_per_prompt} = {produced} "
                f"and {grpo.global_batch_size} x {grpo.num_steps_per_rollout} = {consumed}",
                fix,
            )

    if parallel is None:
        return
    if parallel.rollout_nodes >= parallel.nodes:
        r.add(
            "parallel.rollout.nodes",
            parallel.rollout_nodes,
            f"the rollout pool is part of the run's {parallel.nodes} node(s) (parallel.nodes), and at least one must train",
            f"use {_up_to(parallel.nodes - 1)}, or raise parallel.nodes" if parallel.nodes > 1
            else "raise parallel.nodes to 2 or more, or use placement colocated",
        )
        return
    world = parallel.world_size
    count = ("nodes x gpus_per_node" if not parallel.rollout_nodes
             else "(nodes - rollout.nodes) x gpus_per_node, the training GPUs")
    t = parallel.training
    layout_ok = True
    if world % (t.tp * t.pp * t.cp) != 0:
        layout_ok = False
        r.add(
            "parallel.training",
            {"tp": t.tp, "pp": t.pp, "cp": t.cp},
            f"Megatron needs tp x pp x cp to divide the GPU count ({count} = {world}), "
            f"but {t.tp} x {t.pp} x {t.cp} = {t.tp * t.pp * t.cp}",
            f"choose tp, pp and cp whose product divides {world}",
        )
    expert_grid = t.etp * t.ep * t.pp
    if world % expert_grid != 0:
        layout_ok = False
        room = world // (t.etp * t.pp) if world % (t.etp * t.pp) == 0 else None
        fix = (
            f"use an ep that divides {room} (one of {', '.join(map(str, _divisors(room)))})"
            if room
            else f"make etp x pp divide {world} first, then pick ep"
        )
        dp_x = f"{world // (t.pp)}" if world % t.pp == 0 else "?"
        r.add(
            "parallel.training.ep",
            t.ep,
            f"Megatron needs etp x ep x pp to divide the GPU count ({world}), i.e. ep x etp must divide "
            f"data-parallel x context-parallel x tp = {dp_x}, but {t.etp} x {t.ep} x {t.pp} = {expert_grid}",
            fix,
        )
    if model is not None:
        r.problems.extend(expert_count_problems(t, model.megatron_args, "model.megatron_args"))
        r.problems.extend(pipeline_split_problems(t, model.megatron_args, "model.megatron_args"))
    if layout_ok and grpo is not None:
        dp = parallel.data_parallel_size
        if grpo.global_batch_size % dp != 0:
            up = -(-grpo.global_batch_size // dp) * dp
            r.add(
                "grpo.global_batch_size",
                grpo.global_batch_size,
                f"Megatron needs global_batch_size to be a multiple of the data-parallel size {dp} "
                f"({world} GPUs / (tp {t.tp} x pp {t.pp} x cp {t.cp}))",
                f"use a multiple of {dp}, e.g. {up}, and keep the Miles batch invariant",
            )

    ro = parallel.rollout
    if ro is not None:
        if ro.placement == "colocated":
            engines_on, where = world, f"rollout is colocated with training on all {world} GPUs"
        else:
            engines_on = ro.nodes * parallel.gpus_per_node
            where = f"rollout has its own {engines_on} GPUs (parallel.rollout.nodes {ro.nodes} x {parallel.gpus_per_node})"
        if engines_on % ro.gpus_per_engine != 0:
            r.add(
                "parallel.rollout.gpus_per_engine",
                ro.gpus_per_engine,
                f"{where} and each SGLang engine takes gpus_per_engine of them, "
                f"so gpus_per_engine must divide {engines_on}",
                f"use a divisor of {engines_on}, e.g. {parallel.gpus_per_node}",
            )
        if ro.gpus_per_engine % ro.ep != 0:
            r.add(
                "parallel.rollout.ep",
                ro.ep,
                f"SGLang splits each engine's experts over ep of its {ro.gpus_per_engine} GPUs, so ep must divide gpus_per_engine",
                f"use a divisor of {ro.gpus_per_engine}, e.g. {ro.gpus_per_engine}",
            )
        elif ep_cfg is not None and ep_cfg.uses_deepep and ro.ep != ro.gpus_per_engine:
            r.add(
                "parallel.rollout.ep",
                ro.ep,
                f"with expert_parallel.backend {ep_cfg.backend}, SGLang's DeepEP path forces the expert-parallel size "
                f"to the engine size ({ro.gpus_per_engine})",
                f"set parallel.rollout.ep to {ro.gpus_per_engine}",
            )
        if model is not None:
            r.problems.extend(engine_heads_problems(ro, model.megatron_args, "model.megatron_args"))

    if ep_cfg is not None and ep_cfg.uses_deepep and t.etp * t.ep <= 1:
        r.add(
            "parallel.training.ep",
            t.ep,
            f"Megatron's flex dispatcher (DeepEP) needs expert-TP x EP > 1, but etp {t.etp} x ep {t.ep} = {t.etp * t.ep}",
            "raise parallel.training.ep, or use expert_parallel.backend nccl for a model without expert parallelism",
        )


def expert_count_problems(t: TrainingParallel, model_args: tuple[str, ...] | list[str], where: str) -> list[Problem]:
    """Megatron puts num_experts / ep experts on each rank, so ep must divide num_experts."""
    raw = flag_value(model_args, "--num-experts")
    if raw is None or not raw.isdigit() or int(raw) % t.ep == 0:
        return []
    experts = int(raw)
    return [Problem(
        "parallel.training.ep",
        t.ep,
        f"Megatron places num_experts / ep experts on each rank, and {where} sets --num-experts {experts}, "
        f"which {t.ep} does not divide",
        f"choose an ep that divides {experts}",
    )]


class _RunConfigLoader(yaml.SafeLoader):
    """SafeLoader that reads ``1e-6`` as the number it is (YAML 1.1, PyYAML's, wants a dot and
    a signed exponent, so ``lr: 1e-6`` was the string "1e-6") and refuses a key given twice
    (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(Exception):
    def __init__(self, key, mark):
        super().__init__(key)
        self.key, self.mark = key, mark


# The resolver lists are shared with SafeLoader's until copied: adding to them in place would
# change every yaml.safe_load in the process.
_RunConfigLoader.yaml_implicit_resolvers = {
    first: list(resolvers) for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_RunConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


class RunConfigDumper(yaml.SafeDumper):
    """SafeDumper for writing a run.yaml this loader reads back as written: it resolves plain
    scalars with the loader's resolvers, so text the loader would read as a number (a run name
    "1e-6") is quoted. yaml.safe_dump writes it plain (PyYAML's own resolvers read it as text)."""


# The same dict as the loader's (not a copy): what the loader reads as a number, this quotes.
RunConfigDumper.yaml_implicit_resolvers = _RunConfigLoader.yaml_implicit_resolvers


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate the run config YAML at ``path``."""
    path = Path(path)
    source = str(path)

    def refuse(what: str, value: Any, rule: str, fix: str) -> ConfigError:
        return ConfigError([Problem(what, value, rule, fix)], source)

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise refuse("(file)", source, "the run config file does not exist",
                     "mount the run ConfigMap at this path or pass --config with the right path") from None
    except IsADirectoryError:
        raise refuse("(file)", source, "is a directory, not a run config file",
                     "pass --config with the path of the run.yaml file itself") from None
    except UnicodeDecodeError as exc:
        raise refuse("(file)", source, f"is not UTF-8 text ({exc.reason} at byte {exc.start})",
                     "save the run config as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_RunConfigLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as exc:
        where = f"line {exc.mark.line + 1}, column {exc.mark.column + 1}"
        raise refuse("(document)", where, f"gives key {exc.key!r} twice (only one value can count)",
                     "keep one of them") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"
        raise refuse("(document)", where, f"is not valid YAML ({getattr(exc, 'problem', exc)})",
                     "fix the YAML syntax at that position") from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit limit
        raise refuse("(document)", source, f"holds a value that cannot be read ({exc})",
                     "check the numbers in it") from None
    return parse_run_config(data, source)


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/key`` into (bucket, key)."""
    m = _S3_URI.match(uri)
    if not m:
        raise ValueError(f"not an s3:// URI: {uri!r}")
    return m.group("bucket"), m.group("key") or ""
