"""A stand-in Kubernetes API server: recorded, real-shaped JSON replies on 127.0.0.1.

No Kubernetes API server can run on the test machines. The official client talks to this
one exactly as to a real server (plain HTTP, no auth); each route answers a recorded
reply from tests/fixtures/kubernetes (by file stem) or literal bytes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIX = Path(__file__).resolve().parent / "fixtures" / "kubernetes"


@dataclass
class FakeApiServer:
    """Answers GETs from recorded JSON; records every request path.

    Attributes:
        routes: Request path (with query) → (HTTP status, fixture stem or body bytes).
        requests: Paths asked, in order.
        port: The port it listens on (127.0.0.1).
    """

    routes: dict[str, tuple[int, str | bytes]]
    requests: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        """Base URL for ``kubernetes.client.Configuration.host``."""
        return f"http://127.0.0.1:{self.port}"


def _handler(server: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server.requests.append(self.path)
            status, body = server.routes.get(self.path, (404, "status-forbidden-replicaset"))
            data = body if isinstance(body, bytes) else (FIX / f"{body}.json").read_bytes()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def serve(routes: dict[str, tuple[int, str | bytes]]) -> Iterator[FakeApiServer]:
    """Run a :class:`FakeApiServer` on a free port for the ``with`` block."""
    fake = FakeApiServer(dict(routes))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
