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

One concern per module, behind one owner of the connection:

- :mod:`~watchdog.state.store`: the directory lock, opening and checking the file,
  moving a corrupt one aside, recreating a deleted one, the per-thread connection and
  transactions (:class:`~watchdog.state.store.Store`).
- :mod:`~watchdog.state.schema`: the schema version and its ordered migrations.
- :mod:`~watchdog.state.table`: what every table shares (the :class:`Table` Protocol
  its methods are typed against, and the column codecs).
- one module per table, each a mixin of :class:`StateDB`: :mod:`~watchdog.state.jobs`
  (jobs and runs), :mod:`~watchdog.state.findings`, :mod:`~watchdog.state.deliveries`
  (the alert spool and sink totals), :mod:`~watchdog.state.actions` (the audit trail,
  its write-ahead records and :func:`source_undo`), :mod:`~watchdog.state.meta` (meta
  values and counters),
  :mod:`~watchdog.state.procs` (sanctioned processes and Slurm job members) and
  :mod:`~watchdog.state.prune` (retention across them).
- :mod:`~watchdog.state.readonly`: the database read by one-shot commands without
  writing anything (the daemon may be running); :mod:`~watchdog.state.query` its one
  read-only query, the only part ``scan`` needs.
- :mod:`~watchdog.state.db`: :class:`StateDB`, the store with every table.

The records themselves (:class:`JobRecord`, :class:`FindingRecord` ...) are plain data in
:mod:`watchdog.records`, below every layer; they are re-exported here.

Every name here is imported when first used (PEP 562): ``scan`` reads the daemon's
sanctioned processes through :mod:`~watchdog.state.query` and SQLite alone, without the
tables' and records' modules (~14 ms of its start-up, issue 34 item 2).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..records import (
        ActionRecord,
        ActionStep,
        Delivery,
        FindingRecord,
        JobRecord,
        RunRecord,
    )
    from .actions import (
        UNFINISHED_STATES,
        ActionJournal,
        JournalError,
        NullJournal,
        SourceUndo,
        self_owner,
        source_undo,
    )
    from .db import StateDB
    from .deliveries import delivery_row
    from .readonly import (
        read_history,
        read_meta,
        read_runs,
        read_sanctioned_procs,
        read_slurm_members,
    )
    from .schema import MIGRATIONS, SCHEMA_VERSION, migrate, schema_version
    from .store import LOCK_NAME, StateError, lock_state_dir, write_lock_pid
    from .table import clean

# Each public name and the module that defines it, imported on first use.
_WHERE = {
    "ActionJournal": ".actions",
    "ActionRecord": "..records",
    "ActionStep": "..records",
    "Delivery": "..records",
    "FindingRecord": "..records",
    "JobRecord": "..records",
    "JournalError": ".actions",
    "LOCK_NAME": ".store",
    "MIGRATIONS": ".schema",
    "NullJournal": ".actions",
    "RunRecord": "..records",
    "SCHEMA_VERSION": ".schema",
    "SourceUndo": ".actions",
    "StateDB": ".db",
    "StateError": ".store",
    "UNFINISHED_STATES": ".actions",
    "clean": ".table",
    "delivery_row": ".deliveries",
    "lock_state_dir": ".store",
    "migrate": ".schema",
    "read_history": ".readonly",
    "read_meta": ".readonly",
    "read_runs": ".readonly",
    "read_sanctioned_procs": ".readonly",
    "read_slurm_members": ".readonly",
    "schema_version": ".schema",
    "self_owner": ".actions",
    "source_undo": ".actions",
    "write_lock_pid": ".store",
}

__all__ = [
    "LOCK_NAME",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "UNFINISHED_STATES",
    "ActionJournal",
    "ActionRecord",
    "ActionStep",
    "Delivery",
    "FindingRecord",
    "JobRecord",
    "JournalError",
    "NullJournal",
    "RunRecord",
    "SourceUndo",
    "StateDB",
    "StateError",
    "clean",
    "delivery_row",
    "lock_state_dir",
    "migrate",
    "read_history",
    "read_meta",
    "read_runs",
    "read_sanctioned_procs",
    "read_slurm_members",
    "schema_version",
    "self_owner",
    "source_undo",
    "write_lock_pid",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first asked (PEP 562).

    Raises:
        AttributeError: ``name`` is not one of :data:`__all__`.
    """
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    """The module's names, the ones not imported yet included."""
    return sorted({*globals(), *__all__})
