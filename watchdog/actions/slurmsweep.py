"""Job-end sweep for Slurm nodes: leftovers of ended jobs are named, stopped, or drain the node.

A job's processes can outlive it: a worker that called ``setsid()`` and ignores SIGTERM
leaves the job's process tree (proctrack/linuxproc follows parentage only), one that
left the freezer cgroup escapes proctrack/cgroup, and either keeps the GPU after Slurm
calls the job complete. In the manner of LBNL NHC's ``check_ps_userproc_lineage``, but
never on a claim alone, the sweep fails closed:

* **Membership must be proven**: the job's cgroup names job N (any hierarchy,
  proctrack/cgroup or task/cgroup, whoever owns the process), or the daemon saw it below
  job N's slurmstepd while the job ran (the ``slurm_members`` record of the state
  database), or an earlier sweep recorded it (``slurm-sweep.json``), or it descends
  from a process proven so (whatever its session or environment). ``SLURM_JOB_ID`` in
  an environment is a claim: reported ("claims job N, not confirmed"), never signalled.
* **The end must be confirmed by Slurm in this run**: ``squeue --json`` or ``scontrol
  show job`` says the job is gone or in a terminal state (``COMPLETING`` too for the
  Epilog, which runs in it). The Epilog's own ``SLURM_JOB_ID`` is a claim as well: when
  Slurm cannot be asked (the commands did not run, timed out, failed, or answered with
  errors) nothing is signalled, the node is drained naming the job and the processes
  left unchecked, and the exit code is 3. A job Slurm says still runs is not swept.
* **The owner must be the job's user** (Slurm's answer, else the cgroup's ``uid_N`` or
  the uid seen below slurmstepd, else the Epilog's ``SLURM_JOB_UID``). A proven member
  of another user (a root process in the job's cgroup) is reported and drains the node;
  it is never signalled.

Each leftover is named "orphan of Slurm job N", and its tree is stopped with the
daemon's own escalation (freeze, SIGTERM, grace, SIGKILL; every signal guarded by PID +
start time and by ``enforcement.protect``). "Clean" is said only after a recheck that
would find a copy: the kernel's fork events (:class:`~watchdog.sources.procevents.
ForkWatch`, while the sweep runs) tie a copy a leftover started on SIGTERM to it, in a
new session and with an emptied environment too; such proven copies are frozen and
SIGKILLed (up to :data:`COPY_ROUNDS` rounds). Without fork events (``daemon.events:
off``, no CAP_NET_ADMIN, events dropped) a process that started during the sweep with no
parent that ran before it, owned by a leftover's user, cannot be told from a copy: it is
reported as such, never signalled, and the node stays drained.

What is left is recorded (watchdog/actions/slurmrecord.py) and drains the node; only a
check that finds all of it gone lifts the drain: a later sweep of the same job, a sweep
of every job, or the daemon (each tick). A sweep of another job never does.

Exit codes: 0 nothing left over (or everything stopped); 1 something is left (a
survivor, another user's process in the job, an unconfirmed claimant holding a GPU, a
possible copy) and the node was drained; 3 not checked: Slurm could not be asked whether
a job with processes here ended (nothing signalled, node drained); 2 usage or
configuration errors. 1 wins over 3. A dry run exits with what the real run would if
every planned signal ended its process.
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from .. import command
from ..command import CommandRunner
from ..config import Config
from ..hosttext import plain_or_code, quoted_command
from ..lineage.base import ResolveContext
from ..lineage.slurm import query_job
from ..logs import get_logger
from ..model import Proc
from ..sources.devfd import DeviceFdSource
from ..sources.procevents import ForkWatch
from ..sources.procfs import ProcessTable, boot_id
from ..state import ActionJournal, JournalError, read_slurm_members
from ..state.actions import ActionTable
from .effects import Effects
from .guards import Expected, SignalGuard
from .slurmrecord import (
    MAX_PROCS_PER_JOB,
    UNCHECKED_KINDS,
    JobEntry,
    RecordedProc,
    Settled,
    SweepRecord,
    check_entry,
    horizon,
    job_cgroup,
    lineage_of,
    load_record,
    managed,
    orphan_chain,
    record_lock,
    save_record,
    settle,
    wanted_reason,
)
from .terminate import TerminateOutcome, terminate_tree

log = get_logger(__name__)

_JOB_KEYS = ("SLURM_JOB_ID", "SLURM_JOBID")
CLAIM_PROOF = "only its environment says so: no job cgroup, not seen below slurmstepd"
# Rounds of stopping the proven copies a leftover started (each round: freeze, SIGKILL).
COPY_ROUNDS = 3
EXIT_CLEAN, EXIT_LEFT, EXIT_USAGE, EXIT_NOT_CHECKED = 0, 1, 2, 3


class ForkLineage(Protocol):
    """Who forked whom since the sweep began (:class:`ForkWatch`; tests pass a double)."""

    reason: str | None

    @property
    def complete(self) -> bool:
        """True when every fork since the start is known."""
        ...

    def poll(self) -> None:
        """Read what arrived."""
        ...

    def forked_by(self, roots: Iterable[int]) -> dict[int, int]:
        """Child → parent for everything ``roots`` forked, transitively."""
        ...

    def close(self) -> None:
        """Stop watching."""
        ...


@dataclass(frozen=True)
class Leftover:
    """A process of a Slurm job, outside its steps.

    Attributes:
        pid: Its PID.
        start_ticks: Its start time (identity for the guards).
        cmdline: Its argv.
        user: Owner's user name.
        job_id: The job it is proven to be part of (or, for a claim, names).
        devices: GPU device nodes it holds open.
        proof: How membership was proven (``cgroup ...``, ``recorded below
            slurmstepd``, ``child of PID N``, ``forked by PID N during the sweep``), or
            for a claim why it is not confirmed.
        uid: Owner's UID.
        cgroup: The Slurm job cgroup line it is in, if any.
        lineage: Its ancestors, ``(pid, start_ticks)``, nearest first.
    """

    pid: int
    start_ticks: int
    cmdline: tuple[str, ...]
    user: str | None
    job_id: int
    devices: tuple[str, ...]
    proof: str = ""
    uid: int | None = None
    cgroup: str | None = None
    lineage: tuple[tuple[int, int], ...] = ()

    @property
    def label(self) -> str:
        """``orphan of Slurm job N``."""
        return f"orphan of Slurm job {self.job_id}"

    def recorded(self, kind: str) -> RecordedProc:
        """This process as the drain record keeps it."""
        return RecordedProc(
            self.pid, self.start_ticks, kind, self.uid, self.proof, self.cgroup, self.lineage
        )


@dataclass
class SweepReport:
    """What one sweep found and did.

    Attributes:
        dry_run: Nothing was signalled, drained or recorded.
        leftovers: Proven processes of ended jobs owned by the job's user.
        foreign: Proven processes of ended jobs owned by another user: never signalled.
        unconfirmed: Processes that only claim an ended job: never signalled.
        unchecked: Proven processes (and GPU-holding claimants) of jobs Slurm could not
            be asked about: never signalled.
        unknown_jobs: Job ids Slurm could not be asked about, with what the commands did.
        running_jobs: Job ids Slurm says still run, with their state.
        gone_jobs: Job ids named for the sweep that Slurm says ended (with the state, or
            that Slurm no longer knows them), nothing of them left here.
        outcomes: Termination result per job id (leftovers, then their copies).
        copies: Proven copies a leftover started during the sweep (fork events).
        uncertain: Processes that started during the sweep that cannot be told from a
            copy of a leftover (no fork events): never signalled.
        survivors: PIDs of the swept jobs still alive after the escalation and the
            recheck (never signalled, refused, or surviving SIGKILL); for a dry run,
            the ones it would not signal.
        survivor_items: The same, as processes.
        recorded_left: Processes an earlier sweep recorded for a job in this sweep's
            scope, still running, that this sweep has no evidence of its own for
            (``uncertain`` ones, GPU claims), with their job.
        left_kinds: Kinds (watchdog/actions/slurmrecord.py) of what is left of the jobs
            in this sweep's scope: what the exit code says.
        lineage_note: Why copies could only be told by start time and owner.
        drained: The drain reason set now, or None.
        held: The drain reason that was already in place, or None.
        resumed: True when the record's drain was lifted (nothing left).
        other_jobs: Jobs an earlier sweep drained for that this one did not check.
        drain_error: Why the node could not be drained (or resumed), or None.
        would: For a dry run, what would be done about the node.
    """

    dry_run: bool = False
    leftovers: list[Leftover] = field(default_factory=list)
    foreign: list[Leftover] = field(default_factory=list)
    unconfirmed: list[Leftover] = field(default_factory=list)
    unchecked: list[Leftover] = field(default_factory=list)
    unknown_jobs: dict[int, str] = field(default_factory=dict)
    running_jobs: dict[int, str] = field(default_factory=dict)
    gone_jobs: dict[int, str] = field(default_factory=dict)
    outcomes: dict[int, list[TerminateOutcome]] = field(default_factory=dict)
    copies: list[Leftover] = field(default_factory=list)
    uncertain: list[Leftover] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)
    survivor_items: list[Leftover] = field(default_factory=list)
    recorded_left: list[tuple[int, RecordedProc]] = field(default_factory=list)
    left_kinds: set[str] = field(default_factory=set)
    lineage_note: str | None = None
    drained: str | None = None
    held: str | None = None
    resumed: bool = False
    other_jobs: list[int] = field(default_factory=list)
    drain_error: str | None = None
    would: str | None = None

    @property
    def gpu_claims(self) -> list[Leftover]:
        """Unconfirmed claimants of ended jobs that hold a GPU device."""
        return [u for u in self.unconfirmed if u.devices]

    @property
    def exit_code(self) -> int:
        """0 clean, 1 something is left (node drained), 3 not checked (node drained):
        read from what is left of the jobs in the sweep's scope, the same way for a dry
        run (what it would not signal) and a real one."""
        kinds = self.left_kinds
        if kinds - UNCHECKED_KINDS:
            return EXIT_LEFT
        if kinds:
            return EXIT_NOT_CHECKED
        return EXIT_CLEAN

    def lines(self) -> list[str]:
        """Human-readable report, one fact per line (host text still raw: escape it)."""
        out = [_line(lo, f"is an {lo.label}", "") for lo in self.leftovers]
        out += [
            _line(f, f"is in Slurm job {f.job_id}", ", another user's: left running")
            for f in self.foreign
        ]
        out += [
            _line(u, f"claims Slurm job {u.job_id}", ", not confirmed: left alone")
            for u in self.unconfirmed
        ]
        for job, why in sorted(self.unknown_jobs.items()):
            pids = [u.pid for u in self.unchecked if u.job_id == job]
            tail = (
                f"PID {_some_pids(sorted(pids))} left running"
                if pids
                else "no process of it here to check"
            )
            out.append(f"Slurm job {job}: not checked, Slurm could not be asked ({why}): {tail}")
        out += [_line(u, f"is in Slurm job {u.job_id}", ", not checked") for u in self.unchecked]
        for job, state in sorted(self.running_jobs.items()):
            out.append(f"Slurm job {job}: still {state}: its processes are Slurm's, not swept")
        for job, state in sorted(self.gone_jobs.items()):
            out.append(f"Slurm job {job}: {state}: nothing of it is left here")
        out += [_line(c, f"is a copy in Slurm job {c.job_id}", "") for c in self.copies]
        for job, outcomes in sorted(self.outcomes.items()):
            for outcome in outcomes:
                for p in outcome.procs:
                    # The escalation a person cares about; the SIGSTOP/SIGCONT that freeze
                    # the tree while it is stopped (docs/operations.md) are in the JSON.
                    escalation = [s for s in p.signals if s not in ("SIGSTOP", "SIGCONT")]
                    sent = "+".join(escalation) or "no signal"
                    why = f" ({p.reason})" if p.reason else ""
                    out.append(f"job {job}: PID {p.pid} {p.result} after {sent}{why}")
        for u in self.uncertain:
            out.append(
                _line(u, "started during the sweep", f", cannot be told from a copy of a "
                      f"leftover of Slurm job {u.job_id}: left running")
            )  # fmt: skip
        for job, rp in self.recorded_left:
            out.append(
                f"PID {rp.pid}: recorded by an earlier sweep for Slurm job {job} as {rp.kind} "
                f"({rp.proof}): still running"
            )
        if self.lineage_note and (self.uncertain or self.leftovers):
            out.append(f"copies told by start time and owner only: {self.lineage_note}")
        if self.survivors:
            out.append(
                "not clean: still running after the sweep: PID " + _some_pids(self.survivors, 20)
            )
        out += self._node_lines()
        if not out:
            out.append("no leftovers of ended Slurm jobs")
        return out

    def _node_lines(self) -> list[str]:
        out = []
        if self.would:
            out.append(self.would)
        if self.drained:
            out.append(f"node drained: {self.drained}")
        if self.held:
            out.append(f"node stays drained: {self.held}")
        if self.other_jobs:
            jobs = ", ".join(str(j) for j in self.other_jobs)
            out.append(
                f"Slurm job {jobs}: an earlier sweep drained for it; not checked by a sweep "
                "of another job"
            )
        if self.resumed:
            out.append("node resumed: nothing is left of the job an earlier sweep drained for")
        if self.drain_error:
            out.append(f"could not drain the node: {self.drain_error}")
        return out


def _line(lo: Leftover, what: str, tail: str) -> str:
    gpu = f", holds {', '.join(lo.devices)}" if lo.devices else ""
    return (
        f"PID {lo.pid} ({plain_or_code(str(lo.user))}) {what}{gpu} ({lo.proof}){tail}: "
        f"{quoted_command(lo.cmdline, 160)}"
    )


def _job_of(env: dict[str, str] | None) -> int | None:
    for key in _JOB_KEYS:
        value = (env or {}).get(key, "")
        if value.isascii() and value.isdigit():
            return int(value)
    return None


@dataclass(frozen=True)
class Evidence:
    """Why a process is (or claims to be) part of a Slurm job.

    Attributes:
        job_id: The job.
        proof: ``cgroup ...``, ``recorded below slurmstepd``, ``child of PID N`` for a
            proven member; None for a claim (its environment only).
        uid: The job's owner as the proof says it (the cgroup's ``uid_N``, the uid seen
            below slurmstepd), when it does.
        cgroup: The Slurm job cgroup line, when the proof is one.
    """

    job_id: int
    proof: str | None
    uid: int | None = None
    cgroup: str | None = None


# Proven identities from records: (PID, start ticks) → (job id, uid, proof).
Proven = Mapping[tuple[int, int], tuple[int, int | None, str]]


def job_evidence(
    table: ProcessTable,
    recorded: Mapping[tuple[int, int], tuple[int, int | None]],
    proven: Mapping[int, Evidence] | None = None,
    swept: Proven | None = None,
) -> dict[int, Evidence]:
    """What ties each process to a Slurm job: PID → evidence.

    Args:
        table: A refreshed process table.
        recorded: The daemon's record of processes seen below a slurmstepd.
        proven: Evidence found earlier (the first look of a sweep): a process
            descending from one of these is proven too (a copy it forked).
        swept: Processes an earlier sweep recorded as proven (``slurm-sweep.json``).
    """
    out: dict[int, Evidence] = {}
    swept = swept or {}
    for pid, proc in table.procs.items():
        if proc.kernel_thread or proc.is_zombie:
            continue
        ident = (pid, proc.start_ticks)
        jc = job_cgroup(proc)
        if jc is not None:
            info_uid = _cgroup_uid(jc[1])
            out[pid] = Evidence(jc[0], f"cgroup {plain_or_code(jc[1])}", info_uid, jc[1])
            continue
        rec = recorded.get(ident)
        if rec is not None:
            out[pid] = Evidence(rec[0], "recorded below slurmstepd while the job ran", rec[1])
            continue
        old = swept.get(ident)
        if old is not None:
            proof = old[2] if old[2].startswith("recorded by") else f"recorded by a sweep: {old[2]}"
            out[pid] = Evidence(old[0], proof, old[1])
            continue
        jid = _job_of(table.environ(pid))
        if jid is not None:
            out[pid] = Evidence(jid, None)
    known = {**(proven or {}), **{p: e for p, e in out.items() if e.proof is not None}}
    # Descendants of a proven member are the job's too, whatever their environment,
    # session or claim (a copy with an emptied environment, or one naming another job).
    for pid, proc in table.procs.items():
        if proc.kernel_thread or proc.is_zombie or (pid in out and out[pid].proof is not None):
            continue
        for anc in table.ancestors(pid)[1:]:
            parent = known.get(anc.pid)
            if parent is not None and parent.proof is not None:
                out[pid] = Evidence(parent.job_id, f"child of PID {anc.pid}", parent.uid)
                break
    return out


def _cgroup_uid(line: str) -> int | None:
    for part in line.split("/"):
        if part.startswith("uid_") and part[4:].isdigit():
            return int(part[4:])
    return None


def _uid_of(name: str | None) -> int | None:
    if not name:
        return None
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return int(name) if name.isdigit() else None


@dataclass(frozen=True)
class JobEnd:
    """What Slurm said about a job in this run.

    Attributes:
        status: ``ended`` (gone or terminal: may be swept), ``running`` (or pending,
            suspended...: Slurm's), ``unknown`` (Slurm could not be asked).
        uid: The job's owner when Slurm named it.
        why: The state, or what the commands did.
        state: For an ended job, its state (``COMPLETED``), or that Slurm no longer
            knows it.
    """

    status: str
    uid: int | None = None
    why: str = ""
    state: str = ""


def job_end(jid: int, ctx: ResolveContext, *, epilog: bool, timeout_s: float) -> JobEnd:
    """Ask Slurm whether job ``jid`` has ended and who owns it.

    Only Slurm's answer in this run counts (fail closed): as the Epilog, ``COMPLETING``
    counts as ended too (the Epilog runs while the job completes); no answer is
    ``unknown``, whoever runs the sweep.

    Args:
        jid: The job.
        ctx: Gives ``run_cmd``.
        epilog: Run as slurmd's Epilog for this job.
        timeout_s: Limit for each Slurm command.
    """
    answer = query_job(jid, ctx, timeout_s)
    if answer.status == "unavailable":
        return JobEnd("unknown", None, answer.via or "no answer")
    uid = _uid_of(answer.user) if answer.status == "found" else None
    if answer.status == "found" and not answer.ended:
        completing = "COMPLETING" in str(answer.state or "")
        if not (epilog and completing):
            return JobEnd("running", uid, answer.state or "not ended")
    state = answer.state if answer.status == "found" and answer.state else ""
    return JobEnd("ended", uid, state=state or "unknown to Slurm (ended, or never ran)")


def find_leftovers(
    table: ProcessTable,
    ctx: ResolveContext,
    device_glob: str,
    job_id: int | None = None,
    self_pid: int | None = None,
    *,
    recorded: Mapping[tuple[int, int], tuple[int, int | None]] | None = None,
    swept: Proven | None = None,
    epilog: bool = False,
    epilog_uid: int | None = None,
    timeout_s: float = 10.0,
    report: SweepReport | None = None,
) -> SweepReport:
    """Find the proven leftovers of ended jobs, and what cannot be swept.

    Args:
        table: A refreshed process table.
        ctx: Gives ``run_cmd`` for asking Slurm.
        device_glob: GPU device nodes (``training.device_glob``).
        job_id: Only this job (``--job N``, or the Epilog's job); None: every job found.
        self_pid: This process (it and its ancestors are never leftovers).
        recorded: The daemon's record of processes seen below a slurmstepd
            (:func:`watchdog.state.read_slurm_members`).
        swept: Processes an earlier sweep recorded as proven.
        epilog: Run as slurmd's Epilog for ``job_id`` (see :func:`job_end`).
        epilog_uid: The Epilog's ``SLURM_JOB_UID`` (the owner when nothing else says).
        timeout_s: Limit for each Slurm command.
        report: Filled in place and returned (a new one when None).

    Returns:
        The report with ``leftovers``, ``foreign``, ``unconfirmed``, ``unchecked``,
        ``unknown_jobs``, ``running_jobs`` and ``gone_jobs`` set.
    """
    report = report or SweepReport()
    me = os.getpid() if self_pid is None else self_pid
    mine = {p.pid for p in table.ancestors(me)} | {me}
    evidence = job_evidence(table, recorded or {}, swept=swept)
    by_job: dict[int, list[tuple[Proc, Evidence]]] = {}
    for pid, ev in evidence.items():
        proc = table.procs[pid]
        if pid in mine or pid <= 1 or (job_id is not None and ev.job_id != job_id):
            continue
        if managed(table.ancestors(pid)):
            continue
        by_job.setdefault(ev.job_id, []).append((proc, ev))
    holders = DeviceFdSource(device_glob).holders(table, time.monotonic())
    jobs = sorted({*by_job, *([job_id] if job_id is not None else [])})
    for jid in jobs:
        end = job_end(jid, ctx, epilog=epilog and jid == job_id, timeout_s=timeout_s)
        members = sorted(by_job.get(jid, []), key=lambda pe: pe[0].pid)
        if end.status == "running":
            report.running_jobs[jid] = end.why
            continue
        if end.status == "ended" and not members:
            report.gone_jobs[jid] = end.state
            continue
        if end.status == "unknown":
            report.unknown_jobs[jid] = end.why
        for proc, ev in members:
            item = Leftover(
                proc.pid, proc.start_ticks, proc.cmdline, proc.user, jid,
                tuple(holders.get(proc.pid, ())), ev.proof or "", proc.uid, ev.cgroup,
                lineage_of(table, proc.pid),
            )  # fmt: skip
            if ev.proof is None:
                why = CLAIM_PROOF
                if end.status == "unknown" and item.devices:
                    report.unchecked.append(replace(item, proof=why))
                else:
                    report.unconfirmed.append(replace(item, proof=why))
                continue
            if end.status == "unknown":
                report.unchecked.append(item)
                continue
            owner = end.uid if end.uid is not None else ev.uid
            owner = owner if owner is not None else (epilog_uid if epilog else None)
            if owner is None or proc.uid != owner:
                who = "unknown" if owner is None else f"UID {owner}"
                why = f"{ev.proof}; it runs as UID {proc.uid} and the job's user is {who}"
                report.foreign.append(replace(item, proof=why))
            else:
                report.leftovers.append(item)
    return report


def open_fork_watch(config: Config) -> ForkLineage | None:
    """A fork watch unless ``daemon.events`` is ``off``; None then."""
    return ForkWatch() if config.daemon.events != "off" else None


@dataclass
class SweepJournal:
    """Where the sweep writes its write-ahead records: one ``slurm-sweep`` action per
    job and wave (its leftovers, then each round of copies), whose every signal is
    written before it is sent (:class:`~watchdog.state.ActionJournal`, the same steps as
    ``terminate``). A sweep killed half-way is then found by the daemon and reported
    (``action-interrupted``); what it had frozen is continued (SIGCONT) and nothing is
    signalled again: the next Epilog or health check decides afresh.

    Attributes:
        db: The daemon's state database; None when it could not be opened.
        actor: Who acts (``slurm-epilog``, ``cli:root``...).
        error: Why ``db`` could not be opened. Then nothing is signalled: an action that
            cannot be recorded is not made, what it was for is left running, and the
            node is drained for it (fail closed, as when Slurm cannot be asked).
    """

    db: ActionTable | None
    actor: str
    error: str | None = None

    def begin(
        self, job_id: int, procs: Sequence[Leftover], kill_only: bool, grace_s: float
    ) -> ActionJournal:
        """The action's row for stopping ``procs`` of ``job_id`` (``grace_s``: seconds
        between SIGTERM and SIGKILL; ``kill_only``: a wave of copies, SIGKILL only).

        Raises:
            JournalError: Not written (or no database): do not signal.
        """
        if self.db is None:
            raise JournalError(self.error or "no state database")
        details = self.details(job_id, procs, kill_only, grace_s)
        return ActionJournal.begin(
            self.db, self.actor, "slurm-sweep", f"leftovers of Slurm job {job_id}", details
        )

    @staticmethod
    def details(
        job_id: int, procs: Sequence[Leftover], kill_only: bool, grace_s: float
    ) -> dict[str, Any]:
        """What a row names, begun or finished: the job, its members as terminate's rows
        name them (``[pid, start_ticks, argv]``: what a daemon that finds it half-way
        continues), whether it is a wave of copies, and the grace in seconds."""
        return {
            "job": job_id,
            "members": [[lo.pid, lo.start_ticks, list(lo.cmdline)] for lo in procs],
            "copies": kill_only,
            "grace_s": grace_s,
        }


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
    forks: Callable[[Config], ForkLineage | None] = open_fork_watch,
    journal: SweepJournal | None = None,
) -> SweepReport:
    """Find leftovers of ended jobs, stop them, recheck, record and drain what is left.

    Args:
        config: Gives ``paths.proc_root``, ``training.device_glob``,
            ``enforcement.protect``, ``daemon.state_dir`` (the records), ``daemon.events``
            and the ``slurm:`` section (node name, grace, command timeout).
        job_id: Only this job (``--job N`` or the Epilog's); None sweeps every job.
        dry_run: Report only: nothing is signalled, recorded or drained.
        run: Runs the Slurm CLI (``squeue``, ``scontrol``, ``sinfo``), each call limited
            to ``slurm.command_timeout_s`` (:func:`watchdog.command.run`; tests pass a
            double or the real one).
        effects: Where signals go.
        table: Process table (tests may pass one over a fixture tree).
        epilog: Run as slurmd's Epilog for ``job_id``.
        epilog_uid: The Epilog's ``SLURM_JOB_UID``.
        recorded: The record of Slurm job members; None reads it from the state dir.
        forks: Opens the fork watch for a real run (tests pass a double).
        journal: Where each wave of signals is recorded before it is sent (the CLI
            passes the daemon's state database); None records nothing (tests of the
            decisions alone).

    Returns:
        The report; :attr:`SweepReport.exit_code` is the command's exit code.
    """
    settings = config.slurm
    proc_root = config.paths.proc_root
    watch = None if dry_run else forks(config)
    try:
        table = table or ProcessTable(proc_root)
        table.refresh()
        before = {(p.pid, p.start_ticks) for p in table.procs.values()}
        boot = boot_id(proc_root)
        if recorded is None:
            recorded = read_slurm_members(config.daemon.state_dir, boot)
        rec = load_record(config.daemon.state_dir, boot, settings.node)
        ctx = ResolveContext(table=table, now=datetime.now(UTC), run_cmd=run)
        report = find_leftovers(
            table, ctx, config.training.device_glob, job_id, recorded=recorded,
            swept=rec.proven(), epilog=epilog, epilog_uid=epilog_uid,
            timeout_s=settings.command_timeout_s, report=SweepReport(dry_run=dry_run),
        )  # fmt: skip
        report.lineage_note = _lineage_note(watch, dry_run)
        guard = _guard(config, table, report, rec)
        _stop(report, guard, effects or Effects(), settings.sweep_grace_s, dry_run, journal=journal)
        after = table
        if report.leftovers and not dry_run:
            after = _recheck(
                config, recorded, rec, report, before, watch, guard, effects or Effects(),
                journal,
            )  # fmt: skip
        elif dry_run:
            report.survivor_items = _would_survive(report, table)
            report.survivors = sorted({lo.pid for lo in report.survivor_items})
    finally:
        if watch is not None:
            watch.close()
    if dry_run:
        _update_record(rec, report, after, _scope(report, rec, job_id))
        report.other_jobs = sorted(j for j in rec.jobs if j not in _scope(report, rec, job_id))
        report.would = _would(rec)
        return report
    # Epilogs of jobs that end together run at once: the record is read again, changed
    # and Slurm told under one lock, so that no sweep writes over another's entries.
    with record_lock(config.daemon.state_dir):
        rec = load_record(config.daemon.state_dir, boot, settings.node)
        scope = _scope(report, rec, job_id)
        _update_record(rec, report, after, scope)
        report.other_jobs = sorted(j for j in rec.jobs if j not in scope)
        done = settle(rec, settings, run)
        _settled(report, done)
        save_record(config.daemon.state_dir, rec)
    return report


def _lineage_note(watch: ForkLineage | None, dry_run: bool) -> str | None:
    """Why copies can only be told by start time and owner in this sweep; None when
    the fork watch saw every fork (or a dry run opened none)."""
    if watch is not None and not watch.complete:
        return watch.reason
    if watch is None and not dry_run:
        return "kernel process events are off (daemon.events: off)"
    return None


def _would_survive(report: SweepReport, table: ProcessTable) -> list[Leftover]:
    """What a real run would leave alive: what it would refuse to signal, or fail to."""
    by_pid = {lo.pid: lo for lo in report.leftovers}
    return [
        by_pid.get(p.pid) or _member(table, p.pid, jid, "in the leftover's tree")
        for jid, outcomes in sorted(report.outcomes.items())
        for o in outcomes
        for p in o.procs
        if p.result in ("refused", "error") and table.get(p.pid) is not None
    ]


def _would(rec: SweepRecord) -> str | None:
    """For a dry run: what a real run would do about the node, given the updated
    record; None when the node is neither drained nor to be drained."""
    want = wanted_reason(rec)
    if want is not None and want == rec.applied:
        return f"node would stay drained: {want}"
    if want is not None:
        return f"would drain the node: {want}"
    if rec.applied is not None:
        return "would resume the node: nothing is left of what it was drained for"
    return None


def _guard(
    config: Config, table: ProcessTable, report: SweepReport, rec: SweepRecord
) -> SignalGuard:
    # Never signalled, whatever a tree's scope reaches: slurmd, every slurmstepd and what
    # runs below them (running jobs are Slurm's), the claims, another user's processes,
    # what could not be checked, and what an earlier sweep could not tell from a copy.
    keep = {pid for pid in table.procs if managed(table.ancestors(pid))}
    keep |= {u.pid for u in [*report.unconfirmed, *report.foreign, *report.unchecked]}
    keep |= {rp.pid for e in rec.jobs.values() for rp in e.procs if rp.kind == "uncertain"}
    return SignalGuard(
        proc_root=config.paths.proc_root,
        protect=config.enforcement.protect,
        sanctioned_pids=frozenset(keep),
    )


def _stop(
    report: SweepReport,
    guard: SignalGuard,
    effects: Effects,
    grace_s: float,
    dry_run: bool,
    members: Sequence[Leftover] | None = None,
    kill_only: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    journal: SweepJournal | None = None,
) -> None:
    by_job: dict[int, list[Leftover]] = {}
    for lo in report.leftovers if members is None else members:
        by_job.setdefault(lo.job_id, []).append(lo)
    for jid, procs in sorted(by_job.items()):
        record = None
        if journal is not None and not dry_run:
            try:
                record = journal.begin(jid, procs, kill_only, grace_s)
            except JournalError as exc:
                plan = terminate_tree(
                    [Expected(lo.pid, lo.start_ticks, lo.cmdline or None) for lo in procs],
                    guard, effects, grace_s, dry_run=True, kill_only=kill_only,
                )  # fmt: skip
                report.outcomes.setdefault(jid, []).append(_unrecorded(plan, str(exc)))
                continue
        outcome = terminate_tree(
            [Expected(lo.pid, lo.start_ticks, lo.cmdline or None) for lo in procs],
            guard, effects, grace_s, dry_run=dry_run, kill_only=kill_only, sleep=sleep,
            journal=record,
        )  # fmt: skip
        if record is not None:
            try:
                record.finish(
                    outcome.outcome,
                    {**SweepJournal.details(jid, procs, kill_only, grace_s), **outcome.to_json()},
                )
            except JournalError as exc:
                # Its steps are written: the daemon's next start reports it from them.
                log.warning("slurm-sweep-unfinished", action_id=record.action_id, error=str(exc))
        report.outcomes.setdefault(jid, []).append(outcome)


def _unrecorded(plan: TerminateOutcome, error: str) -> TerminateOutcome:
    """What a wave whose record could not be written did: nothing. ``plan`` is its dry
    run: what the guards refused stays refused (with their reason); what they would
    have signalled is an error, not signalled."""
    why = f"not signalled: the action could not be recorded ({error})"
    return TerminateOutcome(
        [
            p if p.result != "would-signal" else replace(p, signals=[], result="error", reason=why)
            for p in plan.procs
        ],
        "failed",
        error=error,
    )


def _recheck(
    config: Config,
    recorded: Mapping[tuple[int, int], tuple[int, int | None]],
    rec: SweepRecord,
    report: SweepReport,
    before: set[tuple[int, int]],
    watch: ForkLineage | None,
    guard: SignalGuard,
    effects: Effects,
    journal: SweepJournal | None = None,
) -> ProcessTable:
    """What is left of the swept jobs now, stopping proven copies on the way.

    Proven members alive (and what they forked while still their parents) are
    survivors. A process the fork events show a leftover (or a copy) forked during the
    sweep is a copy: frozen and SIGKILLed, then looked for again, at most
    :data:`COPY_ROUNDS` times. Without complete fork events, a process that started
    during the sweep with no parent that ran before it, owned by a leftover's user, is
    ``uncertain``.

    Returns:
        The table of the last look.
    """
    swept = {lo.job_id for lo in report.leftovers}
    roots = {lo.pid: lo for lo in report.leftovers}
    copies: dict[tuple[int, int], Leftover] = {}
    gpus = DeviceFdSource(config.training.device_glob)
    for round_ in range(COPY_ROUNDS + 1):
        # A fresh table: every stat read again (a cached one would keep a process killed
        # a moment ago, a zombie now, as it was).
        table = ProcessTable(config.paths.proc_root)
        table.refresh()
        holders = gpus.holders(table, time.monotonic())
        fresh = [
            replace(c, devices=tuple(holders.get(c.pid, ())))
            for c in _copies(table, watch, roots, before)
            if (c.pid, c.start_ticks) not in copies
        ]
        for c in fresh:
            copies[(c.pid, c.start_ticks)] = c
            roots[c.pid] = c
        report.copies.extend(fresh)
        if not fresh or round_ == COPY_ROUNDS:
            break  # the last round's copies stay: survivors
        _stop(report, guard, effects, 0.0, False, fresh, kill_only=True, journal=journal)
    first = {
        lo.pid: Evidence(lo.job_id, lo.proof, lo.uid)
        for lo in [*report.leftovers, *copies.values()]
    }
    evidence = job_evidence(table, recorded, first, rec.proven())
    alive = {(p.pid, p.start_ticks) for p in table.procs.values() if not p.is_zombie}
    left: dict[int, Leftover] = {
        lo.pid: lo
        for lo in [*report.leftovers, *copies.values()]
        if (lo.pid, lo.start_ticks) in alive
    }
    for pid, ev in sorted(evidence.items()):
        if pid in left or ev.job_id not in swept or ev.proof is None or pid <= 1:
            continue
        if managed(table.ancestors(pid)) or pid in guard.sanctioned_pids:
            continue
        left[pid] = _member(table, pid, ev.job_id, ev.proof)
    report.survivor_items = [left[p] for p in sorted(left)]
    report.survivors = sorted(left)
    if watch is None or not watch.complete:
        holders = gpus.holders(table, time.monotonic())
        report.uncertain = [
            replace(u, devices=tuple(holders.get(u.pid, ())))
            for u in _uncertain(table, report, before, set(report.survivors))
        ]
    return table


def _member(table: ProcessTable, pid: int, job: int, proof: str) -> Leftover:
    """A process of ``job`` as the table shows it now."""
    proc = table.procs[pid]
    jc = job_cgroup(proc)
    return Leftover(
        pid, proc.start_ticks, proc.cmdline, proc.user, job, (), proof, proc.uid,
        jc[1] if jc else None, lineage_of(table, pid),
    )  # fmt: skip


def _copies(
    table: ProcessTable,
    watch: ForkLineage | None,
    roots: Mapping[int, Leftover],
    before: set[tuple[int, int]],
) -> list[Leftover]:
    """Live processes the fork events show ``roots`` forked during the sweep."""
    if watch is None:
        return []
    parents = watch.forked_by(roots)
    out = []
    for child, parent in sorted(parents.items()):
        proc = table.get(child)
        if proc is None or proc.is_zombie or (child, proc.start_ticks) in before:
            continue
        origin = parent
        while origin not in roots and origin in parents:
            origin = parents[origin]
        lo = roots.get(origin)
        if lo is None or proc.uid != lo.uid or managed(table.ancestors(child)):
            continue  # a setuid child is not a copy to kill; it stays in the recheck
        out.append(
            Leftover(
                child,
                proc.start_ticks,
                proc.cmdline,
                proc.user,
                lo.job_id,
                (),
                f"forked by PID {parent} during the sweep ({lo.label}: PID {lo.pid})",
                proc.uid,
                lo.cgroup,
                lineage_of(table, child),
            )
        )
    return out


def _uncertain(
    table: ProcessTable, report: SweepReport, before: set[tuple[int, int]], known: set[int]
) -> list[Leftover]:
    """Processes started during the sweep, owned by a leftover's user, whose every
    ancestor up to PID 1 started during the sweep too: a copy cannot be told from them."""
    owners = {lo.uid: lo for lo in report.leftovers}
    me = os.getpid()
    mine = {p.pid for p in table.ancestors(me)} | {me}

    def fresh(p: Proc) -> bool:
        return (p.pid, p.start_ticks) not in before

    out = []
    for pid, proc in sorted(table.procs.items()):
        if pid in known or pid in mine or pid <= 1 or proc.is_zombie or proc.kernel_thread:
            continue
        lo = owners.get(proc.uid)
        if lo is None or not fresh(proc):
            continue
        jc = job_cgroup(proc)
        if (jc is not None and jc[0] != lo.job_id) or managed(table.ancestors(pid)):
            continue
        if not orphan_chain(table, proc, fresh, mine):
            continue
        out.append(
            Leftover(
                pid,
                proc.start_ticks,
                proc.cmdline,
                proc.user,
                lo.job_id,
                (),
                "no parent that ran before it",
                proc.uid,
                jc[1] if jc else None,
                lineage_of(table, pid),
            )
        )
    return out


def _scope(report: SweepReport, rec: SweepRecord, job_id: int | None) -> set[int]:
    """The jobs whose record entries this sweep may change: the named job only, or
    every job it checked and every job recorded."""
    if job_id is not None:
        return {job_id}
    seen = {lo.job_id for lo in [*report.leftovers, *report.foreign, *report.unconfirmed]}
    seen |= set(report.unknown_jobs) | set(report.running_jobs) | set(report.gone_jobs)
    return seen | set(rec.jobs)


def _update_record(
    rec: SweepRecord, report: SweepReport, table: ProcessTable, scope: set[int]
) -> None:
    """Replace the entries of the jobs in ``scope`` with what is left of them now, and
    set the report's ``left_kinds`` and ``recorded_left`` from them."""
    newest, edge = horizon(table)
    # A process recorded as a possible copy stays one, not the claim its environment
    # makes (a claim is reported and forgotten; a possible copy keeps the drain).
    maybe_copies = {
        rp.ident for j, e in rec.jobs.items() if j in scope for rp in e.procs
        if rp.kind == "uncertain"
    }  # fmt: skip
    report.unconfirmed = [
        u for u in report.unconfirmed if (u.pid, u.start_ticks) not in maybe_copies
    ]
    fresh: dict[int, dict[tuple[int, int], RecordedProc]] = {}
    for kind, items in (
        ("survived", report.survivor_items),
        ("uncertain", report.uncertain),
        ("foreign", report.foreign),
        ("claim", report.gpu_claims),
        ("unchecked", report.unchecked),
    ):
        for lo in items:
            # A claim is never evidence, whatever its job: recorded as one.
            claim = kind == "unchecked" and lo.proof == CLAIM_PROOF
            kind_of = "unchecked_claim" if claim else kind
            fresh.setdefault(lo.job_id, {}).setdefault(
                (lo.pid, lo.start_ticks), lo.recorded(kind_of)
            )
    for job in sorted(scope):
        procs = fresh.get(job, {})
        old = rec.jobs.get(job)
        if old is not None:
            unknown = job in report.unknown_jobs
            # What an earlier check recorded that this one has no evidence of its own
            # for: a process that cannot be told from a copy (and what descends from it),
            # a GPU claim; while the job is still not checked, all of it.
            for rp in check_entry(old, table).procs:
                if rp.ident not in procs and (unknown or rp.kind in ("uncertain", "claim")):
                    procs[rp.ident] = rp
                    report.recorded_left.append((job, rp))
        if not procs:
            rec.jobs.pop(job, None)
            continue

        kept = sorted(procs.values(), key=lambda r: r.pid)
        report.left_kinds |= {r.kind for r in kept}
        rec.jobs[job] = JobEntry(
            job, kept[:MAX_PROCS_PER_JOB], newest, edge, len(kept) > MAX_PROCS_PER_JOB,
            report.unknown_jobs.get(job, ""),
        )  # fmt: skip


def _settled(report: SweepReport, done: Settled) -> None:
    if done.drained:
        report.drained = done.reason
    elif done.held:
        report.held = done.reason
    report.resumed = done.resumed
    report.drain_error = done.error


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
        "dry_run": report.dry_run,
        "leftovers": [item(lo) for lo in report.leftovers],
        "foreign": [item(f) for f in report.foreign],
        "unconfirmed": [item(u) for u in report.unconfirmed],
        "unchecked": [item(u) for u in report.unchecked],
        "unknown_jobs": {str(k): v for k, v in report.unknown_jobs.items()},
        "running_jobs": {str(k): v for k, v in report.running_jobs.items()},
        "copies": [item(c) for c in report.copies],
        "uncertain": [item(u) for u in report.uncertain],
        "outcomes": {str(k): [o.to_json() for o in v] for k, v in sorted(report.outcomes.items())},
        "survivors": report.survivors,
        "lineage_note": report.lineage_note,
        "drained": report.drained,
        "held": report.held,
        "resumed": report.resumed,
        "other_jobs": report.other_jobs,
        "would": report.would,
        "drain_error": report.drain_error,
        "exit_code": report.exit_code,
    }


def _some_pids(pids: list[int], shown: int = 5) -> str:
    """``1, 2, 3, 4, 5 and 2 more``: the first PIDs whole, and how many are left out (a
    Slurm reason is short; a list that stops silently reads as complete)."""
    text = ", ".join(str(p) for p in pids[:shown])
    return text + (f" and {len(pids) - shown} more" if len(pids) > shown else "")
