"""The one-shot ``scan``'s maps reads, started before its imports (issue 34, item 2).

Reading every process's ``/proc/PID/maps`` is the largest part of a one-shot's reads
(about 40 µs of kernel time per process) and its imports are the largest part of its
Python; the kernel work needs no lock of the interpreter, so a thread started first
reads the maps while the main thread imports and loads the configuration. What it
found is used only for the same process (PID and start time), the same procfs mount and
the same library names (:data:`NAMES`, the default ``training.gpu_libraries``); else
the scan reads as before.

Each process is read through an open ``/proc/PID`` directory: its ``stat`` (the start
time) and its ``maps`` then belong to one process even if the PID is reused meanwhile
(entries of a directory whose process has exited cannot be opened).

This module imports only the standard library: it runs before anything else loads.
"""

from __future__ import annotations

import os
import re
import threading

# The default training.gpu_libraries (watchdog/config: DEFAULT_GPU_LIBRARIES, checked
# equal by tests/unit/test_oneshot_reads.py); another configured list reads as before.
NAMES: tuple[str, ...] = ("libcuda.so", "libcudart.so", "libtorch_cuda.so", "libnccl.so")
# As watchdog/sources/gpulibs.py: library_pattern, library_needles, MAX_MAPS_BYTES.
_PATTERN = re.compile(rb"/(" + b"|".join(re.escape(n.encode()) for n in NAMES) + rb")(?=[.\n ]|$)")
_NEEDLES = tuple(b"/" + n.encode() for n in NAMES)
_MAX_MAPS_BYTES = 8 << 20
_PF_KTHREAD = 0x00200000


class MapsAhead:
    """A thread reading every process's GPU libraries under ``proc_root`` now.

    Args:
        proc_root: procfs mount.
    """

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self._found: dict[int, tuple[int, tuple[str, ...]]] = {}
        self._thread = threading.Thread(target=self._run, name="maps-ahead", daemon=True)
        self._thread.start()

    def result(
        self, proc_root: str, names: tuple[str, ...]
    ) -> dict[int, tuple[int, tuple[str, ...]]] | None:
        """PID → (start ticks, GPU libraries mapped) once the thread is done; None when
        it read another procfs mount or looked for other names than ``names``."""
        self._thread.join()
        if proc_root != self.proc_root or tuple(names) != NAMES:
            return None
        return self._found

    def _run(self) -> None:
        found = self._found
        root = self.proc_root
        try:
            names = [e.name for e in os.scandir(root) if e.name.isdigit()]
        except OSError:
            return
        flags = os.O_RDONLY | os.O_CLOEXEC
        for name in names:
            try:
                dfd = os.open(f"{root}/{name}", flags | os.O_DIRECTORY)
            except OSError:
                continue
            try:
                entry = _read(dfd, flags)
            except (OSError, ValueError, IndexError):
                entry = None
            finally:
                os.close(dfd)
            if entry is not None:
                found[int(name)] = entry


def _read(dfd: int, flags: int) -> tuple[int, tuple[str, ...]] | None:
    """(start ticks, libraries) of the process of directory ``dfd``; None for a kernel
    thread or a zombie (the scan reads no maps of either) or unreadable maps."""
    fd = os.open("stat", flags, dir_fd=dfd)
    try:
        stat = os.read(fd, 4096)
    finally:
        os.close(fd)
    fields = stat[stat.rfind(b")") + 2 :].split()
    # proc(5): state is field 3, flags field 9, starttime field 22 (from the state on).
    if fields[0] == b"Z" or int(fields[6]) & _PF_KTHREAD:
        return None
    start = int(fields[19])
    fd = os.open("maps", flags, dir_fd=dfd)
    chunks: list[bytes] = []
    size = 0
    try:
        while size < _MAX_MAPS_BYTES and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if not any(n in data for n in _NEEDLES):
        return start, ()
    return start, tuple(sorted({m.group(1).decode() for m in _PATTERN.finditer(data)}))
