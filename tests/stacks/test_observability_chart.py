"""The CloudWatch observability add-on's configuration, rendered through the real chart
(amazon-cloudwatch-observability 6.4.0, tag f4ad2e3, ../shared/charts) with the real Helm and the
values read back from the synthesized observability stack, as EKS would install them.

- No Fluent Bit output creates a log group. The chart's own outputs set
  ``auto_create_group true``: a Fluent Bit still flushing during teardown recreates the deleted
  groups, untagged and with no retention, and the next deploy of the same name fails on them
  (issue 21, "No log groups come back").
- The kit's files keep the chart's inputs and log groups (nothing lost by replacing them).
- Every output fed by an input that buffers to the filesystem bounds its queue there
  (``storage.total_limit_size``; Fluent Bit's default is no bound, and the chart sets none), so a
  slow CloudWatch or a replayed job log cannot fill the node's root volume.
- Application Signals stays off unless asked: the chart turns it on and its AutoMonitor would
  instrument every Python service, the trainer included.
"""

from __future__ import annotations

import fnmatch
import json
import re

import pytest

from infra import names
from infra.catalog import INSTANCE_TYPES
from infra.config import load_config
from infra.constructs import fluent_bit
from infra.constructs import observability as obs_construct
from ops import helm, observability, preflight_observability, scheduling
from tests.support import artifacts
from tests.support.cdk import REPO_ROOT, resources

CHART = "amazon-cloudwatch-observability"
CHART_VERSION = "6.4.0"  # the tree the kit's values were read against


@pytest.fixture(scope="module")
def render(chart_dir, tmp_path_factory):
    """render(values) -> the chart's objects as EKS would install the add-on with ``values``
    (EKS sets the cluster name and region itself)."""
    archive = artifacts.unlocked_chart(chart_dir, f"{CHART}-{CHART_VERSION}.tgz")
    binary = helm.helm_binary("1.35", tmp_path_factory.mktemp("helm"))

    def run(values: dict) -> list[dict]:
        release = helm.ChartRelease(
            chart=CHART, repository="https://aws-observability.github.io/helm-charts",
            version=CHART_VERSION, release=CHART, namespace=obs_construct.ADDON_NAMESPACE,
            values={**values, "clusterName": "moe-rl", "region": "us-east-1"})
        return helm.render_release(release, archive=archive, helm=binary,
                                   kubernetes_version="1.35")

    return run


def kit_values(synth, example: str = "default") -> dict:
    s = synth(example)
    return observability.addon_configuration(s.template("observability"))


def fluent_bit_files(objects: list[dict]) -> dict[str, dict[str, str]]:
    """ConfigMap name -> {file: text} of every rendered Fluent Bit configuration."""
    return {o["metadata"]["name"]: o["data"] for o in objects
            if o["kind"] == "ConfigMap" and o["metadata"].get("labels", {}).get("k8s-app")
            == "fluent-bit"}


def sections(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """A Fluent Bit file's [SECTION]s in order, each with its (key, value) lines."""
    found: list[tuple[str, list[tuple[str, str]]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "@")):
            continue
        if m := re.fullmatch(r"\[\s*(\w+)\s*\]", line):
            found.append((m.group(1).upper(), []))
        elif found:
            key, _, value = line.partition(" ")
            found[-1][1].append((key.lower(), value.strip()))
    return found


def group_creating_outputs(objects: list[dict]) -> list[str]:
    """Every cloudwatch_logs output that may create its log group: auto_create_group is not
    explicitly false (Fluent Bit's default is false; the kit spells it out)."""
    bad = []
    for config_map, files in fluent_bit_files(objects).items():
        for file, text in files.items():
            for kind, settings in sections(text):
                opts = dict(settings)
                if kind == "OUTPUT" and opts.get("name") == "cloudwatch_logs" and \
                        opts.get("auto_create_group", "").lower() not in ("false", "off"):
                    bad.append(f"{config_map}/{file} -> {opts.get('log_group_name')}: "
                               f"auto_create_group {opts.get('auto_create_group')}")
    return bad


def test_no_fluent_bit_output_creates_a_log_group(render, synth):
    objects = render(kit_values(synth))
    files = fluent_bit_files(objects)
    assert set(files) == {"fluent-bit-config", "fluent-bit-windows-config"}
    assert group_creating_outputs(objects) == []
    # The kit's files are all there, included after the service section.
    linux = files["fluent-bit-config"]
    for name in ("application-log.conf", "dataplane-log.conf", "host-log.conf",
                 obs_construct.TRAINING_METRICS_FLUENT_BIT_FILE):
        assert f"@INCLUDE {name}" in linux["fluent-bit.conf"], name


def test_the_chart_alone_would_recreate_every_group(render):
    """The upstream failure: the chart's own outputs all create their groups."""
    bad = group_creating_outputs(render({}))
    for kind in ("application", "dataplane", "host"):
        assert any(f"fluent-bit-config/{kind}-log.conf -> /aws/containerinsights/${{CLUSTER_NAME}}"
                   f"/{kind}: auto_create_group true" == b for b in bad), bad
    assert any(b.startswith("fluent-bit-windows-config/") for b in bad)


def _pipeline(objects: list[dict]) -> tuple[set, set]:
    """(inputs as (plugin, tag, path or filters), output log groups) of the Linux Fluent Bit."""
    inputs, groups = set(), set()
    for file, text in fluent_bit_files(objects)["fluent-bit-config"].items():
        for kind, settings in sections(text):
            opts = dict(settings)
            if kind == "INPUT":
                filters = tuple(v for k, v in settings if k == "systemd_filter")
                inputs.add((opts["name"], opts["tag"], opts.get("path"), filters,
                            opts.get("exclude_path")))
            elif kind == "OUTPUT":
                groups.add(opts["log_group_name"])
    return inputs, groups


def test_the_kit_keeps_the_charts_inputs_and_groups(render, synth):
    kit_inputs, kit_groups = _pipeline(render(kit_values(synth)))
    chart_inputs, chart_groups = _pipeline(render({}))
    assert kit_inputs == chart_inputs
    training = names.container_insights_log_group("${CLUSTER_NAME}",
                                                  names.TRAINING_METRICS_LOG_KIND)
    assert kit_groups == chart_groups | {training}


def test_a_changed_output_is_caught(render, synth):
    """Deliberately broken input: one kit output back to auto_create_group true."""
    values = json.loads(json.dumps(kit_values(synth)))
    files = values["containerLogs"]["fluentBit"]["config"]["extraFiles"]
    files["host-log.conf"] = files["host-log.conf"].replace("auto_create_group   false",
                                                            "auto_create_group   true")
    assert group_creating_outputs(render(values)) == [
        "fluent-bit-config/host-log.conf -> /aws/containerinsights/${CLUSTER_NAME}/host: "
        "auto_create_group true"]



def test_the_add_on_role_writes_only_this_clusters_log_groups(render, synth):
    """CloudWatchAgentServerPolicy allows log writes (and retention changes) on every group of
    the account; the role's Deny leaves only this cluster's Container Insights groups. Every group
    the rendered add-on names (Fluent Bit's outputs, the agent's configuration) and the agent's
    performance group must stay writable, and another environment's groups must not."""
    s = synth("default")
    cluster = names.eks_cluster_name(s.config.name)
    (deny,) = [st for p in resources(s.template("observability"), "AWS::IAM::Policy").values()
               for st in p["Properties"]["PolicyDocument"]["Statement"] if st["Effect"] == "Deny"]
    assert set(deny["Action"]) == set(obs_construct.LOG_WRITE_ACTIONS)
    allowed = "".join(part if isinstance(part, str) else "123456789012"
                      for part in deny["NotResource"]["Fn::Join"][1])
    text = json.dumps(render(kit_values(synth)))
    named = set(re.findall(r'log_group_name\W+(/aws/[^"\\\s]+)', text))
    named = {g.replace("${CLUSTER_NAME}", cluster) for g in named}
    written = named | {names.container_insights_log_group(cluster, "performance")}
    assert len(named) >= 4  # application, dataplane, host, training metrics
    arn = "arn:aws:logs:us-east-1:123456789012:log-group:{}:log-stream:pod-x"
    for group in written:
        assert fnmatch.fnmatchcase(arn.format(group), allowed), group
    for foreign in (names.control_plane_log_group(cluster),
                    names.container_insights_log_group("moe-rl-2", "application")):
        assert not fnmatch.fnmatchcase(arn.format(foreign), allowed), foreign


# --- the filesystem buffer's bound --------------------------------------------------------------

_UNITS = {"": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9, "GB": 10**9}


def size_bytes(text: str) -> int:
    """A Fluent Bit unit size (Fluent Bit 5.0 docs, administration/configuring-fluent-bit.md
    "Unit sizes": none = bytes, K/KB = 1,000, M/MB = 10^6, G/GB = 10^9) in bytes."""
    number, unit = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", text.strip()).groups()
    return int(number) * _UNITS[unit.upper()]


def filesystem_queues(files: dict[str, str]) -> dict[str, str | None]:
    """Of one Fluent Bit configuration (its files, which it includes together): each output that
    an input with ``storage.type filesystem`` feeds (the output's Match covers the input's Tag)
    -> its ``storage.total_limit_size``, None where it sets none (no bound)."""
    parsed = [(file, kind, dict(settings)) for file, text in files.items()
              for kind, settings in sections(text)]
    tags = [opts["tag"] for _, kind, opts in parsed
            if kind == "INPUT" and opts.get("storage.type", "").lower() == "filesystem"]
    return {f"{file} -> {opts.get('log_group_name', opts.get('name'))}":
            opts.get("storage.total_limit_size")
            for file, kind, opts in parsed if kind == "OUTPUT"
            and any(fnmatch.fnmatchcase(tag, opts.get("match", "")) for tag in tags)}


def test_every_filesystem_fed_output_of_the_kit_is_bounded():
    """The kit's own files, as the stack passes them: the application and dataplane tails buffer
    to the filesystem, and both their outputs bound that queue, within a tenth of the disk the kit
    reserves beside the trainer image."""
    queues = filesystem_queues(fluent_bit.extra_files()["config"])
    group = "/aws/containerinsights/${CLUSTER_NAME}/"
    assert set(queues) == {f"application-log.conf -> {group}application",
                           f"dataplane-log.conf -> {group}dataplane"}
    assert set(queues.values()) == {fluent_bit.STORAGE_TOTAL_LIMIT}
    total = sum(size_bytes(v) for v in queues.values())
    assert total <= scheduling.NODE_DISK_RESERVE_GIB * 2**30 / 10


def test_every_filesystem_fed_output_is_bounded_in_the_rendered_chart(render, synth):
    queues = filesystem_queues(fluent_bit_files(render(kit_values(synth)))["fluent-bit-config"])
    assert queues and all(v == fluent_bit.STORAGE_TOTAL_LIMIT for v in queues.values()), queues


def test_the_chart_alone_spools_without_bound(render):
    """The upstream default: the chart's application and dataplane tails buffer to the filesystem
    and none of its outputs sets a bound."""
    queues = filesystem_queues(fluent_bit_files(render({}))["fluent-bit-config"])
    group = "/aws/containerinsights/${CLUSTER_NAME}/"
    assert queues == {f"application-log.conf -> {group}application": None,
                      f"dataplane-log.conf -> {group}dataplane": None}


def test_an_unbounded_output_is_caught():
    """Deliberately broken input: the dataplane output without its bound."""
    files = dict(fluent_bit.extra_files()["config"])
    files["dataplane-log.conf"] = re.sub(r"\n\s*storage\.total_limit_size .*", "",
                                         files["dataplane-log.conf"])
    queues = filesystem_queues(files)
    assert [k for k, v in queues.items() if v is None] == [
        "dataplane-log.conf -> /aws/containerinsights/${CLUSTER_NAME}/dataplane"]


# --- Application Signals ------------------------------------------------------------------------


def application_signals(objects: list[dict]) -> dict[str, object]:
    """What the rendered add-on does about Application Signals on Linux nodes: the operator's
    AutoMonitor switch, and which Linux agents collect application_signals."""
    [operator] = [o for o in objects if o["kind"] == "Deployment"
                  and "--auto-monitor-config" in json.dumps(o)]
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    [monitor] = [a.split("=", 1)[1] for a in args if a.startswith("--auto-monitor-config=")]
    agents = [o for o in objects if o["kind"] == "AmazonCloudWatchAgent"
              and (o["spec"].get("nodeSelector") or {}).get("kubernetes.io/os") != "windows"]
    assert agents
    return {"monitorAllServices": json.loads(monitor)["monitorAllServices"],
            "agents": sorted(a["metadata"]["name"] for a in agents
                             if "application_signals" in a["spec"].get("config", ""))}


def test_application_signals_stay_off_unless_asked(render, synth, synth_config):
    assert application_signals(render(kit_values(synth))) == {"monitorAllServices": False,
                                                              "agents": []}
    # The chart's default, which the kit must not inherit.
    on_by_default = application_signals(render({}))
    assert on_by_default["monitorAllServices"] is True and on_by_default["agents"]
    # Asked for: the chart's own behaviour.
    cfg = load_config(REPO_ROOT / "examples" / "default.yaml")
    cfg = cfg.model_copy(update={"observability": cfg.observability.model_copy(
        update={"application_signals": True})})
    asked = observability.addon_configuration(synth_config(cfg).template("observability"))
    assert application_signals(render(asked)) == on_by_default


# --- GPU metrics: the DCGM exporter's instance types ----------------------------------------------


def dcgm_exporter_types(objects: list[dict]) -> set[str]:
    """The instance types the rendered DcgmExporter's required node affinity admits (the add-on's
    operator gives the exporter's DaemonSet this affinity: ops/preflight_observability.py)."""
    [exporter] = [o for o in objects if o["kind"] == "DcgmExporter"]
    terms = exporter["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    [term] = terms  # one term: every expression of it must hold
    admitted = [set(e["values"]) for e in term["matchExpressions"]
                if e["key"] == preflight_observability.INSTANCE_TYPE_LABEL and e["operator"] == "In"]
    assert len(admitted) == 1, term
    return admitted[0]


def test_the_dcgm_exporter_runs_on_every_catalog_gpu_type(render, synth):
    """Without it a group's nodes get no GPU metrics and the dashboard's GPU panels stay empty,
    with nothing failing. The check's list (`rlkit check`) is the rendered one."""
    admitted = dcgm_exporter_types(render(kit_values(synth)))
    assert not set(INSTANCE_TYPES) - admitted, "catalog GPU types the exporter would skip"
    assert {t for t in admitted if not t.startswith("ml.")} == \
        preflight_observability.DCGM_EXPORTER_INSTANCE_TYPES


def test_the_printed_override_admits_a_missing_type(render, synth):
    """The fix `rlkit check` prints: the add-on's values replace the affinity, keeping the rest."""
    values = {**kit_values(synth),
              **preflight_observability.dcgm_exporter_affinity(["p7-r100.48xlarge"])}
    objects = render(values)
    assert dcgm_exporter_types(objects) == (
        preflight_observability.DCGM_EXPORTER_INSTANCE_TYPES | {"p7-r100.48xlarge"})
    [exporter] = [o for o in objects if o["kind"] == "DcgmExporter"]
    assert "fargate" in json.dumps(exporter["spec"]["affinity"])
