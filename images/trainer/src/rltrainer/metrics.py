"""Miles' per-step metric log lines -> CloudWatch embedded-metric-format (EMF) lines on stdout.

Miles logs one Python-dict line per rollout and per training step through ``logging`` (format
``[<time> <process>] <file>:<line> - <message>``, miles/utils/logging_utils.py
``configure_logger_raw``); Ray forwards worker output to the driver with a ``(<actor> pid=..)``
prefix. The messages this module reads, all in Miles v0.1.0:

- ``rollout <rollout_id>: {...}``: rollout-batch statistics, reward included
  (miles/backends/training_utils/log_utils.py ``gather_log_data``, metric_name "rollout");
- ``perf <rollout_id>: {...}``: rollout throughput (miles/ray/rollout/metrics.py
  ``log_rollout_data``) and training times (miles/utils/train_metric_utils.py
  ``log_perf_data_raw``: ``perf/step_time`` and friends);
- ``step <step_id>: {...}``: the actor's loss and gradient norm
  (log_utils.py ``log_train_step`` and miles/backends/megatron_utils/model.py).

Each recognised line becomes one JSON object with an ``_aws`` member (the EMF specification,
CloudWatch user guide "Specification: Embedded metric format"). The kit's Fluent Bit output
sends such lines to the environment's training-metrics log group with the ``json/emf`` log
format, so CloudWatch extracts the metrics; no agent runs in the trainer. Every original line
is relayed unchanged first: this only adds lines.

Each datapoint reaches CloudWatch once (CloudWatch keeps every EMF line it receives, so a second
copy is a second datapoint):

- the EMF lines do not go into the Ray job's log. KubeRay's job submitter follows that log
  (``ray job logs --follow``) and prints it again from the start when its pod restarts, and
  Fluent Bit ships the submitter's output too. Inside the kit's RayJob the EMF lines go to the
  head container's own output (its PID 1's stdout), which nothing replays (``emf_sink``);
- a retried job (KubeRay starts a new Ray cluster, the launcher resumes from the newest save)
  runs the rollouts after that save again. A ledger on the checkpoint directory (the shared file
  system) holds the highest rollout id (and training step) already sent per line kind, and a
  line at or below it is not sent again (``EmittedLedger``): the first run's values stay.
  Such a replayed rollout sends one metric of its own instead, ``replayed_rollout`` (its rollout
  id): the replay is progress, and without it a healthy retry published nothing for up to a save
  interval of rollouts, which `rlkit status` called a stall.
"""

from __future__ import annotations

import ast
import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterable, TextIO

from .contract import ENVIRONMENT_ENV, METRICS_NO_ENVIRONMENT
from .contract import METRICS_ENVIRONMENT_DIMENSION as ENVIRONMENT_DIMENSION
from .contract import METRICS_NAMESPACE as NAMESPACE  # CloudWatch namespace (the kit queries it)
from .contract import METRICS_RUN_DIMENSION as RUN_DIMENSION

# The one dimension set of every metric. The namespace is the account's, and two environments of
# one account may run under the same run name (the kit's default run name is the same in every
# environment), so the run name alone would mix their datapoints: the environment is part of the
# identity. One set only: each dimension set is a metric of its own (billed per metric), and the
# kit queries this one. Two keys, well inside the EMF limits (30 keys per dimension set; each
# value ASCII, 1-1024 characters, not blank: aws-embedded-metrics 3.5.0 constants.py and
# validator.py, which the tests run on every record; the environment's name is at most 20
# characters of [a-z0-9-], the run name a DNS label).
DIMENSIONS = [ENVIRONMENT_DIMENSION, RUN_DIMENSION]

# Miles key -> (EMF metric name, CloudWatch unit). Only the actor's keys: a critic's carry a
# "critic-" role tag and are left alone.
METRICS: dict[str, tuple[str, str]] = {
    "rollout/raw_reward": ("reward", "None"),
    "rollout/rewards": ("reward_shaped", "None"),
    "rollout/response_len/mean": ("response_length", "Count"),
    "rollout/truncated_ratio": ("truncated_ratio", "None"),
    "perf/rollout_time": ("rollout_time", "Seconds"),
    "perf/tokens_per_gpu_per_sec": ("rollout_tokens_per_gpu_per_s", "Count/Second"),
    "perf/step_time": ("step_time", "Seconds"),
    "perf/actor_train_time": ("train_time", "Seconds"),
    "perf/actor_train_tok_per_s": ("train_tokens_per_s", "Count/Second"),
    "perf/actor_train_mfu": ("train_mfu", "None"),
    "train/loss": ("loss", "None"),
    "train/pg_loss": ("pg_loss", "None"),
    "train/grad_norm": ("grad_norm", "None"),
}

# "... - <kind> <id>: {<python dict>}" at the end of the line, whatever prefix Ray adds, and
# the " [repeated Nx across cluster]" Ray's log deduplication may append.
_LINE = re.compile(r"(?:^|\s)- (?P<kind>rollout|perf|step) (?P<id>\d+): (?P<body>\{.*\})"
                   r"(?: \[repeated \d+x across cluster\])?\s*$")
# Terminal colour codes Ray may put around its prefix and suffix.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Reprs literal_eval cannot read: numpy scalars (np.float64(0.5)) and non-finite floats.
_NUMPY_SCALAR = re.compile(r"\bnp\.\w+\(([^()]*)\)")
_NON_FINITE = re.compile(r"(?<![\w'\"])-?(?:nan|inf)(?![\w'\"])")


@dataclass(frozen=True)
class MetricLine:
    kind: str  # "rollout" | "perf" | "step"
    index: int  # rollout id, or the accumulated training step
    values: dict[str, float]  # Miles key -> value, numbers only


def parse_line(line: str) -> MetricLine | None:
    """The metrics in one Miles log line, or None for any other line (never raises)."""
    match = _LINE.search(_ANSI.sub("", line))
    if match is None:
        return None
    body = _NON_FINITE.sub("None", _NUMPY_SCALAR.sub(r"\1", match["body"]))
    try:
        data = ast.literal_eval(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    values = {k: float(v) for k, v in data.items()
              if isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return MetricLine(kind=match["kind"], index=int(match["id"]), values=values)


def environment_name(env: dict[str, str] | None = None) -> str:
    """The kit environment this run belongs to (ENVIRONMENT_ENV, which the kit's RayJob sets on
    the Ray head), or METRICS_NO_ENVIRONMENT outside the kit."""
    env = os.environ if env is None else env
    return env.get(ENVIRONMENT_ENV, "").strip() or METRICS_NO_ENVIRONMENT


def emf_record(metric: MetricLine, *, environment: str, run: str,
               timestamp_ms: int) -> dict | None:
    """The EMF object for ``metric``, or None when it carries none of the mapped metrics."""
    chosen = {METRICS[key]: value for key, value in metric.values.items() if key in METRICS}
    if not chosen:
        return None
    record: dict = {
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [DIMENSIONS],
                "Metrics": [{"Name": name, "Unit": unit} for name, unit in chosen],
            }],
        },
        ENVIRONMENT_DIMENSION: environment,
        RUN_DIMENSION: run,
        # Properties (not metrics): where the numbers came from, for Logs Insights.
        "miles_line": metric.kind,
        "rollout_id" if metric.kind in ("rollout", "perf") else "train_step": metric.index,
    }
    record.update({name: value for (name, _unit), value in chosen.items()})
    return record


# The metric of a rollout the ledger keeps from being sent again (a retry runs the rollouts after
# its newest save again): its rollout id, a datapoint per replayed line, never deduplicated.
# `rlkit status` counts it as training progress (ops.observability health_queries).
REPLAY_METRIC = "replayed_rollout"
REPLAY_KINDS = ("rollout", "perf")  # the lines whose index is a rollout id


def replay_record(metric: MetricLine, *, environment: str, run: str, timestamp_ms: int) -> dict:
    """The EMF object that says rollout ``metric.index`` ran again (its own values not sent)."""
    return {
        "_aws": {"Timestamp": timestamp_ms, "CloudWatchMetrics": [{
            "Namespace": NAMESPACE, "Dimensions": [DIMENSIONS],
            "Metrics": [{"Name": REPLAY_METRIC, "Unit": "None"}]}]},
        ENVIRONMENT_DIMENSION: environment, RUN_DIMENSION: run,
        "miles_line": metric.kind, "rollout_id": metric.index,
        REPLAY_METRIC: float(metric.index),
    }


LEDGER_FILE = ".rltrainer-metrics-ledger.json"  # in the checkpoint directory
CONTAINER_STDOUT = "/proc/1/fd/1"  # the container's own output: what the node's log collector reads


class EmittedLedger:
    """The highest index sent per line key, kept in a file that outlives the job.

    A key is the line's kind plus the metric names it carries: Miles writes two ``perf <rollout
    id>`` lines per rollout (the rollout manager's throughput, the actor's training times), and
    both must pass once. ``fresh(key, index)`` is True the first time an index above the key's
    high-water mark is seen, and records it; Miles logs rollouts and steps in increasing order, so
    the mark is enough. An unreadable ledger starts empty (sending again beats sending nothing)."""

    def __init__(self, path: str | Path | None):
        self.path = None if path is None else Path(path)
        self.sent: dict[str, int] = {}
        if self.path is not None:
            try:
                data = json.loads(self.path.read_text())
                self.sent = {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}
            except (OSError, ValueError, TypeError):
                self.sent = {}
        self._lock = threading.Lock()

    def fresh(self, key: str, index: int) -> bool:
        with self._lock:
            if index <= self.sent.get(key, -1):
                return False
            self.sent[key] = index
            if self.path is not None:
                try:
                    tmp = self.path.with_name(self.path.name + ".tmp")
                    tmp.write_text(json.dumps(self.sent))
                    os.replace(tmp, self.path)
                except OSError:
                    pass  # a full or missing directory must not stop the metrics
            return True


def emf_sink(env: dict[str, str] | None = None, container_stdout: str = CONTAINER_STDOUT) -> TextIO | None:
    """Where EMF lines go inside the kit's RayJob (RLTRAINER_RAYJOB set): the container's own
    stdout, which the submitter does not replay. None elsewhere (then they go to stdout)."""
    from .contract import RAYJOB_ENV

    env = dict(os.environ if env is None else env)
    if not env.get(RAYJOB_ENV):
        return None
    try:
        return open(container_stdout, "a", buffering=1, encoding="utf-8")
    except OSError:
        return None


def emf_lines(lines: Iterable[str], *, environment: str, run: str,
              clock: Callable[[], float] = time.time,
              ledger: EmittedLedger | None = None,
              on_metric: Callable[[MetricLine], None] | None = None) -> Iterable[tuple[str, str | None]]:
    """For each input line: (the line, its EMF line or None). With ``ledger``, a line already
    sent (same kind, an index at or below the ledger's) gets a ``replay_record`` instead when its
    index is a rollout id (None for a training step). ``on_metric`` sees every metric line parsed
    (``rltrainer.startup``); its failures are ignored."""
    for line in lines:
        try:
            metric = parse_line(line)
            if metric is not None and on_metric is not None:
                try:
                    on_metric(metric)
                except Exception:  # noqa: BLE001 - the relay must go on (a full pipe stops training)
                    pass
            now_ms = int(clock() * 1000)
            record = None if metric is None else emf_record(
                metric, environment=environment, run=run, timestamp_ms=now_ms)
            if record is not None and ledger is not None:
                names = [m["Name"] for m in record["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
                if not ledger.fresh(f"{metric.kind}:{','.join(sorted(names))}", metric.index):
                    record = None if metric.kind not in REPLAY_KINDS else replay_record(
                        metric, environment=environment, run=run, timestamp_ms=now_ms)
            emf = None if record is None else json.dumps(record, separators=(",", ":"),
                                                         allow_nan=False)
        except (TypeError, ValueError, OverflowError):  # a metric line must not stop the relay
            emf = None
        yield line, emf


def relay(source: IO[bytes], sink: TextIO, *, environment: str, run: str,
          emf_sink: TextIO | None = None, lock: threading.Lock | None = None,
          ledger: EmittedLedger | None = None,
          on_metric: Callable[[MetricLine], None] | None = None) -> None:
    """Copy ``source`` (a child's pipe) to ``sink`` line by line, writing each Miles metric line's
    EMF line to ``emf_sink`` (default ``sink``) right after it. Undecodable bytes pass through
    as replacement characters; a failure to build an EMF line never stops the copy, and neither
    does a failed write (a full disk under the job's log, a closed stream): the pipe is always
    drained, since a child whose pipe fills blocks on its next write, and training would hang
    with nothing failed. Lines that could not be written are counted and said once."""
    emf_sink = emf_sink or sink
    lock = lock or threading.Lock()
    text = (raw.decode("utf-8", errors="replace") for raw in iter(source.readline, b""))
    lost = 0
    for line, emf in emf_lines(text, environment=environment, run=run, ledger=ledger,
                               on_metric=on_metric):
        with lock:
            try:
                sink.write(line)
                sink.flush()
                if emf is not None:
                    emf_sink.write(emf + "\n")
                    emf_sink.flush()
            except (OSError, ValueError) as exc:  # ValueError: a closed file
                lost += 1
                if lost == 1:
                    _say_once(f"rltrainer: writing the trainer's output failed ({exc}); the output "
                              "is still read so that training goes on, but lines are lost")


def _say_once(message: str) -> None:
    """A warning on this process's original stderr, if that can still be written."""
    import sys

    try:
        print(message, file=sys.__stderr__, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def start_relays(proc, *, run: str, environment: str | None = None,
                 ledger_path: str | Path | None = None,
                 emf_out: TextIO | None = None,
                 on_metric: Callable[[MetricLine], None] | None = None) -> list[threading.Thread]:
    """Relay ``proc``'s piped stdout and stderr to this process's; EMF lines go to ``emf_out``
    (default: ``emf_sink()``, else stdout), each (kind, rollout id) once per ``ledger_path``,
    for ``environment`` (default: ``environment_name()``) and ``run``; ``on_metric`` sees each
    metric line."""
    import sys

    environment = environment or environment_name()
    lock = threading.Lock()
    ledger = EmittedLedger(ledger_path)
    out = emf_out or emf_sink() or sys.stdout
    threads = [threading.Thread(target=relay, args=(pipe, sink),
                                kwargs={"environment": environment, "run": run, "emf_sink": out,
                                        "lock": lock, "ledger": ledger, "on_metric": on_metric},
                                name=f"metrics-relay-{name}", daemon=True)
               for name, pipe, sink in (("stdout", proc.stdout, sys.stdout),
                                        ("stderr", proc.stderr, sys.stderr))]
    for thread in threads:
        thread.start()
    return threads
