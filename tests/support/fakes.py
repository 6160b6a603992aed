"""Fakes and recorded inputs shared by the ops tests: a recording kubectl on PATH, the gate's
recorded scenarios, a stack-outputs file, the config the gate and launch tests use, and the
launch command driven as the CLI drives it."""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from manifests.efa_env import EfaEnvProfile
from ops import gate_cmd, launch_cmd, logs_cmd
from ops.gate import evaluate
from tests.support import FIXTURES as TEST_FIXTURES

FIXTURES = TEST_FIXTURES / "gate"
FAKE_KUBECTL = FIXTURES / "fake_kubectl.py"


def scenario(name: str) -> tuple[dict, dict[str, str]]:
    d = FIXTURES / name
    meta = json.loads((d / "meta.json").read_text())
    logs = {p.stem: p.read_text() for p in d.glob("*.log")}
    if (d / "nodes.json").is_file():
        logs["nodes"] = (d / "nodes.json").read_text()
    return meta, logs


def gin_type(meta: dict) -> str | None:
    profile = EfaEnvProfile(meta["instance_type"], meta["ep_backend"], meta.get("gin_mode"))
    return profile.as_dict().get("NCCL_GIN_TYPE")


def judge(name: str, instance_type: str | None = None):
    meta, logs = scenario(name)
    return evaluate(logs, instance_type or meta["instance_type"], meta["nodes"], meta["ep_backend"],
                    gin_type(meta))


# --- a cluster behind kubectl ----------------------------------------------------------------

CONFIG = """
name: gt
region: us-east-1
availability_zones: [us-east-1a, us-east-1b]
gpu_node_groups:
  p5: {instance_type: p5.48xlarge, availability_zone: us-east-1a, desired_size: 2, max_size: 2}
training: {node_group: p5, nodes: 2}
"""


def outputs_file(tmp_path: Path, name: str = "gt") -> Path:
    data = {
        # TrainerRoleArn is in both: it moved from the cluster to the data stack.
        f"{name}-data": {"DataBucketName": "gt-bucket",
                         "EcrRepositoryUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/gt",
                         "TrainerRoleArn": "arn:aws:iam::123456789012:role/gt-trainer"},
        f"{name}-cluster": {"ClusterName": "gt-cluster", "Region": "us-east-1",
                            "TrainerNamespace": "rl-training",
                            "TrainerServiceAccount": "rl-trainer",
                            "TrainerRoleArn": "arn:aws:iam::123456789012:role/gt-trainer"},
        f"{name}-gpu-p5": {"NodegroupName": "gt-p5"},
        f"{name}-storage": {"SharedFileSystemId": "fs-0123456789abcdef0",
                            "SharedFileSystemDnsName":
                                "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
                            "SharedFileSystemMountName": "abcdefgh"},
    }
    path = tmp_path / "cdk-outputs.json"
    path.write_text(json.dumps(data))
    return path


@functools.cache
def _fake_kubectl_module():
    spec = importlib.util.spec_from_file_location("fake_kubectl", FAKE_KUBECTL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeKubectl:
    """Puts a recording kubectl first on PATH; ``calls`` are the argv lists it got.

    The kit runs kubectl through ``subprocess.run`` (ops/kube.py); while this stand-in is the
    kubectl found on PATH, unchanged, those calls are answered in the test process by the same
    code the script runs (one Python start-up per call saved: about 400 in the suite). Anything
    else (another kubectl first on PATH, a test that rewrote the script to hang, a child process
    of the kit) runs the script as a real process."""

    def __init__(self, tmp_path: Path, monkeypatch):
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.log = tmp_path / "kubectl-calls.jsonl"
        self.rules_path = tmp_path / "kubectl-rules.json"
        exe = self.bin / "kubectl"
        self._script = f"#!/bin/sh\nexec {sys.executable} {FAKE_KUBECTL} \"$@\"\n"
        exe.write_text(self._script)
        exe.chmod(0o755)
        monkeypatch.setenv("PATH", f"{self.bin}:/usr/bin:/bin")
        real_run = subprocess.run

        def run(argv, *args, **kwargs):
            if self._answers_in_process(argv, kwargs):
                code, out, err = _fake_kubectl_module().answer([str(a) for a in argv[1:]])
                if not kwargs.get("text"):
                    out, err = out.encode(), err.encode()
                return subprocess.CompletedProcess(list(argv), code, out, err)
            return real_run(argv, *args, **kwargs)

        monkeypatch.setattr(subprocess, "run", run)
        monkeypatch.setenv("FAKE_KUBECTL_LOG", str(self.log))
        monkeypatch.setenv("FAKE_KUBECTL_RULES", str(self.rules_path))
        self.rules: list[dict] = []
        # The context `aws eks update-kubeconfig` writes for the outputs' cluster (gt-cluster).
        self.rule(["config", "view"], stdout=kubeconfig("gt-cluster"))

    def point_at(self, cluster: str, region: str = "us-east-1") -> None:
        """The current context is the one `aws eks update-kubeconfig --name <cluster>` writes."""
        self.rules[0] = {"match": ["config", "view"], "stdout": kubeconfig(cluster, region)}
        self.rules_path.write_text(json.dumps(self.rules))

    def no_context(self) -> None:
        """No kubeconfig at all (or one with no current-context): kubectl's answer to the context
        read (`config view --minify`), as the real kubectl 1.32 gives it."""
        self.rules[0] = {"match": ["config", "view"], "rc": 1,
                         "stderr": "error: current-context must exist in order to minify\n"}
        self.rules_path.write_text(json.dumps(self.rules))

    def _answers_in_process(self, argv, kwargs: dict) -> bool:
        """The call is what the script would answer alone: kubectl resolves to it, it is
        unchanged, and the caller captures the output and sends no input."""
        if isinstance(argv, (str, bytes)) or not argv or not kwargs.get("capture_output") \
                or {"input", "stdin", "stdout", "stderr", "check", "env", "cwd"} & kwargs.keys():
            return False
        exe = self.bin / "kubectl"
        found = shutil.which(str(argv[0]), path=os.environ.get("PATH"))
        return (found is not None and Path(found) == exe and exe.is_file()
                and exe.read_text() == self._script)

    def rule(self, match, **answer):
        self.rules.append({"match": match, **answer})
        self.rules_path.write_text(json.dumps(self.rules))

    @property
    def all_calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(l) for l in self.log.read_text().splitlines()]

    @property
    def calls(self) -> list[list[str]]:
        """Calls that read or change the cluster: without the local context check (`config
        view`), the reachability probe (`get --raw /readyz`) and with the pinned --context
        taken off."""
        found = []
        for argv in self.all_calls:
            if argv[:1] == ["--context"]:
                argv = argv[2:]
            if argv[:1] != ["config"] and argv[:3] != ["get", "--raw", "/readyz"]:
                found.append(argv)
        return found


def kubeconfig(cluster: str, region: str = "us-east-1") -> str:
    """`kubectl config view --minify -o json` after `aws eks update-kubeconfig --name <cluster>`."""
    arn = f"arn:aws:eks:{region}:123456789012:cluster/{cluster}"
    return json.dumps({
        "clusters": [{"name": arn, "cluster": {"server": "https://ABC.gr7.example.eks.amazonaws.com"}}],
        "contexts": [{"name": arn, "context": {"cluster": arn, "user": arn}}],
        "current-context": arn,
        "users": [{"name": arn, "user": {"exec": {
            "command": "aws", "args": ["--region", region, "eks", "get-token", "--cluster-name",
                                       cluster, "--output", "json"]}}}]})


# --- rlkit gate --------------------------------------------------------------------------------


def gate_parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlkit")
    gate_cmd.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def run_gate(tmp_path: Path, *extra: str) -> int:
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    args = gate_parse(["gate", "--config", str(cfg), "--outputs", str(outputs_file(tmp_path)),
                  "--out", str(tmp_path / "out"), "--state-dir", str(tmp_path / ".rlkit"),
                  "--poll", "0", "--width", "250", *extra])
    return args.func(args)


# --- rlkit launch / status / logs ------------------------------------------------------------

def write_state(tmp_path, ok=True, nodes=2, itype="p5.48xlarge", ep=None, findings=(),
                measured=None, image=None, backend="nccl"):
    """A gate.json; ``measured``: its measured_nodes (None: a record of an rlkit before them);
    ``image``: the image its run (EP ``backend``) measured (None: a record of an rlkit before
    images were recorded)."""
    d = tmp_path / ".rlkit" / "gt"
    d.mkdir(parents=True, exist_ok=True)
    doc = {"version": 1, "config": "gt", "finished_at": "2026-03-01T12:00:00+00:00", "ok": ok,
           "instance_type": itype, "nodes": nodes, "findings": list(findings), "ep": ep}
    if measured is not None:
        doc["measured_nodes"] = measured
    if image is not None:
        doc.update(image=image, ep_backend_measured=backend)
    (d / "gate.json").write_text(json.dumps(doc))


def run(tmp_path, command, *flags):
    cfg = tmp_path / "gt.yaml"
    cfg.write_text(CONFIG)
    parser = argparse.ArgumentParser(prog="rlkit")
    commands = parser.add_subparsers(dest="command")
    launch_cmd.register(commands)
    logs_cmd.register(commands)
    argv = [command, "--config", str(cfg), "--state-dir", str(tmp_path / ".rlkit")]
    if command == "launch":
        argv += ["--outputs", str(outputs_file(tmp_path)), "--out", str(tmp_path / "out")]
    args = parser.parse_args(argv + list(flags))
    if command in ("status", "logs") and "FAKE_KUBECTL_RULES" in os.environ:
        # the environment's cluster is named like the config (names.eks_cluster_name)
        rules_path = Path(os.environ["FAKE_KUBECTL_RULES"])
        rules = json.loads(rules_path.read_text())
        rules[0] = {"match": ["config", "view"], "stdout": kubeconfig("gt")}
        rules_path.write_text(json.dumps(rules))
    if command == "status":
        args.poll = 0
    return args.func(args)


def rayjob(status="RUNNING", deployment="Running", **extra):
    """A RayJob as kubectl prints it; ``extra`` adds status fields (reason, failed, ...)."""
    return json.dumps({"metadata": {"name": "qwen3-30b-a3b-grpo"}, "spec": {"backoffLimit": 2},
                       "status": {"jobStatus": status, "jobDeploymentStatus": deployment,
                                  "rayClusterName": "qwen3-30b-a3b-grpo-raycluster-x", **extra}})


def job_json(done: bool, failed: bool = False) -> str:
    conds = []
    if done:
        conds = [{"type": "Failed" if failed else "Complete", "status": "True"}]
    return json.dumps({"status": {"active": 0 if done else 2, "succeeded": 2 if done and not failed
                                  else 0, "conditions": conds}})


def pods_json(job: str, phase: str = "Running", message: str | None = None) -> str:
    status: dict = {"phase": phase}
    if message:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "message": message}]
    return json.dumps({"items": [{"metadata": {"name": f"{job}-0-abcde"}, "status": status,
                                  "spec": {"nodeName": "ip-10-0-1-10.ec2.internal"}}]})


def script_cluster(k: FakeKubectl, fixture: str, failing_job: str | None = None) -> None:
    for key in ("nodecheck", "allreduce", "ep"):
        job = f"fabric-p5-{key}"
        k.rule(["get", "job", job], stdout_seq=[job_json(False), job_json(True, key == failing_job)])
        k.rule(["get", "pods", f"job-name={job}"], stdout=pods_json(job))
        log = FIXTURES / fixture / f"{key}.log"
        if log.exists():
            k.rule(["logs", f"{job}-0-abcde"], stdout_file=str(log))
    nodes = FIXTURES / fixture / "nodes.json"
    if nodes.exists():
        k.rule(["get", "nodes"], stdout_file=str(nodes))


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    """A FakeKubectl first on PATH for the test (import it into a test module to use it)."""
    return FakeKubectl(tmp_path, monkeypatch)


def by_check(report) -> dict:
    return {f.check: f for f in report.findings}


# --- the trainer image's digest (ops/image_digest.py) -----------------------------------------

def digest_of(tag: str) -> str:
    """What the fake ECR says ``tag`` names (one digest per tag); gate and launch pin to it."""
    return "sha256:" + hashlib.sha256(tag.encode()).hexdigest()


class FakeEcr:
    """describe_images for one tag: ``digests`` maps a tag to its digest (default: every tag
    names ``digest_of(tag)``); ``calls`` records each call's arguments."""

    def __init__(self, digests: dict[str, str] | None = None):
        self.digests = digests
        self.calls: list[dict] = []

    def describe_images(self, **kwargs):
        self.calls.append(kwargs)
        tag = kwargs["imageIds"][0]["imageTag"]
        digest = digest_of(tag) if self.digests is None else self.digests.get(tag)
        if digest is None:
            from botocore.exceptions import ClientError
            raise ClientError({"Error": {"Code": "ImageNotFoundException", "Message": tag}},
                              "DescribeImages")
        return {"imageDetails": [{"imageDigest": digest, "imageTags": [tag]}]}


def fake_ecr(monkeypatch, ecr: FakeEcr | None = None) -> FakeEcr:
    """Gate and launch read digests from ``ecr`` (a FakeEcr) instead of AWS."""
    from ops import rendering
    try:
        from ops import image_digest
    except ImportError:  # an rlkit before digests (tests run against older code)
        return ecr or FakeEcr()

    ecr = ecr or FakeEcr()
    monkeypatch.setattr(rendering, "resolve_digest",  # raising=False: absent before digests
                        lambda cfg, outputs, _clients, warn: image_digest.resolve_digest(
                            cfg, outputs, SimpleNamespace(ecr=ecr), warn), raising=False)
    return ecr
