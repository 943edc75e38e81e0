"""Alert delivery: the alert record, sinks (log, Slack, Discord, generic webhook,
Alertmanager), the one HTTP post, secrets, the worker.

The daemon's tracker spools one ``deliveries`` row per alert event and accepting sink
(:class:`~watchdog.daemon.alerts.alert.Alert`'s JSON);
:class:`~watchdog.daemon.alerts.delivery.DeliveryWorker` sends them (docs/alerts.md) to
the sink kinds listed in :data:`watchdog.config.sinks.SINK_KINDS`
(docs/architecture.md, "Adding a sink").
"""

from __future__ import annotations

from .delivery import DeliveryWorker

__all__ = ["DeliveryWorker"]
