"""State that survives restarts: jobs seen, findings, alert deliveries, actions taken.

One SQLite file (``state.db`` under the state dir) in WAL mode, so the alert worker and
the status server read while the loop writes. The schema is versioned in ``meta``; a
database that cannot be opened or fails ``PRAGMA quick_check`` is moved aside (kept as
``state.db.corrupt-<time>``) and a fresh one is created, with the reason recorded so the
daemon can say so once.

Times are POSIX seconds (``float``) throughout.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    signature TEXT PRIMARY KEY,
    summary TEXT NOT NULL,
    user TEXT,
    verdict TEXT NOT NULL,
    origin_json TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    root_pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    pids_json TEXT NOT NULL,
    gone_at REAL,
    sightings INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS findings (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    severity TEXT NOT NULL,
    message TEXT NOT NULL,
    root_pid INTEGER,
    details_json TEXT NOT NULL,
    opened_at REAL NOT NULL,
    last_seen REAL NOT NULL,
    seen_count INTEGER NOT NULL DEFAULT 1,
    resolved_at REAL,
    last_alert_at REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS findings_open
    ON findings(fingerprint) WHERE resolved_at IS NULL;
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY,
    finding_id INTEGER NOT NULL,
    sink TEXT NOT NULL,
    event TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    delivered_at REAL,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_pending
    ON deliveries(next_attempt_at) WHERE delivered_at IS NULL;
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    actor TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    finding_id INTEGER,
    signature TEXT,
    dry_run INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL,
    details_json TEXT NOT NULL,
    undo_json TEXT,
    undone_at REAL
);
"""


def clean(text: str | None) -> str | None:
    """Text SQLite can store: command lines may carry non-UTF-8 bytes (as surrogates),
    which become ``\\xNN`` escapes."""
    if text is None or text.isascii():
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class StateError(RuntimeError):
    """The state directory cannot be used at all (not creatable, not writable)."""


# SQLite texts that mean "cannot open/write here" (permissions, read-only mount, lock),
# not "the file is corrupt": such a database must never be moved aside.
_UNUSABLE = ("unable to open", "readonly", "read-only", "permission", "locked")


def _unusable(exc: sqlite3.DatabaseError) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and any(
        word in str(exc).lower() for word in _UNUSABLE
    )


def _why(directory: Path) -> str:
    if not os.access(directory, os.W_OK | os.X_OK):
        return f" ({directory} is not writable: read-only file system or permissions)"
    return ""


LOCK_NAME = "daemon.lock"


def lock_state_dir(state_dir: str | Path) -> int:
    """Take the daemon's exclusive lock on ``state_dir`` (``flock(2)`` on ``daemon.lock``).

    Only ``run`` takes it, for the daemon's whole life: two daemons on one state.db would
    each open the same findings and double every alert. Read-only users (``actions``,
    ``undo``) do not lock. The lock goes away with the process (no stale-lock cleanup).

    Args:
        state_dir: The state directory; created (0750) if missing.

    Returns:
        The open lock file descriptor (keep it open; pass it to ``files_preserve`` when
        detaching). It holds this process's PID as text.

    Raises:
        StateError: Another process holds the lock (its PID named when readable), or
            the directory or lock file cannot be created.
    """
    import fcntl

    directory = Path(state_dir)
    path = directory / LOCK_NAME
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o750)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o640)
    except OSError as exc:
        raise StateError(f"cannot lock state dir {directory}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:
            holder = ""
        os.close(fd)
        who = f"PID {holder}" if holder.isdigit() else "another process"
        raise StateError(
            f"state dir {directory} is in use by {who} (lock {path}): is another daemon "
            "running with the same daemon.state_dir?"
        ) from None
    write_lock_pid(fd)
    return fd


def write_lock_pid(fd: int) -> None:
    """Record this process's PID in the lock file (again after detaching: new PID)."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # the PID is only informative


@dataclass(frozen=True)
class JobRecord:
    """A row of ``jobs``: one job signature and when it was seen."""

    signature: str
    summary: str
    user: str | None
    verdict: str
    origin: dict[str, Any]
    first_seen: float
    last_seen: float
    root_pid: int
    start_ticks: int
    pids: list[int]
    gone_at: float | None
    sightings: int


@dataclass(frozen=True)
class FindingRecord:
    """A row of ``findings``."""

    id: int
    fingerprint: str
    kind: str
    severity: str
    message: str
    root_pid: int | None
    details: dict[str, Any]
    opened_at: float
    last_seen: float
    seen_count: int
    resolved_at: float | None
    last_alert_at: float | None


@dataclass(frozen=True)
class Delivery:
    """A row of ``deliveries``: one alert event for one sink."""

    id: int
    finding_id: int
    sink: str
    event: str
    payload: dict[str, Any]
    created_at: float
    attempts: int
    next_attempt_at: float
    delivered_at: float | None
    last_error: str | None


@dataclass(frozen=True)
class ActionRecord:
    """A row of ``actions``: something rogue-watchdog did (or would have done)."""

    id: int
    created_at: float
    actor: str
    kind: str
    target: str
    finding_id: int | None
    signature: str | None
    dry_run: bool
    outcome: str
    details: dict[str, Any]
    undo: list[dict[str, Any]] | dict[str, Any] | None
    undone_at: float | None


def _job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        row["signature"], row["summary"], row["user"], row["verdict"],
        json.loads(row["origin_json"]), row["first_seen"], row["last_seen"], row["root_pid"],
        row["start_ticks"], json.loads(row["pids_json"]), row["gone_at"], row["sightings"],
    )  # fmt: skip


def _finding(row: sqlite3.Row) -> FindingRecord:
    return FindingRecord(
        row["id"], row["fingerprint"], row["kind"], row["severity"], row["message"],
        row["root_pid"], json.loads(row["details_json"]), row["opened_at"], row["last_seen"],
        row["seen_count"], row["resolved_at"], row["last_alert_at"],
    )  # fmt: skip


def _delivery(row: sqlite3.Row) -> Delivery:
    return Delivery(
        row["id"], row["finding_id"], row["sink"], row["event"], json.loads(row["payload_json"]),
        row["created_at"], row["attempts"], row["next_attempt_at"], row["delivered_at"],
        row["last_error"],
    )  # fmt: skip


def _action(row: sqlite3.Row) -> ActionRecord:
    undo = row["undo_json"]
    return ActionRecord(
        row["id"], row["created_at"], row["actor"], row["kind"], row["target"],
        row["finding_id"], row["signature"], bool(row["dry_run"]), row["outcome"],
        json.loads(row["details_json"]), json.loads(undo) if undo else None, row["undone_at"],
    )  # fmt: skip


class StateDB:
    """The state database.

    Args:
        state_dir: Directory to keep ``state.db`` in; created (mode 0750) if missing.

    Attributes:
        path: The database file.
        recovered_from: When a corrupt or unreadable database was moved aside at open,
            the path it was moved to (the daemon reports this once); else None.

    Raises:
        StateError: The directory cannot be created or the database cannot be created
            even fresh (read-only file system, permissions).

    Thread safety: each thread gets its own connection (SQLite connections are not
    shared across threads); writes are serialised by SQLite's lock in WAL mode.
    """

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / "state.db"
        self.recovered_from: str | None = None
        self.recovered_reason: str | None = None
        self._local = threading.local()
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        except OSError as exc:
            raise StateError(f"cannot create state dir {self.dir}: {exc.strerror}") from None
        try:
            self._open_checked()
        except sqlite3.DatabaseError as exc:
            if _unusable(exc):  # not corruption: moving the file aside cannot help
                raise StateError(f"cannot use {self.path}: {exc}{_why(self.dir)}") from None
            self._move_aside(str(exc))
            try:
                self._open_checked()
            except sqlite3.Error as again:
                raise StateError(f"cannot create {self.path}: {again}") from None

    # -- connection ------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _open_checked(self) -> None:
        conn = self._connect()
        ok = conn.execute("PRAGMA quick_check").fetchone()[0]
        if ok != "ok":
            conn.close()
            raise sqlite3.DatabaseError(f"quick_check: {ok}")
        conn.executescript(SCHEMA)
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        elif int(row[0]) > SCHEMA_VERSION:
            conn.close()
            raise sqlite3.DatabaseError(
                f"schema version {row[0]} is newer than this rogue-watchdog ({SCHEMA_VERSION})"
            )
        self._local.conn = conn

    def _move_aside(self, reason: str) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        target = self.path.with_name(f"state.db.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            try:
                if src.exists():
                    os.replace(src, str(target) + suffix)
            except OSError as exc:
                raise StateError(
                    f"{self.path} is unreadable ({reason}) and cannot be moved aside: "
                    f"{exc.strerror or exc}"
                ) from None
        self.recovered_from = str(target)
        self.recovered_reason = reason

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on an exception)."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- jobs ------------------------------------------------------------------------

    def job(self, signature: str) -> JobRecord | None:
        """The record of one job signature, or None."""
        row = self.conn.execute("SELECT * FROM jobs WHERE signature=?", (signature,)).fetchone()
        return _job(row) if row else None

    def present_jobs(self) -> list[JobRecord]:
        """Jobs not marked gone."""
        rows = self.conn.execute("SELECT * FROM jobs WHERE gone_at IS NULL ORDER BY first_seen")
        return [_job(r) for r in rows]

    def upsert_job(self, rec: JobRecord) -> None:
        """Insert or replace a job record."""
        self.conn.execute(
            "INSERT OR REPLACE INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                rec.signature, clean(rec.summary), clean(rec.user), rec.verdict,
                json.dumps(rec.origin),
                rec.first_seen, rec.last_seen, rec.root_pid, rec.start_ticks,
                json.dumps(rec.pids), rec.gone_at, rec.sightings,
            ),
        )  # fmt: skip

    # -- findings --------------------------------------------------------------------

    def open_findings(self) -> list[FindingRecord]:
        """Findings not resolved, oldest first."""
        rows = self.conn.execute(
            "SELECT * FROM findings WHERE resolved_at IS NULL ORDER BY opened_at, id"
        )
        return [_finding(r) for r in rows]

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
    ) -> int:
        """Open a finding; returns its id."""
        cur = self.conn.execute(
            "INSERT INTO findings(fingerprint, kind, severity, message, root_pid, details_json,"
            " opened_at, last_seen) VALUES (?,?,?,?,?,?,?,?)",
            (
                clean(fingerprint),
                kind,
                severity,
                clean(message),
                root_pid,
                json.dumps(details),
                now,
                now,
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
    ) -> None:
        """Record another sighting of an open finding."""
        self.conn.execute(
            "UPDATE findings SET last_seen=?, seen_count=seen_count+1, message=?, root_pid=?,"
            " details_json=? WHERE id=?",
            (now, clean(message), root_pid, json.dumps(details), finding_id),
        )

    def set_finding_message(self, finding_id: int, message: str) -> None:
        """Replace a finding's message (e.g. to name the finding's own id in a command)."""
        self.conn.execute("UPDATE findings SET message=? WHERE id=?", (clean(message), finding_id))

    def resolve_finding(self, finding_id: int, now: float) -> None:
        """Mark a finding resolved."""
        self.conn.execute("UPDATE findings SET resolved_at=? WHERE id=?", (now, finding_id))

    def mark_alerted(self, finding_id: int, now: float) -> None:
        """Remember when the last open/reminder alert for a finding was queued."""
        self.conn.execute("UPDATE findings SET last_alert_at=? WHERE id=?", (now, finding_id))

    # -- deliveries ------------------------------------------------------------------

    def enqueue(
        self, finding_id: int, sink: str, event: str, payload: dict[str, Any], now: float
    ) -> int:
        """Spool one alert event for one sink; returns the delivery id."""
        cur = self.conn.execute(
            "INSERT INTO deliveries(finding_id, sink, event, payload_json, created_at,"
            " next_attempt_at) VALUES (?,?,?,?,?,?)",
            (finding_id, sink, event, json.dumps(payload), now, now),
        )
        return int(cur.lastrowid or 0)

    def due_deliveries(self, now: float, limit: int = 100) -> list[Delivery]:
        """Undelivered events whose next attempt is due, oldest first."""
        rows = self.conn.execute(
            "SELECT * FROM deliveries WHERE delivered_at IS NULL AND next_attempt_at<=?"
            " ORDER BY id LIMIT ?",
            (now, limit),
        )
        return [_delivery(r) for r in rows]

    def mark_delivered(self, delivery_id: int, now: float) -> None:
        """Record a successful delivery (it is never sent again)."""
        self.conn.execute(
            "UPDATE deliveries SET delivered_at=?, attempts=attempts+1, last_error=NULL"
            " WHERE id=? AND delivered_at IS NULL",
            (now, delivery_id),
        )

    def mark_failed(self, delivery_id: int, error: str, next_attempt_at: float) -> None:
        """Record a failed attempt and when to retry."""
        self.conn.execute(
            "UPDATE deliveries SET attempts=attempts+1, last_error=?, next_attempt_at=? WHERE id=?",
            (error, next_attempt_at, delivery_id),
        )

    def delivery_health(self) -> dict[str, Any]:
        """``{"queued": N, "failed_attempts": N, "last_error": str|None}`` for status."""
        conn = self.conn
        queued = conn.execute(
            "SELECT COUNT(*) FROM deliveries WHERE delivered_at IS NULL"
        ).fetchone()[0]
        failed = conn.execute(
            "SELECT COUNT(*) FROM deliveries WHERE delivered_at IS NULL AND attempts>0"
        ).fetchone()[0]
        row = conn.execute(
            "SELECT sink, last_error FROM deliveries WHERE last_error IS NOT NULL"
            " ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return {
            "queued": int(queued),
            "failed_attempts": int(failed),
            "last_error": f"{row['sink']}: {row['last_error']}" if row else None,
        }

    # -- actions ---------------------------------------------------------------------

    def record_action(
        self,
        actor: str,
        kind: str,
        target: str,
        outcome: str,
        details: dict[str, Any],
        now: float,
        *,
        finding_id: int | None = None,
        signature: str | None = None,
        dry_run: bool = False,
        undo: list[dict[str, Any]] | dict[str, Any] | None = None,
    ) -> int:
        """Append to the audit trail; returns the action id."""
        cur = self.conn.execute(
            "INSERT INTO actions(created_at, actor, kind, target, finding_id, signature, dry_run,"
            " outcome, details_json, undo_json) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                now, actor, kind, target, finding_id, signature, int(dry_run), outcome,
                json.dumps(details), json.dumps(undo) if undo is not None else None,
            ),
        )  # fmt: skip
        return int(cur.lastrowid or 0)

    def actions(self, limit: int = 200) -> list[ActionRecord]:
        """Most recent actions first."""
        rows = self.conn.execute("SELECT * FROM actions ORDER BY id DESC LIMIT ?", (limit,))
        return [_action(r) for r in rows]

    def action(self, action_id: int) -> ActionRecord | None:
        """One action by id."""
        row = self.conn.execute("SELECT * FROM actions WHERE id=?", (action_id,)).fetchone()
        return _action(row) if row else None

    def mark_undone(self, action_id: int, now: float) -> None:
        """Record that an action was undone."""
        self.conn.execute("UPDATE actions SET undone_at=? WHERE id=?", (now, action_id))
