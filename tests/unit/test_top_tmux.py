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

from rogue_watchdog.cli.top import KEYS_SHORT, PANE_KEYS
from tests.conftest import REPO, Spawned, need_program, poll


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
        f"cd {REPO} && PYTHONPATH={REPO} NO_COLOR=1 {sys.executable} -m rogue_watchdog"
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
    screen = term.wait_for(f"rogue-watchdog explain {pid} --config")
    # Lines wrap at words, under their indent (issue 33: they broke mid-word).
    assert f"PID {pid}: {sys.executable} {tmp_path}/" in " ".join(x.strip() for x in screen)
    # The way back is on the screen; the command's log events are not JSON lines.
    assert PANE_KEYS.startswith(screen[1])
    assert any(x.startswith(f"── explanation of PID {pid} (q/Esc: back) (lines 1-") for x in screen)
    assert not any(x.lstrip().startswith('{"') for x in screen)
    term.keys("Escape")
    screen = poll(
        "the list again",
        lambda: (lines := term.screen()) and not any("explain" in x for x in lines[2:]) and lines,
        10,
    )
    assert screen[1] == KEYS_SHORT  # 100 columns: the short form, on one line
    term.keys("e")
    term.wait_for(f"── explanation of PID {pid} (q/Esc: back) (lines 1-")
    term.keys("q")  # back to the list, not out of the view
    poll(
        "the list again", lambda: ((lines := term.screen()) and lines[1] == KEYS_SHORT) or None, 10
    )
    assert term.alive()
    term.keys("e")
    term.wait_for(f"rogue-watchdog explain {pid} --config")

    term.keys("t")
    # The dry run's plan first (the one guard decides), then the question.
    screen = term.wait_for("press y to do what the dry run above says, any other key to cancel")
    assert any(f"rogue-watchdog terminate {pid} --dry-run --config" in x for x in screen)
    term.keys("n")
    term.wait_for(f"terminate PID {pid}: cancelled")
    assert os.path.exists(f"/proc/{pid}")  # no answer, no signal

    term.keys("t")
    screen = term.wait_for("press y to do what the dry run above says, any other key to cancel")
    # The view lists the whole host's jobs: say yes only to a plan for our own process.
    assert any(f"rogue-watchdog terminate {pid} --dry-run --config" in x for x in screen)
    term.keys("y")
    screen = term.wait_for(f"rogue-watchdog terminate {pid} --config")
    # Its launcher (this test's own Python process) still runs and may start it again:
    # whether it does cannot be told, so never `ok` (docs/respawn.md).
    assert "outcome: may-return" in screen
    assert spawned.procs[0].wait(timeout=10) is not None  # our own process, and only it

    term.keys("q")  # the output pane closes; q again leaves the view
    poll(
        "the list again", lambda: ((lines := term.screen()) and lines[1] == KEYS_SHORT) or None, 10
    )
    term.keys("q")
    poll("the view to exit", lambda: (not term.alive()) or None, 10)


def test_status_watch_is_the_same_view(spawned: Spawned, tmp_path: Path, term: Tmux) -> None:
    pid, _, command = setup(spawned, tmp_path)
    term.start(command.replace(" top ", " status --watch "))
    screen = term.wait_for(f" {pid} ")
    assert screen[1] == KEYS_SHORT
    term.keys("d")
    # Its origin names nothing to disable: the refusal is shown, nothing is asked.
    screen = term.wait_for(f"rogue-watchdog disable-source {pid} --dry-run --config")
    # The command on a line of its own, whole or cut visibly (issue 33 item 4).
    assert "exit 1:" in screen, screen
    assert any("cannot disable the source of rogue job PID" in x for x in screen)
    assert not any("press y" in x for x in screen)
    term.keys("q")  # the output pane closes; q again leaves the view
    poll(
        "the list again", lambda: ((lines := term.screen()) and lines[1] == KEYS_SHORT) or None, 10
    )
    term.keys("q")
    poll("the view to exit", lambda: (not term.alive()) or None, 10)
    assert os.path.exists(f"/proc/{pid}")


@pytest.mark.parametrize(("width", "rows"), [(80, 24), (200, 50)])
def test_a_busy_host_in_a_real_terminal(
    spawned: Spawned, tmp_path: Path, term: Tmux, width: int, rows: int
) -> None:
    """110 jobs, 40 of them on 4 GPUs of the fake NVML library, at 80x24 and 200x50: the
    GPUs and the selected job are always on the screen, PgDn/End/Home move through all
    110, `/` filters, `U` sorts, `e` opens a pane that scrolls (issue 33, item 2)."""
    from tests.fakenvml.fixtures import fake_nvml, library_path

    token = f"busytop{uuid.uuid4().hex[:6]}"
    pids = []
    for i in range(110):
        # argv[0] carries the token: a launcher the configuration names, one job each.
        argv = ["bash", "-c", f'exec -a "{token}_{i}" sleep 300']
        pids.append(spawned.start(argv).pid)
    gib = 1024**3
    devices = [
        {"name": "NVIDIA H200", "uuid": f"GPU-{g:08d}-aaaa-bbbb-cccc-dddddddddddd",
         "total": 140 * gib, "used": 20 * gib,
         "processes": [{"pid": p, "mem": (1 + n % 3) * gib} for n, p in enumerate(pids[g:40:4])]}
        for g in range(4)
    ]  # fmt: skip
    lib = library_path(fake_nvml(tmp_path, {"driver": "550.54.15", "devices": devices}))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"nvml: {{library: '{lib}'}}\n"
        f"training: {{launchers: ['{token}_'], device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/none.sock'}}\n"
    )
    term.tmux(
        "-f", "/dev/null", "new-session", "-d", "-s", term.name, "-x", str(width),
        "-y", str(rows),
        f"cd {REPO} && PYTHONPATH={REPO} NO_COLOR=1 {sys.executable} -m rogue_watchdog"
        f" top --config {cfg} --interval 3",
    )  # fmt: skip
    term.tmux("set-option", "-t", term.name, "status", "off")  # all rows are the view's

    def shows(text: str, pane: bool = False) -> list[str]:
        lines = term.wait_for(text, 60)
        assert len(lines) <= rows and all(len(x) <= width for x in lines)
        for g in range(4):  # the GPU header, whatever the list shows
            assert any(x.startswith(f"  GPU {g} ") for x in lines), lines
        # The selected job: its row in the list, its PID in a pane's title.
        assert sum(x.startswith("> " if not pane else "── ") for x in lines) == 1, lines
        return lines

    lines = shows("job 1 of 110, by GPU memory")
    first = next(x for x in lines if x.startswith("> "))
    assert first.split()[5] == "3.0G"  # the most GPU memory first
    term.keys("PageDown")
    term.keys("PageDown")
    lines = shows(" of 110, by GPU memory")
    term.keys("End")
    lines = shows("job 110 of 110, by GPU memory")
    last = int(next(x for x in lines if x.startswith("> ")).split()[2])
    assert last in pids
    assert any(x.startswith(f"  PID {last} from ") for x in lines)  # its origin, whole
    term.keys("Home")
    shows("job 1 of 110, by GPU memory")
    term.keys("U")  # the selection follows its job into the new order
    shows(" of 110, by user")
    term.keys("Home")
    lines = shows("job 1 of 110, by user")
    assert next(x for x in lines if x.startswith("> ")).split()[3] == "root"
    term.keys("/", "gpu2", "Enter")
    lines = shows("job 1 of 10 matching 'gpu2' (of 110), by user")
    rows_ = [x.split() for x in lines if x[:2] in ("> ", "  ") and x[2:12].strip() == "rogue"]
    assert rows_ and all((r[4] if r[0] == ">" else r[3]) == "2" for r in rows_), lines  # GPU 2
    chosen = next(x for x in lines if x.startswith("> ")).split()[2]
    term.keys("e")
    lines = shows(f"── explanation of PID {chosen} (q/Esc: back) (lines 1-", pane=True)
    # Every command it prints is whole on one line (cut with » where wider than the
    # terminal), never wrapped inside itself (issue 33 item 4: a pasted half failed).
    cmds = [x for x in lines if f"rogue-watchdog explain {chosen} --config " in x]
    assert cmds, "\n".join(lines)
    assert all(x.endswith((f"--config {cfg}", "»")) for x in cmds), cmds
    assert not [x for x in lines if x.strip().startswith(str(cfg))], lines
    bar = next(x for x in lines if x.startswith("──"))
    total = bar.split("lines ")[1].split(",")[0].split(")")[0].split(" of ")[1]
    term.keys("End")
    # Scrolled to its last line. Waited for, not read at once: the bar is on screen
    # before the key is handled, and a loaded host read the old one (flaky under load).
    shows(f"-{total} of {total}", pane=True)
    term.keys("q")
    shows("job 1 of 10 matching 'gpu2'")
    term.keys("q")
    poll("the view to exit", lambda: (not term.alive()) or None, 10)
