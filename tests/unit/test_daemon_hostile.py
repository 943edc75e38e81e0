"""Hostile inputs to the daemon's own parts (tester's repros): the status socket, the
alert secrets and sinks, the state dir, the configuration, and ``status``/``run`` CLIs."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from rogue_watchdog.config import ConfigError, load_config
from rogue_watchdog.config.alerts import SinkSettings
from rogue_watchdog.daemon.alerts.alert import Outgoing
from rogue_watchdog.daemon.alerts.base import SinkContext
from rogue_watchdog.daemon.alerts.secrets import SecretError, read_url, redact
from rogue_watchdog.daemon.alerts.sinks import LogSink, SendError, slack, webhook
from rogue_watchdog.daemon.ipc import StatusError, StatusServer, query_status
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.status import build_status, exit_code
from rogue_watchdog.model import FINDING_KINDS, ORIGIN_KINDS
from rogue_watchdog.state import Delivery, StateDB, StateError, lock_state_dir
from tests.conftest import REPO, run_cli
from tests.unit.test_status import DOC, config_file

SECRET_URL = "https://hooks.slack.com/services/T000/B000/XXXXSECRETXXXX"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short temp dir: unix socket paths must stay under 108 bytes."""
    d = Path(tempfile.mkdtemp(prefix="rwh", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def raw_request(path: str, data: bytes, timeout_s: float = 10.0) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(path)
        s.sendall(data)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    result: dict[str, Any] = json.loads(reply)
    return result


def delivery() -> Outgoing:
    payload = {"kind": "rogue-job", "severity": "high", "message": "m", "action": "open"}
    return Outgoing.from_delivery(Delivery(1, 1, "s", "open", payload, 0.0, 0, 0.0, None, None))


# -- 1, 2: status socket -----------------------------------------------------------------


def test_deeply_nested_request_is_answered_and_the_server_keeps_serving(short_dir: Path) -> None:
    path = str(short_dir / "s.sock")
    degraded: dict[str, str] = {}
    s = StatusServer(path, lambda: dict(DOC), degraded=degraded)
    s.start()
    try:
        assert "error" in raw_request(path, b"[" * 3000 + b"\n")
        assert query_status(path)["host"] == "gpu7"
        assert degraded == {}
    finally:
        s.stop()


def test_trickling_and_idle_clients_do_not_block_status(short_dir: Path) -> None:
    path = str(short_dir / "s.sock")
    s = StatusServer(path, lambda: dict(DOC), client_timeout_s=1.0)
    s.start()
    idle = []
    try:
        for _ in range(5):  # idle connections: must not hold the accept loop
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(path)
            idle.append(c)
        trickle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        trickle.connect(path)
        idle.append(trickle)
        t0 = time.monotonic()
        assert query_status(path, timeout_s=10)["host"] == "gpu7"
        assert time.monotonic() - t0 < 5  # generous: was ~20 s with queued idle clients
        # A client sending a byte every 0.4 s is cut off by the 1 s whole-request deadline.
        t0 = time.monotonic()
        closed = False
        for _ in range(20):
            try:
                trickle.send(b" ")
            except OSError:
                closed = True
                break
            time.sleep(0.4)
        assert closed
        assert time.monotonic() - t0 < 6
    finally:
        for c in idle:
            c.close()
        s.stop()


def test_server_thread_death_is_recorded_in_degraded(short_dir: Path) -> None:
    path = str(short_dir / "s.sock")
    degraded: dict[str, str] = {}
    s = StatusServer(path, lambda: dict(DOC), degraded=degraded)

    def boom() -> None:
        raise RuntimeError("accept loop broke")

    s._accept_loop = boom  # type: ignore[method-assign]
    s.start()
    try:
        assert s._thread is not None
        s._thread.join(5)
        assert degraded == {"status-socket": "server thread died: RuntimeError: accept loop broke"}
    finally:
        s.stop()


# -- 3: secrets in config, errors and echoes ---------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [("url_env", SECRET_URL), ("url_file", SECRET_URL), ("url_file", "relative/url.txt")],
)
def test_url_as_env_name_or_file_is_refused_without_echo(
    tmp_path: Path, key: str, value: str
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"alerts:\n  sinks:\n    - type: slack\n      {key}: '{value}'\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(cfg))
    text = str(err.value)
    assert f"c.yaml:4: alerts.sinks[0].{key}" in text
    assert "SECRET" not in text and "hooks.slack" not in text


def test_secret_error_text_is_redacted_in_send_error() -> None:
    # A sink built without config validation (e.g. an old state): the name is the URL.
    settings = SinkSettings(type="slack", name="s", url_env=SECRET_URL)
    sink = slack(settings, SinkContext(httpx.Client(), {}))
    with pytest.raises(SendError) as err:
        sink.send(delivery())
    assert "SECRET" not in err.value.reason and "hooks.slack" not in err.value.reason


def test_percent_decoded_echo_is_redacted() -> None:
    url = "http://127.0.0.1:9/e/SECRET%45CHO"
    assert redact("bad request to /e/SECRETECHO", url) == "bad request to <redacted>"


# -- 4: FIFO url_file / log sink, huge url_file -------------------------------------------


def run_isolated(code: str, timeout_s: float = 20) -> str:
    """Run ``code`` in a subprocess (a hang must fail the test, not the suite)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_fifo_url_file_fails_the_sink_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "url.fifo"
    os.mkfifo(fifo)
    out = run_isolated(
        "from rogue_watchdog.daemon.alerts.secrets import read_url, SecretError\n"
        "from rogue_watchdog.config.alerts import SinkSettings\n"
        f"s = SinkSettings(type='slack', name='s', url_file={str(fifo)!r})\n"
        "try:\n    read_url(s)\nexcept SecretError as e:\n    print(e)\n"
    )
    assert out.strip() == (f"cannot read the URL from file {fifo}: not a regular file (a FIFO)")


def test_huge_url_file_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "url"
    with open(big, "wb") as fh:
        fh.truncate(400 * 2**20)  # sparse
    with pytest.raises(SecretError, match="larger than 65536 bytes"):
        read_url(SinkSettings(type="slack", name="s", url_file=str(big)))


def test_fifo_log_sink_fails_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    out = run_isolated(
        "from rogue_watchdog.daemon.alerts.sinks import LogSink, SendError\n"
        "from rogue_watchdog.config.alerts import SinkSettings\n"
        "from rogue_watchdog.state import Delivery\n"
        "from rogue_watchdog.daemon.alerts.alert import Outgoing\n"
        "d = Outgoing.from_delivery(Delivery(1, 1, 's', 'open', {'kind': 'rogue-job', "
        "'severity': 'high', 'message': 'm', 'action': 'open'}, 0.0, 0, 0.0, None, None))\n"
        f"s = LogSink(SinkSettings(type='log', name='l', path={str(fifo)!r}))\n"
        "try:\n    s.send(d)\nexcept SendError as e:\n    print(e.reason)\n"
    )
    # No reader: ENXIO at open (fifo(7) with O_NONBLOCK); either way a clear error.
    assert out.startswith(f"cannot write to {fifo}: ")


def test_log_sink_creates_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "alerts.jsonl"
    LogSink(SinkSettings(type="log", name="l", path=str(path))).send(delivery())
    assert json.loads(path.read_text())["event"] == "finding"


# -- 5: huge error bodies are not buffered ------------------------------------------------


class _HugeError(BaseHTTPRequestHandler):
    sent = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(500)
        self.send_header("content-length", str(300 * 2**20))
        self.end_headers()
        chunk = b"E" * 65536
        try:
            for _ in range(300 * 16):
                self.wfile.write(chunk)
                type(self).sent += len(chunk)
        except OSError:
            pass

    def log_message(self, *a: object) -> None:
        pass


def test_huge_500_body_is_read_only_a_few_kib() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HugeError)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        with httpx.Client() as client:
            settings = SinkSettings(type="webhook", name="w", url_env="U")
            sink = webhook(settings, SinkContext(client, {"U": url}))
            with pytest.raises(SendError) as err:
                sink.send(delivery())
        assert err.value.reason == "HTTP 500 Internal Server Error: " + "E" * 200
        assert _HugeError.sent < 100 * 2**20  # the server was cut off long before 300 MB
    finally:
        server.shutdown()
        server.server_close()


# -- 6, 7: status with a broken state db, degraded → exit 1 ---------------------------------


def test_status_degrades_when_state_db_is_overwritten(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    d = Daemon(load_config(str(path)), str(path))
    try:
        d.tick(time.time())
        db_file = tmp_path / "state" / "state.db"
        d.db.close()  # drop this thread's connection: the next read opens the garbage
        db_file.write_bytes(os.urandom(8192))
        doc = build_status(d)
        assert "state" in doc["degraded"]
        assert doc["degraded"]["state"].startswith("open findings unreadable: DatabaseError")
        assert doc["findings"] == []  # the last scan found nothing on the quiet fixture
        assert exit_code(doc) == 1
    finally:
        d.db.close()


def test_degraded_alone_gives_exit_1() -> None:
    assert exit_code({"findings": [], "degraded": {"findings": "disk full"}}) == 1
    assert exit_code({"findings": [], "degraded": {}}) == 0


# -- 8, 11: state dir unusable, lock -------------------------------------------------------


def test_read_only_database_is_a_state_error_not_a_move_aside(tmp_path: Path) -> None:
    StateDB(tmp_path).close()
    err = sqlite3.OperationalError("unable to open database file")

    class Failing(StateDB):
        def _open_checked(self) -> None:
            raise err

    with pytest.raises(StateError, match="unable to open database file"):
        Failing(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if "corrupt" in p.name) == []


def test_move_aside_failure_is_a_state_error(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(os.urandom(8192))
    real_replace = os.replace

    def refuse(src: Any, dst: Any) -> None:
        raise PermissionError(13, "Permission denied")

    os.replace = refuse  # type: ignore[assignment]
    try:
        with pytest.raises(StateError, match="cannot be moved aside: Permission denied"):
            StateDB(tmp_path)
    finally:
        os.replace = real_replace


def test_second_lock_on_state_dir_names_the_holder(tmp_path: Path) -> None:
    fd = lock_state_dir(tmp_path)
    try:
        out = run_isolated(
            "from rogue_watchdog.state import lock_state_dir, StateError\n"
            f"try:\n    lock_state_dir({str(tmp_path)!r})\nexcept StateError as e:\n    print(e)\n"
        )
        assert f"in use by PID {os.getpid()}" in out
        StateDB(tmp_path).close()  # read-only users do not lock
    finally:
        os.close(fd)


def test_second_daemon_on_same_state_dir_exits_2(short_dir: Path) -> None:
    (short_dir / "s").mkdir()
    fd = lock_state_dir(short_dir / "s")
    try:
        cfg = short_dir / "c.yaml"
        cfg.write_text(
            f"daemon: {{state_dir: {short_dir}/s, socket: {short_dir}/run/s2.sock, "
            "interval_s: 2}\nnvml: {enabled: false}\n"
        )
        proc = run_cli("run", "--config", str(cfg), timeout=30)
        assert proc.returncode == 2
        assert f"in use by PID {os.getpid()}" in proc.stderr
    finally:
        os.close(fd)


# -- 9, 13: configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "where", "message"),
    [
        ("daemon: {socket_group: '99999999999999999999'}", "daemon.socket_group", "below 2**32"),
        ("daemon: {interval_s: 0.01}", "daemon.interval_s", "at least 0.1"),
        ("daemon: {metrics_listen: '[]:9101'}", "daemon.metrics_listen", "empty IPv6"),
        ("daemon: {socket: run/s.sock}", "daemon.socket", "absolute path"),
        ("daemon: {state_dir: state}", "daemon.state_dir", "absolute path"),
        ("daemon: {socket: /" + "a" * 120 + "}", "daemon.socket", "at most 107 bytes"),
        ("alerts: {sinks: []}", "alerts.sinks", "no alerts would be sent"),
        (
            "alerts: {sinks: [{type: log, kinds: [unknown-kind]}]}",
            "alerts.sinks[0].kinds",
            "unknown finding kind(s) unknown-kind; known: binding-mismatch",
        ),
        (
            "alerts: {sinks: [{type: slack, url_env: U, url_file: /u}]}",
            "alerts.sinks[0]",
            "not both",
        ),
    ],
)
def test_config_refusals(tmp_path: Path, yaml_text: str, where: str, message: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml_text + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(cfg))
    assert f"c.yaml:1: {where}" in str(err.value)
    assert message in str(err.value)


def test_docs_describe_exactly_the_finding_kinds() -> None:
    # mypy holds every Finding(kind=...) to model.FindingKind; this holds the docs to it.
    text = (REPO / "docs" / "scan-json-schema.md").read_text()
    tables = text.split("## Finding kinds", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z-]+)` \|", tables, flags=re.MULTILINE)
    assert sorted(documented) == sorted(FINDING_KINDS)
    assert len(documented) == len(set(documented)) == 32


def test_docs_list_exactly_the_origin_kinds() -> None:
    text = (REPO / "docs" / "scan-json-schema.md").read_text()
    listed = re.search(r'"kind": "cron",\s+// ([a-z ]+)\n', text)
    assert listed is not None and tuple(listed.group(1).split()) == tuple(
        k.kind for k in ORIGIN_KINDS
    )


def test_overflowing_socket_group_leaves_no_socket(short_dir: Path) -> None:
    path = short_dir / "run" / "s.sock"
    s = StatusServer(str(path), lambda: dict(DOC), group="99999999999999999999")
    with pytest.raises(OSError, match="OverflowError"):
        s.start()
    assert not path.exists()
    assert not path.parent.exists()  # the directory this attempt created is gone too


def test_too_long_socket_path_leaves_no_directory(short_dir: Path) -> None:
    path = short_dir / "newdir" / ("x" * 120)
    with pytest.raises(OSError, match="too long"):
        StatusServer(str(path), lambda: dict(DOC)).start()
    assert not (short_dir / "newdir").exists()


# -- 10, 12: CLI -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e300"])
def test_status_bad_timeout_is_a_usage_error(value: str) -> None:
    proc = run_cli("status", "--socket", "/nonexistent/s.sock", "--timeout", value)
    assert proc.returncode == 2
    assert "--timeout" in proc.stderr and "Traceback" not in proc.stderr


def test_status_config_syntax_error_and_empty_socket_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("daemon: {socket: [\n")
    proc = run_cli("status", "--config", str(cfg))
    assert proc.returncode == 2
    assert "cannot read daemon.socket from the configuration" in proc.stderr
    proc = run_cli("status", "--socket", "")
    assert proc.returncode == 2
    assert "--socket needs a path" in proc.stderr


def test_status_on_a_regular_file_says_not_a_socket(tmp_path: Path) -> None:
    f = tmp_path / "plain"
    f.write_text("x")
    with pytest.raises(StatusError) as err:
        query_status(str(f))
    assert str(err.value) == (f"not running: {f} is not a socket (check --socket / daemon.socket)")


def test_daemonize_with_missing_pidfile_dir_fails_at_the_terminal(short_dir: Path) -> None:
    cfg = short_dir / "c.yaml"
    cfg.write_text(
        f"daemon: {{state_dir: {short_dir}/s, socket: {short_dir}/run/s.sock, interval_s: 2}}\n"
        "nvml: {enabled: false}\nenforcement: {mode: observe}\n"
    )
    proc = run_cli(
        "run", "--config", str(cfg), "--daemonize", "--pidfile", f"{short_dir}/nodir/x.pid",
        "--log-file", f"{short_dir}/log", timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2
    assert f"pidfile directory {short_dir}/nodir does not exist" in proc.stderr


def test_daemonize_with_socket_in_use_fails_at_the_terminal(short_dir: Path) -> None:
    sock_path = short_dir / "run" / "s.sock"
    s = StatusServer(str(sock_path), lambda: dict(DOC))
    s.start()
    try:
        cfg = short_dir / "c.yaml"
        cfg.write_text(
            f"daemon: {{state_dir: {short_dir}/s, socket: {sock_path}, interval_s: 2}}\n"
            "nvml: {enabled: false}\n"
        )
        proc = run_cli(
            "run", "--config", str(cfg), "--daemonize", "--pidfile", f"{short_dir}/x.pid",
            "--log-file", f"{short_dir}/log", timeout=30,
        )  # fmt: skip
        assert proc.returncode == 2
        assert f"another process is listening on {sock_path}" in proc.stderr
    finally:
        s.stop()
