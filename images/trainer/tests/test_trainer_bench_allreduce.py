"""``rltrainer bench allreduce``: real gloo runs with 2 and 4 processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer_helpers import broken_allreduce_worker, cli_worker, dist_env, free_port, json_lines, run_ranks
from rltrainer.bench.allreduce import bandwidths, bus_bandwidth_factor, rank_average, sweep_sizes
from rltrainer.bench.common import parse_size

# The CPU torch wheel warns once that NumPy is absent; the benchmarks do not use NumPy.
pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy")

ALLREDUCE_KEYS = ["kind", "size_bytes", "time_us", "algbw_GBps", "busbw_GBps", "world_size", "backend"]


def test_bus_bandwidth_is_nccl_tests_formula():
    # nccl-tests doc/PERFORMANCE.md: all-reduce busbw = algbw * 2(n-1)/n
    for n in (1, 2, 3, 8, 16, 256):
        assert bus_bandwidth_factor(n) == pytest.approx(2 * (n - 1) / n)
    algbw, busbw = bandwidths(size_bytes=2 * 10**9, seconds=0.5, world_size=16)
    assert algbw == pytest.approx(4.0)  # 2e9 bytes in 0.5 s = 4 GB/s (1e9 bytes/s)
    assert busbw == pytest.approx(4.0 * 30 / 16)
    with pytest.raises(ValueError):
        bus_bandwidth_factor(0)


def test_time_is_the_rank_average_as_nccl_tests_reports_it():
    """nccl-tests v2.19.6 (NVIDIA/nccl-tests@a0b82b2260cf) src/common.cu:120:
    `static int average = 1` (0=RANK0, 1=AVG, 2=MIN, 3=MAX); Allreduce() sums the ranks' times and
    divides by the rank count. Not the slowest rank."""

    class Ctx:
        world_size = 4
        ops: list = []

        def reduce_scalar(self, value, op="max"):
            self.ops.append(op)
            return {"sum": 0.010, "max": 0.004, "min": 0.001}[op]  # ranks: 1, 2, 3, 4 ms

    ctx = Ctx()
    assert rank_average(ctx, 0.002) == pytest.approx(0.0025)
    assert ctx.ops == ["sum"]


@pytest.mark.parametrize(
    "text, expected",
    [("8", 8), ("1K", 1024), ("1M", 1 << 20), ("2G", 2 << 30), ("1GiB", 1 << 30), ("64MB", 64 << 20), ("1.5K", 1536)],
)
def test_size_suffixes_are_binary_like_nccl_tests(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1X", "-1M", "0.3"])
def test_bad_sizes_are_rejected(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_sweep_doubles_from_min_to_max():
    assert sweep_sizes(1 << 20, 8 << 20) == [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    assert sweep_sizes(3, 20) == [3, 6, 12]
    with pytest.raises(ValueError):
        sweep_sizes(8, 4)


@pytest.mark.parametrize("world", [2, 4])
def test_allreduce_runs_checks_and_reports_json_rows(tmp_path: Path, world: int):
    argv = ["allreduce", "--device", "cpu", "--min-bytes", "4K", "--max-bytes", "64K", "--iters", "3", "--warmup", "1"]
    ranks = run_ranks(cli_worker, world, tmp_path, argv)
    assert [r["rc"] for r in ranks] == [0] * world
    assert all(r["stdout"] == "" for r in ranks[1:]), "only rank 0 prints JSON"
    rows = json_lines(ranks[0]["stdout"])
    assert [row["size_bytes"] for row in rows] == [4096, 8192, 16384, 32768, 65536]
    for row in rows:
        assert list(row) == ALLREDUCE_KEYS
        assert row["kind"] == "allreduce"
        assert row["world_size"] == world
        assert row["backend"] == "gloo"
        assert row["time_us"] > 0
        assert row["algbw_GBps"] == pytest.approx(row["size_bytes"] / (row["time_us"] * 1e-6) / 1e9, rel=1e-2)
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 * (world - 1) / world, rel=1e-3)
    # the readable table goes to stderr, in nccl-tests' layout
    table = [l for l in ranks[0]["stderr"].splitlines() if l and not l.startswith("# all-reduce")]
    assert table[:4] == NCCL_TESTS_HEADER
    data = [l.split() for l in table if not l.startswith("#")]
    assert len(data) == len(rows)
    for cols, row in zip(data, rows):
        assert len(cols) == 13
        assert (int(cols[0]), int(cols[1]), cols[2], cols[3], cols[4]) == (row["size_bytes"], row["size_bytes"] // 4,
                                                                           "float", "sum", "-1")
        assert cols[5:9] == ["N/A"] * 4  # torch's all_reduce is in-place only
        assert float(cols[11]) == pytest.approx(row["busbw_GBps"], abs=0.006)
        assert cols[12] == "0"
    assert table[-3].startswith("# Out of bounds values : 0 OK")
    assert table[-2].startswith("# Avg bus bandwidth    : ")


# nccl-tests v2.19.6 (a0b82b2) src/util.cu writeResultHeader, evaluated with Python's printf-style
# operator on the same format strings (no per-iteration timing, no timestamps).
_H = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
NCCL_TESTS_HEADER = [
    "#",
    "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % ("", "", "", "", ""),
    _H.replace("%*s", "%s") % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                                "algbw", "busbw", "#wrong", ""),
    _H.replace("%*s", "%s") % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                                "(GB/s)", "", ""),
]


@pytest.mark.parametrize("value, width, text", [(12.345, 6, " 12.35"), (1234.5, 6, "1234.5"), (123456.7, 6, "123457"),
                                                (1234567.0, 6, " 1e+06"), (8911.246, 7, "8911.25")])
def test_numbers_are_formatted_like_nccl_tests(value, width, text):
    from rltrainer.bench.allreduce import nccl_float

    assert nccl_float(value, width) == text


def test_bfloat16_timing_is_checked_in_float32(tmp_path: Path):
    argv = ["allreduce", "--device", "cpu", "--min-bytes", "2K", "--max-bytes", "2K", "--iters", "2", "--warmup", "0",
            "--dtype", "bf16"]
    ranks = run_ranks(cli_worker, 2, tmp_path, argv)
    assert [r["rc"] for r in ranks] == [0, 0]
    (row,) = json_lines(ranks[0]["stdout"])
    assert row["size_bytes"] == 2048


def test_a_wrong_reduction_fails_the_check_on_every_rank(tmp_path: Path):
    argv = ["allreduce", "--device", "cpu", "--min-bytes", "1K", "--max-bytes", "4K", "--iters", "2", "--warmup", "0"]
    ranks = run_ranks(broken_allreduce_worker, 2, tmp_path, argv)
    assert [r["rc"] for r in ranks] == [1, 1], "no rank may go on to timing"
    assert ranks[0]["stdout"] == "", "no timings are reported for a broken fabric"
    # rank 1 computed wrong sums: it reports the element, the value and the expected sum
    assert "correctness check FAILED at 1K: rank 1: element 0 of 256 is 4 after all-reduce, expected 3" in ranks[1]["stderr"]
    assert "stopping: the reduced values were wrong on at least one rank at 1K" in ranks[0]["stderr"]


def test_runs_under_torchrun_as_python_module(tmp_path: Path):
    """The documented entry point: torchrun ... -m rltrainer.bench allreduce."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this Python")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    port = free_port()
    proc = subprocess.run(
        [str(torchrun), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
         "-m", "rltrainer.bench", "allreduce", "--device", "cpu", "--min-bytes", "1K", "--max-bytes", "2K",
         "--iters", "2", "--warmup", "0"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json_lines(proc.stdout)
    assert [(r["kind"], r["size_bytes"], r["world_size"]) for r in rows] == [("allreduce", 1024, 2), ("allreduce", 2048, 2)]


def test_outside_torchrun_says_how_to_run(monkeypatch, capsys):
    for key in dist_env(0, 1, 1):
        monkeypatch.delenv(key, raising=False)
    from rltrainer.bench import main

    with pytest.raises(SystemExit) as exc:
        main(["allreduce", "--device", "cpu"])
    assert "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set; run it under torchrun" in str(exc.value)


def test_gpu_runs_turn_on_the_transport_log_lines_the_gate_reads(monkeypatch):
    """On GPUs the benchmarks set NCCL/NVSHMEM INFO logging (unless already set) before NCCL starts."""
    import torch

    from rltrainer.bench import common

    for key in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NVSHMEM_DEBUG"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # a caller's own choice wins
    for key, value in dist_env(0, 1, free_port()).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="no CUDA device visible"):
        common.init_distributed("cuda")
    assert os.environ["NCCL_DEBUG"] == "WARN"
    assert os.environ["NCCL_DEBUG_SUBSYS"] == "INIT,ENV,NET" and os.environ["NVSHMEM_DEBUG"] == "INFO"
