"""The ``actions`` table: the audit trail of what rogue-watchdog did (or would have
done), and what it says about a job's source (:func:`source_undo`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from watchdog.records import ActionRecord
from watchdog.state.table import Table, _details, _loads


def _action(row: sqlite3.Row) -> ActionRecord:
    undo = row["undo_json"]
    return ActionRecord(
        row["id"], row["created_at"], row["actor"], row["kind"], row["target"],
        row["finding_id"], row["signature"], bool(row["dry_run"]), row["outcome"],
        _details(row["details_json"]),
        # Unreadable: a dict without ops, which undo refuses ("not a list of ops").
        _loads(undo, (list, dict), lambda reason: {"unreadable": reason}) if undo else None,
        row["undone_at"],
    )  # fmt: skip


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

    def actions_for(self, signature: str, limit: int = 200) -> list[ActionRecord]:
        """The actions on one job signature, most recent first."""
        rows = self.conn.execute(
            "SELECT * FROM actions WHERE signature=? ORDER BY id DESC LIMIT ?", (signature, limit)
        )
        return [_action(r) for r in rows]

    def action(self, action_id: int) -> ActionRecord | None:
        """One action by id."""
        row = self.conn.execute("SELECT * FROM actions WHERE id=?", (action_id,)).fetchone()
        return _action(row) if row else None

    def mark_undone(self, action_id: int, now: float | None) -> None:
        """Record that an action was undone (``now``), or that it no longer is (None: an
        undo that failed after it was recorded)."""
        self.conn.execute("UPDATE actions SET undone_at=? WHERE id=?", (now, action_id))

    def finish_action(self, action_id: int, outcome: str, details: dict[str, Any]) -> None:
        """Set the outcome and details of an action recorded before it ran (an ``undo``
        is recorded first, so what it starts is read as the undo's)."""
        self.conn.execute(
            "UPDATE actions SET outcome=?, details_json=? WHERE id=?",
            (outcome, json.dumps(details), action_id),
        )


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

    def note(self) -> str:
        """``its source was re-enabled by `rogue-watchdog undo 7` (action 9) at T by ACTOR``."""
        when = datetime.fromtimestamp(self.undo.created_at).astimezone()
        return (
            f"its source was re-enabled by `rogue-watchdog undo {self.disable.id}` (action "
            f"{self.undo.id}) at {when.isoformat(timespec='seconds')} by {self.undo.actor}, "
            f"undoing disable-source action {self.disable.id}: an operator's undo, not a "
            "failed remediation"
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
