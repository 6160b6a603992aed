"""A configuration error stops KubeRay's retries of the run's RayJob (spec.backoffLimit -> 0)."""

from __future__ import annotations

import io
import json

import pytest
from kube_helpers import QuietHandler, stand_in_api

from rltrainer import launch, no_retry


@pytest.fixture
def api(tmp_path):
    """A local stand-in for the Kubernetes API server that records PATCH requests."""
    seen = []

    class Handler(QuietHandler):
        def do_PATCH(self):  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append({"path": self.path, "body": json.loads(body),
                         "auth": self.headers["Authorization"],
                         "type": self.headers["Content-Type"]})
            self.send_response(200 if "forbidden" not in self.path else 403)
            self.end_headers()
            self.wfile.write(b"{}")


    with stand_in_api(tmp_path, Handler) as (url, sa):
        yield url, sa, seen


def test_sets_the_rayjobs_backoff_limit_to_zero(api):
    url, sa, seen = api
    log = io.StringIO()
    assert no_retry.stop_retries(log, rayjob="grpo", api_url=url, service_account_dir=sa)
    assert seen == [{"path": "/apis/ray.io/v1/namespaces/rl-training/rayjobs/grpo",
                     "body": {"spec": {"backoffLimit": 0}}, "auth": "Bearer tok",
                     "type": "application/merge-patch+json"}]
    assert "RayJob grpo will not be retried" in log.getvalue()


def test_a_refused_patch_is_reported_not_raised(api):
    url, sa, _ = api
    log = io.StringIO()
    assert not no_retry.stop_retries(log, rayjob="forbidden", api_url=url, service_account_dir=sa)
    assert "could not stop KubeRay's retries of RayJob forbidden" in log.getvalue()


def test_outside_a_kit_rayjob_nothing_happens(monkeypatch):
    monkeypatch.delenv(no_retry.RAYJOB_ENV, raising=False)
    log = io.StringIO()
    assert not no_retry.stop_retries(log)
    assert log.getvalue() == ""


def test_launch_stops_retries_on_a_config_error_only(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(no_retry, "stop_retries", lambda log: calls.append(log) or True)
    bad = tmp_path / "run.yaml"
    bad.write_text("run_name: [\n")
    err = io.StringIO()
    assert launch.main(["--config", str(bad)], out=io.StringIO(), err=err) == launch.EXIT_CONFIG
    assert calls == [err]


@pytest.mark.parametrize("code", [0, 1, 3, 4])
def test_other_failures_keep_kuberays_retries(monkeypatch, code):
    """Node loss, a failed staging or upload: the configured retries resume from S3."""
    calls = []
    monkeypatch.setattr(no_retry, "stop_retries", lambda log: calls.append(log) or True)
    monkeypatch.setattr(launch, "_launch", lambda *a, **k: code)
    assert launch.main(["--config", "x"], out=io.StringIO(), err=io.StringIO()) == code
    assert calls == []
