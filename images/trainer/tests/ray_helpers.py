"""A stand-in ``ray`` command for the launcher's ``--ray-address`` mode, with what matters of Ray's
job CLI (ray-project/ray python/ray/dashboard/modules/job/cli.py, ``submit`` and ``stop``):

- ``ray job submit [--address=A] [--submission-id=ID] [--runtime-env-json=J] -- CMD...`` starts the
  job on "the cluster": a process in a session of its own, writing to a log file, so signalling the
  submitter's process group does not reach it, as it does not reach a job Ray runs on another node.
  The submitter only follows the log until the job exits, then exits 1 if it failed, else 0 (a
  stopped job too: Ray's ``submit`` exits 1 only for FAILED). Without ``--submission-id`` it makes
  one up, as Ray does.
- ``ray job stop [--address=A] ID`` sends the job SIGTERM, SIGKILL if it is still there 3 s later,
  and returns once it has exited (Ray's ``stop`` waits for a terminal state unless ``--no-wait``);
  an unknown ID exits 1.

Every call is logged (one JSON argv per line) to ``<state>/calls``; each job's pid is in
``<state>/jobs/<ID>``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

FAKE_RAY = r'''
import json, os, pathlib, signal, subprocess, sys, time, uuid
state = pathlib.Path(os.environ["FAKE_RAY_STATE"])
args = sys.argv[1:]
with open(state / "calls", "a") as f:
    f.write(json.dumps(args) + "\n")
jobs = state / "jobs"
jobs.mkdir(exist_ok=True)

def gone(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] in "ZX"
    except (OSError, IndexError):
        return True

if args[:2] == ["job", "submit"]:
    sep = args.index("--")
    opts = dict(a[2:].split("=", 1) for a in args[2:sep])
    sid = opts.get("submission-id") or f"raysubmit_{uuid.uuid4().hex[:16]}"
    env = dict(os.environ, **json.loads(opts.get("runtime-env-json", "{}")).get("env_vars", {}))
    log = state / f"{sid}.log"
    with open(log, "wb") as out:
        job = subprocess.Popen(args[sep + 1:], env=env, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
    (jobs / sid).write_text(str(job.pid))
    with open(log, "rb") as follow:  # follow the job's log until it exits, as Ray's submit does
        while True:
            done = job.poll() is not None
            sys.stdout.buffer.write(follow.read())
            sys.stdout.flush()
            if done:
                break
            time.sleep(0.05)
    sys.exit(1 if job.returncode > 0 else 0)
if args[:2] == ["job", "stop"]:
    sid = args[-1]
    if not (jobs / sid).is_file():
        print(f"Job {sid} does not exist", file=sys.stderr)
        sys.exit(1)
    pid = int((jobs / sid).read_text())
    if not gone(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 3
        while not gone(pid):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
    sys.exit(0)
sys.exit(f"fake ray: unexpected arguments {args}")
'''


def install_fake_ray(tmp_path: Path, monkeypatch) -> Path:
    """Put the stand-in ``ray`` first on PATH; returns its state directory."""
    bin_dir = tmp_path / "fake-ray-bin"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    ray.write_text(f"#!{sys.executable}\n{FAKE_RAY}")
    ray.chmod(0o755)
    state = tmp_path / "fake-ray-state"
    state.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_RAY_STATE", str(state))
    return state


def ray_calls(state: Path) -> list[list[str]]:
    path = state / "calls"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def running_jobs(state: Path) -> dict[str, int]:
    """The jobs the stand-in started that are still running: submission ID -> pid."""
    running = {}
    for job in sorted((state / "jobs").glob("*")) if (state / "jobs").is_dir() else []:
        pid = int(job.read_text())
        try:
            alive = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] not in "ZX"
        except (OSError, IndexError):
            alive = False
        if alive:
            running[job.name] = pid
    return running


def kill_jobs(state: Path) -> None:
    """Test cleanup: SIGKILL every job still running (a launcher that left one behind)."""
    for pid in running_jobs(state).values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
