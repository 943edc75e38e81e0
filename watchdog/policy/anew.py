"""Whether a job back after a stop is a person's new run rather than its source's return.

A job that reappears after a ``terminate`` (or a kill) under the same command is the
remediation failing only when something the stop left behind brought it back: the
source the stopped run had (its cron line, unit, shell loop, Slurm job, container,
restart policy), or one that could not be seen. A person who starts the command again
by hand from another login session (a terminal, a tmux session) is starting a new job:
its own ``rogue-job`` finding, not ``respawned`` or a critical ``remediation-failed``
(fresh user, first day: a trainer started again from a login shell 22 s after its
terminate was paged ``remediation-failed``).

The rule errs toward paging: a return is called a person's new run only when its own
origin is a person's session (:attr:`~watchdog.model.Origin.by_hand`) at a terminal,
typed at a prompt (:func:`typed_at_prompt`: an interactive shell its parent, through
wrappers such as ``nohup`` or ``sudo``; no loop, script, keeper program or
multiplexer command), and the stopped
run's recorded origin is known and is not that session. A missing record, or two
sessions that cannot be told apart (no terminal, logind session or tmux session on
both sides), keep the return a return. A new terminal or session alone is no person:
a loop that runs the job through ``script -qec CMD /dev/null`` gets a new
pseudo-terminal each run, a unit or cron line that runs ``tmux new -d -s train CMD`` a
new tmux session id, a remote cron's ``ssh host CMD`` a new logind session with no
terminal, a keeper program's ``pty.spawn`` a new pseudo-terminal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..lineage.base import exe_name, is_wrapper
from ..lineage.scriptfile import command_string, script_path
from ..model import Job, Origin

# The keys of a person's session in an origin's scan JSON (ShellOrigin; SystemdOrigin in
# tmux), most specific first: a tmux session outlives terminals and logins, so when both
# sides were in tmux its session decides; else the logind session; else the terminal.
_SESSION_KEYS: tuple[tuple[str, ...], ...] = (
    ("tmux_socket", "tmux_session_id"),
    ("login_session",),
    ("tty",),
)
_ALL_KEYS = tuple(k for keys in _SESSION_KEYS for k in keys)


def _session(doc: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[object, ...] | None:
    values = tuple(doc.get(k) for k in keys)
    return None if any(v is None for v in values) else values


def same_session(origin: Origin, was: Mapping[str, Any]) -> bool | None:
    """Whether ``origin`` (a person's session) is the session the recorded origin
    ``was`` names.

    Args:
        origin: The new run's origin.
        was: A stopped run's origin as recorded (scan JSON, ``Origin.to_json``).

    Returns:
        True for the same tmux session, logind session or terminal (compared in that
        order, by the first kind of key both carry); False when both carry a key that
        differs, or the recorded origin names no person's session (a cron line, a unit,
        an orphan, an unknown origin); None when both are a person's sessions that
        cannot be told apart (no kind of key on both sides).
    """
    now = origin.to_json()
    for keys in _SESSION_KEYS:
        mine, theirs = _session(now, keys), _session(was, keys)
        if mine is not None and theirs is not None:
            return mine == theirs
    if was.get("kind") == "shell" or any(was.get(k) is not None for k in _ALL_KEYS):
        return None  # a person's session too, with nothing to tell the two apart by
    # A person's session is no cron line, unit, container or Slurm job; an unknown or
    # orphan origin of the stopped run named no session of anyone's at all.
    return False


# Wrappers that run a command they were handed, detached from any prompt, and may run
# it again or anew each time: a multiplexer's or recorder's command, a scheduler's.
_HANDED = frozenset(
    {"tmux", "screen", "SCREEN", "script", "dtach", "abduco", "watch", "xargs", "run-parts"}
    | {"systemd-run", "at", "batch"}
)
_SHELLS = frozenset({"sh", "dash", "bash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh"})


def typed_at_prompt(job: Job) -> bool:
    """True when ``job`` was typed at a person's prompt: above it, through the wrappers
    a person types before a command (``nohup``, ``sudo``, ``timeout``, ``nice``...),
    the first other process is an interactive shell (one that runs no ``-c`` text and
    no script file). False for a shell that runs code (a loop, cron's ``sh -c``, a
    script), a program handed the command (``script -c``, ``tmux new CMD``, ``screen
    -dm``, ``watch``, ``xargs``), any other program (a Python keeper's ``pty.spawn``,
    ``expect``, ``sshd`` running a remote command), or no lineage: what ran it may run
    it again.

    Args:
        job: A job of the scan, its lineage root first.
    """
    for proc in job.lineage[1:]:
        if proc.pid <= 1:
            return False
        name = exe_name(proc)
        if name in _SHELLS:
            code = command_string(proc.cmdline, proc.exe) is not None
            return not code and script_path(proc.cmdline, proc.exe) is None
        if name in _HANDED or not is_wrapper(proc):
            return False
    return False


def started_anew(job: Job, stopped: Iterable[object]) -> bool:
    """True when a run back after a stop was started by a person from a login session
    that none of the stopped runs came from: a new job, not its source's return.

    Args:
        job: The run that came back (its origin and lineage).
        stopped: The recorded origins (scan JSON dicts) of the runs that were stopped,
            e.g. a terminate's ``details.origin`` or the ``jobs`` row's origin; anything
            that is not a dict is an origin not recorded.

    Returns:
        False whenever it cannot be told (no origin recorded, sessions that cannot be
        told apart, an origin of the run back that is not a person's at a terminal, a
        run not typed at a prompt: :func:`typed_at_prompt`): then the return is paged
        as one, never quieter without evidence.
    """
    origin = job.origin
    if not origin.by_hand or origin.to_json().get("tty") is None:
        return False  # no terminal: a detached or remote command, a unit's tmux
    if not typed_at_prompt(job):
        return False
    docs = list(stopped)
    if not docs:
        return False
    for doc in docs:
        if not isinstance(doc, Mapping) or same_session(origin, doc) is not False:
            return False
    return True
