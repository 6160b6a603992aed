"""`rlkit` as a user runs it, in a subprocess: stdout closed early (`| head`), and the plan table
on a narrow pseudo-terminal and in a pipe. Few and cheap on purpose: one interpreter per command."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from tests.support import REPO_ROOT

PLAN = ["plan", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes", "2"]
BOX = set("┏┃━┡│└─┘┌┐╇")


def env(tmp_path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "images/trainer/src")])
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": path,
            "XDG_STATE_HOME": str(tmp_path / "state"), "RLKIT_ARTIFACTS": str(tmp_path / "none"),
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CI": "", **extra}


def closed_early(argv: list[str], tmp_path) -> tuple[int, str]:
    """Run rlkit with its stdout a pipe whose reader is gone before it writes (what `| head`
    becomes once head has its lines); returns the exit status and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "ops.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env(tmp_path), cwd=tmp_path)
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err.decode()


def test_a_closed_stdout_is_quiet_exits_141_and_files_are_still_written(tmp_path):
    code, err = closed_early(PLAN, tmp_path)
    assert (code, err) == (141, "")
    out = tmp_path / "out"
    code, err = closed_early(["render", "--out", str(out)], tmp_path)
    assert code == 141
    assert "bug" not in err and "could not write" not in err
    # every file written, validated first (the text went nowhere, the work was done)
    assert (out / "rl-job").is_dir() and (out / "00-namespace.yaml").is_file()
    assert len(list(out.rglob("*.yaml"))) >= 10


def test_the_plan_table_fits_a_narrow_terminal_and_is_plain_in_a_pipe(tmp_path):
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ops.cli", *PLAN], stdout=follower,
                            stderr=follower, env=env(tmp_path, COLUMNS="80", LINES="40",
                                                     TERM="xterm"), cwd=tmp_path)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=120) == 0
    os.close(leader)
    import re

    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode())
    lines = text.replace("\r\n", "\n").splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert BOX & set(text)  # a terminal gets the boxed table...
    assert "(not shown at 80 columns: recompute" in text  # ...without its least important columns

    piped = subprocess.run([sys.executable, "-m", "ops.cli", *PLAN], capture_output=True,
                           text=True, env=env(tmp_path, COLUMNS="80"), cwd=tmp_path, timeout=120)
    assert piped.returncode == 0
    assert not BOX & set(piped.stdout)  # plain columns in a pipe, every column
    header = next(line for line in piped.stdout.splitlines() if line.startswith("#"))
    assert header.split()[:4] == ["#", "nodes", "layout", "recompute"]
    assert "$/M tok" in header
