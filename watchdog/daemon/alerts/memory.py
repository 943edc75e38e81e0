"""The alert spool of last resort: alerts the tick could not write to ``state.db``
(a full or unwritable state directory), kept in memory until each sink sent them once.

A watchdog must not go quiet because its database cannot be written: the daemon tracks
such findings in memory (:mod:`watchdog.daemon.unstored`) and puts their alerts here;
the :class:`~watchdog.daemon.alerts.delivery.DeliveryWorker` sends them before the
rows of ``state.db``, with the same retry and order rules. Rows here have negative ids
(``deliveries.id`` are positive), so the two never collide. They do not survive a
restart by themselves: that is what "not persisted" means in ``status``
(docs/operations.md); those of the findings already paged are written to the outage
file beside the socket and queued again by the next daemon
(:mod:`watchdog.daemon.outagefile`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from ...hosttext import safe_json
from ...records import Delivery


class MemorySpool:
    """Alerts waiting in memory, one row per alert event and sink (thread safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[int, Delivery] = {}
        self._next = -1
        self.delivered = 0
        # Called after each put (the delivery worker's wake-up, as the store's).
        self.listeners: list[Callable[[], None]] = []
        # Called after a row is sent or set aside (the outage file drops it then: a
        # restart must not send it again).
        self.on_done: list[Callable[[], None]] = []

    def put(
        self, finding_id: int, sink: str, event: str, payload: dict[str, Any], now: float
    ) -> int:
        """Queue one alert event for one sink; returns its (negative) row id.

        Args:
            finding_id: The finding's id (assigned in memory when it was never stored).
            sink: The sink's name.
            event: ``open``, ``remind`` or ``resolve``.
            payload: The alert document (made safe here, as :meth:`DeliveryTable.enqueue`).
            now: POSIX time it was queued.

        Each of :attr:`listeners` is called after the row is queued.
        """
        with self._lock:
            row = self._next
            self._next -= 1
            self._rows[row] = Delivery(
                row, finding_id, sink, event, safe_json(payload), now, 0, now, None, None
            )
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):  # queued already: sent at the next round
                listener()
        return row

    def pending(self, sink: str) -> list[Delivery]:
        """The rows of ``sink`` not yet sent, oldest first."""
        with self._lock:
            return sorted((d for d in self._rows.values() if d.sink == sink), key=lambda d: -d.id)

    def done(self, row: int) -> None:
        """Row ``row`` was sent (or set aside): forget it."""
        with self._lock:
            if self._rows.pop(row, None) is None:
                return
            self.delivered += 1
        for hook in list(self.on_done):
            with contextlib.suppress(Exception):  # the row is done whatever a hook does
                hook()

    def failed(self, row: int, error: str, next_attempt_at: float) -> None:
        """Record a failed attempt of row ``row`` and when to retry it."""
        with self._lock:
            d = self._rows.get(row)
            if d is not None:
                self._rows[row] = dataclasses.replace(
                    d, attempts=d.attempts + 1, last_error=error, next_attempt_at=next_attempt_at
                )

    def rows(self) -> list[Delivery]:
        """Every row not yet sent, oldest first (the outage file keeps those of the
        findings it holds: :mod:`watchdog.daemon.outagefile`)."""
        with self._lock:
            return sorted(self._rows.values(), key=lambda d: -d.id)

    def queued(self) -> int:
        """How many rows wait to be sent."""
        with self._lock:
            return len(self._rows)
