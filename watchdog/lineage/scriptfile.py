"""The script file a shell runs (``bash retrain.sh``, ``sh /opt/x/run.sh``, an executable
script whose ``#!/bin/bash`` line makes its argv ``/bin/bash /opt/x/run.sh``), read so that
the loop around a job in it can be told as the ``-c`` text's is.

A shell keeps its script open while it runs it (bash on fd 255, dash on fd 10 or above)
and reads it as it goes, so the open descriptor is read first: ``/proc/PID/fd/N`` reaches
the very file the shell reads, in any mount namespace (a container's), even when the path
now names another file. Without one the path is read through the shell's own view,
``/proc/PID/root`` for an absolute path and ``/proc/PID/cwd`` for a relative one (proc(5)).
Either way the text is the file *as it reads now*: a file changed after the shell started
is said to be, and files the script ``source``s and functions it defines are not read.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..model import Proc
from ..safeio import FileTooLargeError, open_regular_fd, unread_reason
from ..sources.procfs import ProcessTable

#: A script larger than this is not read (a loop around a trainer is a few lines).
MAX_SCRIPT_BYTES = 64 * 1024

#: The shells whose ``argv`` may name a script file to run.
_SHELLS = frozenset({"sh", "dash", "bash", "zsh", "ksh", "mksh", "ash"})

#: Shell options that take the next argument as their value (bash(1), dash(1)).
_OPTION_VALUES = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})

#: A script named by one of the shell's own descriptors (``/dev/fd/3``, ``/dev/stdin``).
_FD_PATH = re.compile(r"(?:/dev|/proc/self)/fd/([0-9]{1,9})")
_STD = {"/dev/stdin": "0", "/dev/stdout": "1", "/dev/stderr": "2"}

#: How much later than the shell's start the file's mtime may be and still count as the
#: text it started with: a start time read from ``/proc`` is whole-second ``btime`` plus
#: clock ticks, so it is only known to about a second.
_START_SLACK_S = 2.0


@dataclass(frozen=True)
class ScriptRead:
    """What a shell's script file says now.

    Attributes:
        path: The script as the shell's argv names it (host text: quote it).
        text: The file's text (undecodable bytes kept as surrogates), or None when it
            could not be read.
        unread: Why it could not be read (``permission denied``, ``no such file or
            directory``, ``too large: ...``), or None.
        changed: True when the file was modified after the shell started: the text read
            now need not be what the shell runs.
        own_fd: Read through the shell's own open descriptor of it (the very file it
            reads); False when read by path (a symlink there resolves in the reader's
            root, not the shell's).
    """

    path: str
    text: str | None
    unread: str | None = None
    changed: bool = False
    own_fd: bool = False


def script_path(argv: Sequence[str], exe: str | None = None) -> str | None:
    """The script file a shell's command line runs, or None.

    Args:
        argv: The shell's command line, e.g. ``("/bin/bash", "-e", "/opt/x/run.sh")``.
        exe: Its executable (``/proc/PID/exe``), which names the shell better than
            ``argv[0]``; None to go by ``argv[0]``.

    Returns:
        ``/opt/x/run.sh`` for the example; None when the program is not a shell, when
        it runs ``-c`` text or commands from stdin (``-s``), or names no file.
    """
    if not argv:
        return None
    name = (exe or argv[0]).removesuffix(" (deleted)").rsplit("/", 1)[-1]
    if name not in _SHELLS:
        return None
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg in _OPTION_VALUES:
            i += 2
            continue
        if arg[:1] in ("-", "+"):
            if not arg.startswith("--") and ("c" in arg[1:] or "s" in arg[1:]):
                return None  # the code is on the command line or comes on stdin
            i += 1
            continue
        return arg
    return None


def command_string(
    argv: Sequence[str], exe: str | None = None
) -> tuple[str, tuple[str, ...]] | None:
    """The command text of a shell's ``-c`` command line and the arguments it is given
    (``$0``, ``$1``...), or None.

    Args:
        argv: The shell's command line, e.g. ``("bash", "-ec", "while :; do \"$@\";
            done", "sh", "python3", "train.py")``.
        exe: Its executable (``/proc/PID/exe``); None to go by ``argv[0]``.

    Returns:
        ``("while :; do \"$@\"; done", ("sh", "python3", "train.py"))`` for the
        example; None when the program is not a shell or runs no ``-c`` text. The text
        is the first argument that is no option, as bash(1) and dash(1) take it (``bash
        -c -x CMD`` runs CMD).
    """
    if not argv:
        return None
    name = (exe or argv[0]).removesuffix(" (deleted)").rsplit("/", 1)[-1]
    if name not in _SHELLS:
        return None
    dash_c, i = False, 1
    while i < len(argv):
        arg = argv[i]
        if arg in ("--", "-"):  # the end of options (bash(1): `-` is `--`)
            i += 1
            break
        if arg in _OPTION_VALUES:
            i += 2
            continue
        if arg[:1] not in ("-", "+") or arg == "+":
            break
        dash_c = dash_c or (not arg.startswith("--") and "c" in arg[1:])
        i += 1
    if not dash_c or i >= len(argv):
        return None
    return argv[i], tuple(argv[i + 1 :])


def _open_script(pid: int, path: str, proc_root: str) -> tuple[int, bool]:
    """A descriptor of the script, and whether it came through the shell's own open
    descriptor of it (else through its root or working directory). Raises OSError."""
    base = f"{proc_root}/{pid}"
    fd_path = _FD_PATH.fullmatch(path)
    own = fd_path.group(1) if fd_path is not None else _STD.get(path)
    if own is not None:
        # The shell's own descriptor (`bash /dev/fd/3 3<run.sh`): through the reader's
        # /dev/fd it would be the watchdog's own descriptor of that number.
        return open_regular_fd(f"{base}/fd/{own}"), True
    if path.startswith(("/proc/", "/dev/")):
        raise OSError(errno.EPERM, "a /proc or /dev path, not followed")
    # What the descriptor's link must read: the path itself, else (a relative path, a
    # container's view) its last components.
    tail = "/" + os.path.normpath(path).lstrip("/").removeprefix("./")
    if tail.startswith("/.."):
        tail = "/" + path.rsplit("/", 1)[-1]
    try:
        fds = [n for n in os.listdir(f"{base}/fd") if n.isdigit()]
    except OSError:
        fds = []
    links: list[tuple[bool, int, str]] = []
    for fd in fds:
        try:
            target = os.readlink(f"{base}/fd/{fd}").removesuffix(" (deleted)")
        except OSError:
            continue
        if target == path or target.endswith(tail):
            links.append((target != path, -int(fd), fd))  # exact first, then the highest fd
    for _inexact, _order, fd in sorted(links):
        try:
            return open_regular_fd(f"{base}/fd/{fd}"), True
        except OSError:
            continue
    where = f"{base}/root{path}" if path.startswith("/") else f"{base}/cwd/{path}"
    return open_regular_fd(where), False


def read_script(proc: Proc, table: ProcessTable) -> ScriptRead | None:
    """The script file ``proc`` (a shell) runs, as it reads now.

    Args:
        proc: A process of ``table``.
        table: Gives the procfs mount (``proc_root``) and the shell's start time.

    Returns:
        None when ``proc`` runs no script file (:func:`script_path`); else what was
        read, or why nothing could be (:attr:`ScriptRead.unread`).
    """
    return read_script_of(
        proc.pid, proc.cmdline, proc.exe, table.proc_root,
        lambda: table.start_time_s(proc.start_ticks),
    )  # fmt: skip


def read_script_of(
    pid: int,
    argv: Sequence[str],
    exe: str | None,
    proc_root: str,
    started_s: Callable[[], float | None],
) -> ScriptRead | None:
    """:func:`read_script` of a process known by its fields (``terminate``'s live view).

    Args:
        pid: The shell's PID in the namespace of ``proc_root``.
        argv: Its command line.
        exe: Its executable (``/proc/PID/exe``), or None.
        proc_root: The procfs mount.
        started_s: When it started, POSIX seconds (None when unknown: never "changed").

    Returns:
        As :func:`read_script`.
    """
    path = script_path(argv, exe)
    if path is None:
        return None
    try:
        fd, own_fd = _open_script(pid, path, proc_root)
    except (OSError, ValueError) as exc:
        return ScriptRead(path, None, unread_reason(exc))
    try:
        st = os.fstat(fd)
        # Size 0: an empty script, or a procfs/tracefs file a read consumes (/proc/kmsg,
        # trace_pipe), reached through a symlink on the path: never read.
        raw = os.pread(fd, MAX_SCRIPT_BYTES + 1, 0) if st.st_size else b""
        if max(st.st_size, len(raw)) > MAX_SCRIPT_BYTES:
            # Refused, not cut: a cut script may end inside the loop around the job.
            raise FileTooLargeError(max(st.st_size, len(raw)), MAX_SCRIPT_BYTES)
    except OSError as exc:
        return ScriptRead(path, None, unread_reason(exc))
    finally:
        os.close(fd)
    started = started_s()
    changed = started is not None and st.st_mtime > started + _START_SLACK_S
    return ScriptRead(path, raw.decode("utf-8", "surrogateescape"), None, changed, own_fd)


class ScriptFiles:
    """:func:`read_script` of one process table, each shell's script read once per scan.

    Args:
        table: The scan's process table.
    """

    def __init__(self, table: ProcessTable) -> None:
        self.table = table
        self._read: dict[tuple[int, int], ScriptRead | None] = {}

    def __call__(self, proc: Proc) -> ScriptRead | None:
        """The script ``proc`` runs, as it reads now (:func:`read_script`)."""
        ident = (proc.pid, proc.start_ticks)
        if ident not in self._read:
            self._read[ident] = read_script(proc, self.table)
        return self._read[ident]
