"""The state store over time: a database of the previous schema is migrated, a state
directory deleted while running is detected and recreated, a truncated state.db is
reported, and the directory lock cannot be deleted from under the daemon."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.status import build_status, render_status
from rogue_watchdog.model import UnreadableOrigin, origin_from_json
from rogue_watchdog.state import (
    LOCK_NAME,
    SCHEMA_VERSION,
    StateDB,
    StateError,
    lock_state_dir,
)
from tests.conftest import Spawned

# The schema as rogue-watchdog wrote it before schema versions (copied verbatim from the
# release: ``state.py``'s SCHEMA and its ``meta`` row). Never edit: it is the past.
V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    signature TEXT PRIMARY KEY,
    summary TEXT NOT NULL,
    user TEXT,
    verdict TEXT NOT NULL,
    origin_json TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    root_pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    pids_json TEXT NOT NULL,
    gone_at REAL,
    sightings INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS findings (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    severity TEXT NOT NULL,
    message TEXT NOT NULL,
    root_pid INTEGER,
    details_json TEXT NOT NULL,
    opened_at REAL NOT NULL,
    last_seen REAL NOT NULL,
    seen_count INTEGER NOT NULL DEFAULT 1,
    resolved_at REAL,
    last_alert_at REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS findings_open
    ON findings(fingerprint) WHERE resolved_at IS NULL;
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY,
    finding_id INTEGER NOT NULL,
    sink TEXT NOT NULL,
    event TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    delivered_at REAL,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_pending
    ON deliveries(next_attempt_at) WHERE delivered_at IS NULL;
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    actor TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    finding_id INTEGER,
    signature TEXT,
    dry_run INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL,
    details_json TEXT NOT NULL,
    undo_json TEXT,
    undone_at REAL
);
"""


def write_v1(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(V1_SCHEMA)
    conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', '1')")
    origin = {"kind": "cron", "fields": {"file": "/etc/cron.d/x", "line": 3}}
    conn.execute(  # the positional 12-column insert of that release
        "INSERT OR REPLACE INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        ("sig1", "python3 train.py", "bob", "rogue", json.dumps(origin), 100.0, 200.0,
         4242, 777, json.dumps([4242, 4243]), None, 2),
    )  # fmt: skip
    conn.execute(
        "INSERT INTO findings(fingerprint, kind, severity, message, root_pid, details_json,"
        " opened_at, last_seen, last_alert_at) VALUES"
        " ('rogue-job:sig1', 'rogue-job', 'high', 'rogue job', 4242, '{}', 100, 200, 100)"
    )
    for delivered, attempts in ((150.0, 2), (None, 1)):
        conn.execute(
            "INSERT INTO deliveries(finding_id, sink, event, payload_json, created_at, attempts,"
            " next_attempt_at, delivered_at, last_error) VALUES (1, 'hook', 'open', '{}', 100,"
            " ?, 100, ?, NULL)",
            (attempts, delivered),
        )
    conn.execute(
        "INSERT INTO actions(created_at, actor, kind, target, outcome, details_json)"
        " VALUES (120, 'cli', 'terminate', 'PID 4242', 'done', '{}')"
    )
    conn.close()


def test_a_database_of_the_previous_schema_is_migrated(tmp_path: Path) -> None:
    write_v1(tmp_path / "state.db")
    db = StateDB(tmp_path)
    assert db.recovered_from is None  # migrated, not moved aside
    assert db.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
    job = db.job("sig1")
    assert job is not None
    assert (job.root_pid, job.pids, job.sightings, job.origin["fields"]["line"]) == (
        4242, [4243 - 1, 4243], 2, 3,
    )  # fmt: skip
    (finding,) = db.open_findings()
    assert (finding.id, finding.instances, finding.alerted_instances) == (1, 1, None)
    # Finding ids are never reused (AUTOINCREMENT, issue 32 case 5), also past a deleted one.
    db.conn.execute("DELETE FROM findings WHERE id=1")
    assert db.insert_finding("k:x", "k", "high", "m", None, {}, 1.0) == 2
    assert [d.id for d in db.pending("hook", 10)] == [2]
    # The running totals start from the history: 1 delivered, 2 failed attempts.
    assert db.sink_stats() == {
        "hook": {"queued": 1, "delivered": 1, "failed_attempts": 2, "dead_lettered": 0}
    }
    assert [a.kind for a in db.actions()] == ["terminate"]
    # An action recorded before write-ahead records is finished, never "interrupted".
    assert [a.state for a in db.actions()] == ["done"] and db.unfinished_actions() == []
    # Named columns: a job written now round-trips, and opening again migrates nothing.
    db.upsert_job(job.__class__(**{**job.__dict__, "sightings": 3}))
    db.close()
    again = StateDB(tmp_path)
    got = again.job("sig1")
    assert got is not None and got.sightings == 3
    again.close()


def test_a_newer_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("PRAGMA user_version=99")
    conn.commit()
    conn.close()
    with pytest.raises(StateError, match="schema version 99 is newer than this rogue-watchdog"):
        StateDB(tmp_path)
    conn = sqlite3.connect(tmp_path / "state.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 99  # not migrated
    conn.close()
    assert not [p.name for p in tmp_path.iterdir() if "corrupt" in p.name]  # not moved aside


def make(tmp_path: Path) -> Daemon:
    cfg = parse_config(
        # settle_s 0: NVML is off and the settle holds a first page without it too
        # (issue 33); the open goes at the first look here.
        "nvml: {enabled: false}\n"
        "training: {launchers: ['train_state_ghost']}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts:\n  settle_s: 0\n  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n",
        "t.yaml",
    )
    return Daemon(cfg, None)


def test_a_state_db_truncated_to_zero_bytes_is_reported(tmp_path: Path) -> None:
    StateDB(tmp_path / "state").close()
    (tmp_path / "state" / "state.db").write_bytes(b"")
    d = make(tmp_path)
    assert d.db.recovered_reason == "the file is empty (0 bytes): truncated"
    assert d.db.recovered_from is not None and Path(d.db.recovered_from).stat().st_size == 0
    d.tick(3_000_000.0)
    (rec,) = [f for f in d.db.open_findings() if f.kind == "state-recovered"]
    assert rec.message == (
        "the state database was unreadable (the file is empty (0 bytes): truncated); "
        f"it was kept as {d.db.recovered_from} and a fresh one created"
    )


def rogue(spawned: Spawned, tmp_path: Path) -> int:
    script = tmp_path / "train_state_ghost.py"
    script.write_text("import time\ntime.sleep(120)\n")
    pid = spawned.start([sys.executable, str(script)]).pid
    time.sleep(0.3)
    return pid


def test_state_dir_deleted_while_running_is_recreated_and_said(
    spawned: Spawned, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pid = rogue(spawned, tmp_path)
    d = make(tmp_path)
    state = tmp_path / "state"
    t0 = 1_000_000.0
    d.tick(t0)
    (before,) = [f for f in d.db.open_findings() if f.root_pid == pid]
    spooled = d.db.conn.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0]
    capsys.readouterr()

    shutil.rmtree(state)
    d.tick(t0 + 5)
    line = (
        f"the state directory {state} was deleted while running; recreated it from the "
        "daemon's open copy (nothing lost)"
    )
    out = capsys.readouterr().out
    assert out.count("state-dir-lost") == 1 and line in out
    assert (state / "state.db").exists()
    # The finding kept its id and was not opened (or alerted) again; the new finding
    # says what happened.
    (after,) = [f for f in d.db.open_findings() if f.root_pid == pid]
    assert (after.id, after.opened_at, after.seen_count) == (before.id, t0, 2)
    (lost,) = [f for f in d.db.open_findings() if f.kind == "state-recovered"]
    assert (lost.message, lost.severity) == (line, "warning")
    events = [r[0] for r in d.db.conn.execute("SELECT event FROM deliveries ORDER BY id")]
    assert len(events) == spooled + 1 and events[-1] == "open"  # the state-recovered one
    # Another daemon cannot take the recreated directory.
    with pytest.raises(StateError, match="is in use by PID"):
        lock_state_dir(state)

    d.tick(t0 + 10)  # said once
    assert "state-dir-lost" not in capsys.readouterr().out
    doc = build_status(d)
    assert [f["kind"] for f in doc["findings"]].count("state-recovered") == 1


def test_the_lock_is_on_the_directory_and_survives_deleting_the_lock_file(
    tmp_path: Path,
) -> None:
    fd = lock_state_dir(tmp_path)
    try:
        os.unlink(tmp_path / LOCK_NAME)
        with pytest.raises(StateError, match="is in use by another process"):
            lock_state_dir(tmp_path)
    finally:
        os.close(fd)
    os.close(lock_state_dir(tmp_path))  # released with the descriptor


def test_status_never_prints_placeholders_for_findings_not_in_the_database(
    spawned: Spawned, tmp_path: Path
) -> None:
    pid = rogue(spawned, tmp_path)
    d = make(tmp_path)
    d.tick(time.time())
    d.db.close()
    (tmp_path / "state" / "state.db").write_bytes(os.urandom(8192))
    text = render_status(build_status(d))
    d.db.close()
    assert "#None" not in text and "Nonex" not in text and "open 0s" not in text
    assert (  # the id column is as wide as its widest id (issue 33): here only "-"
        f"  - high     rogue-job (seen in the last scan; not in the state database): "
        f"rogue training job PID {pid}" in text
    )


def test_state_db_deleted_under_the_daemons_lock_is_recreated_without_relocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    lock = lock_state_dir(state)  # as `run` takes it before the Daemon starts
    try:
        d = make(tmp_path)
        d.tick(1_000_000.0)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{state}/state.db{suffix}").unlink(missing_ok=True)
        d.tick(1_000_005.0)
        assert d.degraded == {}
        (lost,) = [f for f in d.db.open_findings() if f.kind == "state-recovered"]
        assert lost.message == (
            f"{state}/state.db was deleted while running; recreated it from the daemon's "
            "open copy (nothing lost)"
        )
        assert capsys.readouterr().out.count("state-dir-lost") == 1
    finally:
        os.close(lock)


def test_a_second_daemon_on_the_recreated_directory_is_not_written_to(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    d = make(tmp_path)
    d.tick(1_000_000.0)
    shutil.rmtree(state)
    other = lock_state_dir(state)  # another daemon got there first
    try:
        d.tick(1_000_005.0)
        assert d.degraded["state"].startswith(f"StateError: state dir {state} is in use by PID")
        assert not (state / "state.db").exists()  # nothing written into its directory
        d.tick(1_000_010.0)
        assert "state" in d.degraded and not (state / "state.db").exists()
    finally:
        os.close(other)
    d.tick(1_000_015.0)  # the other one is gone: this daemon takes the directory back
    assert "state" not in d.degraded and (state / "state.db").exists()


def test_damaged_json_columns_read_back_as_unreadable_not_a_crash(tmp_path: Path) -> None:
    # Before: one row with damaged JSON (hand-edited, or nesting deep enough for a
    # RecursionError) raised from `actions`, hid every other row, and crashed `terminate`.
    db = StateDB(tmp_path / "state")
    good = db.record_action("alice", "terminate", "PID 7", "ok", {"n": 1}, 1.0, undo=[])
    bad = db.record_action("alice", "disable-source", "x", "ok", {}, 2.0, undo=[])
    deep = "[" * 100_000 + "]" * 100_000
    db.conn.execute(
        "UPDATE actions SET details_json = ?, undo_json = ? WHERE id = ?", ("{not json", deep, bad)
    )
    db.conn.execute(
        "INSERT INTO jobs(signature, summary, user, verdict, origin_json, first_seen,"
        " last_seen, root_pid, start_ticks, pids_json, gone_at, sightings)"
        " VALUES ('sig', 's', 'u', 'rogue', ?, 0, 0, 1, 1, '[1', NULL, 1)",
        ("[" * 100_000,),
    )
    db.conn.commit()
    recs = {r.id: r for r in db.actions()}
    assert recs[good].details == {"n": 1}
    assert recs[bad].details == {"unreadable": "Expecting property name enclosed in double "
                                 "quotes: line 1 column 2 (char 1)"}  # fmt: skip
    assert recs[bad].undo == {"unreadable": "maximum recursion depth exceeded while decoding "
                              "a JSON array from a unicode string"}  # fmt: skip
    job = db.job("sig")
    assert job is not None and job.pids == []
    origin = origin_from_json(job.origin)
    assert isinstance(origin, UnreadableOrigin)
    assert origin.evidence[0].startswith("the recorded origin is unreadable: maximum recursion")
    db.close()
