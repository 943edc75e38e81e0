"""The tracker's phases (watchdog/daemon/tracking/) as plain functions: values in, a
finished value out, no database."""

from __future__ import annotations

from typing import Any

import pytest

from rogue_watchdog.config.alerts import AlertSettings, SinkSettings
from rogue_watchdog.daemon.tracking.fold import group, job_root, same_job
from rogue_watchdog.daemon.tracking.lifecycle import Open, Resolve, Seen, decide
from rogue_watchdog.daemon.tracking.reminders import CHANGE_MIN_S, Due, alert_due
from rogue_watchdog.daemon.tracking.spool import deliveries
from rogue_watchdog.model import Finding
from rogue_watchdog.state import FindingRecord

T0 = 1_800_000_000.0


def _rec(fid: int, fp: str, root: list[int] | None, **kw: Any) -> FindingRecord:
    fields: dict[str, Any] = {
        "id": fid, "fingerprint": fp, "kind": fp.partition(":")[0], "severity": "high",
        "message": "m", "root_pid": root[0] if root else None,
        "details": {"root": root} if root else {}, "opened_at": T0, "last_seen": T0,
        "seen_count": 1, "resolved_at": None, "last_alert_at": None,
    }  # fmt: skip
    fields.update(kw)
    return FindingRecord(**fields)


def _rogue(pid: int, start: int) -> Finding:
    return Finding("rogue-job", "high", f"rogue {pid}", pid, {"root": [pid, start]})


def test_decide_gives_each_finding_one_step_in_order() -> None:
    sigs = {10: "sigA", 20: "sigB", 31: "sigC"}
    groups = group([_rogue(10, 5), _rogue(20, 7), _rogue(31, 9)], sigs)
    open_records = [
        _rec(1, "rogue-job:sigA", [10, 5]),  # seen again
        _rec(2, "rogue-job:sigB", [20, 6]),  # PID 20 reused: another job
        _rec(3, "rogue-job:sigD", [40, 1]),  # gone
        _rec(4, "rogue-job:sigE", [50, 1]),  # held: a source is blind
        _rec(5, "respawned:x", [60, 1], details={"root": [60, 1], "signature": "sigC"}),
    ]
    steps = decide(groups, open_records, present={"sigA", "sigB", "sigC"}, held={"sigE"})
    shape = [
        (type(s).__name__, s.record.id if isinstance(s, Seen | Resolve) else None,
         s.sighting.finding.root_pid if isinstance(s, Open | Seen) else None)
        for s in steps
    ]  # fmt: skip
    assert shape == [
        ("Seen", 1, 10),
        ("Resolve", 2, None),
        ("Open", None, 20),
        ("Open", None, 31),
        ("Resolve", 3, None),
    ]


def test_alert_due_debounces_reminds_and_relabels() -> None:
    s = AlertSettings(reminder_after_s=3600.0, min_lifetime_s=30.0)
    f = _rogue(10, 5)
    labels = {"alertname": "rogue-job"}
    assert alert_due(None, f, 1, [10], labels, T0, s) is None  # debounced
    assert alert_due(None, f, 1, [10], labels, T0, AlertSettings()) == Due("open")
    new = _rec(1, "rogue-job:a", [10, 5])
    assert alert_due(new, f, 1, [10], labels, T0 + 29, s) is None
    assert alert_due(new, f, 1, [10], labels, T0 + 30, s) == Due("open")
    sent = _rec(1, "rogue-job:a", [10, 5], last_alert_at=T0, alerted_instances=1,
                alerted_pids=[10], alerted_routing=labels)  # fmt: skip
    assert alert_due(sent, f, 1, [10], labels, T0 + 3599, s) is None
    assert alert_due(sent, f, 1, [10], labels, T0 + 3600, s) == Due("remind")
    # A second instance: at most every CHANGE_MIN_S.
    assert alert_due(sent, f, 2, [10, 11], labels, T0 + CHANGE_MIN_S - 1, s) is None
    assert alert_due(sent, f, 2, [10, 11], labels, T0 + CHANGE_MIN_S, s) == Due(
        "remind", {"instances": 2, "was": 1, "gone_pids": []}
    )
    # What the alert is identified by changed: at once, also for info.
    info = Finding("rogue-job", "info", "m", 10, {"root": [10, 5]})
    gpu = {"alertname": "rogue-job", "gpu": "0"}
    assert alert_due(sent, info, 1, [10], gpu, T0 + 1, s) == Due("remind", {"labels_were": labels})
    assert alert_due(sent, info, 1, [10], labels, T0 + 7200, s) is None  # info: no reminder


def test_deliveries_go_to_the_sinks_that_accept_the_finding() -> None:
    sinks = [
        SinkSettings(name="all", type="log"),
        SinkSettings(name="critical", type="log", min_severity="critical"),
        SinkSettings(name="respawns", type="log", kinds=("respawned",)),
    ]
    rec = _rec(7, "rogue-job:a", [10, 5])
    out = deliveries("open", rec, "host", T0, sinks)
    assert [name for name, _ in out] == ["all"]
    assert out[0][1]["event"] == "open" and out[0][1]["finding"]["id"] == 7


def test_a_finding_goes_on_about_a_copy_it_named_once_its_run_ends() -> None:
    # Issue 35 (seed 64401): two runs of one at job's command, one finding naming both.
    # The run it named ends; the copy goes on: the same finding, not a resolve and a
    # second page. A run it never named, or a PID it named now reused, is another job.
    sigs = {11: "sigA", 14: "sigA", 99: "sigB"}
    both = group([_rogue(11, 5), _rogue(14, 6)], sigs)
    opened = decide(both, [], present={"sigA"}, held=set())
    assert isinstance(opened[0], Open)
    named = opened[0].sighting.finding.details
    assert (named["root"], named["instance_roots"]) == ([11, 5], [[11, 5], [14, 6]])
    rec = _rec(1, "rogue-job:sigA", [11, 5], details=named)

    later = decide(group([_rogue(14, 6)], sigs), [rec], present={"sigA"}, held=set())
    assert [(type(s).__name__, s.sighting.finding.details["root"]) for s in later] == [
        ("Seen", [14, 6])
    ]
    for other in ([_rogue(15, 8)], [_rogue(14, 7)]):  # a new run; PID 14 reused
        steps = decide(group(other, {15: "sigA", 14: "sigA"}), [rec], {"sigA"}, set())
        assert [type(s).__name__ for s in steps] == ["Resolve", "Open"]


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ([14, 6], (14, 6)),
        ([14, None], (14, None)),  # a copy recorded without its start (fold)
        ([14, 0], (14, 0)),
        ([-3, -1], (-3, -1)),  # not range-checked: names no process, matches none
        (None, None),
        ([], None),
        ([14], None),
        ([14, 6, 7], None),
        ((14, 6), None),  # JSON gives lists; a tuple is not what was recorded
        ("14 6", None),
        ({"14": 6}, None),
        ([None, 6], None),
        (["14", 6], None),
        ([14, "6"], None),  # BEFORE: fold read it as (14, None), a copy of any start
        ([14.0, 6], None),
        ([14, 6.5], None),
        ([True, 6], None),  # BEFORE: fold read a JSON true as PID 1
        ([14, False], None),  # BEFORE: fold read it as start 0
    ],
)
def test_job_root_reads_a_recorded_identity_or_nothing(value: object, read: object) -> None:
    assert job_root(value) == read


@pytest.mark.parametrize("named", [[[14, "6"]], [[True, 6]], 7, "[[14, 6]]"])
def test_a_malformed_instance_list_names_no_copy(named: object) -> None:
    # What an outage file or a hand-edited database may hold: no copy is claimed (the
    # run is another job's), and an int no longer stops the tick with a TypeError.
    # BEFORE: [14, "6"] named PID 14 at any start, [True, 6] named PID 1.
    rec = _rec(1, "rogue-job:sigA", [11, 5], details={"root": [11, 5], "instance_roots": named})
    assert same_job(rec, [_rogue(14, 6), _rogue(1, 6)]) is False
    assert same_job(rec, [_rogue(11, 5)]) is True
