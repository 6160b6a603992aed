"""`rlkit gate`: the comparison logic on recorded logs, and the kubectl flow with a fake kubectl."""

from __future__ import annotations

import json
import sys

import pytest

from infra.catalog import acceptance
from infra.config import parse_config
from ops.gate import (FAIL, PASS, WARN, compare, evaluate, faster_backend, judge_allocatable, nccl_transport,
                      state_document, write_record)
from manifests.render import NAMESPACE_FILES
from ops.gate.runner import GateInterrupted, GateRunner
from ops.kube import Kubectl, KubectlError
from tests.support import REPO_ROOT
from tests.support.fakes import (CONFIG, digest_of, FIXTURES, FakeKubectl, by_check, gate_parse as parse, job_json, judge,
                                 pods_json, run_gate, scenario, script_cluster)


# --- comparison on recorded outputs --------------------------------------------------------------


def test_healthy_p5_passes_with_measured_and_expected_figures():
    report = judge("pass-p5-2node")
    f = by_check(report)
    assert report.ok
    assert f["all-reduce busbw @ 2 GiB"].status == PASS
    assert f["all-reduce busbw @ 2 GiB"].measured == "441.7 GB/s"
    assert f["all-reduce busbw @ 2 GiB"].expected == ">= 397.9 GB/s (90% of 442.06 published on 2 nodes)"
    assert f["all-reduce busbw @ 16 GiB"].status == PASS
    assert f["NCCL OFI plugin"].status == PASS
    assert f["NCCL OFI plugin"].detail.endswith("NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.21.1")
    assert f["NCCL network"].status == PASS
    assert f["nodecheck"].status == PASS
    assert f["allocatable EFA"].status == PASS and f["allocatable EFA"].measured == "32 on 2 node(s)"


def test_no_published_ep_figure_is_a_warning_never_a_silent_pass():
    f = by_check(judge("pass-p5-2node"))["EP nccl bandwidth"]
    assert f.status == WARN
    assert f.detail == ("no published threshold for nccl on 2 x p5.48xlarge at 4096 tokens/rank, hidden 7168, "
                        "top-8 of 256 experts: recorded only")
    step = by_check(judge("pass-p5-2node"))["EP nccl step time (training)"]
    assert step.status == "recorded" and step.measured == "1.60 ms" and "no published figure" in step.detail


def test_ep_is_measured_per_span_and_the_verdict_says_which_measurement_decided():
    report = judge("pass-p5-2node")
    f = by_check(report)
    train, roll = f["EP nccl step time (training)"], f["EP nccl step time (rollout)"]
    assert "EP8 inside one NVLink domain (1 node, 8 GPUs per domain)" in train.detail
    assert "this measurement decides the EP backend" in train.detail
    assert train.expected == "(recorded: picks the faster backend)" and roll.expected == "(recorded)"
    assert "reported beside the training measurement, which decides the backend" in roll.detail
    assert report.ep.time_us == 1602.7 and report.ep.spans["rollout"]["time_us"] == 1442.43
    assert report.ep.decided_by == "training: EP8 inside one NVLink domain (1 node, 8 GPUs per domain)"
    # the published-shape run spans both nodes: it is the fabric acceptance test, across EFA
    assert "EP16 across EFA (2 nodes)" in f["EP verdict"].detail
    # an image without --span measured over every rank: that one decides, and says where it ran
    meta, logs = scenario("pass-p5-2node")
    logs["ep"] = logs["ep"].replace('"purpose": "rollout"', '"purpose": "skip"').replace(
        '"purpose": "training"', '"purpose": "model"').replace('"ep_size": 8', '"ep_size": 16').replace(
        '"ep_nodes": 1', '"ep_nodes": 2')
    report = evaluate(logs, "p5.48xlarge", 2, "nccl")
    assert report.ep.decided_by == "model: EP16 across EFA (2 nodes)"


def test_instance_type_without_any_figure_is_recorded_only():
    report = judge("pass-p5-2node", instance_type="p5e.48xlarge")
    f = by_check(report)["all-reduce busbw"]
    assert f.status == WARN
    assert f.detail == "no published threshold for p5e.48xlarge: recorded only"
    assert not any(x.status == PASS and x.check.startswith("all-reduce busbw")
                   for x in report.findings)


def test_degraded_fabric_fails_with_share_of_published_figure():
    report = judge("degraded-p5-2node")
    f = by_check(report)
    assert not report.ok
    low = f["all-reduce busbw @ 2 GiB"]
    assert low.status == FAIL and low.measured == "283.9 GB/s"
    assert low.detail.startswith("degraded fabric: 64% of the published figure")
    assert "cluster placement group" in low.fix
    # a bad node is cordoned and tainted, never drained; a cordon does not make EKS node
    # auto-repair replace it (that acts on node conditions), so the user replaces its instance
    assert "kubectl cordon <node>" in low.fix and "drain" not in low.fix
    assert "so that" not in low.fix  # no promise that the cordon gets it replaced
    assert ("a cordon alone does not get it replaced: EKS node auto-repair acts on node conditions "
            "(Ready, AcceleratedHardwareReady, ...), not on cordons. Replace it yourself: `aws "
            "autoscaling terminate-instance-in-auto-scaling-group --instance-id <instance ID> "
            "--no-should-decrement-desired-capacity`") in low.fix
    assert f["NCCL network"].status == PASS  # slow, but still EFA


def test_socket_fallback_detected_from_nccl_log():
    f = by_check(judge("sockets-p5-2node"))
    assert f["NCCL OFI plugin"].status == PASS  # the plugin loaded; NCCL_NET=Socket overrode it
    net = f["NCCL network"]
    assert net.status == FAIL and net.measured == "TCP sockets"
    assert net.detail == ("NCCL fell back to sockets: the all-reduce log says 'Using network Socket' where it "
                          "should name aws-ofi-nccl ('Using network Libfabric', 'AWS Libfabric' or 'OFI')")
    assert "NCCL_NET_PLUGIN=ofi" in net.fix


def test_socket_fallback_detected_from_bandwidth_alone():
    meta, logs = scenario("sockets-p5-2node")
    logs["allreduce"] = "\n".join(l for l in logs["allreduce"].splitlines() if "NCCL INFO" not in l)
    report = evaluate(logs, meta["instance_type"], meta["nodes"], meta["ep_backend"])
    f = by_check(report)
    assert f["all-reduce bandwidth"].status == FAIL
    assert f["all-reduce bandwidth"].detail == "bandwidth far below EFA: NCCL most likely runs on TCP sockets"
    assert f["all-reduce bandwidth"].expected == (
        f">= {acceptance.socket_suspect_GBps('p5.48xlarge', 3200):.1f} GB/s on EFA")
    # and with no NCCL lines at all, the transport is unproven: the gate names the line it wanted
    assert f["NCCL network"].status == FAIL and f["NCCL network"].measured == "not logged"
    assert ("looked for 'Using network ' followed by one of the names aws-ofi-nccl v1.21.1 gives itself "
            "(Libfabric, AWS Libfabric, OFI) in the all-reduce log") in f["NCCL network"].detail


def test_missing_efa_devices_fail_and_later_jobs_are_reported_not_run():
    report = judge("missing-efa-p5-2node")
    f = by_check(report)
    efa = f["node 0: EFA devices"]
    assert efa.status == FAIL and (efa.measured, efa.expected) == ("0", "32")
    assert efa.detail.startswith("missing EFA devices: the pod sees 0 of 32")
    assert "EFA device plugin tolerates the GPU taint" in efa.fix
    assert f["allreduce"].status == FAIL and f["allreduce"].measured == "not run"
    assert f["ep"].status == FAIL


def test_deepep_on_p5en_passes_against_published_dispatch_and_combine():
    report = judge("pass-p5en-deepep-2node")
    f = by_check(report)
    assert report.ok
    assert f["EP deepep-nvshmem dispatch RDMA"].status == PASS
    assert f["EP deepep-nvshmem dispatch RDMA"].measured == "66.4 GB/s"
    assert f["EP deepep-nvshmem combine RDMA"].expected.startswith(">= 53.1 GB/s RDMA (90% of 59 published")
    assert f["NVSHMEM transport"].status == PASS
    assert report.ep.backend == "deepep-nvshmem"
    assert report.ep.acceptance["shape"] == {"tokens_per_rank": 4096, "hidden": 7168, "topk": 8, "experts": 256}


def test_ep_figures_compare_only_at_the_published_shape_with_deepeps_timing():
    meta, logs = scenario("pass-p5en-deepep-2node")
    # the model-shape rows alone: nothing comparable was measured
    only_model = "\n".join(l for l in logs["ep"].splitlines() if '"acceptance"' not in l)
    f = by_check(evaluate({**logs, "ep": only_model}, "p5en.48xlarge", 2, "deepep-nvshmem"))
    assert f["EP deepep-nvshmem bandwidth"].status == WARN
    assert "nothing comparable with the published DeepEP figures" in f["EP deepep-nvshmem bandwidth"].detail
    # another shape at the acceptance position: recorded only
    other = logs["ep"].replace('"hidden": 7168', '"hidden": 4096')
    f = by_check(evaluate({**logs, "ep": other}, "p5en.48xlarge", 2, "deepep-nvshmem"))
    assert f["EP deepep-nvshmem bandwidth"].status == WARN
    assert "hidden 4096" in f["EP deepep-nvshmem bandwidth"].detail
    # wall-clock timing is not DeepEP's kernel timing
    wall = logs["ep"].replace('"timing": "kernel"', '"timing": "wall"')
    f = by_check(evaluate({**logs, "ep": wall}, "p5en.48xlarge", 2, "deepep-nvshmem"))
    assert f["EP deepep-nvshmem dispatch RDMA"].status == WARN
    assert "not DeepEP's kernel timer" in f["EP deepep-nvshmem dispatch RDMA"].detail


def test_every_threshold_names_its_source_tool_shape_and_instance_type():
    for ref in acceptance.REFERENCES:
        assert ref.source and ref.tool and ref.instance_type and ref.shape
        if ref.metric.startswith("ep_"):
            assert ref.ep_shape == (4096, 7168, 8, 256) and ref.backends == ("deepep-nvshmem",)
        else:
            assert ref.size_bytes is not None


def test_wrong_ep_results_fail():
    meta, logs = scenario("pass-p5en-deepep-2node")
    logs["ep"] = logs["ep"].replace('"correct": true', '"correct": false')
    f = by_check(evaluate(logs, meta["instance_type"], 2, "deepep-nvshmem"))
    assert f["expert parallel results"].status == FAIL
    assert "timings mean nothing" in f["expert parallel results"].detail


def test_single_node_allreduce_is_flagged_as_not_spanning_the_nodes():
    meta, logs = scenario("pass-p5-2node")
    logs["allreduce"] = logs["allreduce"].replace('"world_size": 16', '"world_size": 8')
    f = by_check(evaluate(logs, "p5.48xlarge", 2, "nccl"))["all-reduce ranks"]
    assert f.status == FAIL and (f.measured, f.expected) == ("8", "16")


def test_transport_markers():
    assert nccl_transport("x NCCL INFO Using network Socket") == "socket"
    assert nccl_transport("x NCCL INFO Using network AWS Libfabric") == "ofi"
    assert nccl_transport("x NCCL INFO Using network Libfabric") == "ofi"
    assert nccl_transport("no nccl lines") is None
    assert nccl_transport("x NCCL INFO Using network OFI") == "ofi"
    assert nccl_transport("x NCCL INFO Using network IB") is None


@pytest.mark.parametrize("name", ["Libfabric", "AWS Libfabric", "OFI"])
def test_a_healthy_run_passes_whichever_name_nccl_logs_for_aws_ofi_nccl(name):
    """aws-ofi-nccl v1.21.1 (aws/aws-ofi-nccl@2475c4c73690) src/nccl_ofi_interface_nvidia.cpp
    :830-858 renames the plugin after NCCL_NET; every name is the same healthy fabric."""
    meta, logs = scenario("pass-p5-2node")
    for key in ("allreduce", "ep"):
        logs[key] = logs[key].replace("Using network Libfabric", f"Using network {name}")
    report = evaluate(logs, "p5.48xlarge", 2, "nccl")
    f = by_check(report)
    assert report.ok, [x for x in report.findings if x.status == FAIL]
    assert f["NCCL network"].status == PASS and f["NCCL network"].measured.startswith(name)
    assert f["EP NCCL network"].status == PASS


def test_recorded_run_with_nccl_net_ofi_passes():
    report = judge("pass-nccl-net-ofi-p5-2node")
    assert report.ok
    assert by_check(report)["NCCL network"].measured == "OFI (aws-ofi-nccl, EFA)"


# --- one failing run per reason of issue 13, sections 2 and 3 ------------------------------------

FAILURES = [
    # (fixture, check that fails, text its detail or fix must contain)
    ("no-ofi-plugin-p5-2node", "NCCL OFI plugin", "no 'NET/OFI Initializing aws-ofi-nccl' line"),
    ("sockets-p5-2node", "NCCL network", "'Using network Socket'"),
    ("nvshmem-not-libfabric-p5en-2node", "NVSHMEM transport",
     "looked for 'Successfully initialized the transport: libfabric' and 'Selected provider efa,'"),
    ("gin-type-mismatch-p5en-2node", "NCCL GIN type", "looked for 'NCCL_GIN_TYPE set by environment to 5.', "
     "found 'NCCL_GIN_TYPE set by environment to 2.'"),
    ("old-nvidia-driver-p5-2node", "node 0: nvidia_driver", "NVIDIA driver is 580.65.06 or newer"),
    ("old-efa-driver-p5en-gin-2node", "node 0: efa_driver", "EFA kernel driver 3.3.0 or newer"),
    ("no-peer-mapping-override-p5en-gin-2node", "node 0: peer_mapping_override", "PeerMappingOverride=1"),
    ("efa-allocatable-15-p5en-2node", "allocatable EFA on ip-10-0-1-11.ec2.internal", "kubectl cordon <node>"),
    ("no-gdrdrv-p5en-deepep-2node", "node 0: gdrcopy", "gdrdrv kernel module"),
    ("idle-nic-p5-2node", "EFA traffic (allreduce) on ip-10-0-1-11.ec2.internal",
     "idle NIC on node ip-10-0-1-11.ec2.internal: rdmap29s0 moved 0.00 GB"),
    ("missing-nic-p5-2node", "EFA traffic (allreduce) on ip-10-0-1-10.ec2.internal",
     "missing NIC on node ip-10-0-1-10.ec2.internal: the pod was given 31 of 32 EFA devices (not given: "
     "rdmap47s0)"),
    ("sockets-p5-2node", "EFA traffic (allreduce) on ip-10-0-1-10.ec2.internal",
     "no EFA device moved a byte during the allreduce benchmark"),
]


@pytest.mark.parametrize("fixture, check, text", FAILURES, ids=[f[0] for f in FAILURES])
def test_each_failure_reason_has_a_failing_fixture(fixture, check, text):
    report = judge(fixture)
    assert not report.ok
    f = by_check(report)[check]
    assert f.status == FAIL
    assert text in f.detail + " " + f.fix, (f.detail, f.fix)


def test_an_idle_nic_fails_although_bandwidth_passes_and_the_node_is_named():
    report = judge("idle-nic-p5-2node")
    f = by_check(report)
    assert f["all-reduce busbw @ 2 GiB"].status == PASS  # one NIC of 32 hides under the 90 % bar
    assert not report.ok
    assert report.bad_nodes == {"ip-10-0-1-11.ec2.internal": "idle EFA device(s) rdmap29s0"}
    assert f["EFA traffic (allreduce) on ip-10-0-1-11.ec2.internal"].measured == "idle: rdmap29s0"
    assert "kubectl cordon" in f["EFA traffic (allreduce) on ip-10-0-1-11.ec2.internal"].fix


def test_counters_pass_on_a_healthy_run_and_are_required():
    report = judge("pass-p5-2node")
    f = by_check(report)
    assert f["EFA traffic (allreduce)"].status == PASS and f["EFA traffic (ep)"].status == PASS
    assert f["EFA traffic (allreduce)"].measured == "32 devices x 2 nodes"
    meta, logs = scenario("pass-p5-2node")
    logs["allreduce"] = "\n".join(l for l in logs["allreduce"].splitlines() if "efa_traffic" not in l)
    f = by_check(evaluate(logs, "p5.48xlarge", 2, "nccl"))["EFA traffic (allreduce)"]
    assert f.status == FAIL and f.measured == "not measured"
    # a node whose row is missing is named as not reporting
    meta, logs = scenario("pass-p5-2node")
    logs["allreduce"] = "\n".join(l for l in logs["allreduce"].splitlines()
                                  if '"host": "fabric-p5-allreduce-1"' not in l)
    f = by_check(evaluate(logs, "p5.48xlarge", 2, "nccl"))["EFA traffic (allreduce)"]
    assert f.status == FAIL and f.measured == "1 node(s)"


def test_gin_type_5_also_needs_aws_ofi_ncclss_gdaki_line():
    meta, logs = scenario("gin-type-mismatch-p5en-2node")
    logs["ep"] = logs["ep"].replace("set by environment to 2.", "set by environment to 5.")
    f = by_check(evaluate(logs, "p5en.48xlarge", 2, "deepep-gin", "5"))
    assert f["NCCL GIN type"].status == PASS
    assert f["GIN EFA-GDA"].status == FAIL and "NET/OFI gin GDAKI: createContext done (" in f["GIN EFA-GDA"].detail
    logs["ep"] += ("x:1:1 [0] NCCL INFO NET/OFI gin GDAKI: createContext done (nranks=16 rank=0 nSignals=64 "
                   "nCounters=64 nContexts=4 num_rails=2 effective_rails=2)\n")
    assert by_check(evaluate(logs, "p5en.48xlarge", 2, "deepep-gin", "5"))["GIN EFA-GDA"].status == PASS
    # the proxy profile (type 2) is satisfied by the fixture's line as it is
    meta, logs = scenario("gin-type-mismatch-p5en-2node")
    assert by_check(evaluate(logs, "p5en.48xlarge", 2, "deepep-gin", "2"))["NCCL GIN type"].status == PASS


def test_allocatable_above_the_request_points_at_the_catalog():
    nodes = json.dumps({"items": [{"metadata": {"name": "n1"},
                                   "status": {"allocatable": {"vpc.amazonaws.com/efa": "32"}}}]})
    (f,) = judge_allocatable(nodes, 16)
    assert f.status == FAIL and (f.measured, f.expected) == ("32", "16")
    assert "infra/catalog/instances.py" in f.fix
    (f,) = judge_allocatable(json.dumps({"items": []}), 16)
    assert f.status == FAIL and f.measured == "no GPU nodes"


def test_fixture_readme_lists_every_scenario():
    readme = (FIXTURES / "README.md").read_text()
    for d in FIXTURES.iterdir():
        if d.is_dir() and not d.name.startswith("__"):
            assert f"| {d.name} |" in readme, d.name


# --- comparing recorded runs ---------------------------------------------------------------------


def test_state_records_figures_and_compare_lines_them_up():
    a = state_document(judge("pass-p5-2node"), "a", "2026-11-01T00:00:00+00:00")
    b = state_document(judge("degraded-p5-2node"), "b", "2026-11-02T00:00:00+00:00")
    assert a["figures"]["all-reduce busbw @ 2 GiB (GB/s)"] == pytest.approx(441.7, abs=0.01)
    assert a["figures"]["EP nccl dispatch RDMA, published shape (GB/s)"] == pytest.approx(31.0, rel=1e-3)
    header, rows = compare([("a", a), ("b", b)])
    assert header[0] == "figure" and header[-1] == "change"
    row = next(r for r in rows if r[0] == "all-reduce busbw @ 2 GiB (GB/s)")
    assert row[1:] == ["441.7", "283.9", "-35.7%"]


def test_gate_compare_prints_the_table(tmp_path, capsys):
    paths = []
    for name in ("pass-p5-2node", "degraded-p5-2node"):
        path = tmp_path / name / "gate.json"
        path.parent.mkdir()
        path.write_text(json.dumps(state_document(judge(name), name, "2026-11-30T00:00:00+00:00")))
        paths.append(str(path))
    args = parse(["gate", "--compare", *paths, "--width", "250"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "all-reduce busbw @ 2 GiB (GB/s)" in out and "-35.7%" in out


def test_gate_compare_refuses_a_file_without_figures(tmp_path, capsys):
    path = tmp_path / "gate.json"
    path.write_text(json.dumps({"version": 1, "ok": True}))
    args = parse(["gate", "--compare", str(path)])
    assert args.func(args) == 2
    assert "no 'figures' (written by an older rlkit, or not a gate.json)" in capsys.readouterr().err


def test_every_record_the_kit_writes_or_wrote_has_the_shape_its_readers_check(tmp_path):
    """The shape check (load_state) must accept what this rlkit writes (a verdict with EP
    measurements and layout, a gate under way, a baseline) and the records older ones wrote."""
    from ops.gate.record import state_problem, update_baseline, write_started
    from tests.support.fakes import write_state

    doc = state_document(judge("pass-p5en-deepep-2node"), "cb", "2026-11-30T00:00:00+00:00",
                         nodes=[{"name": "ip-10-0-1-10", "instance": "i-0aaa"}])
    baseline = update_baseline(tmp_path, doc)
    started = write_started("cb", tmp_path / "cb", "now", "p5en.48xlarge", 2, "nccl", print)
    write_state(tmp_path, ep={"shape": {}, "measurements": {"nccl": {"time_us": 9000.0}}})
    older = json.loads((tmp_path / ".rlkit/gt/gate.json").read_text())  # version 1
    assert "image" not in older and "measured_nodes" not in older
    for record in (doc, json.loads(baseline.read_text()), json.loads(started.read_text()), older):
        assert state_problem(record) is None


@pytest.mark.parametrize("content, why", [
    ('{"ok": true, "figures": {"a": "x"}}', 'figures["a"] is "x", not a number'),
    ('{"ok": true, "figures": [1]}', "figures is [1], not an object"),
    (json.dumps({"ok": True, "figures": {}}).encode("utf-16"),
     "not UTF-8 text: byte 0xff at offset 0"),
])
def test_gate_compare_refuses_a_corrupt_file_with_one_message(tmp_path, capsys, content, why):
    good = tmp_path / "a" / "gate.json"
    good.parent.mkdir()
    good.write_text(json.dumps({"ok": True, "nodes": 2, "figures": {"x (GB/s)": 1.5}}))
    path = tmp_path / "gate.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    args = parse(["gate", "--compare", str(good), str(path)])
    assert args.func(args) == 2
    assert capsys.readouterr().err == (
        f"error: --compare {path} is corrupt ({why}), so the last gate result cannot be trusted. "
        f"Fix: delete it and run `rlkit gate` again (or judge saved logs: rlkit gate --logs-dir "
        f"{tmp_path / 'gate-logs'})\n")


def test_state_merges_ep_measurements_and_picks_the_faster_backend():
    report = judge("pass-p5en-deepep-2node")
    layout = state_document(report, "cb", "now")["ep"]["layout"]
    prev = {"instance_type": "p5en.48xlarge", "nodes": 2,
            "ep": {"shape": report.ep.shape, "layout": layout, "measurements": {
                "nccl": {"dispatch_GBps": 30.0, "combine_GBps": 29.0, "time_us": 9e9}}}}
    doc = state_document(report, "cb", "2026-03-01T12:00:00+00:00", prev)
    assert set(doc["ep"]["measurements"]) == {"nccl", "deepep-nvshmem"}
    assert doc["ep"]["faster"] == "deepep-nvshmem" and doc["ok"] is True
    assert faster_backend({"a": {"time_us": 2, "passed": True}, "b": {"time_us": 1, "passed": True}}) == "b"
    assert doc["ep"]["decided_by"].startswith("training: EP8 inside one NVLink domain")
    assert set(doc["ep"]["measurements"]["deepep-nvshmem"]["spans"]) == {"training", "rollout"}
    # a measurement of other EP groups (another layout) is not compared with this one
    prev["ep"]["layout"] = {"model": {"ep_size": 16, "ep_nodes": 2, "where": "EP16 across EFA (2 nodes)"}}
    assert set(state_document(report, "cb", "now", prev)["ep"]["measurements"]) == {"deepep-nvshmem"}


def test_a_backend_whose_gate_failed_is_never_called_faster(tmp_path):
    """`rlkit gate --ep-backend deepep-nvshmem` failed (NVSHMEM on UCX, not libfabric), a later
    `rlkit gate` with nccl passed: the failed run's step time is kept, marked, and never faster."""
    failed = judge("nvshmem-not-libfabric-p5en-2node")
    assert not failed.ok and failed.ep.backend == "deepep-nvshmem"
    write_record(failed, "gt", tmp_path, {}, "2026-03-01T12:00:00+00:00", print)
    passed = judge("pass-p5en-deepep-2node")  # the same nodes and shape, measured with nccl
    passed.ep_backend = passed.ep.backend = "nccl"
    passed.ep.time_us = failed.ep.time_us * 3  # slower than the failed run's figure
    path, doc = write_record(passed, "gt", tmp_path, {}, "2026-03-02T12:00:00+00:00", print)
    measurements = doc["ep"]["measurements"]
    assert doc["ok"] is True and set(measurements) == {"nccl", "deepep-nvshmem"}
    assert doc["ep"]["faster"] == "nccl"
    assert measurements["deepep-nvshmem"]["passed"] is False and measurements["nccl"]["passed"] is True
    # no passing measurement at all: nothing is faster
    assert faster_backend({"deepep-nvshmem": {"time_us": 1, "passed": False}}) is None


def test_state_ignores_earlier_measurements_of_another_shape():
    report = judge("pass-p5en-deepep-2node")
    prev = {"instance_type": "p5en.48xlarge", "nodes": 4,
            "ep": {"shape": report.ep.shape, "measurements": {"nccl": {"time_us": 1}}}}
    doc = state_document(report, "cb", "now", prev)
    assert set(doc["ep"]["measurements"]) == {"deepep-nvshmem"}


# --- the kubectl flow ----------------------------------------------------------------------------

@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    return FakeKubectl(tmp_path, monkeypatch)


def test_gate_runs_each_job_in_order_and_records_a_pass(tmp_path, kubectl, capsys):
    script_cluster(kubectl, "pass-p5-2node")
    code = run_gate(tmp_path)
    out = capsys.readouterr().out
    assert code == 0, out
    applied = [c[c.index("-f") + 1] for c in kubectl.calls if c[0] == "apply"]
    # the namespace's NetworkPolicy goes with it, before any fabric pod exists
    assert next(c for c in kubectl.calls if c[0] == "apply") == [
        "apply", *(a for f in NAMESPACE_FILES for a in ("-f", str(tmp_path / "out" / f)))]
    assert "01-networkpolicy.yaml" in NAMESPACE_FILES
    assert applied == [str(tmp_path / "out/00-namespace.yaml"),
                       str(tmp_path / "out/02-shared-fs-pv.yaml")] + [
        str(tmp_path / f"out/fabric/{k}") for k in ("nodecheck", "allreduce", "ep")]
    deletes = [c for c in kubectl.calls if c[0] == "delete"]
    assert len(deletes) == 6  # before (stale run) and after each job
    state = json.loads((tmp_path / ".rlkit/gt/gate.json").read_text())
    assert state["ok"] is True and state["ep"]["faster"] == "nccl"
    # the image its jobs ran (training.image_tag, the EP backend), which launch holds the job to
    # pinned to the digest the tag named when the gate ran (ops/image_digest.py)
    image = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/gt:0.1.0-nccl@{digest_of('0.1.0-nccl')}"
    assert state["image"] == image and state["ep"]["measurements"]["nccl"]["image"] == image
    # the nodes its pods ran on, with the instances behind them (nodes.json's providerIDs)
    assert state["measured_nodes"] == [
        {"name": "ip-10-0-1-10.ec2.internal", "instance": "i-0000000000000000a"},
        {"name": "ip-10-0-1-11.ec2.internal", "instance": "i-0000000000000000b"}]
    nodes_call = next(c for c in kubectl.calls if c[:2] == ["get", "nodes"])
    assert "rlkit.io/node-role=gpu,rlkit.io/efa=true,rlkit.io/node-group=p5" in nodes_call or any(
        "node-group=p5" in a for a in nodes_call)
    assert (tmp_path / ".rlkit/gt/gate-logs/nodes.json").is_file()
    # each pod's log after the line that names its pod and node (the recorded fixture has its own)
    kept = (tmp_path / ".rlkit/gt/gate-logs/allreduce.log").read_text()
    assert kept == ("# rlkit gate: pod fabric-p5-allreduce-0-abcde on node ip-10-0-1-10.ec2.internal\n"
                    + (FIXTURES / "pass-p5-2node/allreduce.log").read_text())
    assert "nodecheck: 0 succeeded, 0 failed, pods 1 Running" in out
    assert "Gate PASSED" in out


def test_a_passing_gate_with_the_default_state_dir_writes_its_baseline(tmp_path, kubectl, capsys,
                                                                          monkeypatch):
    """No --state-dir: gate.json and the instance type's baseline both go to the default root
    ($XDG_STATE_HOME/rlkit), where the next gate's bisection reads the baseline."""
    from ops.gate.record import baseline_file, load_baseline
    from tests.support.fakes import outputs_file

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    script_cluster(kubectl, "pass-p5-2node")
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    args = parse(["gate", "--config", str(cfg), "--outputs", str(outputs_file(tmp_path)),
                  "--out", str(tmp_path / "out"), "--poll", "0", "--width", "250"])
    assert args.state_dir is None
    assert args.func(args) == 0, capsys.readouterr().out
    root = tmp_path / "xdg" / "rlkit"
    assert json.loads((root / "gt" / "gate.json").read_text())["ok"] is True
    assert baseline_file(None, "p5.48xlarge") == root / ".baselines" / "p5.48xlarge.json"
    figures = load_baseline(None, "p5.48xlarge")["figures"]
    assert figures and all(name.startswith("all-reduce busbw") for name in figures)


def _gpu_pod(name, namespace, node, gpus="8", labels=None, owner=None):
    pod = {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
           "spec": {"nodeName": node, "containers": [
               {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}}]},
           "status": {"phase": "Running"}}
    if owner:
        pod["metadata"]["ownerReferences"] = [{"kind": owner[0], "name": owner[1]}]
    return pod


def test_a_gate_refuses_while_a_rayjob_holds_the_gpus_and_keeps_the_last_pass(tmp_path, kubectl, capsys):
    """A RayJob runs on the group's nodes: the gate's pods would sit Pending until the deadline
    and record a FAIL over the last PASS. It stops first, names the RayJob and leaves gate.json."""
    from tests.support.fakes import rayjob, write_state

    write_state(tmp_path, ok=True)
    before = (tmp_path / ".rlkit/gt/gate.json").read_text()
    script_cluster(kubectl, "pass-p5-2node")
    done = json.loads(rayjob("SUCCEEDED", "Complete"))
    done["metadata"]["name"] = "old-run"
    kubectl.rule(["get", "rayjobs"], stdout=json.dumps({"items": [json.loads(rayjob()), done]}))
    assert run_gate(tmp_path) == 2
    err = capsys.readouterr().err
    assert (tmp_path / ".rlkit/gt/gate.json").read_text() == before
    assert not [c for c in kubectl.calls if c[0] in ("apply", "delete")]
    assert ("error: the GPUs of gpu_node_groups.p5 are in use: RayJob qwen3-30b-a3b-grpo in "
            "rl-training (jobDeploymentStatus Running, jobStatus RUNNING). The gate's jobs would "
            "wait Pending for them for up to ") in err
    assert f"Nothing was applied, and {tmp_path / '.rlkit/gt/gate.json'} is unchanged" in err
    assert f"`rlkit status --config {tmp_path / 'gt.yaml'} --watch`" in err
    assert "run: kubectl delete rayjob qwen3-30b-a3b-grpo -n rl-training." in err
    assert "old-run" not in err  # KubeRay is done with it


def test_a_gate_refuses_while_other_pods_hold_the_groups_gpus(tmp_path, kubectl, capsys):
    script_cluster(kubectl, "pass-p5-2node")
    on, off = "ip-10-0-1-10.ec2.internal", "ip-10-0-1-99.ec2.internal"
    harmless = [
        # a bisection subset job an earlier gate left: the gate deletes it (by these labels)
        # before it applies its own
        _gpu_pod("fabric-p5-allreduce-b3-0-x", "rl-training", on, labels={
            "app.kubernetes.io/instance": "gt", "app.kubernetes.io/component": "fabric-allreduce"}),
        _gpu_pod("other-0", "team", off),  # another node
        _gpu_pod("agent", "kube-system", on, gpus=None),  # holds no GPU
    ]
    kubectl.rule(["get", "pods", "-A"], stdout=json.dumps({"items": harmless}))
    assert run_gate(tmp_path) == 0, capsys.readouterr().out
    pods_call = next(c for c in kubectl.calls if c[:3] == ["get", "pods", "-A"])
    assert "status.phase!=Succeeded,status.phase!=Failed" in pods_call

    capsys.readouterr()
    kubectl.rules.pop()
    kubectl.rule(["get", "pods", "-A"], stdout=json.dumps({"items": harmless + [
        _gpu_pod("train-0", "team", on, gpus="4", owner=("Job", "train"))]}))
    assert run_gate(tmp_path) == 2
    err = capsys.readouterr().err
    assert ("are in use: pod team/train-0 on ip-10-0-1-10.ec2.internal (4 GPU(s), owned by Job "
            "train).") in err
    assert "run: kubectl delete job train -n team." in err
    assert "fabric-p5-allreduce" not in err and "other-0" not in err

    # the same labels in another namespace are not the gate's
    capsys.readouterr()
    kubectl.rules.pop()
    kubectl.rule(["get", "pods", "-A"], stdout=json.dumps({"items": [_gpu_pod(
        "fabric-p5-allreduce-0-y", "team", on, labels={
            "app.kubernetes.io/instance": "gt", "app.kubernetes.io/component": "fabric-allreduce"})]}))
    assert run_gate(tmp_path) == 2
    assert "pod team/fabric-p5-allreduce-0-y on ip-10-0-1-10.ec2.internal" in capsys.readouterr().err


def test_a_gate_runs_where_kuberay_is_not_installed(tmp_path, kubectl, capsys):
    script_cluster(kubectl, "pass-p5-2node")
    kubectl.rule(["get", "rayjobs"], rc=1,
                 stderr='error: the server doesn\'t have a resource type "rayjobs"\n')
    assert run_gate(tmp_path) == 0, capsys.readouterr()


def test_gate_stops_after_a_failed_node_check(tmp_path, kubectl, capsys):
    script_cluster(kubectl, "missing-efa-p5-2node")
    code = run_gate(tmp_path)
    out = capsys.readouterr().out
    assert code == 1
    assert not any("fabric/allreduce" in " ".join(c) for c in kubectl.calls if c[0] == "apply")
    assert "Node check failed: the benchmarks are skipped." in out
    assert "Gate FAILED" in out and "missing EFA devices" in out
    assert json.loads((tmp_path / ".rlkit/gt/gate.json").read_text())["ok"] is False


def test_gate_reports_a_failed_job(tmp_path, kubectl, capsys):
    script_cluster(kubectl, "pass-p5-2node", failing_job="allreduce")
    assert run_gate(tmp_path) == 1
    out = capsys.readouterr().out
    assert "job fabric-p5-allreduce failed" in out


def test_gate_times_out_and_names_pending_pods(tmp_path, kubectl, capsys):
    job = "fabric-p5-nodecheck"
    kubectl.rule(["get", "job", job], stdout=job_json(False))
    kubectl.rule(["get", "pods", f"job-name={job}"], stdout=pods_json(
        job, "Pending", "0/3 nodes are available: 2 Insufficient vpc.amazonaws.com/efa."))
    assert run_gate(tmp_path, "--timeout", "0") == 1
    out = capsys.readouterr().out
    assert "(0/3 nodes are available: 2 Insufficient vpc.amazonaws.com/efa.)" in out
    assert "did not finish in time" in out


def test_dry_run_prints_commands_and_runs_nothing(tmp_path, kubectl, capsys):
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    # Placeholder outputs (no --outputs): the cluster to check is the one the stack names
    # after the config (names.eks_cluster_name), and kubectl points at it.
    kubectl.point_at("gt")
    args = parse(["gate", "--config", str(cfg), "--dry-run", "--out", str(tmp_path / "out"),
                  "--state-dir", str(tmp_path / ".rlkit")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    # the local context read, nothing else: no API server call, nothing applied
    assert kubectl.all_calls == [["config", "view", "--minify", "-o", "json"]]
    assert not (tmp_path / "out").exists()
    arn = "arn:aws:eks:us-east-1:123456789012:cluster/gt"
    assert (f"[dry-run] context check: {arn} points at EKS cluster gt in us-east-1 (read from "
            "the kubeconfig; a dry run does not contact the API server)") in out
    # the commands as the real gate runs them: pinned to the checked context
    assert f"[dry-run] kubectl --context {arn} apply -f {tmp_path}/out/fabric/nodecheck" in out
    assert f"[dry-run] kubectl --context {arn} wait -n rl-training job/fabric-p5-allreduce" in out
    assert "[dry-run] would judge the logs" in out


def _runner(tmp_path, k: Kubectl, sleep) -> GateRunner:
    out = tmp_path / "out"
    (out / "fabric" / "nodecheck").mkdir(parents=True)
    (out / "fabric" / "nodecheck" / "00-job.yaml").write_text(
        "kind: Job\nmetadata: {name: fabric-p5-nodecheck, namespace: rl-training}\n")
    return GateRunner(k, "rl-training", out, [("nodecheck", "fabric-p5-nodecheck")],
                      "p5.48xlarge", 2, timeout_s=100, poll_s=1, echo=lambda s: None,
                      sleep=sleep)


def _interrupt(_):
    raise KeyboardInterrupt


def test_ctrl_c_deletes_what_the_gate_applied(tmp_path, kubectl):
    kubectl.rule(["get", "job"], stdout=job_json(False))
    runner = _runner(tmp_path, Kubectl(), _interrupt)
    with pytest.raises(GateInterrupted) as err:
        runner.run()
    assert str(err.value) == ("Interrupted; deleted job/fabric-p5-nodecheck from namespace "
                              "rl-training.")
    assert kubectl.calls[-1][:3] == ["delete", "--ignore-not-found", "--wait=true"]


def test_ctrl_c_reports_exactly_what_is_left_when_delete_fails(tmp_path, kubectl):
    kubectl.rule(["get", "job"], stdout=job_json(False))
    kubectl.rule(["delete", "--timeout=60s"], rc=1, stderr="Unable to connect to the server")
    runner = _runner(tmp_path, Kubectl(), _interrupt)
    with pytest.raises(GateInterrupted) as err:
        runner.run()
    msg = str(err.value)
    assert "Left in namespace rl-training: job/fabric-p5-nodecheck." in msg
    assert f"kubectl delete --ignore-not-found -f {tmp_path}/out/fabric/nodecheck" in msg
    assert "Unable to connect to the server" in msg


@pytest.mark.parametrize("cut_short, code", [
    (GateInterrupted("Interrupted; deleted job/fabric-p5-allreduce from namespace rl-training."), 130),
    (KubectlError("kubectl get job fabric-p5-allreduce", "Unable to connect to the server"), 2)])
def test_a_gate_cut_short_while_measuring_leaves_no_earlier_pass(tmp_path, kubectl, capsys, monkeypatch,
                                                                 cut_short, code):
    """Yesterday's gate passed; today's is stopped by Ctrl-C or a kubectl error before it judged
    anything. gate.json must not still say PASS: launch refuses, saying the gate did not finish."""
    from infra.config import load_config
    from ops.gate import load_state
    from ops.launching import gate_verdict
    from tests.support.fakes import write_state

    earlier = {"shape": {}, "measurements": {"nccl": {"time_us": 1600.0, "passed": True}}}
    write_state(tmp_path, ok=True, ep=earlier)

    def stopped(self):
        raise cut_short

    monkeypatch.setattr(GateRunner, "run", stopped)
    assert run_gate(tmp_path) == code
    path = tmp_path / ".rlkit/gt/gate.json"
    state = load_state(path)
    assert state["ok"] is False and state["in_progress"] is True
    assert state["started_at"] != "2026-03-01T12:00:00+00:00"
    assert state["ep"] == earlier  # kept for the next gate to compare backends with
    err = capsys.readouterr().err
    assert (f"{path} records that this gate did not finish: `rlkit launch` refuses until a gate "
            f"passes. Run `rlkit gate --config {tmp_path / 'gt.yaml'}` again.") in err
    verdict = gate_verdict(state, load_config(tmp_path / "gt.yaml"), path)
    assert verdict.startswith(f"the last fabric gate for 'gt' did not finish (started {state['started_at']})")
    assert "Run `rlkit gate --config <this config> --outputs cdk-outputs.json` again" in verdict


def test_a_gate_json_write_cut_short_leaves_the_previous_record_whole(tmp_path, monkeypatch):
    """A write that stops part way (disk full, the process killed) must leave the old gate.json
    or the new one, never half of one that launch then calls corrupt."""
    from pathlib import Path

    from ops.gate import load_state

    path, _ = write_record(judge("pass-p5-2node"), "gt", tmp_path, {}, "2026-03-01T12:00:00+00:00", print)
    before = path.read_text()
    real_write = Path.write_text

    def torn(self, text, *args, **kwargs):
        real_write(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", torn)
    with pytest.raises(OSError):
        write_record(judge("degraded-p5-2node"), "gt", tmp_path, {}, "2026-03-02T12:00:00+00:00", print)
    monkeypatch.undo()
    assert path.read_text() == before and load_state(path)["ok"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gate-logs", "gate.json"]  # no temporary file left


def test_a_few_failed_reads_of_a_running_job_do_not_end_the_gate(tmp_path, kubectl):
    """An API server that throttles or restarts answers a poll or two with an error; the gate
    (an hour of jobs, then bisection) goes on, and gives up only after several in a row."""
    from ops.gate.runner import POLL_FAILURES_TOLERATED
    from ops.kube import KubectlError

    said: list[str] = []
    kubectl.rule(["get", "job"], rc=1, times=POLL_FAILURES_TOLERATED - 1,
                 stderr="Error from server (TooManyRequests): the server has received too many requests")
    kubectl.rule(["get", "job"], stdout=job_json(True))
    runner = _runner(tmp_path, Kubectl(), lambda _: None)
    runner.echo = said.append
    assert runner.wait("nodecheck", "fabric-p5-nodecheck") == "complete"
    assert sum("could not read the job" in s for s in said) == POLL_FAILURES_TOLERATED - 1
    assert said[0].startswith("  nodecheck: could not read the job (Error from server (TooManyRequests)")
    # One more in a row ends it, with kubectl's own error.
    kubectl.rule(["get", "pods"], rc=1, stderr="Unable to connect to the server", times=10 ** 6)
    with pytest.raises(KubectlError, match="Unable to connect to the server"):
        runner.wait("nodecheck", "fabric-p5-nodecheck")


def test_missing_kubectl_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert run_gate(tmp_path) == 2
    assert "kubectl is not installed or not on PATH" in capsys.readouterr().err


def test_logs_dir_judges_recorded_logs(tmp_path, capsys):
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    args = parse(["gate", "--config", str(cfg), "--logs-dir", str(FIXTURES / "degraded-p5-2node"),
                  "--state-dir", str(tmp_path / ".rlkit"), "--width", "250"])
    assert args.func(args) == 1
    assert "degraded fabric" in capsys.readouterr().out
    # saved logs do not say which image ran them: recorded as unknown, not as this config's
    assert json.loads((tmp_path / ".rlkit/gt/gate.json").read_text())["image"] is None


def test_ep_backend_override_is_validated(tmp_path, capsys):
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    args = parse(["gate", "--config", str(cfg), "--ep-backend", "deepep-gin", "--dry-run",
                  "--state-dir", str(tmp_path / ".rlkit"), "--out", str(tmp_path / "o")])
    args.func(args)
    assert "EP backend deepep-gin" in capsys.readouterr().out


def test_config_is_valid_for_the_fixture_shapes():
    cfg = parse_config(__import__("yaml").safe_load(CONFIG))
    assert cfg.training.nodes * 8 == 16  # the fixtures' world_size


def test_docs_explain_every_threshold():
    docs = (REPO_ROOT / "docs" / "gate.md").read_text()
    for ref in acceptance.REFERENCES:
        assert ref.instance_type in docs and f"{ref.published_GBps:g}" in docs, ref
    for line in ("NET/OFI Initializing aws-ofi-nccl", "Using network Libfabric",
                 "Successfully initialized the transport: libfabric", "NCCL_GIN_TYPE set by environment to",
                 "NET/OFI gin GDAKI: createContext done ("):
        assert line in docs, line


def test_logs_dir_reads_the_recorded_node_list(tmp_path, capsys):
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG.replace("p5.48xlarge", "p5en.48xlarge"))
    args = parse(["gate", "--config", str(cfg), "--logs-dir", str(FIXTURES / "efa-allocatable-15-p5en-2node"),
                  "--state-dir", str(tmp_path / ".rlkit"), "--width", "250"])
    assert args.func(args) == 1
    out = capsys.readouterr().out
    assert "allocatable EFA on ip-10-0-1-11.ec2.internal" in out
    assert (tmp_path / ".rlkit/gt/gate-logs/nodes.json").is_file()


def test_fixtures_are_what_make_fixtures_writes(tmp_path):
    """The fixtures use rltrainer's own row builders; a format change must regenerate them."""
    import importlib.util

    saved_path, saved_modules = list(sys.path), set(sys.modules)
    try:
        spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.main(out=tmp_path)
    finally:  # the generator puts the trainer's sources and tests on sys.path: leave no trace
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            if name.startswith(("test_trainer", "trainer_helpers", "make_fixtures")):
                del sys.modules[name]
    written = sorted(f.relative_to(tmp_path) for f in tmp_path.rglob("*") if f.is_file())
    assert written
    for rel in written:
        assert (tmp_path / rel).read_text() == (FIXTURES / rel).read_text(), (
            f"{rel} is stale: run .venv/bin/python tests/fixtures/gate/make_fixtures.py")


def test_measured_nodes_leave_out_bad_nodes_and_keep_names_without_a_node_list():
    """A node the gate named bad was measured, but not accepted; without nodes.json (judging
    saved logs that lack it) a node is known by its name only."""
    from ops.gate.record import measured_nodes

    logs = {k: (FIXTURES / "slow-node-p5-4node" / f"{k}.log").read_text()
            for k in ("nodecheck", "allreduce")}
    names = [f"ip-10-0-1-{i}.ec2.internal" for i in (10, 11, 12, 13)]
    assert measured_nodes(logs) == [{"name": n} for n in names]
    logs["nodes"] = (FIXTURES / "slow-node-p5-4node" / "nodes.json").read_text()
    assert measured_nodes(logs, {names[2]: "drags allreduce (bisection)"}) == [
        {"name": n, "instance": f"i-0{i:016x}"} for i, n in zip((10, 11, 13), names[:2] + names[3:])]


# --- the run's time, kubectl failures, signals and leftovers -------------------------------------

def _job_doc(tmp_path, key="nodecheck"):
    import yaml

    job = next(d for f in sorted((tmp_path / "out/fabric" / key).glob("*.yaml"))
               for d in yaml.safe_load_all(f.read_text()) if d and d["kind"] == "Job")
    return job["spec"]


@pytest.mark.parametrize("timeout, deadline", [(7200, 7500), (600, 900), (3600, 3900)])
def test_the_jobs_deadline_follows_the_gates_timeout_with_a_margin(tmp_path, kubectl, timeout, deadline):
    """The Job controller's clock starts before the gate's first poll: the Job's own deadline must
    come later than the gate's --timeout, or the gate reports a timeout as a failed job (and a
    --timeout above an hour could never take effect)."""
    from manifests.fabric import FABRIC_DEADLINE_MARGIN_SECONDS, FABRIC_TTL_SECONDS

    script_cluster(kubectl, "pass-p5-2node")
    assert run_gate(tmp_path, "--timeout", str(timeout)) == 0
    assert deadline == timeout + FABRIC_DEADLINE_MARGIN_SECONDS
    for key in ("nodecheck", "allreduce", "ep"):
        spec = _job_doc(tmp_path, key)
        assert spec["activeDeadlineSeconds"] == deadline
        # finished jobs tidy themselves an hour later; the gate reads the logs long before
        assert spec["ttlSecondsAfterFinished"] == FABRIC_TTL_SECONDS >= 3600


def test_a_job_failed_by_its_deadline_is_reported_as_a_timeout_naming_pending_pods(tmp_path, kubectl, capsys):
    job = "fabric-p5-nodecheck"
    failed = {"status": {"active": 0, "failed": 2, "conditions": [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
         "message": "Job was active longer than specified deadline"}]}}
    kubectl.rule(["get", "job", job], stdout=json.dumps(failed))
    kubectl.rule(["get", "pods", f"job-name={job}"], stdout=pods_json(
        job, "Pending", "0/3 nodes are available: 2 Insufficient vpc.amazonaws.com/efa."))
    assert run_gate(tmp_path) == 1
    out = capsys.readouterr().out
    assert "failed by its deadline (activeDeadlineSeconds)" in out
    assert f"job {job} did not finish in time (deleted); pods that never ran: {job}-0-abcde Pending: 0/3 " \
           "nodes are available: 2 Insufficient vpc.amazonaws.com/efa." in out
    assert "raise --timeout if the nodes are slow to join" in out
    assert "read the job's log for the error" not in out
    # a pod that never ran has no log to read: none is asked for
    assert not [c for c in kubectl.calls if c[0] == "logs"]


def test_a_job_whose_pods_were_refused_by_the_node_points_at_them_not_at_a_log(tmp_path, kubectl, capsys):
    """The kubelet refused the pod (an EFA device plugin without the devices: admission error):
    the Job fails with no log to read; the finding says why the pod did not start."""
    job = "fabric-p5-nodecheck"
    failed = {"status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                                                       "reason": "BackoffLimitExceeded"}]}}
    kubectl.rule(["get", "job", job], stdout=json.dumps(failed))
    pod = {"metadata": {"name": f"{job}-0-abcde"}, "spec": {"nodeName": "ip-10-0-1-10.ec2.internal"},
           "status": {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                      "message": "Allocate failed due to requested number of devices unavailable for "
                                 "vpc.amazonaws.com/efa. Requested: 32, Available: 0"}}
    kubectl.rule(["get", "pods", f"job-name={job}"], stdout=json.dumps({"items": [pod]}))
    assert run_gate(tmp_path) == 1
    out = capsys.readouterr().out
    assert (f"job {job} failed; pods that never ran: {job}-0-abcde Failed: UnexpectedAdmissionError Allocate "
            "failed due to requested number of devices unavailable") in out
    assert f"kubectl describe pods -n rl-training -l job-name={job}" in out
    assert not [c for c in kubectl.calls if c[0] == "logs"]


def test_a_rerun_whose_pods_never_ran_says_it_could_not_run(tmp_path, kubectl):
    """A node of the subset is gone (spot, auto-repair, the Capacity Block ended): the rerun's
    pods stay Pending; that proves nothing about its nodes, and there is no log to read."""
    from ops.gate.bisect import NOT_STARTED

    script_cluster(kubectl, "pass-p5-2node")
    assert run_gate(tmp_path) == 0  # renders tmp/out
    sub = "fabric-p5-allreduce-b1"
    why = "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
    kubectl.rule(["get", "job", sub], stdout=job_json(False))
    kubectl.rule(["get", "pods", f"job-name={sub}"], stdout=pods_json(sub, "Pending", why))
    runner = GateRunner(Kubectl(), "rl-training", tmp_path / "out", [("allreduce", "fabric-p5-allreduce")],
                        "p5.48xlarge", 2, 0, 0, lambda _: None, sleep=lambda _: None)
    state, text = runner.run_subset("allreduce", ["ip-10-0-1-12.ec2.internal", "ip-10-0-1-13.ec2.internal"], "b1")
    assert state == f"{NOT_STARTED}: {sub}-0-abcde Pending: {why}"
    assert text.endswith(f"(no log: the pod never ran: Pending: {why})\n")
    assert not [c for c in kubectl.calls if c[0] == "logs" and f"{sub}-0-abcde" in c]


@pytest.fixture
def no_backoff(monkeypatch):
    from ops.gate import runner

    monkeypatch.setattr(runner, "RETRY_BACKOFF_S", 0.0)


def test_a_log_read_that_fails_once_is_tried_again(tmp_path, kubectl, capsys, no_backoff):
    """A kubelet that does not answer one `kubectl logs` must not become a fabric FAIL (and hours
    of bisection): the read is tried again."""
    script_cluster(kubectl, "pass-p5-2node")
    kubectl.rules.insert(1, {"match": ["logs", "fabric-p5-allreduce-0-abcde"], "rc": 1, "times": 2,
                             "stderr": "Error from server: Get \"https://10.0.1.10:10250/containerLogs/"
                                       "rl-training/fabric-p5-allreduce-0-abcde\": dial tcp 10.0.1.10:10250: "
                                       "i/o timeout\n"})
    kubectl.rules_path.write_text(json.dumps(kubectl.rules))
    assert run_gate(tmp_path) == 0
    out = capsys.readouterr().out
    assert "could not read the log of pod fabric-p5-allreduce-0-abcde (Error from server: Get" in out
    assert "trying again (2 of 4)" in out and "Gate PASSED" in out
    assert sum(c[0] == "logs" and "fabric-p5-allreduce-0-abcde" in c for c in kubectl.calls) == 3


def test_a_log_that_cannot_be_read_ends_the_gate_as_an_error_not_a_fabric_fail(tmp_path, kubectl, capsys,
                                                                              no_backoff):
    from ops.gate.runner import POLL_FAILURES_TOLERATED

    script_cluster(kubectl, "pass-p5-2node")
    kubectl.rules.insert(1, {"match": ["logs", "fabric-p5-allreduce-0-abcde"], "rc": 1,
                             "stderr": "Error from server (InternalError): an error on the server (\"\") "
                                       "has prevented the request from succeeding\n"})
    kubectl.rules_path.write_text(json.dumps(kubectl.rules))
    assert run_gate(tmp_path) == 2
    err = capsys.readouterr().err
    assert ("could not read the log of pod fabric-p5-allreduce-0-abcde: Error from server (InternalError): "
            "an error on the server") in err
    assert sum(c[0] == "logs" and "fabric-p5-allreduce-0-abcde" in c for c in kubectl.calls) == \
        POLL_FAILURES_TOLERATED
    state = json.loads((tmp_path / ".rlkit/gt/gate.json").read_text())
    assert state["in_progress"] is True and state["ok"] is False  # not judged: no fabric verdict
    assert not (tmp_path / "out/fabric-subsets").exists()  # no bisection
    # the job whose log could not be read was deleted all the same; the ep job never ran
    deletes = [c for c in kubectl.calls if c[0] == "delete" and str(tmp_path / "out/fabric/allreduce") in c]
    assert len(deletes) == 2
    assert not [c for c in kubectl.calls if c[0] == "apply" and str(tmp_path / "out/fabric/ep") in c]


def test_a_delete_or_node_read_that_fails_once_is_tried_again(tmp_path, kubectl, capsys, no_backoff):
    script_cluster(kubectl, "pass-p5-2node")
    kubectl.rules[1:1] = [
        {"match": ["delete", "--wait=false"], "rc": 1, "times": 1, "stderr": "Unable to connect to the server: EOF\n"},
        # the gate's own read of the GPU nodes (the first, before anything is written, reads
        # what holds them)
        {"match": ["get", "nodes"], "rc": 1, "times": 1, "skip": 1,
         "stderr": "Error from server (TooManyRequests): the server has received too many requests\n"}]
    kubectl.rules_path.write_text(json.dumps(kubectl.rules))
    assert run_gate(tmp_path) == 0
    out = capsys.readouterr().out
    assert "could not delete fabric-p5-nodecheck (Unable to connect to the server: EOF); trying again" in out
    assert "could not read the GPU nodes (Error from server (TooManyRequests)" in out


@pytest.mark.parametrize("sig, name", [("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGHUP")])
def test_sigterm_and_sighup_delete_what_the_gate_applied(tmp_path, kubectl, sig, name):
    """A CI job cancelled (SIGTERM) or the SSH session dropped (SIGHUP) must not leave a job
    holding every GPU node: the same way out as Ctrl-C."""
    import os
    import signal

    number = getattr(signal, sig)
    seen: list[int] = []
    previous = signal.signal(number, lambda s, _f: seen.append(s))
    try:
        kubectl.rule(["get", "job"], stdout=job_json(False))

        def signalled(_):
            os.kill(os.getpid(), number)
            raise AssertionError(f"the gate went on after {name}")

        runner = _runner(tmp_path, Kubectl(), signalled)
        with pytest.raises(GateInterrupted) as err:
            runner.run()
        assert str(err.value) == (f"Interrupted ({name}); deleted job/fabric-p5-nodecheck from namespace "
                                  "rl-training.")
        assert kubectl.calls[-1][:3] == ["delete", "--ignore-not-found", "--wait=true"]
        assert runner.applied == []
        # the handler the gate found is back afterwards
        assert seen == []  # the gate took the signal itself
        os.kill(os.getpid(), number)
        assert seen == [number]
    finally:
        signal.signal(number, previous)


def test_a_gate_stops_while_another_gate_of_the_environment_runs(tmp_path, kubectl, capsys):
    """Before: a second `rlkit gate` (another terminal, a CI job) took the first one's running
    jobs for leftovers, deleted them and applied its own under the same names. A running fabric
    Job stops the gate before gate.json or the cluster is touched; finished ones are still
    deleted as leftovers."""
    from tests.support.fakes import write_state

    write_state(tmp_path, ok=True)
    before = (tmp_path / ".rlkit/gt/gate.json").read_text()
    script_cluster(kubectl, "pass-p5-2node")
    running = {"items": [{"kind": "Job", "metadata": {"name": "fabric-p5-allreduce"},
                          "status": {"active": 2, "startTime": "2026-12-02T10:00:00Z"}}]}
    kubectl.rules.insert(1, {"match": ["get", "jobs", "-l"], "stdout": json.dumps(running)})
    kubectl.rules_path.write_text(json.dumps(kubectl.rules))
    assert run_gate(tmp_path) == 2
    err = capsys.readouterr().err
    assert ("error: a fabric gate of this environment is running: job/fabric-p5-allreduce (started "
            "2026-12-02T10:00:00Z, 2 pod(s) active); another `rlkit gate`") in err
    assert "kubectl delete jobs,services -n rl-training -l 'app.kubernetes.io/instance=gt," in err
    assert not [c for c in kubectl.calls if c[0] in ("apply", "delete")]
    assert (tmp_path / ".rlkit/gt/gate.json").read_text() == before


def test_a_gate_first_deletes_the_fabric_jobs_an_earlier_run_left(tmp_path, kubectl, capsys):
    """An earlier gate stopped part way through bisection left a subset job on the nodes; a new
    run knows it by the environment's fabric labels, says so and deletes it before anything else."""
    script_cluster(kubectl, "pass-p5-2node")
    left = {"items": [{"kind": "Job", "metadata": {"name": "fabric-p5-allreduce-b3"}},
                      {"kind": "Service", "metadata": {"name": "fabric-p5-allreduce-b3"}}]}
    kubectl.rules.insert(1, {"match": ["get", "jobs,services"], "stdout": json.dumps(left)})
    kubectl.rules_path.write_text(json.dumps(kubectl.rules))
    assert run_gate(tmp_path) == 0
    out = capsys.readouterr().out
    selector = ("app.kubernetes.io/instance=gt,app.kubernetes.io/component in "
                "(fabric-nodecheck,fabric-allreduce,fabric-ep)")
    assert (f"Deleting what an earlier fabric gate of this environment left in namespace rl-training "
            f"(label {selector}): job/fabric-p5-allreduce-b3, service/fabric-p5-allreduce-b3") in out
    calls = kubectl.calls
    calls = calls[next(i for i, c in enumerate(calls) if c[:2] == ["get", "jobs,services"]):]
    assert not [c for c in kubectl.calls[:-len(calls)] if c[0] in ("apply", "delete")]
    assert calls[0] == ["get", "jobs,services", "-n", "rl-training", "-l", selector, "-o", "json",
                        "--ignore-not-found"]
    assert calls[1] == ["delete", "jobs,services", "-n", "rl-training", "-l", selector, "--ignore-not-found",
                        "--wait=true", "--timeout=120s"]
    assert calls[2][0] == "apply"  # then the namespace, as before


def _fake_clock(step):
    now = [0.0]

    def clock():
        return now[0]

    def sleep(_):
        now[0] += step
    return clock, sleep


def test_a_long_unchanged_wait_prints_a_heartbeat(tmp_path, kubectl):
    from ops.gate.runner import HEARTBEAT_S

    kubectl.rule(["get", "job"], stdout=job_json(False))
    kubectl.rule(["get", "pods"], stdout=pods_json("fabric-p5-nodecheck", "Running"))
    said: list[str] = []
    clock, sleep = _fake_clock(60)
    runner = GateRunner(Kubectl(), "rl-training", tmp_path / "out", [("nodecheck", "fabric-p5-nodecheck")],
                        "p5.48xlarge", 2, timeout_s=1200, poll_s=60, echo=said.append, sleep=sleep, clock=clock)
    assert runner.wait("nodecheck", "fabric-p5-nodecheck") == "timeout"
    line = "  nodecheck: 0 succeeded, 0 failed, pods 1 Running"
    assert said[0] == f"{line} [0 s]"
    assert said[1:] == [f"{line} [{t} s, still waiting; gives up after 1200 s]" for t in (300, 600, 900, 1200)]
    assert HEARTBEAT_S == 300


def test_ep_words_place_a_disaggregated_pool_where_it_ran():
    """A row's ep_first / ep_pool (the ranks its groups tile) decide where the groups ran: on GB200
    (4 GPUs a node, 72 a domain) a rollout pool of 8 from GPU 68 straddles two NVLink domains, while
    the same groups tiled from GPU 0 would not."""
    from ops.gate.judges import ep_crosses_efa

    row = {"kind": "ep", "purpose": "rollout", "direction": "dispatch", "world_size": 76, "ranks_per_node": 4,
           "ep_size": 8, "ep_stride": 1, "ep_nodes": 2, "ep_first": 68, "ep_pool": 8}
    assert ep_crosses_efa(json.dumps(row), "p6e-gb200.36xlarge")
    assert not ep_crosses_efa(json.dumps({**row, "ep_first": 72, "world_size": 80}), "p6e-gb200.36xlarge")
