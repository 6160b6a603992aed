"""Count the launcher's starts within one KubeRay attempt; refuse beyond ``MAX_STARTS_PER_ATTEMPT``.

A RayJob attempt can start the launcher more than once, uncounted:

- the Ray head's pod has Kubernetes' default ``restartPolicy: Always``: KubeRay v1.7.0 sets
  ``Never`` only with autoscaler v2 (ray-project/kuberay@59d663aeec13
  ray-operator/controllers/ray/common/pod.go:278-280, 698-700), which the kit does not use, so a
  head container that dies (OOM, a crash of ``ray start``) restarts in the same pod with a fresh
  GCS that no longer knows the Ray job;
- KubeRay's submitter Job follows the job with ``ray job logs --follow``; when that ends with a
  failure the Job runs another pod (``submitterConfig.backoffLimit``, ``SUBMITTER_BACKOFF_LIMIT``
  = 10 in manifests/context.py), whose command submits the same submission ID again when ``ray job
  status`` finds no such job (common/job.go:119-130, 158-170, 206-209: the pod's exit status is
  that of ``ray job logs --follow``, whose exit when the head's dashboard goes away was not checked
  against Ray's code; if it exits 0, KubeRay fails the attempt instead, "Submitter completed but
  Ray job not found", which is counted);
- meanwhile the RayJob controller treats "job not found" as not finished while the submitter has
  not finished (rayjob_controller.go:301-315): no failure, no Retrying, nothing counted against
  ``spec.backoffLimit`` (``training.backoff_limit``).

So a head crash loop could load the model on every GPU up to ten times inside one attempt. The
launcher identifies the attempt by its RayJob's ``metadata.uid`` and ``status.startTime`` (set anew
for each attempt: rayjob_controller.go ``initRayJobStatusIfNeed``, 887-917), read with the trainer's
service account, and records each start in ``<checkpoint.local_dir>/_attempt_starts.json`` (the
shared file system outlives the head's container). Past ``MAX_STARTS_PER_ATTEMPT`` it exits
``EXIT_PREPARE`` before staging or loading anything: the Ray job fails, KubeRay fails the attempt
and counts it, and its retry (a new Ray cluster, a new start time) starts afresh. KubeRay's
retries are left on. Outside the kit's RayJob, or when the RayJob cannot be read, nothing is
counted (said on the log): a flaky API server must not stop a run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping, TextIO

from .contract import RAYJOB_ENV
from .no_retry import REQUEST_ERRORS, rayjob_request

# The first start, and one more after a head restart (a one-off OOM, a node hiccup); a third
# start in one attempt is a loop.
MAX_STARTS_PER_ATTEMPT = 2
RECORD_FILE = "_attempt_starts.json"


@dataclass(frozen=True)
class StartCheck:
    rayjob: dict | None  # the RayJob as read (rltrainer.startup reads its status.startTime too)
    refusal: str | None  # why this start is refused; None to go on


def count_start(local_dir: str, log: TextIO, *, env: Mapping[str, str] | None = None,
                request: Callable[[str], dict] | None = None,
                now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> StartCheck:
    """Record this start of the launcher in its attempt's record; a refusal past the bound."""
    name = (os.environ if env is None else env).get(RAYJOB_ENV)
    if not name:
        return StartCheck(None, None)
    try:
        rayjob = (request or rayjob_request)(name)
        uid = str(rayjob["metadata"]["uid"])
        attempt = str(rayjob["status"]["startTime"])
    except (*REQUEST_ERRORS, TypeError) as exc:
        print(f"rltrainer: could not read RayJob {name} (metadata.uid, status.startTime: "
              f"{type(exc).__name__}: {exc}); this start is not counted against "
              f"MAX_STARTS_PER_ATTEMPT ({MAX_STARTS_PER_ATTEMPT})", file=log, flush=True)
        return StartCheck(None, None)
    path = Path(local_dir) / RECORD_FILE
    starts = _earlier_starts(path, uid, attempt, log)
    starts.append(now().strftime("%Y-%m-%dT%H:%M:%SZ"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{RECORD_FILE}.tmp")
        tmp.write_text(json.dumps({"rayjob": name, "uid": uid, "attempt_start": attempt, "starts": starts}) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        print(f"rltrainer: could not record this start in {path} ({exc}); starts of this attempt are "
              "not counted", file=log, flush=True)
        return StartCheck(rayjob, None)
    if len(starts) <= MAX_STARTS_PER_ATTEMPT:
        if len(starts) > 1:
            print(f"rltrainer: start {len(starts)} of RayJob {name}'s attempt that began {attempt} (earlier: "
                  f"{', '.join(starts[:-1])}): the Ray head restarted and KubeRay's submitter submitted the job "
                  f"again; a start past {MAX_STARTS_PER_ATTEMPT} in one attempt is refused", file=log, flush=True)
        return StartCheck(rayjob, None)
    return StartCheck(rayjob, (
        f"start {len(starts)} of RayJob {name}'s attempt that began {attempt} (starts at {', '.join(starts)}; "
        f"record {path}): more than MAX_STARTS_PER_ATTEMPT = {MAX_STARTS_PER_ATTEMPT} starts in one attempt "
        "means the Ray head's container keeps restarting and KubeRay's submitter resubmits the job each time, "
        "uncounted by training.backoff_limit. Refusing before any model load; this exit fails the attempt, which "
        "KubeRay counts and retries on a new Ray cluster. Fix: find why the head restarts (kubectl describe pod "
        "on the head: Last State, Restart Count; its previous log with kubectl logs --previous)"))


def _earlier_starts(path: Path, uid: str, attempt: str, log: TextIO) -> list[str]:
    """The starts recorded for this RayJob and attempt (none for another one, or no record)."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        print(f"rltrainer: the start record {path} is unreadable ({exc}); counting this attempt's starts "
              "afresh", file=log, flush=True)
        return []
    if not isinstance(record, dict) or record.get("uid") != uid or record.get("attempt_start") != attempt:
        return []  # another RayJob, or an earlier attempt of this one
    starts = record.get("starts")
    return [str(s) for s in starts] if isinstance(starts, list) else []
