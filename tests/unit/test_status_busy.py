"""The status socket under a crowd: idle clients fill every slot, a burst of 200 calls
arrives at once. ``status`` waits and answers; nobody sees a reset or a refusal."""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.daemon.ipc import BUSY_REPLY, MAX_CLIENTS, StatusServer, query_status
from tests.unit.test_status import DOC


@pytest.fixture
def short_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="rwb", dir="/tmp"))  # sun_path is 108 bytes
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_nine_idle_connections_get_a_busy_answer_not_a_reset_and_status_waits(
    short_dir: Path,
) -> None:
    path = str(short_dir / "s.sock")
    s = StatusServer(path, lambda: dict(DOC), client_timeout_s=1.0)
    s.start()
    idle = []
    try:
        for _ in range(MAX_CLIENTS):  # every slot held by a client that says nothing
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(path)
            idle.append(c)
        ninth = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ninth.settimeout(5)
        ninth.connect(path)
        with contextlib.suppress(BrokenPipeError):  # answered and closed before we sent
            ninth.sendall(b'{"request": "status"}\n')
        reply = b""
        while chunk := ninth.recv(4096):  # no ConnectionResetError: a clean end
            reply += chunk
        ninth.close()
        assert reply == BUSY_REPLY == b'{"error": "busy: too many status clients at once"}\n'
        # `status` itself asks again until a slot frees (the idle ones time out at 1 s).
        assert query_status(path, timeout_s=10)["host"] == "gpu7"
    finally:
        for c in idle:
            c.close()
        s.stop()


def test_a_burst_of_200_status_calls_all_get_the_document(short_dir: Path) -> None:
    path = str(short_dir / "s.sock")
    s = StatusServer(path, lambda: dict(DOC), client_timeout_s=2.0)
    s.start()
    results: list[Any] = []
    lock = threading.Lock()
    start = threading.Event()

    def call() -> None:
        start.wait()
        try:
            got: Any = query_status(path, timeout_s=30)["host"]
        except Exception as exc:
            got = f"{type(exc).__name__}: {exc}"
        with lock:
            results.append(got)

    threads = [threading.Thread(target=call) for _ in range(200)]
    try:
        for t in threads:
            t.start()
        start.set()
        for t in threads:
            t.join(60)
    finally:
        s.stop()
    assert results == ["gpu7"] * 200
