"""The one EFA environment profile: contents per backend, and what it refuses."""

from __future__ import annotations

import pytest

from infra.config import ConfigError, parse_config
from manifests import RenderError, build_context, placeholder_outputs
from manifests.efa_env import BASE_PROFILE, EfaEnvProfile, merge_extra_env
from manifests.context import REGION_ENV

BASE = {
    "FI_PROVIDER": "efa",
    "FI_EFA_FORK_SAFE": "1",
    "NCCL_NET_PLUGIN": "ofi",
    "NCCL_SOCKET_IFNAME": "^docker,lo,veth,eni,pod-id-link0",
}


def test_base_profile_is_the_documented_one():
    assert {v.name: v.value for v in BASE_PROFILE} == BASE
    assert EfaEnvProfile("p5.48xlarge", "nccl").as_dict() == BASE


def test_deepep_nvshmem_adds_the_libfabric_transport():
    assert EfaEnvProfile("p6-b200.48xlarge", "deepep-nvshmem").as_dict() == {
        **BASE,
        "NVSHMEM_REMOTE_TRANSPORT": "libfabric",
        "NVSHMEM_LIBFABRIC_PROVIDER": "efa",
        "NVSHMEM_NETDEVS_POLICY": "EXTERNAL_SHARING_PCIE_SWITCH_NIC_EXCLUSIVE",
        "NVIDIA_GDRCOPY": "enabled",
    }


@pytest.mark.parametrize("instance_type, gin_mode, expected_mode, gin_type", [
    ("p5en.48xlarge", "gpu", "gpu", "5"),
    ("p5en.48xlarge", None, "gpu", "5"),  # default: GPU-initiated where the instance has it
    ("p6-b200.48xlarge", None, "gpu", "5"),
    ("p5en.48xlarge", "proxy", "proxy", "2"),
    ("p5.48xlarge", None, "proxy", "2"),  # default on p5: CPU proxy
    ("p5e.48xlarge", "proxy", "proxy", "2"),
])
def test_deepep_gin_modes(instance_type, gin_mode, expected_mode, gin_type):
    profile = EfaEnvProfile(instance_type, "deepep-gin", gin_mode)
    env = profile.as_dict()
    assert profile.effective_gin_mode == expected_mode
    assert env["NCCL_GIN_TYPE"] == gin_type
    assert env["NVIDIA_GDRCOPY"] == "enabled"
    assert ("NCCL_SYM_GIN_KERNELS_ENABLE" in env) == (expected_mode == "gpu")
    assert env.items() >= BASE.items()


# --- unknown backend / GIN GPU mode on p5: refused at config load AND by the profile ------------


def test_unknown_backend_is_refused_by_the_config():
    with pytest.raises(ConfigError) as err:
        parse_config({"training": {"expert_parallel": {"backend": "deepep-magic"}}})
    assert str(err.value) == (
        "config: 1 problem(s):\n"
        "  - training.expert_parallel.backend = 'deepep-magic': unknown expert-parallel backend. "
        "Fix: use one of nccl, deepep-nvshmem, deepep-gin.")


def test_unknown_backend_is_refused_by_the_profile():
    with pytest.raises(RenderError) as err:
        EfaEnvProfile("p5.48xlarge", "deepep-magic")
    assert str(err.value) == (
        "EFA environment profile: 1 problem(s):\n"
        "  - training.expert_parallel.backend = 'deepep-magic': the EFA environment profile "
        "knows no such expert-parallel backend. Fix: use one of nccl, deepep-nvshmem, deepep-gin.")


def test_gin_gpu_mode_on_p5_is_refused_by_the_config():
    with pytest.raises(ConfigError) as err:
        parse_config({"training": {"expert_parallel": {"backend": "deepep-gin", "gin_mode": "gpu"}}})
    assert str(err.value) == (
        "config: 1 problem(s):\n"
        "  - " "training.expert_parallel.gin_mode = 'gpu': GPU-initiated NCCL GIN runs only on "
        "p5en.48xlarge, p6-b200.48xlarge, p6-b300.48xlarge, not p5.48xlarge. Fix: set gin_mode: "
        "proxy (CPU proxy) or use a node group of p5en.48xlarge, p6-b200.48xlarge, "
        "p6-b300.48xlarge.")


def test_gin_gpu_mode_on_p5_is_refused_by_the_profile():
    with pytest.raises(RenderError) as err:
        EfaEnvProfile("p5.48xlarge", "deepep-gin", "gpu")
    assert str(err.value) == (
        "EFA environment profile: 1 problem(s):\n"
        "  - training.expert_parallel.gin_mode = 'gpu': GPU-initiated NCCL GIN (NCCL_GIN_TYPE=5, "
        "EFA-GDA) runs only on p5en.48xlarge, p6-b200.48xlarge, p6-b300.48xlarge, not p5.48xlarge. "
        "Fix: set gin_mode: proxy (CPU proxy, NCCL_GIN_TYPE=2) or use a node group of "
        "p5en.48xlarge, p6-b200.48xlarge, p6-b300.48xlarge.")


def test_a_config_that_skipped_validation_still_cannot_render_gin_gpu_on_p5():
    valid = parse_config({})
    bad = valid.model_copy(update={"training": valid.training.model_copy(update={
        "expert_parallel": valid.training.expert_parallel.model_copy(
            update={"backend": "deepep-gin", "gin_mode": "gpu"})})})
    with pytest.raises(RenderError) as err:
        build_context(bad, placeholder_outputs(bad))
    assert [p.subject for p in err.value.problems] == ["training.expert_parallel.gin_mode = 'gpu'"]


def test_gin_mode_without_the_gin_backend_is_refused():
    with pytest.raises(RenderError, match="gin_mode applies only to the deepep-gin backend"):
        EfaEnvProfile("p5en.48xlarge", "nccl", "proxy")


# --- training.extra_env -------------------------------------------------------------------------


def render_problems(extra_env: dict[str, str], backend: str = "nccl") -> list[str]:
    cfg = parse_config({"training": {"extra_env": extra_env,
                                     "expert_parallel": {"backend": backend}}})
    with pytest.raises(RenderError) as err:
        build_context(cfg, placeholder_outputs(cfg))
    return [str(p) for p in err.value.problems]


def test_rdmav_fork_safe_is_refused_with_the_cheatsheet_reason():
    assert render_problems({"RDMAV_FORK_SAFE": "1"}) == [
        "training.extra_env.RDMAV_FORK_SAFE = '1': refused: the AWS EFA cheatsheet "
        "(aws-samples/awsome-distributed-training 1.architectures/efa-cheatsheet.md) says never to "
        "set RDMAV_FORK_SAFE; it is an rdma-core setting that behaves differently from "
        "FI_EFA_FORK_SAFE and can break EFA on newer kernels (the kit already sets "
        "FI_EFA_FORK_SAFE=1). Fix: remove RDMAV_FORK_SAFE from training.extra_env."]


def test_rdmav_fork_safe_is_refused_whatever_its_value():
    assert len(render_problems({"RDMAV_FORK_SAFE": "0"})) == 1


@pytest.mark.parametrize("value", ["Simple", "simple", " SIMPLE "])
def test_nccl_proto_simple_is_refused(value):
    assert render_problems({"NCCL_PROTO": value}) == [
        f"training.extra_env.NCCL_PROTO = {value!r}: refused: the AWS EFA cheatsheet "
        "(aws-samples/awsome-distributed-training 1.architectures/efa-cheatsheet.md) limits "
        "NCCL_PROTO=simple to aws-ofi-nccl <= 1.5.0; with the plugin in the trainer image it only "
        "forces NCCL off its faster protocols. Fix: remove NCCL_PROTO from training.extra_env and "
        "let NCCL choose."]


def test_extra_env_cannot_override_the_profile():
    assert render_problems({"NCCL_SOCKET_IFNAME": "eth0"}) == [
        "training.extra_env.NCCL_SOCKET_IFNAME = 'eth0': the kit's EFA profile sets "
        "NCCL_SOCKET_IFNAME=^docker,lo,veth,eni,pod-id-link0 on every GPU pod and extra_env may "
        "not change it. Fix: remove NCCL_SOCKET_IFNAME from training.extra_env (edit "
        "manifests/efa_env.py if the profile itself is wrong)."]


def test_extra_env_cannot_pick_another_backends_variables():
    assert render_problems({"NCCL_GIN_TYPE": "5"}) == [
        "training.extra_env.NCCL_GIN_TYPE = '5': NCCL_GIN_TYPE belongs to another expert-parallel "
        "backend's profile; the kit sets it from training.expert_parallel. Fix: remove "
        "NCCL_GIN_TYPE from training.extra_env and choose training.expert_parallel.backend / "
        "gin_mode instead."]


@pytest.mark.parametrize("value", ["/opt/x:${LD_LIBRARY_PATH}", "a`id -u`b", "cost$5"])
def test_a_value_the_submitters_shell_would_expand_is_refused(value):
    """Before: KubeRay v1.7.0 hands the runtime env to `ray job submit` in a double-quoted string of a
    `bash -ce` command (kuberay@59d663aeec13 common/job.go:177, utils/util.go:1005-1012), so
    ${VAR} became the submitter's own value, `...` ran on the system node, and $5 vanished, while
    the GPU pods kept the literal."""
    assert render_problems({"MY_SETTING": value}) == [
        f"training.extra_env.MY_SETTING = {value!r}: contains $ or `, which the job submitter's shell "
        "would expand before Ray sees the value (KubeRay runs ray job submit through bash), so Ray's "
        "workers and the GPU pods would get different values. Fix: write the value out literally, "
        "without $ or `."]


def test_every_bad_variable_is_reported_at_once():
    problems = render_problems({"RDMAV_FORK_SAFE": "1", "NCCL_PROTO": "Simple",
                                "FI_PROVIDER": "sockets", "OK_VAR": "1"})
    assert [p.split(" = ")[0] for p in problems] == [
        "training.extra_env.RDMAV_FORK_SAFE", "training.extra_env.NCCL_PROTO",
        "training.extra_env.FI_PROVIDER"]


def test_harmless_extra_env_is_appended_after_the_profile():
    profile = EfaEnvProfile("p5.48xlarge", "nccl")
    merged = merge_extra_env(profile, {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"})
    assert [v.name for v in merged] == [*BASE, "NCCL_DEBUG"]  # same-value repeat: kept once
    cfg = parse_config({"training": {"extra_env": {"NCCL_DEBUG": "INFO"}}})
    ctx = build_context(cfg, placeholder_outputs(cfg))
    # then the kit's region variables (manifests.context.REGION_ENV), which no extra_env hides
    assert ctx.worker.env[-3:] == [{"name": "NCCL_DEBUG", "value": "INFO"},
                                   *({"name": n, "value": cfg.region} for n in REGION_ENV)]


@pytest.mark.parametrize("backend, gin_mode, node_group, instance", [
    ("nccl", None, "p5", "p5.48xlarge"),
    ("deepep-nvshmem", None, "p5", "p5.48xlarge"),
    ("deepep-gin", "proxy", "p5", "p5.48xlarge"),
    ("deepep-gin", "gpu", "p5en", "p5en.48xlarge"),
])
def test_every_gpu_pod_carries_the_profile(backend, gin_mode, node_group, instance):
    cfg = parse_config({
        "availability_zones": ["us-east-1a", "us-east-1b"],
        "gpu_node_groups": {node_group: {"instance_type": instance,
                                         "availability_zone": "us-east-1a"}},
        "training": {"node_group": node_group,
                     "expert_parallel": {"backend": backend, "gin_mode": gin_mode}},
    })
    ctx = build_context(cfg, placeholder_outputs(cfg))
    expected = EfaEnvProfile(instance, backend, gin_mode).as_dict()
    assert {e["name"]: e["value"] for e in ctx.worker.env} == {
        **expected, **{n: cfg.region for n in REGION_ENV}}
    assert not any(e["name"].startswith("RDMAV_") for e in ctx.worker.env)
