"""The state database: the store with every table's queries (:class:`StateDB`)."""

from __future__ import annotations

from .actions import ActionTable
from .deliveries import DeliveryTable
from .findings import FindingTable
from .jobs import JobTable
from .meta import MetaTable
from .procs import ProcTable
from .prune import Retention
from .store import Store


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
