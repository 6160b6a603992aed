"""A Ray head whose container restarts loses its Ray job; KubeRay's submitter submits it again inside
the same attempt, uncounted by training.backoff_limit. Before, each resubmission staged, restored
and loaded the model on every GPU, up to SUBMITTER_BACKOFF_LIMIT (10) times. Now the launcher
counts its starts per attempt (the RayJob's uid and status.startTime) on the checkpoint directory
and refuses the third one with exit 4 before anything is loaded; a new attempt starts afresh."""

from __future__ import annotations

import io
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from kube_helpers import QuietHandler, stand_in_api
import yaml

from rltrainer import attempts, no_retry
from rltrainer.contract import EXIT_PREPARE, RAYJOB_ENV

FIXTURES = Path(__file__).parent / "fixtures"
NOW = datetime(2026, 12, 1, 12, 30, tzinfo=timezone.utc)


@pytest.fixture
def api(tmp_path):
    """A stand-in Kubernetes API server: GET of the RayJob answers ``state`` (uid, startTime)."""
    state = {"uid": "0f3c-uid", "startTime": "2026-12-01T12:00:00Z"}

    class Handler(QuietHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            if "forbidden" in self.path:
                self.send_response(403)
                self.end_headers()
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps({"metadata": {"name": "grpo", "uid": state["uid"]},
                                         "status": {"startTime": state["startTime"]}}).encode())


    with stand_in_api(tmp_path, Handler) as (url, sa):
        yield state, (lambda rayjob: no_retry.rayjob_request(rayjob, api_url=url,
                                                             service_account_dir=sa))


def start(ckpt: Path, request, name: str = "grpo") -> tuple[attempts.StartCheck, str]:
    log = io.StringIO()
    return attempts.count_start(str(ckpt), log, env={RAYJOB_ENV: name}, request=request, now=lambda: NOW), log.getvalue()


def test_the_third_start_in_one_attempt_is_refused_and_a_new_attempt_starts(tmp_path, api):
    state, request = api
    ckpt = tmp_path / "ckpt"
    first, log = start(ckpt, request)
    assert first.refusal is None and log == "" and first.rayjob["status"]["startTime"] == state["startTime"]
    second, log = start(ckpt, request)  # the head restarted once: allowed, and said
    assert second.refusal is None
    assert log.startswith("rltrainer: start 2 of RayJob grpo's attempt that began 2026-12-01T12:00:00Z")
    third, _ = start(ckpt, request)
    assert third.refusal is not None
    assert third.refusal.startswith(
        "start 3 of RayJob grpo's attempt that began 2026-12-01T12:00:00Z (starts at 2026-12-01T12:30:00Z, "
        f"2026-12-01T12:30:00Z, 2026-12-01T12:30:00Z; record {ckpt / '_attempt_starts.json'}): more than "
        "MAX_STARTS_PER_ATTEMPT = 2 starts in one attempt")
    assert "Fix: find why the head restarts" in third.refusal
    state["startTime"] = "2026-12-01T13:05:00Z"  # KubeRay's retry: a new attempt
    retry, _ = start(ckpt, request)
    assert retry.refusal is None
    record = json.loads((ckpt / "_attempt_starts.json").read_text())
    assert record == {"rayjob": "grpo", "uid": "0f3c-uid", "attempt_start": "2026-12-01T13:05:00Z",
                      "starts": ["2026-12-01T12:30:00Z"]}
    state["uid"] = "another-rayjob"  # the run launched again (--replace): same start time or not, new count
    start(ckpt, request)
    again, _ = start(ckpt, request)
    assert again.refusal is None


def test_an_unreadable_rayjob_or_no_rayjob_counts_nothing(tmp_path, api):
    _, request = api
    check, log = start(tmp_path, request, name="forbidden")
    assert check == attempts.StartCheck(None, None)
    assert log.startswith("rltrainer: could not read RayJob forbidden (metadata.uid, status.startTime: HTTPError")
    assert not (tmp_path / "_attempt_starts.json").exists()
    assert attempts.count_start(str(tmp_path), io.StringIO(), env={}) == attempts.StartCheck(None, None)


def test_a_corrupt_record_counts_afresh(tmp_path, api):
    _, request = api
    (tmp_path / "_attempt_starts.json").write_text("{not json")
    check, log = start(tmp_path, request)
    assert check.refusal is None and "is unreadable" in log


def test_the_launcher_refuses_the_third_start_before_staging_or_loading(tmp_path, monkeypatch, api):
    state, request = api
    data = yaml.safe_load((FIXTURES / "qwen3-30b-a3b.yaml").read_text())
    ckpt = tmp_path / "ckpt"
    data["checkpoint"]["local_dir"] = str(ckpt)
    data["checkpoint"]["s3_uri"] = "s3://no-such-bucket/run/"  # touched would fail differently
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    mounts = tmp_path / "mounts"
    mounts.write_text(f"10.0.0.5@tcp:/abcdefgh {tmp_path} lustre rw,flock 0 0\n")
    ckpt.mkdir()
    (ckpt / "_attempt_starts.json").write_text(json.dumps({
        "rayjob": "grpo", "uid": state["uid"], "attempt_start": state["startTime"],
        "starts": ["2026-12-01T12:10:00Z", "2026-12-01T12:20:00Z"]}))
    monkeypatch.setenv(RAYJOB_ENV, "grpo")
    monkeypatch.setattr(attempts, "rayjob_request", request)
    stopped = []
    monkeypatch.setattr(no_retry, "stop_retries", lambda *a, **k: stopped.append(a))

    def no_staging(*_a, **_k):
        raise AssertionError("a refused start stages nothing")

    from rltrainer import launch

    monkeypatch.setattr(launch, "stage_inputs", no_staging)
    err = io.StringIO()
    code = launch.main(["--config", str(cfg), "--python", sys.executable], out=io.StringIO(), err=err,
                       mounts_file=str(mounts))
    assert code == EXIT_PREPARE, err.getvalue()
    assert stopped == []  # KubeRay's retries stay on: the next attempt is a new Ray cluster
    assert "rltrainer launch: start 3 of RayJob grpo's attempt that began 2026-12-01T12:00:00Z" in err.getvalue()
