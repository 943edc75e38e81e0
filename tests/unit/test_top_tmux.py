"""The live view (``rogue-watchdog top`` / ``status --watch``) driven in a real terminal.

tmux gives it a pseudo-terminal: ``send-keys`` types, ``capture-pane`` reads the screen.
No daemon runs (the socket named in the configuration does not exist), so the view scans
this host itself; the job is a sleeping process this test started, named by a launcher
pattern unique to the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, Spawned, need_program, poll
from watchdog.cli.top import fit_rows


class Tmux:
    def __init__(self, tmp_path: Path) -> None:
        self.name = f"rwtest-{uuid.uuid4().hex[:8]}"
        # A private server: the test never touches a user's tmux sessions.
        self.socket = str(tmp_path / "tmux.sock")

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return done.stdout

    def start(self, command: str, width: int = 100) -> None:
        self.tmux("new-session", "-d", "-s", self.name, "-x", str(width), "-y", "40", command)

    def screen(self) -> list[str]:
        return self.tmux("capture-pane", "-p", "-t", self.name).splitlines()

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def wait_for(self, text: str, timeout_s: float = 30) -> list[str]:
        return poll(
            f"{text!r} on the screen",
            lambda: ((lines := self.screen()) and any(text in x for x in lines) and lines) or None,
            timeout_s,
        )

    def alive(self) -> bool:
        done = subprocess.run(
            ["tmux", "-S", self.socket, "has-session", "-t", self.name],
            capture_output=True,
            check=False,
        )
        return done.returncode == 0

    def close(self) -> None:
        self.tmux("kill-server")


@pytest.fixture
def term(tmp_path: Path) -> Iterator[Tmux]:
    need_program("tmux")
    t = Tmux(tmp_path)
    try:
        yield t
    finally:
        t.close()


def setup(spawned: Spawned, tmp_path: Path) -> tuple[int, Path, str]:
    token = f"toptest_{uuid.uuid4().hex[:8]}"
    script = tmp_path / f"{token}.py"
    script.write_text("import time\ntime.sleep(300)\n")
    pid = spawned.start([sys.executable, str(script)]).pid
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "nvml: {enabled: false}\n"
        f"training: {{launchers: ['{token}'], device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/none.sock'}}\n"
    )
    command = (
        f"cd {REPO} && PYTHONPATH={REPO} NO_COLOR=1 {sys.executable} -m watchdog"
        f" top --config {cfg} --interval 0.5"
    )
    return pid, cfg, command


def test_live_view_shows_the_job_explains_and_terminates_with_confirmation(
    spawned: Spawned, tmp_path: Path, term: Tmux
) -> None:
    pid, _, command = setup(spawned, tmp_path)
    term.start(command)
    screen = term.wait_for(f" {pid} ")
    assert "from local scan (no daemon running)" in screen[0]
    row = next(x for x in screen if f" {pid} " in x)
    assert row.split()[:3] == [">", "rogue", str(pid)]  # selected: the only job

    term.keys("e")
    screen = term.wait_for(f"exit 0: rogue-watchdog explain {pid} --config ")
    assert f"PID {pid}: {sys.executable} {tmp_path}/" in "".join(screen)  # lines wrap
    # The way back is on the screen; the command's log events are not JSON lines.
    assert screen[1] == "q/Esc: back to the list  ↑/↓ or j/k select  t terminate  d disable-source"
    assert "── explanation (q/Esc: back) ──" in screen
    assert not any(x.lstrip().startswith('{"') for x in screen)
    term.keys("Escape")
    screen = poll(
        "the list again",
        lambda: (lines := term.screen()) and not any("explain" in x for x in lines[2:]) and lines,
        10,
    )
    assert screen[1].startswith("↑/↓ or j/k select  e explain  t terminate")
    term.keys("e")
    term.wait_for("── explanation (q/Esc: back) ──")
    term.keys("q")  # back to the list, not out of the view
    poll(
        "the list again", lambda: ((lines := term.screen()) and "e explain" in lines[1]) or None, 10
    )
    assert term.alive()
    term.keys("e")
    term.wait_for(f"exit 0: rogue-watchdog explain {pid} --config ")

    term.keys("t")
    # The dry run's plan first (the one guard decides), then the question.
    screen = term.wait_for("press y to do what the dry run above says, any other key to cancel")
    assert any(f"exit 0: rogue-watchdog terminate {pid} --dry-run --config " in x for x in screen)
    term.keys("n")
    term.wait_for(f"terminate PID {pid}: cancelled")
    assert os.path.exists(f"/proc/{pid}")  # no answer, no signal

    term.keys("t")
    screen = term.wait_for("press y to do what the dry run above says, any other key to cancel")
    # The view lists the whole host's jobs: say yes only to a plan for our own process.
    assert any(f"exit 0: rogue-watchdog terminate {pid} --dry-run --config " in x for x in screen)
    term.keys("y")
    screen = term.wait_for(f"exit 0: rogue-watchdog terminate {pid} --config ")
    assert "outcome: ok" in screen
    assert spawned.procs[0].wait(timeout=10) is not None  # our own process, and only it

    term.keys("q")
    poll("the view to exit", lambda: (not term.alive()) or None, 10)


def test_status_watch_is_the_same_view(spawned: Spawned, tmp_path: Path, term: Tmux) -> None:
    pid, _, command = setup(spawned, tmp_path)
    term.start(command.replace(" top ", " status --watch "))
    screen = term.wait_for(f" {pid} ")
    assert screen[1].startswith("↑/↓ or j/k select  e explain  t terminate")
    term.keys("d")
    # Its origin names nothing to disable: the refusal is shown, nothing is asked.
    screen = term.wait_for(f"exit 1: rogue-watchdog disable-source {pid} --dry-run --config ")
    assert any("cannot disable the source of rogue job PID" in x for x in screen)
    assert not any("press y" in x for x in screen)
    term.keys("q")
    poll("the view to exit", lambda: (not term.alive()) or None, 10)
    assert os.path.exists(f"/proc/{pid}")


def test_a_frame_taller_than_the_terminal_keeps_its_keys_and_its_newest_lines() -> None:
    """A long explanation (a long checkout path wraps every lineage row) scrolled the
    title and the keys line off a 40-row terminal: 'q/Esc: back' was no longer shown."""
    frame = ["title", "q/Esc: back", "", *[f"row {i}" for i in range(50)]]
    assert fit_rows(frame, 8) == [
        "title",
        "q/Esc: back",
        "… 46 line(s) hidden: the terminal has 8 rows",  # the blank one too
        "row 45", "row 46", "row 47", "row 48", "row 49",
    ]  # fmt: skip
    assert fit_rows(frame, 60) == frame
    # The hostile tester's cases: the note itself wider than the terminal, a terminal
    # shorter than the header, no rows at all.
    assert fit_rows(frame, 8, width=20)[2] == "… 46 line(s) hidden:"
    assert fit_rows(frame, 3) == [
        "q/Esc: back",
        "… 51 line(s) hidden: the terminal has 3 rows",
        "row 49",
    ]
    assert fit_rows(frame, 2) == ["… 52 line(s) hidden: the terminal has 2 rows", "row 49"]
    assert fit_rows(frame, 0) == []
    assert all(len(fit_rows(frame, n, 30)) <= n for n in range(0, 60))
