"""Whether a terminate stopped the shell loop it was advised to stop with the job.

The scan's advice says a shell loop's shell runs nothing but the job, so ``terminate``
stops it with the run and the loop's finding may resolve at once
(``details.source_stopped``: :func:`~watchdog.daemon.tracking.current.ended_for_good`).
The terminate decides its wrappers again from the live processes when it acts
(:class:`~watchdog.actions.terminate.JobTree`): a script file changed since the scan, or a
``-c`` shell that started another child meanwhile, is no longer the job's and is left
running. The claim is then false: the loop runs the job again. So the claim stands only
when the very shell the advice counted on (PID and start time) is among what the
terminate stopped; otherwise the record says the loop's shell was left, and an ``ok``
becomes ``will-return`` (the shell still runs: its loop starts the job again) or
``may-return`` (its shell's identity was not recorded: whether it runs is unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..policy.guard import stop_loop_first
from ..sources.procfs import alive_now
from .guards import read_live
from .terminate import TerminateOutcome

#: Per-process results that mean the process no longer runs after the terminate (a dry
#: run's ``would-signal``: it would be signalled).
_ENDED = ("exited", "killed", "gone", "would-signal")

_LEFT = (
    "the loop's shell, which the scan found running only the job, was not stopped: the "
    "terminate, deciding again as it acted, did not find it the job's alone"
)


def loop_shell_intent(shell: tuple[int, int] | None, restarts: str) -> dict[str, Any]:
    """What a terminate's intent records of the loop's shell it is advised to stop.

    Args:
        shell: The shell's ``(PID, start ticks)`` (:attr:`~watchdog.model.origin.
            Restarts.shell`), or None when the advice did not name it.
        restarts: The advice's line for the loop (``restarts it: after about 5 s,
            shell loop ...``), said again should the shell be left.

    Returns:
        ``{"pid", "start_ticks", "restarts"}`` (``pid`` and ``start_ticks`` None when
        unknown).
    """
    pid, start = shell if shell is not None else (None, None)
    return {"pid": pid, "start_ticks": start, "restarts": restarts}


def _stopped(res: TerminateOutcome, pid: int, start: int) -> bool:
    return any(p.pid == pid and p.start_ticks == start and p.result in _ENDED for p in res.procs)


def settle_loop(
    intent: Mapping[str, Any], res: TerminateOutcome, details: dict[str, Any], proc_root: str
) -> None:
    """Keep ``details["source_stopped"]`` only when this terminate stopped the loop's
    shell the advice counted on; else drop it, record ``loop_left``, and make an ``ok``
    outcome ``will-return`` or ``may-return`` with the words readers repeat
    (``will_return`` / ``may_return``: the enforcer's ``remediation-failed``).

    Args:
        intent: The terminate's intent (``source_stopped`` and ``loop_shell`` from
            :func:`~watchdog.actions.remedy.terminate_extras`).
        res: Its outcome, once ended: ``res.outcome`` and ``res.left`` may change.
        details: The record's details being finished: changed in place.
        proc_root: procfs mount, to tell whether a shell left still runs.
    """
    if "source_stopped" not in intent:
        return
    shell = intent.get("loop_shell")
    shell = shell if isinstance(shell, dict) else {}
    pid, start = shell.get("pid"), shell.get("start_ticks")
    ident = (pid, start) if isinstance(pid, int) and isinstance(start, int) else None
    if ident is not None and _stopped(res, *ident):
        return  # the very shell was stopped: the loop is gone with its run
    details.pop("source_stopped", None)
    running = ident is not None and alive_now(ident, proc_root)
    left: dict[str, Any] = {"pid": pid, "start_ticks": start, "running": running}
    if ident is None:
        left["reason"] = "which shell the advice counted on was not recorded: not checked"
    elif running:
        left["reason"] = f"{_LEFT}; it runs on and its loop starts the job again"
        _note_left(res, ident[0], proc_root)
    else:
        # Ended, but not by this terminate: nothing claimed either way.
        left["reason"] = f"{_LEFT}; it has ended since, not by this terminate"
    details["loop_left"] = left
    if res.outcome not in ("ok", "dry-run") or (ident is not None and not running):
        return
    stops = stop_loop_first(ident[0]) if ident is not None else None
    words = {"restarts": shell.get("restarts"), "stops": stops}
    key, outcome = ("will_return", "will-return") if running else ("may_return", "may-return")
    details[key] = words
    if res.outcome == "ok":
        res.outcome = outcome


def _note_left(res: TerminateOutcome, pid: int, proc_root: str) -> None:
    """Say in ``res.left`` (what the CLI prints and the record keeps) that the loop's
    shell was left and starts the job again; its own entry (a shared shell) gets the
    words added."""
    again = "its loop starts the job again"
    for item in res.left:
        if item.get("pid") == pid:
            item["reason"] = f"{item.get('reason', '')}; {again}"
            return
    live = read_live(pid, proc_root)
    argv = list(live.cmdline) if live is not None else []
    res.left.append({"pid": pid, "cmdline": argv, "reason": f"{_LEFT}; {again}"})
