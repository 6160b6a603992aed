"""Miles v0.1.0's own argument parser for the tests: one offline parser process per test worker
(tests/support/miles_offline.py --serve), shared by every module that parses commands with it."""

from __future__ import annotations

import atexit
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support import REPO_ROOT

OFFLINE = REPO_ROOT / "tests" / "support" / "miles_offline.py"
_servers: dict[str, subprocess.Popen] = {}


def _server(upstream: Path) -> subprocess.Popen:
    proc = _servers.get(str(upstream))
    if proc is None or proc.poll() is not None:
        errors = tempfile.TemporaryFile("w+")  # a file, not a pipe: a full pipe would block it
        proc = subprocess.Popen([sys.executable, str(OFFLINE), str(upstream), "--serve"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                                text=True, cwd=REPO_ROOT)
        proc.errors = errors
        _servers[str(upstream)] = proc
    return proc


def parse_offline(cases: list[dict], upstream: Path) -> dict:
    """Miles' parser on ``cases`` (see tests/support/miles_offline.py): its JSON report."""
    proc = _server(upstream)
    proc.stdin.write(json.dumps(cases) + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:  # the process died: its stderr says why
        _servers.pop(str(upstream), None)
        proc.wait(30)
        proc.errors.seek(0)
        raise AssertionError(f"the offline Miles parser exited {proc.returncode}: "
                             f"{proc.errors.read()[-4000:]}")
    return json.loads(line)


@atexit.register
def _stop() -> None:
    for proc in _servers.values():
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
