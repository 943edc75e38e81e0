"""The learning period (daemon.learn_until): configuration, severities, no action, status."""

from __future__ import annotations

import json
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


def test_a_duration_added_by_a_reload_counts_from_the_first_start(tmp_path: Path) -> None:
    """Fresh user D (issue 33): the daemon started at 12:59:33 with this state dir,
    `learn_until: 7d` added and reloaded with SIGHUP at 13:01:44 showed `learning until
    2026-12-13 13:01:44` (the reload + 7d); docs/first-week.md says the period counts
    from the daemon's first start with this state directory: 2026-12-13 12:59:33."""
    from rogue_watchdog.daemon.loop import FIRST_STARTED, LEARNING_STARTED

    path = tmp_path / "c.yaml"
    base = f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'"
    path.write_text(base + "}\n")
    from rogue_watchdog.config import load_config

    d = Daemon(load_config(str(path)), str(path))
    first = float(d.db.meta(FIRST_STARTED) or "nan")
    assert abs(first - time.time()) < 60
    # The first start as the report had it, 131 s before the reload.
    d.db.set_meta(FIRST_STARTED, repr(first - 131))
    assert d.learning_until() is None
    path.write_text(base + ", learn_until: 7d}\n")
    assert d.reload()
    # Before: first + 7 d (the reload's time), 131 s late.
    assert d.learning_until() == first - 131 + 7 * 86400
    assert d.db.meta(LEARNING_STARTED) == repr(first - 131)
    d.db.close()
    # A restart keeps it.
    again = Daemon(load_config(str(path)), str(path))
    assert again.learning_until() == first - 131 + 7 * 86400
    again.db.close()


def test_a_state_dir_from_before_the_key_starts_at_its_oldest_record(tmp_path: Path) -> None:
    from rogue_watchdog.daemon.loop import FIRST_STARTED, first_started
    from rogue_watchdog.state import StateDB

    db = StateDB(str(tmp_path / "state"))
    db.record_action("cli:root", "terminate", "PID 1", "ok", {}, 1_000.0)
    assert first_started(db, 5_000.0) == 1_000.0
    assert db.meta(FIRST_STARTED) == "1000.0"
    assert first_started(db, 9_000.0) == 1_000.0  # recorded once
    db.close()
    fresh = StateDB(str(tmp_path / "fresh"))
    assert first_started(fresh, 5_000.0) == 5_000.0
    fresh.close()


def test_scan_during_learning_judges_like_the_daemon(spawned: Spawned, tmp_path: Path) -> None:
    """Fresh user D (issue 33): during learning, `scan --config X` printed `[high]
    rogue-job` and exited 1 while `status` showed the same jobs at `info`."""
    from tests.conftest import run_cli

    pid = start(spawned, tmp_path, "train_looked.py")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state', learn_until: 7d}}\n"
    )
    # No daemon ever started with this state dir: the period would begin now.
    done = run_cli("scan", "--config", str(cfg))
    rows = [line for line in done.stdout.splitlines() if f"job PID {pid}," in line]
    # Before: rc 1, `[high] rogue-job ...`.
    assert (done.returncode, [r.split("]")[0].strip() for r in rows]) == (0, ["[info"]), done.stdout
    until = [line for line in done.stdout.splitlines() if line.startswith("learning until ")]
    assert len(until) == 1 and until[0].endswith(
        "(daemon.learn_until): findings about unsanctioned jobs at info, as the daemon reports them"
    )
    doc = json.loads(run_cli("scan", "--json", "--config", str(cfg)).stdout)
    mine = [f for f in doc["findings"] if f["root_pid"] == pid]
    assert [(f["kind"], f["severity"], f["details"]["learning"]) for f in mine] == [
        ("rogue-job", "info", True)
    ]
    # The period over (counted from the first start recorded in the state dir): high.
    from rogue_watchdog.daemon.loop import FIRST_STARTED
    from rogue_watchdog.state import StateDB

    db = StateDB(str(tmp_path / "state"))
    db.set_meta(FIRST_STARTED, repr(time.time() - 8 * 86400))
    db.close()
    done = run_cli("scan", "--config", str(cfg))
    assert done.returncode == 1
    assert not any(line.startswith("learning until ") for line in done.stdout.splitlines())
