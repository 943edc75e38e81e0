"""The daemon's database read without writing anything: for one-shot commands
(``scan``, ``report``, ``allowlist``, ``health-check``) that may run while the daemon
does. Nothing here creates, migrates or recovers a database; a missing, unreadable or
older one reads as empty (or None where the caller must tell "nothing" from "unknown").
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..records import ActionRecord, FindingRecord, RunRecord
from .actions import _action
from .findings import _finding
from .jobs import _RUN_COLUMNS, _run
from .query import _read_only, read_sanctioned_procs
from .table import _int_or_none

__all__ = [
    "read_history",
    "read_meta",
    "read_runs",
    "read_sanctioned_procs",
    "read_slurm_members",
]


def read_slurm_members(
    state_dir: str, boot_id: str | None
) -> dict[tuple[int, int], tuple[int, int | None]]:
    """The daemon's record of processes seen below a slurmstepd, read without writing
    (for ``health-check``, run by slurmd as the Epilog). Empty when there is no database
    or it cannot be read.

    Args:
        state_dir: ``daemon.state_dir``.
        boot_id: This boot's id; members recorded during another boot are not returned
            (start ticks count from boot, so their identities name nothing now).

    Returns:
        ``(PID, start ticks) -> (Slurm job id, uid or None)``.
    """
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
    """What happened since ``since``, read without writing (``rogue-watchdog report``).

    Args:
        state_dir: ``daemon.state_dir``.
        since: POSIX time.

    Returns:
        The runs last seen since then (oldest start first), the findings open then or
        opened since (by ``opened_at``, then id), and the actions taken or undone since
        (by id); None when there is no database, it cannot be read or it predates
        ``job_runs`` (schema version < 4).
    """
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
    """One ``meta`` value of the daemon's database, read without writing.

    Args:
        state_dir: ``daemon.state_dir``.
        key: The ``meta`` key.

    Returns:
        The value; None when the key is absent or the database missing or unreadable.
    """
    rows = _read_only(state_dir, "SELECT value FROM meta WHERE key=?", (key,))
    return str(rows[0][0]) if rows else None
