"""Who may never be signalled, checked again immediately before every signal.

The guards hold in every mode (observe, terminate, dry run, the CLI): PID 1, kernel
threads, rogue-watchdog itself and its ancestors, members of sanctioned (or ignored)
jobs, zombies (signalling one does nothing; its parent is what holds the resources),
PIDs not visible in our ``/proc`` (another PID namespace: the number means something
else here), every PID when ``proc_root`` shows another PID namespace than our own, and
anything on ``enforcement.protect``. Kernel threads are told by PF_KTHREAD alone (inside a
PID namespace PID 2 is an ordinary process, not kthreadd).

Identity is PID + start time (``/proc/PID/stat`` field 22, proc(5)). A decision is made
on one scan; the signal goes out later. In between the process may exit and its PID be
reused, or it may ``execve(2)`` into something else: :meth:`SignalGuard.check` re-reads
``/proc`` right before the signal and refuses unless start time and command line are
still the ones the decision was made on.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from ..config.enforcement import Protect
from ..hosttext import quoted_command
from ..model import Protection
from ..sources.procfs import pid_namespaces, read_proc


@dataclass(frozen=True)
class LiveProc:
    """A process as ``/proc`` shows it at this instant.

    Attributes:
        pid: PID in the namespace of ``proc_root``.
        start_ticks: Start time in clock ticks after boot.
        ppid: Parent PID.
        pgid: Process group.
        state: One-letter state (``Z`` for a zombie).
        kernel_thread: PF_KTHREAD set in the stat flags.
        cmdline: argv (empty for kernel threads and zombies).
        exe: ``/proc/PID/exe`` target, or None when unreadable.
        uid: Real UID, or None when unreadable.
        sid: Session ID.
        cgroup: Lines of ``/proc/PID/cgroup``.
    """

    pid: int
    start_ticks: int
    ppid: int
    pgid: int
    state: str
    kernel_thread: bool
    cmdline: tuple[str, ...]
    exe: str | None
    uid: int | None
    sid: int = 0
    cgroup: tuple[str, ...] = ()

    @property
    def user(self) -> str | None:
        """User name of :attr:`uid` (the number as text without a passwd entry)."""
        if self.uid is None:
            return None
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)


def read_live(pid: int, proc_root: str = "/proc") -> LiveProc | None:
    """Read one process from ``/proc`` now (no cache), with the scan's own reader
    (:func:`watchdog.sources.procfs.read_proc`), so a field the guards decide on is
    parsed exactly as the scan parsed it.

    Returns:
        The process, or None when ``/proc/PID`` does not exist or its stat line cannot
        be read or parsed (it exited meanwhile).
    """
    proc = read_proc(pid, proc_root)
    if proc is None:
        return None
    # comm is never used for decisions: anyone can set it. A kernel thread is PF_KTHREAD
    # alone: inside a PID namespace PID 2 is an ordinary process, not kthreadd.
    return LiveProc(
        pid, proc.start_ticks, proc.ppid, proc.pgid, proc.state, proc.kernel_thread,
        proc.cmdline, proc.exe, proc.uid, proc.sid, proc.cgroup,
    )  # fmt: skip


def ancestors_of(pid: int, proc_root: str = "/proc") -> set[int]:
    """``pid`` and every ancestor up to PID 1, read live."""
    out: set[int] = set()
    while pid > 0 and pid not in out and len(out) < 4096:
        out.add(pid)
        proc = read_live(pid, proc_root)
        if proc is None:
            break
        pid = proc.ppid
    return out


@dataclass(frozen=True)
class Expected:
    """The identity a decision was made on.

    Attributes:
        pid: The PID.
        start_ticks: Its start time when the decision was made.
        cmdline: Its argv then; None skips the comparison.
    """

    pid: int
    start_ticks: int
    cmdline: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Refusal:
    """Why a process must not be signalled.

    Attributes:
        pid: The PID asked about.
        guard: Stable name: ``pid-1``, ``pid-namespace``, ``kernel-thread``, ``self``,
            ``ancestor``, ``sanctioned``, ``zombie``, ``invisible``, ``protected``,
            ``identity``.
        reason: One sentence for people.
        report_pid: For a zombie, the parent that should be reported instead.
    """

    pid: int
    guard: str
    reason: str
    report_pid: int | None = None


@dataclass
class SignalGuard:
    """The never-signal rules.

    Args:
        proc_root: procfs mount the PIDs belong to.
        protect: ``enforcement.protect`` entries.
        sanctioned_pids: Members of sanctioned or ignored jobs in the latest scan.
        self_pid: rogue-watchdog's own PID (its ancestors are computed live).
        protection: The scan's one guard (:class:`watchdog.policy.guard.ScanProtection`):
            a process it names by identity (PID + start time) is sanctioned, whatever
            ``sanctioned_pids`` says.
    """

    proc_root: str = "/proc"
    protect: Sequence[Protect] = ()
    sanctioned_pids: Collection[int] = frozenset()
    self_pid: int = field(default_factory=os.getpid)
    protection: Protection | None = None

    def check(self, pid: int, expected: Expected | None = None) -> Refusal | LiveProc:
        """Decide whether ``pid`` may be signalled right now.

        Args:
            pid: The process to signal.
            expected: The identity the decision was made on; None skips the identity
                re-check (only for asking about a PID, never before a signal).

        Returns:
            The live process when every guard passes, else the first refusal.
        """
        if pid <= 1:
            return Refusal(pid, "pid-1", f"PID {pid} is init (or not a process): never signalled")
        if not pid_namespaces(self.proc_root).same:
            return Refusal(
                pid,
                "pid-namespace",
                f"the PIDs in {self.proc_root} belong to another PID namespace than "
                f"rogue-watchdog's: PID {pid} there is not PID {pid} here; never signalled",
            )
        live = read_live(pid, self.proc_root)
        if live is None:
            return Refusal(
                pid, "invisible", f"PID {pid} is not visible in {self.proc_root}: never signalled"
            )
        if live.kernel_thread:
            return Refusal(pid, "kernel-thread", f"PID {pid} is a kernel thread: never signalled")
        if pid == self.self_pid:
            return Refusal(pid, "self", f"PID {pid} is rogue-watchdog itself")
        if pid in ancestors_of(self.self_pid, self.proc_root):
            return Refusal(pid, "ancestor", f"PID {pid} is an ancestor of rogue-watchdog")
        if expected is not None:
            if live.start_ticks != expected.start_ticks:
                return Refusal(
                    pid,
                    "identity",
                    f"PID {pid} now has start time {live.start_ticks}, not "
                    f"{expected.start_ticks}: it is a different process (PID reused)",
                )
            if expected.cmdline is not None and live.cmdline and live.cmdline != expected.cmdline:
                return Refusal(
                    pid,
                    "identity",
                    f"PID {pid} now runs {quoted_command(live.cmdline, 120)}, not the command the "
                    "decision was made on (it exec'd)",
                )
        if live.state == "Z":
            return Refusal(
                pid,
                "zombie",
                f"PID {pid} is a zombie (already exited); its parent PID {live.ppid} holds it",
                report_pid=live.ppid,
            )
        if pid in self.sanctioned_pids or (
            self.protection is not None and (pid, live.start_ticks) in self.protection.identities
        ):
            why = (
                self.protection.member_refusal(pid, live.start_ticks)
                if self.protection is not None
                else f"PID {pid} belongs to a sanctioned job"
            )
            return Refusal(pid, "sanctioned", why)
        for entry in self.protect:
            if entry.matches(live.cmdline, live.exe, live.user):
                return Refusal(
                    pid, "protected", f"PID {pid} matches enforcement.protect entry {entry.text!r}"
                )
        return live
