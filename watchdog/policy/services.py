"""``rogue-service`` findings: unsanctioned jobs (or their siblings) listening on ports.

For every rogue or excess job the processes "of the same origin" are gathered: the
job's members and every descendant of its root, the other processes of the same
systemd unit or container (cgroup), of the same cron invocation (below the per-job
``CRON`` process) and of the same Slurm job step (below ``slurmstepd``). Their listening
sockets, minus the sanctioned ports of the ``services:`` section, make one finding per job.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from ..config.services import ServiceSettings
from ..hosttext import code_span, command_text, quoted_command
from ..lineage.base import exe_name, is_wrapper
from ..lineage.cgroup import CgroupInfo, parse_cgroup
from ..lineage.slurm import is_slurmstepd
from ..model import Finding, Job, Proc, Protection
from ..sources.procfs import ProcessTable
from ..sources.sockets import Listen, ListenScan
from .findings import gpus_text, incident_key

_CRON_DAEMONS = frozenset({"cron", "crond"})
_MAX_ENDPOINTS_IN_MESSAGE = 4
# Ancestors that start other people's work and listen for their own reasons (sshd on 22,
# a Slurm or container daemon): the walk up from a job root stops at them.
_SPAWNERS = frozenset(
    {
        "init", "systemd", "cron", "crond", "anacron", "atd", "sshd", "dropbear",
        "mosh-server", "login", "slurmstepd", "slurmstepd-wlm", "slurmd", "conmon",
        "containerd-shim", "containerd-shim-runc-v1", "containerd-shim-runc-v2",
        "docker-containerd-shim", "supervisord", "runsv", "runsvdir", "s6-supervise",
        "s6-svscan", "supervise", "svscan", "tini", "catatonit", "dumb-init", "tmux",
        "tmux: server", "screen", "SCREEN", "circusd", "PM2",
    }
)  # fmt: skip
_MAX_PARENT_DEPTH = 8


def _unit_key(info: CgroupInfo | None) -> tuple[str, str | None] | None:
    """(unit, user unit) naming one service; None for login sessions and managers."""
    if info is None or info.unit is None:
        return None
    if info.user_unit is None and (
        info.unit == "init.scope"
        or info.unit.startswith("user@")
        or (info.session is not None and info.unit == info.session)
    ):
        return None  # a whole login or a user manager is not one service
    return info.unit, info.user_unit


def _anchor(lineage: Sequence[Proc]) -> Proc | None:
    """The per-invocation spawner below cron, or the job's slurmstepd."""
    for i, proc in enumerate(lineage):
        if is_slurmstepd(proc):
            return proc
        parent = lineage[i + 1] if i + 1 < len(lineage) else None
        if parent is not None and exe_name(parent) in _CRON_DAEMONS:
            return proc  # Debian's per-job "CRON" child
    return None


def protected_pids(jobs: Iterable[Job]) -> frozenset[int]:
    """Members and ancestors of sanctioned and ignored jobs: never a rogue service.

    A sanctioned pipeline's launcher that also started an excess run is the pipeline's;
    calling it a rogue service would advise killing the sanctioned run with it.
    """
    out: set[int] = set()
    for job in jobs:
        if job.verdict in ("sanctioned", "ignored"):
            out.update(job.pids)
            out.update(p.pid for p in job.lineage)
    return frozenset(out)


def launching_ancestors(
    job: Job, self_pid: int | None = None, protected: Collection[int] = frozenset()
) -> list[Proc]:
    """The job root's ancestors that started the run themselves, nearest first.

    Walks up from the root's parent through wrappers (``sh -c``, ``setsid``, ``nohup``:
    they only pass the command on) and stops at PID 1 and at spawners that start other
    people's work (cron, sshd, systemd, slurmstepd, container shims, supervisors,
    multiplexers). What is left is a program that launched the training run: a service
    whose port makes it a rogue service whatever started it.

    Args:
        job: A training job with its lineage.
        self_pid: The watchdog's own PID in this PID namespace (never counted: it may
            listen on a status or metrics port, and a test harness may start jobs).
        protected: PIDs of sanctioned jobs and their lineage (:func:`protected_pids`):
            the walk stops there.

    Returns:
        Non-wrapper ancestors below the first spawner (at most a few).
    """
    out: list[Proc] = []
    for proc in job.lineage[1 : 1 + _MAX_PARENT_DEPTH]:
        name = exe_name(proc)
        if (
            proc.pid <= 1
            or proc.pid == self_pid
            or proc.pid in protected
            or proc.kernel_thread
            or name in _SPAWNERS
            or name.startswith("containerd-shim")
            or is_slurmstepd(proc)
            or (proc.nspid and proc.nspid[-1] == 1)
        ):
            break
        if not is_wrapper(proc):
            out.append(proc)
    return out


def _self_pid(table: ProcessTable | None) -> int | None:
    return os.getpid() if table is None or table.proc_root == "/proc" else None


def service_pids(
    job: Job, table: ProcessTable, protected: Collection[int] = frozenset()
) -> list[int]:
    """Processes sharing the job's origin, whose sockets count as the job's.

    Args:
        job: A training job (its lineage and members).
        table: A refreshed process table (the scanner's, or one of the source's own).
        protected: PIDs never counted as the job's launchers (:func:`protected_pids`).

    Returns:
        Sorted PIDs: members, descendants of the root, the ancestors that launched it
        (:func:`launching_ancestors`), same unit/container cgroup, and the processes
        below the job's CRON child or slurmstepd.
    """
    pids = set(job.pids)
    pids.add(job.root_pid)
    pids.update(p.pid for p in launching_ancestors(job, _self_pid(table), protected))
    pids.update(table.descendants(job.root_pid))
    anchor = _anchor(job.lineage)
    if anchor is not None:
        pids.add(anchor.pid)
        pids.update(table.descendants(anchor.pid))
    root = table.get(job.root_pid) or (job.lineage[0] if job.lineage else None)
    info = parse_cgroup(root.cgroup) if root is not None else None
    unit = _unit_key(info)
    container = info.container_id if info is not None else None
    if unit is not None or container is not None:
        for pid, proc in table.procs.items():
            if proc.kernel_thread or not proc.cgroup:
                continue
            peer = parse_cgroup(proc.cgroup)
            if peer is None:
                continue
            if (unit is not None and _unit_key(peer) == unit) or (
                container is not None and peer.container_id == container
            ):
                pids.add(pid)
    return sorted(pids)


def _who(job: Job) -> str:
    return job.origin.service_name() or job.origin.describe()


def service_stop(service: Proc, job: Job) -> str:
    """How to stop a rogue service that launched ``job`` and the run with it:
    ``rogue-watchdog terminate SERVICE-PID`` (the service's PID names the run it
    launched; the guard checks both), and the by-hand ``kill``."""
    return (
        f"rogue-watchdog terminate{job.advice.cli_args} {service.pid} (stops the service "
        f"and its run), or by "
        f"hand: kill -TERM {service.pid} {job.root_pid}"
    )


def service_source(finding: Finding) -> str:
    """What the source of a ``rogue-service`` finding's run is, in words: the service
    process that launched it (a process, with no file or unit to disable), or its
    origin when no service launched it.

    Args:
        finding: A ``rogue-service`` finding (its message and ``service_pids``).
    """
    pids = finding.details.get("service_pids") or []
    listening = [
        f"{x.get('address')}:{x.get('port')}/{x.get('proto')}"
        for x in finding.details.get("listening") or []
        if isinstance(x, dict) and x.get("pid") in pids
    ]
    if not pids:
        return f"its origin ({finding.details.get('origin_kind', 'unknown')})"
    where = f" (listening on {', '.join(listening[:4])})" if listening else ""
    return f"the service PID {pids[0]}{where}, which started the run itself"


def service_finding(
    job: Job,
    listening: Sequence[Listen],
    denied: Sequence[int] = (),
    protected: Collection[int] = frozenset(),
) -> Finding | None:
    """The ``rogue-service`` finding for one unsanctioned job, or None without sockets.

    Args:
        job: A rogue or excess job.
        listening: Its unsanctioned listening sockets.
        denied: PIDs of its origin whose sockets could not be read.
        protected: PIDs never named as the launching service (:func:`protected_pids`).

    Returns:
        A high-severity finding keyed on the job (``root_pid``), e.g. ``old-trainer.service
        (PID 812) listening on 0.0.0.0:8080/tcp, started its own training run: rogue job
        PID 812 `python train.py```.
    """
    if not listening:
        return None
    by_pid: dict[int, list[Listen]] = {}
    for item in listening:
        by_pid.setdefault(item.pid, []).append(item)
    parts = []
    for pid, items in sorted(by_pid.items()):
        ends = [f"{x.endpoint}/{x.proto}" for x in items]
        extra = len(ends) - _MAX_ENDPOINTS_IN_MESSAGE
        text = ", ".join(ends[:_MAX_ENDPOINTS_IN_MESSAGE]) + (
            f" (+{extra} more)" if extra > 0 else ""
        )
        parts.append(f"PID {pid} listening on {text}")
    verdict = "rogue" if job.verdict == "rogue" else "excess"
    own = job.root_pid in by_pid or any(pid in job.pids for pid in by_pid)
    parents = [p for p in launching_ancestors(job, _self_pid(None), protected) if p.pid in by_pid]
    if parents:
        how = "started the run"
    else:
        how = "started its own training run" if own else "beside its training run"
    who = _who(job)
    # Nothing known started it and no person did (unknown, an orphan): the service did.
    unowned = not job.origin.SOURCE_FIELDS and not job.origin.by_hand
    if parents and unowned:
        # The service is what keeps starting runs; name it, not an origin nobody knows.
        service = parents[0]
        text = command_text(service.cmdline, 80) or service.args_text
        who = f"service PID {service.pid} {code_span(text)}"
    message = (
        f"{who} ({'; '.join(parts)}), {how}: {verdict} job PID {job.root_pid} "
        f"{'on ' + gpus_text(job.gpus) + ' ' if job.gpus else ''}{quoted_command(job.cmdline, 120)}"
    )
    stop = job.advice.finding_text(job.root_pid)
    if parents and job.advice.refused is None and unowned:
        message += f"; to stop the service and its run: {service_stop(parents[0], job)}"
    elif stop:
        message += stop
    details: dict[str, Any] = {
        "listening": [x.to_json() for x in listening],
        "job_root_pid": job.root_pid,
        "verdict": job.verdict,
        "origin_kind": job.origin.kind,
        "gpu_indexes": job.gpu_indexes,
    }
    if parents:
        details["service_pids"] = [p.pid for p in parents]
    # One incident with its run's rogue-job (and the launcher's other runs): one page.
    details["incident"] = incident_key(job)
    if denied:
        details["unreadable_pids"] = sorted(denied)
    return Finding("rogue-service", "high", message, root_pid=job.root_pid, details=details)


def service_scope(
    jobs: Iterable[Job], table: ProcessTable, guard: Protection | None = None
) -> dict[int, list[int]]:
    """Whose listening sockets to read for each rogue or excess job: its processes and
    those of its origin (:func:`service_pids`), never a process the sanctioned jobs or
    the guard protect.

    Args:
        jobs: Judged jobs of a scan (all of them: sanctioned ones protect their lineage).
        table: A process table refreshed at (or after) that scan.
        guard: The scan's protection.

    Returns:
        Job root PID → the PIDs to read, for every unsanctioned job.
    """
    jobs = list(jobs)
    protected = _protected(jobs, guard)
    return {j.root_pid: service_pids(j, table, protected) for j in jobs if j.unsanctioned}


def _protected(jobs: Sequence[Job], guard: Protection | None) -> frozenset[int]:
    protected = protected_pids(jobs)
    if guard is None:
        return protected
    return protected | {
        p.pid for j in jobs for p in j.lineage if guard.process_refusal(p) is not None
    }


def service_findings(
    jobs: Iterable[Job],
    listens: Mapping[int, ListenScan],
    settings: ServiceSettings,
    guard: Protection | None = None,
) -> list[Finding]:
    """One ``rogue-service`` finding per rogue/excess job with unsanctioned listeners.

    Args:
        jobs: Judged jobs of a scan (all of them: sanctioned ones protect their lineage).
        listens: Job root PID → what the sockets of its :func:`service_scope` showed
            (:func:`watchdog.sources.sockets.scan_listening`); a job missing here has
            none read.
        settings: The ``services:`` section.
        guard: The scan's protection: a process it protects is never named as a
            service to stop.

    Returns:
        Findings in job order; empty when the section is disabled.
    """
    if not settings.enabled:
        return []
    jobs = list(jobs)
    protected = _protected(jobs, guard)
    out = []
    for job in jobs:
        found = listens.get(job.root_pid)
        # A server that merely serves (a class that is not training) is no rogue
        # service: its own unsanctioned-gpu-use finding says what it is.
        if not job.unsanctioned or not job.may_train or found is None:
            continue
        keep = [x for x in found.listening if settings.sanctioned(x) is None]
        finding = service_finding(job, keep, found.denied, protected)
        if finding is not None:
            out.append(finding)
    return out
