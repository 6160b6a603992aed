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


def describe(exc: BaseException) -> str:
    """``Type: message``, and for a transfer's RetriesExceededError (whose message is only "Max
    Retries Exceeded") the error of its last try, which says what actually went wrong."""
    text = f"{type(exc).__name__}: {exc}"
    last = getattr(exc, "last_exception", None)
    return f"{text} (last try: {type(last).__name__}: {last})" if isinstance(last, BaseException) else text


def is_retryable(exc: BaseException) -> bool:
    """True for transient S3/network failures (boto3's transfer manager wraps them)."""
    from boto3.exceptions import RetriesExceededError  # imported here so the module loads without boto3
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        IncompleteReadError,
        ReadTimeoutError,
        ResponseStreamingError,
    )
    from s3transfer.exceptions import RetriesExceededError as TransferRetriesExceededError

    for e in _error_chain(exc):
        if isinstance(e, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ConnectTimeoutError,
                          # a response body cut short while read (botocore StreamingBody.read): a
                          # dropped connection or fewer bytes than Content-Length
                          ResponseStreamingError, IncompleteReadError)):
            return True
        if isinstance(e, (RetriesExceededError, TransferRetriesExceededError)):
            # s3transfer retries a GET only on read timeouts, dropped connections and cut-short
            # bodies (s3transfer 0.19.3 download.py, S3_RETRYABLE_DOWNLOAD_ERRORS in utils.py) and
            # raises this after num_download_attempts; boto3 re-raises it as its own
            # RetriesExceededError (boto3 1.44.8 s3/transfer.py download_file). Transient by
            # s3transfer's own reading, so one flaky part must not end a restore.
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
                    f"rltrainer: {what} failed ({describe(exc)}); "
                    f"retry {attempt}/{self.max_attempts - 1} in {wait:g}s",
                    file=self.log or sys.stderr,
                    flush=True,
                )
                self.sleep(wait)
                attempt += 1
