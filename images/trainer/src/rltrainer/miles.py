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
(scripts/models/qwen3-30B-A3B.sh) set ``--moe-token-dispatcher-type alltoall`` in
MODEL_ARGS, so the launcher always writes the dispatcher type *after* the model
arguments: argparse keeps the last value.

The EFA/NCCL/NVSHMEM transport environment (FI_PROVIDER, NCCL_NET_PLUGIN,
NVSHMEM_REMOTE_TRANSPORT, NCCL_GIN_TYPE, ...) is not set here: the Kubernetes
manifests own it, because it depends on the instance type, not on the run.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .config import RunConfig

MILES_DIR = "/root/miles"  # where the Miles image clones Miles (docker/Dockerfile: /root/miles)
MEGATRON_DIR = "/root/Megatron-LM"  # Miles scripts put this on PYTHONPATH for the Ray job

# Same values as the Miles Qwen3-30B-A3B recipe unless noted; every one of them can be
# overridden by giving the flag in model.megatron_args (the launcher then leaves it out).
_SGLANG_MEM_FRACTION = "0.7"
_MAX_TOKENS_PER_GPU = "20480"


@dataclass(frozen=True)
class TrainCommand:
    """The process to run: argv, the environment it adds, and the working directory."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = MILES_DIR

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


def model_script_for(name: str, miles_dir: str = MILES_DIR) -> Path | None:
    """Miles' scripts/models/<name>.sh for ``model.name``, matched case-insensitively."""
    models = Path(miles_dir) / "scripts" / "models"
    if not models.is_dir():
        return None
    for script in sorted(models.glob("*.sh")):
        if script.stem.lower() == name.lower():
            return script
    return None


def load_model_args(script: Path) -> tuple[str, ...]:
    """The MODEL_ARGS array a Miles model script defines, exactly as bash expands it."""
    proc = subprocess.run(
        ["bash", "-c", 'set -e; source "$1" >/dev/null; printf "%s\\0" "${MODEL_ARGS[@]}"', "rltrainer", str(script)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode != 0:
        raise ModelArgsError(f"sourcing {script} failed: {proc.stderr.strip() or proc.returncode}")
    args = tuple(a for a in proc.stdout.split("\0") if a != "")
    if not args:
        raise ModelArgsError(f"{script} defines no MODEL_ARGS")
    return args


def resolve_model_args(cfg: RunConfig, miles_dir: str = MILES_DIR) -> tuple[tuple[str, ...], str]:
    """Model-architecture arguments and where they came from.

    ``model.megatron_args`` wins when given. When it is empty, Miles' own model script
    for ``model.name`` in the image (/root/miles/scripts/models/<name>.sh, e.g.
    qwen3-30B-A3B.sh for qwen3-30b-a3b) supplies MODEL_ARGS, so the run config does not
    have to repeat what the pinned Miles version already knows.
    """
    if cfg.model.megatron_args:
        return cfg.model.megatron_args, "model.megatron_args"
    script = model_script_for(cfg.model.name, miles_dir)
    if script is None:
        raise ModelArgsError(
            f"model.megatron_args is empty and {Path(miles_dir) / 'scripts' / 'models'} has no script named after "
            f"model.name {cfg.model.name!r}; copy the MODEL_ARGS of a Miles model script into model.megatron_args, "
            "or set model.name to one of the scripts' names"
        )
    return load_model_args(script), str(script)


def train_env(cfg: RunConfig) -> dict[str, str]:
    """Environment for the training processes (the Miles recipe's Ray runtime env)."""
    return {
        # Megatron is imported from its source checkout (Miles scripts: PYTHONPATH=/root/Megatron-LM/).
        "PYTHONPATH": MEGATRON_DIR,
        # Megatron overlaps TP communication with compute only with one hardware queue
        # (Miles scripts set it in the runtime env of every recipe).
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "PYTHONUNBUFFERED": "1",
    }


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

    # Cluster: training and rollout share every GPU (--colocate), as in the Miles recipe.
    a.add("--actor-num-nodes", par.nodes)
    a.add("--actor-num-gpus-per-node", par.gpus_per_node)
    a.add("--num-gpus-per-node", par.gpus_per_node)
    a.add("--colocate")

    # Model architecture (Miles scripts/models/*.sh MODEL_ARGS), verbatim.
    a.argv.extend(model_args)

    # Checkpoints (CKPT_ARGS). --load and --save share the local dir the S3 sync restores
    # into and uploads from; --load falls back to --ref-load while it holds nothing.
    a.add("--hf-checkpoint", hf_checkpoint)
    a.soft("--ref-load", hf_checkpoint)
    a.soft("--megatron-to-hf-mode", "bridge")
    a.add("--load", ck.local_dir)
    a.add("--save", ck.local_dir)
    a.add("--save-interval", ck.save_interval)

    # Rollout data and GRPO batch shape (ROLLOUT_ARGS).
    a.add("--prompt-data", prompt_data)
    a.add("--input-key", cfg.data.input_key)
    a.add("--label-key", cfg.data.label_key)
    a.soft("--apply-chat-template")
    a.soft("--rollout-shuffle")
    a.soft("--rm-type", "math")
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

    # Optimizer (OPTIMIZER_ARGS, minus the single-node CPU-Adam offload: Miles' multi-node
    # notes say to drop it because the distributed optimizer already shards the state).
    a.soft("--optimizer", "adam")
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
    a.add("--context-parallel-size", t.cp)
    a.add("--expert-model-parallel-size", t.ep)
    a.add("--expert-tensor-parallel-size", t.etp)
    a.soft("--recompute-granularity", "full")
    a.soft("--recompute-method", "uniform")
    a.soft("--recompute-num-layers", "1")
    a.soft("--use-dynamic-batch-size")
    a.soft("--max-tokens-per-gpu", _MAX_TOKENS_PER_GPU)

    # SGLang rollout engines (SGLANG_ARGS).
    a.add("--rollout-num-gpus-per-engine", ro.gpus_per_engine)
    a.soft("--sglang-mem-fraction-static", _SGLANG_MEM_FRACTION)

    # Numerics (MISC_ARGS).
    a.soft("--attention-dropout", "0.0")
    a.soft("--hidden-dropout", "0.0")
    a.soft("--accumulate-allreduce-grads-in-fp32")
    a.soft("--attention-softmax-in-fp32")
    a.soft("--attention-backend", "flash")

    # Expert-parallel backend, on both sides. Written last so it wins over the
    # --moe-token-dispatcher-type that Miles model scripts carry in MODEL_ARGS.
    if cfg.expert_parallel.uses_deepep:
        a.add("--moe-token-dispatcher-type", "flex")
        a.add("--moe-flex-dispatcher-backend", "deepep")
        a.add("--sglang-moe-a2a-backend", "deepep")
        # SGLang forces ep = engine size with DeepEP; say so explicitly (validated equal).
        a.add("--sglang-ep-size", ro.ep)
    else:
        a.add("--moe-token-dispatcher-type", "alltoall")
        if ro.ep > 1:
            a.add("--sglang-ep-size", ro.ep)
    return a.argv


def build_train_command(
    cfg: RunConfig,
    *,
    hf_checkpoint: str,
    prompt_data: str,
    miles_dir: str = MILES_DIR,
    python: str = "python3",
    ray_address: str | None = None,
    model_args: tuple[str, ...] | None = None,
) -> TrainCommand:
    """The full command: ``python3 train.py ...``, or wrapped in ``ray job submit``.

    Under a KubeRay RayJob the launcher *is* the Ray job (KubeRay submits the entrypoint),
    so it runs ``train.py`` directly, as the driver, the way Miles' Modal example does
    after ``ray start``. Given ``ray_address`` (the dashboard URL of a running cluster),
    it submits a job instead, exactly like the Miles recipe scripts. ``train.py`` is given
    by absolute path (Miles is pip-installed in the image), so no working_dir upload is needed.
    """
    args = miles_train_args(cfg, hf_checkpoint=hf_checkpoint, prompt_data=prompt_data, model_args=model_args)
    env = train_env(cfg)
    train = [python, f"{miles_dir.rstrip('/')}/train.py", *args]
    if ray_address is None:
        return TrainCommand(argv=train, env=env, cwd=miles_dir)
    runtime_env = json.dumps({"env_vars": env}, sort_keys=True)
    argv = [
        "ray",
        "job",
        "submit",
        f"--address={ray_address}",
        f"--runtime-env-json={runtime_env}",
        "--",
        *train,
    ]
    return TrainCommand(argv=argv, env={}, cwd=miles_dir)
