"""The owner of ``state.db``: the daemon's lock on the state directory, the connection
(one per thread), transactions, and recovery from a database that is corrupt,
truncated or deleted while running.

A database that cannot be opened, fails ``PRAGMA quick_check`` or was truncated to
0 bytes is moved aside (kept as ``state.db.corrupt-<time>``) and a fresh one is
created, with the reason recorded so the daemon can say so once. The tables' queries
live in their own modules and run on :attr:`Store.conn`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .schema import _NewerSchema, migrate


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


class Store:
    """The one owner of ``state.db``'s connection, which every table shares.

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
        self._session = secrets.token_hex(8)
        self._local = threading.local()
        self._generation = 0
        self._ident: tuple[int, int, int, int] | None = None
        # Called (from the writing thread) once an alert spooled here is committed.
        self._spool_listeners: list[Callable[[], None]] = []
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
    def session(self) -> str:
        """A random id of this handle on the database, recorded as the owner of the
        actions it begins: a row begun under another session, in this very process, was
        begun by an earlier daemon (a restart in one process: tests, the simulator)."""
        return self._session

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
            self._local.spooled = False  # rolled back: nothing to send
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        if getattr(self._local, "spooled", False):
            self._local.spooled = False
            self._tell_spooled()

    def add_spool_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the writing thread, without arguments) each time an
        alert spooled by :meth:`spooled` is committed: the delivery worker's wake-up
        (issue 34: it no longer polls an empty spool every second)."""
        self._spool_listeners.append(listener)

    def remove_spool_listener(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener`` (no error when it was not added)."""
        with contextlib.suppress(ValueError):
            self._spool_listeners.remove(listener)

    def spooled(self) -> None:
        """An alert was just written to the spool on this thread's connection: the
        listeners are told at this transaction's commit (at once outside one), so a
        reader woken by them finds the row."""
        if self.conn.in_transaction:
            self._local.spooled = True
        else:
            self._tell_spooled()

    def _tell_spooled(self) -> None:
        for listener in list(self._spool_listeners):
            # Committed already: a listener's failure must not read as the write's.
            with contextlib.suppress(Exception):
                listener()

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
