"""Issue 33, fresh user F item 4: ``kill -HUP`` adding ``daemon.learn_until: 7d`` sent
13 high ``remind`` alerts 3 s after their opens, text identical to the open, no reason
given (``reminder_after_s`` 3600): learning lowered the paged findings to ``info``,
their labels changed, and a changed label was a re-page. A reload reminds of nothing
by itself; a raised severity is said in words. A real Daemon, a real job, the real
reload (``Daemon.reload``, what SIGHUP runs)."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path

from rogue_watchdog.config import load_config
from rogue_watchdog.daemon.alerts.alert import Alert, AlertFinding, Change
from rogue_watchdog.daemon.alerts.render import alert_text
from rogue_watchdog.daemon.loop import Daemon
from tests.conftest import Spawned

BASE = (
    "nvml: {{enabled: false}}\n"
    "training: {{launchers: ['{token}']}}\n"
    "daemon: {{state_dir: '{tmp}/state'{extra}}}\n"
    "alerts: {{reminder_after_s: 3600, settle_s: 0,"
    " sinks: [{{type: log, path: '{tmp}/alerts.log'}}]}}\n"
)


def test_a_reload_that_starts_learning_sends_no_remind(spawned: Spawned, tmp_path: Path) -> None:
    """Before (132b2a1): ``open`` high, then ``remind`` high 3 s later (the reload),
    labels_were ``severity: high``. After: the open only; the finding's alert keeps the
    severity it was paged with; a job found after the reload opens at ``info``."""
    token = f"reloadjob{uuid.uuid4().hex[:8]}x"
    conf = tmp_path / "config.yaml"
    conf.write_text(BASE.format(token=token, tmp=tmp_path, extra=""))
    pid = spawned.start(["bash", "-c", f"exec -a {token}_a sleep 120"]).pid
    deadline = time.monotonic() + 20
    while not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(token.encode()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    d = Daemon(load_config(conf, check_trust=False), str(conf))
    t0 = time.time()
    d.tick(t0)
    conf.write_text(BASE.format(token=token, tmp=tmp_path, extra=", learn_until: 7d"))
    assert d.reload()
    later = spawned.start(["bash", "-c", f"exec -a {token}_b sleep 120"]).pid
    deadline = time.monotonic() + 20
    while not Path(f"/proc/{later}/cmdline").read_bytes().startswith(token.encode()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    for k in range(1, 4):
        d.tick(t0 + 3 * k)
    sent = []
    for event, payload in d.db.conn.execute("SELECT event, payload_json FROM deliveries"):
        f = json.loads(payload)["finding"]
        if f["root_pid"] in (pid, later):
            sent.append(([pid, later].index(f["root_pid"]), event, f["severity"]))
    assert sent == [(0, "open", "high"), (1, "open", "info")]


def test_a_raised_severity_says_so() -> None:
    f = AlertFinding(
        id=4, kind="rogue-job", severity="critical", message="rogue training job PID 7",
        root_pid=7, seen_count=3, opened_at="2026-12-06T16:38:25+00:00",
        change=Change(labels_were={"severity": "high", "kind": "rogue-job"}),
    )  # fmt: skip
    text = alert_text(Alert(event="remind", host="h", time=None, finding=f), 2000)
    assert "severity now critical (was high)" in text
    same = dataclasses.replace(f, change=Change(labels_were={"severity": "critical"}))
    again = alert_text(Alert(event="remind", host="h", time=None, finding=same), 2000)
    assert "updated (its labels changed" in again
