"""Terminate mode end to end: a Daemon with the Enforcer ticks over real processes this
test started; guards, rules, dry runs, the audit trail and ``remediation-failed``."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.guards import read_live
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from tests.conftest import Spawned

pytestmark = pytest.mark.system


def make(tmp_path: Path, enforcement: str) -> tuple[Daemon, Enforcer]:
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        "sanctioned:\n"
        "  - {name: ok, cmdline: '*train_ok.py*', origin: {any: true}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        "alerts:\n  reminder_after_s: 600\n"
        f"  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n"
        "enforcement:\n" + enforcement,
        "t.yaml",
    )
    d = Daemon(cfg, None)
    enf = Enforcer(cfg, d.db)
    d.sources.append(enf)
    d.enforcers.append(enf)
    return d, enf


def mine(tmp_path: Path, mode: str) -> str:
    """A rule limiting ``mode`` to this test's own trainers: other jobs on the host (other
    tests' trainers) stay in observe mode and are never signalled."""
    return f"  rules:\n    - {{name: mine, cmdline: '*{tmp_path}/*', mode: {mode}}}\n"


def trainer(spawned: Spawned, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    script = tmp_path / name
    if not script.exists():
        script.write_text("import time\ntime.sleep(120)\n")
    p = spawned.start([sys.executable, str(script)])
    for _ in range(100):
        live = read_live(p.pid)
        if live is not None and str(script) in live.cmdline:
            return p
        time.sleep(0.02)
    raise AssertionError(f"{name} did not start")


def running(p: subprocess.Popen[bytes]) -> bool:
    return p.poll() is None


def test_terminate_mode_kills_rogue_only_records_and_catches_the_comeback(
    spawned: Spawned, tmp_path: Path
) -> None:
    d, enf = make(
        tmp_path,
        "  mode: observe\n  grace_s: 3\n  protect: ['*train_keep_rw.py*']\n"
        + mine(tmp_path, "terminate"),
    )
    rogue = trainer(spawned, tmp_path, "train_ghost_rw.py")
    ok = trainer(spawned, tmp_path, "train_ok.py")
    keep = trainer(spawned, tmp_path, "train_keep_rw.py")
    t0 = 5_000_000.0
    d.tick(t0)
    assert rogue.wait(timeout=10) == -signal.SIGTERM
    assert enf.settle(10)  # the grace period is waited out off the tick
    assert running(ok) and running(keep)
    finding = next(
        f for f in d.db.open_findings() if f.kind == "rogue-job" and f.root_pid == rogue.pid
    )
    acts = [a for a in d.db.actions() if a.details.get("root", [0])[0] == rogue.pid]
    assert [(a.actor, a.kind, a.outcome, a.finding_id, a.dry_run) for a in acts] == [
        ("daemon", "terminate", "ok", finding.id, False)
    ]
    assert [(p["pid"], p["signals"], p["result"]) for p in acts[0].details["procs"]] == [
        (rogue.pid, ["SIGSTOP", "SIGTERM", "SIGCONT"], "exited")
    ]
    kept = [a for a in d.db.actions() if a.details.get("root", [0])[0] == keep.pid]
    # The guard refuses the protected job as a whole, once, and says which entry.
    assert [(a.kind, a.outcome) for a in kept] == [("terminate", "refused")]
    assert "enforcement.protect entry '*train_keep_rw.py*'" in kept[0].details["refused"]
    assert not [a for a in d.db.actions() if a.details.get("root", [0])[0] == ok.pid]

    d.tick(t0 + 60)  # gone: nothing new
    assert not [f for f in d.db.open_findings() if f.kind == "remediation-failed"]

    back = trainer(spawned, tmp_path, "train_ghost_rw.py")
    d.tick(t0 + 720)
    failed = [f for f in d.db.open_findings() if f.kind == "remediation-failed"]
    assert len(failed) == 1 and failed[0].severity == "critical"
    assert failed[0].root_pid == back.pid
    job = next(j for j in d.last.result.jobs if j.root_pid == back.pid)  # type: ignore[union-attr]
    assert (
        f"is back as PID {back.pid} after rogue-watchdog terminated 1 process(es) "
        f"of PID {rogue.pid}" in failed[0].message
    )
    assert f"by daemon; spawned this time by {job.origin.describe()}" in failed[0].message
    assert failed[0].details["actions"] == [acts[0].id]
    reported = [f for f in d.last.findings if f.kind == "remediation-failed"]  # type: ignore[union-attr]
    assert [f.root_pid for f in reported] == [back.pid]
    # Still terminate mode: the comeback is stopped too.
    assert back.wait(timeout=10) == -signal.SIGTERM


def test_observe_rule_and_dry_run_signal_nothing(spawned: Spawned, tmp_path: Path) -> None:
    d, _ = make(
        tmp_path,
        "  mode: observe\n  dry_run: true\n  rules:\n"
        "    - {name: watch-only, cmdline: '*train_watch_rw.py*', mode: observe}\n"
        f"    - {{name: mine, cmdline: '*{tmp_path}/*', mode: terminate}}\n",
    )
    watch = trainer(spawned, tmp_path, "train_watch_rw.py")
    dry = trainer(spawned, tmp_path, "train_dry_rw.py")
    d.tick(6_000_000.0)
    time.sleep(0.5)
    assert running(watch) and running(dry)
    by_root = {a.details["root"][0]: a for a in d.db.actions()}
    assert watch.pid not in by_root
    assert (by_root[dry.pid].outcome, by_root[dry.pid].dry_run) == ("dry-run", True)
    assert by_root[dry.pid].details["procs"][0]["result"] == "would-signal"


def test_global_observe_with_terminate_rule(spawned: Spawned, tmp_path: Path) -> None:
    d, enf = make(
        tmp_path,
        "  mode: observe\n  grace_s: 3\n  rules:\n"
        f"    - {{name: kill-ghost, cmdline: '*{tmp_path}/train_kill_rw.py*', mode: terminate}}\n",
    )
    other = trainer(spawned, tmp_path, "train_other_rw.py")
    kill = trainer(spawned, tmp_path, "train_kill_rw.py")
    d.tick(7_000_000.0)
    assert kill.wait(timeout=10) == -signal.SIGTERM
    assert enf.settle(10)
    assert running(other)
    assert [a.details["root"][0] for a in d.db.actions()] == [kill.pid]
    assert str(tmp_path) in " ".join(d.db.actions()[0].details["procs"][0]["cmdline"])
