"""Parents above a job's tree that stop themselves when the freeze stops their child.

A SIGSTOP of a process notifies its parent (SIGCHLD, ``CLD_STOPPED``). Some parents
mirror it: util-linux ``script`` reads the notification from a signalfd and runs
``kill(getpid(), SIGSTOP)``, then continues the child once it is itself continued;
``sudo`` suspends itself the same way; pty relays copy it. When such a parent is not part
of the job's tree (nothing names it, or it is left as shared), the terminate's freeze
stops it and nothing would ever continue it: it stays in state ``T`` with a zombie child.

:class:`StopMirrors` records, before each freeze, the processes above the tree that are
running then and run nothing but the way down to it (a relay has one child; a shell, a
tmux server or sshd with other children is not one, and nothing above it is watched). A
watched process found stopped later stopped because of the freeze: the stop can come down
a chain (``script`` → ``sudo`` → ``sudo`` monitor → job: the monitor does not stop, it
tells its parent over a socket, which stops itself, and ``script`` mirrors that). It is
continued (SIGCONT, pinned to its identity, at most :data:`MAX_CONTS` times), top-down
(a continued relay continues its child itself; from the top, each parent is running again
before its child exits, so it sees that exit), and reported. Nothing else is ever sent to
a process outside the tree, and a process already stopped when the freeze began is not
the freeze's doing: it is left as it is, and so is everything above it.

The watch list is written to the action's journal before the freeze it is for
(:meth:`StopMirrors.entries`, a ``watch`` step), so a daemon that dies between the freeze
and the release leaves it behind: the run that takes the action over reads it back
(:meth:`StopMirrors.restore`) and makes the same release, with the same rules.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .guards import Expected, read_live

#: SIGCONTs sent to one mirroring parent at most: one that keeps stopping itself is
#: reported, not fought.
MAX_CONTS = 3

Ident = tuple[int, int]

_SIGCHLD_BIT = 1 << (int(signal.SIGCHLD) - 1)


@dataclass
class _Above:
    exp: Expected
    below: Ident  # the process under it on the way to the tree
    conts: int = 0
    state: str = ""  # as last seen: "", "T", "gone", "waits" (a zombie child uncollected)
    before: str = ""  # its state when watched, before the freeze (never a stop)


def _sigchld_pending(pid: int, proc_root: str) -> bool:
    """True while a SIGCHLD waits for ``pid`` (``SigPnd``/``ShdPnd`` of
    ``/proc/PID/status``, proc(5)): it has not yet read a child's notification, which
    may still make it stop itself. A SIGCHLD it ignores is never queued."""
    try:
        with open(f"{proc_root}/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("SigPnd", "ShdPnd") and int(value.strip() or "0", 16) & _SIGCHLD_BIT:
                    return True
    except (OSError, ValueError):
        return False
    return False


def _children(pid: int, proc_root: str) -> list[int]:
    """The children of every thread of ``pid`` (``/proc/PID/task/TID/children``)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"{proc_root}/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{proc_root}/{pid}/task/{tid}/children", encoding="ascii") as fh:
                out += [int(k) for k in fh.read().split()]
        except (OSError, ValueError):
            continue
    return out


def _runs_only(pid: int, allowed: set[int], proc_root: str) -> bool:
    """True when every live child of ``pid`` is in ``allowed``."""
    for kid in _children(pid, proc_root):
        if kid in allowed:
            continue
        live = read_live(kid, proc_root)
        if live is not None and live.state != "Z":
            return False
    return True


def _zombie_child(pid: int, proc_root: str) -> int | None:
    """A child of ``pid`` that exited and was not collected, else None."""
    for kid in _children(pid, proc_root):
        live = read_live(kid, proc_root)
        if live is not None and live.state == "Z":
            return kid
    return None


class StopMirrors:
    """The processes above a job's tree that a freeze may stop, and what became of them.

    Args:
        proc_root: Where ``/proc`` is.
    """

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self.above: dict[Ident, _Above] = {}
        self.order: list[Ident] = []  # each after the process under it

    def watch(self, tree: Iterable[Expected]) -> None:
        """Record, before a freeze, the running processes above ``tree`` that run only
        the way down to it (up to PID 1, which is never watched), each with the process
        under it."""
        members = list(tree)
        inside = {e.pid for e in members}
        for exp in members:
            below: Ident = (exp.pid, exp.start_ticks)
            live = read_live(exp.pid, self.proc_root)
            for _hop in range(4096):
                if live is None or live.ppid <= 1 or live.ppid in inside:
                    break
                parent = read_live(live.ppid, self.proc_root)
                if parent is None:
                    break
                ident = (parent.pid, parent.start_ticks)
                if ident in self.above or parent.state in ("T", "t", "Z"):
                    # Watched from another member already; or stopped before the
                    # freeze began: not its doing, nor anything above it.
                    break
                if not _runs_only(parent.pid, inside | {below[0]}, self.proc_root):
                    break  # shared: no relay of the job's (nor anything above it)
                self.above[ident] = _Above(
                    Expected(parent.pid, parent.start_ticks, parent.cmdline or None),
                    below,
                    before=parent.state,
                )
                self.order.append(ident)
                below, live = ident, parent

    def entries(self, start: int = 0) -> list[list[Any]]:
        """The watch list from its ``start``-th process on, as journaled (a ``watch``
        step's ``above``): ``[pid, start_ticks, argv, below_pid, below_start_ticks,
        state]`` each, in watch order (each after the process under it); ``state`` is
        its ``/proc/PID/stat`` state when it was watched, before the freeze."""
        out: list[list[Any]] = []
        for ident in self.order[start:]:
            a = self.above[ident]
            argv = list(a.exp.cmdline or ())
            out.append([ident[0], ident[1], argv, a.below[0], a.below[1], a.before])
        return out

    def restore(self, entries: Iterable[Any]) -> None:
        """Watch again what an interrupted run of the same action had watched (its
        journaled :meth:`entries`, in order), so the same release can be made.

        A malformed entry is skipped. One recorded as stopped before the freeze is not
        the freeze's doing: it is not watched, nor is anything above it (read through
        the recorded links), as :meth:`watch` would have left it.

        Args:
            entries: Lists as :meth:`entries` writes them (from JSON).
        """
        skipped: set[Ident] = set()
        for entry in entries:
            try:
                pid, start, argv, bpid, bstart, before = entry
                ident, below = (int(pid), int(start)), (int(bpid), int(bstart))
                cmdline = tuple(str(a) for a in argv) if isinstance(argv, list) else ()
            except (TypeError, ValueError):
                continue
            if below in skipped or str(before) in ("T", "t", "Z"):
                skipped.add(ident)
                continue
            if ident in self.above or ident[0] <= 1:
                continue
            self.above[ident] = _Above(
                Expected(ident[0], ident[1], cmdline or None), below, before=str(before)
            )
            self.order.append(ident)

    def release(self, froze: Callable[[Ident], bool], send: Callable[[Expected], bool]) -> bool:
        """Continue each watched process that stopped because of the freeze.

        Args:
            froze: Whether this run stopped the process with that identity.
            send: Sends SIGCONT to an identity (pinned); True if sent.

        Returns:
            True while one may still change: it still has a child notification to read
            (which may stop it), or it was continued and has not yet collected its
            child's exit. The caller looks again a little later, within its own bound.
        """
        busy = False
        if not any(froze(a.below) for a in self.above.values()):
            return False  # this run stopped nothing under them: no stop is its doing
        up = {a.below: ident for ident, a in self.above.items()}
        held: set[Ident] = set()  # stopped, or with a child notification still to read
        for ident in reversed(self.order):
            above = self.above[ident]
            live = read_live(ident[0], self.proc_root)
            if live is None or live.start_ticks != ident[1] or live.state == "Z":
                above.state = "gone"
                continue
            pending = _sigchld_pending(ident[0], self.proc_root)
            if live.state == "T" or pending:
                held.add(ident)
            if live.state == "T":
                above.state = "T"
                busy = True
                # Never while the relay above it is stopped or has yet to read: it
                # continues its child itself once it runs, and a SIGCONT from here first
                # would make the two notifications (continued, then exited) reach it
                # at once, merged: it would wait for ever for an exit it never saw.
                if (
                    up.get(ident) not in held
                    and above.conts < MAX_CONTS
                    and self._stopped_by(ident, froze)
                    and send(above.exp)
                ):
                    above.conts += 1
                continue
            waits = above.conts and _zombie_child(ident[0], self.proc_root) is not None
            above.state = "waits" if waits else live.state
            busy = busy or bool(waits) or pending
        return busy

    def _stopped_by(self, ident: Ident, froze: Callable[[Ident], bool]) -> bool:
        """True when the stopped process ``ident`` can be this run's doing: the process
        under it (alive, or its uncollected zombie: a stopped parent cannot reap) is
        still its child, and the way down ends at a member this run froze.

        Checked before the first SIGCONT only (a relay continued once is known): a
        journal's watch list read back (:meth:`restore`) is the journal's word, and a
        damaged or forged entry naming a stopped process that is not the relay (another
        user's, one stopped on purpose) must not have it continued; nor may a member's
        freeze continue the relay of a member this run did not freeze.
        """
        above = self.above[ident]
        if above.conts:
            return True
        under = read_live(above.below[0], self.proc_root)
        if under is None or under.start_ticks != above.below[1] or under.ppid != ident[0]:
            return False
        bottom, seen = above.below, {ident}
        while bottom in self.above and bottom not in seen:
            seen.add(bottom)
            bottom = self.above[bottom].below
        return froze(bottom)

    @property
    def stuck(self) -> bool:
        """A process this run made stop is still stopped, or was continued and still has
        not collected its child's exit."""
        return any(a.conts and a.state in ("T", "waits") for a in self.above.values())

    def report(self) -> list[dict[str, Any]]:
        """Each process continued, ``{"pid", "cmdline", "signals", "reason"}``, nearest
        the tree first."""
        out: list[dict[str, Any]] = []
        for ident in self.order:
            above = self.above[ident]
            if not above.conts:
                continue
            why = (
                "it stopped itself when the freeze stopped its child (it mirrors its child's stop)"
            )
            if above.state == "T":
                why += (
                    f"; still stopped after {above.conts} SIGCONT: continue it by hand "
                    f"(kill -CONT {ident[0]})"
                )
            elif above.state == "waits":
                why += (
                    "; continued (SIGCONT), but it has not collected its child's exit and may "
                    "wait for it for ever (its child's exit notification merged with an "
                    f"earlier one): end it by hand if it does not exit (PID {ident[0]})"
                )
            else:
                why += "; continued (SIGCONT)"
            out.append(
                {
                    "pid": ident[0],
                    "cmdline": list(above.exp.cmdline or ()),
                    "signals": [signal.SIGCONT.name] * above.conts,
                    "reason": why,
                }
            )
        return out
