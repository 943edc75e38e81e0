"""Everything one scan saw."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .finding import Finding
from .gpu import GpuInfo, GpuProcess, NvmlStatus
from .job import Job, Protection


@dataclass
class ScanResult:
    """Everything one scan saw.

    Attributes:
        host: Host name.
        time: When the scan started (timezone-aware).
        duration_s: Wall-clock seconds the scan took.
        nvml: NVML health.
        gpus: Devices NVML listed.
        jobs: Training jobs, oldest first, with verdicts.
        findings: Job findings first, then health findings.
        gpu_processes: NVML's process lists as read (per-GPU memory by holder).
        gpu_blind: True when some GPU's processes could not be seen this time (NVML
            failing after it loaded, a list refused or hung, or NVML PIDs unmatchable):
            a job missing from ``jobs`` may then still be running.
        exited: PIDs of processes an exec event caught that exited before this scan
            (kept for this one scan, state ``X``; never signalled).
        full_sweep: Every process was read again in full (kernel events were lost).
        protection: What this scan must never target (the one guard's view,
            :func:`watchdog.policy.guard.protection`); None for a result not made by a
            scan.
    """

    host: str
    time: datetime
    duration_s: float
    nvml: NvmlStatus
    gpus: list[GpuInfo] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    gpu_processes: list[GpuProcess] = field(default_factory=list)
    gpu_blind: bool = False
    exited: set[int] = field(default_factory=set)
    full_sweep: bool = False
    protection: Protection | None = None
