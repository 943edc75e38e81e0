"""A small HTTP receiver on 127.0.0.1 for webhook tests: records every request and can
be told to answer 2xx, fail with a status (500, 429...), hang, or be down (not
listening at all: connection refused).

Never binds anything but 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Mode = Literal["ok", "fail", "hang", "down"]


@dataclass(frozen=True)
class Request:
    """One request the receiver got: hung ones included (``status`` None), and ones
    whose sender went away before its body was whole (``complete`` False, ``status``
    None: never answered, never a delivery)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int | None
    complete: bool = True

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """Threaded HTTP server on ``127.0.0.1:<ephemeral>``.

    Args:
        ok_status: Status answered in mode ``ok``.
        hang_s: Longest a request hangs in mode ``hang`` (released earlier by a mode
            change or :meth:`close`); the connection is then closed without an answer.

    Attributes:
        port: The bound port (kept across down/up).
        requests: Every request received, in arrival order.
    """

    def __init__(self, ok_status: int = 200, hang_s: float = 30.0) -> None:
        self.ok_status = ok_status
        self.fail_status = 500
        self.fail_headers: dict[str, str] = {}
        self.fail_body = b"error"
        # In mode "ok": answer fail_status to the requests whose body this returns True for.
        self.fail_if: Callable[[bytes], bool] | None = None
        self.hang_s = hang_s
        self.mode: Mode = "ok"
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._listen()

    def _listen(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if len(body) < length:
                    # The sender went away mid-request (a daemon killed -9 while it
                    # sent): a real receiver never sees this as a delivery, so it is
                    # kept for the record but neither answered nor counted as sent.
                    with receiver.lock:
                        receiver.requests.append(
                            Request(
                                "POST",
                                self.path,
                                dict(self.headers.items()),
                                body,
                                None,
                                complete=False,
                            )
                        )
                    self.close_connection = True
                    return
                mode = receiver.mode
                status: int | None
                if mode == "hang":
                    status = None
                elif mode == "fail" or (receiver.fail_if is not None and receiver.fail_if(body)):
                    status = receiver.fail_status
                    mode = "fail"
                else:
                    status = receiver.ok_status
                with receiver.lock:
                    receiver.requests.append(
                        Request("POST", self.path, dict(self.headers.items()), body, status)
                    )
                if status is None:
                    receiver._release.wait(receiver.hang_s)
                    self.close_connection = True
                    return
                self.send_response(status)
                if mode == "fail":
                    for k, v in receiver.fail_headers.items():
                        self.send_header(k, v)
                text = b"ok" if mode == "ok" else receiver.fail_body
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str = "/hook") -> str:
        """``http://127.0.0.1:PORT`` + ``path``."""
        return f"http://127.0.0.1:{self.port}{path}"

    def set_mode(self, mode: Mode) -> None:
        """Switch behaviour; ``down`` closes the listening socket, leaving ``down``
        listens again on the same port."""
        if mode != "hang":
            self._release.set()
        else:
            self._release.clear()
        if mode == "down" and self._server is not None:
            self._stop_server()
        elif mode != "down" and self._server is None:
            self._listen()
        self.mode = mode

    def _stop_server(self) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        self._server = None
        if self._thread is not None:
            self._thread.join(5)

    def bodies(self, path: str | None = None, answered: bool = True) -> list[Any]:
        """JSON bodies received (on ``path`` if given), only 2xx-answered by default."""
        with self.lock:
            reqs = list(self.requests)
        return [
            r.json
            for r in reqs
            if (path is None or r.path == path)
            and (not answered or (r.status is not None and 200 <= r.status < 300))
        ]

    def close(self) -> None:
        """Release hung requests and stop listening."""
        self._release.set()
        if self._server is not None:
            self._stop_server()
