"""Fresh user, 2026-12-07 (daemon at the example config's 5 s interval): a loop's
finding whose run this product terminated and whose source it disabled.

F6, the try-cron flow's ghost (a cron line every minute, each run 40 s): `disable-source
F6`, `undo 1`, later `disable-source F6 && terminate F6`. F6 then stayed open 2-3 minutes
(its loop's quiet time, twice its cadence plus 60 s) and still said `restarts it: on
schedule …; to stop the source: rogue-watchdog disable-source … F6 …; its source was
re-enabled by … undo`: the advice of the run's last sighting and the note of the undo
before the second disable. F3, a shell loop whose shell the terminate stopped with its
run, waited the same way. Now the message is the action log's at once, and a loop whose
latest run and source this product stopped resolves at the next tick; one whose source
is not known to be stopped keeps waiting, and a run back after the resolve is one page.
"""

from __future__ import annotations

import json
from pathlib import Path

from rogue_watchdog.actions.remedy import terminate_extras
from rogue_watchdog.daemon.alerts.alert import local_iso
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.model import CronOrigin, Job, Proc, ShellOrigin
from rogue_watchdog.policy.findings import job_findings
from rogue_watchdog.policy.guard import STOPS_WITH_LOOP, ScanProtection, with_advice
from rogue_watchdog.state import FindingRecord
from tests.unit.test_pages import _daemon

CMD = ("/usr/bin/python3", "/tmp/rw-try/ghost/train_ghost.py", "--epochs", "40")
FILE = "/tmp/rw-try/cron.d/legacy-retrain"
T0 = 1796574960.0  # a minute's start: cron runs the line at T0, T0 + 60, T0 + 120, ...
BACKUP = "/tmp/rw-try/state/backups/legacy-retrain.20261207T052702"
SIGTERM = 15


def _run(pid: int, start: int) -> Job:
    origin = CronOrigin(
        file=FILE, line=1, user="root", schedule="* * * * *",
        entry=f"* * * * * root {' '.join(CMD)}",
    )  # fmt: skip
    root = Proc(pid=pid, ppid=pid - 1, start_ticks=start, state="S", comm="python3", uid=0)
    job = Job(
        root_pid=pid, pids=[pid], user="root", cmdline=CMD, start_ticks=start,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[root], origin=origin,
    )  # fmt: skip
    (advised,) = with_advice([job], ScanProtection())
    return advised


def _tick(d: Daemon, now: float, *jobs: Job, exits: dict[int, int] | None = None) -> None:
    d.tracker.update(list(jobs), job_findings(list(jobs)), now, exits=exits)


def _runs(d: Daemon, job: Job, start: float, ticks: int = 3) -> None:
    for i in range(ticks):
        _tick(d, start + 5 * i, job)


def _loop(d: Daemon) -> FindingRecord:
    (rec,) = [f for f in d.db.open_findings() if f.fingerprint.startswith("rogue-job:periodic:")]
    return rec


def _terminate(d: Daemon, job: Job, sig: str, at: float, **extra: object) -> int:
    return d.db.record_action(
        "cli:root", "terminate", f"PID {job.root_pid} (1 process(es))", "ok",
        {"root": [job.root_pid, job.start_ticks], "procs": [], **extra}, at, signature=sig,
    )  # fmt: skip


def _disable(d: Daemon, sig: str, at: float) -> int:
    return d.db.record_action(
        "cli:root", "disable-source", f"cron {FILE}:1", "ok",
        {"source": f"cron {FILE}:1", "done": [f"backup {BACKUP}", f"commented out {FILE}:1"]},
        at, signature=sig, undo=[{"op": "restore"}],
    )  # fmt: skip


def _undo(d: Daemon, sig: str, disable: int, at: float) -> int:
    d.db.mark_undone(disable, at)
    return d.db.record_action(
        "cli:root", "undo", f"action {disable}", "ok",
        {"undid": disable, "done": [], "error": None}, at, signature=sig,
    )  # fmt: skip


def _the_users_flow(d: Daemon) -> tuple[str, Job, int, int]:
    """Run 1 ends by itself, run 2 continues it as the loop's finding; disable-source,
    undo; run 3 (after the undo: its finding names it); then disable-source again and
    terminate run 3. Returns the signature, run 3, and the second disable and the
    terminate's action ids."""
    first = _run(2334, 4900642)
    _runs(d, first, T0)
    _tick(d, T0 + 40, exits={first.root_pid: 0})  # 40 s: ended by itself
    second = _run(2400, 4906648)
    _runs(d, second, T0 + 60)
    rec = _loop(d)
    sig = rec.details["signature"]
    one = _disable(d, sig, T0 + 72)
    _undo(d, sig, one, T0 + 74)
    _tick(d, T0 + 100, exits={second.root_pid: 0})
    third = _run(2466, 4912652)
    _runs(d, third, T0 + 120, ticks=2)  # seen at T0 + 120 and T0 + 125
    assert "re-enabled by ``rogue-watchdog undo" in _loop(d).message  # the run's undo
    again = _disable(d, sig, T0 + 127)
    term = _terminate(d, third, sig, T0 + 128)
    return sig, third, again, term


def test_the_loops_message_is_the_action_logs_once_its_run_and_source_are_stopped(
    tmp_path: Path,
) -> None:
    """(a) BEFORE: the loop's message between runs only lost its run's commands: it kept
    `to stop the source: … disable-source … F6` and the undo's `re-enabled` note."""
    d = _daemon(tmp_path)
    _sig, third, again, term = _the_users_flow(d)
    rec = _loop(d)
    _tick(d, T0 + 130, exits={third.root_pid: SIGTERM})  # the run is gone
    done = d.db.finding(rec.id)
    assert done is not None
    msg = done.message
    assert "; to stop the source: " not in msg, msg
    assert "re-enabled" not in msg, msg
    undo = f"``rogue-watchdog undo{d.tracker.cli_args} {again}``"
    assert (
        f"; its latest run PID {third.root_pid} was stopped by rogue-watchdog terminate "
        f"(action {term} at {local_iso(T0 + 128)}); its source was disabled by "
        f"rogue-watchdog disable-source (action {again} at {local_iso(T0 + 127)}; backup "
        f"`{BACKUP}`); undo with: {undo}"
    ) in msg, msg
    d.db.close()


def test_a_run_an_undo_started_says_its_source_was_disabled_again_while_it_runs(
    tmp_path: Path,
) -> None:
    """(a), the run still going between the second disable-source and the terminate:
    BEFORE, its undo note alone ("re-enabled by undo"), looked up once for the run;
    AFTER, the note goes on with the disable since, read each tick."""
    d = _daemon(tmp_path)
    _sig, third, again, _term = _the_users_flow(d)
    _tick(d, T0 + 130, third)  # still running (the terminate's signals on their way)
    msg = _loop(d).message
    assert msg.endswith(
        "undoing disable-source action 1: an operator's undo, not a failed remediation; "
        f"its source was disabled again by rogue-watchdog disable-source (action {again} "
        f"at {local_iso(T0 + 127)})"
    ), msg
    d.db.close()


def test_a_loop_whose_run_and_source_this_product_stopped_resolves_at_the_next_tick(
    tmp_path: Path,
) -> None:
    """(b) BEFORE: open until the loop had been quiet for 2 x 60 s + 60 s (F6, about 3
    minutes); AFTER: resolved at the first tick that sees its run gone, saying why."""
    d = _daemon(tmp_path)
    _sig, third, again, term = _the_users_flow(d)
    rec = _loop(d)
    _tick(d, T0 + 130, exits={third.root_pid: SIGTERM})
    done = d.db.finding(rec.id)
    assert done is not None and done.resolved_at == T0 + 130
    assert done.message.endswith(
        f"; resolved: its latest run PID {third.root_pid} was stopped by action {term} and "
        f"its source disabled by action {again}, nothing known starts it again (a run back "
        "is paged as a return)"
    ), done.message
    resolves = d.db.conn.execute(
        "SELECT payload_json FROM deliveries WHERE event = 'resolve' AND finding_id = ?",
        (rec.id,),
    ).fetchall()
    assert len(resolves) == 1
    assert "; to stop the source: " not in json.loads(resolves[0][0])["finding"]["message"]
    d.db.close()


def test_a_run_back_after_the_early_resolve_is_one_page(tmp_path: Path) -> None:
    """A return pages once: the disable did not hold (another run of the line), so its
    `respawned` opens, the run's own rogue-job folded into it."""
    d = _daemon(tmp_path)
    _sig, third, _again, _term = _the_users_flow(d)
    _tick(d, T0 + 130, exits={third.root_pid: SIGTERM})
    assert not [f for f in d.db.open_findings() if f.kind == "rogue-job"]
    fourth = _run(2533, 4918656)
    _runs(d, fourth, T0 + 180, ticks=4)
    opens = d.db.conn.execute(
        "SELECT f.kind FROM deliveries d JOIN findings f ON f.id = d.finding_id"
        " WHERE d.event = 'open' AND d.created_at >= ?", (T0 + 180,),
    ).fetchall()  # fmt: skip
    assert [k for (k,) in opens] == ["respawned"]
    d.db.close()


def test_a_terminated_loop_whose_source_still_stands_keeps_waiting(tmp_path: Path) -> None:
    """Unknown or standing source: a terminate alone (the line still active, or
    re-enabled by an undo after the disable) keeps the wait, as before."""
    d = _daemon(tmp_path)
    sig, third, again, _term = _the_users_flow(d)
    _undo(d, sig, again, T0 + 129)  # the source is back
    rec = _loop(d)
    _tick(d, T0 + 130, exits={third.root_pid: SIGTERM})
    still = d.db.finding(rec.id)
    assert still is not None and still.resolved_at is None
    assert "re-enabled by rogue-watchdog undo" in still.message
    # Quiet once no run was seen for twice its cadence (1m) plus 60 s: the last at T0 + 125.
    quiet = T0 + 125 + 2 * rec.details["periodic"]["cadence_s"] + 60
    _tick(d, quiet - 1)
    assert d.db.finding(rec.id).resolved_at is None  # type: ignore[union-attr]
    _tick(d, quiet + 1)
    assert d.db.finding(rec.id).resolved_at == quiet + 1  # type: ignore[union-attr]
    d.db.close()


def _probe(pid: int, start: int, shell: int) -> Job:
    loop = Proc(
        pid=shell, ppid=1, start_ticks=100, state="S", comm="bash", uid=1000,
        cmdline=("bash", "-c", "while true; do python3 /home/u/probe.py; sleep 5; done"),
    )  # fmt: skip
    root = Proc(pid=pid, ppid=shell, start_ticks=start, state="S", comm="python3", uid=1000)
    return Job(
        root_pid=pid, pids=[pid], user="u", cmdline=("python3", "/home/u/probe.py"),
        start_ticks=start, gpu_memory_bytes=None, gpu_uuids=[], lineage=[root, loop],
        origin=ShellOrigin(evidence=("bash",)),
    )  # fmt: skip


def test_a_shell_loop_stopped_with_its_run_resolves_at_the_next_tick(tmp_path: Path) -> None:
    """F3: the terminate stopped the loop's shell with its run (`source_stopped`, from
    :func:`terminate_extras`). BEFORE: open about 2 minutes more; AFTER: the next tick."""
    d = _daemon(tmp_path)
    first = _probe(5001, 1000, 5000)
    _runs(d, first, T0, ticks=2)
    _tick(d, T0 + 10, exits={first.root_pid: 0})
    second = _probe(5002, 1600, 5000)
    _runs(d, second, T0 + 30, ticks=2)
    rec = _loop(d)
    sig = rec.details["signature"]
    how = "shell loop `while true` in PID 5000"
    term = _terminate(d, second, sig, T0 + 36, source_stopped=how)
    _tick(d, T0 + 40, exits={second.root_pid: SIGTERM, 5000: SIGTERM})
    done = d.db.finding(rec.id)
    assert done is not None and done.resolved_at == T0 + 40, done
    assert done.message.endswith(
        f"; resolved: its latest run PID 5002 was stopped by action {term} with what "
        f"restarted it ({how}), nothing known starts it again (a run back is paged as a "
        "return)"
    ), done.message
    d.db.close()


def test_a_shell_loop_whose_shell_the_terminate_left_keeps_waiting(tmp_path: Path) -> None:
    """The same terminate without `source_stopped` (its loop's shell was not part of it,
    or the source is not known): the wait goes on."""
    d = _daemon(tmp_path)
    first = _probe(5001, 1000, 5000)
    _runs(d, first, T0, ticks=2)
    _tick(d, T0 + 10, exits={first.root_pid: 0})
    second = _probe(5002, 1600, 5000)
    _runs(d, second, T0 + 30, ticks=2)
    rec = _loop(d)
    _terminate(d, second, rec.details["signature"], T0 + 36)
    _tick(d, T0 + 40, exits={second.root_pid: SIGTERM})
    still = d.db.finding(rec.id)
    assert still is not None and still.resolved_at is None
    d.db.close()


def test_a_terminate_records_the_shell_loop_it_stops_with_the_job() -> None:
    from rogue_watchdog.model.origin import Restarts

    class _Target:
        service: tuple[()] = ()
        service_note = None
        copies = None

        def __init__(self, restarts: Restarts) -> None:
            self.restarts = restarts

    how = "shell loop `while true` in PID 812"
    stops = _Target(Restarts("at once", how, STOPS_WITH_LOOP, False, shell=(812, 4242)))
    # The shell the advice counts on, checked when the terminate ends (test_loop_left.py).
    shell = {"pid": 812, "start_ticks": 4242, "restarts": f"restarts it: at once, {how}"}
    assert terminate_extras(stops, False) == {"source_stopped": how, "loop_shell": shell}  # type: ignore[arg-type]
    left = _Target(Restarts("at once", how, "stop the loop first: kill -TERM 812"))
    assert "source_stopped" not in terminate_extras(left, False)  # type: ignore[arg-type]
    launcher = _Target(Restarts("unknown", "its launcher PID 7", "stop it", False, (7, 1)))
    assert terminate_extras(launcher, False) == {}  # type: ignore[arg-type]
