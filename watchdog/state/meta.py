"""The ``meta`` table (named strings) and ``counters`` (named running totals that survive
restarts and retention).
"""

from __future__ import annotations

import sqlite3

from .table import Table


class MetaTable(Table):
    """Named values and running totals."""

    def meta(self, key: str) -> str | None:
        """A ``meta`` value, or None."""
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str) -> None:
        """Set a ``meta`` value."""
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?)"
            " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, value),
        )

    def earliest_record(self) -> float | None:
        """POSIX time of the oldest thing recorded (a run's start, a finding opened, an
        action taken), or None when nothing is: when a state database written before
        ``meta`` ``first_started`` was kept began to be used."""
        found: list[float] = []
        for sql in (
            "SELECT MIN(started_at) FROM job_runs",
            "SELECT MIN(opened_at) FROM findings",
            "SELECT MIN(created_at) FROM actions",
        ):
            try:
                row = self.conn.execute(sql).fetchone()
            except sqlite3.Error:  # a table an older schema lacks
                continue
            if row and isinstance(row[0], int | float):
                found.append(float(row[0]))
        return min(found) if found else None

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to a named counter (it survives restarts and retention)."""
        self.conn.execute(
            "INSERT INTO counters(name, value) VALUES (?, ?)"
            " ON CONFLICT(name) DO UPDATE SET value=value+excluded.value",
            (name, n),
        )

    def counters(self) -> dict[str, int]:
        """Every named counter."""
        return {str(k): int(v) for k, v in self.conn.execute("SELECT name, value FROM counters")}
