"""Keep KubeRay from retrying a run that failed on its configuration.

KubeRay v1.7.0 retries a failed RayJob on a new Ray cluster while ``status.failed <
spec.backoffLimit + 1``, whatever the exit code, and it reads ``spec.backoffLimit`` when an
attempt fails (ray-project/kuberay@59d663aeec13, tag v1.7.0, ray-operator/controllers/ray/
rayjob_controller.go:518-557, ``checkBackoffLimitAndUpdateStatusIfNeeded``). A configuration
error fails the same way on every attempt, so before the launcher exits 2 it sets its own RayJob's
``spec.backoffLimit`` to 0 through the Kubernetes API. Other failures keep the configured
retries, except those KubeRay itself never retries (a Ray head unreachable for 5 minutes, as when
its node is lost, or a deadline passed: ``JobStatusCheckTimeoutExceeded`` / ``DeadlineExceeded``,
same file :543-552; ``rlkit status`` names them). A run stopped before its Capacity Block ends
(``rltrainer.reservation``) uses the same switch: a retry would wait for, or land on, capacity
that is gone.

The kit's manifests name the RayJob in ``RLTRAINER_RAYJOB`` (the RayJob's runtime env) and let
the trainer ServiceAccount get and patch that one RayJob (``rl-job/02-rayjob-retry-role.yaml``).
Outside such a RayJob this does nothing. ``rltrainer.startup`` reads the same RayJob (its
``status.startTime``) through ``rayjob_request``. The launcher also stops the retries of a run that
trained to the end but could not upload its last save (``rltrainer.launch``): a retry would
start a whole GPU cluster only to upload.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import TextIO

from .contract import RAYJOB_ENV
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT_S = 10.0


# What rayjob_request raises: no service account, no API server, a refusal, a timeout.
REQUEST_ERRORS = (OSError, KeyError, ValueError, urllib.error.URLError, ssl.SSLError)


def rayjob_request(rayjob: str, *, patch: dict | None = None, api_url: str | None = None,
                   service_account_dir: Path = SERVICE_ACCOUNT_DIR,
                   timeout_s: float = TIMEOUT_S) -> dict:
    """GET this run's RayJob, or merge-``patch`` it, with the pod's service account (the role
    allows both on this one RayJob); the API's answer. Raises ``REQUEST_ERRORS``."""
    token = (service_account_dir / "token").read_text().strip()
    namespace = (service_account_dir / "namespace").read_text().strip()
    context = None
    if api_url is None:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        api_url = f"https://{host}:{port}"
        context = ssl.create_default_context(cafile=str(service_account_dir / "ca.crt"))
    headers = {"Authorization": f"Bearer {token}"}
    if patch is not None:
        headers["Content-Type"] = "application/merge-patch+json"
    request = urllib.request.Request(
        f"{api_url}/apis/ray.io/v1/namespaces/{namespace}/rayjobs/{rayjob}",
        data=None if patch is None else json.dumps(patch).encode(),
        method="GET" if patch is None else "PATCH", headers=headers)
    with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
        return json.loads(response.read() or b"{}")


def stop_retries(log: TextIO, *, rayjob: str | None = None, api_url: str | None = None,
                 service_account_dir: Path = SERVICE_ACCOUNT_DIR,
                 timeout_s: float = TIMEOUT_S,
                 reason: str = "configuration error",
                 next_step: str = "fix the config and launch again") -> bool:
    """Set ``spec.backoffLimit`` of this run's RayJob to 0; True when the API accepted it.

    Never raises: a failure here must not hide the error being reported. ``reason`` and
    ``next_step`` word the log line (a configuration error by default).
    """
    rayjob = rayjob if rayjob is not None else os.environ.get(RAYJOB_ENV)
    if not rayjob:
        return False  # not launched by the kit's RayJob: nothing to stop
    try:
        rayjob_request(rayjob, patch={"spec": {"backoffLimit": 0}}, api_url=api_url,
                       service_account_dir=service_account_dir, timeout_s=timeout_s)
    except REQUEST_ERRORS as exc:
        print(f"rltrainer: could not stop KubeRay's retries of RayJob {rayjob} ({exc}); it may run "
              f"this run again up to its backoffLimit ({reason})", file=log, flush=True)
        return False
    print(f"rltrainer: {reason}: RayJob {rayjob} will not be retried (backoffLimit "
          f"set to 0); {next_step}", file=log, flush=True)
    return True
