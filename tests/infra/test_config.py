"""Config validation: every problem at once, each with field path, value, rule and fix."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.support.cdk import EXAMPLES, REPO_ROOT
from infra.config import ConfigError, KitConfig, load_config, parse_config


def problems_of(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    return [str(p) for p in err.value.problems]


def group(**overrides) -> dict:
    base = {"instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
            "min_size": 0, "desired_size": 2, "max_size": 2}
    return {**base, **overrides}


def test_default_config_is_two_on_demand_p5_in_us_east_1():
    cfg = load_config(None)
    assert cfg.region == "us-east-1"
    assert cfg.availability_zones == ["us-east-1a", "us-east-1b"]
    (name, g), = cfg.gpu_node_groups.items()
    assert (name, g.instance_type, g.desired_size, g.capacity.type) == (
        "p5", "p5.48xlarge", 2, "on-demand")
    assert cfg.account is None


def test_default_example_file_equals_built_in_default():
    assert load_config(REPO_ROOT / "examples" / "default.yaml") == load_config(None)


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_is_valid(example):
    assert isinstance(load_config(REPO_ROOT / "examples" / f"{example}.yaml"), KitConfig)


def test_config_is_frozen():
    cfg = load_config(None)
    with pytest.raises(Exception):
        cfg.name = "other"


def test_all_problems_reported_at_once_with_exact_text():
    found = problems_of({
        "gpu_node_groups": {
            "p4": group(instance_type="p4d.24xlarge", availability_zone="us-west-2a",
                        desired_size=3, max_size=2),
            "cb": group(capacity={"type": "capacity-block"}),
        },
        "training": {"node_group": "cb"},
    })
    assert found == [
        "gpu_node_groups.p4.instance_type = 'p4d.24xlarge': not in the kit's instance catalog. "
        "Fix: use one of p5.48xlarge, p5e.48xlarge, p5en.48xlarge, p6-b200.48xlarge, "
        "p6-b300.48xlarge, p6e-gb200.36xlarge.",
        "gpu_node_groups.p4 = {'min_size': 0, 'desired_size': 3, 'max_size': 2}: sizes must "
        "satisfy 0 <= min_size <= desired_size <= max_size and max_size >= 1. Fix: e.g. "
        "min_size: 0, desired_size: 3, max_size: 3.",
        "gpu_node_groups.p4.availability_zone = 'us-west-2a': not among the VPC's AZs "
        "['us-east-1a', 'us-east-1b']. Fix: use one of availability_zones (or local_zones), or add "
        "this AZ there.",
        "gpu_node_groups.cb.capacity.reservation_id = None: capacity type capacity-block needs "
        "the reservation it launches into. Fix: set reservation_id to the cr-... ID from the EC2 "
        "console or `aws ec2 describe-capacity-reservations`.",
    ]


def test_pod_addresses_need_a_warm_pool_and_a_floor_of_0_or_more():
    # WARM_IP_TARGET 0 with a floor set adds no address past it (aws/amazon-vpc-cni-k8s@0c65d58cf2b4
    # README.md:346, MINIMUM_IP_TARGET note 2); MINIMUM_IP_TARGET 0 is no floor, as if unset
    # (same commit, pkg/ipamd/ipamd.go:2043-2056 getMinimumIPTarget, noMinimumIPTarget = 0)
    assert problems_of({"vpc": {"pod_addresses": {"warm_ip_target": 0, "minimum_ip_target": -1}},
                        "gpu_node_groups": {"p5": group()}}) == [
        "vpc.pod_addresses.warm_ip_target = 0: must be at least 1: with 0 the VPC CNI adds no "
        "address past the floor. Fix: use the default (warm_ip_target 2) or remove "
        "vpc.pod_addresses.",
        "vpc.pod_addresses.minimum_ip_target = -1: must be 0 (no floor) or more. Fix: use the "
        "default (minimum_ip_target 12), or 0 for no floor."]
    cfg = parse_config({"vpc": {"pod_addresses": {"warm_ip_target": 1, "minimum_ip_target": 0}}})
    assert cfg.vpc.pod_addresses.cni_env() == {"WARM_IP_TARGET": "1", "MINIMUM_IP_TARGET": "0"}


def test_az_outside_region():
    found = problems_of({"availability_zones": ["us-east-1a", "us-west-2b"],
                         "gpu_node_groups": {"p5": group()}})
    assert found == ["availability_zones[1] = 'us-west-2b': not an AZ of region us-east-1. "
                     "Fix: use a name of the form us-east-1a."]


def test_gb300_is_known_but_refused_naming_the_missing_facts():
    found = problems_of({"gpu_node_groups": {"p5": group(instance_type="p6e-gb300.36xlarge")}})
    assert len(found) == 1
    assert found[0].startswith(
        "gpu_node_groups.p5.instance_type = 'p6e-gb300.36xlarge': not supported yet: no cited "
        "facts for P6e-GB300 yet: its GPU count and memory, vCPUs, network cards and EFA "
        "interface layout and its EKS AMI type were not found")


def test_kubernetes_versions_compare_as_numbers():
    # the one comparison the add-on and UltraServer floors use: as text, 1.9 sorts after 1.10
    from infra.versions import kubernetes_minor
    assert kubernetes_minor("1.9") < kubernetes_minor("1.10") < kubernetes_minor("1.10.1")


DRA_FLOOR = (
    "kubernetes_version = '1.33': add-on dra_driver (chart dra-driver-nvidia-gpu 0.4.1, on for "
    "this config) needs Kubernetes 1.34 or later (kubernetes-sigs/dra-driver-nvidia-gpu "
    "docs/prerequisites.md:10 at v0.4.1 (764900e): Kubernetes v1.34.2 or later; EKS user guide, "
    "NVIDIA DRA driver or device plugin: minimum 1.34). Fix: set kubernetes_version to 1.34 or "
    "later.")


def test_gb200_is_capacity_blocks_only_and_its_dra_driver_needs_kubernetes_1_34():
    """EKS runs the instances from 1.33, but the DRA driver the kit turns on for them needs 1.34."""
    found = problems_of({"kubernetes_version": "1.33",
                         "gpu_node_groups": {"us": group(instance_type="p6e-gb200.36xlarge")},
                         "training": {"node_group": "us"}})
    assert found[0] == (
        "gpu_node_groups.us.capacity.type = 'on-demand': p6e-gb200.36xlarge is sold only through "
        "EC2 Capacity Blocks for ML, as UltraServers u-p6e-gb200x36 (9 instances), "
        "u-p6e-gb200x72 (18 instances) (EKS user guide, P6e-GB200 UltraServers). Fix: set "
        "capacity.type: capacity-block and capacity.reservation_id to the cr-... ID of the "
        "UltraServer Capacity Block.")
    assert [f for f in found if f.startswith("kubernetes_version")] == [DRA_FLOOR]


def test_the_dra_driver_floor_holds_wherever_it_is_enabled_and_only_there():
    assert problems_of({"kubernetes_version": "1.33",
                        "addons": {"dra_driver": {"enabled": True}}}) == [DRA_FLOOR]
    assert parse_config({"kubernetes_version": "1.34",
                         "addons": {"dra_driver": {"enabled": True}}})
    assert parse_config({"kubernetes_version": "1.33"})  # off by default on p5


def test_an_addon_kubernetes_floor_is_a_record_field(monkeypatch):
    from dataclasses import replace

    from infra import addons
    from infra.addons import efa_device_plugin

    record = efa_device_plugin.ADDON
    pinned = replace(record.pinned, min_kubernetes_version="1.35",
                     min_kubernetes_source="a source")
    monkeypatch.setattr(addons, "ADDONS", tuple(
        replace(a, pinned=pinned, tested=(pinned,)) if a is record else a
        for a in addons.ADDONS))
    assert problems_of({"kubernetes_version": "1.34"}) == [
        "kubernetes_version = '1.34': add-on efa_device_plugin (chart aws-efa-k8s-device-plugin "
        "v0.5.30, on for this config) needs Kubernetes 1.35 or later (a source). Fix: set "
        "kubernetes_version to 1.35 or later."]
    with pytest.raises(ValueError, match="needs its source"):
        replace(record.pinned, min_kubernetes_version="1.35")


def test_gb200_refuses_a_cluster_placement_group():
    cb = {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"}
    found = problems_of({"gpu_node_groups": {"us": group(instance_type="p6e-gb200.36xlarge",
                                                          capacity=cb, placement_group=True)},
                         "training": {"node_group": "us"}})
    assert [f for f in found if ".placement_group " in f] == [
        "gpu_node_groups.us.placement_group = True: the kit creates no cluster placement group "
        "for p6e-gb200.36xlarge: its NVLink domain is the UltraServer the Capacity Block "
        "reserves, and no AWS source documents placement groups for UltraServer blocks. Fix: "
        "remove placement_group (docs/operations.md, UltraServers)."]


def test_the_minimum_kubernetes_version_is_a_catalog_field(monkeypatch):
    from dataclasses import replace

    from infra.catalog import instances

    entry = instances.INSTANCE_TYPES["p5.48xlarge"]
    monkeypatch.setitem(instances.INSTANCE_TYPES, "p5.48xlarge",
                        replace(entry, min_kubernetes_version="1.35"))
    found = problems_of({"kubernetes_version": "1.34", "gpu_node_groups": {"p5": group()}})
    assert found == ["kubernetes_version = '1.34': EKS supports p5.48xlarge on Kubernetes 1.35 "
                     "and later (group p5). Fix: set kubernetes_version to 1.35 or later."]


def test_unknown_field_and_wrong_type():
    found = problems_of({"regoin": "us-east-1", "gpu_node_groups": {"p5": group(max_size="two")}})
    assert found == [
        "gpu_node_groups.p5.max_size = 'two': expected a whole number, not text. Fix: write a "
        "whole number, e.g. max_size: 2 (see docs/config-reference.md).",
        "regoin = 'us-east-1': unknown field. Fix: did you mean 'region'? Rename it, or remove "
        "it (see docs/config-reference.md).",
    ]


def test_wrong_scalar_types_are_refused_not_converted():
    # pydantic's default turned true into 1, "off" into False and "2" into 2 without a word
    found = problems_of({"training": {"nodes": True, "grpo": {"eps_clip": True}},
                         "storage": {"kms": "off"}, "system_nodes": {"desired_size": "2"},
                         "gpu_node_groups": {"p5": group(min_size=0.0, placement_group="yes")}})
    see = " (see docs/config-reference.md)."
    assert found == [
        "system_nodes.desired_size = '2': expected a whole number, not text. Fix: write it "
        "without quotes: desired_size: 2" + see,
        "gpu_node_groups.p5.min_size = 0.0: expected a whole number, not a number with a decimal "
        "point. Fix: write it without the decimal point: min_size: 0" + see,
        "gpu_node_groups.p5.placement_group = 'yes': expected true or false or null, not text. "
        "Fix: write it without quotes: placement_group: true" + see,
        "storage.kms = 'off': expected true or false, not text. Fix: write it without quotes: "
        "kms: false" + see,
        "training.nodes = True: expected a whole number, not true/false. Fix: write a whole "
        "number, e.g. nodes: 2" + see,
        "training.grpo.eps_clip = True: expected a number, not true/false. Fix: write a number, "
        "e.g. eps_clip: 0.2" + see]
    # a whole number fills a number field, and PyYAML reads 1e-6 (no decimal point) as text
    grpo = parse_config(yaml.safe_load("training: {grpo: {lr: 1e-6, kl_loss_coef: 0}}"))\
        .training.grpo
    assert (grpo.lr, grpo.kl_loss_coef) == (1e-6, 0.0)


def test_a_wrong_type_names_the_shape_expected_with_an_example():
    # the fix used to read "give a value of the documented type" after pydantic's "Input should
    # be a valid dictionary or instance of StorageConfig"
    see = " (see docs/config-reference.md)."
    assert problems_of({"storage": None, "tags": 3, "admin_role_arns": "x",
                        "endpoint_access": {"mode": "public"},
                        "training": {"extra_env": {"RETRIES": 3}}}) == [
        "endpoint_access.mode = 'public': expected one of private, public-and-private. Fix: "
        "write one of private, public-and-private, e.g. mode: private" + see,
        "admin_role_arns = 'x': expected a list, not text. Fix: write a list, e.g. "
        "admin_role_arns: [arn:aws:iam::123456789012:role/NAME]" + see,
        "storage = None: expected a mapping of its settings, not null (an empty value). Fix: "
        "write its settings, e.g. storage: {retain: true}, or remove the line for the "
        "defaults" + see,
        "training.extra_env.RETRIES = 3: expected text, not a number. Fix: quote it: "
        'RETRIES: "3"' + see,
        "tags = 3: expected a mapping, not a number. Fix: write a mapping, e.g. tags: "
        "{team: rl}" + see]


def test_an_unquoted_account_id_is_named_as_the_quoted_number_trap(tmp_path):
    cfg = tmp_path / "trap.yaml"
    cfg.write_text("name: trap\naccount: 123456789012\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert str(err.value).splitlines()[1] == (
        "  - account = 123456789012: line 2: YAML reads the unquoted 123456789012 as the number "
        "123456789012, not the text '123456789012' (the quoted-number trap). Fix: quote it: "
        'account: "123456789012".')


def test_existing_vpc_needs_a_private_subnet_in_every_az():
    found = problems_of({"vpc": {"existing": {
        "vpc_id": "vpc-0a1b2c3d4e5f60718",
        "private_subnet_ids": {"us-east-1a": "subnet-0a1b2c3d4e5f60001"}}}})
    assert found == [
        "vpc.existing.private_subnet_ids = {'us-east-1a': 'subnet-0a1b2c3d4e5f60001'}: no "
        "private subnet for AZ(s) us-east-1b. Fix: give one private subnet ID for every AZ in "
        "availability_zones."]


def test_ephemeral_requires_cost_guard():
    found = problems_of({"ephemeral": True})
    assert found == [
        "cost_guard.ttl_hours = None: an ephemeral environment must carry a time-to-live tag. "
        "Fix: set cost_guard.ttl_hours, e.g. 6.",
        "cost_guard.max_gpu_nodes = None: an ephemeral environment must cap its GPU node count. "
        "Fix: set cost_guard.max_gpu_nodes, e.g. 2.",
    ]


def test_cost_guard_caps_total_max_size():
    found = problems_of({"cost_guard": {"max_gpu_nodes": 1}})
    assert found == [
        "cost_guard.max_gpu_nodes = 1: the GPU node groups can scale to 2 nodes in all (sum of "
        "max_size). Fix: lower max_size of the groups or raise max_gpu_nodes to 2."]


def test_on_demand_with_reservation_and_bad_reservation_id():
    found = problems_of({"gpu_node_groups": {
        "a": group(capacity={"type": "on-demand", "reservation_id": "cr-0123456789abcdef0"}),
        "b": group(capacity={"type": "odcr", "reservation_id": "cr-123"})},
        "training": {"node_group": "a"}})
    assert found == [
        "gpu_node_groups.a.capacity.reservation_id = 'cr-0123456789abcdef0': on-demand groups "
        "do not use a reservation. Fix: remove reservation_id or set capacity.type to odcr or "
        "capacity-block.",
        "gpu_node_groups.b.capacity.reservation_id = 'cr-123': not a capacity reservation ID. "
        "Fix: use cr- followed by 17 hex digits.",
    ]


def test_reserved_label_prefix_and_duplicate_gpu_taint():
    found = problems_of({"gpu_node_groups": {"p5": group(
        labels={"rlkit.aws/node-role": "x"}, taints=[{"key": "nvidia.com/gpu", "value": "y"}])}})
    assert found == [
        "gpu_node_groups.p5.labels.rlkit.aws/node-role = 'x': the rlkit.aws/ prefix is reserved "
        "for labels the kit sets. Fix: use another prefix.",
        "gpu_node_groups.p5.taints[0].key = 'nvidia.com/gpu': the kit already sets this taint "
        "on every GPU node. Fix: remove this taint.",
    ]


def test_batch_invariant_explained_with_numbers():
    # The trainer owns this rule (rltrainer.contract); the kit reports it on its own field path.
    found = problems_of({"training": {"grpo": {"rollout_batch_size": 16}}})
    assert found == [
        "training.grpo.global_batch_size = 256: the trainer refuses it: Miles needs "
        "rollout_batch_size x n_samples_per_prompt = global_batch_size x num_steps_per_rollout, "
        "but 16 x 8 = 128 and 256 x 1 = 256. Fix: set grpo.global_batch_size to 128 (16 x 8 / "
        "1), or change rollout_batch_size, n_samples_per_prompt or num_steps_per_rollout so the "
        "two products match."]


def test_gin_gpu_mode_refused_on_p5():
    found = problems_of({"training": {"expert_parallel": {"backend": "deepep-gin",
                                                          "gin_mode": "gpu"}}})
    assert found == [
        "training.expert_parallel.gin_mode = 'gpu': GPU-initiated NCCL GIN runs only on "
        "p5en.48xlarge, p6-b200.48xlarge, p6-b300.48xlarge, not p5.48xlarge. Fix: set gin_mode: "
        "proxy (CPU proxy) or use a node group of p5en.48xlarge, p6-b200.48xlarge, "
        "p6-b300.48xlarge."]


def test_unknown_ep_backend():
    found = problems_of({"training": {"expert_parallel": {"backend": "mooncake"}}})
    assert found == ["training.expert_parallel.backend = 'mooncake': unknown expert-parallel "
                     "backend. Fix: use one of nccl, deepep-nvshmem, deepep-gin."]


def test_layout_must_divide_gpus():
    # Megatron's layout rules are the trainer's (rltrainer.contract), reported on kit paths.
    found = problems_of({"training": {"parallel": {"tp": 8, "pp": 3, "ep": 8}}})
    assert found == [
        "training.parallel = {'tp': 8, 'pp': 3, 'cp': 1}: the trainer refuses it: Megatron needs "
        "tp x pp x cp to divide the GPU count (nodes x gpus_per_node = 16), but 8 x 3 x 1 = 24. "
        "Fix: choose tp, pp and cp whose product divides 16.",
        "training.parallel.ep = 8: the trainer refuses it: Megatron needs etp x ep x pp to "
        "divide the GPU count (16), i.e. ep x etp must divide data-parallel x context-parallel "
        "x tp = ?, but 1 x 8 x 3 = 24. Fix: make etp x pp divide 16 first, then pick ep.",
    ]


@pytest.mark.parametrize("rollout,expected", [
    ({"placement": "disaggregated", "nodes": 2},
     ["training.rollout.nodes = 2: the rollout pool is part of training.nodes (2) and at least one "
      "node must train. Fix: use 1, or raise training.nodes (up to gpu_node_groups.p5.max_size)."]),
    ({"placement": "disaggregated"},
     ["training.rollout.nodes = None: a disaggregated rollout needs a pool of at least 1 of the "
      "run's nodes. Fix: set training.rollout.nodes to 1 (the rest of training.nodes = 2 train), "
      "e.g. from `rlkit plan --rl --write-config`."]),
    ({"nodes": 1, "overlap": "stream", "off_policy_steps": 2},
     ["training.rollout.nodes = 1: a colocated rollout runs on the training GPUs and has no pool "
      "of its own. Fix: remove training.rollout.nodes, or set training.rollout.placement: "
      "disaggregated.",
      "training.rollout.overlap = 'stream': an overlapped rollout needs GPUs of its own: Miles' "
      "train_async.py refuses --colocate. Fix: set training.rollout.placement: disaggregated "
      "with training.rollout.nodes, or overlap: none."]),
    ({"placement": "disaggregated", "nodes": 1, "off_policy_steps": 1},
     ["training.rollout.off_policy_steps = 1: must be 0 without overlap (generation can run "
      "ahead only while it overlaps training). Fix: set training.rollout.overlap to batch or "
      "stream, or off_policy_steps to 0."]),
])
def test_rollout_placement_pool_and_overlap_are_checked(rollout, expected):
    assert problems_of({"training": {"rollout": rollout}}) == expected


def test_an_asynchronous_disaggregated_rollout_is_a_valid_config():
    cfg = parse_config({"training": {"rollout": {"placement": "disaggregated", "nodes": 1,
                                                 "overlap": "batch", "off_policy_steps": 2}}})
    assert cfg.training.nodes == 2 and cfg.training.rollout.nodes == 1


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "nope.yaml")
    # the hint names no CDK syntax (-c config=...): the CLI and cdk both read this text
    assert "no such config file. Fix: check the path, or start from an example" in str(err.value)
    assert "-c config=" not in str(err.value)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    # the file, line and column of the YAML error
    assert "not valid YAML at line 2, column 1: while parsing a flow sequence; expected ',' or " \
        "']', but got '<stream end>'" in str(err.value)
    assert f"Fix: fix the YAML at {bad}:2:1" in str(err.value)


def test_an_unquoted_version_is_named_as_the_quoted_number_trap(tmp_path):
    cfg = tmp_path / "trap.yaml"
    cfg.write_text("name: trap\nkubernetes_version: 1.30\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert str(err.value).splitlines()[1] == (
        "  - kubernetes_version = 1.3: line 2: YAML reads the unquoted 1.30 as the number 1.3, "
        "not the text '1.30' (the quoted-number trap). Fix: quote it: kubernetes_version: "
        '"1.30".')
    cfg.write_text('name: trap\nkubernetes_version: "1.30"\n')  # quoted: no trap, another rule
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert "quoted-number trap" not in str(err.value)


@pytest.mark.parametrize("line, expected", [
    ("tags: {backup: yes}", "tags.backup = True: line 2: YAML reads the unquoted yes as true, not "
     "the text 'yes' (the unquoted-boolean trap). Fix: quote it: backup: \"yes\"."),
    ("name: on", "name = True: line 2: YAML reads the unquoted on as true, not the text 'on' (the "
     "unquoted-boolean trap). Fix: quote it: name: \"on\"."),
    ("tags:\n  backup: off", "tags.backup = False: line 3: YAML reads the unquoted off as false, "
     "not the text 'off' (the unquoted-boolean trap). Fix: quote it: backup: \"off\"."),
    ("training: {extra_env: {A: no}}", "training.extra_env.A = False: line 2: YAML reads the "
     "unquoted no as false, not the text 'no' (the unquoted-boolean trap). Fix: quote it: A: "
     "\"no\"."),
    ("tags: {backup: True}", "tags.backup = True: line 2: YAML reads the unquoted True as true, "
     "not the text 'True' (the unquoted-boolean trap). Fix: quote it: backup: \"True\"."),
    ("tags: {backup: ~}", "tags.backup = None: line 2: YAML reads the unquoted ~ as null (no "
     "value), not the text '~'. Fix: quote it if that text is meant: backup: \"~\"."),
    ("tags: {backup: Null}", "tags.backup = None: line 2: YAML reads the unquoted Null as null (no "
     "value), not the text 'Null'. Fix: quote it if that text is meant: backup: \"Null\"."),
    # nothing written: nothing to quote
    ("tags: {backup: }", "tags.backup = None: expected text, not null (an empty value). Fix: "
     "write text, e.g. backup: ... (see docs/config-reference.md)."),
])
def test_a_boolean_or_null_in_a_text_field_is_quoted_as_written(tmp_path, line, expected):
    # the fix quotes the source text: following it keeps what the user wrote (yes stays yes,
    # where quoting the value read would turn it into "true")
    assert load_text(tmp_path, f"# an environment\n{line}\n") == \
        f"c.yaml: 1 problem(s):\n  - {expected}"


def test_a_boolean_in_a_text_field_without_its_source_names_no_value():
    # parse_config has no file text: the fix must not claim what was written
    assert problems_of({"tags": {"backup": True}}) == [
        "tags.backup = True: expected text, not true/false. Fix: quote it as written, e.g. "
        'backup: "yes" for yes (unquoted, YAML reads yes, no, on, off, true and false as true or '
        "false) (see docs/config-reference.md)."]


def test_app_exits_2_with_the_report_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """app.py's main with `-c config=FILE` (a refusal as a real process, the config handed over
    in CDK_CONTEXT_JSON as `cdk synth` does: tests/infra/test_fuzz_config.py)."""
    import app

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"gpu_node_groups": {"p5": group(max_size=0)}}))
    out = tmp_path / "out"
    monkeypatch.setenv("CDK_OUTDIR", str(out))
    assert app.main(["-c", f"config={bad}"]) == 2
    err = capsys.readouterr().err
    assert "gpu_node_groups.p5 = {'min_size': 0, 'desired_size': 2, 'max_size': 0}" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_config_reference_and_schema_are_current():
    result = subprocess.run([sys.executable, "scripts/gen_config_reference.py", "--check"],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_json_schema_accepts_examples():
    import json

    import jsonschema
    schema = json.loads((REPO_ROOT / "config.schema.json").read_text())
    for example in EXAMPLES:
        jsonschema.validate(yaml.safe_load((REPO_ROOT / "examples" / f"{example}.yaml").read_text()),
                            schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"regoin": "x"}, schema)


# --- reading the file: refuse what a config never needs (issue 12) -------------------------------


def load_text(tmp_path, text: str | bytes) -> str:
    path = tmp_path / "c.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as err:
        load_config(path)
    return str(err.value).replace(str(path), "c.yaml")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_file_is_refused_not_the_default(tmp_path, text):
    assert load_text(tmp_path, text) == (
        "c.yaml: 1 problem(s):\n  - <file> = 'c.yaml': the file is empty (no keys): an empty "
        "file would silently deploy the built-in default. Fix: write at least `name:`, "
        "`region:` and (outside us-east-1) `availability_zones:`, or omit the config to use the "
        "built-in default on purpose.")


ZONES_NOT_SET = (
    "availability_zones = '(not set)': not set, and the built-in default ['us-east-1a', "
    "'us-east-1b'] is for us-east-1, not region us-west-2. Fix: list two or more AZs of "
    "us-west-2, e.g. availability_zones: [us-west-2a, us-west-2b] (`aws ec2 "
    "describe-availability-zones --region us-west-2` lists the region's zones).")


def test_another_region_without_zones_is_one_problem_and_the_gpu_group_follows_the_zones(
        tmp_path):
    # the smallest config the empty-file hint names used to report availability_zones[0] and [1]
    # = 'us-east-1a'/'us-east-1b', then the default GPU group's us-east-1a: values never written
    assert load_text(tmp_path, "name: ab\nregion: us-west-2\n") == \
        f"c.yaml: 1 problem(s):\n  - {ZONES_NOT_SET}"
    cfg = parse_config({"name": "ab", "region": "us-west-2",
                        "availability_zones": ["us-west-2c", "us-west-2d"]})
    assert cfg.gpu_node_groups["p5"].availability_zone == "us-west-2c"
    # and an error in another section does not turn the group into a problem of its own
    got = problems_of({"region": "us-west-2", "availability_zones": ["us-west-2c", "us-west-2d"],
                       "system_nodes": {"min_size": "abc"}})
    assert [p.split(" = ")[0] for p in got] == ["system_nodes.min_size"]
    # a group written in the region is not told again that it is outside the default zones
    assert problems_of({"region": "us-west-2", "gpu_node_groups": {
        "p5": group(availability_zone="us-west-2a")}}) == [ZONES_NOT_SET]
    # an unrelated type error is not padded with the default zones' problems
    got = problems_of({"region": "us-west-2", "storage": None})
    assert [p.split(" = ")[0] for p in got] == ["storage", "availability_zones"]
    assert got[1] == ZONES_NOT_SET
    # a problem of another field does not hide it; a bad region is told alone
    assert problems_of({"region": "us-west-2", "account": "12"})[1] == ZONES_NOT_SET
    assert problems_of({"region": "us-fake-9"})[0].startswith("region = 'us-fake-9'")
    assert len(problems_of({"region": "us-fake-9"})) == 1


@pytest.mark.parametrize("region, zones, expected", [
    # an upgrade keeps the group (and the file system that follows it) where it was: before the
    # group followed the zones it was always us-east-1a, and moving it replaces both
    ("us-east-1", ["us-east-1b", "us-east-1a"], "us-east-1a"),
    ("us-east-1", ["us-east-1a", "us-east-1b"], "us-east-1a"),
    # another region: the first zone listed
    ("us-west-2", ["us-west-2b", "us-west-2a"], "us-west-2b"),
])
def test_default_gpu_group_keeps_the_built_in_zone_when_listed(region, zones, expected):
    cfg = parse_config({"name": "ab", "region": region, "availability_zones": zones})
    assert cfg.gpu_node_groups["p5"].availability_zone == expected


def test_duplicate_keys_are_refused(tmp_path):
    msg = load_text(tmp_path, "name: a\nregion: us-east-1\nname: b\n")
    assert "duplicate key 'name' (line 3, column 1). Fix: keep one entry per key" in msg
    msg = load_text(tmp_path, "gpu_node_groups:\n  p5: {max_size: 2, max_size: 4}\n")
    assert "duplicate key 'max_size'" in msg


def test_alias_bomb_is_refused_quickly(tmp_path):
    import time

    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    bomb = "\n".join(levels) + "\n"
    assert len(bomb) < 400
    start = time.monotonic()
    msg = load_text(tmp_path, bomb)
    assert time.monotonic() - start < 1
    assert "YAML anchors and aliases (&name, *name) are not allowed in a config" in msg


def test_non_utf8_huge_integer_deep_nesting_and_nan_are_refused(tmp_path):
    assert "is not UTF-8 text (byte 0xe9 at offset 6). Fix: save the file as UTF-8." in \
        load_text(tmp_path, b"name: \xe9t\xe9\n")
    assert "integer with 5000 digits is out of range" in \
        load_text(tmp_path, "cost_guard: {max_gpu_nodes: " + "9" * 5000 + "}\n")
    assert "nested deeper than 16 levels" in load_text(tmp_path, "tags: " + "[" * 5000)
    assert "'.nan' is not a finite number" in load_text(tmp_path, "training: {grpo: {lr: .nan}}\n")
    assert "'-.inf' is not a finite number" in \
        load_text(tmp_path, "training: {grpo: {eps_clip: -.inf}}\n")


def test_oversized_file_and_non_mapping_are_refused(tmp_path):
    assert "a config is at most 262144 bytes" in load_text(tmp_path, "#" * 300_000)
    assert "<root> = ['a']: a config file must be a YAML mapping" in load_text(tmp_path, "[a]\n")


def test_schema_and_semantic_problems_are_reported_in_one_pass():
    got = problems_of({"regoin": "us-east-1", "name": "Bad_Name",
                       "system_nodes": {"min_size": "abc"},
                       "gpu_node_groups": {"p5": group(availability_zone="us-east-1z")}})
    assert got[0].startswith("system_nodes.min_size = 'abc': expected a whole number, not text")
    assert got[1].startswith("regoin = 'us-east-1': unknown field")
    assert any(p.startswith("name = 'Bad_Name': must be 1-20 characters") for p in got)
    assert any(p.startswith("gpu_node_groups.p5.availability_zone = 'us-east-1z'") for p in got)
    # the defaulted system_nodes section is not judged: it is not what the user wrote
    assert not any(p.startswith("system_nodes = ") for p in got)


def test_problem_values_are_truncated():
    got = problems_of({"name": "x" * 5000})
    assert got[0].startswith("name = '" + "x" * 159 + "... (5002 characters): must be 1-20")
    assert len(got[0]) < 500


def test_names_with_a_trailing_newline_or_dash_are_refused():
    assert problems_of({"name": "moe-rl\n"})[0].startswith("name = 'moe-rl\\n': must be 1-20")
    assert problems_of({"name": "moe-rl-"})[0].startswith("name = 'moe-rl-': must be 1-20")
    assert problems_of({"region": "us-east-1\n", "availability_zones": ["us-east-1\na"]})[0] \
        .startswith("region = 'us-east-1\\n': not an AWS region name")


# --- values (issue 12) ---------------------------------------------------------------------------


def test_tags_are_validated():
    got = problems_of({"tags": {"aws:createdBy": "me", "rlkit:environment": "other",
                                "team": "a\nb", "k" * 129: "v"}})
    assert got[0] == ("tags.aws:createdBy = 'aws:createdBy': the aws: prefix is reserved for AWS. "
                      "Fix: use another key, e.g. team or cost-center.")
    assert got[1].startswith("tags.rlkit:environment = 'rlkit:environment': the rlkit: prefix is "
                             "reserved for the kit's own tags")
    assert got[2].startswith("tags.team = 'a\\nb': a tag value is up to 256 letters")
    assert "a tag key is 1-128 letters" in got[3]


def test_image_tag_is_an_image_tag_for_every_backend():
    """image_tag: "v1 beta" loaded and rendered image: ...:v1 beta-nccl; only `rlkit image build`
    refused it."""
    assert problems_of({"training": {"image_tag": "v1 beta"}}) == [
        "training.image_tag = 'v1 beta': not an image tag version: letters, digits, _ . -, not "
        "starting with . or -, at most 113 characters (the image is tagged "
        "<image_tag>-<backend>, deepep-nvshmem the longest backend, and a tag is at most 128). "
        "Fix: use a version such as 0.1.0."]
    assert parse_config({"training": {"image_tag": "v" * 113}}).training.image_tag == "v" * 113
    assert problems_of({"training": {"image_tag": "v" * 114}})[0].startswith(
        "training.image_tag = 'vvv")
    for bad in ("", ".1", "-1", "1.0/x", "1.0:x"):
        assert problems_of({"training": {"image_tag": bad}})[0].startswith(
            f"training.image_tag = {bad!r}: not an image tag version"), bad


MOVING = ("the trainer pods pull with imagePullPolicy IfNotPresent, so nodes that cached an older "
          "image under it keep running that one while new nodes pull the new one, and one job "
          "runs two images. Fix: pin it by digest (<repository>@sha256:...), or use a version tag "
          "that is never pushed twice.")


def test_trainer_image_must_not_move():
    """training.image without a tag (so :latest) or at :latest: nodes that cached an older image
    kept running it beside new nodes running the new one."""
    assert problems_of({"training": {"image": "registry.example:5000/team/trainer"}}) == [
        "training.image = 'registry.example:5000/team/trainer': names no tag and no digest, so "
        f"it means :latest: {MOVING}"]
    assert problems_of({"training": {"image": "public.ecr.aws/team/trainer:latest"}}) == [
        f"training.image = 'public.ecr.aws/team/trainer:latest': the tag latest moves: {MOVING}"]
    assert problems_of({"training": {"image": "trainer:v1 beta"}})[0].startswith(
        "training.image = 'trainer:v1 beta': 'v1 beta' is not an image tag (letters, digits")
    digest = "sha256:" + "ab" * 32
    for fine in (f"trainer@{digest}", f"trainer:latest@{digest}", "registry.example:5000/t:1.2.3"):
        assert parse_config({"training": {"image": fine}}).training.image == fine


def test_taints_are_validated():
    got = problems_of({"gpu_node_groups": {"p5": group(taints=[
        {"key": "bad key", "value": "x"}, {"key": "team", "value": "a" * 64},
        {"key": "dedicated", "value": "a"}, {"key": "dedicated", "value": "b"}])}})
    assert got == [
        "gpu_node_groups.p5.taints[0].key = 'bad key': not a valid Kubernetes taint key. Fix: use "
        "[prefix/]name, the name up to 63 letters, digits, '-', '_', '.'.",
        f"gpu_node_groups.p5.taints[1].value = '{'a' * 64}': not a valid Kubernetes taint value. "
        "Fix: use up to 63 letters, digits, '-', '_' or '.'.",
        "gpu_node_groups.p5.taints[3] = 'dedicated:NoSchedule': the same key and effect twice. "
        "Fix: keep one."]


def test_group_sizes_have_an_absolute_cap_without_cost_guard():
    got = problems_of({"gpu_node_groups": {"p5": group(max_size=100000)}})
    assert got == ["gpu_node_groups.p5.max_size = 100000: at most 256 nodes per GPU group (the "
                   "kit's absolute cap, whatever cost_guard says). Fix: check for a typo; split a "
                   "larger fleet into several groups."]
    got = problems_of({"system_nodes": {"max_size": 500}})
    assert got[0].startswith("system_nodes.max_size = 500: at most 32 system nodes")


@pytest.mark.parametrize("itype, rule", [
    ("m7i xlarge", "not an EC2 instance type name (family.size)"),
    ("g5.xlarge", "an accelerated instance type costs GPU prices for CPU work"),
    ("m7g.xlarge", "an Arm (Graviton) type, but system nodes run the x86_64 AL2023 AMI"),
])
def test_system_instance_type_is_validated(itype, rule):
    assert problems_of({"system_nodes": {"instance_type": itype}})[0] \
        .startswith(f"system_nodes.instance_type = '{itype}': {rule}")


def test_system_instance_type_must_exist_in_ec2_read_offline():
    # `m5.nope` used to pass (only GPU types were refused) and fail at `cdk deploy`; the names
    # come from botocore's bundled EC2 service model, no AWS call
    import botocore

    from infra.catalog.ec2_instance_types import ec2_instance_types
    from infra.versions import DEFAULT_SYSTEM_INSTANCE_TYPE

    rule = f"not an EC2 instance type, by the EC2 service model of botocore {botocore.__version__}"
    assert problems_of({"system_nodes": {"instance_type": "m7i.xlarg"}}) == [
        f"system_nodes.instance_type = 'm7i.xlarg': {rule}. Fix: did you mean 'm7i.xlarge'? If "
        "m7i.xlarg is newer than this botocore, upgrade boto3 and botocore."]
    assert problems_of({"system_nodes": {"instance_type": "m5.nope"}}) == [
        f"system_nodes.instance_type = 'm5.nope': {rule}. Fix: use a size of m5: m5.large, "
        "m5.xlarge, m5.2xlarge, m5.4xlarge, m5.8xlarge, m5.12xlarge, m5.16xlarge, m5.24xlarge, "
        "m5.metal; if m5.nope is newer than this botocore, upgrade boto3 and botocore."]
    assert problems_of({"system_nodes": {"instance_type": "x9.nope"}}) == [
        f"system_nodes.instance_type = 'x9.nope': {rule}. Fix: check the spelling (e.g. "
        "m7i.xlarge); if x9.nope is newer than this botocore, upgrade boto3 and botocore."]
    # the default skips the look-up (it costs a quarter second): it must be a real type
    assert DEFAULT_SYSTEM_INSTANCE_TYPE in ec2_instance_types()
    assert {"m5.large", "c7i.2xlarge", "p5.48xlarge"} <= ec2_instance_types()
    assert parse_config({"system_nodes": {"instance_type": "c7i.2xlarge"}})


def test_pipeline_size_is_at_most_the_models_layers():
    # a pp that does not divide the layers runs the trainer's uneven split (the launcher passes
    # --decoder-first/last-pipeline-num-layers, rltrainer.contract.pipeline_split): 94 over 8 is
    # 11 + 6 x 12 + 11. Every stage holds at least one layer (Megatron-LM 37f9161
    # transformer_config.py:1462-1521), so mixtral-8x7b's 32 layers take at most pp 32.
    assert parse_config({"training": {"model": "qwen3-235b-a22b",
                                      "parallel": {"tp": 2, "pp": 8, "ep": 1},
                                      "hf_checkpoint": "/fsx/models/Qwen3-235B-A22B"},
                         "storage": {"shared_filesystem": {"capacity_gib": 7200}}}
                        ).training.parallel.pp == 8
    found = problems_of({"gpu_node_groups": {"p5": group(desired_size=8, max_size=8)},
                         "cost_guard": {"max_gpu_nodes": 8},
                         "training": {"nodes": 8, "model": "mixtral-8x7b",
                                      "parallel": {"tp": 1, "pp": 64, "ep": 1}},
                         "storage": {"shared_filesystem": {"capacity_gib": 2400}}})
    assert found == [
        "training.parallel.pp = 64: the trainer refuses it: every pipeline stage must hold at least "
        "one layer (Megatron), and training.model mixtral-8x7b has 32 layers, fewer than 64 stages. "
        "Fix: use a pp of at most 32.",
    ]


def test_rollout_engine_size_must_fit_the_models_attention_heads():
    # SGLang 0.5.16 qwen3_moe.py:458-468 asserts at model load that the engine's tensor-parallel
    # size divides the 32 heads of qwen3-30b-a3b; the trainer's rule (rltrainer.contract.heads)
    # runs here with the catalog's head counts, so the config fails before the GPUs start.
    found = problems_of({"gpu_node_groups": {"p5": group(desired_size=8, max_size=8)},
                         "cost_guard": {"max_gpu_nodes": 8},
                         "training": {"nodes": 8, "model": "qwen3-30b-a3b",
                                      "parallel": {"tp": 4, "pp": 1, "ep": 8},
                                      "rollout": {"gpus_per_engine": 64, "ep": 64}}})
    assert found == [
        "training.rollout.gpus_per_engine = 64: the trainer refuses it: SGLang splits the attention "
        "heads over the engine's tensor-parallel GPUs: tp must divide the 32 attention heads and its 4 "
        "KV heads must split evenly over them or be replicated evenly (tp divides 4, or 4 divides tp) "
        "(SGLang 0.5.16 qwen3_moe.py:458-468, mixtral.py:137-147, deepseek_v2.py:1603); training.model "
        "qwen3-30b-a3b has 32 attention heads and 4 KV heads, which an engine of 64 GPUs does not fit. "
        "Fix: use gpus_per_engine 1, 2, 4, 8, 16, 32 (and a divisor of it as ep).",
    ]


def test_an_interleaved_pipeline_is_refused_it_would_not_run():
    # infra/config/run_config.py hands the trainer tp, pp, cp, ep and etp only: a vpp was
    # accepted and silently dropped
    assert problems_of({"training": {"parallel": {"tp": 1, "pp": 2, "ep": 8, "vpp": 4}}}) == [
        "training.parallel.vpp = 4: the kit's launcher runs no interleaved pipeline: the trainer's "
        "run config has no virtual-pipeline size, so Megatron would run vpp 1 and this value "
        "would be ignored. Fix: remove vpp (or set it to null)."]
    assert parse_config({"training": {"parallel": {"pp": 2, "vpp": 1}}}).training.parallel.vpp == 1


def test_trainer_run_config_validation_runs_inside_kit_validation():
    got = problems_of({"training": {"grpo": {"lr": 0.0, "eps_clip": -1.0,
                                             "rollout_temperature": float("nan")}}})
    assert any(p.startswith("training.grpo.lr = 0.0: the trainer refuses it: ") for p in got)
    assert any(p.startswith("training.grpo.eps_clip = -1.0: the trainer refuses it: ")
               for p in got)
    assert any(p.startswith("training.grpo.rollout_temperature = nan: the trainer refuses it: "
                            "must be a finite number") for p in got)


def test_s3_inputs_outside_the_trainer_roles_scope_are_refused():
    got = problems_of({"training": {"prompt_data": "s3://someone-elses-bucket/data.jsonl"}})
    assert got == [
        "training.prompt_data = 's3://someone-elses-bucket/data.jsonl': the trainer's role may "
        "read only the data bucket's datasets/ and checkpoints/ prefixes; this URI is outside "
        "them, so the job would fail after the GPUs start. Fix: copy the data into the data "
        "bucket under datasets/ and give its key, e.g. datasets/data.jsonl."]


def test_no_admin_roles_is_a_loud_warning_and_roles_silence_it():
    from infra.config import config_warnings
    warning = config_warnings(parse_config({}))[-1]
    assert warning.startswith("admin_role_arns is empty: NO IAM principal you use will have "
                              "Kubernetes access to this cluster")
    assert "only CDK's kubectl handler, which applies the kit's charts at deploy time, has one" \
        in warning
    assert "Fix: list the IAM role ARN" in warning
    assert not any(w.startswith("admin_role_arns") for w in config_warnings(parse_config(
        {"admin_role_arns": ["arn:aws:iam::123456789012:role/Admin"]})))


def test_existing_placement_group_excludes_a_new_one():
    with pytest.raises(ConfigError) as err:
        parse_config({"gpu_node_groups": {"p5": {
            "instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
            "placement_group": True, "placement_group_name": "my pg"}}})
    assert [str(p) for p in err.value.problems] == [
        "gpu_node_groups.p5.placement_group = True: placement_group: true creates a new group, "
        "placement_group_name selects an existing one; a node group launches into one. Fix: "
        "remove placement_group (or placement_group_name).",
        "gpu_node_groups.p5.placement_group_name = 'my pg': not a placement group name (1-255 "
        "ASCII characters, no spaces). Fix: use the name shown by `aws ec2 "
        "describe-placement-groups`."]


def test_reserved_capacity_gets_no_new_placement_group_by_default():
    cfg = parse_config({"gpu_node_groups": {"p5": {
        "instance_type": "p5.48xlarge", "availability_zone": "us-east-1a",
        "capacity": {"type": "odcr", "reservation_id": "cr-0123456789abcdef0"}}}})
    assert cfg.gpu_node_groups["p5"].uses_placement_group is False
    assert parse_config({}).gpu_node_groups["p5"].uses_placement_group is True


def test_system_root_volume_needs_room_for_images_and_logs_not_the_trainer_image():
    """Before: at least 100 GiB, for a submitter that pulled the trainer image onto system nodes;
    it runs beside the Ray head now, so 40 GiB is enough and 20 still too little."""
    assert parse_config({"system_nodes": {"root_volume_gib": 40}}).system_nodes.root_volume_gib == 40
    with pytest.raises(ConfigError) as err:
        parse_config({"system_nodes": {"root_volume_gib": 20}})
    assert str(err.value.problems[0]) == (
        "system_nodes.root_volume_gib = 20: must be 30 to 16384 GiB: the AMI, the add-ons' images "
        "and the container logs share it. Fix: use e.g. 60.")


def test_public_endpoint_needs_listed_cidrs_and_public_only_mode_is_gone():
    with pytest.raises(ConfigError) as err:
        parse_config({"endpoint_access": {"mode": "public-and-private"}})
    assert [str(p) for p in err.value.problems] == [
        "endpoint_access.public_cidrs = []: a public endpoint needs the CIDRs allowed to reach it; "
        "the kit never opens it to everyone by default. Fix: list your office or CI egress "
        "ranges, e.g. [203.0.113.0/24], or use mode: private."]
    with pytest.raises(ConfigError) as err:
        parse_config({"endpoint_access": {"mode": "public", "public_cidrs": ["203.0.113.0/24"]}})
    assert err.value.problems[0].path == "endpoint_access.mode"
    cfg = parse_config({})
    assert cfg.endpoint_access.mode == "private" and cfg.endpoint_access.public_cidrs == []


def test_private_and_open_endpoints_are_warned_about():
    from infra.config import config_warnings
    admin = {"admin_role_arns": ["arn:aws:iam::123456789012:role/Admin"]}
    (private,) = config_warnings(parse_config(admin))
    assert private.startswith("endpoint_access.mode is private: the Kubernetes API is reachable "
                              "only from inside the VPC")
    (open_,) = config_warnings(parse_config({**admin, "endpoint_access": {
        "mode": "public-and-private", "public_cidrs": ["0.0.0.0/0"]}}))
    assert "open to the internet" in open_
    assert config_warnings(parse_config({**admin, "endpoint_access": {
        "mode": "public-and-private", "public_cidrs": ["203.0.113.0/24"]}})) == []


def test_a_huge_node_count_is_refused_quickly():
    import time

    start = time.monotonic()
    got = problems_of({"training": {"nodes": 10**9, "parallel": {"ep": 3}}})
    assert time.monotonic() - start < 2
    assert got[0].startswith("training.nodes = 1000000000: must be 1 to the group's max_size (2)")


def test_a_region_that_does_not_exist_is_refused_offline():
    # `region: us-fake-9` used to pass validation and render; only `cdk deploy` found out.
    cfg = {"region": "us-fake-9", "availability_zones": ["us-fake-9a", "us-fake-9b"],
           "gpu_node_groups": {"p5": {"instance_type": "p5.48xlarge",
                                      "availability_zone": "us-fake-9a"}}}
    import botocore

    assert problems_of(cfg) == [
        f"region = 'us-fake-9': no such AWS region, by the endpoint data of botocore "
        f"{botocore.__version__}. Fix: check the spelling (e.g. 'us-east-1'); for a region newer "
        "than this botocore, upgrade boto3 and botocore."]
    from infra.catalog.regions import regions

    assert {"us-east-1", "us-west-2", "eu-north-1"} <= regions("eks")


def _gb200(**overrides) -> dict:
    """A valid one-UltraServer config, from the example, with ``overrides`` merged in."""
    data = yaml.safe_load((REPO_ROOT / "examples" / "p6e-gb200-ultraserver.yaml").read_text())
    for key, value in overrides.items():
        node = data
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return data


def test_gb200_refuses_deepep_citing_its_nvlink_peer_limit():
    found = problems_of(_gb200(**{"training.expert_parallel.backend": "deepep-nvshmem"}))
    assert found == [
        "training.expert_parallel.backend = 'deepep-nvshmem': DeepEP at the image's pinned commit "
        "handles at most 8 NVLink peers, and p6e-gb200.36xlarge's NVLink domain holds 72 GPUs "
        "(DeepEP 567632d csrc/kernels/configs.cuh:3 NUM_MAX_NVL_PEERS 8; DeepEP issue #392: "
        "normal mode does not support GB200 yet). Fix: use backend: nccl (NCCL all-to-all, over "
        "multi-node NVLink inside the UltraServer)."]


def test_gb200_run_must_fit_one_nvlink_domain_of_its_ultraserver_type():
    found = problems_of(_gb200(**{"gpu_node_groups.gb200.capacity.ultraserver_type":
                                  "u-p6e-gb200x36"}))
    assert found == [
        "training.nodes = 18: a run on p6e-gb200.36xlarge stays inside one NVLink domain (9 "
        "instances of u-p6e-gb200x36): its workers claim one ComputeDomain and require the same "
        "nvidia.com/gpu.clique; a run across domains is not supported yet. Fix: use "
        "training.nodes <= 9."]


def test_gb200_needs_the_ultraserver_type_and_a_regional_fs_az():
    found = problems_of(_gb200(**{"gpu_node_groups.gb200.capacity.ultraserver_type": None,
                                  "storage.shared_filesystem.availability_zone": None}))
    assert found == [
        "storage.shared_filesystem.availability_zone = None: the training group's AZ "
        "us-east-1-dfw-2a is a Local Zone, and the kit places the file system only in one of "
        "availability_zones. Fix: set it to the Local Zone's parent AZ (ParentZoneName in `aws "
        "ec2 describe-availability-zones --all-availability-zones`).",
        "gpu_node_groups.gb200.capacity.ultraserver_type = None: p6e-gb200.36xlarge Capacity "
        "Blocks are UltraServers; the kit sizes the NVLink domain a run must fit in from the "
        "UltraServer type. Fix: set it to the block's type: one of u-p6e-gb200x36, "
        "u-p6e-gb200x72."]


def test_local_zone_names_belong_to_the_region():
    found = problems_of(_gb200(local_zones=["us-west-2-lax-1a"]))
    assert found[0] == (
        "local_zones[0] = 'us-west-2-lax-1a': not a Local Zone name of region us-east-1. Fix: "
        "use the zone your reservation reports, of the form us-east-1-xyz-1a.")


def test_a_model_outside_the_catalog_is_a_config_problem():
    # `model: qwen3-30b` used to validate and synthesize, then `rlkit check` and render failed
    # with "This is a bug in rlkit" (the fabric benchmark needs the catalog's MoE shape)
    known = "qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3, mixtral-8x7b, mixtral-8x22b, kimi-k2"
    assert problems_of({"training": {"model": "qwen3-30b"}}) == [
        "training.model = 'qwen3-30b': not a model in the catalog (infra/catalog/models.py "
        f"MODEL_CATALOG). Fix: did you mean 'qwen3-30b-a3b'? The catalog has {known}."]
    assert problems_of({"training": {"model": "llama"}}) == [
        "training.model = 'llama': not a model in the catalog (infra/catalog/models.py "
        f"MODEL_CATALOG). Fix: use one of {known}, or add the model's config.json values to "
        "MODEL_CATALOG in infra/catalog/models.py."]
