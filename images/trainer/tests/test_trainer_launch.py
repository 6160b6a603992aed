"""``rltrainer launch``: the Miles command line, the dry run, and a whole run against moto.

Argument names are checked here against a hand-kept list from Miles' sources; the real
proof is tests/manifests/test_miles_contract.py, which parses every example's command with the
parsers built from the pinned Miles v0.1.0, Megatron-LM and SGLang sources. Sources of
the list (radixark/miles):
scripts/run-qwen3-30B-A3B.sh (the Qwen3-30B-A3B GRPO recipe), miles/utils/arguments.py
(``--num-steps-per-rollout``, ``--num-gpus-per-node``, ``--megatron-to-hf-mode``),
docs/en/get_started/usage.md (``--sglang-`` pass-through: ``--sglang-ep-size``,
``--sglang-moe-a2a-backend deepep``), and Megatron-LM for the MoE dispatcher flags
(``--moe-token-dispatcher-type``, ``--moe-flex-dispatcher-backend``).
"""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer_helpers import FIXTURES
from rltrainer.contract import load_run_config, parse_run_config
from rltrainer.launch import main as launch_main
from rltrainer.miles import build_train_command, miles_train_args

QWEN = FIXTURES / "qwen3-30b-a3b.yaml"

# Flag names as they appear in Miles' Qwen3-30B-A3B recipe (scripts/run-qwen3-30B-A3B.sh).
MILES_RECIPE_FLAGS = {
    "--actor-num-nodes", "--actor-num-gpus-per-node", "--colocate",
    "--hf-checkpoint", "--ref-load", "--load", "--save", "--save-interval",
    "--prompt-data", "--input-key", "--label-key", "--apply-chat-template", "--rollout-shuffle", "--rm-type",
    "--num-rollout", "--rollout-batch-size", "--n-samples-per-prompt", "--rollout-max-response-len",
    "--rollout-temperature", "--global-batch-size", "--balance-data",
    "--tensor-model-parallel-size", "--sequence-parallel", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
    "--use-dynamic-batch-size", "--max-tokens-per-gpu",
    "--advantage-estimator", "--use-kl-loss", "--kl-loss-coef", "--kl-loss-type", "--entropy-coef", "--eps-clip",
    "--optimizer", "--lr", "--lr-decay-style", "--weight-decay", "--adam-beta1", "--adam-beta2",
    "--rollout-num-gpus-per-engine", "--sglang-mem-fraction-static",
    "--attention-dropout", "--hidden-dropout", "--accumulate-allreduce-grads-in-fp32", "--attention-softmax-in-fp32",
    "--attention-backend",
}
# Defined in miles/utils/arguments.py (not used by that recipe).
MILES_ARGUMENTS = {"--num-steps-per-rollout", "--num-gpus-per-node", "--megatron-to-hf-mode",
                   "--save-trigger-sentinel"}
# SGLang options passed through with the --sglang- prefix (Miles usage docs).
SGLANG_PASSTHROUGH = {"--sglang-ep-size", "--sglang-moe-a2a-backend"}
# Megatron-LM MoE dispatcher options.
MEGATRON_MOE = {"--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend"}
KNOWN = MILES_RECIPE_FLAGS | MILES_ARGUMENTS | SGLANG_PASSTHROUGH | MEGATRON_MOE


def last_value(argv: list[str], flag: str) -> str:
    """What argparse ends up with: the value after the last occurrence of ``flag``."""
    i = len(argv) - 1 - argv[::-1].index(flag)
    return argv[i + 1]


def launcher_flags(argv: list[str], model_args: tuple[str, ...]) -> list[str]:
    own = list(argv)
    start = own.index(model_args[0]) if model_args else None
    if start is not None:
        del own[start:start + len(model_args)]
    return [a for a in own if a.startswith("--")]


def config_with(backend: str) -> object:
    data = yaml.safe_load(QWEN.read_text())
    data["expert_parallel"]["backend"] = backend
    return parse_run_config(data)


@pytest.mark.parametrize("backend", ["nccl", "deepep-nvshmem"])
def test_every_flag_is_a_miles_megatron_or_sglang_argument(backend):
    cfg = config_with(backend)
    argv = miles_train_args(cfg, hf_checkpoint="/models/Qwen3-30B-A3B", prompt_data="/data/p.jsonl")
    unknown = sorted(set(launcher_flags(argv, cfg.model.megatron_args)) - KNOWN)
    assert unknown == []


def test_qwen3_30b_a3b_without_deepep():
    cfg = config_with("nccl")
    argv = miles_train_args(cfg, hf_checkpoint="/models/Qwen3-30B-A3B", prompt_data="/data/dapo.jsonl")
    # the model architecture is passed through verbatim, right after the cluster flags
    start = argv.index("--disable-bias-linear")
    assert tuple(argv[start:start + len(cfg.model.megatron_args)]) == cfg.model.megatron_args
    expected = {
        "--actor-num-nodes": "2",
        "--actor-num-gpus-per-node": "8",
        "--hf-checkpoint": "/models/Qwen3-30B-A3B",
        "--ref-load": "/models/Qwen3-30B-A3B",
        "--megatron-to-hf-mode": "bridge",
        "--load": "/checkpoints",
        "--save": "/checkpoints",
        "--save-interval": "20",
        "--save-trigger-sentinel": "/checkpoints/_rltrainer_save_now",
        "--prompt-data": "/data/dapo.jsonl",
        "--input-key": "prompt",
        "--label-key": "label",
        "--num-rollout": "1000",
        "--rollout-batch-size": "32",
        "--n-samples-per-prompt": "8",
        "--global-batch-size": "256",
        "--num-steps-per-rollout": "1",
        "--rollout-max-response-len": "8192",
        "--rollout-temperature": "1",
        "--lr": "1e-06",
        "--kl-loss-coef": "0",
        "--eps-clip": "0.2",
        "--advantage-estimator": "grpo",
        "--tensor-model-parallel-size": "4",
        "--pipeline-model-parallel-size": "1",
        "--context-parallel-size": "1",
        "--expert-model-parallel-size": "8",
        "--expert-tensor-parallel-size": "1",
        "--rollout-num-gpus-per-engine": "8",
        "--sglang-ep-size": "8",
        "--moe-token-dispatcher-type": "alltoall",
    }
    assert {flag: last_value(argv, flag) for flag in expected} == expected
    assert "--colocate" in argv and "--sequence-parallel" in argv
    assert "--use-kl-loss" not in argv  # a zero KL coefficient needs no reference model
    for deepep_flag in ("--moe-flex-dispatcher-backend", "--sglang-moe-a2a-backend"):
        assert deepep_flag not in argv


@pytest.mark.parametrize("backend", ["deepep-nvshmem"])
def test_qwen3_30b_a3b_with_deepep_switches_both_sides(backend):
    cfg = config_with(backend)
    argv = miles_train_args(cfg, hf_checkpoint="/models/Qwen3-30B-A3B", prompt_data="/data/dapo.jsonl")
    # Megatron: flex dispatcher with the deepep backend, written after the model args'
    # `--moe-token-dispatcher-type alltoall` so it wins (argparse keeps the last value)
    assert argv.count("--moe-token-dispatcher-type") == 2
    assert last_value(argv, "--moe-token-dispatcher-type") == "flex"
    assert last_value(argv, "--moe-flex-dispatcher-backend") == "deepep"
    # SGLang: DeepEP all-to-all, expert-parallel over the whole engine
    assert last_value(argv, "--sglang-moe-a2a-backend") == "deepep"
    assert last_value(argv, "--sglang-ep-size") == "8"


def test_user_megatron_args_replace_soft_defaults_without_duplicates():
    data = yaml.safe_load(QWEN.read_text())
    # (--rm-type is data.rm_type's now: tests/test_trainer_recipe.py)
    data["model"]["megatron_args"] += ["--lr-decay-style", "cosine",
                                       "--sglang-mem-fraction-static", "0.5"]
    data["grpo"]["kl_loss_coef"] = 0.01
    argv = miles_train_args(parse_run_config(data), hf_checkpoint="/m", prompt_data="/d.jsonl")
    for flag, value in (("--lr-decay-style", "cosine"), ("--sglang-mem-fraction-static", "0.5")):
        assert argv.count(flag) == 1 and last_value(argv, flag) == value
    assert "--use-kl-loss" in argv and last_value(argv, "--kl-loss-coef") == "0.01"


def test_max_tokens_per_gpu_is_the_config_field():
    """The micro-batch token cap sizes the activations the kit's planner fitted: the launcher
    passes parallel.training.max_tokens_per_gpu (default 20480) and refuses it in megatron_args."""
    data = yaml.safe_load(QWEN.read_text())
    argv = miles_train_args(parse_run_config(data), hf_checkpoint="/m", prompt_data="/d.jsonl")
    assert argv.count("--max-tokens-per-gpu") == 1
    assert last_value(argv, "--max-tokens-per-gpu") == "20480"
    data["parallel"]["training"]["max_tokens_per_gpu"] = 9216
    argv = miles_train_args(parse_run_config(data), hf_checkpoint="/m", prompt_data="/d.jsonl")
    assert argv.count("--max-tokens-per-gpu") == 1
    assert last_value(argv, "--max-tokens-per-gpu") == "9216"
    assert "--use-dynamic-batch-size" in argv
    data["model"]["megatron_args"] += ["--max-tokens-per-gpu", "4096"]
    with pytest.raises(Exception) as err:
        parse_run_config(data)
    assert "parallel.training.max_tokens_per_gpu" in str(err.value)
    data["model"]["megatron_args"] = data["model"]["megatron_args"][:-2]
    data["parallel"]["training"]["max_tokens_per_gpu"] = 0
    with pytest.raises(Exception) as err:
        parse_run_config(data)
    assert "parallel.training.max_tokens_per_gpu" in str(err.value) and ">= 1" in str(err.value)


def test_direct_and_ray_submit_forms():
    cfg = load_run_config(QWEN)
    direct = build_train_command(cfg, hf_checkpoint="/m", prompt_data="/d.jsonl")
    assert direct.argv[:2] == ["python3", "/root/miles/train.py"]
    assert direct.env == {"PYTHONPATH": "/root/Megatron-LM", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONUNBUFFERED": "1"}
    submit = build_train_command(cfg, hf_checkpoint="/m", prompt_data="/d.jsonl", ray_address="http://127.0.0.1:8265")
    sep = submit.argv.index("--")
    assert submit.argv[:3] == ["ray", "job", "submit"]
    assert "--address=http://127.0.0.1:8265" in submit.argv[:sep]
    runtime_env = json.loads(next(a for a in submit.argv[:sep] if a.startswith("--runtime-env-json=")).split("=", 1)[1])
    assert runtime_env == {"env_vars": direct.env}
    assert submit.argv[sep + 1:] == direct.argv
    # A known submission ID, so that a stop can name the job (`ray job stop`): a new one per launch.
    ids = [a.split("=", 1)[1] for a in submit.argv[:sep] if a.startswith("--submission-id=")]
    assert len(ids) == 1 and ids[0].startswith("rltrainer-qwen3-30b-a3b-grpo-")
    again = build_train_command(cfg, hf_checkpoint="/m", prompt_data="/d.jsonl", ray_address="http://127.0.0.1:8265")
    assert again.argv != submit.argv
    assert submit.stop_argv == ("ray", "job", "stop", "--address=http://127.0.0.1:8265", ids[0])
    assert direct.stop_argv == ()


# Runs until SIGTERM (which it obeys); says it started.
FOREVER_TRAIN = """
import os, pathlib, time
pathlib.Path(os.environ["FAKE_TRAIN_STARTED"]).write_text("yes")
while True:
    time.sleep(0.05)
"""


def test_a_signal_to_the_launcher_stops_the_submitted_ray_job(tmp_path: Path, monkeypatch):
    """--ray-address: SIGTERM/SIGINT to the launcher (the pod stopping) reach `ray job submit`, which
    only follows the job's logs. Before: the Ray job (Miles training) ran on. Now the launcher also
    runs `ray job stop` for the job it submitted, and waits for it (tests/ray_helpers.py)."""
    import signal
    import threading
    import time

    from ray_helpers import install_fake_ray, kill_jobs, ray_calls, running_jobs
    from rltrainer.launch import run_training

    state = install_fake_ray(tmp_path, monkeypatch)
    miles = tmp_path / "miles"
    miles.mkdir()
    (miles / "train.py").write_text(FOREVER_TRAIN)
    started = tmp_path / "started"
    monkeypatch.setenv("FAKE_TRAIN_STARTED", str(started))
    cmd = build_train_command(load_run_config(QWEN), hf_checkpoint="/m", prompt_data="/d.jsonl", miles_dir=str(miles),
                              python=sys.executable, ray_address="http://127.0.0.1:8265")

    def pod_stops() -> None:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=pod_stops, daemon=True).start()
    try:
        code = run_training(cmd)
        assert started.exists()
        assert running_jobs(state) == {}
        assert code != 0  # the submitter was signalled too: not a finished run
        submit, stop = ray_calls(state)
        sid = next(a.split("=", 1)[1] for a in submit if a.startswith("--submission-id="))
        assert stop == ["job", "stop", "--address=http://127.0.0.1:8265", sid]
    finally:
        kill_jobs(state)


def test_dry_run_prints_command_and_environment(tmp_path: Path):
    out, err = io.StringIO(), io.StringIO()
    assert launch_main(["--config", str(QWEN), "--dry-run"], out=out, err=err) == 0
    text = out.getvalue()
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    assert "# would stage data.prompt_data s3://my-bucket/datasets/dapo-math-17k.jsonl -> " \
           "/checkpoints/_inputs/data/dapo-math-17k.jsonl" in text
    assert "python3 /root/miles/train.py \\\n    --actor-num-nodes 2 \\\n    --actor-num-gpus-per-node 8 \\" in text
    assert "    --prompt-data /checkpoints/_inputs/data/dapo-math-17k.jsonl \\" in text
    assert err.getvalue() == ""


def test_config_errors_exit_2_with_the_full_report(tmp_path: Path):
    data = yaml.safe_load(QWEN.read_text())
    data["grpo"]["global_batch_size"] = 102
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    out, err = io.StringIO(), io.StringIO()
    assert launch_main(["--config", str(cfg), "--dry-run"], out=out, err=err) == 2
    assert out.getvalue() == ""
    lines = err.getvalue().splitlines()
    assert lines[0] == f"{cfg}: 2 problems:"
    assert lines[1].startswith("  - grpo.global_batch_size = 102: Miles needs rollout_batch_size x n_samples_per_prompt")
    assert lines[2] == (
        "  - grpo.global_batch_size = 102: Megatron needs global_batch_size to be a multiple of the data-parallel "
        "size 4 (16 GPUs / (tp 4 x pp 1 x cp 1)). Fix: use a multiple of 4, e.g. 104, and keep the Miles batch invariant."
    )


def test_module_entry_point_dry_run():
    proc = subprocess.run([sys.executable, "-m", "rltrainer.launch", "--config", str(QWEN), "--dry-run"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--moe-token-dispatcher-type alltoall" in proc.stdout


FAKE_TRAIN = '''
import json, os, pathlib, sys, time
args = sys.argv[1:]
def last(flag):
    i = len(args) - 1 - args[::-1].index(flag)
    return args[i + 1]
save = pathlib.Path(last("--save"))
tracker = save / "latest_checkpointed_iteration.txt"
start = int(tracker.read_text()) if tracker.exists() else 0
with open(os.environ["FAKE_TRAIN_LOG"], "a") as log:
    log.write(json.dumps({"argv": args, "start": start, "env": {k: os.environ.get(k) for k in ("CUDA_DEVICE_MAX_CONNECTIONS",)}}) + "\\n")
for it in (start + 1, start + 2):
    d = save / f"iter_{it:07d}"
    (d / "model").mkdir(parents=True)
    (d / "model" / "__0_0.distcp").write_bytes(os.urandom(3000 + it))
    (d / "common.pt").write_bytes(bytes([it]) * 100)
    (save / "rollout").mkdir(exist_ok=True)
    import torch  # the data cursor is a real torch.save file, as Miles writes it
    torch.save({"cursor": it}, save / "rollout" / f"global_dataset_state_dict_{it}.pt")
    tracker.write_text(str(it))
    time.sleep(0.3)
'''


@pytest.fixture
def aws(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    from moto import mock_aws

    with mock_aws():
        import boto3

        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="my-bucket")
        yield s3


def test_full_launch_stages_inputs_trains_uploads_and_resumes(tmp_path: Path, aws, monkeypatch):
    s3 = aws
    s3.put_object(Bucket="my-bucket", Key="models/tiny/config.json", Body=b'{"model_type": "qwen3_moe"}')
    s3.put_object(Bucket="my-bucket", Key="models/tiny/model.safetensors", Body=b"w" * 5000)
    s3.put_object(Bucket="my-bucket", Key="datasets/prompts.jsonl", Body=b'{"prompt": "1+1", "label": "2"}\n')
    miles = tmp_path / "miles"
    miles.mkdir()
    (miles / "train.py").write_text(FAKE_TRAIN)
    log = tmp_path / "train.log"
    monkeypatch.setenv("FAKE_TRAIN_LOG", str(log))

    data = yaml.safe_load(QWEN.read_text())
    local = tmp_path / "ckpt"
    data["model"]["hf_checkpoint"] = "s3://my-bucket/models/tiny/"
    data["data"]["prompt_data"] = "s3://my-bucket/datasets/prompts.jsonl"
    data["checkpoint"]["local_dir"] = str(local)
    data["checkpoint"]["s3_uri"] = "s3://my-bucket/checkpoints/run1/"
    # keep every save locally: this test compares the restored save after the resumed run
    # trained on (retention has its own tests: test_trainer_retention.py)
    data["checkpoint"]["keep_local"] = 4
    data["checkpoint"]["keep_s3"] = 3  # S3 keeps the newest three (the second run saves the fourth)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    argv = ["--config", str(cfg), "--miles-dir", str(miles), "--python", sys.executable, "--upload-interval", "0.1"]
    mounts = lustre_mounts(tmp_path)

    err = io.StringIO()
    assert launch_main(argv, out=io.StringIO(), err=err, mounts_file=mounts) == 0, err.getvalue()
    first = json.loads(log.read_text().splitlines()[0])
    assert first["start"] == 0
    assert last_value(first["argv"], "--hf-checkpoint") == str(local / "_inputs" / "model" / "tiny")
    assert last_value(first["argv"], "--prompt-data") == str(local / "_inputs" / "data" / "prompts.jsonl")
    assert (local / "_inputs" / "model" / "tiny" / "model.safetensors").read_bytes() == b"w" * 5000
    assert first["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"

    def complete() -> list[int]:
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="my-bucket", Prefix="checkpoints/run1/").get("Contents", [])]
        return sorted(int(k.split("/")[2][5:]) for k in keys if k.endswith("/_COMPLETE.json"))

    assert complete() == [1, 2]
    saved = {p.relative_to(local): p.read_bytes() for p in local.rglob("*")
             if p.is_file() and ("iter_0000002" in p.parts or p.name.endswith("_2.pt"))}

    # A new pod on an empty volume resumes from the newest complete checkpoint in S3.
    import shutil

    shutil.rmtree(local)
    err = io.StringIO()
    assert launch_main(argv, out=io.StringIO(), err=err, mounts_file=mounts) == 0, err.getvalue()
    second = json.loads(log.read_text().splitlines()[1])
    assert second["start"] == 2
    assert "restoring iter_0000002 from s3://my-bucket/checkpoints/run1/" in err.getvalue()
    for rel, content in saved.items():
        assert (local / rel).read_bytes() == content, rel
    assert complete() == [2, 3, 4]  # 1 deleted from S3: beyond keep_s3, and not on this volume


# A stand-in Miles checkout for unit tests: a model script in the v0.1.0 layout
# (scripts/models/<name>.py with model_args(), importing model_args_utils) and a loader
# program with the same command-line contract as Miles' own
# miles/utils/external_utils/model_args_utils.py (print one model's flags on one line).
# The real loader and real scripts run in tests/manifests/test_miles_contract.py.
MODEL_SCRIPT = '''
import os
from model_args_utils import moe_layer_freq

def model_args(nlayers=None):
    nlayers = nlayers or 4
    return (
        f"--num-layers {nlayers} "
        "--hidden-size 2048 "
        f"--rotary-base {os.environ.get('MODEL_ARGS_ROTARY_BASE') or '10000000'} "
        f"--moe-layer-freq {moe_layer_freq(nlayers)} "
        "--num-experts 128 "
        "--moe-token-dispatcher-type alltoall "
    )
'''
FAKE_LOADER = '''
import importlib.util, sys
from pathlib import Path

def moe_layer_freq(nlayers):
    return "[" + ",".join(["1"] * nlayers) + "]"

sys.modules["model_args_utils"] = sys.modules[__name__]
path = Path(__file__).resolve().parents[3] / "scripts" / "models" / f"{sys.argv[1]}.py"
spec = importlib.util.spec_from_file_location("model", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(" ".join(module.model_args().split()))
'''


def fake_miles(tmp_path: Path, script_name: str = "qwen3-30B-A3B.py", body: str = MODEL_SCRIPT) -> Path:
    miles = tmp_path / "miles"
    models = miles / "scripts" / "models"
    models.mkdir(parents=True)
    (models / script_name).write_text(body)
    loader = miles / "miles" / "utils" / "external_utils" / "model_args_utils.py"
    loader.parent.mkdir(parents=True)
    loader.write_text(FAKE_LOADER)
    return miles


def lustre_mounts(tmp_path: Path) -> str:
    """A /proc/mounts in which tmp_path is an FSx for Lustre mount."""
    mounts = tmp_path / "mounts"
    mounts.write_text(f"overlay / overlay rw 0 0\n10.0.0.5@tcp:/abcdefgh {tmp_path} lustre rw,flock 0 0\n")
    return str(mounts)


def config_without_model_args(tmp_path: Path) -> Path:
    data = yaml.safe_load(QWEN.read_text())
    data["model"]["megatron_args"] = []  # what the kit's manifest renderer writes
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_empty_megatron_args_come_from_the_miles_model_script(tmp_path: Path):
    from rltrainer.miles import resolve_model_args

    miles = fake_miles(tmp_path)
    cfg = load_run_config(config_without_model_args(tmp_path))
    args, source = resolve_model_args(cfg, str(miles), sys.executable)
    assert source == f"{miles / 'scripts' / 'models' / 'qwen3-30B-A3B.py'} model_args()"
    assert args == ("--num-layers", "4", "--hidden-size", "2048", "--rotary-base", "10000000",
                    "--moe-layer-freq", "[1,1,1,1]", "--num-experts", "128", "--moe-token-dispatcher-type", "alltoall")

    out = io.StringIO()
    assert launch_main(["--config", str(config_without_model_args(tmp_path)), "--dry-run", "--miles-dir", str(miles),
                        "--python", sys.executable], out=out, err=io.StringIO()) == 0
    assert f"# model arguments from {source}" in out.getvalue()
    assert "    --moe-layer-freq '[1,1,1,1]' \\" in out.getvalue()


def test_a_miles_script_name_works_as_model_name_and_a_failing_script_is_reported(tmp_path: Path):
    from rltrainer.miles import ModelArgsError, resolve_model_args

    miles = fake_miles(tmp_path, script_name="qwen3-8B.py")
    data = yaml.safe_load(QWEN.read_text())
    data["model"] = {"name": "qwen3-8B", "hf_checkpoint": "/models/Qwen3-8B", "megatron_args": []}
    args, _ = resolve_model_args(parse_run_config(data), str(miles), sys.executable)
    assert args[:2] == ("--num-layers", "4")
    (miles / "scripts" / "models" / "qwen3-8B.py").write_text("raise ValueError('no such layout')\n")
    with pytest.raises(ModelArgsError, match="model_args_utils.py qwen3-8B failed: ValueError: no such layout"):
        resolve_model_args(parse_run_config(data), str(miles), sys.executable)


def test_model_script_expert_count_is_checked_against_ep(tmp_path: Path):
    miles = fake_miles(tmp_path, body=MODEL_SCRIPT.replace("--num-experts 128", "--num-experts 12"))
    cfg = config_without_model_args(tmp_path)
    err = io.StringIO()
    assert launch_main(["--config", str(cfg), "--dry-run", "--miles-dir", str(miles), "--python", sys.executable],
                       out=io.StringIO(), err=err) == 2
    script = miles / "scripts" / "models" / "qwen3-30B-A3B.py"
    assert err.getvalue() == (
        f"{cfg}: 1 problem:\n"
        f"  - parallel.training.ep = 8: Megatron places num_experts / ep experts on each rank, and {script} "
        "model_args() sets --num-experts 12, which 8 does not divide. Fix: choose an ep that divides 12.\n"
    )


def test_model_script_heads_are_checked_against_the_engine_size(tmp_path: Path):
    # the kit renders megatron_args: [], so the model script's heads (12 here, 4 KV heads) are what
    # SGLang would split over the 8 GPUs of an engine (qwen3_moe.py:458-468) after the GPUs start
    heads = "--group-query-attention --num-attention-heads 12 --num-query-groups 4 "
    miles = fake_miles(tmp_path, body=MODEL_SCRIPT.replace('"--num-experts 128 "', f'"--num-experts 128 {heads}"'))
    cfg = config_without_model_args(tmp_path)
    err = io.StringIO()
    assert launch_main(["--config", str(cfg), "--dry-run", "--miles-dir", str(miles), "--python", sys.executable],
                       out=io.StringIO(), err=err) == 2
    script = miles / "scripts" / "models" / "qwen3-30B-A3B.py"
    assert "parallel.rollout.gpus_per_engine = 8: SGLang splits the attention heads" in err.getvalue()
    assert (f"{script} model_args() sets --num-attention-heads 12 and --num-query-groups 4, which an engine of 8 "
            "GPUs does not fit. Fix: use gpus_per_engine 1, 2, 4, 12 (and a divisor of it as ep).\n") in err.getvalue()


def run_config_with(tmp_path: Path, name: str = "run-pp8.yaml", **training) -> Path:
    data = yaml.safe_load(config_without_model_args(tmp_path).read_text())
    data["parallel"]["training"].update(training)
    cfg = tmp_path / name
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def test_model_script_layer_count_is_checked_against_pp(tmp_path: Path):
    # the kit renders megatron_args: [], so only the model script's --num-layers (4 here) can
    # show a pipeline size Megatron would refuse after the GPUs start: 8 stages need 8 layers
    miles = fake_miles(tmp_path)
    cfg = run_config_with(tmp_path, tp=1, pp=8, ep=1)
    err = io.StringIO()
    assert launch_main(["--config", str(cfg), "--dry-run", "--miles-dir", str(miles), "--python", sys.executable],
                       out=io.StringIO(), err=err) == 2
    script = miles / "scripts" / "models" / "qwen3-30B-A3B.py"
    assert err.getvalue() == (
        f"{cfg}: 1 problem:\n"
        "  - parallel.training.pp = 8: every pipeline stage must hold at least one layer (Megatron), and "
        f"{script} model_args() sets --num-layers 4, fewer than 8 stages. Fix: use a pp of at most 4.\n"
    )


def test_a_pp_that_does_not_divide_the_layers_runs_an_uneven_split(tmp_path: Path):
    # DeepSeek-V3's 61 layers on 8 stages: Megatron-LM 37f9161 refuses pp 8 without an explicit split
    # (arguments.py:623-636); the launcher passes the trainer's split, 7 + 6 x 8 + 6
    miles = fake_miles(tmp_path, body=MODEL_SCRIPT.replace("nlayers or 4", "nlayers or 61"))
    out = io.StringIO()
    cfg = run_config_with(tmp_path, tp=1, pp=8, ep=2)
    assert launch_main(["--config", str(cfg), "--dry-run", "--miles-dir", str(miles), "--python", sys.executable],
                       out=out, err=io.StringIO()) == 0
    assert ("    --pipeline-model-parallel-size 8 \\\n    --decoder-first-pipeline-num-layers 7 \\\n"
            "    --decoder-last-pipeline-num-layers 6 \\\n") in out.getvalue()
    # pp 1 and an even split pass no split (Miles v0.1.0 refuses the flags with pp 1:
    # miles/utils/arguments.py:2719-2725)
    for pp in (1, 2):
        out = io.StringIO()
        assert launch_main(["--config", str(run_config_with(tmp_path, f"run-pp{pp}.yaml", tp=1, pp=pp, ep=8)),
                            "--dry-run", "--miles-dir", str(fake_miles(tmp_path / f"pp{pp}")),
                            "--python", sys.executable], out=out, err=io.StringIO()) == 0
        assert "pipeline-num-layers" not in out.getvalue()


def test_the_launcher_passes_the_split_unless_the_model_arguments_give_one():
    data = yaml.safe_load(QWEN.read_text())
    data["parallel"]["training"].update(tp=1, pp=16, ep=1)
    margs = data["model"]["megatron_args"]
    margs[margs.index("--num-layers") + 1] = "47"
    argv = miles_train_args(parse_run_config(copy.deepcopy(data)), hf_checkpoint="/m", prompt_data="/d.jsonl")
    i = argv.index("--pipeline-model-parallel-size")
    assert argv[i:i + 6] == ["--pipeline-model-parallel-size", "16", "--decoder-first-pipeline-num-layers", "3",
                             "--decoder-last-pipeline-num-layers", "2"]  # 3 + 14 x 3 + 2
    # the model arguments' own split (Megatron checks it), or --account-for-*-in-pipeline-split,
    # which Megatron does not combine with one (47 + 1 divides 16): the launcher adds none
    for explicit in (["--decoder-first-pipeline-num-layers", "5"], ["--account-for-loss-in-pipeline-split"]):
        data["model"]["megatron_args"] = [*margs, *explicit]
        argv = miles_train_args(parse_run_config(copy.deepcopy(data)), hf_checkpoint="/m", prompt_data="/d.jsonl")
        assert argv.count("--decoder-first-pipeline-num-layers") == (1 if explicit[0].startswith("--decoder") else 0)
        assert "--decoder-last-pipeline-num-layers" not in argv


def test_unknown_model_without_megatron_args_is_refused_at_launch(tmp_path: Path):
    miles = fake_miles(tmp_path, script_name="glm4-9B.py")
    cfg = config_without_model_args(tmp_path)
    err = io.StringIO()
    assert launch_main(["--config", str(cfg), "--miles-dir", str(miles)], out=io.StringIO(), err=err) == 2
    assert err.getvalue() == (
        f"rltrainer launch: model.name = 'qwen3-30b-a3b': model.megatron_args is empty and "
        f"{miles / 'scripts' / 'models'} has no model script for it (kit models with a Miles script: deepseek-v3, "
        "kimi-k2, qwen3-235b-a22b, qwen3-30b-a3b). Fix: set model.name to one of those or to a script name in "
        f"{miles / 'scripts' / 'models'} (without .py), or list the model's Megatron flags in model.megatron_args\n"
    )
    # a dry run away from the image still prints the rest of the plan
    out = io.StringIO()
    assert launch_main(["--config", str(cfg), "--dry-run", "--miles-dir", str(miles)], out=out, err=io.StringIO()) == 0
    assert f"<model_args() of {miles}/scripts/models/<script for qwen3-30b-a3b>.py>" in out.getvalue()


def test_the_image_refuses_a_run_config_for_another_backend(tmp_path: Path):
    err = io.StringIO()
    assert launch_main(["--config", str(QWEN), "--dry-run"], out=io.StringIO(), err=err,
                       image_backend="deepep-nvshmem") == 2
    assert err.getvalue() == (
        'rltrainer launch: expert_parallel.backend = "nccl": this image was built for the deepep-nvshmem '
        "expert-parallel backend (RLTRAINER_IMAGE_EP_BACKEND=deepep-nvshmem), and each backend needs its own build "
        "(EFA installer, NVSHMEM or NCCL, DeepEP). Fix: run the image tagged for nccl (<tag>-nccl), or set "
        "expert_parallel.backend to deepep-nvshmem.\n"
    )
    assert launch_main(["--config", str(QWEN), "--dry-run"], out=io.StringIO(), err=io.StringIO(),
                       image_backend="nccl") == 0


def test_the_console_entry_reads_the_image_backend_from_the_environment(tmp_path: Path):
    env = {**os.environ, "RLTRAINER_IMAGE_EP_BACKEND": "deepep-nvshmem"}
    proc = subprocess.run([sys.executable, "-m", "rltrainer.launch", "--config", str(QWEN), "--dry-run"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    assert "this image was built for the deepep-nvshmem expert-parallel backend" in proc.stderr


def test_multi_node_run_refuses_a_checkpoint_dir_on_a_private_filesystem(tmp_path: Path):
    local = tmp_path / "ckpt"  # an emptyDir, say
    local.mkdir()
    mounts = tmp_path / "mounts"
    mounts.write_text(f"overlay / overlay rw 0 0\ntmpfs {local} tmpfs rw 0 0\n")
    data = yaml.safe_load(QWEN.read_text())
    data["checkpoint"]["local_dir"] = str(local)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    miles = tmp_path / "miles"
    miles.mkdir()
    (miles / "train.py").write_text("raise SystemExit('the trainer must not start')\n")
    err = io.StringIO()
    code = launch_main(["--config", str(cfg), "--miles-dir", str(miles), "--python", sys.executable],
                       out=io.StringIO(), err=err, mounts_file=str(mounts))
    assert code == 2
    assert err.getvalue() == (
        f'rltrainer launch: checkpoint.local_dir = "{local}": a 2-node run needs it on a filesystem every node '
        "mounts (one of beegfs, ceph, cephfs, efs, fuse.glusterfs, glusterfs, gpfs, lustre, nfs, nfs4, wekafs), but "
        f"it is on tmpfs (mount point {local}), which only this pod sees: the workers' saves would never reach "
        "the upload watcher. Fix: mount the shared volume (FSx for Lustre) at this path on the head and every "
        "worker, or point checkpoint.local_dir at where it is mounted.\n"
    )
    # the dry run says what a real launch would do
    out = io.StringIO()
    assert launch_main(["--config", str(cfg), "--dry-run"], out=out, err=io.StringIO(), mounts_file=str(mounts)) == 0
    assert f'# a real launch here would refuse: checkpoint.local_dir = "{local}"' in out.getvalue()


def test_filesystem_type_takes_the_longest_mount_and_the_nearest_existing_parent(tmp_path: Path):
    from rltrainer.mounts import filesystem_type, shared_storage_problem

    shared = tmp_path / "fsx dir"
    shared.mkdir()
    mounts = tmp_path / "mounts"
    escaped = str(shared).replace(" ", "\\040")
    mounts.write_text(f"overlay / overlay rw 0 0\n10.0.0.5@tcp:/abc {escaped} lustre rw 0 0\n"
                      f"fs-1.efs.us-east-1.amazonaws.com:/ {tmp_path}/efs nfs4 rw 0 0\n")
    assert filesystem_type(str(shared / "not" / "yet"), str(mounts)) == ("lustre", str(shared))
    assert filesystem_type(str(tmp_path / "other"), str(mounts)) == ("overlay", "/")
    assert filesystem_type(str(tmp_path), str(tmp_path / "no-such-file")) is None
    cfg = load_run_config(QWEN)
    assert shared_storage_problem(cfg, str(mounts)) is not None  # /checkpoints is on overlay here
    single = yaml.safe_load(QWEN.read_text())
    single["parallel"]["nodes"] = 1
    single["grpo"]["global_batch_size"] = 256
    assert shared_storage_problem(parse_run_config(single), "/no/such/mounts") is None  # one node needs no sharing


def staging_config(tmp_path: Path):
    data = yaml.safe_load(QWEN.read_text())
    data["checkpoint"]["local_dir"] = str(tmp_path / "ckpt")
    data["model"]["hf_checkpoint"] = "s3://my-bucket/models/tiny/"
    data["data"]["prompt_data"] = "s3://my-bucket/datasets/prompts.jsonl"
    return parse_run_config(data)


def staged_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_staged_input_replaced_in_s3_by_one_of_the_same_size_is_downloaded_again(tmp_path: Path, aws):
    """Before: a staged file counted as current when its size equalled the object's, so a
    corrected prompt file or weights of the same shape under the same prefix were never fetched."""
    from ckpt_helpers import HookedClient
    from rltrainer.launch import stage_inputs

    s3 = aws
    s3.put_object(Bucket="my-bucket", Key="models/tiny/config.json", Body=b'{"model_type": "qwen3_moe"}')
    s3.put_object(Bucket="my-bucket", Key="models/tiny/model.safetensors", Body=b"w" * 5000)
    s3.put_object(Bucket="my-bucket", Key="datasets/prompts.jsonl", Body=b'{"prompt": "1+1", "label": "3"}\n')
    cfg = staging_config(tmp_path)
    hf, data = stage_inputs(cfg, client=s3, log=io.StringIO())
    assert Path(data).read_bytes() == b'{"prompt": "1+1", "label": "3"}\n'

    s3.put_object(Bucket="my-bucket", Key="models/tiny/model.safetensors", Body=b"v" * 5000)
    s3.put_object(Bucket="my-bucket", Key="datasets/prompts.jsonl", Body=b'{"prompt": "1+1", "label": "2"}\n')
    calls = HookedClient(s3)
    assert stage_inputs(cfg, client=calls, log=io.StringIO()) == (hf, data)
    assert Path(data).read_bytes() == b'{"prompt": "1+1", "label": "2"}\n'
    assert staged_files(Path(hf)) == {"config.json": b'{"model_type": "qwen3_moe"}', "model.safetensors": b"v" * 5000}
    assert calls.calls.count("download_file") == 2, "config.json did not change: not downloaded again"

    calls = HookedClient(s3)
    stage_inputs(cfg, client=calls, log=io.StringIO())
    assert calls.calls.count("download_file") == 0, "nothing changed"


def test_staged_model_files_the_prefix_no_longer_holds_are_removed(tmp_path: Path, aws):
    """A model prefix repointed to other weights: a shard left from the old ones must not be read."""
    from rltrainer.launch import stage_inputs

    s3 = aws
    for name in ("config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        s3.put_object(Bucket="my-bucket", Key=f"models/tiny/{name}", Body=name.encode())
    s3.put_object(Bucket="my-bucket", Key="datasets/prompts.jsonl", Body=b"{}\n")
    cfg = staging_config(tmp_path)
    hf, _data = stage_inputs(cfg, client=s3, log=io.StringIO())
    s3.delete_object(Bucket="my-bucket", Key="models/tiny/model-00001-of-00002.safetensors")
    s3.delete_object(Bucket="my-bucket", Key="models/tiny/model-00002-of-00002.safetensors")
    s3.put_object(Bucket="my-bucket", Key="models/tiny/sub/model.safetensors", Body=b"one shard")
    log = io.StringIO()
    stage_inputs(cfg, client=s3, log=log)
    assert staged_files(Path(hf)) == {"config.json": b"config.json", "sub/model.safetensors": b"one shard"}
    assert (f"rltrainer: removed 2 staged file(s) that s3://my-bucket/models/tiny/ no longer holds, e.g. "
            f"{hf}/model-00001-of-00002.safetensors") in log.getvalue()


def config_staging(tmp_path: Path, hf: str, data: str, local: Path | None = None):
    doc = yaml.safe_load(QWEN.read_text())
    doc["checkpoint"]["local_dir"] = str(local or tmp_path / "checkpoints" / "run-b")
    doc["model"]["hf_checkpoint"] = hf
    doc["data"]["prompt_data"] = data
    return parse_run_config(doc)


def put_two_sources(s3) -> None:
    for name in ("A", "B"):
        s3.put_object(Bucket="my-bucket", Key=f"datasets/models/{name}/config.json", Body=name.encode())
        s3.put_object(Bucket="my-bucket", Key=f"datasets/models/{name}/model.safetensors", Body=name.encode() * 2000)
        s3.put_object(Bucket="my-bucket", Key=f"datasets/{name.lower()}.jsonl", Body=b"{}\n" * 100)


def test_a_run_whose_model_and_data_changed_removes_its_earlier_staged_copies(tmp_path: Path, aws):
    """Before: the same run_name with hf_checkpoint moved from .../models/A/ to .../models/B/
    staged B beside A, and A's copy (1.2 TiB for DeepSeek-V3) stayed on the shared file system
    for good; the file system is sized for one set of weights, so the run's saves later failed
    with ENOSPC. The earlier prompt file stayed the same way."""
    from rltrainer.launch import stage_inputs

    s3 = aws
    put_two_sources(s3)
    run = tmp_path / "checkpoints" / "run-b"
    stage_inputs(config_staging(tmp_path, "s3://my-bucket/datasets/models/A/", "s3://my-bucket/datasets/a.jsonl"),
                 client=s3, log=io.StringIO())
    # Not this run's inputs, or not inputs at all: never touched.
    other_run = tmp_path / "checkpoints" / "run-a" / "_inputs" / "model" / "A"
    other_run.mkdir(parents=True)
    (other_run / "model.safetensors").write_bytes(b"other run")
    (run / "iter_0000020").mkdir()
    (run / "iter_0000020" / "__0_0.distcp").write_bytes(b"save")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "weights").write_bytes(b"not staged")
    (run / "_inputs" / "model" / "linked").symlink_to(outside)
    (run / "_inputs" / "data" / ".b.jsonl.partial").write_bytes(b"{}")  # the new file's download, cut short
    before = staged_files(tmp_path)

    log = io.StringIO()
    hf, data = stage_inputs(config_staging(tmp_path, "s3://my-bucket/datasets/models/B/",
                                           "s3://my-bucket/datasets/b.jsonl"), client=s3, log=log)
    inputs = run / "_inputs"
    assert sorted(p.name for p in (inputs / "model").iterdir()) == ["B"]
    assert sorted(p.name for p in (inputs / "data").iterdir()) == ["b.jsonl"]
    assert staged_files(Path(hf)) == {"config.json": b"B", "model.safetensors": b"B" * 2000}
    assert Path(data).read_bytes() == b"{}\n" * 100
    assert log.getvalue().startswith(
        f"rltrainer: removing {inputs}/model/A (2,001 bytes), staged from s3://my-bucket/datasets/models/A/: "
        "model.hf_checkpoint is now s3://my-bucket/datasets/models/B/, and only the launcher of this run "
        "(one RayJob per run name) stages here\n"
        f"rltrainer: removing {inputs}/model/linked (a link; what it points to is kept), its source not recorded: "
        "model.hf_checkpoint is now s3://my-bucket/datasets/models/B/, and only the launcher of this run "
        "(one RayJob per run name) stages here\n"
        f"rltrainer: removing {inputs}/data/a.jsonl (300 bytes), staged from s3://my-bucket/datasets/a.jsonl: "
        "data.prompt_data is now s3://my-bucket/datasets/b.jsonl, and only the launcher of this run "
        "(one RayJob per run name) stages here\n"
        "rltrainer: removed 3 input(s) this run staged from earlier sources: 2,301 bytes freed\n")
    index = json.loads((inputs / ".staged.json").read_text())["files"]
    assert sorted(index) == ["data/b.jsonl", "model/B/config.json", "model/B/model.safetensors"]
    after = staged_files(tmp_path)
    kept = {rel: content for rel, content in before.items() if "/_inputs/" not in rel or "run-a" in rel}
    assert {rel: after[rel] for rel in kept} == kept  # the other run's, the save, the link's target
    assert (outside / "weights").read_bytes() == b"not staged"

    quiet = io.StringIO()
    stage_inputs(config_staging(tmp_path, "s3://my-bucket/datasets/models/B/", "s3://my-bucket/datasets/b.jsonl"),
                 client=s3, log=quiet)
    assert "removing" not in quiet.getvalue() and "removed" not in quiet.getvalue()


def test_inputs_staged_before_are_removed_when_the_run_reads_local_paths_now(tmp_path: Path, aws):
    """hf_checkpoint moved from s3:// to a path on the file system (/fsx/models/...): nothing is
    staged any more, and the earlier copy goes; a local path that is inside _inputs keeps it."""
    from rltrainer.launch import stage_inputs

    s3 = aws
    put_two_sources(s3)
    run = tmp_path / "checkpoints" / "run-b"
    stage_inputs(config_staging(tmp_path, "s3://my-bucket/datasets/models/A/", "s3://my-bucket/datasets/a.jsonl"),
                 client=s3, log=io.StringIO())
    inputs = run / "_inputs"
    kept_by_path = str(inputs / "data" / "a.jsonl")
    log = io.StringIO()

    class NoS3:
        def __getattr__(self, name):
            raise AssertionError(f"no S3 call expected, got {name}")

    assert stage_inputs(config_staging(tmp_path, "/fsx/models/B", kept_by_path), client=NoS3(), log=log) == (
        "/fsx/models/B", kept_by_path)
    assert not (inputs / "model" / "A").exists()
    assert Path(kept_by_path).read_bytes() == b"{}\n" * 100
    assert log.getvalue() == (
        f"rltrainer: removing {inputs}/model/A (2,001 bytes), staged from s3://my-bucket/datasets/models/A/: "
        "model.hf_checkpoint is now /fsx/models/B, and only the launcher of this run (one RayJob per run name) "
        "stages here\n"
        "rltrainer: removed 1 input(s) this run staged from earlier sources: 2,001 bytes freed\n")
    assert sorted(json.loads((inputs / ".staged.json").read_text())["files"]) == ["data/a.jsonl"]


def test_a_changed_model_source_leaves_room_for_the_saves(tmp_path: Path, aws, monkeypatch):
    """The room check of a run that changed model.hf_checkpoint under the same run_name, on a
    file system sized for one set of weights plus keep_local + 1 saves (here in bytes). Before:
    the earlier weights stayed, the check found too little room with no other run's directory
    to list, warned and trained, and the save would fail with ENOSPC on every retry."""
    import rltrainer.checkpoints.retention as retention_module

    s3 = aws
    put_two_sources(s3)
    root = tmp_path / "checkpoints"
    capacity = 2001 + 2 * 4295 + 1000  # one staged model (2,001 bytes), 2 saves of 0.000004 GiB, slack
    monkeypatch.setattr(retention_module, "disk_free_bytes",
                        lambda path: capacity - retention_module.tree_bytes(root))
    monkeypatch.setenv("RLTRAINER_SAVE_GIB", "0.000004")  # ceil(0.000004 GiB) = 4295 bytes
    miles = tmp_path / "miles"
    miles.mkdir()
    (miles / "train.py").write_text(f"open({str(tmp_path / 'trained')!r}, 'w').close()\n")
    (tmp_path / "prompts.jsonl").write_text("{}\n")

    def launch(model: str) -> str:
        doc = yaml.safe_load(QWEN.read_text())
        doc["checkpoint"].update(local_dir=str(root / "run-b"), s3_uri="s3://my-bucket/checkpoints/run-b/")
        doc["model"]["hf_checkpoint"] = f"s3://my-bucket/datasets/models/{model}/"
        doc["data"]["prompt_data"] = str(tmp_path / "prompts.jsonl")
        cfg = tmp_path / "run.yaml"
        cfg.write_text(yaml.safe_dump(doc))
        err = io.StringIO()
        assert launch_main(["--config", str(cfg), "--miles-dir", str(miles), "--python", sys.executable],
                           out=io.StringIO(), err=err, mounts_file=lustre_mounts(tmp_path)) == 0, err.getvalue()
        return err.getvalue()

    assert "rltrainer: room for the next saves:" in launch("A")
    err = launch("B")
    assert "WARNING" not in err, err
    assert f"rltrainer: removing {root}/run-b/_inputs/model/A (2,001 bytes)" in err
    assert "rltrainer: room for the next saves:" in err


def test_a_missing_bucket_stops_before_training(tmp_path: Path, aws):
    data = yaml.safe_load(QWEN.read_text())
    data["checkpoint"]["local_dir"] = str(tmp_path / "ckpt")
    data["checkpoint"]["s3_uri"] = "s3://no-such-bucket/checkpoints/run1/"
    data["data"]["prompt_data"] = str(tmp_path / "prompts.jsonl")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    miles = tmp_path / "miles"
    miles.mkdir()
    (miles / "train.py").write_text("raise SystemExit('the trainer must not start')\n")
    err = io.StringIO()
    assert launch_main(["--config", str(cfg), "--miles-dir", str(miles), "--python", sys.executable],
                       out=io.StringIO(), err=err, mounts_file=lustre_mounts(tmp_path)) == 4
    assert err.getvalue() == (
        # striping comes first (before anything is written there); no lfs on a test machine
        f"rltrainer: no lfs command here; not striping {tmp_path / 'ckpt'} across storage targets (only "
        "Lustre needs it: single-target ENOSPC, awsome-distributed-ai #1225)\n"
        "rltrainer launch: preparing the run failed, nothing was started: NoSuchBucket: An error occurred "
        "(NoSuchBucket) when calling the ListObjectsV2 operation: The specified bucket does not exist\n"
    )


@pytest.mark.parametrize("other_run", [True, False])
def test_a_file_system_without_room_for_the_next_saves(tmp_path: Path, aws, monkeypatch, other_run):
    """Run B beside run A's kept save on the 1200 GiB file system: before, it trained, failed with
    ENOSPC at its second save, and every retry did the same; it now exits 4 before training
    (rltrainer.checkpoints.space). Without another run's directory, nothing on the file system is
    the user's to delete (overhead, staged inputs, logs): the launcher warns and trains."""
    import rltrainer.checkpoints.retention as retention_module
    import rltrainer.no_retry

    root = tmp_path / "checkpoints"
    root.mkdir()
    if other_run:
        (root / "run-a" / "iter_0000020").mkdir(parents=True)
        (root / "run-a" / "iter_0000020" / "__0_0.distcp").write_bytes(b"a" * 4096)
    data = yaml.safe_load(QWEN.read_text())
    data["checkpoint"].update(local_dir=str(root / "run-b"), s3_uri="s3://my-bucket/checkpoints/run-b/")
    monkeypatch.setenv("RLTRAINER_SAVE_GIB", "399")  # the kit's estimate, on the Ray head
    data["data"]["prompt_data"] = str(tmp_path / "prompts.jsonl")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    miles = tmp_path / "miles"
    miles.mkdir()
    (miles / "train.py").write_text(f"open({str(tmp_path / 'trained')!r}, 'w').close()\n")
    monkeypatch.setattr(retention_module, "disk_free_bytes", lambda path: 745 << 30)
    stopped = []
    monkeypatch.setattr(rltrainer.no_retry, "stop_retries", lambda log, **why: stopped.append(why) or True)
    err = io.StringIO()
    status = launch_main(["--config", str(cfg), "--miles-dir", str(miles), "--python", sys.executable],
                         out=io.StringIO(), err=err, mounts_file=lustre_mounts(tmp_path))
    assert "745.0 GiB free, 798.0 GiB needed (2 save(s) of 399.0 GiB" in err.getvalue()
    if not other_run:
        assert status == 0 and (tmp_path / "trained").exists() and stopped == []
        assert "rltrainer launch: WARNING: the file system of" in err.getvalue()
        return
    assert status == 4
    assert f"  {root / 'run-a'}  0.0 GiB" in err.getvalue()
    assert "rltrainer: running:" not in err.getvalue() and not (tmp_path / "trained").exists()
    assert stopped == [{"reason": "the file system has no room for this run's next saves",
                        "next_step": "free room or grow the file system (above), then launch again"}]
    assert (root / "run-a" / "iter_0000020" / "__0_0.distcp").read_bytes() == b"a" * 4096


def s3_answers(monkeypatch, operation: str, handler) -> None:
    """Clients the launcher creates from now on (boto3's default session) call ``handler`` before
    each ``operation``: a botocore event handler, which raises as S3's answer would."""
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", boto3.Session())
    boto3.DEFAULT_SESSION.events.register(f"before-parameter-build.s3.{operation}", handler)


def read_timeout(**_kwargs):
    from botocore.exceptions import ReadTimeoutError

    raise ReadTimeoutError(endpoint_url="https://my-bucket.s3.us-east-1.amazonaws.com")


def access_denied(**_kwargs):
    from botocore.exceptions import ClientError

    raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                       "ResponseMetadata": {"HTTPStatusCode": 403}}, "PutObject")


def prepare_failure_config(tmp_path: Path) -> tuple[Path, Path]:
    """A run config whose model weights are staged from S3 and whose checkpoint directory is
    tmp_path/ckpt; a Miles checkout whose train.py must never run."""
    data = yaml.safe_load(QWEN.read_text())
    data["checkpoint"]["local_dir"] = str(tmp_path / "ckpt")
    data["checkpoint"]["s3_uri"] = "s3://my-bucket/checkpoints/run1/"
    data["model"]["hf_checkpoint"] = "s3://my-bucket/models/tiny/"
    data["data"]["prompt_data"] = str(tmp_path / "prompts.jsonl")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(data))
    miles = tmp_path / "miles"
    miles.mkdir()
    (miles / "train.py").write_text("raise SystemExit('the trainer must not start')\n")
    return cfg, miles


@pytest.mark.parametrize("failure", ["staging reads time out", "S3 refuses the upload of a local save"])
def test_a_boto3_error_while_preparing_exits_4_with_what_failed(tmp_path: Path, aws, monkeypatch, failure):
    """boto3's own errors (boto3.exceptions.Boto3Error: RetriesExceededError from download_file,
    S3UploadFailedError from upload_file, boto3 1.44.8 s3/transfer.py) are not botocore's.
    Before: they went past the launcher's except, which exited with a traceback (1), not 4."""
    from functools import partial

    import rltrainer.checkpoints
    from ckpt_helpers import make_save

    aws.put_object(Bucket="my-bucket", Key="models/tiny/config.json", Body=b'{"model_type": "qwen3_moe"}')
    cfg, miles = prepare_failure_config(tmp_path)
    # the retry policy's backoff, without the wait (launch builds its policies from this name)
    monkeypatch.setattr(rltrainer.checkpoints, "RetryPolicy", partial(rltrainer.checkpoints.RetryPolicy,
                                                                      sleep=lambda s: None))
    if failure == "staging reads time out":
        s3_answers(monkeypatch, "GetObject", read_timeout)
        expected = ("RetriesExceededError: Max Retries Exceeded (last try: ReadTimeoutError: Read timeout on "
                    'endpoint URL: "https://my-bucket.s3.us-east-1.amazonaws.com")')
    else:
        make_save(tmp_path / "ckpt", 20)  # finished, not in S3 yet: uploaded before training
        s3_answers(monkeypatch, "PutObject", access_denied)
        expected = (f"S3UploadFailedError: Failed to upload {tmp_path}/ckpt/iter_0000020/.metadata to "
                    "my-bucket/checkpoints/run1/iter_0000020/.metadata: An error occurred (AccessDenied) when "
                    "calling the PutObject operation: Access Denied")
    err = io.StringIO()
    assert launch_main(["--config", str(cfg), "--miles-dir", str(miles), "--python", sys.executable],
                       out=io.StringIO(), err=err, mounts_file=lustre_mounts(tmp_path)) == 4
    assert err.getvalue().splitlines()[-1] == (
        f"rltrainer launch: preparing the run failed, nothing was started: {expected}")


def test_check_args_outside_the_image_says_why_it_cannot_check(tmp_path: Path):
    miles = fake_miles(tmp_path)
    err = io.StringIO()
    code = launch_main(["--config", str(config_without_model_args(tmp_path)), "--dry-run", "--check-args",
                        "--miles-dir", str(miles), "--python", sys.executable], out=io.StringIO(), err=err)
    assert code == 2
    assert err.getvalue() == ("rltrainer launch: cannot build Miles' argument parser (No module named 'megatron'); "
                              "run this inside the trainer image\n")


@pytest.mark.parametrize("rollout,entry,mode_flags", [
    ({}, "train.py", ["--colocate"]),
    ({"placement": "disaggregated", "nodes": 1}, "train.py", ["--rollout-num-gpus", "8"]),
    ({"placement": "disaggregated", "nodes": 1, "overlap": "batch", "off_policy_steps": 2}, "train_async.py",
     ["--rollout-num-gpus", "8", "--update-weights-interval", "2"]),
    ({"placement": "disaggregated", "nodes": 1, "overlap": "stream", "off_policy_steps": 3}, "train_async.py",
     ["--rollout-num-gpus", "8", "--fully-async", "--max-weight-staleness", "3", "--pause-generation-mode",
      "in_place"]),
])
def test_each_rollout_mode_runs_the_miles_entry_point_with_its_flags(rollout, entry, mode_flags):
    """Miles v0.1.0: train_async.py for an overlapped rollout (train.py:23 refuses --fully-async),
    --colocate or a pool after the training GPUs (miles/ray/placement_group.py:92-105)."""
    data = yaml.safe_load(QWEN.read_text())  # 2 nodes x 8 GPUs
    data["parallel"]["rollout"].update(rollout)
    cfg = parse_run_config(data)
    argv = build_train_command(cfg, hf_checkpoint="/m", prompt_data="/d.jsonl").argv
    assert argv[1] == f"/root/miles/{entry}"
    assert argv[2:8] == ["--actor-num-nodes", "2" if not rollout else "1", "--actor-num-gpus-per-node", "8",
                         "--num-gpus-per-node", "8"]
    assert argv[8:8 + len(mode_flags)] == mode_flags
    # engines on GPUs of their own keep SGLang's default memory share; colocated ones the recipe's 0.7
    assert ("--sglang-mem-fraction-static" in argv) == (not rollout)
    resumed = build_train_command(cfg, hf_checkpoint="/m", prompt_data="/d.jsonl", start_rollout_id=5).argv
    assert resumed[1:4] == ["-m", "rltrainer.miles_resume", f"/root/miles/{entry}"]
