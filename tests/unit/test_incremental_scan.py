"""The scan's whole-table answers kept current from what changed (issue 34, item 1): the
children index of the process table and the GPU-library holders are brought up to date
from the PIDs a refresh changed or removed (with kernel events: what the events named),
so an exec pass costs what the events named, not the host's process count. Each is
compared with the same answer computed anew from the same records, over real processes
that fork, exec, exit and are re-parented, through whole and event-named refreshes."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

from rogue_watchdog.lineage.base import is_wrapper
from rogue_watchdog.sources.gpulibs import GpuLibraryCache
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import Spawned, need_program, poll

# A parent that forks two sleeping children and waits.
FAMILY = "sleep 60 & sleep 60 & wait"


def _rebuilt(table: ProcessTable) -> dict[int, list[int]]:
    """The children index built anew from the table's records, as the first call does."""
    kids: dict[int, list[int]] = {}
    for pid in sorted(table.procs):
        kids.setdefault(table.procs[pid].ppid, []).append(pid)
    return kids


def _same_children(table: ProcessTable) -> None:
    want = _rebuilt(table)
    for pid in {*want, *table.procs}:
        assert table.children(pid) == want.get(pid, []), pid


def _kids(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def test_the_kept_children_index_is_the_rebuilt_one(spawned: Spawned) -> None:
    table = ProcessTable("/proc")
    table.refresh()
    _same_children(table)  # built once
    parent = spawned.start(["bash", "-c", FAMILY])
    kids = poll("two children", lambda: len(_kids(parent.pid)) == 2 and _kids(parent.pid), 10)
    # Event-named refreshes (fork and exec named), then a whole one.
    table.refresh([parent.pid, *kids])
    _same_children(table)
    assert table.children(parent.pid) == sorted(kids)
    os.kill(kids[0], signal.SIGKILL)  # a zombie until bash reaps it, then gone
    poll("the child gone", lambda: kids[0] not in _kids(parent.pid), 10)
    table.refresh([kids[0], parent.pid])
    _same_children(table)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(10)
    # The other child is re-parented (no event says so: the ended parent's children are
    # named, as EventWalk names them).
    table.refresh([parent.pid, kids[1]])
    _same_children(table)
    assert kids[1] not in table.children(parent.pid)
    table.refresh()  # a whole walk: everything the host did meanwhile
    _same_children(table)
    # A record kept from exec time for a process gone before it was read (state X).
    gone = table.read(os.getpid())
    assert gone is not None
    table.add_exited([dataclasses.replace(gone, pid=2**22 + 7, ppid=os.getpid())])
    _same_children(table)
    assert 2**22 + 7 in table.children(os.getpid())
    table.refresh([2**22 + 7])  # dropped again
    _same_children(table)
    assert 2**22 + 7 not in table.children(os.getpid())
    os.kill(kids[1], signal.SIGKILL)


def _library(tmp_path: Path) -> Path:
    need_program("gcc")
    (tmp_path / "cuda.c").write_text("int cuInit(unsigned int f) { (void)f; return 0; }\n")
    lib = tmp_path / "libcuda.so.1"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "cuda.c")], check=True
    )
    return lib


def _entries(cache: GpuLibraryCache) -> dict[int, tuple[int, float, float, tuple[str, ...]]]:
    """What decides the answer now and later: start, first seen, last read, libraries
    (the young are re-read at the same moments)."""
    return dict(cache._seen)


def test_the_kept_gpu_library_answer_is_the_whole_loops(spawned: Spawned, tmp_path: Path) -> None:
    lib = _library(tmp_path)
    ready = tmp_path / "ready"
    # A process that has the library mapped from its start, and plain ones.
    code = f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
    table = ProcessTable("/proc")
    table.refresh()
    kept = GpuLibraryCache(("libcuda.so",), recheck_s=3.0)
    whole = GpuLibraryCache(("libcuda.so",), recheck_s=3.0)
    whole.incremental = False

    def both(now: float) -> dict[int, tuple[str, ...]]:
        a = kept.holders(table, now, skip=is_wrapper)
        b = whole.holders(table, now, skip=is_wrapper)
        assert a == b
        assert _entries(kept) == _entries(whole)
        return a

    both(100.0)
    holder = spawned.start(
        [sys.executable, "-c", code], env={"LD_PRELOAD": str(lib), "PATH": "/usr/bin:/bin"}
    )
    plain = spawned.start(["sleep", "60"])
    poll("python to run", ready.exists, 20)
    table.refresh([holder.pid, plain.pid])  # their fork and exec named
    assert both(100.5)[holder.pid] == ("libcuda.so",)
    # The same refresh asked again, then later ones inside and past the re-read window
    # (the young are re-read at most once a second, whatever else changed).
    both(100.7)
    for now in (101.6, 102.0, 102.9, 104.0, 107.0):
        table.refresh([plain.pid])
        both(now)
    plain.kill()
    plain.wait(10)
    table.refresh([plain.pid])  # its exit named: dropped
    assert plain.pid not in both(108.0)
    table.refresh()  # a whole walk
    both(109.0)
    # An event source's hit (maps read after the exec) is taken as a changed PID's.
    kept.note(holder.pid, table.procs[holder.pid].start_ticks, ("libcuda.so",), 110.0)
    whole.note(holder.pid, table.procs[holder.pid].start_ticks, ("libcuda.so",), 110.0)
    table.refresh([holder.pid])
    both(110.0)
    # Another ``skip`` is another question: every process is looked at again.
    assert kept.holders(table, 110.0) == whole.holders(table, 110.0)
