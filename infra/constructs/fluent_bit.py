"""The Fluent Bit files the kit gives the CloudWatch observability add-on, none of which may create
a log group.

The add-on's chart ships three files (``application-log.conf``, ``dataplane-log.conf``,
``host-log.conf``, chart values ``containerLogs.fluentBit.config.extraFiles``) whose
``cloudwatch_logs`` outputs set ``auto_create_group true`` [aws-observability/helm-charts
amazon-cloudwatch-observability 6.4.0 (f4ad2e3) values.yaml]. With that, a Fluent Bit still
running while teardown deletes the groups puts them back, untagged and without retention, and the
next deploy fails on a name that exists. The chart merges the add-on's values over its own key by
key, so the kit passes its own file under each of the three names: the same inputs and log
groups, every output with ``auto_create_group false`` (the stack creates the groups first, with
retention and the kit's key). Its fourth file sends the launcher's EMF lines to their own group.

The Windows DaemonSet of the chart has its own three files; the kit creates no Windows node, so
they are replaced by files with no output at all.

``tests/stacks/test_observability_chart.py`` renders the real chart with these values and checks
every output of every rendered Fluent Bit file.
"""

from __future__ import annotations

from infra import names

# Every ``cloudwatch_logs`` output of the kit says this [Fluent Bit cloudwatch_logs output:
# auto_create_group, "Automatically create the log group", default false; the kit spells it out].
AUTO_CREATE_GROUP = "false"

# The most each output keeps queued on disk, in Fluent Bit's unit (G = 10^9 bytes). The big tail
# inputs buffer to the filesystem (``storage.type filesystem``: the chart's storage.path,
# /var/fluent-bit/state/flb-storage/, a hostPath on the node's root volume), and without
# ``storage.total_limit_size`` an output's queue has no bound [Fluent Bit 5.0 docs,
# pipeline/buffering.md "Per-output settings" (fluent/fluent-bit-docs branch 5.0, fddebe3):
# "Sets the size of the queue for this output plugin ... the number of chunks buffered to the
# filesystem with this output as the intended destination. If the output plugin reaches its
# storage.total_limit_size capacity, the oldest chunk from its queue will be discarded to make
# room for new data", default none; the chart 6.4.0 runs aws-for-fluent-bit 3.4.8, which is
# Fluent Bit v5.0.7 (aws/aws-for-fluent-bit release v3.4.8)]. A slow CloudWatch, or a restarted
# KubeRay submitter printing a days-long job log again from its start, would otherwise spool onto
# the node's root volume (on a GPU node, beside the trainer image). 1 GB per output, and two
# outputs are fed by filesystem inputs (application, dataplane): under 2 GiB in all, a tenth of
# the 20 GiB kept free beside the trainer image (ops/scheduling.py NODE_DISK_RESERVE_GIB), and
# under 7 % of the smallest system root volume the kit accepts (SYSTEM_ROOT_VOLUME_MIN_GIB). What is dropped past it is the oldest queued lines, which a replayed log has sent before.
# Every output sets it, so an input moved to filesystem storage later is bounded too.
STORAGE_TOTAL_LIMIT_GB = 1
STORAGE_TOTAL_LIMIT = f"{STORAGE_TOTAL_LIMIT_GB}G"

# Paths of the container logs of the node's own networking pods: the dataplane file reads them,
# the application file leaves them out (as the chart does).
_DATAPLANE_CONTAINERS = ("/var/log/containers/aws-node*", "/var/log/containers/kube-proxy*")
_FLUENT_BIT_CONTAINERS = "/var/log/containers/fluent-bit*"
_AGENT_CONTAINERS = "/var/log/containers/cloudwatch-agent*"


def section(kind: str, settings: dict[str, str]) -> str:
    """One Fluent Bit section: ``[KIND]`` and its settings, keys padded to one column. A key that
    Fluent Bit takes more than once (``Systemd_Filter``, ``Rename``) is given its values joined by
    newlines; each becomes its own line."""
    lines = [f"[{kind}]"]
    for key, value in settings.items():
        lines += [f"    {key:<19} {one}" for one in str(value).split("\n")]
    return "\n".join(lines) + "\n"


def cloudwatch_output(match: str, kind: str, extra: dict[str, str] | None = None, *,
                      stream_prefix: str = "${HOST_NAME}-") -> str:
    """A ``cloudwatch_logs`` output into the cluster's ``kind`` log group, never creating it, its
    filesystem queue bounded (STORAGE_TOTAL_LIMIT)."""
    return section("OUTPUT", {
        "Name": "cloudwatch_logs", "Match": match, "region": "${AWS_REGION}",
        "log_group_name": names.container_insights_log_group("${CLUSTER_NAME}", kind),
        "log_stream_prefix": stream_prefix, "auto_create_group": AUTO_CREATE_GROUP,
        "storage.total_limit_size": STORAGE_TOTAL_LIMIT, **(extra or {})})


_INSIGHTS = {"extra_user_agent": "container-insights"}


def _tail(tag: str, path: str, db: str, buffer: str, extra: dict[str, str] | None = None,
          exclude: str | None = None) -> str:
    return section("INPUT", {
        "Name": "tail", "Tag": tag, **({"Exclude_Path": exclude} if exclude else {}),
        "Path": path, "multiline.parser": "docker, cri", "DB": f"/var/fluent-bit/state/{db}",
        "Mem_Buf_Limit": buffer, "Skip_Long_Lines": "On", "Refresh_Interval": "10",
        **(extra or {}), "Read_from_Head": "${READ_FROM_HEAD}"})


def _systemd(tag: str, db: str, *filters: str) -> str:
    return section("INPUT", {
        "Name": "systemd", "Tag": tag, "Systemd_Filter": "\n".join(filters),
        "DB": f"/var/fluent-bit/state/{db}", "Path": "/var/log/journal",
        "Read_From_Tail": "${READ_FROM_TAIL}"})


# Big inputs spill to disk rather than drop lines under back-pressure.
_BUFFERED = {"Rotate_Wait": "30", "storage.type": "filesystem"}


def application_log() -> str:
    """Every container's log, with its pod's Kubernetes metadata, to the application group.
    Fluent Bit's and the agent's own logs have inputs of their own with small buffers, so a burst
    of application lines cannot crowd them out."""
    return "\n".join([
        _tail("application.*", "/var/log/containers/*.log", "flb_container.db", "50MB",
              _BUFFERED, exclude=", ".join((_AGENT_CONTAINERS, _FLUENT_BIT_CONTAINERS,
                                            *_DATAPLANE_CONTAINERS))),
        _tail("application.*", _FLUENT_BIT_CONTAINERS, "flb_log.db", "5MB"),
        _tail("application.*", _AGENT_CONTAINERS, "flb_cwagent.db", "5MB"),
        # The entity (service, workload) CloudWatch's related-telemetry views link logs by.
        section("FILTER", {"Name": "aws", "Match": "application.*", "az": "false",
                           "ec2_instance_id": "false", "Enable_Entity": "true"}),
        section("FILTER", {
            "Name": "kubernetes", "Match": "application.*",
            "Kube_URL": "https://kubernetes.default.svc:443",
            "Kube_Tag_Prefix": "application.var.log.containers.", "Merge_Log": "On",
            "Merge_Log_Key": "log_processed", "K8S-Logging.Parser": "On",
            "K8S-Logging.Exclude": "Off", "Labels": "Off", "Annotations": "Off",
            "Use_Kubelet": "On", "Kubelet_Port": "10250", "Buffer_Size": "0"}),
        cloudwatch_output("application.*", "application", {**_INSIGHTS, "add_entity": "true"}),
    ])


def dataplane_log() -> str:
    """containerd, kubelet and the node's networking pods, to the dataplane group."""
    return "\n".join([
        _systemd("dataplane.systemd.*", "systemd.db", "_SYSTEMD_UNIT=docker.service",
                 "_SYSTEMD_UNIT=containerd.service", "_SYSTEMD_UNIT=kubelet.service"),
        _tail("dataplane.tail.*", ", ".join(_DATAPLANE_CONTAINERS), "flb_dataplane_tail.db",
              "50MB", _BUFFERED),
        section("FILTER", {
            "Name": "modify", "Match": "dataplane.systemd.*",
            "Rename": "_HOSTNAME hostname\n_SYSTEMD_UNIT systemd_unit\nMESSAGE message",
            "Remove_regex": "^((?!hostname|systemd_unit|message).)*$"}),
        section("FILTER", {"Name": "aws", "Match": "dataplane.*", "imds_version": "v2"}),
        cloudwatch_output("dataplane.*", "dataplane", _INSIGHTS),
    ])


def host_log() -> str:
    """The kernel's messages, syslog priorities 0-6 and the secure log, to the host group."""
    return "\n".join([
        _systemd("host.dmesg", "flb_dmesg.db", "_TRANSPORT=kernel"),
        _systemd("host.messages", "flb_messages.db", *(f"PRIORITY={p}" for p in range(7))),
        _systemd("host.secure", "flb_secure.db", "SYSLOG_FACILITY=10"),
        section("FILTER", {"Name": "aws", "Match": "host.*", "imds_version": "v2"}),
        section("FILTER", {"Name": "grep", "Match": "host.messages",
                           "Exclude": "SYSLOG_FACILITY /^(2|9|10)$/"}),
        section("FILTER", {
            "Name": "modify", "Match": "host.*",
            "Rename": "_HOSTNAME host\nMESSAGE message\nSYSLOG_IDENTIFIER ident\n"
                      "SYSLOG_PID pid",
            "Remove_regex": "[A-Z]"}),
        cloudwatch_output("host.*", "host", _INSIGHTS, stream_prefix="${HOST_NAME}."),
    ])


# Its filter runs after application-log.conf (the chart includes the files in key order), on
# records already tagged application.*; lines starting with the EMF marker are re-tagged, removed
# from the application stream and sent alone (log_key log) with log_format json/emf [Fluent Bit
# cloudwatch_logs output: log_key, log_format], which is what makes CloudWatch extract metrics.
TRAINING_METRICS_FILE = "training-metrics.conf"


def training_metrics() -> str:
    """The launcher's EMF lines, out of the application stream, to the training-metrics group."""
    return "\n".join([
        section("FILTER", {"Name": "rewrite_tag", "Match": "application.*",
                           "Rule": '$log ^\\{"_aws": training-metrics.$TAG false',
                           "Emitter_Name": "training_metrics_emitter"}),
        cloudwatch_output("training-metrics.*", names.TRAINING_METRICS_LOG_KIND,
                          {"log_key": "log", "log_format": "json/emf"}),
    ])


# The chart's Linux file names the kit replaces, and the kit's own file.
LINUX_FILES = {
    "application-log.conf": application_log,
    "dataplane-log.conf": dataplane_log,
    "host-log.conf": host_log,
    TRAINING_METRICS_FILE: training_metrics,
}
# The chart's Windows file names (values containerLogs.fluentBit.configWindows.extraFiles).
WINDOWS_FILES = ("application-log.conf", "dataplane-log.conf", "host-log.conf")
_NO_WINDOWS = "# The kit creates no Windows nodes: no input and no output here.\n"


def extra_files() -> dict[str, dict[str, str]]:
    """``{"config": {file: text}, "configWindows": {file: text}}``: the extraFiles values."""
    return {"config": {name: make() for name, make in LINUX_FILES.items()},
            "configWindows": {name: _NO_WINDOWS for name in WINDOWS_FILES}}
