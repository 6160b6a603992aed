"""The operator side of the CloudWatch view: dashboard URL, a health line, logs after the pods.

Plain functions over boto3 clients (``ops.aws.client``: timeouts and bounded retries on every
call), so tests hand them Stubber-wrapped clients. Names come from ``infra.names``, the same
definitions the stacks use.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import re
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, TextIO

from infra import names
from infra.config import KitConfig
from infra.config.derived import save_upload_estimate
from infra.trainer_contract import (
    METRICS_ENVIRONMENT_DIMENSION,
    METRICS_NAMESPACE,
    METRICS_RUN_DIMENSION,
)
from infra.versions import CLOUDWATCH_OBSERVABILITY_ADDON
from ops import scheduling

# --- the dashboard and the health line ------------------------------------------------------------


def dashboard_url(config: KitConfig) -> str:
    """The CloudWatch console page of the environment's dashboard."""
    region = config.region
    return (f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
            f"#dashboards/dashboard/{names.dashboard_name(config.name, config.region)}")


@dataclass(frozen=True)
class HealthQuery:
    id: str
    label: str
    namespace: str
    metric: str
    stat: str
    fmt: Callable[[float], str]
    # Dimensions the metric is published with but which the line sums over (the CloudWatch
    # docs list pod_number_of_container_restarts with PodName, Namespace, ClusterName only).
    search_dims: tuple[str, ...] = ()
    shown_only_with_data: bool = False  # left off the line when it has no datapoint


def health_queries(config: KitConfig) -> tuple[list[HealthQuery], dict[str, list[dict]]]:
    """The queries of the health line and, per query id, its metric dimensions. The training
    metrics are this environment's run: the run name alone is shared by every environment of the
    account that keeps the default (rltrainer.metrics DIMENSIONS)."""
    cluster = {"ClusterName": names.eks_cluster_name(config.name)}
    run = {METRICS_ENVIRONMENT_DIMENSION: config.name,
           METRICS_RUN_DIMENSION: config.training.run_name}
    queries = [
        HealthQuery("gpu", "GPU util", "ContainerInsights", "node_gpu_utilization", "Average",
                    lambda v: f"{v:.0f}%"),
        HealthQuery("efadrop", "EFA rx drops", "ContainerInsights", "node_efa_rx_dropped", "Sum",
                    lambda v: f"{v:.0f}"),
        HealthQuery("failed", "failed nodes", "ContainerInsights", "cluster_failed_node_count",
                    "Maximum", lambda v: f"{v:.0f}"),
        HealthQuery("restarts", f"container restarts in {names.TRAINER_NAMESPACE}",
                    "ContainerInsights", "pod_number_of_container_restarts", "Maximum",
                    lambda v: f"{v:.0f}", search_dims=("Namespace", "PodName")),
        HealthQuery("reward", "reward", METRICS_NAMESPACE, "reward", "Average",
                    lambda v: f"{v:.3g}"),
        HealthQuery("steptime", "step time", METRICS_NAMESPACE, "step_time",
                    "Average", lambda v: f"{v:.0f} s"),
        # After a retry the launcher sends a replayed rollout's id instead of its values
        # (rltrainer.metrics REPLAY_METRIC): progress, though no reward or step time comes.
        HealthQuery("replay", "replayed rollout", METRICS_NAMESPACE,
                    "replayed_rollout", "Maximum", lambda v: f"{v:.0f}",
                    shown_only_with_data=True),
    ]
    dims = {q.id: [{"Name": k, "Value": v} for k, v in
                   (run if q.namespace == METRICS_NAMESPACE else cluster).items()]
            for q in queries}
    dims["restarts"].append({"Name": "Namespace", "Value": names.TRAINER_NAMESPACE})
    return queries, dims


def _query(q: HealthQuery, dims: list[dict]) -> dict:
    if not q.search_dims:
        return {"Id": q.id, "ReturnData": True, "MetricStat": {
            "Metric": {"Namespace": q.namespace, "MetricName": q.metric, "Dimensions": dims},
            "Period": 60, "Stat": q.stat}}
    # One series for all pods: the largest restart count of any pod of the namespace.
    schema = ",".join([q.namespace, *sorted({d["Name"] for d in dims} | set(q.search_dims))])
    terms = " ".join(f'{d["Name"]}="{d["Value"]}"' for d in dims)
    return {"Id": q.id, "ReturnData": True, "Period": 60, "Expression":
            f"MAX(SEARCH('{{{schema}}} MetricName=\"{q.metric}\" {terms}', '{q.stat}', 60))"}


HEALTH_WINDOW = dt.timedelta(minutes=15)
_TRAINING_IDS = ("reward", "steptime", "replay")


def quiet_window(config: KitConfig) -> dt.timedelta:
    """How long a healthy run can go without a reward or step-time datapoint. The launcher writes
    both once per rollout, so the gap is normally one rollout (``training.rollout_minutes``, the
    config's estimate of one rollout with its training step). The longest gap of a healthy run is
    a rollout followed by a save and its upload: the launcher's upload after the last rollout,
    and the save before a Capacity Block ends, keep the job RUNNING with no step
    (``save_upload_estimate``: ``training.save_upload_minutes`` or the kit's). Twice the rollout
    estimate plus that leaves one whole rollout of margin over both estimates; at least the health
    line's own 15 minutes. A retry's replayed rollouts (the ones after its newest save, whose
    values were sent the first time) send ``replayed_rollout`` once per rollout instead, so the
    same window holds for them."""
    t = config.training
    save = save_upload_estimate(config).minutes
    return max(HEALTH_WINDOW, dt.timedelta(minutes=2 * t.rollout_minutes + save))


def running_since(rayjob: dict | None) -> dt.datetime | None:
    """When the RayJob's current attempt started, while its Ray job is RUNNING; else None. The Ray
    job's own start (``status.rayJobInfo.startTime``, set once the entrypoint runs) or, without
    it, the attempt's (``status.startTime``, when KubeRay began creating its Ray cluster). KubeRay
    v1.7.0 clears the first and sets the second again for every retry
    (ray-project/kuberay@59d663aeec13 ray-operator/controllers/ray/rayjob_controller.go: Retrying
    resets ``RayJobStatusInfo`` at :400; ``initRayJobStatusIfNeed`` sets ``StartTime`` at :916),
    so both are this attempt's."""
    st = (rayjob or {}).get("status") or {}
    if st.get("jobStatus") != "RUNNING":
        return None
    for stamp in ((st.get("rayJobInfo") or {}).get("startTime"), st.get("startTime")):
        if isinstance(stamp, str) and stamp:
            try:
                when = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            except ValueError:
                continue
            return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
    return None


def _stalled(config: KitConfig, latest_training: dt.datetime | None, *, now: dt.datetime,
             running_from: dt.datetime | None) -> str | None:
    """The problem of a RUNNING job that reports no training step, or None. Judged only once the
    job's current attempt has run twice the quiet window: before its first rollout the launcher
    stages the inputs and restores the newest save (about one save's transfer) and the engines
    load, which can take as long as the window itself, so a job that just started (or was just
    retried) is never called stalled. Without a start time nothing is judged."""
    if running_from is None:
        return None
    window = quiet_window(config)
    ran = now - running_from
    if ran < 2 * window or (latest_training is not None and now - latest_training <= window):
        return None
    minutes = int(window.total_seconds() // 60)
    return (f"no training step reported in the last {minutes} min (no reward, step time or "
            f"replayed rollout; "
            f"the job has run {int(ran.total_seconds() // 60)} min, about one rollout every "
            f"{config.training.rollout_minutes:g} min expected)")


def health_line(cloudwatch: Any, config: KitConfig, *, now: dt.datetime,
                running_from: dt.datetime | None = None) -> str:
    """One line: the latest value of each health metric over the last 15 minutes; 'problem'
    when a node failed, EFA dropped packets or a container restarted, or, with ``running_from``
    (``running_since``: the RayJob is RUNNING), when its run reported no reward and no step time
    within ``quiet_window`` (``_stalled`` says when that is judged)."""
    queries, dims = health_queries(config)
    lookback = HEALTH_WINDOW if running_from is None else quiet_window(config)
    response = cloudwatch.get_metric_data(
        MetricDataQueries=[_query(q, dims[q.id]) for q in queries],
        StartTime=now - lookback, EndTime=now, ScanBy="TimestampDescending")
    newest = {r["Id"]: (_utc(r["Timestamps"][0]) if r.get("Timestamps") else now, r["Values"][0])
              for r in response.get("MetricDataResults", []) if r.get("Values")}
    latest = {k: v for k, (when, v) in newest.items() if now - when <= HEALTH_WINDOW}
    parts = [f"{q.label} {q.fmt(latest[q.id]) if q.id in latest else 'n/a'}" for q in queries
             if q.id in latest or not q.shown_only_with_data]
    problems = [q.label for q in queries
                if q.id in ("efadrop", "failed", "restarts") and latest.get(q.id, 0) > 0]
    stepped = [newest[k][0] for k in _TRAINING_IDS if k in newest]
    stalled = _stalled(config, max(stepped, default=None), now=now, running_from=running_from)
    if stalled:
        problems.append(stalled)
    verdict = f"problem ({', '.join(problems)})" if problems else (
        "ok" if latest else "no data yet (no GPU node up, or the add-on is not running)")
    return f"health, last {int(HEALTH_WINDOW.total_seconds() // 60)} min: {verdict}: " + \
        ", ".join(parts)


def _utc(when: Any) -> dt.datetime:
    """A GetMetricData timestamp (botocore parses it to an aware datetime) in UTC."""
    if isinstance(when, str):
        when = dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


# --- logs after the pods ------------------------------------------------------------------------

_SINCE = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> dt.timedelta:
    """'90s', '30m', '2h', '3d' -> a duration; ValueError names the accepted forms."""
    match = _SINCE.fullmatch(text.strip())
    if not match or int(match[1]) == 0:
        raise ValueError(f"--since {text!r}: not a duration; use a number and a unit, e.g. 30m, "
                         "2h or 3d (s, m, h, d)")
    return dt.timedelta(seconds=int(match[1]) * _UNIT_S[match[2]])


@dataclass(frozen=True)
class LogQuery:
    group: str
    filter_pattern: str
    stream_prefix: str | None  # Fluent Bit names streams <node name>-<tag>
    show_source: bool  # prefix each line with pod/container (several containers mixed)

    def describe(self) -> str:
        where = f"log streams of node {self.stream_prefix[:-1]}" if self.stream_prefix else \
            "all nodes"
        return f"CloudWatch Logs {self.group}, {where}, filter {self.filter_pattern}"


def log_query(config: KitConfig, *, node: str | None, submitter_container: str) -> LogQuery:
    """What `rlkit logs` reads from CloudWatch: the submitter's output (what `kubectl logs
    job/<run>` shows), or, with a node, every container of the run's namespace on that node."""
    group = names.container_insights_log_group(names.eks_cluster_name(config.name), "application")
    terms = [f'$.kubernetes.namespace_name = "{names.TRAINER_NAMESPACE}"']
    if node is None:
        terms += [f'$.kubernetes.container_name = "{submitter_container}"',
                  f'$.kubernetes.pod_name = "{config.training.run_name}*"']
    return LogQuery(group=group, filter_pattern="{ " + " && ".join(terms) + " }",
                    stream_prefix=None if node is None else f"{node}-", show_source=node is not None)


def _record(message: str) -> tuple[str | None, str | None, str]:
    """(pod, container, the container's own line) out of a Fluent Bit record (JSON with `log`
    and `kubernetes`); (None, None, the message) for anything else."""
    try:
        record = json.loads(message)
    except ValueError:
        return None, None, message.rstrip("\n")
    if not isinstance(record, dict) or "log" not in record:
        return None, None, message.rstrip("\n")
    k = record.get("kubernetes") if isinstance(record.get("kubernetes"), dict) else {}
    return k.get("pod_name"), k.get("container_name"), str(record["log"]).rstrip("\n")


def _line(message: str, show_source: bool) -> str:
    """The container's own line out of a Fluent Bit record, prefixed with pod/container when
    ``show_source``."""
    pod, container, text = _record(message)
    if show_source and pod is not None:
        text = f"[{pod}/{container or '?'}] {text}"
    return text


# A replay that diverges from the pod before it this many lines in a row is not one.
REPLAY_DIVERGED_LINES = 5


class SubmitterReplays:
    """Which lines of the submitter's pods are replays. KubeRay's submitter runs `ray job logs
    --follow` (ray-project/kuberay@59d663a ray-operator/controllers/ray/common/job.go:120-130),
    which prints the job's log from its start; the Job replaces a failed submitter pod (the
    kit's backoffLimit allows 10), and the new pod prints again everything the old one printed.
    A new pod's line is a replay when it comes next, in order, among the lines of the pod before
    it (a few lines may differ: the CLI's own; lines older than --since that the old pod's read
    never had are not recognised, and are printed). The replay ends when it reaches the old
    pod's last line, or when the new pod diverges from it for REPLAY_DIVERGED_LINES lines in a
    row (a new attempt after a KubeRay retry, a new Ray job: its first lines, when identical to
    the old attempt's, are still taken for a replay). Holds one hash per line of two pods."""

    def __init__(self) -> None:
        self.pod: str | None = None
        self.pods: set[str] = set()
        self.lines: list[int] = []  # the current pod's lines, in order
        self.before: dict[int, list[int]] = {}  # the previous pod's: line -> its positions
        self.before_len = self.at = self.diverged = 0
        self.matched = False

    def new_pod(self, pod: str | None) -> bool:
        """Whether ``pod`` is a submitter pod after the first one, not seen before."""
        return pod is not None and pod != self.pod and pod not in self.pods and bool(self.pods)

    def fresh(self, pod: str | None, text: str) -> bool:
        """Whether to print ``text``, the next line of ``pod`` (False: a replay)."""
        if pod is None:
            return True
        if pod != self.pod:
            if pod in self.pods:  # a line of an earlier pod that became searchable late
                return True
            index: dict[int, list[int]] = {}
            for i, h in enumerate(self.lines):
                index.setdefault(h, []).append(i)
            self.before, self.before_len = index, len(self.lines)
            self.at = self.diverged = 0
            self.matched = False
            self.pod, self.lines = pod, []
            self.pods.add(pod)
        h = hash(text)
        self.lines.append(h)
        if self.at >= self.before_len:
            return True
        positions = self.before.get(h) or []
        i = bisect.bisect_left(positions, self.at)
        if i < len(positions):
            self.at, self.diverged, self.matched = positions[i] + 1, 0, True
            return False
        if self.matched:
            self.diverged += 1
            if self.diverged >= REPLAY_DIVERGED_LINES:
                self.at = self.before_len  # not a replay after all: print the rest
        return True


# How far back each follow poll reads again: CloudWatch Logs makes events searchable some time
# after they arrive, and Fluent Bit on each node ships its own batches, so an event can appear
# after newer ones were printed. Events seen within this window are remembered and not repeated.
FOLLOW_LOOKBACK_MS = 120_000


def read_logs(logs_client: Any, query: LogQuery, *, start: dt.datetime, out: TextIO,
              follow: bool = False, poll_s: float = 5.0,
              sleep: Callable[[float], None] = time.sleep, max_polls: int | None = None,
              tail: int | None = None, timestamps: bool = False,
              notes: TextIO | None = None) -> int:
    """Print the matching events from ``start`` in time order, page by page as CloudWatch returns
    them (FilterLogEvents sorts by event time), so a day of output is neither held in memory nor
    waited for; with ``follow``, keep polling (until interrupted, or ``max_polls`` polls for
    tests), each poll reading again the last ``FOLLOW_LOOKBACK_MS`` so that an event that became
    searchable late is printed, not lost (after the newer lines). ``tail``: of the first poll,
    only the last N lines; ``timestamps``: each line starts with its event time (RFC 3339, as
    kubectl). The submitter's output (a query without a node) is read once however many pods
    printed it: a restarted submitter pod's replay of the job log is left out
    (``SubmitterReplays``), and ``notes`` is told when such a pod begins. Returns the number of
    lines."""
    start_ms = newest_ms = int(start.timestamp() * 1000)
    replays = SubmitterReplays() if query.stream_prefix is None else None
    seen: dict[Any, int] = {}  # events printed (or left out by --tail) in the window -> timestamp
    printed = polls = 0

    def emit(event: dict) -> None:
        nonlocal printed
        line = _line(event["message"], query.show_source)
        if timestamps:
            when = dt.datetime.fromtimestamp(event["timestamp"] / 1000, dt.timezone.utc)
            line = f"{when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} {line}"
        print(line, file=out, flush=True)
        printed += 1

    while True:
        kwargs: dict[str, Any] = {"logGroupName": query.group,
                                  "startTime": max(start_ms, newest_ms - FOLLOW_LOOKBACK_MS),
                                  "filterPattern": query.filter_pattern}
        if query.stream_prefix:
            kwargs["logStreamNamePrefix"] = query.stream_prefix
        last = deque(maxlen=tail) if tail is not None and polls == 0 else None  # --tail's lines
        while True:
            page = logs_client.filter_log_events(**kwargs)
            for event in sorted(page.get("events", []), key=lambda e: (e["timestamp"], e.get("eventId", ""))):
                key = event.get("eventId", (event["timestamp"], event["message"]))
                if key in seen:
                    continue
                seen[key] = event["timestamp"]
                newest_ms = max(newest_ms, event["timestamp"])
                if replays is not None:
                    pod, _, text = _record(event["message"])
                    if replays.new_pod(pod) and notes is not None:
                        print(f"note: submitter pod {pod} began; it prints the job's log again "
                              "from its start, and the lines already printed are left out",
                              file=notes, flush=True)
                    if not replays.fresh(pod, text):
                        continue
                if last is not None:
                    last.append(event)  # lines before the last N are left out for good
                else:
                    emit(event)
            # a later poll cannot return what is older than its window: no need to remember it
            seen = {k: t for k, t in seen.items() if t >= newest_ms - FOLLOW_LOOKBACK_MS}
            if not page.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
        for event in last or ():
            emit(event)
        polls += 1
        if not follow or (max_polls is not None and polls >= max_polls):
            return printed
        sleep(poll_s)


# --- the scheduling check: the add-on's DaemonSets on the GPU nodes -------------------------------


def addon_configuration(template: dict) -> dict | None:
    """The configuration values of the amazon-cloudwatch-observability add-on in a synthesized
    template (the observability stack's; {} when it passes none), or None when the template has
    no such add-on."""
    return scheduling.managed_addon_values(template, CLOUDWATCH_OBSERVABILITY_ADDON)


def addon_template(config: KitConfig, templates: dict[str, dict]) -> dict:
    """The template that holds the add-on: the observability stack's ({} when not deployed)."""
    return templates.get(names.stack_names(config.name)["observability"], {})


# The chart's own default root tolerations (chart 6.4.0 values.yaml), which apply when the add-on
# is given none.
CHART_DEFAULT_TOLERATIONS = [{"operator": "Exists"}]


def addon_findings(template: dict,
                   nodes: list[scheduling.NodeGroupModel]) -> list[scheduling.Finding]:
    """A finding for each node group whose taints the add-on's DaemonSets (CloudWatch agent,
    Fluent Bit, DCGM exporter: all take the chart's root tolerations) would not tolerate."""
    return scheduling.managed_addon_findings(
        addon_configuration(template), nodes,
        pod=f"EKS add-on {CLOUDWATCH_OBSERVABILITY_ADDON} DaemonSets", key=("tolerations",),
        default=CHART_DEFAULT_TOLERATIONS, serves={n.name for n in nodes},
        fix="no GPU, EFA or log collection there; pass tolerations for them "
            "(infra/constructs/observability.py ADDON_TOLERATIONS)")
