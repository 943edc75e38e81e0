"""Turn jobs and GPU-visibility facts into findings."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

# fmt_bytes lives in watchdog.model (render and the `status` client need no policy).
from ..config.workloads import WorkloadSettings
from ..hosttext import code_span, command_text, map_outside_code, quoted_command
from ..model import Finding, GpuHeld, GpuInfo, GpuProcess, Job, Proc, fmt_bytes
from ..sources.procfs import INITIAL_PID_NS, ProcessTable
from .jobs import TrainingEvidence


def gpus_text(gpus: Sequence[GpuHeld]) -> str:
    """``GPU 3 (4.0 GiB)``, ``GPUs 0 (4.0 GiB), 1 (-)``: where a job is and what it holds.

    Memory NVML could not report is ``-``, the one spelling of unknown in every view.
    """
    each = [
        f"{g.index} ({'-' if g.memory_bytes is None else fmt_bytes(g.memory_bytes)})" for g in gpus
    ]
    return ("GPU " if len(each) == 1 else "GPUs ") + ", ".join(each)


#: How a finding names each class of job (``unknown`` is judged as training).
CLASS_NOUNS: dict[str, str] = {
    "training": "training job",
    "unknown": "GPU job",
    "serving": "inference server",
    "interactive": "interactive session",
    "system": "system GPU program",
    "probe": "short-lived GPU probe",
}


def job_findings(jobs: Sequence[Job], workloads: WorkloadSettings | None = None) -> list[Finding]:
    """One finding per rogue or excess job (never one per PID).

    A rogue job of a class that is not training (:attr:`~watchdog.model.Job.may_train`
    false) is ``unsanctioned-gpu-use`` at its class's severity (``workloads.severity``,
    warning by default), says what it is, and names the ignore entry that would exempt
    it; training (and ``unknown``, which may be training) is ``rogue-job`` at high. An
    excess run is ``excess-instances`` whatever its class: a rule matched it.

    Args:
        jobs: Judged and classed jobs.
        workloads: The ``workloads:`` section; None uses the defaults.
    """
    workloads = workloads or WorkloadSettings()
    out = []
    for job in jobs:
        if not job.unsanctioned:
            continue
        if job.verdict == "rogue" and not job.may_train:
            out.append(_unsanctioned_use(job, workloads))
            continue
        noun = CLASS_NOUNS["unknown" if job.workload == "unknown" else "training"]
        head = f"{'rogue' if job.verdict == 'rogue' else 'excess'} {noun} PID {job.root_pid}"
        if job.gpus:
            head += f" on {gpus_text(job.gpus)}"
        parts = [head, *_job_parts(job)]
        if job.workload == "unknown" and job.verdict == "rogue":
            parts.append("class unknown (no training launcher or script seen; judged as training)")
        message = ", ".join(parts) + job.advice.finding_text(job.root_pid)
        out.append(
            Finding(
                kind="rogue-job" if job.verdict == "rogue" else "excess-instances",
                severity="high",
                message=message,
                root_pid=job.root_pid,
                details=_job_details(job),
            )
        )
    return out


def _job_parts(job: Job) -> list[str]:
    """User, command, origin, process count and unplaced memory of a job finding."""
    parts = [
        f"user {job.user or '-'}",
        quoted_command(job.cmdline, 160),
        f"from {job.origin.describe()}",
    ]
    # No "next run" time: the message of an open finding is kept (status, reminders)
    # long after that time passed. `explain` (and the origin in `scan --json`) gives
    # the next run as of its look.
    if len(job.pids) > 1:
        parts.append(f"{len(job.pids)} processes")
    if job.gpu_memory_bytes is not None and not job.gpus:
        parts.append(f"{fmt_bytes(job.gpu_memory_bytes)} GPU memory")
    return parts


def _job_details(job: Job) -> dict[str, Any]:
    return {
        "reason": job.reason,
        # The job's identity (root PID, start ticks): a finding names one job.
        "root": [job.root_pid, job.start_ticks],
        "pids": list(job.pids),
        "rule": job.rule,
        # Bounded labels for fleet routing (Alertmanager, docs/fleet.md).
        "user": job.user,
        "origin_kind": job.origin.kind,
        "origin_label": job.origin.label(),
        "remediation": job.origin.remediation,
        "gpu_indexes": job.gpu_indexes,
        "gpus": [g.to_json() for g in job.gpus],
        "workload": job.workload,
        "workload_evidence": list(job.workload_evidence),
        "incident": incident_key(job),
    }


def incident_key(job: Job) -> str:
    """What one incident's jobs share: the launcher that started them (PID and start
    ticks, where the origin names no spawner and the launcher still runs), else their
    origin's source (a crontab line, a unit, a Slurm job name) when every field of it
    is known, else the job itself (PID and start ticks: its own incident, which its
    service's ``rogue-service`` finding shares).

    A sweep's launcher starting 40 different training scripts is one thing a person
    must act on (stop the launcher), not 40 (issue 33, fresh user H: 40 high pages in
    4 s); the tracker pages the first and names the others in it
    (``watchdog/daemon/tracking/incident.py``).
    """
    restarts = job.advice.restarts
    if restarts is not None and restarts.launcher is not None:
        pid, start = restarts.launcher
        return f"launcher {pid} {start}"
    key = job.origin.source_key() if job.origin.definite else None
    if key is None or any(v is None or v == "" for v in key[1:]):
        # The job alone: its rogue-job and its service's rogue-service are one incident.
        return f"job {job.root_pid} {job.start_ticks}"
    return "source " + json.dumps([str(v) for v in key])


def _unsanctioned_use(job: Job, workloads: WorkloadSettings) -> Finding:
    """The ``unsanctioned-gpu-use`` finding of a rogue job that is not training."""
    head = f"unsanctioned GPU use: {CLASS_NOUNS[job.workload]} PID {job.root_pid}"
    if job.gpus:
        head += f" on {gpus_text(job.gpus)}"
    why = "; ".join(job.workload_evidence) or "-"
    message = (
        ", ".join([head, *_job_parts(job)])
        + f"; class {job.workload} ({why}), not training: no rule sanctions it and no "
        + "ignore entry exempts it; nothing is done about it. If it belongs here, exempt "
        + f"it: {job.exemption()}"
    )
    return Finding(
        kind="unsanctioned-gpu-use",
        severity=workloads.severity_of(job.workload),
        message=message,
        root_pid=job.root_pid,
        details=_job_details(job),
    )


# The literal every match of name_finding_in_commands's pattern starts with.
_DISABLE_SOURCE = "rogue-watchdog disable-source"


def name_finding_in_commands(message: str, root_pid: int | None, finding_id: int) -> str:
    """Point ``rogue-watchdog disable-source PID`` in a message at the finding instead.

    A scan names the job by its root PID (all it knows); once the daemon has filed the
    finding, ``F<id>`` is the better handle: it still works after the job exited (a cron
    job between runs), when the PID no longer names anything.

    Args:
        message: A finding message.
        root_pid: The job's root PID the message names.
        finding_id: The finding's id in the state database.

    Returns:
        The message with ``disable-source [--config P] PID (`` replaced by
        ``disable-source [--config P] F<id> (``.
    """
    if root_pid is None or _DISABLE_SOURCE not in message:
        # Most messages name no such command; the pattern, one per PID, is compiled
        # anew for each new finding (about 0.1 ms: the exec path's to pay, issue 34).
        return message
    by_pid = re.compile(
        r"(rogue-watchdog disable-source(?: --config (?:'[^']*'|\S+))? )" + f"{root_pid} \\("
    )
    # Only the product's own commands: a quoted command line may hold the same words.
    return map_outside_code(
        message, lambda s: by_pid.sub(lambda m: f"{m.group(1)}F{finding_id} (", s)
    )


def _is_system(table: ProcessTable, pid: int) -> bool:
    proc = table.get(pid)
    return pid == 1 or (proc is not None and proc.kernel_thread)


def zombie_findings(
    table: ProcessTable, visible: Sequence[GpuProcess], evidence: TrainingEvidence
) -> list[Finding]:
    """One ``zombie-gpu-memory`` finding per zombie NVML still lists: who holds its
    memory, what frees it, and whether a job counts it (never the zombie: it exited).

    Args:
        table: The refreshed process table.
        visible: NVML entries visible in ``table`` (:func:`gpu_visibility_findings`).
        evidence: :func:`~watchdog.policy.jobs.collect_training`'s, which decided whose
            job counts each zombie (``held``) and why a parent is none (``unheld``).

    Returns:
        The findings, in NVML's order.
    """
    out = []
    for gp in visible:
        proc = table.get(gp.pid)
        if proc is not None and proc.is_zombie:
            out.append(_zombie_finding(table, gp, proc, evidence))
    return out


def _zombie_finding(
    table: ProcessTable, gp: GpuProcess, proc: Proc, evidence: TrainingEvidence
) -> Finding:
    """Who holds a zombie's GPU memory and what frees it (never the zombie: it exited)."""
    parent = table.get(proc.ppid)
    who = (
        f"PID {proc.ppid} {code_span(command_text(parent.cmdline, 80) or parent.args_text)}"
        if parent
        else f"PID {proc.ppid}"
    )
    head = f"zombie PID {gp.pid} holds {fmt_bytes(gp.used_memory_bytes)} on GPU {gp.gpu_index}"
    details: dict[str, Any] = {
        "pid": gp.pid,
        "parent_pid": proc.ppid,
        "gpu_uuid": gp.gpu_uuid,
        "used_memory_bytes": gp.used_memory_bytes,
    }
    holder = evidence.held.get(gp.pid)
    if holder is not None:
        return Finding(
            kind="zombie-gpu-memory",
            severity="warning",
            message=(
                f"{head}; its parent {who} has not reaped it: the memory is freed when that "
                "parent reaps it (wait(2)) or exits, so it is counted in the parent's job; "
                "signalling the zombie does nothing"
            ),
            root_pid=holder,
            details={**details, "holder_pid": holder},
        )
    why = evidence.unheld.get(gp.pid)
    if why is not None:
        # The parent runs other work (a hub, a shell with a web server): it is no job,
        # and nothing is ever signalled for a memory it alone can free.
        return Finding(
            kind="zombie-gpu-memory",
            severity="warning",
            message=(
                f"{head}; it has exited, not reaped by its parent {who}: the memory is freed "
                f"when PID {proc.ppid} reaps it (wait(2)) or exits. PID {proc.ppid} is no "
                f"job for it: {why}; nothing is signalled for it (signalling the zombie "
                "does nothing)"
            ),
            details={
                **details,
                "holder_pid": None,
                "fingerprint": f"zombie:{gp.pid}:{proc.start_ticks}:{gp.gpu_uuid}",
            },
        )
    role = "init" if proc.ppid == 1 else "the init of its PID namespace or a subreaper"
    return Finding(
        kind="zombie-gpu-memory",
        severity="warning",
        message=(
            f"{head}; it has exited and its parent {who} is {role}, which reaps exited "
            f"processes: the memory is freed when PID {proc.ppid} reaps it. If it stays, "
            f"PID {proc.ppid} does not reap (a container whose PID 1 is not an init: run it "
            "with --init or tini) or the driver kept the memory after the exit (look for "
            "Xid errors in the kernel log). No job holds it and no process is signalled"
        ),
        details={**details, "holder_pid": None},
    )


def missing_gpu_processes(table: ProcessTable, gpu_procs: Sequence[GpuProcess]) -> list[GpuProcess]:
    """NVML entries whose PID the process table lacks (PID 1 and kernel threads, which
    NVML cannot really list, left out: they are a binding mismatch, not missing).

    The edge asks NVML again about these and checks /proc once more
    (:func:`watchdog.scan.still_hidden`); what is still listed and still absent is
    passed back to :func:`gpu_visibility_findings` as ``hidden``.
    """
    return [gp for gp in gpu_procs if not _is_system(table, gp.pid) and table.get(gp.pid) is None]


def gpu_visibility_findings(
    table: ProcessTable,
    gpu_procs: Sequence[GpuProcess],
    hidden: Sequence[GpuProcess],
) -> tuple[list[GpuProcess], list[Finding]]:
    """Split NVML entries into visible ones and findings about the rest.

    A PID NVML lists but ``/proc`` does not show is either transient (it exited between
    the NVML call and the /proc read: NVML no longer lists it on a second look) or
    invisible (another PID namespace, or a driver/binding disagreement). Only the
    invisible ones (``hidden``) are reported, and never signalled. Reads nothing: the
    second look is the caller's. A visible zombie's finding comes later
    (:func:`zombie_findings`), once the training evidence says whose job counts it.

    Args:
        table: Refreshed process table.
        gpu_procs: NVML entries that passed the binding sanity checks.
        hidden: Of :func:`missing_gpu_processes`, those NVML still listed on a second
            look while /proc still lacked them.

    Returns:
        ``(visible entries, findings)``.
    """
    findings: list[Finding] = []
    system = [gp for gp in gpu_procs if _is_system(table, gp.pid)]
    for gp in system:
        findings.append(
            Finding(
                kind="binding-mismatch",
                severity="warning",
                message=(
                    f"NVML lists PID {gp.pid} ({'init' if gp.pid == 1 else 'a kernel thread'}) "
                    f"on GPU {gp.gpu_index}: the binding and driver disagree; not a job"
                ),
                details={"pid": gp.pid, "gpu_uuid": gp.gpu_uuid},
            )
        )
    gpu_procs = [gp for gp in gpu_procs if gp not in system]
    visible = [gp for gp in gpu_procs if table.get(gp.pid) is not None]
    all_pids = {gp.pid for gp in gpu_procs}
    hidden_pids = sorted({gp.pid for gp in hidden})
    if len(hidden_pids) >= 2 and len(hidden_pids) * 2 > len(all_pids):
        findings.append(
            Finding(
                kind="pid-namespace",
                severity="high",
                message=(
                    f"{len(hidden_pids)} of {len(all_pids)} GPU PIDs are not visible in /proc: "
                    "rogue-watchdog is probably running in a container PID namespace and must "
                    "run in the host PID namespace (docker --pid=host, Kubernetes hostPID: true)"
                ),
                details={"pids": hidden_pids},
            )
        )
    else:
        for gp in hidden:
            findings.append(
                Finding(
                    kind="gpu-pid-invisible",
                    severity="warning",
                    message=(
                        f"GPU memory held by a PID not visible here: PID {gp.pid} holds "
                        f"{fmt_bytes(gp.used_memory_bytes)} on GPU {gp.gpu_index} ({gp.gpu_uuid}); "
                        "it is never signalled"
                    ),
                    details={
                        "pid": gp.pid,
                        "gpu_uuid": gp.gpu_uuid,
                        "used_memory_bytes": gp.used_memory_bytes,
                    },
                )
            )
    return visible, findings


def unexplained_memory_findings(
    gpus: Sequence[GpuInfo],
    gpu_procs: Sequence[GpuProcess],
    blind_gpus: Collection[int],
    slack_bytes: int,
) -> list[Finding]:
    """Used memory on a GPU that no listed process accounts for.

    A GPU whose process lists could not be read in full (``blind_gpus``), or where a
    listed process's memory is unknown, cannot be judged and gets no finding here (the
    hidden/hung finding already speaks for it).

    Args:
        gpus: Devices from the NVML snapshot; whole GPUs (``mig_index`` None) are judged,
            against every process listed on them or their MIG devices.
        gpu_procs: Every process NVML listed, before any visibility filtering.
        blind_gpus: Indexes of GPUs whose lists were incomplete.
        slack_bytes: Tolerated difference (driver and firmware reserve a few hundred MiB).

    Returns:
        One ``gpu-memory-unexplained`` finding per GPU above the slack.
    """
    out = []
    for gpu in gpus:
        if gpu.mig_index is not None or gpu.index in blind_gpus:
            continue
        used = gpu.memory_used_bytes
        mine = [gp.used_memory_bytes for gp in gpu_procs if gp.gpu_index == gpu.index]
        if used is None or any(m is None for m in mine):
            continue
        listed = sum(m for m in mine if m is not None)
        unexplained = used - listed
        if unexplained <= slack_bytes:
            continue
        out.append(
            Finding(
                kind="gpu-memory-unexplained",
                severity="warning",
                message=(
                    f"GPU {gpu.index} ({gpu.uuid}) has {fmt_bytes(used)} in use but the "
                    f"processes NVML lists hold {fmt_bytes(listed)}: {fmt_bytes(unexplained)} "
                    f"({unexplained} bytes) is held by no listed process (a process NVML does "
                    "not list to us, e.g. in another container, a leaked context, or memory "
                    "the driver kept after a fault); more than the "
                    f"{fmt_bytes(slack_bytes)} allowed (nvml.unexplained_memory_slack_bytes)"
                ),
                details={
                    "fingerprint": gpu.uuid,
                    "gpu_index": gpu.index,
                    "gpu_uuid": gpu.uuid,
                    "used_bytes": used,
                    "listed_bytes": listed,
                    "unexplained_bytes": unexplained,
                    "slack_bytes": slack_bytes,
                },
            )
        )
    return out


def pid_namespace_finding(
    own_ns: str | None, procfs_ns: str | None, gpu_procs: Sequence[GpuProcess]
) -> Finding:
    """NVML PIDs cannot be attributed: the process table is not in the host PID namespace.

    Args:
        own_ns: rogue-watchdog's PID namespace (``readlink /proc/self/ns/pid``).
        procfs_ns: The namespace of the process table's PIDs.
        gpu_procs: What NVML listed (reported as numbers, never matched).
    """
    pids = sorted({gp.pid for gp in gpu_procs})
    known = [gp.used_memory_bytes for gp in gpu_procs if gp.used_memory_bytes is not None]
    held = f", holding {fmt_bytes(sum(known))}," if known else ""
    return Finding(
        kind="pid-namespace",
        severity="high",
        message=(
            f"GPU attribution is impossible here: rogue-watchdog sees the processes of PID "
            f"namespace {procfs_ns or own_ns or 'unknown'}, not the host's "
            f"({INITIAL_PID_NS}), and NVML reports host PIDs, so the {len(pids)} GPU "
            f"process(es) NVML lists{held} are not matched to any process here and no job "
            "or kill advice is built from them; run rogue-watchdog in the host PID "
            "namespace (on the host, or docker run --pid=host, Kubernetes hostPID: true)"
        ),
        details={
            "fingerprint": "host-pid-namespace",
            "own_pid_namespace": own_ns,
            "proc_pid_namespace": procfs_ns,
            "initial_pid_namespace": INITIAL_PID_NS,
            "nvml_pids": pids,
        },
    )
