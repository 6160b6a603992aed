"""The run config: the YAML the RL job mounts at /etc/rltrainer/run.yaml.

Another engineer renders this file from the kit config, so the schema here is a
contract: the keys are exactly those in ``SCHEMA_EXAMPLE`` below, unknown keys are
errors, and every problem is reported at once. Each problem names the field path,
the bad value, the rule it breaks and how to fix it; tests assert the exact text.

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
- Megatron's flex dispatcher (the DeepEP path) needs expert-TP x EP > 1
  ("Flex token dispatcher requires TPxEP > 1", megatron/core/transformer/moe/token_dispatcher.py).
- SGLang with ``--moe-a2a-backend deepep`` overwrites its expert-parallel size with the
  engine's tensor-parallel size (sglang/srt/server_args.py ``_handle_a2a_moe``: "DeepEP MoE
  is enabled. The expert parallel size is adjusted to be the same as the tensor parallel
  size"); we refuse a config that says otherwise instead of letting SGLang change it.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SCHEMA_EXAMPLE = """\
run_name: qwen3-30b-a3b-grpo
model:
  name: qwen3-30b-a3b
  hf_checkpoint: /models/Qwen3-30B-A3B
  megatron_args: []
checkpoint:
  s3_uri: s3://my-bucket/checkpoints/qwen3-30b-a3b-grpo/
  local_dir: /checkpoints
  save_interval: 20
data:
  prompt_data: s3://my-bucket/datasets/dapo-math-17k.jsonl
  input_key: prompt
  label_key: label
grpo:
  num_rollout: 1000
  rollout_batch_size: 32
  n_samples_per_prompt: 8
  global_batch_size: 256
  num_steps_per_rollout: 1
  rollout_max_response_len: 8192
  rollout_temperature: 1.0
  lr: 1.0e-6
  kl_loss_coef: 0.0
  eps_clip: 0.2
parallel:
  nodes: 2
  gpus_per_node: 8
  training: {tp: 4, pp: 1, cp: 1, ep: 8, etp: 1}
  rollout: {gpus_per_engine: 8, ep: 8}
expert_parallel:
  backend: nccl
"""

EP_BACKENDS = ("nccl", "deepep-nvshmem", "deepep-gin")
# Backends a training run may use. deepep-gin (DeepEP V2 over NCCL GIN) is benchmark-only for
# now: the pinned Megatron-LM's flex dispatcher imports DeepEP V1's ``Buffer``
# (megatron-lm 37f9161, megatron/core/transformer/moe/fused_a2a.py: ``from deep_ep import
# Buffer``) and knows nothing of V2's ``ElasticBuffer``.
TRAINING_EP_BACKENDS = ("nccl", "deepep-nvshmem")
GIN_TRAINING_RULE = (
    "DeepEP V2 over NCCL GIN cannot train yet: the Megatron-LM that Miles v0.1.0 pins (37f9161) drives "
    "DeepEP V1's Buffer in its flex dispatcher (megatron/core/transformer/moe/fused_a2a.py) and does not "
    "support V2's ElasticBuffer"
)
GIN_TRAINING_FIX = (
    "use `deepep-nvshmem` (DeepEP V1 over NVSHMEM/libfabric) or `nccl`; the fabric gate may still "
    "benchmark deepep-gin"
)
DEFAULT_LOCAL_DIR = "/checkpoints"
DEFAULT_SAVE_INTERVAL = 20

# Flags the launcher derives from the config. Passing one of them again through
# model.megatron_args would silently fight the config (argparse keeps the last one),
# so it is an error with a pointer to the config field that owns the value.
OWNED_FLAGS: dict[str, str] = {
    "--actor-num-nodes": "parallel.nodes",
    "--actor-num-gpus-per-node": "parallel.gpus_per_node",
    "--num-gpus-per-node": "parallel.gpus_per_node",
    "--tensor-model-parallel-size": "parallel.training.tp",
    "--pipeline-model-parallel-size": "parallel.training.pp",
    "--context-parallel-size": "parallel.training.cp",
    "--expert-model-parallel-size": "parallel.training.ep",
    "--expert-tensor-parallel-size": "parallel.training.etp",
    "--rollout-num-gpus-per-engine": "parallel.rollout.gpus_per_engine",
    "--sglang-ep-size": "parallel.rollout.ep",
    "--sglang-moe-a2a-backend": "expert_parallel.backend",
    "--moe-flex-dispatcher-backend": "expert_parallel.backend",
    "--moe-enable-deepep": "expert_parallel.backend",
    "--hf-checkpoint": "model.hf_checkpoint",
    "--load": "checkpoint.local_dir",
    "--save": "checkpoint.local_dir",
    "--save-interval": "checkpoint.save_interval",
    "--prompt-data": "data.prompt_data",
    "--input-key": "data.input_key",
    "--label-key": "data.label_key",
    "--num-rollout": "grpo.num_rollout",
    "--rollout-batch-size": "grpo.rollout_batch_size",
    "--n-samples-per-prompt": "grpo.n_samples_per_prompt",
    "--global-batch-size": "grpo.global_batch_size",
    "--num-steps-per-rollout": "grpo.num_steps_per_rollout",
    "--rollout-max-response-len": "grpo.rollout_max_response_len",
    "--rollout-temperature": "grpo.rollout_temperature",
    "--lr": "grpo.lr",
    "--kl-loss-coef": "grpo.kl_loss_coef",
    "--eps-clip": "grpo.eps_clip",
}

_RUN_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# S3 bucket naming rules, simplified: 3-63 chars, lowercase letters, digits, dots, hyphens.
_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<key>.*))?$")


class _Missing:
    def __repr__(self) -> str:  # pragma: no cover - debugging aid only
        return "MISSING"


MISSING: Any = _Missing()


def render_value(value: Any) -> str:
    """Render a config value the way it reads in YAML-ish JSON (strings quoted)."""
    if value is MISSING:
        return "(missing)"
    try:
        return json.dumps(value, sort_keys=False)
    except TypeError:
        return repr(value)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the run config."""

    path: str
    value: Any
    rule: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path} = {render_value(self.value)}: {self.rule}. Fix: {self.fix}."


class ConfigError(ValueError):
    """Every problem found in a run config, reported together."""

    def __init__(self, problems: list[Problem], source: str = "run config"):
        self.problems = list(problems)
        self.source = source
        count = len(self.problems)
        lines = [f"{source}: {count} problem{'s' if count != 1 else ''}:"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


# ----------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelConfig:
    name: str
    hf_checkpoint: str
    megatron_args: tuple[str, ...] = ()

    def megatron_flag_value(self, flag: str) -> str | None:
        """The value given to ``flag`` in megatron_args (``--flag v`` or ``--flag=v``)."""
        return flag_value(self.megatron_args, flag)

    def has_flag(self, flag: str) -> bool:
        return any(a == flag or a.startswith(flag + "=") for a in self.megatron_args)


@dataclass(frozen=True)
class CheckpointConfig:
    s3_uri: str
    local_dir: str = DEFAULT_LOCAL_DIR
    save_interval: int = DEFAULT_SAVE_INTERVAL


@dataclass(frozen=True)
class DataConfig:
    prompt_data: str
    input_key: str = "prompt"
    label_key: str = "label"


@dataclass(frozen=True)
class GrpoConfig:
    num_rollout: int
    rollout_batch_size: int
    n_samples_per_prompt: int
    global_batch_size: int
    num_steps_per_rollout: int = 1
    rollout_max_response_len: int = 8192
    rollout_temperature: float = 1.0
    lr: float = 1.0e-6
    kl_loss_coef: float = 0.0
    eps_clip: float = 0.2


@dataclass(frozen=True)
class TrainingParallel:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1


@dataclass(frozen=True)
class RolloutParallel:
    gpus_per_engine: int
    ep: int = 1


@dataclass(frozen=True)
class ParallelConfig:
    nodes: int
    gpus_per_node: int
    training: TrainingParallel = field(default_factory=TrainingParallel)
    rollout: RolloutParallel | None = None

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def data_parallel_size(self) -> int:
        t = self.training
        return self.world_size // (t.tp * t.pp * t.cp)


@dataclass(frozen=True)
class ExpertParallelConfig:
    backend: str = "nccl"

    @property
    def uses_deepep(self) -> bool:
        return self.backend.startswith("deepep")


@dataclass(frozen=True)
class RunConfig:
    run_name: str
    model: ModelConfig
    checkpoint: CheckpointConfig
    data: DataConfig
    grpo: GrpoConfig
    parallel: ParallelConfig
    expert_parallel: ExpertParallelConfig = field(default_factory=ExpertParallelConfig)


# ---------------------------------------------------------------------------- reader


class _Reader:
    """Collects problems while reading one mapping after another."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: str, value: Any, rule: str, fix: str) -> None:
        self.problems.append(Problem(path, value, rule, fix))

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...], required: bool = True) -> dict | None:
        if value is MISSING:
            if required:
                self.add(path, MISSING, "this section is required", f"add a `{path}:` mapping with keys {', '.join(allowed)}")
            return None
        if not isinstance(value, dict):
            self.add(path, value, "must be a mapping", f"write `{path}:` as a mapping with keys {', '.join(allowed)}")
            return None
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"remove it or rename it to `{close[0]}`" if close else "remove it"
                child = f"{path}.{key}" if path else str(key)
                self.add(child, value[key], f"unknown key (allowed here: {', '.join(allowed)})", hint)
        return value

    @staticmethod
    def _child(path: str, key: str) -> str:
        return f"{path}.{key}" if path else key

    def integer(self, data: dict, key: str, path: str, *, default: Any = MISSING, minimum: int = 1) -> int | None:
        p = self._child(path, key)
        value = data.get(key, MISSING)
        if value is MISSING:
            if default is MISSING:
                self.add(p, MISSING, "required", f"add `{key}: <integer >= {minimum}>` under `{path}`" if path else f"add `{key}`")
                return None
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(p, value, "must be an integer", f"write a whole number >= {minimum}, e.g. `{key}: {max(minimum, 1)}`")
            return None
        if value < minimum:
            self.add(p, value, f"must be >= {minimum}", f"use a value of at least {minimum}")
            return None
        return value

    def number(
        self,
        data: dict,
        key: str,
        path: str,
        *,
        default: Any = MISSING,
        minimum: float | None = None,
        exclusive_minimum: float | None = None,
        exclusive_maximum: float | None = None,
    ) -> float | None:
        p = self._child(path, key)
        value = data.get(key, MISSING)
        if value is MISSING:
            if default is MISSING:
                self.add(p, MISSING, "required", f"add `{key}: <number>` under `{path}`")
                return None
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.add(p, value, "must be a finite number", f"write a number, e.g. `{key}: {default if default is not MISSING else 1.0}`")
            return None
        value = float(value)
        if minimum is not None and value < minimum:
            self.add(p, value, f"must be >= {minimum:g}", f"use a value of at least {minimum:g}")
            return None
        if exclusive_minimum is not None and value <= exclusive_minimum:
            self.add(p, value, f"must be > {exclusive_minimum:g}", f"use a value above {exclusive_minimum:g}")
            return None
        if exclusive_maximum is not None and value >= exclusive_maximum:
            self.add(p, value, f"must be < {exclusive_maximum:g}", f"use a value below {exclusive_maximum:g}")
            return None
        return value

    def string(self, data: dict, key: str, path: str, *, default: Any = MISSING, example: str = "...") -> str | None:
        p = self._child(path, key)
        value = data.get(key, MISSING)
        if value is MISSING:
            if default is MISSING:
                self.add(p, MISSING, "required", f"add `{key}: {example}` under `{path}`" if path else f"add `{key}: {example}` at the top level")
                return None
            return default
        if not isinstance(value, str) or not value.strip():
            self.add(p, value, "must be a non-empty string", f"write it as text, e.g. `{key}: {example}`")
            return None
        return value


# ---------------------------------------------------------------------------- parsing

_TOP = ("run_name", "model", "checkpoint", "data", "grpo", "parallel", "expert_parallel")
_MODEL = ("name", "hf_checkpoint", "megatron_args")
_CHECKPOINT = ("s3_uri", "local_dir", "save_interval")
_DATA = ("prompt_data", "input_key", "label_key")
_GRPO = (
    "num_rollout",
    "rollout_batch_size",
    "n_samples_per_prompt",
    "global_batch_size",
    "num_steps_per_rollout",
    "rollout_max_response_len",
    "rollout_temperature",
    "lr",
    "kl_loss_coef",
    "eps_clip",
)
_PARALLEL = ("nodes", "gpus_per_node", "training", "rollout")
_TRAINING = ("tp", "pp", "cp", "ep", "etp")
_ROLLOUT = ("gpus_per_engine", "ep")
_EXPERT_PARALLEL = ("backend",)


def _check_location(r: _Reader, value: str | None, path: str, what: str, example: str) -> None:
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
    r = _Reader()
    if not isinstance(data, dict):
        raise ConfigError(
            [Problem("(document)", data if data is not None else MISSING, "the run config must be a YAML mapping", "start from the example in images/trainer/README.md")],
            source,
        )
    r.mapping(data, "", _TOP)

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
    m = r.mapping(data.get("model", MISSING), "model", _MODEL)
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
    c = r.mapping(data.get("checkpoint", MISSING), "checkpoint", _CHECKPOINT)
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
        if s3 is not None and local is not None and interval is not None:
            checkpoint = CheckpointConfig(s3_uri=s3 if s3.endswith("/") else s3 + "/", local_dir=local, save_interval=interval)

    # data
    data_cfg = None
    d = r.mapping(data.get("data", MISSING), "data", _DATA)
    if d is not None:
        prompt = r.string(d, "prompt_data", "data", example="s3://my-bucket/datasets/dapo-math-17k.jsonl")
        _check_location(r, prompt, "data.prompt_data", "a .jsonl prompt file", "/data/dapo-math-17k.jsonl or s3://my-bucket/datasets/dapo-math-17k.jsonl")
        if prompt is not None and prompt.startswith("s3://") and prompt.endswith("/"):
            r.add("data.prompt_data", prompt, "must name one .jsonl object, not a prefix", "point it at the file, e.g. s3://my-bucket/datasets/dapo-math-17k.jsonl")
            prompt = None
        ik = r.string(d, "input_key", "data", default="prompt", example="prompt")
        lk = r.string(d, "label_key", "data", default="label", example="label")
        if prompt is not None and ik is not None and lk is not None:
            data_cfg = DataConfig(prompt_data=prompt, input_key=ik, label_key=lk)

    # grpo
    grpo = None
    g = r.mapping(data.get("grpo", MISSING), "grpo", _GRPO)
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
    p = r.mapping(data.get("parallel", MISSING), "parallel", _PARALLEL)
    if p is not None:
        nodes = r.integer(p, "nodes", "parallel")
        gpn = r.integer(p, "gpus_per_node", "parallel")
        training = None
        t = r.mapping(p.get("training", {}), "parallel.training", _TRAINING)
        if t is not None:
            tv = {k: r.integer(t, k, "parallel.training", default=1) for k in _TRAINING}
            if all(v is not None for v in tv.values()):
                training = TrainingParallel(**tv)  # type: ignore[arg-type]
        rollout = None
        ro = r.mapping(p.get("rollout", {}), "parallel.rollout", _ROLLOUT)
        if ro is not None:
            gpe = r.integer(ro, "gpus_per_engine", "parallel.rollout", default=gpn if gpn is not None else 1)
            rep = r.integer(ro, "ep", "parallel.rollout", default=1)
            if gpe is not None and rep is not None:
                rollout = RolloutParallel(gpus_per_engine=gpe, ep=rep)
        if nodes is not None and gpn is not None and training is not None and rollout is not None:
            parallel = ParallelConfig(nodes=nodes, gpus_per_node=gpn, training=training, rollout=rollout)

    # expert_parallel
    ep_cfg = None
    e = r.mapping(data.get("expert_parallel", {}), "expert_parallel", _EXPERT_PARALLEL)
    if e is not None:
        backend = r.string(e, "backend", "expert_parallel", default="nccl", example="nccl")
        if backend is not None and backend not in EP_BACKENDS:
            close = difflib.get_close_matches(backend, EP_BACKENDS, n=1)
            r.add(
                "expert_parallel.backend",
                backend,
                f"must be one of {', '.join(EP_BACKENDS)}",
                f"use `{close[0]}`" if close else "use `nccl` unless the fabric gate measured DeepEP faster",
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
    r: _Reader,
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
    world = parallel.world_size
    t = parallel.training
    layout_ok = True
    if world % (t.tp * t.pp * t.cp) != 0:
        layout_ok = False
        r.add(
            "parallel.training",
            {"tp": t.tp, "pp": t.pp, "cp": t.cp},
            f"Megatron needs tp x pp x cp to divide the GPU count (nodes x gpus_per_node = {world}), "
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
        if world % ro.gpus_per_engine != 0:
            r.add(
                "parallel.rollout.gpus_per_engine",
                ro.gpus_per_engine,
                f"rollout is colocated with training on all {world} GPUs and each SGLang engine takes gpus_per_engine of them, "
                f"so gpus_per_engine must divide {world}",
                f"use a divisor of {world}, e.g. {parallel.gpus_per_node}",
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

    if ep_cfg is not None and ep_cfg.uses_deepep and t.etp * t.ep <= 1:
        r.add(
            "parallel.training.ep",
            t.ep,
            f"Megatron's flex dispatcher (DeepEP) needs expert-TP x EP > 1, but etp {t.etp} x ep {t.ep} = {t.etp * t.ep}",
            "raise parallel.training.ep, or use expert_parallel.backend nccl for a model without expert parallelism",
        )


def flag_value(args: tuple[str, ...] | list[str], flag: str) -> str | None:
    """The last value given to ``flag`` (``--flag v`` or ``--flag=v``) in an argument list."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


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


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate the run config YAML at ``path``."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            [Problem("(file)", source, "the run config file does not exist", "mount the run ConfigMap at this path or pass --config with the right path")],
            source,
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "unknown position"
        raise ConfigError(
            [Problem("(document)", where, f"is not valid YAML ({getattr(exc, 'problem', exc)})", "fix the YAML syntax at that position")],
            source,
        ) from None
    return parse_run_config(data, source)


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/key`` into (bucket, key)."""
    m = _S3_URI.match(uri)
    if not m:
        raise ValueError(f"not an s3:// URI: {uri!r}")
    return m.group("bucket"), m.group("key") or ""
