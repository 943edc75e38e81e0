"""The blind window after a long tick (issue 32, case 3)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.guards import read_live
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import EARLY_TICK_MIN_GAP_S, Daemon, early_tick_spacing_s
from rogue_watchdog.daemon.status import build_status, render_status
from tests.conftest import Spawned, poll


def test_time_spent_acting_does_not_space_the_next_early_tick() -> None:
    # A tick of 61 s, 60 of them a terminate waiting out its grace: before, the next
    # early tick came 122 s after the tick began (61 s after it ended); now 2 s after
    # it began, i.e. at once.
    assert early_tick_spacing_s(61.0, 60.0) == 2.0
    assert early_tick_spacing_s(1.0, 0.0) == 2.0  # a scan's own cost still counts
    assert early_tick_spacing_s(60.0, 60.0) == EARLY_TICK_MIN_GAP_S


def test_a_terminate_waits_out_its_grace_off_the_tick_and_status_says_being_stopped(
    spawned: Spawned, tmp_path: Path
) -> None:
    """Case 3: before, the tick that terminated a job returned only after grace_s (the
    daemon blind meanwhile, ``status`` answering from the tick before, the job "rogue");
    now the tick returns with the job frozen, SIGTERMed and continued, the grace period
    waits on the runner's thread, the next tick scans, and ``status`` shows the job as
    being stopped, with when SIGKILL follows."""
    script, log = tmp_path / "train_wal_slow.py", tmp_path / "got.txt"
    script.write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: open(sys.argv[1], 'a').write('TERM\\n'))\n"
        "open(sys.argv[1] + '.ready', 'w').close()\n"
        "time.sleep(120)\n"
    )
    p = spawned.start([sys.executable, str(script), str(log)])
    poll("its SIGTERM handler is installed", lambda: Path(f"{log}.ready").exists(), 10)
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]}}\n"
        "enforcement:\n  mode: observe\n  grace_s: 5\n  rules:\n"
        f"    - {{name: mine, cmdline: '*{tmp_path}/*', mode: terminate}}\n",
        "t.yaml",
    )
    d = Daemon(cfg, None)
    enf = Enforcer(cfg, d.db)
    d.sources.append(enf)
    d.enforcers.append(enf)
    d.tick(1_000_000.0)
    # The tick is over; the job got SIGTERM (it ignores it) and waits for SIGKILL.
    poll("SIGTERM received", lambda: log.exists() and log.read_text(), 5)
    [act] = d.db.actions()
    assert (act.kind, act.state) == ("terminate", "pending")
    assert p.poll() is None and read_live(p.pid) is not None
    d.tick(1_000_001.0)  # the next scan runs while it waits
    assert d.last is not None and d.last.time == 1_000_001.0
    doc = build_status(d)
    [job] = [j for j in doc["jobs"] if j["root_pid"] == p.pid]
    assert job["verdict"] == "rogue"
    assert job["being_stopped"]["action_id"] == act.id
    assert job["being_stopped"]["kill_at"] is not None
    text = render_status(doc, width=200, colour=False)
    assert f"  stopping   pid {p.pid}" in text
    assert f"being stopped: action {act.id} (terminate by daemon since " in text
    assert ", SIGKILL at " in text
    assert enf.settle(20)
    assert p.wait(5) == -signal.SIGKILL
    assert log.read_text() == "TERM\n"
    [act] = d.db.actions()
    assert (act.state, act.outcome) == ("done", "ok")
