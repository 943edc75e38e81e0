"""An action on a finding id runs under the configuration of the daemon that opened it.

Without ``--config`` a person pastes ``terminate F12`` from ``status``; the protect list
that guards it must be the daemon's, not the built-in defaults (which protect nothing
the daemon's file names).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import structlog

from rogue_watchdog.cli import common as cli_common
from rogue_watchdog.cli import main
from rogue_watchdog.daemon.ipc import StatusError, StatusServer, query_status
from tests.conftest import Spawned, poll, run_cli


def run_daemon(spawned: Spawned, tmp_path: Path, token: str, extra: str = "") -> tuple[Path, Path]:
    sock = tmp_path / "s.sock"
    config = tmp_path / "config.yaml"
    config.write_text(
        "nvml: {enabled: false}\n"
        f"training: {{launchers: ['{token}']}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{sock}', interval_s: 0.5}}\n"
        f"enforcement: {{protect: [{{cmdline: '*/pipeline-{token}/*'}}]}}\n" + extra
    )
    spawned.daemon(config, tmp_path / "out.log")
    return config, sock


def open_finding(sock: Path, pid: int) -> int | None:
    from rogue_watchdog.daemon.ipc import StatusError, query_status

    try:
        doc = query_status(str(sock), timeout_s=1)
    except StatusError:
        return None
    ids = [f["id"] for f in doc.get("findings") or [] if f.get("root_pid") == pid]
    return ids[0] if ids else None


def test_terminate_by_finding_id_obeys_the_daemons_protect_list(
    spawned: Spawned,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = f"protjob{uuid.uuid4().hex[:8]}"
    job_dir = tmp_path / f"pipeline-{token}"
    job_dir.mkdir()
    script = job_dir / f"{token}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    config, sock = run_daemon(spawned, tmp_path, token)
    job = spawned.start([sys.executable, str(script)])
    fid = poll("the daemon's finding", lambda: open_finding(sock, job.pid), 30)
    monkeypatch.setattr(cli_common, "DAEMON_SOCKET", str(sock))
    monkeypatch.chdir(tmp_path)  # no --config, and the default path does not matter
    capsys.readouterr()
    try:
        code = main(["terminate", f"F{fid}", "--dry-run"])
    finally:
        # One-shot commands point structlog at this (captured) stderr: undo it for the
        # tests that follow in this process.
        structlog.reset_defaults()
    out, err = capsys.readouterr()
    # Before: the default configuration was used (nothing protected): exit 0, "would send
    # SIGTERM". Now the daemon's protect entry refuses it.
    assert f"rogue-watchdog: using the running daemon's configuration: {config}\n" in err
    assert code == 1, (out, err)
    assert f"matches enforcement.protect entry 'cmdline=*/pipeline-{token}/*'" in out
    # The guard refuses the job as a whole, before any plan (Trust IV).
    assert out.endswith(
        f"is protected: refusing (PID {job.pid} matches enforcement.protect entry "
        f"'cmdline=*/pipeline-{token}/*')\n"
    ), out
    assert job.poll() is None  # a dry run, and refused: the job still runs


def test_without_a_daemon_the_default_path_is_used(tmp_path: Path) -> None:
    answered, path = cli_common.daemon_config_path(str(tmp_path / "none.sock"), timeout_s=0.2)
    assert (answered, path) == (False, None)


def test_disable_source_of_an_orphan_says_why_and_what_is_left(
    spawned: Spawned, tmp_path: Path
) -> None:
    # Before: "would disable the source of … (dry run, not recorded): none -" then
    # "refused: the origin is not known; …", though scan called the origin an orphan.
    token = f"orphjob{uuid.uuid4().hex[:8]}"
    script = tmp_path / f"{token}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    config = tmp_path / "config.yaml"
    config.write_text(
        "nvml: {enabled: false}\n"
        f"training: {{launchers: ['{token}']}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/s.sock'}}\n"
    )
    # setsid via a shell that exits at once: the job is re-parented, an orphan (waited
    # for: an orphan only once that shell is gone).
    spawned.start(
        ["sh", "-c", f"setsid {sys.executable} {script} </dev/null >/dev/null 2>&1 &"]
    ).wait(timeout=10)
    pid = poll("the orphan", lambda: _pid_of(script), 10)
    try:
        done = run_cli("disable-source", str(pid), "--dry-run", "--config", str(config))
        assert done.returncode == 1, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].startswith(f"cannot disable the source of rogue job PID {pid} `")
        assert lines[0].endswith(
            ": its origin (orphan) names nothing to disable, and "
            "enforcement.quarantine_unknown_exe is off"
        )
        assert lines[1:] == [
            f"  to stop the running job: rogue-watchdog terminate --config {config} {pid}"
        ]
    finally:
        os.kill(pid, 9)  # our own orphan: setsid took it out of the test's process group


def _pid_of(script: Path) -> int | None:
    """The process whose argv is ``python SCRIPT``: exec'd. Any argument equal to the
    path also matched ``setsid python SCRIPT`` before its exec of python (same PID, not
    yet the job the command judges)."""
    want = [os.fsencode(sys.executable), os.fsencode(script), b""]
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                args = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if args == want:
                return int(name)
    return None


def test_explain_judges_under_the_daemons_allowlist(
    spawned: Spawned,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: `explain PID` without --config judged under the default path (none here):
    # "not sanctioned: the allowlist is empty", and printed how to kill a job the daemon
    # sanctions. Now it uses the running daemon's file, as the actions do.
    token = f"sancjob{uuid.uuid4().hex[:8]}"
    rule = f"sanctioned:\n  - name: pipeline\n    cmdline: '*{token}*'\n    origin: {{any: true}}\n"
    config, sock = run_daemon(spawned, tmp_path, token, rule)
    script = tmp_path / f"{token}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    job = spawned.start([sys.executable, str(script)])

    def daemon_sees_it() -> bool:
        from rogue_watchdog.daemon.ipc import StatusError, query_status

        try:
            doc = query_status(str(sock), timeout_s=1)
        except StatusError:
            return False
        return any(j.get("root_pid") == job.pid for j in doc.get("jobs") or [])

    poll("the daemon's job", daemon_sees_it, 30)
    monkeypatch.setattr(cli_common, "DAEMON_SOCKET", str(sock))
    monkeypatch.chdir(tmp_path)  # no --config, and the default path does not matter
    capsys.readouterr()
    try:
        code = main(["explain", str(job.pid)])
    finally:
        structlog.reset_defaults()
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    assert f"rogue-watchdog: using the running daemon's configuration: {config}\n" in err
    assert "1 process(es), verdict sanctioned\n" in out
    assert "rogue-watchdog disable-source" not in out


def test_a_look_judges_under_the_version_in_force_while_an_edit_stands_refused(
    spawned: Spawned,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: after an edit the daemon refused (here invalid YAML), `explain` and `scan`
    # without --config failed with the file's error (rc 2) while the daemon went on
    # sanctioning the job under the version it had accepted: "its verdicts are the
    # daemon's" was not kept. The daemon keeps that version; a look judges under it.
    token = f"keptjob{uuid.uuid4().hex[:8]}"
    rule = f"sanctioned:\n  - name: pipeline\n    cmdline: '*{token}*'\n    origin: {{any: true}}\n"
    config, sock = run_daemon(spawned, tmp_path, token, rule)
    script = tmp_path / f"{token}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    job = spawned.start([sys.executable, str(script)])

    def daemon_sees(what: str) -> bool:
        try:
            doc = query_status(str(sock), timeout_s=1)
        except StatusError:
            return False
        if what == "job":
            return any(j.get("root_pid") == job.pid for j in doc.get("jobs") or [])
        return bool(doc.get("degraded", {}).get(what))

    poll("the daemon's job", lambda: daemon_sees("job"), 30)
    kept = tmp_path / "state" / "config-in-force.yaml"
    assert kept.read_bytes() == config.read_bytes()
    assert kept.stat().st_mode & 0o777 == 0o600
    config.write_text(config.read_text() + "sanctioned: [oops\n")  # the pipeline's rule gone
    # the daemon follows a refused file only after a reload was asked for
    pid = int(query_status(str(sock), timeout_s=1)["pid"])
    os.kill(pid, 1)  # SIGHUP: reload
    poll("the refused reload", lambda: daemon_sees("config-reload"), 30)
    monkeypatch.setattr(cli_common, "DAEMON_SOCKET", str(sock))
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    try:
        code = main(["explain", str(job.pid)])
        out, err = capsys.readouterr()
        scan_code = main(["scan", "--json"])
        scan_out, scan_err = capsys.readouterr()
    finally:
        structlog.reset_defaults()
    assert code == 0, (out, err)
    assert "1 process(es), verdict sanctioned\n" in out
    assert (
        f"rogue-watchdog: warning: the running daemon refused {config} as it reads now and "
        f"runs the version it accepted before (sha256:"
    ) in err
    assert f"judging under that version, kept at {kept}. The file's error: {config}:" in err
    assert scan_code == 0, (scan_out, scan_err)
    verdicts = {j["root_pid"]: j["verdict"] for j in json.loads(scan_out)["jobs"]}
    assert verdicts[job.pid] == "sanctioned"
    # A copy that is not the version in force is never used: the file's error stands.
    kept.write_text(kept.read_text() + "# another version\n")
    capsys.readouterr()
    try:
        code = main(["explain", str(job.pid)])
    finally:
        structlog.reset_defaults()
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert "refused" not in err and f"rogue-watchdog: config error: {config}:10: " in err


def _serve(path: Path, doc: dict[str, object]) -> StatusServer:
    server = StatusServer(str(path), lambda: dict(doc))
    server.start()
    return server


@pytest.mark.parametrize(
    "config",
    [None, "x", {"path": 5}, {"path": "conf.yaml"}],  # missing, not an object, not a path
)
def test_an_answer_naming_no_configuration_stops_an_action_and_is_said_by_a_look(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    config: object,
) -> None:
    # Before: read as "built-in defaults" (no protect list, no allowlist) for every
    # command; `"config": "x"` raised AttributeError.
    doc: dict[str, object] = {"schema_version": 1, "findings": []}
    if config is not None:
        doc["config"] = config
    sock = tmp_path / "s.sock"
    server = _serve(sock, doc)
    monkeypatch.setattr(cli_common, "DAEMON_SOCKET", str(sock))
    monkeypatch.chdir(tmp_path)
    said = (
        f"the daemon at {sock} did not name its configuration file (config.path); "
        "pass --config to say which configuration to use"
    )
    try:
        with pytest.raises(cli_common.CliError) as err:
            cli_common.command_config_path(None, acts=True)
        assert str(err.value) == said
        capsys.readouterr()
        path = cli_common.command_config_path(None, acts=False)
        assert path == cli_common.resolve_config_path(None)
        assert capsys.readouterr().err == f"rogue-watchdog: warning: {said}\n"
    finally:
        server.stop()


def test_a_daemon_on_built_in_defaults_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = tmp_path / "s.sock"
    server = _serve(sock, {"schema_version": 1, "findings": [], "config": {"path": None}})
    try:
        assert cli_common.daemon_config_path(str(sock)) == (True, None)
    finally:
        server.stop()


def _drip_server(path: Path, payload: bytes, pause_s: float) -> threading.Thread:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener, contextlib.suppress(OSError):
            for i in range(0, len(payload), 65536 if pause_s == 0 else 1):
                conn.sendall(payload[i : i + (65536 if pause_s == 0 else 1)])
                time.sleep(pause_s)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_the_query_deadline_holds_for_the_whole_answer(tmp_path: Path) -> None:
    # Before: the timeout applied to each read, so a peer sending a byte every 0.3 s held
    # the command for as long as it liked (here: 60 bytes, 18 s, then "garbage").
    t = _drip_server(tmp_path / "drip.sock", b"x" * 60, 0.3)
    with pytest.raises(StatusError) as err:
        query_status(str(tmp_path / "drip.sock"), timeout_s=1.0)
    assert (err.value.exit_code, str(err.value)) == (
        4, f"the daemon did not answer within 1s on {tmp_path / 'drip.sock'}"
    )  # fmt: skip
    t.join(30)


def test_a_reply_larger_than_any_status_document_is_refused(tmp_path: Path) -> None:
    big = b"{" + b" " * (65 * 1024 * 1024)
    t = _drip_server(tmp_path / "big.sock", big, 0)
    with pytest.raises(StatusError) as err:
        query_status(str(tmp_path / "big.sock"), timeout_s=20)
    assert (err.value.exit_code, str(err.value)) == (
        4, f"the reply from {tmp_path / 'big.sock'} is larger than 67108864 bytes"
    )  # fmt: skip
    t.join(30)


_FOREIGN_SERVER = """
import json, os, socket, sys
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
os.setgid(65534)
os.setuid(65534)
listener.listen(1)  # SO_PEERCRED gives the credentials of the listen(2) call
print("ready", flush=True)
conn, _ = listener.accept()
conn.recv(4096)
conn.sendall(json.dumps(json.loads(sys.argv[2])).encode())
conn.close()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another user")
def test_a_status_socket_another_user_listens_on_is_not_believed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: any user's process named `rogue-watchdog run` was found (running_daemon_
    # sockets) and believed, so root's terminate ran under the configuration (null:
    # built-in defaults, no protect list) and the state directory it named.
    import subprocess

    sock = tmp_path / "fake.sock"
    doc = {
        "schema_version": 1,
        "findings": [],
        "config": {"path": None, "checksum": "0" * 16},
        "state_dir": str(tmp_path / "elsewhere"),
    }
    server = subprocess.Popen(
        [sys.executable, "-c", _FOREIGN_SERVER, str(sock), json.dumps(doc)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == "ready\n"
        monkeypatch.setattr(cli_common, "DAEMON_SOCKET", str(sock))
        with pytest.raises(cli_common.CliError) as err:
            cli_common.command_daemon(acts=True)
        assert f"{sock} is answered by PID {server.pid} of uid 65534, neither root" in str(
            err.value
        )
    finally:
        server.kill()
        server.wait()
