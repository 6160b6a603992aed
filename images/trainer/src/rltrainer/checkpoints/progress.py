"""Progress lines for long transfers."""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


class Progress:
    """Thread-safe bytes-done/total reporter (boto3 calls back from several threads).

    Prints at most once per ``min_interval_s`` and always on completion.
    """

    def __init__(self, label: str, total: int, stream: TextIO | None = None, min_interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._last = -float("inf")
        self._lock = threading.Lock()
        self._finished = False

    def __call__(self, nbytes: int) -> None:
        with self._lock:
            self.done += nbytes
            now = self.clock()
            if now - self._last >= self.min_interval_s:
                self._last = now
                self._print()

    def rewind(self, nbytes: int) -> None:
        """Undo the bytes of an attempt that failed and will be retried."""
        with self._lock:
            self.done = max(0, self.done - nbytes)

    def finish(self) -> None:
        with self._lock:
            if not self._finished:
                self._finished = True
                self._print()

    def _print(self) -> None:
        pct = 100.0 * self.done / self.total if self.total else 100.0
        print(f"rltrainer: {self.label}: {human_bytes(self.done)} / {human_bytes(self.total)} ({pct:.0f}%)",
              file=self.stream, flush=True)
