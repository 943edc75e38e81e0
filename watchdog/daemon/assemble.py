"""Build the daemon's pluggable parts from the configuration.

Finding sources: the GPU queue (docs/queue.md) and ship gates (docs/weights.md).
Enforcers: the process enforcer (docs/operations.md) and the queue enforcer. Rogue
services are part of every scan, so they need no source here. On SIGHUP the queue
sources, the enforcers and the ship gates are rebuilt from the new configuration: a gate
whose settings did not change keeps its source (what it has verified), a new or changed
one gets a new source, and all share the one verification thread.

Workers that need the assembled daemon (alert delivery, the Alertmanager re-send worker,
metrics) are built here too, not in their own modules: a module below the loop that
named ``Daemon`` closed an import cycle (issue 30).
"""

from __future__ import annotations

from ..actions.enforcer import build_enforcers
from ..actions.slurmnode import build_slurm_enforcers
from ..actions.slurmrecord import keep_sweep_drain
from ..hostpaths import config_args, config_file
from ..plugins import Enforcer, FindingSource, Worker
from ..queue.actions import build_queue_enforcers
from ..queue.source import build_queue_sources
from ..weights.shipwatch import ShipGateSource, build_ship_gate_sources
from ..weights.verifyworker import VerifyWorker
from .alerts.alertmanager import AlertmanagerKeeper
from .alerts.delivery import DeliveryWorker
from .events import attach_events
from .loop import Daemon


def _rebuildable(daemon: Daemon) -> tuple[list[FindingSource], list[Enforcer]]:
    queue = build_queue_sources(daemon.config)
    # The process enforcer is also a source: it reports `remediation-failed` before
    # tracking, so the finding is stored and alerted in the tick it is seen.
    process = build_enforcers(daemon.config, daemon.db)
    enforcers: list[Enforcer] = [
        *process,
        *build_queue_enforcers(daemon.config, daemon.db, queue),
        *build_slurm_enforcers(daemon.config.slurm, daemon.config.daemon.state_dir),
    ]
    return [*process, *queue], enforcers


def attach_parts(daemon: Daemon) -> None:
    """Give ``daemon`` its finding sources, enforcers and the ship-gate worker.

    Also registers a reload hook that rebuilds the queue sources and enforcers, and
    attaches kernel process events (docs/events.md).
    """
    # One verification thread for every gate, now or after a reload (it starts on first
    # use, so a daemon without gates never runs it; stopping it unstarted is a no-op).
    worker = VerifyWorker()
    gates = build_ship_gate_sources(daemon.config, daemon.db, worker)
    sources, enforcers = _rebuildable(daemon)
    daemon.sources = [*sources, *gates]
    daemon.enforcers = enforcers
    daemon.workers.append(worker)

    def rebuild(d: Daemon) -> None:
        nonlocal gates
        kept = {g.gate: g for g in gates}
        cli_args = config_args(d.config.source)
        gates = [
            kept.get(gate) or ShipGateSource(gate, d.db, worker, cli_args=cli_args)
            for gate in d.config.ship_gates
        ]
        new_sources, new_enforcers = _rebuildable(d)
        d.sources = [*new_sources, *gates]
        d.enforcers = new_enforcers

    daemon.on_reload.append(rebuild)
    daemon.on_tick.append(keep_sweep_drain(daemon))  # docs/slurm.md: the sweep's drain
    attach_events(daemon)


def build_alert_workers(daemon: Daemon) -> list[Worker]:
    """The alert worker for ``daemon``, wired to its state db, its configuration (read
    again after each reload) and its ``on_reload`` hooks (a reload wakes the worker; an
    alert spooled wakes it when committed).

    Call before :meth:`Daemon.run_forever`, which starts and stops it::

        daemon.workers.extend(build_alert_workers(daemon))

    Returns:
        The :class:`DeliveryWorker` (always: the default configuration has a log sink)
        and the Alertmanager re-send worker (idle without an ``alertmanager`` sink).
    """
    worker = DeliveryWorker(
        daemon.db,
        lambda: daemon.config.alerts,
        degraded=daemon.degraded,
        memory=daemon.unstored.spool,
        config_file=lambda: config_file(daemon.config.source),
    )
    # A tick that spools an alert wakes the worker at its commit (the store's spool
    # listener): no wake-up per tick. A reload's sinks take effect at once.
    daemon.on_reload.append(worker.on_reload)
    return [worker, *build_alertmanager_workers(daemon)]


def build_alertmanager_workers(daemon: Daemon) -> list[Worker]:
    """The re-send worker, always (it idles while no ``alertmanager`` sink is configured,
    so a reload that adds one needs no restart)."""
    keeper = AlertmanagerKeeper(daemon.db, lambda: daemon.config.alerts)
    daemon.on_reload.append(keeper.on_reload)  # a reload that adds a sink: kept at once
    return [keeper]


def build_metrics_workers(daemon: Daemon) -> list[Worker]:
    """The metrics worker when ``daemon.metrics_listen`` is set, else nothing.

    Call before :meth:`Daemon.run_forever`::

        daemon.workers.extend(build_metrics_workers(daemon))
    """
    listen = daemon.config.daemon.metrics_listen
    if not listen:
        return []
    # Here, not at import: prometheus_client (about 3 MiB) only where metrics are served.
    from .metrics import MetricsWorker

    return [MetricsWorker(daemon, listen)]
