"""Miles v0.1.0's own argument parser for the tests: one offline parser process per test worker
(tests/support/miles_offline.py --serve), shared by every module that parses commands with it;
the pinned sources it reads, and the launcher's command for an example."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from infra.config import load_config
from manifests.context import build_context
from manifests.outputs import placeholder_outputs
from rltrainer.contract import parse_run_config
from rltrainer.miles import MILES_VERSION, build_train_command, model_script_name, resolve_model_args
from tests.support import REPO_ROOT, artifacts

# ../shared/upstream, else the artifact cache (tests/support/artifacts.py): the tools here take one
# folder holding the pinned trees side by side.
UPSTREAM = artifacts.common_root((f"miles-{MILES_VERSION}", "megatron-lm-37f9161", "sglang-0.5.16",
                                  "deepep-567632d"), "upstream")
MILES_DIR = UPSTREAM / f"miles-{MILES_VERSION}"
MEGATRON_DIR = UPSTREAM / "megatron-lm-37f9161"
SGLANG_FILE = UPSTREAM / "sglang-0.5.16" / "server_args.py"
# The one Miles flag the launcher sets on purpose over model_args(): DeepEP needs the flex dispatcher.
BACKEND_OWNED_DESTS = ["moe_token_dispatcher_type"]


REQUIRED = (MILES_DIR / "miles" / "utils" / "arguments.py", MEGATRON_DIR / "megatron" / "training" / "arguments.py",
            SGLANG_FILE)


def require_sources(paths=REQUIRED) -> None:
    """Fail in CI (CI=true), skip elsewhere, saying which pinned sources are missing."""
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        message = (f"the pinned upstream sources are missing: {', '.join(missing)}; put Miles {MILES_VERSION}, "
                   "Megatron-LM 37f9161 and SGLang 0.5.16 there (see ../shared/upstream/README.md), "
                   f"or {artifacts.FETCH_HINT}")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


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


def parse_offline(cases: list[dict], upstream: Path = UPSTREAM) -> dict:
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




def example_case(example: str) -> dict:
    """The launcher's train.py arguments for one example, as the kit renders and the image runs it."""
    kit = load_config(REPO_ROOT / "examples" / f"{example}.yaml")
    ctx = build_context(kit, placeholder_outputs(kit))
    cfg = parse_run_config(ctx.run_config, f"{example} run config")
    model_args, _source = resolve_model_args(cfg, str(MILES_DIR), sys.executable)
    # Everything after train.py in the command the launcher really runs.
    cmd = build_train_command(cfg, hf_checkpoint="/fsx/models/hf", prompt_data="/fsx/datasets/p.jsonl",
                              miles_dir=str(MILES_DIR), python=sys.executable, model_args=model_args)
    args = cmd.argv[cmd.argv.index(f"{MILES_DIR}/train.py") + 1:]
    script = None if cfg.model.megatron_args else model_script_name(cfg.model.name, str(MILES_DIR))
    return {"name": example, "train_args": args, "model_script": script, "owned_dests": BACKEND_OWNED_DESTS}


@atexit.register
def _stop() -> None:
    # Killed, not closed and waited for: each report is complete when it is read, and a graceful
    # exit spends about a second in torch's teardown at the end of every test worker.
    for proc in _servers.values():
        proc.kill()
        proc.wait(10)
