"""The ``meta`` table (named strings) and ``counters`` (named running totals that survive
restarts and retention).
"""

from __future__ import annotations

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
