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

from ...hosttext import find_outside_code, replace_outside_code, split_outside_code
from ...model import Job
from ...model.advice import RUN_ONLY
from ...records import ActionRecord, FindingRecord
from ..alerts.alert import local_iso
from .jobs import respawned_finding
from .naming import with_own_id

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
STOPPED = ("ok", "partial", "will-return")
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

    Returns:
        A ``respawned`` finding whose ghost runs: its message built from the ghost as
        scanned now. A job's finding whose run is gone: its last message, with how and
        when the run ended (``; now: its run PID N ended …``). A loop's (periodic)
        finding between two runs: its message without commands on the ended run. Else
        None.
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
        ended = without_run_commands(rec.message)
        return ended if ended != rec.message else None
    if rec.kind not in _JOB_KINDS or not isinstance(root, list) or len(root) != 2:
        return None
    if tuple(root) in running:
        return None
    head, source = source_note(before_run_end(rec.message), rec.opened_at, actions)
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


def source_note(head: str, opened_at: float, actions: Sequence[ActionRecord]) -> tuple[str, str]:
    """``head`` without its ``to stop the source`` advice once a ``disable-source`` done
    since the finding opened stopped that source, and what to say instead (empty when
    none did).

    Fresh-user hour (issue 33): a loop's finding, open between two runs when its line
    was disabled (it stays open until the loop is quiet, about 3 minutes for a cron line
    every minute), kept offering ``disable-source F194`` and the ``sed`` by hand, both
    with nothing left to do. The advice stays out after an undo too: the job's next run
    is reported with fresh advice.

    Args:
        head: The finding's message without its run's end.
        opened_at: When the finding opened (older disables are another episode's).
        actions: Its signature's actions, most recent first.
    """
    done = next(
        (
            a
            for a in actions
            if a.kind == "disable-source" and not a.dry_run and a.outcome == "ok"
            and a.created_at >= opened_at
        ),
        None,
    )  # fmt: skip
    if done is None:
        return head, ""
    at = find_outside_code(head, SOURCE_ADVICE)
    if at >= 0:
        later = find_outside_code(head, REENABLED, at)  # an undo note after the advice stays
        head = head[:at] + (head[later:] if later >= 0 else "")
    if done.undone_at is None:
        return head, (
            f"; its source was disabled by rogue-watchdog disable-source (action {done.id}"
            f" at {local_iso(done.created_at)})"
        )
    return head, (
        f"; its source, disabled by action {done.id}, was re-enabled by rogue-watchdog undo"
        f" at {local_iso(done.undone_at)}"
    )


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
