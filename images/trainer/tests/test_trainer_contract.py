"""The run-config contract (rltrainer.contract) stands on PyYAML and the standard library alone.

The kit imports it at ``cdk synth`` and ``rlkit`` time, where torch, boto3 and the rest of the
trainer's stack must not be needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from rltrainer import contract
from rltrainer.launch import DEFAULT_CONFIG, IMAGE_BACKEND_ENV
from rltrainer.metrics import DIMENSIONS, ENVIRONMENT_ENV, NAMESPACE, RUN_DIMENSION
from rltrainer.miles import train_env
from rltrainer.no_retry import RAYJOB_ENV

SRC = Path(__file__).resolve().parent.parent / "src"

# A child that can import the standard library, PyYAML and rltrainer, and nothing else: every
# other top-level import raises ImportError, as it would where only pyyaml is installed.
CHILD = r"""
import importlib.abc, json, sys

ALLOWED = {"rltrainer", "yaml", "_yaml"}


class OnlyPyYAML(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in ALLOWED:
            return None
        raise ImportError(f"{name} is not importable here (only the standard library and pyyaml)")


sys.meta_path.insert(0, OnlyPyYAML())
import yaml

before = set(sys.modules)  # the interpreter's start-up (site, editable finders) and PyYAML's own
from rltrainer.contract import SCHEMA_EXAMPLE, parse_run_config

cfg = parse_run_config(yaml.safe_load(SCHEMA_EXAMPLE), "example")
loaded = sorted({m.partition(".")[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names))
print(json.dumps({"run_name": cfg.run_name, "modules": loaded}))
"""


def test_the_contract_imports_with_only_pyyaml_and_the_standard_library():
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["run_name"] == "qwen3-30b-a3b-grpo"
    assert report["modules"] == ["rltrainer"]


def test_the_schema_example_is_a_valid_run_config():
    cfg = contract.parse_run_config(yaml.safe_load(contract.SCHEMA_EXAMPLE))
    assert cfg.expert_parallel.backend in contract.TRAINING_EP_BACKENDS


def test_the_training_backends_are_ep_backends_and_gin_cannot_train():
    assert set(contract.TRAINING_EP_BACKENDS) < set(contract.EP_BACKENDS)
    assert set(contract.EP_BACKENDS) - set(contract.TRAINING_EP_BACKENDS) == {"deepep-gin"}


def test_the_trainer_reads_the_contract_names():
    """The launcher, the metrics and the retry stopper use the contract's names, not their own."""
    assert DEFAULT_CONFIG == contract.RUN_CONFIG_PATH == "/etc/rltrainer/run.yaml"
    assert IMAGE_BACKEND_ENV == contract.IMAGE_BACKEND_ENV == "RLTRAINER_IMAGE_EP_BACKEND"
    assert RAYJOB_ENV == contract.RAYJOB_ENV == "RLTRAINER_RAYJOB"
    assert (NAMESPACE, RUN_DIMENSION) == (contract.METRICS_NAMESPACE, contract.METRICS_RUN_DIMENSION)
    assert DIMENSIONS == [contract.METRICS_ENVIRONMENT_DIMENSION, contract.METRICS_RUN_DIMENSION]
    assert ENVIRONMENT_ENV == contract.ENVIRONMENT_ENV == "RLTRAINER_ENVIRONMENT"
    assert train_env(None) == dict(contract.TRAINER_RUNTIME_ENV) == {
        "PYTHONPATH": "/root/Megatron-LM", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONUNBUFFERED": "1"}


def test_the_old_import_path_is_the_contract():
    import rltrainer.config

    assert rltrainer.config.parse_run_config is contract.parse_run_config
    assert rltrainer.config.ConfigError is contract.ConfigError
    assert set(rltrainer.config.__all__) == set(contract.__all__)


def test_a_span_reads_back_as_written_and_the_bench_reads_the_contracts_span():
    """The ``bench ep --span`` format has one writer (Span.text) and one reader (parse_span), both
    in the contract: every span written reads back equal, every text read writes back equal."""
    import itertools

    from rltrainer.bench import ep

    spans = [contract.Span(name, size, stride, first, count, tp) for name, size, stride, first, count, tp in
             itertools.product(("training", "rollout"), (2, 16), (1, 4), (0, 8), (None, 1, 24), (1, 2))]
    for span in spans:
        assert contract.parse_span(span.text()) == span, span.text()
    for text in ("training:8:1", "rollout:16:1:8", "training:8:1:0:8", "t:16:1:0::2", "training:16:1:0:16:2"):
        assert contract.parse_span(text).text() == text
    assert contract.parse_span("training:8").text() == "training:8:1"  # STRIDE's default, written
    assert ep.parse_span("rollout:16:1:8:16") == contract.parse_span("rollout:16:1:8:16")
    assert contract.span_groups(16, 4, 2, 8) == [[8, 10, 12, 14], [9, 11, 13, 15], [16, 18, 20, 22],
                                                 [17, 19, 21, 23]]


def test_every_did_you_mean_of_the_contract_goes_through_close_match():
    """One measure for the validator's suggestions: only problems.close_match calls difflib."""
    from rltrainer.contract.problems import close_match

    src = Path(contract.__file__).parent
    callers = sorted(p.name for p in src.glob("*.py") if "get_close_matches" in p.read_text())
    assert callers == ["problems.py"]
    assert close_match("colocate", ("colocated", "disaggregated")) == "colocated"
    assert close_match("zzz", ("colocated", "disaggregated")) is None
