"""Prometheus metrics on ``daemon.metrics_listen`` (off by default; docs/metrics.md).

Fed from a ``Daemon.on_tick`` hook: each tick builds a snapshot (jobs by verdict, open
findings by kind, scan timing, NVML health, alert spool counts) and a scrape renders the
latest snapshot, so a scrape never touches /proc, NVML or the database.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..config.daemon import parse_listen
from ..logs import get_logger
from ..model import VERDICTS, WORKLOAD_CLASSES
from ..state import StateDB
from .events import events_status
from .fleetmetrics import FleetCollector

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from .loop import Daemon, TickSummary

log = get_logger()

PREFIX = "rogue_watchdog"
# A failed metrics bind (port taken) is tried again from the tick hook this often.
BIND_RETRY_S = 30.0


@dataclass
class SinkCounts:
    """Spool counts of one sink: undelivered rows, failed attempts, delivered rows, rows
    set aside as undeliverable (dead letters)."""

    queued: int = 0
    failed_attempts: int = 0
    delivered: int = 0
    dead_lettered: int = 0


@dataclass
class Snapshot:
    """What the last tick saw, in metric form.

    Attributes:
        tick_time: POSIX time of the tick.
        tick_duration_s: Whole tick (scan, tracking, actions), seconds.
        scan_duration_s: The process scan alone; None when the scan failed.
        nvml_up: NVML answered in the last scan; None when the scan failed.
        gpus: GPUs NVML listed.
        jobs: Verdict → job count (every verdict present, 0 when none).
        job_gpu_memory_bytes: Verdict → GPU memory held by those jobs; NaN when NVML did
            not report the memory of a process of one of them (unknown is never 0).
        findings_open: Kind → open findings (a kind seen once stays, at 0).
        sinks: Sink name → spool counts.
        degraded: Components failing right now.
        instances_open: Kind → instances (folded copies of one job) in open findings.
        not_alerted: Findings that resolved within ``alerts.min_lifetime_s`` (running
            total).
        ship_gates_at_open: Gate name → ``enforcing``, ``auditing`` or ``not enforcing``
            (refusal at open, docs/weights.md).
        jobs_by_class: ``(verdict, workload class)`` → job count (every pair present, 0
            when none: a bounded, stable set of series).
    """

    tick_time: float
    tick_duration_s: float
    scan_duration_s: float | None
    nvml_up: bool | None
    gpus: int
    jobs: dict[str, int]
    job_gpu_memory_bytes: dict[str, float]
    findings_open: dict[str, int]
    sinks: dict[str, SinkCounts] = field(default_factory=dict)
    degraded: int = 0
    instances_open: dict[str, int] = field(default_factory=dict)
    not_alerted: int = 0
    ship_gates_at_open: dict[str, str] = field(default_factory=dict)
    jobs_by_class: dict[tuple[str, str], int] = field(default_factory=dict)


def spool_counts(db: StateDB) -> dict[str, SinkCounts]:
    """Per-sink counts: queued rows (an index lookup) and the running totals kept in
    ``sink_stats``, so the counters survive restarts and retention and only grow, and
    no per-tick query scans the delivery history."""
    return {
        sink: SinkCounts(c["queued"], c["failed_attempts"], c["delivered"], c["dead_lettered"])
        for sink, c in db.sink_stats().items()
    }


class MetricsCollector(Collector):
    """A prometheus-client collector that renders the latest :class:`Snapshot`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snap: Snapshot | None = None
        self._kinds: set[str] = set()

    def update(self, daemon: Daemon, summary: TickSummary) -> None:
        """Build a snapshot from one tick (runs in the loop thread, after the tick)."""
        result = summary.result
        jobs: dict[str, int] = dict.fromkeys(VERDICTS, 0)
        mem: dict[str, float] = dict.fromkeys(VERDICTS, 0)
        by_class: dict[tuple[str, str], int] = {
            (v, c): 0 for v in VERDICTS for c in WORKLOAD_CLASSES
        }
        for job in result.jobs if result else []:
            jobs[job.verdict] = jobs.get(job.verdict, 0) + 1
            by_class[(job.verdict, job.workload)] = by_class.get((job.verdict, job.workload), 0) + 1
            unknown = job.gpu_memory_bytes is None and bool(job.gpus or job.gpu_uuids)
            if unknown or any(g.memory_bytes is None for g in job.gpus):
                mem[job.verdict] = math.nan  # unknown, never counted as 0
            else:
                mem[job.verdict] = mem.get(job.verdict, 0) + (job.gpu_memory_bytes or 0)
        open_by_kind: dict[str, int] = {}
        instances: dict[str, int] = {}
        for f in daemon.db.open_findings():
            open_by_kind[f.kind] = open_by_kind.get(f.kind, 0) + 1
            instances[f.kind] = instances.get(f.kind, 0) + f.instances
        not_alerted = daemon.db.counters().get("findings_not_alerted", 0)
        at_open: dict[str, str] = {}
        for source in daemon.sources:
            enforcement, gate = getattr(source, "enforcement", None), getattr(source, "gate", None)
            if enforcement is not None and gate is not None:
                at_open[gate.name] = enforcement()[0]
        with self._lock:
            self._kinds.update(open_by_kind)
            findings = {k: open_by_kind.get(k, 0) for k in sorted(self._kinds)}
            instances = {k: instances.get(k, 0) for k in sorted(self._kinds)}
            self._snap = Snapshot(
                tick_time=summary.time,
                tick_duration_s=summary.duration_s,
                scan_duration_s=result.duration_s if result else None,
                nvml_up=result.nvml.available if result else None,
                gpus=len(result.gpus) if result else 0,
                jobs=jobs,
                job_gpu_memory_bytes=mem,
                findings_open=findings,
                sinks=spool_counts(daemon.db),
                degraded=len(daemon.degraded),
                instances_open=instances,
                not_alerted=not_alerted,
                ship_gates_at_open=at_open,
                jobs_by_class=by_class,
            )

    def collect(self) -> Iterator[Metric]:
        """Metric families of the latest snapshot (nothing before the first tick)."""
        with self._lock:
            s = self._snap
        if s is None:
            return

        def gauge(name: str, doc: str, value: float | None = None) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)

        yield gauge("last_tick_timestamp_seconds", "POSIX time of the last tick.", s.tick_time)
        yield gauge(
            "tick_duration_seconds", "Duration of the last tick (scan, tracking, actions).",
            s.tick_duration_s,
        )  # fmt: skip
        yield gauge(
            "scan_ok", "1 when the last process scan succeeded.", int(s.scan_duration_s is not None)
        )
        if s.scan_duration_s is not None:
            yield gauge(
                "scan_duration_seconds", "Duration of the last process scan.", s.scan_duration_s
            )
        if s.nvml_up is not None:
            yield gauge("nvml_up", "1 when NVML answered in the last scan.", int(s.nvml_up))
        yield gauge("gpus", "GPUs NVML listed in the last scan.", s.gpus)
        g = GaugeMetricFamily(f"{PREFIX}_jobs", "Training jobs by verdict.", labels=["verdict"])
        for verdict, n in s.jobs.items():
            g.add_metric([verdict], n)
        yield g
        g = GaugeMetricFamily(
            f"{PREFIX}_jobs_by_class",
            "Jobs by verdict and workload class (training, serving, interactive, system, "
            "probe, unknown).",
            labels=["verdict", "workload"],
        )
        for (verdict, workload), n in s.jobs_by_class.items():
            g.add_metric([verdict, workload], n)
        yield g
        g = GaugeMetricFamily(
            f"{PREFIX}_job_gpu_memory_bytes", "GPU memory held by jobs, by verdict.",
            labels=["verdict"],
        )  # fmt: skip
        for verdict, held in s.job_gpu_memory_bytes.items():
            g.add_metric([verdict], held)
        yield g
        g = GaugeMetricFamily(f"{PREFIX}_findings_open", "Open findings by kind.", labels=["kind"])
        for kind, n in s.findings_open.items():
            g.add_metric([kind], n)
        yield g
        g = GaugeMetricFamily(
            f"{PREFIX}_finding_instances",
            "Instances (folded copies of one job, each its own process tree) in open "
            "findings, by kind.",
            labels=["kind"],
        )
        for kind, n in s.instances_open.items():
            g.add_metric([kind], n)
        yield g
        yield CounterMetricFamily(
            f"{PREFIX}_findings_not_alerted",
            "Findings that resolved before alerts.min_lifetime_s: recorded, not alerted.",
            value=s.not_alerted,
        )
        q = GaugeMetricFamily(
            f"{PREFIX}_alerts_queued", "Alerts spooled and not yet delivered.", labels=["sink"]
        )
        failed = CounterMetricFamily(
            f"{PREFIX}_alerts_failed", "Failed alert delivery attempts.", labels=["sink"]
        )
        done = CounterMetricFamily(
            f"{PREFIX}_alerts_delivered", "Alerts delivered.", labels=["sink"]
        )
        dead = CounterMetricFamily(
            f"{PREFIX}_alerts_dead_lettered",
            "Alerts set aside because the sink can never send them.",
            labels=["sink"],
        )
        for sink, c in s.sinks.items():
            q.add_metric([sink], c.queued)
            failed.add_metric([sink], c.failed_attempts)
            done.add_metric([sink], c.delivered)
            dead.add_metric([sink], c.dead_lettered)
        yield q
        yield failed
        yield done
        yield dead
        yield gauge("degraded_components", "Parts of the daemon failing right now.", s.degraded)
        g = GaugeMetricFamily(
            f"{PREFIX}_ship_gate_at_open",
            "1 for each ship gate's refusal-at-open state now: enforcing, auditing or"
            " not enforcing (docs/weights.md).",
            labels=["gate", "state"],
        )
        for gate_name, state in sorted(s.ship_gates_at_open.items()):
            for each in ("enforcing", "auditing", "not enforcing"):
                g.add_metric([gate_name, each], int(state == each))
        yield g


class EventsCollector(Collector):
    """``/metrics`` families of the event source, read at scrape time."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def collect(self) -> Iterator[Metric]:
        """Whether events are in use, and their counters (nothing before the first tick,
        like the other families)."""
        if self.daemon.last is None:
            return
        doc = events_status(self.daemon)
        yield GaugeMetricFamily(
            f"{PREFIX}_proc_events_up",
            "1 when kernel process events (proc connector) are followed, 0 when polling only.",
            value=int(doc["mode"] == "events"),
        )
        events = CounterMetricFamily(
            f"{PREFIX}_proc_events", "Kernel process events received, by kind.", labels=["kind"]
        )
        for kind, n in sorted((doc.get("events") or {}).items()):
            events.add_metric([kind], n)
        yield events
        yield CounterMetricFamily(
            f"{PREFIX}_proc_events_lost",
            "Times the kernel dropped process events (ENOBUFS: socket buffer full).",
            value=doc.get("lost", 0),
        )
        yield CounterMetricFamily(
            f"{PREFIX}_full_sweeps",
            "Scans that re-read every process because events were lost.",
            value=doc.get("full_sweeps", 0),
        )
        yield CounterMetricFamily(
            f"{PREFIX}_proc_event_candidates",
            "Processes captured at exec (launcher, or CUDA libraries mapped).",
            value=doc.get("candidates", 0),
        )


class MetricsWorker:
    """Serves ``/metrics`` over HTTP; implements the daemon's Worker protocol.

    Args:
        daemon: The daemon whose ticks feed the metrics (the hook is added here).
        listen: ``HOST:PORT``; port 0 picks a free port (see :attr:`address`).

    Raises:
        ValueError: ``listen`` is not ``HOST:PORT``.
    """

    name = "metrics"

    def __init__(self, daemon: Daemon, listen: str) -> None:
        self.daemon = daemon
        self.host, self.port = parse_listen(listen)
        self.collector = MetricsCollector()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.registry.register(EventsCollector(daemon))
        ProcessCollector(registry=self.registry)
        self.fleet = FleetCollector(daemon)  # host/GPU/origin labels (fleetmetrics.py)
        self.registry.register(self.fleet)
        daemon.on_tick.append(self.fleet.on_tick)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._wanted = False
        self._last_try = -math.inf
        daemon.on_tick.append(self.on_tick)

    def on_tick(self, summary: TickSummary) -> None:
        """``Daemon.on_tick`` hook: refresh the snapshot; retry a failed bind (at most
        every ``BIND_RETRY_S``), so the "being retried" finding is true."""
        self.collector.update(self.daemon, summary)
        if self._wanted and self._server is None:
            now = time.monotonic()
            if now - self._last_try >= BIND_RETRY_S:
                self._bind()

    @property
    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` actually bound, or None when not serving."""
        if self._server is None:
            return None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        """Bind and serve in a daemon thread. A bind failure (port taken, address not
        on this host) is reported once as a degraded component and retried from the tick
        hook; the daemon runs on."""
        self._wanted = True
        self._bind()

    def _bind(self) -> None:
        self._last_try = time.monotonic()
        try:
            self._server, self._thread = start_http_server(
                self.port, addr=self.host, registry=self.registry
            )
        except OSError as exc:
            text = f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            if self.daemon.degraded.get(self.name) != text:
                log.error("component-degraded", component=self.name, error=text)
            self.daemon.degraded[self.name] = text
            return
        if self.daemon.degraded.pop(self.name, None) is not None:
            log.info("component-recovered", component=self.name)
        log.info("metrics-listening", address=f"{self.host}:{self.address and self.address[1]}")

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._wanted = False
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
