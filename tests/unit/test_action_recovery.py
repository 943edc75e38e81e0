"""Actions left half-way (issue 32, case 4): a daemon killed at each step of a terminate,
then started again over the same state directory.

Real processes this test started, a real state database, the daemon's own tick; the
kill is the fault point's hook raising (watchdog/faults.py), which ends the daemon
object where it stands, as kill -9 ends the process (no cleanup runs in the daemon's
code: the hook's exception is not an ``Exception``). Each case checks the process's
fate, that no signal went twice to it (each wave at most once per identity), one action
row for the job, and one ``action-interrupted`` finding naming what was done.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rogue_watchdog import faults
from rogue_watchdog.actions.effects import Effects
from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.guards import read_live
from rogue_watchdog.actions.runner import InlineRunner
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from tests.conftest import Spawned, poll

STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: open(sys.argv[1], 'a').write('TERM\\n'))\n"
    "open(sys.argv[1] + '.ready', 'w').close()\n"
    "time.sleep(120)\n"
)


class Killed(BaseException):
    """The daemon died here (not an Exception: nothing in the daemon catches it)."""


class Counting(Effects):
    """Real signals, each counted per (PID, signal)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: Counter[tuple[int, int]] = Counter()

    def send_signal(self, pid: int, sig: int, start_ticks: int | None = None) -> None:
        super().send_signal(pid, sig, start_ticks)
        self.sent[(pid, sig)] += 1


def kill_at(point: str) -> None:
    seen = []

    def hook(name: str) -> None:
        if name == point and not seen:
            seen.append(name)
            raise Killed(name)

    faults.set_hook(hook)


def killed_tick(d: Daemon, point: str) -> None:
    """One tick of ``d`` killed at ``point`` (an action's step), its database closed as
    a killed process leaves it, the fault hook removed for the restart."""
    kill_at(point)
    with pytest.raises(Killed):
        d.tick(1_000_000.0)
    d.db.close()
    faults.set_hook(None)


@pytest.fixture(autouse=True)
def no_hook() -> object:
    yield
    faults.set_hook(None)


def daemon(tmp_path: Path, fx: Counting, mode: str = "terminate") -> tuple[Daemon, Enforcer]:
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]}}\n"
        "enforcement:\n  mode: observe\n  grace_s: 1\n  rules:\n"
        f"    - {{name: mine, cmdline: '*{tmp_path}/*', mode: {mode}}}\n",
        "t.yaml",
    )
    d = Daemon(cfg, None)
    enf = Enforcer(cfg, d.db, fx, runner=InlineRunner())
    d.sources.append(enf)
    d.enforcers.append(enf)
    return d, enf


def stubborn(spawned: Spawned, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    script, log = tmp_path / "train_wal_ghost.py", tmp_path / "got.txt"
    script.write_text(STUBBORN)
    p = spawned.start([sys.executable, str(script), str(log)])
    # Its SIGTERM handler is installed (a SIGTERM before would end it).
    poll("it runs", lambda: Path(f"{log}.ready").exists(), 10)
    return p, log


def state(pid: int) -> str:
    live = read_live(pid)
    return "gone" if live is None or live.state == "Z" else live.state


POINTS = [
    "terminate:begun",
    "terminate:freeze:intent",
    "terminate:freeze:sent",
    "terminate:term:intent",
    "terminate:term:sent",
    "terminate:cont:sent",
    "terminate:waiting",
    "terminate:kill-freeze:sent",
    "terminate:kill:intent",
    "terminate:kill:sent",
    "terminate:finishing",
]


@pytest.mark.parametrize("point", POINTS)
def test_a_terminate_killed_at_each_step_is_finished_after_the_restart_never_repeated(
    spawned: Spawned, tmp_path: Path, point: str
) -> None:
    p, log = stubborn(spawned, tmp_path)
    fx = Counting()
    d, _ = daemon(tmp_path, fx)
    killed_tick(d, point)
    [row] = [a for a in Daemon(d.config, None).db.actions() if a.kind == "terminate"]
    assert row.state == "pending"  # recorded before its first side effect, not finished

    again, _ = daemon(tmp_path, fx)
    again.tick(1_000_010.0)
    poll("the job is stopped", lambda: p.poll() is not None, 10)
    assert p.returncode == -signal.SIGKILL
    sent = {sig: n for (pid, sig), n in fx.sent.items() if pid == p.pid}
    assert sent.get(signal.SIGTERM, 0) <= 1 and sent.get(signal.SIGKILL, 0) == 1, sent
    assert sent.get(signal.SIGSTOP, 0) <= 2, sent  # the freeze, and the freeze before SIGKILL
    assert log.read_text().count("TERM") <= 1 if log.exists() else True
    [row] = [a for a in again.db.actions() if a.kind == "terminate"]  # no second action
    assert (row.state, row.outcome) == ("interrupted", "ok"), row
    assert row.details["interrupted"]["recovery"].startswith("continued to its end")
    [f] = [f for f in again.last.findings if f.kind == "action-interrupted"]  # type: ignore[union-attr]
    assert f.severity == "warning"
    assert f"terminate action {row.id} (PID {p.pid}" in f.message
    again.tick(1_000_020.0)
    assert [r.kind for r in again.db.open_findings() if r.kind == "action-interrupted"] == [
        "action-interrupted"
    ]


def test_killed_during_the_grace_period_sigterm_is_not_sent_again(
    spawned: Spawned, tmp_path: Path
) -> None:
    """Case 4 exactly: before, the restarted daemon froze and SIGTERMed the same process
    again (2 SIGTERMs received, no record of the first); now 1, recorded, then SIGKILL
    once the recorded grace period is over."""
    p, log = stubborn(spawned, tmp_path)
    fx = Counting()
    d, _ = daemon(tmp_path, fx)
    killed_tick(d, "terminate:waiting")
    poll("SIGTERM received", lambda: log.exists() and log.read_text(), 5)
    assert state(p.pid) in ("S", "R")  # not left frozen
    [row] = Daemon(d.config, None).db.actions()
    steps = Daemon(d.config, None).db.action_steps(row.id)
    # What runs above the job (this test's process, its parents: each runs only the way
    # down to it) is watched, and the list written, before the freeze: never after.
    ops = [s.op for s in steps]
    assert "watch" not in ops[ops.index("signal") :], ops
    assert [(s.op, s.detail.get("wave"), s.status) for s in steps if s.op != "watch"] == [
        ("signal", "freeze", "done"),
        ("signal", "term", "done"),
        ("signal", "cont", "done"),
        ("wait", None, "done"),
    ]
    again, _ = daemon(tmp_path, fx)
    again.tick(1_000_010.0)
    poll("the job is stopped", lambda: p.poll() is not None, 10)
    assert log.read_text() == "TERM\n"  # one SIGTERM received in all
    assert fx.sent[(p.pid, signal.SIGTERM)] == 1 and fx.sent[(p.pid, signal.SIGKILL)] == 1
    [row] = again.db.actions()
    assert [pr["signals"] for pr in row.details["procs"]] == [
        ["SIGSTOP", "SIGTERM", "SIGCONT", "SIGSTOP", "SIGKILL"]
    ]


def test_an_interrupted_terminate_is_not_continued_once_the_mode_is_observe(
    spawned: Spawned, tmp_path: Path
) -> None:
    p, _log = stubborn(spawned, tmp_path)
    fx = Counting()
    d, _ = daemon(tmp_path, fx)
    killed_tick(d, "terminate:term:sent")  # frozen, SIGTERM (ignored) pending, not continued
    assert state(p.pid) == "T"  # left frozen by the dead daemon
    again, _ = daemon(tmp_path, fx, mode="observe")
    again.tick(1_000_010.0)
    poll("continued", lambda: state(p.pid) in ("S", "R"), 5)
    time.sleep(1.5)  # longer than grace_s: nothing more comes
    assert p.poll() is None
    assert fx.sent[(p.pid, signal.SIGKILL)] == 0 and fx.sent[(p.pid, signal.SIGTERM)] == 1
    [row] = again.db.actions()
    assert (row.state, row.outcome) == ("interrupted", "interrupted")
    [f] = [f for f in again.last.findings if f.kind == "action-interrupted"]  # type: ignore[union-attr]
    assert "not continued" in f.message and "SIGKILL after the grace period" in f.message
    again.tick(1_000_020.0)  # and it is not terminated afresh: the trail names it
    assert len(again.db.actions()) == 1 and p.poll() is None


def test_a_cli_terminate_interrupted_is_never_continued(spawned: Spawned, tmp_path: Path) -> None:
    p, _log = stubborn(spawned, tmp_path)
    fx = Counting()
    d, _ = daemon(tmp_path, fx)
    from rogue_watchdog.state import ActionJournal

    live = read_live(p.pid)
    assert live is not None
    ActionJournal.begin(
        d.db, "cli:alice", "terminate", f"PID {p.pid}",
        {"root": [p.pid, live.start_ticks], "cmdline": list(live.cmdline),
         "origin": {"kind": "orphan"}, "members": [[p.pid, live.start_ticks, list(live.cmdline)]],
         "grace_s": 1},
    )  # fmt: skip
    # The CLI process was not this one: make its owner a process that is gone.
    d.db.conn.execute(
        "UPDATE actions SET owner_json=json_set(owner_json, '$.pid', 999999999, '$.session', 'x')"
    )
    d.tick(1_000_000.0)
    [row] = [a for a in d.db.actions() if a.actor == "cli:alice"]
    assert (row.state, row.outcome) == ("interrupted", "interrupted")
    assert fx.sent[(p.pid, signal.SIGKILL)] == 0


def test_a_terminate_in_progress_here_is_not_taken_over(spawned: Spawned, tmp_path: Path) -> None:
    """The daemon's own action waiting out its grace (another thread) is not "interrupted"."""
    p, _log = stubborn(spawned, tmp_path)
    fx = Counting()
    d, enf = daemon(tmp_path, fx)
    from rogue_watchdog.actions.runner import ThreadRunner

    enf.runner = ThreadRunner()
    d.tick(1_000_000.0)
    [_row] = d.db.unfinished_actions()
    d.tick(1_000_000.5)  # while it waits
    assert [a.state for a in d.db.actions()] == ["pending"]
    assert not [f for f in d.last.findings if f.kind == "action-interrupted"]  # type: ignore[union-attr]
    assert enf.settle(10)
    assert p.wait(5) == -signal.SIGKILL
    assert [(a.state, a.outcome) for a in d.db.actions()] == [("done", "ok")]


def test_an_enforcer_that_fails_keeps_its_findings_open(
    spawned: Spawned, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 32, noticed and left alone then: the enforcer's own findings resolved in a
    # tick where reading them raised (blindness read as "fixed"), and opened (paged) again
    # when it answered. It now declares them (covers): they stay open, said degraded.
    p, _log = stubborn(spawned, tmp_path)
    fx = Counting()
    d, _ = daemon(tmp_path, fx)
    killed_tick(d, "terminate:term:sent")
    again, enf = daemon(tmp_path, fx)
    again.tick(1_000_010.0)
    poll("the job is stopped", lambda: p.poll() is not None, 10)
    [f] = [r for r in again.db.open_findings() if r.kind == "action-interrupted"]
    assert enf.covers(f.fingerprint) and not enf.covers("rogue-job:" + f.fingerprint)

    def broken(now: float, result: object) -> list[object]:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(enf, "findings", broken)
    again.tick(1_000_020.0)
    assert enf.name in again.degraded
    assert [r.id for r in again.db.open_findings() if r.kind == "action-interrupted"] == [f.id]
