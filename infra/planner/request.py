"""What the planner is asked: ``PlanRequest`` for a training step, ``RLPlanRequest`` for a GRPO
step, and the parts they are made of (``Pins``, ``RLSetup``).

Every request is a frozen dataclass; ``plan(request)`` and ``plan_rl(request)`` check it and raise
``PlannerError`` naming the request's fields (``nodes``, ``max_nodes``, ...), which a front end
spells its own way (the CLI: ``--nodes``, ``--max-nodes``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from infra.catalog.models import MoEModel
from infra.planner.errors import PlannerError
from infra.planner.layout import Recompute, TrainingSetup
from infra.trainer_contract import DEFAULT_MAX_TOKENS_PER_GPU

Objective = Literal["cost", "throughput"]
Placement = Literal["colocated", "disaggregated"]
Overlap = Literal["none", "batch", "stream"]
OVERLAPS: tuple[str, ...] = ("none", "batch", "stream")
COLOCATED_MEM_FRACTION = 0.7  # SGLang mem_fraction_static the kit's colocated launcher sets


@dataclass(frozen=True)
class Pins:
    """Parts of the layout the caller fixed (None = search)."""

    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    etp: int | None = None
    cp: int | None = None
    vpp: int | None = None
    mbs: int | None = None
    recompute: Recompute | None = None

    def fixed(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class RLSetup:
    """What one GRPO step generates and trains."""

    prompts: int = 32  # rollout_batch_size
    samples_per_prompt: int = 8  # n_samples_per_prompt
    prompt_len: int = 512
    max_response_len: int = 8192  # rollout_max_response_len
    mean_response_len: int = 0  # 0: 60% of the maximum (long-tailed reasoning lengths)
    steps_per_rollout: int = 1  # optimizer steps per rollout (num_steps_per_rollout)
    logprob_passes: int = 1  # forward-only passes before training (old policy; +1 with KL)
    # SGLang mem_fraction_static; None follows the placement: colocated engines keep
    # COLOCATED_MEM_FRACTION, engines on their own GPUs SGLang's standalone default
    mem_fraction: float | None = None
    # how generation overlaps training: "none" (phases in turn), "batch" (the next batch is
    # generated while this one trains: Miles train_async.py), "stream" (engines generate
    # continuously with in-flight weight updates: Miles --fully-async, NeMo-RL async GRPO, verl
    # fully_async_policy). None: "stream" when off_policy_steps > 0, else "none". True/False are
    # read as "batch"/"none" (the flag's earlier meaning).
    overlap: Overlap | bool | None = None
    off_policy_steps: int = 0  # K: generation may run up to K optimizer steps ahead (0: on-policy)
    # the engine scheduler's cap on running requests per engine; None: SGLang's CUDA-graph batch
    # cap (rl.MAX_RUNNING). vLLM's AsyncLLM, which NeMo-RL's async GRPO engines use, defaults to
    # 128 (tests/planner/test_planner_rl_validation.py names the source)
    max_running: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.overlap, bool):
            object.__setattr__(self, "overlap", "batch" if self.overlap else "none")
        problems = []
        for f in ("prompts", "samples_per_prompt", "prompt_len", "max_response_len",
                  "steps_per_rollout"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                problems.append(f"{f}={v!r} must be a whole number >= 1")
        for f in ("mean_response_len", "logprob_passes", "off_policy_steps"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                problems.append(f"{f}={v!r} must be a whole number >= 0")
        if not problems and self.mean_response_len > self.max_response_len:
            problems.append(f"mean_response_len={self.mean_response_len} exceeds "
                            f"max_response_len={self.max_response_len}; lower it")
        if not problems and self.samples % self.steps_per_rollout:
            problems.append(f"steps_per_rollout={self.steps_per_rollout} does not divide the "
                            f"{self.samples} samples of a rollout (prompts x samples_per_prompt); "
                            "Miles needs rollout_batch_size x n_samples_per_prompt = "
                            "global_batch_size x num_steps_per_rollout")
        if self.max_running is not None and (isinstance(self.max_running, bool) or not isinstance(
                self.max_running, int) or self.max_running < 1):
            problems.append(f"max_running={self.max_running!r} must be a whole number >= 1 "
                            "(running requests per engine) or None (the engine's default)")
        if self.mem_fraction is not None and not (
                isinstance(self.mem_fraction, float | int) and 0.1 <= self.mem_fraction < 1.0):
            problems.append(f"mem_fraction={self.mem_fraction!r} must be from 0.1 to below 1")
        if self.overlap is not None and self.overlap not in OVERLAPS:
            problems.append(f"overlap={self.overlap!r} must be one of {', '.join(OVERLAPS)}")
        elif self.overlap == "none" and isinstance(self.off_policy_steps, int) \
                and self.off_policy_steps > 0:
            problems.append(f"off_policy_steps={self.off_policy_steps} needs generation to overlap "
                            "training, but overlap='none'; use overlap 'batch' or 'stream', or "
                            "off_policy_steps 0")
        if problems:
            raise PlannerError("invalid RL setup: " + "; ".join(problems))

    @property
    def mode(self) -> str:
        """"on-policy", "batch" or "stream" (see ``overlap``)."""
        if self.overlap in (None, "none"):
            return "stream" if self.off_policy_steps > 0 else "on-policy"
        return self.overlap

    @property
    def staleness(self) -> int:
        """Optimizer steps generation may run ahead: off_policy_steps, at least 1 when it
        overlaps training."""
        return 0 if self.mode == "on-policy" else max(1, self.off_policy_steps)

    @property
    def samples(self) -> int:
        return self.prompts * self.samples_per_prompt

    @property
    def mean_response(self) -> int:
        return self.mean_response_len or int(0.6 * self.max_response_len)

    @property
    def mean_sequence(self) -> int:
        return self.prompt_len + self.mean_response

    @property
    def train_batch(self) -> int:
        return self.samples // self.steps_per_rollout


@dataclass(frozen=True)
class PlanRequest:
    """A training-step plan: ``model`` on ``instance_type``.

    ``nodes`` fixes the node count; otherwise 1..``max_nodes`` (default 32) are searched.
    ``max_nodes`` is a quota: asking for more nodes than it allows is an error. ``setup`` is what
    is trained and how (sequence, batch, precision, schedule, a colocated rollout engine);
    ``pins`` fixes parts of the layout. ``memory_headroom_gib`` keeps that much GPU memory free on
    top of the model's own reserve and fragmentation allowance. ``price_per_hour`` overrides the
    catalog's on-demand price; ``allow_reference_systems`` admits the validation-only InfiniBand
    systems. On a type whose NVLink domain spans instances (GB200 UltraServers) node counts stop
    at one domain, the catalog's UltraServer size (``ultraserver_type`` picks one of the types it
    is sold as; default the catalog's ``nvlink_domain_instances``): the kit runs inside one
    domain. A pipeline size that does not divide the model's layers runs the trainer's uneven
    split (``rltrainer.contract.pipeline_split``, which the launcher passes to Megatron as
    --decoder-first/last-pipeline-num-layers), and the step time charges its fullest stage;
    ``even_pipeline`` (off by default) keeps to sizes that divide the layers, for a trainer image
    built before the launcher passed a split (``layout.pipeline_split_problem``). ``interleaving`` (off by default) also searches
    interleaved pipelines (vpp > 1): the kit's launcher passes no virtual-pipeline size (the
    trainer's run config has none), so a kit plan keeps vpp 1 (``layout.INTERLEAVING_RULE``).
    """

    model: str | MoEModel
    instance_type: str
    nodes: int | None = None
    max_nodes: int | None = None
    setup: TrainingSetup = field(default_factory=TrainingSetup)
    pins: Pins = field(default_factory=Pins)
    ep_backend: str | None = None
    objective: Objective = "cost"
    top: int = 5
    price_per_hour: float | None = None
    memory_headroom_gib: float = 0.0
    allow_reference_systems: bool = False
    even_pipeline: bool = False
    ultraserver_type: str | None = None  # the NVLink domain of an UltraServer type (catalog)
    interleaving: bool = False


@dataclass(frozen=True)
class RLPlanRequest:
    """A GRPO-step plan: ``model`` on ``instance_type``, generating and training what ``rl`` says.

    ``nodes`` fixes the job's node count (training and rollout pools together); otherwise
    1..``max_nodes`` (default 16) are searched. ``engine`` pins (GPUs, expert-parallel size) of
    one SGLang engine; ``pins`` parts of the training layout. ``max_tokens_per_gpu`` is the
    launcher's micro-batch token cap the training memory is sized for (Miles' dynamic batching).
    """

    model: str | MoEModel
    instance_type: str
    rl: RLSetup = field(default_factory=RLSetup)
    nodes: int | None = None
    max_nodes: int | None = None
    precision: str = "bf16"
    placements: tuple[Placement, ...] = ("colocated", "disaggregated")
    objective: Objective = "cost"
    top: int = 5
    pins: Pins = field(default_factory=Pins)
    engine: tuple[int, int] | None = None
    ep_backend: str | None = None
    price_per_hour: float | None = None
    release: str = "baseline"  # software release of the training step (infra/catalog/releases.py)
    ultraserver_type: str | None = None  # the NVLink domain of an UltraServer type (catalog)
    # tokens per GPU in one training micro-batch: the launcher's dynamic-batching cap
    # (parallel.training.max_tokens_per_gpu), which sizes the training activations
    max_tokens_per_gpu: int = DEFAULT_MAX_TOKENS_PER_GPU
    # the training step's pipeline schedule and BF16 Adam moments (TrainingSetup's fields)
    schedule: str = "1f1b"
    optimizer_bf16_moments: bool = False
