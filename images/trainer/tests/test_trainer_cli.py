"""The ``rltrainer`` console script routes to each command's own parser."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rltrainer import __version__
from rltrainer.cli import main


def run_module(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rltrainer", *argv], capture_output=True, text=True, timeout=60)


def test_help_lists_every_command_and_its_contract():
    proc = run_module("--help")
    assert proc.returncode == 0
    for line in ("rltrainer launch --config /etc/rltrainer/run.yaml [--dry-run] [--check-args]",
                 "rltrainer bench allreduce", "rltrainer bench ep", "rltrainer nodecheck --expect-gpus 8 --expect-efa 32",
                 "rltrainer checkpoint {list,upload,restore}"):
        assert line in proc.stdout


def test_version_and_unknown_command(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"rltrainer {__version__}\n"
    assert main(["train"]) == 2
    assert capsys.readouterr().err.startswith("rltrainer: unknown command 'train'")
    assert main([]) == 2


@pytest.mark.parametrize("argv, needle", [
    (["launch", "--help"], "--dry-run"),
    (["bench", "allreduce", "--help"], "--min-bytes"),
    (["bench", "ep", "--help"], "--tokens-per-rank"),
    (["nodecheck", "--help"], "--expect-efa"),
    (["checkpoint", "upload", "--help"], "--iteration"),
])
def test_each_command_has_its_own_help(argv, needle):
    proc = run_module(*argv)
    assert proc.returncode == 0, proc.stderr
    assert needle in proc.stdout


def test_checkpoint_commands_against_moto(tmp_path: Path, monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    from moto import mock_aws

    from rltrainer.checkpoint_cli import main as checkpoint_main
    from rltrainer.checkpoints import write_tracker

    with mock_aws():
        import boto3

        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="run-bucket")
        src = tmp_path / "src"
        (src / "iter_0000003").mkdir(parents=True)
        (src / "iter_0000003" / "common.pt").write_bytes(b"abc")
        write_tracker(src, 3)
        err = io.StringIO()
        # without Miles' data cursor the save is not whole: refused with exit 2
        assert checkpoint_main(["upload", "--s3-uri", "s3://run-bucket/run/", "--local-dir", str(src), "--iteration", "3"],
                               out=io.StringIO(), err=err, client=s3) == 2
        assert "global_dataset_state_dict_3.pt does not exist yet" in err.getvalue()
        import torch

        (src / "rollout").mkdir()
        torch.save({"sample_offset": 3}, src / "rollout" / "global_dataset_state_dict_3.pt")
        cursor_size = (src / "rollout" / "global_dataset_state_dict_3.pt").stat().st_size
        err = io.StringIO()
        assert checkpoint_main(["upload", "--s3-uri", "s3://run-bucket/run/", "--local-dir", str(src), "--iteration", "3"],
                               out=io.StringIO(), err=err, client=s3) == 0
        assert "iter_0000003 complete in s3://run-bucket/run/ (2 files)" in err.getvalue()

        out = io.StringIO()
        assert checkpoint_main(["list", "--s3-uri", "s3://run-bucket/run/"], out=out, err=io.StringIO(), client=s3) == 0
        (row,) = [json.loads(line) for line in out.getvalue().splitlines()]
        assert (row["iteration"], row["files"], row["total_bytes"]) == (3, 2, 3 + cursor_size)

        out = io.StringIO()
        dst = tmp_path / "dst"
        assert checkpoint_main(["restore", "--s3-uri", "s3://run-bucket/run/", "--local-dir", str(dst)], out=out,
                               err=io.StringIO(), client=s3) == 0
        assert json.loads(out.getvalue()) == {"iteration": 3, "source": "s3"}
        assert (dst / "iter_0000003" / "common.pt").read_bytes() == b"abc"
