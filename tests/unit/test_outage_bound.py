"""The memory kept while the state database refuses writes is bounded
(:data:`~rogue_watchdog.daemon.unstored.MAX_FINDINGS`, ``MAX_RUNS``): the least useful
entries go first, and what goes is counted and said, once in the log and in
``status``. Before, it grew by about 1.2 KB per run for as long as the outage lasted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from rogue_watchdog.config import parse_config
from rogue_watchdog.config.alerts import AlertSettings
from rogue_watchdog.daemon import unstored
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.status import build_status, render_status
from rogue_watchdog.daemon.tracking.pending import PendingJobs
from rogue_watchdog.daemon.unstored import MAX_FINDINGS, UnstoredFindings
from rogue_watchdog.model import Finding
from rogue_watchdog.records import RunRecord
from rogue_watchdog.state import StateDB

T0 = 2_000_000.0


def alerts(tmp_path: Path) -> AlertSettings:
    cfg = parse_config(
        f"alerts:\n  settle_s: 0\n  sinks: [{{type: log, path: '{tmp_path}/a.log'}}]\n", "t.yaml"
    )
    return cfg.alerts


def rogue(i: int) -> Finding:
    """The finding of run ``i``: a job of its own (its own signature)."""
    details: dict[str, Any] = {"root": [10_000 + i, i], "fingerprint": f"{i:016x}", "gpus": []}
    return Finding("rogue-job", "high", f"rogue training job PID {10_000 + i}", 10_000 + i, details)


def churn(u: UnstoredFindings, db: StateDB, a: AlertSettings, runs: int, alive: int) -> None:
    """``runs`` runs one after another, ``alive`` of them running at each tick (each
    paged at its first sighting, resolved when gone): the bound is checked every tick."""
    for t in range(runs):
        now = T0 + t
        found = [rogue(i) for i in range(max(0, t - alive + 1), t + 1)]
        u.track(db, [], found, now, signature=lambda _j: "", alerts=a, host="h", blind=False)
        assert len(u.open) + len(u.resolved) <= unstored.MAX_FINDINGS
        # The running runs, paged, are what is kept: resolved ones go first.
        assert {r.root_pid for r in u.open.values()} == {f.root_pid for f in found}


def test_the_bound_holds_over_many_runs_and_drops_resolved_first(tmp_path: Path) -> None:
    db = StateDB(str(tmp_path / "state"))
    db.conn.execute("PRAGMA query_only=ON")
    u, a = UnstoredFindings(), alerts(tmp_path)
    runs = MAX_FINDINGS + 300
    churn(u, db, a, runs, alive=3)
    assert len(u.open) + len(u.resolved) == MAX_FINDINGS
    # Every run was paged once (from the spool), none twice, none lost to the bound.
    opens = [d.finding_id for d in u.spool.pending("log") if d.event == "open"]
    assert len(opens) == len(set(opens)) == runs
    assert (u.dropped.findings, u.dropped.paged) == (runs - MAX_FINDINGS, 0)
    kept = sorted(r.root_pid for r in u.resolved if r.root_pid is not None)
    assert kept[0] == 10_000 + runs - MAX_FINDINGS  # the oldest resolved went
    db.conn.execute("PRAGMA query_only=OFF")  # storage returns
    u.store(db)
    # The ids the dropped ones were paged under are never given again.
    assert db.next_finding_id() == runs + 1
    db.close()


def test_open_paged_findings_go_last_and_are_counted_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unstored, "MAX_FINDINGS", 4)
    db = StateDB(str(tmp_path / "state"))
    db.conn.execute("PRAGMA query_only=ON")
    u, a = UnstoredFindings(), alerts(tmp_path)
    found = [rogue(i) for i in range(6)]  # six running at once, over a cap of four
    u.track(db, [], found, T0, signature=lambda _j: "", alerts=a, host="h", blind=False)
    assert len(u.open) == 4
    assert (u.dropped.findings, u.dropped.paged) == (2, 2)
    db.close()


def runs(jobs: PendingJobs, n: int) -> None:
    for i in range(n):
        run = RunRecord(
            "sig", 100 + i, i, "root", ["python", "t.py"], {}, "rogue", None, T0, T0 + i,
            0.0, [], None, None, None,
        )  # fmt: skip
        jobs.record_run(run, T0 + i)


def test_runs_and_rows_kept_in_memory_are_bounded_oldest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = PendingJobs()
    runs(jobs, 10)
    assert jobs.bound(4) == 6
    assert sorted(pid for (_s, pid, _t) in jobs.runs) == [106, 107, 108, 109]
    # The outage memory's tick keeps its runs under MAX_RUNS too, and counts.
    monkeypatch.setattr(unstored, "MAX_RUNS", 5)
    db = StateDB(str(tmp_path / "state"))
    db.conn.execute("PRAGMA query_only=ON")
    u = UnstoredFindings()
    runs(u.jobs, 12)
    u.track(db, [], [], T0 + 20, signature=lambda _j: "", alerts=alerts(tmp_path), host="h",
            blind=False)  # fmt: skip
    assert (len(u.jobs.runs), u.dropped.runs) == (5, 7)
    db.close()


def test_what_is_dropped_is_said_once_and_in_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unstored, "MAX_FINDINGS", 3)
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts:\n  settle_s: 0\n  sinks: [{{type: log, path: '{tmp_path}/a.log'}}]\n",
        "t.yaml",
    )
    d = Daemon(cfg, None)
    d.db.conn.execute("PRAGMA query_only=ON")
    u = d.unstored
    with capture_logs() as logs:
        for t in range(3):
            found = [rogue(i) for i in range(t * 3, t * 3 + 3)]
            u.track(d.db, [], found, T0 + t, signature=lambda _j: "", alerts=cfg.alerts,
                    host="h", blind=False)  # fmt: skip
            d._say_dropped()
    said = [e for e in logs if e["event"] == "unstored-memory-full"]
    assert len(said) == 1 and said[0]["findings"] == 3  # at the first drop, once
    assert u.dropped.findings == 6  # counted on
    doc = build_status(d)
    assert doc["outage_memory"]["dropped_findings"] == 6
    assert "outage memory full (cap 3 findings" in render_status(doc, width=200)
    d.db.close()
