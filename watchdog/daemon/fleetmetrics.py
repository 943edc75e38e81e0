"""Metrics a fleet can slice: host, GPU, user and origin labels (docs/metrics.md).

A second prometheus-client collector beside :class:`watchdog.daemon.metrics.MetricsCollector`,
fed from the same ``Daemon.on_tick`` hook and rendered from a snapshot, so a scrape
never touches /proc, NVML or the database.

Cardinality is bounded by construction: every family is rebuilt from the last tick only
(a job that ended leaves no series behind), and no label carries a PID, a job id, a
session or a command line. Labels are the host name, the GPU index and UUID, the job's
verdict, user and origin kind, and :meth:`watchdog.model.Origin.label` (cron
file:line, unit, Slurm account, container image, supervisor program).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .loop import Daemon, TickSummary

PREFIX = "rogue_watchdog"
# Who holds a GPU's memory, in ``rogue_watchdog_gpu_memory_held_bytes{holder}``.
HOLDERS = ("sanctioned", "unsanctioned", "ignored", "unattributed")
_HOLDER_OF_VERDICT = {
    "sanctioned": "sanctioned",
    "rogue": "unsanctioned",
    "excess": "unsanctioned",
    "ignored": "ignored",
}
JOB_LABELS = ("host", "verdict", "user", "origin_kind", "origin")
GPU_JOB_LABELS = ("host", "gpu", "gpu_uuid", "verdict", "user", "origin_kind", "origin")
GPU_LABELS = ("host", "gpu", "gpu_uuid")


def product_version() -> str:
    """The installed rogue-watchdog version, or ``unknown`` when not installed."""
    try:
        return version("rogue-watchdog")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class FleetSnapshot:
    """The labelled series of one tick.

    Attributes:
        host: Host name (the ``host`` label of every family).
        jobs_by_origin: ``(verdict, user, origin_kind, origin)`` → jobs.
        jobs_by_gpu: ``(gpu, gpu_uuid, verdict, user, origin_kind, origin)`` → jobs holding
            that GPU; a job holding none is counted under ``gpu=""``.
        gpu_memory_held_bytes: ``(gpu, gpu_uuid)`` → holder → bytes (every holder present);
            NaN when a process of that holder there has memory NVML did not report.
        gpu_memory_unknown: ``(gpu, gpu_uuid)`` → holder → processes whose memory NVML
            did not report (``NVML_VALUE_NOT_AVAILABLE``).
        gpu_memory_used_bytes: ``(gpu, gpu_uuid)`` → bytes in use per NVML (absent when
            NVML could not say).
        gpu_memory_total_bytes: ``(gpu, gpu_uuid)`` → framebuffer size.
        gpu_hidden: ``(gpu, gpu_uuid)`` → 1 when NVML refused that GPU's process list.
    """

    host: str
    jobs_by_origin: dict[tuple[str, ...], int] = field(default_factory=dict)
    jobs_by_gpu: dict[tuple[str, ...], int] = field(default_factory=dict)
    gpu_memory_held_bytes: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    gpu_memory_unknown: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    gpu_memory_used_bytes: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_memory_total_bytes: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_hidden: dict[tuple[str, str], int] = field(default_factory=dict)


def fleet_snapshot(summary: TickSummary, ppid_of: dict[int, int] | None = None) -> FleetSnapshot:
    """Build the labelled series from one tick.

    Args:
        summary: The tick (its scan result may be None when the scan failed: then only
            the host is known and every family is empty).
        ppid_of: PID → parent PID, to give a zombie's NVML memory to its parent's job
            (as job grouping does); None skips that.

    Returns:
        The snapshot; GPU keys are ``(str(index), uuid)``.
    """
    result = summary.result
    snap = FleetSnapshot(host=result.host if result else "")
    if result is None:
        return snap
    gpu_key: dict[str, tuple[str, str]] = {g.uuid: (str(g.index), g.uuid) for g in result.gpus}
    for g in result.gpus:
        key = gpu_key[g.uuid]
        snap.gpu_memory_held_bytes[key] = dict.fromkeys(HOLDERS, 0)
        snap.gpu_hidden[key] = 0
        if g.memory_used_bytes is not None:
            snap.gpu_memory_used_bytes[key] = g.memory_used_bytes
        if g.memory_total_bytes is not None:
            snap.gpu_memory_total_bytes[key] = g.memory_total_bytes
    job_of_pid: dict[int, int] = {}
    job_labels: list[tuple[str, str, str, str]] = []
    for i, job in enumerate(result.jobs):
        labels = (
            job.verdict,
            job.user or "",
            job.origin.kind,
            job.origin.label(),
        )
        job_labels.append(labels)
        for pid in job.pids:
            job_of_pid[pid] = i
        snap.jobs_by_origin[labels] = snap.jobs_by_origin.get(labels, 0) + 1
        keys = [gpu_key.get(u, ("", u)) for u in job.gpu_uuids] or [("", "")]
        for gk in keys:
            k = (*gk, *labels)
            snap.jobs_by_gpu[k] = snap.jobs_by_gpu.get(k, 0) + 1
    for gp in result.gpu_processes:
        key = gpu_key.get(gp.gpu_uuid, (str(gp.gpu_index), gp.gpu_uuid))
        held = snap.gpu_memory_held_bytes.setdefault(key, dict.fromkeys(HOLDERS, 0))
        i_job = job_of_pid.get(gp.pid)
        if i_job is None and ppid_of is not None and gp.pid in ppid_of:
            i_job = job_of_pid.get(ppid_of[gp.pid])
        holder = "unattributed" if i_job is None else _HOLDER_OF_VERDICT[job_labels[i_job][0]]
        if gp.used_memory_bytes is None:
            # NVML_VALUE_NOT_AVAILABLE: unknown is NaN (it poisons a sum, as it should),
            # never 0; the count of such processes is a gauge of its own.
            held[holder] = math.nan
            unknown = snap.gpu_memory_unknown.setdefault(key, dict.fromkeys(HOLDERS, 0))
            unknown[holder] += 1
        else:
            held[holder] += gp.used_memory_bytes
    for f in result.findings:
        if f.kind != "gpu-processes-hidden":
            continue
        uuid = str(f.details.get("gpu_uuid", ""))
        key = gpu_key.get(uuid, (str(f.details.get("gpu_index", "")), uuid))
        snap.gpu_hidden[key] = 1
    return snap


class FleetCollector(Collector):
    """Renders the latest :class:`FleetSnapshot` (nothing before the first tick).

    Args:
        daemon: The daemon whose ticks feed it (pass :meth:`on_tick` to its hooks).
    """

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._lock = threading.Lock()
        self._snap: FleetSnapshot | None = None
        self._version = product_version()

    def on_tick(self, summary: TickSummary) -> None:
        """``Daemon.on_tick`` hook: rebuild the snapshot (the loop thread, after the tick)."""
        daemon = self.daemon
        table = daemon.scanner.table
        ppid_of = {pid: p.ppid for pid, p in table.procs.items() if p.is_zombie}
        snap = fleet_snapshot(summary, ppid_of)
        if not snap.host:
            snap.host = daemon.scanner.host
        with self._lock:
            self._snap = snap

    def collect(self) -> Iterator[Metric]:
        """The fleet metric families of the latest snapshot."""
        with self._lock:
            s = self._snap
        if s is None:
            return
        h = s.host
        info = GaugeMetricFamily(
            f"{PREFIX}_info", "Always 1: the watchdog's host name and version.",
            labels=["host", "version"],
        )  # fmt: skip
        info.add_metric([h, self._version], 1)
        yield info
        g = GaugeMetricFamily(
            f"{PREFIX}_jobs_by_origin",
            "Training jobs in the last scan by verdict, user and origin.",
            labels=list(JOB_LABELS),
        )
        for labels, n in sorted(s.jobs_by_origin.items()):
            g.add_metric([h, *labels], n)
        yield g
        g = GaugeMetricFamily(
            f"{PREFIX}_jobs_by_gpu",
            'Training jobs holding each GPU (gpu="" for jobs holding none yet).',
            labels=list(GPU_JOB_LABELS),
        )
        for labels, n in sorted(s.jobs_by_gpu.items()):
            g.add_metric([h, *labels], n)
        yield g
        g = GaugeMetricFamily(
            f"{PREFIX}_gpu_memory_held_bytes",
            "GPU memory held per GPU by sanctioned, unsanctioned (rogue or excess), "
            "ignored jobs, and by processes in no job (unattributed).",
            labels=[*GPU_LABELS, "holder"],
        )
        for key, held in sorted(s.gpu_memory_held_bytes.items()):
            for holder in HOLDERS:
                g.add_metric([h, *key, holder], held.get(holder, 0))
        yield g
        g = GaugeMetricFamily(
            f"{PREFIX}_gpu_memory_unknown_processes",
            "Processes per GPU and holder whose memory NVML did not report (their "
            "held-bytes series is NaN, not 0).",
            labels=[*GPU_LABELS, "holder"],
        )
        for key in sorted(s.gpu_memory_held_bytes):
            unknown = s.gpu_memory_unknown.get(key, {})
            for holder in HOLDERS:
                g.add_metric([h, *key, holder], unknown.get(holder, 0))
        yield g
        for name, doc, values in (
            ("gpu_memory_used_bytes", "GPU memory in use per NVML.", s.gpu_memory_used_bytes),
            ("gpu_memory_total_bytes", "GPU memory size per NVML.", s.gpu_memory_total_bytes),
            (
                "gpu_processes_hidden",
                "1 when NVML refused this GPU's process list (its holders are unknown).",
                s.gpu_hidden,
            ),
        ):
            g = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(GPU_LABELS))
            for key, n in sorted(values.items()):
                g.add_metric([h, *key], n)
            yield g
        g = GaugeMetricFamily(
            f"{PREFIX}_gpus_hidden",
            "GPUs whose process list NVML refused in the last scan.",
            labels=["host"],
        )
        g.add_metric([h], sum(s.gpu_hidden.values()))
        yield g
