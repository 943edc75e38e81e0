"""Issue 31, case 3 (advice that goes stale): an open finding's message is built from
what is known each tick, and a changed message is never a page by itself."""

from __future__ import annotations

from pathlib import Path

from rogue_watchdog.config.alerts import AlertSettings, SinkSettings
from rogue_watchdog.daemon.tracker import Tracker
from rogue_watchdog.daemon.tracking.reminders import alert_due
from rogue_watchdog.model import AtOrigin, Finding, Job
from rogue_watchdog.policy.findings import job_findings
from rogue_watchdog.policy.guard import ScanProtection, with_advice
from rogue_watchdog.state import FindingRecord, StateDB

TRAIN = ("/usr/bin/python3", "/srv/at/train.py")


def _job(pid: int, ticks: int, job: int, *queued: int) -> Job:
    origin = AtOrigin(
        (f"atd ran job {job}",), "atrm " + " ".join(map(str, queued)), job=job,
        queue="a", user="root", command=" ".join(TRAIN), file=f"/var/spool/cron/atjobs/={job}",
        pending_same_command=queued,
    )  # fmt: skip
    (j,) = with_advice(
        [Job(pid, [pid], "root", TRAIN, ticks, None, [], [], origin, "rogue")], ScanProtection()
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
        "scripts; the undo command it prints, "
        "with the action id, restores it), or by hand: atrm 8; to stop this run: "
        "rogue-watchdog terminate 913"
        # The return's own rogue-job is folded into its page (issue 35).
        f"; paged as part of this return: rogue-job F{resp.id + 1}"
    ), resp.message
    sent = _deliveries(db, rec.id)
    later = _job(913, 200, 7, 8, 9)  # it queued 9 meanwhile
    # Within the return's settle (its page waits for it: issue 33, fresh user J).
    tracker.update([later], job_findings([later]), 1073.0)
    resp2 = db.finding(resp.id)
    assert resp2 is not None
    assert resp2.message == resp.message.replace(
        "at job(s) 8 queued", "at job(s) 8, 9 queued"
    ).replace("atrm 8", "atrm 8 9"), resp2.message
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
    # Less the command that stopped the run (at: `atrm` leaves it), moot once it ended.
    head = rec.message.removesuffix("; to stop this run: rogue-watchdog terminate 812")
    assert head != rec.message and now.message.startswith(head)
    tail = now.message[len(head) :]
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


def test_a_loop_whose_source_was_disabled_between_runs_offers_no_disable() -> None:
    """Fresh-user hour (issue 33, 2026-12-06): F194, a cron loop's periodic finding (open
    between runs until the loop is quiet), still offered `disable-source F194` and the
    `sed` by hand after that line was disabled: nothing left to do. BEFORE (4456053): the
    refreshed message kept that advice; AFTER: it is gone and the disable is named."""
    from rogue_watchdog.daemon.alerts.alert import local_iso
    from rogue_watchdog.daemon.tracking.current import current_message
    from rogue_watchdog.records import ActionRecord

    advice = (
        "; to stop the source: rogue-watchdog disable-source --config /w/c.yaml F194 (backs up "
        "the crontab; the undo command it prints, with the action id, restores it), "
        "or by hand: sed -i '1s/^/# disabled by rogue-watchdog: /' /w/cron.d/other-ghost"
    )
    head = (
        "periodic: 2 runs about every 1m since 2026-12-06T06:57:01+00:00; latest run: rogue "
        "training job PID 812, user root, `/usr/bin/python3 /w/ghost/train_other.py`, from "
        "cron /w/cron.d/other-ghost:1 (* * * * *); restarts it: on schedule, its cron line "
        "(* * * * *)"
    )
    rec = FindingRecord(
        194, "rogue-job:periodic:abc", "rogue-job", "high", head + advice, None,
        {"root": [812, 100], "signature": "abc"}, 1000.0, 1000.0, 2, None, None,
    )  # fmt: skip
    disable = ActionRecord(
        7, 1090.0, "cli:root", "disable-source", "/w/cron.d/other-ghost:1", 194, "abc", False,
        "ok", {}, [{"op": "noop"}], None, "done", None, 1090.0,
    )  # fmt: skip
    assert current_message(rec, None, set(), [], {812: 0}, 1040.0) == (
        f"{head}{advice}; now: its run PID 812 exited with status 0 at {local_iso(1040.0)}; "
        "a command naming PID 812 has nothing left to stop"
    )  # before the disable: the advice stands
    assert current_message(rec, None, set(), [disable], {812: 0}, 1040.0) == (
        f"{head}; now: its run PID 812 exited with status 0 at {local_iso(1040.0)}; a "
        "command naming PID 812 has nothing left to stop; its source was disabled by "
        f"rogue-watchdog disable-source (action 7 at {local_iso(1090.0)}); undo with: "
        "``rogue-watchdog undo 7``"
    )
    undone = ActionRecord(**{**disable.__dict__, "undone_at": 1100.0})
    assert current_message(rec, None, set(), [undone], {}, None) == (
        f"{head}; now: its run PID 812 ended (how is not known); a command naming PID 812 "
        "has nothing left to stop; its source, disabled by action 7, was re-enabled by "
        f"rogue-watchdog undo at {local_iso(1100.0)}"
    )
    dry = ActionRecord(**{**disable.__dict__, "dry_run": True})
    assert "; to stop the source: " in str(current_message(rec, None, set(), [dry], {}, None))


def test_a_disabled_lines_run_once_gone_drops_its_terminate() -> None:
    """Issue 33 (fresh user E): a disabled line's finding names `terminate PID` as its next
    step; once that run ended the command would fail as printed, so it is dropped."""
    from rogue_watchdog.daemon.alerts.alert import local_iso
    from rogue_watchdog.daemon.tracking.current import current_message

    head = (
        "rogue training job PID 812, user root, `/usr/bin/python3 /w/ghost/train.py`, from "
        "cron /w/cron.d/ghost:1 (* * * * *), entry since disabled; its crontab entry was "
        "disabled"
    )
    stop = ": only the run is left; to stop it: rogue-watchdog terminate --config /w/c.yaml 812"
    rec = FindingRecord(
        9, "rogue-job:abc", "rogue-job", "high", head + stop, 812,
        {"root": [812, 100], "signature": "abc"}, 1000.0, 1000.0, 1, None, None,
    )  # fmt: skip
    assert current_message(rec, None, set(), [], {812: 0}, 1040.0) == (
        f"{head}; now: its run PID 812 exited with status 0 at {local_iso(1040.0)}; "
        "a command naming PID 812 has nothing left to stop"
    )


def test_a_loops_finding_between_runs_offers_no_command_on_the_ended_run() -> None:
    """Fresh user J (issue 33): 40 s after `terminate` stopped the ghost's run, `status`
    still said `…only the run is left; to stop it: rogue-watchdog terminate --config …
    7237` for the loop's finding (pasted: exit 2, "not running"). Before: the message
    kept (None); after: the run's command gone, the rest kept."""
    from rogue_watchdog.daemon.tracking.current import current_message
    from rogue_watchdog.state import FindingRecord

    head = (
        "periodic: 2 runs about every 1m since 2026-12-06T20:16:01+00:00; latest run: rogue "
        "training job PID 7237, user root, `python3 /t/ghost.py`, from cron /t/cron.d/g:1 "
        "(* * * * *), entry since disabled; restarts it: on schedule, its cron line"
    )
    rec = FindingRecord(
        id=2, fingerprint="rogue-job:periodic:90e8", kind="rogue-job", severity="high",
        message=f"{head}; its crontab entry was disabled: only the run is left; to stop it: "
        "rogue-watchdog terminate --config /t/config.yaml 7237",
        root_pid=None, details={"signature": "90e8", "periodic": {"runs": 2, "pid": 7237}},
        opened_at=0.0, last_seen=0.0, seen_count=3, resolved_at=None, last_alert_at=1.0,
    )  # fmt: skip
    assert current_message(rec, None, set(), [], {}, None) == (
        f"{head}; its crontab entry was disabled: the run ended"
    )
