"""How long this attempt took to start: from KubeRay's start of it to Miles' first rollout.

On a Capacity Block ``rlkit launch`` counts a run's start before its first save
(``training.startup_minutes``, or the kit's estimate from the save's size and the file system's
throughput); what a run measured here is what to set it to. Logged by every run, not only on a
block: an on-demand run's start is the same work.

- KubeRay sets the RayJob's ``status.startTime`` when an attempt goes from New to Initializing,
  and again for each retry, whose Retrying step resets the status to New (ray-project/kuberay
  v1.7.0 59d663a, ray-operator/controllers/ray/rayjob_controller.go ``initRayJobStatusIfNeed``
  and the Retrying case). It covers the pods' scheduling, the image pull and Ray's start, which
  happen before this launcher runs; the launcher reads it with the pod's service account
  (``no_retry.rayjob_request``), and counts from its own start where it cannot.
- Miles logs ``perf <rollout_id>: {...}`` with ``perf/rollout_time``, the generation's seconds,
  when a rollout's generation ends (Miles v0.1.0 miles/ray/rollout/metrics.py
  ``log_rollout_data``): that line's time minus its rollout_time is when the first rollout began,
  after staging, the restore and Megatron's and SGLang's loading of the weights.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Mapping, TextIO

from .contract import RAYJOB_ENV
from .metrics import MetricLine
from .no_retry import REQUEST_ERRORS, rayjob_request

ROLLOUT_TIME_KEY = "perf/rollout_time"


def _fmt(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _parse_time(text: str) -> datetime:
    """A Kubernetes timestamp (RFC 3339, ``Z``)."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def attempt_start(log: TextIO, env: Mapping[str, str] | None = None,
                  request: Callable[[str], dict] | None = None) -> datetime | None:
    """When KubeRay started this attempt (its RayJob's ``status.startTime``); None outside the
    kit's RayJob or when it cannot be read (said on ``log``)."""
    rayjob = (os.environ if env is None else env).get(RAYJOB_ENV)
    if not rayjob:
        return None
    try:
        status = (request or rayjob_request)(rayjob).get("status") or {}
        return _parse_time(status["startTime"])
    except (*REQUEST_ERRORS, TypeError, AttributeError) as exc:
        print(f"rltrainer: startup: could not read when KubeRay started this attempt (RayJob "
              f"{rayjob} status.startTime: {type(exc).__name__}: {exc}); counting from the "
              "launcher's start, after the image pull and Ray's start", file=log, flush=True)
        return None


@dataclass
class StartupClock:
    """Says, once, how long this attempt took to reach its first rollout."""

    launcher_start: datetime
    attempt_start: datetime | None
    log: TextIO
    clock: Callable[[], datetime]
    first_rollout: datetime | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def begin(cls, log: TextIO, clock: Callable[[], datetime], env: Mapping[str, str] | None = None,
              request: Callable[[str], dict] | None = None) -> "StartupClock":
        now = clock()
        started = attempt_start(log, env, request)
        if started is not None:
            print(f"rltrainer: startup: KubeRay started this attempt at {_fmt(started)}; the "
                  f"launcher runs {_minutes(now - started)} later (the pods' scheduling, the image "
                  "pull, Ray's start)", file=log, flush=True)
        return cls(now, started, log, clock)

    @property
    def origin(self) -> tuple[datetime, str]:
        if self.attempt_start is not None:
            return self.attempt_start, ("KubeRay's start of this attempt (on a Capacity Block "
                                        "launched before its start, the wait for it included)")
        return self.launcher_start, "the launcher's start (the image pull and Ray's start not included)"

    def on_metric(self, metric: MetricLine) -> None:
        """A Miles metric line (from the relay threads): the first rollout's end, once."""
        seconds = metric.values.get(ROLLOUT_TIME_KEY)
        if metric.kind != "perf" or seconds is None or self.first_rollout is not None:
            return
        with self._lock:
            if self.first_rollout is not None:
                return
            self.first_rollout = self.clock() - timedelta(seconds=max(seconds, 0.0))
        origin, words = self.origin
        print(f"rltrainer: startup: the first rollout (id {metric.index}) began "
              f"{_minutes(self.first_rollout - origin)} after {words}, at {_fmt(self.first_rollout)}; "
              "training.startup_minutes estimates this for `rlkit launch` on a Capacity Block",
              file=self.log, flush=True)


def _minutes(td: timedelta) -> str:
    return f"{td.total_seconds() / 60:.1f} min"
