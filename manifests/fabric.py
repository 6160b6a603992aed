"""The fabric acceptance jobs `rlkit gate` runs on the training node group: the node check, the
all-reduce and the expert-parallel benchmark, each a ``FabricJob`` decided here (counts, commands,
spans, what DeepEP can configure) for the fabric-job template to lay out."""

from __future__ import annotations

import math

from infra import names
from infra.catalog import InstanceType
from infra.catalog.models import MODEL_CATALOG
from infra.config import KitConfig, has_shared_fs
from infra.config.ep_spans import ep_spans
from infra.trainer_contract import DEEPEP_RANK_COUNTS, DEEPEP_RANK_COUNTS_SOURCE
from manifests.errors import RenderProblem
from manifests.frozen import FrozenModel

SHARED_FS_TYPE = "lustre"  # FSx for Lustre, as /proc/mounts names it
PROFILER_CAPABILITY = "PERFMON"  # CAP_PERFMON: GPU profiling where the driver restricts it to admins
RENDEZVOUS_PORT = 29500
EP_TOKENS_PER_RANK = 4096
ALLREDUCE_MIN_BYTES = "1M"
ALLREDUCE_MAX_BYTES = "16G"
# How long `rlkit gate` waits for each fabric job (its --timeout default). The Job's own deadline
# (activeDeadlineSeconds: a stuck rendezvous must not hold GPU nodes forever, even when rlkit is
# gone) is that wait plus a margin: the Job controller's clock starts when the Job is created,
# before the gate's first poll, so without the margin the controller would fail the Job first
# and the gate would report a timeout as a failure.
FABRIC_TIMEOUT_SECONDS = 3600
FABRIC_DEADLINE_MARGIN_SECONDS = 300
# A finished fabric Job (and its pods, with their logs) is deleted this long after it ends: `rlkit
# gate` reads the logs as soon as the Job finishes and deletes it itself; this tidies what a gate
# stopped by SIGKILL (or a Job applied by hand) leaves, after an hour to read it.
FABRIC_TTL_SECONDS = 3600


def fabric_deadline_seconds(timeout_s: float) -> int:
    """A fabric Job's activeDeadlineSeconds for a gate that waits ``timeout_s`` for it."""
    return max(0, math.ceil(timeout_s)) + FABRIC_DEADLINE_MARGIN_SECONDS




class FabricJob(FrozenModel):
    """One fabric benchmark Job of `rlkit gate`, as its template prints it."""

    key: str  # nodecheck | allreduce | ep
    name: str  # Job (and headless Service) name
    service: str | None  # headless Service for torchrun rendezvous; None for per-node checks
    port: int | None  # the rendezvous port behind that Service
    component: str
    completions: int
    command: list[str]
    description: str
    capabilities: list[str] = []  # added to the GPU pod's (IPC_LOCK), e.g. PERFMON for DeepEP's profiler
    shared_fs: bool = False  # mount the shared file system (the node check writes to it)



def _torchrun(job: str, service: str, nodes: int, gpus: int) -> list[str]:
    return [
        "torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(gpus),
        "--node-rank", "$(JOB_COMPLETION_INDEX)",
        "--master-addr", f"{job}-0.{service}", "--master-port", str(RENDEZVOUS_PORT),
        "-m", "rltrainer.bench",
    ]


# DeepEP's published shape (tests/test_internode.py defaults): the EP job measures it too
# (--acceptance) when its 256 experts spread evenly over the GPUs, so the gate can compare like
# with like [infra/catalog/acceptance.py].
EP_ACCEPTANCE_EXPERTS = 256


def fabric_jobs(cfg: KitConfig, itype: InstanceType, *,
                gin_type: str | None = None) -> tuple[list[FabricJob], list[RenderProblem]]:
    """Node check, all-reduce and expert-parallel benchmarks on the training node group.
    ``gin_type``: the NCCL_GIN_TYPE of the EFA profile (deepep-gin), which the node check needs."""
    t = cfg.training
    prefix = f"fabric-{t.node_group}"
    nodes, gpus = t.nodes, itype.gpu_count
    # DeepEP's kernels are timed with torch's CUDA profiler (as DeepEP's bench_kineto does); where
    # the driver restricts profiling to administrators, R580 drivers allow it with CAP_PERFMON, a
    # narrower grant than the SYS_ADMIN awsome-distributed-ai's manifests use (rltrainer.nodecheck,
    # "profiling"). The node check carries the same capability, so it checks what the benchmark gets.
    profiler_caps = [PROFILER_CAPABILITY] if t.expert_parallel.backend.startswith("deepep") else []
    shared = has_shared_fs(cfg)
    jobs = [FabricJob(
        key="nodecheck", name=f"{prefix}-nodecheck", service=None, port=None, component="fabric-nodecheck",
        completions=nodes,
        command=["rltrainer", "nodecheck", "--expect-gpus", str(gpus),
                 "--expect-efa", str(itype.efa_devices),
                 "--ep-backend", t.expert_parallel.backend]
        + (["--gin-type", gin_type] if gin_type is not None else [])
        + (["--expect-imex-channel"] if itype.multi_node_nvlink else [])
        + (["--shared-fs", names.SHARED_FS_MOUNT_PATH, "--shared-fs-type", SHARED_FS_TYPE] if shared else []),
        description=f"checks each of {nodes} {itype.name} nodes exposes {gpus} GPUs and "
                    f"{itype.efa_devices} EFA devices" + (f" and writes to {names.SHARED_FS_MOUNT_PATH}"
                                                          if shared else ""),
        capabilities=profiler_caps, shared_fs=shared),
    ]
    name = f"{prefix}-allreduce"
    jobs.append(FabricJob(
        key="allreduce", name=name, service=name, port=RENDEZVOUS_PORT, component="fabric-allreduce",
        completions=nodes,
        command=_torchrun(name, name, nodes, gpus) + [
            "allreduce", "--min-bytes", ALLREDUCE_MIN_BYTES, "--max-bytes", ALLREDUCE_MAX_BYTES],
        description=f"NCCL all-reduce bus bandwidth over {nodes} x {gpus} GPUs"))
    # The benchmark moves tokens of the model's hidden width to top_k of its routed experts; the
    # shapes come from the planner's model catalog (each model's config.json, sourced there).
    shape = MODEL_CATALOG.get(t.model)
    if shape is None or not shape.num_experts:
        return jobs, [RenderProblem(
            f"training.model = {t.model!r}", "the expert-parallel benchmark needs the model's MoE "
            "shape (hidden size, experts, top-k) and the kit does not know this model",
            f"use one of {', '.join(MODEL_CATALOG)}, or add the model's config.json values to "
            "infra/catalog/models.py")]
    # The model's shape is measured inside the run's own EP groups (training and rollout, which
    # GPUs each holds: infra/config/ep_spans.py), the path the run's all-to-all takes; without an
    # EP group (ep 1) over every GPU, as before.
    spans = ep_spans(cfg, itype)
    for span in spans:
        if shape.num_experts * span.tp % span.size:  # tp: Megatron's expert-TP shards (ep_spans.py)
            field = "parallel.ep" if span.name == "training" else "rollout.ep"
            return jobs, [RenderProblem(
                f"training.{field} = {span.size // span.tp}", f"the expert-parallel benchmark spreads "
                f"{t.model}'s {shape.num_experts} experts evenly over the {span.name} EP group of "
                f"{span.size} GPUs, and that does not divide",
                f"use an EP size that divides {shape.num_experts}")]
    if not spans and shape.num_experts % (nodes * gpus):
        return jobs, [RenderProblem(
            f"training.nodes = {nodes}", f"the expert-parallel benchmark spreads {t.model}'s "
            f"{shape.num_experts} experts evenly over all {nodes} x {gpus} = {nodes * gpus} GPUs, "
            "and that does not divide",
            f"use a node count whose GPU total divides {shape.num_experts}")]
    backend = "nccl" if t.expert_parallel.backend == "nccl" else "deepep"
    unmeasured = []
    if backend == "deepep":
        problem = _deepep_size_problem(cfg, spans, nodes * gpus)
        if problem is not None:
            return jobs, [problem]
        # Only a rollout group can be left: Miles' SGLang side is not measured with DeepEP's
        # normal kernels at a size their table lacks; the description says so.
        unmeasured = [s for s in spans if s.size not in DEEPEP_RANK_COUNTS]
        spans = [s for s in spans if s.size in DEEPEP_RANK_COUNTS]
    acceptance = EP_ACCEPTANCE_EXPERTS % (nodes * gpus) == 0 and (
        backend == "nccl" or nodes * gpus in DEEPEP_RANK_COUNTS)
    name = f"{prefix}-ep"
    jobs.append(FabricJob(
        key="ep", name=name, service=name, port=RENDEZVOUS_PORT, component="fabric-ep",
        completions=nodes,
        command=_torchrun(name, name, nodes, gpus) + [
            "ep", "--backend", backend, "--tokens-per-rank", str(EP_TOKENS_PER_RANK),
            "--hidden", str(shape.hidden), "--topk", str(shape.top_k),
            "--experts", str(shape.num_experts)]
        + [a for s in spans for a in ("--span", s.bench_arg(nodes * gpus))]
        + (["--acceptance"] if acceptance else []),
        description=f"expert-parallel dispatch/combine ({t.expert_parallel.backend}) with "
                    f"{t.model} shapes in the run's EP groups "
                    f"({', '.join(f'{s.name} EP{s.size} {s.where}' for s in spans) or 'none: every GPU'})"
                    + (f", and at DeepEP's published shape over {nodes} x {gpus} GPUs" if acceptance else "")
                    + (f"; DeepEP's published shape not measured over {nodes * gpus} GPUs (DeepEP "
                       f"configures only {', '.join(map(str, DEEPEP_RANK_COUNTS))} ranks)"
                       if not acceptance and EP_ACCEPTANCE_EXPERTS % (nodes * gpus) == 0 else "")
                    + "".join(f"; {s.name} EP{s.size} not measured (DeepEP configures only "
                              f"{', '.join(map(str, DEEPEP_RANK_COUNTS))} ranks)" for s in unmeasured),
        capabilities=profiler_caps))
    return jobs, []


def _deepep_size_problem(cfg: KitConfig, spans: list, world: int) -> RenderProblem | None:
    """A DeepEP group the pinned DeepEP cannot configure (its Buffer asserts on the size): the
    training group (Megatron sizes its DeepEP buffer with it before the first step), or every GPU
    when the run has no EP group to measure in."""
    known = ", ".join(map(str, DEEPEP_RANK_COUNTS))
    t = cfg.training
    for s in spans:
        if s.name == "training" and s.size not in DEEPEP_RANK_COUNTS:
            return RenderProblem(
                f"training.parallel.ep = {t.parallel.ep}", f"with expert_parallel.backend "
                f"{t.expert_parallel.backend}, Megatron builds DeepEP's buffer for its "
                f"{'expert-TP x EP' if s.tp > 1 else 'EP'} group of {s.size} GPUs and the pinned "
                f"DeepEP configures only {known} ranks ({DEEPEP_RANK_COUNTS_SOURCE}; megatron-lm 37f9161 "
                "megatron/core/transformer/moe/fused_a2a.py:46-47)",
                f"choose an EP group size among {known}, or use expert_parallel.backend nccl")
    if not spans and world not in DEEPEP_RANK_COUNTS:
        return RenderProblem(
            f"training.nodes = {t.nodes}", f"the run has no EP group, so the expert-parallel "
            f"benchmark measures DeepEP over all {world} GPUs, and the pinned DeepEP configures only "
            f"{known} ranks ({DEEPEP_RANK_COUNTS_SOURCE})",
            f"use a node count whose GPU total is among {known}, or expert_parallel.backend nccl")
    return None
