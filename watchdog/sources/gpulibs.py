"""GPU-capable processes: which ones have the CUDA driver or a CUDA framework mapped.

A process that has mapped ``libcuda.so`` (the driver API), ``libcudart.so`` (the CUDA
runtime), ``libtorch_cuda.so`` or ``libnccl.so`` can start using a GPU at any moment,
whatever its script is called (``run.py``). ``/proc/PID/maps`` (proc(5)) lists every
file mapping with its path in the sixth column; a shared object shows up there as soon
as the dynamic loader or ``dlopen(3)`` maps it, long before the first CUDA call opens
``/dev/nvidia*`` or NVML lists the process.

Maps files are large (a PyTorch process maps well over a thousand regions), so they are
read only for identities (PID + start time) that are new: at their first sighting and,
because Python imports CUDA libraries seconds after ``execve``, again at most once a
second for ``recheck_s`` after it. Only the first scan of a fresh cache (a daemon that
starts on a busy host meets thousands of processes at once) skips the re-reads of the
processes already older than ``recheck_s``: the late import they wait for happens near
a process's start. A hit is kept for the life of the identity.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence

from ..model import Proc
from .procfs import ProcessTable

# A maps file is read up to this size; the libraries a process maps first sit near the
# top, and an unbounded read of a pathological maps file would stall the scan.
MAX_MAPS_BYTES = 8 << 20
_HZ = os.sysconf("SC_CLK_TCK")  # the unit of a stat file's start time (proc(5))


def library_pattern(names: Sequence[str]) -> re.Pattern[bytes] | None:
    """A pattern finding ``/NAME`` followed by a version suffix (``.12``), the end of
    the line, or `` (deleted)`` in maps text; None when ``names`` is empty."""
    if not names:
        return None
    alternation = b"|".join(re.escape(n.encode()) for n in names)
    return re.compile(rb"/(" + alternation + rb")(?=[.\n ]|$)")


def mapped_libraries(
    proc_root: str, pid: int, pattern: re.Pattern[bytes]
) -> tuple[str, ...] | None:
    """The listed libraries ``pid`` has mapped.

    Args:
        proc_root: procfs mount.
        pid: Process to look at.
        pattern: From :func:`library_pattern`.

    Returns:
        Sorted library names (as configured, without version suffix); empty when none
        is mapped; None when ``/proc/PID/maps`` is unreadable (exited, or another
        user's process without CAP_SYS_PTRACE).
    """
    try:
        fd = os.open(f"{proc_root}/{pid}/maps", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        while size < MAX_MAPS_BYTES and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    # Almost no process maps a GPU library, and the first scan reads every process's
    # maps: one search (re finds the names' common prefix, "/lib" by default, at C
    # speed) answers most; one substring test per name took three times as long
    # (docs/performance.md). Only a text with a match is gone through for all of them.
    first = pattern.search(data)
    if first is None:
        return ()
    return tuple(sorted({m.group(1).decode() for m in pattern.finditer(data, first.start())}))


class GpuLibraryCache:
    """Per-identity memory of which processes have GPU libraries mapped.

    Args:
        names: Library names (``training.gpu_libraries``); empty disables the check.
        recheck_s: How long after its first sighting an identity's maps are read again
            (at most once a second), for libraries loaded after ``execve``. At the first
            scan of a fresh cache, only for processes younger than this (age from
            ``CLOCK_BOOTTIME`` and the ``/proc/PID/stat`` start time, proc(5); on a
            tree that is not procfs the age is unknown and counts as young).
    """

    def __init__(self, names: Sequence[str], recheck_s: float = 10.0) -> None:
        self.names = tuple(names)
        self.pattern = library_pattern(self.names)
        self.recheck_s = recheck_s
        self.reads = 0
        # pid -> (start_ticks, first seen, last read, libraries found). Keyed by PID with
        # the start in the entry, so a tick keeps an unchanged entry as it is instead of
        # allocating a key per process: 4,096 workers' worth of one-tick objects a tick
        # fragmented the heap that their end should have given back (issue 32, case 8).
        self._seen: dict[int, tuple[int, float, float, tuple[str, ...]]] = {}
        self._primed = False  # the first scan (every process at once) is done
        # Kept between calls so that a call after a refresh looks only at what changed
        # (issue 34, item 1: an exec pass costs what the events named, not the host's
        # process count): PID -> libraries of every holder; the PIDs still inside their
        # re-read window with nothing found; the table and refresh last looked at.
        self._hits: dict[int, tuple[str, ...]] = {}
        self._young: set[int] = set()
        self._noted: set[int] = set()
        self._table: ProcessTable | None = None
        self._skip: Callable[[Proc], bool] | None = None
        self._generation = -1
        # False: every call loops over the whole table (the trust simulator's twin
        # scanner, the oracle the incremental answer is compared with).
        self.incremental = True

    def adopt(self, other: GpuLibraryCache) -> None:
        """Carry over what ``other`` knows (a reload builds a new scanner: its processes
        are not new), when both look for the same libraries."""
        if other.names == self.names:
            self._seen = dict(other._seen)
            self._primed = other._primed
            # (the table is new to this cache: its first call looks at every process)

    def note(self, pid: int, start_ticks: int, libraries: Sequence[str], now: float) -> None:
        """Record a hit found elsewhere (the event source reads maps after ``execve``)."""
        if libraries:
            self._seen[pid] = (start_ticks, now, now, tuple(libraries))
            self._noted.add(pid)  # looked at again by the next call, as a changed PID

    def holders(
        self, table: ProcessTable, now: float, skip: Callable[[Proc], bool] | None = None
    ) -> dict[int, tuple[str, ...]]:
        """PID → mapped GPU libraries, for every process in ``table`` that has any.

        Args:
            table: Refreshed process table.
            now: Monotonic seconds.
            skip: Processes whose maps cannot change the answer, never read (a wrapper:
                a shell has nothing to run on a GPU, and the scan counts no library it
                maps, issue 34 item 2). Nothing is kept for them, so one that execs into
                another program is read at its next sighting.
        """
        if self.pattern is None:
            return {}
        if (
            self.incremental
            and self._primed
            and self._table is table
            and self._skip is skip
            and table.generation - self._generation in (0, 1)
        ):
            # Every record the last call saw and the table did not replace since is the
            # same object: what the loop below would decide for it is decided already,
            # but for a re-read falling due (the young ones). So only the PIDs the
            # refresh changed or removed, the events' hits and the young are looked at:
            # the same answer as the whole loop, for the same ``skip`` (a record is all
            # it reads; tests/unit/test_incremental_scan.py compares them).
            todo = table.changed | table.removed | self._noted | self._young
            self._noted = set()
            self._generation = table.generation
            for pid in todo:
                self._look(table, pid, table.procs.get(pid), now, None, skip)
            return dict(self._hits)
        seen = self._seen
        # Ages matter only at the first scan; CLOCK_BOOTTIME is the clock of the stat
        # file's start time (boot-relative, in clock ticks), immune to wall-clock steps.
        boot_s = None
        if not self._primed and table.trust_inodes:
            boot_s = time.clock_gettime(time.CLOCK_BOOTTIME)
        self._primed = True
        self._table, self._generation, self._skip = table, table.generation, skip
        self._noted, self._young, self._hits = set(), set(), {}
        self._seen = {}
        for pid, proc in table.procs.items():
            self._look(table, pid, proc, now, boot_s, skip, seen)
        return dict(self._hits)

    def _look(
        self,
        table: ProcessTable,
        pid: int,
        proc: Proc | None,
        now: float,
        boot_s: float | None,
        skip: Callable[[Proc], bool] | None,
        seen: dict[int, tuple[int, float, float, tuple[str, ...]]] | None = None,
    ) -> None:
        """Decide one PID: its entry read, re-read, kept or dropped, and whether it
        holds libraries. ``seen``: the entries of the last call (a whole loop builds
        ``_seen`` anew from it); None updates ``_seen`` in place."""
        if seen is None:
            seen = self._seen
        if (
            proc is None
            or proc.kernel_thread
            or proc.is_zombie
            or (skip is not None and skip(proc))
        ):
            self._seen.pop(pid, None)
            self._hits.pop(pid, None)
            self._young.discard(pid)
            return
        start = proc.start_ticks
        entry = seen.get(pid)
        if entry is None or entry[0] != start:
            young = boot_s is None or boot_s - start / _HZ < self.recheck_s
            # An old process's window is over at once: it was read, nothing more.
            entry = self._read(
                table.proc_root, pid, start, now if young else now - self.recheck_s, now
            )
        elif not entry[3] and now - entry[1] < self.recheck_s and now - entry[2] >= 1.0:
            entry = self._read(table.proc_root, pid, start, entry[1], now)
        self._seen[pid] = entry
        if entry[3]:
            self._hits[pid] = entry[3]
            self._young.discard(pid)
        else:
            self._hits.pop(pid, None)
            if now - entry[1] < self.recheck_s:
                self._young.add(pid)
            else:
                self._young.discard(pid)

    def _read(
        self, proc_root: str, pid: int, start: int, first: float, now: float
    ) -> tuple[int, float, float, tuple[str, ...]]:
        assert self.pattern is not None
        self.reads += 1
        libs = mapped_libraries(proc_root, pid, self.pattern) or ()
        return (start, first, now, libs)
