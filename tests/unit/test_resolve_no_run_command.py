"""Issue 33, fresh user F: ``rogue-watchdog terminate --config … 20297``, pasted from a
``resolve`` alert, gave exit 2 (``PID 20297 is not running (it exited): nothing to
terminate``). A resolve alert, and any message about a run that ended, carries no command
that acts on the run; a source-level hint stays while it still applies. A real Daemon
over a fake /proc: the sandbox's ghost, its cron line disabled, runs, then exits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import rogue_watchdog.scan as scan_mod
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.tracking.current import without_run_commands
from tests.fixtures.proc.fakeproc import FakeProc, write_tree

TRAIN = ["/usr/bin/python3", "/p/train_ghost.py", "--epochs", "40"]
MARKER = "# disabled by rogue-watchdog: "

CONFIG = """
nvml: {{enabled: false}}
paths: {{proc_root: {proc}, crontab: {root}/crontab, cron_d: {root}/cron.d, cron_spool: []}}
training: {{launchers: [train_ghost.py]}}
daemon: {{state_dir: {root}/state}}
alerts: {{settle_s: 0, sinks: [{{type: log, path: {root}/alerts.log}}]}}
"""


def test_the_resolve_of_a_disabled_lines_run_names_no_terminate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before (132b2a1): once its cron line was disabled by hand, the ghost's finding
    read ``its crontab entry was disabled: only the run is left; to stop it:
    rogue-watchdog terminate --config … 700``, and its resolve alert said the same after
    the run exited. After: the open finding keeps the command (the run is there to
    stop); the resolve, and the finding as stored, end ``its crontab entry was disabled:
    the run ended``. An orphan's ``to stop it: … terminate … 700, or by hand: kill``
    goes from its resolve too."""
    proc = tmp_path / "proc"
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    line = f"* * * * * root setsid {' '.join(TRAIN)} &\n"
    (cron_d / "legacy-retrain").write_text(line)
    ghost = FakeProc(700, 1, TRAIN, cgroup=["0::/system.slice/cron.service"])
    write_tree(proc, [FakeProc(1, 0, ["/sbin/init"]), ghost])
    config = parse_config(CONFIG.format(proc=proc, root=tmp_path), f"{tmp_path}/t.yaml")
    d = Daemon(config, None)
    d.tick(1_000_000.0)
    (cron_d / "legacy-retrain").write_text(MARKER + line)  # the sed hint, by hand
    monkeypatch.setattr(scan_mod, "ORIGIN_TTL_S", -1.0)  # re-read the origin now
    d.tick(1_000_005.0)
    cmd = f"rogue-watchdog terminate --config {tmp_path}/t.yaml 700"
    (live,) = [f for f in d.db.open_findings() if f.root_pid == 700]
    assert live.message.endswith(
        f"its crontab entry was disabled: only the run is left; to stop it: {cmd}"
    )
    shutil.rmtree(proc / "700")  # the run ends
    d.tick(1_000_010.0)
    sent = {}
    for event, payload in d.db.conn.execute("SELECT event, payload_json FROM deliveries"):
        f = json.loads(payload)["finding"]
        if f["root_pid"] == 700:
            sent[event] = f["message"]
    assert sorted(sent) == ["open", "resolve"]
    assert "terminate" not in sent["resolve"] and "kill" not in sent["resolve"]
    assert sent["resolve"].endswith("; its crontab entry was disabled: the run ended")
    rec = d.db.finding(live.id)
    assert rec is not None and rec.resolved_at is not None
    assert rec.message == sent["resolve"]  # `findings`, `status` read the same


def test_every_run_acting_clause_goes_and_a_source_hint_stays() -> None:
    disable = (
        "to stop the source: rogue-watchdog disable-source F12 (backs up the crontab; the "
        "undo command it prints, with the action id, restores it)"
    )
    msg = (
        "rogue training job PID 7, user bob, from systemd unit hub.service; "
        f"{disable}; its source is a service: systemd unit hub.service also runs PID 8, "
        "not part of the job; it is never stopped unasked; to stop this run: "
        "rogue-watchdog terminate 7; to stop the service hub.service as well: "
        "rogue-watchdog terminate --stop-service hub.service 7"
    )
    assert without_run_commands(msg) == (
        "rogue training job PID 7, user bob, from systemd unit hub.service; "
        f"{disable}; its source is a service: systemd unit hub.service also runs PID 8, "
        "not part of the job; it is never stopped unasked"
    )
    assert without_run_commands("rogue job PID 7; to stop it: scancel 41") == "rogue job PID 7"
