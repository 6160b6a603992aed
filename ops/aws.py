"""boto3 plumbing shared by the operator commands: one client bundle, readable errors.

Commands get an ``AwsClients`` bundle (built by ``args.clients_factory``, whose default is
``AwsClients``) and pass its clients into plain functions (preflight checks, teardown steps, the
image build), so tests hand in a bundle of moto-backed or Stubber-wrapped clients instead.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
)

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

# No call may hang the CLI: botocore's defaults are 60 s for connect and read, retried up to the
# retry budget. A short connect timeout fails fast on an unreachable endpoint; the read timeout
# stays generous for the slowest calls the CLI makes (paginated listings). Standard retry mode
# backs off on throttling and retries timeouts; the CLI makes few calls, so a handful of attempts
# is plenty [boto3 guide, "Retries"; botocore.config.Config].
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
MAX_ATTEMPTS = 4


# boto3 and botocore.config are imported when a command first needs AWS, not when the CLI starts:
# together they are about 0.25 s of every `rlkit` process, and plan, validate, help and completion
# never call AWS (render only when it reads the stack outputs from CloudFormation).
@functools.cache
def client_config() -> Config:
    """The timeouts and retries of every client the kit makes."""
    from botocore.config import Config

    return Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                  retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"})


CREDENTIALS_FIX = (
    "configure AWS credentials (aws configure, aws sso login, or AWS_PROFILE) for the account "
    "you deploy to, then run the command again"
)


def session(region: str, profile: str | None = None) -> boto3.session.Session:
    """A session for ``region``; raises ProfileNotFound (a BotoCoreError) for an unknown profile."""
    import boto3

    return boto3.session.Session(region_name=region, profile_name=profile)


def client(sess: boto3.session.Session, service: str) -> Any:
    """A client whose every call has connect/read timeouts and bounded retries."""
    return sess.client(service, config=client_config())


class AwsClients:
    """The boto3 clients of one region and profile, each created on first use.

    ``AwsClients(region, profile)`` makes nothing until a client is read, so a command that ends
    early (a dry run, outputs from a file) never needs credentials; every client it does make has
    the kit's timeouts and retries (``client``). Pass clients by keyword to use those instead
    (tests: ``AwsClients(sts=stubbed_sts)``); a client that was neither passed nor can be made
    (no region) raises AttributeError naming it.
    """

    # attribute -> boto3 service name
    SERVICES = {
        "sts": "sts", "ec2": "ec2", "quotas": "service-quotas",
        "cloudformation": "cloudformation", "s3": "s3", "ecr": "ecr",
        "tagging": "resourcegroupstaggingapi", "codebuild": "codebuild", "logs": "logs",
        "cloudwatch": "cloudwatch", "kms": "kms", "eks": "eks", "fsx": "fsx",
    }

    def __init__(self, region: str | None = None, profile: str | None = None,
                 **clients: Any) -> None:
        unknown = sorted(set(clients) - set(self.SERVICES))
        if unknown:
            raise TypeError(f"AwsClients: unknown client(s) {', '.join(unknown)}; known: "
                            f"{', '.join(self.SERVICES)}")
        self.region = region
        self.profile = profile
        self._session: boto3.session.Session | None = None
        self._clients: dict[str, Any] = dict(clients)

    @classmethod
    def opened(cls, region: str, profile: str | None = None) -> "AwsClients":
        """A bundle whose session exists already: a mistyped --profile fails here, at once."""
        bundle = cls(region, profile)
        bundle.session()
        return bundle

    def session(self) -> boto3.session.Session:
        if self._session is None:
            self._session = session(self.region, self.profile)
        return self._session

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self.SERVICES:
            raise AttributeError(name)
        if name not in self._clients:
            if self.region is None:
                raise AttributeError(f"AwsClients: no {name} client was given and no region to "
                                     "make one in")
            # ``client`` is looked up at call time, so a test may replace ``ops.aws.client``.
            self._clients[name] = client(self.session(), self.SERVICES[name])
        return self._clients[name]


def tag_dict(tags: Any) -> dict[str, str]:
    """An AWS tag list (``[{"Key": ..., "Value": ...}]``, as the APIs return it and CloudFormation
    templates write it) as a mapping; None or no list: {}. An entry without a key is no tag."""
    return {t["Key"]: t.get("Value", "") for t in tags or [] if isinstance(t, dict) and "Key" in t}


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
    if isinstance(err, ProfileNotFound):
        return (f"{err} (check the spelling of --profile; `aws configure list-profiles` lists "
                "them)")
    if isinstance(err, (ConnectTimeoutError, ReadTimeoutError, EndpointConnectionError)):
        return (f"no answer from AWS ({err}) after {MAX_ATTEMPTS} attempt(s) with a "
                f"{CONNECT_TIMEOUT_S} s connect and {READ_TIMEOUT_S} s read timeout: check the "
                "network path to the AWS endpoint (proxy, VPN, firewall) and the region")
    if isinstance(err, BotoCoreError):
        return str(err)
    return f"{type(err).__name__}: {err}"


AWS_ERRORS = (ClientError, BotoCoreError)
