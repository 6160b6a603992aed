"""Rendered manifests: golden files, cross-layer consistency, stack outputs, run config."""

from __future__ import annotations

import functools
import io
import json
import sys

import pytest
import yaml

from infra import names
from infra.catalog import INSTANCE_TYPES
from infra.config import ConfigError, KitConfig, load_config, parse_config
from infra.names import OutputKeys
from manifests import (
    PLACEHOLDER,
    RenderError,
    build_context,
    outputs_from_file,
    outputs_from_stacks,
    placeholder_outputs,
    render,
    write,
)
from manifests.context import GENERATED_MARKER, OUTPUTS_ANNOTATION, PLACEHOLDER_ANNOTATION, image_tag_for
from manifests.outputs import StackOutputsError, load_outputs_json, outputs_from_mapping
from infra.addons import addon
from manifests.render import NAMESPACE_FILES, TEMPLATES
from tests.support.outputs import real_outputs
from tests.support import REPO_ROOT, YAML_LOADER

GOLDEN = REPO_ROOT / "tests" / "golden"
EXAMPLES = sorted(p.stem for p in (REPO_ROOT / "examples").glob("*.yaml"))
REGEN = "python scripts/regen_golden.py"


@functools.cache
def example(name: str) -> KitConfig:
    return load_config(REPO_ROOT / "examples" / f"{name}.yaml")


@functools.cache
def rendered(name: str) -> tuple:
    cfg = example(name)
    return tuple(render(build_context(cfg, placeholder_outputs(cfg))))


def objects(files) -> dict[str, dict]:
    return {f.path: f.obj for f in files}


def gpu_pod_specs(files) -> dict[str, dict]:
    """Every pod spec that owns a GPU node: the Ray worker group and each fabric job."""
    specs = {}
    for f in files:
        if f.kind == "RayJob":
            for g in f.obj["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
                specs[f"{f.path}:{g['groupName']}"] = g["template"]["spec"]
        elif f.kind == "Job":
            specs[f.path] = f.obj["spec"]["template"]["spec"]
    return specs


# --- golden files -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_rendered_output_matches_golden_files(name):
    golden = GOLDEN / name
    expected = {str(p.relative_to(golden)): p.read_text()
                for p in sorted(golden.rglob("*")) if p.is_file()}
    actual = {f.path: f.text for f in rendered(name)}
    assert sorted(actual) == sorted(expected), f"file set changed: run `{REGEN}` and review"
    for path, text in actual.items():
        assert text == expected[path], f"{name}/{path} differs from golden: run `{REGEN}` and review"


def test_every_example_has_golden_files_and_nothing_else():
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == EXAMPLES


def test_written_tree_is_what_render_returned(tmp_path):
    files = rendered("default")
    write(files, tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.yaml")) == \
        sorted(f.path for f in files)


def test_write_replaces_stale_rendered_files_but_keeps_foreign_ones(tmp_path):
    stale = tmp_path / "fabric" / "old-job" / "00-job.yaml"
    stale.parent.mkdir(parents=True)
    stale.write_text(f"{GENERATED_MARKER} for environment 'x'.\nkind: Job\n")
    foreign = tmp_path / "my-extra.yaml"
    foreign.write_text("kind: ConfigMap\n")
    theirs = tmp_path / "notes" / "drafts"  # an empty directory someone else made here
    theirs.mkdir(parents=True)
    write(rendered("default"), tmp_path)
    assert not stale.exists() and not stale.parent.exists()
    assert foreign.exists()
    assert theirs.is_dir()  # only the directories our deletes emptied go


def test_templates_fail_on_undefined_values():
    assert TEMPLATES.undefined.__name__ == "StrictUndefined"
    cfg = example("default")
    ctx = build_context(cfg, placeholder_outputs(cfg))
    with pytest.raises(Exception, match="'meta' is undefined"):
        TEMPLATES.get_template("namespace.yaml.j2").render(ctx=ctx)


def test_each_file_holds_one_object():
    for name in EXAMPLES:
        for f in rendered(name):
            docs = [d for d in yaml.load_all(f.text, Loader=YAML_LOADER) if d is not None]
            assert len(docs) == 1 and docs[0]["kind"] == f.kind, f"{name}/{f.path}"


# --- consistency with the catalog, the node groups and infra.names -----------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_gpu_pods_request_the_whole_node_from_the_catalog(name):
    cfg = example(name)
    itype = INSTANCE_TYPES[cfg.gpu_node_groups[cfg.training.node_group].instance_type]
    specs = gpu_pod_specs(rendered(name))
    assert len(specs) == 4  # Ray workers + nodecheck + allreduce + ep
    for where, spec in specs.items():
        (container,) = spec["containers"]
        res = container["resources"]
        for part in ("requests", "limits"):
            assert res[part]["nvidia.com/gpu"] == itype.gpu_count, where
            assert res[part]["vpc.amazonaws.com/efa"] == itype.efa_devices, where
            assert res[part]["hugepages-2Mi"] == "5120Mi", where
        assert int(res["requests"]["cpu"]) < itype.vcpus, where
        assert int(res["requests"]["memory"].removesuffix("Gi")) < itype.memory_gib, where
        # DeepEP's kernels are timed with the CUDA profiler: its benchmark and the node check that
        # checks that permission get CAP_PERFMON (rltrainer.nodecheck "profiling"); nothing else does
        profiler = cfg.training.expert_parallel.backend.startswith("deepep") and where.startswith(
            ("fabric/nodecheck", "fabric/ep"))
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"] + (["PERFMON"] if profiler else []), where
        shm = {m["name"] for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"}
        (shm_volume,) = [v for v in spec["volumes"] if v["name"] in shm]
        assert shm_volume["emptyDir"]["medium"] == "Memory", where


@pytest.mark.parametrize("name", EXAMPLES)
def test_tolerations_match_the_node_group_taints(name):
    cfg = example(name)
    group = cfg.gpu_node_groups[cfg.training.node_group]
    expected = [names.GPU_TAINT.toleration()] + [
        names.Taint(t.key, t.value, t.effect).toleration() for t in group.taints]
    for where, spec in gpu_pod_specs(rendered(name)).items():
        assert spec["tolerations"] == expected, where


def test_extra_node_group_taints_are_tolerated():
    cfg = parse_config({"gpu_node_groups": {"p5": {
        "instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
        "taints": [{"key": "team.example.com/reserved", "value": "rl", "effect": "NoExecute"}]}}})
    files = render(build_context(cfg, placeholder_outputs(cfg)))
    for where, spec in gpu_pod_specs(files).items():
        assert spec["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            {"key": "team.example.com/reserved", "operator": "Exists"},
        ], where


def _tolerates(toleration: dict, taint: names.Taint) -> bool:
    """Kubernetes' rule (k8s.io/api core/v1 toleration.go ToleratesTaint), for these fields."""
    if toleration.get("effect") and toleration["effect"] != taint.effect:
        return False
    if toleration.get("key") != taint.key:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.value


@pytest.mark.parametrize("name", EXAMPLES)
def test_pods_land_on_the_nodes_the_cdk_node_group_creates(name):
    """Cross-check against the construct's own labels and taints, not a copy of them."""

    cfg = example(name)
    group_name = cfg.training.node_group
    group = cfg.gpu_node_groups[group_name]
    labels = {**group.node_labels(group_name), names.ZONE_LABEL: group.availability_zone}
    for where, spec in gpu_pod_specs(rendered(name)).items():
        for taint in group.node_taints():
            assert any(_tolerates(t, taint) for t in spec["tolerations"]), (where, taint)
        (term,) = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        for expr in term["matchExpressions"]:
            assert expr["operator"] == "In" and labels.get(expr["key"]) in expr["values"], \
                (where, expr)
        keys = {e["key"] for e in term["matchExpressions"]}
        assert {names.ZONE_LABEL, names.NODE_GROUP_LABEL} <= keys


def gpu_pod_templates(files) -> dict[str, dict]:
    """Pod templates (metadata + spec) of the Ray worker group and each fabric job."""
    templates = {}
    for f in files:
        if f.kind == "RayJob":
            for g in f.obj["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
                templates[f"{f.path}:{g['groupName']}"] = g["template"]
        elif f.kind == "Job":
            templates[f.path] = f.obj["spec"]["template"]
    return templates


@pytest.mark.parametrize("name", EXAMPLES)
def test_one_pod_per_node(name):
    for where, pod in gpu_pod_templates(rendered(name)).items():
        (rule,) = pod["spec"]["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        assert rule["topologyKey"] == "kubernetes.io/hostname", where
        selector = rule["labelSelector"]["matchLabels"]
        assert selector and selector.items() <= pod["metadata"]["labels"].items(), where


@pytest.mark.parametrize("name", EXAMPLES)
def test_namespace_and_service_account_match_infra_names(name):
    files = rendered(name)
    by_kind = {f.kind: f.obj for f in files if f.kind in ("Namespace", "ServiceAccount")}
    assert by_kind["Namespace"]["metadata"]["name"] == names.TRAINER_NAMESPACE
    assert by_kind["ServiceAccount"]["metadata"]["name"] == names.TRAINER_SERVICE_ACCOUNT
    for f in files:
        if f.kind not in ("Namespace", "PersistentVolume"):  # the two cluster-scoped kinds
            assert f.obj["metadata"]["namespace"] == names.TRAINER_NAMESPACE, f.path
    rayjob = next(f.obj for f in files if f.kind == "RayJob")
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["serviceAccountName"] == names.TRAINER_SERVICE_ACCOUNT


@pytest.mark.parametrize("name", EXAMPLES)
def test_ray_cluster_shape(name):
    cfg = example(name)
    rayjob = next(f.obj for f in rendered(name) if f.kind == "RayJob")
    cluster = rayjob["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    (workers,) = cluster["workerGroupSpecs"]
    # the head is the run's first GPU node (tests/manifests/test_training_job.py: where the driver runs)
    assert head["affinity"]["nodeAffinity"] == workers["template"]["spec"]["affinity"]["nodeAffinity"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == cfg.training.nodes - 1


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_submitter_survives_more_than_kuberays_two_retries(name):
    """KubeRay v1.7.0 fails the whole RayJob when its submitter Job fails, and that Job's
    backoffLimit is 2 unless spec.submitterConfig sets it (ray-project/kuberay@59d663aeec13
    ray-operator/controllers/ray/rayjob_controller.go:718, createNewK8sJob).
    Before: three drained system nodes in a run of days ended a run that was training fine."""
    from manifests.context import SUBMITTER_BACKOFF_LIMIT

    rayjob = next(f.obj for f in rendered(name) if f.kind == "RayJob")
    assert rayjob["spec"]["submitterConfig"] == {"backoffLimit": SUBMITTER_BACKOFF_LIMIT}
    assert SUBMITTER_BACKOFF_LIMIT > 2


def _selects(selector: dict, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions In/NotIn/Exists) on labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    ops = {"In": lambda e: labels.get(e["key"]) in e["values"],
           "NotIn": lambda e: labels.get(e["key"]) not in e["values"],
           "Exists": lambda e: e["key"] in labels}
    return all(ops[e["operator"]](e) for e in selector.get("matchExpressions", []))


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_drain_cannot_evict_the_runs_gpu_pods_unless_on_a_capacity_block(name):
    """Before: nothing stopped an EKS node group update (a new launch template) from draining the
    run's nodes one by one, though force_update: false promised to wait for disruption budgets.
    The budget selects the Ray head and workers (not KubeRay's submitter, a Job's pod), lets
    none go voluntarily, and lets an unhealthy pod go. A Capacity Block gets none: EKS drains its
    nodes before the block ends."""
    cfg = example(name)
    spec = next(f.obj for f in rendered(name) if f.kind == "RayJob")["spec"]
    pods = {"head": spec["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"],
            "worker": spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["metadata"]["labels"],
            "submitter": spec["submitterPodTemplate"]["metadata"]["labels"]}
    budgets = [f.obj for f in rendered(name) if f.kind == "PodDisruptionBudget"]
    if cfg.gpu_node_groups[cfg.training.node_group].capacity.type == "capacity-block":
        assert budgets == []
        return
    [budget] = budgets
    assert budget["metadata"]["namespace"] == names.TRAINER_NAMESPACE
    assert {k: v for k, v in budget["spec"].items() if k != "selector"} == {
        "maxUnavailable": 0, "unhealthyPodEvictionPolicy": "AlwaysAllow"}
    assert {pod for pod, labels in pods.items() if _selects(budget["spec"]["selector"], labels)} == {
        "head", "worker"}


@pytest.mark.parametrize("name", EXAMPLES)
def test_rayjob_entrypoint_reads_the_mounted_run_config(name):
    files = objects(rendered(name))
    configmap = files["rl-job/00-run-config.yaml"]
    rayjob = files["rl-job/04-rayjob.yaml"]
    assert rayjob["spec"]["entrypoint"] == "rltrainer launch --config /etc/rltrainer/run.yaml"
    cluster = rayjob["spec"]["rayClusterSpec"]
    for spec in (cluster["headGroupSpec"]["template"]["spec"],
                 cluster["workerGroupSpecs"][0]["template"]["spec"]):
        (volume,) = [v for v in spec["volumes"] if "configMap" in v]
        assert volume["configMap"]["name"] == configmap["metadata"]["name"]
        (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
        assert f"{mount['mountPath']}/run.yaml" == "/etc/rltrainer/run.yaml"
        assert "run.yaml" in configmap["data"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_fabric_jobs_are_indexed_with_stable_rendezvous_names(name):
    cfg = example(name)
    files = objects(rendered(name))
    for key in ("allreduce", "ep"):
        service = files[f"fabric/{key}/00-service.yaml"]
        job = files[f"fabric/{key}/01-job.yaml"]
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed"
        assert spec["completions"] == spec["parallelism"] == cfg.training.nodes
        pod = spec["template"]
        assert pod["spec"]["subdomain"] == service["metadata"]["name"]
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        command = pod["spec"]["containers"][0]["command"]
        assert command[command.index("--master-addr") + 1] == \
            f"{job['metadata']['name']}-0.{service['metadata']['name']}"
        assert command[command.index("--node-rank") + 1] == "$(JOB_COMPLETION_INDEX)"
        assert command[command.index("--nnodes") + 1] == str(cfg.training.nodes)
    nodecheck = files["fabric/nodecheck/00-job.yaml"]["spec"]
    assert nodecheck["completions"] == nodecheck["parallelism"] == cfg.training.nodes


def test_ep_benchmark_uses_the_model_shape_and_backend():
    files = objects(rendered("p6-b200-odcr"))  # deepep-nvshmem
    command = files["fabric/ep/01-job.yaml"]["spec"]["template"]["spec"]["containers"][0]["command"]
    tail = command[command.index("rltrainer.bench") + 1:]
    # The model's shape inside the run's training and rollout EP groups (EP8 each, one node: the
    # path the run's all-to-all takes); 2 x 8 GPUs divide DeepEP's published 256 experts, so the
    # job also measures that shape over both nodes (the fabric acceptance run).
    assert tail == ["ep", "--backend", "deepep", "--tokens-per-rank", "4096", "--hidden", "2048",
                    "--topk", "8", "--experts", "128", "--span", "training:8:1", "--span", "rollout:8:1",
                    "--acceptance"]
    files = objects(rendered("default"))  # nccl
    command = files["fabric/ep/01-job.yaml"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--backend") + 1] == "nccl"


def test_unknown_model_cannot_render_the_ep_benchmark():
    # the config refuses such a model (tests/infra/test_config.py); the renderer still guards
    # against a config built without validation
    cfg = parse_config({})
    cfg = cfg.model_copy(update={"training": cfg.training.model_copy(update={"model": "mystery-moe"})})
    with pytest.raises(RenderError) as err:
        build_context(cfg, placeholder_outputs(cfg))
    assert str(err.value) == (
        "render context: 1 problem(s):\n"
        "  - training.model = 'mystery-moe': the expert-parallel benchmark needs the model's MoE "
        "shape (hidden size, experts, top-k) and the kit does not know this model. Fix: use one "
        "of qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3, mixtral-8x7b, mixtral-8x22b, kimi-k2, or "
        "add the model's config.json values to infra/catalog/models.py.")


def test_ep_benchmark_spans_follow_the_run_config():
    cfg = parse_config({"training": {"nodes": 2, "parallel": {"tp": 2, "ep": 16, "etp": 1},
                                     "rollout": {"gpus_per_engine": 8, "ep": 4}}})
    ctx = build_context(cfg, placeholder_outputs(cfg))
    (job,) = [j for j in ctx.fabric if j.key == "ep"]
    tail = job.command[job.command.index("rltrainer.bench") + 1:]
    assert tail[tail.index("--span"):] == ["--span", "training:16:1", "--span", "rollout:4:2", "--acceptance"]
    assert "training EP16 across EFA (2 nodes)" in job.description


def test_ep_benchmark_needs_experts_divisible_by_the_gpu_count():
    cfg = parse_config({
        "gpu_node_groups": {"p5": {"instance_type": "p5.48xlarge",
                                   "availability_zone": "us-east-1a", "max_size": 24}},
        # A batch Megatron accepts on 24 data-parallel ranks (config validation runs the trainer's
        # checks), so that only the benchmark's expert split is wrong. Without an EP group in the
        # run (ep 1 on both sides) the model's shape is measured over every GPU.
        "training": {"nodes": 24, "parallel": {"tp": 8, "ep": 1}, "rollout": {"ep": 1},
                     "grpo": {"rollout_batch_size": 24, "global_batch_size": 192}},
    })
    with pytest.raises(RenderError) as err:
        build_context(cfg, placeholder_outputs(cfg))
    assert err.value.problems[0].rule == (
        "the expert-parallel benchmark spreads qwen3-30b-a3b's 128 experts evenly over all "
        "24 x 8 = 192 GPUs, and that does not divide")


# --- stack outputs ------------------------------------------------------------------------------


def test_placeholder_outputs_are_marked_on_every_object():
    for name in EXAMPLES:
        for f in rendered(name):
            assert f.text.startswith(GENERATED_MARKER), f.path
            assert "# PLACEHOLDER STACK OUTPUTS" in f.text, f.path
            annotations = f.obj["metadata"]["annotations"]
            assert annotations[OUTPUTS_ANNOTATION] == "placeholder", f.path
            assert PLACEHOLDER in annotations[PLACEHOLDER_ANNOTATION], f.path


def _render_with_real_outputs(cfg, tmp_path):
    path = tmp_path / "cdk-outputs.json"
    path.write_text(json.dumps(real_outputs(cfg)))
    return render(build_context(cfg, outputs_from_file(cfg, path)))


@pytest.mark.parametrize("name", EXAMPLES)
def test_real_outputs_leave_no_placeholder_and_set_the_ecr_image(name, tmp_path):
    cfg = example(name)
    files = _render_with_real_outputs(cfg, tmp_path)
    data = real_outputs(cfg)[names.stack_names(cfg.name)["data"]]
    expected_image = cfg.training.image or f"{data[OutputKeys.ECR_REPOSITORY_URI]}:{image_tag_for(cfg)}"
    for f in files:
        assert "placeholder" not in f.text.lower(), f.path
        assert f.obj["metadata"]["annotations"][OUTPUTS_ANNOTATION] == "file"
    rayjob = next(f.obj for f in files if f.kind == "RayJob")
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    images = {c["image"] for spec in [head, *gpu_pod_specs(files).values()]
              for c in spec["containers"]}
    assert images == {expected_image}
    run = yaml.safe_load(next(f.obj for f in files if f.kind == "ConfigMap")["data"]["run.yaml"])
    bucket = data[OutputKeys.BUCKET_NAME]
    assert run["checkpoint"]["s3_uri"] == f"s3://{bucket}/checkpoints/{cfg.training.run_name}/"


def test_training_image_overrides_the_ecr_repository(tmp_path):
    cfg = parse_config({"training": {"image": "public.ecr.aws/example/trainer:1.2.3"}})
    outputs = real_outputs(cfg)
    del outputs[names.stack_names(cfg.name)["data"]][OutputKeys.ECR_REPOSITORY_URI]
    files = render(build_context(cfg, outputs_from_mapping(cfg, outputs, "file", "x.json")))
    images = {c["image"] for spec in gpu_pod_specs(files).values() for c in spec["containers"]}
    assert images == {"public.ecr.aws/example/trainer:1.2.3"}


def test_missing_output_key_names_stack_key_and_fix(tmp_path):
    cfg = example("default")
    data = real_outputs(cfg)
    del data["moe-rl-data"][OutputKeys.BUCKET_NAME]
    path = tmp_path / "cdk-outputs.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RenderError) as err:
        outputs_from_file(cfg, path)
    assert str(err.value) == (
        "stack outputs: 1 problem(s):\n"
        f"  - stack moe-rl-data, output DataBucketName: missing from {path} (the deployed stack "
        "is older than this kit, or the outputs were edited). Fix: redeploy it with every "
        "stack of the config (`npx aws-cdk@2.1148.1 deploy --all -c config=<your config file> "
        "--outputs-file cdk-outputs.json`), then run `rlkit render --outputs cdk-outputs.json` "
        "again.")


def test_missing_stack_names_the_outputs_it_should_provide():
    cfg = example("default")
    data = real_outputs(cfg)
    del data["moe-rl-gpu-p5"]
    with pytest.raises(RenderError) as err:
        outputs_from_mapping(cfg, data, "file", "cdk-outputs.json")
    assert [str(p) for p in err.value.problems] == [
        "stack moe-rl-gpu-p5: not found in cdk-outputs.json (its outputs are needed: "
        "NodegroupName). Fix: deploy it with every stack of the "
        "config (`npx aws-cdk@2.1148.1 deploy --all -c config=<your config file> --outputs-file "
        "cdk-outputs.json`), then run `rlkit render --outputs cdk-outputs.json` again."]


def test_outputs_of_another_environment_or_kit_version_are_refused():
    cfg = example("default")
    data = real_outputs(cfg)
    data["moe-rl-cluster"][OutputKeys.REGION] = "eu-west-1"
    data["moe-rl-cluster"][OutputKeys.TRAINER_SERVICE_ACCOUNT] = "trainer"
    with pytest.raises(RenderError) as err:
        outputs_from_mapping(cfg, data, "file", "cdk-outputs.json")
    assert [p.subject for p in err.value.problems] == [
        "stack moe-rl-cluster, output Region = 'eu-west-1'",
        "stack moe-rl-cluster, output TrainerServiceAccount = 'trainer'",
    ]


def test_missing_or_broken_outputs_file(tmp_path):
    cfg = example("default")
    with pytest.raises(RenderError, match="does not exist") as err:
        outputs_from_file(cfg, tmp_path / "nope.json")
    # the deploy it names builds this config, not app.py's built-in default, and every stack
    # (an --outputs-file deploy of some stacks writes a file with only theirs)
    assert err.value.problems[0].fix == (
        "run `npx aws-cdk@2.1148.1 deploy --all -c config=<your config file> --outputs-file "
        "cdk-outputs.json` and pass that file, or run `rlkit render --from-stacks`")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(RenderError, match="not valid JSON"):
        outputs_from_file(cfg, broken)


def test_outputs_of_another_environment_are_one_problem_naming_it(tmp_path):
    cfg = example("p5-2node")  # environment p5-team
    other = tmp_path / "other.json"
    other.write_text(json.dumps(real_outputs(example("default"))))  # environment moe-rl
    with pytest.raises(RenderError) as err:
        outputs_from_file(cfg, other)
    assert str(err.value) == (
        "stack outputs: 1 problem(s):\n"
        f"  - outputs file {other}: holds the outputs of environment 'moe-rl' (moe-rl-cluster, "
        "moe-rl-data, moe-rl-gpu-p5, moe-rl-network, moe-rl-storage), not 'p5-team'. Fix: pass "
        "p5-team's outputs file, or that environment's --config.")
    two = {"a-data": {}, "b-gpu-p5": {}, "CDKToolkit": {}}
    with pytest.raises(RenderError) as err:
        outputs_from_mapping(cfg, two, "file", "two.json")
    assert [str(p) for p in err.value.problems] == [
        "outputs file two.json: holds the outputs of environments 'a' (a-data) and 'b' "
        "(b-gpu-p5), not 'p5-team'. Fix: pass p5-team's outputs file, or the --config of the "
        "environment you meant."]


def test_every_stack_name_maps_back_to_its_environment():
    for env in ("moe-rl", "p5-team", "x-storage", "a"):
        stacks = [*names.stack_names(env).values(), names.gpu_stack_name(env, "p5"),
                  names.gpu_stack_name(env, "b300-network")]
        assert {s: names.environment_of_stack(s) for s in stacks} == dict.fromkeys(stacks, env)
    for foreign in ("CDKToolkit", "-data", "moe-rl-gpu-", "moe-rl-gpu-P5"):
        assert names.environment_of_stack(foreign) is None, foreign


def test_outputs_file_that_is_not_utf8_is_a_clear_problem(tmp_path):
    cfg = example("default")
    data = json.dumps(real_outputs(cfg))
    utf16 = tmp_path / "utf16.json"
    utf16.write_bytes(data.encode("utf-16"))  # a byte-order mark first, as PowerShell's `>` writes
    assert utf16.read_bytes()[:2] in (b"\xff\xfe", b"\xfe\xff")
    with pytest.raises(RenderError) as err:
        outputs_from_file(cfg, utf16)
    bom = "little" if utf16.read_bytes()[:2] == b"\xff\xfe" else "big"
    assert str(err.value) == (
        "stack outputs: 1 problem(s):\n"
        f"  - outputs file {utf16}: is UTF-16 ({bom}-endian) text, not UTF-8 JSON (Windows "
        "PowerShell's `>` writes UTF-16). Fix: re-save it as UTF-8 (`iconv -f UTF-16 -t UTF-8 "
        f"{utf16} > cdk-outputs.json`, or in PowerShell `Get-Content {utf16} | Set-Content "
        "-Encoding utf8 cdk-outputs.json`), or pass the file `cdk deploy --outputs-file` wrote.")
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'{"caf\xe9": {}}')
    with pytest.raises(StackOutputsError) as err:
        load_outputs_json(latin1)  # the reader `rlkit image` uses: the same text, on one line
    assert str(err.value) == (
        f"--outputs {latin1}: is not UTF-8 text (byte 0xe9 at offset 5), so not the JSON cdk "
        "writes. Fix: re-save it as UTF-8 (`iconv -f <its encoding> -t UTF-8 "
        f"{latin1} > cdk-outputs.json`, or in PowerShell `Get-Content {latin1} | Set-Content "
        "-Encoding utf8 cdk-outputs.json`), or pass the file `cdk deploy --outputs-file` wrote")
    with_bom = tmp_path / "bom.json"  # UTF-8 with a byte-order mark is still UTF-8: accepted
    with_bom.write_bytes(data.encode("utf-8-sig"))
    assert outputs_from_file(cfg, with_bom).bucket_name == outputs_from_mapping(
        cfg, real_outputs(cfg), "file", "x").bucket_name


def _create_stack(client, name: str, outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {k: {"Value": v} for k, v in outputs.items()},
    }
    client.create_stack(StackName=name, TemplateBody=json.dumps(template))


def test_outputs_from_cloudformation_stacks():
    boto3 = pytest.importorskip("boto3")
    from moto import mock_aws

    cfg = example("p5-2node")
    with mock_aws():
        client = boto3.client("cloudformation", region_name=cfg.region)
        for stack, outputs in real_outputs(cfg).items():
            _create_stack(client, stack, outputs)
        got = outputs_from_stacks(cfg, client)
    assert got.source == "cloudformation"
    assert got.bucket_name == "p5-team-data-123456789012"
    assert got.nodegroup_name == "p5-team-p5"


def test_outputs_from_cloudformation_report_undeployed_stacks():
    boto3 = pytest.importorskip("boto3")
    from moto import mock_aws

    cfg = example("default")
    with mock_aws():
        client = boto3.client("cloudformation", region_name=cfg.region)
        data = real_outputs(cfg)
        _create_stack(client, "moe-rl-data", data["moe-rl-data"])
        with pytest.raises(RenderError) as err:
            outputs_from_stacks(cfg, client)
    assert [p.subject for p in err.value.problems] == [
        "stack moe-rl-cluster", "stack moe-rl-gpu-p5", "stack moe-rl-storage"]
    assert "then run `rlkit render --from-stacks` again" in str(err.value)


# --- the run config -----------------------------------------------------------------------------


def run_yaml(name: str) -> dict:
    cm = next(f.obj for f in rendered(name) if f.kind == "ConfigMap")
    return yaml.safe_load(cm["data"]["run.yaml"])


@pytest.mark.parametrize("name", EXAMPLES)
def test_run_config_follows_the_trainer_schema(name):
    cfg = example(name)
    t = cfg.training
    run = run_yaml(name)
    assert list(run) == ["run_name", "model", "checkpoint", "data", "grpo", "parallel",
                         "expert_parallel"]
    assert run["model"] == {"name": t.model, "hf_checkpoint": t.hf_checkpoint, "megatron_args": []}
    # Every example has the shared file system: saves and inputs are where every pod sees them.
    assert run["checkpoint"] == {
        "s3_uri": f"s3://{PLACEHOLDER}/checkpoints/{t.run_name}/",
        "local_dir": f"/fsx/checkpoints/{t.run_name}", "save_interval": 20,
        "keep_local": t.checkpoint.keep_local}
    assert run["data"] == {"prompt_data": f"/fsx/{t.prompt_data}",
                           "input_key": "prompt", "label_key": "label", "rm_type": t.reward_model}
    assert run["grpo"] == t.grpo.model_dump()
    itype = INSTANCE_TYPES[cfg.gpu_node_groups[t.node_group].instance_type]
    assert run["parallel"] == {
        "nodes": t.nodes, "gpus_per_node": itype.gpu_count,
        # recompute and the micro-batch token cap only when not the trainer's defaults (full,
        # 20480: every example keeps them)
        "training": t.parallel.model_dump(exclude={"vpp", "recompute", "max_tokens_per_gpu"}),
        # the mode keys (placement, nodes, overlap, off_policy_steps) only when not the default
        "rollout": t.rollout.model_dump(include={"gpus_per_engine", "ep"})}
    assert run["expert_parallel"] == {"backend": t.expert_parallel.backend}


@pytest.mark.parametrize("shared_fs, prompt_data, expected", [
    ("fsx-lustre", "/data/prompts.jsonl", "/data/prompts.jsonl"),
    # A bucket key under datasets/ is read through the file system's link to that prefix.
    ("fsx-lustre", "datasets/x/prompts.jsonl", "/fsx/datasets/x/prompts.jsonl"),
    ("none", "datasets/x/prompts.jsonl", f"s3://{PLACEHOLDER}/datasets/x/prompts.jsonl"),
])
def test_prompt_data_locations(shared_fs, prompt_data, expected):
    cfg = parse_config({"storage": {"shared_filesystem": {"type": shared_fs}},
                        "training": {"nodes": 1, "prompt_data": prompt_data,
                                     "hf_checkpoint": "/models/Qwen3-30B-A3B"}})
    ctx = build_context(cfg, placeholder_outputs(cfg))
    assert ctx.run_config["data"]["prompt_data"] == expected


def test_s3_retention_reaches_the_trainer_and_its_rule_is_the_trainers():
    """training.checkpoint.keep_s3 renders into run.yaml only when set (a default config's run.yaml
    is unchanged), and a value the trainer refuses fails config validation under the kit's path."""
    cfg = parse_config({"training": {"checkpoint": {"keep_s3": 3}}})
    ctx = build_context(cfg, placeholder_outputs(cfg))
    assert ctx.run_config["checkpoint"]["keep_s3"] == 3
    assert _rltrainer().contract.parse_run_config(ctx.run_config).checkpoint.keep_s3 == 3
    default = parse_config({})
    assert "keep_s3" not in build_context(default, placeholder_outputs(default)).run_config["checkpoint"]
    with pytest.raises(ConfigError) as err:
        parse_config({"training": {"checkpoint": {"keep_s3": -1}}})
    assert [str(p) for p in err.value.problems] == [
        "training.checkpoint.keep_s3 = -1: the trainer refuses it: must be >= 0. Fix: use a value of "
        "at least 0."]


# One save of each catalog model, GiB rounded up: 14 bytes per trained parameter (BF16 weight, FP32
# master weight, two FP32 Adam moments; infra/catalog/models.py checkpoint_bytes). Qwen3-30B-A3B's
# 398.09 GiB is the "about 400 GiB" of docs/operations.md.
SAVE_GIB = {"qwen3-30b-a3b": 399, "qwen3-235b-a22b": 3066}
# The checkpoint keys every example's run.yaml had at 1396d64, before today's trainer changes
# (`git show 1396d64:tests/golden/<example>/rl-job/00-run-config.yaml`, the same four in all seven).
# A trainer image built before then refuses any other key (its CHECKPOINT_KEYS were these plus
# keep_s3), and image tags are immutable: a kit upgrade must keep rendering a run.yaml such an
# image reads. Estimates for the launcher go on the Ray head's environment instead.
CHECKPOINT_KEYS_BEFORE_SAVE_GIB = ["s3_uri", "local_dir", "save_interval", "keep_local"]


def head_env(files) -> dict[str, str]:
    job = next(f.obj for f in files if f.kind == "RayJob")
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in head.get("env", [])}


@pytest.mark.parametrize("name", EXAMPLES)
def test_run_yaml_keeps_its_checkpoint_keys_and_the_save_estimate_rides_on_the_head(name):
    """An older trainer image still reads the run.yaml (no new checkpoint key); the launcher's room
    check gets the catalog model's save size from the head's environment, and the trainer reads
    the rendered value as that many GiB."""
    from infra.trainer_contract import SAVE_SIZE_ESTIMATE_ENV

    assert list(run_yaml(name)["checkpoint"]) == CHECKPOINT_KEYS_BEFORE_SAVE_GIB
    env = head_env(rendered(name))
    model = example(name).training.model
    assert env[SAVE_SIZE_ESTIMATE_ENV] == str(SAVE_GIB[model])
    _rltrainer()
    from rltrainer.checkpoints.space import save_gib_from_env

    assert save_gib_from_env(env, io.StringIO()) == SAVE_GIB[model]


def test_the_save_estimate_follows_the_catalog_model():
    """Qwen3-235B-A22B's save (3066 GiB) reaches the head too, not the 30B's."""
    from infra.trainer_contract import SAVE_SIZE_ESTIMATE_ENV

    cfg = parse_config({"training": {"model": "qwen3-235b-a22b"},
                        "storage": {"shared_filesystem": {"capacity_gib": 7200}}})
    ctx = build_context(cfg, placeholder_outputs(cfg))
    assert list(ctx.run_config["checkpoint"]) == CHECKPOINT_KEYS_BEFORE_SAVE_GIB
    assert {e["name"]: e["value"] for e in ctx.head.env}[SAVE_SIZE_ESTIMATE_ENV] == "3066"


def test_prompt_data_key_outside_the_datasets_prefix_is_refused():
    # Config validation refuses it now (before any render); the renderer keeps its own check.
    with pytest.raises(ConfigError) as err:
        parse_config({"training": {"prompt_data": "prompts/dapo.jsonl"}})
    assert str(err.value.problems[0]) == (
        "training.prompt_data = 'prompts/dapo.jsonl': a data-bucket key must live under datasets/ "
        "(the trainer's role may read only datasets/ and checkpoints/). Fix: upload the file to "
        "s3://<bucket>/datasets/ and use datasets/dapo.jsonl, or give an absolute path inside the "
        "image.")


def _rltrainer():
    """The trainer package from images/trainer (installed, or straight from its source tree)."""
    try:
        import rltrainer  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(REPO_ROOT / "images" / "trainer" / "src"))
    import rltrainer.contract

    return rltrainer


def test_a_run_name_shaped_like_a_number_reaches_the_launcher_as_text(tmp_path):
    """`training.run_name: "1e-6"` is a valid DNS label; the trainer's loader reads an unquoted
    1e-6 as a number, so the kit must write the run.yaml with the trainer's own dumper (quoted),
    or the launcher refuses `run_name = 1e-06: must be a non-empty string`."""
    contract = _rltrainer().contract
    cfg = parse_config({"training": {"run_name": "1e-6"}})
    path = tmp_path / "run.yaml"
    path.write_text(build_context(cfg, placeholder_outputs(cfg)).run_config_yaml)
    assert contract.load_run_config(path).run_name == "1e-6"


@pytest.mark.parametrize("name", EXAMPLES)
def test_run_config_passes_the_trainers_own_validator(name, tmp_path):
    rltrainer = _rltrainer()
    for outputs in ("placeholder", "real"):
        if outputs == "placeholder":
            run = run_yaml(name)
        else:
            cm = next(f.obj for f in _render_with_real_outputs(example(name), tmp_path)
                      if f.kind == "ConfigMap")
            run = yaml.safe_load(cm["data"]["run.yaml"])
        parsed = rltrainer.contract.parse_run_config(run, f"{name} run.yaml ({outputs})")
        assert parsed.run_name == example(name).training.run_name


@pytest.mark.parametrize("name", EXAMPLES)
def test_fabric_commands_parse_with_the_trainers_own_parsers(name):
    _rltrainer()
    from rltrainer import bench, nodecheck

    cfg = example(name)
    itype = INSTANCE_TYPES[cfg.gpu_node_groups[cfg.training.node_group].instance_type]
    files = objects(rendered(name))

    def command(key: str, file: str) -> list[str]:
        return files[f"fabric/{key}/{file}"]["spec"]["template"]["spec"]["containers"][0]["command"]

    check = command("nodecheck", "00-job.yaml")
    assert check[:2] == ["rltrainer", "nodecheck"]
    args = nodecheck.build_parser().parse_args(check[2:])
    assert (args.expect_gpus, args.expect_efa) == (itype.gpu_count, itype.efa_devices)
    for key in ("allreduce", "ep"):
        cmd = command(key, "01-job.yaml")
        assert cmd[0] == "torchrun" and cmd[cmd.index("-m") + 1] == "rltrainer.bench"
        args = bench.build_parser().parse_args(cmd[cmd.index("-m") + 2:])
        assert args.bench == key


def test_outputs_are_read_from_the_stacks_that_declare_them(synth):
    """The renderer's (stack, output key) pairs exist in the synthesized templates."""
    from manifests.outputs import _FIELDS, needed_stacks

    s = synth("default")
    stacks = needed_stacks(s.config)
    for field, role, key in _FIELDS:
        template = s.templates[stacks[role]]
        assert key in template.get("Outputs", {}), f"{field}: {stacks[role]} declares no {key}"




# --- the shared file system ---------------------------------------------------------------------


def rayjob_pod_specs(files) -> dict[str, dict]:
    """The three kinds of pod a RayJob makes: Ray head, Ray workers, KubeRay's job submitter."""
    spec = next(f.obj for f in files if f.kind == "RayJob")["spec"]
    return {"head": spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"],
            "worker": spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"],
            "submitter": spec["submitterPodTemplate"]["spec"]}


@pytest.mark.parametrize("name", EXAMPLES)
def test_head_and_workers_share_one_file_system(name, tmp_path):
    cfg = example(name)
    files = _render_with_real_outputs(cfg, tmp_path)
    by_path = objects(files)
    pv, pvc = by_path["02-shared-fs-pv.yaml"], by_path["03-shared-fs-pvc.yaml"]
    storage = real_outputs(cfg)[names.stack_names(cfg.name)["storage"]]
    assert pv["kind"] == "PersistentVolume" and "namespace" not in pv["metadata"]
    assert pv["spec"]["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": storage[OutputKeys.SHARED_FS_ID],
        "volumeAttributes": {"dnsname": storage[OutputKeys.SHARED_FS_DNS_NAME],
                             "mountname": storage[OutputKeys.SHARED_FS_MOUNT_NAME]}}
    capacity = f"{cfg.storage.shared_filesystem.capacity_gib}Gi"
    assert pv["spec"]["capacity"] == {"storage": capacity}
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["storageClassName"] == ""
    assert pv["spec"]["claimRef"] == {"namespace": names.TRAINER_NAMESPACE,
                                      "name": pvc["metadata"]["name"]}
    assert pvc["metadata"]["namespace"] == names.TRAINER_NAMESPACE
    assert pvc["spec"] == {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                           "volumeName": pv["metadata"]["name"],
                           "resources": {"requests": {"storage": capacity}}}

    pods = rayjob_pod_specs(files)
    assert set(pods) == {"head", "worker", "submitter"}
    del pods["submitter"]  # mounts nothing (test_the_submitter_mounts_nothing)
    for kind, pod in pods.items():
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
                  for v in pod["volumes"] if "persistentVolumeClaim" in v}
        assert list(claims.values()) == [pvc["metadata"]["name"]], kind
        (volume,) = claims
        (container,) = pod["containers"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts.get(names.SHARED_FS_MOUNT_PATH) == volume, kind
        # No node-local checkpoint directory hides the shared one.
        assert not any(p.startswith("/checkpoints") for p in mounts), kind
        assert not any("emptyDir" in v for v in pod["volumes"] if v["name"] != "dshm"), kind

    run = yaml.safe_load(by_path["rl-job/00-run-config.yaml"]["data"]["run.yaml"])
    for path in (run["checkpoint"]["local_dir"], run["model"]["hf_checkpoint"],
                 run["data"]["prompt_data"]):
        assert path.startswith(names.SHARED_FS_MOUNT_PATH + "/"), path


def test_submitter_is_one_container_as_kuberay_names_it():
    files = rendered("default")
    submitter = rayjob_pod_specs(files)["submitter"]
    assert submitter["restartPolicy"] == "Never"  # a Job's pod template allows Never/OnFailure
    (container,) = submitter["containers"]
    # KubeRay v1.7.0 fills in the command of the template's first container when it has none
    # (kuberay@59d663aeec13 rayjob_controller.go:591, :643-647): one container, no command.
    assert container["name"] == "ray-job-submitter" and "command" not in container


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_submitter_runs_beside_the_ray_head(name):
    """Before: KubeRay's submitter, created once the Ray cluster is ready, ran the ~80 GiB
    trainer image on a system node, so each launch or retry that met an uncached system node
    pulled it while every GPU node of the run waited. Now it must share the head's node (required
    pod affinity on the hostname), which holds the image: the head's node affinity and
    tolerations, and a selector that picks the head as KubeRay creates it (the template's labels
    plus ray.io/node-type, kuberay@59d663aeec13 common/pod.go:1167-1190) and no worker. Small
    requests: it fits in the tenth of the node the head leaves."""
    pods = rayjob_pod_specs(rendered(name))
    spec = next(f.obj for f in rendered(name) if f.kind == "RayJob")["spec"]
    head_labels = {**spec["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"],
                   "ray.io/node-type": "head"}
    worker_labels = {**spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["metadata"][
        "labels"], "ray.io/node-type": "worker"}
    submitter, head = pods["submitter"], pods["head"]
    assert "nodeSelector" not in submitter
    assert submitter["affinity"]["nodeAffinity"] == head["affinity"]["nodeAffinity"]
    assert submitter["tolerations"] == head["tolerations"]
    [term] = submitter["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert set(term) == {"labelSelector", "topologyKey"}  # the pod's own namespace: the head's
    wanted = term["labelSelector"]["matchLabels"]
    assert wanted == {"rlkit.aws/workload": head_labels["rlkit.aws/workload"],
                      "ray.io/node-type": "head"}
    assert wanted.items() <= head_labels.items() and not wanted.items() <= worker_labels.items()
    (container,) = submitter["containers"]
    assert container["image"] == head["containers"][0]["image"]
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"},
                                      "limits": {"memory": "1Gi"}}
    # On a GPU node without a GPU request: the NVIDIA runtime must expose none of the node's GPUs
    # to it (the trainer image's CUDA base sets NVIDIA_VISIBLE_DEVICES=all).
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container["env"]


def test_single_node_without_shared_fs_keeps_node_local_checkpoints():
    cfg = parse_config({"storage": {"shared_filesystem": {"type": "none"}},
                        "training": {"nodes": 1, "hf_checkpoint": "/models/Qwen3-30B-A3B"}})
    files = render(build_context(cfg, placeholder_outputs(cfg)))
    assert not any(f.kind in ("PersistentVolume", "PersistentVolumeClaim") for f in files)
    pods = rayjob_pod_specs(files)
    assert not any("persistentVolumeClaim" in v for p in pods.values() for v in p.get("volumes", []))
    worker_mounts = {m["mountPath"] for m in pods["worker"]["containers"][0]["volumeMounts"]}
    assert "/checkpoints" in worker_mounts
    run = yaml.safe_load(next(f.obj for f in files if f.kind == "ConfigMap")["data"]["run.yaml"])
    assert run["checkpoint"]["local_dir"] == "/checkpoints"


def test_missing_storage_stack_outputs_are_named():
    cfg = example("default")
    data = real_outputs(cfg)
    del data["moe-rl-storage"]
    with pytest.raises(RenderError) as err:
        outputs_from_mapping(cfg, data, "file", "cdk-outputs.json")
    assert [str(p) for p in err.value.problems] == [
        "stack moe-rl-storage: not found in cdk-outputs.json (its outputs are needed: "
        "SharedFileSystemId, SharedFileSystemDnsName, SharedFileSystemMountName). Fix: deploy it "
        "with every stack of the config (`npx aws-cdk@2.1148.1 deploy --all -c config=<your "
        "config file> --outputs-file cdk-outputs.json`), then run `rlkit render --outputs "
        "cdk-outputs.json` again."]


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_rayjob_is_applied_after_everything_it_needs(name):
    """`rlkit launch` runs `kubectl apply -f rl-job/`, which goes in file-name order: the RayJob
    sorts last, so an apply cut short never leaves it running without its NetworkPolicy, its
    retry Role and binding, its run config or its ComputeDomain."""
    directory = sorted(f.path for f in rendered(name) if f.path.startswith("rl-job/"))
    kinds = {f.path: f.kind for f in rendered(name)}
    assert [kinds[p] for p in directory][-1] == "RayJob", directory
    assert {"ConfigMap", "Role", "RoleBinding"} <= {kinds[p] for p in directory}


# --- who reaches the pods, and which pods hold the trainer's credentials ---------------------


def pod_templates(files) -> dict[str, tuple[str, str, dict]]:
    """Every pod template of the render: where -> (its file, its namespace, the template)."""
    found = {}
    for f in files:
        ns = f.obj["metadata"].get("namespace")
        if f.kind == "RayJob":
            spec = f.obj["spec"]
            found[f"{f.path}:head"] = (f.path, ns, spec["rayClusterSpec"]["headGroupSpec"]["template"])
            for g in spec["rayClusterSpec"]["workerGroupSpecs"]:
                found[f"{f.path}:{g['groupName']}"] = (f.path, ns, g["template"])
            found[f"{f.path}:submitter"] = (f.path, ns, spec["submitterPodTemplate"])
        elif f.kind in ("Job", "Deployment", "StatefulSet", "DaemonSet"):
            found[f.path] = (f.path, ns, f.obj["spec"]["template"])
        elif f.kind == "Pod":
            found[f.path] = (f.path, ns, f.obj)
    return found


def _peer_allowed(peer: dict, operator_ns: str) -> bool:
    """A pod of the policy's own namespace, or of the KubeRay operator's namespace."""
    if "ipBlock" in peer:
        return False
    if "namespaceSelector" not in peer:
        return "podSelector" in peer  # podSelector alone: this namespace's pods
    return peer["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": operator_ns}}


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_pod_admits_only_its_namespace_and_the_operator(name):
    """Every Ray pod serves an unauthenticated job API (its dashboard agent), and the fabric
    jobs a torchrun rendezvous: each pod the render makes falls under a NetworkPolicy of its
    namespace, every policy that selects it admits only this namespace's pods and KubeRay's,
    and that policy is applied before the pod (with the namespace, which `rlkit gate` and
    `rlkit launch` apply first, or from the pod's own directory)."""
    files = rendered(name)
    operator_ns = addon("kuberay_operator").namespace
    policies = [f for f in files if f.kind == "NetworkPolicy"]
    pods = pod_templates(files)
    assert any(where.endswith(":submitter") for where in pods) and len(pods) >= 3, pods
    for where, (path, ns, template) in pods.items():
        labels = template["metadata"]["labels"]
        selecting = [p for p in policies if p.obj["metadata"]["namespace"] == ns
                     and _selects(p.obj["spec"]["podSelector"], labels)]
        ingress = [p for p in selecting if "Ingress" in p.obj["spec"].get("policyTypes", [])]
        assert ingress, f"{where}: no NetworkPolicy restricts its ingress"
        assert any(p.path in NAMESPACE_FILES or p.path.rsplit("/", 1)[0] == path.rsplit("/", 1)[0]
                   for p in ingress), f"{where}: its policy is not applied before it"
        for p in selecting:
            for rule in p.obj["spec"].get("ingress", []):
                assert rule.get("from"), f"{p.path}: a rule without `from` admits everyone"
                assert all(_peer_allowed(peer, operator_ns) for peer in rule["from"]), \
                    (p.path, rule)


def test_the_namespace_policy_admits_its_pods_and_the_operator():
    files = {f.path: f for f in rendered("default")}
    policy = files["01-networkpolicy.yaml"].obj
    assert "01-networkpolicy.yaml" in NAMESPACE_FILES
    assert policy["kind"] == "NetworkPolicy"
    assert policy["metadata"]["namespace"] == names.TRAINER_NAMESPACE
    assert policy["spec"]["podSelector"] == {}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": [
        {"podSelector": {}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}}},
    ]}]


@pytest.mark.parametrize("name", EXAMPLES)
def test_only_the_head_holds_the_trainers_credentials(name):
    """The trainer's service account carries its IAM role (Pod Identity) and the RayJob patch
    rights: only the head's launcher uses them. Every other pod runs as the namespace's default
    account, with no API token mounted."""
    pods = pod_templates(rendered(name))
    for where, (_, _, template) in pods.items():
        spec = template["spec"]
        if where.endswith(":head"):
            assert spec["serviceAccountName"] == names.TRAINER_SERVICE_ACCOUNT, where
            assert spec.get("automountServiceAccountToken", True) is True, where
        else:
            assert "serviceAccountName" not in spec and "serviceAccount" not in spec, where
            assert spec.get("automountServiceAccountToken") is False, where


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_submitter_mounts_nothing(name):
    """KubeRay's submitter runs `ray job submit` against the head and follows the log: no /fsx
    (the job uploads no working_dir). Its zone is the head's (it runs beside it)."""
    (_, _, submitter), = (v for k, v in pod_templates(rendered(name)).items()
                          if k.endswith(":submitter"))
    spec = submitter["spec"]
    assert "volumes" not in spec
    assert all("volumeMounts" not in c for c in spec["containers"])


def test_formatting_once_per_value_keeps_values_that_look_alike_apart():
    """The render formats each plain value once (manifests/render.py): values whose YAML
    differs must never share a cache entry, asked for in either order."""
    import importlib

    import yaml

    r = importlib.import_module("manifests.render")  # the module, not manifests.render()

    alike = [1, True, 1.0, "1", None, "null", [1], ["1"], {1: "a"}, {"1": "a"}, {"1": 1},
             {"a": [True]}, {"a": [1]}]
    for order in (alike, alike[::-1]):
        r._FORMATTED.clear()
        scalars = [r._yaml_scalar(v) for v in order if not isinstance(v, (dict, list))]
        blocks = [r._to_yaml(v) for v in order]
        assert scalars == [r._dump_scalar(v) for v in order if not isinstance(v, (dict, list))]
        assert blocks == [r._dump_block(v) for v in order]
    assert len(set(blocks)) == len(alike)  # every one of them is different YAML
    for _ in range(2):  # not plain (a str subclass): formatted, and refused, every time
        with pytest.raises(yaml.representer.RepresenterError):
            r._yaml_scalar(type("Name", (str,), {})("1"))
