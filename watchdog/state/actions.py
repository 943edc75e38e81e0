"""The ``actions`` table: the audit trail of what rogue-watchdog did (or would have
done), its write-ahead records (``action_steps``), and what it says about a job's source
(:func:`source_undo`).

Write-ahead (issue 32, case 4): an action's row is written before its first side effect
(:meth:`ActionTable.begin_action`, ``state`` ``pending``, with its owner), every side
effect is written as a step before it is made and marked after
(:class:`ActionJournal`), and the row is finished last
(:meth:`ActionTable.finish_action`). Each of these writes is committed with
``synchronous=FULL``: durable before the side effect it announces, also across a power
loss. A row left unfinished by an owner that is gone is an interrupted action; its
steps say what was done (``done``), what may have been (``intent``) and what was not
(no step).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..hosttext import own_code
from ..logs import get_logger
from ..records import ActionRecord, ActionStep
from .table import Table, _details, _loads

#: ``actions.state`` values of a row not finished yet.
UNFINISHED_STATES = ("pending", "recovering")


class JournalError(OSError):
    """An action's write-ahead record could not be written: the side effect it was to
    announce is not made (no action without a record)."""


def _action(row: sqlite3.Row) -> ActionRecord:
    undo = row["undo_json"]
    keys = row.keys()
    owner = row["owner_json"] if "owner_json" in keys else None
    return ActionRecord(
        row["id"], row["created_at"], row["actor"], row["kind"], row["target"],
        row["finding_id"], row["signature"], bool(row["dry_run"]), row["outcome"],
        _details(row["details_json"]),
        # Unreadable: a dict without ops, which undo refuses ("not a list of ops").
        _loads(undo, (list, dict), lambda reason: {"unreadable": reason}) if undo else None,
        row["undone_at"],
        state=row["state"] if "state" in keys else "done",
        owner=_loads(owner, dict, None) if owner else None,
        finished_at=row["finished_at"] if "finished_at" in keys else None,
    )  # fmt: skip


def _step(row: sqlite3.Row) -> ActionStep:
    result = row["result_json"]
    return ActionStep(
        row["id"], row["action_id"], row["at"], row["op"], row["status"],
        _details(row["detail_json"]), _details(result) if result else None,
    )  # fmt: skip


def self_owner(session: str) -> dict[str, Any]:
    """This process as the owner of an action: PID, start time (``/proc/self/stat``
    field 22), boot id and the database handle's ``session``."""
    start: int | None = None
    try:
        with open("/proc/self/stat", "rb") as fh:
            start = int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        pass
    boot: str | None = None
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip() or None
    except OSError:
        pass
    return {"pid": os.getpid(), "start_ticks": start, "boot_id": boot, "session": session}


class ActionTable(Table):
    """The audit trail: append, list, mark undone."""

    def record_action(
        self,
        actor: str,
        kind: str,
        target: str,
        outcome: str,
        details: dict[str, Any],
        now: float,
        *,
        finding_id: int | None = None,
        signature: str | None = None,
        dry_run: bool = False,
        undo: list[dict[str, Any]] | dict[str, Any] | None = None,
    ) -> int:
        """Append to the audit trail; returns the action id."""
        cur = self.conn.execute(
            "INSERT INTO actions(created_at, actor, kind, target, finding_id, signature, dry_run,"
            " outcome, details_json, undo_json) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                now, actor, kind, target, finding_id, signature, int(dry_run), outcome,
                json.dumps(details), json.dumps(undo) if undo is not None else None,
            ),
        )  # fmt: skip
        return int(cur.lastrowid or 0)

    def actions(self, limit: int = 200) -> list[ActionRecord]:
        """Most recent actions first."""
        rows = self.conn.execute("SELECT * FROM actions ORDER BY id DESC LIMIT ?", (limit,))
        return [_action(r) for r in rows]

    def acted_on(self, finding_id: int) -> bool:
        """Whether an action (not a dry run) names finding ``finding_id``."""
        row = self.conn.execute(
            "SELECT 1 FROM actions WHERE finding_id = ? AND dry_run = 0 LIMIT 1", (finding_id,)
        ).fetchone()
        return row is not None

    def actions_for(self, signature: str, limit: int = 200) -> list[ActionRecord]:
        """The actions on one job signature, most recent first."""
        rows = self.conn.execute(
            "SELECT * FROM actions WHERE signature=? ORDER BY id DESC LIMIT ?", (signature, limit)
        )
        return [_action(r) for r in rows]

    def actions_of_kind(
        self, kind: str, limit: int = 50, before: int | None = None, *, acted: bool = False
    ) -> list[ActionRecord]:
        """The actions of one kind (``disable-source``...), most recent first.

        Args:
            kind: The action kind.
            limit: At most this many.
            before: Only ids below this one (the next page after a page's last id).
            acted: Leave out dry runs and refusals (rows that changed nothing).
        """
        # COALESCE: a row with no outcome at all (hand-made, damaged) is no refusal.
        skip = ""
        if acted:
            skip = " AND dry_run=0 AND COALESCE(outcome, '') NOT IN ('refused', 'dry-run')"
        rows = self.conn.execute(
            f"SELECT * FROM actions WHERE kind=? AND id<?{skip} ORDER BY id DESC LIMIT ?",
            (kind, before if before is not None else 2**63 - 1, limit),
        )
        return [_action(r) for r in rows]

    def every_action_of_kind(
        self, kind: str, page: int = 50, *, acted: bool = False
    ) -> Iterator[ActionRecord]:
        """Every action of one kind, most recent first, read ``page`` rows at a time
        (a reader that stops at its first match reads no more); ``acted`` as in
        :meth:`actions_of_kind`."""
        before: int | None = None
        while rows := self.actions_of_kind(kind, page, before, acted=acted):
            yield from rows
            before = rows[-1].id

    def action(self, action_id: int) -> ActionRecord | None:
        """One action by id."""
        row = self.conn.execute("SELECT * FROM actions WHERE id=?", (action_id,)).fetchone()
        return _action(row) if row else None

    def mark_undone(self, action_id: int, now: float | None) -> None:
        """Record that an action was undone (``now``), or that it no longer is (None: an
        undo that failed after it was recorded)."""
        self.conn.execute("UPDATE actions SET undone_at=? WHERE id=?", (now, action_id))

    # -- write-ahead records -------------------------------------------------------------

    @contextmanager
    def _durable(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection with ``synchronous=FULL`` for the statements run
        inside (each commits on its own): a write-ahead record must be on disk before
        the side effect it announces, not only in the WAL the OS holds."""
        conn = self.conn
        conn.execute("PRAGMA synchronous=FULL")
        try:
            yield conn
        finally:
            conn.execute("PRAGMA synchronous=NORMAL")

    def begin_action(
        self,
        actor: str,
        kind: str,
        target: str,
        details: dict[str, Any],
        now: float,
        *,
        finding_id: int | None = None,
        signature: str | None = None,
        outcome: str = "pending",
    ) -> int:
        """Write an action's row before its first side effect: ``state`` ``pending``,
        ``outcome`` ``pending`` (or ``outcome``: an undo is ``running``, so what it
        starts is read as the undo's), owned by this process (:func:`self_owner`).

        Args:
            actor: Who acts (``daemon``, ``cli:alice``).
            kind: ``terminate``, ``disable-source``, ``undo``, ``quarantine-weights``...
            target: What it acts on, in words.
            details: What it intends (the identities decided on, the plan).
            now: POSIX time.
            finding_id: The finding it acts on, if any.
            signature: The job signature, if any.

        Returns:
            The action id.

        Raises:
            sqlite3.Error: The row could not be written (the action must not start).
        """
        with self._durable() as conn:
            cur = conn.execute(
                "INSERT INTO actions(created_at, actor, kind, target, finding_id, signature,"
                " dry_run, outcome, details_json, state, owner_json)"
                " VALUES (?,?,?,?,?,?,0,?,?,'pending',?)",
                (
                    now, actor, kind, target, finding_id, signature, outcome,
                    json.dumps(details), json.dumps(self_owner(self.session)),
                ),
            )  # fmt: skip
        return int(cur.lastrowid or 0)

    def add_step(self, action_id: int, op: str, detail: dict[str, Any], now: float) -> int:
        """Write one step's intent (``status`` ``intent``) before it is made.

        Raises:
            sqlite3.Error: Not written (the side effect must not be made).
        """
        with self._durable() as conn:
            cur = conn.execute(
                "INSERT INTO action_steps(action_id, at, op, status, detail_json)"
                " VALUES (?,?,?,'intent',?)",
                (action_id, now, op, json.dumps(detail)),
            )
        return int(cur.lastrowid or 0)

    def mark_step(self, step_id: int, status: str, result: dict[str, Any] | None) -> None:
        """Mark a step ``done`` or ``failed`` with what it did or why it failed."""
        with self._durable() as conn:
            conn.execute(
                "UPDATE action_steps SET status=?, result_json=? WHERE id=?",
                (status, json.dumps(result) if result is not None else None, step_id),
            )

    def finish_action(
        self,
        action_id: int,
        outcome: str,
        details: dict[str, Any],
        now: float | None = None,
        *,
        undo: list[dict[str, Any]] | dict[str, Any] | None = None,
        state: str = "done",
        target: str | None = None,
    ) -> None:
        """Finish an action's row, recorded before it ran: its outcome, its details
        (replaced), its undo ops.

        Args:
            now: POSIX time it finished (default: now).
            state: ``done``, or ``interrupted`` for an action found half-way and
                finished or reported by another process.
            target: What it acted on, in words, when it is known better now (kept
                otherwise).
        """
        with self._durable() as conn:
            conn.execute(
                "UPDATE actions SET outcome=?, details_json=?, undo_json=?, state=?,"
                " finished_at=?, target=COALESCE(?, target) WHERE id=?",
                (
                    outcome, json.dumps(details), json.dumps(undo) if undo is not None else None,
                    state, time.time() if now is None else now, target, action_id,
                ),
            )  # fmt: skip

    def adopt_action(
        self,
        rec: ActionRecord,
        details: dict[str, Any],
        *,
        undo: list[dict[str, Any]] | dict[str, Any] | None = None,
    ) -> bool:
        """Take over an unfinished action whose owner is gone: ``state``
        ``recovering``, this process its owner, ``details`` and ``undo`` replaced. Only
        when the row still has the owner ``rec`` was read with (two adopters never both
        win).

        Returns:
            True when this process now owns it.
        """
        session = (rec.owner or {}).get("session")
        with self._durable() as conn:
            cur = conn.execute(
                "UPDATE actions SET state='recovering', owner_json=?, details_json=?,"
                " undo_json=? WHERE id=? AND state IN ('pending', 'recovering')"
                " AND json_extract(owner_json, '$.session') IS ?",
                (
                    json.dumps(self_owner(self.session)), json.dumps(details),
                    json.dumps(undo) if undo is not None else None, rec.id,
                    session if isinstance(session, str) else None,
                ),
            )  # fmt: skip
        return cur.rowcount == 1

    def unfinished_actions(self) -> list[ActionRecord]:
        """Actions begun and not finished (``pending`` or ``recovering``), oldest first:
        in progress, or interrupted (their owner is gone)."""
        rows = self.conn.execute(
            "SELECT * FROM actions WHERE state IN ('pending', 'recovering') ORDER BY id"
        )
        return [_action(r) for r in rows]

    def interrupted_since(self, since: float) -> list[ActionRecord]:
        """Actions found interrupted and finished at or after ``since``, oldest first."""
        rows = self.conn.execute(
            "SELECT * FROM actions WHERE state='interrupted' AND finished_at>=? ORDER BY id",
            (since,),
        )
        return [_action(r) for r in rows]

    def action_steps(self, action_id: int) -> list[ActionStep]:
        """An action's steps in the order they were written."""
        rows = self.conn.execute(
            "SELECT * FROM action_steps WHERE action_id=? ORDER BY id", (action_id,)
        )
        return [_step(r) for r in rows]


log = get_logger()


class ActionJournal:
    """The write-ahead record of one action in progress: every side effect is written
    before it is made (:meth:`intent`) and marked after (:meth:`done`,
    :meth:`failed`); the row is finished last (:meth:`finish`).

    Begun with :meth:`begin`, or built over a row taken over with
    :meth:`ActionTable.adopt_action`. Any action that has side effects can use it: the
    enforcer's terminate and disable-source, ``undo``, the ship gates' quarantine, and
    (designed for it) the Slurm sweep, whose waves of signals are steps like
    terminate's.

    Args:
        db: The state database (an :class:`ActionTable`).
        action_id: The action's row.
        clock: Wall clock for step times.
    """

    def __init__(
        self, db: ActionTable, action_id: int, clock: Callable[[], float] = time.time
    ) -> None:
        self.db = db
        self.action_id = action_id
        self.clock = clock

    @classmethod
    def begin(
        cls,
        db: ActionTable,
        actor: str,
        kind: str,
        target: str,
        details: dict[str, Any],
        *,
        finding_id: int | None = None,
        signature: str | None = None,
        clock: Callable[[], float] = time.time,
        outcome: str = "pending",
    ) -> ActionJournal:
        """Write the action's row (:meth:`ActionTable.begin_action`).

        Raises:
            JournalError: It could not be written: the action must not start.
        """
        try:
            aid = db.begin_action(
                actor, kind, target, details, clock(), finding_id=finding_id,
                signature=signature, outcome=outcome,
            )  # fmt: skip
        except sqlite3.Error as exc:
            raise JournalError(
                f"cannot record the {kind} action in the state database: {exc}"
            ) from None
        return cls(db, aid, clock)

    def intent(self, op: str, detail: dict[str, Any]) -> int:
        """Write a step before it is made; returns its id.

        Raises:
            JournalError: Not written: do not make the side effect.
        """
        try:
            return self.db.add_step(self.action_id, op, detail, self.clock())
        except sqlite3.Error as exc:
            raise JournalError(
                f"cannot record the step ({op}) in the state database: {exc}"
            ) from None

    def done(self, step: int, result: dict[str, Any] | None = None) -> None:
        """Mark a step made. Best effort: a mark that cannot be written leaves the step
        an ``intent``, which recovery takes for "may have been made" (never repeated
        blindly), so the side effect is never lost, only its confirmation."""
        self._mark(step, "done", result)

    def failed(self, step: int, error: str) -> None:
        """Mark a step that failed (its side effect was not made). Best effort."""
        self._mark(step, "failed", {"error": error})

    def _mark(self, step: int, status: str, result: dict[str, Any] | None) -> None:
        try:
            self.db.mark_step(step, status, result)
        except sqlite3.Error as exc:
            log.warning(
                "action-step-unmarked", action_id=self.action_id, step=step, status=status,
                error=str(exc),
            )  # fmt: skip

    def finish(
        self,
        outcome: str,
        details: dict[str, Any],
        *,
        undo: list[dict[str, Any]] | dict[str, Any] | None = None,
        state: str = "done",
        target: str | None = None,
    ) -> None:
        """Finish the row (:meth:`ActionTable.finish_action`).

        Raises:
            JournalError: Not written (the row stays unfinished; a later start finds it
                and reports it from its steps).
        """
        try:
            self.db.finish_action(
                self.action_id, outcome, details, self.clock(), undo=undo, state=state,
                target=target,
            )  # fmt: skip
        except sqlite3.Error as exc:
            raise JournalError(
                f"cannot record the outcome of action {self.action_id}: {exc}"
            ) from None


class NullJournal(ActionJournal):
    """A journal that records nothing (dry runs, callers without a state database)."""

    def __init__(self) -> None:
        super().__init__(None, 0)  # type: ignore[arg-type]

    def intent(self, op: str, detail: dict[str, Any]) -> int:
        return 0

    def _mark(self, step: int, status: str, result: dict[str, Any] | None) -> None:
        return None

    def finish(
        self,
        outcome: str,
        details: dict[str, Any],
        *,
        undo: list[dict[str, Any]] | dict[str, Any] | None = None,
        state: str = "done",
        target: str | None = None,
    ) -> None:
        return None


@dataclass(frozen=True)
class SourceUndo:
    """An operator's ``undo`` that re-enabled a job's source: the job's next run is what
    they asked for, not a remediation that failed.

    Attributes:
        undo: The ``undo`` action (its ``created_at`` is when the source came back).
        disable: The ``disable-source`` action it undid.
    """

    undo: ActionRecord
    disable: ActionRecord

    def note(self, cli_args: str = "") -> str:
        """The note: its source was re-enabled by ``rogue-watchdog undo 7`` (action 9) at T
        by ACTOR; the command set with :func:`~watchdog.hosttext.own_code`.

        Args:
            cli_args: What the printed ``undo`` carries after its verb: the daemon's
                `` --config PATH`` (:func:`watchdog.hostpaths.config_args`), so pasted it
                reads that instance's actions, not the default state database's.
        """
        when = datetime.fromtimestamp(self.undo.created_at).astimezone()
        return (
            "its source was re-enabled by "
            f"{own_code(f'rogue-watchdog undo{cli_args} {self.disable.id}')} "
            f"(action {self.undo.id}) at {when.isoformat(timespec='seconds')} by "
            f"{self.undo.actor}, undoing disable-source action {self.disable.id}: an "
            "operator's undo, not a failed remediation"
        )


def source_undo(actions: Sequence[ActionRecord]) -> SourceUndo | None:
    """Whether the source of one job signature stands re-enabled by an operator's undo.

    Args:
        actions: That signature's actions, most recent first (:meth:`StateDB.actions_for`).

    Returns:
        The undo and the ``disable-source`` it undid, when the newest disable-source that
        took effect was undone and none took effect since; else None.
    """
    # "running": the undo is recorded before it starts what it restores, so the run it
    # starts (a `systemctl start`) is read as the undo's, never as a return.
    undos = {
        r.details.get("undid"): r
        for r in actions
        if r.kind == "undo" and r.outcome in ("ok", "running") and not r.dry_run
    }
    for rec in actions:
        if rec.kind != "disable-source" or rec.dry_run or rec.outcome not in ("ok", "partial"):
            continue
        if rec.undone_at is None:
            return None  # disabled again since: a run now is the source's, not the undo's
        undo = undos.get(rec.id)
        return SourceUndo(undo, rec) if undo is not None else None
    return None
