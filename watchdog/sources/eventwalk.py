"""Which processes a scan re-reads: every one (a walk of ``/proc``), or only what the
kernel's process events named since the last scan (issue 34, item 1).

With the proc connector up and no event lost, a process's record can change in only a
few ways the kernel does not report, and each is covered:

* a new process: its fork event names it (a thread's fork does not count);
* a new program: its exec event names it (``python3`` → ``python3 train.py``);
* a new owner or session: its uid or sid event names it;
* its end: its exit event names it; it stays a zombie until its parent reaps it, which
  sends no event, so every zombie (and every record an exec event kept for a process
  already gone, state ``X``) is read again each scan until it is gone;
* a new parent: only when its parent ends (re-parenting to PID 1 or a subreaper), so
  the children of every process that ended are read again;
* a job member, its lineage and every process NVML lists (``ProcessTable.watched``):
  read again every scan, as the full walk does.

What no event reports (a process group changed with ``setpgid``, a command line rewritten
in place, a ``comm`` set with ``prctl``) the full walk catches: it runs every
``daemon.reconcile_interval_s`` and reads every stat line then (polling catches these
within the rotating stat re-read, about 30 s), at once after lost events (``ENOBUFS``), a
reader that stopped, a queue that overflowed, a blind GPU source or a GPU process the
table lacked, and on every scan while events are unavailable. So the event path never
misses for longer than the reconcile interval what a full walk would see.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .procfs import ProcessTable

if TYPE_CHECKING:
    from .procevents import EventBatch

#: Default of ``daemon.reconcile_interval_s``.
RECONCILE_INTERVAL_S = 30.0
# States of a process that ended (proc(5): zombie; X: a record kept from exec time).
_GONE = frozenset({"Z", "X"})


class EventWalk:
    """Refreshes a :class:`ProcessTable` by a full walk or by the PIDs events named.

    Args:
        reconcile_interval_s: Longest time between two full walks while events are
            complete, seconds.
    """

    def __init__(self, reconcile_interval_s: float = RECONCILE_INTERVAL_S) -> None:
        self.reconcile_interval_s = reconcile_interval_s
        self.full_walks = 0
        self.event_walks = 0
        self.pids_read = 0  # PIDs the event walks named (reads), for status and benches
        self.last_full_reason: str | None = None
        self._last_full: float | None = None
        self._due: str | None = "first scan"
        # Zombies and records kept from exec time (state X): read each scan until gone.
        self._pending: set[int] = set()
        self._blind = False

    def carry(self, previous: EventWalk, reason: str) -> None:
        """Go on from ``previous``, the walk of the scanner a config reload replaced: its
        counts and its last walk's reason stand, and this walk's first refresh is a
        full walk for ``reason`` (its table starts empty). Before, ``status`` after a
        reload said ``last: first scan`` of a daemon scanning for hours.

        Args:
            previous: The replaced scanner's walk.
            reason: Why this walk's first refresh walks, for ``status``.
        """
        self.full_walks, self.event_walks = previous.full_walks, previous.event_walks
        self.pids_read = previous.pids_read
        self.last_full_reason = previous.last_full_reason
        self._blind = previous._blind
        self._due = reason

    def due(self, reason: str) -> None:
        """Make the next refresh a full walk.

        Args:
            reason: Why, for ``status`` (the first reason since the last walk is kept).
        """
        if self._due is None:
            self._due = reason

    def refresh(self, table: ProcessTable, batch: EventBatch | None, now: float) -> bool:
        """Refresh ``table`` for this scan.

        Args:
            table: The scanner's table (``reinspect`` already applied for the batch).
            batch: The events since the last scan; None without an event feed.
            now: ``time.monotonic()``.

        Returns:
            True when this was a full walk of ``proc_root``.
        """
        reason = self._due
        if batch is None or not batch.complete:
            reason = "process events unavailable"
        elif batch.full_sweep:
            reason = reason or "process events lost"
        elif self._last_full is None:
            reason = reason or "events back"
        elif now - self._last_full >= self.reconcile_interval_s:
            reason = reason or "reconcile"
        if reason is not None:
            if reason != "process events unavailable" and self._last_full is not None:
                # Whatever no event reports (pgid, comm, a rewritten command line) is
                # caught now: every stat line is read, not a rotating slice of them.
                table.restat_all()
            table.refresh()
            if reason == "process events unavailable":
                # Polling: every scan walks, as without events; should a complete feed
                # follow, its first scan walks too (the zombies are gathered then).
                self._last_full, self._pending = None, set()
                return False
            self._last_full, self._due = now, None
            self._pending = {p for p, proc in table.procs.items() if proc.state in _GONE}
            self.last_full_reason = reason
            self.full_walks += 1
            return True
        assert batch is not None
        named = batch.forked | batch.ended | batch.reinspect
        if ended := batch.ended:
            # Re-parented: no event says so. The children index is kept current from
            # what each refresh changed (ProcessTable.children), so this reads the
            # ended processes' children, not every record (issue 34, item 1).
            for pid in ended:
                named.update(table.children(pid))
        only = named | self._pending | table.watched
        table.refresh(only)
        self.event_walks += 1
        self.pids_read += len(only)
        procs = table.procs
        self._pending = {
            p for p in only | table.new_pids if (proc := procs.get(p)) and proc.state in _GONE
        }
        return False

    def kept(self, pids: Iterable[int]) -> None:
        """Records an exec event kept for processes already gone (``add_exited``): read
        again next scan, which drops them."""
        self._pending.update(pids)

    def after_gpu(self, blind: bool, pids: Iterable[int], table: ProcessTable) -> None:
        """What NVML showed this scan: a GPU source that turned blind, or a PID it lists
        that the table lacks (the events missed a process, or it is hidden), makes the
        next refresh a full walk.

        Args:
            blind: Some GPU's processes could not be listed.
            pids: PIDs NVML lists.
            table: The refreshed table.
        """
        if blind and not self._blind:
            self.due("a GPU source turned blind")
        self._blind = blind
        procs = table.procs
        if any(pid not in procs for pid in pids):
            self.due("a GPU process the table lacked")

    def status(self) -> dict[str, Any]:
        """The walk's share of the ``events`` status object (docs/status.md)."""
        return {
            "reconcile_interval_s": self.reconcile_interval_s,
            "full_walks": self.full_walks,
            "event_walks": self.event_walks,
            "last_full_walk_reason": self.last_full_reason,
        }
