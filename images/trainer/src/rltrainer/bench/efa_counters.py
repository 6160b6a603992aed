"""EFA traffic proof: each EFA port's hardware byte counters read before and after a benchmark.

A log line can say that NCCL loaded aws-ofi-nccl while one NIC carries nothing (a rail that did
not come up, a device the pod was not given). The port counters cannot be fooled that way: the
EFA kernel driver exposes them per device under
``/sys/class/infiniband/<dev>/ports/1/hw_counters/<name>`` (amzn/amzn-drivers, commit 64788ef,
kernel/linux/efa/src/efa_verbs.c: ``EFA_DEFINE_PORT_STATS`` lists ``tx_bytes``, ``rx_bytes``,
``rdma_read_bytes``, ``rdma_read_resp_bytes``, ``rdma_write_bytes``, ``rdma_write_recv_bytes``
among the port statistics that ``efa_alloc_hw_port_stats`` registers).

On every node, local rank 0 snapshots the devices this pod was given (an ``efa``-driver device
in /sys/class/infiniband whose uverbs node is in /dev/infiniband: the EFA device plugin mounts
only the allocated ones, as ``rltrainer nodecheck`` counts them) before the benchmark and after
it, and prints one ``efa_traffic`` JSON row: the bytes each device moved (the sum of the
counters above that exist), the EFA devices the host has, and those the pod was not given. The
gate requires traffic on every device of every node where the benchmark crossed nodes.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, TextIO

from .common import emit

BYTE_COUNTERS = ("tx_bytes", "rx_bytes", "rdma_read_bytes", "rdma_read_resp_bytes",
                 "rdma_write_bytes", "rdma_write_recv_bytes")


def _efa_devices(root: Path) -> list[tuple[str, bool]]:
    """(name, given to this pod) for every EFA device of the host, sorted by name."""
    ib = root / "sys/class/infiniband"
    if not ib.is_dir():
        return []
    found = []
    for dev in sorted(ib.iterdir()):
        driver = dev / "device" / "driver"
        if not driver.exists() or os.path.basename(os.path.realpath(driver)) != "efa":
            continue
        verbs = dev / "device" / "infiniband_verbs"
        nodes = [v.name for v in verbs.iterdir()] if verbs.is_dir() else []
        found.append((dev.name, any((root / "dev/infiniband" / n).exists() for n in nodes)))
    return found


def snapshot(root: str | Path = "/") -> dict[str, Any]:
    """Byte counters of the pod's EFA devices now: {"devices": {dev: bytes or None}, "host": [...]}.
    None for a device whose counters cannot be read."""
    root = Path(root)
    devices: dict[str, int | None] = {}
    host = []
    for name, given in _efa_devices(root):
        host.append(name)
        if not given:
            continue
        counters = root / "sys/class/infiniband" / name / "ports/1/hw_counters"
        total, seen = 0, False
        for counter in BYTE_COUNTERS:
            try:
                total += int((counters / counter).read_text().strip())
                seen = True
            except (OSError, ValueError):
                continue
        devices[name] = total if seen else None
    return {"devices": devices, "host": host}


def traffic_row(bench: str, before: dict[str, Any], after: dict[str, Any],
                host: str | None = None) -> dict[str, Any]:
    """The ``efa_traffic`` row: bytes each given device moved between the two snapshots."""
    moved: dict[str, int | None] = {}
    for name, end in after["devices"].items():
        start = before["devices"].get(name)
        moved[name] = None if start is None or end is None else max(0, end - start)
    given = set(after["devices"])
    return {"kind": "efa_traffic", "bench": bench, "host": host or socket.gethostname(),
            "node": os.environ.get("NODE_NAME"), "devices": moved,
            "host_devices": len(after["host"]),
            "not_given": [d for d in after["host"] if d not in given]}


class TrafficProbe:
    """Snapshot before, row after; only on each node's local rank 0 (one row per node)."""

    def __init__(self, bench: str, local_rank: int, root: str | Path = "/"):
        self.bench = bench
        self.active = local_rank == 0
        self.root = root
        self.before = snapshot(root) if self.active else None

    def row(self) -> dict[str, Any] | None:
        if not self.active or self.before is None:
            return None
        return traffic_row(self.bench, self.before, snapshot(self.root))

    def emit(self, on_gpus: bool, out: TextIO) -> None:
        """Print the row on GPUs, or wherever the host has EFA devices (not on a CPU test box)."""
        row = self.row()
        if row is not None and (on_gpus or row["host_devices"]):
            emit(row, out)
