"""Periodic runs are one finding.

A job that ends by itself and comes back from the same origin (a cron line, a person's
``while true; do …; sleep 5; done`` in tmux) is *periodic*: the findings of each of its
runs become one open finding per kind, folded by ``<kind>:periodic:<signature>``, that
names the loop (how many runs, about how often, since when, from where) and the latest
run, instead of a ``rogue-job`` and a ``respawned`` per run (issue 35, case 1: 175 pages
in 8 minutes for a 0.3 s probe run every 5 s). It names no one job (no root PID), stays
open between runs while the next one is due, and resolves once the loop has been quiet
for twice its cadence plus :data:`QUIET_GRACE_S`, or at the next tick once this product
stopped its latest run and its source (:func:`~.current.ended_for_good`: nothing known
is left to start a next run).

A loop is one finding from its first run: the finding of a run that ended by itself is
not resolved at once but waits :data:`RETURN_WINDOW_S` for the job to come back
(:func:`awaiting_return`); a run back within it continues that finding as the loop's
(same id, no second open: it is refiled under the periodic fingerprint), and one back
later opens a new periodic finding (the first resolved when the window ran out, saying
the job ended by itself). A cron ghost of 20 s every minute was paged twice: its first
run's ``rogue-job``, then its loop's.

A run stopped by a signal, by us or by a disabled source that comes back still opens
``respawned`` (:mod:`.jobs`): that return is paged after the settle when it still runs
(``Tracker._held_returns``), the loop stays one finding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...model import Finding, Job
from ...state import FindingRecord, StateDB
from ..alerts.alert import local_iso
from .jobs import Return, last_ended

# Findings about one run of a job that a periodic loop folds, ``unsanctioned-gpu-use``
# (a non-training class) too: a probe loop is the common case. ``remediation-failed``
# about a job back after a terminate (its ``details.signature``) too: the loop's next run
# is the same failed remediation, not a new one (a loop's run back after a terminate
# paged it critical again at each run, the tracker tying it to the run's root PID).
PERIODIC_KINDS = frozenset(
    {"rogue-job", "excess-instances", "rogue-service", "unsanctioned-gpu-use",
     "remediation-failed"}
)  # fmt: skip
# A loop quiet for twice its cadence plus this long has stopped: its finding resolves.
QUIET_GRACE_S = 60.0
PREFIX = "periodic:"
# How long the finding of a run that ended by itself waits for the job to come back (and
# become its loop's finding) before it resolves: a loop up to every few minutes (cron's
# */5) is one finding from its first run; a slower one is paged again at its second.
RETURN_WINDOW_S = 300.0


@dataclass(frozen=True)
class Loop:
    """One periodic job signature.

    Attributes:
        signature: The job signature.
        runs: Runs seen since the loop began (the first one included).
        first_at: When its first run was first seen (tick time).
        last_at: When its latest run was first seen.
    """

    signature: str
    runs: int
    first_at: float
    last_at: float

    @property
    def cadence_s(self) -> float:
        """The mean time from one run's start to the next, one decimal."""
        return round((self.last_at - self.first_at) / max(1, self.runs - 1), 1)

    @property
    def quiet_s(self) -> float:
        """How long without a run before the loop counts as stopped."""
        return 2 * self.cadence_s + QUIET_GRACE_S

    def to_json(self, pid: int | None) -> dict[str, Any]:
        """``details.periodic`` (docs/respawn.md): ``pid`` is the latest run's root."""
        return {
            "runs": self.runs,
            "cadence_s": self.cadence_s,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "pid": pid,
        }

    @classmethod
    def from_details(cls, signature: str, details: Mapping[str, Any]) -> Loop | None:
        """The loop an open periodic finding recorded, or None when it is not one (or
        its record is damaged)."""
        p = details.get("periodic")
        if not isinstance(p, dict):
            return None
        try:
            return cls(signature, int(p["runs"]), float(p["first_at"]), float(p["last_at"]))
        except (KeyError, TypeError, ValueError):
            return None


def periodic_signature(rec: FindingRecord) -> str | None:
    """The signature of an open periodic finding, None for any other finding."""
    sig = rec.details.get("signature")
    if isinstance(sig, str) and rec.fingerprint.endswith(f":{PREFIX}{sig}"):
        return sig
    return None


def first_run_fingerprint(fp: str) -> str | None:
    """For a periodic fingerprint ``<kind>:periodic:<signature>``, the fingerprint of
    the finding of one run of that job (``<kind>:<signature>``); None for any other."""
    kind, _sep, rest = fp.partition(":")
    if not rest.startswith(PREFIX):
        return None
    return f"{kind}:{rest[len(PREFIX) :]}"


def awaiting_return(
    db: StateDB,
    open_records: Iterable[FindingRecord],
    present: set[str],
    returns: Mapping[str, Return],
    exits: Mapping[int, int],
    now: float,
) -> dict[str, float]:
    """The open findings about one run of a job (a kind a loop folds) whose job is gone,
    or came back this tick, after its last runs all ended by themselves (exit statuses,
    no signal, no action of ours: :func:`~.jobs.how_ended`): each may become its loop's
    finding should the job come back within :data:`RETURN_WINDOW_S`.

    Args:
        db: The state database (the jobs and their runs, this tick's recorded).
        open_records: The findings open before this tick.
        present: Signatures of the jobs seen this tick.
        returns: This tick's returns (:attr:`~.jobs.JobsSeen.returns`).
        exits: PID → wait(2) status of processes seen exiting.
        now: POSIX time of the tick.

    Returns:
        Fingerprint → when its job was seen gone.
    """
    out: dict[str, float] = {}
    for rec in open_records:
        if rec.kind not in PERIODIC_KINDS or rec.root_pid is None:
            continue
        sig = rec.fingerprint.partition(":")[2]
        if sig.startswith(PREFIX):
            continue
        if sig in present:
            back = returns.get(sig)
            if back is not None and back.ended == "exited" and back.gone_at is not None:
                out[rec.fingerprint] = back.gone_at
            continue
        job = db.job(sig)
        if job is None or job.gone_at is None:
            continue  # not a job's finding, or not seen gone (a blind source holds it)
        if last_ended(db, job, exits, now)[1] == "exited":
            out[rec.fingerprint] = job.gone_at
    return out


def loops(
    open_records: Iterable[FindingRecord], returns: Mapping[str, Return], now: float
) -> dict[str, Loop]:
    """Every periodic signature this tick: those with an open periodic finding, each
    counted one run further when it came back now, and those whose run ended by itself
    and came back now (a loop of two runs).

    Args:
        open_records: The findings open before this tick.
        returns: This tick's returns (:attr:`~.jobs.JobsSeen.returns`).
        now: POSIX time of the tick.
    """
    found: dict[str, Loop] = {}
    for rec in open_records:
        sig = periodic_signature(rec)
        loop = Loop.from_details(sig, rec.details) if sig is not None else None
        if loop is not None and (sig not in found or found[sig].runs < loop.runs):
            found[loop.signature] = loop
    for sig, back in returns.items():
        if sig in found:
            was = found[sig]
            found[sig] = dataclasses.replace(was, runs=was.runs + 1, last_at=now)
        elif back.ended == "exited":
            found[sig] = Loop(sig, 2, min(back.previous_start, now), now)
    return found


def loop_returns(
    respawns: Iterable[Finding],
    open_records: Iterable[FindingRecord],
    returns: Mapping[str, Return],
    now: float,
    first_tick: float,
) -> list[Finding]:
    """``respawns`` without those about a run an open periodic finding already covers
    after a restart: its loop is in the database, not quiet yet, the run before ended
    before this process's first tick, and nothing says it was stopped (``ended`` None:
    the exit statuses of the runs seen before a restart were the old process's, in its
    memory only). That run is the loop's, not a ghost's return: before (fresh user F,
    issue 33), a daemon restart opened a high ``respawned`` beside the cron ghost's open
    ``periodic: 3 runs`` finding. A run stopped by an action of ours (in the database),
    and any run that ended while this process watched without an exit status saying how
    (events lost: never quieter without evidence), still open ``respawned``.

    Args:
        respawns: This tick's ``respawned`` findings (:attr:`~.jobs.JobsSeen.respawns`).
        open_records: The findings open before this tick.
        returns: This tick's returns (:attr:`~.jobs.JobsSeen.returns`).
        now: POSIX time of the tick.
        first_tick: POSIX time of this process's first tick.
    """
    open_loops: dict[str, Loop] = {}
    for rec in open_records:
        sig = periodic_signature(rec)
        loop = Loop.from_details(sig, rec.details) if sig is not None else None
        if loop is not None:
            open_loops[loop.signature] = loop
    out = []
    for f in respawns:
        sig = f.details.get("signature")
        loop = open_loops.get(sig) if isinstance(sig, str) else None
        back = returns.get(sig) if isinstance(sig, str) else None
        covered = loop is not None and now - loop.last_at <= loop.quiet_s
        before_us = back is not None and back.gone_at is not None and back.gone_at <= first_tick
        if covered and before_us and back is not None and back.ended is None:
            continue  # the loop's run: its periodic finding goes on about it
        out.append(f)
    return out


def expected(
    open_records: Iterable[FindingRecord],
    present: set[str],
    last_seen: Mapping[str, float],
    now: float,
) -> set[str]:
    """Signatures of open periodic findings that stay open unreported: between two
    runs of a loop that has not been quiet for :attr:`Loop.quiet_s`. A signature seen
    this tick whose findings were not reported (the run is sanctioned now) is not.

    Args:
        open_records: The findings open before this tick.
        present: Signatures of the jobs seen this tick.
        last_seen: Signature → when a run of it was last seen.
        now: POSIX time of the tick.
    """
    out = set()
    for rec in open_records:
        sig = periodic_signature(rec)
        loop = Loop.from_details(sig, rec.details) if sig is not None else None
        if loop is None or sig in present:
            continue
        if now - last_seen.get(loop.signature, loop.last_at) <= loop.quiet_s:
            out.add(loop.signature)
    return out


def as_periodic(
    findings: Iterable[Finding],
    signatures: Mapping[int, str],
    jobs: Mapping[int, Job],
    found: Mapping[str, Loop],
    open_records: Iterable[FindingRecord],
) -> list[Finding]:
    """This tick's findings with those about a run of a loop made the loop's one
    finding of their kind: no root PID (it names no one run), ``details.periodic``
    (runs, cadence, since, the latest run's PID), the loop's origin, and the GPUs its
    runs held (``gpus``: up to its first alert, so its alert labels stay as they were
    while runs come and go; ``gpu_indexes``: all).

    Args:
        findings: This tick's findings.
        signatures: Root PID → job signature of every job seen.
        jobs: Root PID → job of every job seen.
        found: The periodic signatures (:func:`loops`).
        open_records: The findings open before this tick.
    """
    by_fp = {rec.fingerprint: rec for rec in open_records}
    out = []
    for f in findings:
        sig = signatures.get(f.root_pid) if f.root_pid is not None else None
        loop = found.get(sig) if sig is not None else None
        if loop is None or f.kind not in PERIODIC_KINDS or not _about_a_run(f):
            out.append(f)
            continue
        job = jobs.get(f.root_pid) if f.root_pid is not None else None
        # The loop's finding, or its first run's that it continues (awaiting_return).
        was = by_fp.get(f"{f.kind}:{PREFIX}{loop.signature}") or by_fp.get(
            f"{f.kind}:{loop.signature}"
        )
        out.append(_folded(f, loop, job, was))
    return out


def loop_fingerprint(f: Finding, sig: str | None) -> str | None:
    """The fingerprint of the loop's finding (``<kind>:periodic:<signature>``) that
    :func:`as_periodic` folds ``f``, a finding about a run of job signature ``sig``,
    into while that loop has one open; None for a finding no loop folds."""
    if sig is None or f.kind not in PERIODIC_KINDS or not _about_a_run(f):
        return None
    return f"{f.kind}:{PREFIX}{sig}"


def _about_a_run(f: Finding) -> bool:
    """False for a ``remediation-failed`` about a terminate's tree (``terminate-<id>``:
    identified by its action already), True for every other finding a loop folds."""
    return f.kind != "remediation-failed" or "signature" in f.details


def _folded(f: Finding, loop: Loop, job: Job | None, was: FindingRecord | None) -> Finding:
    before = was.details if was is not None else {}
    details = {k: v for k, v in f.details.items() if k != "root"}
    union = _union(before.get("gpus"), f.details.get("gpus"))
    indexes = {g["index"] for g in union if isinstance(g.get("index"), int)}
    indexes.update(i for i in before.get("gpu_indexes") or () if isinstance(i, int))
    details.update(
        signature=loop.signature,
        fingerprint=f"{PREFIX}{loop.signature}",
        periodic=loop.to_json(f.root_pid),
        gpu_indexes=sorted(indexes),
    )
    if "gpus" in f.details:
        # The GPUs its alert is identified by grow until its first alert and then stay
        # (a run on another GPU is the same loop, not a reason to page again);
        # gpu_indexes keeps every GPU any run held.
        alerted = was is not None and was.last_alert_at is not None
        details["gpus"] = before.get("gpus", []) if alerted else union
    if job is not None:
        details["origin"] = job.origin.to_json()
    message = (
        f"periodic: {cadence_text(loop.runs, loop.cadence_s)} since "
        f"{local_iso(loop.first_at)}; latest run: {f.message}"
    )
    return dataclasses.replace(f, message=message, root_pid=None, details=details)


def _union(was: object, now: object) -> list[dict[str, Any]]:
    """The GPUs of two sightings, each once (by UUID, else index), in first-seen order."""
    out: list[dict[str, Any]] = []
    keys: set[object] = set()
    for gpus in (was, now):
        for g in gpus if isinstance(gpus, list) else []:
            if not isinstance(g, dict):
                continue
            key = g.get("uuid") or g.get("index")
            if key not in keys:
                keys.add(key)
                out.append(g)
    return out


def cadence_text(runs: int, cadence_s: float) -> str:
    """``12 runs about every 5s``; ``2 runs 1m apart`` (two runs make one gap, not a
    rhythm); ``5 runs less than 1s apart`` (was ``2 runs about every under 1s``, issue 33).

    Args:
        runs: How many runs the loop has had.
        cadence_s: The typical gap between their starts, in seconds.
    """
    gap = gap_text(cadence_s)
    if gap == "under 1s":
        return f"{runs} runs less than 1s apart"
    if runs <= 2:
        return f"{runs} runs {gap} apart"
    return f"{runs} runs about every {gap}"


def gap_text(seconds: float) -> str:
    """``under 1s``, ``5s``, ``1m``, ``2m30s``, ``1h05m``, ``7d``: a cadence as a person
    says it ("about every 0s" said nothing of a loop of sub-second runs)."""
    s = round(seconds)
    if s < 1:
        return "under 1s"
    if s < 60:
        return f"{s}s"
    minutes, sec = divmod(s, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s" if sec else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    return f"{round(hours / 24)}d"
