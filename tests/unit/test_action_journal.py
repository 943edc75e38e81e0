"""Write-ahead records of actions (issue 32, case 4): the row before the first side
effect, each step before it is made, the outcome last; a row left unfinished is found."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rogue_watchdog.state import ActionJournal, JournalError, NullJournal, StateDB, self_owner


def test_an_action_is_recorded_before_its_first_side_effect_and_step_by_step(
    tmp_path: Path,
) -> None:
    db = StateDB(tmp_path)
    j = ActionJournal.begin(db, "daemon", "terminate", "PID 42", {"members": [[42, 7]]})
    [rec] = db.unfinished_actions()
    assert (rec.id, rec.state, rec.outcome) == (j.action_id, "pending", "pending")
    assert rec.owner == self_owner(db.session)
    assert rec.owner["pid"] == os.getpid() and rec.owner["start_ticks"] > 0
    first = j.intent("signal", {"sig": "SIGSTOP", "procs": [[42, 7]]})
    j.done(first, {"sent": [[42, 7]]})
    second = j.intent("signal", {"sig": "SIGTERM", "procs": [[42, 7]]})
    steps = db.action_steps(j.action_id)
    assert [(s.id, s.op, s.status, s.detail["sig"]) for s in steps] == [
        (first, "signal", "done", "SIGSTOP"),
        (second, "signal", "intent", "SIGTERM"),  # made or not: never repeated blindly
    ]
    assert steps[0].result == {"sent": [[42, 7]]} and steps[1].result is None
    j.finish("ok", {"procs": []}, undo=None)
    assert db.unfinished_actions() == []
    done = db.action(j.action_id)
    assert done is not None and (done.state, done.outcome) == ("done", "ok")
    assert done.finished_at is not None


def test_a_row_is_adopted_once(tmp_path: Path) -> None:
    db = StateDB(tmp_path)
    ActionJournal.begin(db, "daemon", "terminate", "PID 42", {})
    [rec] = db.unfinished_actions()
    other = StateDB(tmp_path)  # a restarted daemon: another session
    assert other.session != db.session
    assert other.adopt_action(rec, {"interrupted": {"at": 1.0}})
    assert not db.adopt_action(rec, {})  # the owner it was read with is no longer there
    [again] = other.unfinished_actions()
    assert again.state == "recovering" and again.owner is not None
    assert again.owner["session"] == other.session


def test_no_record_no_action(tmp_path: Path) -> None:
    db = StateDB(tmp_path)
    db.conn.execute("PRAGMA query_only=1")  # as a full or unwritable state directory would
    with pytest.raises(JournalError, match="cannot record the terminate action"):
        ActionJournal.begin(db, "daemon", "terminate", "PID 42", {})
    db.conn.execute("PRAGMA query_only=0")
    j = ActionJournal.begin(db, "daemon", "terminate", "PID 42", {})
    db.conn.execute("PRAGMA query_only=1")
    with pytest.raises(JournalError, match="cannot record the step"):
        j.intent("signal", {})
    j.done(1)  # a mark is best effort: the intent already stands for the side effect
    db.conn.execute("PRAGMA query_only=0")


def test_the_null_journal_records_nothing(tmp_path: Path) -> None:
    j = NullJournal()
    assert j.intent("signal", {}) == 0
    j.done(0)
    j.finish("ok", {})


def test_each_record_is_written_with_synchronous_full(tmp_path: Path) -> None:
    db = StateDB(tmp_path)
    seen: list[str] = []
    db.conn.set_trace_callback(seen.append)
    j = ActionJournal.begin(db, "daemon", "terminate", "PID 42", {})
    j.done(j.intent("signal", {}))
    j.finish("ok", {})
    db.conn.set_trace_callback(None)
    words = [s.split("(")[0].split(" SET")[0].strip() for s in seen]
    assert words == [
        "PRAGMA synchronous=FULL", "INSERT INTO actions", "PRAGMA synchronous=NORMAL",
        "PRAGMA synchronous=FULL", "INSERT INTO action_steps", "PRAGMA synchronous=NORMAL",
        "PRAGMA synchronous=FULL", "UPDATE action_steps", "PRAGMA synchronous=NORMAL",
        "PRAGMA synchronous=FULL", "UPDATE actions", "PRAGMA synchronous=NORMAL",
    ]  # fmt: skip
