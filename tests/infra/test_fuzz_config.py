"""Malformed configs (issue 12): a generated corpus through app.py, `rlkit render` and `rlkit plan
--write-config`. Each must exit 2 with one clear report, print no traceback, and leave nothing
behind (no cdk.out/, no out/, the config file unchanged).

The corpus is built here, deterministically, from a valid base config: raw texts that are not a
plain YAML mapping, and for each field, values of the wrong type or out of range. Most cases run
in-process (fast); a few run as real subprocesses to prove the entry points themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cdk import REPO_ROOT
from infra.config import load_config

BASE: dict = {
    "name": "fz",
    "region": "us-east-1",
    "availability_zones": ["us-east-1a", "us-east-1b"],
    "gpu_node_groups": {"p5": {"instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
                               "min_size": 0, "desired_size": 2, "max_size": 2}},
    "training": {"node_group": "p5", "nodes": 2},
}

RAW: dict[str, bytes] = {
    "empty": b"",
    "blank": b"\n \n",
    "comment-only": b"# nothing here\n",
    "document-marker-only": b"---\n",
    "null": b"null\n",
    "tilde": b"~\n",
    "list": b"- name: fz\n",
    "scalar": b"fz\n",
    "number": b"42\n",
    "unclosed-flow": b"name: [fz\n",
    "unterminated-quote": b"name: 'fz\n",
    "tab-indent": b"name: fz\ngpu_node_groups:\n\tp5: {}\n",
    "bad-indent": b"name: fz\n  region: us-east-1\n",
    "duplicate-top": b"name: fz\nname: other\n",
    "duplicate-nested": b"name: fz\ntraining:\n  nodes: 2\n  nodes: 4\n",
    "duplicate-group": b"gpu_node_groups:\n  p5: {max_size: 2}\n  p5: {max_size: 4}\n",
    "anchor": b"name: &n fz\n",
    "alias": b"a: &x {min_size: 1}\nsystem_nodes: *x\n",
    "merge-key": b"base: &b {min_size: 1}\nsystem_nodes:\n  <<: *b\n",
    "alias-bomb": (b"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                   b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"),
    "deep-flow": b"tags: " + b"[" * 10_000 + b"]" * 10_000 + b"\n",
    "deep-block": b"".join(b"  " * i + b"k:\n" for i in range(60)),
    "huge-int": b"cost_guard: {max_gpu_nodes: " + b"9" * 5000 + b"}\n",
    "long-int": b"training: {nodes: 123456789012345678901234567890}\n",
    "nan": b"training: {grpo: {lr: .nan}}\n",
    "inf": b"training: {grpo: {lr: .inf}}\n",
    "neg-inf": b"training: {grpo: {kl_loss_coef: -.inf}}\n",
    "latin1": "name: f\u00e9\n".encode("latin-1"),
    "utf16": "name: fz\n".encode("utf-16"),
    "invalid-continuation": b"name: fz\xc3\x28\n",
    "nul-byte": b"name: f\x00z\n",
    "python-tag": b"name: !!python/object/apply:os.system [echo pwned]\n",
    "binary-tag": b"name: !!binary aGVsbG8=\n",
    "set-tag": b"tags: !!set {a, b}\n",
    "oversized": b"name: fz\n" + b"#" * 300_000 + b"\n",
    "non-string-key": b"1: fz\n",
    "null-key": b"~: fz\n",
}

# (field path, value): each value is wrong for that field, by type or by rule.
FIELD_CASES: list[tuple[str, object]] = [
    ("name", ""), ("name", "Upper"), ("name", "a" * 21), ("name", "fz\nregion: x"),
    ("name", 7), ("name", ["fz"]), ("name", None), ("name", "moe-rl-gpu"), ("name", "-fz"),
    ("name", "x" * 100_000),
    ("region", "useast1"), ("region", ""), ("region", 1), ("region", "us-east-1\n"),
    ("availability_zones", "us-east-1a"), ("availability_zones", ["us-east-1a"]),
    ("availability_zones", ["us-east-1a", "us-east-1a"]), ("availability_zones", []),
    ("availability_zones", ["eu-west-1a", "eu-west-1b"]), ("availability_zones", [1, 2]),
    ("account", "12345"), ("account", 123456789012), ("account", "1234567890123"),
    ("kubernetes_version", "1.0"), ("kubernetes_version", 1.34),
    ("ephemeral", "maybe"), ("ephemeral", 2), ("ephemeral", True),
    ("vpc", []), ("vpc.cidr", "10.0.0.0/8"), ("vpc.cidr", "not-a-cidr"), ("vpc.cidr", "10.0.0.1/16"),
    ("vpc.nat_gateways", 0), ("vpc.nat_gateways", 99), ("vpc.nat_gateways", "one"),
    ("vpc.existing", {"vpc_id": "vpc-1"}), ("vpc.existing", "vpc-0123456789abcdef0"),
    ("endpoint_access.mode", "open"), ("endpoint_access.public_cidrs", ["0.0.0.0/33"]),
    ("endpoint_access.public_cidrs", "0.0.0.0/0"),
    ("admin_role_arns", ["arn:aws:iam::123:user/x"]), ("admin_role_arns", "arn"),
    ("system_nodes.instance_type", "p5.48xlarge"), ("system_nodes.instance_type", "m7i xlarge"),
    ("system_nodes.instance_type", "g5.xlarge"), ("system_nodes.min_size", 0),
    ("system_nodes.min_size", -1), ("system_nodes.max_size", 10_000),
    ("system_nodes.desired_size", "two"),
    ("gpu_node_groups", {}), ("gpu_node_groups", []), ("gpu_node_groups", "p5"),
    ("gpu_node_groups.p5", None), ("gpu_node_groups.p5.instance_type", "p4d.24xlarge"),
    ("gpu_node_groups.p5.instance_type", None), ("gpu_node_groups.p5.availability_zone", "us-east-1z"),
    ("gpu_node_groups.p5.max_size", 0), ("gpu_node_groups.p5.max_size", 100_000),
    ("gpu_node_groups.p5.max_size", -2), ("gpu_node_groups.p5.min_size", 5),
    ("gpu_node_groups.p5.desired_size", 3.5), ("gpu_node_groups.p5.root_volume_gib", 10),
    ("gpu_node_groups.p5.labels", {"rlkit.aws/x": "y"}), ("gpu_node_groups.p5.labels", {"a": "b\nc"}),
    ("gpu_node_groups.p5.labels", ["a"]), ("gpu_node_groups.p5.taints", [{"key": "nvidia.com/gpu"}]),
    ("gpu_node_groups.p5.taints", [{"key": "bad key"}]), ("gpu_node_groups.p5.taints", [{"value": "x"}]),
    ("gpu_node_groups.p5.taints", [{"key": "a", "effect": "Sometimes"}]),
    ("gpu_node_groups.p5.capacity.type", "spot"),
    ("gpu_node_groups.p5.capacity.reservation_id", "cr-1"),
    ("gpu_node_groups.p5.capacity", {"type": "odcr"}), ("gpu_node_groups.p5.typo", 1),
    ("gpu_node_groups.P5!", {"instance_type": "p5.48xlarge", "availability_zone": "us-east-1a"}),
    ("storage.noncurrent_version_days", 0), ("storage.retain", "sometimes"),
    ("cost_guard.max_gpu_nodes", 1), ("cost_guard.ttl_hours", 0), ("cost_guard.ttl_hours", "6h"),
    ("training.run_name", "Bad Name"), ("training.run_name", "x" * 41),
    ("training.node_group", "missing"), ("training.nodes", 0), ("training.nodes", 3),
    ("training.nodes", "two"), ("training.nodes", 10**9), ("training.parallel.tp", 0), ("training.parallel.tp", 16),
    ("training.parallel.ep", 7), ("training.parallel.vpp", 2), ("training.rollout.gpus_per_engine", 3),
    ("training.expert_parallel.backend", "mpi"), ("training.expert_parallel.gin_mode", "gpu"),
    ("training.grpo.lr", 0.0), ("training.grpo.lr", -1e-6), ("training.grpo.eps_clip", 2.0),
    ("training.grpo.rollout_batch_size", 3), ("training.grpo.num_rollout", 0),
    ("training.grpo.rollout_temperature", 0),
    ("training.prompt_data", "s3://elsewhere/data.jsonl"), ("training.prompt_data", "prompts.jsonl"),
    ("training.hf_checkpoint", "s3://elsewhere/weights/"), ("training.extra_env", {"A": 1}),
    ("training.extra_env", ["A=1"]), ("training.typo", True),
    ("tags", {"aws:owner": "me"}), ("tags", {"rlkit:environment": "other"}),
    ("tags", {"team": "a\nb"}), ("tags", ["team"]), ("tags", {"k" * 200: "v"}),
    ("regoin", "us-east-1"), ("addons.kuberay_operator.version", "0.0.1"), ("addons.nope", {}),
]


def with_value(path: str, value: object) -> dict:
    data = json.loads(json.dumps(BASE))
    node = data
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return data


def corpus() -> list[tuple[str, bytes]]:
    cases = list(RAW.items())
    for path, value in FIELD_CASES:
        text = yaml.safe_dump(with_value(path, value), sort_keys=False, allow_unicode=True)
        cases.append((f"{path}={str(value)[:30]!r}", text.encode()))
    return cases


CORPUS = corpus()
# Keys `rlkit plan --write-config` sets itself: a bad value there is replaced, not kept.
PLANNER_OWNED = ("training.node_group=", "training.nodes=", "training.parallel.",
                 "training.expert_parallel.")
IDS = [name for name, _ in CORPUS]


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 100, len(CORPUS)


def test_base_config_is_valid():
    from infra.config import parse_config

    parse_config(BASE)  # so every case is malformed by its own change, not by the base


def check_clean_failure(code: int, err: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert "problem(s)" in err or "error" in err, err
    assert max(len(line) for line in err.splitlines()) < 1500, "values must be truncated"


PLAN_ARGS = ["plan", "--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--nodes", "2"]


@pytest.fixture(scope="module")
def plan():
    """The layout `rlkit plan` picks for the corpus' write step (planning once keeps it fast)."""
    from ops import plan_cmd
    from ops.cli import build_parser

    result = plan_cmd._plan(build_parser().parse_args(PLAN_ARGS))
    return result.best, result.model.key, result.system.name


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name, text", CORPUS, ids=IDS)
def test_app_render_and_plan_refuse_each_malformed_config(name, text, isolated, capsys, plan):
    config = isolated / "config.yaml"
    config.write_bytes(text)

    # app.py's main path, in-process: exit 2, one report, no cdk.out/.
    import app
    from stacks.kit import make_app

    outdir = isolated / "cdk.out"
    code = app.synthesize(make_app(outdir=str(outdir)), str(config), outdir=outdir,
                          outdir_existed=False)
    check_clean_failure(code, capsys.readouterr().err)
    assert not (isolated / "cdk.out").exists()

    from ops.cli import main as rlkit

    # rlkit render: exit 2, no out/.
    code = rlkit(["render", "--config", str(config)])
    check_clean_failure(code, capsys.readouterr().err)
    assert not (isolated / "out").exists()

    # rlkit plan --write-config's writing step (the plan itself is computed once, below): a
    # PlannerError (which `rlkit plan` prints and exits 2 on) with the file untouched, or, where
    # the planner's own training keys replace the bad value, a written file that validates.
    from infra.planner.config_writer import write_config
    from infra.planner.errors import PlannerError

    best, model_key, instance_type = plan
    try:
        write_config(config, best, model_key, instance_type, "p5")
    except PlannerError as err:
        assert max(len(line) for line in str(err).splitlines()) < 1500
        assert config.read_bytes() == text
    else:
        assert name.startswith(PLANNER_OWNED), "wrote a config from malformed input"
        load_config(config)
    assert [p.name for p in isolated.iterdir()] == ["config.yaml"]


# The process boundary once (interpreter exit, stderr, no traceback), on the input most likely
# to escape a handler; every case goes through the same entry points in-process above.
SUBPROCESS_CASES = ["alias-bomb"]


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_real_entry_points_exit_2_without_traceback(name, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_bytes(RAW[name])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CDK_OUTDIR": str(tmp_path / "cdk.out"),
           "CDK_CONTEXT_JSON": json.dumps({"config": str(config)}),
           "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    app = subprocess.run([sys.executable, str(REPO_ROOT / "app.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    check_clean_failure(app.returncode, app.stderr)
    render = subprocess.run([sys.executable, "-m", "ops.cli", "render", "--config", str(config)],
                            cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO_ROOT)},
                            capture_output=True, text=True, timeout=120)
    check_clean_failure(render.returncode, render.stderr)
    plan = subprocess.run([sys.executable, "-m", "ops.cli", *PLAN_ARGS, "--write-config",
                           str(config), "--node-group", "p5"],
                          cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=120)
    check_clean_failure(plan.returncode, plan.stderr)
    assert config.read_bytes() == RAW[name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_libyaml_reads_every_case_as_the_pure_python_strict_loader_does(monkeypatch):
    """Configs are read with libyaml when the strict loader would accept them as they are
    (infra/config/loader.py): the same data, or the same refusal with the same line and column,
    for every case and example; and the examples do take that path."""
    from infra.config import ConfigError
    from infra.config import loader

    def outcome(text: str):
        try:
            return "data", loader.parse_config_text(text, "c.yaml")
        except ConfigError as err:
            return "refused", str(err)

    texts = [(name, raw.decode()) for name, raw in CORPUS if _utf8(raw)]
    texts += [(p.name, p.read_text()) for p in sorted((REPO_ROOT / "examples").glob("*.yaml"))]
    fast = {name: outcome(text) for name, text in texts}
    took_libyaml = {name for name, text in texts if loader._libyaml_load(text)[0]}
    monkeypatch.setattr(loader, "_LIBYAML_LOADER", None)
    assert {name: outcome(text) for name, text in texts} == fast
    examples = {p.name for p in (REPO_ROOT / "examples").glob("*.yaml")}
    assert examples <= took_libyaml
    assert not {"anchor", "alias", "merge-key", "alias-bomb", "deep-flow", "deep-block"} & took_libyaml


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_write_config_refuses_a_result_that_fails_validation(isolated, capsys):
    from ops.cli import main as rlkit

    config = isolated / "config.yaml"
    bad = with_value("gpu_node_groups.p5.root_volume_gib", 10)  # valid YAML, invalid config
    config.write_text(yaml.safe_dump(bad, sort_keys=False))
    before = config.read_bytes()
    code = rlkit([*PLAN_ARGS, "--write-config", str(config), "--node-group", "p5"])
    err = capsys.readouterr().err
    assert code == 2
    assert "the result would not be a valid config" in err
    assert "gpu_node_groups.p5.root_volume_gib = 10: must be 50 to 16384 GiB" in err
    assert config.read_bytes() == before


def test_write_config_writes_through_a_symlink(isolated, capsys):
    from ops.cli import main as rlkit

    real = isolated / "configs" / "env.yaml"
    real.parent.mkdir()
    real.write_text(yaml.safe_dump(BASE, sort_keys=False))
    link = isolated / "current.yaml"
    link.symlink_to(real)
    code = rlkit([*PLAN_ARGS, "--write-config", str(link), "--node-group", "p5"])
    assert code == 0, capsys.readouterr().err
    assert link.is_symlink() and Path(os.readlink(link)) == real
    assert yaml.safe_load(real.read_text())["training"]["model"] == "qwen3-30b-a3b"
    assert sorted(p.name for p in real.parent.iterdir()) == ["env.yaml"]  # no temp file left
