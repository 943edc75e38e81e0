"""Remember jobs across ticks and restarts; notice a rogue job that came back.

Jobs are remembered by a signature: the parts of their origin that will start them
again (cron file and line, unit, Slurm account and job name...) plus the normalised
command line and user. A rogue signature that disappears and appears again is a
:class:`Return`. When its run was stopped (by us, by a person, by a signal) or its
source disabled, or nothing says how it ended, the return opens a ``respawned`` finding,
also across a daemon restart: the seed case is a ghost killed by hand that came back 12
minutes later from a forgotten cron entry. When its run ended by itself (the kernel's
exit event says so) the return is *periodic*: no ``respawned``; the job's findings
become one periodic finding (:mod:`.periodic`). A run a person started again by hand
from another login session than the stopped run's is a new job, not a return
(:func:`~watchdog.policy.anew.started_anew`): its ``rogue-job`` alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ...hosttext import quoted_command
from ...model import Finding, Job
from ...policy.anew import started_anew
from ...policy.findings import gpus_text
from ...policy.signature import job_signature
from ...state import (
    ActionRecord,
    JobRecord,
    RunRecord,
    SourceUndo,
    source_undo,
)
from ..alerts.alert import local_iso
from .pending import JobStore

# One clock tick (proc(5): a process's start time is in whole ticks, truncated).
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")

Ident = tuple[int, int]  # a process's identity: (PID, start ticks)

# How a job's previous run ended, as far as the evidence goes (None: no evidence).
Ended = Literal["exited", "stopped"]


@dataclass(frozen=True)
class Return:
    """An unsanctioned job signature back this tick after its previous run was gone.

    Attributes:
        signature: The job signature.
        job: The run that came back.
        previous_start: When the previous run was first seen (tick time).
        ended: How the previous run ended: ``exited`` by itself, ``stopped`` (a signal,
            our terminate, its source disabled), or None without evidence.
        gone_at: When the previous run was seen gone (or last seen, when it was not
            seen gone).
    """

    signature: str
    job: Job
    previous_start: float
    ended: Ended | None
    gone_at: float | None = None


@dataclass(frozen=True)
class JobsSeen:
    """What recording one tick's jobs found.

    Attributes:
        signatures: Root PID → job signature of every job seen.
        held: Signatures of jobs not seen but not seen gone (a source was blind).
        respawns: ``respawned`` findings of rogue signatures that came back.
        returns: Every unsanctioned signature that came back, by signature (those
            whose runs ended by themselves open no ``respawned``).
        first_signature: By identity, the signature each running job root got first
            (kept for the next tick: a job keeps it for its life).
        source_undos: By identity, the undo that re-enabled the source the job started
            from after (looked up once per job); None when there is none.
    """

    signatures: dict[int, str] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    respawns: list[Finding] = field(default_factory=list)
    returns: dict[str, Return] = field(default_factory=dict)
    first_signature: dict[Ident, str] = field(default_factory=dict)
    source_undos: dict[Ident, SourceUndo | None] = field(default_factory=dict)


def record_jobs(
    db: JobStore,
    jobs: list[Job],
    now: float,
    first_signature: Mapping[Ident, str],
    source_undos: Mapping[Ident, SourceUndo | None],
    start_time_s: Callable[[int], float | None] | None = None,
    alive: Callable[[int, int], bool] | None = None,
    exits: Mapping[int, int] | None = None,
) -> JobsSeen:
    """Record one tick's jobs in the ``runs`` and ``jobs`` tables; mark the jobs not seen
    gone (unless ``alive`` says their root still runs: held).

    A signature back after every run of it that ran last ended by itself (``exits``)
    is periodic: it opens no ``respawned``. A run stopped by a signal, our terminate or
    a disabled source, or one nothing says how it ended (no exit event: polling only,
    lost events, a daemon restart), opens ``respawned``: never quieter without evidence.

    Args:
        db: The state database (inside the tick's transaction), or the rows a tick
            that cannot write keeps in memory over it (:class:`~.pending.PendingJobs`).
        jobs: The tracked jobs of this scan (not ``ignored``).
        now: POSIX time of the tick.
        first_signature: The previous tick's :attr:`JobsSeen.first_signature`.
        source_undos: The previous tick's :attr:`JobsSeen.source_undos`.
        start_time_s: Converts a job's start ticks to POSIX seconds; with it, a new
            root PID under a known signature counts as a return only when it started
            after the signature was last seen (not a second instance that ran all along).
        alive: ``(pid, start_ticks) -> bool``, given while a source is blind.
        exits: PID → wait(2) status of processes seen exiting (the kernel's exit
            events), kept by the caller across ticks.
    """
    firsts = dict(first_signature)
    undos = dict(source_undos)
    signatures: dict[int, str] = {}
    respawns = []
    returns: dict[str, Return] = {}
    seen: set[str] = set()
    for job in jobs:
        ident = (job.root_pid, job.start_ticks)
        sig = firsts.get(ident) or job_signature(job.user, job.cmdline, job.origin)
        firsts[ident] = sig
        signatures[job.root_pid] = sig
        db.record_run(run_record(job, sig, now), now)
        if sig in seen:
            continue  # a second instance of the same signature: one record
        seen.add(sig)
        rec = db.job(sig)
        back_after = _back_after(rec, job, start_time_s)
        sightings = 1
        first_seen = now
        if rec is not None:
            first_seen, sightings = rec.first_seen, rec.sightings
            if back_after is not None:
                sightings += 1
        record = JobRecord(
            sig, " ".join(job.cmdline), job.user, job.verdict, job.origin.to_json(),
            first_seen, now, job.root_pid, job.start_ticks, job.pids, None, sightings,
        )  # fmt: skip
        db.upsert_job(record)
        if ident not in undos:
            undos[ident] = source_undo_of(db, job, sig, now, start_time_s)
        if back_after is not None and job.unsanctioned:
            assert rec is not None  # only a known signature comes back
            back = _return(db, sig, job, rec, exits or {}, now, back_after)
            # Any class: a probe loop is one periodic finding too; and after an undo as
            # well (a cron line put back runs every minute: one loop, not a page per run;
            # the new user's hour, issue 33).
            returns[sig] = back
            # A notebook, server or probe that comes back is not a respawned ghost: its
            # own unsanctioned-gpu-use finding says what it is (issue 35); nor is a run
            # an operator's undo of its source started (its finding names the undo);
            # nor a run a person started again by hand from another login session
            # than the stopped run's: a new job, paged as its own rogue-job (fresh
            # user, first day: a trainer run again from a login shell 22 s after its
            # terminate was paged respawned and remediation-failed).
            if (
                back.ended != "exited"
                and job.may_train
                and undos[ident] is None
                and not started_anew(job, [rec.origin])
            ):
                respawns.append(respawned_finding(job, sig, back_after, now))
    held = _held_or_gone(db, seen, now, alive)
    here = {(j.root_pid, j.start_ticks) for j in jobs}
    return JobsSeen(
        signatures=signatures,
        held=held,
        respawns=respawns,
        returns=returns,
        first_signature={i: s for i, s in firsts.items() if i in here or s in held},
        source_undos={i: u for i, u in undos.items() if i in here},
    )


def run_record(job: Job, sig: str, now: float) -> RunRecord:
    """The ``runs`` row of ``job`` seen at ``now`` under signature ``sig``."""
    return RunRecord(
        sig, job.root_pid, job.start_ticks, job.user, list(job.cmdline),
        job.origin.to_json(), job.verdict, job.rule, now, now,
        gpus=list(job.gpu_uuids), max_gpu_bytes=job.gpu_memory_bytes,
        workload=job.workload, workload_evidence=list(job.workload_evidence),
    )  # fmt: skip


def _back_after(
    rec: JobRecord | None, job: Job, start_time_s: Callable[[int], float | None] | None
) -> float | None:
    """When ``job``'s signature (recorded as ``rec``) was last seen before this run
    came back; None when it is no return (a new signature, the same process)."""
    if rec is None or (rec.root_pid, rec.start_ticks) == (job.root_pid, job.start_ticks):
        return None  # the same process seen again: never a respawn
    if rec.gone_at is not None:
        return rec.gone_at
    # Killed and back while we were not looking (e.g. across a restart), unless this
    # instance was already running then (overlapping runs). A run that started at the
    # very time of that look (the tick's clock, read before /proc was) was not there
    # when it looked: supervisord restarting a program the moment it exits (trust
    # simulator seed 65001: its return paged remediation-failed a second time).
    # A start time is truncated to whole clock ticks: a run that started at the very
    # time of that look (after /proc was listed) can read up to a tick before it. Not
    # seen then, it was not there: a return (never quieter without evidence; the
    # simulator's sweep, tests/unit/test_sim_faults.py case 20: a trainer a person
    # killed and its launcher started again at the look's time opened no respawned).
    started = start_time_s(job.start_ticks) if start_time_s else None
    if started is None or started + _TICK_S > rec.last_seen:
        return rec.last_seen
    return None


def _held_or_gone(
    db: JobStore, seen: set[str], now: float, alive: Callable[[int, int], bool] | None
) -> set[str]:
    """Mark the present jobs not ``seen`` this tick gone; returns the signatures held
    instead (their root still runs while a source is blind)."""
    held: set[str] = set()
    for rec in db.present_jobs():
        if rec.signature in seen:
            continue
        if alive is not None and alive(rec.root_pid, rec.start_ticks):
            held.add(rec.signature)  # unseen, not seen gone: a source is blind
            continue
        db.mark_gone(rec.signature, now)
    return held


def _return(
    db: JobStore,
    sig: str,
    job: Job,
    previous: JobRecord,
    exits: Mapping[int, int],
    now: float,
    gone_at: float,
) -> Return:
    """``job`` back under ``sig``, with how the runs before it ended (every instance
    that ran when the signature was last seen; not those seen now)."""
    started, ended = last_ended(db, previous, exits, now)
    return Return(sig, job, started, ended, gone_at)


def last_ended(
    db: JobStore, previous: JobRecord, exits: Mapping[int, int], now: float
) -> tuple[float, Ended | None]:
    """When the runs of a job signature seen last (every instance that ran when it was
    last seen, none seen at ``now``) started, the latest one, and how they ended
    (:func:`how_ended`).

    Args:
        db: The state database.
        previous: The signature's ``jobs`` row as of its last sighting.
        exits: PID → wait(2) status of processes seen exiting.
        now: POSIX time of the tick.
    """
    sig = previous.signature
    runs = [r for r in db.last_runs(sig, previous.last_seen) if r.last_seen < now]
    roots = [(r.root_pid, r.start_ticks) for r in runs]
    if (previous.root_pid, previous.start_ticks) not in roots:
        roots.append((previous.root_pid, previous.start_ticks))
    started = max((r.started_at for r in runs), default=previous.first_seen)
    return started, how_ended(db.actions_for(sig), roots, exits)


def how_ended(
    actions: Sequence[ActionRecord], roots: Sequence[tuple[int, int]], exits: Mapping[int, int]
) -> Ended | None:
    """How the runs rooted at ``roots`` (PID, start ticks) ended: ``stopped`` when we
    terminated one or disabled their source (an action that took effect and stands), or
    an exit status says a signal ended one; ``exited`` when the exit status of every
    one says it exited by itself (any exit code: a crash is no stop by anyone); None
    otherwise (no evidence for some run: a return without it is a respawn).

    Args:
        actions: The signature's actions, most recent first.
        roots: The identities of the runs that ran when the signature was last seen.
        exits: PID → wait(2) status of processes seen exiting.
    """
    ours = [list(r) for r in roots]
    for act in actions:
        if act.dry_run or act.undone_at is not None or act.outcome not in ("ok", "partial"):
            continue
        if act.kind == "disable-source" or (
            act.kind == "terminate" and act.details.get("root") in ours
        ):
            return "stopped"
    statuses = [exits.get(pid) for pid, _start in roots]
    # wait(2): the signal that ended a process is in the low 7 bits; an exit leaves 0.
    if any(s is not None and s & 0x7F for s in statuses):
        return "stopped"
    if statuses and all(s is not None for s in statuses):
        return "exited"
    return None


def source_undo_of(
    db: JobStore,
    job: Job,
    sig: str,
    now: float,
    start_time_s: Callable[[int], float | None] | None,
) -> SourceUndo | None:
    """The undo that re-enabled ``job``'s source before it started, if any (asked once
    per job identity: what started a process does not change while it runs)."""
    if not job.unsanctioned:
        return None
    found = source_undo(db.actions_for(sig))
    started = (start_time_s(job.start_ticks) if start_time_s else None) or now
    if found is not None and started < found.undo.created_at:
        return None  # it ran before the undo: the undo did not start it
    return found


def _gap(seconds: float) -> str:
    minutes, sec = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m" if not sec or minutes >= 10 else f"{minutes}m{sec:02d}s"


def respawned_finding(job: Job, sig: str, gone_at: float, now: float) -> Finding:
    """The ``respawned`` finding of a rogue job whose signature was gone since
    ``gone_at`` and is back at ``now``."""
    message = (
        f"respawned: gone at {local_iso(gone_at)}, back at {local_iso(now)} "
        f"(+{_gap(now - gone_at)}) as PID {job.root_pid}"
        f"{' on ' + gpus_text(job.gpus) if job.gpus else ''}, user {job.user or '-'}, "
        f"{quoted_command(job.cmdline, 160)}, started by {job.origin.describe()}"
    )
    # The command that came back, as the job's own finding names it: a return of an
    # unknown origin named nothing else a person could tell it by (issue 33, fresh
    # user K: "respawned … as PID 25746, started by unknown origin").
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
            "gone_at": local_iso(gone_at),
            "back_at": local_iso(now),
            "gap_s": round(now - gone_at, 1),
            "origin": job.origin.to_json(),
            "gpu_indexes": job.gpu_indexes,
        },
    )
