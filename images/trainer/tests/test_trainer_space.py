"""Room on the checkpoint file system before training: other runs' saves left on it
(``rltrainer.checkpoints.space``).

Before: a second run on the kit's default 1200 GiB file system for Qwen3-30B-A3B (one save about
398 GiB, reference weights about 57 GiB) started beside the first run's kept save, wrote its own
first save and failed with ENOSPC at the second; every KubeRay retry resumed from the first and
failed at the same point. Saves here are sparse files: their apparent size is a real save's, and
they take no disk. The free space is injected.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from rltrainer.checkpoints import check_room
from rltrainer.checkpoints.space import GIB, other_directories, room_for_saves, save_gib_from_env, saves_to_write
from rltrainer.contract import SAVE_SIZE_ESTIMATE_ENV, CheckpointConfig

SAVE = 427_449_000_000  # bytes of one Qwen3-30B-A3B save (about 398.1 GiB, catalog: 14 B x 30.5 B params)
FS_FREE_AFTER_RUN_A = 745 * GIB  # 1200 GiB - the reference weights - run A's kept save


def sparse_save(root: Path, iteration: int, size: int = SAVE, tracker: bool = True) -> None:
    """A save of ``size`` bytes as Megatron and Miles lay it out, in sparse files."""
    it_dir = root / f"iter_{iteration:07d}"
    it_dir.mkdir(parents=True)
    with open(it_dir / "__0_0.distcp", "wb") as f:
        f.truncate(size - 1000)
    (it_dir / ".metadata").write_bytes(b"m" * 500)
    (root / "rollout").mkdir(exist_ok=True)
    (root / "rollout" / f"global_dataset_state_dict_{iteration}.pt").write_bytes(b"c" * 500)
    if tracker:
        (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))


KIT_ESTIMATE = {SAVE_SIZE_ESTIMATE_ENV: "399"}  # what the kit puts on the Ray head for Qwen3-30B-A3B


def checkpoint(local_dir: Path, *, keep_local: int = 1) -> CheckpointConfig:
    return CheckpointConfig(s3_uri="s3://my-bucket/checkpoints/run-b/", local_dir=str(local_dir),
                            keep_local=keep_local)


@pytest.fixture
def fsx(tmp_path: Path) -> Path:
    """/fsx/checkpoints after run A finished: its newest save kept, run B's directory empty."""
    root = tmp_path / "fsx" / "checkpoints"
    sparse_save(root / "run-a", 1000)
    (root / "run-b").mkdir(parents=True)
    return root


def test_a_second_run_short_of_room_is_refused_with_the_numbers_and_the_fix(fsx: Path):
    (fsx / "run-old").mkdir()
    (fsx / "run-old" / "notes.txt").write_bytes(b"n" * 2048)
    (fsx / "_scratch").mkdir()  # not a run's: left out of the list
    log = io.StringIO()
    assert check_room(checkpoint(fsx / "run-b"), log, env=KIT_ESTIMATE, free_bytes=lambda p: FS_FREE_AFTER_RUN_A) is False
    assert log.getvalue() == (
        f"rltrainer launch: the file system of {fsx}/run-b has no room for this run's next saves, nothing was "
        "started: 745.0 GiB free, 798.0 GiB needed (2 save(s) of 399.0 GiB: checkpoint.keep_local 1 kept plus "
        "the one being written, none of this run's saves is here yet; save size from RLTRAINER_SAVE_GIB=399 on "
        "the Ray head, the kit's catalog estimate). Training would stop with ENOSPC at a save, and so "
        "would every retry.\n"
        f"Other directories under {fsx}, biggest first:\n"
        f"  {fsx}/run-a  398.1 GiB\n"
        f"  {fsx}/run-old  0.0 GiB\n"
        "Fix: delete another run's local directory once its saves are complete in S3 (they stay in "
        "s3://my-bucket/checkpoints/<run>/ and that run resumes from there; `rltrainer checkpoint list --s3-uri "
        f"s3://my-bucket/checkpoints/<run>/` lists them), e.g. `rm -rf {fsx}/<run>` from a pod that mounts "
        f"{fsx}; or grow the file system (the kit's storage.shared_filesystem.capacity_gib). Then launch again.\n")
    # nothing of another run's is touched
    assert (fsx / "run-a" / "iter_0001000" / "__0_0.distcp").stat().st_size == SAVE - 1000


def test_a_resumed_run_counts_its_own_saves_and_measures_their_size(fsx: Path):
    """Run B back after a restart, its newest save on disk: only the next save must fit."""
    sparse_save(fsx / "run-b", 20)
    log = io.StringIO()
    assert check_room(checkpoint(fsx / "run-b"), log, env={}, free_bytes=lambda p: FS_FREE_AFTER_RUN_A)
    assert log.getvalue() == (
        f"rltrainer: room for the next saves: 745.0 GiB free on the file system of {fsx}/run-b, 398.1 GiB needed "
        "(1 save(s) of 398.1 GiB, from iter_0000020, this run's newest finished save, measured)\n")
    # keep_local 2 with one save kept: two more (the second kept one and the one being written)
    room = room_for_saves(fsx / "run-b", 2, None, free_bytes=lambda p: FS_FREE_AFTER_RUN_A)
    assert (room.saves_to_write, room.need_bytes, room.enough) == (2, 2 * SAVE, False)
    log = io.StringIO()
    assert not check_room(checkpoint(fsx / "run-b", keep_local=2), log, env=KIT_ESTIMATE,
                          free_bytes=lambda p: FS_FREE_AFTER_RUN_A)
    assert "or keep fewer saves (checkpoint.keep_local 1 needs 398.1 GiB). Then launch again." in log.getvalue()


@pytest.mark.parametrize("keep_local, finished, expected", [
    (1, 0, 2), (1, 1, 1), (1, 3, 1), (2, 0, 3), (2, 1, 2), (2, 2, 1), (3, 5, 1)])
def test_saves_to_write(keep_local, finished, expected):
    assert saves_to_write(keep_local, finished) == expected


def test_the_measured_save_wins_over_the_estimate_and_torn_saves_are_not_counted(fsx: Path):
    run = fsx / "run-b"
    sparse_save(run, 20, size=100 * GIB)
    sparse_save(run, 40, size=SAVE, tracker=False)  # above the tracker: being written, or torn
    room = room_for_saves(run, 1, 399, free_bytes=lambda p: 150 * GIB)
    assert (room.finished, room.save_bytes, room.need_bytes, room.enough) == (1, 100 * GIB, 100 * GIB, True)


def test_enough_room_starts_the_run(fsx: Path):
    log = io.StringIO()
    seen = []
    assert check_room(checkpoint(fsx / "run-b"), log, env=KIT_ESTIMATE, free_bytes=lambda p: seen.append(p) or 800 * GIB)
    assert seen == [fsx / "run-b"]  # the run's own directory's file system
    assert log.getvalue() == (
        f"rltrainer: room for the next saves: 800.0 GiB free on the file system of {fsx}/run-b, 798.0 GiB "
        "needed (2 save(s) of 399.0 GiB, from RLTRAINER_SAVE_GIB=399 on the Ray head, the kit's catalog estimate)\n")


def test_without_an_estimate_or_a_save_there_is_nothing_to_check(fsx: Path):
    log = io.StringIO()
    assert check_room(checkpoint(fsx / "run-b"), log, env={}, free_bytes=lambda p: 0)
    assert log.getvalue() == (
        f"rltrainer: no finished save of this run in {fsx}/run-b and no RLTRAINER_SAVE_GIB from the kit: "
        "not checking that the file system has room for its saves\n")


@pytest.mark.parametrize("value", ["", "abc", "0", "-3", "nan", "inf", "1e999"])
def test_a_bad_estimate_is_logged_once_and_treated_as_absent(fsx: Path, value):
    """A value that is not a positive number of GiB must not stop the run: the check goes on
    without it (here: nothing to check against)."""
    log = io.StringIO()
    assert check_room(checkpoint(fsx / "run-b"), log, env={SAVE_SIZE_ESTIMATE_ENV: value}, free_bytes=lambda p: 0)
    assert log.getvalue() == (
        f"rltrainer: RLTRAINER_SAVE_GIB={value!r} is not a positive number of GiB (the kit's estimate of one "
        "save); checking without it\n"
        f"rltrainer: no finished save of this run in {fsx}/run-b and no RLTRAINER_SAVE_GIB from the kit: "
        "not checking that the file system has room for its saves\n")


@pytest.mark.parametrize("value, expected", [("399", 399.0), ("12.5", 12.5), (" 3066 ", 3066.0), (None, None)])
def test_the_estimate_is_read_from_the_environment(value, expected):
    log = io.StringIO()
    assert save_gib_from_env({} if value is None else {SAVE_SIZE_ESTIMATE_ENV: value}, log) == expected
    assert log.getvalue() == ""


def test_the_estimate_defaults_to_the_process_environment(fsx: Path, monkeypatch):
    monkeypatch.setenv(SAVE_SIZE_ESTIMATE_ENV, "399")
    room = room_for_saves(fsx / "run-b", 1, save_gib_from_env(None, io.StringIO()), free_bytes=lambda p: 0)
    assert (room.save_bytes, room.need_bytes) == (399 * GIB, 798 * GIB)


def test_a_check_that_cannot_read_the_file_system_does_not_stop_the_run(fsx: Path):
    def unreadable(_path):
        raise PermissionError(13, "Permission denied")

    log = io.StringIO()
    assert check_room(checkpoint(fsx / "run-b"), log, env=KIT_ESTIMATE, free_bytes=unreadable)
    assert log.getvalue() == ("rltrainer: could not check the room for this run's saves ([Errno 13] Permission "
                              "denied); starting anyway\n")


def test_short_without_other_runs_warns_and_starts(tmp_path: Path):
    """Config validation allows the file system to hold the weights and keep_local + 1 saves with
    little to spare (deepseek-v3: 148 GiB of 19200), so overhead, staged inputs or logs can make a
    valid config look short on a fresh file system. Nothing there is another run's to delete:
    the launcher warns with the same numbers and trains (ENOSPC at a save, as before the check)."""
    run = tmp_path / "checkpoints" / "run-b"
    run.mkdir(parents=True)
    (run.parent / "_inputs").mkdir()  # not a run's
    log = io.StringIO()
    assert check_room(checkpoint(run), log, env=KIT_ESTIMATE, free_bytes=lambda p: 10 * GIB) is True
    assert log.getvalue() == (
        f"rltrainer launch: WARNING: the file system of {run} may not have room for this run's next saves: "
        "10.0 GiB free, 798.0 GiB needed (2 save(s) of 399.0 GiB: checkpoint.keep_local 1 kept plus the one "
        "being written, none of this run's saves is here yet; save size from RLTRAINER_SAVE_GIB=399 on the Ray "
        "head, the kit's catalog estimate). No other run's directory is beside it to delete, so training "
        "starts anyway: if a save does not fit, training stops with ENOSPC at that save, as it did before "
        "this check, and so would every retry.\n"
        "Fix, if it does: grow the file system (the kit's storage.shared_filesystem.capacity_gib). "
        "Then launch again.\n")


def test_other_directories_are_siblings_biggest_first_and_never_a_file_systems_root(fsx: Path):
    (fsx / "run-c").mkdir()
    (fsx / "run-c" / "x").write_bytes(b"x" * 10)
    (fsx / "link").symlink_to(fsx / "run-a")
    (fsx / "_inputs").mkdir()
    (fsx / "a-file").write_bytes(b"f")
    # run-a: its save plus Megatron's tracker (4 bytes)
    assert [(p.name, n) for p, n in other_directories(fsx / "run-b")] == [("run-a", SAVE + 4), ("run-c", 10)]
    # a pod's own /checkpoints: its parent is a file system's root, whose directories are not runs
    assert other_directories("/checkpoints") == []


@pytest.mark.parametrize("other_run", [False, True])
def test_a_short_message_names_this_runs_staged_inputs(fsx: Path, other_run):
    """This run's staged weights take room the free space already leaves out, and are not another
    run's to delete: the message says how much of the used room they are and that they hold only
    the current sources. Before: it named only other runs' directories, and a warning with none
    of them left the user no idea where the room went."""
    run = fsx / "run-b"
    weights = run / "_inputs" / "model" / "DeepSeek-V3"
    weights.mkdir(parents=True)
    with open(weights / "model-00001-of-00002.safetensors", "wb") as f:
        f.truncate(600 * GIB)  # sparse
    (run / "_inputs" / "data").mkdir()
    (run / "_inputs" / "data" / "prompts.jsonl").write_bytes(b"p" * (GIB // 10))
    if not other_run:
        import shutil

        shutil.rmtree(fsx / "run-a")
    log = io.StringIO()
    assert check_room(checkpoint(run), log, env=KIT_ESTIMATE, free_bytes=lambda p: 10 * GIB) is (not other_run)
    assert (f"\nCounted as used: this run's staged inputs, 600.1 GiB in {run}/_inputs (the current "
            "model.hf_checkpoint and data.prompt_data only: copies staged for earlier ones are deleted "
            "before staging).\n") in log.getvalue()
    assert (f"  {fsx}/run-a  398.1 GiB\n" in log.getvalue()) is other_run
