"""The copies a job's ``terminate`` takes in, and one restart answer over all of them.

``terminate`` stops, beside a job's own processes, every process of the job's program and
owner in a process group or session whose leader is gone or the job's (a copy it left
behind: the workers of a killed torchrun; ``actions/terminate.py``, ``JobTree._in_scope``).
Such a copy may be a job of the scan with a lineage of its own: a script that started
``nohup python3 train.py &`` and ``nohup bash -c 'while true; do python3 train.py; sleep
5; done' &`` and exited leaves two trainers in its group, the second below a loop. What
the job's terminate does, and whether the job comes back after it, is then the answer
over every instance (the user's case: ``outcome: ok``, and the loop started it again 5 s
later). :class:`ScopeCopies` finds them as the terminate will; :func:`most_restarting`
picks the answer that says the most of a return.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Sequence

from ..lineage.base import exe_name, is_wrapper, program_of
from ..model import Job, Proc, Restarts
from ..sources.procfs import ProcessTable

_Key = tuple[int | None, tuple[str, ...], str, int]
_SHELLS = frozenset({"sh", "dash", "bash", "zsh", "ksh", "mksh", "ash", "busybox"})


#: Per process table: the mark of :meth:`ProcessTable.read_since` and the PIDs of its
#: shells then. Kept beside the table (not in it: a policy's question) and brought up to
#: date from the records read again since, as the daemon's other filters are (issue 34).
_SHELL_PIDS: weakref.WeakKeyDictionary[ProcessTable, tuple[int, frozenset[int]]] = (
    weakref.WeakKeyDictionary()
)


def shell_pids(table: ProcessTable) -> frozenset[int]:
    """The PIDs of ``table``'s shells (by executable name: bash, sh, dash...), as of its
    last refresh. Each scan's advice asks; a walk of every record answered at first, and
    then only the records read again since (``read_since``): the walk cost 2.6 ms a tick
    at 10,000 processes (an executable name each), the update a few microseconds."""
    kept = _SHELL_PIDS.get(table)
    since = table.read_since(kept[0]) if kept is not None else None
    procs = table.procs
    if kept is None or since is None:
        pids = frozenset(pid for pid, p in procs.items() if exe_name(p) in _SHELLS)
    elif since:
        fresh = {
            pid for pid in since if (p := procs.get(pid)) is not None and exe_name(p) in _SHELLS
        }
        pids = frozenset((kept[1] - since) | fresh)
    else:
        pids = kept[1]
    _SHELL_PIDS[table] = (table.reads_changed, pids)
    return pids


class ScopeCopies:
    """The scan's jobs indexed by what ``terminate``'s scope matches them on: owner,
    program (:func:`~watchdog.lineage.base.program_of`), and process group or session.

    Args:
        jobs: The scan's jobs.
        table: The process table they were built from.
    """

    def __init__(self, jobs: Sequence[Job], table: ProcessTable) -> None:
        self.table = table
        self._index: dict[_Key, list[Job]] = {}
        # (owner, "pgid"/"sid", leader) -> the shells there, built on first use.
        self._shells: dict[tuple[int | None, str, int], list[Proc]] | None = None
        for job in jobs:
            root = table.get(job.root_pid)
            if root is None or is_wrapper(root):
                continue
            program = program_of(root.cmdline)
            for kind, leader in _groups(root):
                self._index.setdefault((root.uid, program, kind, leader), []).append(job)

    def copies_in(self, job: Job, stop_pids: Collection[int]) -> list[tuple[Job, str, int]]:
        """The other jobs whose roots ``job``'s terminate takes in as copies: of its
        root's program and owner, in a process group or session of one of
        ``stop_pids`` (its processes and exclusive wrappers) whose leader is one of
        them or gone. In scan order; empty when there are none. Each with where the
        terminate takes it from: ``(copy, kind, leader)``, ``kind`` ``pgid`` or ``sid``
        and ``leader`` that group's or session's leader (the first of the two that
        matches), as the words name it.

        Args:
            job: A job of the scan.
            stop_pids: What its terminate stops of its own (``Advice.stop_pids``).
        """
        root = self.table.get(job.root_pid)
        if root is None:
            return []
        program = program_of(root.cmdline)
        seen: dict[int, tuple[Job, str, int]] = {}
        for kind, leader in self._scope(stop_pids):
            for other in self._index.get((root.uid, program, kind, leader), ()):
                if other.root_pid != job.root_pid:
                    seen.setdefault(other.root_pid, (other, kind, leader))
        return list(seen.values())

    def shells(self, job: Job, stop_pids: Collection[int]) -> list[Proc]:
        """The shells of ``job``'s owner in the process groups and sessions its terminate
        takes copies from (:meth:`copies`' rule) that it does not stop: a loop there
        between two runs of a copy (in its ``sleep``, no copy running) starts one again
        after the terminate. By PID; empty when there are none.

        Args:
            job: A job of the scan.
            stop_pids: What its terminate stops (with its copies').
        """
        root = self.table.get(job.root_pid)
        where = self._scope(stop_pids)
        if root is None or not where:
            return []  # (most jobs: a cron line's, a unit's, a login's; no table walk)
        if self._shells is None:
            self._shells = {}
            procs = self.table.procs
            for pid in shell_pids(self.table):
                proc = procs.get(pid)
                if proc is None or proc.is_zombie:
                    continue
                for kind, leader in _groups(proc):
                    self._shells.setdefault((proc.uid, kind, leader), []).append(proc)
        mine = set(stop_pids)
        found = {
            shell.pid: shell
            for kind, leader in where
            for shell in self._shells.get((root.uid, kind, leader), ())
            if shell.pid not in mine
        }
        return [found[pid] for pid in sorted(found)]

    def _scope(self, stop_pids: Collection[int]) -> list[tuple[str, int]]:
        """``(kind, leader)`` of each process group and session of ``stop_pids`` whose
        leader is one of them or gone: where ``terminate`` takes copies in."""
        mine = set(stop_pids)
        procs = [p for pid in stop_pids if (p := self.table.get(pid)) is not None]
        found = {group for p in procs for group in _groups(p)}
        return [
            (kind, leader)
            for kind, leader in sorted(found)
            if leader in mine or self.table.get(leader) is None
        ]


def _groups(proc: Proc) -> list[tuple[str, int]]:
    """``(kind, leader)`` of the process group and the session ``proc`` is in, each whose
    leader is a process (above 1: none is PID 0's, and init's are everyone's)."""
    return [
        (kind, leader) for kind, leader in (("pgid", proc.pgid), ("sid", proc.sid)) if leader > 1
    ]


def _weight(answer: Restarts | None) -> int:
    """How much of a return an answer says: nothing (0), a loop the terminate stops with
    the job (1), that it may come back (2), that it comes back (3)."""
    if answer is None:
        return 0
    if not answer.after_terminate:
        return 1
    return 3 if answer.known else 2


def most_restarting(answers: Sequence[Restarts | None]) -> Restarts | None:
    """The restart answer for instances stopped together: the one that says the most of
    a return (it comes back, over it may, over a loop stopped with it, over nothing), the
    first of equals (the job's own before its copies'). None when every one is None.

    Args:
        answers: Each instance's answer (:func:`~watchdog.policy.guard.restarts_of`),
            the job's own first.
    """
    return max(answers, key=_weight, default=None)
