"""``rltrainer launch``: from the run config to a running Miles job.

Steps, in order:

1. read and validate the run config (all problems at once, then exit 2), and take the
   model-architecture arguments from ``model.megatron_args`` or, when that is empty,
   from Miles' own ``scripts/models/<model.name>.sh`` in the image;
2. stage inputs given as s3:// URIs (Hugging Face weights, the prompt file) under
   ``<checkpoint.local_dir>/_inputs/`` -- on a multi-node run that directory must be on
   storage every node mounts, like the checkpoint directory itself (Miles' multi-node
   notes: model, data and checkpoints on a path all nodes can read);
3. restore the newest complete checkpoint from S3 (``checkpoints.prepare_resume``);
4. start the checkpoint watcher, run the Miles command, forward SIGTERM/SIGINT to it;
5. when it exits, upload what finished since the last scan and exit with its code.

``--dry-run`` does none of 2-5: it prints the command and environment that would run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Sequence, TextIO

from .config import ConfigError, RunConfig, expert_count_problems, load_run_config, parse_s3_uri
from .miles import MILES_DIR, ModelArgsError, TrainCommand, build_train_command, resolve_model_args

DEFAULT_CONFIG = "/etc/rltrainer/run.yaml"
EXIT_CONFIG = 2
EXIT_UPLOAD = 3  # training succeeded but a finished save could not be uploaded
EXIT_PREPARE = 4  # staging inputs or restoring the checkpoint failed; training never started


def staged_path(cfg: RunConfig, uri: str, kind: str) -> str:
    """Local path an s3:// input is staged to (the URI itself if it is already local)."""
    if not uri.startswith("s3://"):
        return uri
    _bucket, key = parse_s3_uri(uri)
    name = PurePosixPath(key.rstrip("/")).name or "input"
    return str(PurePosixPath(cfg.checkpoint.local_dir) / "_inputs" / kind / name)


def stage_inputs(cfg: RunConfig, client=None, log: TextIO | None = None) -> tuple[str, str]:
    """Download s3:// inputs once; return the local (hf_checkpoint, prompt_data) paths."""
    from .checkpoints import Progress, RetryPolicy

    out = log or sys.stderr
    hf = staged_path(cfg, cfg.model.hf_checkpoint, "model")
    data = staged_path(cfg, cfg.data.prompt_data, "data")
    if not (cfg.model.hf_checkpoint.startswith("s3://") or cfg.data.prompt_data.startswith("s3://")):
        return hf, data
    if client is None:
        import boto3

        client = boto3.client("s3")
    retry = RetryPolicy(log=out)

    def fetch(bucket: str, key: str, dest: Path) -> None:
        if dest.is_file():
            head = retry.call(f"stat s3://{bucket}/{key}", lambda: client.head_object(Bucket=bucket, Key=key))
            if head["ContentLength"] == dest.stat().st_size:
                return  # staged by an earlier attempt of this run
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.partial")
        retry.call(f"download s3://{bucket}/{key}", lambda: client.download_file(bucket, key, str(tmp)))
        os.replace(tmp, dest)

    if cfg.model.hf_checkpoint.startswith("s3://"):
        bucket, prefix = parse_s3_uri(cfg.model.hf_checkpoint)
        prefix = prefix if prefix.endswith("/") else prefix + "/"
        objects = []
        token = None
        while True:
            kwargs = {"Bucket": bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = retry.call(f"list s3://{bucket}/{prefix}", lambda kw=kwargs: client.list_objects_v2(**kw))
            objects += [o for o in page.get("Contents", []) if not o["Key"].endswith("/")]
            if not page.get("IsTruncated"):
                break
            token = page.get("NextContinuationToken")
        if not objects:
            raise FileNotFoundError(f"model.hf_checkpoint {cfg.model.hf_checkpoint} holds no objects")
        progress = Progress(f"stage {cfg.model.hf_checkpoint}", sum(o["Size"] for o in objects), out)
        for obj in objects:
            fetch(bucket, obj["Key"], Path(hf) / obj["Key"][len(prefix):])
            progress(obj["Size"])
        progress.finish()
    if cfg.data.prompt_data.startswith("s3://"):
        bucket, key = parse_s3_uri(cfg.data.prompt_data)
        fetch(bucket, key, Path(data))
    return hf, data


def _print_plan(cfg: RunConfig, cmd: TrainCommand, out: TextIO, model_args_source: str) -> None:
    print(f"# rltrainer launch (dry run): {cfg.run_name}", file=out)
    print(f"# model {cfg.model.name}; expert-parallel backend {cfg.expert_parallel.backend}; "
          f"{cfg.parallel.nodes} x {cfg.parallel.gpus_per_node} GPUs", file=out)
    print(f"# model arguments from {model_args_source}", file=out)
    for label, uri, kind in (("model.hf_checkpoint", cfg.model.hf_checkpoint, "model"),
                             ("data.prompt_data", cfg.data.prompt_data, "data")):
        if uri.startswith("s3://"):
            print(f"# would stage {label} {uri} -> {staged_path(cfg, uri, kind)}", file=out)
    print(f"# would restore the newest complete checkpoint from {cfg.checkpoint.s3_uri} "
          f"into {cfg.checkpoint.local_dir}, then upload every new save", file=out)
    print("# environment:", file=out)
    for key in sorted(cmd.env):
        print(f"export {key}={cmd.env[key]}", file=out)
    print(f"# working directory: {cmd.cwd}", file=out)
    print("# command:", file=out)
    print(cmd.shell(), file=out)


def run_training(cmd: TrainCommand, watcher=None) -> int:
    """Run the command in its own process group, forwarding SIGTERM/SIGINT to it."""
    env = dict(os.environ)
    for key, value in cmd.env.items():
        if key == "PYTHONPATH" and env.get("PYTHONPATH"):
            value = f"{value}{os.pathsep}{env['PYTHONPATH']}"
        env[key] = value
    proc = subprocess.Popen(cmd.argv, env=env, cwd=cmd.cwd if Path(cmd.cwd).is_dir() else None, start_new_session=True)

    def forward(signum, _frame):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if watcher is not None:
            watcher.start()
        return proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def build_parser(prog: str = "rltrainer launch") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Validate the run config, restore the newest complete S3 checkpoint, run Miles "
        "(SGLang rollout + Megatron training on Ray) and upload every checkpoint it saves.",
    )
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"run config YAML (default {DEFAULT_CONFIG})")
    p.add_argument("--dry-run", action="store_true", help="print the command and environment; run nothing, touch no S3")
    p.add_argument("--miles-dir", default=MILES_DIR, help=f"Miles checkout with train.py (default {MILES_DIR})")
    p.add_argument("--ray-address", default=None,
                   help="submit with `ray job submit --address` to this dashboard URL instead of running train.py "
                        "directly (leave unset under a KubeRay RayJob, whose entrypoint already is the Ray job)")
    p.add_argument("--python", default="python3", help="interpreter that runs train.py (default python3)")
    p.add_argument("--upload-interval", type=float, default=30.0, metavar="SECONDS",
                   help="how often to look for finished saves to upload (default 30)")
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Launch a Miles GRPO run from the run config."""
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        cfg = load_run_config(args.config)
    except ConfigError as exc:
        print(str(exc), file=err)
        return EXIT_CONFIG

    try:
        model_args, model_args_source = resolve_model_args(cfg, args.miles_dir)
    except ModelArgsError as exc:
        if not args.dry_run:
            print(f"rltrainer launch: {exc}", file=err)
            return EXIT_CONFIG
        # A dry run away from the image (no Miles checkout) still shows the rest.
        model_args = (f"<MODEL_ARGS of {args.miles_dir}/scripts/models/{cfg.model.name}.sh>",)
        model_args_source = f"unresolved here: {exc}"
    problems = expert_count_problems(cfg.parallel.training, model_args, model_args_source)
    if problems:
        print(str(ConfigError(problems, args.config)), file=err)
        return EXIT_CONFIG

    if args.dry_run:
        cmd = build_train_command(
            cfg,
            hf_checkpoint=staged_path(cfg, cfg.model.hf_checkpoint, "model"),
            prompt_data=staged_path(cfg, cfg.data.prompt_data, "data"),
            miles_dir=args.miles_dir,
            python=args.python,
            ray_address=args.ray_address,
            model_args=model_args,
        )
        _print_plan(cfg, cmd, out, model_args_source)
        return 0

    from .checkpoints import CheckpointWatcher, RetryPolicy, S3CheckpointStore, prepare_resume

    from botocore.exceptions import BotoCoreError, ClientError

    try:
        hf, data = stage_inputs(cfg, log=err)
        store = S3CheckpointStore(cfg.checkpoint.s3_uri, retry=RetryPolicy(log=err), progress_stream=err)
        resume = prepare_resume(store, cfg.checkpoint.local_dir, log=err)
    except (ClientError, BotoCoreError, OSError, RuntimeError, ValueError) as exc:
        # Before training nothing is lost yet: say what failed instead of a traceback.
        print(f"rltrainer launch: preparing the run failed, nothing was started: {type(exc).__name__}: {exc}",
              file=err, flush=True)
        return EXIT_PREPARE
    print(f"rltrainer: start point: {resume.source}"
          + (f" iteration {resume.iteration}" if resume.iteration is not None else ""), file=err, flush=True)
    cmd = build_train_command(cfg, hf_checkpoint=hf, prompt_data=data, miles_dir=args.miles_dir,
                              python=args.python, ray_address=args.ray_address, model_args=model_args)
    print(f"rltrainer: model arguments from {model_args_source}", file=err, flush=True)
    print("rltrainer: running:\n" + cmd.shell(), file=err, flush=True)
    watcher = CheckpointWatcher(store, cfg.checkpoint.local_dir, interval_s=args.upload_interval, log=err)
    code = run_training(cmd, watcher)
    try:
        watcher.stop(final_scan=True)
        missing = watcher.pending()
    except Exception as exc:  # noqa: BLE001 - report, but keep the trainer's exit code
        print(f"rltrainer: final checkpoint scan failed: {exc}", file=err, flush=True)
        missing = ["?"]
    if missing:
        print(f"rltrainer: finished saves not in S3 after the final upload: {missing}; "
              f"they remain in {cfg.checkpoint.local_dir}", file=err, flush=True)
        code = code or EXIT_UPLOAD
    return code


if __name__ == "__main__":  # python -m rltrainer.launch
    sys.exit(main())
