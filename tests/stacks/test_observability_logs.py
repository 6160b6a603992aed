"""`rlkit logs` from CloudWatch reads the submitter's output once, however many submitter pods
printed it (ops.observability.SubmitterReplays; botocore Stubber, no AWS)."""

from __future__ import annotations

import datetime as dt
import io
import json


from infra.config import load_config
from ops import observability
from tests.support import REPO_ROOT
from tests.support.preflight import stubbed  # a client answered by botocore's Stubber

CFG = load_config(REPO_ROOT / "examples" / "p5-2node.yaml")
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)


def record(log: str, pod: str, container: str = "ray-job-submitter") -> str:
    """A Fluent Bit record of one submitter line, as CloudWatch Logs holds it."""
    return json.dumps({"log": log + "\n", "stream": "stdout",
                       "kubernetes": {"pod_name": pod, "container_name": container,
                                      "namespace_name": "rl-training"}})


def test_a_restarted_submitters_replay_of_the_job_log_is_printed_once():
    """KubeRay's submitter runs `ray job logs --follow`, which prints the job's log from its start:
    a replaced submitter pod prints again all its predecessor printed. Before, `rlkit logs` read
    from before the restart printed the log once per pod (it de-duplicated by event ID only)."""
    logs, stub = stubbed("logs")
    q = observability.log_query(CFG, node=None, submitter_container="ray-job-submitter")
    start = NOW - dt.timedelta(hours=3)
    t0 = int(start.timestamp() * 1000)
    job_log = ["rltrainer: staging inputs", "[12:00:01] rollout 1: {'rollout/raw_reward': 0.1}",
               "[12:10:01] rollout 2: {'rollout/raw_reward': 0.2}"]
    first = ["Job submission server address: http://head:8265", "Job 'run-abc' submitted",
             *job_log]
    # the second pod: the CLI's own line, the whole job log again, then what is new
    second = ["Job submission server address: http://head:8265", *job_log,
              "[12:20:02] rollout 3: {'rollout/raw_reward': 0.3}",
              "[12:30:02] rollout 4: {'rollout/raw_reward': 0.4}"]
    events = [{"eventId": f"a{i}", "timestamp": t0 + i, "message": record(line, pod="run-x7k2p")}
              for i, line in enumerate(first)]
    events += [{"eventId": f"b{i}", "timestamp": t0 + 60_000 + i,
                "message": record(line, pod="run-q9w4z")} for i, line in enumerate(second)]
    base = {"logGroupName": q.group, "startTime": t0, "filterPattern": q.filter_pattern}
    stub.add_response("filter_log_events", {"events": events[:4], "nextToken": "p2"}, base)
    stub.add_response("filter_log_events", {"events": events[4:]}, {**base, "nextToken": "p2"})
    out, notes = io.StringIO(), io.StringIO()
    with stub:
        n = observability.read_logs(logs, q, start=start, out=out, notes=notes)
    assert out.getvalue().splitlines() == [*first, "[12:20:02] rollout 3: {'rollout/raw_reward': 0.3}",
                                           "[12:30:02] rollout 4: {'rollout/raw_reward': 0.4}"]
    assert n == 7
    assert notes.getvalue() == ("note: submitter pod run-q9w4z began; it prints the job's log again "
                                "from its start, and the lines already printed are left out\n")


def test_a_new_attempts_submitter_is_not_taken_for_a_replay():
    """A KubeRay retry runs a new Ray job: its submitter's lines differ from the old attempt's
    (timestamps, process IDs) and are printed, after a few identical ones at most."""
    replays = observability.SubmitterReplays()
    old = ["rltrainer: staging inputs", "[12:00] rollout 1", "[12:10] rollout 2", "[12:20] crash"]
    assert all(replays.fresh("run-a", line) for line in old)
    new = ["rltrainer: staging inputs", "[13:00] resuming", "[13:01] a", "[13:02] b", "[13:03] c",
           "[13:04] d", "[13:05] rollout 2 again", "[12:20] crash"]
    printed = [line for line in new if replays.fresh("run-b", line)]
    # the identical first line is taken for a replay; five different ones in a row end that
    assert printed == new[1:]
    # a late line of the first pod is printed, and does not restart the comparison
    assert replays.fresh("run-a", "[12:21] late") and not replays.new_pod("run-a")
