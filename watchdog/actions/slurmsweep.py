"""Job-end sweep for Slurm nodes: leftovers of ended jobs are named, stopped, or drain the node.

A job's processes can outlive it: a worker that called ``setsid()`` and ignores SIGTERM
leaves the job's process tree (proctrack/linuxproc follows parentage only) and keeps the
GPU after Slurm calls the job complete. In the manner of LBNL NHC's
``check_ps_userproc_lineage``, but never on a claim alone: a process is a leftover of
job N only when

* its membership is proven: the job's cgroup names job N (proctrack/cgroup), or the
  daemon saw it below job N's slurmstepd while the job ran (the ``slurm_members`` record
  of the state database), or it descends from a process proven so;
* its owner is the job's user (Slurm's answer, the Epilog's ``SLURM_JOB_UID``, the
  cgroup's ``uid_N``, or the uid recorded below slurmstepd);
* the job is confirmed ended: Slurm reports it gone or in a terminal state, or, as the
  Epilog (``--epilog``), slurmd ran us for its end and Slurm does not say it still runs.
  A job still RUNNING (``--job N`` or ``--epilog`` by hand) plans nothing.

``SLURM_JOB_ID`` in an environment is a claim, not a proof (anyone can export it): such
a process is reported ("claims job N, not confirmed") and never signalled; when it holds
a GPU of an ended job the node is drained instead, since the next job would land on a GPU
that is taken. Each leftover is named "orphan of Slurm job N", and its tree is stopped
with the daemon's own escalation (SIGTERM, grace, SIGKILL; every signal guarded by PID +
start time and by ``enforcement.protect``). "Clean" is said only after a recheck finds
nothing of the job: no proven member, nothing in the leftovers' sessions, and no fresh
process with the job's evidence (a leftover that starts a copy of itself on SIGTERM).
What survives drains the node, with a reason naming what is left now: a sweep that
finds the node drained with an older sweep reason updates it, or resumes the node when
nothing is left.

Exit codes: 0 nothing left over (or everything stopped); 1 leftovers survive (or an
unconfirmed process holds a GPU) and the node was drained (slurmd treats a failing Epilog
as a reason to drain, too); 2 usage or configuration errors, or the sweep could not run.
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from watchdog import command
from watchdog.actions.effects import Effects
from watchdog.actions.guards import Expected, Guard
from watchdog.actions.slurmnode import clean_reason, drain, node_state, resume
from watchdog.actions.terminate import TerminateOutcome, terminate_tree
from watchdog.command import CommandRunner
from watchdog.config import Config
from watchdog.config.slurm import SlurmNodeSettings
from watchdog.hosttext import command_text
from watchdog.lineage.base import ResolveContext
from watchdog.lineage.cgroup import parse_cgroup
from watchdog.lineage.slurm import cgroup_clue, is_slurmstepd, query_job
from watchdog.model import Proc
from watchdog.sources.devfd import DeviceFdSource
from watchdog.sources.procfs import ProcessTable, boot_id
from watchdog.state import read_slurm_members

_JOB_KEYS = ("SLURM_JOB_ID", "SLURM_JOBID")
# Drain reasons this sweep sets: a later sweep may update or lift only these.
SWEEP_REASON = "rogue-watchdog: orphan of Slurm job"
UNCONFIRMED_REASON = "rogue-watchdog: unconfirmed claim of ended Slurm job"


@dataclass(frozen=True)
class Leftover:
    """A process of an ended Slurm job.

    Attributes:
        pid: Its PID.
        start_ticks: Its start time (identity for the guards).
        cmdline: Its argv.
        user: Owner's user name.
        job_id: The job it is proven to be part of (or, for a claim, names).
        devices: GPU device nodes it holds open.
        proof: How membership was proven (``cgroup``, ``recorded below slurmstepd``,
            ``child of PID N``), or for a claim why it is not confirmed.
    """

    pid: int
    start_ticks: int
    cmdline: tuple[str, ...]
    user: str | None
    job_id: int
    devices: tuple[str, ...]
    proof: str = ""

    @property
    def label(self) -> str:
        """``orphan of Slurm job N``."""
        return f"orphan of Slurm job {self.job_id}"


@dataclass
class SweepReport:
    """What one sweep found and did.

    Attributes:
        leftovers: Proven processes of ended jobs, by PID.
        unconfirmed: Processes that only claim an ended job (or whose owner is not the
            job's user): never signalled.
        unknown_jobs: Job ids Slurm could not be asked about (left alone), with why.
        running_jobs: Job ids named for the sweep that Slurm says still run, with state.
        outcomes: Termination result per job id.
        survivors: PIDs of the jobs still alive after the escalation and the recheck
            (never signalled, refused, or a fresh copy).
        drained: The drain reason set, or None.
        resumed: True when a drain an earlier sweep set was lifted (nothing left).
        drain_error: Why draining failed, or None.
    """

    leftovers: list[Leftover] = field(default_factory=list)
    unconfirmed: list[Leftover] = field(default_factory=list)
    unknown_jobs: dict[int, str] = field(default_factory=dict)
    running_jobs: dict[int, str] = field(default_factory=dict)
    outcomes: dict[int, TerminateOutcome] = field(default_factory=dict)
    survivors: list[int] = field(default_factory=list)
    drained: str | None = None
    resumed: bool = False
    drain_error: str | None = None

    @property
    def gpu_claims(self) -> list[Leftover]:
        """Unconfirmed claimants that hold a GPU device."""
        return [u for u in self.unconfirmed if u.devices]

    @property
    def exit_code(self) -> int:
        """0 clean, 1 leftovers survive or a GPU is held by a claim (node drained)."""
        return 1 if self.survivors or self.gpu_claims else 0

    def lines(self) -> list[str]:
        """Human-readable report, one fact per line (host text still raw: escape it)."""
        out = []
        for lo in self.leftovers:
            gpu = f", holds {', '.join(lo.devices)}" if lo.devices else ""
            out.append(
                f"PID {lo.pid} ({lo.user}) is an {lo.label}{gpu} ({lo.proof}): "
                f"{command_text(lo.cmdline, 160)}"
            )
        for u in self.unconfirmed:
            gpu = f", holds {', '.join(u.devices)}" if u.devices else ""
            out.append(
                f"PID {u.pid} ({u.user}) claims Slurm job {u.job_id}{gpu}, not confirmed "
                f"({u.proof}): left alone: {command_text(u.cmdline, 160)}"
            )
        for job, why in sorted(self.unknown_jobs.items()):
            out.append(f"Slurm job {job}: not checked, Slurm could not be asked ({why})")
        for job, state in sorted(self.running_jobs.items()):
            out.append(f"Slurm job {job}: still {state}: its processes are Slurm's, not swept")
        for job, outcome in sorted(self.outcomes.items()):
            for p in outcome.procs:
                # The escalation a person cares about; the SIGSTOP/SIGCONT that freeze the
                # tree while it is stopped (docs/operations.md) are in the JSON report.
                escalation = [s for s in p.signals if s not in ("SIGSTOP", "SIGCONT")]
                sent = "+".join(escalation) or "no signal"
                why = f" ({p.reason})" if p.reason else ""
                out.append(f"job {job}: PID {p.pid} {p.result} after {sent}{why}")
        if self.survivors:
            out.append(
                "not clean: still running after the sweep: PID "
                + ", ".join(str(p) for p in self.survivors)
            )
        if self.drained:
            out.append(f"node drained: {self.drained}")
        if self.resumed:
            out.append("node resumed: nothing is left of the job an earlier sweep drained for")
        if self.drain_error:
            out.append(f"could not drain the node: {self.drain_error}")
        if not out:
            out.append("no leftovers of ended Slurm jobs")
        return out


def _job_of(env: dict[str, str] | None) -> int | None:
    for key in _JOB_KEYS:
        value = (env or {}).get(key, "")
        if value.isascii() and value.isdigit():
            return int(value)
    return None


def _managed(lineage: Sequence[Proc]) -> bool:
    # Under slurmstepd the job is still Slurm's to end; under slurmd it is a Prolog /
    # Epilog / health check (this sweep's own ancestors carry SLURM_JOB_ID too).
    for p in lineage:
        if is_slurmstepd(p):
            return True
        name = (p.cmdline[0].rsplit("/", 1)[-1] if p.cmdline else p.comm) or ""
        if name.startswith("slurmd"):
            return True
    return False


@dataclass(frozen=True)
class Evidence:
    """Why a process is (or claims to be) part of a Slurm job.

    Attributes:
        job_id: The job.
        proof: ``cgroup ...``, ``recorded below slurmstepd``, ``child of PID N`` for a
            proven member; None for a claim (its environment only).
        uid: The job's owner as the proof says it (the cgroup's ``uid_N``, the uid seen
            below slurmstepd), when it does.
    """

    job_id: int
    proof: str | None
    uid: int | None = None


def job_evidence(
    table: ProcessTable,
    recorded: Mapping[tuple[int, int], tuple[int, int | None]],
    proven: Mapping[int, Evidence] | None = None,
) -> dict[int, Evidence]:
    """What ties each process to a Slurm job: PID → evidence.

    Args:
        table: A refreshed process table.
        recorded: The daemon's record of processes seen below a slurmstepd.
        proven: Evidence found earlier (the first look of a sweep): a process
            descending from one of these is proven too (a copy it forked).
    """
    out: dict[int, Evidence] = {}
    for pid, proc in table.procs.items():
        if proc.kernel_thread or proc.is_zombie:
            continue
        clue = cgroup_clue(proc)
        if clue is not None:
            info = parse_cgroup(proc.cgroup)
            uid = info.slurm_uid if info is not None else None
            out[pid] = Evidence(clue.job_id, f"cgroup {clue.text}", uid)
            continue
        rec = recorded.get((pid, proc.start_ticks))
        if rec is not None:
            out[pid] = Evidence(rec[0], "recorded below slurmstepd while the job ran", rec[1])
            continue
        jid = _job_of(table.environ(pid))
        if jid is not None:
            out[pid] = Evidence(jid, None)
    known = {**(proven or {}), **{p: e for p, e in out.items() if e.proof is not None}}
    for pid, ev in list(out.items()):
        if ev.proof is not None:
            continue
        for anc in table.ancestors(pid)[1:]:
            parent = known.get(anc.pid)
            if parent is not None and parent.proof is not None and parent.job_id == ev.job_id:
                out[pid] = Evidence(ev.job_id, f"child of PID {anc.pid}", parent.uid)
                break
    return out


def _uid_of(name: str | None) -> int | None:
    if not name:
        return None
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return int(name) if name.isdigit() else None


@dataclass(frozen=True)
class JobEnd:
    """Whether a job may be swept: ended (and its user), else why not."""

    ended: bool
    uid: int | None
    why: str = ""
    running: bool = False


def job_end(jid: int, ctx: ResolveContext, *, epilog: bool, epilog_uid: int | None) -> JobEnd:
    """Ask Slurm whether job ``jid`` has ended and who owns it.

    As the Epilog, slurmd ran us at the job's end: ended unless Slurm says it still runs
    (a person running ``--epilog`` by hand for a running job). Otherwise only Slurm's
    own answer counts; no answer leaves the job alone.
    """
    answer = query_job(jid, ctx)
    uid = _uid_of(answer.user) if answer.status == "found" else None
    if epilog and epilog_uid is not None:
        uid = epilog_uid if uid is None else uid
    if answer.status == "found" and not answer.ended:
        completing = "COMPLETING" in str(answer.state or "")
        if not (epilog and completing):
            return JobEnd(False, uid, f"{answer.state or 'not ended'}", running=True)
    if answer.status == "unavailable" and not epilog:
        return JobEnd(False, uid, answer.via or "no answer")
    return JobEnd(True, uid)


def find_leftovers(
    table: ProcessTable,
    ctx: ResolveContext,
    device_glob: str,
    job_id: int | None = None,
    self_pid: int | None = None,
    *,
    recorded: Mapping[tuple[int, int], tuple[int, int | None]] | None = None,
    epilog: bool = False,
    epilog_uid: int | None = None,
    report: SweepReport | None = None,
) -> SweepReport:
    """Find the proven leftovers of ended jobs, and the claims that are not proven.

    Args:
        table: A refreshed process table.
        ctx: Gives ``run_cmd`` for asking Slurm.
        device_glob: GPU device nodes (``training.device_glob``).
        job_id: Only this job (``--job N``, or the Epilog's job); None: every job found.
        self_pid: This process (it and its ancestors are never leftovers).
        recorded: The daemon's record of processes seen below a slurmstepd
            (:func:`watchdog.state.read_slurm_members`).
        epilog: Run as slurmd's Epilog for ``job_id`` (see :func:`job_end`).
        epilog_uid: The Epilog's ``SLURM_JOB_UID``.
        report: Filled in place and returned (a new one when None).

    Returns:
        The report with ``leftovers``, ``unconfirmed``, ``unknown_jobs`` and
        ``running_jobs`` set.
    """
    report = report or SweepReport()
    me = os.getpid() if self_pid is None else self_pid
    mine = {p.pid for p in table.ancestors(me)} | {me}
    evidence = job_evidence(table, recorded or {})
    by_job: dict[int, list[tuple[Proc, Evidence]]] = {}
    for pid, ev in evidence.items():
        proc = table.procs[pid]
        if pid in mine or pid <= 1 or (job_id is not None and ev.job_id != job_id):
            continue
        if _managed(table.ancestors(pid)):
            continue
        by_job.setdefault(ev.job_id, []).append((proc, ev))
    holders = DeviceFdSource(device_glob).holders(table, time.monotonic())
    for jid in sorted(by_job):
        end = job_end(jid, ctx, epilog=epilog and jid == job_id, epilog_uid=epilog_uid)
        if end.running:
            report.running_jobs[jid] = end.why
            continue
        if not end.ended:
            report.unknown_jobs[jid] = end.why
            continue
        for proc, ev in sorted(by_job[jid], key=lambda pe: pe[0].pid):
            owner = end.uid if end.uid is not None else ev.uid
            item = Leftover(
                proc.pid, proc.start_ticks, proc.cmdline, proc.user, jid,
                tuple(holders.get(proc.pid, ())), ev.proof or "",
            )  # fmt: skip
            if ev.proof is None:
                why = "only its environment says so: no job cgroup, not seen below slurmstepd"
                report.unconfirmed.append(replace(item, proof=why))
            elif owner is None or proc.uid != owner:
                who = "unknown" if owner is None else f"UID {owner}"
                why = f"{ev.proof}, but it runs as UID {proc.uid} and the job's user is {who}"
                report.unconfirmed.append(replace(item, proof=why))
            else:
                report.leftovers.append(item)
    return report


def sweep(
    config: Config,
    *,
    job_id: int | None = None,
    dry_run: bool = False,
    run: CommandRunner = command.run,
    effects: Effects | None = None,
    table: ProcessTable | None = None,
    epilog: bool = False,
    epilog_uid: int | None = None,
    recorded: Mapping[tuple[int, int], tuple[int, int | None]] | None = None,
) -> SweepReport:
    """Find leftovers of ended jobs, stop them, recheck, drain the node if any survive.

    Args:
        config: Gives ``paths.proc_root``, ``training.device_glob``,
            ``enforcement.protect``, ``daemon.state_dir`` (the record of Slurm job
            members) and the ``slurm:`` section (node name, grace).
        job_id: Only this job (``--job N`` or the Epilog's); None sweeps every job.
        dry_run: Report only: nothing is signalled, the node is not drained.
        run: Slurm CLI runner for draining (:func:`watchdog.command.run`; tests pass a
            double or the real one), each call limited to ``slurm.command_timeout_s``.
        effects: Where signals go.
        table: Process table (tests may pass one over a fixture tree).
        epilog: Run as slurmd's Epilog for ``job_id``.
        epilog_uid: The Epilog's ``SLURM_JOB_UID`` (the job's owner).
        recorded: The record of Slurm job members; None reads it from the state dir.

    Returns:
        The report; :attr:`SweepReport.exit_code` is the command's exit code.
    """
    settings = config.slurm
    table = table or ProcessTable(config.paths.proc_root)
    table.refresh()
    before = {(p.pid, p.start_ticks) for p in table.procs.values()}
    if recorded is None:
        recorded = read_slurm_members(config.daemon.state_dir, boot_id(config.paths.proc_root))
    ctx = ResolveContext(table=table, now=datetime.now(UTC))
    report = find_leftovers(
        table, ctx, config.training.device_glob, job_id, recorded=recorded, epilog=epilog,
        epilog_uid=epilog_uid,
    )  # fmt: skip
    # Never signalled, whatever a tree's scope reaches: slurmd, every slurmstepd and what
    # runs below them (running jobs are Slurm's), and the claims that are not proven.
    keep = {pid for pid in table.procs if _managed(table.ancestors(pid))}
    keep |= {u.pid for u in report.unconfirmed}
    guard = Guard(
        proc_root=config.paths.proc_root,
        protect=config.enforcement.protect,
        sanctioned_pids=frozenset(keep),
    )
    by_job: dict[int, list[Leftover]] = {}
    for lo in report.leftovers:
        by_job.setdefault(lo.job_id, []).append(lo)
    for jid, members in by_job.items():
        report.outcomes[jid] = terminate_tree(
            [Expected(lo.pid, lo.start_ticks, lo.cmdline or None) for lo in members],
            guard,
            effects or Effects(),
            settings.sweep_grace_s,
            dry_run=dry_run,
        )
    if by_job and not dry_run:
        report.survivors = _recheck(table, recorded, report, before)
    elif by_job:
        report.survivors = []
    _drain_as_needed(report, settings, run, dry_run)
    return report


def _recheck(
    table: ProcessTable,
    recorded: Mapping[tuple[int, int], tuple[int, int | None]],
    report: SweepReport,
    before: set[tuple[int, int]],
) -> list[int]:
    """What is left of the swept jobs now: proven members (and what they forked while
    still their parents), and processes that started since the sweep's first look with
    a swept job's evidence and its leftovers' owner (a leftover that started a copy of
    itself in a new session on SIGTERM, then exited: the copy's ancestry is gone, its
    environment and owner are not)."""
    owners = {lo.job_id: lo.user for lo in report.leftovers}
    first = {lo.pid: Evidence(lo.job_id, lo.proof) for lo in report.leftovers}
    # A fresh table: every stat read again (a cached one would keep a process killed a
    # moment ago, a zombie now, as it was).
    table = ProcessTable(table.proc_root)
    table.refresh()
    evidence = job_evidence(table, recorded, first)
    left = []
    for pid, ev in evidence.items():
        proc = table.procs[pid]
        if ev.job_id not in owners or pid <= 1 or _managed(table.ancestors(pid)):
            continue
        fresh = (pid, proc.start_ticks) not in before
        if ev.proof is not None or (fresh and proc.user == owners[ev.job_id]):
            left.append(pid)
    return sorted(left)


def _drain_as_needed(
    report: SweepReport, settings: SlurmNodeSettings, run: CommandRunner, dry_run: bool
) -> None:
    """Drain while something survives or a claim holds a GPU, with a reason naming what
    is left now; update or lift a drain an earlier sweep set."""
    if dry_run:
        return
    if report.survivors:
        jobs = ", ".join(str(j) for j in sorted({lo.job_id for lo in report.leftovers}))
        reason = f"{SWEEP_REASON} {jobs} survived termination (PID {_some_pids(report.survivors)})"
    elif report.gpu_claims:
        held = report.gpu_claims
        reason = (
            f"{UNCONFIRMED_REASON} {held[0].job_id} holds a GPU "
            f"(PID {_some_pids([u.pid for u in held])}, left running)"
        )
    else:
        reason = None
    timeout_s = settings.command_timeout_s
    st = node_state(settings.node, run, timeout_s)
    if isinstance(st, str):
        if reason is not None:
            report.drain_error = st
        return
    ours = st.drained and (st.reason or "").startswith((SWEEP_REASON, UNCONFIRMED_REASON))
    if reason is None:
        if ours and not report.survivors:
            err = resume(settings.node, run, timeout_s)
            report.resumed = err is None
            report.drain_error = err
        return
    if st.drained and not ours:
        report.drain_error = f"node already drained ({st.reason}); reason left as it is"
        return
    if ours and st.reason == clean_reason(reason):
        report.drained = reason
        return
    err = drain(settings.node, reason, run, timeout_s)
    if err is None:
        report.drained = reason
    else:
        report.drain_error = err


def report_json(report: SweepReport) -> dict[str, Any]:
    """The report as plain JSON data (``health-check --json``)."""

    def item(lo: Leftover) -> dict[str, Any]:
        return {
            "pid": lo.pid,
            "job_id": lo.job_id,
            "label": lo.label,
            "user": lo.user,
            "cmdline": list(lo.cmdline),
            "devices": list(lo.devices),
            "proof": lo.proof,
        }

    return {
        "leftovers": [item(lo) for lo in report.leftovers],
        "unconfirmed": [item(u) for u in report.unconfirmed],
        "unknown_jobs": {str(k): v for k, v in report.unknown_jobs.items()},
        "running_jobs": {str(k): v for k, v in report.running_jobs.items()},
        "resumed": report.resumed,
        "outcomes": {str(k): v.to_json() for k, v in report.outcomes.items()},
        "survivors": report.survivors,
        "drained": report.drained,
        "drain_error": report.drain_error,
        "exit_code": report.exit_code,
    }


def _some_pids(pids: list[int], shown: int = 5) -> str:
    """``1, 2, 3, 4, 5 and 2 more``: the first PIDs whole, and how many are left out (a
    Slurm reason is short; a list that stops silently reads as complete)."""
    text = ", ".join(str(p) for p in pids[:shown])
    return text + (f" and {len(pids) - shown} more" if len(pids) > shown else "")
