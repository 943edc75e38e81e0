"""Issue 35, "one incident, one page": a job's return is paged once, as ``respawned``.

Before (base ed3f72c), a killed job that came back sent two high pages (``respawned`` at
once, then its run's own ``rogue-job`` after the settle), and a loop's run back after a
terminate three (``respawned``, ``remediation-failed``, the loop's ``rogue-job``). Now
the findings about the return are folded into its ``respawned`` finding
(docs/alerts.md, "One incident, one page"; ``tracking/incident.py``).
"""

from __future__ import annotations

import signal
from pathlib import Path

from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.model import Job
from tests.unit.test_pages import T0, _alerts, _classed, _daemon, _ghost, replay


def _sent(d: Daemon, since: float) -> list[tuple[str, str, str]]:
    """``(event, kind, severity)`` of every open or remind spooled at or after ``since``."""
    rows = d.db.conn.execute(
        "SELECT d.event, f.kind, f.severity FROM deliveries d JOIN findings f"
        " ON f.id = d.finding_id WHERE d.event IN ('open', 'remind') AND d.created_at >= ?"
        " ORDER BY d.id",
        (since,),
    ).fetchall()
    return [(e, k, s) for e, k, s in rows]


def test_a_killed_cron_ghost_run_that_comes_back_is_one_page(tmp_path: Path) -> None:
    """A ghost's run killed by SIGTERM, back a minute later (ticked for 20 s, past the
    settle). Before: 2 high pages for the return (respawned at once, the run's rogue-job
    5 s later). After: respawned only; the run's rogue-job is recorded, open, named in
    the respawned finding, and resolves with it."""
    d, _gone = _ghost(tmp_path, [signal.SIGTERM, 0])
    assert _sent(d, T0 + 60) == [("open", "respawned", "high")]  # was + rogue-job high
    (back,) = d.db.conn.execute(
        "SELECT id FROM findings WHERE kind = 'rogue-job' AND root_pid = 6001"
    ).fetchall()
    (resp,) = [r for r in map(d.db.finding, range(1, 10)) if r and r.kind == "respawned"]
    assert resp.details["folded"] == [{"id": back[0], "kind": "rogue-job", "severity": "high"}]
    assert f"paged as part of this return: rogue-job F{back[0]}" in resp.message
    # Its run ended by itself: the run's finding waits for the job to come back, and the
    # respawned finding stays open with it; both resolve together, no alert but one.
    d.tracker.update([], [], T0 + 60 + 25 + 301)
    assert not d.db.open_findings()
    events = _alerts(d, "respawned")
    assert [e for e, _f, _m in events] == ["open", "resolve"]
    assert [e for e, _f, _m in _alerts(d, "rogue-job") if _f == back[0]] == []


def test_a_loops_run_back_after_a_terminate_is_one_page(tmp_path: Path) -> None:
    """Simulator steps: a loop's run terminated (terminate mode, its loop not disabled),
    then observe: the loop's next runs come back. Before: 3 pages for the one return
    (respawned high, remediation-failed critical, the loop's rogue-job high). After:
    respawned only, at the loudest of them (critical)."""
    steps = "\n".join(
        [
            "state.reload(mode='terminate', cap=1, auto=False)",
            "state.probe_loop(gpu=True)",
            "state.tick(5.0)",
            "state.reload(mode='observe', cap=1)",
            *["state.probe_loop(gpu=True)\nstate.tick(5.0)"] * 3,
        ]
    )
    rows = replay(tmp_path, steps)
    # The first run's own rogue-job (before the terminate), then the return.
    assert rows == [["rogue-job", 0, "open"], ["respawned", 0, "open"]]


def _job(pid: int, start: int, script: str = "/home/u/probe.py") -> Job:
    job = _classed("training", pid, start)
    return job if script == "/home/u/probe.py" else _with_cmd(job, script)


def _with_cmd(job: Job, script: str) -> Job:
    import dataclasses

    return dataclasses.replace(job, cmdline=("python3", script))


def test_another_job_still_pages_while_a_return_is_open(tmp_path: Path) -> None:
    """Keep: while the ghost's respawned finding is open, another job (another
    signature) pages on its own. (Both after the settle, at the same tick: the return's
    page waits for it as a job's first page does, issue 33 fresh user J; before, the
    respawned went first, at the return.)"""
    from rogue_watchdog.policy.findings import job_findings

    d, _gone = _ghost(tmp_path, [signal.SIGTERM])
    ghost = _job(6100, 400)
    other = _job(6200, 500, "/srv/other/train_main.py")
    for k in range(3):
        jobs = [ghost, other]
        d.tracker.update(jobs, job_findings(jobs), T0 + 60 + 5 * k, exits={6000: signal.SIGTERM})
    assert _sent(d, T0 + 60) == [("open", "rogue-job", "high"), ("open", "respawned", "high")]
    (page,) = [r for r in d.db.open_findings() if r.kind == "rogue-job" and r.root_pid == 6200]
    assert page.last_alert_at is not None


def test_a_return_after_the_respawned_finding_resolved_pages_again(tmp_path: Path) -> None:
    """Keep: a run killed, back (one page), killed again: its respawned finding resolves
    with the run's; the next return is a new incident, paged again (once)."""
    d, _gone = _ghost(tmp_path, [signal.SIGTERM, signal.SIGTERM, 0])
    assert _sent(d, T0 + 60) == [
        ("open", "respawned", "high"),
        ("open", "respawned", "high"),
    ]  # was respawned, rogue-job, respawned, rogue-job
    ids = [fid for e, fid, _m in _alerts(d, "respawned") if e == "open"]
    assert len(set(ids)) == 2


def test_learning_and_info_fold_too(tmp_path: Path) -> None:
    """Nothing louder than the page: a learning return (info) folds its info rogue-job;
    the respawned finding stays info."""
    from rogue_watchdog.daemon.loop import learned
    from rogue_watchdog.policy.findings import job_findings

    d = _daemon(tmp_path)
    first, back = _job(6300, 600), _job(6301, 601)
    d.tracker.update([first], [learned(f) for f in job_findings([first])], T0, learning=True)
    d.tracker.update([], [], T0 + 5, exits={6300: signal.SIGKILL}, learning=True)
    for k in range(3):
        fs = [learned(f) for f in job_findings([back])]
        d.tracker.update([back], fs, T0 + 60 + 5 * k, learning=True)
    assert _sent(d, T0 + 60) == [("open", "respawned", "info")]


def test_a_remediation_failed_of_the_return_makes_its_one_page_critical(tmp_path: Path) -> None:
    """The one page is never quieter than its loudest part: a return whose terminate did
    not hold pages respawned at critical, once; the remediation-failed is named in it.
    Stored or from memory (a storage outage), the same."""
    from rogue_watchdog.daemon.unstored import UnstoredFindings
    from rogue_watchdog.model import Finding
    from rogue_watchdog.policy.findings import job_findings
    from rogue_watchdog.policy.signature import job_signature

    def failed(job: Job) -> Finding:
        sig = job_signature(job.user, job.cmdline, job.origin)
        details = {"fingerprint": sig, "signature": sig, "actions": [1]}
        return Finding("remediation-failed", "critical", "failed", job.root_pid, details)

    for stored in (True, False):
        d = _daemon(tmp_path / str(stored))
        first, back = _job(6400, 640), _job(6401, 641)
        d.tracker.update([first], job_findings([first]), T0)
        d.tracker.update([], [], T0 + 5, exits={6400: signal.SIGTERM})
        fs = [*job_findings([back]), failed(back)]
        if stored:
            for k in range(3):
                d.tracker.update([back], fs, T0 + 60 + 5 * k)
            assert _sent(d, T0 + 60) == [("open", "respawned", "critical")]  # was 3 pages
            (resp,) = [r for r in d.db.open_findings() if r.kind == "respawned"]
            kinds = sorted(f["kind"] for f in resp.details["folded"])
            assert kinds == ["remediation-failed", "rogue-job"]
        else:
            u = UnstoredFindings()
            u.read(d.db)
            # Held back by the settle at the return (issue 33, fresh user J), sent after.
            for now, want in ((T0 + 60, []), (T0 + 65, [("respawned", "critical")])):
                out = u.track(
                    d.db, [back], fs, now, alerts=d.tracker.alerts, host="h", blind=False,
                    signature=lambda j: job_signature(j.user, j.cmdline, j.origin),
                    exits=d.tracker.exits,
                )  # fmt: skip
                assert [(r.kind, r.severity) for r in out.opened] == want


def test_a_loop_folded_into_a_return_moves_to_the_next_return(tmp_path: Path) -> None:
    """A ghost killed and back (paged), its run ending by itself and coming back (its
    loop, folded into that return), then a run killed again and back: a new incident,
    paged once more; the first respawned resolves and the loop's finding is folded into
    the new one (one open respawned, never two)."""
    d, _gone = _ghost(tmp_path, [signal.SIGTERM, 0, signal.SIGTERM, 0])
    assert _sent(d, T0 + 60) == [("open", "respawned", "high"), ("open", "respawned", "high")]
    open_now = d.db.open_findings()
    (resp,) = [r for r in open_now if r.kind == "respawned"]
    (loop,) = [r for r in open_now if r.kind == "rogue-job"]
    assert loop.fingerprint.startswith("rogue-job:periodic:") and loop.last_alert_at is None
    assert resp.details["folded"] == [{"id": loop.id, "kind": "rogue-job", "severity": "high"}]


def test_in_memory_a_return_and_its_folded_run_resolve_together(tmp_path: Path) -> None:
    """A storage outage: the return's respawned is paged from memory, its run's rogue-job
    folded into it; the run ends by itself (its finding waits for the job), and the
    respawned stays open with it; both resolve together when the window ends."""
    from rogue_watchdog.daemon.unstored import UnstoredFindings
    from rogue_watchdog.policy.findings import job_findings
    from rogue_watchdog.policy.signature import job_signature

    d = _daemon(tmp_path)
    first, back = _job(6500, 650), _job(6501, 651)
    d.tracker.update([first], job_findings([first]), T0)
    d.tracker.update([], [], T0 + 5, exits={6500: signal.SIGTERM})
    u = UnstoredFindings()

    def track(jobs: list[Job], now: float, exits: dict[int, int]) -> tuple[list[str], list[str]]:
        out = u.track(
            d.db, jobs, job_findings(jobs), now, alerts=d.tracker.alerts, host="h",
            blind=False, signature=lambda j: job_signature(j.user, j.cmdline, j.origin),
            exits=exits,
        )  # fmt: skip
        return [r.kind for r in out.opened], [r.kind for r in out.resolved]

    # Its page waits for the settle (issue 33, fresh user J: before, at the return).
    assert track([back], T0 + 60, {}) == ([], [])
    assert track([back], T0 + 70, {}) == (["respawned"], [])  # past the settle: folded
    assert track([], T0 + 80, {6501: 0}) == ([], [])  # ended by itself: both wait
    assert sorted(r.kind for r in u.status_records()) == ["respawned", "rogue-job"]
    opened, resolved = track([], T0 + 80 + 301, {})
    assert (opened, sorted(resolved)) == ([], ["respawned", "rogue-job"])


def test_a_sink_that_takes_rogue_job_but_not_respawned_still_gets_the_run(
    tmp_path: Path,
) -> None:
    """Never quieter on a sink: with a sink whose ``kinds`` lets ``rogue-job`` through but
    keeps ``respawned`` out, the return's rogue-job is not folded (that sink would get no
    page at all): it pages as before, there and on every sink that takes it."""
    from rogue_watchdog.config.alerts import AlertSettings, SinkSettings
    from rogue_watchdog.daemon.tracker import Tracker
    from rogue_watchdog.policy.findings import job_findings
    from rogue_watchdog.state import StateDB

    db = StateDB(str(tmp_path / "state"))
    sinks = (
        SinkSettings(name="jobs", type="log", path=str(tmp_path / "a.log"), kinds=("rogue-job",)),
        SinkSettings(name="all", type="log", path=str(tmp_path / "b.log")),
    )
    tracker = Tracker(db, AlertSettings(sinks=sinks), "h")
    first, back = _job(6600, 660), _job(6601, 661)
    tracker.update([first], job_findings([first]), T0)
    tracker.update([], [], T0 + 5, exits={6600: signal.SIGTERM})
    for k in range(3):
        tracker.update([back], job_findings([back]), T0 + 60 + 5 * k)
    rows = db.conn.execute(
        "SELECT d.sink, f.kind FROM deliveries d JOIN findings f ON f.id = d.finding_id"
        " WHERE d.event = 'open' AND d.created_at >= ? ORDER BY d.id",
        (T0 + 60,),
    ).fetchall()
    # The respawned after the run's rogue-job: both at the settle (issue 33, fresh
    # user J; before, the respawned went first, at the return).
    assert [(s, k) for s, k in rows] == [
        ("jobs", "rogue-job"),
        ("all", "rogue-job"),
        ("all", "respawned"),
    ]
    db.close()
