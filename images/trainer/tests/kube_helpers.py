"""A stand-in for the Kubernetes API server the launcher talks to (rltrainer.no_retry's requests):
an HTTP server on localhost with the test's request handler, and a service-account directory
(token, namespace) like the one a pod has mounted."""

from __future__ import annotations

import contextlib
import http.server
import threading
from pathlib import Path
from typing import Iterator


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that keeps the test output free of access-log lines."""

    def log_message(self, *args):  # noqa: ANN002 - http.server's signature
        pass


@contextlib.contextmanager
def stand_in_api(tmp_path: Path, handler: type[http.server.BaseHTTPRequestHandler]
                 ) -> Iterator[tuple[str, Path]]:
    """Serve ``handler`` on a free local port; yields the API's URL and the service-account dir."""
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("tok\n")
    (sa / "namespace").write_text("rl-training")
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", sa
    finally:
        server.shutdown()
