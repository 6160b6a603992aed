"""UltraServer runs: one ComputeDomain per GPU workload, claimed by every pod of it, all pods in
one NVLink clique, the MNNVL environment; validated against the pinned DRA driver CRDs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from infra.addons import addon
from infra.config import ConfigError, load_config, parse_config
from manifests import RenderError, placeholder_outputs, render_config
from manifests.validate import validate_objects
from tests.support import REPO_ROOT, artifacts

US = REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml"
KUBERAY = f"kuberay-v{addon('kuberay_operator').version}"
DRA_CRDS = f"dra-driver-nvidia-gpu-v{addon('dra_driver').version}"


@pytest.fixture(scope="module")
def crd_dir() -> Path:
    """The folder holding the pinned KubeRay and DRA driver CRDs (required in CI)."""
    artifacts.require(KUBERAY, what="KubeRay CRD schemas")
    artifacts.require(DRA_CRDS, what="NVIDIA DRA driver CRD schemas")
    return artifacts.common_root((KUBERAY, DRA_CRDS), "crds")


def render(path: Path = US, **training):
    cfg = load_config(path)
    if training:
        cfg = cfg.model_copy(update={"training": cfg.training.model_copy(update=training)})
    return cfg, render_config(cfg, placeholder_outputs(cfg))


def gpu_pods(files) -> dict[str, dict]:
    """Workload label -> pod template of every GPU pod (RayJob head and workers, fabric Jobs)."""
    specs = {}
    for f in files:
        if f.kind == "RayJob":
            cluster = f.obj["spec"]["rayClusterSpec"]
            for t in [cluster["headGroupSpec"]["template"]] + [
                    wg["template"] for wg in cluster["workerGroupSpecs"]]:
                specs[t["metadata"]["labels"]["rlkit.aws/workload"]] = t
        elif f.kind == "Job":
            t = f.obj["spec"]["template"]
            specs[t["metadata"]["labels"]["rlkit.aws/workload"]] = t
    return specs


def test_one_compute_domain_per_run_claimed_by_every_worker_in_one_clique():
    cfg, files = render()
    domains = {f.path: f.obj for f in files if f.kind == "ComputeDomain"}
    run = domains.pop("rl-job/00-compute-domain.yaml")
    assert run["metadata"]["name"] == cfg.training.run_name
    template = run["spec"]["channel"]["resourceClaimTemplate"]["name"]
    # each fabric job has its own domain ("a ComputeDomain per workload job", EKS page)
    assert sorted(domains) == ["fabric/allreduce/00-compute-domain.yaml",
                               "fabric/ep/00-compute-domain.yaml",
                               "fabric/nodecheck/00-compute-domain.yaml"]
    pods = gpu_pods(files)
    run = cfg.training.run_name
    # the head is the run's first GPU node: it claims the run's domain like every worker
    for workload in (f"{run}-head", f"{run}-worker"):
        spec = pods[workload]["spec"]
        assert spec["resourceClaims"] == [{"name": "compute-domain-channel",
                                           "resourceClaimTemplateName": template}]
        assert spec["containers"][0]["resources"]["claims"] == [{"name": "compute-domain-channel"}]
    for workload, pod in pods.items():
        domain = run if workload in (f"{run}-head", f"{run}-worker") else workload
        # one clique per domain, selected on a label every pod of the domain carries
        assert pod["metadata"]["labels"]["rlkit.aws/compute-domain"] == domain
        spec = pod["spec"]
        (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term == {"labelSelector": {"matchLabels": {"rlkit.aws/compute-domain": domain}},
                        "topologyKey": "nvidia.com/gpu.clique"}
        assert spec["resourceClaims"][0]["resourceClaimTemplateName"] == (
            template if domain == run else f"{workload}-channel")
    rayjob = next(f.obj for f in files if f.kind == "RayJob")
    assert rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 17  # + the head


def test_a_16_node_run_with_two_spares_is_one_domain(tmp_path):
    """The example's UltraServer with 2 nodes kept as warm spares in the domain: 64 GPUs, so
    128 experts divide EP 64 (the example itself runs all 18 nodes at EP 8)."""
    text = US.read_text().replace("  nodes: 18\n", "  nodes: 16\n").replace(
        "ep: 8, etp: 1", "ep: 64, etp: 1").replace(
        "  grpo: {rollout_batch_size: 36, n_samples_per_prompt: 8, global_batch_size: 288}\n", "")
    (tmp_path / "us16.yaml").write_text(text)
    cfg, files = render(tmp_path / "us16.yaml")
    assert (cfg.training.nodes, cfg.training.parallel.ep) == (16, 64)
    (domain,) = [f.obj for f in files if f.kind == "ComputeDomain" and f.path.startswith("rl-job/")]
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    rayjob = next(f.obj for f in files if f.kind == "RayJob")["spec"]["rayClusterSpec"]
    assert rayjob["workerGroupSpecs"][0]["replicas"] == 15  # + the head: 16 nodes
    for pod in (rayjob["headGroupSpec"]["template"], rayjob["workerGroupSpecs"][0]["template"]):
        assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template
        assert pod["metadata"]["labels"]["rlkit.aws/compute-domain"] == domain["metadata"]["name"]


def test_no_domain_claim_or_clique_off_ultraservers():
    _, files = render(REPO_ROOT / "examples" / "p5en-capacity-block.yaml")
    assert not [f for f in files if f.kind == "ComputeDomain"]
    for spec in (pod["spec"] for pod in gpu_pods(files).values()):
        assert "resourceClaims" not in spec and "podAffinity" not in spec["affinity"]
        names = {e["name"] for e in spec["containers"][0]["env"]}
        assert not names & {"NCCL_MNNVL_ENABLE", "NCCL_NVLS_ENABLE"}


def test_mnnvl_env_on_every_gpu_pod_and_no_efa_gda():
    _, files = render()
    for spec in (pod["spec"] for pod in gpu_pods(files).values()):
        env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
        assert env["NCCL_MNNVL_ENABLE"] == "1" and env["NCCL_NVLS_ENABLE"] == "1"
        assert "NCCL_GIN_TYPE" not in env
        # Set, not left to NCCL's default: SGLang and Miles turn cuMem (and with it MNNVL) off
        # when the variable is unset (manifests/efa_env.py cites both).
        assert env["NCCL_CUMEM_ENABLE"] == "1"
    # Ray hands the runtime env to the driver and every actor, where Miles reads it.
    (job,) = [f.obj for f in files if f.kind == "RayJob"]
    runtime = yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]
    assert runtime["NCCL_CUMEM_ENABLE"] == "1"


def test_cumem_off_is_refused_on_ultraservers_only():
    with pytest.raises(RenderError) as err:
        render(extra_env={"NCCL_CUMEM_ENABLE": "0"})
    assert [str(p) for p in err.value.problems] == [
        "training.extra_env.NCCL_CUMEM_ENABLE = '0': refused on p6e-gb200.36xlarge: NCCL turns "
        "multi-node NVLink off without cuMem, silently (NVIDIA/nccl v2.30.7-1 src/mnnvl.cc:15-16, "
        "\"MNNVL requires cuMem to be enabled\"), so all-to-all would cross EFA. Fix: remove "
        "NCCL_CUMEM_ENABLE from training.extra_env."]
    with pytest.raises(RenderError, match="may not change it"):
        render(extra_env={"NCCL_MNNVL_ENABLE": "0"})
    # on p5en the same variable is the user's business (AWS's NeMo-RL recipe sets it there)
    render(REPO_ROOT / "examples" / "p5en-capacity-block.yaml",
           extra_env={"NCCL_CUMEM_ENABLE": "0"})



def test_an_ultraserver_group_with_the_dra_driver_off_is_refused():
    """The pods claim a ComputeDomain's channel: with the driver off, render and synth succeeded
    and only `rlkit check` found the missing CRD and DeviceClasses, on a deployed cluster."""
    data = yaml.safe_load(US.read_text())
    data["addons"] = {"dra_driver": {"enabled": False}}
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert [str(p) for p in err.value.problems] == [
        "addons.dra_driver.enabled = False: group gb200 (p6e-gb200.36xlarge) runs multi-node "
        "NVLink through a ComputeDomain's IMEX channel, which only the NVIDIA DRA driver provides. "
        "Fix: remove addons.dra_driver.enabled: false (the kit turns it on for this instance type)."]


def test_compute_domains_validate_against_the_pinned_crd_and_a_broken_one_fails(crd_dir):
    cfg, files = render()
    report = validate_objects([(f.path, f.obj) for f in files],
                              kubernetes_version=cfg.kubernetes_version, crd_dir=crd_dir,
                              strict=True)
    assert report.ok, report.format()
    checked = {r.kind: r.checked_with for r in report.results}
    assert checked["ComputeDomain"] == "CRD resource.nvidia.com_computedomains.yaml (v1beta1)"
    domain = copy.deepcopy(next(f.obj for f in files if f.kind == "ComputeDomain"))
    del domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    domain["spec"]["channel"]["allocationMode"] = "Every"
    broken = validate_objects([("cd.yaml", domain)], kubernetes_version=cfg.kubernetes_version,
                              crd_dir=crd_dir, strict=True)
    assert not broken.ok
    text = broken.format()
    assert "name" in text and "Every" in text
