"""Issue 33, fresh user F item 3: pages for runs that already exited. On a GPU-less
shared host (NVML unavailable: no process lists) the sandbox daemon sent 536 high
``rogue-job`` opens in about 8 minutes, 181 of them saying the run had already exited;
the median finding lived 1.0 s (other engineers' 1-3 s bench trainers). The settle now
holds a job's first page without NVML too: a run that ended by itself within it sends
nothing, a real rogue is paged once, within ``alerts.settle_s``. A real Daemon ticked
on a fake clock; NVML is unavailable (its library does not exist), as on that host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from rogue_watchdog.config.alerts import AlertSettings
from rogue_watchdog.daemon.tracking.current import as_opened
from rogue_watchdog.daemon.tracking.reminders import alert_due
from rogue_watchdog.model import Finding
from rogue_watchdog.state import FindingRecord
from tests.fakenvml.fixtures import REPO

_SCRIPT = r"""
import json, os, signal, subprocess, sys, time
from pathlib import Path
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon

tmp, token, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
cfg = parse_config(
    f"nvml: {{library: '{tmp}/no-such-libnvidia-ml.so.1'}}\n"
    f"training: {{launchers: ['{token}'], device_glob: '{tmp}/nodev[0-9]*'}}\n"
    f"daemon: {{state_dir: '{tmp}/state'}}\n"
    "alerts: {settle_s: 5, reminder_after_s: 3600,"
    f" sinks: [{{type: log, path: '{tmp}/alerts.log'}}]}}\n",
    "t.yaml",
)
d = Daemon(cfg, None)
pending = {}
def exits():
    global pending
    out, pending = pending, {}
    return out
d.exit_statuses = exits  # what the proc connector's exit events hand the daemon
script = Path(tmp) / f"{token}.py"
script.write_text("import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n"
                  "    time.sleep(0.005)\n")
t0, pids, sent = 1_900_000_000.0, [], []
# plan: [(how it ends: "alone" | "TERM" | "OURS" | "runs", tick offsets (s) while it runs)]
for n, (how, ticks) in enumerate(plan):
    go = Path(tmp) / f"go-{n}"
    p = subprocess.Popen([sys.executable, "-S", str(script), str(go)])
    deadline = time.monotonic() + 10
    while str(script).encode() not in Path(f"/proc/{p.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    pids.append(p.pid)
    for dt in ticks:
        d.tick(t0 + dt)
    if how == "runs":
        p.kill(); p.wait(); continue
    if how == "OURS":  # this product's terminate names the finding, then signals
        [fid] = [r.id for r in d.db.open_findings() if r.root_pid == p.pid]
        d.db.record_action("daemon", "terminate", f"PID {p.pid}", "ok", {},
                           t0 + ticks[-1], finding_id=fid)
    if how in ("TERM", "OURS"):
        p.send_signal(signal.SIGTERM)
    else:
        go.touch()
    code = p.wait(30)
    pending[p.pid] = -code if code < 0 else code << 8  # the wait(2) status
    d.tick(t0 + ticks[-1] + 1.0)
    t0 += 1000.0  # the next job, much later (past any return window)
for event, payload in d.db.conn.execute(
        "SELECT event, payload_json FROM deliveries ORDER BY id"):
    f = json.loads(payload)["finding"]
    if f["root_pid"] in pids:
        sent.append([pids.index(f["root_pid"]), event, f["severity"], f["message"]])
nvml = [k for (k,) in d.db.conn.execute("SELECT kind FROM findings WHERE kind LIKE 'nvml%'")]
rows = [list(r) for r in d.db.conn.execute(
    "SELECT kind, root_pid, resolved_at IS NULL, last_alert_at IS NULL FROM findings")]
print(json.dumps({"sent": sent, "nvml": nvml, "pids": pids, "rows": rows,
                  "not_alerted": d.db.counters().get("findings_not_alerted", 0)}))
"""


def _run(tmp_path: Path, plan: list[tuple[str, list[float]]]) -> dict[str, Any]:
    token = f"train_lat_{uuid.uuid4().hex[:8]}"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path), token, json.dumps(plan)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def test_without_nvml_a_run_that_ended_by_itself_within_the_settle_is_not_paged(
    tmp_path: Path,
) -> None:
    """Before (132b2a1): a bench trainer seen at one tick and gone 1 s later by itself
    was paged (``open`` high at once, then ``resolve``): 2 alerts per 1 s run. After:
    none; a rogue that keeps running is paged once, at its settle's end (5 s), not at
    its first look, and never again. One stopped by this product's own terminate within
    the settle gets its open (saying what ran, not "nothing left to stop") and its
    resolve; one a signal from anyone else stopped sends nothing (fresh user G: 46 of
    76 high opens were another engineer's test processes its teardown killed, opened
    and resolved in the same second; before 5f6d1db: an open and a resolve)."""
    doc = _run(
        tmp_path,
        [
            ("alone", [0.0]), ("runs", [0.0, 2.0, 4.0, 5.0, 7.0, 60.0]), ("OURS", [0.0]),
            ("TERM", [0.0]),
        ],
    )  # fmt: skip
    assert doc["nvml"] == ["nvml-unavailable"]  # no process lists, as on that host
    assert doc["not_alerted"] == 2, doc  # ended by itself, or by another's signal: counted
    sent = [(n, ev, sev) for n, ev, sev, _m in doc["sent"]]
    assert sent == [
        (1, "open", "high"),  # at t=5, the settle's end
        (1, "resolve", "high"),  # seen gone at the next job's first tick
        (2, "open", "high"),  # our terminate: the record of what ran and was stopped
        (2, "resolve", "high"),
    ]
    assert not any("nothing left to stop" in m for _n, ev, _s, m in doc["sent"] if ev == "open")


def test_the_rogue_is_paged_at_its_settles_end_not_its_first_look(tmp_path: Path) -> None:
    """Before: the open went at the first look (t=0); after: at t=5 (settle_s), and the
    ticks before it send nothing."""
    doc = _run(tmp_path, [("runs", [0.0, 2.0, 4.0])])
    assert doc["sent"] == []
    doc = _run(tmp_path / "b", [("runs", [0.0, 2.0, 4.0, 5.0])])
    assert [(n, ev) for n, ev, _s, _m in doc["sent"]] == [(0, "open")]


def _exited(**details: Any) -> Finding:
    return Finding(
        "rogue-job", "high", "rogue training job PID 7 (already exited: seen at its exec)",
        root_pid=7, details={"gpus": [], "exited": True, **details},
    )  # fmt: skip


def test_a_job_seen_only_at_its_exec_never_opens() -> None:
    """Before: 181 of the sandbox's opens read ``(already exited: seen at its exec)``
    (sent at once: no settle without NVML). After: no open is due for such a finding,
    whatever the settle and the debounce say; its resolve decides (it owes one only
    when a signal ended it)."""
    for settle in (0.0, 5.0):
        settings = AlertSettings(settle_s=settle)
        assert alert_due(None, _exited(), 1, [7], {}, 100.0, settings) is None
        rec = FindingRecord(
            id=3, fingerprint="fp", kind="rogue-job", severity="high", message="m",
            root_pid=7, details={"gpus": [], "exited": True}, opened_at=0.0,
            last_seen=0.0, seen_count=1, resolved_at=None, last_alert_at=None,
        )  # fmt: skip
        assert alert_due(rec, _exited(), 1, [7], {}, 100.0, settings) is None


def test_an_owed_open_says_what_ran_not_that_it_is_gone() -> None:
    rec = FindingRecord(
        id=3, fingerprint="fp", kind="rogue-job", severity="high",
        message="rogue training job PID 7; now: its run PID 7 was killed by signal 15; "
        "a command naming PID 7 has nothing left to stop",
        root_pid=7, details={"gpus": []}, opened_at=0.0, last_seen=0.0, seen_count=1,
        resolved_at=None, last_alert_at=None,
    )  # fmt: skip
    assert as_opened(rec).message == "rogue training job PID 7"
