"""Alert delivery: the alert record, sinks (log, Slack, Discord, generic webhook,
Alertmanager), the one HTTP post, secrets, the worker.

The daemon's tracker spools one ``deliveries`` row per alert event and accepting sink
(:class:`~watchdog.daemon.alerts.alert.Alert`'s JSON);
:class:`~watchdog.daemon.alerts.delivery.DeliveryWorker` sends them (docs/alerts.md) to
the sink kinds registered in :data:`watchdog.config.sinks.SINK_KINDS`
(docs/architecture.md, "Adding a sink").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from watchdog.daemon.alerts.alertmanager import build_alertmanager_workers
from watchdog.daemon.alerts.delivery import DeliveryWorker

if TYPE_CHECKING:
    from watchdog.daemon.loop import Daemon
    from watchdog.plugins import Worker

__all__ = ["DeliveryWorker", "build_alert_workers"]


def build_alert_workers(daemon: Daemon) -> list[Worker]:
    """The alert worker for ``daemon``, wired to its state db, its configuration (read
    again after each reload) and its ``on_tick`` hooks (a tick wakes the worker).

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
    )
    daemon.on_tick.append(worker.on_tick)
    return [worker, *build_alertmanager_workers(daemon)]
