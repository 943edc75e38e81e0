"""Stop a job: SIGTERM to every process of its tree, leaves first, then SIGKILL after grace.

The tree is the job's members from the scan plus anything they forked since, read live
from ``/proc`` at the moment of acting. Every signal is preceded by a guard check with the
identity (PID + start time + argv) the decision was made on, so a PID that was reused
in the meantime is never hit, and neither is anything on the never-signal list.
A process counts as gone once ``/proc/PID`` is absent, carries another start time, or
is a zombie (it exited; only its parent's wait is missing).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from watchdog.actions.effects import Effects, IdentityChangedError
from watchdog.actions.guards import Expected, Guard, LiveProc, read_live


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
            there after SIGKILL), ``would-signal`` (dry run), ``error``.
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
            (nothing was signalled), ``dry-run``.
    """

    procs: list[ProcOutcome]
    outcome: str

    def to_json(self) -> dict[str, Any]:
        """Plain dict for action records."""
        return {"outcome": self.outcome, "procs": [p.to_json() for p in self.procs]}


def plan_tree(members: Sequence[Expected], guard: Guard) -> list[tuple[Expected, int]]:
    """The processes to stop: the members still alive with the same identity, plus their
    live descendants, each with its depth below the topmost member.

    The tree is only expanded below processes the guard lets through: never below PID 1,
    rogue-watchdog's ancestors, a sanctioned or protected process, or a PID whose
    identity changed (its children are someone else's).

    Args:
        members: Job members with the identity the scan saw (root first).
        guard: Never-signal rules.

    Returns:
        ``(identity, depth)`` pairs, deepest first (leaves first), PIDs ascending within
        a depth. Members that fail the guard are still returned (the guard refuses them
        again, with the reason, when their turn comes).
    """
    proc_root = guard.proc_root
    children: dict[int, list[int]] = {}
    try:
        names = [n for n in os.listdir(proc_root) if n.isdigit()]
    except OSError:
        names = []
    live: dict[int, LiveProc] = {}
    for name in names:
        proc = read_live(int(name), proc_root)
        if proc is not None:
            live[proc.pid] = proc
            children.setdefault(proc.ppid, []).append(proc.pid)
    by_pid = {m.pid: m for m in members}
    depth: dict[int, int] = {}
    blocked: dict[int, tuple[Expected, int]] = {}
    queue: list[tuple[Expected, int]] = [(m, 0) for m in members]
    while queue:
        exp, d = queue.pop(0)
        if exp.pid in depth and depth[exp.pid] >= d:
            continue
        if not isinstance(guard.check(exp.pid, exp), LiveProc):
            blocked.setdefault(exp.pid, (exp, d))  # reported, never expanded
            continue
        depth[exp.pid] = d
        for child in children.get(exp.pid, ()):
            cur = live.get(child)
            if cur is not None and child not in by_pid:
                queue.append((Expected(child, cur.start_ticks, cur.cmdline or None), d + 1))
            elif child in by_pid:
                queue.append((by_pid[child], d + 1))
    out: list[tuple[Expected, int]] = []
    for pid, d in depth.items():
        cur = live[pid]
        exp = by_pid.get(pid) or Expected(pid, cur.start_ticks, cur.cmdline or None)
        out.append((exp, d))
    out += [entry for pid, entry in blocked.items() if pid not in depth]
    out.sort(key=lambda e: (-e[1], e[0].pid))
    return out


def _alive(exp: Expected, proc_root: str) -> bool:
    cur = read_live(exp.pid, proc_root)
    return cur is not None and cur.start_ticks == exp.start_ticks and cur.state != "Z"


def terminate_tree(
    members: Sequence[Expected],
    guard: Guard,
    effects: Effects,
    grace_s: float,
    *,
    dry_run: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 0.1,
    kill_wait_s: float = 5.0,
) -> TerminateOutcome:
    """SIGTERM the job's tree (leaves first), wait up to ``grace_s``, SIGKILL survivors.

    Args:
        members: Job members with the identity the decision was made on.
        guard: Never-signal rules; asked again before each signal.
        effects: Where signals go.
        grace_s: Seconds between SIGTERM and SIGKILL.
        dry_run: Only check the guards and say what would be signalled.
        sleep: Sleep function (tests may pass a fake).
        poll_s: Seconds between checks whether the processes are gone.
        kill_wait_s: Seconds to wait for SIGKILLed processes to disappear.

    Returns:
        Per-process results and an overall outcome. Never raises for a process that
        vanished or refused a signal.
    """
    plan = plan_tree(members, guard)
    results: list[ProcOutcome] = []
    pending: list[tuple[Expected, ProcOutcome]] = []
    for exp, _depth in plan:
        res = ProcOutcome(exp.pid, exp.start_ticks, exp.cmdline or ())
        results.append(res)
        verdict = guard.check(exp.pid, exp)
        if not isinstance(verdict, LiveProc):
            if verdict.guard in ("invisible", "zombie"):
                res.result, res.reason = "gone", verdict.reason
            elif verdict.guard == "identity":
                res.result, res.reason = "reused", verdict.reason
            else:
                res.result, res.reason = "refused", verdict.reason
            continue
        if dry_run:
            res.result = "would-signal"
            res.signals.append("SIGTERM")
            continue
        _send(effects, res, signal.SIGTERM)
        if res.result != "error":
            pending.append((exp, res))
    if dry_run:
        return TerminateOutcome(results, "dry-run")
    deadline = time.monotonic() + grace_s
    while pending:
        pending = [(e, r) for e, r in pending if _alive(e, guard.proc_root)]
        if not pending or time.monotonic() >= deadline:
            break
        sleep(poll_s)
    for exp, res in pending:
        verdict = guard.check(exp.pid, exp)  # again: it may have gone and been reused
        if not isinstance(verdict, LiveProc):
            continue  # gone (or a zombie now): the SIGTERM did it
        _send(effects, res, signal.SIGKILL)
    kill_deadline = time.monotonic() + kill_wait_s
    while any(_alive(e, guard.proc_root) for e, r in pending if "SIGKILL" in r.signals):
        if time.monotonic() >= kill_deadline:
            break
        sleep(poll_s)
    for exp, res in pending:
        if res.result == "error":
            continue
        if "SIGKILL" in res.signals:
            res.result = "survived" if _alive(exp, guard.proc_root) else "killed"
    for res in results:
        if not res.result:
            res.result = "exited"
    signalled = [r for r in results if r.signals]
    if not signalled:
        outcome = "refused" if any(r.result == "refused" for r in results) else "ok"
    elif all(r.result in ("exited", "killed", "gone", "reused") for r in signalled) and not any(
        r.result == "refused" for r in results
    ):
        outcome = "ok"
    else:
        outcome = "partial"
    return TerminateOutcome(results, outcome)


def _send(effects: Effects, res: ProcOutcome, sig: signal.Signals) -> None:
    try:
        # Pinned to the identity decided on: a PID reused since the guard check is
        # never hit (the pidfd refers to the process, not the number).
        effects.send_signal(res.pid, int(sig), res.start_ticks)
        res.signals.append(sig.name)
    except IdentityChangedError as exc:
        res.result, res.reason = "reused", exc.strerror or str(exc)
    except ProcessLookupError:
        res.result = "gone"
    except OSError as exc:
        res.result, res.reason = "error", f"{sig.name}: {exc.strerror or exc}"
