"""Benchmark: the proc-events reader's cost per datagram, warm, without a storm.

Synthetic proc connector messages (fork, exec and exit of PIDs that do not exist, so
the exec's ``cmdline`` open fails as it does for most of a ``/bin/true`` storm) are
sent over an ``AF_UNIX`` datagram socketpair and read back by
``ProcEventSource._read_all``, the reader thread's own round; the thread's CPU
(``time.thread_time``) per datagram is printed, median over rounds. What this leaves
out is what a storm adds: waking the thread (bench/storm_thread.py).

Usage::

    python bench/event_reader_micro.py [ROUNDS]
"""

from __future__ import annotations

import socket
import statistics
import struct
import sys
import time

from rogue_watchdog.config import Config
from rogue_watchdog.sources import procevents as pe

_HDR = struct.Struct("=IHHII")
_CN = struct.Struct("=IIIIHH")
_EV = struct.Struct("=IIQ")


def message(what: int, data: bytes) -> bytes:
    """One netlink message as the kernel sends it (the event_data union is 24 bytes)."""
    body = _EV.pack(what, 0, 0) + data.ljust(24, b"\0")
    cn = _CN.pack(1, 1, 0, 0, len(body), 0) + body
    return _HDR.pack(16 + len(cn), 3, 0, 0, 0) + cn


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    source = pe.ProcEventSource("/proc", lambda _p: False, Config().training.gpu_libraries)
    datagrams = []
    for i in range(300):
        pid = 4190000 + i  # above any PID here: the exec's open fails
        datagrams.append(message(pe.PROC_EVENT_FORK, struct.pack("=IIII", 1, 1, pid, pid)))
        datagrams.append(message(pe.PROC_EVENT_EXEC, struct.pack("=II", pid, pid)))
        datagrams.append(message(pe.PROC_EVENT_EXIT, struct.pack("=IIII", pid, pid, 0, 17)))
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    b.setblocking(False)
    buf = bytearray(pe.RECV_BYTES)
    per = []
    for _ in range(rounds):
        for d in datagrams:
            a.send(d)
        started, n = time.thread_time(), 0
        while read := source._read_all(b, buf):  # type: ignore[arg-type]
            n += read
        per.append((time.thread_time() - started) / n * 1e6)
        with source._lock:
            source._batch = pe.EventBatch()
    print(f"{statistics.median(per):.2f} µs per datagram (median of {len(per)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
