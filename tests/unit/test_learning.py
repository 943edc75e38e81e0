"""The learning period (daemon.learn_until): configuration, severities, no action, status."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from rogue_watchdog.config import ConfigError, parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.daemon.status import build_status, render_status
from rogue_watchdog.model import Finding, ScanResult
from rogue_watchdog.plugins import TrackResult
from tests.conftest import Spawned

END = 2_000_000_000.0  # 2033-05-18T03:33:20Z


def test_learn_until_reads_a_duration_or_a_date() -> None:
    week = parse_config("daemon: {learn_until: 7d}\n", "t.yaml").daemon.learn_until
    assert week is not None and week.duration_s == 604800.0 and week.at is None
    assert week.end(1000.0) == 605800.0
    secs = parse_config("daemon: {learn_until: 3600}\n", "t.yaml").daemon.learn_until
    assert secs is not None and secs.duration_s == 3600.0
    date = parse_config(
        "daemon: {learn_until: '2033-05-18T03:33:20+00:00'}\n", "t.yaml"
    ).daemon.learn_until
    assert date is not None and date.at == END and date.duration_s is None


def test_learn_until_refuses_other_text_naming_file_line_key() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config("daemon:\n  learn_until: soon\n", "t.yaml")
    assert str(err.value) == (
        "t.yaml:2: daemon.learn_until: expected a duration (7d, 12h, 30m, seconds) or a "
        "date, got 'soon'"
    )


def test_check_config_warns_when_retention_does_not_cover_learning() -> None:
    cfg = parse_config("daemon:\n  learn_until: 14d\n", "t.yaml")
    assert [str(w) for w in cfg.warnings] == [
        "t.yaml:2: daemon.learn_until: the learning period (14.0 days) is longer than "
        "daemon.retention_jobs_s (604800 s = 7.0 days): runs seen early in it will be "
        "forgotten before 'allowlist suggest' reads them; raise retention_jobs_s to cover it"
    ]
    covered = parse_config("daemon:\n  learn_until: 14d\n  retention_jobs_s: 1209600\n", "t.yaml")
    assert covered.warnings == ()
    forever = parse_config("daemon:\n  learn_until: 14d\n  retention_jobs_s: 0\n", "t.yaml")
    assert forever.warnings == ()


class Recorder:
    """An enforcer that only records that it was asked to act."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[float] = []

    def act(self, now: float, result: ScanResult, track: TrackResult) -> list[Finding]:
        self.calls.append(now)
        return []


def make(tmp_path: Path, enforcer: Recorder) -> Daemon:
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', learn_until: '2033-05-18T03:33:20+00:00'}}\n"
        f"alerts:\n  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n",
        "t.yaml",
    )
    return Daemon(cfg, None, enforcers=[enforcer])


def start(spawned: Spawned, tmp_path: Path, name: str) -> int:
    script = tmp_path / name
    script.write_text("import time\ntime.sleep(120)\n")
    pid = spawned.start([sys.executable, str(script)]).pid
    time.sleep(0.3)
    return pid


def test_learning_alerts_unsanctioned_jobs_at_info_and_acts_on_nothing(
    spawned: Spawned, tmp_path: Path
) -> None:
    rec = Recorder()
    d = make(tmp_path, rec)
    pid = start(spawned, tmp_path, "train_learned.py")
    d.tick(END - 100)
    rogue = [f for f in d.db.open_findings() if f.kind == "rogue-job" and f.root_pid == pid]
    assert [(f.severity, f.details["learning"]) for f in rogue] == [("info", True)]
    assert rec.calls == []  # never acted on while learning
    runs = [r for r in d.db.runs() if r.root_pid == pid]
    assert [(r.verdict, r.started_at, r.last_seen) for r in runs] == [
        ("rogue", END - 100, END - 100)
    ]
    d.tick(END - 90)
    runs = [r for r in d.db.runs() if r.root_pid == pid]
    assert [(r.started_at, r.last_seen, r.gpu_s) for r in runs] == [(END - 100, END - 90, 0.0)]
    # After the period: a new unsanctioned job is high again, and the enforcer acts.
    later = start(spawned, tmp_path, "train_after.py")
    d.tick(END + 10)
    after = [f for f in d.db.open_findings() if f.kind == "rogue-job" and f.root_pid == later]
    assert [(f.severity, "learning" in f.details) for f in after] == [("high", False)]
    assert rec.calls == [END + 10]


def test_status_says_learning_until_and_the_candidate_rules(
    spawned: Spawned, tmp_path: Path
) -> None:
    d = make(tmp_path, Recorder())
    d.tick(time.time())
    doc = build_status(d)
    assert doc["learning"]["until"] == END and doc["learning"]["active"] is True
    assert doc["learning"]["candidate_rules"] == 0
    text = render_status(doc, width=200, colour=False)
    until = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(END))
    assert text.splitlines()[2] == (
        f"learning until {until}, 0 candidate rules (rogue-watchdog allowlist suggest): "
        "unsanctioned jobs alerted at info, not acted on"
    )


def test_a_respawn_while_learning_is_info(spawned: Spawned, tmp_path: Path) -> None:
    d = make(tmp_path, Recorder())
    pid = start(spawned, tmp_path, "train_again.py")
    d.tick(END - 100)
    spawned.procs[-1].kill()
    spawned.procs[-1].wait()
    d.tick(END - 90)
    again = start(spawned, tmp_path, "train_again.py")
    d.tick(END - 80)
    back = [f for f in d.db.open_findings() if f.kind == "respawned" and f.root_pid == again]
    assert [f.severity for f in back] == ["info"]
    assert pid != again
