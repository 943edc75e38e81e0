"""Findings the tick could not store: tracked in memory, alerted from memory, stored
when ``state.db`` can be written again.

A watchdog that goes quiet because its disk is full is worse than none (issue 32,
case 1: on a full or unwritable state directory 96 of 100 rogues were never alerted,
on any sink, the log sink included). When the tick's transaction fails, the daemon
hands this tick's findings here instead: a finding no stored open finding has the
fingerprint of is opened in memory under the id the database would have given it,
its ``open`` alert (after the debounce) and its ``resolve`` alert go to every
accepting sink through the :class:`~watchdog.daemon.alerts.memory.MemorySpool`, each
sink once, and ``status`` lists it as not persisted. When a tick can write again,
:meth:`UnstoredFindings.store` writes these findings with their alert state first, so
the tracker takes each for one it already alerted on: no second ``open``.

What is not done from memory: reminders, ``respawned`` findings (they need the jobs
table), the findings already stored (their alerts wait for the database), and actions
(nothing is acted on without a record: the enforcers do not run on such a tick).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from watchdog.config.alerts import AlertSettings
from watchdog.daemon.alerts.alert import AlertEvent
from watchdog.daemon.alerts.memory import MemorySpool
from watchdog.daemon.tracking.fold import fold, group
from watchdog.daemon.tracking.naming import with_own_id
from watchdog.daemon.tracking.reminders import alert_labels
from watchdog.daemon.tracking.spool import deliveries
from watchdog.model import Finding, Job
from watchdog.plugins import TrackResult
from watchdog.state import FindingRecord, StateDB


class UnstoredFindings:
    """The daemon's findings that are not (yet) in ``state.db``.

    Attributes:
        spool: Their alerts, waiting for the delivery worker.
        open: Open findings kept in memory, by fingerprint.
        resolved: Findings opened and resolved in memory, not stored yet.
        next_id: The id the next finding opened in memory gets (past every id the
            database gave, as last read).
        stored_open: The stored open findings (fingerprint → id) as last known: used
            when the database cannot even be read.
    """

    def __init__(self) -> None:
        self.spool = MemorySpool()
        self.open: dict[str, FindingRecord] = {}
        self.resolved: list[FindingRecord] = []
        self.next_id = 1
        self.stored_open: dict[str, int] = {}

    def pending(self) -> bool:
        """Whether findings wait to be stored."""
        return bool(self.open or self.resolved)

    def read(self, db: StateDB) -> None:
        """Note the stored open findings and the next id, where the database can be
        read (at start; again on each tick that cannot write)."""
        try:
            self.stored_open = db.open_finding_ids()
            self.next_id = max(self.next_id, db.next_finding_id())
        except Exception:  # unreadable too: keep what was last known
            return

    def note(self, track: TrackResult) -> None:
        """Keep :attr:`stored_open` and :attr:`next_id` in step with a stored tick."""
        for rec in track.opened:
            self.stored_open[rec.fingerprint] = rec.id
            self.next_id = max(self.next_id, rec.id + 1)
        for rec in track.resolved:
            if self.stored_open.get(rec.fingerprint) == rec.id:
                del self.stored_open[rec.fingerprint]

    def track(
        self,
        db: StateDB,
        jobs: Iterable[Job],
        findings: Iterable[Finding],
        now: float,
        *,
        signature: Callable[[Job], str],
        alerts: AlertSettings,
        host: str,
        blind: bool,
    ) -> TrackResult:
        """Track one tick's findings in memory and queue the alerts they are due.

        Args:
            db: The state database (only read, where it can be).
            jobs: This scan's tracked jobs.
            findings: Every finding of this tick.
            now: POSIX time of the tick.
            signature: A job's signature (the tracker's: a job keeps its first).
            alerts: The debounce (``min_lifetime_s``) and the sinks.
            host: Host name put into alert payloads.
            blind: Some GPU's processes could not be seen: nothing resolves.

        Returns:
            The findings alerted (``opened``) and resolved in memory this tick.
        """
        self.read(db)
        signatures = {j.root_pid: signature(j) for j in jobs if j.verdict != "ignored"}
        groups = group(findings, signatures)
        opened: list[FindingRecord] = []
        resolved: list[FindingRecord] = []
        for fp, found in groups.items():
            if fp in self.stored_open:
                continue  # a stored finding: its alerts wait for the database
            rec = self._sighting(fp, found, now)
            if rec.last_alert_at is None and now - rec.opened_at >= alerts.min_lifetime_s:
                f = fold(found, rec)[0]
                rec = dataclasses.replace(
                    rec,
                    last_alert_at=now,
                    alerted_instances=rec.instances,
                    alerted_pids=sorted({x.root_pid for x in found if x.root_pid is not None}),
                    alerted_routing=alert_labels(host, rec.id, f),
                )
                self._queue("open", rec, now, alerts, host)
                opened.append(rec)
            self.open[fp] = rec
        for fp in [fp for fp in self.open if fp not in groups and not blind]:
            rec = dataclasses.replace(self.open.pop(fp), resolved_at=now)
            if rec.last_alert_at is not None:
                self._queue("resolve", rec, now, alerts, host)
            self.resolved.append(rec)
            resolved.append(rec)
        return TrackResult(opened=opened, resolved=resolved, signatures=signatures)

    def _sighting(self, fp: str, found: list[Finding], now: float) -> FindingRecord:
        """The memory record of one fingerprint after this tick's sighting."""
        rec = self.open.get(fp)
        f, _pids = fold(found, rec)
        if rec is None:
            fid = self.next_id
            self.next_id += 1
            return FindingRecord(
                fid, fp, f.kind, f.severity, with_own_id(f, fid), f.root_pid, dict(f.details),
                now, now, 1, None, None, len(found),
            )  # fmt: skip
        return dataclasses.replace(
            rec,
            message=with_own_id(f, rec.id),
            root_pid=f.root_pid,
            details=dict(f.details),
            last_seen=now,
            seen_count=rec.seen_count + 1,
            instances=len(found),
        )

    def _queue(
        self, event: AlertEvent, rec: FindingRecord, now: float, alerts: AlertSettings, host: str
    ) -> None:
        for sink, payload in deliveries(event, rec, host, now, alerts.sinks):
            self.spool.put(rec.id, sink, event, payload, now)

    def store(self, db: StateDB) -> list[str]:
        """Write the findings kept in memory to ``state.db`` (one transaction), with
        their alert state, so none is alerted again; their alerts still queued stay in
        :attr:`spool` (sent once from there).

        Returns:
            One line per finding stored (for the log).

        Raises:
            sqlite3.Error, OSError: The database still cannot be written (nothing is
                forgotten; the next tick tries again).
        """
        lines = []
        with db.transaction():
            stored = db.open_finding_ids()
            for rec in [*self.resolved, *self.open.values()]:
                if rec.resolved_at is None and rec.fingerprint in stored:
                    continue  # opened in the database meanwhile: that one stands
                fid = db.store_finding(rec)
                lines.append(f"F{rec.id}" if fid == rec.id else f"F{rec.id} as F{fid}")
        self.open, self.resolved = {}, []
        return lines

    def status_records(self) -> list[FindingRecord]:
        """The open findings kept in memory, oldest first (``status``: not persisted)."""
        return sorted(self.open.values(), key=lambda r: r.id)
