"""boto3 plumbing shared by the operator commands: one session, clients, readable errors.

Commands build clients here and pass them into plain functions (preflight checks, teardown
steps), so tests hand those functions moto-backed or Stubber-wrapped clients instead.
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

# Standard retry mode backs off on throttling; the CLI makes few calls, so a handful of attempts
# is plenty [boto3 guide, "Retries"].
_CLIENT_CONFIG = Config(retries={"max_attempts": 5, "mode": "standard"})

CREDENTIALS_FIX = (
    "configure AWS credentials (aws configure, aws sso login, or AWS_PROFILE) for the account "
    "you deploy to, then run the command again"
)


def session(region: str, profile: str | None = None) -> boto3.session.Session:
    return boto3.session.Session(region_name=region, profile_name=profile)


def client(sess: boto3.session.Session, service: str) -> Any:
    return sess.client(service, config=_CLIENT_CONFIG)


def error_code(err: BaseException) -> str:
    if isinstance(err, ClientError):
        return str(err.response.get("Error", {}).get("Code", ""))
    return type(err).__name__


def describe_error(err: BaseException) -> str:
    """One line naming what AWS said, without a traceback."""
    if isinstance(err, ClientError):
        e = err.response.get("Error", {})
        op = getattr(err, "operation_name", "call")
        return f"{op} failed: {e.get('Code', 'Error')}: {e.get('Message', str(err))}"
    if isinstance(err, NoCredentialsError):
        return "no AWS credentials found"
    if isinstance(err, BotoCoreError):
        return str(err)
    return f"{type(err).__name__}: {err}"


AWS_ERRORS = (ClientError, BotoCoreError)
