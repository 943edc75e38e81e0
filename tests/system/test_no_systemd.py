"""The shipped path without systemd as PID 1 (deploy/no-systemd, docs/install.md): the
cron file's lines start the daemon at boot and again after a crash, never a second one,
and the logrotate file's copytruncate leaves the daemon writing at the start of its log.

The cron file's commands are run as cron would run them (``sh -c`` of the line's
command), with the install paths pointed into a sandbox; cron itself is not needed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, poll

pytestmark = pytest.mark.system

DEPLOY = REPO / "deploy" / "no-systemd"


def _commands(sandbox: Path) -> dict[str, str]:
    """The cron file's commands by schedule, with the install paths in ``sandbox``."""
    out = {}
    for line in (DEPLOY / "rogue-watchdog.cron").read_text().splitlines():
        if not line or line.startswith("#") or "=" in line.split()[0]:
            continue
        words = line.split(None, 6 if line[0] == "*" else 2)
        schedule, user, command = " ".join(words[:-2]), words[-2], words[-1]
        assert user == "root", line
        for installed, here in (
            ("/opt/rogue-watchdog/bin/rogue-watchdog", f"{sys.executable} -m rogue_watchdog"),
            ("/etc/rogue-watchdog/config.yaml", str(sandbox / "config.yaml")),
            ("/run/rogue-watchdog.pid", str(sandbox / "rw.pid")),
            ("/var/log/rogue-watchdog.log", str(sandbox / "rw.log")),
        ):
            assert installed in command, (installed, line)
            command = command.replace(installed, here)
        out[schedule] = command
    assert set(out) == {"@reboot", "* * * * *"}
    return out


def _cron_runs(command: str) -> int:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(REPO)}
    return subprocess.run(["/bin/sh", "-c", command], env=env, timeout=120).returncode


def test_boot_start_crash_restart_and_log_rotation(tmp_path: Path) -> None:
    # Before (issue 33): nothing was shipped or documented for a host without systemd.
    (tmp_path / "config.yaml").write_text(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/s.sock'}}\n"
    )
    cmds = _commands(tmp_path)
    pidfile, log = tmp_path / "rw.pid", tmp_path / "rw.log"
    pids: list[int] = []
    try:
        assert _cron_runs(cmds["@reboot"]) == 0
        pids.append(int(pidfile.read_text()))  # there when `run` returned
        for _ in range(2):  # the minute's line while it runs: refused, still one daemon
            assert _cron_runs(cmds["* * * * *"]) == 2
            assert int(pidfile.read_text()) == pids[0]
        os.kill(pids[0], signal.SIGKILL)  # a crash
        poll("the crash", lambda: not os.path.exists(f"/proc/{pids[0]}"), 10)
        assert _cron_runs(cmds["* * * * *"]) == 0  # the next minute: back
        pids.append(int(pidfile.read_text()))
        assert pids[1] != pids[0]

        # logrotate's copytruncate: copied aside, emptied; the daemon's next line starts
        # the file (O_APPEND), no hole of NUL bytes where the old end was.
        rotate = (DEPLOY / "rogue-watchdog.logrotate").read_text()
        assert "/var/log/rogue-watchdog.log {" in rotate and "    copytruncate\n" in rotate
        (tmp_path / "rw.log.1").write_bytes(log.read_bytes())
        os.truncate(log, 0)
        os.kill(pids[1], signal.SIGHUP)  # logs config-reloaded
        poll("a line after the rotation", lambda: b"config-reloaded" in log.read_bytes(), 20)
        assert log.read_bytes()[:1] == b"{"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 20
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.1)
