"""The RL job as it reaches KubeRay and Ray: retries, the image for the backend, the
environment every Ray actor gets, and the backends that may train.

Facts from the sources the kit pins:

- KubeRay v1.7.0 RayJob CRD (../shared/crds/kuberay-v1.7.0/ray.io_rayjobs.yaml):
  ``spec.backoffLimit`` is an int32 with default 0 and no per-exit-code policy, so every
  failed attempt counts; ``spec.runtimeEnvYAML`` is a string.
- Megatron-LM 37f9161 (Miles v0.1.0's pin) flex dispatcher imports DeepEP V1's ``Buffer``
  (tests/manifests/test_miles_contract.py checks the source).
"""

from __future__ import annotations

import pytest

from infra.config import (
    MAX_BACKOFF_LIMIT,
    TRAINING_EP_BACKENDS,
    ConfigError,
    parse_config,
    training_ep_backend_problems,
)


def test_deepep_gin_is_refused_for_training_but_stays_a_valid_config_for_the_gate():
    cfg = parse_config({"gpu_node_groups": {"p5en": {
        "instance_type": "p5en.48xlarge", "availability_zone": "us-east-1a",
        "min_size": 0, "desired_size": 2, "max_size": 2}},
        "training": {"node_group": "p5en", "expert_parallel": {"backend": "deepep-gin"}}})
    assert [str(p) for p in training_ep_backend_problems(cfg)] == [
        "training.expert_parallel.backend = 'deepep-gin': DeepEP V2 over NCCL GIN cannot train yet: the "
        "Megatron-LM that Miles v0.1.0 pins (37f9161) drives DeepEP V1's Buffer in its flex dispatcher "
        "(megatron/core/transformer/moe/fused_a2a.py) and does not support V2's ElasticBuffer. Fix: use "
        "deepep-nvshmem (DeepEP V1 over NVSHMEM/libfabric) or nccl for training; "
        "`rlkit gate --ep-backend deepep-gin` may still benchmark it."]
    assert TRAINING_EP_BACKENDS == ("nccl", "deepep-nvshmem")
    for backend in TRAINING_EP_BACKENDS:
        ok = parse_config({"training": {"expert_parallel": {"backend": backend}}})
        assert training_ep_backend_problems(ok) == []


@pytest.mark.parametrize("value", [-1, MAX_BACKOFF_LIMIT + 1])
def test_backoff_limit_is_bounded(value):
    with pytest.raises(ConfigError) as err:
        parse_config({"training": {"backoff_limit": value}})
    assert (f"training.backoff_limit = {value}: must be 0 to {MAX_BACKOFF_LIMIT} (each retry starts a new "
            "Ray cluster on the GPU nodes). Fix: use a small number such as 2; 0 turns retries off.") in str(err.value)


def test_backoff_limit_defaults_to_retrying():
    assert parse_config({}).training.backoff_limit == 2


# --- the rendered RayJob ------------------------------------------------------------------------

import functools  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

import yaml  # noqa: E402

from infra.config import load_config  # noqa: E402
from infra.trainer_contract import ENVIRONMENT_ENV, RAYJOB_ENV, TRAINER_RUNTIME_ENV  # noqa: E402
from manifests import build_context, placeholder_outputs, render  # noqa: E402
from manifests.context import RAY_JOB_STOP_WAIT_ENV  # noqa: E402
from tests.support import REPO_ROOT

END = datetime(2026, 12, 1, 18, 0, tzinfo=timezone.utc)


@functools.cache
def rayjob(example: str) -> dict:
    cfg = load_config(REPO_ROOT / "examples" / f"{example}.yaml")
    files = render(build_context(cfg, placeholder_outputs(cfg)))
    return next(f.obj for f in files if f.kind == "RayJob")


def test_backoff_limit_says_which_deadline_kuberay_retries():
    """Before: backoff_limit said KubeRay retries no attempt that "ran past its deadline", but the
    one deadline the kit renders, preRunningDeadlineSeconds, is retried (KubeRay v1.7.0 retries
    every failure but DeadlineExceeded and JobStatusCheckTimeoutExceeded: ops.launching)."""
    from infra.config.training_model import TrainingConfig
    from ops.launching import NOT_RETRIED_REASONS

    spec = rayjob("default")["spec"]
    assert "preRunningDeadlineSeconds" in spec and "activeDeadlineSeconds" not in spec
    assert "PreRunningDeadlineExceeded" not in NOT_RETRIED_REASONS
    text = TrainingConfig.model_fields["backoff_limit"].description
    assert ("retries one that did not start within start_deadline_minutes "
            "(PreRunningDeadlineExceeded)") in text
    assert "ran past an activeDeadlineSeconds (which the kit does not set)" in text
    assert "ran past its deadline" not in text


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


# On a Capacity Block the head (where the launcher runs) also learns the block and the estimates it
# needs to save and stop before the block ends (rltrainer.reservation); the end itself is rendered
# by `rlkit launch`, which reads it.
# The example leaves training.save_upload_minutes unset: the kit's 49 minutes for its save of
# Qwen3-30B-A3B on the default file system (infra.config.derived.save_upload_estimate).
CAPACITY_BLOCK_HEAD_ENV = {"RLTRAINER_RESERVATION_ID": "cr-0123456789abcdef0", "RLTRAINER_ROLLOUT_S": "600",
                           "RLTRAINER_SAVE_UPLOAD_S": "2940", "RLTRAINER_LOAD_S": "1680"}
# Every run's head gets the catalog's GiB of one save, for the launcher's room check before its
# first save (rltrainer.checkpoints.space); Qwen3-30B-A3B in both examples.
SAVE_ESTIMATE_HEAD_ENV = {"RLTRAINER_SAVE_GIB": "399"}


@pytest.mark.parametrize("example, backend_vars, head_vars", [
    ("default", {}, SAVE_ESTIMATE_HEAD_ENV),
    ("p5en-capacity-block", {"NVSHMEM_REMOTE_TRANSPORT": "libfabric", "NVSHMEM_LIBFABRIC_PROVIDER": "efa"},
     {**SAVE_ESTIMATE_HEAD_ENV, **CAPACITY_BLOCK_HEAD_ENV}),
])
def test_every_ray_actor_gets_the_trainer_and_efa_environment(example, backend_vars, head_vars):
    job = rayjob(example)
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert set(runtime_env) == {"env_vars"}
    env_vars = runtime_env["env_vars"]
    expected = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONPATH": "/root/Megatron-LM", "FI_PROVIDER": "efa",
                "FI_EFA_FORK_SAFE": "1", "NCCL_NET_PLUGIN": "ofi",
                "NCCL_SOCKET_IFNAME": "^docker,lo,veth,eni,pod-id-link0", **backend_vars}
    assert {k: env_vars.get(k) for k in expected} == expected
    # the GPU pods carry the same EFA profile (Ray workers inherit the raylet's environment)...
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    # (but not how long Ray's job stop waits, which only its job supervisor reads: test_head_grace)
    assert {k: v for k, v in env_vars.items()
            if k not in TRAINER_RUNTIME_ENV and k != RAY_JOB_STOP_WAIT_ENV} == _env(worker)
    # ...and the head, a GPU node too, where the driver imports Megatron: the same profile, then the
    # trainer variables and what the launcher needs
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert _env(head) == {**_env(worker), **TRAINER_RUNTIME_ENV, "RLTRAINER_RAYJOB": job["metadata"]["name"],
                          "RLTRAINER_ENVIRONMENT": job["metadata"]["labels"]["app.kubernetes.io/instance"],
                          **head_vars}


@pytest.mark.parametrize("example, backend", [("default", "nccl"), ("p5en-capacity-block", "deepep-nvshmem")])
def test_pods_pull_the_image_built_for_the_configured_backend(example, backend):
    job = rayjob(example)
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert head["image"].endswith(f":0.1.0-{backend}") and worker["image"] == head["image"]
    run_config = yaml.safe_load(load_run_yaml(example))
    assert run_config["expert_parallel"]["backend"] == backend


def load_run_yaml(example: str) -> str:
    cfg = load_config(REPO_ROOT / "examples" / f"{example}.yaml")
    return build_context(cfg, placeholder_outputs(cfg)).run_config_yaml


def test_the_rayjob_retries_as_configured():
    assert rayjob("default")["spec"]["backoffLimit"] == 2
    cfg = load_config(REPO_ROOT / "examples" / "default.yaml")
    none = cfg.model_copy(update={"training": cfg.training.model_copy(update={"backoff_limit": 0})})
    job = next(f.obj for f in render(build_context(none, placeholder_outputs(none))) if f.kind == "RayJob")
    assert job["spec"]["backoffLimit"] == 0


@pytest.mark.external
def test_the_pinned_crd_takes_a_start_deadline():
    """KubeRay v1.7.0 ends Initializing only at activeDeadlineSeconds or preRunningDeadlineSeconds
    (ray-project/kuberay@59d663aeec13 ray-operator/controllers/ray/rayjob_controller.go:179-190);
    the CRD types the latter int32, minimum 1 (helm-chart/kuberay-operator/crds/ray.io_rayjobs.yaml
    :154-157 at the same commit)."""
    from infra.addons import addon
    from tests.support import artifacts

    kuberay = f"kuberay-v{addon('kuberay_operator').version}"
    artifacts.require(kuberay, what="the pinned KubeRay CRD schemas")
    crd = yaml.safe_load((artifacts.common_root((kuberay,), "crds") / kuberay /
                          "ray.io_rayjobs.yaml").read_text())
    field = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["preRunningDeadlineSeconds"]
    assert field == {"format": "int32", "minimum": 1, "type": "integer"}


def test_a_start_that_cannot_finish_ends_at_the_configured_deadline():
    """The default: an hour for the Ray cluster to come up; 0: none."""
    assert rayjob("default")["spec"]["preRunningDeadlineSeconds"] == 3600
    cfg = load_config(REPO_ROOT / "examples" / "default.yaml")
    for minutes, rendered in ((90, 5400), (0, None)):
        c = cfg.model_copy(update={"training": cfg.training.model_copy(
            update={"start_deadline_minutes": minutes})})
        job = next(f.obj for f in render(build_context(c, placeholder_outputs(c)))
                   if f.kind == "RayJob")
        assert job["spec"].get("preRunningDeadlineSeconds") == rendered


def test_a_capacity_block_run_rendered_without_its_window_gets_no_start_deadline():
    """Its pods may wait for the block's start, days away: `rlkit launch` adds that wait when it
    read the window (tests/ops/test_ops_reservations.py); `rlkit render` cannot."""
    cfg = load_config(REPO_ROOT / "examples" / "p5en-capacity-block.yaml")
    job = next(f.obj for f in render(build_context(cfg, placeholder_outputs(cfg)))
               if f.kind == "RayJob")
    assert "preRunningDeadlineSeconds" not in job["spec"]
    ctx = build_context(cfg, placeholder_outputs(cfg), block_start_wait_s=7200.5)
    assert ctx.pre_running_deadline_seconds == 3600 + 7201


@pytest.mark.parametrize("startup, load_s", [(None, "1680"), (60, "2700"), (10, "0")])
def test_the_launcher_learns_the_part_of_the_start_still_ahead_once_it_has_restored(startup, load_s):
    """Miles' reads of the save and the reference weights (28 min on the example's file system):
    the launcher counts them before its first save once the restore is done. A startup_minutes
    set by hand counts less the fixed part (nodes, image pull, Ray), which is behind it by then.
    Before: the launcher counted only one rollout and one save plus upload at that point."""
    from infra.config.derived import startup_estimate
    from infra.config.training_model import STARTUP_FIXED_MINUTES
    from infra.trainer_contract import LOAD_ESTIMATE_ENV

    cfg = load_config(REPO_ROOT / "examples" / "p5en-capacity-block.yaml")
    if startup is not None:
        cfg = cfg.model_copy(update={"training": cfg.training.model_copy(update={"startup_minutes": startup})})
    else:
        assert startup_estimate(cfg).minutes == STARTUP_FIXED_MINUTES + 28
    env = _env({"env": build_context(cfg, placeholder_outputs(cfg)).head.env})
    assert env[LOAD_ESTIMATE_ENV] == load_s
    from rltrainer.reservation import EndGuard, Window

    assert EndGuard.from_env(Window(END, "test"), env, io.StringIO()).load_s == float(load_s)


@pytest.mark.parametrize("value", [5, 7 * 24 * 60 + 1, -1])
def test_the_start_deadline_is_bounded(value):
    with pytest.raises(ConfigError) as err:
        parse_config({"training": {"start_deadline_minutes": value}})
    assert (f"training.start_deadline_minutes = {value}: must be 0 (no deadline) or 15 to 10080 "
            "minutes (pulling the trainer image onto fresh GPU nodes takes minutes). Fix: use the "
            "default, 60, or 0 for no deadline.") in str(err.value)


def test_the_launcher_may_stop_retries_of_its_own_rayjob_only():
    """A config error (exit 2) must not be retried by KubeRay: the head's launcher gets the
    RayJob's name and a Role to patch exactly that RayJob (rltrainer.no_retry)."""
    cfg = load_config(REPO_ROOT / "examples" / "default.yaml")
    files = {f.path: f.obj for f in render(build_context(cfg, placeholder_outputs(cfg)))}
    job = files["rl-job/04-rayjob.yaml"]
    role = files["rl-job/02-rayjob-retry-role.yaml"]
    binding = files["rl-job/03-rayjob-retry-rolebinding.yaml"]
    assert role["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayjobs"],
                              "resourceNames": [job["metadata"]["name"]],
                              "verbs": ["get", "patch"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": head["serviceAccountName"],
                                    "namespace": job["metadata"]["namespace"]}]
    env = {e["name"]: e["value"] for e in head["containers"][0]["env"]}
    assert env[RAYJOB_ENV] == job["metadata"]["name"]


def test_the_launcher_learns_its_environment_for_the_metrics_dimension():
    """The training metrics' namespace is the account's, and the default run name is the same in
    every environment: the head names the environment (rltrainer.metrics), and a user's extra_env
    cannot hide it."""
    cfg = load_config(REPO_ROOT / "examples" / "default.yaml")
    cfg = cfg.model_copy(update={"training": cfg.training.model_copy(
        update={"extra_env": {ENVIRONMENT_ENV: "other"}})})
    files = {f.path: f.obj for f in render(build_context(cfg, placeholder_outputs(cfg)))}
    head = files["rl-job/04-rayjob.yaml"]["spec"]["rayClusterSpec"]["headGroupSpec"]
    env = {e["name"]: e["value"] for e in head["template"]["spec"]["containers"][0]["env"]}
    assert env[ENVIRONMENT_ENV] == cfg.name



@pytest.mark.parametrize("example", ["p5en-capacity-block", "existing-vpc"])  # not us-east-1
def test_every_trainer_pod_gives_boto3_the_config_region(example, monkeypatch):
    """The GPU nodes allow one metadata hop (IMDSv2), so a pod cannot read its region from
    instance metadata, and Pod Identity passes only credentials: the launcher's EC2 client (the
    Capacity Block's end, rltrainer.reservation) raised NoRegionError and the block's extension
    was never seen. The rendered environment, given to the real botocore with no config file and
    no metadata, yields the config's region, whatever extra_env says."""
    from rltrainer import reservation

    cfg = load_config(REPO_ROOT / "examples" / f"{example}.yaml")
    cfg = cfg.model_copy(update={"training": cfg.training.model_copy(
        update={"extra_env": {"AWS_DEFAULT_REGION": "ap-south-1"}})})
    files = {f.path: f.obj for f in render(build_context(cfg, placeholder_outputs(cfg)))}
    spec = files["rl-job/04-rayjob.yaml"]["spec"]["rayClusterSpec"]
    pods = [spec["headGroupSpec"]] + spec["workerGroupSpecs"]
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for pod in pods:
        env = _env(pod["template"]["spec"]["containers"][0])
        with monkeypatch.context() as m:
            for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
                m.setenv(name, env[name])
            assert reservation._ec2_client().meta.region_name == cfg.region != "us-east-1"


# --- where the driver runs ----------------------------------------------------------------------
#
# KubeRay v1.7.0 (K8sJobMode) submits spec.entrypoint with `ray job submit`, passing
# spec.entrypointNumCpus / entrypointNumGpus / entrypointResources when set (RayJob CRD fields).
# Ray then starts the entrypoint in a job supervisor actor that it pins to the head node unless
# the job asked for entrypoint resources or RAY_JOB_ALLOW_DRIVER_ON_WORKER_NODES=1 is set (Ray
# dashboard/modules/job/job_manager.py, JobManager._get_scheduling_strategy). Without resources
# Ray also leaves CUDA_VISIBLE_DEVICES unset for the driver, so it sees the node's GPUs.

from infra.catalog import INSTANCE_TYPES  # noqa: E402
from manifests.validate import validate_objects  # noqa: E402
from tests.support import artifacts  # noqa: E402

ENTRYPOINT_RESOURCE_FIELDS = ("entrypointNumCpus", "entrypointNumGpus", "entrypointResources")
EXAMPLES = sorted(p.stem for p in (REPO_ROOT / "examples").glob("*.yaml"))


def entrypoint_pod(job: dict) -> tuple[str, dict]:
    """Which pod template of ``job`` runs the entrypoint process, by Ray's rule above."""
    cluster = job["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    asked = [f for f in ENTRYPOINT_RESOURCE_FIELDS if job["spec"].get(f) not in (None, "", 0)]
    allowed = any(e["name"] == "RAY_JOB_ALLOW_DRIVER_ON_WORKER_NODES" and e.get("value") == "1"
                  for e in head["containers"][0].get("env", []))
    if asked or allowed:
        raise AssertionError(f"the entrypoint lands wherever Ray finds {asked or 'room'}, not on a known pod")
    return "head", head


def driver_placement_problems(job: dict, gpus: int) -> list[str]:
    """Why the pod that runs the driver is not a GPU node's pod (empty: it is)."""
    _, pod = entrypoint_pod(job)
    (container,) = pod["containers"]
    problems = []
    selector = pod.get("nodeSelector") or {}
    terms = pod.get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    wanted = {(e["key"], v) for t in terms for e in t["matchExpressions"] if e["operator"] == "In"
              for v in e["values"]}
    if selector.get("rlkit.aws/node-role") == "system" or ("rlkit.aws/node-role", "gpu") not in wanted:
        problems.append(f"node selection {selector or sorted(wanted)} does not ask for a GPU node")
    if not any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])):
        problems.append("no toleration for the GPU taint")
    limits = container["resources"].get("limits", {})
    if limits.get("nvidia.com/gpu") != gpus:
        problems.append(f"nvidia.com/gpu limit {limits.get('nvidia.com/gpu')} (expected {gpus})")
    return problems


@pytest.mark.external
@pytest.mark.parametrize("example", EXAMPLES)
def test_the_driver_runs_on_a_gpu_node(example):
    """The rendered RayJob, valid against the pinned KubeRay CRD, runs its entrypoint (launcher,
    Miles driver, checkpoint uploader) in the head pod, and the head is a whole GPU node of the
    training group: its selector, GPU toleration, every GPU, and the same CPU/memory share as a
    worker (the driver imports Megatron: Miles miles/ray/train/actor_factory.py)."""
    crd_dir = artifacts.require("kuberay-v1.7.0", what="KubeRay 1.7.0 CRD schemas")
    cfg = load_config(REPO_ROOT / "examples" / f"{example}.yaml")
    job = rayjob(example)
    report = validate_objects([("rayjob.yaml", job)], kubernetes_version=cfg.kubernetes_version,
                              crd_dir=crd_dir, strict=True)
    assert report.ok, report.format()
    assert report.results[0].checked_with == "CRD ray.io_rayjobs.yaml (v1)"
    itype = INSTANCE_TYPES[cfg.gpu_node_groups[cfg.training.node_group].instance_type]
    where, head = entrypoint_pod(job)
    assert where == "head"
    assert driver_placement_problems(job, itype.gpu_count) == []
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert head["containers"][0]["resources"] == worker["containers"][0]["resources"]
    assert head["tolerations"] == worker["tolerations"]
    # Ray may place Miles' actors on the head: nothing zeroes its CPUs or GPUs
    params = job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]
    assert "num-cpus" not in params and "num-gpus" not in params


def test_a_driver_on_a_system_node_or_on_entrypoint_resources_is_caught():
    """The placement check on the layouts it must refuse: the old system-node head, and an
    entrypoint sent wherever Ray finds a GPU (it would take one of the GPUs Miles' placement
    group asks for: miles/ray/placement_group.py bundles {"GPU": 1, "CPU": 1} per GPU)."""
    import copy

    job = copy.deepcopy(rayjob("default"))
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head.pop("affinity")
    head["nodeSelector"] = {"rlkit.aws/node-role": "system"}
    head["tolerations"] = []
    del head["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert driver_placement_problems(job, 8) == [
        "node selection {'rlkit.aws/node-role': 'system'} does not ask for a GPU node",
        "no toleration for the GPU taint", "nvidia.com/gpu limit None (expected 8)"]
    job = copy.deepcopy(rayjob("default"))
    job["spec"]["entrypointNumGpus"] = 1
    with pytest.raises(AssertionError, match="entrypointNumGpus"):
        entrypoint_pod(job)


# --- the node check's pod: the shared file system and DeepEP's profiler --------------------------


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_node_check_writes_to_the_shared_file_system_and_parses(example):
    """A broken /fsx mount fails the gate's node check, not the run's first save: the node check pod
    mounts the same claim as the RL job and is asked to write there; its rendered command parses
    with the trainer's own nodecheck parser."""
    from rltrainer.nodecheck import build_parser

    cfg = load_config(REPO_ROOT / "examples" / f"{example}.yaml")
    files = render(build_context(cfg, placeholder_outputs(cfg)))
    job = next(f.obj for f in files if f.path == "fabric/nodecheck/00-job.yaml")
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = build_parser().parse_args(container["command"][2:])
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]
              if "persistentVolumeClaim" in v}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    rayjob_head = rayjob(example)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    if any("persistentVolumeClaim" in v for v in rayjob_head["volumes"]):
        assert (args.shared_fs, args.shared_fs_type) == ("/fsx", "lustre")
        assert claims[mounts["/fsx"]] == "shared-fs"
    else:  # a single node without a shared file system
        assert args.shared_fs is None and not claims
    backend = cfg.training.expert_parallel.backend
    assert args.ep_backend == backend
    assert ("PERFMON" in container["securityContext"]["capabilities"]["add"]) == backend.startswith("deepep")
