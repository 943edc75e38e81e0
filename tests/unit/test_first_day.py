"""The small frictions of a first day with the product (issue 33, item 5)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from rogue_watchdog.state import StateDB
from tests.conftest import REPO, run_cli


def test_actions_table_has_a_header_row(tmp_path: Path) -> None:
    # Before: the rows alone (`    1 2026-12-06 10:00:00 cli:root  disable-source ...`).
    db = StateDB(str(tmp_path / "state"))
    when = time.mktime((2026, 12, 6, 10, 0, 0, 0, 0, -1))
    undo = [{"op": "rename", "from": "/a", "to": "/b"}]
    db.record_action("cli:root", "disable-source", "/etc/cron.d/b:4", "ok", {}, when, undo=undo)
    db.close()
    done = run_cli("actions", "--state-dir", str(tmp_path / "state"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "   ID TIME                ACTOR          ACTION          OUTCOME   TARGET",
        "    1 2026-12-06 10:00:00 cli:root       disable-source  ok        /etc/cron.d/b:4"
        " (undo available)",
    ]
    assert done.stderr == f"rogue-watchdog: reading {tmp_path}/state/state.db (--state-dir)\n"


def test_actions_columns_fit_the_longest_kind_and_help_says_which_dry_runs_are_listed(
    tmp_path: Path,
) -> None:
    # Before (132b2a1, fresh user F): `    3 2026-12-06 10:00:00 daemon         quarantine-
    # weights done      /w/bad.npy`: the 18-character kind pushed OUTCOME and TARGET out of
    # line; `actions --help` said "(dry runs included)" though a person's --dry-run prints
    # `dry run, not recorded` and is never listed.
    db = StateDB(str(tmp_path / "state"))
    when = time.mktime((2026, 12, 6, 10, 0, 0, 0, 0, -1))
    db.record_action("cli:root", "terminate", "PID 42", "will-return", {}, when)
    db.record_action("daemon", "quarantine-weights", "/w/bad.npy", "done", {}, when)
    db.record_action("daemon", "terminate", "PID 43", "dry-run", {}, when, dry_run=True)
    db.close()
    done = run_cli("actions", "--state-dir", str(tmp_path / "state"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "   ID TIME                ACTOR          ACTION              OUTCOME      TARGET",
        "    3 2026-12-06 10:00:00 daemon         terminate           dry-run      PID 43"
        " [dry-run]",
        "    2 2026-12-06 10:00:00 daemon         quarantine-weights  done         /w/bad.npy",
        "    1 2026-12-06 10:00:00 cli:root       terminate           will-return  PID 42",
    ]
    helped = " ".join(run_cli("actions", "--help").stdout.split())
    assert "dry runs included" not in helped
    assert (
        "The daemon's dry runs (enforcement.dry_run) are listed, marked [dry-run]; a --dry-run"
        " you run only looks and is not recorded (it prints `dry run, not recorded`)."
    ) in helped


def _daemon_lines(tmp_path: Path, tty: bool) -> list[str]:
    """The daemon's first lines of output, its stdout a terminal or a pipe."""
    tmp_path.mkdir()
    config = tmp_path / "c.yaml"
    config.write_text(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/s.sock'}}\n"
    )
    main_fd, out_fd = pty.openpty() if tty else os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(config)],
        stdin=subprocess.DEVNULL, stdout=out_fd, stderr=out_fd,
        env=dict(os.environ, PYTHONPATH=str(REPO)), start_new_session=True,
    )  # fmt: skip
    os.close(out_fd)
    data = b""
    try:
        deadline = time.monotonic() + 30
        while b"daemon-started" not in data and time.monotonic() < deadline:
            ready, _, _ = select.select([main_fd], [], [], 1.0)
            if ready:
                data += os.read(main_fd, 65536)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        os.close(main_fd)
    return data.decode(errors="replace").replace("\r\n", "\n").splitlines()


def test_the_daemon_writes_human_lines_at_a_terminal_and_json_in_a_pipe(tmp_path: Path) -> None:
    # Before: 600-character JSON lines at the terminal of a first run.
    at_tty = _daemon_lines(tmp_path / "tty", tty=True)
    started = next(x for x in at_tty if "daemon-started" in x)
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d rogue-watchdog: info: daemon-started \(pid=\d+, config=\S+, "
        r"socket=\S+, interval_s=5\.0, sd_notify=False\)",
        started,
    ), started
    piped = _daemon_lines(tmp_path / "pipe", tty=False)
    started = next(x for x in piped if "daemon-started" in x)
    assert json.loads(started)["event"] == "daemon-started"
