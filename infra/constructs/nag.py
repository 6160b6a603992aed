"""Acknowledging cdk-nag findings: always one rule, one construct, one written reason."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    """Record that ``rule_id`` is accepted on ``scope`` (and its children) and why."""
    Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))
