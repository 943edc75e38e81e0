"""The status document, its text form and exit codes; the status socket server and client
(real unix sockets), including the config checksum in force after a refused reload."""

from __future__ import annotations

import contextlib
import grp
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.config import load_config
from rogue_watchdog.daemon.ipc import (
    SocketInUseError,
    StatusError,
    StatusServer,
    query_status,
)
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.status import build_status, exit_code, render_status
from tests.conftest import REPO, need_root


def quiet_proc_root(tmp_path: Path) -> Path:
    """A fixture /proc with one idle init process: no jobs, no findings, on any host."""
    root = tmp_path / "proc"
    d = root / "1"
    if not d.exists():
        d.mkdir(parents=True)
        (d / "stat").write_text("1 (init) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n")
        (d / "cmdline").write_bytes(b"/sbin/init\0")
        (d / "status").write_text("Name:\tinit\nUid:\t0\t0\t0\t0\nNSpid:\t1\n")
        (d / "cgroup").write_text("0::/init.scope\n")
    return root


def config_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"nvml: {{enabled: false}}\npaths: {{proc_root: '{quiet_proc_root(tmp_path)}'}}\n"
        f"daemon:\n  state_dir: '{tmp_path}/state'\n  socket: '{tmp_path}/s.sock'\n" + extra
    )
    return path


def sha16(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


DOC: dict[str, Any] = {
    "schema_version": 1,
    "version": "0.1.0",
    "now": 1_000_000.0,
    "pid": 42,
    "host": "gpu7",
    "started_at": 1_000_000.0 - 3720,
    "interval_s": 5.0,
    "config": {
        "path": "/etc/rogue-watchdog/config.yaml",
        "checksum": "aaaa",
        "file_checksum": "bbbb",
        "changed_on_disk": True,
    },
    "last_scan": {"time": 1_000_000.0 - 3, "duration_s": 0.1234},
    "nvml": {"available": True, "driver_version": "550.54.15", "error": None},
    "gpus": [
        {
            "index": 0,
            "uuid": "GPU-1",
            "name": "NVIDIA H200",
            "memory_total_bytes": 150 * 2**30,
            "memory_used_bytes": 3 * 2**29,
            "mig_index": None,
        }
    ],
    "jobs": [
        {
            "root_pid": 4242,
            "pids": [4242],
            "user": "alice",
            "cmdline": ["python3", "train_x.py", "\x1b[2J"],
            "verdict": "rogue",
            "rule": None,
            "origin": "cron: /etc/cron.d/retrain line 3",
            "origin_kind": "cron",
            "gpu_memory_bytes": 2**30,
            "gpus": [{"index": 0, "uuid": "GPU-1", "memory_bytes": 2**30}],
        }
    ],
    "findings": [
        {
            "id": 7,
            "kind": "rogue-job",
            "severity": "high",
            "message": "rogue training job PID 4242",
            "root_pid": 4242,
            "opened_at": 1_000_000.0 - 600,
            "age_s": 600.0,
            "seen_count": 120,
        }
    ],
    "alerts": {"queued": 2, "failed_attempts": 1, "last_error": "slack: HTTP 500"},
    "degraded": {"nvml": "NVMLError: Unknown Error"},
}


def test_render_status_text() -> None:
    lines = render_status(DOC, width=200).splitlines()
    assert lines[0].startswith("rogue-watchdog 0.1.0 on gpu7: running since ")
    assert lines[0].endswith("(up 1h02m, pid 42)")
    assert lines[1] == (
        "config: /etc/rogue-watchdog/config.yaml sha256:aaaa (the file on disk is now "
        "sha256:bbbb: reload pending or refused, see the log)"
    )
    assert lines[2].endswith("(3s ago), took 123 ms, every 5.0s")
    assert lines[3:6] == [
        "NVML: ok, driver 550.54.15",
        "GPUs: 1",
        "  GPU 0  NVIDIA H200  1.5 GiB used of 150.0 GiB: sanctioned 0 B, unsanctioned 1.0 GiB,"
        " not attributable 512.0 MiB  GPU-1",
    ]
    assert lines[6:9] == [
        "jobs: 1",
        "  rogue      pid 4242    alice      GPU 0     1.0 GiB  origin: cron: /etc/cron.d/retrain"
        " line 3",
        "    python3 train_x.py \\x1b[2J",  # terminal escapes are neutralised
    ]
    assert lines[9:] == [
        "open findings: 1",
        "  F7 high     rogue-job (open 10m, seen 120x): rogue training job PID 4242",
        "alerts: 2 queued, 1 retrying, last error: slack: HTTP 500",
        "degraded:",
        "  nvml: NVMLError: Unknown Error",
    ]


def test_render_before_first_scan_and_exit_codes() -> None:
    doc = dict(DOC, last_scan=None, nvml=None, gpus=[], jobs=[], findings=[], degraded={})
    doc["config"] = {"path": None, "checksum": None, "file_checksum": None}
    text = render_status(doc)
    for line in (
        "config: (built-in defaults)",
        "last scan: none yet",
        "NVML: not probed yet",
        "open findings: 0",
        "degraded: none",
    ):
        assert line in text.splitlines()
    assert exit_code(doc) == 0
    assert exit_code(DOC) == 1
    info = dict(DOC, findings=[dict(DOC["findings"][0], severity="info")], degraded={})
    assert exit_code(info) == 0  # like scan: only warning and above count


def test_checksum_in_force_survives_a_refused_reload(tmp_path: Path) -> None:
    path = config_file(tmp_path)
    good = sha16(path)
    d = Daemon(load_config(str(path)), str(path))
    try:
        d.tick(time.time())
        doc = build_status(d)
        assert doc["config"] == {
            "path": str(path),
            "checksum": good,
            "file_checksum": good,
            "changed_on_disk": False,
            "needs_restart": [],
        }
        assert (doc["jobs"], doc["findings"], exit_code(doc)) == ([], [], 0)
        assert doc["last_scan"]["time"] == d.last.time  # type: ignore[union-attr]
        path.write_text(path.read_text() + "  interval_s: -1\n")
        broken = sha16(path)
        assert d.reload() is False
        doc = build_status(d)
        assert doc["config"]["checksum"] == good
        assert (doc["config"]["file_checksum"], doc["config"]["changed_on_disk"]) == (broken, True)
        path.write_text(path.read_text().replace("  interval_s: -1\n", "  interval_s: 2\n"))
        assert d.reload() is True
        assert build_status(d)["config"]["checksum"] == sha16(path) != good
        assert build_status(d)["interval_s"] == 2.0
    finally:
        d.db.close()


def test_a_refused_reload_follows_the_file(tmp_path: Path) -> None:
    # Before: a refused reload stayed "failing and being retried" (status exit 1) after the
    # file was put back, until the next SIGHUP; nothing retried.
    path = config_file(tmp_path)
    good_text = path.read_text()
    d = Daemon(load_config(str(path)), str(path))
    try:
        path.write_text(good_text + "daemon: {}\n")  # a second daemon: key
        assert d.reload() is False
        d.tick(time.time())
        doc = build_status(d)
        assert list(doc["degraded"]) == ["config-reload"]
        assert [f["kind"] for f in doc["findings"]] == ["component-degraded"]
        assert exit_code(doc) == 1
        path.write_text(good_text)  # the edit undone, no SIGHUP
        d.tick(time.time() + 5)
        doc = build_status(d)
        assert (doc["degraded"], doc["config"]["changed_on_disk"]) == ({}, False)
        assert exit_code(doc) == 0
        path.write_text(good_text + "daemon: {}\n")
        assert d.reload() is False
        path.write_text(good_text + "  interval_s: 3\n")
        d.tick(time.time() + 10)  # a new edit after the refusal: tried again, and taken
        assert (build_status(d)["degraded"], d.config.daemon.interval_s) == ({}, 3.0)
    finally:
        d.db.close()


# -- the socket ------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[StatusServer]:
    s = StatusServer(str(tmp_path / "run" / "s.sock"), lambda: dict(DOC), client_timeout_s=0.3)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def test_serves_status_with_mode_0660_and_cleans_up(server: StatusServer) -> None:
    st = os.stat(server.path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
    assert stat.S_IMODE(os.stat(os.path.dirname(server.path)).st_mode) == 0o755
    assert query_status(server.path) == DOC
    assert query_status(server.path) == DOC  # one request per connection, many connections
    server.stop()
    assert not os.path.exists(server.path)
    with pytest.raises(StatusError) as err:
        query_status(server.path)
    assert err.value.exit_code == 3 and "no status socket" in str(err.value)


def raw(path: str, payload: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(5)
        c.connect(path)
        c.sendall(payload)
        data = b""
        while chunk := c.recv(65536):
            data += chunk
    reply: dict[str, Any] = json.loads(data)
    return reply


def test_bad_requests_and_a_silent_client(server: StatusServer) -> None:
    assert raw(server.path, b"nonsense\n") == {"error": "request is not JSON"}
    assert raw(server.path, b"[1]\n") == {"error": "request must be a JSON object"}
    assert raw(server.path, b'{"request": "kill"}\n') == {
        "error": "unknown request 'kill'; known: status"
    }
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(server.path)  # says nothing: the server gives up after 0.3 s
        assert query_status(server.path) == DOC


def test_provider_failure_is_an_error_reply(tmp_path: Path) -> None:
    def boom() -> dict[str, Any]:
        raise RuntimeError("kaput")

    s = StatusServer(str(tmp_path / "s.sock"), boom)
    s.start()
    try:
        assert raw(s.path, b"{}\n") == {"error": "status failed: RuntimeError: kaput"}
        with pytest.raises(StatusError) as err:
            query_status(s.path)
        assert err.value.exit_code == 4 and "kaput" in str(err.value)
    finally:
        s.stop()


def test_stale_live_and_foreign_socket_paths(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()  # the file stays, nobody listens: a crashed daemon's leftover
    with pytest.raises(StatusError) as err:
        query_status(path)
    assert err.value.exit_code == 3 and "stale" in str(err.value)
    first = StatusServer(path, lambda: dict(DOC))
    first.start()
    try:
        with pytest.raises(SocketInUseError):
            StatusServer(path, lambda: dict(DOC)).start()
        assert query_status(path) == DOC  # the refused second server did not unlink it
    finally:
        first.stop()
    Path(path).write_text("not a socket")
    with pytest.raises(OSError, match="is taken by a regular file, not a socket"):
        StatusServer(path, lambda: dict(DOC)).start()
    assert Path(path).read_text() == "not a socket"


def test_stop_leaves_a_replacement_socket_alone(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    s = StatusServer(path, lambda: dict(DOC))
    s.start()
    os.unlink(path)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(path)  # e.g. a new daemon took over the path
    try:
        s.stop()
        assert stat.S_ISSOCK(os.stat(path).st_mode)
    finally:
        other.close()


@contextlib.contextmanager
def fake_daemon(path: str, reply: bytes | None) -> Iterator[None]:
    """A listener that answers ``reply`` (None: never answers)."""
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    lsock.listen(1)
    done = threading.Event()

    def serve() -> None:
        conn, _ = lsock.accept()
        with conn:
            conn.recv(4096)  # the request (unread data would make close() reset the peer)
            if reply is not None:
                conn.sendall(reply)
            else:
                done.wait(10)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join(5)
        lsock.close()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"hello\n", "garbage reply"),
        (b"[1, 2]\n", "garbage reply"),
        (b'{"x": 1}\n', "not a status document"),
        (b'{"error": "nope"}\n', "answered with an error: nope"),
        (None, "did not answer within 0.5s"),
    ],
)
def test_unknown_state_is_exit_4(tmp_path: Path, reply: bytes | None, message: str) -> None:
    path = str(tmp_path / "s.sock")
    with fake_daemon(path, reply), pytest.raises(StatusError) as err:
        query_status(path, timeout_s=0.5)
    assert err.value.exit_code == 4
    assert message in str(err.value)


def as_nobody(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as ``nobody``.

    Not ``runuser -u nobody -- python``: this checkout and its interpreter may live under
    a 0700 home (here /root). The child imports the CLI as root, then drops to
    nobody:nogroup with no supplementary groups before ``main`` runs. The CLI imports
    each command's modules lazily, so the ones ``status`` needs are imported up front too.
    """
    code = (
        "import os, sys\n"
        "from rogue_watchdog.cli import build_parser, main\n"
        "import rogue_watchdog.daemon.ipc, rogue_watchdog.daemon.status\n"
        "import rogue_watchdog.config.daemon\n"
        "build_parser().format_help()\n"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        check=False,
    )


@pytest.mark.system
@pytest.mark.parametrize("group", [None, "nogroup"])
def test_socket_refuses_other_users(group: str | None) -> None:
    need_root()
    base = Path(tempfile.mkdtemp(prefix="rwtest-sock-", dir="/var/tmp"))
    base.chmod(0o755)  # traversable: only the socket's own mode may refuse nobody
    s = StatusServer(str(base / "run" / "s.sock"), lambda: dict(DOC), group=group)
    s.start()
    try:
        st = os.stat(s.path)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o660)
        res = as_nobody(["status", "--socket", s.path])
        if group is None:
            assert st.st_gid == 0
            assert res.returncode == 4, res.stderr
            assert res.stderr.startswith(
                f"rogue-watchdog: permission denied connecting to {s.path} (mode 0660 root:root)"
            )
            assert res.stdout == ""
        else:  # same socket, group nogroup: nobody gets in, proving the mode is the gate
            assert st.st_gid == grp.getgrnam("nogroup").gr_gid
            assert res.returncode == 1, res.stderr  # DOC has an open high finding
            assert "rogue-watchdog 0.1.0 on gpu7" in res.stdout
    finally:
        s.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_unknown_group_is_refused(tmp_path: Path) -> None:
    s = StatusServer(str(tmp_path / "s.sock"), lambda: dict(DOC), group="no-such-group-rw")
    with pytest.raises(OSError, match="unknown group 'no-such-group-rw'"):
        s.start()
    assert not (tmp_path / "s.sock").exists()


def test_a_reload_refused_for_trust_stays_refused_until_the_file_is_fixed(tmp_path: Path) -> None:
    # Before: the same bytes made world-writable were refused by the reload, and the next
    # tick cleared the refusal (same checksum as in force): status said all was well.
    path = config_file(tmp_path)
    d = Daemon(load_config(str(path)), str(path))
    try:
        path.chmod(0o666)
        assert d.reload() is False
        d.tick(time.time())
        assert list(build_status(d)["degraded"]) == ["config-reload"]
        assert "writable by others" in build_status(d)["degraded"]["config-reload"]
        path.chmod(0o644)
        d.tick(time.time() + 5)
        assert build_status(d)["degraded"] == {}
    finally:
        d.db.close()


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"gpus": "x"}, "gpus is not a list of objects"),
        ({"jobs": [1]}, "jobs is not a list of objects"),
        ({"findings": {"a": 1}}, "findings is not a list of objects"),
        ({"jobs": [{"gpus": ["x"]}]}, "a job's gpus is not a list of objects"),
    ],
)
def test_a_reply_of_the_wrong_shape_is_unknown_not_a_crash(
    tmp_path: Path, extra: dict[str, Any], problem: str
) -> None:
    # Before: `status --gpu 0` raised AttributeError on `"gpus": "x"`.
    s = StatusServer(str(tmp_path / "s.sock"), lambda: {**DOC, **extra})
    s.start()
    try:
        with pytest.raises(StatusError) as err:
            query_status(s.path)
        assert (err.value.exit_code, str(err.value)) == (
            4, f"unexpected reply from {s.path}: {problem}"
        )  # fmt: skip
    finally:
        s.stop()


@pytest.mark.parametrize("differs", ["config", "state_dir"])
def test_status_says_when_another_daemon_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], differs: str
) -> None:
    """Issue 32, case 6: through a socket path leading to another daemon's socket,
    `status` reported that other daemon as this one (exit 0/1); now exit 4, saying so."""
    from rogue_watchdog.cli import main

    sock = tempfile.mktemp(prefix="rw-other-", suffix=".sock", dir="/tmp")
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(f"daemon: {{socket: '{sock}', state_dir: '{tmp_path}/mine'}}\n")
    doc = json.loads(json.dumps(DOC))
    doc["config"]["path"] = str(cfg) if differs == "state_dir" else "/etc/other.yaml"
    doc["state_dir"] = "/var/lib/other" if differs == "state_dir" else str(tmp_path / "mine")
    try:
        with fake_daemon(sock, json.dumps(doc).encode() + b"\n"):
            code = main(["status", "--config", str(cfg)])
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)
    err = capsys.readouterr().err
    assert code == 4
    theirs = "runs with /etc/other.yaml" if differs == "config" else "keeps its state in"
    assert f"the daemon answering on {sock} {theirs}" in err and "another daemon" in err


def test_status_reads_its_configuration_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: `status --config` read and validated the file twice (for the socket,
    then for the state directory it compares with the answering daemon's: 8 ms for
    config/example.yaml); once now, with the same answer: this daemon, its status."""
    import rogue_watchdog.config as config_module
    from rogue_watchdog.cli import main

    sock = tempfile.mktemp(prefix="rw-mine-", suffix=".sock", dir="/tmp")
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(f"daemon: {{socket: '{sock}', state_dir: '{tmp_path}/mine'}}\n")
    doc = json.loads(json.dumps(DOC))
    doc["config"]["path"] = str(cfg)
    doc["state_dir"] = str(tmp_path / "mine")
    reads: list[str] = []
    real = config_module.load_config

    def counting(path: str | Path | None, *, check_trust: bool = True) -> config_module.Config:
        reads.append(str(path))
        return real(path, check_trust=check_trust)

    monkeypatch.setattr(config_module, "load_config", counting)
    try:
        with fake_daemon(sock, json.dumps(doc).encode() + b"\n"):
            code = main(["status", "--config", str(cfg)])
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)
    out, err = capsys.readouterr()
    assert "another daemon" not in err
    assert code in (0, 1), err
    assert out.startswith("rogue-watchdog")
    assert reads == [str(cfg)]


def test_a_degraded_error_with_line_breaks_reads_as_its_finding_does() -> None:
    # A fresh user: the refused reload's finding showed its errors joined by ⏎, the
    # degraded line the same text with a literal \n.
    doc = dict(DOC)
    doc["degraded"] = {"config-reload": "refused: c.yaml:3: bad\nc.yaml:9: worse\x1b[2J"}
    lines = render_status(doc, width=200).splitlines()
    assert lines[-2:] == [
        "degraded:",
        "  config-reload: refused: c.yaml:3: bad\u23cec.yaml:9: worse\\x1b[2J",
    ]
