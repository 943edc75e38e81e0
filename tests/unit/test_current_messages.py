"""Issue 31, case 3 (advice that goes stale): an open finding's message is built from
what is known each tick, and a changed message is never a page by itself."""

from __future__ import annotations

from pathlib import Path

from rogue_watchdog.config.alerts import AlertSettings, SinkSettings
from rogue_watchdog.daemon.tracker import Tracker
from rogue_watchdog.daemon.tracking.reminders import alert_due
from rogue_watchdog.model import AtOrigin, Finding, Job
from rogue_watchdog.policy.findings import job_findings
from rogue_watchdog.policy.guard import Protection, with_advice
from rogue_watchdog.state import FindingRecord, StateDB

TRAIN = ("/usr/bin/python3", "/srv/at/train.py")


def _job(pid: int, ticks: int, job: int, *queued: int) -> Job:
    origin = AtOrigin(
        (f"atd ran job {job}",), "atrm " + " ".join(map(str, (job, *queued))), job=job,
        queue="a", user="root", command=" ".join(TRAIN), file=f"/var/spool/cron/atjobs/={job}",
        pending_same_command=queued,
    )  # fmt: skip
    (j,) = with_advice(
        [Job(pid, [pid], "root", TRAIN, ticks, None, [], [], origin, "rogue")], Protection()
    )
    return j


def _tracker(tmp_path: Path) -> tuple[StateDB, Tracker]:
    db = StateDB(str(tmp_path / "state"))
    sink = SinkSettings(name="log", type="log")
    return db, Tracker(db, AlertSettings(sinks=(sink,)), "host")


def _deliveries(db: StateDB, finding_id: int) -> int:
    return sum(d.finding_id == finding_id for d in db.due_deliveries(1e12, limit=1000))


def test_a_respawned_finding_follows_the_queue_of_its_ghost_without_a_page(
    tmp_path: Path,
) -> None:
    # BEFORE: the respawned finding kept the advice of its open ("atrm 7 8") while 8
    # ran and 9 was queued; AFTER: each tick builds it from the ghost as scanned now.
    db, tracker = _tracker(tmp_path)
    first = _job(812, 100, 6, 7)
    tracker.update([first], job_findings([first]), 1000.0)
    tracker.update([], [], 1010.0, exits={812: 9})  # killed
    back = _job(913, 200, 7, 8)
    tracker.update([back], job_findings([back]), 1070.0)
    [rec] = [f for f in db.open_findings() if f.kind == "respawned"]
    resp = rec
    assert resp.message.endswith(
        "at job(s) 8 queued with the same commands (it re-queues itself); to stop the "
        f"source: rogue-watchdog disable-source F{resp.id} (backs up the queued jobs' "
        "scripts; `rogue-watchdog undo` restores it), or by hand: atrm 7 8"
    ), resp.message
    sent = _deliveries(db, rec.id)
    later = _job(913, 200, 7, 8, 9)  # it queued 9 meanwhile
    tracker.update([later], job_findings([later]), 1080.0)
    resp2 = db.finding(resp.id)
    assert resp2 is not None
    assert resp2.message == resp.message.replace(
        "at job(s) 8 queued", "at job(s) 8, 9 queued"
    ).replace("atrm 7 8", "atrm 7 8 9"), resp2.message
    assert _deliveries(db, rec.id) == sent  # a changed message is no page
    db.close()


def test_a_finding_whose_run_ended_says_how_and_when_without_a_page(tmp_path: Path) -> None:
    # BEFORE: a finding waiting for its job to come back still offered
    # "terminate 812" for a run that had exited; AFTER: it says the run ended, how.
    db, tracker = _tracker(tmp_path)
    first = _job(812, 100, 6, 7)
    tracker.update([first], job_findings([first]), 1000.0)
    [rec] = db.open_findings()
    sent = _deliveries(db, rec.id)
    tracker.update([], [], 1010.0, exits={812: 0})  # ended by itself: waits for a return
    now = db.finding(rec.id)
    assert now is not None and now.resolved_at is None
    assert now.message.startswith(rec.message)
    tail = now.message[len(rec.message) :]
    assert tail.startswith("; now: its run PID 812 exited with status 0 at "), tail
    assert tail.endswith("; a command naming PID 812 has nothing left to stop"), tail
    tracker.update([], [], 1020.0, exits={})
    again = db.finding(rec.id)
    assert again is not None and again.message == now.message  # replaced, never stacked
    assert _deliveries(db, rec.id) == sent
    db.close()


def test_a_changed_message_alone_is_not_due_an_alert() -> None:
    labels = {"alertname": "rogue-job"}
    sent = FindingRecord(
        1, "rogue-job:a", "rogue-job", "high", "atrm 6 7", 10, {"root": [10, 5]}, 0.0, 0.0,
        1, None, 0.0, 1, 1, [10], labels,
    )  # fmt: skip
    f = Finding("rogue-job", "high", "atrm 6 7 8 (changed)", 10, {"root": [10, 5]})
    assert alert_due(sent, f, 1, [10], labels, 59.0, AlertSettings()) is None
