"""The shared file system's monthly cost, as `rlkit plan` and `rlkit preflight` show it."""

from __future__ import annotations

import json

import pytest

from infra.config import config_cost, parse_config
from infra.catalog.models import MODEL_CATALOG
from infra.catalog.fsx import (
    PERSISTENT_2_USD_PER_GB_MONTH,
    cost_for,
    plan_for_model,
)
from ops.cli import main
from tests.support.preflight import _factory, _quota, aws, fake_credentials, parse  # noqa: F401 (fixtures)


def test_every_persistent_2_tier_has_a_price():
    from infra.config import SHARED_FS_THROUGHPUTS

    assert set(PERSISTENT_2_USD_PER_GB_MONTH) == set(SHARED_FS_THROUGHPUTS)
    prices = [PERSISTENT_2_USD_PER_GB_MONTH[t] for t in sorted(SHARED_FS_THROUGHPUTS)]
    assert prices == sorted(prices)  # more throughput per TiB never costs less


def test_monthly_cost_is_capacity_times_the_tier_price():
    cost = cost_for(2400, 125)
    assert cost.usd_per_month == pytest.approx(2400 * 0.145)
    assert cost.throughput_mb_s == pytest.approx(2400 / 1024 * 125)
    assert "2400 GiB at 125 MB/s/TiB" in cost.describe() and "~$348/month" in cost.describe()


def test_config_cost_follows_the_config_and_is_none_without_a_file_system():
    cfg = parse_config({"storage": {"shared_filesystem": {"capacity_gib": 4800,
                                                          "throughput_mb_s_per_tib": 500}}})
    assert config_cost(cfg).usd_per_month == pytest.approx(4800 * 0.340)
    single = parse_config({"storage": {"shared_filesystem": {"type": "none"}},
                           "training": {"nodes": 1, "hf_checkpoint": "/models/Qwen3-30B-A3B"}})
    assert config_cost(single) is None


def test_plan_proposes_the_smallest_file_system_that_holds_the_run():
    planned = plan_for_model(MODEL_CATALOG["qwen3-235b-a22b"])
    assert planned.required_gib == 6569 and planned.cost.capacity_gib == 7200


def test_plan_command_shows_the_monthly_cost(capsys):
    args = ["plan", "--model", "qwen3-30b-a3b", "--instance", "p5en.48xlarge", "--nodes", "2",
            "--top", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert ("Shared file system: the reference weights plus two checkpoints take 854 GiB -> FSx "
            "for Lustre PERSISTENT_2, 1200 GiB at 250 MB/s/TiB (293 MB/s): ~$252/month") in out
    assert main([*args, "--json"]) == 0
    fs = json.loads(capsys.readouterr().out)["shared_filesystem"]
    assert (fs["required_gib"], fs["capacity_gib"], fs["usd_per_month"]) == (854, 1200, 252.0)
    assert "from memory" in fs["price_note"]  # the unverified tiers say so


def test_preflight_shows_the_monthly_cost(aws, tmp_path, capsys):  # noqa: F811
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: pf\nstorage:\n  shared_filesystem:\n    capacity_gib: 2400\n")
    for flags in (["--width", "250"], ["--json"]):
        quotas, stub = _quota(400.0)
        args = parse(["preflight", "--config", str(cfg), *flags])
        args.clients_factory = _factory(quotas)
        with stub:
            args.func(args)
        out = capsys.readouterr().out
        if "--json" in flags:
            assert json.loads(out)["shared_filesystem"]["usd_per_month"] == 504.0
        else:
            assert "Shared file system: FSx for Lustre PERSISTENT_2, 2400 GiB at 250 MB/s/TiB" in out
            assert "~$504/month" in out


def test_plan_sizes_the_file_system_from_keep_local(capsys):
    """`rlkit plan --keep-local K` sizes for the weights plus K + 1 saves, as validation does."""
    assert plan_for_model(MODEL_CATALOG["qwen3-30b-a3b"], keep_local=2).required_gib == 1252
    args = ["plan", "--model", "qwen3-30b-a3b", "--instance", "p5en.48xlarge", "--nodes", "2",
            "--top", "1", "--keep-local", "2"]
    assert main(args) == 0
    assert ("Shared file system: the reference weights plus three checkpoints (keep_local 2) take "
            "1,252 GiB -> FSx for Lustre PERSISTENT_2, 2400 GiB") in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    fs = json.loads(capsys.readouterr().out)["shared_filesystem"]
    assert (fs["keep_local"], fs["checkpoints_on_disk"], fs["capacity_gib"]) == (2, 3, 2400)
    assert main([*args[:-1], "0"]) == 2  # a usage error
    assert "argument --keep-local: 0 is not allowed: it must be at least 1" in \
        capsys.readouterr().err
