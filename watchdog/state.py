"""State that survives restarts: jobs seen, findings, alert deliveries, actions taken.

One SQLite file (``state.db`` under the state dir) in WAL mode, so the alert worker and
the status server read while the loop writes. The schema is versioned with
``PRAGMA user_version`` and upgraded in place by ordered migrations (:data:`MIGRATIONS`);
rows are written by column name. A database that cannot be opened, fails
``PRAGMA quick_check`` or was truncated to 0 bytes is moved aside (kept as
``state.db.corrupt-<time>``) and a fresh one is created, with the reason recorded so the
daemon can say so once. History is deleted after the retention windows
(:meth:`StateDB.prune`); every query the daemon runs each tick uses an index.

Times are POSIX seconds (``float``) throughout.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from watchdog.hosttext import safe_json, safe_text
from watchdog.model import UnreadableRecord

# The plain records live below every layer (watchdog.records); re-exported here, where
# callers have always imported them from.
from watchdog.records import ActionRecord as ActionRecord
from watchdog.records import Delivery as Delivery
from watchdog.records import FindingRecord as FindingRecord
from watchdog.records import JobRecord as JobRecord
from watchdog.records import RunRecord as RunRecord

# The schema is versioned with ``PRAGMA user_version``: MIGRATIONS[i] upgrades version i
# to i + 1, in order, each in one transaction. Never edit a released entry; append one.
# (Databases written before ``user_version`` was used say ``schema_version 1`` in ``meta``.)
_SCHEMA_V1 = """
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
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '1');
"""

# Version 2: dead letters, instance counts of folded findings, delivery counters that
# survive retention, and the indexes every per-tick query uses (none scans a table).
_SCHEMA_V2 = """
ALTER TABLE deliveries ADD COLUMN dead_at REAL;
ALTER TABLE findings ADD COLUMN instances INTEGER NOT NULL DEFAULT 1;
ALTER TABLE findings ADD COLUMN alerted_instances INTEGER;
ALTER TABLE findings ADD COLUMN alerted_pids_json TEXT;
CREATE TABLE sink_stats (
    sink TEXT PRIMARY KEY,
    delivered INTEGER NOT NULL DEFAULT 0,
    failed_attempts INTEGER NOT NULL DEFAULT 0,
    dead_lettered INTEGER NOT NULL DEFAULT 0
);
INSERT INTO sink_stats(sink, delivered, failed_attempts)
    SELECT sink, SUM(delivered_at IS NOT NULL), SUM(attempts) - SUM(delivered_at IS NOT NULL)
    FROM deliveries GROUP BY sink;
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL DEFAULT 0);
DROP INDEX IF EXISTS deliveries_pending;
CREATE INDEX deliveries_queue ON deliveries(sink, id)
    WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX deliveries_errors ON deliveries(id) WHERE last_error IS NOT NULL;
CREATE INDEX deliveries_finding ON deliveries(finding_id);
CREATE INDEX deliveries_done ON deliveries(created_at)
    WHERE delivered_at IS NOT NULL OR dead_at IS NOT NULL;
CREATE INDEX findings_resolved ON findings(resolved_at) WHERE resolved_at IS NOT NULL;
CREATE INDEX jobs_present ON jobs(first_seen) WHERE gone_at IS NULL;
CREATE INDEX jobs_gone ON jobs(gone_at) WHERE gone_at IS NOT NULL;
UPDATE meta SET value='2' WHERE key='schema_version';
"""

# Version 3: the processes of sanctioned jobs, so a sanctioned process stays sanctioned
# for its life across daemon restarts (identity: PID + start ticks, of one boot); and
# the routing facts (GPUs, user, origin) a finding's last alert carried, so an alert
# whose labels would change is resolved explicitly under its old labels; and the
# processes seen below a slurmstepd, so a job's leftover is proven the job's after the
# job ended (its environment only claims it).
_SCHEMA_V3 = """
CREATE TABLE sanctioned_procs (
    pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    rule TEXT NOT NULL,
    since REAL NOT NULL,
    boot_id TEXT,
    PRIMARY KEY (pid, start_ticks)
);
ALTER TABLE findings ADD COLUMN alerted_routing_json TEXT;
CREATE TABLE slurm_members (
    pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    job_id INTEGER NOT NULL,
    uid INTEGER,
    seen_at REAL NOT NULL,
    boot_id TEXT,
    PRIMARY KEY (pid, start_ticks)
);
UPDATE meta SET value='3' WHERE key='schema_version';
"""

# Version 4: every run of every job (one row per root process, where ``jobs`` keeps one
# per signature), for the learning period: ``allowlist suggest`` needs how often a job
# ran, how many ran at once and what it held, and ``allowlist diff`` replays the runs.
_SCHEMA_V4 = """
CREATE TABLE job_runs (
    signature TEXT NOT NULL,
    root_pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    user TEXT,
    cmdline_json TEXT NOT NULL,
    origin_json TEXT NOT NULL,
    verdict TEXT NOT NULL,
    rule TEXT,
    started_at REAL NOT NULL,
    last_seen REAL NOT NULL,
    gpu_s REAL NOT NULL DEFAULT 0,
    gpus_json TEXT NOT NULL DEFAULT '[]',
    max_gpu_bytes INTEGER,
    PRIMARY KEY (root_pid, start_ticks, signature)
);
CREATE INDEX job_runs_seen ON job_runs(last_seen);
UPDATE meta SET value='4' WHERE key='schema_version';
"""

MIGRATIONS: tuple[str, ...] = (_SCHEMA_V1, _SCHEMA_V2, _SCHEMA_V3, _SCHEMA_V4)
SCHEMA_VERSION = len(MIGRATIONS)


def _read_only(state_dir: str, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Rows of one query on the daemon's database, opened read-only (nothing written,
    created or migrated); empty when there is no database or it cannot be read."""
    path = Path(state_dir) / "state.db"
    if not path.is_file():
        return []
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return []
    try:
        return list(conn.execute(sql, args).fetchall())
    except sqlite3.Error:  # older schema, a damaged file, a lock held too long
        return []
    finally:
        conn.close()


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int) else None


def read_sanctioned_procs(state_dir: str, boot_id: str | None) -> dict[tuple[int, int], str]:
    """The daemon's record of sanctioned processes (:meth:`StateDB.sanctioned_procs`),
    read without writing anything: for one-shot commands, which must not call a process
    rogue that the daemon sanctioned when it started. Empty when there is no database,
    it cannot be read, or it predates the table.

    Args:
        state_dir: ``daemon.state_dir``.
        boot_id: This boot's id (:func:`watchdog.sources.procfs.boot_id`).
    """
    rows = _read_only(
        state_dir,
        "SELECT pid, start_ticks, rule FROM sanctioned_procs WHERE boot_id IS ?",
        (boot_id,),
    )
    return {(int(r[0]), int(r[1])): str(r[2]) for r in rows if isinstance(r[0], int)}


def read_slurm_members(
    state_dir: str, boot_id: str | None
) -> dict[tuple[int, int], tuple[int, int | None]]:
    """The daemon's record of processes seen below a slurmstepd, read without writing
    (for ``health-check``, run by slurmd as the Epilog): ``(PID, start ticks) -> (job id,
    uid)``. Empty when there is no database or it cannot be read."""
    rows = _read_only(
        state_dir,
        "SELECT pid, start_ticks, job_id, uid FROM slurm_members WHERE boot_id IS ?",
        (boot_id,),
    )
    return {
        (int(r[0]), int(r[1])): (int(r[2]), _int_or_none(r[3]))
        for r in rows
        if isinstance(r[0], int) and isinstance(r[2], int)
    }


def clean(text: str | None) -> str | None:
    """Text for the state store's text columns: :func:`watchdog.hosttext.safe_text`
    (non-UTF-8 bytes as ``\\xNN``, control characters escaped, newlines as ``⏎``)."""
    return None if text is None else safe_text(text)


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
    """Take the daemon's exclusive lock on ``state_dir``: ``flock(2)`` on an open
    descriptor of the directory itself.

    Only ``run`` takes it, for the daemon's whole life: two daemons on one state.db would
    each open the same findings and double every alert. The lock is on the directory, not
    on a file in it, so deleting files in the directory cannot drop it; the daemon takes
    it again on a directory it recreates (:meth:`StateDB.ensure_present`). The holder's
    PID is written to ``daemon.lock`` for the refusal message only. Other commands
    (``actions``, ``undo``, ``disable-source``) do not lock. The lock goes away with the process.

    Args:
        state_dir: The state directory; created (0750) if missing.

    Returns:
        The open directory descriptor holding the lock (keep it open; pass it to
        ``files_preserve`` when detaching).

    Raises:
        StateError: Another process holds the lock (its PID named when known), or the
            directory cannot be created or opened.
    """
    import fcntl

    directory = Path(state_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o750)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StateError(f"cannot lock state dir {directory}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _lock_holder(fd)
        os.close(fd)
        who = f"PID {holder}" if holder.isdigit() else "another process"
        raise StateError(
            f"state dir {directory} is in use by {who} (lock {directory / LOCK_NAME}): is "
            "another daemon running with the same daemon.state_dir?"
        ) from None
    write_lock_pid(fd)
    return fd


def _lock_holder(dir_fd: int) -> str:
    try:
        fd = os.open(LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return ""
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)


def write_lock_pid(fd: int) -> None:
    """Record this process's PID in ``daemon.lock`` beside the locked directory
    descriptor ``fd`` (again after detaching: new PID). Informative only."""
    try:
        pid_fd = os.open(
            LOCK_NAME, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o640, dir_fd=fd
        )
    except OSError:
        return
    try:
        os.ftruncate(pid_fd, 0)
        os.pwrite(pid_fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # the PID is only informative
    finally:
        os.close(pid_fd)


def _loads(text: str | None, kind: type | tuple[type, ...], unreadable: Any) -> Any:
    """A JSON column read back: its value when it parses to ``kind``, else ``unreadable``
    (a damaged or hand-edited database must not crash a listing or hide its other rows).

    ``unreadable`` may be a callable taking the reason, e.g. :class:`UnreadableRecord`.
    """
    try:
        value = json.loads(text) if text is not None else None
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep
        reason = str(exc) or type(exc).__name__
    else:
        if isinstance(value, kind):
            return value
        kinds = kind if isinstance(kind, tuple) else (kind,)
        reason = f"not a JSON {' or '.join(k.__name__ for k in kinds)}"
    return unreadable(reason) if callable(unreadable) else unreadable


def _details(text: str | None) -> dict[str, Any]:
    value: dict[str, Any] = _loads(text, dict, lambda reason: {"unreadable": reason})
    return value


def _job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        row["signature"], row["summary"], row["user"], row["verdict"],
        _loads(row["origin_json"], dict, UnreadableRecord), row["first_seen"], row["last_seen"],
        row["root_pid"], row["start_ticks"], _loads(row["pids_json"], list, []), row["gone_at"],
        row["sightings"],
    )  # fmt: skip


def _run(row: sqlite3.Row | tuple[Any, ...]) -> RunRecord:
    cmdline = _loads(row[4], list, [])
    gpus = _loads(row[11], list, [])
    return RunRecord(
        str(row[0]), int(row[1]), int(row[2]), row[3],
        [str(c) for c in cmdline], _loads(row[5], dict, UnreadableRecord), str(row[6]),
        row[7], float(row[8]), float(row[9]), float(row[10]), [str(g) for g in gpus],
        row[12] if isinstance(row[12], int) else None,
    )  # fmt: skip


_RUN_COLUMNS = (
    "signature, root_pid, start_ticks, user, cmdline_json, origin_json, verdict, rule,"
    " started_at, last_seen, gpu_s, gpus_json, max_gpu_bytes"
)


def _connect_ro(state_dir: str) -> sqlite3.Connection | None:
    """A read-only connection to ``state_dir``'s database, or None when there is none
    or it cannot be opened (the daemon may be writing it meanwhile)."""
    path = Path(state_dir) / "state.db"
    if not path.is_file():
        return None
    try:
        return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error:
        return None


def read_runs(state_dir: str, since: float) -> list[RunRecord] | None:
    """The recorded runs last seen at or after ``since``, oldest start first, read
    without writing anything (the daemon may be running). None when there is no
    database, it cannot be read or it predates the table (schema version < 4).

    Args:
        state_dir: ``daemon.state_dir``.
        since: POSIX time.
    """
    conn = _connect_ro(state_dir)
    if conn is None:
        return None
    try:
        rows = conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE last_seen>=? ORDER BY started_at, root_pid",
            (since,),
        ).fetchall()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return [_run(r) for r in rows]


def read_history(
    state_dir: str, since: float
) -> tuple[list[RunRecord], list[FindingRecord], list[ActionRecord]] | None:
    """What happened since ``since``, read without writing (``rogue-watchdog report``):
    the runs last seen since then, the findings open then or opened since (by
    ``opened_at``), and the actions taken or undone since. None when there is no
    database, it cannot be read or it predates ``job_runs``."""
    conn = _connect_ro(state_dir)
    if conn is None:
        return None
    conn.row_factory = sqlite3.Row
    try:
        runs = [
            _run(tuple(r))
            for r in conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE last_seen>=?"
                " ORDER BY started_at, root_pid",
                (since,),
            )
        ]
        findings = [
            _finding(r)
            for r in conn.execute(
                "SELECT * FROM findings WHERE resolved_at IS NULL OR resolved_at>=?"
                " OR opened_at>=? ORDER BY opened_at, id",
                (since, since),
            )
        ]
        actions = [
            _action(r)
            for r in conn.execute(
                "SELECT * FROM actions WHERE created_at>=? OR undone_at>=? ORDER BY id",
                (since, since),
            )
        ]
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return runs, findings, actions


def read_meta(state_dir: str, key: str) -> str | None:
    """One ``meta`` value of the daemon's database, read without writing; None when
    absent or unreadable."""
    rows = _read_only(state_dir, "SELECT value FROM meta WHERE key=?", (key,))
    return str(rows[0][0]) if rows else None


def _finding(row: sqlite3.Row) -> FindingRecord:
    return FindingRecord(
        row["id"], row["fingerprint"], row["kind"], row["severity"], row["message"],
        row["root_pid"], _details(row["details_json"]), row["opened_at"], row["last_seen"],
        row["seen_count"], row["resolved_at"], row["last_alert_at"], row["instances"],
        row["alerted_instances"],
        _loads(row["alerted_pids_json"], list, None) if row["alerted_pids_json"] else None,
        _loads(row["alerted_routing_json"], dict, None) if row["alerted_routing_json"] else None,
    )  # fmt: skip


def delivery_row(row: sqlite3.Row) -> Delivery:
    """A ``deliveries`` row (``SELECT *``) as a :class:`Delivery`."""
    return Delivery(
        row["id"], row["finding_id"], row["sink"], row["event"], _details(row["payload_json"]),
        row["created_at"], row["attempts"], row["next_attempt_at"], row["delivered_at"],
        row["last_error"], row["dead_at"],
    )  # fmt: skip


_delivery = delivery_row


def _action(row: sqlite3.Row) -> ActionRecord:
    undo = row["undo_json"]
    return ActionRecord(
        row["id"], row["created_at"], row["actor"], row["kind"], row["target"],
        row["finding_id"], row["signature"], bool(row["dry_run"]), row["outcome"],
        _details(row["details_json"]),
        # Unreadable: a dict without ops, which undo refuses ("not a list of ops").
        _loads(undo, (list, dict), lambda reason: {"unreadable": reason}) if undo else None,
        row["undone_at"],
    )  # fmt: skip


class _NewerSchema(sqlite3.DatabaseError):
    """The database was written by a newer rogue-watchdog."""


def schema_version(conn: sqlite3.Connection) -> int:
    """The schema version of an open database: ``PRAGMA user_version``, or 1 for a
    database written before it was used (``meta.schema_version`` 1), or 0 when empty."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version:
        return version
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
    ).fetchone()
    if has_meta is None:
        return 0
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    return int(row[0]) if row is not None and str(row[0]).isdigit() else 0


def migrate(conn: sqlite3.Connection) -> int:
    """Bring an open database to :data:`SCHEMA_VERSION`, applying each missing entry of
    :data:`MIGRATIONS` in order, each in its own transaction with the new
    ``PRAGMA user_version``.

    Returns:
        The version found before migrating.

    Raises:
        sqlite3.DatabaseError: The database is newer than this code (``_NewerSchema``),
            or a migration failed (that migration is rolled back).
    """
    found = schema_version(conn)
    if found > SCHEMA_VERSION:
        raise _NewerSchema(
            f"{conn.execute('PRAGMA database_list').fetchone()[2]}: schema version {found} "
            f"is newer than this rogue-watchdog ({SCHEMA_VERSION}); refusing to touch it"
        )
    for version in range(found, SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={version + 1}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return found


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (``sqlite3.complete_statement``)."""
    out, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    if current.strip():
        out.append(current.strip())
    return out


class StateDB:
    """The state database.

    Args:
        state_dir: Directory to keep ``state.db`` in; created (mode 0750) if missing.

    Attributes:
        path: The database file.
        recovered_from: When a corrupt, unreadable or truncated (0-byte) database was moved
            aside at open, the path it was moved to (the daemon reports this once); else None.
        recovered_reason: Why it was moved aside.
        recreated: One line per time the state directory or ``state.db`` vanished while
            running and was recreated (:meth:`ensure_present`), for the ``state-recovered``
            finding.

    Raises:
        StateError: The directory cannot be created, the database cannot be created even
            fresh (read-only file system, permissions), or it was written by a newer
            rogue-watchdog (never moved aside: a downgrade must not lose it).

    Thread safety: each thread gets its own connection (SQLite connections are not
    shared across threads); writes are serialised by SQLite's lock in WAL mode. After
    :meth:`ensure_present` recreated the database, every thread reconnects on its next
    use of :attr:`conn`.
    """

    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / "state.db"
        self.recovered_from: str | None = None
        self.recovered_reason: str | None = None
        self.recreated: list[str] = []
        self._local = threading.local()
        self._generation = 0
        self._ident: tuple[int, int, int, int] | None = None
        self._lock_fd: int | None = None
        self._relock = False
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        except OSError as exc:
            raise StateError(f"cannot create state dir {self.dir}: {exc.strerror}") from None
        try:
            self._open_checked()
        except _NewerSchema as exc:
            raise StateError(str(exc)) from None
        except sqlite3.DatabaseError as exc:
            if _unusable(exc):  # not corruption: moving the file aside cannot help
                raise StateError(f"cannot use {self.path}: {exc}{_why(self.dir)}") from None
            self._move_aside(str(exc))
            try:
                self._open_checked()
            except sqlite3.Error as again:
                raise StateError(f"cannot create {self.path}: {again}") from None
        self._ident = self._identity()

    # -- connection ------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _open_checked(self) -> None:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            size = None
        except OSError as exc:
            raise sqlite3.OperationalError(f"unable to open {self.path}: {exc.strerror}") from None
        if size == 0:
            # SQLite would take an empty file for a new database and silently start
            # fresh; a state.db truncated to 0 bytes lost its history: say so.
            raise sqlite3.DatabaseError("the file is empty (0 bytes): truncated")
        conn = self._connect()
        try:
            ok = conn.execute("PRAGMA quick_check").fetchone()[0]
            if ok != "ok":
                raise sqlite3.DatabaseError(f"quick_check: {ok}")
            migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._local.conn = conn
        self._local.generation = self._generation

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
        if conn is not None and getattr(self._local, "generation", 0) != self._generation:
            conn.close()  # the database was recreated: this one is on the old file
            conn = None
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            self._local.generation = self._generation
        return conn

    # -- a state directory that vanishes ---------------------------------------------

    def _identity(self) -> tuple[int, int, int, int] | None:
        try:
            d, f = os.stat(self.dir), os.stat(self.path)
        except OSError:
            return None
        return d.st_dev, d.st_ino, f.st_dev, f.st_ino

    def ensure_present(self) -> str | None:
        """Check that the state directory and ``state.db`` are still the ones opened
        (device and inode; called every tick) and recreate them when not.

        A state directory deleted while running (``rm -rf``, a cleanup job) would
        otherwise leave the daemon writing to a deleted file and its lock on nothing.
        The open connection still reads the deleted database, so its content is copied
        into the new file (SQLite's online backup): findings, the alert spool and job
        history survive; the directory lock is taken again.

        Returns:
            None when nothing changed; otherwise one line saying what was found and what
            was done (also appended to :attr:`recreated`).

        Raises:
            StateError: The directory or database cannot be recreated, or another
                daemon locked the recreated directory first.
        """
        current = self._identity()
        if self._ident is None:  # not known at open: nothing to compare with
            self._ident = current
            return None
        if current == self._ident and not self._relock:
            return None
        try:
            st = os.stat(self.dir)
            if (st.st_dev, st.st_ino) != self._ident[:2]:
                self._relock = True  # a new directory: the lock held is on the old one
        except OSError:
            self._relock = True
        if not self.dir.exists():
            what = f"the state directory {self.dir} was deleted while running"
        elif not self.path.exists():
            what = f"{self.path} was deleted while running"
        else:
            what = f"{self.path} was replaced while running"
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        except OSError as exc:
            raise StateError(f"{what}; cannot recreate it: {exc.strerror or exc}") from None
        if self._relock:
            # Raises while another daemon holds the new directory: this one then writes
            # nothing there and stays degraded ("state") instead of doubling its alerts.
            fd = lock_state_dir(self.dir)
            if self._lock_fd is not None:
                os.close(self._lock_fd)
            self._lock_fd = fd
            self._relock = False
        if self._identity() == self._ident:
            return None  # only the lock had to be taken again
        if self.path.exists():  # someone else's file took its place: keep it aside
            stamp = time.strftime("%Y%m%dT%H%M%S")
            os.replace(self.path, self.path.with_name(f"state.db.replaced-{stamp}"))
        old = self.conn
        copied = True
        try:
            new = sqlite3.connect(self.path, isolation_level=None)
            try:
                old.backup(new)
            finally:
                new.close()
        except sqlite3.Error:
            copied = False
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.unlink(str(self.path) + suffix)
        self._generation += 1
        old.close()
        self._local.conn = None
        try:
            self.conn.execute("PRAGMA quick_check").fetchone()
            migrate(self.conn)
        except sqlite3.Error as exc:
            raise StateError(f"{what}; cannot recreate {self.path}: {exc}") from None
        self._ident = self._identity()
        done = (
            "recreated it from the daemon's open copy (nothing lost)"
            if copied
            else "recreated it empty (the open copy was unreadable: history lost)"
        )
        line = f"{what}; {done}"
        self.recreated.append(line)
        return line

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
        """Insert or replace a job record (by signature)."""
        self.conn.execute(
            "INSERT INTO jobs(signature, summary, user, verdict, origin_json, first_seen,"
            " last_seen, root_pid, start_ticks, pids_json, gone_at, sightings)"
            " VALUES (:signature, :summary, :user, :verdict, :origin_json, :first_seen,"
            " :last_seen, :root_pid, :start_ticks, :pids_json, :gone_at, :sightings)"
            " ON CONFLICT(signature) DO UPDATE SET summary=excluded.summary,"
            " user=excluded.user, verdict=excluded.verdict, origin_json=excluded.origin_json,"
            " first_seen=excluded.first_seen, last_seen=excluded.last_seen,"
            " root_pid=excluded.root_pid, start_ticks=excluded.start_ticks,"
            " pids_json=excluded.pids_json, gone_at=excluded.gone_at,"
            " sightings=excluded.sightings",
            {
                "signature": rec.signature,
                "summary": clean(rec.summary),
                "user": clean(rec.user),
                "verdict": rec.verdict,
                # Kept exactly (JSON escapes non-UTF-8 bytes losslessly): disable-source
                # acts on the recorded origin of a job that has exited.
                "origin_json": json.dumps(rec.origin),
                "first_seen": rec.first_seen,
                "last_seen": rec.last_seen,
                "root_pid": rec.root_pid,
                "start_ticks": rec.start_ticks,
                "pids_json": json.dumps(rec.pids),
                "gone_at": rec.gone_at,
                "sightings": rec.sightings,
            },
        )

    def record_run(
        self,
        rec: RunRecord,
        now: float,
    ) -> None:
        """Insert a run, or update its last sighting: verdict, rule, GPUs held, and
        GPU-seconds grown by the time since its last sighting times the GPUs it holds."""
        gpus = sorted(rec.gpus or [])
        self.conn.execute(
            f"INSERT INTO job_runs({_RUN_COLUMNS})"
            " VALUES (:signature, :root_pid, :start_ticks, :user, :cmdline_json,"
            " :origin_json, :verdict, :rule, :now, :now, 0, :gpus_json, :gpu_bytes)"
            " ON CONFLICT(root_pid, start_ticks, signature) DO UPDATE SET"
            " verdict=excluded.verdict, rule=excluded.rule, origin_json=excluded.origin_json,"
            " gpu_s=job_runs.gpu_s + MAX(0, :now - job_runs.last_seen) * :n_gpus,"
            " last_seen=:now, gpus_json=:gpus_union,"
            " max_gpu_bytes=CASE WHEN :gpu_bytes IS NULL THEN job_runs.max_gpu_bytes"
            " ELSE MAX(COALESCE(job_runs.max_gpu_bytes, 0), :gpu_bytes) END",
            {
                "signature": rec.signature,
                "root_pid": rec.root_pid,
                "start_ticks": rec.start_ticks,
                "user": clean(rec.user),
                "cmdline_json": json.dumps(rec.cmdline),
                "origin_json": json.dumps(rec.origin),
                "verdict": rec.verdict,
                "rule": rec.rule,
                "now": now,
                "gpus_json": json.dumps(gpus),
                "n_gpus": len(gpus),
                "gpus_union": json.dumps(sorted(set(gpus) | set(self._run_gpus(rec)))),
                "gpu_bytes": rec.max_gpu_bytes,
            },
        )

    def _run_gpus(self, rec: RunRecord) -> list[str]:
        row = self.conn.execute(
            "SELECT gpus_json FROM job_runs WHERE root_pid=? AND start_ticks=? AND signature=?",
            (rec.root_pid, rec.start_ticks, rec.signature),
        ).fetchone()
        return [str(g) for g in _loads(row[0], list, [])] if row else []

    def runs(self, since: float = 0.0) -> list[RunRecord]:
        """Runs last seen at or after ``since``, oldest start first."""
        rows = self.conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM job_runs WHERE last_seen>=? ORDER BY started_at, root_pid",
            (since,),
        )
        return [_run(r) for r in rows]

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

    def sanctioned_procs(self, boot_id: str | None) -> dict[tuple[int, int], str]:
        """``(PID, start ticks) -> rule`` of the processes recorded as sanctioned during
        boot ``boot_id`` (``/proc/sys/kernel/random/boot_id``): start ticks count from
        boot, so an identity of another boot names nothing and is never returned."""
        rows = self.conn.execute(
            "SELECT pid, start_ticks, rule FROM sanctioned_procs WHERE boot_id IS ?", (boot_id,)
        )
        return {(int(r[0]), int(r[1])): str(r[2]) for r in rows}

    def set_sanctioned_procs(
        self, procs: dict[tuple[int, int], str], boot_id: str | None, now: float
    ) -> None:
        """Make ``sanctioned_procs`` hold exactly ``procs`` (``(PID, start) -> rule``),
        keeping the ``since`` of identities already there."""
        with self.transaction():
            have = {
                (int(r[0]), int(r[1]))
                for r in self.conn.execute("SELECT pid, start_ticks FROM sanctioned_procs")
            }
            gone = have - set(procs)
            self.conn.executemany(
                "DELETE FROM sanctioned_procs WHERE pid=? AND start_ticks=?", sorted(gone)
            )
            self.conn.executemany(
                "INSERT OR IGNORE INTO sanctioned_procs(pid, start_ticks, rule, since, boot_id)"
                " VALUES (?, ?, ?, ?, ?)",
                [(pid, start, clean(rule), now, boot_id) for (pid, start), rule in procs.items()],
            )

    def slurm_members(self, boot_id: str | None) -> dict[tuple[int, int], tuple[int, int | None]]:
        """``(PID, start ticks) -> (job id, uid)`` of the processes seen below a
        slurmstepd during boot ``boot_id`` (see :func:`read_slurm_members`)."""
        rows = self.conn.execute(
            "SELECT pid, start_ticks, job_id, uid FROM slurm_members WHERE boot_id IS ?",
            (boot_id,),
        )
        return {(int(r[0]), int(r[1])): (int(r[2]), _int_or_none(r[3])) for r in rows}

    def set_slurm_members(
        self,
        members: dict[tuple[int, int], tuple[int, int | None]],
        boot_id: str | None,
        now: float,
    ) -> None:
        """Make ``slurm_members`` hold exactly ``members`` (the ones still alive)."""
        with self.transaction():
            self.conn.execute("DELETE FROM slurm_members")
            self.conn.executemany(
                "INSERT INTO slurm_members(pid, start_ticks, job_id, uid, seen_at, boot_id)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(p, s, j, u, now, boot_id) for (p, s), (j, u) in members.items()],
            )

    def mark_gone(self, signature: str, now: float) -> None:
        """Record that a job signature is no longer seen."""
        self.conn.execute("UPDATE jobs SET gone_at=? WHERE signature=?", (now, signature))

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

    def set_finding_message(self, finding_id: int, message: str) -> None:
        """Replace a finding's message (e.g. to name the finding's own id in a command)."""
        self.conn.execute("UPDATE findings SET message=? WHERE id=?", (clean(message), finding_id))

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

    # -- counters --------------------------------------------------------------------

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

    # -- deliveries ------------------------------------------------------------------

    def enqueue(
        self, finding_id: int, sink: str, event: str, payload: dict[str, Any], now: float
    ) -> int:
        """Spool one alert event for one sink; returns the delivery id.

        The payload is made safe (:func:`watchdog.hosttext.safe_json`) here: it exists
        only to be sent.
        """
        cur = self.conn.execute(
            "INSERT INTO deliveries(finding_id, sink, event, payload_json, created_at,"
            " next_attempt_at) VALUES (?,?,?,?,?,?)",
            (finding_id, sink, event, json.dumps(safe_json(payload)), now, now),
        )
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

    # -- retention -------------------------------------------------------------------

    def prune(
        self,
        now: float,
        *,
        findings_s: float,
        alerts_s: float,
        jobs_s: float,
        limit: int = 5000,
    ) -> dict[str, int]:
        """Delete history older than the retention windows, at most ``limit`` rows per
        table per call (so one call never stalls a tick; the next call goes on).

        - resolved findings resolved before ``now - findings_s`` that have no alert
          still waiting to be sent;
        - delivered and dead-lettered alerts spooled before ``now - alerts_s``;
        - jobs gone before ``now - jobs_s`` (a respawn after that is a new job), and
          runs last seen before then (``job_runs``: the learning period's history).

        Open findings, queued alerts, jobs still present and the actions audit trail are
        never deleted. A window of 0 keeps that history forever. Freed pages are reused,
        so the file stops growing once the windows are full.

        Returns:
            Rows deleted per table: ``{"findings": N, "deliveries": N, "jobs": N,
            "runs": N}``.
        """
        out = {"findings": 0, "deliveries": 0, "jobs": 0, "runs": 0}
        with self.transaction() as conn:
            if alerts_s > 0:
                out["deliveries"] = conn.execute(
                    "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries"
                    " WHERE (delivered_at IS NOT NULL OR dead_at IS NOT NULL)"
                    " AND created_at<? LIMIT ?)",
                    (now - alerts_s, limit),
                ).rowcount
            if findings_s > 0:
                cutoff = now - findings_s
                out["findings"] = conn.execute(
                    "DELETE FROM findings WHERE id IN (SELECT f.id FROM findings f"
                    " WHERE f.resolved_at IS NOT NULL AND f.resolved_at<? AND NOT EXISTS"
                    " (SELECT 1 FROM deliveries d WHERE d.finding_id=f.id"
                    " AND d.delivered_at IS NULL AND d.dead_at IS NULL) LIMIT ?)",
                    (cutoff, limit),
                ).rowcount
            if jobs_s > 0:
                out["jobs"] = conn.execute(
                    "DELETE FROM jobs WHERE signature IN (SELECT signature FROM jobs"
                    " WHERE gone_at IS NOT NULL AND gone_at<? LIMIT ?)",
                    (now - jobs_s, limit),
                ).rowcount
                out["runs"] = conn.execute(
                    "DELETE FROM job_runs WHERE rowid IN (SELECT rowid FROM job_runs"
                    " WHERE last_seen<? LIMIT ?)",
                    (now - jobs_s, limit),
                ).rowcount
        return out

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

    def actions_for(self, signature: str, limit: int = 200) -> list[ActionRecord]:
        """The actions on one job signature, most recent first."""
        rows = self.conn.execute(
            "SELECT * FROM actions WHERE signature=? ORDER BY id DESC LIMIT ?", (signature, limit)
        )
        return [_action(r) for r in rows]

    def action(self, action_id: int) -> ActionRecord | None:
        """One action by id."""
        row = self.conn.execute("SELECT * FROM actions WHERE id=?", (action_id,)).fetchone()
        return _action(row) if row else None

    def mark_undone(self, action_id: int, now: float) -> None:
        """Record that an action was undone."""
        self.conn.execute("UPDATE actions SET undone_at=? WHERE id=?", (now, action_id))


@dataclass(frozen=True)
class SourceUndo:
    """An operator's ``undo`` that re-enabled a job's source: the job's next run is what
    they asked for, not a remediation that failed.

    Attributes:
        undo: The ``undo`` action (its ``created_at`` is when the source came back).
        disable: The ``disable-source`` action it undid.
    """

    undo: ActionRecord
    disable: ActionRecord

    def note(self) -> str:
        """``its source was re-enabled by `rogue-watchdog undo 7` (action 9) at T by ACTOR``."""
        when = datetime.fromtimestamp(self.undo.created_at).astimezone()
        return (
            f"its source was re-enabled by `rogue-watchdog undo {self.disable.id}` (action "
            f"{self.undo.id}) at {when.isoformat(timespec='seconds')} by {self.undo.actor}, "
            f"undoing disable-source action {self.disable.id}: an operator's undo, not a "
            "failed remediation"
        )


def source_undo(actions: Sequence[ActionRecord]) -> SourceUndo | None:
    """Whether the source of one job signature stands re-enabled by an operator's undo.

    Args:
        actions: That signature's actions, most recent first (:meth:`StateDB.actions_for`).

    Returns:
        The undo and the ``disable-source`` it undid, when the newest disable-source that
        took effect was undone and none took effect since; else None.
    """
    undos = {
        r.details.get("undid"): r
        for r in actions
        if r.kind == "undo" and r.outcome == "ok" and not r.dry_run
    }
    for rec in actions:
        if rec.kind != "disable-source" or rec.dry_run or rec.outcome not in ("ok", "partial"):
            continue
        if rec.undone_at is None:
            return None  # disabled again since: a run now is the source's, not the undo's
        undo = undos.get(rec.id)
        return SourceUndo(undo, rec) if undo is not None else None
    return None
