"""The EFA environment of every GPU pod the kit renders, defined once.

Trainer workers and the fabric acceptance jobs get exactly the same variables, so a benchmark
measures the fabric the trainer will use. The profile has two parts:

1. The base profile, on every GPU pod whatever the expert-parallel backend
   [design.md "Trainer pods"; AWS EFA cheatsheet, aws-samples/awsome-distributed-training
   1.architectures/efa-cheatsheet.md]:

   - ``FI_PROVIDER=efa``: libfabric uses the EFA provider, never a TCP/sockets fallback.
   - ``FI_EFA_FORK_SAFE=1``: fork safety in libfabric (a no-op on kernels >= 5.15, harmless).
   - ``NCCL_NET_PLUGIN=ofi``: load aws-ofi-nccl; without it NCCL can silently use TCP sockets.
   - ``NCCL_SOCKET_IFNAME=^docker,lo,veth,eni,pod-id-link0``: keep NCCL's bootstrap sockets off
     the link-local interface EKS Pod Identity adds (aws-samples/aws-do-eks PR 54).

2. The variables of the selected expert-parallel backend:

   - ``nccl``: nothing extra.
   - ``deepep-nvshmem`` (DeepEP V1 over NVSHMEM's libfabric transport):
     ``NVSHMEM_REMOTE_TRANSPORT=libfabric``, ``NVSHMEM_LIBFABRIC_PROVIDER=efa`` and
     ``NVSHMEM_NETDEVS_POLICY=EXTERNAL_SHARING_PCIE_SWITCH_NIC_EXCLUSIVE``, plus
     ``NVIDIA_GDRCOPY=enabled`` so the NVIDIA container runtime exposes GDRCopy
     [awslabs/awsome-distributed-ai micro-benchmarks/expert-parallelism/deepep-benchmark:
     slurm/test_internode.sbatch and kubernetes/test-internode.yaml].
   - ``deepep-gin`` (DeepEP V2 over NCCL GIN, amazon-contributing/DeepEP, whose README points
     to aws/aws-ofi-nccl doc/gin-getting-started.md for EFA):
       * GPU-initiated (EFA-GDA, p5en/p6 only): ``NCCL_GIN_TYPE=5`` and
         ``NCCL_SYM_GIN_KERNELS_ENABLE=0`` ("Disable symmetric GIN kernels for NCCL collectives;
         these are not currently supported for EFA-GDA") [gin-getting-started.md, "Setup"].
       * CPU proxy (p5/p5e, or by choice): ``NCCL_GIN_TYPE=2``, NCCL's ``NCCL_GIN_TYPE_PROXY``
         (nccl src/include/nccl_device/core.h: PROXY = 2, GDAKI = 3, EFA_GDA = 5). NCCL 2.31
         already picks the proxy on EFA when the variable is unset [gin-getting-started.md]; we
         pin it so the pod spec says which path runs.
       * both: ``NVIDIA_GDRCOPY=enabled`` (GIN needs GDRCopy's runtime and gdrdrv
         [gin-getting-started.md, "Requirements"]).

3. NVLink across instances (the catalog's ``multi_node_nvlink``: P6e-GB200 UltraServers), on
   every GPU pod there whatever the backend:

   - ``NCCL_MNNVL_ENABLE=1``: multi-node NVLink on, not NCCL's auto default (2), so a broken
     IMEX channel fails loudly ("MNNVL ... is available but not working on this system") instead
     of falling back to EFA [NVIDIA/nccl v2.30.7-1 src/init.cc:862, 1072; src/mnnvl.cc:74-88];
     AWS's GB200 nccl-tests manifest sets it too [awslabs/awsome-distributed-training 0edaf15
     micro-benchmarks/nccl-tests/kubernetes/nccl-tests-gb200.yaml:62].
   - ``NCCL_NVLS_ENABLE=1``: NVLink SHARP on (same manifest, line 60).
   - ``NCCL_CUMEM_ENABLE=1``: "MNNVL requires cuMem to be enabled" and NCCL silently skips
     MNNVL without it [src/mnnvl.cc:15-16]. NCCL's own default is on, but the programs of the job
     turn it off when the variable is unset: SGLang sets 0 [sglang 0.5.16 wheel,
     sglang/srt/entrypoints/engine.py:1260-1261, unless --enable-symm-mem], and Miles gives its
     training actors 0 to match ("because sglang will always set NCCL_CUMEM_ENABLE to 0")
     [radixark/miles@78527b9102b3 (v0.1.0) miles/ray/train/actor_factory.py:29-31]. Set, both
     keep 1, so they still agree.
     ``NCCL_CUMEM_ENABLE=0`` is refused in ``training.extra_env``; the same repository as above
     sets it for NeMo-RL on P5en, which must not carry over.
   - No EFA-GDA variables: aws-ofi-nccl v1.21.1 does not opt p6e-gb200 into GDAKI
     [tests/unit/aws_platform_mapper.cpp:86] (the catalog's ``gin_gpu`` is False).

Users add their own variables through ``training.extra_env``; ``merge_extra_env`` refuses the
ones known to hurt EFA and any attempt to change a variable this module owns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from infra.catalog import INSTANCE_TYPES, gin_gpu_types
from infra.config import supports_gin_gpu
from infra.trainer_contract import EP_BACKENDS
from manifests.errors import RenderError, RenderProblem

CHEATSHEET = "AWS EFA cheatsheet (aws-samples/awsome-distributed-training 1.architectures/efa-cheatsheet.md)"

GIN_TYPE_PROXY = "2"  # NCCL_GIN_TYPE_PROXY
GIN_TYPE_EFA_GDA = "5"  # NCCL_GIN_TYPE_EFA_GDA (aws-ofi-nccl >= 1.21, NCCL >= 2.31.2)


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str


BASE_PROFILE: tuple[EnvVar, ...] = (
    EnvVar("FI_PROVIDER", "efa"),
    EnvVar("FI_EFA_FORK_SAFE", "1"),
    EnvVar("NCCL_NET_PLUGIN", "ofi"),
    EnvVar("NCCL_SOCKET_IFNAME", "^docker,lo,veth,eni,pod-id-link0"),
)

_GDRCOPY = EnvVar("NVIDIA_GDRCOPY", "enabled")

_NVSHMEM_PROFILE: tuple[EnvVar, ...] = (
    EnvVar("NVSHMEM_REMOTE_TRANSPORT", "libfabric"),
    EnvVar("NVSHMEM_LIBFABRIC_PROVIDER", "efa"),
    EnvVar("NVSHMEM_NETDEVS_POLICY", "EXTERNAL_SHARING_PCIE_SWITCH_NIC_EXCLUSIVE"),
    _GDRCOPY,
)
_GIN_GPU_PROFILE: tuple[EnvVar, ...] = (
    EnvVar("NCCL_GIN_TYPE", GIN_TYPE_EFA_GDA),
    EnvVar("NCCL_SYM_GIN_KERNELS_ENABLE", "0"),
    _GDRCOPY,
)
_GIN_PROXY_PROFILE: tuple[EnvVar, ...] = (
    EnvVar("NCCL_GIN_TYPE", GIN_TYPE_PROXY),
    _GDRCOPY,
)

_MNNVL_PROFILE: tuple[EnvVar, ...] = (
    EnvVar("NCCL_MNNVL_ENABLE", "1"),
    EnvVar("NCCL_NVLS_ENABLE", "1"),
    EnvVar("NCCL_CUMEM_ENABLE", "1"),
)
MNNVL_SOURCE = "NVIDIA/nccl v2.30.7-1 src/mnnvl.cc:15-16, \"MNNVL requires cuMem to be enabled\""

# Every name any profile can set: a user may not set these through extra_env with another value
# (the backend and gin_mode choose them). NCCL_CUMEM_ENABLE is the kit's only on UltraServers:
# elsewhere a user may set it (Miles and SGLang make it 0 there when it is unset).
MANAGED_NAMES: frozenset[str] = frozenset(
    v.name for v in BASE_PROFILE + _NVSHMEM_PROFILE + _GIN_GPU_PROFILE + _GIN_PROXY_PROFILE
    + _MNNVL_PROFILE
) - {"NCCL_CUMEM_ENABLE"}

GIN_MODES = ("gpu", "proxy")


@dataclass(frozen=True)
class EfaEnvProfile:
    """The EFA variables for one instance type and expert-parallel backend.

    Constructing a profile checks the same rules as ``infra.config`` (unknown backend, GIN
    GPU-initiated mode on an instance without EFA-GDA), so code that bypasses config loading
    still cannot render a pod that would fail on the fabric.
    """

    instance_type: str
    backend: str = "nccl"
    gin_mode: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.instance_type not in INSTANCE_TYPES:
            problems.append(RenderProblem(
                f"instance type {self.instance_type!r}", "not in the kit's instance catalog",
                f"use one of {', '.join(INSTANCE_TYPES)}"))
        if self.backend not in EP_BACKENDS:
            problems.append(RenderProblem(
                f"training.expert_parallel.backend = {self.backend!r}",
                "the EFA environment profile knows no such expert-parallel backend",
                f"use one of {', '.join(EP_BACKENDS)}"))
        elif self.gin_mode is not None and self.backend != "deepep-gin":
            problems.append(RenderProblem(
                f"training.expert_parallel.gin_mode = {self.gin_mode!r}",
                "gin_mode applies only to the deepep-gin backend",
                "remove gin_mode or set backend: deepep-gin"))
        elif self.gin_mode is not None and self.gin_mode not in GIN_MODES:
            problems.append(RenderProblem(
                f"training.expert_parallel.gin_mode = {self.gin_mode!r}",
                "not a GIN mode", f"use gpu (GPU-initiated: {gin_gpu_types()}) or proxy (CPU proxy)"))
        elif (self.backend == "deepep-gin" and self.gin_mode == "gpu"
              and self.instance_type in INSTANCE_TYPES and not supports_gin_gpu(self.instance_type)):
            problems.append(RenderProblem(
                "training.expert_parallel.gin_mode = 'gpu'",
                f"GPU-initiated NCCL GIN (NCCL_GIN_TYPE={GIN_TYPE_EFA_GDA}, EFA-GDA) runs only on "
                f"{gin_gpu_types()}, not {self.instance_type}",
                f"set gin_mode: proxy (CPU proxy, NCCL_GIN_TYPE={GIN_TYPE_PROXY}) or use a "
                f"node group of {gin_gpu_types()}"))
        if problems:
            raise RenderError(problems, "EFA environment profile")

    @property
    def effective_gin_mode(self) -> str | None:
        """deepep-gin only: the configured mode, else GPU-initiated where the instance has it."""
        if self.backend != "deepep-gin":
            return None
        if self.gin_mode is not None:
            return self.gin_mode
        return "gpu" if supports_gin_gpu(self.instance_type) else "proxy"

    @property
    def variables(self) -> tuple[EnvVar, ...]:
        if self.backend == "deepep-nvshmem":
            extra = _NVSHMEM_PROFILE
        elif self.backend == "deepep-gin":
            extra = _GIN_GPU_PROFILE if self.effective_gin_mode == "gpu" else _GIN_PROXY_PROFILE
        else:
            extra = ()
        return BASE_PROFILE + extra + (_MNNVL_PROFILE if self.multi_node_nvlink else ())

    @property
    def multi_node_nvlink(self) -> bool:
        return INSTANCE_TYPES[self.instance_type].multi_node_nvlink

    def as_dict(self) -> dict[str, str]:
        return {v.name: v.value for v in self.variables}


def extra_env_problems(profile: EfaEnvProfile, extra: Mapping[str, str]) -> list[RenderProblem]:
    """Everything wrong with ``training.extra_env`` against ``profile`` (empty = fine)."""
    own = profile.as_dict()
    problems = []
    for name, value in extra.items():
        subject = f"training.extra_env.{name} = {value!r}"
        if not name or "=" in name:
            problems.append(RenderProblem(subject, "not a valid environment variable name",
                                          "use a name without '=' such as MY_SETTING"))
        elif "$" in value or "`" in value:
            # KubeRay v1.7.0 passes the run's env to `ray job submit --runtime-env-json` inside a
            # double-quoted string (ray-project/kuberay@59d663aeec13
            # ray-operator/controllers/ray/common/job.go:177, strconv.Quote) of a `bash -ce`
            # command (same commit, ray-operator/controllers/ray/utils/util.go:1005-1012): the
            # submitter's shell would expand it (an empty ${VAR}, a `command` run on the system
            # node) while the GPU pods keep the literal value.
            problems.append(RenderProblem(
                subject,
                "contains $ or `, which the job submitter's shell would expand before Ray sees "
                "the value (KubeRay runs ray job submit through bash), so Ray's workers and the "
                "GPU pods would get different values",
                "write the value out literally, without $ or `"))
        elif name == "RDMAV_FORK_SAFE" or name.startswith("RDMAV_"):
            problems.append(RenderProblem(
                subject,
                f"refused: the {CHEATSHEET} says never to set {name}; it is an rdma-core setting "
                "that behaves differently from FI_EFA_FORK_SAFE and can break EFA on newer "
                "kernels (the kit already sets FI_EFA_FORK_SAFE=1)",
                f"remove {name} from training.extra_env"))
        elif name == "NCCL_PROTO" and value.strip().lower() == "simple":
            problems.append(RenderProblem(
                subject,
                f"refused: the {CHEATSHEET} limits NCCL_PROTO=simple to aws-ofi-nccl <= 1.5.0; "
                "with the plugin in the trainer image it only forces NCCL off its faster "
                "protocols",
                "remove NCCL_PROTO from training.extra_env and let NCCL choose"))
        elif (name == "NCCL_CUMEM_ENABLE" and value.strip() == "0"
              and profile.multi_node_nvlink):
            problems.append(RenderProblem(
                subject,
                f"refused on {profile.instance_type}: NCCL turns multi-node NVLink off without "
                f"cuMem, silently ({MNNVL_SOURCE}), so all-to-all would cross EFA",
                "remove NCCL_CUMEM_ENABLE from training.extra_env"))
        elif name in own and value != own[name]:
            problems.append(RenderProblem(
                subject,
                f"the kit's EFA profile sets {name}={own[name]} on every GPU pod and "
                "extra_env may not change it",
                f"remove {name} from training.extra_env (edit manifests/efa_env.py if the "
                "profile itself is wrong)"))
        elif name in MANAGED_NAMES and name not in own:
            problems.append(RenderProblem(
                subject,
                f"{name} belongs to another expert-parallel backend's profile; the kit sets it "
                "from training.expert_parallel",
                f"remove {name} from training.extra_env and choose "
                "training.expert_parallel.backend / gin_mode instead"))
    return problems


def merge_extra_env(profile: EfaEnvProfile, extra: Mapping[str, str]) -> tuple[EnvVar, ...]:
    """Profile variables followed by the user's extra ones; raise RenderError on any bad one."""
    problems = extra_env_problems(profile, extra)
    if problems:
        raise RenderError(problems, "training.extra_env")
    own = profile.as_dict()
    added = tuple(EnvVar(k, v) for k, v in sorted(extra.items()) if k not in own)
    return profile.variables + added
