"""Real cron brings a killed trainer back; the real daemon reports ``respawned``.

One cron entry (``* * * * * root python3 SANDBOX/respawn/train_fake.py``) and one kill
serve two scenarios at once, so the module costs about two cron minutes, not three:

* daemon A runs throughout: it sees the trainer, sees it killed, sees cron start it again
  at the next minute and opens ``respawned`` naming the cron file and line;
* daemon B is stopped with SIGTERM after it has recorded the kill, and a new daemon
  process (B2) is started on the same state dir before cron's next minute: B2 has never
  seen the trainer, yet opens ``respawned`` from the state B left behind.

Both daemons are ``python -m rogue_watchdog run --config FILE`` subprocesses with their own
state dir, socket path and alerts log in a sandbox. Their stdout carries the structlog
JSON events the loop writes (``finding-opened`` with kind, message and root_pid); the
finding's details (the origin with cron file and line) are read from the state database.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import need, need_program, need_root, poll
from tests.system.cronharness import PYTHON, CronHarness

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
CRON_LINE = 4  # the entry's line number in the cron.d file written below
T = TypeVar("T")


@dataclass
class DaemonProc:
    """One ``rogue-watchdog run`` subprocess and where its output goes."""

    name: str
    proc: subprocess.Popen[bytes]
    stdout: Path
    state_dir: Path
    started_at: float

    def events(self) -> list[dict[str, Any]]:
        """The JSON log events written so far (a partial last line is skipped)."""
        out = []
        for line in self.stdout.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def opened(self, kind: str, root_pid: int) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events()
            if e.get("event") == "finding-opened"
            and e.get("kind") == kind
            and e.get("root_pid") == root_pid
        ]

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not exit within 10 s; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


@dataclass
class Timeline:
    """What happened, collected once for the module's tests."""

    cron_file: Path
    trainer: Path
    first_pid: int
    second_pid: int
    daemon_a: DaemonProc
    daemon_b1: DaemonProc
    daemon_b2: DaemonProc
    b1_exit: int
    gone_at: dict[str, float]
    returned_at: float


def _config(sandbox: Path, name: str) -> Path:
    root = sandbox / name
    root.mkdir(exist_ok=True)
    path = root / "config.yaml"
    path.write_text(
        "nvml:\n  enabled: false\n"
        "daemon:\n"
        "  interval_s: 1\n"
        f"  state_dir: {root / 'state'}\n"
        f"  socket: {root / 'status.sock'}\n"
        "alerts:\n"
        "  sinks:\n"
        f"    - {{type: log, path: {root / 'alerts.log'}}}\n"
    )
    return path


def _start_daemon(sandbox: Path, name: str, config: Path) -> DaemonProc:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    out = sandbox / f"{name}.stdout"
    with out.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    return DaemonProc(name, proc, out, config.parent / "state", time.time())


def _poll(what: str, timeout_s: float, probe: Callable[[], T | None]) -> T:
    return poll(what, probe, timeout_s, 0.25)


def _query(state_dir: Path, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
    """Read the daemon's state database (WAL: readers do not block its writer).

    Empty while the daemon has not created it or its tables yet (a test polls from the
    moment the daemon process starts); opened read-only, so a poll never creates the
    file the daemon is about to create.
    """
    db = state_dir / "state.db"
    if not db.exists():
        return []
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=10.0)
    try:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    finally:
        conn.close()


def _gone_at(state_dir: Path, trainer: Path) -> float | None:
    """When the daemon recorded the trainer's job as gone, or None (not yet, or present)."""
    if not (state_dir / "state.db").exists():
        return None
    rows = _query(state_dir, "SELECT gone_at FROM jobs WHERE summary LIKE ?", (f"%{trainer}%",))
    return rows[0]["gone_at"] if len(rows) == 1 else None


def respawn_findings(state_dir: Path, cron_file: Path) -> list[dict[str, Any]]:
    """Every ``respawned`` finding (open or resolved) whose origin is our cron file."""
    out = []
    for row in _query(state_dir, "SELECT * FROM findings WHERE kind='respawned' ORDER BY id"):
        details = json.loads(row["details_json"])
        if details.get("origin", {}).get("file") == str(cron_file):
            out.append({**dict(row), "details": details})
    return out


def _start_time(pid: int) -> float:
    """POSIX time a process started (proc(5): stat field 22 in clock ticks since boot)."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    ticks = int(stat[stat.rfind(b")") + 2 :].split()[19])
    btime = next(
        int(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def _check_alive(*daemons: DaemonProc) -> None:
    for d in daemons:
        if d.proc.poll() is not None:
            tail = d.stdout.read_text(errors="replace")[-2000:]
            raise AssertionError(f"daemon {d.name} exited with {d.proc.returncode}:\n{tail}")


@pytest.fixture(scope="module")
def timeline() -> Iterator[Timeline]:
    need_root()
    need_program("cron", "pgrep")
    need(Path(PYTHON).exists(), f"needs {PYTHON}")
    h = CronHarness()
    daemons: list[DaemonProc] = []
    try:
        h.ensure_cron()
        trainer = h.trainer("respawn")
        cron_file = h.add_cron_d(
            [
                "# rogue-watchdog system test: a ghost trainer that cron brings back",
                'MAILTO=""',
                "SHELL=/bin/sh",
                f"* * * * * root {PYTHON} {trainer}",
            ]
        )
        # Daemons first, so each sees the trainer appear.
        a = _start_daemon(h.sandbox, "a", _config(h.sandbox, "a"))
        b1 = _start_daemon(h.sandbox, "b1", _config(h.sandbox, "b"))
        daemons += [a, b1]
        first = h.wait_for([trainer], h.seconds_to_fire() + 15)[trainer]
        _check_alive(a, b1)
        # Both have judged it before the kill (the job has a signature in their state).
        for d in (a, b1):
            _poll(f"{d.name} to see PID {first}", 30, partial(d.opened, "rogue-job", first))

        # The trainer is ours: argv is exactly python3 + our sandbox path, under cron.
        assert h.ours(trainer) == [first]
        os.kill(first, signal.SIGKILL)
        gone = {
            d.name: _poll(
                f"{d.name} to record the kill", 20, partial(_gone_at, d.state_dir, trainer)
            )
            for d in (a, b1)
        }
        b1_exit = b1.stop()
        b2 = _start_daemon(h.sandbox, "b2", h.sandbox / "b" / "config.yaml")
        daemons.append(b2)

        second = _poll(
            "cron to start the trainer again",
            h.seconds_to_fire() + 15,
            lambda: [p for p in h.ours(trainer) if p != first],
        )[0]
        returned_at = _start_time(second)
        for d in (a, b2):
            _poll(f"{d.name} to open respawned", 20, partial(d.opened, "respawned", second))
        _check_alive(a, b2)
        yield Timeline(cron_file, trainer, first, second, a, b1, b2, b1_exit, gone, returned_at)
    finally:
        for d in daemons:
            d.stop()
        h.close()


def _assert_alerts_log(d: DaemonProc, root_pid: int, message: str) -> None:
    """Once ``run`` wires alert delivery (cli/daemon.py ``extra_workers``), the log sink
    appends the alert to ``alerts.log``; before that the file never appears and the
    spooled delivery plus the stdout event are all there is."""
    path = d.state_dir.parent / "alerts.log"
    if not path.exists():
        return

    def delivered() -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        return [
            x
            for x in lines
            if x.get("action") == "open"
            and x.get("kind") == "respawned"
            and x.get("root_pid") == root_pid
        ]

    [line] = _poll(f"{path} to get the respawned alert", 15, delivered)
    assert line["message"] == message


def _assert_respawn(t: Timeline, d: DaemonProc, gone_at: float) -> None:
    [event] = d.opened("respawned", t.second_pid)
    origin = f"cron {t.cron_file}:{CRON_LINE} (* * * * *)"
    # The return names its user and command (fresh user K, issue 33), then its origin.
    assert f"as PID {t.second_pid}, user root, `" in event["message"]
    assert f"{t.trainer.name}`, started by {origin}" in event["message"]
    assert event["severity"] == "high"
    [rec] = respawn_findings(d.state_dir, t.cron_file)
    assert rec["root_pid"] == t.second_pid != t.first_pid
    # One incident, one page (issue 35): the run's own rogue-job is folded into the
    # respawned finding, which names it once filed (after its page went out).
    assert re.fullmatch(
        re.escape(event["message"]) + r"; paged as part of this return: rogue-job F\d+",
        rec["message"],
    ), (rec["message"], event["message"])
    assert rec["details"]["origin"]["kind"] == "cron"
    assert rec["details"]["origin"]["file"] == str(t.cron_file)
    assert rec["details"]["origin"]["line"] == CRON_LINE
    assert rec["details"]["origin"]["entry"] == f"* * * * * root {PYTHON} {t.trainer}"
    # One alert spooled for the config's log sink, the payload carrying the same message.
    # Spooled once the return's settle ends (alerts.settle_s after the tick that saw it,
    # as a job's first page: a return gone within it is filed, not paged).
    spool = _poll(
        "the respawned's open to be spooled",
        30,
        lambda: _query(
            d.state_dir,
            "SELECT sink, event, payload_json FROM deliveries WHERE finding_id=? ORDER BY id",
            (rec["id"],),
        ),
    )
    assert (spool[0]["sink"], spool[0]["event"]) == ("log", "open")
    # The page goes out after the settle, once the run's own finding is folded into it:
    # it names it (the record's message), where the open at the return could not.
    assert json.loads(spool[0]["payload_json"])["finding"]["message"] == rec["message"]
    _assert_alerts_log(d, t.second_pid, rec["message"])
    # The gap runs from the disappearance the state recorded to the tick that saw it back.
    assert rec["details"]["gap_s"] == round(rec["opened_at"] - gone_at, 1)
    # Killed seconds after one cron minute, back at the next: under a minute plus the
    # few seconds cron and the tick lag behind the minute boundary.
    assert 0 < rec["details"]["gap_s"] < 70
    # Opened by the first tick after the return (interval 1 s; 5 s for a loaded host).
    assert t.returned_at - 1 <= rec["opened_at"] <= t.returned_at + 5


def test_running_daemon_reports_respawn_with_cron_line(timeline: Timeline) -> None:
    _assert_respawn(timeline, timeline.daemon_a, timeline.gone_at["a"])


def test_restarted_daemon_reports_respawn_from_saved_state(timeline: Timeline) -> None:
    t = timeline
    assert t.b1_exit == 0  # SIGTERM is a clean stop
    assert t.daemon_b1.opened("respawned", t.second_pid) == []  # B1 was gone by then
    # B2 measures the gap from the disappearance B1 saved before it stopped.
    _assert_respawn(t, t.daemon_b2, t.gone_at["b1"])
    [rec] = respawn_findings(t.daemon_b2.state_dir, t.cron_file)
    # B2 was running before cron started the trainer again: a restart in between.
    assert t.daemon_b2.started_at < t.returned_at
    # One job record: the signature B1 saved is the one B2 matched.
    rows = _query(
        t.daemon_b2.state_dir,
        "SELECT signature, sightings FROM jobs WHERE summary LIKE ?",
        (f"%{t.trainer}%",),
    )
    assert [(r["signature"], r["sightings"]) for r in rows] == [(rec["details"]["signature"], 2)]
