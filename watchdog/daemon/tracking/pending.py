"""The ``jobs`` and ``job_runs`` rows of ticks that could not write them: kept in memory
while ``state.db`` refuses writes, read through to the database, stored with the
findings kept in memory when it takes writes again.

The in-memory path (:mod:`watchdog.daemon.unstored`) records each tick's jobs with the
tracker's own :func:`~.jobs.record_jobs` over a :class:`PendingJobs`, so a return during
an outage is told by the same rule as a stored tick's (the start time of a run seen
beside the one recorded, every instance last seen, how each ended), and the next
stored tick starts from what the outage saw. Before (seed 67701), the outage's runs
were never recorded: a run that ran all along beside the recorded one was taken for a
return in memory (``respawned`` about a run seen before), and a run killed during the
outage was missing when its job came back after it, which was taken for a loop's
next run (no ``respawned``, no page).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from ...state import ActionRecord, JobRecord, RunRecord, StateDB

Ident = tuple[int, int]  # a process's identity: (PID, start ticks)


class JobStore(Protocol):
    """What :func:`~.jobs.record_jobs` reads and writes: :class:`StateDB`, or the rows
    kept in memory over it (:class:`PendingJobs`); each method as :class:`StateDB`'s."""

    def job(self, signature: str) -> JobRecord | None: ...

    def present_jobs(self) -> list[JobRecord]: ...

    def upsert_job(self, rec: JobRecord) -> None: ...

    def record_run(self, rec: RunRecord, now: float) -> None: ...

    def last_runs(self, signature: str, last_seen: float) -> list[RunRecord]: ...

    def mark_gone(self, signature: str, now: float) -> None: ...

    def actions_for(self, signature: str, limit: int = 200) -> list[ActionRecord]: ...


@dataclasses.dataclass
class _Run:
    """One run seen in memory: its first and latest sightings."""

    first: RunRecord
    first_at: float
    last: RunRecord
    last_at: float


class PendingJobs:
    """The job rows and runs ticks recorded while the database refused writes.

    Reads fall through to the database (an unreadable one reads as nothing recorded);
    writes stay here until :meth:`store`. Every method :class:`JobStore` names.

    Args:
        db: The state database (only read here).
    """

    def __init__(self, db: StateDB | None = None) -> None:
        self.db = db
        self.jobs: dict[str, JobRecord] = {}
        self.runs: dict[tuple[str, int, int], _Run] = {}
        # Signatures whose row here was not built on a stored one (the database could
        # not be read then): merged with the stored row when stored.
        self._unread: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.jobs or self.runs)

    def job(self, signature: str) -> JobRecord | None:
        """The row of ``signature``: the one kept here, else the stored one."""
        if signature in self.jobs:
            return self.jobs[signature]
        try:
            return self.db.job(signature) if self.db is not None else None
        except Exception:  # unreadable: nothing recorded, as far as this tick knows
            self._unread.add(signature)
            return None

    def present_jobs(self) -> list[JobRecord]:
        """The rows not marked gone, here or stored, oldest first."""
        try:
            stored = self.db.present_jobs() if self.db is not None else []
        except Exception:
            stored = []
        rows = {r.signature: r for r in stored}
        rows.update(self.jobs)
        return sorted((r for r in rows.values() if r.gone_at is None), key=lambda r: r.first_seen)

    def upsert_job(self, rec: JobRecord) -> None:
        """Keep ``rec`` as the row of its signature."""
        self.jobs[rec.signature] = rec

    def record_run(self, rec: RunRecord, now: float) -> None:
        """Keep a run's sighting at ``now``."""
        key = (rec.signature, rec.root_pid, rec.start_ticks)
        run = self.runs.get(key)
        if run is None:
            self.runs[key] = _Run(rec, now, rec, now)
        else:
            run.last, run.last_at = rec, now

    def last_runs(self, signature: str, last_seen: float) -> list[RunRecord]:
        """The runs of ``signature`` last seen at or after ``last_seen``, stored or
        seen here (a run seen here carries its latest sighting), oldest first."""
        try:
            stored = self.db.last_runs(signature, last_seen) if self.db is not None else []
        except Exception:
            stored = []
        by_id: dict[Ident, RunRecord] = {(r.root_pid, r.start_ticks): r for r in stored}
        for (sig, pid, start), run in self.runs.items():
            if sig != signature or run.last_at < last_seen:
                continue
            was = by_id.get((pid, start))
            started = was.started_at if was is not None else run.first_at
            by_id[(pid, start)] = dataclasses.replace(
                run.last, started_at=started, last_seen=run.last_at
            )
        return sorted(by_id.values(), key=lambda r: (r.started_at, r.root_pid))

    def mark_gone(self, signature: str, now: float) -> None:
        """Keep the row of ``signature`` marked gone at ``now``."""
        rec = self.job(signature)
        if rec is not None:
            self.jobs[signature] = dataclasses.replace(rec, gone_at=now)

    def actions_for(self, signature: str, limit: int = 200) -> list[ActionRecord]:
        """The stored actions of ``signature`` (none are taken without a record); an
        unreadable database reads as none."""
        try:
            return self.db.actions_for(signature, limit) if self.db is not None else []
        except Exception:
            return []

    def store(self, db: StateDB) -> None:
        """Write the runs and rows kept here (inside the caller's transaction), each run
        at its first and latest sighting; a row built while the database could not be
        read keeps the stored row's first sighting and count. Nothing is cleared here
        (:meth:`clear`, once the transaction committed).

        Raises:
            sqlite3.Error, OSError: The database cannot be written.
        """
        for run in self.runs.values():
            db.record_run(run.first, run.first_at)
            if run.last_at != run.first_at:
                db.record_run(run.last, run.last_at)
        for sig, rec in self.jobs.items():
            was = db.job(sig) if sig in self._unread else None
            if was is not None:
                rec = dataclasses.replace(
                    rec,
                    first_seen=min(rec.first_seen, was.first_seen),
                    sightings=max(rec.sightings, was.sightings),
                )
            db.upsert_job(rec)

    def bound(self, limit: int) -> int:
        """Keep at most ``limit`` runs and ``limit`` job rows: the runs last seen
        longest ago go first, then the rows marked gone longest ago, then the rows seen
        longest ago. What goes is never stored: a return of its job after the outage may
        then be taken for a loop's next run (the cost of a bounded memory, counted).

        Args:
            limit: The most runs, and the most rows, kept.

        Returns:
            How many runs and rows were dropped.
        """
        dropped = 0
        if len(self.runs) > limit:
            order = sorted(self.runs, key=lambda k: (self.runs[k].last_at, k))
            for key in order[: len(self.runs) - limit]:
                del self.runs[key]
                dropped += 1
        if len(self.jobs) > limit:
            rows = self.jobs
            signatures = sorted(
                rows,
                key=lambda sig: (
                    rows[sig].gone_at is None,
                    rows[sig].gone_at or rows[sig].last_seen,
                    sig,
                ),
            )
            for sig in signatures[: len(rows) - limit]:
                del rows[sig]
                self._unread.discard(sig)
                dropped += 1
        return dropped

    def clear(self) -> None:
        """Forget what was kept (stored)."""
        self.jobs, self.runs, self._unread = {}, {}, set()
