"""Issue 33, fresh user J item 1: a restart re-sent what the last process held back.

On a shared host the sandbox daemon held back the first page of about 100 other
people's runs (each ended within ``alerts.settle_s``: recorded, not paged). A job
finding whose run ended by itself stays open for a while, in case the job comes back.
The restarted daemon found those findings open, did not know how their runs had ended
(the exit statuses were the old process's), and sent each the open it had "owed", then
its resolve: 97 opens and 99 resolves at high in the restart's first second. An unknown
end now owes the open only where this product's own action stopped the run.
"""

from __future__ import annotations

from pathlib import Path

from rogue_watchdog.config.alerts import AlertSettings, SinkSettings
from rogue_watchdog.daemon.tracker import Tracker
from rogue_watchdog.policy.findings import job_findings
from rogue_watchdog.state import StateDB
from tests.unit.test_pages import T0
from tests.unit.test_return_pages import _job


def _sent(tmp_path: Path, ours: bool) -> list[tuple[str, str]]:
    db = StateDB(str(tmp_path / "state"))
    alerts = AlertSettings(
        settle_s=5.0, sinks=(SinkSettings(name="log", type="log", path=str(tmp_path / "a.log")),)
    )
    first = Tracker(db, alerts, "h")
    job = _job(7100, 200, "/tmp/pytest-of-root/train_fan_0.py")
    first.update([job], job_findings([job]), T0)
    if ours:  # this product's terminate named the finding before the run ended
        [fid] = [r.id for r in db.open_findings()]
        db.record_action("daemon", "terminate", "PID 7100", "ok", {}, T0 + 1, finding_id=fid)
    # It ended within the settle; the exit event went to the old process only.
    first.update([], [], T0 + 2, exits={7100: 0})
    assert [r.last_alert_at for r in db.open_findings()] == [None]  # held back, open
    second = Tracker(db, alerts, "h")  # the restart: a new process, no exit statuses
    for k in range(3):
        second.update([], [], T0 + 400 + 5 * k)  # past the window for a return
    rows = db.conn.execute(
        "SELECT d.event, f.kind FROM deliveries d JOIN findings f ON f.id = d.finding_id"
        " ORDER BY d.id"
    ).fetchall()
    assert db.open_findings() == []
    db.close()
    return [(e, k) for e, k in rows]


def test_a_restart_sends_nothing_the_last_process_held_back(tmp_path: Path) -> None:
    """Before (c551076): ``[("open", "rogue-job"), ("resolve", "rogue-job")]`` from the
    restarted tracker; after: nothing."""
    assert _sent(tmp_path, ours=False) == []


def test_a_run_our_terminate_stopped_still_gets_its_record(tmp_path: Path) -> None:
    """The open owed to a run this product stopped goes out also when its end is
    unknown (the record of what ran and was stopped)."""
    assert _sent(tmp_path, ours=True) == [("open", "rogue-job"), ("resolve", "rogue-job")]
