"""`rlkit check` names a GPU group whose instance type the add-on's DCGM exporter skips
(ops/preflight_observability.py): such a group's nodes get no GPU metrics, with nothing failing.
A fork that adds an instance type (tests/support/new_instance_type.py) is the case: the
exporter's list is the add-on chart's, not the kit's catalog."""

from __future__ import annotations

import yaml

from infra.catalog import INSTANCE_TYPES
from infra.config import parse_config
from infra.problems import PASS, WARN
from ops.preflight import offline_checks
from ops.preflight_observability import DCGM_EXPORTER_INSTANCE_TYPES, GPU_METRICS
from tests.support import new_instance_type as fork
from tests.support.cdk import REPO_ROOT
from tests.support.new_instance_type import NEW_TYPE
from tests.support.new_instance_type import fork_config as _config

fork_type = fork.new_instance_type  # the fixture: the made-up type a fork would add


def _gpu_metrics(cfg) -> list:
    return [c for c in offline_checks(cfg, installed=lambda p: True) if c.name == GPU_METRICS]


def test_a_gpu_type_the_exporter_skips_is_reported_with_the_override(fork_type):
    [check] = _gpu_metrics(parse_config(_config()))
    assert check.status == WARN and check.subject == "gpu_node_groups.r100"
    assert check.detail.startswith(f"{NEW_TYPE} is not in the instance types the add-on's DCGM "
                                   "exporter may run on")
    assert f'dcgm_exporter_affinity(["{NEW_TYPE}"])' in check.fix
    assert "aws eks describe-addon-configuration" in check.fix


def test_every_example_group_gets_gpu_metrics():
    for path in sorted((REPO_ROOT / "examples").glob("*.yaml")):
        cfg = parse_config(yaml.safe_load(path.read_text()))
        checks = _gpu_metrics(cfg)
        assert len(checks) == len(cfg.gpu_node_groups), path.name
        assert {c.status for c in checks} <= {PASS}, path.name
    assert set(INSTANCE_TYPES) <= DCGM_EXPORTER_INSTANCE_TYPES


def test_nothing_to_report_with_observability_off(fork_type):
    data = _config()
    data["observability"] = {"enabled": False}
    assert _gpu_metrics(parse_config(data)) == []
