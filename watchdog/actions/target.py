"""Which job a person names on the command line: a PID of it, or a finding about it.

Below the command line (issue 30): ``terminate`` and ``disable-source`` parse the target
and scan, then :func:`find_target` picks the job in that scan, or, for a finding whose
job is gone, builds the target from the origin the finding or the job's records kept.
"""

from __future__ import annotations

import os

from ..config import Config
from ..hostpaths import config_args
from ..model import Finding, Job, ScanResult, finding_ref, origin_from_json
from ..records import FindingRecord
from ..state import JobRecord, RunRecord, StateDB
from .guards import Expected
from .remedy import JobTarget, first_signature, target_from_job

#: The largest id SQLite stores (a signed 64-bit integer).
MAX_ID = 2**63 - 1

#: Finding kinds about one job whose source can still be disabled after the job is gone.
JOB_KINDS = ("rogue-job", "excess-instances", "respawned", "remediation-failed")


class TargetError(Exception):
    """The target names no job that can be acted on; the message says why."""


def find_target(
    config: Config, db: StateDB, kind: str, number: int, result: ScanResult
) -> JobTarget:
    """The job a person named (``terminate``, ``disable-source``), in this scan.

    A resolved finding about a job (the job has exited) still names its source: the
    origin recorded in the finding's details or in the job's row, so ``disable-source``
    works for a cron job between runs.

    Args:
        config: The configuration in force (``paths.proc_root``).
        db: The state database (findings, jobs, runs).
        kind: ``pid`` or ``finding``, as the command line spelt the target.
        number: The PID or the finding id (at most :data:`MAX_ID`).
        result: A scan made for this command.

    Raises:
        TargetError: Unknown finding, a finding not about a job, a resolved finding that
            recorded no origin, a PID in no training job.
    """
    if kind == "pid":
        return _pid_target(config, db, number, result)
    return _finding_target(config, db, number, result)


def _pid_target(config: Config, db: StateDB, number: int, result: ScanResult) -> JobTarget:
    """The job PID ``number`` is part of, or the run the rogue service ``number`` launched."""
    job = next((j for j in result.jobs if number in j.pids), None)
    launched = _launched_by(result, {number}) if job is None else None
    if launched is not None:
        # A rogue service's PID names the run it launched: the two are stopped
        # together (the service first), as its rogue-service finding says.
        job, service = launched
        sig = first_signature(db, job)
        fid = _open_finding_for(db, sig, job.root_pid, job.start_ticks)
        target = target_from_job(job, sig, fid, config.paths.proc_root)
        return _with_service(target, job, service)
    if job is None:
        hint = ""
        if number <= MAX_ID and db.finding(number) is not None:
            hint = f"; for finding {number} write {finding_ref(number)}"
        args = config_args(config.source)
        if not os.path.exists(f"{config.paths.proc_root}/{number}"):
            # The run a pasted hint named has ended (a cron ghost lives seconds): say so,
            # and where its source is still named, not "not a training job".
            raise TargetError(
                f"PID {number} is not running (it exited): nothing to terminate; a job's "
                f"finding still names what starts it (`rogue-watchdog status{args}`){hint}"
            )
        raise TargetError(
            f"PID {number} is not part of a training job "
            f"(see `rogue-watchdog explain{args} {number}`){hint}"
        )
    # The signature the run got first, as its finding (tracker) is filed: a later look
    # that describes its origin otherwise still names that finding (seed 91001's class).
    sig = first_signature(db, job)
    fid = _open_finding_for(db, sig, job.root_pid, job.start_ticks)
    return target_from_job(job, sig, fid, config.paths.proc_root)


def _finding_target(config: Config, db: StateDB, number: int, result: ScanResult) -> JobTarget:
    """The job finding ``number`` is about: running in ``result``, else as recorded."""
    finding = db.finding(number)
    if finding is None:
        raise TargetError(f"no finding {finding_ref(number)} in {db.path}")
    if finding.kind == "rogue-service":
        return _service_target(config, db, finding, result)
    if finding.resolved_at is not None and finding.kind not in JOB_KINDS:
        raise TargetError(f"finding {finding_ref(number)} is resolved; nothing to act on")
    details = finding.details
    recorded_sig = details.get("signature")
    sig = (
        recorded_sig
        if isinstance(recorded_sig, str) and recorded_sig
        else finding.fingerprint.partition(":")[2]
    )
    rec = db.job(sig)
    # The finding names one job: the one rooted at its root PID. Another run of the same
    # source (a sanctioned one, an other excess run) is never what F<id> acts on.
    root = details.get("root")
    same = [
        j
        for j in result.jobs
        if [j.root_pid, j.start_ticks] == root or (root is None and first_signature(db, j) == sig)
    ]
    periodic = root is None and isinstance(details.get("periodic"), dict)
    for job in same:
        # A periodic finding names its loop, not one run: the run going now is its job.
        if (job.root_pid == finding.root_pid or periodic) and job.unsanctioned:
            return target_from_job(job, sig, number, config.paths.proc_root)
    if rec is not None and rec.root_pid != finding.root_pid:
        rec = None  # the signature's record is of another run: not this finding's job
    return _recorded_target(db, finding, sig, rec)


def _recorded_target(
    db: StateDB, finding: FindingRecord, sig: str, rec: JobRecord | None
) -> JobTarget:
    """The job of ``finding`` that does not run now, from the origin the finding, the
    job's row (``rec``) or the finding's own run recorded."""
    number, details = finding.id, finding.details
    root = details.get("root")
    # Not running now: the source can still be disabled from the recorded origin.
    origin = details.get("origin")
    run = _own_run(db, root, sig) if rec is None else None
    if not (isinstance(origin, dict) and origin.get("kind")):
        origin = rec.origin if rec is not None else (run.origin if run else None)
    if rec is None and origin is None:
        if finding.resolved_at is not None:
            raise TargetError(
                f"finding {finding_ref(number)} is resolved and recorded no origin for its job;"
                " nothing to act on"
            )
        raise TargetError(
            f"finding {finding_ref(number)} ({finding.kind}) is not about a tracked job"
        )
    if not origin:
        raise TargetError(
            f"finding {finding_ref(number)}: no origin was recorded for its job; nothing to act on"
        )
    verdict = rec.verdict if rec is not None else _verdict_of(finding.kind)
    target = JobTarget(
        signature=sig, finding_id=number,
        root_pid=rec.root_pid if rec else int(finding.root_pid or 0),
        start_ticks=rec.start_ticks if rec else 0, members=[],
        user=rec.user if rec else (run.user if run else None),
        cmdline=tuple(run.cmdline) if run else (), exe=None,
        origin=origin_from_json(origin), verdict=verdict, running=False,
        summary=rec.summary if rec else finding.message,
    )  # fmt: skip
    return target


def _own_run(db: StateDB, root: object, sig: str) -> RunRecord | None:
    """The finding's own run (``job_runs``) with a recorded origin, asked when the
    ``jobs`` row of its signature has moved on to a later run: a terminated job that
    cron started again still names its source by ``disable-source F<id>`` (issue 33)."""
    if not (isinstance(root, list) and len(root) == 2 and all(type(x) is int for x in root)):
        return None
    run = db.run(root[0], root[1], sig)
    if run is None or not isinstance(run.origin, dict) or not run.origin.get("kind"):
        return None
    return run


def _launched_by(result: ScanResult, pids: set[int]) -> tuple[Job, Finding] | None:
    """The job a rogue service among ``pids`` launched, and this scan's ``rogue-service``
    finding that names it (the newest run first), or None."""
    found = [
        f
        for f in result.findings
        if f.kind == "rogue-service" and pids & set(f.details.get("service_pids") or [])
    ]
    for f in sorted(found, key=lambda f: -(f.root_pid or 0)):
        job = next((j for j in result.jobs if j.root_pid == f.root_pid and j.unsanctioned), None)
        if job is not None:
            return job, f
    return None


def _with_service(target: JobTarget, job: Job, finding: Finding) -> JobTarget:
    """``target`` with the service processes ``finding`` names, as this scan saw them in
    the job's lineage (the identity every signal is pinned to)."""
    named = set(finding.details.get("service_pids") or [])
    target.service = [
        Expected(p.pid, p.start_ticks, p.cmdline or None) for p in job.lineage if p.pid in named
    ]
    again = target.restarts
    if again is not None and again.launcher in {(e.pid, e.start_ticks) for e in target.service}:
        # The launcher that may start it again is the service stopped with it: nothing
        # left named to start it (else `may-return` of a terminate that stopped it).
        target.restarts = None
    return target


def _service_target(
    config: Config, db: StateDB, finding: FindingRecord, result: ScanResult
) -> JobTarget:
    """The job a ``rogue-service`` finding names, with its service: the run it names
    when it still runs, else the run its service launched since (a service that starts
    a new trainer after each one ends)."""

    named = {p for p in finding.details.get("service_pids") or [] if isinstance(p, int)}
    launched = _launched_by(result, named) if named else None
    if launched is not None:
        job, fresh = launched
        sig = first_signature(db, job)
        fid = finding.id if job.root_pid == finding.root_pid else None
        target = target_from_job(job, sig, fid, config.paths.proc_root)
        return _with_service(target, job, fresh)
    running = next(
        (j for j in result.jobs if j.root_pid == finding.root_pid and j.unsanctioned), None
    )
    if running is None:
        raise TargetError(
            f"finding {finding_ref(finding.id)} (rogue-service): neither its run PID "
            f"{finding.root_pid} nor a run its service launched runs now; nothing to act on"
        )
    sig = first_signature(db, running)
    target = target_from_job(running, sig, finding.id, config.paths.proc_root)
    if named:
        pids = ", ".join(str(p) for p in sorted(named))
        target.service_note = (
            f"the service PID {pids} the finding names no longer launched this run "
            "(exited, or no longer its parent): only the run is stopped"
        )
    return target


def _verdict_of(finding_kind: str) -> str:
    """The job verdict a finding kind implies (``respawned`` etc. are only raised for
    rogue or excess jobs)."""
    return "excess" if finding_kind == "excess-instances" else "rogue"


def _open_finding_for(db: StateDB, sig: str, root_pid: int, start_ticks: int) -> int | None:
    """The open job finding about the job rooted at ``root_pid`` (never one about another
    run of the same source): by its recorded root identity, else by signature; for a run
    of a periodic loop, the loop's finding."""
    mine = [
        f
        for f in db.open_findings()
        if f.kind in ("rogue-job", "excess-instances") and f.root_pid == root_pid
    ]
    for f in mine:
        if f.details.get("root") == [root_pid, start_ticks]:
            return f.id
    found = next((f.id for f in mine if f.fingerprint.partition(":")[2] == sig), None)
    if found is None:  # a run of a periodic loop: the loop's finding
        found = next(
            (
                f.id
                for f in db.open_findings()
                if f.kind in ("rogue-job", "excess-instances")
                and f.fingerprint.partition(":")[2] == f"periodic:{sig}"
            ),
            None,
        )
    return found
