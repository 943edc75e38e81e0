"""The OS process table, read straight from procfs with a per-identity cache.

Identity is PID + start time (proc(5), ``/proc/PID/stat`` field 22). The expensive reads
(cmdline, exe, status, cgroup) happen once per identity, and again when ``comm`` changes,
which is what ``execve(2)`` and ``prctl(PR_SET_NAME)`` do to a live process.

A steady-state refresh does not even read every ``/proc/PID/stat``. On a real procfs
the directory entry of ``/proc/PID`` carries an inode number that stays the same for the
life of the task and changes when the PID is reused (the inode pins the task's
``struct pid``; ``proc_flush_pid`` drops the dentry when the task is reaped, fs/proc/base.c).
So an unchanged inode means "same process": only new inodes, watched PIDs (job members
and their lineage, whose parent and state matter) and a rotating slice of the rest
(every process once per ``restat_every`` refreshes, to catch exec and re-parenting)
are re-read. A fixture tree is not procfs, so there every stat file is read each time.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import pwd
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..model import Proc

PF_KTHREAD = 0x00200000  # include/linux/sched.h
# How many record changes ProcessTable.read_since can name (a PID each: 32 KiB).
READ_LOG_MAX = 4096


class StatParseError(ValueError):
    """A ``/proc/PID/stat`` line did not have the shape proc(5) documents."""


def parse_stat(text: str) -> tuple[str, str, int, int, int, int, int]:
    """Parse one ``/proc/PID/stat`` line.

    ``comm`` is enclosed in parentheses and may itself contain spaces and ``)``, so the
    split happens at the last ``)`` (proc(5)).

    Args:
        text: The whole file content.

    Returns:
        ``(comm, state, ppid, pgid, sid, flags, start_ticks)``.

    Raises:
        StatParseError: The line is truncated or has non-numeric fields.
    """
    open_paren = text.find("(")
    close_paren = text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise StatParseError(f"no (comm) in stat line: {text[:80]!r}")
    comm = text[open_paren + 1 : close_paren]
    rest = text[close_paren + 2 :].split()
    # rest[0] is field 3 (state); field N is rest[N - 3].
    try:
        return (
            comm,
            rest[0],
            int(rest[1]),
            int(rest[2]),
            int(rest[3]),
            int(rest[6]),
            int(rest[19]),
        )
    except (IndexError, ValueError) as exc:
        raise StatParseError(f"malformed stat line: {text[:80]!r}") from exc


def exec_mark(text: bytes) -> int | None:
    """What an ``execve(2)`` that keeps ``comm`` still changes in a ``/proc/PID/stat``
    line: the new program image's addresses (proc(5) fields 26 ``startcode``, 27
    ``endcode``, 28 ``startstack``, and, since Linux 3.5, 45-51 ``start_data`` to
    ``env_end``), folded into one number. With ASLR (``kernel.randomize_va_space``)
    they are randomized at every exec. Without it (``randomize_va_space=0``, a process
    run under ``setarch -R`` or a debugger: the personality outlives the exec) the
    stack start moves only when the new ``argv`` and environment differ in size by more
    than its 16-byte alignment, but ``arg_start`` to ``env_end`` (48-51) move with every
    byte of that size. An exec to a command line and environment of exactly the old
    sizes, without ASLR, changes none of them: only exec events see it.

    Args:
        text: The whole stat line, as read (bytes: no decoding on the steady path).

    Returns:
        The mark, or None when the line has no such fields or they read 0 (a zombie, a
        kernel thread, or a reader without ``PTRACE_MODE_READ`` on the process:
        nothing to compare).
    """
    rest = text[text.rfind(b")") + 2 :].split(None, 49)
    if len(rest) < 26 or not (rest[23].isdigit() and rest[25].isdigit()):
        return None
    if rest[23] == b"0" and rest[25] == b"0":
        return None
    # Compared as the bytes read (no int() on the steady path); fields 45-51 where the
    # kernel has them (3.5 and later). A mark lives in this process's memory only.
    return hash((rest[23], rest[24], rest[25], *rest[42:49]))


def _is_procfs(path: str) -> bool:
    """True when ``path`` is a procfs mount point (per ``/proc/self/mounts``)."""
    real = os.path.realpath(path)
    text = _read_text("/proc/self/mounts") or ""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "proc" and fields[1] == real:
            return True
    return False


def _read_text(path: str) -> str | None:
    data = _read_bytes(path)
    return None if data is None else data.decode("utf-8", "surrogateescape")


def _read_bytes(path: str) -> bytes | None:
    # os.open/os.read: a buffered file object costs more than the read itself here,
    # and this runs once per process per scan.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
        if len(data) == 4096:  # procfs fills small files in one read; loop for big ones
            chunks = [data]
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            data = b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data


def parse_cmdline(raw: bytes | None) -> tuple[str, ...]:
    """Split ``/proc/PID/cmdline`` into argv.

    Normally every argument ends in a NUL. A process that wrote a title over its argv
    area (nginx, postgres, sshd and setproctitle(3) do this) may leave none: the kernel
    then returns the title up to its first NUL, with no NUL at all (``get_mm_proctitle``,
    fs/proc/base.c). Both shapes give the same tuple: the last piece is kept unless it is
    the empty string after a final NUL.

    Args:
        raw: The file's bytes, or None when unreadable.

    Returns:
        The arguments, undecodable bytes escaped (``surrogateescape``); empty for none.
    """
    if not raw:
        return ()
    parts = raw.decode("utf-8", "surrogateescape").split("\0")
    if parts[-1] == "":
        parts.pop()
    return tuple(parts)


def parse_status(text: str | None) -> tuple[int | None, tuple[int, ...]]:
    """The real UID and the ``NSpid`` row of ``/proc/PID/status`` (proc(5)).

    Only the two rows are looked for (the last of each, as the kernel writes them after
    ``Name:``, the one row a process chooses), not every row split and compared: this
    runs for every process on the first scan.

    Returns:
        ``(uid, nspid)``; None / ``()`` for a field that is missing or malformed.
    """
    if not text:
        return None, ()
    text = "\n" + text
    uid: int | None = None
    nspid: tuple[int, ...] = ()
    row = _status_row(text, "\nUid:")
    if row is not None:
        with contextlib.suppress(IndexError, ValueError):
            uid = int(row.split()[0])
    row = _status_row(text, "\nNSpid:")
    if row is not None:
        with contextlib.suppress(ValueError):  # not procfs as proc(5) documents it
            nspid = tuple(int(x) for x in row.split())
    return uid, nspid


def _status_row(text: str, key: str) -> str | None:
    """The rest of the last line of ``text`` that starts with ``key`` (``"\\nUid:"``)."""
    start = text.rfind(key)
    if start < 0:
        return None
    start += len(key)
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def read_details(
    base: str,
    pid: int,
    comm: str,
    state: str,
    ppid: int,
    pgid: int,
    sid: int,
    flags: int,
    start: int,
    user_name: Callable[[int], str] | None = None,
    share: Callable[[Any], Any] | None = None,
    late: ProcessTable | None = None,
) -> Proc:
    """Complete a parsed stat line with cmdline, exe, status and cgroup of ``base``.

    The one place these files are read and parsed, for the scan's table and for the
    guards' live re-check alike. A kernel thread (PF_KTHREAD in the stat flags,
    include/linux/sched.h) has none of them worth reading.

    Args:
        base: ``/proc/PID`` (under any procfs mount or fixture root).
        pid, comm, state, ppid, pgid, sid, flags, start: Fields of :func:`parse_stat`.
        user_name: UID → name; None leaves ``user`` unset.
        share: Value → an equal value to hold instead (the table's one copy of a
            command line, executable or cgroup); None keeps the values read.
        late: The table that reads ``status`` (``uid``, ``user``, ``nspid``) and
            ``cgroup`` when they are first asked for (:class:`LateProc`) instead of
            now; None reads them now.

    Returns:
        The process; unreadable fields are None or empty (permission, or it exited).
    """
    if flags & PF_KTHREAD:
        return Proc(pid, ppid, start, state, comm, pgid, sid, kernel_thread=True)
    cmdline = parse_cmdline(_read_bytes(f"{base}/cmdline"))
    try:
        exe: str | None = os.readlink(f"{base}/exe")
    except OSError:
        exe = None
    uid: int | None
    if late is not None:
        uid, nspid = _UNREAD_UID, _UNREAD_NSPID
        cgroup: tuple[str, ...] = _UNREAD
    else:
        uid, nspid = parse_status(_read_text(f"{base}/status"))
        cgroup_text = _read_text(f"{base}/cgroup")
        cgroup = tuple(cgroup_text.splitlines()) if cgroup_text else ()
    if share is not None:
        # Shared before the record is built: one frozen record per process, not a
        # second one made by dataclasses.replace (2,000 of them at a one-shot's start).
        cmdline = share(cmdline)
        if cgroup is not _UNREAD:
            cgroup = share(cgroup)
        if exe is not None:
            exe = share(exe)
    if late is not None:
        record = LateProc(
            pid, ppid, start, state, comm, pgid, sid, uid=uid, user=_UNREAD_USER, exe=exe,
            cmdline=cmdline, cgroup=cgroup, nspid=nspid,
        )  # fmt: skip
        object.__setattr__(record, "_table", late)
        return record
    return Proc(
        pid=pid,
        ppid=ppid,
        start_ticks=start,
        state=state,
        comm=comm,
        pgid=pgid,
        sid=sid,
        uid=uid,
        user=user_name(uid) if uid is not None and user_name is not None else None,
        exe=exe,
        cmdline=cmdline,
        cgroup=cgroup,
        nspid=nspid,
    )


# What a LateProc has not read yet (compared by identity or value, never shown).
_UNREAD: tuple[str, ...] = ("0::(not read yet)",)
_UNREAD_NSPID: tuple[int, ...] = (-1,)
_UNREAD_UID = -2  # no UID is negative
_UNREAD_USER = "(not read yet)"
# The slots' own descriptors, under the properties below.
_CGROUP, _UID, _USER, _NSPID = (Proc.__dict__[n] for n in ("cgroup", "uid", "user", "nspid"))


class LateProc(Proc):
    """A :class:`Proc` whose ``/proc/PID/status`` (``uid``, ``user``, ``nspid``) and
    ``/proc/PID/cgroup`` are read when first asked for: the one-shot's table (issue 34,
    item 2). What decides is read for the processes that are looked at (candidates,
    jobs' lineages), and every process's only where something looks at every process
    (the guard and the service scope for a job in a unit or container). It equals the
    record read at once.

    A read is kept only if ``/proc/PID`` is still the process the table read (its
    inode, or else its start time, checked after the read); a process gone by then reads
    as one that exits while the table reads it: no UID, no cgroup.
    """

    __slots__ = ("_table",)
    _table: ProcessTable

    @property
    def cgroup(self) -> tuple[str, ...]:
        """Lines of ``/proc/PID/cgroup``, read at the first call."""
        value: tuple[str, ...] = _CGROUP.__get__(self, Proc)
        if value is _UNREAD:
            value = self._table.late_cgroup(self)
            _CGROUP.__set__(self, value)
        return value

    @cgroup.setter
    def cgroup(self, value: tuple[str, ...]) -> None:  # the dataclass __init__ only
        _CGROUP.__set__(self, value)

    def _status(self) -> None:
        if _UID.__get__(self, Proc) == _UNREAD_UID:
            uid, nspid = self._table.late_status(self)
            _UID.__set__(self, uid)
            _NSPID.__set__(self, nspid)
            _USER.__set__(self, self._table.user_name(uid) if uid is not None else None)

    @property
    def uid(self) -> int | None:
        """Real UID from ``/proc/PID/status``, read at the first call."""
        self._status()
        value: int | None = _UID.__get__(self, Proc)
        return value

    @uid.setter
    def uid(self, value: int | None) -> None:
        _UID.__set__(self, value)

    @property
    def user(self) -> str | None:
        """The name of :attr:`uid`."""
        self._status()
        value: str | None = _USER.__get__(self, Proc)
        return value

    @user.setter
    def user(self, value: str | None) -> None:
        _USER.__set__(self, value)

    @property
    def nspid(self) -> tuple[int, ...]:
        """The ``NSpid`` row of ``/proc/PID/status``, read at the first call."""
        self._status()
        value: tuple[int, ...] = _NSPID.__get__(self, Proc)
        return value

    @nspid.setter
    def nspid(self, value: tuple[int, ...]) -> None:
        _NSPID.__set__(self, value)


def read_proc(pid: int, proc_root: str = "/proc") -> Proc | None:
    """Read one process from procfs now, uncached: stat, then :func:`read_details`.

    Args:
        pid: PID in the namespace of ``proc_root``.
        proc_root: procfs mount.

    Returns:
        The process, or None when ``/proc/PID/stat`` is absent or unparsable (it exited).
    """
    fields = _stat_now(pid, proc_root)
    if fields is None:
        return None
    comm, state, ppid, pgid, sid, flags, start = fields
    return read_details(f"{proc_root}/{pid}", pid, comm, state, ppid, pgid, sid, flags, start)


class Seen(Protocol):
    """What :func:`is_alive` reads of a process: a :class:`~watchdog.model.Proc` or the
    hands' live read (:class:`watchdog.actions.guards.LiveProc`)."""

    @property
    def start_ticks(self) -> int:
        """Start time, clock ticks after boot."""
        ...

    @property
    def state(self) -> str:
        """One-letter state (``Z`` for a zombie)."""
        ...


def is_alive(seen: Seen | None, start_ticks: object) -> bool:
    """The one rule of "this process still runs": the process seen under the PID has the
    start time recorded with it (another one is a reused PID) and is not a zombie (it
    exited; only its parent's wait is missing).

    Args:
        seen: The process under the PID, or None when there is none (it vanished).
        start_ticks: The start time recorded with the PID (a value read back from a
            record that is not an int is no match).
    """
    return seen is not None and seen.start_ticks == start_ticks and seen.state != "Z"


def alive_now(identity: tuple[int, object], proc_root: str = "/proc") -> bool:
    """Whether ``(pid, start_ticks)`` runs at this instant, read from procfs uncached
    (:func:`read_proc`, :func:`is_alive`): the hands' check before and after acting."""
    pid, start_ticks = identity
    return is_alive(read_proc(pid, proc_root), start_ticks)


def read_identity(pid: int, proc_root: str = "/proc") -> tuple[int, str] | None:
    """Start time and state of ``pid`` now, from its stat line alone (the cheap re-check).

    Returns:
        ``(start_ticks, state)``, or None when it is gone or unparsable.
    """
    fields = _stat_now(pid, proc_root)
    if fields is None:
        return None
    _comm, state, _ppid, _pgid, _sid, _flags, start = fields
    return start, state


def _stat_now(pid: int, proc_root: str) -> tuple[str, str, int, int, int, int, int] | None:
    """``/proc/PID/stat`` parsed (:func:`parse_stat`), or None when gone or unparsable."""
    raw = _read_bytes(f"{proc_root}/{pid}/stat")
    if raw is None:
        return None
    try:
        return parse_stat(raw.decode("utf-8", "surrogateescape"))
    except StatParseError:
        return None


# PROC_PID_INIT_INO (include/linux/proc_ns.h): the inode of the initial PID namespace,
# fixed since Linux 3.8; `readlink /proc/PID/ns/pid` shows it as pid:[4026531836].
INITIAL_PID_NS = f"pid:[{0xEFFFFFFC}]"


@dataclass(frozen=True)
class PidNamespaces:
    """Which PID namespaces are in play (``readlink`` of ``ns/pid``, e.g. ``pid:[4026531836]``).

    Attributes:
        own: rogue-watchdog's own (``/proc/self/ns/pid``); None when unreadable.
        procfs: The namespace whose PIDs ``proc_root`` shows: that of its PID 1
            (``PROC_ROOT/1/ns/pid``; unreadable to non-root, and from a child namespace);
            None when unreadable.
        self_there: Our own PID as ``proc_root`` numbers it (``readlink PROC_ROOT/self``);
            None without a ``self`` link (a fixture tree).
        self_here: Our own PID in our own namespace (``getpid(2)``).
    """

    own: str | None
    procfs: str | None
    self_there: int | None = None
    self_here: int | None = None

    @property
    def host_pids(self) -> bool:
        """True when the PIDs in ``proc_root`` are those of the initial PID namespace, the
        numbering NVML reports: only then may an NVML PID be looked up by number. When
        ``procfs`` is unreadable, our own namespace decides, and it must number the
        processes as ``proc_root`` does."""
        if self.procfs is not None:
            return self.procfs == INITIAL_PID_NS
        return (self.own is None or self.own == INITIAL_PID_NS) and self.same

    @property
    def same(self) -> bool:
        """False when the PIDs in ``proc_root`` are known not to be the numbers kill(2)
        and pidfd_open(2) take here (another namespace's procfs): nothing may be
        signalled then."""
        if self.self_there is not None and self.self_here is not None:
            return self.self_there == self.self_here
        return self.own is None or self.procfs is None or self.own == self.procfs


def pid_namespaces(proc_root: str = "/proc") -> PidNamespaces:
    """Read :class:`PidNamespaces` for ``proc_root`` (namespaces(7), proc(5))."""

    def link(path: str) -> str | None:
        try:
            return os.readlink(path)
        except OSError:
            return None

    there = link(f"{proc_root}/self")
    return PidNamespaces(
        link("/proc/self/ns/pid"),
        link(f"{proc_root}/1/ns/pid"),
        int(there) if there is not None and there.isdigit() else None,
        os.getpid(),
    )


class ProcessTable:
    """A cached view of every process under ``proc_root``.

    Args:
        proc_root: Where procfs is mounted; fixture trees in tests pass their own.
        restat_every: Every this many refreshes a process's stat line is read even
            when its inode is unchanged.
        late_reads: Read each process's ``status`` and ``cgroup`` when first asked
            for (:class:`LateProc`), not with the rest: the one-shot ``scan``.

    The table never raises for a process that vanishes or is unreadable mid-read: that
    process is dropped (vanished) or kept with ``None`` fields (permission).
    """

    def __init__(
        self, proc_root: str = "/proc", restat_every: int = 6, late_reads: bool = False
    ) -> None:
        self.proc_root = proc_root
        self.late_reads = late_reads
        self.restat_every = max(1, restat_every)
        self.trust_inodes = _is_procfs(proc_root)
        self.watched: set[int] = set()
        self.stat_reads = 0
        self._round = 0
        self._inodes: dict[int, int] = {}
        self._procs: dict[int, Proc] = {}
        self._stat_raw: dict[int, bytes] = {}
        # PID -> exec_mark of the process as last read: an exec that keeps comm.
        self._marks: dict[int, int] = {}
        # Parent PID -> its children, ascending, built at the first children() and then
        # kept current from what changed (issue 34, item 1: an exec pass must not sort
        # the whole table again); _moves: PID -> the parent the index files it under,
        # for each record replaced, added or dropped since.
        self._children: dict[int, list[int]] | None = None
        self._moves: dict[int, int | None] = {}
        # False: the index is rebuilt after any change instead (the trust simulator's
        # twin scanner, the oracle the kept index is compared with).
        self.keep_index = True
        self._users: dict[int, str] = {}
        # Command lines, executables and cgroups, each value once (_shared).
        self._values: dict[Any, Any] = {}
        self._force: set[int] = set()
        self.new_pids: set[int] = set()
        # What the last refresh changed, for caches kept beside the table: PIDs whose
        # record is new or replaced, PIDs that are gone, and a refresh counter.
        self.changed: set[int] = set()
        self.removed: set[int] = set()
        self.generation = 0
        # Counts every record added, dropped or read again (its command line,
        # executable and comm can only change so); a parent or state update alone may
        # not count. A filter on those fields kept beside the table brings its answer up
        # to date from the PIDs :meth:`read_since` names (issue 34).
        self.reads_changed = 0
        self._read_log: deque[int] = deque(maxlen=READ_LOG_MAX)
        self.error: str | None = None
        self._pid_max: int | None = None
        self._btime: float | None = None

    # -- refresh -----------------------------------------------------------------

    def refresh(self, only: Iterable[int] | None = None) -> dict[int, Proc]:
        """Re-read the process list.

        Args:
            only: Re-read just these PIDs (and any marked by :meth:`reinspect`, and the
                parents of new ones that the table lacks) instead of listing
                ``proc_root``: kernel events named them (watchdog/sources/eventwalk.py).
                Every other record is kept as it is. None lists every process.

        Returns:
            Mapping PID → :class:`Proc` for every process visible now. ``new_pids`` is
            set to the PIDs whose identity was not in the previous refresh (or whose
            ``comm`` changed), i.e. the ones deeply inspected this time. Set ``watched``
            beforehand to PIDs whose parent and state must be current (job members).
        """
        # Updated in place: in a steady state almost every entry is unchanged, and
        # rebuilding three 2,000-entry dicts per tick cost more than the reads saved.
        procs, raws, inodes = self._procs, self._stat_raw, self._inodes
        trust = self.trust_inodes
        new: set[int] = set()
        root = self.proc_root
        every = self.restat_every
        self._round = rnd = (self._round + 1) % every
        watched = self.watched
        entries = self._entries(only)
        seen: set[int] = set()
        changed: set[int] = set()
        half_read: set[int] = set()
        for name, ino in entries:
            pid = int(name)
            seen.add(pid)
            prev = procs.get(pid)
            if ino is None:
                pass  # named by an event: read it
            elif (
                prev is not None
                and trust
                and inodes.get(pid) == ino
                and pid % every != rnd
                and pid not in watched
            ):
                continue  # same inode: same task, nothing to re-read now
            else:
                inodes[pid] = ino
            self.stat_reads += 1
            raw = _read_bytes(f"{root}/{name}/stat")
            if raw is None:
                seen.discard(pid)  # exited between listdir and read
                continue
            if prev is not None and raws.get(pid) == raw:
                continue  # a sleeping process: byte-identical stat line
            raws[pid] = raw
            try:
                comm, state, ppid, pgid, sid, flags, start = parse_stat(
                    raw.decode("utf-8", "surrogateescape")
                )
            except StatParseError:
                seen.discard(pid)
                continue
            if (
                prev is not None
                and prev.start_ticks == start
                and prev.comm == comm
                and pid not in self._force
                and not self._execd(pid, raw)
            ):
                if prev.ppid != ppid or prev.state != state:
                    if prev.ppid != ppid:
                        self._moving(pid, prev)
                    procs[pid] = replace(prev, ppid=ppid, state=state, pgid=pgid, sid=sid)
                    changed.add(pid)
                continue
            proc = self._inspect(pid, comm, state, ppid, pgid, sid, flags, start)
            if proc is None:
                seen.discard(pid)
                continue
            if self._read_whole(pid, raw, proc):
                half_read.add(pid)
            if ino is None:
                if prev is None or prev.start_ticks != start:
                    inodes.pop(pid, None)  # another task's inode: still_same trusts it
                if trust and pid not in inodes:
                    with contextlib.suppress(OSError):
                        inodes[pid] = os.stat(f"{root}/{name}").st_ino
                if ppid > 0 and ppid not in procs and ppid not in seen:
                    entries.append((str(ppid), None))  # its lineage must be in the table
            self._moving(pid, prev)
            procs[pid] = proc
            new.add(pid)
        if only is not None:
            removed = {pid for name, _ in entries if (pid := int(name)) not in seen}
            removed &= procs.keys()
        else:
            removed = procs.keys() - seen
        self._finish(removed, changed | new, new, half_read)
        return procs

    def _finish(self, removed: set[int], changed: set[int], new: set[int], again: set[int]) -> None:
        """A refresh's bookkeeping: drop what is gone, say what changed, and mark for a
        full read next time what must be read again (:meth:`_read_whole`)."""
        self._forget(removed)
        self.changed = changed
        self.removed = removed
        self._force = set()
        self.reinspect(again)
        self.generation += 1
        self.new_pids = new

    def _entries(self, only: Iterable[int] | None) -> list[tuple[str, int | None]]:
        """What :meth:`refresh` reads: (PID text, inode) of every process listed in
        ``proc_root``, or of the PIDs events named (no inode: the stat line and start
        time decide alone). Sets :attr:`error` when the listing fails."""
        if only is not None:
            return [(str(pid), None) for pid in sorted({*only, *self._force})]
        try:
            entries: list[tuple[str, int | None]] = [
                (e.name, e.inode())
                for e in os.scandir(self.proc_root)
                if e.name.isascii() and e.name.isdigit()
            ]
        except OSError as exc:
            self.error = f"cannot list {self.proc_root}: {exc.strerror}"
            return []
        self.error = None
        return entries

    def _read_whole(self, pid: int, raw: bytes, proc: Proc) -> bool:
        """Keep what the next refresh compares a process just read in full with (its
        :func:`exec_mark`); True when it was read in the middle of an ``execve(2)``: a
        live process with no command line yet, whose new ``comm`` may be set before its
        ``argv`` is (fs/exec.c: ``begin_new_exec``, then the loader's argument pages).
        Its ``comm`` then stays as it is: it must be read in full again."""
        self._execd(pid, raw, fresh=True)
        return not proc.cmdline and not proc.is_zombie and not proc.kernel_thread

    def _execd(self, pid: int, raw: bytes, fresh: bool = False) -> bool:
        """True when the process at ``pid`` (same start time, same ``comm``) ran an
        ``execve(2)`` since its mark was last kept (:func:`exec_mark`): ``python3
        launch.py`` → ``python3 train.py`` changes nothing else a stat line shows, and
        without kernel exec events (:meth:`reinspect`) its old command line was kept for
        the process's life. Keeps the new mark; ``fresh``: the process was just read in
        full, its mark is the one to compare with next."""
        mark = exec_mark(raw)
        if mark is None:
            if fresh:
                self._marks.pop(pid, None)
            return False  # a zombie's or an unreadable process's: nothing to compare
        old = self._marks.get(pid)
        self._marks[pid] = mark
        return not fresh and old is not None and old != mark

    def _forget(self, removed: set[int]) -> None:
        """Drop the records of processes that are gone."""
        for pid in removed:
            self._moving(pid, self._procs[pid])
            del self._procs[pid]
            self._stat_raw.pop(pid, None)
            self._inodes.pop(pid, None)
            self._marks.pop(pid, None)
        if removed:
            self._drop_unshared()

    def compact(self) -> None:
        """Rebuild the PID-keyed maps after many processes ended (issue 34, item 3): a
        dict keeps the table of its largest size after its keys are deleted, and the
        three of a table that held 4,096 workers kept ~290 KiB each after the job. The
        records are kept as they are (copying them would not move them out of a pymalloc
        arena the job pinned: a block comes from the partly used pool met last)."""
        self._procs = dict(self._procs)
        self._stat_raw = dict(self._stat_raw)
        self._inodes = dict(self._inodes)
        self._marks = dict(self._marks)
        self._children, self._moves = None, {}
        live: dict[object, object] = {}
        for proc in self._procs.values():
            for value in (proc.cmdline, proc.cgroup, proc.exe):
                if value is not None:
                    live[value] = value
        self._values = live

    # -- event hooks (watchdog/sources/procevents.py) -----------------------------

    def restat_all(self) -> None:
        """Read every stat line at the next full :meth:`refresh`, not only new inodes,
        watched PIDs and a rotating slice: the event path's reconcile walk
        (watchdog/sources/eventwalk.py) catches then what no event reports."""
        self._inodes.clear()

    def reinspect(self, pids: Iterable[int]) -> None:
        """Read these PIDs in full at the next :meth:`refresh`, whatever their inode,
        stat line and ``comm`` say: the kernel reported an exec or a uid/sid change for
        them (an exec that keeps ``comm``, ``python3`` → ``python3 train.py``, changes
        nothing the cheap checks look at)."""
        for pid in pids:
            if pid in self._procs:
                self._force.add(pid)
                self._inodes.pop(pid, None)
                self._stat_raw.pop(pid, None)

    def add_exited(self, procs: Iterable[Proc]) -> set[int]:
        """Keep, until the next :meth:`refresh`, processes an exec event saw that have
        exited since (a 300 ms job between two refreshes).

        Each is added with state ``X`` (proc(5): dead) when its PID is not in the table,
        or when the table shows that same process (same start time) as a zombie its
        parent has not reaped yet: a zombie's command line, executable and cgroup are
        gone, and the record read at exec is what it ran. Any other PID the table shows
        is a live process (maybe a reused PID) and wins. The next refresh drops them and
        lists them in ``removed``, or reads the zombie again.

        Args:
            procs: Records read at exec time (the process and its ancestors).

        Returns:
            The PIDs added.
        """
        added: set[int] = set()
        for proc in procs:
            shown = self._procs.get(proc.pid)
            if shown is None or (
                shown.is_zombie
                and shown.start_ticks == proc.start_ticks
                and not proc.is_zombie
                and not proc.kernel_thread
            ):
                if shown is not None:
                    self.reinspect((proc.pid,))  # the next refresh reads the zombie again
                self._moving(proc.pid, shown)
                self._procs[proc.pid] = replace(proc, state="X")
                added.add(proc.pid)
        if added:
            self.changed |= added
        return added

    def read(self, pid: int) -> Proc | None:
        """Read one process now, without touching the table.

        Returns:
            Its record, or None when it exited or its stat line is malformed.
        """
        raw = _read_bytes(f"{self.proc_root}/{pid}/stat")
        if raw is None:
            return None
        try:
            comm, state, ppid, pgid, sid, flags, start = parse_stat(
                raw.decode("utf-8", "surrogateescape")
            )
        except StatParseError:
            return None
        return self._inspect(pid, comm, state, ppid, pgid, sid, flags, start)

    def _inspect(
        self,
        pid: int,
        comm: str,
        state: str,
        ppid: int,
        pgid: int,
        sid: int,
        flags: int,
        start: int,
    ) -> Proc | None:
        # Processes alike hold the command line, executable and cgroup values of an
        # earlier one instead of their own copies: the 4,096 workers of one launcher keep
        # one of each (issue 34, item 3). Values no live process holds are dropped
        # (:meth:`_drop_unshared`).
        values = self._values
        return read_details(
            f"{self.proc_root}/{pid}", pid, comm, state, ppid, pgid, sid, flags, start,
            self.user_name, lambda v: values.setdefault(v, v),
            self if self.late_reads else None,
        )  # fmt: skip

    def _late_read(self, proc: Proc, name: str) -> str | None:
        """``/proc/PID/NAME`` of ``proc`` read now (:class:`LateProc`); None when the
        process is gone or ``/proc/PID`` is another process by now."""
        text = _read_text(f"{self.proc_root}/{proc.pid}/{name}")
        if not self.still_same(proc.pid):
            now = _stat_now(proc.pid, self.proc_root)
            if now is None or now[6] != proc.start_ticks:
                return None
        return text

    def late_cgroup(self, proc: Proc) -> tuple[str, ...]:
        """``proc``'s cgroup lines read now (:class:`LateProc`); ``()`` when the
        process is gone or ``/proc/PID`` is another process by now."""
        text = self._late_read(proc, "cgroup")
        lines = tuple(text.splitlines()) if text else ()
        return self._values.setdefault(lines, lines)  # type: ignore[no-any-return]

    def late_status(self, proc: Proc) -> tuple[int | None, tuple[int, ...]]:
        """``proc``'s UID and ``NSpid`` read now (:class:`LateProc`, :func:`parse_status`);
        ``(None, ())`` when the process is gone or another by now."""
        return parse_status(self._late_read(proc, "status"))

    def _drop_unshared(self) -> None:
        """Keep only the shared values live processes hold, once most are stale."""
        if len(self._values) <= 2 * len(self._procs) + 256:
            return
        live: dict[object, object] = {}
        for proc in self._procs.values():
            for value in (proc.cmdline, proc.cgroup, proc.exe):
                if value is not None:
                    live[value] = value
        self._values = live

    # -- queries -------------------------------------------------------------------

    @property
    def procs(self) -> dict[int, Proc]:
        """The mapping from the last :meth:`refresh`."""
        return self._procs

    def get(self, pid: int) -> Proc | None:
        """The process with this PID, or None when it was not visible at the last refresh."""
        return self._procs.get(pid)

    def still_same(self, pid: int) -> bool:
        """True when ``/proc/PID`` is still the task the last refresh read: its inode is
        the one recorded then (one ``stat``, the check :meth:`refresh` trusts). False
        when it cannot be told this way (not procfs, not read, gone, another inode):
        the caller then reads the identity itself.
        """
        ino = self._inodes.get(pid) if self.trust_inodes else None
        if ino is None or pid not in self._procs:
            return False
        try:
            return os.stat(f"{self.proc_root}/{pid}").st_ino == ino
        except OSError:
            return False

    def _moving(self, pid: int, prev: Proc | None) -> None:
        """``pid``'s record is replaced, added (``prev`` None) or dropped: the children
        index moves it at the next :meth:`children` (from the parent it was filed
        under, the first time it moves since)."""
        self.reads_changed += 1
        self._read_log.append(pid)
        if not self.keep_index:
            self._children = None
        elif self._children is not None and pid not in self._moves:
            self._moves[pid] = None if prev is None else prev.ppid

    def read_since(self, mark: int) -> set[int] | None:
        """The PIDs whose record was added, dropped or read again since
        :attr:`reads_changed` was ``mark``; None when that is too long ago to tell
        (more than :data:`READ_LOG_MAX` such changes): look at every record then."""
        count = self.reads_changed - mark
        if count < 0 or count > len(self._read_log):
            return None
        return set(itertools.islice(reversed(self._read_log), count))

    def children(self, pid: int) -> list[int]:
        """Direct children of ``pid`` at the last refresh, ascending (the list is the
        index's own: read it, do not keep it across a refresh)."""
        kids = self._children
        if kids is None:
            kids = {}
            for p in sorted(self._procs):
                kids.setdefault(self._procs[p].ppid, []).append(p)
            self._children, self._moves = kids, {}
        elif self._moves:
            # What the refreshes since changed: the same lists a rebuild would make.
            procs = self._procs
            for moved, was in self._moves.items():
                if was is not None and (siblings := kids.get(was)) is not None:
                    with contextlib.suppress(ValueError):
                        siblings.remove(moved)
                    if not siblings:
                        del kids[was]
                proc = procs.get(moved)
                if proc is not None:
                    bisect.insort(kids.setdefault(proc.ppid, []), moved)
            self._moves = {}
        return kids.get(pid, [])

    def descendants(self, pid: int) -> Iterator[int]:
        """Every descendant of ``pid`` (not ``pid`` itself), depth first."""
        stack = list(reversed(self.children(pid)))
        seen = {pid}
        while stack:
            cur = stack.pop()
            if cur in seen:
                continue  # a parent loop: impossible in procfs, possible in a fixture tree
            seen.add(cur)
            yield cur
            stack.extend(reversed(self.children(cur)))

    def ancestors(self, pid: int) -> list[Proc]:
        """``pid`` and its parents up to the namespace's PID 1, nearest first.

        Stops early where a parent is not visible (PID namespace edge, or it exited).
        """
        chain: list[Proc] = []
        seen: set[int] = set()
        cur = self._procs.get(pid)
        while cur is not None and cur.pid not in seen:
            chain.append(cur)
            seen.add(cur.pid)
            if cur.ppid <= 0:
                break
            cur = self._procs.get(cur.ppid)
        return chain

    def user_name(self, uid: int) -> str:
        """Name of ``uid`` from the passwd database, or the number as text."""
        name = self._users.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = str(uid)
            self._users[uid] = name
        return name

    def fd_targets(self, pid: int) -> list[str]:
        """Targets of every open file descriptor of ``pid``.

        Returns:
            ``readlink`` of each ``/proc/PID/fd/N``; empty when the directory is
            unreadable (permission) or the process exited.
        """
        base = f"{self.proc_root}/{pid}/fd"
        try:
            names = os.listdir(base)
        except OSError:
            return []
        out = []
        for n in names:
            try:
                out.append(os.readlink(f"{base}/{n}"))
            except OSError:
                continue
        return out

    def environ(self, pid: int) -> dict[str, str] | None:
        """Environment of ``pid`` at exec time (``/proc/PID/environ``).

        Returns:
            The variables, or None when unreadable (another user's process without
            CAP_SYS_PTRACE, or it exited).
        """
        raw = _read_text(f"{self.proc_root}/{pid}/environ")
        if raw is None:
            return None
        env: dict[str, str] = {}
        for item in raw.split("\0"):
            key, sep, value = item.partition("=")
            if sep:
                env[key] = value
        return env

    def start_time_s(self, start_ticks: int) -> float | None:
        """POSIX time a process started: ``btime`` of ``/proc/stat`` plus its start ticks.

        Returns:
            Seconds since the epoch, or None when ``/proc/stat`` has no readable btime
            (a fixture tree).
        """
        if self._btime is None:
            text = _read_text(f"{self.proc_root}/stat") or ""
            for line in text.splitlines():
                if line.startswith("btime "):
                    with contextlib.suppress(IndexError, ValueError):
                        self._btime = float(line.split()[1])
                    break
            if self._btime is None:
                return None
        return self._btime + start_ticks / os.sysconf("SC_CLK_TCK")

    def pid_max(self) -> int:
        """``/proc/sys/kernel/pid_max``; 4194304 (the 64-bit ceiling) when unreadable."""
        if self._pid_max is None:
            text = _read_text(f"{self.proc_root}/sys/kernel/pid_max")
            try:
                self._pid_max = int(text.strip()) if text else 4194304
            except ValueError:
                self._pid_max = 4194304
        return self._pid_max

    def alive(self, identity: tuple[int, int]) -> bool:
        """Whether the process ``(pid, start_ticks)`` still ran at the last refresh
        (:func:`is_alive`)."""
        pid, start_ticks = identity
        return is_alive(self._procs.get(pid), start_ticks)


def boot_id(proc_root: str) -> str | None:
    """This boot's id (``/proc/sys/kernel/random/boot_id``, random(4)), or None when it
    cannot be read (a fixture tree): start ticks count from boot, so identities saved
    during another boot name nothing now."""
    try:
        with open(os.path.join(proc_root, "sys/kernel/random/boot_id")) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def boot_time_s(proc_root: str = "/proc") -> float | None:
    """When this host booted, POSIX seconds (``btime`` of ``PROC/stat``, proc(5)), or
    None when it cannot be read."""
    try:
        with open(os.path.join(proc_root, "stat")) as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None
