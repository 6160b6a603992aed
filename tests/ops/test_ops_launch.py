"""`rlkit launch`, `status`, `logs` against a fake kubectl that records its argv."""

from __future__ import annotations

import json

import pytest
import yaml

from ops import launching
from tests.support import fakes
from tests.support.fakes import CONFIG, FakeKubectl, rayjob, run, write_state
from tests.support import FIXTURES as TEST_FIXTURES

# The training group's nodes: the kit's labels on them (infra/names.py), as a kubectl selector.
GROUP_SELECTOR = "rlkit.aws/node-role=gpu,rlkit.aws/efa=true,rlkit.aws/node-group=p5"


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    """kubectl's current context is the cluster of the outputs file (launch renders from it);
    status and logs, which read no outputs, check the cluster the config names (``run``)."""
    return FakeKubectl(tmp_path, monkeypatch)


# --- the gate decides ----------------------------------------------------------------------------


def test_refuses_without_a_gate_and_says_what_to_do(tmp_path, kubectl, capsys):
    assert run(tmp_path, "launch") == 1
    err = capsys.readouterr().err
    assert err.startswith("Not launching: no fabric gate has run for 'gt'")
    # the hint names this config with rlkit's own flag, no placeholder
    assert f"rlkit gate --config {tmp_path / 'gt.yaml'} --outputs cdk-outputs.json" in err
    assert "--force" in err
    assert kubectl.calls == []


def test_refuses_after_a_failed_gate_naming_the_failures(tmp_path, kubectl, capsys):
    write_state(tmp_path, ok=False, findings=[{
        "check": "all-reduce busbw @ 2 GiB", "status": "fail", "measured": "283.9 GB/s",
        "expected": ">= 393.3 GB/s"}])
    assert run(tmp_path, "launch") == 1
    err = capsys.readouterr().err
    assert "the last fabric gate for 'gt' FAILED (2026-03-01T12:00:00+00:00): all-reduce busbw " \
           "@ 2 GiB (283.9 GB/s; expected >= 393.3 GB/s)" in err
    assert kubectl.calls == []


def test_refuses_after_a_gate_that_did_not_finish(tmp_path, kubectl, capsys):
    """A gate stopped by Ctrl-C or a kubectl error leaves gate.json saying it is under way."""
    d = tmp_path / ".rlkit" / "gt"
    d.mkdir(parents=True)
    (d / "gate.json").write_text(json.dumps({
        "version": 2, "config": "gt", "started_at": "2026-03-02T08:00:00+00:00", "ok": False,
        "in_progress": True, "instance_type": "p5.48xlarge", "nodes": 2, "findings": [], "ep": None}))
    assert run(tmp_path, "launch") == 1
    err = capsys.readouterr().err
    assert err.startswith("Not launching: the last fabric gate for 'gt' did not finish (started "
                          "2026-03-02T08:00:00+00:00)")
    assert f"Run `rlkit gate --config {tmp_path / 'gt.yaml'} --outputs cdk-outputs.json` again" in err
    assert "--force" in err and "Traceback" not in err
    assert kubectl.calls == []


def test_refuses_when_the_gate_measured_another_shape(tmp_path, kubectl, capsys):
    write_state(tmp_path, nodes=4)
    assert run(tmp_path, "launch") == 1
    assert "the last gate measured 4 x p5.48xlarge, but the job runs on 2 x p5.48xlarge" in \
        capsys.readouterr().err


def test_force_launches_despite_a_failed_gate(tmp_path, kubectl, capsys):
    write_state(tmp_path, ok=False)
    assert run(tmp_path, "launch", "--force") == 0
    assert "WARNING (--force)" in capsys.readouterr().err
    assert ["apply", "-f", str(tmp_path / "out/rl-job/04-rayjob.yaml")] in kubectl.calls


# --- the nodes the gate measured --------------------------------------------------------------

MEASURED = [{"name": "ip-10-0-1-10.ec2.internal", "instance": "i-0aaa"},
            {"name": "ip-10-0-1-11.ec2.internal", "instance": "i-0bbb"}]


READY = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
# what the node lifecycle controller sets on a node whose kubelet stopped posting status
NODE_UNREACHABLE = ([{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}],
               [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}])
NODE_NOT_READY = ([{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}],
             [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])


def group_nodes(*nodes: tuple) -> str:
    """`kubectl get nodes -l <group> -o json`: (name, instance ID[, cordoned[, (conditions,
    taints)]]) per node; Ready unless the conditions say otherwise."""
    def node(name, instance, cordoned=False, health=(READY, [])):
        conditions, taints = health
        return {"metadata": {"name": name},
                "spec": {"providerID": f"aws:///us-east-1a/{instance}",
                         **({"unschedulable": True} if cordoned else {}),
                         **({"taints": taints} if taints else {})},
                "status": {"conditions": conditions}}
    return json.dumps({"kind": "List", "items": [node(*n) for n in nodes]})


def test_launches_on_the_nodes_the_gate_measured_and_says_so(tmp_path, kubectl, capsys):
    write_state(tmp_path, measured=MEASURED)
    kubectl.rule(["get", "nodes", "-l", GROUP_SELECTOR],
                 stdout=group_nodes(("ip-10-0-1-11.ec2.internal", "i-0bbb"),
                                    ("ip-10-0-1-10.ec2.internal", "i-0aaa")))
    assert run(tmp_path, "launch") == 0
    assert "Fabric gate: passed 2026-03-01T12:00:00+00:00 on these nodes (2 schedulable now)" in \
        capsys.readouterr().out


def test_refuses_when_an_unmeasured_node_joined_even_under_a_measured_name(tmp_path, kubectl,
                                                                           capsys):
    """A node replaced since the gate (auto-repair, a Capacity Block on other hosts) can come back
    with the same private IP, so the same name: the instance ID tells them apart."""
    write_state(tmp_path, measured=MEASURED)
    kubectl.rule(["get", "nodes"], stdout=group_nodes(("ip-10-0-1-10.ec2.internal", "i-0aaa"),
                                                      ("ip-10-0-1-11.ec2.internal", "i-0ccc")))
    assert run(tmp_path, "launch") == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "Not launching: 1 schedulable node(s) of gpu_node_groups.p5 were not measured by the last "
        "gate (2026-03-01T12:00:00+00:00), and the job may land on them: "
        f"ip-10-0-1-11.ec2.internal (i-0ccc). Run `rlkit gate --config {tmp_path / 'gt.yaml'} "
        "--outputs cdk-outputs.json` to measure the nodes the group has now, or pass --force.")
    assert not any(c[0] in ("apply", "delete") for c in kubectl.calls)


def test_a_spare_node_the_gate_did_not_measure_is_named_with_what_to_do(tmp_path, kubectl, capsys):
    """A group with more nodes than the job: the gate measured the job's two, the third may
    take the job's pod."""
    write_state(tmp_path, measured=MEASURED)
    kubectl.rule(["get", "nodes"], stdout=group_nodes(("ip-10-0-1-10.ec2.internal", "i-0aaa"),
                                                      ("ip-10-0-1-11.ec2.internal", "i-0bbb"),
                                                      ("ip-10-0-1-12.ec2.internal", "i-0ddd")))
    assert run(tmp_path, "launch") == 1
    assert ("Not launching: gpu_node_groups.p5 offers 3 schedulable nodes, the job and the last "
            "gate (2026-03-01T12:00:00+00:00) use 2, and the job may land on one the gate did not "
            "measure: ip-10-0-1-12.ec2.internal (i-0ddd). Cordon those (kubectl cordon <node>) to keep "
            "the job on the measured nodes, or pass --force.") in capsys.readouterr().err


def test_a_cordoned_node_does_not_count_and_too_few_measured_nodes_refuse(tmp_path, kubectl,
                                                                        capsys):
    """The unmeasured node is cordoned (the job cannot land there), but the job needs two nodes
    and one measured node is left: the second would be one that joins later."""
    write_state(tmp_path, measured=MEASURED)
    kubectl.rule(["get", "nodes"], stdout=group_nodes(("ip-10-0-1-10.ec2.internal", "i-0aaa"),
                                                      ("ip-10-0-1-12.ec2.internal", "i-0ddd", True)))
    assert run(tmp_path, "launch") == 1
    assert ("Not launching: only 1 of the 2 node(s) the last gate measured "
            "(2026-03-01T12:00:00+00:00) are still schedulable in gpu_node_groups.p5, and the job "
            "needs 2") in capsys.readouterr().err
    assert not any(c[0] == "apply" for c in kubectl.calls)


def test_an_unreachable_measured_node_does_not_count_and_is_named(tmp_path, kubectl, capsys):
    """A measured node whose kubelet stopped answering (Ready Unknown, the unreachable taint) is
    no node the job can start on: one measured node is left, the job needs two."""
    write_state(tmp_path, measured=MEASURED)
    kubectl.rule(["get", "nodes"], stdout=group_nodes(
        ("ip-10-0-1-10.ec2.internal", "i-0aaa"),
        ("ip-10-0-1-11.ec2.internal", "i-0bbb", False, NODE_UNREACHABLE)))
    assert run(tmp_path, "launch") == 1
    err = capsys.readouterr().err
    assert ("Not launching: only 1 of the 2 node(s) the last gate measured "
            "(2026-03-01T12:00:00+00:00) are still schedulable in gpu_node_groups.p5, and the job "
            "needs 2") in err
    assert ("Not counted as schedulable: ip-10-0-1-11.ec2.internal (i-0bbb): Ready is Unknown "
            "(NodeStatusUnknown), taint node.kubernetes.io/unreachable:NoExecute, taint "
            "node.kubernetes.io/unreachable:NoSchedule.") in err
    assert not any(c[0] == "apply" for c in kubectl.calls)


def test_a_not_ready_unmeasured_node_is_no_new_node_and_is_named(tmp_path, kubectl, capsys):
    write_state(tmp_path, measured=MEASURED)
    kubectl.rule(["get", "nodes"], stdout=group_nodes(
        ("ip-10-0-1-10.ec2.internal", "i-0aaa"), ("ip-10-0-1-11.ec2.internal", "i-0bbb"),
        ("ip-10-0-1-12.ec2.internal", "i-0ddd", False, NODE_NOT_READY),
        ("ip-10-0-1-13.ec2.internal", "i-0eee", True)))
    assert run(tmp_path, "launch") == 0
    out = capsys.readouterr().out
    assert ("Fabric gate: passed 2026-03-01T12:00:00+00:00 on these nodes (2 schedulable now). "
            "Not counted as schedulable: ip-10-0-1-12.ec2.internal (i-0ddd): Ready is False "
            "(KubeletNotReady), taint node.kubernetes.io/not-ready:NoSchedule; "
            "ip-10-0-1-13.ec2.internal (i-0eee): cordoned.") in out


def test_force_launches_on_unmeasured_nodes_with_a_warning(tmp_path, kubectl, capsys):
    write_state(tmp_path, measured=MEASURED)
    kubectl.rule(["get", "nodes"], stdout=group_nodes(("ip-10-0-1-12.ec2.internal", "i-0ddd"),
                                                      ("ip-10-0-1-13.ec2.internal", "i-0eee")))
    assert run(tmp_path, "launch", "--force") == 0
    assert "WARNING (--force): 2 schedulable node(s) of gpu_node_groups.p5 were not measured" in \
        capsys.readouterr().err
    assert ["apply", "-f", str(tmp_path / "out/rl-job/04-rayjob.yaml")] in kubectl.calls


def test_a_record_without_node_names_launches_with_a_note(tmp_path, kubectl, capsys):
    write_state(tmp_path)  # as an rlkit before measured_nodes wrote it
    kubectl.rule(["get", "nodes"], stdout=group_nodes(("ip-10-0-1-12.ec2.internal", "i-0ddd")))
    assert run(tmp_path, "launch") == 0
    assert ("note: the last gate (2026-03-01T12:00:00+00:00) recorded no node names (an older "
            "rlkit wrote it), so launch cannot tell whether the nodes changed since") in \
        capsys.readouterr().err


def test_a_dry_run_previews_the_node_read_and_judges_nothing(tmp_path, kubectl, capsys):
    write_state(tmp_path, measured=MEASURED)
    assert run(tmp_path, "launch", "--dry-run") == 0
    out = capsys.readouterr().out
    assert f"[dry-run] kubectl --context arn:aws:eks:us-east-1:123456789012:cluster/gt-cluster " \
           f"get nodes -l {GROUP_SELECTOR} -o json --ignore-not-found" in out
    assert "Fabric gate: passed" not in out


# --- the image the gate measured -------------------------------------------------------------

REPO = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gt"  # the outputs' EcrRepositoryUri


def pin(tag: str) -> str:
    """The kit repository's image of ``tag`` pinned to what the fake ECR says it names."""
    return f"{REPO}:{tag}@{fakes.digest_of(tag)}"


def test_launches_the_image_the_gate_measured_and_says_so(tmp_path, kubectl, capsys):
    write_state(tmp_path, image=pin('0.1.0-nccl'))
    assert run(tmp_path, "launch") == 0
    assert f"Image: {pin('0.1.0-nccl')} (the one the last gate measured, 2026-03-01T12:00:00+00:00)" in \
        capsys.readouterr().out


def test_refuses_an_image_rebuilt_since_the_gate(tmp_path, kubectl, capsys, monkeypatch):
    """The gate measured 0.1.0-nccl; the config now pulls 0.2.0-nccl (another EFA installer or
    NCCL): a fabric stack the gate never measured."""
    from tests.support import fakes

    monkeypatch.setattr(fakes, "CONFIG", CONFIG.replace("training: {node_group: p5, nodes: 2}",
                                                        "training: {node_group: p5, nodes: 2, image_tag: 0.2.0}"))
    write_state(tmp_path, image=pin('0.1.0-nccl'))
    assert run(tmp_path, "launch") == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"Not launching: the job would run image {pin('0.2.0-nccl')} (EP backend nccl), but the last "
        f"gate (2026-03-01T12:00:00+00:00) measured {pin('0.1.0-nccl')}: an image built since "
        "(another EFA installer, aws-ofi-nccl, NCCL or NVSHMEM) is a fabric stack the gate never "
        f"ran. Run `rlkit gate --config {tmp_path / 'gt.yaml'} --outputs cdk-outputs.json` to "
        "measure this image, or pass --force.")
    assert not any(c[0] == "apply" for c in kubectl.calls)
    assert run(tmp_path, "launch", "--force") == 0
    assert f"WARNING (--force): the job would run image {pin('0.2.0-nccl')}" in capsys.readouterr().err


def test_each_backend_is_held_to_the_image_it_was_measured_with(tmp_path, kubectl, capsys):
    """Two gates, two backends: deepep-nvshmem (faster) was measured with an older build."""
    write_state(tmp_path, image=pin('0.1.0-nccl'), ep={"shape": {}, "measurements": {
        "nccl": {"time_us": 9000.0, "passed": True, "image": pin('0.1.0-nccl')},
        "deepep-nvshmem": {"time_us": 4000.0, "passed": True, "image": pin('0.0.9-deepep-nvshmem')}}})
    assert run(tmp_path, "launch") == 1
    assert (f"the job would run image {pin('0.1.0-deepep-nvshmem')} (EP backend deepep-nvshmem), but "
            f"the last gate (2026-03-01T12:00:00+00:00) measured {pin('0.0.9-deepep-nvshmem')}") in \
        capsys.readouterr().err
    assert run(tmp_path, "launch", "--ep-backend", "nccl") == 0


def test_refuses_a_backend_whose_image_the_gate_never_ran(tmp_path, kubectl, capsys):
    write_state(tmp_path, image=pin('0.1.0-nccl'))
    assert run(tmp_path, "launch", "--ep-backend", "deepep-nvshmem") == 1
    err = capsys.readouterr().err
    assert (f"Not launching: the last gate (2026-03-01T12:00:00+00:00) ran {pin('0.1.0-nccl')} (EP "
            f"backend nccl), never the image of EP backend deepep-nvshmem ({pin('0.1.0-deepep-nvshmem')}). "
            f"Run `rlkit gate --config {tmp_path / 'gt.yaml'} --outputs cdk-outputs.json --ep-backend "
            "deepep-nvshmem` to measure it, or pass --force.") in err


def test_a_record_without_an_image_launches_with_a_note(tmp_path, kubectl, capsys):
    write_state(tmp_path)  # as an rlkit before images were recorded wrote it
    assert run(tmp_path, "launch") == 0
    assert ("note: the last gate (2026-03-01T12:00:00+00:00) recorded no image (an older rlkit "
            f"wrote it), so launch cannot tell whether {pin('0.1.0-nccl')} is the image it measured") in \
        capsys.readouterr().err


def test_the_rayjob_pulls_the_image_by_the_digest_its_tag_names(tmp_path, kubectl, monkeypatch):
    """Every pod (head, workers, submitter) pulls <repo>:<tag>@<digest>: a node that cached other
    content under the tag (pushed again after the repository was emptied) cannot run it."""
    ecr = fakes.fake_ecr(monkeypatch, fakes.FakeEcr({"0.1.0-nccl": "sha256:" + "b" * 64}))
    write_state(tmp_path)
    assert run(tmp_path, "launch") == 0
    assert ecr.calls == [{"registryId": "123456789012", "repositoryName": "gt",
                          "imageIds": [{"imageTag": "0.1.0-nccl"}]}]
    job = yaml.safe_load((tmp_path / "out/rl-job/04-rayjob.yaml").read_text())
    images = [c["image"] for c in json_paths(job, "containers")]
    assert images and set(images) == {f"{REPO}:0.1.0-nccl@sha256:{'b' * 64}"}


def json_paths(doc, key):
    """Every item of every list named ``key`` anywhere in ``doc``."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == key and isinstance(v, list):
                yield from v
            else:
                yield from json_paths(v, key)
    elif isinstance(doc, list):
        for v in doc:
            yield from json_paths(v, key)


def test_refuses_the_same_tag_naming_other_content_than_the_gate_measured(tmp_path, kubectl,
                                                                         capsys, monkeypatch):
    """The gate measured 0.1.0-nccl; the repository was emptied (teardown) and the tag built
    again: the same name, other content. Launch refuses as for another image."""
    other = "sha256:" + "c" * 64
    fakes.fake_ecr(monkeypatch, fakes.FakeEcr({"0.1.0-nccl": other}))
    write_state(tmp_path, image=pin("0.1.0-nccl"))
    assert run(tmp_path, "launch") == 1
    err = capsys.readouterr().err
    assert (f"Not launching: the job would run image {REPO}:0.1.0-nccl@{other} (EP backend nccl), "
            f"but the last gate (2026-03-01T12:00:00+00:00) measured {pin('0.1.0-nccl')}: the same "
            "tag, other content") in err
    assert f"Run `rlkit gate --config {tmp_path / 'gt.yaml'} --outputs cdk-outputs.json`" in err
    assert not any(c[0] == "apply" for c in kubectl.calls)


def test_a_gate_record_of_the_tag_only_cannot_vouch_for_the_content(tmp_path, kubectl, capsys):
    write_state(tmp_path, image=f"{REPO}:0.1.0-nccl")  # an rlkit before digests were recorded
    assert run(tmp_path, "launch") == 1
    assert "recorded the image by its tag only" in capsys.readouterr().err


def test_refuses_a_tag_not_in_the_repository(tmp_path, kubectl, capsys, monkeypatch):
    fakes.fake_ecr(monkeypatch, fakes.FakeEcr({}))
    write_state(tmp_path)
    assert run(tmp_path, "launch") == 2
    err = capsys.readouterr().err
    assert (f"training.image_tag = '{REPO}:0.1.0-nccl': the image is not in ECR (never built, or "
            "deleted since). Fix: build it: `rlkit image build --config <this config>`") in err
    assert not any(c[0] == "apply" for c in kubectl.calls)


def test_an_image_outside_ecr_is_pulled_by_its_tag_with_a_warning(tmp_path, kubectl, capsys,
                                                                  monkeypatch):
    ecr = fakes.fake_ecr(monkeypatch)
    monkeypatch.setattr(fakes, "CONFIG", CONFIG.replace(
        "training: {node_group: p5, nodes: 2}",
        "training: {node_group: p5, nodes: 2, image: ghcr.io/acme/trainer:v1}"))
    assert run(tmp_path, "launch", "--force") == 0
    assert ecr.calls == []
    assert ("WARNING: training.image = 'ghcr.io/acme/trainer:v1' is not in ECR of us-east-1, so "
            "rlkit cannot read its digest") in capsys.readouterr().err
    assert "image: ghcr.io/acme/trainer:v1\n" in (tmp_path / "out/rl-job/04-rayjob.yaml").read_text()


def test_a_dry_run_with_placeholder_outputs_compares_the_tag():
    """Without stack outputs a dry run renders the repository as a placeholder: the tag is what
    can differ (the repository is the environment's own)."""
    state = {"ok": True, "finished_at": "t", "image": f"{REPO}:0.1.0-nccl", "ep_backend_measured": "nccl"}
    assert launching.gate_image_verdict(state, "nccl", "placeholder-run-cdk-deploy:0.1.0-nccl",
                                        configured="nccl", placeholder=True)[0] is None
    problem, _ = launching.gate_image_verdict(state, "nccl", "placeholder-run-cdk-deploy:0.2.0-nccl",
                                              configured="nccl", placeholder=True)
    assert problem.startswith("the job would run image placeholder-run-cdk-deploy:0.2.0-nccl")
    # with the real outputs the whole reference counts
    assert launching.gate_image_verdict(state, "nccl", "other.registry/gt:0.1.0-nccl", configured="nccl")[0]


def test_what_launch_cannot_tell_about_the_image_is_a_note():
    """Saved logs judged with --logs-dir do not say which image ran them; a backend an older
    rlkit measured, kept in a newer record, has no image either: a note, as for measured_nodes."""
    image = f"{REPO}:0.1.0-nccl"
    saved = {"ok": True, "finished_at": "t", "image": None, "ep_backend_measured": "nccl",
             "ep": {"measurements": {"nccl": {"time_us": 1.0, "passed": True, "image": None}}}}
    problem, line = launching.gate_image_verdict(saved, "nccl", image, configured="nccl")
    assert problem is None and line.startswith("note: the last gate (t) judged saved logs (--logs-dir)")
    older = {"ok": True, "finished_at": "t", "image": image, "ep_backend_measured": "nccl",
             "ep": {"measurements": {"deepep-nvshmem": {"time_us": 1.0, "passed": True}}}}
    problem, line = launching.gate_image_verdict(older, "deepep-nvshmem", f"{REPO}:0.1.0-deepep-nvshmem",
                                                 configured="nccl")
    assert problem is None and "recorded no image for EP backend deepep-nvshmem (an older rlkit" in line


# --- applying ------------------------------------------------------------------------------------


def test_launch_applies_namespace_shared_fs_claim_then_rayjob(tmp_path, kubectl, capsys):
    write_state(tmp_path)
    assert run(tmp_path, "launch") == 0
    calls = kubectl.calls
    # the group's nodes, to compare with those the gate measured (this record names none)
    assert calls[0] == ["get", "nodes", "-l", GROUP_SELECTOR, "-o", "json", "--ignore-not-found"]
    assert calls[1][:3] == ["get", "rayjob", "qwen3-30b-a3b-grpo"]
    # the namespace with the NetworkPolicy all its pods fall under, and the trainer's account
    assert calls[2] == ["apply", *(a for f in ("00-namespace", "01-networkpolicy", "01-serviceaccount")
                                   for a in ("-f", str(tmp_path / f"out/{f}.yaml")))]
    # the Ray-head-only policy of earlier renders (now redundant): the kit's own, by label
    assert calls[3] == ["delete", "networkpolicy", "-n", "rl-training", "-l",
                        "app.kubernetes.io/component=ray-head-ingress,"
                        "app.kubernetes.io/managed-by=rlkit", "--ignore-not-found"]
    # the shared file system's volume and claim are read first: neither exists, both are created
    assert calls[4] == ["get", "pv", "gt-shared-fs", "-o", "json", "--ignore-not-found"]
    assert calls[5] == ["get", "pvc", "shared-fs", "-n", "rl-training", "-o", "json",
                        "--ignore-not-found"]
    assert calls[6] == ["apply", "-f", str(tmp_path / "out/02-shared-fs-pv.yaml"), "-f",
                        str(tmp_path / "out/03-shared-fs-pvc.yaml")]
    assert calls[7] == ["apply", *(a for f in ("00-run-config", "01-disruption-budget",
                                                "02-rayjob-retry-role",
                                                "03-rayjob-retry-rolebinding")
                                   for a in ("-f", str(tmp_path / f"out/rl-job/{f}.yaml")))]
    assert calls[8] == ["apply", "-f", str(tmp_path / "out/rl-job/04-rayjob.yaml")]  # the RayJob last
    assert len(calls) == 9
    assert "kind: RayJob" in (tmp_path / "out/rl-job/04-rayjob.yaml").read_text()
    assert "Launched RayJob qwen3-30b-a3b-grpo" in capsys.readouterr().out

def test_an_asynchronous_disaggregated_run_launches_with_its_mode(tmp_path, kubectl, capsys,
                                                                   monkeypatch):
    from tests.support import fakes

    monkeypatch.setattr(fakes, "CONFIG", CONFIG.replace(
        "training: {node_group: p5, nodes: 2}",
        "training: {node_group: p5, nodes: 2, rollout: {placement: disaggregated, nodes: 1, "
        "overlap: stream, off_policy_steps: 2}}"))
    write_state(tmp_path)
    assert run(tmp_path, "launch") == 0
    assert "on 2 x p5.48xlarge (1 training + 1 rollout, stream overlap, up to 2 step(s) " \
           "off-policy)." in capsys.readouterr().out
    run_yaml = (tmp_path / "out/rl-job/00-run-config.yaml").read_text()
    assert "placement: disaggregated" in run_yaml and "overlap: stream" in run_yaml



def test_uses_the_backend_the_gate_measured_faster(tmp_path, kubectl, capsys):
    write_state(tmp_path, ep={"shape": {}, "faster": "deepep-nvshmem", "measurements": {
        "nccl": {"time_us": 9000.0, "passed": True}, "deepep-nvshmem": {"time_us": 4000.0, "passed": True}}})
    assert run(tmp_path, "launch") == 0
    out = capsys.readouterr().out
    assert ("EP backend: deepep-nvshmem (measured faster by the gate (deepep-nvshmem 4.00 ms, "
            "nccl 9.00 ms); the config says nccl; --ep-backend overrides)") in out
    assert "deepep" in (tmp_path / "out/rl-job/00-run-config.yaml").read_text()


def test_a_backend_whose_gate_failed_is_not_chosen(tmp_path, kubectl, capsys):
    """`rlkit gate --ep-backend deepep-nvshmem` failed (fixture nvshmem-not-libfabric-p5en-2node)
    with a lower step time; a later gate with nccl passed. Launch uses nccl, and says why."""
    write_state(tmp_path, ep={"shape": {}, "faster": "deepep-nvshmem", "measurements": {
        "nccl": {"time_us": 9000.0, "passed": True},
        "deepep-nvshmem": {"time_us": 6000.0, "passed": False}}})
    assert run(tmp_path, "launch") == 0
    out = capsys.readouterr().out
    assert ("EP backend: nccl (config; the gate measured it fastest of the backends it passed with "
            "(deepep-nvshmem 6.00 ms, its gate failed; nccl 9.00 ms))") in out
    assert "deepep" not in (tmp_path / "out/rl-job/00-run-config.yaml").read_text()


def test_a_record_without_pass_marks_trusts_only_its_own_backend():
    """gate.json from an rlkit before measurements carried ``passed``: only the last gate's own
    backend is known to come from a passing gate."""
    from infra.config import parse_config
    import yaml

    cfg = parse_config(yaml.safe_load(CONFIG))
    state = {"ok": True, "ep_backend_measured": "nccl", "ep": {"measurements": {
        "nccl": {"time_us": 9000.0}, "deepep-nvshmem": {"time_us": 4000.0}}}}
    backend, why = launching.choose_backend(state, cfg, None)
    assert backend == "nccl"
    assert "deepep-nvshmem 4.00 ms, its gate's verdict not recorded (an older rlkit)" in why
    state["ok"] = False
    assert launching.choose_backend(state, cfg, None)[1].startswith(
        "config: no EP measurement comes from a gate that passed")


LAYOUT = {"training": {"ep_size": 8, "ep_nodes": 1, "where": "EP8 inside one NVLink domain (1 node, 8 GPUs per domain)"},
          "rollout": {"ep_size": 8, "ep_nodes": 1, "where": "EP8 inside one NVLink domain (1 node, 8 GPUs per domain)"}}


def test_the_choice_names_the_measurement_that_decided_it(tmp_path, kubectl, capsys):
    write_state(tmp_path, ep={"shape": {}, "faster": "deepep-nvshmem", "layout": LAYOUT,
                              "decided_by": "training: EP8 inside one NVLink domain (1 node, 8 GPUs per domain)",
                              "measurements": {"nccl": {"time_us": 9000.0, "passed": True},
                                               "deepep-nvshmem": {"time_us": 4000.0, "passed": True}}})
    assert run(tmp_path, "launch") == 0
    assert ("nccl 9.00 ms, measured training: EP8 inside one NVLink domain (1 node, 8 GPUs per domain)); "
            "the config says nccl") in capsys.readouterr().out


def test_a_measurement_of_another_ep_layout_does_not_choose(tmp_path, kubectl, capsys):
    """The gate measured EP16 groups; this config's training groups are EP8: another path."""
    layout = dict(LAYOUT, training={"ep_size": 16, "ep_nodes": 2, "where": "EP16 across EFA (2 nodes)"})
    write_state(tmp_path, ep={"shape": {}, "faster": "deepep-nvshmem", "layout": layout, "measurements": {
        "nccl": {"time_us": 9000.0, "passed": True}, "deepep-nvshmem": {"time_us": 4000.0, "passed": True}}})
    assert run(tmp_path, "launch") == 0
    out = capsys.readouterr().out
    assert ("EP backend: nccl (config: the gate measured EP groups {'training': 16, 'rollout': 8}, this config "
            "runs {'training': 8, 'rollout': 8}; run `rlkit gate` again") in out


def test_the_layout_is_compared_on_the_backend_it_was_measured_with():
    """Expert TP 2: NCCL's training groups are EP8 (8 ranks 2 apart), DeepEP's Megatron's tp-ep
    group of 16; a gate that measured NCCL is compared with the config's NCCL groups."""
    from infra.config import parse_config
    import yaml

    doc = yaml.safe_load(CONFIG)
    doc["training"] = {**doc.get("training", {}), "nodes": 2, "expert_parallel": {"backend": "deepep-nvshmem"},
                       "parallel": {"tp": 2, "ep": 8, "etp": 2}}
    cfg = parse_config(doc)
    layout = {"training": {"ep_size": 8, "ep_nodes": 2, "where": "EP8 across EFA (2 nodes)"},
              "rollout": LAYOUT["rollout"]}
    state = {"ok": True, "ep_backend_measured": "nccl", "ep": {"layout": layout, "measurements": {
        "nccl": {"time_us": 9000.0, "passed": True}}}}
    backend, why = launching.choose_backend(state, cfg, None)
    assert (backend, why) == ("nccl", "measured faster by the gate (nccl 9.00 ms); the config says "
                                      "deepep-nvshmem; --ep-backend overrides")
    # the same layout measured with DeepEP is another path for this config: tp-ep groups of 16
    state["ep_backend_measured"] = "deepep-nvshmem"
    state["ep"]["measurements"] = {"deepep-nvshmem": {"time_us": 4000.0, "passed": True}}
    assert launching.choose_backend(state, cfg, None)[1].startswith(
        "config: the gate measured EP groups {'training': 8, 'rollout': 8}, this config runs "
        "{'training': 16, 'rollout': 8}")


def test_a_gin_backend_the_gate_measured_faster_is_not_used_for_training(tmp_path, kubectl,
                                                                         capsys):
    """The gate may benchmark deepep-gin; the pinned Megatron cannot train with it."""
    write_state(tmp_path, ep={"shape": {}, "faster": "deepep-gin", "measurements": {
        "nccl": {"time_us": 9000.0, "passed": True}, "deepep-gin": {"time_us": 4000.0, "passed": True}}})
    assert run(tmp_path, "launch") == 2
    err = capsys.readouterr().err
    assert err.startswith("Not launching: EP backend deepep-gin (measured faster by the gate")
    assert "DeepEP V2 over NCCL GIN cannot train yet" in err
    assert not (tmp_path / "out").exists()


def test_ep_backend_flag_overrides_the_gate(tmp_path, kubectl, capsys):
    write_state(tmp_path, ep={"shape": {}, "faster": "deepep-nvshmem", "measurements": {
        "deepep-nvshmem": {"time_us": 4000.0}}})
    assert run(tmp_path, "launch", "--ep-backend", "nccl") == 0
    assert "EP backend: nccl (--ep-backend)" in capsys.readouterr().out


def test_existing_rayjob_is_not_replaced_silently(tmp_path, kubectl, capsys):
    write_state(tmp_path)
    kubectl.rule(["get", "rayjob"], stdout=rayjob())
    assert run(tmp_path, "launch") == 1
    err = capsys.readouterr().err
    assert "a RayJob named qwen3-30b-a3b-grpo already exists in rl-training (jobStatus RUNNING" in err
    assert "--replace" in err
    assert not any(c[0] == "apply" for c in kubectl.calls)


def test_replace_deletes_the_old_rayjob_first(tmp_path, kubectl):
    write_state(tmp_path)
    kubectl.rule(["get", "rayjob"], stdout=rayjob())
    assert run(tmp_path, "launch", "--replace") == 0
    verbs = [c[0] for c in kubectl.calls]
    assert verbs == ["get", "get", "delete", "apply", "delete", "get", "get", "apply", "apply",
                     "apply"]
    # foreground: the old RayJob's submitter Job (named like the new one, which KubeRay would
    # adopt) is gone before the new RayJob is applied
    [delete] = [c for c in kubectl.calls if c[0] == "delete" and c[1] == "--ignore-not-found"]
    assert "--cascade=foreground" in delete and "--wait=true" in delete and "--timeout=600s" in delete


def test_replace_says_what_it_deletes_and_how_long_it_may_wait(tmp_path, kubectl, capsys):
    write_state(tmp_path)
    kubectl.rule(["get", "rayjob"], stdout=rayjob())
    assert run(tmp_path, "launch", "--replace") == 0
    out = capsys.readouterr().out
    assert ("Replacing: deleting RayJob qwen3-30b-a3b-grpo (jobStatus RUNNING, jobDeploymentStatus "
            "Running) and the run's other objects in rl-training (ConfigMap "
            "qwen3-30b-a3b-grpo-run-config, ") in out
    assert ("and waiting until they and what they own (the Ray cluster's pods, the submitter Job) "
            "are gone: up to 10 minutes while its GPU pods stop.") in out
    # said before the delete ran
    assert out.index("Replacing:") < out.index("Launched RayJob")


def _terminating(name, node):
    return {"metadata": {"name": name, "namespace": "rl-training",
                         "deletionTimestamp": "2026-03-01T12:00:00Z"},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_replace_that_times_out_names_the_stuck_pods_their_nodes_and_the_fix(tmp_path, kubectl,
                                                                            capsys):
    """The old run's pods stay Terminating: one on a node whose kubelet stopped answering, one on
    a node that is gone (its Node object deleted), one still stopping on a Ready node. The error
    names them, and only the pod on the gone node gets the force-delete, as the user's choice;
    nothing suggests the kubeconfig."""
    write_state(tmp_path)
    kubectl.rule(["get", "rayjob"], stdout=rayjob())
    kubectl.rule(["delete", "--ignore-not-found", "--cascade=foreground"], rc=1,
                 stderr="error: timed out waiting for the condition on rayjobs/qwen3-30b-a3b-grpo\n")
    kubectl.rule(["get", "pods", "-n", "rl-training"], stdout=json.dumps({"items": [
        _terminating("head-0", "ip-10-0-1-10.ec2.internal"),
        _terminating("worker-0", "ip-10-0-1-11.ec2.internal"),
        _terminating("worker-1", "ip-10-0-1-12.ec2.internal"),
        {"metadata": {"name": "unrelated"}, "spec": {"nodeName": "ip-10-0-1-12.ec2.internal"}}]}))
    down = json.loads(group_nodes(("ip-10-0-1-10.ec2.internal", "i-0aaa", False, NODE_UNREACHABLE)))
    up = json.loads(group_nodes(("ip-10-0-1-12.ec2.internal", "i-0ccc")))
    kubectl.rule(["get", "node", "ip-10-0-1-10.ec2.internal"], stdout=json.dumps(down["items"][0]))
    kubectl.rule(["get", "node", "ip-10-0-1-12.ec2.internal"], stdout=json.dumps(up["items"][0]))
    # ip-10-0-1-11: no rule, no output: `get --ignore-not-found` of a node that is gone
    assert run(tmp_path, "launch", "--replace") == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    lines = lines[next(i for i, l in enumerate(lines) if l.startswith("error:")):]
    assert lines[0].startswith("error: the old run was not gone after 10 minutes (`kubectl ")
    assert lines[0].endswith("timed out waiting for the condition on rayjobs/qwen3-30b-a3b-grpo); "
                             "nothing new was applied.")
    assert lines[1] == "RayJob qwen3-30b-a3b-grpo is still there"
    assert lines[2:5] == [
        "Still terminating: pod rl-training/head-0 on ip-10-0-1-10.ec2.internal (Ready is Unknown "
        "(NodeStatusUnknown), taint node.kubernetes.io/unreachable:NoExecute, taint "
        "node.kubernetes.io/unreachable:NoSchedule)",
        "Still terminating: pod rl-training/worker-0 on ip-10-0-1-11.ec2.internal, a node that is gone",
        "Still terminating: pod rl-training/worker-1 on ip-10-0-1-12.ec2.internal (Ready: still "
        "stopping)"]
    fix = lines[5]
    assert fix.startswith("Fix: wait until the old run's pods are gone (`kubectl get pods -n "
                          f"rl-training`), then run `rlkit launch --replace --config {tmp_path / 'gt.yaml'}` again.")
    assert "A pod on a node that is not Ready (ip-10-0-1-10.ec2.internal) ends only when" in fix
    assert ("Your choice, for pods whose node is gone (nothing runs them any more): remove them "
            "from the API with kubectl delete pod worker-0 -n rl-training --force --grace-period=0 "
            "(never for a pod on a node that is only unreachable") in fix
    assert "head-0 -n rl-training --force" not in err and "worker-1 -n rl-training --force" not in err
    assert "update-kubeconfig" not in err and "unrelated" not in err
    assert not any(c[0] == "apply" for c in kubectl.calls)


def test_replace_that_cannot_reach_the_cluster_keeps_kubectls_own_error(tmp_path, kubectl, capsys):
    write_state(tmp_path)
    kubectl.rule(["get", "rayjob"], stdout=rayjob())
    kubectl.rule(["delete", "--ignore-not-found", "--cascade=foreground"], rc=1,
                 stderr="Unable to connect to the server: dial tcp 10.0.0.1:443: i/o timeout\n")
    assert run(tmp_path, "launch", "--replace") == 2
    err = capsys.readouterr().err
    assert "Unable to connect to the server" in err and "update-kubeconfig" in err
    assert "Still terminating" not in err


def test_a_refused_object_stops_the_launch_before_the_rayjob(tmp_path, kubectl, capsys):
    """`kubectl apply` applies the rest of its files past a refused one: the RayJob goes in its own
    apply, after everything it needs was accepted (here the retry Role, refused by RBAC)."""
    write_state(tmp_path)
    kubectl.rule(["apply", str(tmp_path / "out/rl-job/02-rayjob-retry-role.yaml")], rc=1,
                 stderr='Error from server (Forbidden): roles.rbac.authorization.k8s.io '
                        '"qwen3-30b-a3b-grpo-retry" is forbidden')
    assert run(tmp_path, "launch") == 2
    assert "is forbidden" in capsys.readouterr().err
    assert not [c for c in kubectl.calls if str(tmp_path / "out/rl-job/04-rayjob.yaml") in c]


def test_launch_dry_run_prints_commands_only(tmp_path, kubectl, capsys):
    write_state(tmp_path)
    assert run(tmp_path, "launch", "--dry-run") == 0
    out = capsys.readouterr().out
    assert kubectl.calls == []
    assert kubectl.all_calls == [["config", "view", "--minify", "-o", "json"]]  # local only
    arn = "arn:aws:eks:us-east-1:123456789012:cluster/gt-cluster"  # the outputs' cluster
    assert f"[dry-run] kubectl --context {arn} apply -f {tmp_path}/out/rl-job/04-rayjob.yaml" in out
    assert not (tmp_path / "out").exists()


def test_kubectl_failure_says_how_to_reach_the_cluster(tmp_path, kubectl, capsys):
    write_state(tmp_path)
    kubectl.rule(["get", "rayjob"], rc=1, stderr="error: You must be logged in to the server")
    assert run(tmp_path, "launch") == 2
    err = capsys.readouterr().err
    assert "You must be logged in to the server" in err
    assert "aws eks update-kubeconfig --name <cluster>" in err


# --- status and logs -----------------------------------------------------------------------------


def test_status_prints_job_and_deployment_state(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "rayjob"], stdout=rayjob())
    assert run(tmp_path, "status") == 0
    assert capsys.readouterr().out.startswith(
        "qwen3-30b-a3b-grpo: jobStatus RUNNING, jobDeploymentStatus Running, rayCluster "
        "qwen3-30b-a3b-grpo-raycluster-x")


def test_status_watch_follows_until_the_job_ends(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "rayjob"], stdout_seq=[rayjob("PENDING", "Initializing"), rayjob(),
                                                rayjob("FAILED", "Failed")])
    assert run(tmp_path, "status", "--watch") == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [l.split(",")[0] for l in lines] == ["qwen3-30b-a3b-grpo: jobStatus PENDING",
                                                "qwen3-30b-a3b-grpo: jobStatus RUNNING",
                                                "qwen3-30b-a3b-grpo: jobStatus FAILED"]
    assert "The job failed. Read its output: rlkit logs" in captured.err



def test_status_watch_outlasts_a_missed_poll_and_a_stopped_job_is_not_a_success(
        tmp_path, kubectl, capsys):
    """One refused read (the API server restarting) ended a 90-minute watch with exit 2, and a
    job that ended STOPPED exited 0, passing a CI run whose job never finished."""
    kubectl.rule(["get", "rayjob"], stdout=rayjob(), times=1)
    kubectl.rule(["get", "rayjob"], rc=1, times=2,
                 stderr="Unable to connect to the server: net/http: TLS handshake timeout\n")
    kubectl.rule(["get", "rayjob"], stdout=rayjob("STOPPED", "Complete"))
    assert run(tmp_path, "status", "--watch") == 1
    err = capsys.readouterr().err
    assert "could not read the RayJob" in err and "trying again (2 of 4)" in err
    assert "The job was stopped before it finished (jobStatus STOPPED)" in err


def test_status_watch_goes_on_through_an_attempt_kuberay_retries(tmp_path, kubectl, capsys):
    """Before: KubeRay v1.7.0 writes jobStatus FAILED while it retries an attempt (deployment Running,
    then Retrying: rayjob_controller.go:353, :452, :555 at kuberay@59d663aeec13), and the watch
    ended there with exit 1, "The job failed": a CI pipeline then tore down a run that was being
    retried."""
    kubectl.rule(["get", "rayjob"], stdout_seq=[
        rayjob(), rayjob("FAILED", "Running"), rayjob("FAILED", "Retrying", failed=1),
        rayjob("", "Initializing", failed=1), rayjob("SUCCEEDED", "Complete", failed=1)])
    assert run(tmp_path, "status", "--watch") == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(",")[1].strip() for line in out] == [
        "jobDeploymentStatus Running", "jobDeploymentStatus Running", "jobDeploymentStatus Retrying",
        "jobDeploymentStatus Initializing", "jobDeploymentStatus Complete"]


IDLE = ("The run no longer uses gpu_node_groups.p5, but its 2 p5.48xlarge node(s) keep running, and "
        "billing, until the group is scaled down: set gpu_node_groups.p5.desired_size: 0 and "
        "min_size: 0 and deploy (npx aws-cdk@2.1148.1 deploy gt-gpu-p5 -c config={config}), or "
        "rlkit teardown when the environment is done")


@pytest.mark.parametrize("job, deployment, code", [
    ("SUCCEEDED", "Complete", 0), ("FAILED", "Failed", 1), ("STOPPED", "Complete", 1), ("", "Suspended", 1)])
def test_a_run_that_is_over_names_the_gpu_nodes_still_billing(tmp_path, kubectl, capsys, job, deployment,
                                                            code):
    """Before: the watch ended (exit 0 on success) with nothing said, while KubeRay had deleted only
    the Ray cluster and the on-demand GPU nodes went on billing until someone scaled them down."""
    kubectl.rule(["get", "rayjob"], stdout=rayjob(job, deployment))
    assert run(tmp_path, "status", "--watch") == code
    assert IDLE.format(config=tmp_path / 'gt.yaml') in capsys.readouterr().err


def test_a_running_or_retried_run_or_reserved_capacity_gets_no_idle_note(tmp_path, kubectl, capsys):
    from infra.config import parse_config
    from ops.launch_cmd import idle_nodes_note

    kubectl.rule(["get", "rayjob"], stdout_seq=[rayjob(), rayjob("FAILED", "Retrying", failed=1)])
    for _ in range(2):
        assert run(tmp_path, "status") == 0
        assert "keep running, and billing" not in capsys.readouterr().err
    odcr = parse_config({"name": "gt", "gpu_node_groups": {"p5": {
        "instance_type": "p5.48xlarge", "availability_zone": "us-east-1a", "desired_size": 2,
        "max_size": 2, "capacity": {"type": "odcr", "reservation_id": "cr-0123456789abcdef0"}}},
        "training": {"node_group": "p5", "nodes": 2}})
    assert idle_nodes_note(odcr) is None


def test_status_of_an_attempt_being_retried_is_not_a_failure(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "rayjob"], stdout=rayjob("FAILED", "Retrying", failed=1))
    assert run(tmp_path, "status") == 0
    assert ("An attempt failed; KubeRay is retrying it (failed attempts so far: 1, backoffLimit 2). "
            "Its output: rlkit logs") in capsys.readouterr().err


@pytest.mark.parametrize("reason", ["JobStatusCheckTimeoutExceeded", "DeadlineExceeded"])
def test_a_failure_kuberay_never_retries_says_how_to_resume(tmp_path, kubectl, capsys, reason):
    """A lost head node: KubeRay's status checks fail for 5 minutes, the RayJob fails with
    JobStatusCheckTimeoutExceeded, and KubeRay v1.7.0 retries no such failure whatever backoffLimit
    says (rayjob_controller.go:543-552 at kuberay@59d663aeec13). Before, status said only "The job
    failed"."""
    kubectl.rule(["get", "rayjob"], stdout=rayjob("RUNNING", "Failed", reason=reason, failed=1))
    assert run(tmp_path, "status") == 1
    err = capsys.readouterr().err
    assert f"The job failed and KubeRay will not retry it ({reason}: " in err
    assert "Resume from its newest save: rlkit launch --replace" in err


def test_status_watch_of_a_suspended_job_says_how_to_resume_it_and_is_not_a_success(
        tmp_path, kubectl, capsys):
    """spec.suspend set: KubeRay v1.7.0 moves the RayJob Suspending -> Suspended, deletes its Ray
    cluster and resets jobStatus to "" (rayjob_controller.go:366-419 at kuberay@59d663aeec13).
    Before, the watch ended there with exit 0 and no word, like a run that completed."""
    kubectl.rule(["get", "rayjob"], stdout_seq=[rayjob(), rayjob("RUNNING", "Suspending"),
                                                rayjob("", "Suspended")])
    assert run(tmp_path, "status", "--watch", "--no-health") == 1
    captured = capsys.readouterr()
    assert [l.split(",")[1].strip() for l in captured.out.splitlines()] == [
        "jobDeploymentStatus Running", "jobDeploymentStatus Suspending",
        "jobDeploymentStatus Suspended"]
    assert ("The job is suspended (spec.suspend is true; jobDeploymentStatus Suspended): KubeRay "
            "deletes its Ray cluster and runs nothing until it is resumed, so it has not finished. "
            "Resume it: kubectl patch rayjob qwen3-30b-a3b-grpo -n rl-training --type merge -p "
            """'{"spec":{"suspend":false}}'""") in captured.err
    assert "The job failed" not in captured.err


def test_status_of_a_job_being_suspended_is_not_a_success(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "rayjob"], stdout=rayjob("RUNNING", "Suspending"))
    assert run(tmp_path, "status", "--no-health") == 1
    assert "The job is being suspended (spec.suspend is true; jobDeploymentStatus Suspending)" \
        in capsys.readouterr().err


KUBERAY_ENUMS = TEST_FIXTURES / "kuberay" / "rayjob-enums-v1.7.0.json"


def test_every_kuberay_deployment_status_is_mapped():
    """A KubeRay state the kit does not know would be watched forever or taken for a success."""
    enums = json.loads(KUBERAY_ENUMS.read_text())
    states = enums["JobDeploymentStatus"]
    assert sorted(launching.DEPLOYMENT_STATES) == sorted(states)
    assert launching.TERMINAL_DEPLOYMENT_STATUS == {"Complete", "Failed", "ValidationFailed",
                                                    "Suspended"}
    # every failure reason the kit words specially is one KubeRay sets
    assert set(launching.NOT_RETRIED_REASONS) | {"PreRunningDeadlineExceeded"} <= set(
        enums["JobFailedReason"])


RAY_LOG_TAIL = "last available logs (truncated to 20,000 chars):\n" + "x" * 19_000 + \
    "\nrltrainer: stopped for the Capacity Block's end\n"


def test_a_stop_for_the_capacity_blocks_end_says_launch_again_on_the_next_block(
        tmp_path, kubectl, capsys):
    """The launcher's stop for the block's end (exit 5, backoffLimit set to 0) ends the RayJob
    Failed/AppFailed with Ray's message. Before, status said "The job failed. Read its output" and
    printed all 19,000 characters of the log tail on the status line."""
    message = f"Job entrypoint command failed with exit code 5, {RAY_LOG_TAIL}"
    kubectl.rule(["get", "rayjob"], stdout=rayjob("FAILED", "Failed", reason="AppFailed",
                                                  failed=1, message=message))
    assert run(tmp_path, "status", "--no-health") == 1
    captured = capsys.readouterr()
    assert "The job stopped for its Capacity Block's end (launcher exit 5): not a crash." \
        in captured.err
    assert "Launch again on the next block once its nodes are up" in captured.err
    assert "rlkit launch --replace --config" in captured.err
    assert "The job failed" not in captured.err
    line = captured.out.splitlines()[0]
    assert len(line) < 800, len(line)
    assert line.endswith(
        "; message: Job entrypoint command failed with exit code 5, last available logs "
        "(truncated to 20,000 chars): [...] rltrainer: stopped for the Capacity Block's end "
        f"({len(message.strip()):,} characters in all: kubectl get rayjob qwen3-30b-a3b-grpo -n "
        "rl-training -o yaml, status.message)")


@pytest.mark.parametrize("code,says", [
    (2, "The launcher refused the run (exit 2: the run config, the image's EP backend or the "
        "checkpoint directory's file system) and switched KubeRay's retries off"),
    (3, "Training finished, but a finished save could not be uploaded to S3 (launcher exit 3). "
        "rlkit logs --config"),
    (4, "Training never started (launcher exit 4): staging the inputs or restoring the checkpoint "
        "failed, the file system lacks room for the saves to come, or the Ray head restarted more "
        "than once in one attempt"),
    (1, "The job failed (exit code 1). Read its output: rlkit logs")])
def test_a_failure_names_the_launchers_exit_code_and_its_next_step(tmp_path, kubectl, capsys,
                                                                    code, says):
    message = f"Job entrypoint command failed with exit code {code}. No logs available."
    kubectl.rule(["get", "rayjob"], stdout=rayjob("FAILED", "Failed", reason="AppFailed",
                                                  failed=3, message=message))
    assert run(tmp_path, "status", "--no-health") == 1
    assert says in capsys.readouterr().err


def test_a_rayjob_kuberay_refused_points_at_its_message_not_at_logs(tmp_path, kubectl, capsys):
    """ValidationFailed is set before any pod exists (rayjob_controller.go:140-153 at
    kuberay@59d663aeec13, v1.7.0; the message: utils/validation.go:551): there is no output to
    read, the message is the cause."""
    kubectl.rule(["get", "rayjob"], stdout=rayjob(
        "", "ValidationFailed", reason="ValidationFailed",
        message="The RayJob spec is invalid: TTLSecondsAfterFinished must be a non-negative integer"))
    assert run(tmp_path, "status", "--no-health") == 1
    err = capsys.readouterr().err
    assert ("KubeRay refused the RayJob before any pod ran (ValidationFailed): The RayJob spec is "
            "invalid: TTLSecondsAfterFinished must be a non-negative integer. Fix what it names") in err
    assert "rlkit logs" not in err


def test_a_short_message_stays_whole_on_the_status_line():
    doc = json.loads(rayjob("FAILED", "Failed", message="Ray head pod not found."))
    assert launching.describe_rayjob(doc).endswith("; message: Ray head pod not found.")


UNTOLERATED = ("0/6 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: true}, "
               "4 node(s) didn't match Pod's node affinity/selector.")


def ray_pod(name: str, phase: str = "Running", *, unschedulable: str | None = None,
            init_waiting: tuple[str, str] | None = None) -> dict:
    """A pod of the Ray cluster as kubectl prints it (the fields rlkit reads)."""
    status: dict = {"phase": phase}
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable", "message": unschedulable}]
    if init_waiting:
        status["initContainerStatuses"] = [{"name": "wait-gcs-ready", "state": {"waiting": {
            "reason": init_waiting[0], "message": init_waiting[1]}}}]
        status["containerStatuses"] = [{"name": "ray-worker", "state": {"waiting": {
            "reason": "PodInitializing"}}}]
    return {"metadata": {"name": name, "labels": {"ray.io/cluster": "qwen3-30b-a3b-grpo-raycluster-x"}},
            "status": status}


def test_status_watch_names_the_pods_that_hold_a_slow_start_once_per_change(
        tmp_path, kubectl, capsys, monkeypatch):
    """The kit sets no preRunningDeadlineSeconds, so KubeRay leaves a RayJob whose pods cannot
    start Initializing for ever (rayjob_controller.go:179-190 at kuberay@59d663aeec13). Before,
    --watch printed the state line once and then nothing, for hours."""
    from datetime import datetime, timezone

    import ops.launch_cmd as launch_cmd

    monkeypatch.setattr(launch_cmd, "utcnow",
                        lambda: datetime(2026, 12, 2, 12, 10, tzinfo=timezone.utc))
    starting = rayjob("", "Initializing", startTime="2026-12-02T12:00:00Z")
    kubectl.rule(["get", "rayjob"], stdout_seq=[starting] * 4 + [
        rayjob(startTime="2026-12-02T12:00:00Z"),
        rayjob("SUCCEEDED", "Complete", startTime="2026-12-02T12:00:00Z")])
    pull = ("ErrImagePull", 'failed to pull and unpack image "123.dkr.ecr/trainer:v1": not found')
    head = ray_pod("qwen3-30b-a3b-grpo-raycluster-x-head-abcde", "Pending", unschedulable=UNTOLERATED)
    worker = ray_pod("qwen3-30b-a3b-grpo-raycluster-x-p5-worker-fghij", "Pending", init_waiting=pull)
    kubectl.rule(["get", "pods"], stdout_seq=[
        json.dumps({"items": [head, worker]}), json.dumps({"items": [head, worker]}),
        json.dumps({"items": [ray_pod(head["metadata"]["name"]), worker]}),
        json.dumps({"items": [ray_pod(head["metadata"]["name"]), ray_pod(worker["metadata"]["name"])]})])
    assert run(tmp_path, "status", "--watch", "--no-health") == 0
    err = capsys.readouterr().err
    assert ["get", "pods", "-n", "rl-training", "-l",
            "ray.io/cluster=qwen3-30b-a3b-grpo-raycluster-x"] == kubectl.calls[1][:6]
    stuck = [line for line in err.splitlines() if line.startswith("Still starting")]
    assert stuck == [
        "Still starting (Initializing since 2026-12-02T12:00:00Z, over 5 min): 2 of 2 pods of Ray "
        "cluster qwen3-30b-a3b-grpo-raycluster-x not running: "
        f"qwen3-30b-a3b-grpo-raycluster-x-head-abcde Pending: {UNTOLERATED}; "
        "qwen3-30b-a3b-grpo-raycluster-x-p5-worker-fghij Pending: init container wait-gcs-ready: "
        f"ErrImagePull ({pull[1]}). More: kubectl describe pods -n rl-training -l "
        "ray.io/cluster=qwen3-30b-a3b-grpo-raycluster-x",
        "Still starting (Initializing since 2026-12-02T12:00:00Z, over 5 min): 1 of 2 pods of Ray "
        "cluster qwen3-30b-a3b-grpo-raycluster-x not running: "
        "qwen3-30b-a3b-grpo-raycluster-x-p5-worker-fghij Pending: init container wait-gcs-ready: "
        f"ErrImagePull ({pull[1]}). More: kubectl describe pods -n rl-training -l "
        "ray.io/cluster=qwen3-30b-a3b-grpo-raycluster-x",
        "Still starting (Initializing since 2026-12-02T12:00:00Z, over 5 min): all 2 pods of Ray "
        "cluster qwen3-30b-a3b-grpo-raycluster-x run; KubeRay waits for the cluster to be ready. "
        "Why not: kubectl describe raycluster qwen3-30b-a3b-grpo-raycluster-x -n rl-training"]


def test_a_start_past_its_deadline_says_it_never_started(tmp_path, kubectl, capsys):
    """training.start_deadline_minutes, rendered as preRunningDeadlineSeconds: KubeRay v1.7.0
    fails the attempt with PreRunningDeadlineExceeded (rayjob_controller.go:1247-1261 at
    kuberay@59d663aeec13)."""
    doc = json.loads(rayjob("", "Failed", reason="PreRunningDeadlineExceeded", failed=3,
                            message="The RayJob has passed the preRunningDeadlineSeconds. "
                                    "StartTime: 2026-12-02 12:00:00 +0000 UTC. "
                                    "PreRunningDeadlineSeconds: 3600"))
    doc["spec"]["preRunningDeadlineSeconds"] = 3600
    kubectl.rule(["get", "rayjob"], stdout=json.dumps(doc))
    assert run(tmp_path, "status", "--no-health") == 1
    # KubeRay's reason is the last attempt's: the first of the three may have trained for days
    assert ("The job's last attempt never started: KubeRay failed it after 3600 s without reaching "
            "Running (PreRunningDeadlineExceeded; training.start_deadline_minutes); of its 3 failed "
            "attempts, earlier ones may have trained and saved, and a launch resumes from the "
            "newest save.") in capsys.readouterr().err


def test_status_reads_no_pods_in_a_start_of_a_few_minutes(tmp_path, kubectl, capsys, monkeypatch):
    from datetime import datetime, timezone

    import ops.launch_cmd as launch_cmd

    monkeypatch.setattr(launch_cmd, "utcnow",
                        lambda: datetime(2026, 12, 2, 12, 4, tzinfo=timezone.utc))
    kubectl.rule(["get", "rayjob"], stdout=rayjob("", "Initializing",
                                                  startTime="2026-12-02T12:00:00Z"))
    assert run(tmp_path, "status", "--no-health") == 0
    assert "Still starting" not in capsys.readouterr().err
    assert not [c for c in kubectl.calls if "pods" in c]


def test_status_watch_gives_up_after_five_missed_polls(tmp_path, kubectl, capsys):
    import ops.launch_cmd as launch_cmd
    from ops.gate.runner import POLL_FAILURES_TOLERATED
    from tests.support import REPO_ROOT

    kubectl.rule(["get", "rayjob"], rc=1, stderr="Unable to connect to the server\n")
    assert run(tmp_path, "status", "--watch") == 2
    assert "trying again (4 of 4)" in capsys.readouterr().err
    assert len([c for c in kubectl.calls if "rayjob" in c]) == POLL_FAILURES_TOLERATED == 5
    # the help and the docs say what the watch does (they said the pod read was tried again, up
    # to five times in a row: one more failed read than the watch rides out, and not the pods)
    said = f"{POLL_FAILURES_TOLERATED} failures in a row end the watch"
    assert said + " (exit 2)" in " ".join(launch_cmd.__doc__.split())
    assert said + " with exit 2" in (REPO_ROOT / "docs" / "operations.md").read_text()
    assert "tried again, up to five in a row" not in launch_cmd.__doc__


def test_status_without_a_job_says_how_to_launch(tmp_path, kubectl, capsys):
    assert run(tmp_path, "status") == 1
    assert "No RayJob named qwen3-30b-a3b-grpo in namespace rl-training. Start it with: rlkit " \
           "launch" in capsys.readouterr().err


def test_logs_follow_streams_the_submitter(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "job"], stdout=json.dumps({"metadata": {"name": "x"}}))
    kubectl.rule(["logs"], stdout="step 1 reward 0.12\n")
    assert run(tmp_path, "logs", "-f") == 0
    assert kubectl.calls[-1] == ["logs", "-n", "rl-training", "job/qwen3-30b-a3b-grpo",
                                 "--all-containers", "-f"]


def test_logs_before_the_submitter_exists(tmp_path, kubectl, capsys):
    kubectl.rule(["get", "rayjob"], stdout=rayjob("", "Initializing"))
    assert run(tmp_path, "logs") == 1
    assert "the Ray cluster is probably still starting" in capsys.readouterr().err


def test_gate_verdict_passes_for_a_matching_passed_gate():
    from infra.config import parse_config
    import yaml

    cfg = parse_config(yaml.safe_load(CONFIG))
    state = {"ok": True, "instance_type": "p5.48xlarge", "nodes": 2}
    assert launching.gate_verdict(state, cfg, __import__("pathlib").Path("g.json")) is None


def test_dry_run_previews_without_a_gate_and_says_the_real_run_would_refuse(tmp_path, kubectl,
                                                                             capsys):
    assert run(tmp_path, "launch", "--dry-run") == 1  # previews, then says the real launch would refuse
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("[dry-run] Launch into environment 'gt' (us-east-1)")
    assert out.splitlines()[1].startswith("[dry-run] the real launch would REFUSE: no fabric "
                                          "gate has run for 'gt'")
    assert f"apply -f {tmp_path}/out/rl-job/04-rayjob.yaml" in out
    assert out.rstrip().endswith("without --dry-run this launch would refuse (exit 1): see the "
                                 "REFUSE line(s) above.")
    assert kubectl.calls == []


def test_dry_run_after_a_failed_gate_names_the_failure(tmp_path, kubectl, capsys):
    write_state(tmp_path, ok=False, findings=[{
        "check": "NCCL network", "status": "fail", "measured": "Socket", "expected": "EFA"}])
    assert run(tmp_path, "launch", "--dry-run") == 1
    out = capsys.readouterr().out
    assert "the real launch would REFUSE: the last fabric gate for 'gt' FAILED" in out
    assert "NCCL network (Socket; expected EFA)" in out


# --- an unreachable cluster: kubectl's error once, with the hint -----------------------------------

UNREACHABLE = (TEST_FIXTURES / "kubectl" / "unreachable.stderr").read_text()


@pytest.mark.parametrize("command", ["status", "logs"])
def test_unreachable_cluster_error_is_printed_once_with_the_hint(tmp_path, kubectl, capsys,
                                                                 command):
    assert UNREACHABLE.count("connection refused") == 5  # what kubectl itself prints
    kubectl.rule(["get"], rc=1, stderr=UNREACHABLE)
    assert run(tmp_path, command) == 2
    err = capsys.readouterr().err
    assert err.count("127.0.0.1:9") == 1
    assert "The connection to the server 127.0.0.1:9 was refused" in err
    assert "memcache.go" not in err
    assert "no answer from the API server (waited up to 10 s)" in err
    assert "Fix: check that the cluster's endpoint is reachable from here" in err
    progress, error = err.strip().splitlines()  # the progress line, then the error, once
    assert progress.startswith("Contacting the API server of kubectl context arn:aws:eks:")
    assert error.startswith("error: ")


def test_klog_only_errors_are_each_given_once():
    from ops.kube import error_text

    klog = "\n".join(l for l in UNREACHABLE.splitlines() if l.startswith("E"))
    assert error_text(klog) == ('couldn\'t get current server API group list: Get '
                                '"https://127.0.0.1:9/api?timeout=32s": dial tcp 127.0.0.1:9: '
                                'connect: connection refused')
    assert error_text("error: You must be logged in to the server (Unauthorized)\n") == \
        "error: You must be logged in to the server (Unauthorized)"


def test_real_kubectl_unreachable_error_once(real_kubectl, tmp_path, monkeypatch, capsys):
    ARN = "arn:aws:eks:us-east-1:123456789012:cluster/gt"  # noqa: N806 - the context's cluster
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": ARN, "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "c", "context": {"cluster": ARN, "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "x"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert run(tmp_path, "status") == 2
    err = capsys.readouterr().err
    assert err.count("127.0.0.1:9") == 1, err
    assert "no answer from the API server" in err


def test_a_digest_ecr_will_not_give_refuses_with_the_permission_to_grant():
    """No ecr:DescribeImages (or no credentials): the job would pull by a mutable tag, so the
    render stops, naming the permission; an image in another region's ECR is pulled by tag."""
    from types import SimpleNamespace

    from botocore.exceptions import ClientError

    from infra.config import parse_config
    from manifests import placeholder_outputs
    from manifests.errors import RenderError
    from ops.image_digest import resolve_digest

    class Denied:
        def describe_images(self, **kwargs):
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}},
                              "DescribeImages")

    cfg = parse_config({"training": {"image": f"{REPO}:v1"}})
    with pytest.raises(RenderError) as err:
        resolve_digest(cfg, placeholder_outputs(cfg), SimpleNamespace(ecr=Denied()), print)
    assert "could not read the digest the tag names" in str(err.value)
    assert "grant ecr:DescribeImages on the repository" in str(err.value)
    warned = []
    west = parse_config({"training": {"image": REPO.replace("us-east-1", "us-west-2") + ":v1"}})
    assert resolve_digest(west, placeholder_outputs(west), SimpleNamespace(), warned.append) is None
    assert "is not in ECR of us-east-1" in warned[0]
