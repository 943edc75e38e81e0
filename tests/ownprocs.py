"""Tests signal only processes this test session started.

A test on the real process table sees the whole host: a daemon in terminate mode, an
enforcer or a ``terminate_tree`` acts on every rogue-looking process there, another
engineer's or a system test's throwaway users' included (a root unit-test run once
SIGTERMed the busy box's ``train_sneaky.py``). So every signal rogue-watchdog sends, and it
sends them all through :meth:`rogue_watchdog.actions.effects.Effects.send_signal`
(tests/unit/test_own_processes.py checks that this stays the only way), is checked here
first: :func:`install` replaces that method for the whole session with one that sends
nothing to a process that is not ours (``PermissionError``, which the product reports
as an error) and keeps a line for :func:`take_refusals`; the autouse fixture in
tests/conftest.py fails the test that asked.

Ours (:func:`owner_of`):

* a process carrying this session's marker in its environment (:data:`OWNER_ENV`, put in
  ``os.environ`` by :func:`mark_environment` before any test starts, so whatever a test
  starts inherits it, also after ``setsid``, a double fork or re-parenting to PID 1);
* a descendant of the pytest process (a child started with a bare environment);
* a process whose command line names a directory claimed with :func:`claim_path` (what
  cron or systemd starts for a test inherits no environment from it; its sandbox, a fresh
  directory, names it);
* a process already exiting, or a zombie (a signal changes nothing for it).
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

OWNER_ENV = "ROGUE_WATCHDOG_TEST_OWNER"
TOKEN = secrets.token_hex(8)
_MARK = f"{OWNER_ENV}={TOKEN}".encode()
_PF_EXITING = 0x4  # include/linux/sched.h: set at the start of do_exit()

_claimed: list[str] = []
_owned: set[tuple[int, int]] = set()  # (PID, start ticks) found ours once
_refusals: list[str] = []


def mark_environment() -> None:
    """Put this session's marker in ``os.environ``: every process started from now on
    inherits it."""
    os.environ[OWNER_ENV] = TOKEN


def claim_path(path: str | os.PathLike[str]) -> None:
    """Count processes whose command line names ``path`` (a fresh sandbox directory of
    the test) as ours: cron, systemd or Slurm start them without our environment."""
    _claimed.append(str(path).rstrip("/"))


def release_path(path: str | os.PathLike[str]) -> None:
    """Undo :func:`claim_path` (the sandbox is removed)."""
    text = str(path).rstrip("/")
    if text in _claimed:
        _claimed.remove(text)


def take_refusals() -> list[str]:
    """The signals refused since the last call, one line each; forgets them."""
    out = list(_refusals)
    _refusals.clear()
    return out


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, ppid, flags, start ticks)`` from ``/proc/PID/stat``; None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        fields = raw.rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[1]), int(fields[6]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _read(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""  # another user's, without root: not known to be ours


def _below_us(pid: int) -> bool:
    me, hops = os.getpid(), 0
    while pid > 1 and hops < 4096:
        st = _stat(pid)
        if st is None:
            return False
        pid, hops = st[1], hops + 1
        if pid == me:
            return True
    return False


def _names_claimed(pid: int) -> str | None:
    text = _read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace") + " "
    for path in _claimed:
        if path + "/" in text or path + " " in text:
            return path
    return None


def owner_of(pid: int) -> str | None:
    """Why ``pid`` is this session's (see the module docstring), or None when it is not
    (or is gone)."""
    st = _stat(pid)
    if st is None:
        return None
    state, _ppid, flags, start = st
    if state in ("Z", "X", "x") or flags & _PF_EXITING:
        return "exiting"
    if (pid, start) in _owned:
        return "ours before"
    if pid == os.getpid():
        return "the test process"
    if _MARK in _read(pid, "environ").split(b"\0"):
        return "marked"
    if _below_us(pid):
        return "a descendant of the test process"
    claimed = _names_claimed(pid)
    if claimed is not None:
        return f"names {claimed}"
    return None


def refusal(pid: int, sig: int, start_ticks: int | None = None) -> str | None:
    """Why signalling ``pid`` must not happen, or None when it may (ours, gone, or no
    longer the process ``start_ticks`` names: the real method then sends nothing)."""
    st = _stat(pid)
    if sig == 0 or st is None or (start_ticks is not None and st[3] != start_ticks):
        return None
    if owner_of(pid) is not None:
        _owned.add((pid, st[3]))
        return None
    argv = _read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
    try:
        uid: int | str = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        uid = "?"
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return (
        f"{name} to PID {pid} `{argv[:160]}` (uid {uid}): not started by this test session "
        f"(no {OWNER_ENV} marker, not below the test process, names no claimed sandbox)"
    )


def install() -> None:
    """Guard :meth:`Effects.send_signal` for the rest of the session (idempotent)."""
    from rogue_watchdog.actions.effects import Effects

    original: Callable[..., None] = Effects.send_signal
    if getattr(original, "rwtest_guarded", False):
        return

    def send_signal(self: Any, pid: int, sig: int, start_ticks: int | None = None) -> None:
        why = refusal(pid, sig, start_ticks)
        if why is not None:
            _refusals.append(why)
            raise PermissionError(errno.EPERM, f"test guard, nothing sent: {why}")
        original(self, pid, sig, start_ticks)

    send_signal.rwtest_guarded = True  # type: ignore[attr-defined]
    send_signal.__doc__ = original.__doc__
    Effects.send_signal = send_signal  # type: ignore[method-assign]
