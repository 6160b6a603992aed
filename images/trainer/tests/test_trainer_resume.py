"""Resume is exact: the right rollout, the right data cursor, byte-identical checkpoints.

Against Miles v0.1.0's own sources (../shared/upstream/miles-v0.1.0) and, for the end-to-end
test, two real launcher processes on one directory with S3 served by a moto server.
"""

from __future__ import annotations

import ast
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ckpt_helpers import BUCKET, aws_test_env, files_of
from miles_resume_helpers import build_checkout, function, upstream_source
from rltrainer.checkpoints import RetryPolicy, S3CheckpointStore, prepare_resume, rollout_state_relpath

pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")
TESTS = Path(__file__).resolve().parent
QWEN = TESTS / "fixtures" / "qwen3-30b-a3b.yaml"


# ----------------------------------------------------------------- contract with Miles v0.1.0


@pytest.mark.external
def test_miles_data_cursor_path_and_save_order_match_the_store():
    """The store's cursor path is Miles' own, and Miles writes it after the model save (so the store waits for it)."""
    data_source = upstream_source("miles/rollout/data_source.py")
    tree = ast.parse(data_source)
    paths = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)
             and "global_dataset_state_dict_" in ast.unparse(n)]
    assert paths == ["f'rollout/global_dataset_state_dict_{rollout_id}.pt'"] * 2  # save() and load()
    assert rollout_state_relpath(20) == "rollout/global_dataset_state_dict_20.pt"

    train = upstream_source("train.py")
    save = function(ast.parse(train), "save")
    lines = {ast.unparse(n.func): n.lineno for n in ast.walk(save) if isinstance(n, ast.Call)
             and ast.unparse(n.func) in ("save_training_model", "rollout_manager.save.remote")}
    assert lines["save_training_model"] < lines["rollout_manager.save.remote"], lines

    placement = upstream_source("miles/ray/placement_group.py")
    body = ast.unparse(function(ast.parse(placement), "create_training_models"))
    # the start comes from the loaded checkpoint only when None; the cursor loaded is that of start - 1
    assert "if args.start_rollout_id is None:\n        args.start_rollout_id = start_rollout_ids[0]" in body
    assert "rollout_manager.load.remote(args.start_rollout_id - 1)" in body


@pytest.mark.external
def test_miles_bridge_mode_resets_the_start_and_the_launcher_can_restore_it():
    """Why the launcher needs rltrainer.miles_resume with v0.1.0, read from the source it runs."""
    src = upstream_source("miles/utils/arguments.py")
    tree = ast.parse(src)
    validate = function(tree, "miles_validate_args")
    bridge = next(n for n in ast.walk(validate) if isinstance(n, ast.If)
                  and ast.unparse(n.test) == "args.megatron_to_hf_mode == 'bridge'")
    # v0.1.0: the reset sits directly in the bridge branch, not under "no checkpoint to load" (49cac7b52 moved it)
    assert "args.start_rollout_id = 0" in [ast.unparse(s) for s in bridge.body]
    # --start-rollout-id exists, and parse_args reaches validation by the module-level name we wrap
    flag = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args
                and isinstance(n.args[0], ast.Constant) and n.args[0].value == "--start-rollout-id")
    assert {k.arg: ast.unparse(k.value) for k in flag.keywords if k.arg in ("type", "default")} == \
        {"type": "int", "default": "None"}
    parse = function(tree, "parse_args")
    assert any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "miles_validate_args"
               for n in ast.walk(parse))
    # train.py imports parse_args from that module and calls it under __main__ (what runpy runs)
    train = ast.parse(upstream_source("train.py"))
    assert any(isinstance(n, ast.ImportFrom) and n.module == "miles.utils.arguments"
               and [a.name for a in n.names] == ["parse_args"] for n in train.body)
    main = next(n for n in train.body if isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ == '__main__'")
    assert "args = parse_args()" in ast.unparse(main)
    assert "for rollout_id in range(args.start_rollout_id, args.num_rollout):" in upstream_source("train.py")


def _run_train(checkout: Path, load: Path, *, start: int | None, via_wrapper: bool, tmp: Path) -> dict:
    log = tmp / "miles.log"
    log.unlink(missing_ok=True)
    argv = [str(checkout / "train.py"), "--megatron-to-hf-mode", "bridge", "--load", str(load), "--save", str(load),
            "--hf-checkpoint", "/models/x", "--save-interval", "1000", "--num-rollout", "0",
            "--rollout-batch-size", "4"]
    if start is not None:
        argv += ["--start-rollout-id", str(start)]
    cmd = [sys.executable, "-m", "rltrainer.miles_resume", *argv] if via_wrapper else [sys.executable, *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=checkout,
                          env={**os.environ, "FAKE_MILES_LOG": str(log), "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stderr
    return {**json.loads(log.read_text()), "stderr": proc.stderr}


@pytest.mark.external
def test_the_resume_wrapper_keeps_the_saved_start_that_miles_v010_resets(tmp_path: Path):
    checkout = build_checkout(tmp_path / "miles")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("20\n")

    plain = _run_train(checkout, ckpt, start=21, via_wrapper=False, tmp=tmp_path)
    assert plain["start"] == 0, ("Miles v0.1.0 itself drops --start-rollout-id in bridge mode (the bug); if this "
                                 "fails, the pinned Miles has upstream's fix 49cac7b52 and rltrainer.miles_resume "
                                 "can go")

    fixed = _run_train(checkout, ckpt, start=21, via_wrapper=True, tmp=tmp_path)
    assert (fixed["start"], fixed["load"]) == (21, str(ckpt))
    assert "resuming at rollout 21" in fixed["stderr"]

    # a fresh run (no tracker) keeps Miles' own behaviour: rollout 0 from the reference weights
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    first = _run_train(checkout, fresh, start=None, via_wrapper=True, tmp=tmp_path)
    assert (first["start"], first["load"]) == (0, "/models/x")


def test_the_launcher_passes_the_start_only_on_a_resume():
    from rltrainer.contract import load_run_config
    from rltrainer.miles import build_train_command

    cfg = load_run_config(str(QWEN))
    fresh = build_train_command(cfg, hf_checkpoint="/m", prompt_data="/d.jsonl", miles_dir="/root/miles")
    assert fresh.argv[:2] == ["python3", "/root/miles/train.py"] and "--start-rollout-id" not in fresh.argv
    resumed = build_train_command(cfg, hf_checkpoint="/m", prompt_data="/d.jsonl", miles_dir="/root/miles",
                                  start_rollout_id=21)
    assert resumed.argv[:4] == ["python3", "-m", "rltrainer.miles_resume", "/root/miles/train.py"]
    assert resumed.argv[-2:] == ["--start-rollout-id", "21"]
    assert resumed.argv[4:-2] == fresh.argv[2:]
    submitted = build_train_command(cfg, hf_checkpoint="/m", prompt_data="/d.jsonl", miles_dir="/root/miles",
                                    start_rollout_id=21, ray_address="http://127.0.0.1:8265")
    after = submitted.argv[submitted.argv.index("--") + 1:]
    assert after == resumed.argv


# ------------------------------------------------ two launchers, one directory, kill and resume


@pytest.fixture
def moto_server(monkeypatch):
    aws_test_env(monkeypatch)
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    import boto3

    client = boto3.client("s3", region_name="us-east-1", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    try:
        yield endpoint, client
    finally:
        server.stop()


def _wait_for(what: str, predicate, timeout_s: float = 90.0, procs=()):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"launcher exited ({p.returncode}) while waiting for {what}: {p.stderr_text()}")
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


class Launcher:
    """``python -m rltrainer launch`` in its own process, stderr to a file."""

    def __init__(self, argv: list[str], env: dict, log: Path):
        self.log = log
        self._fh = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "rltrainer", "launch", *argv], env=env,
                                     stdout=subprocess.DEVNULL, stderr=self._fh)

    def poll(self):
        return self.proc.poll()

    @property
    def returncode(self):
        return self.proc.returncode

    def stderr_text(self) -> str:
        if not self._fh.closed:
            self._fh.flush()
        return self.log.read_text()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._fh.close()


@pytest.mark.external
def test_two_launchers_on_one_directory_save_upload_die_and_resume_exactly(tmp_path: Path, moto_server):
    endpoint, s3 = moto_server
    checkout = build_checkout(tmp_path / "miles", saves=(1, 3, 5))
    shared = tmp_path / "shared"  # the one directory both launchers (pods) mount
    data = yaml.safe_load(QWEN.read_text())
    data["model"]["hf_checkpoint"] = "/models/tiny"
    data["data"]["prompt_data"] = "/data/prompts.jsonl"
    # keep_local 3: every save stays local, so the saves of A can be compared after B trained on
    # (retention has its own tests: test_trainer_retention.py, test_trainer_soak.py)
    data["checkpoint"] = {"s3_uri": f"s3://{BUCKET}/runs/r1/", "local_dir": str(shared), "save_interval": 2,
                          "keep_local": 3}
    data["grpo"]["num_rollout"] = 6
    data["parallel"] = {"nodes": 1, "gpus_per_node": 8, "training": {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "etp": 1},
                        "rollout": {"gpus_per_engine": 8, "ep": 8}}
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    miles_log = tmp_path / "miles.log"
    env = {**os.environ, "AWS_ENDPOINT_URL_S3": endpoint, "FAKE_MILES_LOG": str(miles_log),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("RLTRAINER_IMAGE_EP_BACKEND", None)
    argv = ["--config", str(cfg), "--miles-dir", str(checkout), "--python", sys.executable, "--upload-interval", "0.2"]
    store = S3CheckpointStore(f"s3://{BUCKET}/runs/r1/", client=s3, retry=RetryPolicy(sleep=lambda s: None),
                              progress_stream=io.StringIO())

    # Launcher A trains rollouts 0-5, saving after 1 and 3, and dies (node loss: launcher and
    # trainer SIGKILLed) half way through the save of rollout 5.
    a = Launcher(argv, {**env, "FAKE_MILES_HANG_AT": "5"}, tmp_path / "a.err")
    hung = Path(str(miles_log) + ".hung")
    try:
        _wait_for("A to save 1 and 3, upload them, and hang in save 5",
                  lambda: hung.exists() and store.list_complete() == [1, 3], procs=[a])
        trainer_pid = int(hung.read_text())
    finally:
        a.proc.kill()
        a.wait(30)
    os.kill(trainer_pid, signal.SIGKILL)
    a_run = json.loads(miles_log.read_text().splitlines()[0])
    assert (a_run["start"], a_run["offset"]) == (0, 0)
    saved = {i: files_of(shared, i) for i in (1, 3)}
    assert (shared / "iter_0000005" / "__9_0.distcp").is_file() and not (shared / "iter_0000005" / ".metadata").exists()
    s3_before = {k: v for k, v in _objects(s3).items()}

    # Launcher B, on the same directory, resumes at rollout 4 with the cursor of rollout 3.
    b = Launcher(argv, env, tmp_path / "b.err")
    assert b.wait(180) == 0, b.stderr_text()
    b_err = b.stderr_text()
    b_run = json.loads(miles_log.read_text().splitlines()[1])
    assert b_run["argv"][-2:] == ["--start-rollout-id", "4"]
    assert (b_run["start"], b_run["loaded"], b_run["load"]) == (4, 3, str(shared)), b_err
    assert b_run["offset"] == 4 * data["grpo"]["rollout_batch_size"], "the data cursor of rollout 3 was loaded"
    assert "resuming at rollout 4" in b_err
    assert "iter_0000005" in b_err and "_quarantine" in b_err  # the torn save was set aside, not uploaded

    # Nothing complete changed; the new save 5 is whole and is the one in S3.
    assert store.list_complete() == [1, 3, 5]
    after = _objects(s3)
    assert {k: after[k] for k in s3_before} == s3_before
    for i in (1, 3):
        assert files_of(shared, i) == saved[i]
    new5 = files_of(shared, 5)
    assert "iter_0000005/__9_0.distcp" not in new5
    assert {k: v for k, v in after.items() if ("iter_0000005/" in k or k.endswith("_5.pt"))
            and not k.endswith("_COMPLETE.json")} == new5

    # A pod on a fresh volume restores the newest checkpoint byte for byte.
    fresh = tmp_path / "fresh"
    result = prepare_resume(store, fresh, log=io.StringIO())
    assert (result.iteration, result.start_rollout_id) == (5, 6)
    assert files_of(fresh, 5) == new5


def _objects(client) -> dict[str, bytes]:
    out = {}
    for obj in client.list_objects_v2(Bucket=BUCKET, Prefix="runs/r1/").get("Contents", []):
        out[obj["Key"][len("runs/r1/"):]] = client.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
    return out
