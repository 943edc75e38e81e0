"""Kernel process events for the simulated host (issue 34, item 1), and the differential
check of the event-driven scan against a full walk.

:class:`SimKernel` sends the proc connector's messages (linux/cn_proc.h) for what happens
on the simulated host: fork and exec when a process is spawned, exec when its program
changes, uid and sid changes, exit when it exits or becomes a zombie. Nothing is sent
for what the kernel does not report either: re-parenting, a process group change, a
cgroup move. The daemon's real :class:`~rogue_watchdog.sources.procevents.ProcEventSource`
reads them (decoding, exec-time capture, loss handling), fed through a socket double
instead of its thread: by default at once, as its thread does; the simulator can also
hold them until the next tick and hand them on in another order (``late``, a process is
then often gone before its exec is read), or drop them with ``ENOBUFS`` (``lose``).

:class:`Differential` runs a second :class:`~rogue_watchdog.scan.Scanner` beside the
daemon's at every scan, over the same host and the same events, that walks every
process every time, and requires identical jobs, verdicts, origins and findings.
"""

from __future__ import annotations

import copy
import errno
import json
import random
import struct
from collections import deque
from typing import Any

from rogue_watchdog.config import Config
from rogue_watchdog.model import ScanResult
from rogue_watchdog.policy.jobs import is_launcher
from rogue_watchdog.render import finding_json, job_json
from rogue_watchdog.scan import Scanner
from rogue_watchdog.sources.eventwalk import EventWalk
from rogue_watchdog.sources.procevents import (
    PROC_EVENT_EXEC,
    PROC_EVENT_EXIT,
    PROC_EVENT_FORK,
    PROC_EVENT_SID,
    PROC_EVENT_UID,
    EventBatch,
    ProcEventSource,
)


def message(what: int, *fields: int) -> bytes:
    """One netlink message as the proc connector sends it (the event_data union is
    always 24 bytes)."""
    data = struct.pack(f"=IIQ{len(fields)}I", what, 0, 0, *fields).ljust(40, b"\0")
    cn = struct.pack("=IIIIHH", 1, 1, 0, 0, len(data), 0)
    body = cn + data
    return struct.pack("=IHHII", 16 + len(body), 3, 0, 0, 0) + body


class SimSocket:
    """What ``recv`` (and ``recv_into``, the reader's) returns: queued datagrams, an
    ``ENOBUFS`` where one was dropped."""

    def __init__(self) -> None:
        self.queue: deque[bytes | OSError] = deque()

    def recv(self, _n: int) -> bytes:
        if not self.queue:
            raise BlockingIOError
        item = self.queue.popleft()
        if isinstance(item, OSError):
            raise item
        return item

    def recv_into(self, buf: bytearray) -> int:
        data = self.recv(len(buf))
        buf[: len(data)] = data
        return len(data)


class SimKernel:
    """The proc connector of the simulated host: one subscriber, the daemon's source.

    Attributes:
        source: The subscribed source (None: no daemon listens, messages go nowhere).
        late: Hold messages until :meth:`flush` (the tick), then hand them on shuffled.
        sent: Messages sent, by kind.
    """

    def __init__(self, seed: int = 0) -> None:
        self.source: ProcEventSource | None = None
        self.late = False
        self.lose_next = False
        self.sock = SimSocket()
        self.held: list[bytes] = []
        self.rng = random.Random(seed)
        self.sent = {"fork": 0, "exec": 0, "exit": 0, "uid": 0, "sid": 0, "lost": 0}
        # What each PID showed when last written: (argv, exe, uid, sid).
        self.shown: dict[int, tuple[Any, ...]] = {}

    def attach(self, host: Any) -> None:
        """Follow ``host`` (a SimHost): what it runs now was there before any daemon."""
        host.kernel = self
        for p in host.procs.values():
            self.shown[p.pid] = (tuple(p.argv), p.exe, p.uid, p.sid)

    def subscribe(self, config: Config) -> ProcEventSource:
        """A source for a daemon that starts now (events sent before are not its)."""
        launchers = config.training.launchers
        source = ProcEventSource(
            config.paths.proc_root,
            lambda p: is_launcher(p, launchers),
            config.training.gpu_libraries,
        )
        source.available = True  # subscribed: what a successful start() records
        self.source = source
        self.held.clear()
        self.sock.queue.clear()
        return source

    def wrote(self, pid: int, ppid: int, argv: Any, exe: str, uid: int, sid: int) -> None:
        """The host wrote PID's files: send what changed (called by SimHost.write)."""
        now = (tuple(argv), exe, uid, sid)
        was = self.shown.get(pid)
        self.shown[pid] = now
        if was is None:
            self._send("fork", message(PROC_EVENT_FORK, ppid, ppid, pid, pid))
            self._send("exec", message(PROC_EVENT_EXEC, pid, pid))
            return
        if was[:2] != now[:2]:
            self._send("exec", message(PROC_EVENT_EXEC, pid, pid))
        if was[2] != uid:
            self._send("uid", message(PROC_EVENT_UID, pid, pid, uid, uid))
        if was[3] != sid:
            self._send("sid", message(PROC_EVENT_SID, pid, pid))

    def exited(self, pid: int, status: int) -> None:
        """PID exited (its zombie, or its reaped end)."""
        self.shown.pop(pid, None)
        self._send("exit", message(PROC_EVENT_EXIT, pid, pid, status, 17))

    def _send(self, kind: str, data: bytes) -> None:
        self.sent[kind] += 1
        if self.source is None:
            return
        if self.lose_next:
            # The socket buffer overflowed: this one (and what the kernel dropped with
            # it) is gone, the next read fails with ENOBUFS.
            self.lose_next = False
            self.sent["lost"] += 1
            self.sock.queue.append(OSError(errno.ENOBUFS, "No buffer space available"))
            self._read()
            return
        if self.late:
            self.held.append(data)
            return
        self.sock.queue.append(data)
        self._read()

    def flush(self) -> None:
        """Hand on the held messages in another order (the event thread was behind)."""
        held, self.held = self.held, []
        self.rng.shuffle(held)
        self.sock.queue.extend(held)
        self._read()

    def _read(self) -> None:
        if self.source is not None and self.sock.queue:
            self.source._read_all(self.sock)  # type: ignore[arg-type]  # its thread's read


def _picture(result: ScanResult) -> dict[str, Any]:
    """What must be identical: jobs (members, lineage, verdict, rule, origin, class,
    advice), findings, the GPU processes seen and the processes kept from exec time."""
    return {
        "jobs": [job_json(j) for j in result.jobs],
        "findings": [finding_json(f) for f in result.findings],
        "gpu_processes": sorted((g.pid, g.gpu_uuid) for g in result.gpu_processes),
        "exited": sorted(result.exited),
        "blind": result.gpu_blind,
    }


class Differential:
    """Beside a daemon's scanner, a twin that walks every process at every scan, fed the
    same events; each scan of the daemon's is compared with the twin's.

    Args:
        scanner: The daemon's scanner (its ``events`` is the simulated source).
        twin: A scanner for the same configuration and host.
    """

    def __init__(self, scanner: Scanner, twin: Scanner) -> None:
        self.scanner = scanner
        self.twin = twin
        twin.walk = EventWalk(reconcile_interval_s=0.0)  # a full walk every scan
        # ...and every whole-table answer the scanner keeps current from what changed
        # (the children index, the GPU-library holders) computed anew each scan: the
        # oracle the daemon's incremental answers are compared with.
        twin.table.keep_index = False
        twin.gpu_libraries.incremental = False
        self.compared = 0
        self.incremental = 0
        self.exec_compared = 0  # exec-path scans compared (and the jobs they judged)
        self.exec_jobs = 0
        self._batch: EventBatch | None = None
        source = scanner.events
        assert source is not None
        scanner.events = _Recorder(source, self)
        twin.events = _Replay(self)
        scan = scanner.scan

        def scanned(now: Any = None, known: Any = None) -> ScanResult:
            # The twin starts from what the daemon's scanner holds: origins pinned,
            # sanctioned identities, GPUs seen (a restart or the daemon's own writes).
            self.twin._pinned = dict(scanner._pinned)
            self.twin.sanctioned = dict(scanner.sanctioned)
            # ...and when a rule first matched a run it had judged rogue (the kept
            # reason says "from TIME (matched while it ran)"), and which it judged so.
            self.twin.sanctioned_matched = dict(scanner.sanctioned_matched)
            self.twin._unsanctioned = set(scanner._unsanctioned)
            self.twin._origins = dict(scanner._origins)
            self.twin.remember_gpus(scanner.seen_gpus())
            walks = scanner.walk.event_walks
            result = scan(now, known=known)
            other = self.twin.scan(now)
            self.compared += 1
            self.incremental += scanner.walk.event_walks - walks
            if known is not None:
                # The exec path (issue 34): its jobs and their findings are the whole
                # scan's for the same jobs (the rest waits for the tick).
                self.exec_compared += 1
                self.exec_jobs += len(result.jobs)
                a, b = _picture(result), _exec_share(_picture(other), result)
            else:
                a, b = _picture(result), _picture(other)
            if a != b:
                raise AssertionError(
                    "the event-driven scan differs from a full walk: "
                    + _diff(a, b, scanner.walk.event_walks > walks)
                )
            return result

        scanner.scan = scanned  # type: ignore[method-assign]


# Findings the exec path leaves to the tick (about GPUs or zombies, not a new job).
_TICK_ONLY_KINDS = frozenset(
    {"zombie-gpu-memory", "pid-namespace", "gpu-pid-invisible", "gpu-memory-unexplained"}
)


def _exec_share(full: dict[str, Any], result: ScanResult) -> dict[str, Any]:
    """Of a whole scan's picture, what the exec path judged: the jobs it holds (by
    root PID) and every finding about them but those only a tick files."""
    roots = {j.root_pid for j in result.jobs}
    return {
        **full,
        "jobs": [j for j in full["jobs"] if j["root_pid"] in roots],
        "findings": [
            f
            for f in full["findings"]
            if f.get("root_pid") in roots and f.get("kind") not in _TICK_ONLY_KINDS
        ],
    }


class _Recorder:
    """The daemon's feed, keeping a copy of each batch for the twin."""

    def __init__(self, source: Any, diff: Differential) -> None:
        self.source = source
        self.diff = diff

    @property
    def watched(self) -> frozenset[int]:
        return frozenset(self.source.watched)

    @watched.setter
    def watched(self, pids: frozenset[int]) -> None:
        self.source.watched = pids

    @property
    def roots(self) -> frozenset[int]:
        return frozenset(self.source.roots)

    @roots.setter
    def roots(self, pids: frozenset[int]) -> None:
        self.source.roots = pids

    def drain(self) -> EventBatch:
        batch: EventBatch = self.source.drain()
        self.diff._batch = copy.deepcopy(batch)
        return batch

    def captures_pending(self) -> bool:
        return bool(self.source.captures_pending())

    @property
    def full_wanted(self) -> bool:
        return bool(self.source.full_wanted)

    @full_wanted.setter
    def full_wanted(self, wanted: bool) -> None:
        self.source.full_wanted = wanted

    def status(self) -> dict[str, Any]:
        return dict(self.source.status())

    def swept(self) -> None:
        self.source.swept()


class _Replay:
    """The twin's feed: the batch the daemon's scan drained, again."""

    def __init__(self, diff: Differential) -> None:
        self.diff = diff
        self.watched: frozenset[int] = frozenset()
        self.roots: frozenset[int] = frozenset()
        self.full_wanted = False

    def drain(self) -> EventBatch:
        batch = self.diff._batch or EventBatch()
        self.diff._batch = None
        return batch

    def captures_pending(self) -> bool:
        return False

    def status(self) -> dict[str, Any]:
        return {}

    def swept(self) -> None:
        pass


def _diff(a: dict[str, Any], b: dict[str, Any], incremental: bool) -> str:
    out = [f"({'event walk' if incremental else 'full walk'} vs full walk)"]
    for key in a:
        if a[key] != b[key]:
            out.append(f"{key}: events {json.dumps(a[key], default=str)[:3000]}")
            out.append(f"{key}: full   {json.dumps(b[key], default=str)[:3000]}")
    return "\n".join(out)
