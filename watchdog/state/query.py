"""One query on the daemon's database, read-only, and the one ``scan`` asks
(:func:`read_sanctioned_procs`): SQLite alone, without the tables' and records' modules,
which every other reader of :mod:`~watchdog.state.readonly` needs (issue 34, item 2).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


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


def read_sanctioned(
    state_dir: str, boot_id: str | None
) -> tuple[dict[tuple[int, int], str], dict[tuple[int, int], float]]:
    """The daemon's record of sanctioned processes and, of those, the ones a rule matched
    while they ran after they had been judged rogue (:meth:`StateDB.sanctioned_matched`),
    in one read-only query.

    Args:
        state_dir: ``daemon.state_dir``.
        boot_id: This boot's id (:func:`watchdog.sources.procfs.boot_id`).

    Returns:
        ``((PID, start ticks) -> rule, (PID, start ticks) -> POSIX time of that match)``;
        a database older than the ``rogue_before`` column gives the first alone.
    """
    rows = _read_only(
        state_dir,
        "SELECT pid, start_ticks, rule, since, rogue_before FROM sanctioned_procs"
        " WHERE boot_id IS ?",
        (boot_id,),
    )
    if not rows:  # none, or a schema before version 8 (no rogue_before)
        return read_sanctioned_procs(state_dir, boot_id), {}
    procs, matched = {}, {}
    for pid, start, rule, since, rogue_before in rows:
        if isinstance(pid, int) and isinstance(start, int):
            procs[(pid, start)] = str(rule)
            if rogue_before and isinstance(since, (int, float)):
                matched[(pid, start)] = float(since)
    return procs, matched


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
