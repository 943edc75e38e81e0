"""Build the daemon's pluggable parts from the configuration.

Finding sources: the GPU queue (docs/queue.md) and ship gates (docs/weights.md).
Enforcers: the process enforcer (docs/operations.md) and the queue enforcer. Rogue
services are part of every scan, so they need no source here. On SIGHUP the queue
sources, the enforcers and the ship gates are rebuilt from the new configuration: a gate
whose settings did not change keeps its source (what it has verified), a new or changed
one gets a new source, and all share the one verification thread.
"""

from __future__ import annotations

from watchdog.actions.enforcer import build_enforcers
from watchdog.actions.slurmnode import build_slurm_enforcers
from watchdog.actions.slurmrecord import keep_sweep_drain
from watchdog.daemon.events import attach_events
from watchdog.daemon.loop import Daemon
from watchdog.hostpaths import config_args
from watchdog.plugins import Enforcer, FindingSource
from watchdog.queue.actions import build_queue_enforcers
from watchdog.queue.source import build_queue_sources
from watchdog.weights.shipwatch import ShipGateSource, build_ship_gate_sources
from watchdog.weights.verifyworker import VerifyWorker


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
