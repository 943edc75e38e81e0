"""The alert spool: ``deliveries`` (one row per alert event per sink, until delivered
or dead-lettered) and ``sink_stats`` (per-sink running totals that survive retention).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ..hosttext import safe_json
from ..records import Delivery
from .table import Table, _details


def delivery_row(row: sqlite3.Row) -> Delivery:
    """A ``deliveries`` row (``SELECT *``) as a :class:`Delivery`."""
    return Delivery(
        row["id"], row["finding_id"], row["sink"], row["event"], _details(row["payload_json"]),
        row["created_at"], row["attempts"], row["next_attempt_at"], row["delivered_at"],
        row["last_error"], row["dead_at"],
    )  # fmt: skip


_delivery = delivery_row


class DeliveryTable(Table):
    """The alert spool and its per-sink totals."""

    def enqueue(
        self, finding_id: int, sink: str, event: str, payload: dict[str, Any], now: float
    ) -> int:
        """Spool one alert event for one sink; returns the delivery id. The store's spool
        listeners are told once it is committed (:meth:`watchdog.state.store.Store.spooled`).

        The payload is made safe (:func:`watchdog.hosttext.safe_json`) here: it exists
        only to be sent.
        """
        cur = self.conn.execute(
            "INSERT INTO deliveries(finding_id, sink, event, payload_json, created_at,"
            " next_attempt_at) VALUES (?,?,?,?,?,?)",
            (finding_id, sink, event, json.dumps(safe_json(payload)), now, now),
        )
        self.spooled()  # the delivery worker wakes at the commit
        return int(cur.lastrowid or 0)

    def due_deliveries(self, now: float, limit: int = 100) -> list[Delivery]:
        """Undelivered, not dead-lettered events whose next attempt is due, oldest first."""
        rows = self.conn.execute(
            "SELECT * FROM deliveries WHERE delivered_at IS NULL AND dead_at IS NULL"
            " AND next_attempt_at<=? ORDER BY id LIMIT ?",
            (now, limit),
        )
        return [_delivery(r) for r in rows]

    def pending(self, sink: str, limit: int) -> list[Delivery]:
        """Undelivered, not dead-lettered rows of one sink, oldest first, due or not
        (index ``deliveries_queue``: no table scan however long the history)."""
        rows = self.conn.execute(
            "SELECT * FROM deliveries WHERE sink=? AND delivered_at IS NULL AND dead_at IS NULL"
            " ORDER BY id LIMIT ?",
            (sink, limit),
        )
        return [_delivery(r) for r in rows]

    def last_delivery_id(self) -> int:
        """The highest row id in the spool (0 when empty): one read of the table's
        last page, for a cheap "was anything spooled since" check."""
        row = self.conn.execute("SELECT max(id) FROM deliveries").fetchone()
        return int(row[0] or 0)

    def queued_by_sink(self) -> dict[str, int]:
        """Undelivered, not dead-lettered rows per sink."""
        rows = self.conn.execute(
            "SELECT sink, COUNT(*) FROM deliveries WHERE delivered_at IS NULL"
            " AND dead_at IS NULL GROUP BY sink"
        )
        return {str(sink): int(n) for sink, n in rows}

    def _stat(self, sink: str, column: str, n: int) -> None:
        self.conn.execute(
            f"INSERT INTO sink_stats(sink, {column}) VALUES (?, ?)"
            f" ON CONFLICT(sink) DO UPDATE SET {column}={column}+excluded.{column}",
            (sink, n),
        )

    def _sink_of(self, delivery_id: int) -> str | None:
        row = self.conn.execute("SELECT sink FROM deliveries WHERE id=?", (delivery_id,)).fetchone()
        return str(row[0]) if row else None

    def mark_delivered(self, delivery_id: int, now: float) -> None:
        """Record a successful delivery (it is never sent again)."""
        cur = self.conn.execute(
            "UPDATE deliveries SET delivered_at=?, attempts=attempts+1, last_error=NULL"
            " WHERE id=? AND delivered_at IS NULL",
            (now, delivery_id),
        )
        sink = self._sink_of(delivery_id)
        if cur.rowcount and sink is not None:
            self._stat(sink, "delivered", 1)

    def mark_failed(self, delivery_id: int, error: str, next_attempt_at: float) -> None:
        """Record a failed attempt and when to retry."""
        self.conn.execute(
            "UPDATE deliveries SET attempts=attempts+1, last_error=?, next_attempt_at=? WHERE id=?",
            (error, next_attempt_at, delivery_id),
        )
        sink = self._sink_of(delivery_id)
        if sink is not None:
            self._stat(sink, "failed_attempts", 1)

    def mark_dead(self, delivery_id: int, error: str, now: float) -> None:
        """Set aside a delivery its sink can never send (dead letter): it is not retried
        and holds back nothing; it stays visible in ``status`` and metrics."""
        cur = self.conn.execute(
            "UPDATE deliveries SET attempts=attempts+1, last_error=?, dead_at=?"
            " WHERE id=? AND delivered_at IS NULL AND dead_at IS NULL",
            (error, now, delivery_id),
        )
        sink = self._sink_of(delivery_id)
        if cur.rowcount and sink is not None:
            self._stat(sink, "dead_lettered", 1)

    def sink_stats(self) -> dict[str, dict[str, int]]:
        """Per sink: ``queued`` now, and the running totals ``delivered``,
        ``failed_attempts``, ``dead_lettered`` (kept in ``sink_stats``, so they only
        grow, across restarts and retention)."""
        out: dict[str, dict[str, int]] = {}
        for row in self.conn.execute("SELECT * FROM sink_stats"):
            out[str(row["sink"])] = {
                "queued": 0,
                "delivered": int(row["delivered"]),
                "failed_attempts": int(row["failed_attempts"]),
                "dead_lettered": int(row["dead_lettered"]),
            }
        for sink, n in self.queued_by_sink().items():
            out.setdefault(
                sink, {"queued": 0, "delivered": 0, "failed_attempts": 0, "dead_lettered": 0}
            )["queued"] = n
        return dict(sorted(out.items()))

    def delivery_health(self) -> dict[str, Any]:
        """For status: ``{"queued": N, "failed_attempts": N, "last_error": str|None,
        "dead_lettered": N, "last_dead_letter": str|None}``.

        ``failed_attempts`` counts queued alerts that failed at least once;
        ``dead_lettered`` every alert ever set aside (running total).
        """
        conn = self.conn
        queued = conn.execute(
            "SELECT COUNT(*) FROM deliveries WHERE delivered_at IS NULL AND dead_at IS NULL"
        ).fetchone()[0]
        failed = conn.execute(
            "SELECT COUNT(*) FROM deliveries WHERE last_error IS NOT NULL"
            " AND delivered_at IS NULL AND dead_at IS NULL"
        ).fetchone()[0]
        row = conn.execute(
            "SELECT sink, last_error FROM deliveries WHERE last_error IS NOT NULL"
            " AND dead_at IS NULL ORDER BY id DESC LIMIT 1"
        ).fetchone()
        dead = conn.execute("SELECT COALESCE(SUM(dead_lettered), 0) FROM sink_stats").fetchone()[0]
        last_dead = conn.execute(
            "SELECT sink, id, last_error FROM deliveries WHERE last_error IS NOT NULL"
            " AND dead_at IS NOT NULL ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return {
            "queued": int(queued),
            "failed_attempts": int(failed),
            "last_error": f"{row['sink']}: {row['last_error']}" if row else None,
            "dead_lettered": int(dead),
            "last_dead_letter": (
                f"{last_dead['sink']}: alert {last_dead['id']}: {last_dead['last_error']}"
                if last_dead
                else None
            ),
        }
