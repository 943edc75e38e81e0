"""The daemon's tick(now) on real processes: findings lifecycle, respawn, restart."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned


def make(tmp_path: Path, extra: str = "") -> Daemon:
    cfg = parse_config(
        # settle_s 0: NVML is off and the settle holds a first page without it too
        # (issue 33); the open goes at the first look here.
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        "alerts:\n  reminder_after_s: 600\n  settle_s: 0\n"
        f"  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n" + extra,
        "t.yaml",
    )
    return Daemon(cfg, None)


def trainer(spawned: Spawned, tmp_path: Path) -> tuple[Path, int]:
    script = tmp_path / "train_ghost.py"
    if not script.exists():
        script.write_text("import time\ntime.sleep(120)\n")
    pid = spawned.start([sys.executable, str(script)]).pid
    time.sleep(0.3)
    return script, pid


def ours(spawned: Spawned, findings: list, kind: str) -> list:  # type: ignore[type-arg]
    """The ``kind`` findings about this test's processes: the daemon sees the whole host,
    another test's ghost killed and back beside this one included (two xdist workers)."""
    pids = {p.pid for p in spawned.procs}
    return [f for f in findings if f.kind == kind and f.root_pid in pids]


def mine(d: Daemon, script: Path) -> list:  # type: ignore[type-arg]
    assert d.last is not None and d.last.result is not None
    return [j for j in d.last.result.jobs if str(script) in j.cmdline]


def events(d: Daemon, pid: int) -> list[tuple[str, str]]:
    """Spooled alert events about the job rooted at ``pid`` (other jobs on the host vary)."""
    rows = d.db.conn.execute("SELECT event, payload_json FROM deliveries ORDER BY id").fetchall()
    out = []
    for event, payload in rows:
        finding = json.loads(payload)["finding"]
        if finding["root_pid"] == pid:
            out.append((event, finding["kind"]))
    return out


def test_open_remind_resolve_once_each(spawned: Spawned, tmp_path: Path) -> None:
    d = make(tmp_path)
    script, pid = trainer(spawned, tmp_path)
    t0 = 1_000_000.0
    d.tick(t0)
    assert [j.root_pid for j in mine(d, script)] == [pid]
    rogue = [e for e in events(d, pid) if e[1] == "rogue-job"]
    assert rogue == [("open", "rogue-job")]
    d.tick(t0 + 5)
    d.tick(t0 + 10)
    assert [e for e in events(d, pid) if e[1] == "rogue-job"] == [("open", "rogue-job")]
    d.tick(t0 + 700)  # past reminder_after_s
    assert [e for e in events(d, pid) if e[1] == "rogue-job"] == [
        ("open", "rogue-job"),
        ("remind", "rogue-job"),
    ]
    open_ = [f for f in d.db.open_findings() if f.kind == "rogue-job" and f.root_pid == pid]
    assert len(open_) == 1 and open_[0].seen_count == 4
    spawned.procs[-1].kill()
    spawned.procs[-1].wait()
    d.tick(t0 + 705)
    assert [e for e in events(d, pid) if e[1] == "rogue-job"] == [
        ("open", "rogue-job"),
        ("remind", "rogue-job"),
        ("resolve", "rogue-job"),
    ]


def test_respawn_after_kill_and_across_a_restart(spawned: Spawned, tmp_path: Path) -> None:
    d = make(tmp_path)
    script, pid = trainer(spawned, tmp_path)
    t0 = 2_000_000.0
    d.tick(t0)
    assert [j.root_pid for j in mine(d, script)] == [pid]
    spawned.procs[-1].kill()
    spawned.procs[-1].wait()
    d.tick(t0 + 60)  # gone
    _, pid2 = trainer(spawned, tmp_path)
    d.tick(t0 + 720)  # back 12 minutes later
    resp = ours(spawned, d.db.open_findings(), "respawned")
    assert len(resp) == 1
    assert resp[0].root_pid == pid2
    assert "(+11m)" in resp[0].message and f"as PID {pid2}" in resp[0].message
    assert resp[0].details["gap_s"] == 660.0

    # Kill again, restart the daemon (new process state, same db), come back.
    spawned.procs[-1].kill()
    spawned.procs[-1].wait()
    d.db.close()
    d2 = make(tmp_path)
    _, pid3 = trainer(spawned, tmp_path)
    d2.tick(t0 + 1500)
    resp = ours(spawned, d2.db.open_findings(), "respawned")
    assert [f.root_pid for f in resp] == [pid3]


def test_corrupt_state_is_kept_aside_and_reported(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"this is not a database" * 100)
    db = StateDB(state)
    assert db.recovered_from is not None
    assert Path(db.recovered_from).read_bytes().startswith(b"this is not a database")
    d = make(tmp_path)
    d.db = db
    d.tracker.db = db
    d.tick(3_000_000.0)
    kinds = [f.kind for f in db.open_findings()]
    assert "state-recovered" in kinds


def test_overlapping_instance_is_not_a_respawn(spawned: Spawned, tmp_path: Path) -> None:
    # Found by a benchmark: A runs, B (same command) starts, A exits; B ran all along.
    d = make(tmp_path)
    script, a = trainer(spawned, tmp_path)
    t0 = time.time()
    d.tick(t0)
    assert [j.root_pid for j in mine(d, script)] == [a]
    _, b = trainer(spawned, tmp_path)
    # The ticks' clock is real time: B started before the look that saw both (a fake
    # t0 + 1 could fall before B's real start under load, making B "back": flaky).
    t1 = max(time.time(), t0 + 1)
    d.tick(t1)
    spawned.procs[0].kill()
    spawned.procs[0].wait()
    d.tick(t1 + 1)
    assert [j.root_pid for j in mine(d, script)] == [b]
    assert not ours(spawned, d.db.open_findings(), "respawned")


def test_respawned_stays_open_while_the_ghost_runs(spawned: Spawned, tmp_path: Path) -> None:
    d = make(tmp_path)
    _, _ = trainer(spawned, tmp_path)
    t0 = time.time()
    d.tick(t0)
    spawned.procs[-1].kill()
    spawned.procs[-1].wait()
    d.tick(t0 + 5)
    _, back = trainer(spawned, tmp_path)
    d.tick(t0 + 10)
    d.tick(t0 + 15)
    d.tick(t0 + 20)
    resp = ours(spawned, d.db.open_findings(), "respawned")
    assert [f.root_pid for f in resp] == [back]
    assert [e for e in events(d, back) if e[1] == "respawned"] == [("open", "respawned")]
    spawned.procs[-1].kill()
    spawned.procs[-1].wait()
    d.tick(t0 + 25)
    assert not ours(spawned, d.db.open_findings(), "respawned")
    assert [e for e in events(d, back) if e[1] == "respawned"] == [
        ("open", "respawned"),
        ("resolve", "respawned"),
    ]


def test_config_checksum_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    # A tester swapped the config for a FIFO and `status` hung for good.
    import hashlib
    import os

    from rogue_watchdog.config import config_checksum

    cfg = tmp_path / "c.yaml"
    cfg.write_text("sanctioned: []\n")
    assert config_checksum(str(cfg)) == hashlib.sha256(b"sanctioned: []\n").hexdigest()[:16]
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert config_checksum(str(fifo)) is None
    assert config_checksum(str(tmp_path / "missing.yaml")) is None
