"""Findings kept in memory while the state database refuses writes follow the page-once
rules of stored ones (issue 35 on top of issue 32): the settle (``alerts.settle_s``),
the open owed by a finding held back by it, and the 5-minute return window of a run
that ended by itself. Each rule's case is driven through
:meth:`~rogue_watchdog.daemon.unstored.UnstoredFindings.track` directly, with the findings a
scan would give (no processes, no NVML)."""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.config import parse_config
from rogue_watchdog.config.alerts import AlertSettings
from rogue_watchdog.daemon.unstored import UnstoredFindings
from rogue_watchdog.model import Finding
from rogue_watchdog.state import StateDB

SIG = "0123456789abcdef"
T0 = 2_000_000.0


@pytest.fixture
def db(tmp_path: Path) -> StateDB:
    return StateDB(str(tmp_path / "state"))


def alerts(tmp_path: Path, settle_s: float = 5.0) -> AlertSettings:
    cfg = parse_config(
        f"alerts:\n  settle_s: {settle_s}\n  sinks: [{{type: log, path: '{tmp_path}/a.log'}}]\n",
        "t.yaml",
    )
    return cfg.alerts


def rogue(pid: int, gpu: int | None) -> Finding:
    """A rogue-job finding as the scan makes it: on GPU ``gpu`` or none yet."""
    # The fold key of a job's finding is its signature (``fingerprint``: as the scan's
    # job would give it).
    details: dict[str, Any] = {"root": [pid, pid * 10], "fingerprint": SIG, "gpus": []}
    if gpu is not None:
        details["gpus"] = [{"index": gpu, "uuid": f"GPU-{gpu}"}]
    return Finding("rogue-job", "high", f"rogue training job PID {pid}", pid, details)


def track(
    u: UnstoredFindings,
    db: StateDB,
    settings: AlertSettings,
    now: float,
    *found: Finding,
    exits: dict[int, int] | None = None,
) -> tuple[list[int], list[int]]:
    """One tick in memory: the ids opened and resolved."""
    out = u.track(
        db, [], list(found), now, signature=lambda _j: SIG, alerts=settings, host="h",
        blind=False, exits=exits or {},
    )  # fmt: skip
    return [r.id for r in out.opened], [r.id for r in out.resolved]


def events(u: UnstoredFindings) -> list[tuple[str, int]]:
    return [(d.event, d.finding_id) for d in u.spool.pending("log")]


def test_the_open_waits_for_the_picture(db: StateDB, tmp_path: Path) -> None:
    """The job is listed on GPU 0 one tick after it is first seen: one open, naming the
    GPU. Before: the open went out at the first sighting, without the GPU (the stored
    finding's settle: issue 35, case 4)."""
    u, a = UnstoredFindings(), alerts(tmp_path)
    assert track(u, db, a, T0, rogue(7, None)) == ([], [])
    assert u.settle_due == T0 + 5.0  # the loop ticks then at the latest
    assert track(u, db, a, T0 + 1, rogue(7, 0)) == ([], [])  # first look on the GPU
    assert track(u, db, a, T0 + 2, rogue(7, 0)) == ([1], [])  # the same twice: complete
    assert events(u) == [("open", 1)]
    assert u.open[f"rogue-job:{SIG}"].alerted_routing["gpu"] == "0"


def test_the_settle_is_bounded(db: StateDB, tmp_path: Path) -> None:
    u, a = UnstoredFindings(), alerts(tmp_path)
    track(u, db, a, T0, rogue(7, None))
    assert track(u, db, a, T0 + 5, rogue(7, None)) == ([1], [])  # settle_s over: as it is


def test_a_held_back_open_is_owed_unless_the_job_ended_by_itself(
    db: StateDB, tmp_path: Path
) -> None:
    """Stopped by this product's own action within the settle: the open it owes, then
    the resolve. Killed by someone else (a test harness's teardown): nothing, as the
    tracker's rule (issue 33; before, in memory: ``([1], [1])``, an open and a resolve).
    Ended by itself within the settle (a probe): nothing (and no return window: it was
    never paged)."""
    u, a = UnstoredFindings(), alerts(tmp_path)
    track(u, db, a, T0, rogue(7, None))
    assert track(u, db, a, T0 + 1, exits={7: signal.SIGKILL}) == ([], [1])
    assert events(u) == []

    u = UnstoredFindings()
    track(u, db, a, T0, rogue(6, None))
    [fid] = [r.id for r in u.open.values()]
    db.record_action("daemon", "terminate", "PID 6", "ok", {}, T0 + 0.5, finding_id=fid)
    assert track(u, db, a, T0 + 1, exits={6: signal.SIGTERM}) == ([fid], [fid])
    assert events(u) == [("open", fid), ("resolve", fid)]

    u = UnstoredFindings()
    track(u, db, a, T0, rogue(8, None))
    track(u, db, a, T0 + 1, exits={8: 0})
    # Held for the window like a paged one (it may come back as a loop) ...
    assert track(u, db, a, T0 + 302) == ([], [1])  # ... and resolved unpaged after it
    assert events(u) == []


def test_a_run_back_within_the_return_window_continues_its_finding(
    db: StateDB, tmp_path: Path
) -> None:
    """A loop's run ends by itself (exit status 0) and its next run comes 5 s later:
    the same finding, one open. Before: resolved at once, then a second finding and a
    second page per run."""
    u, a = UnstoredFindings(), alerts(tmp_path, settle_s=0)
    assert track(u, db, a, T0, rogue(7, 0)) == ([1], [])
    assert track(u, db, a, T0 + 5, exits={7: 0}) == ([], [])  # gone, by itself: held
    assert track(u, db, a, T0 + 10, rogue(9, 0)) == ([], [])  # back: the same finding
    assert u.open[f"rogue-job:{SIG}"].id == 1
    assert u.open[f"rogue-job:{SIG}"].root_pid == 9
    assert events(u) == [("open", 1)]


def test_no_return_within_the_window_resolves_saying_so(db: StateDB, tmp_path: Path) -> None:
    u, a = UnstoredFindings(), alerts(tmp_path, settle_s=0)
    track(u, db, a, T0, rogue(7, 0))
    track(u, db, a, T0 + 5, exits={7: 0})
    assert track(u, db, a, T0 + 300) == ([], [])  # 295 s gone: within the window
    assert track(u, db, a, T0 + 306) == ([], [1])
    assert "ended by itself at" in u.resolved[0].message
    assert u.resolved[0].message.endswith("not back within 5m")
    assert events(u) == [("open", 1), ("resolve", 1)]


def test_a_killed_run_back_is_paged_again(db: StateDB, tmp_path: Path) -> None:
    """Stopped by a signal: no window; its return is a finding of its own, paged."""
    u, a = UnstoredFindings(), alerts(tmp_path, settle_s=0)
    track(u, db, a, T0, rogue(7, 0))
    assert track(u, db, a, T0 + 5, exits={7: signal.SIGTERM}) == ([], [1])
    assert track(u, db, a, T0 + 10, rogue(9, 0)) == ([2], [])
    # Back in the very tick its run was killed: the same.
    assert track(u, db, a, T0 + 15, rogue(11, 0), exits={9: signal.SIGKILL}) == ([3], [2])
    assert events(u) == [("open", 1), ("resolve", 1), ("open", 2), ("resolve", 2), ("open", 3)]


def test_a_killed_run_back_during_an_outage_is_paged_as_respawned_once(
    db: StateDB, tmp_path: Path
) -> None:
    """A rogue run recorded, then killed (SIGTERM); the state database refuses writes
    and the job is back: before, the run back was paged from memory as a new
    ``rogue-job`` only, and its ``respawned`` was opened and paged when storage came
    back, 10 s later. Now the return is ``respawned`` at once, from memory, as a
    stored tick would page it, and once storage is back the tracker takes the stored
    one for the respawn it records: no second page."""
    from rogue_watchdog.daemon.tracker import Tracker
    from rogue_watchdog.policy.findings import job_findings
    from rogue_watchdog.policy.signature import job_signature
    from tests.unit.test_pages import _classed

    a = alerts(tmp_path, settle_s=0)
    tracker = Tracker(db, a, "h")
    first = _classed("training", 7100, 710)
    tracker.update([first], job_findings([first]), T0)
    tracker.update([], [], T0 + 5, exits={7100: signal.SIGTERM})  # stopped, seen gone
    back = _classed("training", 7200, 720)
    u = UnstoredFindings()
    u.read(db)
    out = u.track(
        db, [back], job_findings([back]), T0 + 10, alerts=a, host="h", blind=False,
        signature=lambda j: job_signature(j.user, j.cmdline, j.origin), exits=tracker.exits,
    )  # fmt: skip
    # Was [rogue-job]; [respawned, rogue-job] at ed3f72c; the run's rogue-job is folded
    # into its return's respawned page now (one incident, one page), in memory too.
    assert sorted(r.kind for r in out.opened) == ["respawned"]
    assert sorted(r.kind for r in u.status_records()) == ["respawned", "rogue-job"]
    u.store(db)
    tracker.update([back], job_findings([back]), T0 + 20)
    later = [
        kind
        for (kind,) in db.conn.execute(
            "SELECT f.kind FROM deliveries d JOIN findings f ON f.id = d.finding_id"
            " WHERE d.event IN ('open', 'remind') AND d.created_at > ?",
            (T0 + 5,),
        )
    ]
    assert later == []  # was ["respawned"]: paged when storage came back


def test_a_gpu_shown_during_an_outage_after_the_page_is_no_page_once_stored(
    db: StateDB, tmp_path: Path
) -> None:
    """NVML blind (no process lists) and the database refusing writes: a rogue run is
    paged from memory with no GPU; NVML shows it on GPU 0 while writes are still
    refused; storage back. The alert keeps the labels it was paged with (its GPUs are
    settled by its first page), so the tracker sends no relabelled ``remind``."""
    from rogue_watchdog.daemon.tracker import Tracker
    from rogue_watchdog.model import GpuHeld
    from rogue_watchdog.policy.findings import job_findings
    from rogue_watchdog.policy.signature import job_signature
    from tests.unit.test_pages import _classed

    a = alerts(tmp_path)
    u = UnstoredFindings()
    u.read(db)
    job = _classed("training", 7300, 730)
    held = dataclasses.replace(job, gpu_uuids=["GPU-0"], gpus=[GpuHeld("GPU-0", 0, 4 << 30)])
    # Blind for the whole settle (5 s: without NVML's lists too, issue 33), so the page
    # goes out with no GPU; then NVML shows GPU 0.
    for k, (j, lists) in enumerate([(job, False), (job, False), (held, True), (held, True)]):
        u.track(
            db, [j], job_findings([j]), T0 + 5 * k, alerts=a, host="h", blind=not lists,
            signature=lambda x: job_signature(x.user, x.cmdline, x.origin), gpu_lists=lists,
        )  # fmt: skip
    assert events(u) == [("open", 1)]
    u.store(db)
    tracker = Tracker(db, a, "h")
    tracker.update([held], job_findings([held]), T0 + 20)
    sent = [e for (e,) in db.conn.execute("SELECT event FROM deliveries")]
    assert sent == []  # the open went out from memory; no remind now
    (f,) = db.open_findings()
    assert (f.details["gpus"], f.details["gpu_indexes"]) == ([], [0])
