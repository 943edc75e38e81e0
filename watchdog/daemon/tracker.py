"""Remember jobs and findings across ticks and restarts; decide which alerts to send.

:class:`Tracker` composes the phases of :mod:`watchdog.daemon.tracking` once per tick:
record the jobs (a rogue signature that came back after a stop opens ``respawned``;
one whose run ended by itself is periodic), note an undone source in findings'
messages, make the findings of a periodic loop's runs its one finding, fold the findings
by fingerprint, decide which open, are seen again or resolve, name each filed finding's
id in its commands, decide the alert each is due (the debounced, settled open, a
reminder) and spool it for every sink that accepts it. Only the tracker writes: each
phase takes values and returns one.

One alert when a finding opens (once its picture is complete: ``alerts.settle_s``), a
reminder after ``reminder_after_s`` while it stays open ("still open, seen N times"),
one when it resolves. Never one message per PID of a job, nor one per run of a loop,
nor one per finding about a job's return: its ``respawned`` is the one page
(:mod:`.tracking.incident`), held back by the settle as a job's first page is
(:meth:`Tracker._held_returns`): a return gone within it by itself is filed, not paged.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from ..config.alerts import AlertSettings
from ..model import Finding, FindingKind, Job, Severity
from ..plugins import TrackResult
from ..policy.signature import job_signature
from ..state import FindingRecord, JobRecord, SourceUndo, StateDB
from .alerts.alert import AlertEvent, local_iso
from .tracking.blind import alerted_gpus, last_seen_gpus
from .tracking.current import (
    as_opened,
    before_run_end,
    current_message,
    ended_for_good,
    standing_disable,
    without_run_commands,
)
from .tracking.fold import fingerprint, fold, group
from .tracking.incident import (
    FANOUT_KINDS,
    Anchor,
    anchors,
    fanned_into,
    fanout_anchors,
    foldable_kinds,
    folded_details,
    folded_ids,
    folded_into,
    incident_of,
    kept_incident,
    louder,
    return_signature,
    without_notes,
)
from .tracking.jobs import record_jobs, run_record, source_undo_of
from .tracking.lifecycle import Open, Resolve, Seen, Sighting, Step, decide
from .tracking.naming import disabled_again, with_own_id, with_undo_notes
from .tracking.periodic import (
    RETURN_WINDOW_S,
    as_periodic,
    awaiting_return,
    expected,
    gap_text,
    loop_returns,
    loops,
    periodic_signature,
)
from .tracking.reminders import (
    alert_due,
    alert_labels,
    paged_routing,
    paged_severity,
    record_labels,
)
from .tracking.spool import deliveries, sink_accepts

# The tracker's public names (the daemon loop filters log sinks with sink_accepts).
__all__ = ["Tracker", "fingerprint", "fold", "sink_accepts"]

# Exit statuses kept for runs that may come back: PIDs beyond this, oldest first, are
# forgotten (a return without evidence is a respawn, the loud side).
MAX_EXITS = 4096


def held_by_root(
    open_records: Iterable[FindingRecord],
    jobs: Iterable[Job],
    alive: Callable[[int, int], bool] | None,
) -> set[str]:
    """While a source is blind: the signatures of open findings about a job not seen
    this tick whose root process (``details.root``: PID, start ticks) still runs. The
    ``jobs`` table holds such a job too (:func:`~.tracking.jobs.record_jobs`), but not
    one it never recorded: a finding kept in memory while the database refused writes
    and stored since (issue 32) was resolved while its job ran on a GPU NVML had lost.

    Args:
        open_records: The findings open before this tick.
        jobs: This tick's tracked jobs.
        alive: ``(pid, start_ticks) -> bool``, whether that process still runs.
    """
    if alive is None:
        return set()
    here = {(j.root_pid, j.start_ticks) for j in jobs}
    out: set[str] = set()
    for rec in open_records:
        root = rec.details.get("root")
        if not (
            isinstance(root, list) and len(root) == 2 and all(isinstance(x, int) for x in root)
        ):
            continue
        ident = (root[0], root[1])
        if ident in here or not alive(*ident):
            continue
        out.add(rec.fingerprint.partition(":")[2])
        sig = rec.details.get("signature")
        if isinstance(sig, str):
            out.add(sig)
    return out


class Tracker:
    """Keeps the ``jobs`` and ``findings`` tables in step with each scan.

    Args:
        db: The state database.
        alerts: Reminder interval and sinks (to spool one delivery per accepting sink).
        host: Host name put into alert payloads.
        mono: The monotonic clock.
        cli_args: What a command its findings print carries after the verb: the
            daemon's `` --config PATH`` (:func:`watchdog.hostpaths.config_args`).
        config: The daemon's configuration file (:func:`watchdog.hostpaths.config_file`),
            recorded in each alert it spools.
    """

    def __init__(
        self,
        db: StateDB,
        alerts: AlertSettings,
        host: str,
        mono: Callable[[], float] = time.monotonic,
        *,
        cli_args: str = "",
        config: str | None = None,
    ) -> None:
        self.db = db
        self.cli_args = cli_args
        self.config = config
        # The debounce and reminders count on this clock (issue 32, case 5): a wall clock
        # set back left last_alert_at 172,533 s in the future and no reminder came.
        self.mono = mono
        self._mono_now = 0.0
        # Finding id → (opened, last alerted) on the monotonic clock (kept across reloads).
        self.clocks: dict[int, tuple[float, float | None]] = {}
        self.alerts = alerts
        # This tick's alert policy: ``alerts``, without the settle on a tick whose scan
        # had no GPU list to fill a job's picture in (NVML off or unavailable).
        self.policy = alerts
        self.host = host
        self._blind = False  # this tick's: some GPU's processes could not be seen
        # The signature each running job root got first, by identity (PID, start ticks):
        # a job keeps it for its life, so its findings keep their fingerprint (and id)
        # when a later look names its origin otherwise (its CRON parent exited).
        self.first_signature: dict[tuple[int, int], str] = {}
        try:
            for rec in db.present_jobs():
                self.first_signature[(rec.root_pid, rec.start_ticks)] = rec.signature
        except Exception:  # an unreadable table: signatures are computed afresh
            self.first_signature = {}
        # By identity: the operator's undo that re-enabled the source this job started
        # from after (looked up once per job, at first sight); None when there is none.
        self.source_undos: dict[tuple[int, int], SourceUndo | None] = {}
        # PID → wait(2) status of processes the kernel saw exit (Daemon.exit_statuses):
        # whether a job's run ended by itself or was stopped. A PID seen running again
        # as a job root is another process: its entry goes.
        self.exits: dict[int, int] = {}
        # This process's first tick: how a run that ended before it ended (its exit
        # status) is known only to the process that ran then.
        self.first_tick: float | None = None
        # When (tick time) the earliest open alert held back by alerts.settle_s is due:
        # the loop ticks then instead of a whole interval later. None when none waits.
        self.settle_due: float | None = None
        # This tick's: finding id → when its job was seen gone, of each finding about a
        # run that ended by itself whose window for the job to come back ran out.
        self._ended_alone: dict[int, float] = {}
        # This tick's: finding id → the message it resolves with, of each loop's finding
        # whose latest run and source this product stopped (tracking.current.ended_for_good).
        self._stopped_loops: dict[int, str] = {}
        # This tick's: signature → its open respawned finding, which the findings about
        # its return are folded into (one incident, one page: tracking/incident.py).
        self._anchors: dict[str, Anchor] = {}
        self._foldable = foldable_kinds(alerts.sinks)
        # This tick's: incident (one launcher's jobs, one source's) → its first paged
        # rogue-job finding, which the incident's other jobs are folded into.
        self._fanout: dict[str, Anchor] = {}
        # This tick's: the ids of the held-back respawned findings whose return's own
        # rogue-job (folded into it) has its complete picture now: their open is due.
        self._ripe: set[int] = set()

    def update(
        self,
        jobs: Iterable[Job],
        findings: Iterable[Finding],
        now: float,
        start_time_s: Callable[[int], float | None] | None = None,
        *,
        blind: bool = False,
        alive: Callable[[int, int], bool] | None = None,
        learning: bool = False,
        exits: Mapping[int, int] | None = None,
        gpu_lists: bool = True,
        unread: Callable[[str], bool] | None = None,
    ) -> TrackResult:
        """Record one tick's jobs and findings; spool the alerts they cause.

        A job resolves only when its processes are seen gone: while a source is blind
        (``blind``), a known job missing from ``jobs`` whose root process is still
        ``alive`` is held (``TrackResult.held``): it is not marked gone and its findings
        stay open. A job seen again with the same root identity (PID + start time) is
        never a respawn, also when it had been marked gone or across a restart.

        Args:
            jobs: Jobs of this scan (ignored ones are not tracked).
            findings: Every finding of this tick (scan and extra sources).
            now: POSIX time of the tick.
            start_time_s: Converts a job's start ticks to POSIX seconds; with it, a new
                root PID under a known signature counts as a return only when it started
                after the signature was last seen (not a second instance that ran all along).
            blind: Some GPU's processes could not be seen this tick.
            alive: ``(pid, start_ticks) -> bool``, whether that process still runs.
            learning: In the learning period (``daemon.learn_until``): a ``respawned``
                finding is opened at ``info``, like the rogue finding it follows.
            exits: PID → wait(2) status of the processes the kernel saw exit since the
                last tick, read before this tick's scan (the proc connector's exit
                events; None without them).
            gpu_lists: The scan read NVML's process lists. Without them the settle
                still holds a job's first page (its whole ``alerts.settle_s``: no GPU
                picture completes it), to see the job still running.
            unread: True for the fingerprint of an open finding whose source could not
                be read this tick (the queue, when Slurm gives no answer): it stays
                open, neither seen nor resolved; blindness never resolves, so the
                source's return re-opens and pages nothing.

        Returns:
            What opened, was reminded of, and resolved; the job signatures by root PID.
        """
        self._mono_now = self.mono()
        self._blind = blind
        self.settle_due = None
        # The settle holds a job's first page without NVML's process lists too: there
        # it waits to see the job still running (a busy shared host's 1-3 s bench runs
        # were paged at once, 180 of 536 opens naming a run already gone: issue 33).
        self.policy = self.alerts
        clocks = dict(self.clocks)
        for pid, status in (exits or {}).items():
            self.exits.pop(pid, None)
            self.exits[pid] = status
        while len(self.exits) > MAX_EXITS:
            self.exits.pop(next(iter(self.exits)))
        try:
            return self._update(jobs, findings, now, start_time_s, blind, alive, learning, unread)
        except BaseException:
            self.clocks = clocks  # rolled back: nothing was alerted
            raise

    def open_new(
        self,
        jobs: Iterable[Job],
        findings: Iterable[Finding],
        now: float,
        start_time_s: Callable[[int], float | None] | None = None,
        *,
        learning: bool = False,
        gpu_lists: bool = True,
    ) -> TrackResult:
        """The exec path (issue 34): file the findings of jobs first seen now, between
        two ticks, as :meth:`update` would file them, and touch nothing else.

        Only a job that is new in every sense is taken: its identity (PID, start ticks)
        was not tracked before, its signature has no ``jobs`` row (so no return, no
        loop, no respawn can be involved) and no other new job shares it (instances
        fold into one finding), and no operator's undo of a source started it; and
        only its findings fingerprinted by its signature (one with a fingerprint of
        its own may fold other jobs' in). Each of those whose fingerprint no open
        finding has is opened by the same code as a tick's (:meth:`_open`: the
        settle, the debounce and the fold rules hold, and its page waits for them); a
        fingerprint already open is left to the next tick, as is every other job and
        finding: nothing is seen again, reminded or resolved here. The next tick finds
        the job recorded under the same signature and its findings open: it continues
        them as if it had opened them itself.

        Args:
            jobs: Jobs of a scan (only those new as above are taken).
            findings: That scan's findings (only those about a taken job's root).
            now: POSIX time of the scan.
            start_time_s: As for :meth:`update`.
            learning: As for :meth:`update` (the findings are already ``learned``).
            gpu_lists: As for :meth:`update`.

        Returns:
            The findings opened and the signatures of the jobs taken.
        """
        self._mono_now = self.mono()
        # The settle holds the first page with or without NVML's process lists, as in
        # update(): the exec path had kept the rule before it (no lists, no settle), and
        # paged 27 runs at their exec on a GPU-less shared host, most of them gone 1-4 s
        # later (issue 33, fresh user I).
        self.policy = self.alerts
        clocks = dict(self.clocks)
        settle_due = self.settle_due
        try:
            return self._open_new(list(jobs), list(findings), now, start_time_s, learning)
        except BaseException:
            self.clocks, self.settle_due = clocks, settle_due  # rolled back: nothing alerted
            raise

    def _open_new(
        self,
        jobs: list[Job],
        findings: list[Finding],
        now: float,
        start_time_s: Callable[[int], float | None] | None,
        learning: bool,
    ) -> TrackResult:
        db = self.db
        with db.transaction():
            taken: dict[int, str] = {}
            firsts: dict[tuple[int, int], str] = {}
            new = [
                (job, job_signature(job.user, job.cmdline, job.origin))
                for job in jobs
                if job.verdict != "ignored"
                and (job.root_pid, job.start_ticks) not in self.first_signature
            ]
            # Instances of one signature fold into one finding: the tick files them
            # together (a partial picture paged now would change at the next look).
            count = Counter(sig for _job, sig in new)
            for job, sig in new:
                ident = (job.root_pid, job.start_ticks)
                if count[sig] > 1 or db.job(sig) is not None:
                    continue  # a known signature (a return, another instance), or several
                if source_undo_of(db, job, sig, now, start_time_s) is not None:
                    continue  # its finding names the undo: the tick's to file
                db.record_run(run_record(job, sig, now), now)
                db.upsert_job(
                    JobRecord(
                        sig, " ".join(job.cmdline), job.user, job.verdict,
                        job.origin.to_json(), now, now, job.root_pid, job.start_ticks,
                        job.pids, None, 1,
                    )
                )  # fmt: skip
                taken[job.root_pid] = sig
                firsts[ident] = sig
            if not taken:
                return TrackResult()
            # A finding with a fingerprint of its own may fold others' in: the tick's.
            ours = [
                f
                for f in findings
                if f.root_pid is not None and f.root_pid in taken and "fingerprint" not in f.details
            ]
            groups = group(ours, taken)
            already = db.open_finding_ids()
            self._foldable = foldable_kinds(self.alerts.sinks)
            opened: list[FindingRecord] = []
            for fp, found in groups.items():
                if fp in already:
                    continue  # an open finding continues: the tick's to see again
                finding, pids = fold(found, None)
                opened.append(self._open(Sighting(fp, finding, pids, len(found)), now))
            # Kept only once written: the next tick's record_jobs continues them.
            self.first_signature.update(firsts)
        return TrackResult(opened=opened, signatures=taken)

    def _update(
        self,
        jobs: Iterable[Job],
        findings: Iterable[Finding],
        now: float,
        start_time_s: Callable[[int], float | None] | None,
        blind: bool,
        alive: Callable[[int, int], bool] | None,
        learning: bool,
        unread: Callable[[str], bool] | None = None,
    ) -> TrackResult:
        tracked = [j for j in jobs if j.verdict != "ignored"]
        with self.db.transaction():
            before = self.db.open_findings()
            sigs = {s for s in map(periodic_signature, before) if s is not None}
            seen = record_jobs(
                self.db, tracked, now, self.first_signature, self.source_undos,
                start_time_s, alive if blind else None, self.exits,
            )  # fmt: skip
            self.first_signature, self.source_undos = seen.first_signature, seen.source_undos
            for pid in seen.signatures:
                self.exits.pop(pid, None)  # running now: an exit noted for it was another's
            if self.first_tick is None:
                self.first_tick = now
            # A run an open periodic finding covers is the loop's, also after a restart.
            respawns = loop_returns(seen.respawns, before, seen.returns, now, self.first_tick)
            if learning:
                respawns = [dataclasses.replace(f, severity="info") for f in respawns]
            found = loops(before, seen.returns, now)
            notes = with_undo_notes(findings, self.source_undos, self.cli_args, self._again())
            noted = as_periodic(
                notes, seen.signatures,
                {j.root_pid: j for j in tracked}, found, before,
            )  # fmt: skip
            present = set(seen.signatures.values())
            between = expected(before, present, self._last_seen(sigs), now)
            between -= self._stopped_for_good(before, between)
            waiting = awaiting_return(self.db, before, present, seen.returns, self.exits, now)
            # Blindness never resolves: a finding waiting for its job stays open then.
            awaiting = {fp for fp, g in waiting.items() if blind or now - g <= RETURN_WINDOW_S}
            by_fp = {rec.fingerprint: rec.id for rec in before}
            self._ended_alone = {by_fp[fp]: g for fp, g in waiting.items() if fp not in awaiting}
            held = seen.held | (held_by_root(before, tracked, alive) if blind else set())
            unseen = {r.fingerprint for r in before if unread is not None and unread(r.fingerprint)}
            # A return's respawned first: the findings about the run that came back are
            # folded into it (tracking/incident.py), so it is filed before them.
            steps = decide(
                group([*respawns, *noted], seen.signatures), before, present=present,
                held=held, expected=between, awaiting=awaiting, unread=unseen,
            )  # fmt: skip
            self._anchors = anchors(before)
            self._fanout = fanout_anchors(before)
            self._foldable = foldable_kinds(self.alerts.sinks)
            self._ripe = set()
            steps = self._one_page_per_return(steps, before, present)
            opened, reminded, resolved = self._apply(steps, now)
            self._between_runs(before, steps, between, now)
            self._held_returns(
                [r.id for r in before if r.kind == "respawned" and r.last_alert_at is None], now
            )
            self._as_of_now(before, steps, tracked, seen.signatures)
            self._name_folded()
        return TrackResult(
            opened=opened,
            reminded=reminded,
            resolved=resolved,
            signatures=seen.signatures,
            respawned=respawns,
            held=held,
        )

    def _folded(self, rec: FindingRecord | Sighting) -> Anchor | None:
        """The finding ``rec`` is folded into (no page of its own): its return's open
        respawned finding, else the first paged finding of its incident (one
        launcher's, one source's jobs: tracking/incident.py)."""
        if isinstance(rec, Sighting):
            f = rec.finding
            return folded_into(
                f.kind, rec.fingerprint, f.severity, False, self._anchors, self._foldable
            ) or fanned_into(
                f.kind, None, f.details, f.severity, False, self._fanout, self._foldable
            )
        alerted = rec.last_alert_at is not None
        return folded_into(
            rec.kind, rec.fingerprint, rec.severity, alerted, self._anchors, self._foldable
        ) or fanned_into(
            rec.kind, rec.id, rec.details, rec.severity, alerted, self._fanout, self._foldable
        )

    def _first_page(self, rec: FindingRecord, severity: str) -> None:
        """Note a job finding paged now as its incident's page, when it has none yet."""
        key = incident_of(rec.details) if rec.kind in FANOUT_KINDS else None
        if key is not None and key not in self._fanout:
            self._fanout[key] = Anchor(rec.id, severity, rec.kind)

    def _one_page_per_return(
        self,
        steps: list[Step],
        before: list[FindingRecord],
        present: frozenset[str] | set[str] = frozenset(),
    ) -> list[Step]:
        """This tick's steps with each ``respawned`` that opens at the highest severity of
        the findings about its return (they are folded into it: it is their one page),
        and without the resolve of an open ``respawned`` that a folded finding staying
        open holds (they resolve together)."""
        loudest: dict[str, str] = {}
        kind: str
        sev: str
        for step in steps:
            if isinstance(step, Open):
                kind, fp = step.sighting.finding.kind, step.sighting.fingerprint
                sev = step.sighting.finding.severity
            elif isinstance(step, Seen) and step.record.last_alert_at is None:
                kind, fp = step.record.kind, step.sighting.fingerprint
                sev = step.sighting.finding.severity
            else:
                continue
            sig = return_signature(kind, fp) if kind in self._foldable else None
            if sig is not None:
                loudest[sig] = louder(sev, loudest.get(sig, "info"))
        resolving = {s.record.id for s in steps if isinstance(s, Resolve)}
        # A respawned resolved because another return of its job opens one (a new
        # incident) is not held: that one takes what was folded into it.
        opening = {s.sighting.fingerprint for s in steps if isinstance(s, Open)}
        # One never paged (held back by the settle, its return gone) is held only by a
        # folded finding whose job still runs, or one not about a run (a terminate that
        # did not hold): then its page goes at the settle, one page. A rogue-job whose
        # run ended (waiting for a return) holds it no longer: it is filed, as any run
        # gone within its settle (issue 33, fresh user J).
        paged = {r.id for r in before if r.last_alert_at is not None}
        holding: set[int] = set()
        for rec in before:
            anchor = self._folded(rec)
            if anchor is None or rec.id in resolving:
                continue
            sig = rec.details.get("signature") or return_signature(rec.kind, rec.fingerprint)
            if anchor.finding_id in paged or rec.kind != "rogue-job" or sig in present:
                holding.add(anchor.finding_id)
        holding -= {r.id for r in before if r.fingerprint in opening}
        out: list[Step] = []
        for step in steps:
            if isinstance(step, Resolve) and step.record.id in holding:
                continue  # a finding folded into it stays open: it does too
            if isinstance(step, Open | Seen) and step.sighting.finding.kind == "respawned":
                f = step.sighting.finding
                sig = return_signature(f.kind, step.sighting.fingerprint)
                loud = louder(f.severity, loudest.get(sig or "", f.severity))
                if isinstance(step, Seen):  # the same return: never quieter than it was
                    loud = louder(loud, step.record.severity)
                if loud != f.severity:
                    f = dataclasses.replace(f, severity=cast("Severity", loud))
                    sighting = dataclasses.replace(step.sighting, finding=f)
                    step = Open(sighting) if isinstance(step, Open) else Seen(step.record, sighting)
            out.append(step)
        return out

    def _name_folded(self) -> None:
        """Name in each open ``respawned`` finding, and each incident's first paged
        ``rogue-job``, the findings folded into it (``details.folded``, its message):
        never an alert by itself."""
        if not self._anchors and not self._fanout:
            return  # no respawned finding open, no incident paged: nothing to name
        open_now = self.db.open_findings()
        folded: dict[int, list[FindingRecord]] = {}
        for rec in open_now:
            anchor = self._folded(rec)
            if anchor is not None:
                folded.setdefault(anchor.finding_id, []).append(rec)
        for rec in open_now:
            if rec.kind != "respawned" and rec.kind not in FANOUT_KINDS:
                continue
            details, message = folded_details(
                rec.details, rec.message, folded.get(rec.id, []), rec.kind
            )
            if details != rec.details or message != rec.message:
                self.db.set_finding_details(rec.id, details, message)

    def _again(self) -> dict[tuple[int, int], str]:
        """By run identity: for a run an undo's re-enabled source started, that source
        disabled again since (:func:`~.tracking.naming.disabled_again`), as its undo note
        goes on. Read each tick: the note is the run's, the disable is the state now."""
        out: dict[tuple[int, int], str] = {}
        for ident, undo in self.source_undos.items():
            sig = undo.disable.signature if undo is not None else None
            if undo is None or sig is None:
                continue
            done = standing_disable(self.db.actions_for(sig), undo.undo.created_at)
            if done is not None:
                out[ident] = disabled_again(done.id, local_iso(done.created_at))
        return out

    def _stopped_for_good(self, before: list[FindingRecord], between: set[str]) -> set[str]:
        """The loops between two runs that need not wait out their quiet time: their
        latest run and their source were stopped by this product
        (:func:`~watchdog.daemon.tracking.current.ended_for_good`). Each of their findings
        resolves this tick with the message the action log gives it, ending with why."""
        self._stopped_loops = {}
        out: set[str] = set()
        for rec in before:
            sig = periodic_signature(rec)
            if sig is None or sig not in between:
                continue
            actions = self.db.actions_for(sig)
            why = ended_for_good(rec, actions)
            if why is None:
                continue
            out.add(sig)
            bare = dataclasses.replace(rec, message=without_notes(rec.message))
            now_says = (
                current_message(bare, None, set(), actions, self.exits, None, self.cli_args)
                or bare.message
            )
            self._stopped_loops[rec.id] = (
                f"{now_says}; resolved: {why}, nothing known starts it again (a run back "
                "is paged as a return)"
            )
        return out

    def _last_seen(self, sigs: Iterable[str]) -> dict[str, float]:
        """When a run of each signature was last seen (before this tick's record)."""
        out = {}
        for sig in sigs:
            rec = self.db.job(sig)
            if rec is not None:
                out[sig] = rec.last_seen
        return out

    def _as_of_now(
        self,
        before: list[FindingRecord],
        steps: list[Step],
        jobs: list[Job],
        signatures: Mapping[int, str],
    ) -> None:
        """Build the message of each open finding not reported this tick from what is
        known now (:func:`~watchdog.daemon.tracking.current.current_message`): never
        an alert by itself."""
        stepped = {s.record.id for s in steps if isinstance(s, Seen | Resolve)}
        by_sig: dict[str, Job] = {}
        for job in jobs:
            sig = signatures.get(job.root_pid)
            if sig is not None:
                by_sig.setdefault(sig, job)
        running = {(j.root_pid, j.start_ticks) for j in jobs}
        for rec in before:
            if rec.id in stepped:
                continue
            root = rec.details.get("root")
            sig = rec.details.get("signature") or rec.fingerprint.partition(":")[2]
            own = next((j for j in jobs if [j.root_pid, j.start_ticks] == root), None)
            job_rec = self.db.job(sig) if sig else None
            message = current_message(
                rec, own or by_sig.get(sig), running, self.db.actions_for(sig) if sig else [],
                self.exits, job_rec.gone_at if job_rec is not None else None, self.cli_args,
            )  # fmt: skip
            # (An anchor's note on what is folded into it is _name_folded's.)
            if message is not None and message != without_notes(rec.message):
                self.db.set_finding_message(rec.id, message)

    # -- the findings table and the spool ------------------------------------------------

    def _apply(
        self, steps: list[Step], now: float
    ) -> tuple[list[FindingRecord], list[FindingRecord], list[FindingRecord]]:
        """Write each step to the findings table and spool the alerts it is due, in
        order. Returns the findings opened, reminded of, and resolved."""
        opened: list[FindingRecord] = []
        reminded: list[FindingRecord] = []
        resolved: list[FindingRecord] = []
        for step in steps:
            if isinstance(step, Resolve):
                resolved.append(self._resolve(step.record, now))
            elif isinstance(step, Open):
                opened.append(self._open(step.sighting, now))
            else:
                reminder = self._seen(step, now)
                if reminder is not None:
                    reminded.append(reminder)
        return opened, reminded, resolved

    def _on_mono(self, rec: FindingRecord, now: float) -> FindingRecord:
        """``rec`` with ``opened_at`` and ``last_alert_at`` moved so that what
        :func:`alert_due` compares holds when the wall clock was set back: a stamp
        ahead of ``now`` counts the time elapsed on the monotonic clock since this
        daemon opened or alerted it (or first saw it, for a stamp from before this
        run) instead of a negative age that blocks reminders and the debounce for as
        long as the clock went back. A stamp behind ``now`` counts as it is (the tick's
        own time, which tests drive)."""
        opened, alerted = self.clocks.get(rec.id, (None, None))
        if opened is None:
            opened = self._mono_now
        if alerted is None and rec.last_alert_at is not None:
            alerted = self._mono_now
        self.clocks[rec.id] = (opened, alerted)

        def age(stamp: float, since: float) -> float:
            return now - stamp if now >= stamp else self._mono_now - since

        return dataclasses.replace(
            rec,
            opened_at=now - age(rec.opened_at, opened),
            last_alert_at=(
                None
                if rec.last_alert_at is None or alerted is None
                else now - age(rec.last_alert_at, alerted)
            ),
        )

    def _alerted(self, finding_id: int, now: float) -> None:
        opened = self.clocks.get(finding_id, (self._mono_now, None))[0]
        self.clocks[finding_id] = (opened, self._mono_now)

    def _open(self, s: Sighting, now: float) -> FindingRecord:
        """File a new finding (named by its id); spool its open alert unless debounced."""
        db, f = self.db, s.finding
        fid = db.insert_finding(
            s.fingerprint, f.kind, f.severity, f.message, f.root_pid, f.details, now,
            s.instances,
        )  # fmt: skip
        named = with_own_id(f, fid)
        if named != f.message:
            db.set_finding_message(fid, named)
        new = db.finding(fid)
        assert new is not None
        labels = alert_labels(self.host, fid, f)
        self.clocks[fid] = (self._mono_now, None)
        if f.kind == "respawned":
            sig = return_signature(f.kind, s.fingerprint)
            if sig is not None:
                self._anchors[sig] = Anchor(fid, f.severity)
        if self._folded(s) is not None:
            pass  # its return's respawned, or its incident's first page, is its page
        elif alert_due(None, f, s.instances, s.pids, labels, now, self.policy) is not None:
            self._spool("open", new, now)
            db.mark_alerted(fid, now, s.pids, labels)
            self._alerted(fid, now)
            self._first_page(new, f.severity)
        else:
            self._settling(now)
        return new

    def _settling(self, opened_at: float) -> None:
        """Note when an open held back by the settle is due at the latest."""
        if self.policy.settle_s > 0:
            due = opened_at + self.policy.settle_s
            self.settle_due = due if self.settle_due is None else min(self.settle_due, due)

    def _seen(self, step: Seen, now: float) -> FindingRecord | None:
        """Record another sighting of an open finding; spool the alert it is due.
        Returns the finding as reminded of when that alert is a reminder, else None."""
        db, rec, s = self.db, step.record, step.sighting
        f = s.finding
        if rec.fingerprint != s.fingerprint:
            # The finding of a loop's first run, continued as the loop's: it names no
            # run now, so the PID its alert named (ended by itself) is no change.
            db.refile_finding(rec.id, s.fingerprint)
            named = [] if rec.last_alert_at is not None else rec.alerted_pids
            rec = dataclasses.replace(rec, fingerprint=s.fingerprint, alerted_pids=named)
        if self._blind:  # a GPU unseen is not a GPU left: keep where it was last seen
            f = last_seen_gpus(rec, f)
        elif rec.last_alert_at is not None:  # a paged alert keeps the GPUs it named
            f = last_seen_gpus(rec, f, released=True)
        if rec.last_alert_at is not None:  # and gains none: no relabel, no second page
            # nor a lowered severity, nor another origin's labels (a loop's runs)
            f = paged_routing(rec, paged_severity(rec, alerted_gpus(rec, f)))
        f = kept_incident(rec, f)
        db.touch_finding(rec.id, with_own_id(f, rec.id), f.root_pid, f.details, now, s.instances)
        labels = alert_labels(self.host, rec.id, f)
        was = self._on_mono(rec, now)
        anchor = self._folded(dataclasses.replace(rec, severity=f.severity))
        if anchor is not None:
            if anchor.kind == "respawned" and was.last_alert_at is None and "gpus" in f.details:
                # The return's run's own picture: complete, its return's page is due.
                due = alert_due(
                    was, f, s.instances, s.pids, labels, now, self.policy,
                    record_labels(self.host, rec),
                )  # fmt: skip
                if due is not None and due.event == "open":
                    self._ripe.add(anchor.finding_id)
            return None  # its return's respawned is its page
        due = alert_due(
            was, f, s.instances, s.pids, labels, now, self.policy, record_labels(self.host, rec)
        )
        if due is None:
            if was.last_alert_at is None:
                self._settling(was.opened_at)
            return None
        fresh = db.finding(rec.id)
        assert fresh is not None
        self._spool(due.event, fresh, now, due.change)
        db.mark_alerted(rec.id, now, s.pids, labels)
        self._alerted(rec.id, now)
        if due.event == "open":
            self._first_page(fresh, f.severity)
        return fresh if due.event == "remind" else None

    def _between_runs(
        self, before: list[FindingRecord], steps: list[Step], between: set[str], now: float
    ) -> None:
        """Send the open alert of a periodic finding whose settle ended between two runs
        of its loop (no run to look at: the picture it has is the one it gets)."""
        stepped = {s.record.id for s in steps if isinstance(s, Seen | Resolve)}
        for rec in before:
            if rec.id in stepped or rec.last_alert_at is not None:
                continue
            if periodic_signature(rec) not in between or self._folded(rec) is not None:
                continue
            f = Finding(
                cast("FindingKind", rec.kind), cast("Severity", rec.severity), rec.message,
                rec.root_pid, rec.details,
            )  # fmt: skip
            labels = record_labels(self.host, rec)
            was = self._on_mono(rec, now)
            due = alert_due(was, f, rec.instances, [], labels, now, self.policy, labels)
            if due is None:
                self._settling(was.opened_at)
                continue
            self._spool("open", rec, now)
            self.db.mark_alerted(rec.id, now, [], labels)
            self._alerted(rec.id, now)
            self._first_page(rec, rec.severity)

    def _held_returns(self, held: list[int], now: float) -> None:
        """Send the open alert of each ``respawned`` finding held back by the settle
        whose wait is over: ``alerts.settle_s`` after the return was seen, or sooner
        once the return's own ``rogue-job`` (folded into it) has its complete picture.

        A return's page is the first page about the run that came back: it waits as a
        job's first page does (issue 33, fresh user J: 4 high ``respawned`` pages for
        test-harness returns gone 0.1 s later). Not reported after the tick it opened
        in, it is looked at here each tick while it stays open; one resolving first is
        :meth:`_owes_open`'s. ``held``: the ids of those open and not paged before this
        tick (one opening now is held by its own open: :meth:`_open`), so an idle tick
        reads nothing more.
        """
        for fid in held:
            rec = self.db.finding(fid)  # as this tick left it (resolved, or paged)
            if rec is None or rec.resolved_at is not None or rec.last_alert_at is not None:
                continue
            was = self._on_mono(rec, now)
            age = now - was.opened_at
            settled = age >= self.policy.settle_s or rec.id in self._ripe
            if age < self.policy.min_lifetime_s or not settled:
                self._settling(was.opened_at)
                continue
            pids = [rec.root_pid] if rec.root_pid is not None else []
            self._spool("open", rec, now)
            self.db.mark_alerted(rec.id, now, pids, record_labels(self.host, rec))
            self._alerted(rec.id, now)

    def _owes_open(self, rec: FindingRecord, now: float) -> bool:
        """Whether a finding resolving before its first alert still gets it: one held
        back by the settle does, unless its job ended by itself meanwhile (nothing is
        left to act on; should it come back, its loop is paged). One shorter than the
        debounce (``alerts.min_lifetime_s``) never does. (The configured settle, not
        this tick's: a tick without NVML's lists sends what an earlier one held back.)
        A return's ``respawned`` follows the same rule; an action on a finding folded
        into it (the enforcer's terminate names the return's ``rogue-job``) counts as
        one on it."""
        about_a_run = "gpus" in rec.details or rec.kind == "respawned"
        if self.alerts.settle_s <= 0 or not about_a_run:
            return False
        if now - self._on_mono(rec, now).opened_at < self.alerts.min_lifetime_s:
            return False
        root = rec.details.get("root")
        status = self.exits.get(root[0]) if isinstance(root, list) and root else None
        if status is None:
            # How it ended is unknown (events lost, polling only, or it ended before
            # this process's first tick: a restart): the open is owed only where this
            # product's own action stopped it, as below. Before, an unknown end owed it:
            # a restart re-sent an open and a resolve for every finding the last process
            # had held back (issue 33, fresh user J: 97 opens and 99 resolves at high in
            # the restart's first second, about other people's runs gone minutes ago).
            # Seen only at its exec, already gone: nothing was ever there to act on.
            return not rec.details.get("exited") and self._acted_on(rec)
        # A signal ended it: the open is owed only when this product's own action (the
        # enforcer's terminate, a person's `terminate F…`) sent it, so the record of
        # what ran and was stopped goes out. A signal from anyone else (a test
        # harness's teardown, an admin's kill, the OOM killer) left nothing to act on
        # (issue 33, fresh user G: 46 of 76 high opens were resolved in the same
        # second); should the job come back, `respawned` pages it.
        return bool(status & 0x7F) and self._acted_on(rec)

    def _acted_on(self, rec: FindingRecord) -> bool:
        """Whether an action of this product names ``rec`` or, for a ``respawned``
        finding, one folded into it (``details.folded``)."""
        ids = [rec.id, *(folded_ids(rec.details) if rec.kind == "respawned" else ())]
        return any(self.db.acted_on(fid) for fid in ids)

    def _resolve(self, rec: FindingRecord, now: float) -> FindingRecord:
        """Resolve one finding and spool its ``resolve`` alert (when it was alerted,
        after the open it still owes: :meth:`_owes_open`)."""
        db = self.db
        gone_at = self._ended_alone.get(rec.id)
        stopped = self._stopped_loops.get(rec.id)
        if stopped is not None:
            rec = dataclasses.replace(rec, message=stopped)
            db.set_finding_message(rec.id, stopped)
        elif gone_at is not None:
            head = before_run_end(rec.message)  # said again here, finally
            rec = dataclasses.replace(
                rec,
                message=f"{head}; ended by itself at {local_iso(gone_at)}, not back "
                f"within {gap_text(RETURN_WINDOW_S)}",
            )
            db.set_finding_message(rec.id, rec.message)
        alerted = rec.last_alert_at is not None
        if not alerted and self._folded(rec) is None and self._owes_open(rec, now):
            self._spool("open", rec, now)
            pids = [rec.root_pid] if rec.root_pid is not None else []
            db.mark_alerted(rec.id, now, pids, record_labels(self.host, rec))
            alerted = True
        ended = without_run_commands(rec.message)
        if ended != rec.message:  # a resolve is no promise to act: no command on the run
            db.set_finding_message(rec.id, ended)
        self.clocks.pop(rec.id, None)
        db.resolve_finding(rec.id, now)
        done = db.finding(rec.id)
        assert done is not None
        if not alerted:
            # Shorter than alerts.min_lifetime_s, or its job ended by itself within
            # the settle.
            db.count("findings_not_alerted")
        else:
            self._spool("resolve", done, now)
        return done

    def _spool(
        self,
        event: AlertEvent,
        finding: FindingRecord,
        now: float,
        change: dict[str, Any] | None = None,
    ) -> None:
        sinks = self.alerts.sinks
        if event == "open":
            # An open says what runs, never that its run is gone ("nothing left to
            # stop"): a late open (owed at its resolve, or a loop's between two runs)
            # is sent without that tail, which the record keeps (issue 33).
            finding = as_opened(finding)
        for sink, payload in deliveries(event, finding, self.host, now, sinks, change, self.config):
            self.db.enqueue(finding.id, sink, event, payload, now)
