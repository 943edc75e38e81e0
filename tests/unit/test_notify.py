"""sd_notify: real datagram sockets (path and abstract), READY once, keep-alive that
stops when the loop stalls, STOPPING on stop, and the ``run`` command end to end."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon, TickSummary
from rogue_watchdog.daemon.notify import Notifier, notify_address, status_line, watchdog_interval_s
from tests.conftest import REPO, Spawned
from tests.unit.test_status import quiet_proc_root


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    """A bound datagram socket standing in for systemd's notify socket."""
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    try:
        yield path, sock
    finally:
        sock.close()


def recv(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def drain(sock: socket.socket, wait_s: float) -> list[str]:
    """Every message arriving within the next ``wait_s`` seconds."""
    out: list[str] = []
    deadline = time.monotonic() + wait_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                out.append(sock.recv(4096).decode())
            except TimeoutError:
                break
    finally:
        sock.settimeout(5)
    return out


def daemon(tmp_path: Path) -> Daemon:
    cfg = parse_config(
        f"nvml: {{enabled: false}}\npaths: {{proc_root: '{quiet_proc_root(tmp_path)}'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n",
        "t.yaml",
    )
    return Daemon(cfg, None)


def test_addresses_and_watchdog_env() -> None:
    assert notify_address("/run/systemd/notify") == "/run/systemd/notify"
    assert notify_address("@/org/freedesktop/systemd1/notify") == (
        b"\0/org/freedesktop/systemd1/notify"
    )
    for bad in ("", "@", "vsock:2:1234", "relative/path"):
        with pytest.raises(ValueError):
            notify_address(bad)
    assert watchdog_interval_s({"WATCHDOG_USEC": "4000000"}, 7) == 2.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "7"}, 7) == 2.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "8"}, 7) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}, 7) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "x"}, 7) is None
    assert watchdog_interval_s({}, 7) is None


def test_from_env_unsets_and_disabled_is_silent() -> None:
    env = {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    n = Notifier.from_env(env)
    assert (n.address, n.watchdog_s, env) == (b"\0x", 1.0, {})
    off = Notifier.from_env({})
    assert (off.enabled, off.watchdog_s, off.send("READY=1")) == (False, None, False)


def test_ready_once_then_status_and_pings(
    tmp_path: Path, receiver: tuple[str, socket.socket]
) -> None:
    path, sock = receiver
    d = daemon(tmp_path)
    n = Notifier(path, watchdog_s=30.0)
    hook = n.hook(d)
    s1 = d.tick(time.time())
    hook(s1)
    first = recv(sock)
    assert first == ["READY=1", f"STATUS={status_line(s1, d)}", "WATCHDOG=1"]
    assert first[1] == (
        f"STATUS=0 training job(s), 0 rogue or excess; 0 open finding(s); scan {s1.duration_s:.2f}s"
    )
    hook(d.tick(time.time()))
    assert recv(sock)[0].startswith("STATUS=")  # no second READY=1
    d.degraded["nvml"] = "boom"
    hook(TickSummary(time.time(), 0.5, None, None))
    assert recv(sock) == [
        "STATUS=scan failed; 0 open finding(s); scan 0.50s; degraded: nvml",
        "WATCHDOG=1",
    ]
    n.stop()
    assert recv(sock) == ["STOPPING=1"]


def test_abstract_socket(tmp_path: Path) -> None:
    name = f"rogue-watchdog-test-{os.getpid()}-{tmp_path.name}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5)
    try:
        n = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert n.send("READY=1", "STATUS=hello")
        assert recv(sock) == ["READY=1", "STATUS=hello"]
    finally:
        sock.close()


def test_keepalive_pings_until_the_loop_stalls(receiver: tuple[str, socket.socket]) -> None:
    path, sock = receiver
    now = [1000.0]
    n = Notifier(path, watchdog_s=0.05, stall_after_s=10.0, clock=lambda: now[0])
    n.interval_s = 5.0
    n.start()
    try:
        assert recv(sock) == ["WATCHDOG=1"]  # a long first tick is covered
        now[0] += 14.0  # 14 s since progress <= 5 s interval + 10 s stall: still pinging
        drain(sock, 0.1)
        assert recv(sock) == ["WATCHDOG=1"]
        now[0] += 2.0  # 16 s: the tick is stalled, systemd must be allowed to act
        drain(sock, 0.1)  # pings already in flight
        assert drain(sock, 0.4) == []
        n.on_tick(TickSummary(now[0], 16.0, None, None))  # the loop came back
        assert recv(sock)[0] == "READY=1"
        assert recv(sock) == ["WATCHDOG=1"]
    finally:
        n.stop()
    assert "STOPPING=1" in drain(sock, 0.2)[-1]


def test_send_failure_does_not_raise(tmp_path: Path) -> None:
    n = Notifier(str(tmp_path / "absent"))
    assert n.send("READY=1") is False
    assert n.send("READY=1") is False
    n.on_tick(TickSummary(0.0, 0.0, None, None))
    assert n.ready_sent is False  # READY=1 is retried on the next tick


def test_run_notifies_ready_watchdog_stopping(
    tmp_path: Path, receiver: tuple[str, socket.socket], spawned: Spawned
) -> None:
    path, sock = receiver
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"nvml: {{enabled: false}}\npaths: {{proc_root: '{quiet_proc_root(tmp_path)}'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/s.sock', interval_s: 60}}\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
    env.pop("WATCHDOG_PID", None)
    log = open(tmp_path / "out.log", "wb")  # noqa: SIM115
    p = spawned.start(
        [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(cfg)],
        env=env, stdout=log, stderr=log,
    )  # fmt: skip
    log.close()
    first = recv(sock)
    assert first[0] == "READY=1" and first[1].startswith("STATUS=0 training job(s)")
    # 60 s ticks, 0.2 s pings: only the keep-alive thread sends these.
    assert drain(sock, 1.0)[:3] == ["WATCHDOG=1"] * 3
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=20) == 0
    assert "STOPPING=1" in drain(sock, 0.3)
    assert not (tmp_path / "s.sock").exists()
