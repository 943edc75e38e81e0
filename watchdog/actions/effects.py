"""The one object through which every enforcement side effect passes.

Signals, file rewrites, backups, renames, commands (``systemctl``, ``crontab``,
``scontrol``) and cgroup changes (a GPU denial's device rule or program) all go through an
:class:`Effects`. Tests replace it with
:class:`RecordingEffects`, which records each call and changes nothing, to prove what
would have been done (or that nothing was sent at all).

Read-only commands (``systemctl is-enabled``) go through :meth:`Effects.query`: they run
even in a dry run, since the plan depends on their answers.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import command
from ..command import CommandResult, RecordingRunner
from ..faults import fault_point
from ..sources.procfs import read_proc
from ..state import ActionJournal
from . import devprog


class IdentityChangedError(ProcessLookupError):
    """The PID belongs to another process than the one decided on; nothing was sent.

    Attributes:
        pid: The PID.
        expected_ticks: The start time the decision was made on.
        found_ticks: The start time the PID has now.
    """

    def __init__(self, pid: int, expected_ticks: int, found_ticks: int) -> None:
        super().__init__(
            errno.ESRCH,
            f"PID {pid} now has start time {found_ticks}, not {expected_ticks}: "
            "a different process (PID reused)",
        )
        self.pid = pid
        self.expected_ticks = expected_ticks
        self.found_ticks = found_ticks


@contextlib.contextmanager
def pinned(pid: int, start_ticks: int | None) -> Iterator[int]:
    """A pidfd of the process that has ``pid`` now (``pidfd_open(2)``), checked to be the
    one started at ``start_ticks`` (``/proc/PID/stat`` field 22; None: whichever it is).

    Yields:
        The pidfd, closed on exit: a signal sent through it reaches that process or
        fails (ESRCH), even if the PID were reused meanwhile.

    Raises:
        IdentityChangedError: The PID now belongs to another process.
        ProcessLookupError: It no longer exists.
    """
    fd = os.pidfd_open(pid)
    try:
        if start_ticks is not None:
            proc = read_proc(pid)
            if proc is None:
                raise ProcessLookupError(errno.ESRCH, f"PID {pid} exited")
            if proc.start_ticks != start_ticks:
                raise IdentityChangedError(pid, start_ticks, proc.start_ticks)
        yield fd
    finally:
        os.close(fd)


class Effects:
    """Real side effects.

    Args:
        command_prefix: Prepended to every command, e.g. ``("nsenter", "-t", "123",
            "-p", "-m")`` to talk to a systemd manager in another namespace.
        timeout_s: Seconds a command may take before it counts as failed.
    """

    def __init__(self, command_prefix: Sequence[str] = (), timeout_s: float = 60.0) -> None:
        self.command_prefix = tuple(command_prefix)
        self.timeout_s = timeout_s

    def send_signal(self, pid: int, sig: int, start_ticks: int | None = None) -> None:
        """Signal one process through a pidfd, pinned to its identity.

        ``pidfd_open(2)`` takes a reference to the process that has ``pid`` *now*; its
        start time is then read (``/proc/PID/stat`` field 22) and compared with
        ``start_ticks``. If they match, the pidfd refers to that very process and
        ``pidfd_send_signal(2)`` can only reach it: were it to exit and its PID be reused
        meanwhile, the signal fails with ESRCH instead of hitting the newcomer.

        Args:
            pid: PID in our PID namespace.
            sig: Signal number.
            start_ticks: The identity the decision was made on; None signals whatever
                process has the PID (only for callers that hold no identity).

        Raises:
            IdentityChangedError: The PID now belongs to another process (nothing sent).
            ProcessLookupError: It no longer exists.
            PermissionError: Not allowed to signal it.
        """
        with pinned(pid, start_ticks) as fd:
            signal.pidfd_send_signal(fd, sig)

    def write_file_atomic(self, path: str, data: bytes, uid: int, gid: int, mode: int) -> None:
        """Replace ``path`` with ``data`` in one ``rename(2)``: a temporary file in the same
        directory gets the owner and mode first, is fsynced, then renamed over ``path``.

        Raises:
            OSError: The directory is not writable, the disk is full, chown refused.
        """
        directory = os.path.dirname(path) or "."
        # A name with a dot: cron(8) ignores it in /etc/cron.d while it exists.
        fd, tmp = tempfile.mkstemp(prefix=".rogue-watchdog.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchown(fh.fileno(), uid, gid)
                os.fchmod(fh.fileno(), mode)
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def copy_backup(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst`` byte for byte, keeping owner, mode and times.

        Raises:
            OSError: Unreadable source, unwritable destination, or the copy does not
                read back identical to the source.
        """
        Path(dst).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copy2(src, dst)
        st = os.stat(src)
        os.chown(dst, st.st_uid, st.st_gid)
        os.chmod(dst, st.st_mode & 0o7777)
        if Path(dst).read_bytes() != Path(src).read_bytes():
            raise OSError(f"backup {dst} does not match {src}")

    def rename(self, src: str, dst: str) -> None:
        """``rename(2)`` ``src`` to ``dst`` (mode and owner travel with the inode).

        Raises:
            FileExistsError: ``dst`` exists (never overwritten).
            OSError: Any other failure.
        """
        if os.path.lexists(dst):
            raise FileExistsError(f"{dst} exists; not overwriting it")
        os.rename(src, dst)

    def touch(self, path: str) -> None:
        """Set ``path``'s times to now (cron(8) rescans a directory whose mtime changed)."""
        os.utime(path)

    def set_mtime(self, path: str, mtime_ns: int) -> None:
        """Give ``path`` the modification time ``mtime_ns`` (nanoseconds since the epoch)
        and access time now: a restored file as it was.

        Raises:
            OSError: The file is gone or its times cannot be set.
        """
        os.utime(path, ns=(time.time_ns(), mtime_ns), follow_symlinks=False)

    def remove(self, path: str) -> None:
        """``unlink(2)`` a file (after it was backed up).

        Raises:
            OSError: It is missing, a directory, or the directory is not writable.
        """
        os.unlink(path)

    def make_cgroup(self, path: str) -> None:
        """``mkdir(2)`` a child cgroup (the device rule's, watchdog/actions/gpudeny.py).

        Raises:
            FileExistsError: It exists already (never taken over: it may be another's).
            OSError: Any other failure (no such hierarchy, no permission).
        """
        os.mkdir(path, 0o755)

    def write_control(self, path: str, text: str) -> None:
        """Write ``text`` to a cgroup control file (``devices.deny``) in one ``write(2)``.

        Raises:
            OSError: The kernel refused the value or the file is gone.
        """
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def move_to_cgroup(self, pid: int, start_ticks: int | None, cgroup: str) -> None:
        """Move one process (every thread of it) into ``cgroup`` through its
        ``cgroup.procs``, pinned to its identity as :meth:`send_signal` is: a pidfd
        taken first keeps the PID from being reused until the write is done.

        Args:
            pid: PID in our PID namespace.
            start_ticks: The identity decided on; None moves whatever has the PID (only
                for a lift, which moves what is in the denial's own cgroup).
            cgroup: The cgroup's directory.

        Raises:
            IdentityChangedError: The PID now belongs to another process (not moved).
            ProcessLookupError: It no longer exists.
            OSError: The kernel refused the move.
        """
        # cgroup.procs takes a number: the identity is checked right before it is written.
        with pinned(pid, start_ticks):
            self.write_control(os.path.join(cgroup, "cgroup.procs"), str(pid))

    def attach_device_program(self, cgroup: str, rules: Sequence[str]) -> int:
        """Attach a device program denying ``rules`` to ``cgroup`` (cgroup v2, with
        ``BPF_F_ALLOW_MULTI``: :func:`watchdog.actions.devprog.attach`).

        Returns:
            The attached program's id (recorded: a lift detaches only that id).

        Raises:
            OSError: The kernel refused, or a cgroup above would lose its program.
        """
        return devprog.attach(cgroup, rules)

    def detach_device_program(self, cgroup: str, prog_id: int) -> bool:
        """Detach the denial's program ``prog_id`` from ``cgroup``, only when it is
        attached there (:func:`watchdog.actions.devprog.detach`).

        Returns:
            True when detached, False when it was not attached there (any more).

        Raises:
            OSError: The cgroup is gone, the id is not a denial's program, or the kernel
                refused.
        """
        return devprog.detach(cgroup, prog_id)

    def remove_cgroup(self, path: str) -> None:
        """``rmdir(2)`` an empty child cgroup.

        Raises:
            OSError: It still holds processes (EBUSY) or is gone.
        """
        os.rmdir(path)

    def cgroup_pids(self, path: str) -> list[int]:
        """The PIDs in a cgroup's ``cgroup.procs`` (read-only: also in dry runs).

        Raises:
            OSError: The cgroup is gone.
        """
        with open(os.path.join(path, "cgroup.procs")) as fh:
            return [int(x) for x in fh.read().split()]

    def run(self, argv: Sequence[str], input_bytes: bytes | None = None) -> CommandResult:
        """Run a command that changes something (``systemctl mask``, ``crontab -``).

        Args:
            argv: Program and arguments, after :attr:`command_prefix`; never a shell.
            input_bytes: The command's stdin; None gives it ``/dev/null``.

        Returns:
            Its result, through :func:`watchdog.command.run` with :attr:`timeout_s`:
            never raises for a non-zero exit; 127 for a program that cannot be started,
            124 for one that ran past the limit.
        """
        return command.run([*self.command_prefix, *argv], self.timeout_s, input_bytes)

    def query(self, argv: Sequence[str]) -> CommandResult:
        """Run a read-only command (also in dry runs); results as :meth:`run` gives them."""
        return command.run([*self.command_prefix, *argv], self.timeout_s)


class JournaledEffects(Effects):
    """Real (or recorded) side effects, each written to an action's write-ahead record
    before it is made and marked after (issue 32, case 4): ``disable-source`` and
    ``undo`` run through one. Read-only :meth:`query` calls are not written.

    A step that cannot be written raises :class:`~watchdog.state.JournalError` (an
    ``OSError``) and the side effect is not made: no action without a record.

    Args:
        inner: The effects that act.
        journal: The action's record.
    """

    def __init__(self, inner: Effects, journal: ActionJournal) -> None:
        super().__init__(inner.command_prefix, inner.timeout_s)
        self.inner_effects = inner
        self.journal = journal

    def _do(
        self,
        op: str,
        detail: dict[str, Any],
        act: Callable[[], Any],
        result_of: Callable[[Any], dict[str, Any]] | None = None,
    ) -> Any:
        step = self.journal.intent(op, detail)
        fault_point(f"effects:{op}:intent")
        try:
            out = act()
        except OSError as exc:
            self.journal.failed(step, f"{type(exc).__name__}: {exc}")
            raise
        fault_point(f"effects:{op}:done")
        result = {"returncode": out.returncode} if isinstance(out, CommandResult) else None
        if result_of is not None:
            result = result_of(out)
        self.journal.done(step, result)
        return out

    def send_signal(self, pid: int, sig: int, start_ticks: int | None = None) -> None:
        detail = {"pid": pid, "start_ticks": start_ticks, "signal": signal.Signals(sig).name}
        self._do("signal", detail, lambda: self.inner_effects.send_signal(pid, sig, start_ticks))

    def write_file_atomic(self, path: str, data: bytes, uid: int, gid: int, mode: int) -> None:
        detail = {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        inner = self.inner_effects
        self._do("write", detail, lambda: inner.write_file_atomic(path, data, uid, gid, mode))

    def copy_backup(self, src: str, dst: str) -> None:
        inner = self.inner_effects
        self._do("backup", {"from": src, "to": dst}, lambda: inner.copy_backup(src, dst))

    def rename(self, src: str, dst: str) -> None:
        self._do("rename", {"from": src, "to": dst}, lambda: self.inner_effects.rename(src, dst))

    def touch(self, path: str) -> None:
        self._do("touch", {"path": path}, lambda: self.inner_effects.touch(path))

    def remove(self, path: str) -> None:
        self._do("remove", {"path": path}, lambda: self.inner_effects.remove(path))

    def make_cgroup(self, path: str) -> None:
        self._do("cgroup-mkdir", {"path": path}, lambda: self.inner_effects.make_cgroup(path))

    def write_control(self, path: str, text: str) -> None:
        inner = self.inner_effects
        detail = {"path": path, "text": text}
        self._do("cgroup-write", detail, lambda: inner.write_control(path, text))

    def move_to_cgroup(self, pid: int, start_ticks: int | None, cgroup: str) -> None:
        detail = {"pid": pid, "start_ticks": start_ticks, "cgroup": cgroup}
        inner = self.inner_effects
        self._do("cgroup-move", detail, lambda: inner.move_to_cgroup(pid, start_ticks, cgroup))

    def attach_device_program(self, cgroup: str, rules: Sequence[str]) -> int:
        inner = self.inner_effects
        detail = {"cgroup": cgroup, "rules": list(rules)}
        prog_id: int = self._do(
            "bpf-attach",
            detail,
            lambda: inner.attach_device_program(cgroup, rules),
            lambda out: {"program": out},
        )
        return prog_id

    def detach_device_program(self, cgroup: str, prog_id: int) -> bool:
        inner = self.inner_effects
        done: bool = self._do(
            "bpf-detach", {"cgroup": cgroup, "program": prog_id},
            lambda: inner.detach_device_program(cgroup, prog_id), lambda out: {"detached": out},
        )  # fmt: skip
        return done

    def remove_cgroup(self, path: str) -> None:
        self._do("cgroup-rmdir", {"path": path}, lambda: self.inner_effects.remove_cgroup(path))

    def cgroup_pids(self, path: str) -> list[int]:
        return self.inner_effects.cgroup_pids(path)

    def run(self, argv: Sequence[str], input_bytes: bytes | None = None) -> CommandResult:
        result: CommandResult = self._do(
            "run", {"argv": list(argv)}, lambda: self.inner_effects.run(argv, input_bytes)
        )
        return result

    def query(self, argv: Sequence[str]) -> CommandResult:
        return self.inner_effects.query(argv)


@dataclass
class RecordingEffects(Effects):
    """Records every call in :attr:`calls` and changes nothing.

    Attributes:
        calls: ``(name, args...)`` tuples in call order, e.g. ``("send_signal", 42, 15)``.
        answers: Replies for :meth:`query`/:meth:`run` by argv tuple; missing ones
            answer ``CommandResult(0, "", "")``.
        answer: Optional function computing a reply from an argv (wins over ``answers``).
    """

    calls: list[tuple[Any, ...]] = field(default_factory=list)
    answers: Mapping[tuple[str, ...], CommandResult] = field(default_factory=dict)
    answer: Callable[[tuple[str, ...]], CommandResult | None] | None = None
    command_prefix: tuple[str, ...] = ()
    timeout_s: float = 60.0

    def send_signal(self, pid: int, sig: int, start_ticks: int | None = None) -> None:
        self.calls.append(("send_signal", pid, sig))

    def write_file_atomic(self, path: str, data: bytes, uid: int, gid: int, mode: int) -> None:
        self.calls.append(("write_file_atomic", path, data, uid, gid, mode))

    def copy_backup(self, src: str, dst: str) -> None:
        self.calls.append(("copy_backup", src, dst))

    def rename(self, src: str, dst: str) -> None:
        self.calls.append(("rename", src, dst))

    def touch(self, path: str) -> None:
        self.calls.append(("touch", path))

    def set_mtime(self, path: str, mtime_ns: int) -> None:
        self.calls.append(("set_mtime", path, mtime_ns))

    def remove(self, path: str) -> None:
        self.calls.append(("remove", path))

    def make_cgroup(self, path: str) -> None:
        self.calls.append(("make_cgroup", path))

    def write_control(self, path: str, text: str) -> None:
        self.calls.append(("write_control", path, text))

    def move_to_cgroup(self, pid: int, start_ticks: int | None, cgroup: str) -> None:
        self.calls.append(("move_to_cgroup", pid, start_ticks, cgroup))

    def attach_device_program(self, cgroup: str, rules: Sequence[str]) -> int:
        self.calls.append(("attach_device_program", cgroup, tuple(rules)))
        return 4242  # a program id

    def detach_device_program(self, cgroup: str, prog_id: int) -> bool:
        self.calls.append(("detach_device_program", cgroup, prog_id))
        return True

    def remove_cgroup(self, path: str) -> None:
        self.calls.append(("remove_cgroup", path))

    def cgroup_pids(self, path: str) -> list[int]:
        self.calls.append(("cgroup_pids", path))
        return []

    def run(self, argv: Sequence[str], input_bytes: bytes | None = None) -> CommandResult:
        self.calls.append(("run", tuple(argv), input_bytes))
        return self._reply(tuple(argv))

    def query(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(("query", tuple(argv)))
        return self._reply(tuple(argv))

    def _reply(self, argv: tuple[str, ...]) -> CommandResult:
        # The one answer table convention (watchdog.command.RecordingRunner); success
        # for an argv nobody scripted.
        return RecordingRunner(self.answers, self.answer, CommandResult(0, "", "")).reply(argv)

    def signals(self) -> list[tuple[int, int]]:
        """``(pid, signal)`` of every recorded :meth:`send_signal`."""
        return [(c[1], c[2]) for c in self.calls if c[0] == "send_signal"]
