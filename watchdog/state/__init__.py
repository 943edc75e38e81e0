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
  writing anything (the daemon may be running).

The records themselves (:class:`JobRecord`, :class:`FindingRecord` ...) are plain data in
:mod:`watchdog.records`, below every layer; they are re-exported here.
"""

from __future__ import annotations

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
    ActionTable,
    JournalError,
    NullJournal,
    SourceUndo,
    self_owner,
    source_undo,
)
from .deliveries import DeliveryTable, delivery_row
from .findings import FindingTable
from .jobs import JobTable
from .meta import MetaTable
from .procs import ProcTable
from .prune import Retention
from .readonly import (
    read_history,
    read_meta,
    read_runs,
    read_sanctioned_procs,
    read_slurm_members,
)
from .schema import MIGRATIONS, SCHEMA_VERSION, migrate, schema_version
from .store import LOCK_NAME, StateError, Store, lock_state_dir, write_lock_pid
from .table import clean

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


class StateDB(
    Store, JobTable, FindingTable, DeliveryTable, ActionTable, MetaTable, ProcTable, Retention
):
    """The state database: :class:`~watchdog.state.store.Store` (the lock, the
    connection, transactions, recovery) with every table's queries, all on the store's
    one connection per thread.

    Constructed as :class:`~watchdog.state.store.Store`: same argument, attributes and
    errors (:class:`StateError` when the directory or database cannot be used).

    The tables are mixins rather than objects the store holds (``db.findings.open()``)
    so that every caller keeps calling ``db.open_findings()``: one concept per module
    without touching the code that uses the store.
    """
