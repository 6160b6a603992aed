"""Helpers for tests that read synthesized templates: the example configs and resource lookups."""

from __future__ import annotations

import json

from tests.support import REPO_ROOT

EXAMPLES = sorted(p.stem for p in (REPO_ROOT / "examples").glob("*.yaml"))



def _creates_its_vpc(example: str) -> bool:
    from infra.config import load_config

    return load_config(REPO_ROOT / "examples" / f"{example}.yaml").vpc.existing is None


# The examples whose network stack creates the VPC (an existing VPC's routes and NAT gateways are
# its owner's).
NEW_VPC_EXAMPLES = [e for e in EXAMPLES if _creates_its_vpc(e)]

# A machine with no AWS credentials or config anywhere: synth must not need them.
NO_AWS_ENV = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_PROFILE": "",
              "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
              "AWS_EC2_METADATA_DISABLED": "true"}


def resources(template: dict, type_: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def only(template: dict, type_: str) -> dict:
    found = resources(template, type_)
    assert len(found) == 1, f"expected one {type_}, found {len(found)}"
    return next(iter(found.values()))


def dashboard_widgets(template: dict) -> list[dict]:
    """The widgets of the template's CloudWatch dashboard, its body parsed."""
    body = next(iter(resources(template, "AWS::CloudWatch::Dashboard").values()))["Properties"][
        "DashboardBody"]
    # Fn::Join of literal strings and {"Ref": "AWS::Region"}: put a region in for the check.
    text = "".join(p if isinstance(p, str) else "us-east-1" for p in body["Fn::Join"][1])
    return json.loads(text)["widgets"]
