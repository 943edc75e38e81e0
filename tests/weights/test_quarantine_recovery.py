"""A quarantine interrupted between its rename and its record (issue 32, case 4).

Before: killed there (3 of 3 tries), the model lay in quarantine with no finding, no
alert, no action and no undo. Now the action's row and the rename are written before
the move; the next start finds the row unfinished, sees the file at its quarantined
name, and gives it its ``poisoned-weights`` finding (one alert), an
``action-interrupted`` finding (one alert), the action's outcome and its undo.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rogue_watchdog import faults
from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.runner import InlineRunner
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.state import StateDB
from rogue_watchdog.weights.shipwatch import build_ship_gate_sources
from rogue_watchdog.weights.verifyworker import VerifyWorker
from tests.conftest import run_cli

from .test_shipwatch import T0, nan_model


class Killed(BaseException):
    """The daemon died here."""


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    faults.set_hook(None)
    monkeypatch.undo()
    time.tzset()


def start(tmp: Path) -> tuple[Daemon, VerifyWorker]:
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp}/state'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp}/alerts.log'}}]}}\n"
        f"ship_gates:\n  - {{name: prod, deploy_dir: '{tmp}/deploy', quarantine: true}}\n",
        "t.yaml",
    )
    db = StateDB(cfg.daemon.state_dir)
    worker = VerifyWorker()
    gates = build_ship_gate_sources(cfg, db, worker)
    for g in gates:
        g.wait_s = 60.0
        g.settle_s = 0.0  # ticks seconds apart in fake time: two polls settle a file
    enf = Enforcer(cfg, db, runner=InlineRunner())
    d = Daemon(cfg, None, db=db, sources=[*gates, enf], enforcers=[enf], workers=[worker])
    return d, worker


def alerts(tmp: Path, kind: str) -> list[str]:
    """The alert events spooled for the log sink about findings of ``kind``, in order."""
    db = StateDB(tmp / "state")
    try:
        rows = db.conn.execute(
            "SELECT d.event FROM deliveries d JOIN findings f ON f.id = d.finding_id"
            " WHERE f.kind = ? ORDER BY d.id",
            (kind,),
        )
        return [str(r[0]) for r in rows]
    finally:
        db.close()


@pytest.mark.parametrize("point", ["quarantine:renamed", "quarantine:intent", "quarantine:begun"])
def test_a_quarantine_killed_mid_way_gets_its_finding_alert_and_undo(
    tmp_path: Path, point: str
) -> None:
    (tmp_path / "deploy").mkdir()
    model = nan_model(tmp_path / "deploy" / "model.safetensors")
    d, worker = start(tmp_path)
    d.tick(T0)  # seen once: not settled yet
    assert worker.wait(60)

    def hook(name: str) -> None:
        if name == point:
            raise Killed(name)

    faults.set_hook(hook)
    with pytest.raises(Killed):
        d.tick(T0 + 5)
    faults.set_hook(None)
    worker.stop()
    d.db.close()
    moved = point == "quarantine:renamed"
    assert os.path.lexists(model) != moved
    assert alerts(tmp_path, "poisoned-weights") == []  # nothing said before the kill

    again, worker = start(tmp_path)
    try:
        again.tick(T0 + 10)
        assert worker.wait(60)
        again.tick(T0 + 15)
        again.tick(T0 + 20)
    finally:
        worker.stop()
    [act] = [a for a in again.db.actions() if a.state == "interrupted"]
    assert act.kind == "quarantine-weights"
    interrupted = [f for f in again.db.open_findings() if f.kind == "action-interrupted"]
    [f] = interrupted
    if moved:
        assert act.outcome == "done"
        assert act.undo == [
            {"op": "rename", "from": str(model), "to": act.details["interrupted"]["moved_to"]}
        ]
        # One poisoned-weights alert: opened by the recovery, resolved (moved aside) as
        # an uninterrupted quarantine's is; one action-interrupted, open, critical.
        assert alerts(tmp_path, "poisoned-weights") == ["open", "resolve"]
        assert alerts(tmp_path, "action-interrupted") == ["open"]
        assert f.severity == "critical"
        cfg = os.path.abspath("t.yaml")  # not the default file: the pasted undo names it
        assert f"undo: rogue-watchdog undo --config {cfg} {act.id}" in f.message
        out = run_cli("undo", str(act.id), "--state-dir", str(tmp_path / "state"))
        assert out.returncode == 0, out.stdout + out.stderr
        assert model.exists()
    else:
        # Not moved: the model was still in place, so the restarted daemon's gate
        # refuses and quarantines it as ever: one poisoned-weights alert, its own action.
        assert act.outcome == "failed" and act.undo is None
        assert f.severity == "warning" and "nothing was moved" in f.message
        assert alerts(tmp_path, "poisoned-weights") == ["open", "resolve"]
        [q] = [a for a in again.db.actions() if a.id != act.id]
        assert (q.kind, q.state, q.outcome) == ("quarantine-weights", "done", "done")
        assert not model.exists()
