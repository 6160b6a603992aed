"""Contract tests: the real charts, rendered by the real Helm with the synthesized values, and
every pod's placement checked against the node groups the templates create.

Charts come from ../shared/charts (the published packages, see its README), else from the cache
scripts/fetch_artifacts.py fills (tests/support/artifacts.py); Helm is the binary inside the kubectl
layer package the kit installs. In CI (CI=true) missing charts fail the test; elsewhere the test is
skipped with a message naming the script to run. Which charts, versions and values: the add-on
records (infra/addons/).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess

import pytest

from tests.support.cdk import EXAMPLES
from infra import addons as registry
from infra import names
from infra.config.derived import chart_values
from ops import contract, helm, scheduling

US = "p6e-gb200-ultraserver"


@pytest.fixture(scope="session")
def helm_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("helm-cache")


def render(release: helm.ChartRelease, kubernetes_version: str, *, chart_dir,
           helm_cache) -> list[dict]:
    """The objects ``release`` renders with the real Helm. Each distinct input is rendered once
    per test process (tests/conftest.py, ``_helm_renders_once_per_input``): the many renders
    below repeat the examples' releases and one another's."""
    binary = helm.helm_binary(kubernetes_version, helm_cache)
    archive = helm.chart_archive(release, chart_dir=chart_dir, helm=binary,
                                 cache_dir=helm_cache / "charts", allow_pull=False)
    return helm.render_release(release, archive=archive, helm=binary,
                               kubernetes_version=kubernetes_version)


def addon_release(spec: registry.HelmAddon, version: str, values: dict) -> helm.ChartRelease:
    return helm.ChartRelease(chart=spec.chart, repository=spec.repository, version=version,
                             release=spec.release, namespace=spec.namespace, values=values)


@pytest.fixture(scope="session")
def rendered(synth, chart_dir, helm_cache):
    """example -> (Synth, templates read back from cdk.out, rendered chart objects)."""
    cache = {}

    def get(example):
        if example not in cache:
            s = synth(example)
            templates = contract.assembly_templates(s.outdir)
            releases = helm.chart_releases(templates[s.config.stack_names["cluster"]])
            objects = [o for r in releases
                       for o in render(r, s.config.kubernetes_version, chart_dir=chart_dir,
                                       helm_cache=helm_cache)]
            cache[example] = (s, templates, objects)
        return cache[example]

    return get


def value_variants(synth, key: str, version: str) -> list[tuple[str, dict]]:
    """(example, values) for add-on ``key`` at ``version``: one per distinct values the examples
    give it (an example where the add-on is on where there is one), in example order."""
    variants: dict[str, tuple[str, dict, bool]] = {}
    for example in EXAMPLES:
        config = synth(example).config
        values = chart_values(key, config, version)
        on = config.addon_enabled(key)
        seen = variants.get(text := json.dumps(values, sort_keys=True))
        if seen is None or (on and not seen[2]):
            variants[text] = (example, values, on)
    return [(example, values) for example, values, _ in variants.values()]


def run(rendered, example, *, chart_objects=None, templates=None, chart_dir, helm_cache):
    s, synth_templates, objects = rendered(example)
    return contract.check_cluster_contract(
        s.config, s.outdir, chart_dir=chart_dir, cache_dir=helm_cache,
        chart_objects=objects if chart_objects is None else chart_objects,
        templates=synth_templates if templates is None else templates)


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_pod_lands_exactly_where_it_should(rendered, example, chart_dir, helm_cache):
    report = run(rendered, example, chart_dir=chart_dir, helm_cache=helm_cache)
    assert report.ok, "\n".join(str(f) for f in report.findings)
    # The check really modelled the things the issue was about.
    s, _, _ = rendered(example)
    # KubeRay's submitter starts beside the Ray head, where the trainer image already is.
    run_name = s.config.training.run_name
    assert report.lands[f"RayJob {run_name} submitter"] == \
        report.lands[f"RayJob {run_name} head"] == [s.config.training.node_group]
    for node in report.nodes:
        if node.name == scheduling.SYSTEM_GROUP:
            continue
        itype = s.config.gpu_node_groups[node.name].instance_type
        from infra.catalog import INSTANCE_TYPES
        assert node.allocatable[scheduling.GPU_RESOURCE] == INSTANCE_TYPES[itype].gpu_count
        assert node.allocatable[scheduling.EFA_RESOURCE] == INSTANCE_TYPES[itype].efa_devices
        assert node.allocatable[scheduling.HUGEPAGES_RESOURCE] == names.HUGEPAGES_2MI_MIB * 2**20


def test_releases_are_the_pinned_charts(rendered):
    s, templates, _ = rendered("default")
    releases = helm.chart_releases(templates[s.config.stack_names["cluster"]])
    pinned = {(a.chart, a.version) for a in registry.ADDONS if a.enabled_by_default}
    assert pinned == {("aws-efa-k8s-device-plugin", "v0.5.30"), ("nvidia-device-plugin", "0.20.0"),
                      ("kuberay-operator", "1.7.0")}
    assert {(r.chart, r.version) for r in releases} == pinned


@pytest.mark.parametrize("key", sorted(a.key for a in registry.ADDONS))
def test_every_listed_chart_version_renders_and_schedules_with_every_examples_values(
        rendered, synth, key, chart_dir, helm_cache):
    """Each version config validation accepts, rendered with each distinct set of values the
    examples give the add-on (config pinning that version), schedules in that example."""
    spec = registry.addon(key)
    assert spec.pinned in spec.tested
    for version in spec.versions:
        for example, values in value_variants(synth, key, version):
            s, templates, objects = rendered(example)
            synthesized = [r for r in helm.chart_releases(
                templates[s.config.stack_names["cluster"]]) if r.chart == spec.chart]
            if version == spec.version and synthesized:  # the values synth really wrote
                assert synthesized[0].values == values
            mine = render(addon_release(spec, version, values), s.config.kubernetes_version,
                          chart_dir=chart_dir, helm_cache=helm_cache)
            others = [o for o in objects
                      if o.get("metadata", {}).get("namespace") != spec.namespace]
            report = run(rendered, example, chart_objects=others + mine,
                         chart_dir=chart_dir, helm_cache=helm_cache)
            what = f"{spec.chart} {version} with {example}'s values"
            assert report.ok, f"{what}:\n" + "\n".join(map(str, report.findings))
            assert not low_priority_gpu_pods(report, mine), what
            # Every workload the record lists was rendered and lands where the record says.
            for w in (w for w in spec.workloads if not w.conditional):
                landed = [groups for pod, groups in report.lands.items()
                          if pod.endswith(f"/{w.name}")]
                assert landed, f"{what} renders no workload {w.name}"


def test_the_nvidia_plugin_versions_are_checked_with_the_ultraserver_values_too(synth):
    """Before: only p5en's values, where GFD and NFD are off, so NFD's values were never
    rendered with 0.17.1."""
    variants = [e for e, _ in value_variants(synth, "nvidia_device_plugin", "0.17.1")]
    assert "p6e-gb200-ultraserver" in variants and len(variants) >= 2


# --- pods on GPU nodes outlive training pods under node pressure ----------------------------

CRITICAL = {"system-node-critical", "system-cluster-critical"}
# Chart workloads that may land on a GPU group without a critical PriorityClass, and why: none.
# Not in any chart render, so not checked here: the IMEX daemon DaemonSet the DRA controller
# creates per ComputeDomain from templates/compute-domain-daemon.tmpl.yaml in its image
# (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1, 764900e). That template sets no
# priorityClassName, and neither the chart's values nor the controller's DaemonSetTemplateData
# (cmd/compute-domain-controller/daemonset.go) has a setting for one: the kit cannot set it.
NOT_CRITICAL_ON_GPU: dict[str, str] = {}


def low_priority_gpu_pods(report, objects: list[dict]) -> list[str]:
    """Chart pods among ``objects`` that the report lands on a GPU group without a critical
    PriorityClass (and not in NOT_CRITICAL_ON_GPU)."""
    specs = {p.name: p.spec for p in scheduling.chart_pods(objects, {})}
    found = []
    for pod, groups in report.lands.items():
        gpu = [g for g in groups if g != scheduling.SYSTEM_GROUP]
        if pod not in specs or not gpu or pod.split("/", 1)[1] in NOT_CRITICAL_ON_GPU:
            continue
        if specs[pod].get("priorityClassName") not in CRITICAL:
            found.append(f"{pod} lands on {gpu} with priorityClassName "
                         f"{specs[pod].get('priorityClassName')!r}")
    return found


def test_every_chart_pod_on_the_gpu_nodes_is_critical(rendered, chart_dir, helm_cache):
    """Before: the NFD worker (GPU feature discovery's labels) had no PriorityClass, so node
    pressure could evict it before the training pods."""
    report = run(rendered, US, chart_dir=chart_dir, helm_cache=helm_cache)
    _, _, objects = rendered(US)
    assert not low_priority_gpu_pods(report, objects)
    on_gpu = {p.split("/", 1)[1] for p, groups in report.lands.items()
              if "/" in p and set(groups) - {scheduling.SYSTEM_GROUP}}
    assert "nvidia-device-plugin-node-feature-discovery-worker" in on_gpu  # the check saw it


# --- every value the kit sets changes the render --------------------------------------------

# Values the kit sets as one whole (a label map, an affinity): dropped whole, never per entry.
WHOLE_VALUES = {"nodeSelector", "affinity"}

# Values the kit sets that may leave the render unchanged, and why. Anything else that changes
# nothing when dropped is a value the chart ignores (a wrong key, a version without the feature).
UNCHANGED_ON_PURPOSE = {
    ("efa_device_plugin", "supportedInstanceLabels.keys"):
        "the chart's own key (node.kubernetes.io/instance-type), stated beside the kit's values "
        "list so that the instance types the kit passes always go with that label",
    ("nvidia_device_plugin", "nfd.enabled"):
        "the NFD subchart's condition is `nfd.enabled,gfd.enabled` (Chart.yaml): Helm reads the "
        "first that is set, so gfd.enabled decides when it is absent; the kit states it because "
        "preflight reads it from the deployed release (ops/preflight_replace.py check_nfd_crds)",
    ("nvidia_device_plugin", "gfd.enabled"):
        "restates the chart default (false) where no UltraServer is configured, on purpose: GFD "
        "and NFD stay off there even if a chart release turns them on by default",
    ("dra_driver", "resources.computeDomains.enabled"):
        "restates the chart default (true) on purpose: ComputeDomains are why the kit installs "
        "the driver (the EKS P6e-GB200 page's values set it too)",
}


def value_paths(values: dict, path: tuple[str, ...] = ()):
    """Each key the kit sets, as a path: nested settings one by one, WHOLE_VALUES as one."""
    for key, value in values.items():
        if isinstance(value, dict) and value and key not in WHOLE_VALUES:
            yield from value_paths(value, path + (key,))
        else:
            yield path + (key,)


def without(values: dict, path: tuple[str, ...]) -> dict:
    out = copy.deepcopy(values)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return out


def render_again(release: helm.ChartRelease, kubernetes_version: str, *, chart_dir,
                 helm_cache) -> list[dict]:
    """A second real render of ``release`` (from a copy of the archive: the render cache keys on
    the archive's path, so this one is not served from it)."""
    import shutil

    binary = helm.helm_binary(kubernetes_version, helm_cache)
    archive = helm.chart_archive(release, chart_dir=chart_dir, helm=binary,
                                 cache_dir=helm_cache / "charts", allow_pull=False)
    copy_dir = helm_cache / "again"
    copy_dir.mkdir(exist_ok=True)
    shutil.copyfile(archive, copy_dir / archive.name)
    return helm.render_release(release, archive=copy_dir / archive.name, helm=binary,
                               kubernetes_version=kubernetes_version)


@pytest.mark.parametrize("key", sorted(a.key for a in registry.ADDONS))
def test_every_value_the_kit_sets_changes_the_render(synth, key, chart_dir, helm_cache):
    """Drop one key at a time from the values of each tested version, for each set of keys the
    examples send: the render must change (or Helm refuse it), else the chart ignores the key."""
    spec = registry.addon(key)
    ignored, excused = [], set()
    for version in spec.versions:
        shapes: dict[tuple, tuple[str, dict]] = {}
        for example, values in value_variants(synth, key, version):
            shapes.setdefault(tuple(value_paths(values)), (example, values))
        for n, (example, values) in enumerate(shapes.values()):
            kube = synth(example).config.kubernetes_version
            base = render(addon_release(spec, version, values), kube, chart_dir=chart_dir,
                          helm_cache=helm_cache)
            if n == 0:  # a chart that renders random data would make every comparison differ
                assert render_again(addon_release(spec, version, values), kube,
                                    chart_dir=chart_dir, helm_cache=helm_cache) == base
            for path in value_paths(values):
                try:
                    dropped = render(addon_release(spec, version, without(values, path)), kube,
                                     chart_dir=chart_dir, helm_cache=helm_cache)
                except helm.HelmError:
                    continue  # Helm refuses the values without it: it matters
                name = ".".join(path)
                if dropped != base:
                    continue
                if (key, name) in UNCHANGED_ON_PURPOSE:
                    excused.add(name)
                else:
                    ignored.append(f"{spec.chart} {version} with {example}'s values: {name} "
                                   "changes nothing in the render")
    assert not ignored, "\n".join(ignored)
    stale = {name for k, name in UNCHANGED_ON_PURPOSE if k == key} - excused
    assert not stale, f"UNCHANGED_ON_PURPOSE lists {sorted(stale)}, which now change the render"


# --- CloudFormation creates the charts in parallel: none may need another's CRDs ------------

_CRDS: dict[str, dict[tuple[str, str], str]] = {}


def chart_crd_kinds(archive) -> dict[tuple[str, str], str]:
    """(API group, kind) -> CRD name for every CRD in a chart archive's crds/ folders (its own
    and its subcharts': Helm installs both before the templates, on first install)."""
    import tarfile

    import yaml

    key = str(archive)
    if key not in _CRDS:
        kinds = {}
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile() and "crds" in member.name.split("/")[:-1] and \
                        member.name.endswith((".yaml", ".yml")):
                    text = tar.extractfile(member).read().decode()
                    for chunk in re.split(r"^---.*$", text, flags=re.M):
                        # Only the head: the schemas under spec.versions are megabytes
                        # (KubeRay's), and group and names come before them in every CRD here
                        # (a CRD that puts them after fails loudly below, never silently).
                        doc = yaml.load(re.split(r"^  versions:", chunk, flags=re.M)[0],
                                        Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
                        if doc and doc.get("kind") == "CustomResourceDefinition":
                            spec = doc["spec"]
                            kinds[spec["group"], spec["names"]["kind"]] = doc["metadata"]["name"]
        _CRDS[key] = kinds
    return _CRDS[key]


def crd_dependency_findings(template: dict, rendered_by_release: dict[str, list[dict]],
                            crds_by_release: dict[str, dict[tuple[str, str], str]]) -> list[str]:
    """A chart whose render uses a kind another chart's crds/ define, without a CloudFormation
    dependency on that chart (so the two may be created in either order)."""
    ids = {r["Properties"]["Release"]: lid for lid, r in template["Resources"].items()
           if r["Type"] == helm.HELM_CHART_TYPE}

    def depends(lid: str, target: str, seen=()) -> bool:
        direct = template["Resources"][lid].get("DependsOn", [])
        direct = [direct] if isinstance(direct, str) else direct
        return target in direct or any(d not in seen and d in template["Resources"] and
                                       depends(d, target, seen + (lid,)) for d in direct)

    found = []
    for release, objects in rendered_by_release.items():
        for obj in objects:
            group = obj.get("apiVersion", "").rpartition("/")[0]
            for owner, kinds in crds_by_release.items():
                crd = kinds.get((group, obj.get("kind")))
                if owner != release and crd and not depends(ids[release], ids[owner]):
                    found.append(f"release {release} renders {obj['kind']} "
                                 f"{obj['metadata'].get('name')}, defined by {owner}'s CRD {crd}, "
                                 f"but does not depend on {owner} in the template: add "
                                 "chart.node.add_dependency(...) in infra/constructs/"
                                 "cluster_addons.py")
    return found


def _releases_crds_and_renders(rendered, example, chart_dir, helm_cache):
    s, templates, _ = rendered(example)
    template = templates[s.config.stack_names["cluster"]]
    releases = helm.chart_releases(template)
    binary = helm.helm_binary(s.config.kubernetes_version, helm_cache)
    crds = {r.release: chart_crd_kinds(helm.chart_archive(
        r, chart_dir=chart_dir, helm=binary, cache_dir=helm_cache / "charts", allow_pull=False))
        for r in releases}
    renders = {r.release: render(r, s.config.kubernetes_version, chart_dir=chart_dir,
                                 helm_cache=helm_cache) for r in releases}
    return template, renders, crds


@pytest.mark.parametrize("example", EXAMPLES)
def test_no_chart_needs_another_charts_crds(rendered, example, chart_dir, helm_cache):
    """The charts have no order between them in the template (each waits only for the cluster,
    the KubeRay operator also for the system nodes): that is safe while no chart renders a kind
    that another chart's crds/ define, or one that does depends on that chart."""
    template, renders, crds = _releases_crds_and_renders(rendered, example, chart_dir, helm_cache)
    assert crds["kuberay-operator"], "the KubeRay chart's CRDs were not read"
    assert not crd_dependency_findings(template, renders, crds)


def test_a_chart_using_another_charts_crd_without_a_dependency_is_found(rendered, chart_dir,
                                                                        helm_cache):
    template, renders, crds = _releases_crds_and_renders(rendered, US, chart_dir, helm_cache)
    assert ("resource.nvidia.com", "ComputeDomain") in crds["dra-driver-nvidia-gpu"]
    domain = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
              "metadata": {"name": "d"}}
    broken = {**renders, "nvidia-device-plugin": renders["nvidia-device-plugin"] + [domain]}
    assert crd_dependency_findings(template, broken, crds) == [
        "release nvidia-device-plugin renders ComputeDomain d, defined by dra-driver-nvidia-gpu's "
        "CRD computedomains.resource.nvidia.com, but does not depend on dra-driver-nvidia-gpu in "
        "the template: add chart.node.add_dependency(...) in infra/constructs/cluster_addons.py"]
    ids = {r["Properties"]["Release"]: lid for lid, r in template["Resources"].items()
           if r["Type"] == helm.HELM_CHART_TYPE}
    ordered = copy.deepcopy(template)
    ordered["Resources"][ids["nvidia-device-plugin"]]["DependsOn"] = [ids["dra-driver-nvidia-gpu"]]
    assert not crd_dependency_findings(ordered, broken, crds)


def test_dcgm_exporter_has_no_service_monitor_by_default(rendered, chart_dir, helm_cache):
    """The ServiceMonitor kind exists only with the Prometheus Operator CRDs."""
    s, _, _ = rendered("default")
    spec = registry.addon("dcgm_exporter")
    release = helm.ChartRelease(
        chart=spec.chart, repository=spec.repository, version=spec.version,
        release=spec.release, namespace=spec.namespace,
        values=chart_values("dcgm_exporter", s.config))
    binary = helm.helm_binary(s.config.kubernetes_version, helm_cache)
    objects = helm.render_release(release, kubernetes_version=s.config.kubernetes_version,
                                  helm=binary, archive=helm.chart_archive(
                                      release, chart_dir=chart_dir, helm=binary, cache_dir=None,
                                      allow_pull=False))
    kinds = {o["kind"] for o in objects}
    assert "DaemonSet" in kinds and "ServiceMonitor" not in kinds


# --- deliberately broken inputs: the check must fail, naming the pod, the group and the term ---


def _daemonset(objects, name):
    return next(o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == name)


def test_wrong_toleration_fails_naming_pod_group_and_taint(rendered, chart_dir, helm_cache):
    _, _, objects = rendered("default")
    broken = copy.deepcopy(objects)
    efa = _daemonset(broken, "aws-efa-k8s-device-plugin")
    efa["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu-typo", "operator": "Exists"}]
    report = run(rendered, "default", chart_objects=broken, chart_dir=chart_dir,
                 helm_cache=helm_cache)
    messages = [str(f) for f in report.findings]
    assert ("DaemonSet kube-system/aws-efa-k8s-device-plugin on node group 'p5': taint "
            "nvidia.com/gpu=true:NoSchedule is not tolerated") in messages[0]
    # Without the EFA plugin the GPU pods cannot get their EFA devices either.
    assert any("requests vpc.amazonaws.com/efa: 32 but the node has none allocatable" in m
               for m in messages)


def test_efa_chart_own_allowlist_without_p6_fails_on_the_p6_example(rendered, chart_dir,
                                                                     helm_cache):
    # v0.5.7's own instance-type allowlist has no p6: without the kit's list (the configured
    # GPU types) its DaemonSet strands the b200 nodes; with the kit's list it lands there.
    s, templates, objects = rendered("p6-b200-odcr")
    release = next(r for r in helm.chart_releases(templates[s.config.stack_names["cluster"]])
                   if r.chart == "aws-efa-k8s-device-plugin")
    binary = helm.helm_binary(s.config.kubernetes_version, helm_cache)
    others = [o for o in objects if o["metadata"]["name"] != "aws-efa-k8s-device-plugin"]

    def report_for(values):
        old = helm.ChartRelease(**{**release.__dict__, "version": "v0.5.7", "values": values})
        old_objects = helm.render_release(
            old, archive=helm.chart_archive(old, chart_dir=chart_dir, helm=binary,
                                            cache_dir=None, allow_pull=False),
            helm=binary, kubernetes_version=s.config.kubernetes_version)
        return run(rendered, "p6-b200-odcr", chart_objects=others + old_objects,
                   chart_dir=chart_dir, helm_cache=helm_cache)

    assert release.values["supportedInstanceLabels"]["values"] == ["p6-b200.48xlarge"]
    assert report_for(release.values).ok
    chart_own_list = {k: v for k, v in release.values.items() if k != "supportedInstanceLabels"}
    report = report_for(chart_own_list)
    first = str(report.findings[0])
    assert first.startswith("DaemonSet kube-system/aws-efa-k8s-device-plugin on node group "
                            "'b200': required node affinity unmet")
    assert "node.kubernetes.io/instance-type In" in first
    assert "(node has p6-b200.48xlarge)" in first


def _without_gpu_present_label(templates, config, version_below_135=True):
    broken = copy.deepcopy(templates)
    for group in config.gpu_node_groups:
        tpl = broken[names.gpu_stack_name(config.name, group)]
        for r in tpl["Resources"].values():
            if r["Type"] == scheduling.NODEGROUP_TYPE:
                r["Properties"]["Labels"].pop(names.NVIDIA_GPU_PRESENT_LABEL)
    return broken


def test_nvidia_plugin_needs_the_gpu_present_label_before_kubernetes_1_35(
        rendered, chart_dir, helm_cache):
    """Today's main: no label, Kubernetes 1.34, NFD off -> no nvidia.com/gpu anywhere."""
    s, templates, objects = rendered("default")
    old_config = s.config.model_copy(update={"kubernetes_version": "1.34"})
    broken = _without_gpu_present_label(templates, s.config)
    report = contract.check_cluster_contract(old_config, s.outdir, chart_dir=chart_dir,
                                             cache_dir=helm_cache, chart_objects=objects,
                                             templates=broken)
    messages = [str(f) for f in report.findings]
    assert messages[0].startswith(
        "DaemonSet nvidia-device-plugin/nvidia-device-plugin on node group 'p5': required node "
        "affinity unmet")
    assert "nvidia.com/gpu.present In ['true'] (node has <absent>)" in messages[0]
    assert any("worker group p5 on node group 'p5': requests nvidia.com/gpu: 8 but the node has "
               "none allocatable" in m for m in messages)
    # From 1.35 nodeadm adds the label itself, so the same templates schedule.
    assert run(rendered, "default", templates=broken, chart_dir=chart_dir,
               helm_cache=helm_cache).ok


def test_missing_huge_pages_fail_the_gpu_pods(rendered, chart_dir, helm_cache):
    s, templates, _ = rendered("default")
    broken = copy.deepcopy(templates)
    tpl = broken[names.gpu_stack_name(s.config.name, "p5")]
    for r in tpl["Resources"].values():
        if r["Type"] == scheduling.LAUNCH_TEMPLATE_TYPE:
            r["Properties"]["LaunchTemplateData"]["UserData"] = {"Fn::Base64": "#!/bin/bash\n"}
    report = run(rendered, "default", templates=broken, chart_dir=chart_dir,
                 helm_cache=helm_cache)
    assert any("worker group p5 on node group 'p5': requests hugepages-2Mi: 5120Mi but the node "
               "has none allocatable" in str(f) for f in report.findings)


def test_a_small_system_disk_concerns_no_pod_of_the_run(rendered, chart_dir, helm_cache):
    """The job submitter pulled the trainer image onto a system node; it now runs beside the Ray
    head on a GPU node (docs/manifests.md, "Where the driver runs"), so no pod of the RayJob
    needs the system disk."""
    s, templates, _ = rendered("default")
    broken = copy.deepcopy(templates)
    # The system root volume is its launch template's (the cluster stack's only one).
    for r in broken[s.config.stack_names["cluster"]]["Resources"].values():
        if r["Type"] == scheduling.LAUNCH_TEMPLATE_TYPE:
            r["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] = 20
    report = run(rendered, "default", templates=broken, chart_dir=chart_dir,
                 helm_cache=helm_cache)
    assert not [f for f in report.findings if f.pod.startswith("RayJob ")]


def _kit_findings(rendered, example: str, edit) -> list[str]:
    """The scheduling check's findings on the RayJob's pods after ``edit(submitter pod spec)``."""
    s, templates, objects = rendered(example)
    kit = copy.deepcopy(contract.kit_objects(s.config))
    [job] = [o for o in kit if o["kind"] == "RayJob"]
    edit(job["spec"]["submitterPodTemplate"]["spec"])
    nodes = scheduling.node_groups(s.config, templates)
    chart = scheduling.chart_pods(objects, contract.intended_chart_targets(s.config),
                                  contract.chart_advertised_resources())
    placed = scheduling.schedule(nodes, chart, scheduling.kit_pods(
        kit, training_group=s.config.training.node_group))
    return [str(f) for f in placed.findings if f.pod.startswith("RayJob ")]


def test_a_submitter_not_bound_to_the_heads_node_fails(rendered):
    """KubeRay creates the submitter once the Ray cluster is ready; only the head's node is sure
    to hold the ~80 GiB trainer image then. Without the pod affinity it may start on any node of
    the group (one the run does not use pulls the image first); on a system node, as before this
    change, it pulled the image while every GPU node waited."""
    head = "RayJob qwen3-30b-a3b-grpo head"
    assert _kit_findings(rendered, "default", lambda spec: None) == []

    def unbound(spec):
        del spec["affinity"]["podAffinity"]
    assert _kit_findings(rendered, "default", unbound) == [
        f"RayJob qwen3-30b-a3b-grpo submitter on node group 'p5': no required pod affinity on "
        f"kubernetes.io/hostname selects {head} (labels "
        "{'app.kubernetes.io/part-of': 'rlkit', 'app.kubernetes.io/managed-by': 'rlkit', "
        "'app.kubernetes.io/instance': 'moe-rl', 'app.kubernetes.io/component': 'ray-head', "
        "'rlkit.aws/workload': 'qwen3-30b-a3b-grpo-head', 'ray.io/node-type': 'head'}), so it "
        "may start on a node of the group that has not pulled the trainer image. Fix: a "
        "requiredDuringSchedulingIgnoredDuringExecution podAffinity term, topologyKey "
        "kubernetes.io/hostname, selecting that pod's labels"]

    def any_ray_pod(spec):
        term = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        term["labelSelector"] = {"matchLabels": {"app.kubernetes.io/instance": "moe-rl"}}
    [finding] = _kit_findings(rendered, "default", any_ray_pod)
    assert "selects ['RayJob qwen3-30b-a3b-grpo worker group p5'] too" in finding

    def on_a_system_node(spec):  # the template before this change
        del spec["affinity"], spec["tolerations"]
        spec["nodeSelector"] = {names.NODE_ROLE_LABEL: names.NODE_ROLE_SYSTEM}
    found = _kit_findings(rendered, "default", on_a_system_node)
    assert found[0].startswith("RayJob qwen3-30b-a3b-grpo submitter on node group 'p5': no "
                               "required pod affinity")
    assert found[1:] == ["RayJob qwen3-30b-a3b-grpo submitter on node group 'p5': nodeSelector "
                         "rlkit.aws/node-role=system unmet (node has rlkit.aws/node-role=gpu)"]

    def without_the_gpu_toleration(spec):
        spec["tolerations"] = []
    [finding] = _kit_findings(rendered, "default", without_the_gpu_toleration)
    assert finding.startswith("RayJob qwen3-30b-a3b-grpo submitter on node group 'p5': taint "
                              "nvidia.com/gpu")


def test_the_submitter_must_fit_beside_the_head(rendered):
    """The head takes 9/10 of its node's CPUs and memory; the submitter's requests count
    beside it, not against an empty node."""
    def greedy(spec):
        spec["containers"][0]["resources"]["requests"]["cpu"] = "20"
    [finding] = _kit_findings(rendered, "default", greedy)
    assert finding.startswith("RayJob qwen3-30b-a3b-grpo submitter on node group 'p5': requests "
                              "cpu: 20 but only ")
    assert finding.endswith(" is allocatable beside RayJob qwen3-30b-a3b-grpo head")


def test_pod_that_could_land_on_the_wrong_group_is_reported(rendered, chart_dir, helm_cache):
    _, _, objects = rendered("default")
    broken = copy.deepcopy(objects)
    dep = next(o for o in broken if o["kind"] == "Deployment")  # the KubeRay operator
    dep["spec"]["template"]["spec"].pop("nodeSelector")
    dep["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
    report = run(rendered, "default", chart_objects=broken, chart_dir=chart_dir,
                 helm_cache=helm_cache)
    assert [str(f) for f in report.findings] == [
        "Deployment kuberay-system/kuberay-operator on node group 'p5': could be scheduled here, "
        "but it belongs only on ['system']"]


def test_node_monitoring_dcgm_without_gpu_tolerations_fails(rendered, chart_dir, helm_cache):
    """The agent's DCGM DaemonSet tolerates nothing by default: without the kit's values it
    would miss every GPU node."""
    import json

    s, templates, _ = rendered("default")
    broken = copy.deepcopy(templates)
    for r in broken[s.config.stack_names["cluster"]]["Resources"].values():
        if r["Type"] == "AWS::EKS::Addon" and \
                r["Properties"]["AddonName"] == "eks-node-monitoring-agent":
            r["Properties"]["ConfigurationValues"] = json.dumps({})
    report = run(rendered, "default", templates=broken, chart_dir=chart_dir,
                 helm_cache=helm_cache)
    assert [str(f) for f in report.findings] == [
        "EKS add-on eks-node-monitoring-agent DCGM DaemonSet on node group 'p5': its tolerations "
        "[] do not tolerate the taint(s) [{'key': 'nvidia.com/gpu', 'value': 'true', "
        "'effect': 'NoSchedule'}]. Fix: no GPU health checks there; pass the GPU tolerations as "
        "dcgmAgent.tolerations (infra/constructs/cluster.py)"]


# --- UltraServers: the NVIDIA DRA driver (ComputeDomains) and GPU feature discovery ------------



def test_dra_driver_and_gfd_only_where_ultraservers_are_configured(rendered, chart_dir,
                                                                  helm_cache):
    from infra.addons import dra_driver

    report = run(rendered, US, chart_dir=chart_dir, helm_cache=helm_cache)
    assert report.ok, "\n".join(map(str, report.findings))
    _, _, objects = rendered(US)
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "DeviceClass"} == \
        set(dra_driver.DEVICE_CLASSES)  # GPUs off: no gpu/mig/vfio DeviceClass
    lands = {pod.split("/", 1)[1]: groups for pod, groups in report.lands.items() if "/" in pod}
    assert lands[dra_driver.KUBELET_PLUGIN] == ["gb200"]
    assert lands[dra_driver.CONTROLLER] == [scheduling.SYSTEM_GROUP]
    assert lands["nvidia-device-plugin-gpu-feature-discovery"] == ["gb200"]
    assert lands["nvidia-device-plugin-node-feature-discovery-worker"] == ["gb200"]
    _, _, default_objects = rendered("default")
    names_default = {o["metadata"]["name"] for o in default_objects}
    assert dra_driver.KUBELET_PLUGIN not in names_default
    assert "nvidia-device-plugin-gpu-feature-discovery" not in names_default


def test_dra_kubelet_plugin_without_the_gpu_toleration_leaves_claims_unsatisfiable(
        rendered, chart_dir, helm_cache):
    from infra.addons import dra_driver

    _, _, objects = rendered(US)
    broken = copy.deepcopy(objects)
    for o in broken:
        if o["metadata"]["name"] == dra_driver.KUBELET_PLUGIN:
            o["spec"]["template"]["spec"]["tolerations"] = []
    report = run(rendered, US, chart_objects=broken, chart_dir=chart_dir, helm_cache=helm_cache)
    text = "\n".join(map(str, report.findings))
    # the head claims the channel too (it is the run's first GPU node)
    for pod in ("worker group gb200", "head"):
        assert f"RayJob qwen3-30b-a3b-grpo {pod} on node group 'gb200': claims a " \
               "ComputeDomain channel, but the DRA kubelet plugin" in text
    assert f"{dra_driver.KUBELET_PLUGIN} on node group 'gb200'" in text  # the placement rule too


def test_missing_device_classes_leave_claims_unsatisfiable(rendered, chart_dir, helm_cache):
    _, _, objects = rendered(US)
    broken = [o for o in objects if o["kind"] != "DeviceClass"]
    report = run(rendered, US, chart_objects=broken, chart_dir=chart_dir, helm_cache=helm_cache)
    assert any("no rendered chart creates DeviceClass(es) compute-domain-daemon.nvidia.com, "
               "compute-domain-default-channel.nvidia.com" in str(f) for f in report.findings)


def test_a_claim_naming_no_compute_domain_template_is_found():
    from ops.dra_contract import dra_findings

    pod = {"kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "resourceClaims": [{"name": "c", "resourceClaimTemplateName": "other-channel"}]}}}}
    domain = {"kind": "ComputeDomain", "metadata": {"name": "j"},
              "spec": {"channel": {"resourceClaimTemplate": {"name": "j-channel"}}}}
    found = dra_findings([], [pod, domain], {"Job j": ["gb200"]})
    assert str(found[0]) == ("Job j on node group 'gb200': claim 'c' names ResourceClaimTemplate "
                             "'other-channel', which no rendered ComputeDomain creates; fix the "
                             "manifests (manifests/context.py)")



def test_a_head_claim_naming_no_compute_domain_template_is_found():
    """Only worker groups were read: a wrong template name on the head's claim passed."""
    from ops.dra_contract import dra_findings

    claim = {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "other-channel"}]}
    job = {"kind": "RayJob", "metadata": {"name": "r"}, "spec": {"rayClusterSpec": {
        "headGroupSpec": {"template": {"spec": claim}}, "workerGroupSpecs": []}}}
    domain = {"kind": "ComputeDomain", "metadata": {"name": "r"},
              "spec": {"channel": {"resourceClaimTemplate": {"name": "r-channel"}}}}
    found = dra_findings([], [job, domain], {"RayJob r head": ["gb200"]})
    assert str(found[0]).startswith("RayJob r head on node group 'gb200': claim 'c' names "
                                    "ResourceClaimTemplate 'other-channel'")


def test_the_dra_chart_refuses_gpu_allocation_beside_the_device_plugin(chart_dir, helm_cache):
    """The real chart's own guard (kubernetes-sigs/dra-driver-nvidia-gpu@764900e78337, tag v0.4.1,
    deployments/helm/dra-driver-nvidia-gpu/templates/validation.yaml:42): with resources.gpus on
    and no override it fails; the kit's values keep GPUs off."""
    from infra.addons import addon
    from infra.config import load_config
    from tests.support import REPO_ROOT

    spec = addon("dra_driver")
    cfg = load_config(REPO_ROOT / "examples" / f"{US}.yaml")
    values = chart_values("dra_driver", cfg)
    values["resources"]["gpus"]["enabled"] = True
    release = helm.ChartRelease(chart=spec.chart, repository=spec.repository,
                                version=spec.version, release=spec.release,
                                namespace=spec.namespace, values=values)
    binary = helm.helm_binary(cfg.kubernetes_version, helm_cache)
    archive = helm.chart_archive(release, chart_dir=chart_dir, helm=binary, cache_dir=None,
                                 allow_pull=False)
    with pytest.raises(helm.HelmError, match="gpuResourcesEnabledOverride"):
        helm.render_release(release, archive=archive, helm=binary,
                            kubernetes_version=cfg.kubernetes_version)


def test_a_binary_unpacked_earlier_is_reused_whole_in_another_folder(tmp_path):
    """The kubectl layer's Helm, asked for again in another cache folder (each `rlkit check`
    cache, each test), is the same complete executable: linked where it can be, else copied."""
    from infra.versions import DEFAULT_KUBERNETES_VERSION

    first = helm.layer_binary(DEFAULT_KUBERNETES_VERSION, tmp_path / "a", "helm")
    again = helm.layer_binary(DEFAULT_KUBERNETES_VERSION, tmp_path / "b", "helm")
    assert again != first and again.read_bytes() == first.read_bytes()
    assert os.access(again, os.X_OK)
    assert again.stat().st_ino == first.stat().st_ino  # one file system here: no copy
    assert not list(again.parent.glob("*.partial"))
    version = subprocess.run([str(again), "version", "--short"], capture_output=True, text=True)
    assert version.returncode == 0 and re.match(r"v\d+\.\d+\.\d+", version.stdout), version
