"""A finding's message as of now, for an open finding not reported this tick (issue 31,
case 3: advice that goes stale).

A finding reported again this tick gets the scan's message, built from what the scan
knows now. One that stays open without being reported kept the message of its last
sighting: a ``respawned`` finding while its ghost runs (it is reported only on the
tick of the return), and a job's finding whose run is gone while it waits for the job
to come back (or between two runs of its loop, or held by a blind source). Its advice
then named a run that no longer exists, or queued at jobs that since ran. Here each is
built again from what is known this tick: the ghost's job as scanned now, or the run's
end (how, when) after its last message.

A changed message is never a page by itself (:mod:`.reminders` decides alerts from the
labels, the instances and the reminder interval only); the next reminder, ``status``,
``findings`` and ``explain`` carry the current one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from ...hosttext import (
    code_span,
    find_outside_code,
    own_code,
    replace_outside_code,
    split_outside_code,
)
from ...model import Job
from ...model.advice import RUN_ONLY
from ...records import ActionRecord, FindingRecord
from ..alerts.alert import local_iso
from .jobs import respawned_finding
from .naming import DISABLED_AGAIN, with_own_id

# Starts the part of a message that says how its run ended: replaced at each refresh.
RUN_ENDED = "; now: its run PID "
#: What scan.py adds to a job seen only at its exec, already exited.
SEEN_AT_EXEC = " (already exited: seen at its exec)"
# Starts a job finding's advice on its source (the last part of the scan's message,
# :meth:`watchdog.model.Advice.finding_text`), and the undo note that may follow it
# (:meth:`watchdog.state.actions.SourceUndo.note`).
SOURCE_ADVICE = "; to stop the source: "
REENABLED = "; its source was re-enabled by "
# A terminate's outcomes that stopped the run (will-return: stopped, and it comes back).
STOPPED = ("ok", "partial", "will-return", "may-return")
_JOB_KINDS = ("rogue-job", "excess-instances", "unsanctioned-gpu-use")


def _signature(rec: FindingRecord) -> str | None:
    sig = rec.details.get("signature")
    if isinstance(sig, str):
        return sig
    return rec.fingerprint.partition(":")[2] or None


def how_run_ended(
    root: Sequence[int], actions: Sequence[ActionRecord], exits: Mapping[int, int]
) -> str:
    """How the run rooted at ``root`` (PID, start ticks) ended, as far as it is known.

    Args:
        root: The run's identity.
        actions: Its signature's actions, most recent first.
        exits: PID → wait(2) status of the processes the kernel saw exit.

    Returns:
        E.g. ``stopped by rogue-watchdog terminate (action 4)``, ``killed by signal 9``,
        ``exited with status 0``, or ``ended (how is not known)``.
    """
    ours = [act for act in actions if act.kind == "terminate" and not act.dry_run]
    for act in ours:
        if act.details.get("root") == list(root) and act.outcome in STOPPED:
            return f"stopped by rogue-watchdog terminate (action {act.id})"
    status = exits.get(root[0])
    if status is not None and status & 0x7F:
        return f"killed by signal {status & 0x7F}"
    if status is not None:
        return f"exited with status {(status >> 8) & 0xFF}"
    return "ended (how is not known)"


def current_message(
    rec: FindingRecord,
    job: Job | None,
    running: set[tuple[int, int]],
    actions: Sequence[ActionRecord],
    exits: Mapping[int, int],
    gone_at: float | None,
    cli_args: str = "",
) -> str | None:
    """The message ``rec`` (open, not reported this tick) has as of now, or None to
    keep it.

    Args:
        rec: The open finding.
        job: This tick's run of the finding's job signature (its own root when that
            runs), or None.
        running: The identities (PID, start ticks) of this tick's job roots.
        actions: The actions of the finding's signature, most recent first.
        exits: PID → wait(2) status of the processes the kernel saw exit.
        gone_at: When the finding's job was seen gone, when known.
        cli_args: What a printed ``undo`` carries after its verb (the daemon's
            `` --config PATH``).

    Returns:
        A ``respawned`` finding whose ghost runs: its message built from the ghost as
        scanned now. A job's finding whose run is gone: its last message, with how and
        when the run ended (``; now: its run PID N ended …``). A loop's (periodic)
        finding between two runs: its message without commands on the ended run, and
        what the action log says of its latest run and its source. Else None.
    """
    sig = _signature(rec)
    root = rec.details.get("root")
    if rec.kind == "respawned" and sig is not None and job is not None:
        gap = rec.details.get("gap_s")
        if not isinstance(gap, int | float):
            return None
        fresh = respawned_finding(job, sig, rec.opened_at - gap, rec.opened_at)
        return with_own_id(fresh, rec.id)
    loop = rec.details.get("periodic")
    if rec.kind in _JOB_KINDS and isinstance(loop, dict) and root is None and job is None:
        # A loop's finding between two runs: its latest run ended, so no command acts on
        # it (issue 33, fresh user J: `terminate … 7237` from `status`, 40 s after the
        # terminate stopped that run: exit 2, "not running"); the next run brings its own.
        # Its source as the action log has it now (fresh user, 2026-12-07: F6 still said
        # `to stop the source: disable-source F6` and `re-enabled by undo` minutes after
        # a second disable-source and a terminate).
        head, source = source_note(
            without_run_commands(rec.message), rec.opened_at, actions, cli_args
        )
        ended = f"{head}{latest_run_stopped(loop.get('pid'), actions)}{source}"
        return ended if ended != rec.message else None
    if rec.kind not in _JOB_KINDS or not isinstance(root, list) or len(root) != 2:
        return None
    if tuple(root) in running:
        return None
    head, source = source_note(before_run_end(rec.message), rec.opened_at, actions, cli_args)
    cut = find_outside_code(head, RUN_ONLY)
    if cut >= 0:  # its `terminate` names the run that ended: nothing left to stop
        later = find_outside_code(head, REENABLED, cut)
        head = head[:cut] + (head[later:] if later >= 0 else "")
    head = without_run_commands(head)
    when = f" at {local_iso(gone_at)}" if gone_at is not None else ""
    how = how_run_ended(root, actions, exits)
    return (
        f"{head}{RUN_ENDED}{root[0]} {how}{when}; a command naming PID {root[0]} has "
        f"nothing left to stop{source}"
    )


def source_note(
    head: str, opened_at: float, actions: Sequence[ActionRecord], cli_args: str = ""
) -> tuple[str, str]:
    """``head`` without its ``to stop the source`` advice once a ``disable-source`` done
    since the finding opened stopped that source, and what to say instead (empty when
    none did).

    Fresh-user hour (issue 33): a loop's finding, open between two runs when its line
    was disabled (it stays open until the loop is quiet, about 3 minutes for a cron line
    every minute), kept offering ``disable-source F194`` and the ``sed`` by hand, both
    with nothing left to do. The advice stays out after an undo too: the job's next run
    is reported with fresh advice. The newest disable-source is the state: while it
    stands, a note that an undo of an earlier one re-enabled the source (the run's,
    :meth:`~watchdog.state.actions.SourceUndo.note`) is history and is dropped (fresh
    user, 2026-12-07: disable, undo, disable again, and F6 still said "re-enabled").

    Args:
        head: The finding's message without its run's end.
        opened_at: When the finding opened (older disables are another episode's).
        actions: Its signature's actions, most recent first.
        cli_args: What the printed ``undo`` carries after its verb.

    Returns:
        ``(head, tail)``: the tail names the disable (action, time, its backup) and the
        ``undo`` that puts the source back, or the undo that did.
    """
    done = standing_disable(actions, opened_at, undone_too=True)
    if done is None:
        return head, ""
    at = find_outside_code(head, SOURCE_ADVICE)
    if at >= 0:
        later = find_outside_code(head, REENABLED, at)  # an undo note after the advice stays
        head = head[:at] + (head[later:] if later >= 0 else "")
    if done.undone_at is None:
        parts = split_outside_code(head, "; ")
        head = "; ".join(p for p in parts if not p.startswith((REENABLED[2:], DISABLED_AGAIN)))
        backup = _backup(done)
        return head, (
            f"; its source was disabled by rogue-watchdog disable-source (action {done.id}"
            f" at {local_iso(done.created_at)}{backup}); undo with: "
            f"{own_code(f'rogue-watchdog undo{cli_args} {done.id}')}"
        )
    return head, (
        f"; its source, disabled by action {done.id}, was re-enabled by rogue-watchdog undo"
        f" at {local_iso(done.undone_at)}"
    )


def standing_disable(
    actions: Sequence[ActionRecord], since: float, *, undone_too: bool = False
) -> ActionRecord | None:
    """The newest ``disable-source`` of a signature that took effect (``ok``) at or after
    ``since``: the state of its source as the action log has it.

    Args:
        actions: The signature's actions, most recent first.
        since: POSIX time: older disables are another episode's.
        undone_too: Also return it when an ``undo`` put the source back since; else only
            while it stands.
    """
    for a in actions:
        if a.kind != "disable-source" or a.dry_run or a.outcome != "ok":
            continue
        if a.created_at < since or (a.undone_at is not None and not undone_too):
            return None
        return a
    return None


def _backup(done: ActionRecord) -> str:
    """``; backup `PATH```: the copy a disable-source made (its ``done`` steps), quoted
    (a path is host text); empty when it names none."""
    steps = done.details.get("done")
    for step in steps if isinstance(steps, list) else ():
        if isinstance(step, str) and step.startswith("backup "):
            return f"; backup {code_span(step.removeprefix('backup '))}"
    return ""


def latest_run_stopped(pid: object, actions: Sequence[ActionRecord]) -> str:
    """``; its latest run PID N was stopped by rogue-watchdog terminate (action 4 at T)``
    for a loop whose latest run (``pid``) a terminate of ours stopped; else empty.

    Args:
        pid: The loop's latest run's root PID (``details.periodic.pid``).
        actions: The signature's actions, most recent first.
    """
    act = stopping_terminate(pid, actions)
    if act is None:
        return ""
    return (
        f"; its latest run PID {pid} was stopped by rogue-watchdog terminate (action "
        f"{act.id} at {local_iso(act.created_at)})"
    )


def stopping_terminate(pid: object, actions: Sequence[ActionRecord]) -> ActionRecord | None:
    """The newest terminate of ours that stopped the run rooted at ``pid``, or None."""
    if not isinstance(pid, int):
        return None
    for act in actions:
        root = act.details.get("root")
        if act.kind != "terminate" or act.dry_run or act.outcome not in STOPPED:
            continue
        if isinstance(root, list) and root[:1] == [pid]:
            return act
    return None


def as_opened(rec: FindingRecord) -> FindingRecord:
    """``rec`` as its (owed, late) open alert tells it: what ran, without the tail
    saying its run is gone (``; now: its run PID N …``, ``already exited``). The
    resolve that follows at once says how it ended.

    Args:
        rec: A finding resolving before its first page.

    Returns:
        ``rec`` with that tail cut from its message (the record itself keeps it).
    """
    head = replace_outside_code(before_run_end(rec.message), SEEN_AT_EXEC, "")
    return dataclasses.replace(rec, message=head) if head != rec.message else rec


#: The clauses of a job finding's message whose command acts on the run itself (its PID:
#: ``terminate``, ``--stop-service``, a Slurm job's ``scancel``): moot once it ended.
_RUN_CLAUSES = ("to stop it: ", "to stop this run: ", "to stop the service ")


def without_run_commands(message: str) -> str:
    """``message`` without the commands that act on its run, for a run that ended.

    Fresh-user hour (issue 33, F item 3): ``terminate --config … 20297`` pasted from a
    ``resolve`` alert gave exit 2, ``PID 20297 is not running … nothing to terminate``.
    A source-level hint (``to stop the source: disable-source F85``) stays: it names the
    finding, and the source may start the job again (``source_note`` drops it once a
    ``disable-source`` stopped that source).

    Args:
        message: A finding's message (clauses joined by ``"; "``).

    Returns:
        The message without those clauses; ``only the run is left`` reads ``the run
        ended``.
    """
    parts = split_outside_code(message, "; ")
    kept = [parts[0]] + [p for p in parts[1:] if not p.startswith(_RUN_CLAUSES)]
    out = "; ".join(kept)
    return replace_outside_code(out, RUN_ONLY.split(";", 1)[0], ": the run ended")


def before_run_end(message: str) -> str:
    """``message`` without the part saying how its run ended (:data:`RUN_ENDED` and
    what follows): cut only at the product's own words, never inside a quoted command
    line, which may hold them (:func:`~watchdog.hosttext.find_outside_code`).

    Args:
        message: A finding's message.

    Returns:
        ``message`` up to its run's end, or all of it when it says none.
    """
    at = find_outside_code(message, RUN_ENDED)
    return message if at < 0 else message[:at]


def ended_for_good(rec: FindingRecord, actions: Sequence[ActionRecord]) -> str | None:
    """Why a loop's (periodic) finding between two runs need not wait out its quiet time:
    this product stopped its latest run and its source, or None (it waits, as before).

    A loop's finding stays open until the loop is quiet for twice its cadence plus a
    minute (:attr:`~.periodic.Loop.quiet_s`), in case the next run comes. That wait is for
    a source that may still start one. Fresh user, 2026-12-07: F6 (a cron line every
    minute, disabled, its run terminated) and F3 (a shell loop whose shell the terminate
    stopped with its run) stayed open 2-3 minutes with nothing left to come back. The
    latest run stopped by our terminate (``ok`` or ``will-return``: all of it stopped)
    after it was first seen, and its source stopped since then, by a ``disable-source``
    that stands or by that terminate itself (``details.source_stopped``: the loop's shell
    was part of what it stopped): nothing known restarts it. A run back all the same is
    a return, paged as one (``respawned``, the enforcer's ``remediation-failed``). An
    unknown source, a partial terminate, or a disable older than the latest run (it did
    not hold) keeps the wait.

    Args:
        rec: An open periodic finding (``details.periodic``).
        actions: Its signature's actions, most recent first.

    Returns:
        The reason in words (``its latest run PID N was stopped by action 4 and its
        source disabled by action 3``), or None.
    """
    loop = rec.details.get("periodic")
    if not isinstance(loop, dict):
        return None
    last_at, pid = loop.get("last_at"), loop.get("pid")
    term = stopping_terminate(pid, actions)
    if not isinstance(last_at, int | float) or term is None or term.created_at < last_at:
        return None
    if term.outcome not in ("ok", "will-return", "may-return"):
        return None  # something of it was left running: the enforcer's recheck says what
    stopped = f"its latest run PID {pid} was stopped by action {term.id}"
    loop_stopped = term.details.get("source_stopped")
    if term.outcome == "ok" and isinstance(loop_stopped, str):
        return f"{stopped} with what restarted it ({loop_stopped})"
    done = standing_disable(actions, last_at)
    if done is None:
        return None
    return f"{stopped} and its source disabled by action {done.id}"
