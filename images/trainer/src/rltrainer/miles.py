"""Turn a validated ``RunConfig`` into the Miles training command.

Argument names follow Miles' own launch scripts and docs (radixark/miles):

- scripts/run-qwen3-30B-A3B.sh: the Qwen3-30B-A3B GRPO recipe (CKPT_ARGS, ROLLOUT_ARGS,
  PERF_ARGS, GRPO_ARGS, OPTIMIZER_ARGS, SGLANG_ARGS, MISC_ARGS), which ends in
  ``ray job submit ... -- python3 train.py --actor-num-nodes ... --colocate ...``;
- docs/en/get_started/usage.md: ``--actor-num-nodes``/``--actor-num-gpus-per-node``/
  ``--colocate``/``--rollout-num-gpus-per-engine``; SGLang options are passed with a
  ``--sglang-`` prefix, e.g. ``--sglang-ep-size`` and ``--sglang-moe-a2a-backend deepep``;
  ``--load`` falls back to the reference weights when it holds no checkpoint yet;
- miles/backends/megatron_utils/megatron_config.py ``resolve_args_checkpoint_load``: with
  ``--megatron-to-hf-mode bridge`` a fresh run loads ``--ref-load`` (a Hugging Face
  directory) through Megatron-Bridge, so no torch_dist conversion step is needed.

Megatron's DeepEP switch is ``--moe-token-dispatcher-type flex`` plus
``--moe-flex-dispatcher-backend deepep`` (Megatron-LM core 0.15+; the older
``--moe-enable-deepep`` is deprecated and rewritten to this). Miles' model scripts
(scripts/models/qwen3-30B-A3B.py ``model_args()``) set ``--moe-token-dispatcher-type
alltoall``, so with DeepEP the launcher writes the dispatcher type *after* the model
arguments (argparse keeps the last value); with NCCL it leaves the model's own value.

Every flag here is checked against the real Miles v0.1.0 / Megatron-LM 37f9161 /
SGLang 0.5.16 argument definitions: offline in the kit's contract test
(tests/manifests/test_miles_contract.py) and inside the image at build time
(``rltrainer launch --dry-run --check-args``).

The EFA/NCCL/NVSHMEM transport environment (FI_PROVIDER, NCCL_NET_PLUGIN,
NVSHMEM_REMOTE_TRANSPORT, NCCL_GIN_TYPE, ...) is not set here: the Kubernetes
manifests own it, because it depends on the instance type, not on the run.
"""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .contract import TRAINER_RUNTIME_ENV, RunConfig, flag_value, model_pipeline_split
from .reservation import save_trigger_path

MILES_DIR = "/root/miles"  # where the Miles image clones Miles (docker/Dockerfile: /root/miles)

# Same values as the Miles Qwen3-30B-A3B recipe unless noted; every one of them can be
# overridden by giving the flag in model.megatron_args (the launcher then leaves it out).
_SGLANG_MEM_FRACTION = "0.7"


@dataclass(frozen=True)
class TrainCommand:
    """The process to run: argv, the environment it adds, and the working directory."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = MILES_DIR
    # What stops the training when signalling argv's process group does not reach it: for a
    # submitted Ray job, ``ray job stop``. Empty when argv is the training itself.
    stop_argv: tuple[str, ...] = ()

    def shell(self) -> str:
        """The command as one copy-pasteable shell line per argument group."""
        return " \\\n    ".join(_group_for_display(self.argv))


def _group_for_display(argv: list[str]) -> list[str]:
    """Join each ``--flag`` with its values so the dry-run prints one flag per line."""
    lines: list[str] = []
    current: list[str] = []
    for arg in argv:
        if arg.startswith("--") and current and arg != "--":
            lines.append(" ".join(shlex.quote(a) for a in current))
            current = []
        if arg == "--":
            if current:
                lines.append(" ".join(shlex.quote(a) for a in current))
            lines.append("--")
            current = []
            continue
        current.append(arg)
    if current:
        lines.append(" ".join(shlex.quote(a) for a in current))
    return lines


def _fmt_float(x: float) -> str:
    """Format a float the way a human writes it on a command line (1e-06, 0.2, 1)."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


class _Args:
    """Collects argv, skipping soft defaults the model arguments already give."""

    def __init__(self, model_args: tuple[str, ...]):
        self.model_args = model_args
        self.argv: list[str] = []

    def add(self, flag: str, *values: object) -> None:
        self.argv.append(flag)
        self.argv.extend(str(v) for v in values)

    def soft(self, flag: str, *values: object) -> None:
        if not any(a == flag or a.startswith(flag + "=") for a in self.model_args):
            self.add(flag, *values)


class ModelArgsError(RuntimeError):
    """The Megatron model-architecture arguments could not be determined."""


# The Miles release the image, the offline contract tests and this module agree on. Miles
# v0.1.0 (radixark/miles tag v0.1.0, commit 78527b9) keeps each model's Megatron flags in
# scripts/models/<name>.py as a ``model_args()`` function; the .sh scripts are gone since
# Miles #1910.
MILES_VERSION = "v0.1.0"
MODEL_SCRIPTS_DIR = "scripts/models"
# Miles' own loader for those scripts: it registers itself as ``model_args_utils`` (the
# module every model script imports) and, run as a program, prints one model's flags.
MODEL_ARGS_LOADER = "miles/utils/external_utils/model_args_utils.py"

# The kit's model keys (infra/planner/models.py) -> Miles v0.1.0 scripts/models/<name>.py.
# Models Miles has no script for (the Mixtral family) need model.megatron_args.
MILES_MODEL_SCRIPTS: dict[str, str] = {
    "qwen3-30b-a3b": "qwen3-30B-A3B",
    "qwen3-235b-a22b": "qwen3-235B-A22B",
    "deepseek-v3": "deepseek-v3",
    "kimi-k2": "kimi-k2",
}


def model_script_name(name: str, miles_dir: str = MILES_DIR) -> str | None:
    """Miles' script name for ``model.name``: the kit's key mapped, or a Miles script name as is."""
    models = Path(miles_dir) / MODEL_SCRIPTS_DIR
    for candidate in (MILES_MODEL_SCRIPTS.get(name.lower()), name):
        if candidate and (models / f"{candidate}.py").is_file():
            return candidate
    return None


def load_model_args(script_name: str, miles_dir: str = MILES_DIR, python: str = "python3") -> tuple[str, ...]:
    """What ``model_args()`` of Miles' scripts/models/<script_name>.py returns, split into argv.

    Runs Miles' own loader as a program (``python3 model_args_utils.py <name>``), so the
    script sees exactly the ``model_args_utils`` module Miles' launch scripts give it, and
    no model code runs inside the launcher. Miles' loader joins the flags with single
    spaces for shells that split on whitespace; splitting on whitespace gives them back.
    """
    loader = Path(miles_dir) / MODEL_ARGS_LOADER
    if not loader.is_file():
        raise ModelArgsError(f"{loader} does not exist: this Miles checkout is not Miles {MILES_VERSION} or later")
    try:
        proc = subprocess.run([python, str(loader), script_name], capture_output=True, text=True, timeout=60,
                              cwd=miles_dir)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelArgsError(f"running {loader} {script_name} failed: {exc}") from None
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise ModelArgsError(f"{loader} {script_name} failed: {detail}")
    args = tuple(proc.stdout.split())
    if not args:
        raise ModelArgsError(f"{Path(miles_dir) / MODEL_SCRIPTS_DIR / script_name}.py model_args() returned nothing")
    return args


def resolve_model_args(cfg: RunConfig, miles_dir: str = MILES_DIR, python: str = "python3") -> tuple[tuple[str, ...], str]:
    """Model-architecture arguments and where they came from.

    ``model.megatron_args`` wins when given. When it is empty, ``model_args()`` of Miles'
    own scripts/models/<script>.py in the image supplies them (``MILES_MODEL_SCRIPTS``
    maps the kit's model keys, e.g. qwen3-30b-a3b -> qwen3-30B-A3B), so the run config does
    not repeat what the pinned Miles version already knows.
    """
    if cfg.model.megatron_args:
        return cfg.model.megatron_args, "model.megatron_args"
    script = model_script_name(cfg.model.name, miles_dir)
    if script is None:
        models = Path(miles_dir) / MODEL_SCRIPTS_DIR
        raise ModelArgsError(
            f"model.name = {cfg.model.name!r}: model.megatron_args is empty and {models} has no model script for it "
            f"(kit models with a Miles script: {', '.join(sorted(MILES_MODEL_SCRIPTS))}). Fix: set model.name to one of "
            f"those or to a script name in {models} (without .py), or list the model's Megatron flags in "
            "model.megatron_args"
        )
    path = Path(miles_dir) / MODEL_SCRIPTS_DIR / f"{script}.py"
    return load_model_args(script, miles_dir, python), f"{path} model_args()"


def miles_argument_parser(train_args: list[str]):
    """The parser Miles' train.py uses, built the way Megatron's ``parse_args`` builds it.

    Miles v0.1.0 ``miles/utils/arguments.py parse_args``: Megatron-LM's
    ``megatron/training/arguments.py parse_args(extra_args_provider=add_miles_arguments)``,
    i.e. ``ArgumentParser(allow_abbrev=False)`` + ``add_megatron_arguments`` + Miles'
    own arguments, which include SGLang's ``ServerArgs`` with a ``--sglang-`` prefix. One
    Miles hook reads ``sys.argv`` while the parser is built, so it sees the real argv here.
    Needs ``megatron`` and ``miles`` importable (the image: PYTHONPATH=/root/Megatron-LM).
    """
    import argparse
    import contextlib
    import io
    import sys

    from megatron.training.arguments import add_megatron_arguments
    from miles.utils.arguments import get_miles_extra_args_provider

    saved = sys.argv
    sys.argv = ["train.py", *train_args]
    try:
        # That hook's own parse prints a usage message for a bad argv and carries on;
        # argument_errors reports the problem once, so keep the hook quiet.
        with contextlib.redirect_stderr(io.StringIO()):
            parser = argparse.ArgumentParser(description="Megatron-LM Arguments", allow_abbrev=False)
            add_megatron_arguments(parser)
            get_miles_extra_args_provider()(parser)
    finally:
        sys.argv = saved
    return parser


def argument_errors(parser, train_args: list[str]) -> str | None:
    """What ``parser`` says about ``train_args`` (unknown flag, bad value), or None if it parses."""
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(train_args)
    except SystemExit as exc:
        if exc.code:
            lines = [line for line in err.getvalue().strip().splitlines() if "error:" in line]
            return lines[-1].split("error:", 1)[1].strip() if lines else err.getvalue().strip() or str(exc.code)
    return None


def train_env(cfg: RunConfig) -> dict[str, str]:
    """Environment for the training processes (the Miles recipe's Ray runtime env): the
    contract's ``TRAINER_RUNTIME_ENV``, which the kit's RayJob sets too."""
    return dict(TRAINER_RUNTIME_ENV)


def miles_train_args(
    cfg: RunConfig, *, hf_checkpoint: str, prompt_data: str, model_args: tuple[str, ...] | None = None
) -> list[str]:
    """The arguments after ``python3 train.py``.

    ``hf_checkpoint`` and ``prompt_data`` are the local paths the launcher staged
    (equal to the config values when those are already local); ``model_args`` are the
    resolved architecture arguments (default: ``model.megatron_args``).
    """
    model_args = cfg.model.megatron_args if model_args is None else tuple(model_args)
    a = _Args(model_args)
    par = cfg.parallel
    t = par.training
    ro = par.rollout
    assert ro is not None
    g = cfg.grpo
    ck = cfg.checkpoint

    # Cluster. Colocated (the Miles recipe): training and rollout share every GPU (--colocate).
    # Disaggregated: the first training_nodes x gpus_per_node GPUs of Miles' placement group
    # train and the next --rollout-num-gpus generate (radixark/miles@78527b9102b3, tag v0.1.0,
    # miles/ray/placement_group.py:92-105, _get_placement_group_layout); without --colocate
    # nothing is offloaded between phases (same commit, miles/utils/arguments.py:3296-3331).
    a.add("--actor-num-nodes", par.training_nodes)
    a.add("--actor-num-gpus-per-node", par.gpus_per_node)
    a.add("--num-gpus-per-node", par.gpus_per_node)
    if ro.placement == "colocated":
        a.add("--colocate")
    else:
        a.add("--rollout-num-gpus", ro.nodes * par.gpus_per_node)
    # Asynchrony (run by train_async.py, see build_train_command). batch: the next rollout
    # generates while this one trains, and weights are pushed every K rollouts
    # (train_async.py:107-111; --update-weights-interval, miles/utils/arguments.py:780-784).
    # stream: --fully-async keeps the engines generating (arguments.py:494-503); groups more than
    # K weight versions old go back to the data buffer (--max-weight-staleness, :672-681); and
    # in_place keeps in-flight requests' KV cache across a weight update (:786-797), since Miles
    # refuses abort with --fully-async (:61).
    if ro.overlap == "batch":
        a.add("--update-weights-interval", ro.off_policy_steps)
    elif ro.overlap == "stream":
        a.add("--fully-async")
        a.add("--max-weight-staleness", ro.off_policy_steps)
        a.soft("--pause-generation-mode", "in_place")

    # Model architecture (Miles scripts/models/<name>.py model_args()), verbatim.
    a.argv.extend(model_args)

    # Checkpoints (CKPT_ARGS). --load and --save share the local dir the S3 sync restores
    # into and uploads from; --load falls back to --ref-load while it holds nothing.
    a.add("--hf-checkpoint", hf_checkpoint)
    a.soft("--ref-load", hf_checkpoint)
    a.soft("--megatron-to-hf-mode", "bridge")
    a.add("--load", ck.local_dir)
    a.add("--save", ck.local_dir)
    a.add("--save-interval", ck.save_interval)
    # A save on request, at the end of the running rollout: how the launcher saves before a
    # Capacity Block ends (rltrainer.reservation). Miles removes the file once it has saved.
    a.add("--save-trigger-sentinel", save_trigger_path(ck.local_dir))

    # Rollout data and GRPO batch shape (ROLLOUT_ARGS).
    a.add("--prompt-data", prompt_data)
    a.add("--input-key", cfg.data.input_key)
    a.add("--label-key", cfg.data.label_key)
    a.soft("--apply-chat-template")
    a.soft("--rollout-shuffle")
    # The recipe's rule-based reward (data.rm_type; DAPO math: deepscaler, as Miles' own recipe).
    a.add("--rm-type", cfg.data.rm_type)
    a.add("--num-rollout", g.num_rollout)
    a.add("--rollout-batch-size", g.rollout_batch_size)
    a.add("--n-samples-per-prompt", g.n_samples_per_prompt)
    a.add("--rollout-max-response-len", g.rollout_max_response_len)
    a.add("--rollout-temperature", _fmt_float(g.rollout_temperature))
    a.add("--global-batch-size", g.global_batch_size)
    a.add("--num-steps-per-rollout", g.num_steps_per_rollout)
    a.soft("--balance-data")

    # GRPO loss (GRPO_ARGS). The recipe passes --use-kl-loss even with a zero coefficient,
    # which loads a reference model for nothing; we ask for it only when the KL term counts.
    a.soft("--advantage-estimator", "grpo")
    if g.kl_loss_coef > 0:
        a.soft("--use-kl-loss")
    a.add("--kl-loss-coef", _fmt_float(g.kl_loss_coef))
    a.soft("--kl-loss-type", "low_var_kl")
    a.soft("--entropy-coef", "0.00")
    a.add("--eps-clip", _fmt_float(g.eps_clip))

    # Optimizer (OPTIMIZER_ARGS). CPU Adam only when asked (parallel.training.optimizer_cpu_offload):
    # Miles v0.1.0 docs/models/qwen/qwen3-moe.md, "Optimizer", keeps it for its H100 recipes
    # (run_qwen3_30b_a3b.py on 1 node, run_qwen3_235b_a22b.py) and drops it on Blackwell.
    a.soft("--optimizer", "adam")
    if t.optimizer_cpu_offload:
        a.add("--optimizer-cpu-offload")
        a.add("--overlap-cpu-optimizer-d2h-h2d")
        a.add("--use-precision-aware-optimizer")
    a.add("--lr", _fmt_float(g.lr))
    a.soft("--lr-decay-style", "constant")
    a.soft("--weight-decay", "0.1")
    a.soft("--adam-beta1", "0.9")
    a.soft("--adam-beta2", "0.98")

    # Megatron parallel layout and memory (PERF_ARGS).
    a.add("--tensor-model-parallel-size", t.tp)
    if t.tp > 1:
        a.soft("--sequence-parallel")  # Miles: "always enable SP when using TP"
    a.add("--pipeline-model-parallel-size", t.pp)
    # A pp that does not divide the layers: the trainer's uneven split (contract/pipeline.py), which
    # Megatron-LM 37f9161 needs (arguments.py:623-636) and Miles v0.1.0 hands to the bridge-built
    # model (miles/backends/megatron_utils/model_provider.py:84-87).
    split = model_pipeline_split(t.pp, model_args)
    if split is not None:
        a.argv.extend(split.megatron_args())
    a.add("--context-parallel-size", t.cp)
    a.add("--expert-model-parallel-size", t.ep)
    a.add("--expert-tensor-parallel-size", t.etp)
    # Activation recompute: the model arguments' own granularity, else parallel.training.recompute.
    chosen = recompute_granularity(model_args)
    granularity = chosen or (None if t.recompute == "none" else t.recompute)
    if granularity == "full":
        # One layer at a time. Megatron-LM 37f9161 refuses any --recompute-method with selective
        # (arguments.py:963-966) and TransformerConfig any --recompute-num-layers
        # (transformer_config.py:1282-1288); Miles v0.1.0 runs that validation at startup
        # (miles/utils/arguments.py:2711). With full and no method given, these are what
        # TransformerConfig asks for (:1269-1280).
        a.soft("--recompute-granularity", "full")
        a.soft("--recompute-method", "uniform")
        a.soft("--recompute-num-layers", "1")
    elif granularity == "selective" and chosen is None:
        a.add("--recompute-granularity", "selective")
        a.soft("--recompute-modules", *selective_recompute_modules(model_args))
    # Micro-batches of up to max_tokens_per_gpu tokens per GPU (contract DEFAULT_MAX_TOKENS_PER_GPU
    # says how Miles packs them): the value the kit's planner sized activation memory for.
    a.soft("--use-dynamic-batch-size")
    a.add("--max-tokens-per-gpu", t.max_tokens_per_gpu)

    # SGLang rollout engines (SGLANG_ARGS).
    a.add("--rollout-num-gpus-per-engine", ro.gpus_per_engine)
    if ro.placement == "colocated":
        # Engines on GPUs of their own keep SGLang's own default (about 0.82-0.9 of HBM,
        # sglang server_args.py _handle_gpu_memory_settings), as the planner assumes.
        a.soft("--sglang-mem-fraction-static", _SGLANG_MEM_FRACTION)

    # Numerics (MISC_ARGS).
    a.soft("--attention-dropout", "0.0")
    a.soft("--hidden-dropout", "0.0")
    a.soft("--accumulate-allreduce-grads-in-fp32")
    a.soft("--attention-softmax-in-fp32")
    a.soft("--attention-backend", "flash")

    # Expert-parallel backend, on both sides. With DeepEP it is written last so it wins
    # over the --moe-token-dispatcher-type that Miles' model_args() carries.
    if cfg.expert_parallel.uses_deepep:
        a.add("--moe-token-dispatcher-type", "flex")
        a.add("--moe-flex-dispatcher-backend", "deepep")
        a.add("--sglang-moe-a2a-backend", "deepep")
        # SGLang forces ep = engine size with DeepEP; say so explicitly (validated equal).
        a.add("--sglang-ep-size", ro.ep)
    else:
        a.soft("--moe-token-dispatcher-type", "alltoall")
        if ro.ep > 1:
            a.add("--sglang-ep-size", ro.ep)
    return a.argv


def recompute_granularity(model_args: tuple[str, ...] | list[str]) -> str | None:
    """The activation recompute granularity the model arguments choose, as Megatron reads them:
    ``--recompute-activations`` means selective whatever ``--recompute-granularity`` says
    (Megatron-LM 37f9161 megatron/training/arguments.py:430-431), else the last
    ``--recompute-granularity`` given (argparse keeps the last), else None."""
    if "--recompute-activations" in model_args:
        return "selective"
    return flag_value(model_args, "--recompute-granularity")


def selective_recompute_modules(model_args: tuple[str, ...] | list[str]) -> list[str]:
    """What selective recompute discards, as the kit's planner assumes (infra/planner/memory.py):
    the layer norms, the MoE activation when the experts run grouped GEMMs, and the MLA
    up-projections with multi-latent attention. Megatron-LM 37f9161 refuses moe_act without
    --moe-grouped-gemm and mla_up_proj without --multi-latent-attention
    (transformer_config.py:1316-1324), so each comes only with its flag."""
    modules = ["layernorm"]
    if "--moe-grouped-gemm" in model_args:
        modules.append("moe_act")
    if "--multi-latent-attention" in model_args:
        modules.append("mla_up_proj")
    return modules


def saves_data_cursor(model_args: tuple[str, ...] | list[str]) -> bool:
    """Whether Miles writes its data cursor (``rollout/global_dataset_state_dict_<N>.pt``) with every
    save, so that a save without one is not whole yet: unless the model arguments turn the global
    dataset off (radixark/miles@78527b9102b3, tag v0.1.0, miles/rollout/data_source.py:124-126
    returns without saving; the flag is miles/utils/arguments.py:1005-1008). The launcher and
    ``rltrainer checkpoint`` both ask this."""
    return "--disable-rollout-global-dataset" not in model_args


def entry_point(cfg: RunConfig) -> str:
    """Miles' driver for the run's mode: ``train.py`` (phases in turn) or ``train_async.py``
    (an overlapped rollout: Miles v0.1.0 train.py:23 refuses --fully-async, and only
    train_async.py starts the next rollout before training, train_async.py:79-81)."""
    ro = cfg.parallel.rollout
    return ro.entry_point if ro is not None else "train.py"


def build_train_command(
    cfg: RunConfig,
    *,
    hf_checkpoint: str,
    prompt_data: str,
    miles_dir: str = MILES_DIR,
    python: str = "python3",
    ray_address: str | None = None,
    model_args: tuple[str, ...] | None = None,
    start_rollout_id: int | None = None,
    submission_id: str | None = None,
) -> TrainCommand:
    """The full command: ``python3 train.py ...`` (``train_async.py`` for an overlapped rollout,
    ``entry_point``), or wrapped in ``ray job submit``.

    ``start_rollout_id`` (a resume: the saved rollout + 1) is passed as ``--start-rollout-id``
    and ``train.py`` runs through ``rltrainer.miles_resume``, because Miles v0.1.0's bridge
    mode would otherwise reset it to 0 (see that module).

    Under a KubeRay RayJob the launcher *is* the Ray job (KubeRay submits the entrypoint),
    so it runs ``train.py`` directly, as the driver, the way Miles' Modal example does
    after ``ray start``. Given ``ray_address`` (the dashboard URL of a running cluster),
    it submits a job instead, exactly like the Miles recipe scripts. ``train.py`` is given
    by absolute path (Miles is pip-installed in the image), so no working_dir upload is needed.
    The job is submitted under ``submission_id`` (default: a new ``rltrainer-<run_name>-...``), and
    ``stop_argv`` is the ``ray job stop`` that stops it.
    """
    args = miles_train_args(cfg, hf_checkpoint=hf_checkpoint, prompt_data=prompt_data, model_args=model_args)
    env = train_env(cfg)
    train = [python, f"{miles_dir.rstrip('/')}/{entry_point(cfg)}", *args]
    if start_rollout_id is not None:
        train[1:2] = ["-m", "rltrainer.miles_resume", train[1]]
        train += ["--start-rollout-id", str(start_rollout_id)]
    if ray_address is None:
        return TrainCommand(argv=train, env=env, cwd=miles_dir)
    runtime_env = json.dumps({"env_vars": env}, sort_keys=True)
    # `ray job submit` only follows the job's logs: signalling it leaves the job running on the
    # cluster, so a stop has to name the job to Ray. The Ray in the image is not pinned (Miles v0.1.0
    # requirements.txt:23 asks for `ray[default]`, any version) and no Ray source is among the pinned
    # ones; the flags are those of ray-project/ray python/ray/dashboard/modules/job/cli.py as the
    # code index holds it (commit 0718d5b): `submit --submission-id` ("If not provided, one will be
    # generated"; --job-id is its deprecated name) and `stop [--address] JOB_ID`, which waits for the
    # job to reach a terminal state unless --no-wait. Ray refuses a submission ID it already has
    # (job_manager.py submit_job: "Job with submission_id ... already exists"), so each launch gets
    # a new one.
    submission_id = submission_id or ray_submission_id(cfg)
    argv = [
        "ray",
        "job",
        "submit",
        f"--address={ray_address}",
        f"--submission-id={submission_id}",
        f"--runtime-env-json={runtime_env}",
        "--",
        *train,
    ]
    stop = ("ray", "job", "stop", f"--address={ray_address}", submission_id)
    return TrainCommand(argv=argv, env={}, cwd=miles_dir, stop_argv=stop)


def ray_submission_id(cfg: RunConfig) -> str:
    """A new Ray job submission ID for this run: ``rltrainer-<run_name>-<UTC time>-<6 hex>``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"rltrainer-{cfg.run_name or 'run'}-{stamp}-{secrets.token_hex(3)}"
