"""Findings the tick could not store: tracked in memory, alerted from memory, stored
when ``state.db`` can be written again.

A watchdog that goes quiet because its disk is full is worse than none (issue 32,
case 1: on a full or unwritable state directory 96 of 100 rogues were never alerted,
on any sink, the log sink included). When the tick's transaction fails, the daemon
hands this tick's findings here instead: a finding no stored open finding has the
fingerprint of is opened in memory under the id the database would have given it,
its ``open`` alert and its ``resolve`` alert go to every accepting sink through the
:class:`~watchdog.daemon.alerts.memory.MemorySpool`, each sink once, and ``status``
lists it as not persisted.

The page-once rules of the stored findings hold here too (issue 35): the ``open``
waits for the debounce and for the job's first complete picture (``alerts.settle_s``,
:func:`~watchdog.daemon.tracking.reminders.alert_due`; a return's ``respawned`` too), and
one held back that resolves still gets it only where this product's own action stopped
its run (the tracker's rule); the finding of a run that ended by itself
(its exit status says so) stays open for
:data:`~watchdog.daemon.tracking.periodic.RETURN_WINDOW_S`, and a run of the same job
back within it continues that finding (same id, no second open), as a loop's runs do;
a run stopped by a signal whose job is back is resolved, and the run back is a finding
of its own (paged), and opens ``respawned`` as a stored tick would
(:meth:`UnstoredFindings._returns`): before, a killed run back during an outage was
paged as a new ``rogue-job`` only, and its ``respawned`` came when storage did.

The jobs and their runs are recorded as a stored tick records them, by the tracker's own
:func:`~watchdog.daemon.tracking.jobs.record_jobs`, into rows kept in memory over the
database (:class:`~watchdog.daemon.tracking.pending.PendingJobs`), and stored with the
findings: what is a return, and which runs were seen before, is decided by one rule
across an outage, and the first stored tick after it starts from what the outage saw
(seed 67701: a run beside the recorded one taken for a return in memory; a run killed
during the outage unknown to the tick its job came back in, which took the return for a
loop's next run and paged nothing). A finding about a run of a loop whose periodic
finding is stored and open is that finding's, as a stored tick folds it
(:func:`~watchdog.daemon.tracking.periodic.as_periodic`): its alerts wait for the
database (seed 67701: a loop's run seen during an outage was opened in memory as a
``rogue-job`` of its own, resolved once stored, and opened again, paged, under a new id
at the next outage).

When a tick can write again, :meth:`UnstoredFindings.store` writes these findings with
their alert state first, so the tracker takes each for one it already alerted on: no
second ``open``.

A restart during the outage keeps what was paged (issue 32, follow-up): the open
findings already paged from memory, with the alerts kept here not yet sent, are written to a
file beside the status socket (:mod:`~watchdog.daemon.outagefile`) after each tick
kept here, and the next daemon takes them back (:meth:`UnstoredFindings.adopt`) as
paged: the running rogue is not paged again, and its finding is stored under the id
it was paged with. Where there is no such account (nothing could be written there
either, or the file is not to be trusted), a page this daemon sends from memory before
it first stores a tick, about a run older than itself, says that it may repeat an
earlier one (:attr:`UnstoredFindings.unknown_before`): never silent, and never a
repeat that does not say so.

The memory is bounded (:data:`MAX_FINDINGS`, :data:`MAX_RUNS`): past the cap the
least useful entries go first (:meth:`UnstoredFindings._bound`), counted in
:attr:`UnstoredFindings.dropped`, said once in the log and in ``status``.

What is not done from memory: reminders, the findings already stored (their alerts wait
for the database), and actions (nothing is acted on without a record: the enforcers do
not run on such a tick). A ``respawned`` opened in memory is stored with its alert
state like the rest: the tracker, recording the return once it can write, takes it for
the one it would open (same fingerprint and run), so it is not paged again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import cast

from ..config.alerts import AlertSettings
from ..model import Finding, Job, Severity
from ..plugins import TrackResult
from ..state import FindingRecord, SourceUndo, StateDB
from .alerts.alert import AlertEvent, local_iso
from .alerts.memory import MemorySpool
from .outagefile import OutageAccount
from .tracking.current import as_opened, without_run_commands
from .tracking.fold import fold, group, same_job
from .tracking.incident import (
    FOLDED_KINDS,
    Anchor,
    foldable_kinds,
    folded_ids,
    folded_into,
    louder,
    return_signature,
)
from .tracking.jobs import Ident, record_jobs
from .tracking.naming import with_own_id
from .tracking.pending import PendingJobs
from .tracking.periodic import PERIODIC_KINDS, RETURN_WINDOW_S, gap_text, loop_fingerprint
from .tracking.reminders import alert_due, alert_labels, record_labels
from .tracking.spool import deliveries

#: The most findings (open and resolved) kept in memory while the database refuses
#: writes. Each is about 2 KB (record, details, message: bench/outage_memory.py, 4.1 MB at
#: the cap); with :data:`MAX_RUNS`, a few MB however long the outage lasts.
MAX_FINDINGS = 2000
#: The most job runs and job rows (each) kept in memory over the database.
MAX_RUNS = 4000
#: Said in a page this daemon could not tell from an earlier one's (no outage account).
MAY_REPEAT = (
    "may repeat an earlier page: the daemon restarted while the state database could not "
    "be written and could not learn what the one before it paged"
)


@dataclasses.dataclass
class Dropped:
    """What the bound on the outage memory dropped since it was last stored.

    Attributes:
        findings: Findings dropped (resolved ones first).
        paged: Of those, open ones already paged: if their run still runs, they are
            opened and paged again.
        runs: Job runs and job rows dropped (not stored when the database is back).
        said: Whether the log said so already (once per outage).
    """

    findings: int = 0
    paged: int = 0
    runs: int = 0
    said: bool = False

    def __bool__(self) -> bool:
        return bool(self.findings or self.runs)


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
        gone: Fingerprint → when the job of an open finding kept in memory was first
            not seen, and whether its run had ended by itself then (it waits for the
            job to come back).
        settle_due: When the earliest open held back by the settle is due (tick time);
            None when none waits.
        unknown_before: Set (to the daemon's start) while no account of what an earlier
            daemon paged from memory could be read and no tick was stored since: a page
            about a run that started before it says :data:`MAY_REPEAT`.
        adopted: Ids of the findings taken back from the outage file at start.
        dropped: What the bound dropped (:meth:`_bound`).
    """

    def __init__(self) -> None:
        self.spool = MemorySpool()
        self.open: dict[str, FindingRecord] = {}
        self.resolved: list[FindingRecord] = []
        self.next_id = 1
        self.stored_open: dict[str, int] = {}
        self.gone: dict[str, tuple[float, bool]] = {}
        self.settle_due: float | None = None
        # This tick's: signature → its open respawned finding (in memory or stored).
        self.anchors: dict[str, Anchor] = {}
        self.foldable: frozenset[str] = FOLDED_KINDS
        # The jobs and runs the ticks in memory recorded (stored with the findings),
        # and the signature each job root got first (the tracker's, kept for it).
        self.jobs = PendingJobs()
        self.first_signature: dict[Ident, str] = {}
        self.source_undos: dict[Ident, SourceUndo | None] = {}
        # This tick's: PID → wait(2) status of the processes seen exiting, and the
        # state database (read only: whether an action of ours stopped a run).
        self.exits: Mapping[int, int] = {}
        self.db: StateDB | None = None
        self.unknown_before: float | None = None
        self.adopted: list[int] = []
        self.dropped = Dropped()
        self._start_time_s: Callable[[int], float | None] | None = None

    def adopt(self, account: OutageAccount | None, db: StateDB, started_at: float) -> None:
        """Take back what an earlier daemon of this boot paged from memory (the outage
        file, read at start): its open findings as paged, under their ids, and their
        alerts not yet sent, queued again. A finding the database has open, or one whose
        id it gave out since (stored when writes came back), is not taken.

        Args:
            account: :func:`~watchdog.daemon.outagefile.read_outage`'s answer; None: no
                account (sets :attr:`unknown_before`).
            db: The state database (only read, where it can be).
            started_at: POSIX time this daemon started.
        """
        if account is None:
            self.unknown_before = started_at
            return
        self.read(db)
        try:
            floor: int | None = db.next_finding_id()
        except Exception:  # unreadable: the file is all there is to go by
            floor = None
        for rec in account.findings:
            if rec.fingerprint in self.stored_open or (floor is not None and rec.id < floor):
                continue
            if rec.fingerprint in self.open:
                continue
            self.open[rec.fingerprint] = rec
            self.adopted.append(rec.id)
        # Past every id the earlier daemon gave out (paged, maybe never stored).
        self.next_id = max(self.next_id, account.next_id, *(i + 1 for i in self.adopted))
        held = {r.id for r in account.findings}
        for fid, sink, event, payload, queued_at in account.queued:
            # A paged finding's alert, or a resolved one's resolve not sent yet (the
            # finding itself is over: only its alert is owed), unless stored since.
            owed = fid not in held and (floor is None or fid >= floor)
            if fid in self.adopted or owed:
                self.spool.put(fid, sink, event, payload, queued_at)
        self._bound()

    def account(self, paged: list[FindingRecord] | None = None) -> OutageAccount:
        """What the outage file keeps (:mod:`~watchdog.daemon.outagefile`): the open
        findings already paged, and every alert kept in memory not sent yet (a resolved
        finding's resolve too).

        Args:
            paged: Those findings as the last tick left them (the delivery thread
                passes them: it must not read :attr:`open` while a tick changes it);
                None reads :attr:`open` (the loop thread).
        """
        if paged is None:
            paged = sorted(
                (r for r in self.open.values() if r.last_alert_at is not None),
                key=lambda r: r.id,
            )
        queued = [
            (d.finding_id, d.sink, d.event, d.payload, d.created_at) for d in self.spool.rows()
        ]
        return OutageAccount(paged, queued, self.next_id)

    def pending(self) -> bool:
        """Whether findings, or the jobs and runs ticks saw, wait to be stored."""
        return bool(self.open or self.resolved or self.jobs)

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
        self.unknown_before = None  # a stored tick: the database knows from now on
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
        exits: Mapping[int, int] | None = None,
        gpu_lists: bool = True,
        unread: Callable[[str], bool] | None = None,
        learning: bool = False,
        start_time_s: Callable[[int], float | None] | None = None,
        alive: Callable[[int, int], bool] | None = None,
    ) -> TrackResult:
        """Track one tick's findings in memory and queue the alerts they are due.

        Args:
            db: The state database (only read, where it can be).
            jobs: This scan's tracked jobs.
            findings: Every finding of this tick.
            now: POSIX time of the tick.
            signature: A job's signature (the tracker's: a job keeps its first).
            alerts: The debounce (``min_lifetime_s``), the settle and the sinks.
            host: Host name put into alert payloads.
            blind: Some GPU's processes could not be seen: nothing resolves.
            exits: PID → wait(2) status of the processes seen exiting (the tracker's,
                kept across ticks): whether a job's run ended by itself.
            gpu_lists: The scan read NVML's process lists. Without them the settle
                still holds a job's first page (its whole ``alerts.settle_s``).
            unread: True for the fingerprint of a finding whose source could not be
                read this tick: it stays open (the tracker's ``unread``).
            learning: In the learning period: a ``respawned`` opens at ``info``.
            start_time_s: Converts a job's start ticks to POSIX seconds (the tracker's
                :meth:`~watchdog.daemon.tracker.Tracker.update`): a run that started
                before its signature was last seen is no return.
            alive: ``(pid, start_ticks) -> bool``, whether that process still runs: while
                ``blind``, a job not seen whose root runs is not marked gone.

        Returns:
            The findings alerted (``opened``) and resolved in memory this tick.
        """
        self.read(db)
        findings = list(findings)
        exits = exits or {}
        self.exits, self.db, self._start_time_s = exits, db, start_time_s
        policy, self.settle_due = alerts, None  # the settle holds without NVML's lists too
        tracked = [j for j in jobs if j.verdict != "ignored"]
        signatures = {j.root_pid: signature(j) for j in tracked}
        respawns = self._returns(
            db, tracked, signature, exits, now, start_time_s, alive if blind else None
        )
        if learning:
            respawns = [dataclasses.replace(f, severity="info") for f in respawns]
        findings = self._stored_loops(findings, signatures)
        # A return's respawned first: the findings about it are folded into it (one
        # incident, one page: tracking/incident.py), as the tracker does.
        self.foldable = foldable_kinds(alerts.sinks)
        respawns = self._loudest(respawns, findings, signatures, self.foldable)
        groups = group([*respawns, *findings], signatures)
        self.anchors = self._anchors()
        opened: list[FindingRecord] = []
        resolved: list[FindingRecord] = []
        for fp, found in groups.items():
            if fp in self.stored_open:
                continue  # a stored finding: its alerts wait for the database
            was = self.open.get(fp)
            gone = self.gone.pop(fp, None)  # a run of it is here (a loop's next run)
            ended = gone[1] if gone is not None else self._ended_by_itself(was, exits)
            if was is not None and not same_job(was, found) and not ended:
                # Its run was stopped (or nothing says how it ended) and another is here:
                # that one is a finding of its own and pages, as a stored one would.
                self.open.pop(fp)
                self._resolve(was, now, alerts, host, False, now, opened, resolved)
                was = None
            rec = self._sighting(fp, found, now)
            if rec.kind == "respawned" and (sig := return_signature(rec.kind, fp)) is not None:
                self.anchors[sig] = Anchor(rec.id, rec.severity)
            if rec.last_alert_at is None and self._folded(rec) is None:
                f = fold(found, was)[0]
                pids = sorted({x.root_pid for x in found if x.root_pid is not None})
                labels = alert_labels(host, rec.id, f)
                previous = record_labels(host, was) if was is not None else None
                if alert_due(was, f, len(found), pids, labels, now, policy, previous) is None:
                    self._settling(rec.opened_at, policy)
                else:
                    rec = self._alerted(rec, now, pids, labels)
                    self._queue("open", rec, now, alerts, host)
                    opened.append(rec)
            self.open[fp] = rec
        self._resolve_gone(
            groups, set(signatures.values()), now, blind, unread, exits, alerts, host,
            opened, resolved,
        )  # fmt: skip
        self._held_returns(now, policy, host, opened)
        self._bound()
        return TrackResult(opened=opened, resolved=resolved, signatures=signatures)

    def _held_returns(
        self, now: float, policy: AlertSettings, host: str, opened: list[FindingRecord]
    ) -> None:
        """Queue the open of each ``respawned`` kept in memory whose settle is over (it
        is reported only at the tick of its return: the tracker's ``_held_returns``).
        In memory it waits its whole ``alerts.settle_s``: nothing is folded into it
        here for a complete picture to come from."""
        for rec in list(self.open.values()):
            if rec.kind != "respawned" or rec.last_alert_at is not None:
                continue
            age = now - rec.opened_at
            if age < policy.min_lifetime_s or age < policy.settle_s:
                self._settling(rec.opened_at, policy)
                continue
            pids = [rec.root_pid] if rec.root_pid is not None else []
            rec = self._alerted(rec, now, pids, record_labels(host, rec))
            self._queue("open", rec, now, policy, host)
            self.open[rec.fingerprint] = rec
            opened.append(rec)

    def _resolve_gone(
        self,
        groups: Mapping[str, list[Finding]],
        present: set[str],
        now: float,
        blind: bool,
        unread: Callable[[str], bool] | None,
        exits: Mapping[int, int],
        alerts: AlertSettings,
        host: str,
        opened: list[FindingRecord],
        resolved: list[FindingRecord],
    ) -> None:
        """Resolve the open findings no finding of this tick is about (not while blind,
        nor one whose source could not be read, one a loop may bring back, or one a
        finding folded into it holds open), appending to ``opened``/``resolved``."""
        leaving: list[tuple[str, float, bool]] = []
        for fp in [
            fp
            for fp in self.open
            if fp not in groups and not blind and not (unread is not None and unread(fp))
        ]:
            rec = self.open[fp]
            if rec.kind == "respawned" and rec.details.get("signature") in present:
                continue  # open while the ghost that came back runs, as a stored one
            gone_at, ended = self.gone.setdefault(fp, (now, self._ended_by_itself(rec, exits)))
            if ended and now - gone_at <= RETURN_WINDOW_S:
                continue  # its job may come back (a loop): the same finding then
            leaving.append((fp, gone_at, ended))
        going = {fp for fp, _g, _e in leaving}
        holding = {
            anchor.finding_id
            for fp, rec in self.open.items()
            if fp not in going and (anchor := self._folded(rec)) is not None
        }
        for fp, gone_at, ended in leaving:
            rec = self.open[fp]
            if rec.id in holding:
                continue  # a finding folded into it stays open: it does too
            self.gone.pop(fp)
            self.open.pop(fp)
            self._resolve(rec, now, alerts, host, ended, gone_at, opened, resolved)

    def _anchors(self) -> dict[str, Anchor]:
        """Signature → its open ``respawned`` finding, in memory or stored (a stored
        one's severity is not known here: taken as ``high``, its default)."""
        out: dict[str, Anchor] = {}
        for fp, fid in self.stored_open.items():
            sig = return_signature("respawned", fp) if fp.startswith("respawned:") else None
            if sig is not None:
                out[sig] = Anchor(fid, "high")
        for fp, rec in self.open.items():
            sig = return_signature(rec.kind, fp) if rec.kind == "respawned" else None
            if sig is not None:
                out[sig] = Anchor(rec.id, rec.severity)
        return out

    def _folded(self, rec: FindingRecord) -> Anchor | None:
        """The open ``respawned`` finding ``rec`` is folded into (no page of its own)."""
        alerted = rec.last_alert_at is not None
        return folded_into(
            rec.kind, rec.fingerprint, rec.severity, alerted, self.anchors, self.foldable
        )

    @staticmethod
    def _loudest(
        respawns: list[Finding],
        findings: list[Finding],
        signatures: Mapping[int, str],
        foldable: frozenset[str],
    ) -> list[Finding]:
        """Each ``respawned`` at the highest severity of this tick's findings about its
        return (those folded into it), as the tracker opens it."""
        loudest: dict[str, str] = {}
        for fp, found in group(findings, dict(signatures)).items():
            sig = return_signature(found[0].kind, fp) if found[0].kind in foldable else None
            for f in found if sig is not None else ():
                loudest[sig or ""] = louder(f.severity, loudest.get(sig or "", "info"))
        out = []
        for r in respawns:
            sig = r.details.get("signature")
            was = loudest.get(sig, r.severity) if isinstance(sig, str) else r.severity
            loud = louder(r.severity, was)
            out.append(dataclasses.replace(r, severity=cast("Severity", loud)))
        return out

    def _returns(
        self,
        db: StateDB,
        jobs: list[Job],
        signature: Callable[[Job], str],
        exits: Mapping[int, int],
        now: float,
        start_time_s: Callable[[int], float | None] | None,
        alive: Callable[[int, int], bool] | None,
    ) -> list[Finding]:
        """Record this tick's jobs as a stored tick does, into :attr:`jobs` (rows kept in
        memory over the database), and return the ``respawned`` findings of its returns,
        as :func:`record_jobs` opens them: a rogue job that may train back after the runs
        of it seen last (every instance) were all gone and were not each seen to exit by
        themselves (a signal, our terminate, no evidence); a run that started before its
        signature was last seen ran all along (no return).

        Args:
            db: The state database (read where it can be).
            jobs: This scan's tracked jobs (not ``ignored``).
            signature: A job's signature (the tracker's).
            exits: PID → wait(2) status of the processes seen exiting.
            now: POSIX time of the tick.
            start_time_s: As for :meth:`track`.
            alive: As for :meth:`track`, given while blind.
        """
        self.jobs.db = db
        firsts = {(j.root_pid, j.start_ticks): signature(j) for j in jobs}
        seen = record_jobs(
            self.jobs, jobs, now, firsts, self.source_undos, start_time_s, alive, exits
        )
        self.first_signature, self.source_undos = seen.first_signature, seen.source_undos
        return seen.respawns

    def _stored_loops(
        self, findings: list[Finding], signatures: Mapping[int, str]
    ) -> list[Finding]:
        """``findings`` with each about a run of a loop whose periodic finding is stored
        and open made that finding's (its fingerprint), as a stored tick folds it: its
        alerts wait for the database, as every stored finding's do."""
        out = []
        for f in findings:
            sig = signatures.get(f.root_pid) if f.root_pid is not None else None
            fp = loop_fingerprint(f, sig)
            if fp is not None and fp in self.stored_open:
                f = dataclasses.replace(
                    f, details={**f.details, "fingerprint": fp.partition(":")[2]}
                )
            out.append(f)
        return out

    def _resolve(
        self,
        rec: FindingRecord,
        now: float,
        alerts: AlertSettings,
        host: str,
        ended: bool,
        gone_at: float,
        opened: list[FindingRecord],
        resolved: list[FindingRecord],
    ) -> None:
        """Resolve one finding kept in memory; queue its ``resolve`` (after the open it
        still owes: :meth:`_owes_open`) when it was alerted."""
        rec = dataclasses.replace(rec, resolved_at=now)
        if ended:
            rec = dataclasses.replace(
                rec,
                message=f"{rec.message}; ended by itself at {local_iso(gone_at)}, not "
                f"back within {gap_text(RETURN_WINDOW_S)}",
            )
        if (
            rec.last_alert_at is None
            and self._folded(rec) is None
            and self._owes_open(rec, now, alerts, ended)
        ):
            pids = [rec.root_pid] if rec.root_pid is not None else []
            rec = self._alerted(rec, now, pids, record_labels(host, rec))
            self._queue("open", as_opened(rec), now, alerts, host)
            opened.append(rec)
        rec = dataclasses.replace(rec, message=without_run_commands(rec.message))
        if rec.last_alert_at is not None:
            self._queue("resolve", rec, now, alerts, host)
        self.resolved.append(rec)
        resolved.append(rec)

    def _alerted(
        self, rec: FindingRecord, now: float, pids: list[int], labels: dict[str, str]
    ) -> FindingRecord:
        if self._may_repeat(rec):
            rec = dataclasses.replace(
                rec,
                message=f"{rec.message} ({MAY_REPEAT})",
                details={**rec.details, "may_repeat": True},
            )
        return dataclasses.replace(
            rec,
            last_alert_at=now,
            alerted_instances=rec.instances,
            alerted_pids=pids,
            alerted_routing=labels,
        )

    def _may_repeat(self, rec: FindingRecord) -> bool:
        """Whether an earlier daemon may have paged ``rec`` already, as far as this one
        can tell: no outage account was read at start, no tick stored since, and its run
        started before this daemon did (or when is not known)."""
        if self.unknown_before is None:
            return False
        root = rec.details.get("root")
        ticks = root[1] if isinstance(root, list) and len(root) == 2 else None
        convert = self._start_time_s
        started = convert(ticks) if isinstance(ticks, int) and convert is not None else None
        return started is None or started < self.unknown_before

    def _bound(self) -> None:
        """Keep at most :data:`MAX_FINDINGS` findings and :data:`MAX_RUNS` runs and job
        rows in memory, counting what goes in :attr:`dropped`. The least useful go
        first: resolved findings never paged (only their history is lost), then resolved
        ones paged (their alerts stay queued), then open ones not paged yet (seen again,
        they are opened and paged once), and last open ones paged, oldest sighting first
        (the one loss that may page a run again: counted apart)."""
        over = len(self.open) + len(self.resolved) - MAX_FINDINGS
        if over > 0:
            ranked = sorted(
                [
                    *((0 if r.last_alert_at is None else 1, r.resolved_at or 0.0, r.id, r)
                      for r in self.resolved),
                    *((2 if r.last_alert_at is None else 3, r.last_seen, r.id, r)
                      for r in self.open.values()),
                ],
                key=lambda x: (x[0], x[1], x[2]),
            )  # fmt: skip
            going = ranked[:over]
            ids = {x[3].id for x in going if x[0] < 2}
            self.resolved = [r for r in self.resolved if r.id not in ids]
            for rank, _t, _i, rec in going:
                if rank >= 2:
                    self.open.pop(rec.fingerprint, None)
                    self.gone.pop(rec.fingerprint, None)
                    self.dropped.paged += rank == 3
            self.dropped.findings += len(going)
        self.dropped.runs += self.jobs.bound(MAX_RUNS)

    def _settling(self, opened_at: float, policy: AlertSettings) -> None:
        """Note when an open held back by the settle is due at the latest."""
        if policy.settle_s > 0:
            due = opened_at + policy.settle_s
            self.settle_due = due if self.settle_due is None else min(self.settle_due, due)

    @staticmethod
    def _ended_by_itself(rec: FindingRecord | None, exits: Mapping[int, int]) -> bool:
        """Whether the run a finding (a kind a loop folds) is about exited by itself:
        its exit status says so (no signal); no evidence is no."""
        if rec is None or rec.kind not in PERIODIC_KINDS:
            return False
        return _exited(rec, exits)

    def _owes_open(
        self, rec: FindingRecord, now: float, alerts: AlertSettings, ended: bool
    ) -> bool:
        """Whether a finding resolving before its first alert still gets it: the
        tracker's rule (``Tracker._owes_open``). One held back by the settle (a return's
        ``respawned`` too) does only where this product's own action stopped its run (the
        record of what ran and was stopped); one that ended by itself, was stopped by
        someone else or ended nothing says how, or is shorter than the debounce, never
        does. Before (issue 33), in memory any end but one by itself owed it."""
        about_a_run = "gpus" in rec.details or rec.kind == "respawned"
        if alerts.settle_s <= 0 or not about_a_run or rec.details.get("exited"):
            return False
        if now - rec.opened_at < alerts.min_lifetime_s or ended or _exited(rec, self.exits):
            return False
        return self._acted_on(rec)

    def _acted_on(self, rec: FindingRecord) -> bool:
        """Whether an action of this product names ``rec`` (or, for a ``respawned``, a
        finding folded into it); an unreadable database is no evidence of one."""
        ids = [rec.id, *(folded_ids(rec.details) if rec.kind == "respawned" else ())]
        try:
            return self.db is not None and any(self.db.acted_on(fid) for fid in ids)
        except Exception:
            return False

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
            self.jobs.store(db)  # the jobs and runs first: what the findings are about
            stored = db.open_finding_ids()
            for rec in [*self.resolved, *self.open.values()]:
                if rec.resolved_at is None and rec.fingerprint in stored:
                    continue  # opened in the database meanwhile: that one stands
                fid = db.store_finding(rec)
                lines.append(f"F{rec.id}" if fid == rec.id else f"F{rec.id} as F{fid}")
            # Ids paged from memory and not stored (dropped by the bound, resolved before
            # a restart) are never given again: the database goes on past them.
            db.reserve_finding_ids(self.next_id)
        self.open, self.resolved, self.gone = {}, [], {}
        self.jobs.clear()
        self.unknown_before, self.dropped, self.adopted = None, Dropped(), []
        return lines

    def status_records(self) -> list[FindingRecord]:
        """The open findings kept in memory, oldest first (``status``: not persisted)."""
        return sorted(self.open.values(), key=lambda r: r.id)


def _exited(rec: FindingRecord, exits: Mapping[int, int]) -> bool:
    """Whether the run ``rec`` names (``details.root``, else its root PID) exited by
    itself: its exit status says so (no signal); no evidence is no."""
    root = rec.details.get("root")
    pid = root[0] if isinstance(root, list) and root else rec.root_pid
    status = exits.get(pid) if isinstance(pid, int) else None
    return status is not None and not status & 0x7F
