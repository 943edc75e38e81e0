"""Stop a job: freeze its whole tree, SIGTERM it, SIGKILL what is left, verify nothing is.

The tree is what would otherwise restart or outlive the job, read live from ``/proc`` at
the moment of acting: the job's members and everything they forked since; the wrappers
above the root that carry its command and exist only for it (``bash -c 'while :; do
python3 train.py; done'``, cron's ``sh -c CMD``, ``flock``, ``timeout``), which would start
it again; the members of its process groups and sessions whose leader is in the tree or
gone (a ``setsid`` or daemonised launch) that run its program; and every process of its
cgroup when the job has a cgroup of its own.

Nothing outside the job is ever signalled: a wrapper with any descendant that is not the
job's (an orphaned shell that also runs ``python3 -m http.server``) is left, and so is
everything above it; a process of the job's session that only names the job's script
(``tail -f train.py``) is not the job. What was left, and why, is in the outcome.

1. **Freeze**: SIGSTOP top-down, parents before children, then look again until nothing
   new appeared: a stopped process cannot fork, so a launcher cannot replace a worker
   while the rest is being stopped.
2. **SIGTERM** every frozen process, then SIGCONT them so they can exit cleanly; wait up
   to ``grace_s``.
3. Look at the tree again (a launcher that ignores SIGTERM may have respawned a worker
   meanwhile), freeze it again and **SIGKILL** everything left.
4. **Verify**: ``ok`` only when nothing of the tree (lineage, process group, session,
   cgroup) is left alive; anything left is listed as ``survived`` and the outcome is
   ``partial``. A process left stopped is continued again (SIGCONT): nothing stays frozen.
   Neither does a relay above the tree that stopped itself to mirror its child's stop
   (util-linux ``script``, ``sudo``): it is continued and listed (:mod:`.stopmirror`).

Every signal is preceded by a guard check with the identity (PID + start time + argv) the
decision was made on, and goes out through a pidfd pinned to that identity, so a PID that
was reused in the meantime is never hit, and neither is anything on the never-signal list.
A process counts as gone once ``/proc/PID`` is absent, carries another start time, or is a
zombie (it exited; only its parent's wait is missing).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..faults import fault_point
from ..hosttext import quoted_command
from ..lineage.base import command_key, program_of
from ..lineage.scriptfile import ScriptRead, read_script_of
from ..policy.guard import carries_job
from ..sources.procfs import alive_now, boot_time_s, is_alive
from ..state import ActionJournal, JournalError, NullJournal
from .effects import Effects, IdentityChangedError
from .guards import Expected, LiveProc, SignalGuard, read_live
from .stopmirror import StopMirrors


@dataclass
class ProcOutcome:
    """What happened to one process.

    Attributes:
        pid: The PID.
        start_ticks: Its start time (identity).
        cmdline: Its argv when the plan was made.
        signals: Names of the signals sent, in order.
        result: ``exited`` (after SIGTERM), ``killed`` (after SIGKILL), ``gone`` (exited
            before any signal), ``reused`` (the PID now belongs to another process, which
            is left alone), ``refused`` (a guard said no), ``survived`` (still
            there after SIGKILL, or left running by a terminate that stopped before it
            ended), ``would-signal`` (dry run), ``error``.
        reason: The guard's or the error's words, else empty.
    """

    pid: int
    start_ticks: int
    cmdline: tuple[str, ...]
    signals: list[str] = field(default_factory=list)
    result: str = ""
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """Plain dict for action records."""
        return {
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "cmdline": list(self.cmdline),
            "signals": self.signals,
            "result": self.result,
            "reason": self.reason,
        }


@dataclass
class TerminateOutcome:
    """The result of :func:`terminate_tree`.

    Attributes:
        procs: One entry per process, leaves first.
        outcome: ``ok`` (every targeted process is gone), ``partial``, ``refused``
            (nothing was signalled), ``dry-run``, ``failed`` (its write-ahead record
            could not be written: nothing was signalled), ``interrupted`` (stopped
            before it ended and not continued: what it stopped was continued);
            :meth:`Remedy.terminate <watchdog.actions.remedy.Remedy.terminate>` makes an
            ``ok`` a ``will-return`` when the job's source starts it again.
        left: Processes next to the job that were not part of it and never signalled,
            each ``{"pid", "cmdline", "reason"}`` (a shared shell above the job).
        error: Why it stopped early (a record that could not be written, an
            interruption), else None.
        continued: Processes above the job, never part of it, that stopped themselves
            when the freeze stopped their child (util-linux ``script``, ``sudo``, a pty
            relay) and were continued, each ``{"pid", "cmdline", "signals", "reason"}``
            (see :mod:`watchdog.actions.stopmirror`). One still stopped, or continued
            but not collecting its child's exit, makes the outcome ``partial``.
    """

    procs: list[ProcOutcome]
    outcome: str
    left: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    continued: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Plain dict for action records."""
        out: dict[str, Any] = {"outcome": self.outcome, "procs": [p.to_json() for p in self.procs]}
        if self.left:
            out["left"] = self.left
        if self.error:
            out["error"] = self.error
        if self.continued:
            out["continued"] = self.continued
        return out


# Wrappers above a job's root that are part of the job when their command line carries
# the root's command: they would run it again (a shell loop) or only exist for it. Never
# multiplexers (a tmux server holds other sessions) nor remote clients. util-linux
# `script -c CMD` runs one command on its own pty and mirrors its stop: left out, the
# freeze stopped it for good; continued, it can miss its child's exit and wait forever.
# Ended with the job, it ends its session on SIGTERM.
_JOB_WRAPPERS = frozenset(
    {
        "sh", "dash", "bash", "zsh", "ksh", "mksh", "busybox", "fish", "csh", "tcsh",
        "sudo", "su", "runuser", "setpriv", "doas", "timeout", "nohup", "env", "setsid",
        "nice", "ionice", "taskset", "numactl", "chrt", "stdbuf", "flock", "script",
    }
)  # fmt: skip


def _descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
    """Every descendant of ``pid`` in a parent → children map (``pid`` itself first)."""
    out, todo, seen = [], [pid], {pid}
    while todo:
        cur = todo.pop()
        out.append(cur)
        for kid in children.get(cur, ()):
            if kid not in seen:
                seen.add(kid)
                todo.append(kid)
    return out


def is_wrapper_name(proc: LiveProc) -> bool:
    """True when ``proc`` is a wrapper by its executable (:data:`_JOB_WRAPPERS`): it
    carries a command, it does not run it."""
    return os.path.basename(proc.exe or (proc.cmdline[0] if proc.cmdline else "")) in _JOB_WRAPPERS


def _live_table(proc_root: str) -> dict[int, LiveProc]:
    try:
        names = [n for n in os.listdir(proc_root) if n.isdigit()]
    except OSError:
        names = []
    live: dict[int, LiveProc] = {}
    for name in names:
        proc = read_live(int(name), proc_root)
        if proc is not None:
            live[proc.pid] = proc
    return live


def _cgroup_of(proc: LiveProc) -> str | None:
    """The unified (``0::``) cgroup path, else the ``name=systemd`` one; None for ``/``."""
    path = None
    for line in proc.cgroup:
        hier, _, rest = line.partition(":")
        controllers, _, where = rest.partition(":")
        if hier == "0" and not controllers:
            path = where
            break
        if controllers == "name=systemd":
            path = where
    return path if path and path != "/" else None


class JobTree:
    """A job's process tree, re-collected live at each step of :func:`terminate_tree`.

    Args:
        members: Job members with the identity the decision was made on (root first).
        guard: Never-signal rules; nothing they refuse is ever part of the tree beyond the
            members themselves (which are reported as refused).
        launchers: Ancestors of the root that launched the run and are to be stopped
            with it (a rogue service that starts trainers), nearest first; each only
            when everything it runs is the job's (else it is left, with the reason).
    """

    def __init__(
        self, members: Sequence[Expected], guard: SignalGuard, launchers: Sequence[Expected] = ()
    ) -> None:
        self.members = list(members)
        self.launchers = list(launchers)
        self.guard = guard
        self.by_pid = {m.pid: m for m in members}
        self.known: dict[int, Expected] = {m.pid: m for m in members}
        self.groups: set[int] = set()
        self.sessions: set[int] = set()
        self.cgroup: str | None = None
        self.blocked: dict[int, tuple[Expected, int]] = {}
        self.depths: dict[int, int] = {}  # depth when first seen: stable across looks
        self.key = command_key(self.members[0].cmdline or ()) if self.members else None
        # Processes next to the job left out, PID -> (argv, why): shared wrappers.
        self.left: dict[int, tuple[tuple[str, ...], str]] = {}
        # The root's program and owner, fixed at the first look (see _same_program).
        self.program: tuple[str, ...] | None = None
        self.uid: int | None = None
        self._first = True

    def _allowed(self, exp: Expected) -> bool:
        return isinstance(self.guard.check(exp.pid, exp), LiveProc)

    def collect(self) -> dict[int, tuple[Expected, int]]:
        """Every live process of the tree with its depth (root 0, wrappers above it
        negative), members refused by a guard left out (see :attr:`blocked`).

        The first call also fixes the job's process groups, sessions and own cgroup;
        later calls keep them, so a tree whose leader died is still found.
        """
        live = _live_table(self.guard.proc_root)
        children: dict[int, list[int]] = {}
        for proc in live.values():
            children.setdefault(proc.ppid, []).append(proc.pid)
        tree: dict[int, tuple[Expected, int]] = {}

        def same(exp: Expected) -> LiveProc | None:
            cur = live.get(exp.pid)
            return cur if is_alive(cur, exp.start_ticks) else None

        def add(exp: Expected, depth: int) -> bool:
            if exp.pid in tree and tree[exp.pid][1] <= depth:
                return False
            if exp.pid not in tree and not self._allowed(exp):
                if exp.pid in self.by_pid:
                    self.blocked.setdefault(exp.pid, (exp, depth))
                return False
            tree[exp.pid] = (exp, depth)
            self.known.setdefault(exp.pid, exp)
            self.depths.setdefault(exp.pid, depth)
            return True

        for m in self.members:
            if same(m) is not None:
                add(m, 0)
            elif self._first and m.pid in live:
                # Reused, or a zombie now: the guard says which when it is reported.
                self.blocked.setdefault(m.pid, (m, 0))
        if self._first:
            self._wrappers(live, tree, add)
            self._launchers(live, children, tree, add)
        # Descendants, groups, sessions and the own cgroup, to a fixpoint.
        copies: list[LiveProc] = []  # taken in by the scope: instances of their own
        changed = True
        while changed:
            changed = False
            for pid, (_exp, depth) in list(tree.items()):
                for kid in children.get(pid, ()):
                    if live[kid].state != "Z":
                        changed |= add(self._identity(live[kid]), depth + 1)
            # Seen in an earlier look but no longer below the tree (re-parented).
            for exp in list(self.known.values()):
                again = same(exp)
                if exp.pid not in tree and again is not None:
                    depth = self.depths.get(exp.pid, self._depth(again, live, tree))
                    changed |= add(exp, depth)
            if self._first:
                self._fix_scope(live, tree)
            for proc in live.values():
                if proc.pid in tree or proc.state == "Z" or proc.pid <= 1:
                    continue
                if not self._in_scope(proc, live):
                    continue
                if add(self._identity(proc), self._depth(proc, live, tree)):
                    changed = True
                    copies.append(proc)
        if self._first:
            # Once the tree holds every copy's descendants: what else a wrapper runs is
            # then what it shares.
            for copy in copies:
                self._copy_wrappers(copy, live, tree, add)
        self._first = False
        return tree

    def _launchers(
        self,
        live: dict[int, LiveProc],
        children: dict[int, list[int]],
        tree: dict[int, tuple[Expected, int]],
        add: Callable[[Expected, int], bool],
    ) -> None:
        """Add each launcher above the wrappers (frozen first: it cannot start another
        run meanwhile) when it is still the process decided on, still above the root,
        and runs nothing but the job: a process it also runs that is not the job's
        leaves it alone, with the reason, as a shared wrapper is left."""
        root = live.get(self.members[0].pid) if self.members else None
        if root is None or not self.launchers:
            return
        above: list[int] = []
        cur = live.get(root.ppid)
        while cur is not None and cur.pid > 1 and len(above) < 4096:
            above.append(cur.pid)
            cur = live.get(cur.ppid)
        job = set(_descendants(root.pid, children)) | set(tree)
        depth = min((d for _e, d in tree.values()), default=0)
        for exp in self.launchers:
            proc = live.get(exp.pid)
            if proc is None or proc.start_ticks != exp.start_ticks or exp.pid not in above:
                self.left[exp.pid] = (
                    exp.cmdline or (),
                    "no longer runs, or no longer launched this run: not signalled",
                )
                continue
            path = set(above[: above.index(exp.pid) + 1])
            others = [
                d
                for d in _descendants(exp.pid, children)
                if d not in job and d not in path and live[d].state != "Z"
            ]
            if others:
                names = ", ".join(
                    f"PID {d} {quoted_command(live[d].cmdline, 60)}" for d in sorted(others)[:3]
                )
                self.left[exp.pid] = (
                    proc.cmdline,
                    f"it also runs processes the finding does not name ({names}): not "
                    "signalled; stop it by hand if it must go",
                )
                continue
            depth -= 1
            if not add(exp, depth):
                verdict = self.guard.check(exp.pid, exp)
                why = verdict.reason if not isinstance(verdict, LiveProc) else "not added"
                self.left[exp.pid] = (proc.cmdline, why)

    def _identity(self, proc: LiveProc) -> Expected:
        """The identity first seen for this process (its argv then), else as it is now."""
        exp = self.known.get(proc.pid)
        if exp is not None and exp.start_ticks == proc.start_ticks:
            return exp
        return Expected(proc.pid, proc.start_ticks, proc.cmdline or None)

    def _wrappers(
        self,
        live: dict[int, LiveProc],
        tree: dict[int, tuple[Expected, int]],
        add: Callable[[Expected, int], bool],
    ) -> None:
        if not self.members:
            return
        root = live.get(self.members[0].pid)
        key = command_key(self.members[0].cmdline or (root.cmdline if root else ()))
        self.key = self.key or key
        if root is not None:
            self._wrappers_above(root, key, live, tree, add)

    def _copy_wrappers(
        self,
        copy: LiveProc,
        live: dict[int, LiveProc],
        tree: dict[int, tuple[Expected, int]],
        add: Callable[[Expected, int], bool],
    ) -> None:
        """The wrappers above a copy of the job the scope took in (its own lineage: a
        shell loop that runs it), by the rule the root's follow: the job's when they
        carry its command and run nothing else, else left with the reason."""
        if copy.ppid > 1 and copy.ppid not in tree:
            self._wrappers_above(copy, command_key(copy.cmdline), live, tree, add)

    def _wrappers_above(
        self,
        start: LiveProc,
        key: str | None,
        live: dict[int, LiveProc],
        tree: dict[int, tuple[Expected, int]],
        add: Callable[[Expected, int], bool],
    ) -> None:
        """Add the exclusive wrappers above ``start`` (the root, or a copy), nearest
        first, up to the first that is shared (left, with why) or no wrapper of ``key``."""
        if key is None:
            return
        children: dict[int, list[int]] = {}
        for proc in live.values():
            children.setdefault(proc.ppid, []).append(proc.pid)
        mine = set(tree)
        depth = min(0, tree[start.pid][1] if start.pid in tree else 0)
        cur = live.get(start.ppid)
        while cur is not None and cur.pid > 1 and cur.pid not in tree:
            name = os.path.basename(cur.exe or (cur.cmdline[0] if cur.cmdline else ""))
            if name not in _JOB_WRAPPERS or not carries_job(
                cur.cmdline, cur.exe, key, functools.partial(self._script_of, cur)
            ):
                return
            others = [d for d in _descendants(cur.pid, children) if d not in mine and d != cur.pid]
            others = [d for d in others if live[d].state != "Z"]
            if others:
                # Shared: killing it would kill what it also runs. Never signalled, and
                # nothing above it is the job's either.
                self.left[cur.pid] = (cur.cmdline, self._shared_why(cur.pid, others, live))
                return
            depth -= 1
            if not add(Expected(cur.pid, cur.start_ticks, cur.cmdline or None), depth):
                return
            mine.add(cur.pid)
            cur = live.get(cur.ppid)

    def _shared_why(self, wrapper: int, others: list[int], live: dict[int, LiveProc]) -> str:
        """Why a wrapper above the root is left: what it also runs, each named for what
        it is. A member the guard refused (a sanctioned job's root) is the job's own, not
        a process outside it; a process below a member is named with that member. Only
        the words: the wrapper is left either way."""
        outside: list[int] = []
        refused: dict[int, str] = {}
        below: list[tuple[int, int]] = []
        for pid in sorted(others):
            member = self._member_above(pid, wrapper, live)
            if member is None:
                outside.append(pid)
            elif member in self.blocked:
                verdict = self.guard.check(member, self.blocked[member][0])
                why = verdict.reason if not isinstance(verdict, LiveProc) else "refused"
                refused.setdefault(member, why)
            else:
                below.append((pid, member))

        def names(pids: Iterable[int]) -> str:
            return ", ".join(f"PID {d} {quoted_command(live[d].cmdline, 60)}" for d in pids)

        if outside and not refused and not below:
            return f"it also runs processes outside the job ({names(outside[:3])}): not the job's"
        parts = []
        if refused:
            pids = sorted(refused)[:3]
            reasons = "; ".join(dict.fromkeys(refused[p] for p in pids))
            which = "which is" if len(pids) == 1 else "which are"
            parts.append(f"the job's {names(pids)}, {which} refused ({reasons})")
        for pid, member in below[:3]:
            parts.append(f"{names([pid])} below the job's PID {member}")
        if outside:
            parts.append(f"processes outside the job ({names(outside[:3])})")
        them = "it" if len(refused) + len(below) + len(outside) == 1 else "them"
        return f"it also runs {' and '.join(parts)}: left with {them}"

    def _member_above(self, pid: int, wrapper: int, live: dict[int, LiveProc]) -> int | None:
        """The job member ``pid`` is or runs below (nearest first), up to ``wrapper``;
        None for a process that is no member's."""
        cur, hops = live.get(pid), 0
        while cur is not None and cur.pid != wrapper and hops < 4096:
            if cur.pid in self.by_pid:
                return cur.pid
            cur, hops = live.get(cur.ppid), hops + 1
        return None

    def _script_of(self, proc: LiveProc) -> ScriptRead | None:
        """The shell's script file as it reads now (for
        :func:`~watchdog.policy.guard.carries_job`, the rule the advice's wrappers follow
        too)."""
        root = self.guard.proc_root

        def started() -> float | None:
            boot = boot_time_s(root)
            return None if boot is None else boot + proc.start_ticks / os.sysconf("SC_CLK_TCK")

        return read_script_of(proc.pid, proc.cmdline, proc.exe, root, started)

    def _fix_scope(self, live: dict[int, LiveProc], tree: dict[int, tuple[Expected, int]]) -> None:
        """Groups and sessions whose leader is in the tree or gone; the cgroup when the
        whole tree shares one that the process above the tree does not."""
        procs = [live[p] for p in tree if p in live]
        for attr, out in (("pgid", self.groups), ("sid", self.sessions)):
            for proc in procs:
                leader = getattr(proc, attr)
                if leader > 1 and (leader in tree or leader not in live):
                    out.add(leader)
        root = live.get(self.members[0].pid) if self.members else None
        if root is not None:
            self.program, self.uid = program_of(root.cmdline), root.uid
        paths = {_cgroup_of(p) for p in procs}
        if len(paths) != 1 or None in paths:
            return
        path = paths.pop()
        top = min(procs, key=lambda p: tree[p.pid][1])
        above = live.get(top.ppid)
        if above is None or _cgroup_of(above) == path:
            return
        # The job's own only when nothing else runs in it: a login session's scope or
        # cron.service also holds the person's shell, sshd, the cron daemon.
        if all(
            p.pid in tree or self._same_program(p)
            for p in live.values()
            if _cgroup_of(p) == path and p.state != "Z"
        ):
            self.cgroup = path

    def _same_program(self, proc: LiveProc) -> bool:
        """Runs the job root's very program (interpreter and script, or module), as its
        owner: a copy of the job, not a neighbour (`check_train.py`, `webapp`)."""
        return (
            self.program is not None
            and not is_wrapper_name(proc)
            and proc.uid == self.uid
            and program_of(proc.cmdline) == self.program
        )

    def _below_protected(self, proc: LiveProc, live: dict[int, LiveProc]) -> bool:
        """A descendant of a process the guard protects (a worker a sanctioned run
        forked since the scan is not in the scan's identities, but its parent is)."""
        protected = set(self.guard.sanctioned_pids)
        if self.guard.protection is not None:
            protected |= set(self.guard.protection.pids)
        cur, hops = live.get(proc.ppid), 0
        while cur is not None and cur.pid > 1 and hops < 4096:
            if cur.pid in protected:
                return True
            cur, hops = live.get(cur.ppid), hops + 1
        return False

    def _in_scope(self, proc: LiveProc, live: dict[int, LiveProc]) -> bool:
        # The job's own cgroup, process groups and sessions whose leader is gone: only
        # processes running the job's own program as its owner are the job (a copy it
        # left behind), never a neighbour that shares the group, a process that names
        # its script as data (`tail -f train.py`), or anything below a protected one.
        if not self._same_program(proc) or self._below_protected(proc, live):
            return False
        if self.cgroup is not None and _cgroup_of(proc) == self.cgroup:
            return True
        return proc.pgid in self.groups or proc.sid in self.sessions

    @staticmethod
    def _depth(
        proc: LiveProc, live: dict[int, LiveProc], tree: dict[int, tuple[Expected, int]]
    ) -> int:
        hops, cur = 1, live.get(proc.ppid)
        while cur is not None and hops < 4096:
            if cur.pid in tree:
                return tree[cur.pid][1] + hops
            hops, cur = hops + 1, live.get(cur.ppid)
        return 0


def plan_tree(members: Sequence[Expected], guard: SignalGuard) -> list[tuple[Expected, int]]:
    """The processes to stop (see :class:`JobTree`), each with its depth below the root
    (wrappers above it are negative).

    Args:
        members: Job members with the identity the scan saw (root first).
        guard: Never-signal rules.

    Returns:
        ``(identity, depth)`` pairs, deepest first (leaves first), PIDs ascending within
        a depth. Members that fail the guard are still returned (the guard refuses them
        again, with the reason, when their turn comes).
    """
    tree = JobTree(members, guard)
    found = tree.collect()
    out = list(found.values())
    out += [entry for pid, entry in tree.blocked.items() if pid not in found]
    out.sort(key=lambda e: (-e[1], e[0].pid))
    return out


def _alive(exp: Expected, proc_root: str) -> bool:
    return alive_now((exp.pid, exp.start_ticks), proc_root)


#: The waves of signals of one terminate, in order; each is one write-ahead step.
WAVE_SIGNALS: dict[str, signal.Signals] = {
    "freeze": signal.SIGSTOP,
    "term": signal.SIGTERM,
    "cont": signal.SIGCONT,
    "kill-freeze": signal.SIGSTOP,
    "kill": signal.SIGKILL,
    "thaw": signal.SIGCONT,
}
# Continuing a process this action stopped is always safe and must never be left undone
# (nothing may stay frozen): sent even when its record cannot be written.
_SAFE_WAVES = frozenset({"cont", "thaw"})

Ident = tuple[int, int]


def _ident(exp: Expected) -> Ident:
    return exp.pid, exp.start_ticks


def _by_depth(entries: Iterable[tuple[Expected, int]]) -> list[tuple[Expected, int | None]]:
    """Top-down: parents (smaller depth) first."""
    return [(e, d) for e, d in sorted(entries, key=lambda x: x[1])]


@dataclass
class Resume:
    """What an interrupted terminate had done, read back from its write-ahead steps
    (:func:`watchdog.actions.recovery.terminate_resume`).

    Attributes:
        waves: Each signal wave written, in order: its name (:data:`WAVE_SIGNALS`) and
            the identities it was sent, or may have been sent, to. None of them is sent
            that wave's signal again.
        grace_until: Wall time the recorded grace period ends, or None.
        proceed: Go on with the termination (SIGTERM, SIGKILL after the grace); False
            only continues what it stopped (SIGCONT) and reports the rest.
        mirrors: The processes above the tree it watched before its freezes (its
            ``watch`` steps, :meth:`StopMirrors.entries`): one its freeze made stop is
            continued as it would have been. Empty for a record written before the
            list was journaled: such a run releases only what it watches itself.
    """

    waves: list[tuple[str, list[Expected]]]
    grace_until: float | None = None
    proceed: bool = True
    mirrors: list[Any] = field(default_factory=list)


class TerminateRun:
    """One terminate as a state machine (see the module docstring): :meth:`step`
    advances it as far as it can go without waiting and says how long to wait before
    the next step, so the grace period is waited out off the daemon's tick.

    Every wave of signals is written to ``journal`` before it is sent (the identities
    it is for) and marked after (those it reached); the grace period's end is written
    too. A run built with ``resume`` (an interrupted one, found after a restart) never
    sends a wave's signal again to an identity that wave named, and goes on from the
    last wave written.

    Args:
        members: Job members with the identity the decision was made on (root first).
        guard: Never-signal rules; asked again before each signal.
        effects: Where signals go.
        grace_s: Seconds between SIGTERM and SIGKILL.
        journal: The action's write-ahead record (:class:`NullJournal`: none).
        dry_run: Only check the guards and say what would be signalled.
        poll_s: Seconds between checks whether the processes are gone.
        kill_wait_s: Seconds to wait for SIGKILLed processes to disappear.
        clock: Monotonic clock (deadlines within this process).
        wall: Wall clock (the grace period's end, as recorded for a later process).
        resume: What an interrupted run of the same action had done.
        launchers: Ancestors that launched the run, stopped with it (see
            :class:`JobTree`).
        kill_only: Freeze and SIGKILL, no SIGTERM first (copies a leftover started when
            it got its SIGTERM: another would only start another copy).
    """

    def __init__(
        self,
        members: Sequence[Expected],
        guard: SignalGuard,
        effects: Effects,
        grace_s: float,
        *,
        journal: ActionJournal | None = None,
        dry_run: bool = False,
        poll_s: float = 0.1,
        kill_wait_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        resume: Resume | None = None,
        launchers: Sequence[Expected] = (),
        kill_only: bool = False,
    ) -> None:
        self.members = list(members)
        self.kill_only = kill_only
        self.guard = guard
        self.effects = effects
        self.grace_s = grace_s
        self.journal = journal or NullJournal()
        self.dry_run = dry_run
        self.poll_s = poll_s
        self.kill_wait_s = kill_wait_s
        self.clock = clock
        self.wall = wall
        self.results: dict[int, ProcOutcome] = {}
        self.depth_of: dict[int, int] = {}
        self.stopped: dict[Ident, Expected] = {}
        self.sent: set[tuple[str, int, int]] = set()
        self.termed: list[Expected] = []
        self.killed: list[Expected] = []
        self.phase = "start"
        self.deadline: float | None = None
        self.error: str | None = None
        self.proceed = True
        self.outcome: TerminateOutcome | None = None
        self._found: dict[int, tuple[Expected, int]] = {}
        self._started = False
        # The waves this run itself sent (name, processes reached), in order.
        self.waves_sent: list[tuple[str, int]] = []
        known = {_ident(m) for m in self.members}
        extra: list[Expected] = []
        if resume is not None:
            self._replay(resume)
            for _wave, idents in resume.waves:
                extra += [e for e in idents if _ident(e) not in known]
                known |= {_ident(e) for e in idents}
        self.tree = JobTree([*self.members, *extra], guard, launchers)
        self.mirrors = StopMirrors(guard.proc_root)
        if resume is not None:
            self.mirrors.restore(resume.mirrors)
        self._watched = len(self.mirrors.order)  # how much of the watch list is journaled

    # -- resuming ----------------------------------------------------------------------

    def _replay(self, resume: Resume) -> None:
        """Take over what the interrupted run did: its signals, who it left stopped,
        whom it terminated and killed, and where to go on."""
        done = set()
        for wave, idents in resume.waves:
            done.add(wave)
            for exp in idents:
                self.sent.add((wave, exp.pid, exp.start_ticks))
                self._outcome(exp).signals.append(WAVE_SIGNALS[wave].name)
                if wave in ("freeze", "kill-freeze"):
                    self.stopped[_ident(exp)] = exp
                elif wave in ("cont", "thaw"):
                    self.stopped.pop(_ident(exp), None)
                if wave == "term":
                    self.termed.append(exp)
                elif wave == "kill":
                    self.killed.append(exp)
        self.proceed = resume.proceed
        if not resume.proceed:
            self.phase = "thaw"
        elif "kill" in done:
            self.phase = "reap"
            self.deadline = self.clock() + self.kill_wait_s
        elif "kill-freeze" in done:
            self.phase = "kill"
        elif "term" in done:
            self.phase = "cont"
            left = self.grace_s
            if resume.grace_until is not None:
                # Never longer than the grace period from now, whatever the clock did.
                left = min(self.grace_s, max(0.0, resume.grace_until - self.wall()))
            self.deadline = self.clock() + left
        elif "freeze" in done:
            self.phase = "freeze"

    # -- the steps -----------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """True once :attr:`outcome` is set."""
        return self.outcome is not None

    def step(self) -> float | None:
        """Advance as far as possible without waiting.

        Returns:
            Seconds to wait before the next call, or None when finished
            (:attr:`outcome` is set). Never raises for a process that vanished or
            refused a signal; a write-ahead record that cannot be written stops the
            run (nothing more is signalled, what it stopped is continued) with the
            error in the outcome.
        """
        if self.outcome is not None:
            return None
        try:
            if not self._started:
                self._started = True
                self._start()
            while self.outcome is None:
                wait = self._advance()
                if wait is not None:
                    return wait
        except JournalError as exc:
            self.error = str(exc)
            self._verify()
        return None

    def interrupt(self, reason: str) -> None:
        """Stop here: nothing more is signalled, what this run stopped is continued, and
        the outcome is ``interrupted`` (``reason`` in the outcome)."""
        self.proceed = False
        self.error = reason
        if self.outcome is None:
            self._verify()

    def _advance(self) -> float | None:
        phase = self.phase
        if phase == "start":
            if self.dry_run:
                self._dry()
                return None
            self.phase = "freeze"
        elif phase == "freeze":
            self._found = self._freeze(self._found or self.tree.collect(), "freeze")
            frozen = [e for e in self._found.values() if _ident(e[0]) in self.stopped]
            if not self.kill_only:
                self.termed += self._wave("term", _by_depth(frozen))
            if self.termed:
                # Relays above the tree that mirrored the freeze go on before the job
                # does: a continued `script` continues its child itself and must read
                # that notification before its child's exit comes, else the two merge
                # and it waits for an exit it never sees. Nothing of the job can fork
                # meanwhile that it could not after the SIGCONT wave just below.
                self._release()
            self.phase = "cont"
            self.deadline = self.clock() + self.grace_s
        elif phase == "cont":
            # Continued bottom-up: a child is continued while its parent is still
            # stopped, so no parent reaps (or replaces) it in between.
            conts = [e for e in reversed(self.termed) if _ident(e) in self.stopped]
            self._wave("cont", [(e, None) for e in conts])
            for exp in conts:
                self.stopped.pop(_ident(exp), None)
            self._release()
            self._wait_step()
            self.phase = "grace"
        elif phase == "grace":
            root = self.guard.proc_root
            self.termed = [e for e in self.termed if _alive(e, root)]
            self._release()
            now = self.clock()
            deadline = self.deadline if self.deadline is not None else now
            if self.termed and now < deadline:
                return min(self.poll_s, deadline - now)
            self.phase = "kill"
        elif phase == "kill":
            # What is left now, with anything forked during the grace period.
            left = self._freeze(self.tree.collect(), "kill-freeze")
            self.killed += self._wave("kill", _by_depth(left.values()))
            self.deadline = self.clock() + self.kill_wait_s
            self.phase = "reap"
        elif phase == "reap":
            now = self.clock()
            alive = any(_alive(e, self.guard.proc_root) for e in self.killed)
            if alive and self.deadline is not None and now < self.deadline:
                return min(self.poll_s, self.deadline - now)
            self.phase = "settle"
            self.deadline = now + self.kill_wait_s
        elif phase == "settle":
            # A parent that mirrors its child's stop does so when it reads the
            # notification: look until none is left to read, within kill_wait_s.
            now = self.clock()
            if self._release() and self.deadline is not None and now < self.deadline:
                return min(self.poll_s, self.deadline - now)
            self._verify()
        else:  # "thaw": an interrupted run not to be continued
            # Relays above the tree that mirrored the freeze go on first, as before the
            # SIGCONT wave (a SIGTERM still pending may end the job once thawed: its
            # exit must not merge with the relay's "continued"); then what it stopped;
            # then, as after a kill, the relays are looked at until each has read every
            # notification (settle), so the report says what they really became.
            self._release()
            root = self.guard.proc_root
            thaw = [e for e in reversed(list(self.stopped.values())) if _alive(e, root)]
            self._wave("thaw", [(e, None) for e in thaw])
            self.phase = "settle"
            self.deadline = self.clock() + self.kill_wait_s
        return None

    def _outcome(self, exp: Expected, depth: int | None = None) -> ProcOutcome:
        res = self.results.get(exp.pid)
        if res is None or res.start_ticks != exp.start_ticks:
            res = ProcOutcome(exp.pid, exp.start_ticks, exp.cmdline or ())
            self.results[exp.pid] = res
        if depth is not None:
            self.depth_of[exp.pid] = depth
        return res

    def _start(self) -> None:
        """The first look: members the guard refuses, or gone already, are said so."""
        found = self.tree.collect()
        self._found = found
        for exp, depth in self.tree.blocked.values():
            if exp.pid in found:
                continue
            res = self._outcome(exp, depth)
            verdict = self.guard.check(exp.pid, exp)
            if isinstance(verdict, LiveProc) or res.signals:
                continue
            if verdict.guard in ("invisible", "zombie"):
                res.result, res.reason = "gone", verdict.reason
            elif verdict.guard == "identity":
                res.result, res.reason = "reused", verdict.reason
            else:
                res.result, res.reason = "refused", verdict.reason
        for m in self.members:
            if m.pid not in found and m.pid not in self.results:
                self._outcome(m, 0).result = "gone"

    def _dry(self) -> None:
        for exp, depth in self._found.values():
            res = self._outcome(exp, depth)
            res.result = "would-signal"
            res.signals.append("SIGTERM")
        self.phase = "done"
        self.outcome = TerminateOutcome(self._ordered(), "dry-run", _left(self.tree))

    def _wait_step(self) -> None:
        """Record when the grace period ends (a later process goes on from there)."""
        if self.deadline is None:
            return
        until = self.wall() + max(0.0, self.deadline - self.clock())
        try:
            step = self.journal.intent("wait", {"until": until, "grace_s": self.grace_s})
            self.journal.done(step)
        except JournalError:
            pass  # not a side effect: a later process waits a whole grace_s instead
        fault_point("terminate:waiting")

    def _freeze(
        self, found: dict[int, tuple[Expected, int]], wave: str
    ) -> dict[int, tuple[Expected, int]]:
        """SIGSTOP ``found`` top-down and look again until no new process appeared (a
        stopped process cannot fork). Returns the frozen tree. What runs above it is
        watched first: a parent may stop itself when its child is stopped."""
        for _ in range(16):
            fresh = [e for e in found.values() if _ident(e[0]) not in self.stopped]
            fresh = [e for e in fresh if (wave, e[0].pid, e[0].start_ticks) not in self.sent]
            if not fresh:
                break
            self.mirrors.watch(e for e, _d in found.values())
            self._journal_watch()
            for exp in self._wave(wave, _by_depth(fresh)):
                self.stopped[_ident(exp)] = exp
            found = self.tree.collect()
        return {pid: e for pid, e in found.items() if _ident(e[0]) in self.stopped}

    def _journal_watch(self) -> None:
        """Write what was newly watched above the tree (a ``watch`` step) before the
        freeze it is for: a run taking this one over continues what the freeze made
        stop only from this record.

        Raises:
            JournalError: Not written: no freeze is sent (one would leave a relay it
                made stop unknown to a run taking over).
        """
        if len(self.mirrors.order) <= self._watched:
            return
        step = self.journal.intent("watch", {"above": self.mirrors.entries(self._watched)})
        self._watched = len(self.mirrors.order)
        self.journal.done(step)

    def _wave(self, wave: str, entries: Sequence[tuple[Expected, int | None]]) -> list[Expected]:
        """Send one wave's signal to ``entries`` (in that order), each identity at most
        once ever; written before it is sent and marked after. Returns those reached."""
        sig = WAVE_SIGNALS[wave]
        todo = [(e, d) for e, d in entries if (wave, e.pid, e.start_ticks) not in self.sent]
        if not todo:
            return []
        detail = {
            "wave": wave,
            "signal": sig.name,
            "procs": [[e.pid, e.start_ticks, list(e.cmdline or ())] for e, _d in todo],
        }
        try:
            step: int | None = self.journal.intent("signal", detail)
        except JournalError:
            if wave not in _SAFE_WAVES:
                raise
            step = None
        fault_point(f"terminate:{wave}:intent")
        sent: list[Expected] = []
        for exp, depth in todo:
            self.sent.add((wave, exp.pid, exp.start_ticks))
            res = self._outcome(exp, depth)
            if wave in _SAFE_WAVES:
                if _resume(self.effects, res, exp):
                    sent.append(exp)
            elif _send(self.effects, res, sig, self.guard, exp):
                sent.append(exp)
        fault_point(f"terminate:{wave}:sent")
        if sent:
            self.waves_sent.append((wave, len(sent)))
        if step is not None:
            self.journal.done(step, {"sent": [[e.pid, e.start_ticks] for e in sent]})
        return sent

    def _verify(self) -> None:
        """Look a last time; continue whatever this run left stopped; the outcome."""
        root = self.guard.proc_root
        survivors = self.tree.collect()
        thaw = [e for e in reversed(list(self.stopped.values())) if _alive(e, root)]
        self._wave("thaw", [(e, None) for e in thaw])  # a safe wave: never refused
        self._release()
        for exp, depth in survivors.values():
            res = self._outcome(exp, depth)
            res.result = "survived"
            if not res.reason:
                if not self.proceed or self.error:
                    res.reason = "left running: the terminate stopped before it ended"
                elif res.signals:
                    res.reason = "still running after SIGKILL"
                else:
                    res.reason = "appeared after the kill"
        for res in self.results.values():
            if res.result:
                continue
            if "SIGKILL" in res.signals:
                res.result = "killed"
            elif "SIGTERM" in res.signals:
                res.result = "exited"
            else:
                res.result = "gone"
        procs = self._ordered()
        signalled = [r for r in procs if r.signals]
        if not self.proceed:
            outcome = "interrupted"
        elif self.error is not None and not signalled:
            outcome = "failed"
        elif not signalled and not survivors:
            outcome = "refused" if any(r.result == "refused" for r in procs) else "ok"
        elif (
            survivors
            or self.mirrors.stuck
            or self.error is not None
            or any(r.result in ("refused", "error", "survived") for r in procs)
        ):
            outcome = "partial"
        else:
            outcome = "ok"
        self.phase = "done"
        self.outcome = TerminateOutcome(
            procs, outcome, _left(self.tree), error=self.error, continued=self.mirrors.report()
        )

    def _ordered(self) -> list[ProcOutcome]:
        return _ordered(self.results, self.depth_of)

    def _release(self) -> bool:
        """SIGCONT what above the tree stopped itself because the freeze stopped its
        child (see :class:`StopMirrors`); True while one may still change."""
        if not self.mirrors.above or self.dry_run:
            return False

        def froze(ident: Ident) -> bool:
            return any((w, *ident) in self.sent for w in ("freeze", "kill-freeze"))

        return self.mirrors.release(froze, self._cont_above)

    def _cont_above(self, exp: Expected) -> bool:
        """SIGCONT to a process outside the tree that this run made stop: written ahead
        like a wave (a ``release`` step, which a run taking over does not replay), sent
        even when it cannot be written (continuing is always safe), pinned to its
        identity. True if sent."""
        detail = {"wave": "release", "signal": signal.SIGCONT.name,
                  "procs": [[exp.pid, exp.start_ticks, list(exp.cmdline or ())]]}  # fmt: skip
        try:
            step: int | None = self.journal.intent("signal", detail)
        except JournalError:
            step = None
        try:
            self.effects.send_signal(exp.pid, int(signal.SIGCONT), exp.start_ticks)
            sent = True
        except OSError:
            sent = False  # gone, or the PID was reused: nothing of ours to continue
        if step is not None:
            # The signal is out whatever the record says: only its mark may be missing.
            with contextlib.suppress(JournalError):
                self.journal.done(step, {"sent": [[exp.pid, exp.start_ticks]] if sent else []})
        return sent


def terminate_tree(
    members: Sequence[Expected],
    guard: SignalGuard,
    effects: Effects,
    grace_s: float,
    *,
    dry_run: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 0.1,
    kill_wait_s: float = 5.0,
    journal: ActionJournal | None = None,
    launchers: Sequence[Expected] = (),
    kill_only: bool = False,
) -> TerminateOutcome:
    """Freeze the job's tree, SIGTERM it, SIGKILL what is left after ``grace_s``, verify:
    a :class:`TerminateRun` stepped to its end, sleeping in between.

    Args:
        members: Job members with the identity the decision was made on.
        guard: Never-signal rules; asked again before each signal.
        effects: Where signals go.
        grace_s: Seconds between SIGTERM and SIGKILL.
        dry_run: Only check the guards and say what would be signalled.
        sleep: Sleep function (tests may pass a fake).
        poll_s: Seconds between checks whether the processes are gone.
        kill_wait_s: Seconds to wait for SIGKILLed processes to disappear.
        journal: The action's write-ahead record, if any.
        launchers: Ancestors that launched the run, stopped with it (see
            :class:`JobTree`): a rogue service a ``rogue-service`` finding names.
        kill_only: Freeze and SIGKILL, no SIGTERM first (copies a leftover started when
            it got its SIGTERM: another would only start another copy).

    Returns:
        Per-process results (leaves first) and an overall outcome: ``ok`` only when
        nothing of the tree is left. Never raises for a process that vanished or refused
        a signal.

    Raises:
        KeyboardInterrupt: Interrupted (Ctrl-C): what it stopped was continued first.
    """
    run = TerminateRun(
        members, guard, effects, grace_s, journal=journal, dry_run=dry_run, poll_s=poll_s,
        kill_wait_s=kill_wait_s, launchers=launchers, kill_only=kill_only,
    )  # fmt: skip
    return run_to_end(run, sleep)


def run_to_end(run: TerminateRun, sleep: Callable[[float], None] = time.sleep) -> TerminateOutcome:
    """Step ``run`` until it finishes, sleeping in between.

    Raises:
        KeyboardInterrupt: Interrupted (Ctrl-C): the run was stopped first
            (:meth:`TerminateRun.interrupt`: nothing left frozen).
    """
    try:
        while (wait := run.step()) is not None:
            sleep(wait)
    except KeyboardInterrupt:
        run.interrupt("interrupted (Ctrl-C)")
        raise
    assert run.outcome is not None
    return run.outcome


def _left(tree: JobTree) -> list[dict[str, Any]]:
    return [
        {"pid": pid, "cmdline": list(argv), "reason": why}
        for pid, (argv, why) in sorted(tree.left.items())
    ]


def _ordered(results: dict[int, ProcOutcome], depth: dict[int, int]) -> list[ProcOutcome]:
    return sorted(results.values(), key=lambda r: (-depth.get(r.pid, 0), r.pid))


def _resume(effects: Effects, res: ProcOutcome, exp: Expected) -> bool:
    """SIGCONT a process this run stopped. Only its pinned identity is checked (no guard:
    it passed them when it was stopped, and continuing is harmless): a process that a
    SIGTERM is already ending (a default-fatal signal ends even a stopped process) still
    gets it while its pidfd can be opened. True if sent."""
    try:
        effects.send_signal(exp.pid, int(signal.SIGCONT), exp.start_ticks)
        res.signals.append(signal.SIGCONT.name)
        return True
    except OSError:
        return False  # reaped already, or the PID was reused: nothing of ours to continue


def _send(
    effects: Effects, res: ProcOutcome, sig: signal.Signals, guard: SignalGuard, exp: Expected
) -> bool:
    """Guard-check ``exp`` again, then signal it through its pinned identity; True if sent."""
    verdict = guard.check(exp.pid, exp)  # again: it may have gone and been reused
    if not isinstance(verdict, LiveProc):
        if verdict.guard in ("invisible", "zombie", "identity") and not res.result:
            res.result = "gone" if not res.signals else ""
        elif verdict.guard not in ("invisible", "zombie", "identity"):
            res.result, res.reason = "refused", verdict.reason
        return False
    try:
        # Pinned to the identity decided on: a PID reused since the guard check is
        # never hit (the pidfd refers to the process, not the number).
        effects.send_signal(res.pid, int(sig), res.start_ticks)
        res.signals.append(sig.name)
        return True
    except IdentityChangedError as exc:
        res.result, res.reason = "reused", exc.strerror or str(exc)
    except ProcessLookupError:
        pass
    except OSError as exc:
        res.result, res.reason = "error", f"{sig.name}: {exc.strerror or exc}"
    return False
