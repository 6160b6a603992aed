"""docs/operations.md's IAM table names every AWS call of the commands whose rows it checks.

A role built from the table is what a least-privilege CI pipeline runs teardown with: a missing
action made teardown stop while planning (nothing deleted, the GPU nodes still running) or after
the deletes. The calls are read from the commands' own modules (every ``<client>.<method>(`` and
``get_paginator("<method>")``), mapped to IAM actions through botocore's operation names, so a
new call without its row fails here.
"""

from __future__ import annotations

import ast
import functools
import re

import boto3
import pytest

from tests.support import REPO_ROOT
from tests.support.cdk import EXAMPLES

# How the modules name their clients -> the client's service (IAM prefix).
CLIENTS = {"cfn": "cloudformation", "cloudformation": "cloudformation", "s3": "s3", "ecr": "ecr",
           "tagging": "resourcegroupstaggingapi", "sts": "sts", "kms": "kms", "logs": "logs",
           "ec2": "ec2", "quotas": "service-quotas", "fsx": "fsx", "eks": "eks"}
IAM_PREFIX = {"resourcegroupstaggingapi": "tag", "service-quotas": "servicequotas"}
# Operations whose IAM action has another name [Service Authorization Reference, Amazon S3:
# ListObjectVersions needs s3:ListBucketVersions, DeleteObjects s3:DeleteObject per key].
IAM_ACTION = {"s3:ListObjectVersions": "s3:ListBucketVersions",
              "s3:DeleteObjects": "s3:DeleteObject"}
# A row of the table -> the modules whose calls it must cover.
ROWS = {
    "teardown": ["ops/teardown.py", "ops/teardown_cmd.py", "ops/teardown_leftovers.py",
                 "ops/teardown_network.py"],
    "preflight": ["ops/preflight.py", "ops/preflight_cmd.py", "ops/preflight_replace.py",
                  "ops/preflight_services.py", "ops/ultraserver_preflight.py",
                  "ops/reservations.py", "ops/preflight_vpc.py", "ops/preflight_reservation.py",
                  "ops/preflight_nodegroups.py", "ops/deployed.py", "ops/preflight_reads.py"],
    "gate / launch (image digest)": ["ops/image_digest.py"],
}


@functools.lru_cache(maxsize=None)
def _operations(service: str) -> dict[str, str]:
    """boto3 method name -> API operation name, from botocore's service model."""
    return boto3.client(service, region_name="us-east-1").meta.method_to_api_mapping


def calls(path: str) -> set[str]:
    """IAM actions of the boto3 calls in one module."""
    found = set()
    for node in ast.walk(ast.parse((REPO_ROOT / path).read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        owner = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
        if owner not in CLIENTS:
            continue
        method = node.func.attr
        if method == "get_paginator":
            method = node.args[0].value
        operation = _operations(CLIENTS[owner]).get(method)
        assert operation, f"{path}: {owner}.{method} is not a {CLIENTS[owner]} operation"
        action = f"{IAM_PREFIX.get(CLIENTS[owner], CLIENTS[owner])}:{operation}"
        found.add(IAM_ACTION.get(action, action))
    return found


def row(command: str) -> str:
    table = (REPO_ROOT / "docs/operations.md").read_text().split("## IAM permissions", 1)[1]
    (line,) = [ln for ln in table.splitlines() if ln.startswith(f"| {command} |")]
    return line


def listed(text: str) -> set[str]:
    """The actions a row names: `svc:Action`, and a bare `Action` after one of svc's."""
    found, service = set(), None
    for token in re.findall(r"`([^`]+)`", text):
        if ":" in token:
            service = token.split(":", 1)[0]
            found.add(token)
        elif service and re.fullmatch(r"[A-Z][A-Za-z]+", token):
            found.add(f"{service}:{token}")
    return found


@pytest.mark.parametrize("command", sorted(ROWS))
def test_the_row_names_every_call_of_the_command(command):
    needed = set().union(*(calls(m) for m in ROWS[command]))
    assert needed  # the scan found the calls
    missing = sorted(needed - listed(row(command)))
    assert not missing, f"docs/operations.md IAM row '{command}' lacks {missing}"


def test_teardown_names_the_delete_permissions_of_every_service_in_the_stacks(synth):
    services = {r["Type"].split("::")[1] for e in EXAMPLES for t in synth(e).templates.values()
                for r in t["Resources"].values() if r["Type"].startswith("AWS::")}
    text = row("teardown").split("delete permissions", 1)[1]
    assert not [s for s in sorted(services) if not re.search(rf"\b{s}\b", text)]
