"""Reading ``/proc/PID/maps`` against ``PROCMAP_QUERY`` (issue 34, item 2): the CPU per
process of each way to learn which files a process maps, over every process on this
host.

``PROCMAP_QUERY`` (Linux 6.11+, ``include/uapi/linux/fs.h``) is an ``ioctl`` on the maps
file answering one VMA per call; with ``PROCMAP_QUERY_FILE_BACKED_VMA`` and
``PROCMAP_QUERY_COVERING_OR_NEXT_VMA`` it walks the file-backed VMAs, and with
``PROCMAP_QUERY_VMA_EXECUTABLE`` only the executable ones. The scan reads the maps text
and searches it once (``watchdog/sources/gpulibs.py: mapped_libraries``); this measures
whether the ioctl would be cheaper from Python (docs/performance.md, session h).

Usage (root, to read every process's maps)::

    python bench/maps_query.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import os
import re
import struct
import sys
from collections.abc import Callable

# struct procmap_query: size, query_flags, query_addr, vma_start, vma_end, vma_flags,
# vma_page_size, vma_offset, inode (u64 each), dev_major, dev_minor, vma_name_size,
# build_id_size (u32 each), vma_name_addr, build_id_addr (u64 each).
_QUERY = struct.Struct("=QQQQQQQQQIIIIQQ")
# _IOWR('f', 17, struct procmap_query)
PROCMAP_QUERY = 0xC0000000 | (_QUERY.size << 16) | (ord("f") << 8) | 17
VMA_EXECUTABLE = 0x04
COVERING_OR_NEXT_VMA = 0x10
FILE_BACKED_VMA = 0x20
NAME_BYTES = 4096

LIBRARIES = re.compile(rb"/(libcuda\.so|libcudart\.so|libtorch_cuda\.so|libnccl\.so)(?=[.\n ]|$)")


def read_maps(pid: int) -> bool:
    """The scan's way: the whole maps text, one search."""
    fd = os.open(f"/proc/{pid}/maps", os.O_RDONLY | os.O_CLOEXEC)
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return LIBRARIES.search(b"".join(chunks)) is not None


def query(pid: int, flags: int, name: ctypes.Array[ctypes.c_char] | None) -> int:
    """Walk the VMAs ``flags`` select with ``PROCMAP_QUERY``; their count."""
    addr = ctypes.addressof(name) if name is not None else 0
    size = NAME_BYTES if name is not None else 0
    fd = os.open(f"/proc/{pid}/maps", os.O_RDONLY | os.O_CLOEXEC)
    count, start = 0, 0
    try:
        while True:
            buf = bytearray(
                _QUERY.pack(
                    _QUERY.size, COVERING_OR_NEXT_VMA | FILE_BACKED_VMA | flags, start,
                    0, 0, 0, 0, 0, 0, 0, 0, size, 0, addr, 0,
                )
            )  # fmt: skip
            try:
                fcntl.ioctl(fd, PROCMAP_QUERY, buf, True)
            except OSError:  # ENOENT: no VMA at or after start
                return count
            fields = _QUERY.unpack(buf)
            if name is not None:
                LIBRARIES.search(name.raw[: max(fields[11] - 1, 0)] + b"\n")
            count += 1
            start = fields[4]  # vma_end
    finally:
        os.close(fd)


def measure(label: str, pids: list[int], look: Callable[[int], object]) -> None:
    before, done, vmas = os.times(), 0, 0
    for pid in pids:
        try:
            got = look(pid)
        except OSError:
            continue
        done += 1
        vmas += got if isinstance(got, int) and not isinstance(got, bool) else 0
    after = os.times()
    per = 1e6 / max(done, 1)
    print(
        f"{label:44s} user {(after.user - before.user) * per:5.1f} µs, system "
        f"{(after.system - before.system) * per:5.1f} µs per process"
        + (f"; {vmas / max(done, 1):.1f} VMAs each" if vmas else "")
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    name = ctypes.create_string_buffer(NAME_BYTES)
    print(f"{len(pids)} processes; {os.uname().release}; load average {os.getloadavg()}")
    for _ in range(args.rounds):
        measure("maps text, one search (the scan)", pids, read_maps)
        measure("PROCMAP_QUERY file-backed VMAs, names", pids, lambda p: query(p, 0, name))
        measure(
            "PROCMAP_QUERY executable file-backed, names",
            pids,
            lambda p: query(p, VMA_EXECUTABLE, name),
        )
        measure("PROCMAP_QUERY file-backed VMAs, no names", pids, lambda p: query(p, 0, None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
