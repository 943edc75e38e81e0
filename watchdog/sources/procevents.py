"""Kernel process events from the proc connector: see an ``execve`` as it happens.

The kernel's proc connector (``NETLINK_CONNECTOR``, group ``CN_IDX_PROC``;
include/uapi/linux/cn_proc.h) multicasts one message per fork, exec, exit and uid/sid
change of every task on the host. :func:`open_proc_connector` opens the socket, binds
the group and sends the ``PROC_CN_MCAST_LISTEN`` subscription; the messages are then read
in this module's thread and decoded with ``struct`` (pyroute2's generic message parser
costs about 50 µs per event, four times the whole handling here, and a fork/exec storm
brings thousands per second).

What each event does (a full walk of ``/proc`` every ``daemon.reconcile_interval_s``
reconciles anything missed):

* **exec**: ``/proc/PID/cmdline`` and ``exe`` are read at once. A launcher (the
  injected ``is_candidate``) is captured right away: the process and each ancestor up
  to PID 1 are read in full, kept for the next scan even if they exit before it (a
  300 ms job), and an early tick is requested (``wake``). Any other exec is queued for
  ``/proc/PID/maps`` checks 0.2, 1 and 3 s later (CUDA libraries are mapped after
  ``execve``, by the loader or an ``import``); a hit is captured the same way. Every
  exec'd PID is re-read in full by the next scan (same ``comm``, new program).
* **exit**: a job member (``watched``) or a captured process that exits requests a
  tick, so its finding resolves without waiting for the next sweep, and its exit status
  is kept for the daemon (:meth:`ProcEventSource.exits`): whether a job ended by itself
  or was stopped by a signal decides whether its return is periodic or ``respawned``
  (docs/respawn.md). The process's maps checks still due are dropped (a storm of short
  programs opens no maps file).
* **uid/sid change**: re-read at the next scan; a tick at once for a job member.
* **fork**: the child (not a new thread) is handed to the next scan to read
  (``EventBatch.forked``), as is each process that exited (``ended``): with the
  connector complete a scan re-reads only what events named (watchdog/sources/eventwalk.py).
* **loss**: when the kernel drops messages because the socket buffer is full, the read
  fails with ``ENOBUFS``: counted, and a full sweep (every stat file re-read) is
  requested at once.

Bursts are coalesced: in a storm (reading rounds less than twice the spacing apart)
rounds begin at most every :data:`ROUND_SPACING_S` (:data:`SUSTAINED_SPACING_S` while
the last second brought :data:`SUSTAINED_STORM_RATE` datagrams a second or more), so one
wake-up of the thread reads many datagrams; one wake request per round, the daemon's
loop spaces early ticks, the re-read and maps queues are bounded (overflow turns into a
full sweep). Where the connector cannot be opened (no CAP_NET_ADMIN on kernels before
6.6, outside the initial network, PID or user namespace, a container)
:meth:`ProcEventSource.start` records why, logs it once and the daemon polls as before.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import os
import secrets
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..logs import get_logger
from ..model import Proc
from .gpulibs import library_pattern, mapped_libraries
from .procfs import ProcessTable

log = get_logger()

# include/uapi/linux/cn_proc.h, enum proc_cn_event.
PROC_EVENT_NONE = 0x00000000  # the acknowledgement; event_data.ack.err follows what
PROC_EVENT_FORK = 0x00000001
PROC_EVENT_EXEC = 0x00000002
PROC_EVENT_UID = 0x00000004
PROC_EVENT_SID = 0x00000080
PROC_EVENT_EXIT = 0x80000000
# struct nlmsghdr (16 bytes) + struct cn_msg (20 bytes), then struct proc_event:
# what u32, cpu u32, timestamp_ns u64 (16 bytes), then the event_data union.
_NLMSGHDR = struct.Struct("=IHHII")
_WHAT_OFFSET = 16 + 20
_CN_ACK_OFFSET = 16 + 12  # struct cn_msg: idx, val, seq, ack (u32 each), len, flags
_DATA_OFFSET = _WHAT_OFFSET + 16
_WHAT = struct.Struct("=I")
_TWO = struct.Struct("=II")  # exec/uid/sid/exit: process_pid, process_tgid
_EXIT_CODE = struct.Struct("=I")  # exit: exit_code (a wait(2) status), after pid and tgid
_FOUR = struct.Struct("=IIII")  # fork: parent_pid, parent_tgid, child_pid, child_tgid
# The reader's decoder: one unpack per message for nlmsghdr.len, proc_event.what and the
# union's first four u32 (fork: parent_pid, parent_tgid, child_pid, child_tgid; exec,
# uid, sid: process_pid, process_tgid, ...; exit: process_pid, process_tgid,
# exit_code, ...). The kernel sends every event at sizeof(struct proc_event); a shorter
# message goes through parse_events, which checks each field's bounds.
_EVENT = struct.Struct("=I32xI12xIIII")

MAPS_CHECK_DELAYS_S = (0.2, 1.0, 3.0)
MAX_QUEUED_MAPS_CHECKS = 20000
MAX_REINSPECT = 65536
MAX_CAPTURED = 4096
# Exit statuses kept between two drains by the daemon (a storm of watched exits beyond
# this keeps the newest: an unknown status only makes a return a respawn).
MAX_EXITS = 4096
MAX_LINEAGE = 64
RECV_BYTES = 1 << 16
MAX_DATAGRAMS_PER_ROUND = 512
# In a storm (two rounds that read events began less than twice this apart), rounds
# of reading begin at most this often: each wake-up of the thread costs more than the
# events it reads (a context switch and the interpreter on cold caches, tens of µs on a
# loaded VM against about 3 µs per datagram read warm), and a storm sends three
# datagrams per program (fork, exec, exit), each waking the thread on its own. Events
# after a quiet spell are read at once; in a storm an exec is read at most this much
# later, far less than any training run lives, and a program that has exited by then
# is counted in ``exec_missed`` as before (docs/performance.md: exec storm).
ROUND_SPACING_S = 0.002
# A storm that lasts (SUSTAINED_STORM_RATE datagrams a second or more over a window of
# at least SUSTAINED_STORM_S) is read in rounds SUSTAINED_SPACING_S apart for the next
# window: at 500 execs/s the wake-ups were still most of the thread's cost (0.5-0.9
# rounds per exec at 2 ms; at 8 ms 0.17-0.18 and about 30 % less CPU per exec, issue
# 34), and an exec read 8 ms late still finds any training run (30 ms trainers started
# through the storm: all captured). A host busy below that rate (a build: about 100
# programs a second) keeps ROUND_SPACING_S, and an event after a quiet spell is read at
# once whatever the spacing.
SUSTAINED_STORM_S = 1.0
SUSTAINED_STORM_RATE = 600  # datagrams a second: 200 programs (fork, exec, exit)
SUSTAINED_SPACING_S = 0.008


def storm_spacing_s(datagrams: int, window_s: float) -> float:
    """Seconds between the beginnings of two reading rounds in a storm, for the next
    window (at least :data:`SUSTAINED_STORM_S`).

    Args:
        datagrams: Datagrams read in the window that ended.
        window_s: Its length, seconds.

    Returns:
        :data:`SUSTAINED_SPACING_S` when they came at :data:`SUSTAINED_STORM_RATE` a
        second or more, else :data:`ROUND_SPACING_S`.
    """
    if window_s > 0 and datagrams >= SUSTAINED_STORM_RATE * window_s:
        return SUSTAINED_SPACING_S
    return ROUND_SPACING_S


def _acks(data: bytes) -> Iterator[tuple[int, int]]:
    """``(cn_msg.ack, event_data.ack.err)`` of each ``PROC_EVENT_NONE`` message in a
    datagram (linux/connector.h, linux/cn_proc.h)."""
    off = 0
    while off + _NLMSGHDR.size <= len(data):
        length = _NLMSGHDR.unpack_from(data, off)[0]
        if length < _NLMSGHDR.size or off + length > len(data):
            return
        if length >= _DATA_OFFSET + 4:
            (what,) = _WHAT.unpack_from(data, off + _WHAT_OFFSET)
            if what == PROC_EVENT_NONE:
                (ack,) = _WHAT.unpack_from(data, off + _CN_ACK_OFFSET)
                (err,) = _WHAT.unpack_from(data, off + _DATA_OFFSET)
                yield ack, err
        off += (length + 3) & ~3  # NLMSG_ALIGN


def parse_events(data: bytes) -> Iterator[tuple[int, int, int, int | None]]:
    """Decode one datagram from the proc connector.

    Args:
        data: What ``recv`` returned: one or more netlink messages, each carrying a
            ``struct cn_msg`` and a ``struct proc_event`` (linux/cn_proc.h).

    Returns:
        ``(what, pid, tgid, status)`` per event: for fork the child's, for exec, uid,
        sid and exit the process's; ``status`` is an exit's ``exit_code`` (a wait(2)
        status: ``code << 8``, or the signal that ended it in the low 7 bits), None for
        other events and a message too short to hold it. Truncated messages are skipped.
    """
    off = 0
    end = len(data)
    while off + _NLMSGHDR.size <= end:
        length = _NLMSGHDR.unpack_from(data, off)[0]
        if length < _NLMSGHDR.size or off + length > end:
            return
        if length >= _DATA_OFFSET + _TWO.size:
            (what,) = _WHAT.unpack_from(data, off + _WHAT_OFFSET)
            if what == PROC_EVENT_EXIT:
                status = None
                if length >= _DATA_OFFSET + _TWO.size + _EXIT_CODE.size:
                    (status,) = _EXIT_CODE.unpack_from(data, off + _DATA_OFFSET + _TWO.size)
                yield (what, *_TWO.unpack_from(data, off + _DATA_OFFSET), status)
            elif what != PROC_EVENT_FORK:
                yield (what, *_TWO.unpack_from(data, off + _DATA_OFFSET), None)
            elif length >= _DATA_OFFSET + _FOUR.size:
                _, _, pid, tgid = _FOUR.unpack_from(data, off + _DATA_OFFSET)
                yield what, pid, tgid, None
        off += (length + 3) & ~3  # NLMSG_ALIGN


# include/uapi/linux/netlink.h, connector.h and cn_proc.h: the protocol, the group and
# the subscription's values.
NETLINK_CONNECTOR = 11
CN_IDX_PROC = 0x1
CN_VAL_PROC = 0x1
PROC_CN_MCAST_LISTEN = 1
NLMSG_DONE = 0x3
# struct nlmsghdr (len u32, type u16, flags u16, seq u32, pid u32), struct cn_msg
# (id.idx u32, id.val u32, seq u32, ack u32, len u16, flags u16), then the u32
# enum proc_cn_mcast_op: 40 bytes, no padding.
_SUBSCRIBE = struct.Struct("=IHHIIIIIIHHI")


def subscribe_message(nonce: int) -> bytes:
    """The ``PROC_CN_MCAST_LISTEN`` request to the proc connector, as one netlink
    datagram (40 bytes; include/uapi/linux/connector.h ``struct cn_msg``,
    include/uapi/linux/cn_proc.h ``enum proc_cn_mcast_op``), byte for byte what
    pyroute2's ``proc_event_control`` encodes (tests/unit/test_proc_events.py).

    Args:
        nonce: ``cn_msg.ack``, 0 to 2**31 - 1: the kernel's acknowledgement echoes it
            plus one (``cn_proc_ack``), which tells ours from another subscriber's.
    """
    return _SUBSCRIBE.pack(
        _SUBSCRIBE.size, NLMSG_DONE, 0, 0, 0,  # nlmsghdr: to the kernel
        CN_IDX_PROC, CN_VAL_PROC, 0, nonce, 4, 0,  # cn_msg, its data: one u32
        PROC_CN_MCAST_LISTEN,
    )  # fmt: skip


def open_proc_connector(rcvbuf_bytes: int, ack_timeout_s: float = 2.0) -> socket.socket:
    """Subscribe to the proc connector and return the socket to read.

    The subscription counts only once the kernel acknowledges it: ``cn_proc_mcast_ctl``
    (drivers/connector/cn_proc.c) answers ``PROC_CN_MCAST_LISTEN`` with a
    ``PROC_EVENT_NONE`` message carrying an error number, and silently ignores a request
    from outside the initial PID and user namespaces (a container, a nested systemd),
    whose events would name PIDs of another namespace anyway: the answer is awaited at
    most ``ack_timeout_s``.

    The socket is the standard library's (socket(7), netlink(7)) and the one request is
    packed here (:func:`subscribe_message`): pyroute2, which did both before, imports
    its whole package (196 more modules in the daemon, 7 MiB more resident: 52 against
    45 MiB after the daemon's imports and the subscription) for these 40 bytes (issue
    34; docs/dependencies.md). Its encoding stays the reference in the tests.

    Args:
        rcvbuf_bytes: ``SO_RCVBUF`` to ask for (the kernel doubles it, socket(7)).
        ack_timeout_s: Longest wait for the kernel's acknowledgement, seconds.

    Returns:
        A non-blocking ``AF_NETLINK`` datagram socket bound to the ``CN_IDX_PROC``
        group.

    Raises:
        OSError: The connector is unavailable: ``ECONNREFUSED`` outside the initial
            network namespace, ``EPERM`` without CAP_NET_ADMIN (kernels before 6.6),
            ``EPROTONOSUPPORT`` without CONFIG_PROC_EVENTS, ``ETIMEDOUT`` when the kernel
            ignored the request (outside the initial PID or user namespace), or the
            error number the kernel's acknowledgement carried.
    """
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf_bytes)
        sock.bind((0, CN_IDX_PROC))  # port chosen by the kernel, the proc group
        # The kernel multicasts every acknowledgement to every subscriber: ours is the
        # one echoing this number plus one in cn_msg.ack (cn_proc_ack).
        nonce = secrets.randbelow(1 << 31)
        sock.sendto(subscribe_message(nonce), (0, 0))  # to the kernel (netlink port 0)
        _await_ack(sock, ack_timeout_s, nonce)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _strerror(err: int) -> str:
    """``os.strerror``, for any u32 the kernel's acknowledgement carries (one no errno
    fits would raise OverflowError, not the OSError that makes the daemon poll)."""
    try:
        return os.strerror(err)
    except (OverflowError, ValueError):
        return f"error number {err} in the kernel's acknowledgement"


def _await_ack(sock: socket.socket, timeout_s: float, nonce: int) -> None:
    """Read until the kernel's ``PROC_EVENT_NONE`` acknowledgement of our request, the one
    whose ``cn_msg.ack`` is ``nonce + 1`` (another subscriber's, and events before it,
    are dropped: the first scan reads every process anyway)."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], left)
        if not ready:
            break
        data = sock.recv(RECV_BYTES)
        for ack, err in _acks(data):
            if ack == (nonce + 1) & 0xFFFFFFFF:
                if err:
                    raise OSError(err, _strerror(err))
                return
    raise OSError(
        errno.ETIMEDOUT,
        "the kernel did not acknowledge the subscription (it ignores one from outside "
        "the initial PID and user namespaces)",
    )


@dataclass
class EventBatch:
    """What the events since the last scan hand to the next one.

    Attributes:
        captured: Records read at exec time: each candidate and its ancestors (PID →
            latest record). The scan keeps those that exited meanwhile.
        candidates: PIDs captured as launchers or GPU-library mappers.
        reinspect: PIDs that exec'd or changed uid/sid: re-read in full.
        gpu_libraries: PID → (start ticks, libraries) found in maps after exec.
        forked: New processes (a fork's child; a new thread is none).
        ended: Processes that exited (a thread's exit is none).
        full_sweep: Events were lost (or a queue overflowed): re-read everything.
        complete: Every event since the subscription was read, by a reader still
            running: only then may a scan re-read just what the events named
            (watchdog/sources/eventwalk.py). False for a source that polls.
    """

    captured: dict[int, Proc] = field(default_factory=dict)
    candidates: set[int] = field(default_factory=set)
    reinspect: set[int] = field(default_factory=set)
    gpu_libraries: dict[int, tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    forked: set[int] = field(default_factory=set)
    ended: set[int] = field(default_factory=set)
    full_sweep: bool = False
    complete: bool = False


@dataclass
class EventCounters:
    """Totals since start (metrics and ``status``)."""

    events: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("fork", "exec", "exit", "uid", "sid"), 0)
    )
    lost: int = 0
    full_sweeps: int = 0
    candidates: int = 0
    wakes: int = 0
    missed: int = 0
    maps_reads: int = 0


_KIND = {
    PROC_EVENT_FORK: "fork",
    PROC_EVENT_EXEC: "exec",
    PROC_EVENT_EXIT: "exit",
    PROC_EVENT_UID: "uid",
    PROC_EVENT_SID: "sid",
}


class ProcEventSource:
    """Follows process events in a thread and feeds each scan (a daemon Worker).

    Args:
        proc_root: procfs mount (``/proc``).
        is_candidate: True for a process to capture at exec (a launcher); called with a
            record holding only ``pid``, ``exe`` and ``cmdline``.
        gpu_libraries: Library names whose mapping makes a process a candidate.
        rcvbuf_bytes: Socket receive buffer.
        wake: Called (from this thread) to ask for an early tick.
        opener: Opens the connector socket (tests inject failures).
    """

    name = "proc-events"

    def __init__(
        self,
        proc_root: str,
        is_candidate: Callable[[Proc], bool],
        gpu_libraries: Sequence[str] = (),
        rcvbuf_bytes: int = 4 << 20,
        wake: Callable[[], None] | None = None,
        opener: Callable[[int], socket.socket] = open_proc_connector,
    ) -> None:
        self.proc_root = proc_root
        self.is_candidate = is_candidate
        self.pattern = library_pattern(gpu_libraries)
        self.rcvbuf_bytes = rcvbuf_bytes
        self.wake = wake
        self.opener = opener
        self.available: bool | None = None
        self.reason: str | None = None
        self.counters = EventCounters()
        # Job members and their lineage, set by the scanner after each scan.
        self.watched: frozenset[int] = frozenset()
        # The jobs' root PIDs, among them: whose exit statuses are kept.
        self.roots: frozenset[int] = frozenset()
        self._reader = ProcessTable(proc_root)
        self._lock = threading.Lock()
        self._batch = EventBatch()
        # (due, PID, exec serial, exec time, index into MAPS_CHECK_DELAYS_S): one entry
        # per exec, re-queued for its next check only while the process runs.
        self._maps_queue: list[tuple[float, int, int, float, int]] = []
        # PID → serial of its latest exec with maps checks still due; its exit (or a
        # newer exec) drops them, so a storm of short programs costs no maps open.
        self._maps_pending: dict[int, int] = {}
        self._exec_serial = 0
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._pipe: tuple[int, int] | None = None
        self._stopping = False
        self._wake_pending = False
        # Set with a wake request that only a whole tick answers (a watched process
        # exited or changed owner, events were lost, the reader stopped); cleared by the
        # daemon when a tick starts. A wake without it is for captures alone: the
        # daemon's exec path judges them (watchdog/daemon/loop.py: Daemon.exec_tick).
        self.full_wanted = False
        # Captured PIDs still running (this thread only): their exit asks for a tick.
        self._live: set[int] = set()
        # PID → wait(2) status of job roots or captured processes that exited since the
        # daemon last asked (:meth:`exits`).
        self._exits: dict[int, int] = {}

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Open the connector and start the thread; on failure, poll only and say so once."""
        try:
            self._sock = self.opener(self.rcvbuf_bytes)
        except Exception as exc:  # OSError from the kernel; anything else is no better
            text = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
            self.available = False
            self.reason = (
                f"kernel process events unavailable ({text}): needs "
                "CAP_NET_ADMIN and the initial network, PID and user namespaces; polling "
                "every daemon.interval_s instead"
            )
            log.warning("proc-events-unavailable", error=str(exc), message=self.reason)
            return
        self.available = True
        self.reason = None
        self._stopping = False
        self._pipe = os.pipe()
        self._thread = threading.Thread(target=self._run, name="proc-events", daemon=True)
        self._thread.start()
        log.info("proc-events-listening", rcvbuf_bytes=self.rcvbuf_bytes)

    def stop(self) -> None:
        """Stop the thread and close the socket."""
        self._stopping = True
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                os.write(self._pipe[1], b"x")
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._pipe is not None:
            for fd in self._pipe:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._pipe = None

    # -- what the scan takes -------------------------------------------------------------

    def drain(self) -> EventBatch:
        """Everything gathered since the last call (called by the scan, main thread)."""
        with self._lock:
            batch, self._batch = self._batch, EventBatch()
        # Read after the swap: a reader that broke after it is seen in the next batch
        # (full_sweep); ``available`` is True only from a subscription that succeeded.
        batch.complete = self.available is True
        return batch

    def captures_pending(self) -> bool:
        """Whether processes captured at exec wait for the next scan, with no event lost
        since the last (the daemon's exec path judges them first: Daemon.exec_tick)."""
        with self._lock:
            return bool(self._batch.candidates) and not self._batch.full_sweep

    def exits(self) -> dict[int, int]:
        """The exit statuses since the last call: PID → wait(2) status of each job
        root (:attr:`roots`) or captured process that exited (called by the daemon
        at the start of a tick, before the scan: a PID the scan then sees running is a
        new process under a reused number)."""
        with self._lock:
            out, self._exits = self._exits, {}
        return out

    def swept(self) -> None:
        """The scan did a full sweep for lost events (counted for status and metrics)."""
        self.counters.full_sweeps += 1

    def status(self) -> dict[str, Any]:
        """``events`` of the status document (docs/status.md)."""
        c = self.counters
        return {
            "mode": "events" if self.available else "polling",
            "available": bool(self.available),
            "reason": self.reason,
            "events": dict(c.events),
            "lost": c.lost,
            "full_sweeps": c.full_sweeps,
            "candidates": c.candidates,
            "early_ticks_requested": c.wakes,
            "exec_missed": c.missed,
        }

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        sock, pipe = self._sock, self._pipe
        assert sock is not None and pipe is not None
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        poller.register(pipe[0], select.POLLIN)
        buf = bytearray(RECV_BYTES)  # every datagram is read into this one buffer
        spacing = ROUND_SPACING_S
        last_read = -1.0  # when the last round that read events began
        # The datagrams read since window_start: the spacing is chosen anew from them
        # at the first round at least SUSTAINED_STORM_S later.
        window_start, window_reads = time.monotonic(), 0
        while not self._stopping:
            timeout_ms = -1
            if self._maps_queue:
                due = self._maps_queue[0][0] - time.monotonic()
                timeout_ms = max(0, int(due * 1000) + 1)
            try:
                poller.poll(timeout_ms)
                started = time.monotonic()
                read = self._read_all(sock, buf)
                self._maps_due()
            except Exception as exc:  # a dead thread must not pass for a live source
                self._broken(exc)
                return
            if self._wake_pending:
                self._wake_pending = False
                self.counters.wakes += 1
                if self.wake is not None:
                    self.wake()
            if read:
                storm = started - last_read < 2 * spacing
                last_read = started
                window_reads += read
                if started - window_start >= SUSTAINED_STORM_S:
                    spacing = storm_spacing_s(window_reads, started - window_start)
                    window_start, window_reads = started, 0
                if storm and read < MAX_DATAGRAMS_PER_ROUND:
                    # Let the storm's next events gather for the rest of the spacing
                    # (the socket ran dry; a full round goes on at once).
                    left = started + spacing - time.monotonic()
                    if left > 0:
                        time.sleep(left)

    def _broken(self, exc: Exception) -> None:
        text = (exc.strerror if isinstance(exc, OSError) else None) or repr(exc)
        self.available = False
        self.reason = f"kernel process events stopped ({text}); polling instead"
        log.error("proc-events-unavailable", error=str(exc), message=self.reason)
        with self._lock:
            self._batch.full_sweep = True
        self.full_wanted = True
        if self.wake is not None:
            self.wake()

    def _read_all(self, sock: socket.socket, buf: bytearray | None = None) -> int:
        """Read what the socket holds (at most a round's worth); the datagrams read."""
        # New and ended processes of this round, handed on under one lock at its end
        # (a fork storm costs a set insertion per event, not a lock round trip).
        forked: set[int] = set()
        ended: set[int] = set()
        try:
            return self._read_round(
                sock, bytearray(RECV_BYTES) if buf is None else buf, forked, ended
            )
        finally:
            if forked or ended:
                with self._lock:
                    batch = self._batch
                    batch.forked |= forked
                    batch.ended |= ended
                    if len(batch.forked) + len(batch.ended) > MAX_REINSPECT:
                        batch.forked.clear()
                        batch.ended.clear()
                        batch.full_sweep = True

    def _read_round(
        self, sock: socket.socket, buf: bytearray, forked: set[int], ended: set[int]
    ) -> int:
        counts = self.counters.events
        recv_into = sock.recv_into
        unpack = _EVENT.unpack_from
        least = _EVENT.size
        # Bounded, so that a storm that never lets the socket run dry still leaves room
        # for the wake request and the due maps checks between rounds.
        for read in range(MAX_DATAGRAMS_PER_ROUND):
            if self._stopping:
                return read
            try:
                n = recv_into(buf)
            except BlockingIOError:
                return read
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                self._lost()
                continue
            off = 0
            while off + least <= n:
                length, what, a, b, c, d = unpack(buf, off)
                if length < least or off + length > n:
                    break  # short or truncated: the careful decoder below
                off += (length + 3) & ~3  # NLMSG_ALIGN
                if what == PROC_EVENT_FORK:
                    counts["fork"] += 1
                    if c == d:  # child_pid == child_tgid: a process, not a thread
                        forked.add(d)
                elif what == PROC_EVENT_EXEC:
                    counts["exec"] += 1
                    self._on_exec(b)
                elif what == PROC_EVENT_EXIT:
                    self._on_exit(a, b, c, counts, ended)
                else:
                    self._on_other(what, b, counts)
            if off + _NLMSGHDR.size <= n:
                for what, pid, tgid, status in parse_events(bytes(buf[off:n])):
                    if what == PROC_EVENT_FORK:
                        counts["fork"] += 1
                        if pid == tgid:
                            forked.add(tgid)
                    elif what == PROC_EVENT_EXEC:
                        counts["exec"] += 1
                        self._on_exec(tgid)
                    elif what == PROC_EVENT_EXIT:
                        self._on_exit(pid, tgid, status, counts, ended)
                    else:
                        self._on_other(what, tgid, counts)
        return MAX_DATAGRAMS_PER_ROUND

    def _on_exit(
        self, pid: int, tgid: int, status: int | None, counts: dict[str, int], ended: set[int]
    ) -> None:
        counts["exit"] += 1
        if pid != tgid:
            return  # a thread
        ended.add(tgid)
        self._maps_pending.pop(tgid, None)
        if tgid in self.watched or tgid in self._live:
            captured = tgid in self._live
            self._live.discard(tgid)
            self._wake_pending = self.full_wanted = True
            # Only how a job's root ended is asked (periodic or respawned): a
            # 4,096-process job's members ending together evicted a cron ghost's root
            # status, and its next run was paged as a respawn (fresh-user hour,
            # 2026-12-06).
            if status is not None and (captured or tgid in self.roots):
                self._exited(tgid, status)

    def _on_other(self, what: int, tgid: int, counts: dict[str, int]) -> None:
        kind = _KIND.get(what)
        if kind is None:
            return  # the subscription's acknowledgement, ptrace, comm, coredump
        counts[kind] += 1
        self._reinspect(tgid)  # uid or sid
        if tgid in self.watched:
            self._wake_pending = self.full_wanted = True

    def _exited(self, pid: int, status: int) -> None:
        with self._lock:
            if len(self._exits) >= MAX_EXITS:
                self._exits.pop(next(iter(self._exits)))
            self._exits[pid] = status

    def _lost(self) -> None:
        self.counters.lost += 1
        with self._lock:
            self._batch.full_sweep = True
        if self.counters.lost == 1 or self.counters.lost % 100 == 0:
            log.warning(
                "proc-events-lost",
                lost=self.counters.lost,
                message="the kernel dropped process events (socket buffer full); "
                "a full sweep follows",
            )
        self._wake_pending = self.full_wanted = True

    def _reinspect(self, pid: int) -> None:
        with self._lock:
            batch = self._batch
            if len(batch.reinspect) >= MAX_REINSPECT:
                batch.reinspect.clear()
                batch.full_sweep = True
            batch.reinspect.add(pid)

    def _on_exec(self, pid: int) -> None:
        self._reinspect(pid)
        base = f"{self.proc_root}/{pid}"
        try:
            fd = os.open(f"{base}/cmdline", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.counters.missed += 1  # gone already; the sweep cannot see it either
            return
        try:
            raw = os.read(fd, 8192)
        except OSError:
            raw = b""
        finally:
            os.close(fd)
        try:
            exe: str | None = os.readlink(f"{base}/exe")
        except OSError:
            exe = None
        parts = raw.decode("utf-8", "surrogateescape").split("\0")
        if parts and parts[-1] == "":
            parts.pop()
        quick = Proc(pid, 0, 0, "R", "", exe=exe, cmdline=tuple(parts))
        if self.is_candidate(quick):
            self._capture(pid, ())
        elif self.pattern is not None and len(self._maps_queue) < MAX_QUEUED_MAPS_CHECKS:
            now = time.monotonic()
            self._exec_serial += 1
            serial = self._maps_pending[pid] = self._exec_serial
            heapq.heappush(self._maps_queue, (now + MAPS_CHECK_DELAYS_S[0], pid, serial, now, 0))

    def _maps_due(self) -> None:
        if self.pattern is None:
            return
        now = time.monotonic()
        queue = self._maps_queue
        pending = self._maps_pending
        while queue and queue[0][0] <= now:
            _, pid, serial, execd, index = heapq.heappop(queue)
            if pending.get(pid) != serial:
                continue  # it exited (or exec'd again: that exec has its own checks)
            if pid not in self._live:
                self.counters.maps_reads += 1
                libs = mapped_libraries(self.proc_root, pid, self.pattern)
                if libs:
                    self._capture(pid, libs)
            if pid in self._live or index + 1 == len(MAPS_CHECK_DELAYS_S):
                del pending[pid]
            else:
                due = execd + MAPS_CHECK_DELAYS_S[index + 1]
                heapq.heappush(queue, (due, pid, serial, execd, index + 1))

    def _capture(self, pid: int, libraries: tuple[str, ...]) -> None:
        proc = self._reader.read(pid)
        if proc is None or proc.kernel_thread:
            self.counters.missed += 1
            return
        chain = [proc]
        cur = proc
        while cur.ppid > 0 and len(chain) < MAX_LINEAGE:
            parent = self._reader.read(cur.ppid)
            if parent is None:
                break
            chain.append(parent)
            cur = parent
        self.counters.candidates += 1
        if len(self._live) >= MAX_CAPTURED:
            self._live.clear()
        self._live.add(pid)
        with self._lock:
            batch = self._batch
            if len(batch.captured) + len(chain) > MAX_CAPTURED:
                batch.captured.clear()
                batch.candidates.clear()
                batch.full_sweep = True
            for p in chain:
                batch.captured[p.pid] = p
            batch.candidates.add(pid)
            if libraries:
                batch.gpu_libraries[pid] = (proc.start_ticks, libraries)
        self._wake_pending = True


def parse_lineage_events(data: bytes) -> Iterator[tuple[str, int, int]]:
    """Decode the fork and exit events of one datagram, for following who forked whom.

    Args:
        data: What ``recv`` returned from the proc connector.

    Returns:
        ``("fork", parent_tgid, child_tgid)`` for each new process (a new thread, whose
        ``child_pid`` differs from its ``child_tgid``, is not one) and ``("exit", tgid,
        tgid)`` for each process that ended (a thread's exit is left out).
    """
    off = 0
    end = len(data)
    while off + _NLMSGHDR.size <= end:
        length = _NLMSGHDR.unpack_from(data, off)[0]
        if length < _NLMSGHDR.size or off + length > end:
            return
        if length >= _DATA_OFFSET + _TWO.size:
            (what,) = _WHAT.unpack_from(data, off + _WHAT_OFFSET)
            if what == PROC_EVENT_FORK and length >= _DATA_OFFSET + _FOUR.size:
                _, ptgid, pid, tgid = _FOUR.unpack_from(data, off + _DATA_OFFSET)
                if pid == tgid:
                    yield "fork", ptgid, tgid
            elif what == PROC_EVENT_EXIT:
                pid, tgid = _TWO.unpack_from(data, off + _DATA_OFFSET)
                if pid == tgid:
                    yield "exit", tgid, tgid
        off += (length + 3) & ~3  # NLMSG_ALIGN


MAX_LINEAGE_EVENTS = 200_000


class ForkWatch:
    """Who forked whom while it is open: the lineage a process loses when its parent exits.

    A process that starts a copy of itself and exits leaves the copy re-parented to PID 1,
    in a session of its own, maybe with an emptied environment: nothing in ``/proc`` ties
    the copy to it any more. The kernel's fork events do (``PROC_EVENT_FORK`` names the
    parent's and the child's thread group). Events are read when asked (:meth:`poll`,
    also from a sleep between signals), not in a thread; the socket buffer holds what
    arrives between two reads. Where events were dropped (``ENOBUFS``), or more than
    :data:`MAX_LINEAGE_EVENTS` arrived, the lineage is incomplete and :attr:`complete`
    says so.

    Args:
        opener: Opens the connector socket (:func:`open_proc_connector`; tests inject
            one that fails).
        rcvbuf_bytes: Socket receive buffer to ask for.
    """

    def __init__(
        self,
        opener: Callable[[int], socket.socket] = open_proc_connector,
        rcvbuf_bytes: int = 8 << 20,
    ) -> None:
        self.reason: str | None = None
        self.lost = False
        self._events: list[tuple[str, int, int]] = []
        self._sock: socket.socket | None = None
        try:
            self._sock = opener(rcvbuf_bytes)
        except Exception as exc:  # OSError from the kernel; anything else is no better
            text = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
            self.reason = f"kernel process events unavailable ({text})"

    @property
    def complete(self) -> bool:
        """True while every fork since the watch opened is known."""
        return self._sock is not None and not self.lost

    def poll(self) -> None:
        """Read every event waiting on the socket (never blocks)."""
        sock = self._sock
        if sock is None:
            return
        while True:
            try:
                data = sock.recv(RECV_BYTES)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    self.reason = f"kernel process events stopped ({exc.strerror or exc})"
                    self.close()
                    return
                self.lost = True
                self.reason = "the kernel dropped process events (socket buffer full)"
                continue
            self._events.extend(parse_lineage_events(data))
            if len(self._events) > MAX_LINEAGE_EVENTS:
                self.lost = True
                self.reason = f"more than {MAX_LINEAGE_EVENTS} process events"
                self._events.clear()

    def forked_by(self, roots: Iterable[int]) -> dict[int, int]:
        """Every process forked, directly or through others, by ``roots`` since the watch
        opened: child → the parent that forked it.

        A root (or a process found so) that exits stops counting: a later fork by a
        process that reuses its PID is not its; a fork whose child has the PID of one
        found earlier means that one is gone and the PID was reused.

        Args:
            roots: PIDs (thread group ids) to follow.
        """
        self.poll()
        active = set(roots)
        out: dict[int, int] = {}
        for kind, a, b in self._events:
            if kind == "exit":
                active.discard(a)
            elif a in active:
                active.add(b)
                out[b] = a
            elif b in active:
                active.discard(b)  # PID reused: the one we followed has gone
                out.pop(b, None)
        return out

    def close(self) -> None:
        """Close the socket (the events read so far are kept)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
