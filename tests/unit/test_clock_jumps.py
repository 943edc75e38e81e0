"""Time that cannot go wrong (issue 32, case 5): finding ids are never reused, a
wall clock set back does not silence reminders, and retention never deletes what is
younger than the retention by the clock a previous run saw."""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned

TOKEN = f"train_clock_{uuid.uuid4().hex[:8]}"
DAY = 86400.0


def make(tmp_path: Path, extra: str = "") -> Daemon:
    cfg = parse_config(
        # settle_s 0: NVML is off and the settle holds a first page without it too
        # (issue 33); the open goes at the first look here.
        "nvml: {enabled: false}\n"
        f"training: {{launchers: ['{TOKEN}']}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', retention_findings_s: {DAY}}}\n"
        f"alerts:\n  reminder_after_s: 60\n  settle_s: 0\n"
        f"  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n" + extra,
        "t.yaml",
    )
    return Daemon(cfg, None)


def rogue(spawned: Spawned, tmp_path: Path) -> int:
    script = tmp_path / f"{TOKEN}.py"
    script.write_text("import time\ntime.sleep(120)\n")
    pid = spawned.start([sys.executable, str(script)]).pid
    time.sleep(0.3)
    return pid


def events(d: Daemon) -> list[str]:
    return [
        r[0]
        for r in d.db.conn.execute(
            "SELECT d.event FROM deliveries d JOIN findings f ON f.id=d.finding_id"
            " WHERE f.kind='rogue-job' ORDER BY d.id"
        )
    ]


def test_finding_ids_are_never_reused_after_the_newest_row_is_deleted(tmp_path: Path) -> None:
    db = StateDB(tmp_path)
    ids = [db.insert_finding(f"k:{i}", "k", "high", "m", None, {}, 1.0) for i in range(2)]
    db.conn.execute("DELETE FROM findings WHERE id=?", (ids[-1],))
    again = db.insert_finding("k:again", "k", "high", "m", None, {}, 2.0)
    # Before (INTEGER PRIMARY KEY without AUTOINCREMENT): 2, the deleted finding's id.
    assert (ids, again) == ([1, 2], 3)
    assert db.next_finding_id() == 4
    db.close()


def test_a_clock_set_back_does_not_block_reminders(spawned: Spawned, tmp_path: Path) -> None:
    rogue(spawned, tmp_path)
    d = make(tmp_path)
    mono = [1000.0]
    d.tracker.mono = lambda: mono[0]
    real = 1_700_000_000.0
    d.tick(real + 2 * DAY)  # started two days in the future: opened and alerted then
    assert events(d) == ["open"]
    for step in range(1, 6):  # back at the right time; 5 × 70 s on the monotonic clock
        mono[0] += 70.0
        d.tick(real + step * 70.0)
    # Before: last_alert_at sat 172,800 s ahead and no reminder came (0 of 5).
    assert events(d) == ["open"] + ["remind"] * 5


def test_retention_does_not_trust_a_clock_ahead_of_the_last_one_seen(
    spawned: Spawned, tmp_path: Path
) -> None:
    real = 1_700_000_000.0
    d = make(tmp_path)
    d.tick(real)  # prunes (nothing) and notes the clock seen
    pid = rogue(spawned, tmp_path)
    d.tick(real + 5)
    (f,) = [f for f in d.db.open_findings() if f.root_pid == pid]
    spawned.procs[0].kill()
    spawned.procs[0].wait()
    d.tick(real + 10)
    assert d.db.finding(f.id).resolved_at == real + 10  # type: ignore[union-attr]
    d.db.close()

    later = make(tmp_path)  # restarted with the clock two days ahead
    later.tick(real + 2 * DAY)
    # Before: deleted as two days old, resolved 15 s earlier by the real clock.
    assert later.db.finding(f.id) is not None
    meta = later.db.meta("clock_seen")
    assert meta is not None and json.loads(meta) == real + 2 * DAY
