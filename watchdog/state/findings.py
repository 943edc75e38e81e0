"""The ``findings`` table: one row per finding, open until resolved, folded by
fingerprint (at most one open row per fingerprint).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ..records import FindingRecord
from .table import Table, _details, _loads, clean


def _finding(row: sqlite3.Row) -> FindingRecord:
    return FindingRecord(
        row["id"], row["fingerprint"], row["kind"], row["severity"], row["message"],
        row["root_pid"], _details(row["details_json"]), row["opened_at"], row["last_seen"],
        row["seen_count"], row["resolved_at"], row["last_alert_at"], row["instances"],
        row["alerted_instances"],
        _loads(row["alerted_pids_json"], list, None) if row["alerted_pids_json"] else None,
        _loads(row["alerted_routing_json"], dict, None) if row["alerted_routing_json"] else None,
    )  # fmt: skip


class FindingTable(Table):
    """Findings: opened, seen again, alerted, resolved."""

    def open_findings(self) -> list[FindingRecord]:
        """Findings not resolved, oldest first."""
        rows = self.conn.execute(
            "SELECT * FROM findings WHERE resolved_at IS NULL ORDER BY opened_at, id"
        )
        return [_finding(r) for r in rows]

    def open_finding_ids(self) -> dict[str, int]:
        """Fingerprint → id of every finding not resolved (what :meth:`open_findings`
        gives without decoding each row's JSON: asked on every tick)."""
        rows = self.conn.execute(
            "SELECT fingerprint, id FROM findings WHERE resolved_at IS NULL ORDER BY opened_at, id"
        )
        return {fp: fid for fp, fid in rows}

    def open_finding_count(self) -> int:
        """How many findings are not resolved."""
        row = self.conn.execute("SELECT COUNT(*) FROM findings WHERE resolved_at IS NULL")
        return int(row.fetchone()[0])

    def finding(self, finding_id: int) -> FindingRecord | None:
        """One finding by id, open or resolved."""
        row = self.conn.execute("SELECT * FROM findings WHERE id=?", (finding_id,)).fetchone()
        return _finding(row) if row else None

    def insert_finding(
        self,
        fingerprint: str,
        kind: str,
        severity: str,
        message: str,
        root_pid: int | None,
        details: dict[str, Any],
        now: float,
        instances: int = 1,
    ) -> int:
        """Open a finding; returns its id.

        ``details`` are stored exactly (JSON escapes non-UTF-8 bytes losslessly: actions
        read recorded origins back); the text columns go through :func:`clean`.
        """
        cur = self.conn.execute(
            "INSERT INTO findings(fingerprint, kind, severity, message, root_pid, details_json,"
            " opened_at, last_seen, instances) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                clean(fingerprint),
                kind,
                severity,
                clean(message),
                root_pid,
                json.dumps(details),
                now,
                now,
                instances,
            ),
        )
        return int(cur.lastrowid or 0)

    def touch_finding(
        self,
        finding_id: int,
        message: str,
        root_pid: int | None,
        details: dict[str, Any],
        now: float,
        instances: int = 1,
    ) -> None:
        """Record another sighting of an open finding."""
        self.conn.execute(
            "UPDATE findings SET last_seen=?, seen_count=seen_count+1, message=?, root_pid=?,"
            " details_json=?, instances=? WHERE id=?",
            (now, clean(message), root_pid, json.dumps(details), instances, finding_id),
        )

    def refile_finding(self, finding_id: int, fingerprint: str) -> None:
        """File an open finding under another fingerprint (the finding of a loop's first
        run continued as the loop's); once alerted, the PIDs its last alert named are
        forgotten (it names no run now)."""
        self.conn.execute(
            "UPDATE findings SET fingerprint=?, alerted_pids_json=CASE WHEN"
            " last_alert_at IS NULL THEN alerted_pids_json ELSE '[]' END WHERE id=?",
            (clean(fingerprint), finding_id),
        )

    def set_finding_message(self, finding_id: int, message: str) -> None:
        """Replace a finding's message (e.g. to name the finding's own id in a command)."""
        self.conn.execute("UPDATE findings SET message=? WHERE id=?", (clean(message), finding_id))

    def set_finding_details(self, finding_id: int, details: dict[str, Any], message: str) -> None:
        """Replace a finding's details and message (a ``respawned`` finding naming the
        findings folded into it); no sighting is counted."""
        self.conn.execute(
            "UPDATE findings SET details_json=?, message=? WHERE id=?",
            (json.dumps(details), clean(message), finding_id),
        )

    def resolve_finding(self, finding_id: int, now: float) -> None:
        """Mark a finding resolved."""
        self.conn.execute("UPDATE findings SET resolved_at=? WHERE id=?", (now, finding_id))

    def mark_alerted(
        self,
        finding_id: int,
        now: float,
        pids: list[int] | None = None,
        routing: dict[str, Any] | None = None,
    ) -> None:
        """Remember when the last open/reminder alert for a finding was queued, the
        instance count, the root PIDs it named and the routing facts it carried."""
        self.conn.execute(
            "UPDATE findings SET last_alert_at=?, alerted_instances=instances,"
            " alerted_pids_json=?, alerted_routing_json=? WHERE id=?",
            (
                now,
                json.dumps(pids) if pids is not None else None,
                json.dumps(routing) if routing is not None else None,
                finding_id,
            ),
        )

    def next_finding_id(self) -> int:
        """The id the next finding will get: past every id the table ever gave, also
        one whose row is gone (``sqlite_sequence`` of an AUTOINCREMENT key), so a
        finding kept in memory while the database could not be written keeps it."""
        conn = self.conn
        top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM findings").fetchone()[0])
        has_seq = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='sqlite_sequence'"
        ).fetchone()
        if has_seq is not None:
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name='findings'").fetchone()
            if row is not None:
                top = max(top, int(row[0]))
        return top + 1

    def reserve_finding_ids(self, next_id: int) -> None:
        """Make :meth:`next_finding_id` at least ``next_id``: ids given out in memory
        while the database could not be written, and paged, are never given again,
        also those of findings not stored (the outage memory's bound dropped them, or a
        restart lost them: :mod:`watchdog.daemon.unstored`).

        Args:
            next_id: The first id not given out yet.

        Raises:
            sqlite3.Error: The database cannot be written.
        """
        if self.next_finding_id() >= next_id:
            return
        conn = self.conn
        seq = next_id - 1
        if not conn.execute(
            "UPDATE sqlite_sequence SET seq=? WHERE name='findings'", (seq,)
        ).rowcount:
            conn.execute("INSERT INTO sqlite_sequence(name, seq) VALUES ('findings', ?)", (seq,))

    def store_finding(self, rec: FindingRecord) -> int:
        """Write a finding that was kept in memory (the database could not be written
        when it opened) under its own id when that id is free, with its alert state,
        so the tracker takes it for one it already alerted on.

        Returns:
            The id it was stored under: ``rec.id``, or a new one when ``rec.id`` was
            taken meanwhile (never by this daemon, which assigns ids past every one).
        """
        row = (
            clean(rec.fingerprint), rec.kind, rec.severity, clean(rec.message), rec.root_pid,
            json.dumps(rec.details), rec.opened_at, rec.last_seen, rec.seen_count,
            rec.resolved_at, rec.last_alert_at, rec.instances, rec.alerted_instances,
            json.dumps(rec.alerted_pids) if rec.alerted_pids is not None else None,
            json.dumps(rec.alerted_routing) if rec.alerted_routing is not None else None,
        )  # fmt: skip
        columns = (
            "fingerprint, kind, severity, message, root_pid, details_json, opened_at,"
            " last_seen, seen_count, resolved_at, last_alert_at, instances,"
            " alerted_instances, alerted_pids_json, alerted_routing_json"
        )
        taken = self.conn.execute("SELECT 1 FROM findings WHERE id=?", (rec.id,)).fetchone()
        if taken is None:
            self.conn.execute(
                f"INSERT INTO findings(id, {columns}) VALUES (?{',?' * len(row)})",
                (rec.id, *row),
            )
            return rec.id
        cur = self.conn.execute(
            f"INSERT INTO findings({columns}) VALUES (?{',?' * (len(row) - 1)})", row
        )
        return int(cur.lastrowid or 0)
