"""One process as read from procfs."""

from __future__ import annotations

from dataclasses import dataclass


# slots: a table of 4,096 workers, no dict each. eq by hand: a record whose status and
# cgroup are read when first asked (watchdog/sources/procfs.py: LateProc) equals one read at once.
@dataclass(frozen=True, slots=True, eq=False)
class Proc:
    """One process as read from procfs.

    Attributes:
        pid: PID in the PID namespace of the ``proc_root`` that was read.
        ppid: Parent PID (0 for PID 1 and kernel threads' parent kthreadd).
        start_ticks: Start time in clock ticks after boot (field 22 of
            ``/proc/PID/stat``, proc(5)); with ``pid`` it is the process identity.
        state: One-letter state from ``/proc/PID/stat`` (``R``, ``S``, ``Z``...).
        comm: The 15-character ``comm`` name. Never used for matching: training
            frameworks rename processes with setproctitle.
        pgid: Process group ID.
        sid: Session ID.
        uid: Real UID, or None when ``/proc/PID/status`` was unreadable.
        user: User name for ``uid`` (the number as text when it has no passwd entry).
        exe: Target of ``/proc/PID/exe``; None when unreadable (permission, kernel thread).
        cmdline: ``/proc/PID/cmdline`` split on NUL; empty for kernel threads and zombies.
        cgroup: Lines of ``/proc/PID/cgroup`` as read, e.g. ``0::/system.slice/x.service``.
        nspid: The ``NSpid`` row of ``/proc/PID/status``: this PID in each nested PID
            namespace, outermost first.
        kernel_thread: True for kernel threads (PF_KTHREAD in the stat flags).
    """

    pid: int
    ppid: int
    start_ticks: int
    state: str
    comm: str
    pgid: int = 0
    sid: int = 0
    uid: int | None = None
    user: str | None = None
    exe: str | None = None
    cmdline: tuple[str, ...] = ()
    cgroup: tuple[str, ...] = ()
    nspid: tuple[int, ...] = ()
    kernel_thread: bool = False

    def _key(self) -> tuple[object, ...]:
        return (
            self.pid, self.ppid, self.start_ticks, self.state, self.comm, self.pgid,
            self.sid, self.uid, self.user, self.exe, self.cmdline, self.cgroup, self.nspid,
            self.kernel_thread,
        )  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Proc):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def is_zombie(self) -> bool:
        """True when the process has exited and waits for its parent to reap it."""
        return self.state == "Z"

    @property
    def args_text(self) -> str:
        """The command line joined with spaces, or ``[comm]`` when it is empty."""
        return " ".join(self.cmdline) if self.cmdline else f"[{self.comm}]"
