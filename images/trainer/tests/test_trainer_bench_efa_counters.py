"""EFA port byte counters before and after a benchmark: the traffic proof the gate reads."""

from __future__ import annotations

import io
import json
from pathlib import Path

from node_helpers import make_node
from rltrainer.bench.efa_counters import BYTE_COUNTERS, TrafficProbe, snapshot, traffic_row


def set_counters(root: Path, dev: str, **values: int) -> None:
    d = root / "sys/class/infiniband" / dev / "ports/1/hw_counters"
    d.mkdir(parents=True, exist_ok=True)
    for name in BYTE_COUNTERS:
        (d / name).write_text(f"{values.get(name, 0)}\n")


def test_counter_names_are_the_efa_drivers_port_stats():
    # amzn-drivers 64788ef kernel/linux/efa/src/efa_verbs.c EFA_DEFINE_PORT_STATS
    assert set(BYTE_COUNTERS) <= {"tx_bytes", "rx_bytes", "send_bytes", "recv_bytes", "rdma_read_bytes",
                                  "rdma_read_resp_bytes", "rdma_write_bytes", "rdma_write_recv_bytes"}


def test_probe_reports_bytes_per_given_device_and_names_the_ones_not_given(tmp_path):
    root = make_node(tmp_path, efa=4, efa_mounted=3)
    for i in range(4):
        set_counters(root, f"rdmap{i}s0", tx_bytes=100, rdma_write_bytes=1000)
    probe = TrafficProbe("allreduce", local_rank=0, root=root)
    set_counters(root, "rdmap0s0", tx_bytes=100 + (5 << 20), rdma_write_bytes=1000 + (7 << 30))
    set_counters(root, "rdmap1s0", tx_bytes=100, rdma_write_bytes=1000)  # idle
    set_counters(root, "rdmap2s0", rx_bytes=3 << 30, tx_bytes=100, rdma_write_bytes=1000)
    out = io.StringIO()
    probe.emit(True, out)
    row = json.loads(out.getvalue())
    assert row["kind"] == "efa_traffic" and row["bench"] == "allreduce"
    assert row["devices"] == {"rdmap0s0": (5 << 20) + (7 << 30), "rdmap1s0": 0, "rdmap2s0": 3 << 30}
    assert row["host_devices"] == 4 and row["not_given"] == ["rdmap3s0"]


def test_unreadable_counters_are_none_not_zero(tmp_path):
    root = make_node(tmp_path, efa=2)
    set_counters(root, "rdmap0s0", tx_bytes=1)
    before = snapshot(root)
    assert before["devices"] == {"rdmap0s0": 1, "rdmap1s0": None}
    assert traffic_row("ep", before, before, host="h")["devices"] == {"rdmap0s0": 0, "rdmap1s0": None}


def test_only_each_nodes_local_rank_0_prints_and_not_on_a_cpu_box_without_efa(tmp_path):
    out = io.StringIO()
    TrafficProbe("ep", local_rank=1, root=tmp_path).emit(True, out)
    TrafficProbe("ep", local_rank=0, root=tmp_path).emit(False, out)  # no /sys/class/infiniband
    assert out.getvalue() == ""
