"""Retrying S3 calls that failed on throttling or server-side trouble, and only those."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TextIO


# S3 error codes worth retrying: throttling and server-side trouble. Anything else
# (AccessDenied, NoSuchBucket, NoSuchKey, ...) fails at once with the real message.
RETRYABLE_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "ConditionalRequestConflict",  # 409: a concurrent conditional write on the same key; retry decides
        "500",
        "502",
        "503",
        "504",
    }
)


def _error_chain(exc: BaseException) -> Iterable[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]


def is_retryable(exc: BaseException) -> bool:
    """True for transient S3/network failures (boto3's transfer manager wraps them)."""
    from botocore.exceptions import (  # imported here so the module loads without botocore
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    for e in _error_chain(exc):
        if isinstance(e, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ConnectTimeoutError)):
            return True
        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0
            return str(err.get("Code", "")) in RETRYABLE_CODES or int(status) >= 500
    return False


@dataclass
class RetryPolicy:
    """Exponential backoff: base, 2 x base, 4 x base, ... capped at ``max_delay_s``.

    ``sleep`` is injectable so tests run without waiting.
    """

    max_attempts: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    log: TextIO | None = None

    def delay(self, attempt: int) -> float:
        return min(self.max_delay_s, self.base_delay_s * (2 ** (attempt - 1)))

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        attempt = 1
        while True:
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - classified below
                if not is_retryable(exc) or attempt >= self.max_attempts:
                    raise
                wait = self.delay(attempt)
                print(
                    f"rltrainer: {what} failed ({exc.__class__.__name__}: {exc}); "
                    f"retry {attempt}/{self.max_attempts - 1} in {wait:g}s",
                    file=self.log or sys.stderr,
                    flush=True,
                )
                self.sleep(wait)
                attempt += 1
