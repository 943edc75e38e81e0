"""Remember jobs and findings across ticks and restarts; decide which alerts to send.

Jobs are remembered by a signature: the parts of their origin that will start them
again (cron file and line, unit, Slurm account and job name...) plus the normalised
command line and user. A rogue signature that disappears (killed, or exited) and appears
again opens a ``respawned`` finding, also across a daemon restart: the seed case is a
ghost killed by hand that came back 12 minutes later from a forgotten cron entry.

Findings are folded by fingerprint: one alert when a finding opens, a reminder after
``reminder_after_s`` while it stays open ("still open, seen N times"), one when it
resolves. Never one message per PID of a job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from watchdog.config.alerts import AlertSettings, SinkSettings
from watchdog.daemon.alerts.alert import Alert, AlertEvent, local_iso
from watchdog.daemon.alerts.alertmanager import routing_labels
from watchdog.model import SEVERITIES, Finding, Job
from watchdog.plugins import TrackResult
from watchdog.policy.findings import gpus_text, name_finding_in_commands
from watchdog.policy.signature import job_signature
from watchdog.state import (
    FindingRecord,
    JobRecord,
    RunRecord,
    SourceUndo,
    StateDB,
    clean,
    source_undo,
)


def fingerprint(finding: Finding, signatures: dict[int, str]) -> str:
    """Fold key of a finding: kind plus the job signature, an explicit key, or the message."""
    explicit = finding.details.get("fingerprint")
    if isinstance(explicit, str):
        return f"{finding.kind}:{explicit}"
    if finding.root_pid is not None and finding.root_pid in signatures:
        return f"{finding.kind}:{signatures[finding.root_pid]}"
    return f"{finding.kind}:{finding.message}"


# A changed instance count (or the named PID gone) is alerted at most this often per
# finding, so a job whose copies churn every tick cannot turn into an alert per tick.
CHANGE_MIN_S = 60.0
# PIDs named in a folded finding's message; ``details.root_pids`` lists every one.
NAMED_PIDS = 10


def _same_job(rec: FindingRecord, group: list[Finding]) -> bool:
    """True when the job an open finding is about is among this tick's findings of its
    fingerprint: the same root PID, and the same start time where both record one (a
    reused PID is another job). Findings about no job always are."""
    if rec.root_pid is None:
        return True
    was = rec.details.get("root")
    for f in group:
        if f.root_pid != rec.root_pid:
            continue
        now = f.details.get("root")
        if isinstance(was, list) and isinstance(now, list) and was != now:
            continue
        return True
    return False


def fold(group: list[Finding], rec: FindingRecord | None) -> tuple[Finding, list[int]]:
    """One finding for several with the same fingerprint (copies of one job: the same
    command line from the same source, each its own process tree).

    The finding names every instance: ``details.instances`` and ``details.root_pids``,
    and the message ends "N instances of this job: PIDs a, b, …". It keeps naming the
    PID it named before while that PID runs, so its root PID never switches silently.

    Returns:
        The folded finding and the root PIDs of its instances (sorted).
    """
    pids = sorted({f.root_pid for f in group if f.root_pid is not None})
    rep = group[0]
    if rec is not None and rec.root_pid is not None:
        rep = next((f for f in group if f.root_pid == rec.root_pid), rep)
    if len(group) == 1:
        return rep, pids
    details = dict(rep.details)
    details["instances"] = len(group)
    details["root_pids"] = pids
    named = ", ".join(str(p) for p in pids[:NAMED_PIDS])
    more = f" and {len(pids) - NAMED_PIDS} more" if len(pids) > NAMED_PIDS else ""
    message = f"{rep.message}; {len(group)} instances of this job: PIDs {named}{more}"
    return dataclasses.replace(rep, message=message, details=details), pids


def _change(rec: FindingRecord, instances: int, pids: list[int]) -> dict[str, Any] | None:
    """What changed since the last alert about ``rec``: the instance count, or a PID
    it named that is gone. None when nothing did."""
    was = rec.alerted_instances if rec.alerted_instances is not None else rec.instances
    named = rec.alerted_pids
    if named is None:  # alerted before PIDs were recorded
        named = [rec.root_pid] if rec.root_pid is not None else []
    gone = sorted(p for p in named if p not in pids)
    if instances == was and not gone:
        return None
    return {"instances": instances, "was": was, "gone_pids": gone}


_when = local_iso


def _gap(seconds: float) -> str:
    minutes, sec = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m" if not sec or minutes >= 10 else f"{minutes}m{sec:02d}s"


def sink_accepts(sink: SinkSettings, finding: FindingRecord) -> bool:
    """True when ``sink``'s severity floor and kind filter let ``finding`` through."""
    if SEVERITIES.index(finding.severity) < SEVERITIES.index(sink.min_severity):
        return False
    return not sink.kinds or finding.kind in sink.kinds


class Tracker:
    """Keeps the ``jobs`` and ``findings`` tables in step with each scan.

    Args:
        db: The state database.
        alerts: Reminder interval and sinks (to spool one delivery per accepting sink).
        host: Host name put into alert payloads.
    """

    def __init__(self, db: StateDB, alerts: AlertSettings, host: str) -> None:
        self.db = db
        self.alerts = alerts
        self.host = host
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

        Returns:
            What opened, was reminded of, and resolved; the job signatures by root PID.
        """
        out = TrackResult()
        with self.db.transaction():
            respawns = self._jobs(
                [j for j in jobs if j.verdict != "ignored"], now, out, start_time_s,
                alive if blind else None,
            )  # fmt: skip
            if learning:
                respawns = [dataclasses.replace(f, severity="info") for f in respawns]
            out.respawned = respawns
            self._findings([*self._name_undos(findings), *respawns], now, out)
        return out

    def _source_undo(
        self, job: Job, sig: str, now: float, start_time_s: Callable[[int], float | None] | None
    ) -> SourceUndo | None:
        """The undo that re-enabled ``job``'s source before it started, if any (once per
        job identity: what started a process does not change while it runs)."""
        ident = (job.root_pid, job.start_ticks)
        if ident in self.source_undos:
            return self.source_undos[ident]
        found = None
        if job.unsanctioned:
            found = source_undo(self.db.actions_for(sig))
            started = (start_time_s(job.start_ticks) if start_time_s else None) or now
            if found is not None and started < found.undo.created_at:
                found = None  # it ran before the undo: the undo did not start it
        self.source_undos[ident] = found
        return found

    def _name_undos(self, findings: Iterable[Finding]) -> list[Finding]:
        """A rogue job that runs because an operator undid the disabling of its source
        says so in its one finding (no ``respawned`` beside it, and the enforcer opens no
        ``remediation-failed``)."""
        out = []
        for f in findings:
            root = f.details.get("root")
            undo = None
            if f.kind in ("rogue-job", "excess-instances") and isinstance(root, list):
                undo = self.source_undos.get(tuple(root))
            if undo is not None:
                f = dataclasses.replace(
                    f,
                    message=f"{f.message}; {undo.note()}",
                    details={
                        **f.details,
                        "source_undo": {"undo_action": undo.undo.id, "undid": undo.disable.id},
                    },
                )
            out.append(f)
        return out

    # -- jobs ------------------------------------------------------------------------

    def _jobs(
        self,
        jobs: list[Job],
        now: float,
        out: TrackResult,
        start_time_s: Callable[[int], float | None] | None,
        alive: Callable[[int, int], bool] | None = None,
    ) -> list[Finding]:
        respawns = []
        seen: set[str] = set()
        for job in jobs:
            ident = (job.root_pid, job.start_ticks)
            sig = self.first_signature.get(ident) or job_signature(
                job.user, job.cmdline, job.origin
            )
            self.first_signature[ident] = sig
            out.signatures[job.root_pid] = sig
            self.db.record_run(
                RunRecord(
                    sig, job.root_pid, job.start_ticks, job.user, list(job.cmdline),
                    job.origin.to_json(), job.verdict, job.rule, now, now,
                    gpus=list(job.gpu_uuids), max_gpu_bytes=job.gpu_memory_bytes,
                ),
                now,
            )  # fmt: skip
            if sig in seen:
                continue  # a second instance of the same signature: one record
            seen.add(sig)
            rec = self.db.job(sig)
            back_after: float | None = None
            sightings = 1
            first_seen = now
            if rec is not None:
                first_seen, sightings = rec.first_seen, rec.sightings
                if (rec.root_pid, rec.start_ticks) == (job.root_pid, job.start_ticks):
                    back_after = None  # the same process seen again: never a respawn
                elif rec.gone_at is not None:
                    back_after = rec.gone_at
                elif (rec.root_pid, rec.start_ticks) != (job.root_pid, job.start_ticks):
                    # Killed and back while we were not looking (e.g. across a restart),
                    # unless this instance was already running then (overlapping runs).
                    started = start_time_s(job.start_ticks) if start_time_s else None
                    if started is None or started > rec.last_seen:
                        back_after = rec.last_seen
                if back_after is not None:
                    sightings += 1
            record = JobRecord(
                sig, " ".join(job.cmdline), job.user, job.verdict, job.origin.to_json(),
                first_seen, now, job.root_pid, job.start_ticks, job.pids, None, sightings,
            )  # fmt: skip
            self.db.upsert_job(record)
            undone = self._source_undo(job, sig, now, start_time_s)
            if back_after is not None and job.unsanctioned and undone is None:
                respawns.append(self._respawned(job, sig, back_after, now))
        for rec in self.db.present_jobs():
            if rec.signature in seen:
                continue
            if alive is not None and alive(rec.root_pid, rec.start_ticks):
                out.held.add(rec.signature)  # unseen, not seen gone: a source is blind
                continue
            self.db.mark_gone(rec.signature, now)
        here = {(j.root_pid, j.start_ticks) for j in jobs}
        self.source_undos = {k: v for k, v in self.source_undos.items() if k in here}
        self.first_signature = {
            ident: sig
            for ident, sig in self.first_signature.items()
            if ident in here or sig in out.held
        }
        return respawns

    @staticmethod
    def _respawned(job: Job, sig: str, gone_at: float, now: float) -> Finding:
        message = (
            f"respawned: gone at {_when(gone_at)}, back at {_when(now)} "
            f"(+{_gap(now - gone_at)}) as PID {job.root_pid}"
            f"{' on ' + gpus_text(job.gpus) if job.gpus else ''}, started by "
            f"{job.origin.describe()}"
        )
        # No "next run" time: the finding stays open while the ghost runs, so a time in
        # its text would soon be past (see job_findings).
        message += job.advice.finding_text(job.root_pid)
        return Finding(
            kind="respawned",
            severity="high",
            message=message,
            root_pid=job.root_pid,
            details={
                "signature": sig,
                "root": [job.root_pid, job.start_ticks],
                "gone_at": _when(gone_at),
                "back_at": _when(now),
                "gap_s": round(now - gone_at, 1),
                "origin": job.origin.to_json(),
                "gpu_indexes": job.gpu_indexes,
            },
        )

    # -- findings --------------------------------------------------------------------

    def _findings(self, findings: list[Finding], now: float, out: TrackResult) -> None:
        db = self.db
        debounce = self.alerts.min_lifetime_s
        open_by_fp = {f.fingerprint: f for f in db.open_findings()}
        groups: dict[str, list[Finding]] = {}
        for f in findings:
            groups.setdefault(clean(fingerprint(f, out.signatures)) or "", []).append(f)
        current: dict[str, Finding] = {}
        for fp, group in groups.items():
            rec = open_by_fp.get(fp)
            if rec is not None and not _same_job(rec, group):
                # Its job ended while another run of the same source goes on: a finding
                # names one job for its whole life, so it ends with it and the other run
                # gets a finding (and an id) of its own.
                self._resolve(rec, now, out)
                del open_by_fp[fp]
                rec = None
            f, pids = fold(group, rec)
            current[fp] = f
            if rec is None:
                fid = db.insert_finding(
                    fp, f.kind, f.severity, f.message, f.root_pid, f.details, now, len(group)
                )
                named = name_finding_in_commands(f.message, f.root_pid, fid)
                if named != f.message:
                    db.set_finding_message(fid, named)
                new = db.finding(fid)
                assert new is not None
                out.opened.append(new)
                if debounce <= 0:
                    self._spool("open", new, now)
                    db.mark_alerted(fid, now, pids, self._labels(new.id, f))
                continue
            message = name_finding_in_commands(f.message, f.root_pid, rec.id)
            db.touch_finding(rec.id, message, f.root_pid, f.details, now, len(group))
            if rec.last_alert_at is None:  # not alerted yet: debounced
                if now - rec.opened_at >= debounce:
                    fresh = db.finding(rec.id)
                    assert fresh is not None
                    self._spool("open", fresh, now)
                    db.mark_alerted(rec.id, now, pids, self._labels(rec.id, f))
                continue
            due = rec.last_alert_at + self.alerts.reminder_after_s
            change = _change(rec, len(group), pids)
            labels = self._labels(rec.id, f)
            relabel = rec.alerted_routing is not None and rec.alerted_routing != labels
            if relabel:
                # What an alert is identified by changed (the job now holds a GPU): the
                # alert under the old labels is resolved and this one sent, at once.
                change = {**(change or {}), "labels_were": rec.alerted_routing}
            if relabel or (
                f.severity != "info"
                and (now >= due or (change is not None and now - rec.last_alert_at >= CHANGE_MIN_S))
            ):
                fresh = db.finding(rec.id)
                assert fresh is not None
                out.reminded.append(fresh)
                self._spool("remind", fresh, now, change)
                db.mark_alerted(rec.id, now, pids, labels)
        present = set(out.signatures.values())
        for fp, rec in open_by_fp.items():
            if rec.kind == "respawned" and rec.details.get("signature") in present:
                continue  # stays open while the ghost that came back is still running
            if fp.partition(":")[2] in out.held or rec.details.get("signature") in out.held:
                continue  # its job was not seen, but not seen gone either
            if fp not in current:
                self._resolve(rec, now, out)

    def _labels(self, finding_id: int, f: Finding) -> dict[str, str]:
        """The labels an alert about ``f`` is identified by (Alertmanager's, the finest
        any sink uses): kept with each alert so a change is seen."""
        return routing_labels(self.host, finding_id, f.kind, f.severity, f.details)

    def _resolve(self, rec: FindingRecord, now: float, out: TrackResult) -> None:
        """Resolve one finding and spool its ``resolve`` alert (when it was alerted)."""
        db = self.db
        db.resolve_finding(rec.id, now)
        done = db.finding(rec.id)
        assert done is not None
        out.resolved.append(done)
        if rec.last_alert_at is None:
            db.count("findings_not_alerted")  # shorter than alerts.min_lifetime_s
            return
        self._spool("resolve", done, now)

    def _spool(
        self,
        event: AlertEvent,
        finding: FindingRecord,
        now: float,
        change: dict[str, Any] | None = None,
    ) -> None:
        # One record per alert event, the same document spooled for every sink
        # (docs/alerts.md, "Payloads").
        payload = Alert.from_record(event, finding, self.host, now, change).to_json()
        for sink in self.alerts.sinks:
            if sink_accepts(sink, finding):
                self.db.enqueue(finding.id, sink.name, event, payload, now)
