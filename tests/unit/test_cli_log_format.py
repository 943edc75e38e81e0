"""Log events of one-shot commands: a line for a person at a terminal, JSON otherwise.

The command runs in a subprocess whose stderr is a pseudo-terminal (or a pipe), as a
user's shell would run it; the job acted on is a sleeping process this test started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, Spawned


def run_at(tty: bool, *args: str) -> tuple[int, str, str]:
    """``python -m rogue_watchdog ARGS`` with stderr a pseudo-terminal (``tty``) or a pipe."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if not tty:
        done = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", *args],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        return done.returncode, done.stdout, done.stderr
    leader, follower = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", *args],
            stdout=subprocess.PIPE, stderr=follower, text=True, env=env, timeout=60,
            check=False,
        )  # fmt: skip
    finally:
        os.close(follower)
    err = b""
    try:
        while chunk := os.read(leader, 65536):
            err += chunk
    except OSError:  # EIO: the follower side is closed and drained
        pass
    os.close(leader)
    return done.returncode, done.stdout, err.decode().replace("\r\n", "\n")


def setup(spawned: Spawned, tmp_path: Path) -> tuple[int, Path]:
    script = tmp_path / "train_logfmt.py"
    script.write_text("import time\ntime.sleep(120)\n")
    pid = spawned.start([sys.executable, str(script)]).pid
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "nvml: {enabled: false}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/none.sock'}}\n"
    )
    return pid, cfg


def test_at_a_terminal_an_action_prints_only_its_human_answer(
    spawned: Spawned, tmp_path: Path
) -> None:
    pid, cfg = setup(spawned, tmp_path)
    code, out, err = run_at(True, "terminate", str(pid), "--dry-run", "--config", str(cfg))
    assert code == 0
    assert out.splitlines()[-1] == "outcome: dry-run"
    assert err == ""  # before: one JSON `action` line beside the answer


def test_piped_or_asked_for_the_log_is_json_lines(spawned: Spawned, tmp_path: Path) -> None:
    pid, cfg = setup(spawned, tmp_path)
    argv = ("terminate", str(pid), "--dry-run", "--config", str(cfg))
    for tty, extra in ((False, ()), (True, ("--log-format", "json"))):
        code, _, err = run_at(tty, *extra, *argv)
        assert code == 0
        events = [json.loads(line) for line in err.splitlines()]
        assert [(e["event"], e["kind"], e["outcome"]) for e in events] == [
            ("action", "terminate", "dry-run")
        ], (tty, err)
        # Before (issue 33, fresh-user hour): `"id": 0`, an action `undo` and `actions`
        # do not know; a person's dry run writes no row, and the line says so.
        assert ("id" in events[0], events[0]["recorded"]) == (False, False), events[0]


def test_human_lines_name_level_event_and_message() -> None:
    from rogue_watchdog.cli.common import human_log_line

    line = human_log_line(
        None, "warning",
        {"event": "nvml-recovered", "level": "warning", "timestamp": "t",
         "message": "back", "after_s": 1.5, "last_error": "x\x1b[2J"},
    )  # fmt: skip
    assert line == (
        "rogue-watchdog: warning: nvml-recovered: back (after_s=1.5, last_error=x\\x1b[2J)"
    )


def test_at_a_terminal_no_action_command_prints_a_json_line(
    spawned: Spawned, tmp_path: Path
) -> None:
    """Issue 33 item 8 (fresh user D): `disable-source`, `terminate` and their `--dry-run`
    each printed `{"recorded": false, "actor": "cli:root", "kind": "disable-source", ...
    "event": "action", ...}` beside the human text. The decision is the daemon's (`run`:
    ``configure_logging`` ``auto``: human at a terminal, JSON lines in a pipe, a file or
    the journal); at a terminal no command of the class prints a JSON line. (The user's
    lines came from a captured, not a terminal, stderr: JSON there is by design.)"""
    pid, cfg = setup(spawned, tmp_path)
    for argv in (
        ("disable-source", str(pid), "--dry-run"),
        ("disable-source", str(pid)),
        ("terminate", str(pid)),
    ):
        _code, out, err = run_at(True, *argv, "--config", str(cfg))
        assert not [x for x in err.splitlines() if x.lstrip().startswith("{")], (argv, err)
        assert out.strip(), argv  # the human answer is on stdout
    _code, _out, err = run_at(False, "disable-source", str(pid), "--dry-run", "--config", str(cfg))
    assert [json.loads(x)["event"] for x in err.splitlines() if x.startswith("{")] in (
        [],
        ["action"],
    )
