"""Job-end sweep for Slurm nodes: leftovers of ended jobs are named, stopped, or drain the node.

A job's processes can outlive it: a worker that called ``setsid()`` and ignores SIGTERM
leaves the job's process tree (proctrack/linuxproc follows parentage only) and keeps the
GPU after Slurm calls the job complete. In the manner of LBNL NHC's
``check_ps_userproc_lineage``, a process counts as a leftover when it carries
``SLURM_JOB_ID`` (or ``SLURM_JOBID``) in its environment, has no ``slurmstepd`` or
``slurmd`` ancestor, and its job has ended:

* ``rogue-watchdog health-check --epilog`` (Slurm's ``Epilog``): the job is the one
  slurmd names in the Epilog's own ``SLURM_JOB_ID``; it has ended by definition;
* ``rogue-watchdog health-check`` (``HealthCheckProgram``): every job id found is asked
  about (``squeue``/``scontrol``); only jobs Slurm reports gone or in a terminal state
  count, a job Slurm cannot be asked about is reported and left alone.

Each leftover is named "orphan of Slurm job N", and its tree is stopped with the
daemon's own escalation (SIGTERM, grace, SIGKILL; every signal guarded by PID + start
time and by ``enforcement.protect``). When any survives (or is protected), the node is
drained with a reason naming the job, so no new job lands on a GPU that is still taken.

Exit codes: 0 nothing left over (or everything stopped); 1 leftovers survive and the
node was drained (slurmd treats a failing Epilog as a reason to drain, too); 2 usage or
configuration errors, or the sweep could not run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from watchdog.actions.effects import Effects
from watchdog.actions.guards import Expected, Guard
from watchdog.actions.slurmnode import CommandRun, drain, node_state, run_command
from watchdog.actions.terminate import TerminateOutcome, terminate_tree
from watchdog.config import Config
from watchdog.lineage.base import ResolveContext
from watchdog.lineage.slurm import is_slurmstepd, query_job
from watchdog.model import Proc
from watchdog.sources.devfd import DeviceFdSource
from watchdog.sources.procfs import ProcessTable

_JOB_KEYS = ("SLURM_JOB_ID", "SLURM_JOBID")


@dataclass(frozen=True)
class Leftover:
    """A process of an ended Slurm job.

    Attributes:
        pid: Its PID.
        start_ticks: Its start time (identity for the guards).
        cmdline: Its argv.
        user: Owner's user name.
        job_id: The job named in its environment.
        devices: GPU device nodes it holds open.
    """

    pid: int
    start_ticks: int
    cmdline: tuple[str, ...]
    user: str | None
    job_id: int
    devices: tuple[str, ...]

    @property
    def label(self) -> str:
        """``orphan of Slurm job N``."""
        return f"orphan of Slurm job {self.job_id}"


@dataclass
class SweepReport:
    """What one sweep found and did.

    Attributes:
        leftovers: Processes of ended jobs, by PID.
        unknown_jobs: Job ids Slurm could not be asked about (left alone), with why.
        outcomes: Termination result per job id.
        survivors: Leftover PIDs still alive after the escalation (or never signalled).
        drained: The drain reason set, or None.
        drain_error: Why draining failed, or None.
    """

    leftovers: list[Leftover] = field(default_factory=list)
    unknown_jobs: dict[int, str] = field(default_factory=dict)
    outcomes: dict[int, TerminateOutcome] = field(default_factory=dict)
    survivors: list[int] = field(default_factory=list)
    drained: str | None = None
    drain_error: str | None = None

    @property
    def exit_code(self) -> int:
        """0 clean, 1 leftovers survive (node drained or drain attempted)."""
        return 1 if self.survivors else 0

    def lines(self) -> list[str]:
        """Human-readable report, one fact per line (host text still raw: escape it)."""
        out = []
        for lo in self.leftovers:
            gpu = f", holds {', '.join(lo.devices)}" if lo.devices else ""
            out.append(
                f"PID {lo.pid} ({lo.user}) is an {lo.label}{gpu}: {' '.join(lo.cmdline)[:160]}"
            )
        for job, why in sorted(self.unknown_jobs.items()):
            out.append(f"Slurm job {job}: not checked, Slurm could not be asked ({why})")
        for job, outcome in sorted(self.outcomes.items()):
            for p in outcome.procs:
                # The escalation a person cares about; the SIGSTOP/SIGCONT that freeze the
                # tree while it is stopped (docs/operations.md) are in the JSON report.
                escalation = [s for s in p.signals if s not in ("SIGSTOP", "SIGCONT")]
                sent = "+".join(escalation) or "no signal"
                why = f" ({p.reason})" if p.reason else ""
                out.append(f"job {job}: PID {p.pid} {p.result} after {sent}{why}")
        if self.drained:
            out.append(f"node drained: {self.drained}")
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


def find_leftovers(
    table: ProcessTable,
    ctx: ResolveContext,
    device_glob: str,
    job_id: int | None = None,
    self_pid: int | None = None,
) -> tuple[list[Leftover], dict[int, str]]:
    """Find processes of ended jobs.

    Args:
        table: A refreshed process table.
        ctx: Gives ``run_cmd`` for asking Slurm (health-check mode).
        device_glob: GPU device nodes (``training.device_glob``).
        job_id: Epilog mode: only this job, known to have ended; None asks Slurm.
        self_pid: This process (it and its ancestors are never leftovers).

    Returns:
        (leftovers, job ids Slurm could not be asked about with why).
    """
    me = os.getpid() if self_pid is None else self_pid
    mine = {p.pid for p in table.ancestors(me)} | {me}
    candidates: dict[int, list[Proc]] = {}
    for pid, proc in table.procs.items():
        if pid in mine or pid <= 1 or proc.kernel_thread or proc.is_zombie:
            continue
        jid = _job_of(table.environ(pid))
        if jid is None or (job_id is not None and jid != job_id):
            continue
        if _managed(table.ancestors(pid)):
            continue
        candidates.setdefault(jid, []).append(proc)
    unknown: dict[int, str] = {}
    ended: set[int] = set()
    for jid in candidates:
        if job_id is not None:
            ended.add(jid)
            continue
        answer = query_job(jid, ctx)
        if answer.status == "unavailable":
            unknown[jid] = answer.via or "no answer"
        elif answer.ended:
            ended.add(jid)
    holders = DeviceFdSource(device_glob).holders(table, time.monotonic())
    out = [
        Leftover(p.pid, p.start_ticks, p.cmdline, p.user, jid, holders.get(p.pid, ()))
        for jid in sorted(ended)
        for p in sorted(candidates[jid], key=lambda q: q.pid)
    ]
    return out, unknown


def sweep(
    config: Config,
    *,
    job_id: int | None = None,
    dry_run: bool = False,
    run: CommandRun | None = None,
    effects: Effects | None = None,
    table: ProcessTable | None = None,
) -> SweepReport:
    """Find leftovers of ended jobs, stop them, drain the node if any survive.

    Args:
        config: Gives ``paths.proc_root``, ``training.device_glob``,
            ``enforcement.protect`` and the ``slurm:`` section (node name, grace).
        job_id: Epilog mode (see module docstring); None is health-check mode.
        dry_run: Report only: nothing is signalled, the node is not drained.
        run: Slurm CLI runner for draining (tests pass the real one).
        effects: Where signals go.
        table: Process table (tests may pass one over a fixture tree).

    Returns:
        The report; :attr:`SweepReport.exit_code` is the command's exit code.
    """
    settings = config.slurm
    table = table or ProcessTable(config.paths.proc_root)
    table.refresh()
    ctx = ResolveContext(table=table, now=datetime.now(UTC))
    report = SweepReport()
    report.leftovers, report.unknown_jobs = find_leftovers(table, ctx, config.device_glob, job_id)
    if not report.leftovers:
        return report
    guard = Guard(proc_root=config.paths.proc_root, protect=config.enforcement.protect)
    by_job: dict[int, list[Leftover]] = {}
    for lo in report.leftovers:
        by_job.setdefault(lo.job_id, []).append(lo)
    for jid, members in by_job.items():
        outcome = terminate_tree(
            [Expected(lo.pid, lo.start_ticks, lo.cmdline or None) for lo in members],
            guard,
            effects or Effects(),
            settings.sweep_grace_s,
            dry_run=dry_run,
        )
        report.outcomes[jid] = outcome
        report.survivors += [
            p.pid for p in outcome.procs if p.result in ("survived", "refused", "error")
        ]
    if report.survivors and not dry_run:
        jobs = ", ".join(str(j) for j in sorted({lo.job_id for lo in report.leftovers}))
        reason = (
            f"rogue-watchdog: orphan of Slurm job {jobs} survived termination "
            f"(PID {', '.join(map(str, report.survivors[:5]))})"
        )
        runner = run or run_command(settings.command_timeout_s)
        st = node_state(settings.node, runner)
        if isinstance(st, str):
            report.drain_error = st
        elif st.drained:
            report.drain_error = f"node already drained ({st.reason}); reason left as it is"
        else:
            err = drain(settings.node, reason, runner)
            if err is None:
                report.drained = reason
            else:
                report.drain_error = err
    return report


def report_json(report: SweepReport) -> dict[str, Any]:
    """The report as plain JSON data (``health-check --json``)."""
    return {
        "leftovers": [
            {
                "pid": lo.pid,
                "job_id": lo.job_id,
                "label": lo.label,
                "user": lo.user,
                "cmdline": list(lo.cmdline),
                "devices": list(lo.devices),
            }
            for lo in report.leftovers
        ],
        "unknown_jobs": {str(k): v for k, v in report.unknown_jobs.items()},
        "outcomes": {str(k): v.to_json() for k, v in report.outcomes.items()},
        "survivors": report.survivors,
        "drained": report.drained,
        "drain_error": report.drain_error,
        "exit_code": report.exit_code,
    }
