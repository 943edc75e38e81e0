"""Fresh user F (issue 33): one cron ghost, 1 high and 3 critical pages, two of them
after the operator fixed it.

The sandbox's history, replayed with its times, PIDs, start ticks and action rows
(/work/notes/fresh-f-sandbox/state/state.db) through the real tracker and enforcer:

- 16:34:01 run PID 20297; action 1 disables its cron line, action 2 terminates it,
  action 3 (an operator's undo) puts the line back;
- 16:35:01 run PID 3366: its rogue-job names the undo (correct); the operator comments
  the line out by hand with the printed ``sed`` hint; action 4 terminates the run (its
  record says the line read disabled); the operator re-enables the line by hand;
- 16:36:02 run PID 2334. Before: F438 ``remediation-failed`` (critical, "back after
  action 4") beside its rogue-job F437 that says "an operator's undo, not a failed
  remediation"; after: only the rogue-job. The line was re-enabled by hand after action
  4 found it off: an operator's edit, not a failed remediation.
- 16:36:30 the operator disables the line from ``top`` (action 5, on PID 2334 itself).
  16:36:34, before: F440 and F441, ``remediation failed: 30 s after … (action 4)`` and
  ``(action 2)``, critical; after: nothing. The run is what action 5 acted on; action 2
  was superseded by the undo at 16:34:28.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.model import CronOrigin, Job, NvmlStatus, OrphanOrigin, Proc, ScanResult
from rogue_watchdog.policy.findings import job_findings
from rogue_watchdog.policy.signature import job_signature
from tests.unit.test_pages import _daemon

CMD = ("/usr/bin/python3", "/tmp/rw-try-f/ghost/train_ghost.py", "--epochs", "40")
FILE = "/tmp/rw-try-f/cron.d/legacy-retrain"
ENTRY = "* * * * * root /usr/bin/python3 /tmp/rw-try-f/ghost/train_ghost.py --epochs 40"
# The case's times (UTC 2026-12-06).
T_RUN1, T_ACT1, T_ACT2, T_UNDO = 1796574841.0, 1796574853.00213, 1796574859.76527, 1796574868.01
T_RUN2, T_ACT4, T_RUN3, T_ACT5 = 1796574901.0, 1796574931.34083, 1796574962.0, 1796574990.32079


def _origin(state: str | None) -> CronOrigin:
    return CronOrigin(
        file=FILE, line=1, entry=ENTRY, user="root", schedule="* * * * *",
        next_run=None if state else "2026-12-06T16:37:00+00:00", entry_state=state,
    )  # fmt: skip


def _run(pid: int, start: int, state: str | None = None) -> Job:
    root = Proc(pid=pid, ppid=pid - 1, start_ticks=start, state="S", comm="python3", uid=0)
    return Job(
        root_pid=pid, pids=[pid], user="root", cmdline=CMD, start_ticks=start,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[root], origin=_origin(state),
    )  # fmt: skip


SIG = job_signature("root", CMD, _origin(None))


def _terminate(d: Daemon, pid: int, start: int, at: float) -> int:
    # As the CLI recorded it: the run and its cron shell, the line read disabled then.
    procs = [
        {"pid": pid, "start_ticks": start, "cmdline": list(CMD), "signals": ["SIGTERM"]},
        {"pid": pid - 1, "start_ticks": start - 1, "cmdline": ["/bin/sh", "-c", " ".join(CMD)],
         "signals": ["SIGTERM"]},
    ]  # fmt: skip
    return d.db.record_action(
        "cli:root", "terminate", f"PID {pid} (2 process(es))", "ok",
        {"root": [pid, start], "origin": _origin("disabled").to_json(), "procs": procs}, at,
        signature=SIG,
    )  # fmt: skip


def _disable(d: Daemon, pid: int, start: int, at: float) -> int:
    return d.db.record_action(
        "cli:root", "disable-source", f"{FILE}:1", "ok",
        {"root": [pid, start], "origin": _origin(None).to_json(), "source": "cron-file",
         "done": [f"commented out {FILE}:1"]},
        at, signature=SIG, undo=[{"op": "rename", "from": "/x", "to": "/y"}],
    )  # fmt: skip


def _tick(d: Daemon, enf: Enforcer, clock: list[float], now: float, jobs: list[Job]) -> None:
    clock[0] = now
    result = ScanResult("h", datetime.fromtimestamp(now, UTC), 0.0, NvmlStatus(True), jobs=jobs)
    d.tracker.update(jobs, job_findings(jobs) + enf.findings(now, result), now)


def _open(d: Daemon) -> list[tuple[str, str, int | None]]:
    return sorted((f.kind, f.severity, f.root_pid) for f in d.db.open_findings())


def _pages(d: Daemon, kind: str) -> int:
    return int(
        d.db.conn.execute(
            "SELECT COUNT(*) FROM deliveries d JOIN findings f ON f.id = d.finding_id"
            " WHERE d.event = 'open' AND f.kind = ?",
            (kind,),
        ).fetchone()[0]
    )


def test_fresh_user_f_one_ghost_no_critical_page_after_the_operators_fixes(
    tmp_path: Path,
) -> None:
    d = _daemon(tmp_path)
    clock = [T_RUN1]
    enf = Enforcer(d.config, d.db, clock=lambda: clock[0])
    _tick(d, enf, clock, T_RUN1, [_run(20297, 4888656)])
    act1 = _disable(d, 20297, 4888656, T_ACT1)
    _terminate(d, 20297, 4888656, T_ACT2)
    _tick(d, enf, clock, T_ACT2 + 1, [])  # gone
    d.db.mark_undone(act1, T_UNDO)
    d.db.record_action(
        "cli:root", "undo", f"action {act1}", "ok", {"undid": act1, "done": [], "error": None},
        T_UNDO, signature=SIG,
    )  # fmt: skip

    # 16:35:01: the undo's run (F413): its rogue-job names the undo, nothing else.
    run2 = _run(3366, 4894685)
    _tick(d, enf, clock, T_RUN2, [run2])
    assert _open(d) == [("rogue-job", "high", 3366)]
    _terminate(d, 3366, 4894685, T_ACT4)  # the line commented out by hand meanwhile
    _tick(d, enf, clock, T_ACT4 + 1, [])

    # 16:36:02: the line re-enabled by hand; its next run. Before: + remediation-failed
    # critical (F438, "back after … action 4"), beside a rogue-job saying "not a failed
    # remediation".
    run3 = _run(2334, 4900642)
    for now in (T_RUN3, T_RUN3 + 5, T_RUN3 + 20):
        _tick(d, enf, clock, now, [run3])
    assert _open(d) == [("rogue-job", "high", 2334)]

    # 16:36:30 the line disabled from `top`, on this very run (action 5); 16:36:34 the
    # run still in its grace. Before: F440 (action 4) and F441 (action 2), critical,
    # "30 s after".
    _disable(d, 2334, 4900642, T_ACT5)
    for now in (T_ACT5 + 4, T_ACT5 + 9):
        _tick(d, enf, clock, now, [_run(2334, 4900642, "disabled")])
    assert _open(d) == [("rogue-job", "high", 2334)]
    assert _pages(d, "remediation-failed") == 0  # was 3 (F438, F440, F441)


def test_a_return_is_judged_once_against_the_newest_action_that_stands(tmp_path: Path) -> None:
    """The rule's other edges: a run back from a line the product disabled that still
    reads disabled is a failed remediation (once, not once per earlier action); the same
    command back under another origin 30 s after a terminate too (the recheck); the
    recheck's message says what was done and what is back, not "30 s after"."""
    d = _daemon(tmp_path)
    clock = [T_RUN1]
    enf = Enforcer(d.config, d.db, clock=lambda: clock[0])
    _tick(d, enf, clock, T_RUN1, [_run(20297, 4888656)])
    t1 = _terminate(d, 20297, 4888656, T_ACT1)
    _disable(d, 20297, 4888656, T_ACT2)
    _tick(d, enf, clock, T_ACT2 + 1, [])
    # Cron did not rescan: the run comes from the line that reads disabled.
    back = _run(3366, 4894685, "disabled")
    _tick(d, enf, clock, T_RUN2, [back])
    failed = [f for f in d.db.open_findings() if f.kind == "remediation-failed"]
    assert [(f.severity, f.fingerprint, f.root_pid) for f in failed] == [
        ("critical", f"remediation-failed:{SIG}", 3366)
    ]
    # A worker re-parented to PID 1 (another signature), back after a terminate whose
    # own signature came back nowhere: judged by the recheck, once.
    orphan = Job(
        root_pid=4242, pids=[4242], user="root", cmdline=CMD, start_ticks=4894700,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[], origin=OrphanOrigin(),
    )  # fmt: skip
    clock[0] = T_ACT1 + 40
    result = ScanResult("h", datetime.now(UTC), 0.0, NvmlStatus(True), jobs=[orphan])
    [f] = enf.findings(T_ACT1 + 40, result)
    assert f.details["fingerprint"] == f"terminate-{t1}" and f.details["back"] == [4242]
    assert f.message.startswith(
        "remediation failed: rogue-watchdog terminated 2 process(es) of PID 20297 at "
    )
    assert f"(action {t1}); `{' '.join(CMD)}` is back as PID 4242" in f.message
