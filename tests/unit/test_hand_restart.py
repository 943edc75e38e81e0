"""A trainer a person starts again by hand after its terminate is a new job, not a return.

Fresh user, first day: ``rogue-watchdog terminate`` stopped a trainer, and 22 s later the
same command was started again by hand from an interactive login shell; the daemon paged
``respawned`` and a critical ``remediation-failed``, reading a person's new run as the
old one's return. Real processes, the real ``terminate`` command and a real state
database: a run whose own origin is a person's terminal that the stopped run did not
come from gets its ``rogue-job`` alone; a run back from what the stop left (a loop in the
stopped run's own terminal) or from an origin that could not be seen still pages
``respawned`` and ``remediation-failed``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.model import (
    Job,
    NvmlStatus,
    Origin,
    OrphanOrigin,
    Proc,
    ScanResult,
    ShellOrigin,
)
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned, poll, run_cli

T0 = 3_000_000.0
GHOST = "import time\ntime.sleep(120)\n"


@pytest.fixture
def terminals() -> Iterator[list[io.FileIO]]:
    """Two pseudo-terminals (their sides a job's stdin points at: /dev/pts/N), closed after."""
    pairs = [os.openpty() for _ in range(2)]
    files = [os.fdopen(follower, "rb", buffering=0) for _leader, follower in pairs]
    try:
        yield files
    finally:
        for f in files:
            f.close()
        for leader, _follower in pairs:
            os.close(leader)


def _daemon(tmp_path: Path, late_s: float = 0.0) -> tuple[Daemon, Path]:
    """A daemon with the remediation watch, its config file (for the CLI), and an
    enforcer clock ``late_s`` ahead (40: the 30 s recheck of a terminate is on too)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts: {{settle_s: 0, sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]}}\n"
    )
    cfg = parse_config(config.read_text(), str(config))
    d = Daemon(cfg, None)
    enf = Enforcer(cfg, d.db, clock=lambda: time.time() + late_s)
    d.sources, d.enforcers = [enf], [enf]
    return d, config


def _running(pid: int, script: Path) -> bool:
    """``pid`` runs ``script``: an argument *is* its path. A substring would also match the
    loop's ``bash -c`` text in a child the shell has forked and not yet exec'd (its
    ``sleep``), a process no scan calls the trainer (CI, stop 46)."""
    try:
        return str(script).encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def _ghost(spawned: Spawned, script: Path, stdin: io.FileIO | None) -> int:
    """The trainer, started with its stdin on ``stdin`` (a terminal: a person's run)."""
    kw = {"stdin": stdin} if stdin is not None else {}
    pid = spawned.start([sys.executable, str(script)], **kw).pid
    poll("the ghost to exec", lambda: _running(pid, script), 10, 0.01)
    return pid


def _typed(spawned: Spawned, script: Path, terminal: io.FileIO, tmp_path: Path) -> int:
    """The trainer as a person starts it: typed at an interactive shell on ``terminal``
    (``bash -i``, its rc file standing in for the keystrokes: ``python3 TRAINER &``)."""
    rc = tmp_path / f"typed-{terminal.fileno()}.rc"
    rc.write_text(f"set +m\n{sys.executable} {script} &\n")
    shell = spawned.start(
        ["bash", "--noprofile", "--rcfile", str(rc), "-i"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
    ).pid

    def child() -> int | None:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _running(int(entry), script):
                with contextlib.suppress(OSError):
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    if int(stat.rpartition(")")[2].split()[1]) == shell:
                        return int(entry)
        return None

    return poll("the trainer typed at the prompt", child, 10, 0.01)


def _opened(d: Daemon, pid: int) -> list[tuple[str, str]]:
    rows = d.db.conn.execute(
        "SELECT kind, severity FROM findings WHERE root_pid=? AND resolved_at IS NULL ORDER BY id",
        (pid,),
    ).fetchall()
    return [(k, s) for k, s in rows]


def _origin(d: Daemon, pid: int) -> dict[str, object]:
    assert d.last is not None and d.last.result is not None
    [job] = [j for j in d.last.result.jobs if j.root_pid == pid]
    return dict(job.origin.to_json())


def _terminate(config: Path, pid: int, script: Path) -> None:
    res = run_cli("terminate", "--config", str(config), str(pid))
    assert res.returncode == 0, res.stdout + res.stderr
    poll("the terminated ghost to go", lambda: not _running(pid, script), 10)


@pytest.mark.parametrize("late_s", [0.0, 40.0], ids=["watch", "watch+recheck"])
@pytest.mark.parametrize("first_tty", [False, True], ids=["from-nohup", "from-terminal-1"])
def test_run_again_by_hand_from_another_terminal_is_its_own_rogue_job(
    spawned: Spawned,
    tmp_path: Path,
    terminals: list[io.FileIO],
    first_tty: bool,
    late_s: float,
) -> None:
    d, config = _daemon(tmp_path, late_s)
    script = tmp_path / "train_ghost.py"
    script.write_text(GHOST)
    first = _ghost(spawned, script, terminals[0] if first_tty else None)
    d.tick(T0)
    assert _opened(d, first) == [("rogue-job", "high")]
    assert _origin(d, first)["kind"] == ("shell" if first_tty else "unknown")
    _terminate(config, first, script)
    d.tick(T0 + 15)  # gone
    second = _typed(spawned, script, terminals[1], tmp_path)  # 22 s after the terminate
    d.tick(T0 + 37)
    assert _origin(d, second)["kind"] == "shell"
    assert _origin(d, second)["tty"] != (_origin_tty(terminals[0]) if first_tty else None)
    # Before: [("respawned", "critical"), ("rogue-job", "high"),
    # ("remediation-failed", "critical")], the respawned paged critical.
    assert _opened(d, second) == [("rogue-job", "high")]
    paged = d.db.conn.execute(
        "SELECT f.kind, f.severity FROM deliveries d JOIN findings f ON f.id = d.finding_id"
        " WHERE f.root_pid=? AND d.event = 'open'", (second,),
    ).fetchall()  # fmt: skip
    assert [tuple(r) for r in paged] == [("rogue-job", "high")]


def _origin_tty(terminal: io.FileIO) -> str:
    return os.ttyname(terminal.fileno())


@pytest.mark.parametrize("late_s", [0.0, 40.0], ids=["watch", "watch+recheck"])
def test_a_return_from_an_origin_not_seen_still_pages(
    spawned: Spawned, tmp_path: Path, late_s: float
) -> None:
    """The run back names no session (its origin could not be seen): a return, as before."""
    d, config = _daemon(tmp_path, late_s)
    script = tmp_path / "train_ghost.py"
    script.write_text(GHOST)
    first = _ghost(spawned, script, None)
    d.tick(T0)
    _terminate(config, first, script)
    d.tick(T0 + 15)
    second = _ghost(spawned, script, None)
    d.tick(T0 + 37)
    assert _origin(d, second)["kind"] == "unknown"
    assert _opened(d, second) == [
        ("respawned", "critical"), ("rogue-job", "high"), ("remediation-failed", "critical"),
    ]  # fmt: skip


def test_a_loop_in_the_stopped_runs_own_terminal_still_pages(
    spawned: Spawned, tmp_path: Path, terminals: list[io.FileIO]
) -> None:
    """A shell loop in the terminal the stopped run came from brings it back: the loop's
    shell also runs something else (a background sleep), so ``terminate`` leaves it
    (``will-return``), and its next run in that same terminal is the remediation failing."""
    d, config = _daemon(tmp_path)
    script = tmp_path / "train_ghost.py"
    script.write_text(GHOST)
    loop = f"sleep 300 & while true; do {sys.executable} {script}; sleep 0.2; done"
    shell = spawned.start(["bash", "-c", loop], stdin=terminals[0]).pid

    def run_of_loop() -> int | None:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _running(int(entry), script):
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                if int(stat.rpartition(")")[2].split()[1]) == shell:
                    return int(entry)
        return None

    first = poll("the loop's first run", run_of_loop, 10, 0.01)
    d.tick(T0)
    assert _origin(d, first)["tty"] == _origin_tty(terminals[0])
    res = run_cli("terminate", "--config", str(config), str(first))
    assert "will come back" in res.stdout, res.stdout + res.stderr
    d.tick(T0 + 15)  # gone (or back already: then the next look sees it)
    second = poll("the loop's next run", lambda: (p := run_of_loop()) != first and p, 10, 0.05)
    # The kernel's exec event for it, which this daemon has no connector for: the tick at
    # T0 + 15 may have read it as the loop's forked shell, and one look at the same inode
    # (no exec event, no slice of the rotation yet) kept that (a flaky case under load).
    d.scanner.table.reinspect([second])
    d.tick(T0 + 37)
    assert _origin(d, second)["tty"] == _origin_tty(terminals[0])
    assert _opened(d, second) == [
        ("respawned", "critical"), ("rogue-job", "high"), ("remediation-failed", "critical"),
    ]  # fmt: skip


# A run typed at a login shell's prompt: the trainer, below `-bash`.
PROMPT = [
    Proc(50, 49, 200, "S", "python3", cmdline=("/usr/bin/python3", "/p/train_job.py")),
    Proc(49, 48, 150, "S", "bash", exe="/usr/bin/bash", cmdline=("-bash",)),
]


def test_the_recheck_of_another_origins_terminate_spares_only_a_persons_other_session(
    tmp_path: Path,
) -> None:
    """The 30 s recheck matches the terminated command back from any origin (another
    signature): a cron run's command run again by hand from a terminal is a new job; back
    as an orphan (its source not seen), or from the terminal the stopped run came from,
    it is the terminate not holding."""
    cfg = parse_config(f"daemon: {{state_dir: '{tmp_path}/state'}}\n", "t.yaml")
    db = StateDB(str(tmp_path / "state"))
    t = 4_000_000.0
    cmd = ["/usr/bin/python3", "/p/train_job.py"]
    for n, was in enumerate(
        [
            {"kind": "cron", "file": "/etc/cron.d/ghost", "line": 3},
            {"kind": "shell", "session": "terminal /dev/pts/4", "tty": "/dev/pts/4"},
        ]
    ):
        db.record_action(
            "cli:root", "terminate", f"PID {40 + n} (1 process(es))", "ok",
            {"root": [40 + n, 100], "origin": was, "procs": [
                {"pid": 40 + n, "start_ticks": 100, "cmdline": cmd, "signals": ["SIGTERM"]},
            ]},
            t + n, signature=f"sig{n}",
        )  # fmt: skip
    enf = Enforcer(cfg, db, clock=lambda: t + 40)

    def judged(origin: Origin, newest_on: int) -> list[tuple[str, str]]:
        # The newest terminate that stands is the one judged: the cron run's, or the
        # terminal's (recorded a second later).
        back = Job(
            root_pid=50, pids=[50], user="root", cmdline=tuple(cmd), start_ticks=200,
            gpu_memory_bytes=None, gpu_uuids=[], lineage=PROMPT, origin=origin,
        )  # fmt: skip
        if newest_on == 0:
            db.conn.execute("UPDATE actions SET undone_at=? WHERE signature='sig1'", (t + 2,))
        else:
            db.conn.execute("UPDATE actions SET undone_at=NULL")
        now = datetime.now(UTC)
        result = ScanResult("h", now, 0.0, NvmlStatus(True), jobs=[back])
        return [(f.kind, f.severity) for f in enf.findings(t + 40, result)]

    pts7 = ShellOrigin(session="terminal /dev/pts/7", user="root", tty="/dev/pts/7")
    pts4 = ShellOrigin(session="terminal /dev/pts/4", user="root", tty="/dev/pts/4")
    failed = [("remediation-failed", "critical")]
    assert judged(pts7, 0) == []  # the cron run's command, by hand: before, critical
    assert judged(OrphanOrigin(), 0) == failed
    assert judged(pts7, 1) == []  # another terminal than the stopped run's
    assert judged(pts4, 1) == failed  # the stopped run's own terminal
