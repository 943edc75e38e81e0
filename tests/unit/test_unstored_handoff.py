"""The handoff between a storage outage and the database (issue 34, the lifecycle
simulator's seed 67701): what the ticks kept in memory saw of the jobs is what the
first stored tick after the outage starts from.

The in-memory path records jobs with the tracker's own ``record_jobs`` over rows kept
in memory (:class:`~rogue_watchdog.daemon.tracking.pending.PendingJobs`), stored with
its findings, and a finding about a run of a loop whose periodic finding is stored and
open is that finding's. Each rule here is driven through
:meth:`~rogue_watchdog.daemon.unstored.UnstoredFindings.track`, ``store`` and
:meth:`~rogue_watchdog.daemon.tracker.Tracker.update` with the jobs and findings a scan
would give (no processes); tests/unit/test_sim_faults.py replays the simulator's three
cases."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

import pytest

from rogue_watchdog.config.alerts import AlertSettings
from rogue_watchdog.daemon.tracker import Tracker
from rogue_watchdog.daemon.tracking.pending import PendingJobs
from rogue_watchdog.daemon.unstored import UnstoredFindings
from rogue_watchdog.model import Job
from rogue_watchdog.policy.findings import job_findings
from rogue_watchdog.policy.signature import job_signature
from rogue_watchdog.records import JobRecord, RunRecord
from rogue_watchdog.state import StateDB
from tests.unit.test_pages import _classed
from tests.unit.test_unstored_pages import alerts

T0 = 2_000_000.0


def started(ticks: int) -> float:
    """A run's start time: its start ticks are seconds after T0 - 100 here."""
    return T0 - 100 + ticks


def sig_of(job: Job) -> str:
    return job_signature(job.user, job.cmdline, job.origin)


@pytest.fixture
def db(tmp_path: Path) -> StateDB:
    return StateDB(str(tmp_path / "state"))


def in_memory(
    u: UnstoredFindings,
    db: StateDB,
    tracker: Tracker,
    a: AlertSettings,
    jobs: list[Job],
    now: float,
    exits: dict[int, int] | None = None,
) -> list[str]:
    """One tick that cannot write (the daemon's ``_track_unstored``): the kinds opened."""
    first = tracker.first_signature
    tracker.exits.update(exits or {})  # kept across ticks, stored or not (Tracker.update)
    out = u.track(
        db, jobs, job_findings(jobs), now, alerts=a, host="h", blind=False,
        signature=lambda j: first.get((j.root_pid, j.start_ticks)) or sig_of(j),
        exits=tracker.exits, start_time_s=started,
    )  # fmt: skip
    return [r.kind for r in out.opened]


def test_a_run_beside_the_recorded_one_is_no_return_in_memory(db: StateDB, tmp_path: Path) -> None:
    """Two runs of one job, the ``jobs`` row naming the first; an outage; a person kills
    the first; the second ran all along. Before (seed 67701, i4-seen-before) the memory
    path compared with the row's one run and opened ``respawned`` about the second, a run
    seen before; now it records jobs as a stored tick does (start times, every run)."""
    a = alerts(tmp_path, settle_s=0)
    tracker = Tracker(db, a, "h")
    one, two = _classed("training", 7100, 10), _classed("training", 7200, 20)
    tracker.update([one, two], job_findings([one, two]), T0, started)
    u = UnstoredFindings()
    assert in_memory(u, db, tracker, a, [two], T0 + 5, {7100: signal.SIGTERM}) == []
    assert "respawned" not in [r.kind for r in u.status_records()]  # was: respawned
    assert u.first_signature == {(7200, 20): sig_of(two)}  # kept for the tracker
    u.store(db)
    after = tracker.update([two], job_findings([two]), T0 + 10, started)
    assert after.respawned == []
    assert [r.kind for r in db.open_findings()] == ["rogue-job"]


def test_a_run_killed_during_an_outage_makes_its_return_after_it_a_respawn(
    db: StateDB, tmp_path: Path
) -> None:
    """A job's first run recorded; during an outage a second run starts beside it and is
    killed by a person, the first ends by itself; storage back; the job comes back.
    Before (seed 67701, i9-no-page) the outage's runs were never recorded: the stored
    tick knew only the first run, which exited by itself, took the return for a loop's
    next run and opened no ``respawned`` (no page). Now the killed run is recorded and
    the return is a respawn."""
    a = alerts(tmp_path, settle_s=0)
    tracker = Tracker(db, a, "h")
    one = _classed("training", 7100, 10)
    tracker.update([one], job_findings([one]), T0, started)
    u = UnstoredFindings()
    two = _classed("training", 7200, 105)  # started at T0 + 5, beside the first
    assert in_memory(u, db, tracker, a, [one, two], T0 + 10) == []
    in_memory(u, db, tracker, a, [], T0 + 15, {7200: signal.SIGTERM, 7100: 0})
    u.store(db)
    sig = sig_of(one)
    row = db.job(sig)
    assert row is not None and row.gone_at == T0 + 15
    assert {(r.root_pid, r.last_seen) for r in db.last_runs(sig, T0 + 10)} == {
        (7100, T0 + 10),
        (7200, T0 + 10),
    }
    exits = {7200: signal.SIGTERM, 7100: 0}
    tracker.update([], [], T0 + 20, started, exits=exits)
    back = _classed("training", 7300, 125)
    result = tracker.update([back], job_findings([back]), T0 + 25, started)
    assert [f.root_pid for f in result.respawned] == [7300]  # was []: a loop's next run


def test_a_loops_run_during_an_outage_is_its_stored_periodic_finding(
    db: StateDB, tmp_path: Path
) -> None:
    """A loop's runs make one stored periodic finding; during an outage its next run is
    seen. Before (seed 67701, i4-i5-reopened) memory opened a ``rogue-job`` of its own
    for it (fingerprinted by the run's signature, not the loop's), which resolved once
    stored and was opened again, paged, at the next outage. Now it is the stored loop's
    finding: nothing opens in memory, and the loop's finding goes on once stored."""
    a = alerts(tmp_path, settle_s=0)
    tracker = Tracker(db, a, "h")
    for i in range(2):
        run = _classed("training", 7100 + i, 10 + 5 * i)
        tracker.update([run], job_findings([run]), T0 + 5 * i, started)
        tracker.update([], [], T0 + 5 * i + 1, started, exits={run.root_pid: 0})
    (loop,) = db.open_findings()
    assert loop.fingerprint.startswith("rogue-job:periodic:")
    u = UnstoredFindings()
    for k in range(2):  # two outages, a run each
        run = _classed("training", 7200 + k, 20 + 10 * k)
        assert in_memory(u, db, tracker, a, [run], T0 + 10 + 10 * k) == []  # was: rogue-job
        assert u.status_records() == []
        in_memory(u, db, tracker, a, [], T0 + 11 + 10 * k, {run.root_pid: 0})
        u.store(db)
    assert [(r.id, r.fingerprint) for r in db.open_findings()] == [(loop.id, loop.fingerprint)]
    assert db.conn.execute("SELECT COUNT(*) FROM findings").fetchone()[0] == 1


def _run(pid: int, start: int) -> RunRecord:
    return RunRecord("s", pid, start, "u", ["python3", "t.py"], {}, "unsanctioned", None, 0, 0)


def _row(first_seen: float, sightings: int) -> JobRecord:
    return JobRecord(
        "s", "python3 t.py", "u", "unsanctioned", {}, first_seen, first_seen + 1, 7, 70, [7],
        None, sightings,
    )  # fmt: skip


def test_pending_rows_read_through_and_are_stored_at_their_sightings(db: StateDB) -> None:
    """Reads fall through to the database; a run kept in memory is stored at its first
    and latest sightings; a row marked gone in memory is stored gone."""
    with db.transaction():
        db.upsert_job(_row(T0, 3))
        db.record_run(_run(7, 70), T0)
    p = PendingJobs(db)
    assert p.job("s") == _row(T0, 3)
    p.record_run(_run(8, 80), T0 + 5)
    p.record_run(_run(8, 80), T0 + 9)
    assert [(r.root_pid, r.started_at, r.last_seen) for r in p.last_runs("s", T0)] == [
        (7, T0, T0),
        (8, T0 + 5, T0 + 9),
    ]
    p.mark_gone("s", T0 + 10)
    assert p.present_jobs() == []
    with db.transaction():
        p.store(db)
    p.clear()
    run = db.run(8, 80, "s")
    assert run is not None and (run.started_at, run.last_seen) == (T0 + 5, T0 + 9)
    row = db.job("s")
    assert row is not None and (row.gone_at, row.sightings) == (T0 + 10, 3)
    assert not p


class _Unreadable:
    """A database that cannot even be read."""

    def job(self, signature: str) -> JobRecord | None:
        raise sqlite3.OperationalError("disk I/O error")


def test_a_row_built_while_unreadable_keeps_the_stored_first_sighting(db: StateDB) -> None:
    with db.transaction():
        db.upsert_job(_row(T0, 3))
    p = PendingJobs(_Unreadable())  # type: ignore[arg-type]
    assert p.job("s") is None  # nothing known: recorded afresh in memory
    p.upsert_job(_row(T0 + 50, 1))
    with db.transaction():
        p.store(db)
    row = db.job("s")
    assert row is not None and (row.first_seen, row.sightings) == (T0, 3)
