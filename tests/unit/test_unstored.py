"""Alerting never depends on the database write (issue 32, cases 1 and 2).

Here SQLite itself refuses the writes (``PRAGMA query_only``); the system test
(tests/system/test_reliability.py) fills a real tmpfs and sets ``chattr +i`` on the
real daemon's state directory.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
import uuid
from pathlib import Path

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.alerts import DeliveryWorker
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.status import build_status, render_status
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned

TOKEN = f"train_unstored_{uuid.uuid4().hex[:8]}"


def make(tmp_path: Path) -> tuple[Daemon, DeliveryWorker]:
    cfg = parse_config(
        # settle_s 0: NVML is off and the settle holds a first page without it too
        # (issue 33); the open goes at the first look here.
        "nvml: {enabled: false}\n"
        f"training: {{launchers: ['{TOKEN}']}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts:\n  settle_s: 0\n  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n",
        "t.yaml",
    )
    d = Daemon(cfg, None)
    w = DeliveryWorker(
        d.db, lambda: d.config.alerts, jitter=0.0, degraded=d.degraded, memory=d.unstored.spool
    )
    return d, w


def rogues(spawned: Spawned, tmp_path: Path, n: int) -> list[int]:
    script = tmp_path / f"{TOKEN}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    pids = [spawned.start([sys.executable, str(script), str(i)]).pid for i in range(n)]
    time.sleep(0.3)
    MINE.update(pids)
    return pids


def full(db: StateDB, on: bool) -> None:
    """Make ``db``'s connection refuse every write (or not): SQLite's ``query_only``,
    which fails each write as a read-only database does ("attempt to write a readonly
    database"). The system test fills a real tmpfs and sets ``chattr +i`` instead."""
    db.conn.execute(f"PRAGMA query_only={'ON' if on else 'OFF'}")


MINE: set[int] = set()  # the rogues this module started (the host runs other jobs too)


def sent(tmp_path: Path) -> list[tuple[str, str, int]]:
    """(event, kind, finding id) of each alert the log sink wrote about this test's
    rogues or a degraded component, in order."""
    path = tmp_path / "alerts.log"
    if not path.exists():
        return []
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    return [
        (a["action"], a["kind"], a["finding_id"])
        for a in docs
        if a["root_pid"] in MINE or a["kind"] == "component-degraded"
    ]


def test_findings_that_cannot_be_stored_are_alerted_once_and_reconciled(
    spawned: Spawned, tmp_path: Path
) -> None:
    d, w = make(tmp_path)
    t0 = 2_000_000.0
    d.tick(t0)
    w.deliver_due(t0)
    assert sent(tmp_path) == []
    full(d.db, True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        d.db.conn.execute("INSERT INTO meta VALUES ('probe', zeroblob(10000))")
    pids = rogues(spawned, tmp_path, 4)
    d.tick(t0 + 5)
    w.deliver_due(t0 + 5)
    # Case 1: before, 0 of 4 rogues were alerted on any sink (the log sink included).
    opened = [a for a in sent(tmp_path) if a[:2] == ("open", "rogue-job")]
    assert len(opened) == 4
    assert ("open", "component-degraded") in [a[:2] for a in sent(tmp_path)]
    assert d.degraded["state"].startswith("OperationalError: attempt to write a readonly")
    doc = build_status(d)
    mem = [f for f in doc["findings"] if f.get("persisted") is False]
    assert sorted(f["root_pid"] for f in mem if f["kind"] == "rogue-job") == sorted(pids)
    assert "NOT PERSISTED" in render_status(doc, width=200)
    ids = sorted(a[2] for a in opened)

    d.tick(t0 + 10)  # still full: nothing sent twice
    w.deliver_due(t0 + 10)
    assert len(sent(tmp_path)) == 5

    full(d.db, False)  # storage returns
    d.tick(t0 + 15)
    w.deliver_due(t0 + 15)
    stored = sorted(f.id for f in d.db.open_findings() if f.root_pid in MINE)
    assert stored == ids  # under the ids they were alerted with
    assert [a for a in sent(tmp_path) if a[0] == "open" and a[1] == "rogue-job"] == opened
    assert "state" not in d.degraded
    assert not [f for f in build_status(d)["findings"] if f.get("persisted") is False]

    spawned.procs[0].kill()
    spawned.procs[0].wait()
    d.tick(t0 + 20)
    w.deliver_due(t0 + 20)
    resolves = [a for a in sent(tmp_path) if a[:2] == ("resolve", "rogue-job")]
    assert len(resolves) == 1
    assert len([a for a in sent(tmp_path) if a[:2] == ("open", "rogue-job")]) == 4


def test_a_delivery_whose_mark_fails_is_not_sent_again(tmp_path: Path, spawned: Spawned) -> None:
    """Case 2: before, the same alert was posted again on every round (240 times in
    84 s) while ``delivered_at`` could not be written."""
    d, w = make(tmp_path)
    t0 = 2_000_000.0
    rogues(spawned, tmp_path, 1)
    d.tick(t0)
    for i in range(20):
        full(d.db, True)  # again: a failed mark reconnects, and query_only is per connection
        w.deliver_due(t0 + i)
    assert [a[:2] for a in sent(tmp_path)] == [("open", "rogue-job")]
    assert d.db.delivery_health()["queued"] == 1  # not marked yet
    full(d.db, False)
    w.deliver_due(t0 + 60)  # the marks retry with backoff (5, 10, 20 s): due, written
    assert d.db.delivery_health()["queued"] == 0
    assert len(sent(tmp_path)) == 1
