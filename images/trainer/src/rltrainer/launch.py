"""``rltrainer launch``: from the run config to a running Miles job.

Steps, in order:

1. read and validate the run config (all problems at once, then exit 2), and take the
   model-architecture arguments from ``model.megatron_args`` or, when that is empty,
   from ``model_args()`` of Miles' own ``scripts/models/<name>.py`` in the image;
   refuse (exit 2) a config whose expert-parallel backend is not the one the image was
   built for, and a multi-node run whose ``checkpoint.local_dir`` is not on a shared
   filesystem (every node must see the saves the watcher uploads);
2. stage inputs given as s3:// URIs (Hugging Face weights, the prompt file) under
   ``<checkpoint.local_dir>/_inputs/``, after deleting what this run staged there for earlier
   sources (``staging.remove_earlier_inputs``) -- on a multi-node run that directory must be on
   storage every node mounts, like the checkpoint directory itself (Miles' multi-node
   notes: model, data and checkpoints on a path all nodes can read);
3. stripe the checkpoint directory across Lustre's storage targets (``checkpoints.stripe``),
   restore the newest complete checkpoint from S3 (``checkpoints.prepare_resume``) and delete
   local saves beyond ``checkpoint.keep_local`` that S3 holds (``checkpoints.retention``); a
   run whose saves already reach its last rollout trains nothing and only uploads; one whose file
   system lacks room for its next saves (other runs' saves on it) exits 4 (``checkpoints.space``);
4. start the checkpoint watcher (which applies the same retention after every upload), run the
   Miles command, forward SIGTERM/SIGINT to it; on a Capacity Block, save, upload and stop
   before EKS drains the block's nodes (``rltrainer.reservation``; a run that cannot reach one
   save in S3 does not start); log how long the attempt took to reach its first rollout
   (``rltrainer.startup``, what ``training.startup_minutes`` estimates);
5. when it exits, upload what finished since the last scan and exit with its code
   (``EXIT_RESERVATION_END`` after a stop for the block's end), as a shell would for a signal
   (128 + N) and 1 for a code the launcher gives its own meaning (``trainer_exit_code``: a
   trainer's 5 is not the block's end). A launcher that fails while the trainer runs stops the
   trainer's process group before it exits, so nothing trains on unwatched. A run that finished whose final
   upload fails retries the upload with backoff (``--final-upload-attempts``), not the job: if it
   still fails, KubeRay's retries are stopped (each would start a fresh GPU cluster only to
   upload), and the exact command that uploads the save is printed.
   After a stop signal the trainer gets ``STOP_GRACE_S``, then SIGKILL, and the last uploads fit
   ``FINAL_UPLOAD_BUDGET_S``: the newest save that can finish first (``rltrainer.final_upload``).

Before step 2, a start past ``MAX_STARTS_PER_ATTEMPT`` within one KubeRay attempt (a Ray head
whose container restarts, resubmitted by KubeRay's submitter) exits 4 (``rltrainer.attempts``).

``--dry-run`` does none of 2-5: it prints the command and environment that would run.
``--check-args`` (with or without ``--dry-run``) also parses the Miles arguments with
Miles' own parser (Megatron + Miles + SGLang definitions) and exits 2 on any mismatch;
``--check-imports`` imports the driver's whole import chain (``rltrainer.driver_imports``) and
exits 2 naming any module that fails. The image build runs both.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence, TextIO

from . import attempts, final_upload, metrics, reservation, startup
from .final_upload import finish_stop as _finish_stop, kill_group as _kill_group, start_stop as _start_stop
from .contract import (
    EXIT_CONFIG,
    EXIT_PREPARE,
    EXIT_RESERVATION_END,
    EXIT_UPLOAD,
    IMAGE_BACKEND_ENV,
    RUN_CONFIG_PATH,
    ConfigError,
    RunConfig,
    engine_heads_problems,
    expert_count_problems,
    pipeline_split_problems,
    load_run_config,
)
from .miles import (
    MILES_DIR,
    ModelArgsError,
    TrainCommand,
    argument_errors,
    build_train_command,
    miles_argument_parser,
    miles_train_args,
    resolve_model_args,
    saves_data_cursor,
)
from .mounts import MOUNTS_FILE, on_shared_filesystem, shared_storage_problem
from .staging import stage_inputs, staged_path

DEFAULT_CONFIG = RUN_CONFIG_PATH  # where the kit's RL job mounts it
# The exit codes (rltrainer.contract, which the kit's `rlkit status` reads too): EXIT_CONFIG,
# EXIT_UPLOAD, EXIT_PREPARE, EXIT_RESERVATION_END (stopped for the Capacity Block's end).


def clock() -> datetime:
    """Now, in UTC (tests replace it to run a reservation's end in a moment)."""
    return datetime.now(timezone.utc)


sleep = time.sleep  # the supervising loop's pause (tests replace it with the fake clock's)


def _pause(seconds: float) -> None:
    sleep(seconds)  # looked up when called, so a test's replacement of ``sleep`` takes effect


def image_backend_problem(cfg: RunConfig, image_backend: str | None) -> str | None:
    """Why this image cannot run ``expert_parallel.backend`` (None when it can, or outside the image)."""
    if not image_backend or image_backend == cfg.expert_parallel.backend:
        return None
    return (
        f"expert_parallel.backend = {json.dumps(cfg.expert_parallel.backend)}: this image was built for the "
        f"{image_backend} expert-parallel backend ({IMAGE_BACKEND_ENV}={image_backend}), and each backend needs its "
        "own build (EFA installer, NVSHMEM or NCCL, DeepEP). Fix: run the image tagged for "
        f"{cfg.expert_parallel.backend} (<tag>-{cfg.expert_parallel.backend}), or set expert_parallel.backend to "
        f"{image_backend}"
    )


def check_miles_arguments(cfg: RunConfig, model_args: tuple[str, ...], miles_dir: str) -> str | None:
    """Parse the Miles arguments with Miles' own parser; the error it reports, or None."""
    args = miles_train_args(cfg, hf_checkpoint="/check/hf", prompt_data="/check/prompts.jsonl", model_args=model_args)
    saved_path = list(sys.path)
    sys.path[:0] = [miles_dir]
    try:
        parser = miles_argument_parser(args)
    except ImportError as exc:
        return f"cannot build Miles' argument parser ({exc}); run this inside the trainer image"
    finally:
        sys.path[:] = saved_path
    error = argument_errors(parser, args)
    return None if error is None else f"Miles' argument parser refuses the command: {error}"


def _mode_note(cfg: RunConfig) -> str:
    """How rollout runs, when it is not the recipe's colocated on-policy loop."""
    ro = cfg.parallel.rollout
    if ro is None or (ro.placement == "colocated" and ro.overlap == "none"):
        return ""
    note = f" ({cfg.parallel.training_nodes} training, {ro.nodes} rollout"
    if ro.overlap != "none":
        note += f"; {ro.overlap} overlap, up to {ro.off_policy_steps} step(s) off-policy, {ro.entry_point}"
    return note + ")"


def _print_plan(cfg: RunConfig, cmd: TrainCommand, out: TextIO, model_args_source: str) -> None:
    print(f"# rltrainer launch (dry run): {cfg.run_name}", file=out)
    print(f"# model {cfg.model.name}; expert-parallel backend {cfg.expert_parallel.backend}; "
          f"{cfg.parallel.nodes} x {cfg.parallel.gpus_per_node} GPUs{_mode_note(cfg)}", file=out)
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


def run_training(cmd: TrainCommand, watcher=None, metrics_run: str | None = None,
                 wait: Callable[[subprocess.Popen], int] | None = None, metrics_ledger: str | None = None,
                 log: TextIO | None = None, on_metric: Callable | None = None,
                 stopped: final_upload.StopSignal | None = None) -> int:
    """Run the command in its own process group, forwarding SIGTERM/SIGINT to it. A command with a
    ``stop_argv`` (a submitted Ray job, which the signal does not reach) is also stopped with it, and
    this returns once that stop has finished (or ``STOP_GRACE_S`` passed). A group still there
    ``STOP_GRACE_S`` after the signal is killed: the final upload's budget runs from the signal
    (``rltrainer.final_upload``), whose time it is noted in ``stopped``.

    ``wait`` replaces ``proc.wait()`` (the reservation guard's supervising loop).

    With ``metrics_run``, its stdout and stderr are relayed line by line and Miles' metric lines
    are also written as CloudWatch EMF lines for that run name (``rltrainer.metrics``), and each
    is shown to ``on_metric`` (``rltrainer.startup``)."""
    env = dict(os.environ)
    for key, value in cmd.env.items():
        if key == "PYTHONPATH" and env.get("PYTHONPATH"):
            value = f"{value}{os.pathsep}{env['PYTHONPATH']}"
        env[key] = value
    pipe = subprocess.PIPE if metrics_run else None
    proc = subprocess.Popen(cmd.argv, env=env, cwd=cmd.cwd if Path(cmd.cwd).is_dir() else None, start_new_session=True,
                            stdout=pipe, stderr=pipe)
    relays = [] if not metrics_run else metrics.start_relays(proc, run=metrics_run, ledger_path=metrics_ledger,
                                                             on_metric=on_metric)
    stopping: list[subprocess.Popen | None] = []
    killers: list[threading.Timer] = []

    def forward(signum, _frame):
        if stopped is not None:
            stopped.receive(signum)
        if cmd.stop_argv and not stopping:
            # Started, not waited for: this runs in the main thread, which the wait below is in.
            stopping.append(_start_stop(cmd.stop_argv, log))
        if not killers:
            killers.append(threading.Timer(STOP_GRACE_S, _kill_group, (proc, log)))
            killers[0].daemon = True
            killers[0].start()
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            if watcher is not None:
                watcher.start()
            code = proc.wait() if wait is None else wait(proc)
        except BaseException:
            # The group has its own session: nothing else stops it when the launcher fails, and
            # it would train on with no uploads and no reservation guard.
            print("rltrainer: the launcher failed while the trainer ran; stopping the trainer first",
                  file=log or sys.stderr, flush=True)
            _stop_group(proc, STOP_GRACE_S, stop_argv=cmd.stop_argv if not stopping else (), log=log)
            raise
        for thread in relays:
            thread.join()
        return code
    finally:
        for killer in killers:
            killer.cancel()
        for s, handler in previous.items():
            signal.signal(s, handler)
        # The stop started with the signal: its STOP_GRACE_S counts from then, not from the trainer's end.
        grace = STOP_GRACE_S if stopped is None or stopped.received_at is None else max(
            0.0, STOP_GRACE_S - stopped.used())
        for stopper in stopping:  # the pod may go when this returns: let the stop reach Ray first
            _finish_stop(stopper, cmd.stop_argv, grace, log)


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
    p.add_argument("--final-upload-attempts", type=int, default=6, metavar="N",
                   help="after a finished run, try the upload of its remaining saves up to N times (default 6)")
    p.add_argument("--final-upload-delay", type=float, default=30.0, metavar="SECONDS",
                   help="first wait between those attempts; it doubles, up to 300 s (default 30)")
    p.add_argument("--check-args", action="store_true",
                   help="parse the Miles arguments with Miles' own parser (Megatron, Miles and SGLang definitions; "
                        "needs megatron and miles importable, as in the image) and exit 2 on any mismatch")
    p.add_argument("--check-imports", action="store_true",
                   help="import every module the driver process imports (launcher, uploader, Miles train.py, "
                        "the Megatron actor, DeepEP on DeepEP images) and exit 2 naming any that fails")
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None, *,
         image_backend: str | None = None, mounts_file: str = MOUNTS_FILE,
         sleep: Callable[[float], None] | None = None) -> int:
    """Launch a Miles GRPO run from the run config.

    ``sleep`` pauses the upload retries and the reservation guard's loop; default: this module's
    ``sleep`` at the time of the call (tests replace either with a fake clock's).

    ``image_backend`` is the expert-parallel backend the image was built for; the console
    entry reads it from ``RLTRAINER_IMAGE_EP_BACKEND``, which the Dockerfile sets. A
    configuration error (exit 2) fails every attempt alike, so inside the kit's RayJob it also
    stops KubeRay's retries (``no_retry``).
    """
    out = out or sys.stdout
    err = err or sys.stderr
    code = _launch(argv, out, err, image_backend=image_backend, mounts_file=mounts_file,
                   sleep=sleep or _pause)
    if code == EXIT_CONFIG:
        from .no_retry import stop_retries

        stop_retries(err)
    elif code == EXIT_RESERVATION_END:
        from .no_retry import stop_retries

        # A retry would start a new Ray cluster on nodes that are being drained, or wait for them.
        stop_retries(err, reason="stopped for the Capacity Block's end",
                     next_step="launch again on the next reservation; it resumes from the newest save in S3")
    return code


def _launch(argv: Sequence[str] | None, out: TextIO, err: TextIO, *,
            image_backend: str | None, mounts_file: str, sleep: Callable[[float], None]) -> int:
    args = build_parser().parse_args(argv)
    if image_backend is None:
        image_backend = os.environ.get(IMAGE_BACKEND_ENV)
    try:
        cfg = load_run_config(args.config)
    except ConfigError as exc:
        print(str(exc), file=err)
        return EXIT_CONFIG
    refusal = image_backend_problem(cfg, image_backend)
    if refusal is not None:
        print(f"rltrainer launch: {refusal}.", file=err)
        return EXIT_CONFIG

    try:
        model_args, model_args_source = resolve_model_args(cfg, args.miles_dir, args.python)
    except ModelArgsError as exc:
        if not args.dry_run or args.check_args:
            print(f"rltrainer launch: {exc}", file=err)
            return EXIT_CONFIG
        # A dry run away from the image (no Miles checkout) still shows the rest.
        model_args = (f"<model_args() of {args.miles_dir}/scripts/models/<script for {cfg.model.name}>.py>",)
        model_args_source = f"unresolved here: {exc}"
    problems = expert_count_problems(cfg.parallel.training, model_args, model_args_source)
    problems += pipeline_split_problems(cfg.parallel.training, model_args, model_args_source)
    if cfg.parallel.rollout is not None:
        problems += engine_heads_problems(cfg.parallel.rollout, model_args, model_args_source)
    if problems:
        print(str(ConfigError(problems, args.config)), file=err)
        return EXIT_CONFIG
    if args.check_args:
        mismatch = check_miles_arguments(cfg, model_args, args.miles_dir)
        if mismatch is not None:
            print(f"rltrainer launch: {mismatch}", file=err)
            return EXIT_CONFIG
        print("rltrainer launch: Miles' own parser accepts every argument", file=err, flush=True)
    if args.check_imports:
        from .driver_imports import cuda_stub_env, driver_modules, import_chain, import_problems

        env, note = cuda_stub_env(dict(os.environ))
        if note:
            print(f"rltrainer launch: {note}", file=err)
        broken = import_problems(import_chain(driver_modules(cfg.expert_parallel.backend), args.miles_dir,
                                              python=args.python, env=env))
        if broken is not None:
            print(f"rltrainer launch: {broken}", file=err)
            return EXIT_CONFIG
        print("rltrainer launch: the driver's whole import chain imports", file=err, flush=True)

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
        storage = shared_storage_problem(cfg, mounts_file)
        if storage is not None:
            print(f"# a real launch here would refuse: {storage}", file=out)
        return 0

    storage = shared_storage_problem(cfg, mounts_file)
    if storage is not None:
        print(f"rltrainer launch: {storage}.", file=err)
        return EXIT_CONFIG

    check = attempts.count_start(cfg.checkpoint.local_dir, err)  # a head crash loop: attempts.py
    if check.refusal is not None:
        print(f"rltrainer launch: {check.refusal}.", file=err, flush=True)
        return EXIT_PREPARE
    started = startup.StartupClock.begin(  # what training.startup_minutes estimates
        err, clock, request=None if check.rayjob is None else (lambda _name: check.rayjob))
    guard = None
    window = reservation.learn_window(os.environ, log=err)
    if window is not None:
        guard = reservation.EndGuard.from_env(window, os.environ, err,
                                              reread=reservation.end_reader(window.reservation_id))
        late = guard.too_late_to_start(clock())
        if late is not None:
            print(f"rltrainer launch: {late}.", file=err, flush=True)
            _upload_finished_saves(cfg, model_args, args, err)
            return EXIT_RESERVATION_END
        print(f"rltrainer: on a Capacity Block: {guard.arithmetic(clock())}; a save is asked for by "
              f"{guard.save_by:%Y-%m-%d %H:%M} UTC at the latest", file=err, flush=True)

    from .checkpoints import (
        CheckpointWatcher,
        Retention,
        check_room,
        local_iterations,
        prepare_resume,
        stripe_across_targets,
    )

    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError

    from .checkpoints.retry import describe

    retention = Retention(keep_local=cfg.checkpoint.keep_local, keep_s3=cfg.checkpoint.keep_s3)
    try:
        stripe_across_targets(cfg.checkpoint.local_dir, err)
        hf, data = stage_inputs(cfg, log=err)
        store = _checkpoint_store(cfg, model_args, err)
        resume = prepare_resume(store, cfg.checkpoint.local_dir, log=err, retention=retention)
    except (ClientError, BotoCoreError, Boto3Error, OSError, RuntimeError, ValueError) as exc:
        # Before training nothing is lost yet: say what failed instead of a traceback. Boto3Error:
        # boto3's transfer methods raise their own errors, not botocore's (boto3 1.44.8
        # s3/transfer.py: RetriesExceededError from download_file, S3UploadFailedError from upload_file).
        print(f"rltrainer launch: preparing the run failed, nothing was started: {describe(exc)}",
              file=err, flush=True)
        return EXIT_PREPARE
    print(f"rltrainer: start point: {resume.source}"
          + (f" iteration {resume.iteration}" if resume.iteration is not None else ""), file=err, flush=True)
    if guard is not None and (late := guard.too_late_to_start(clock())) is not None:
        # Staging the inputs and restoring took the block's time (a retry late in the block);
        # the resume has uploaded the local saves already.
        print(f"rltrainer launch: after staging and restoring, {late}.", file=err, flush=True)
        return EXIT_RESERVATION_END
    watcher = CheckpointWatcher(store, cfg.checkpoint.local_dir, interval_s=args.upload_interval, log=err,
                                retention=retention)
    if resume.start_rollout_id is not None and resume.start_rollout_id >= cfg.grpo.num_rollout:
        # Miles trains rollouts start..num_rollout-1 and always saves the last one: this run is
        # done (e.g. an attempt whose final upload failed). Upload what is left; train nothing.
        print(f"rltrainer: the run is finished (iteration {resume.iteration} is its last rollout, "
              f"grpo.num_rollout = {cfg.grpo.num_rollout}); not training again, only uploading its saves",
              file=err, flush=True)
        return _finish_uploads(watcher, cfg, 0, args, err, sleep, scan_first=True, mounts_file=mounts_file)
    if not check_room(cfg.checkpoint, err):  # other runs' saves may fill the file system (checkpoints.space)
        from .no_retry import stop_retries

        stop_retries(err, reason="the file system has no room for this run's next saves",
                     next_step="free room or grow the file system (above), then launch again")
        return EXIT_PREPARE
    cmd = build_train_command(cfg, hf_checkpoint=hf, prompt_data=data, miles_dir=args.miles_dir,
                              python=args.python, ray_address=args.ray_address, model_args=model_args,
                              start_rollout_id=resume.start_rollout_id)
    print(f"rltrainer: model arguments from {model_args_source}", file=err, flush=True)
    print("rltrainer: running:\n" + cmd.shell(), file=err, flush=True)
    local = cfg.checkpoint.local_dir
    wait = None
    if guard is not None:
        try:
            reservation.clear_trigger(local)  # a request left by an earlier attempt is not this run's
        except OSError as exc:
            print(f"rltrainer launch: could not remove the save request {reservation.save_trigger_path(local)} left "
                  f"by an earlier attempt ({exc}); Miles would save and the guard stop at once. Nothing was "
                  "started; fix the file's permissions or remove it, then launch again", file=err, flush=True)
            return EXIT_PREPARE

        def supervised(proc: subprocess.Popen) -> int:
            return reservation.supervise(
                proc, guard, clock=clock, saves=lambda: local_iterations(local),
                uploaded=lambda: list(watcher.uploaded), request_save=lambda: reservation.write_trigger(local),
                stop=lambda: _stop_group(proc, stop_argv=cmd.stop_argv, log=err), sleep=lambda s: sleep(s),
                poll_s=args.upload_interval)
        wait = supervised
    stopped = final_upload.StopSignal()
    code = run_training(cmd, watcher, metrics_run=cfg.run_name or "unnamed", wait=wait,
                        metrics_ledger=str(Path(cfg.checkpoint.local_dir) / metrics.LEDGER_FILE), log=err,
                        on_metric=started.on_metric, stopped=stopped)
    code = trainer_exit_code(code, err)
    code = _finish_uploads(watcher, cfg, code, args, err, sleep, mounts_file=mounts_file, stopped=stopped)
    if guard is not None and guard.state == reservation.STOP:
        try:
            reservation.clear_trigger(local)
        except OSError as exc:  # the exit code must still say the block's end: no retries onto drained nodes
            print(f"rltrainer: could not remove the save request {reservation.save_trigger_path(local)}: {exc}; "
                  "the next attempt removes it before it trains", file=err, flush=True)
        print(f"rltrainer: stopped before the Capacity Block ends; newest save in S3: "
              f"{guard.stopped_with if guard.stopped_with is not None and guard.stopped_with >= 0 else 'none'}",
              file=err, flush=True)
        return EXIT_RESERVATION_END
    return code


LAUNCHER_CODES = (EXIT_CONFIG, EXIT_UPLOAD, EXIT_PREPARE, EXIT_RESERVATION_END)


def trainer_exit_code(code: int, err: TextIO) -> int:
    """The launcher's exit code for the trainer's: 128 + N for a death by signal N, as a shell
    says it (``sys.exit(-15)`` would exit 241); 1 for a code the launcher gives its own meaning
    (``LAUNCHER_CODES``: ``main`` stops KubeRay's retries on 2 and 5, `rlkit status` reads each),
    which only the launcher's own decision may carry."""
    if code < 0:
        return 128 - code
    if code in LAUNCHER_CODES:
        print(f"rltrainer: the trainer exited {code}, a code the launcher keeps for its own decisions "
              "(rltrainer.contract); exiting 1 instead", file=err, flush=True)
        return 1
    return code


def _checkpoint_store(cfg: RunConfig, model_args, err: TextIO):
    from .checkpoints import RetryPolicy, S3CheckpointStore

    # Miles writes a data cursor with every save unless the global dataset is off.
    return S3CheckpointStore(cfg.checkpoint.s3_uri, retry=RetryPolicy(log=err), progress_stream=err,
                             require_data_cursor=saves_data_cursor(model_args))


def _upload_finished_saves(cfg: RunConfig, model_args, args, err: TextIO) -> None:
    """Too late to train is not too late to upload: a save the killed attempt finished but did
    not upload needs no GPU, and a file system deleted with the cluster would take it along."""
    from .checkpoints import CheckpointWatcher

    try:
        watcher = CheckpointWatcher(_checkpoint_store(cfg, model_args, err), cfg.checkpoint.local_dir,
                                    interval_s=args.upload_interval, log=err)
    except Exception as exc:  # noqa: BLE001 - the exit code is the reservation's either way
        print(f"rltrainer: could not upload the saves left on {cfg.checkpoint.local_dir}: {exc}",
              file=err, flush=True)
        return
    missing = final_upload.final_scan(watcher, err, stop=False)
    if missing:
        print(f"rltrainer: saves {missing} are still only in {cfg.checkpoint.local_dir}", file=err, flush=True)


def _finish_uploads(watcher, cfg: RunConfig, code: int, args, err: TextIO, sleep: Callable[[float], None],
                    scan_first: bool = False, mounts_file: str = MOUNTS_FILE,
                    stopped: final_upload.StopSignal | None = None) -> int:
    """The exit path: upload the last saves; a finished run retries the upload, not the job.
    After a stop signal, only what fits the signal's budget (``rltrainer.final_upload``)."""
    # Saves on the shared file system outlive this pod: after a failed run KubeRay's retry has
    # training left to do anyway, and its resume uploads the local save first, so only a run that
    # trained to the end retries here. Saves on this pod's own disk go with it: always retried.
    kept = on_shared_filesystem(cfg.checkpoint.local_dir, mounts_file)
    if stopped is not None and stopped.received_at is not None:
        outcome = final_upload.upload_within_budget(watcher, stopped, err, kept=kept)
        code = code if not outcome.left else code or EXIT_UPLOAD
        if outcome.cut_short is not None:
            final_upload.exit_now(code, err)
        return code
    missing = final_upload.final_scan(watcher, err, stop=not scan_first)
    attempt, delay = 1, args.final_upload_delay
    while missing and (code == 0 or not kept) and attempt < args.final_upload_attempts:
        print(f"rltrainer: the run finished but saves {missing} are not in S3 yet; upload attempt "
              f"{attempt + 1}/{args.final_upload_attempts} in {delay:g}s", file=err, flush=True)
        sleep(delay)
        missing = final_upload.final_scan(watcher, err, stop=False)
        attempt, delay = attempt + 1, min(300.0, delay * 2)
    if not missing:
        return code
    print(f"rltrainer: finished saves not in S3 after the final upload: {missing}; " + (
        f"they remain in {cfg.checkpoint.local_dir}" if kept else
        f"they are on this pod's own disk ({cfg.checkpoint.local_dir}) and go with it; KubeRay's "
        "retry resumes from the last save in S3"), file=err, flush=True)
    if code == 0 and kept:
        from .no_retry import stop_retries

        # A KubeRay retry would start a whole GPU cluster only to find the run finished; the
        # save is on the shared file system (retained), so upload it from any pod that mounts it.
        stop_retries(err, reason="training finished but its last upload failed",
                     next_step="upload the save by hand (below); nothing is left to train")
        from .checkpoint_cli import upload_command

        iterations = " ".join(str(i) for i in missing if isinstance(i, int)) or "<N>"
        # The command asks of the save what this upload did (with or without Miles' data cursor).
        command = upload_command(cfg.checkpoint.s3_uri, cfg.checkpoint.local_dir, "N",
                                 data_cursor=watcher.store.require_data_cursor)
        print(f"rltrainer: to upload by hand, for each iteration N in {iterations}: {command}", file=err, flush=True)
    return code or EXIT_UPLOAD


# After SIGTERM, before SIGKILL: at a Capacity Block's end the save is in S3 already; after a stop
# signal, a quarter of FINAL_UPLOAD_BUDGET_S, the rest is the final upload's.
STOP_GRACE_S = 120.0


def _stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S, stop_argv: Sequence[str] = (),
                log: TextIO | None = None) -> None:
    """SIGTERM to the training's process group (Ray, SGLang and Megatron children included), then
    SIGKILL if it is still there after ``grace_s``: the scale-down does not wait. With ``stop_argv``
    (``--ray-address``: the group is only `ray job submit`, which follows the job's logs), that
    command stops the Ray job first, within the same ``grace_s``."""
    deadline = time.monotonic() + grace_s
    if stop_argv:
        _finish_stop(_start_stop(stop_argv, log), stop_argv, grace_s, log)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    except ProcessLookupError:
        pass


if __name__ == "__main__":  # python -m rltrainer.launch
    sys.exit(main())
