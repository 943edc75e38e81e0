"""Issue 33, fresh user J item 2: a return's page waits for the settle.

On a shared host the sandbox daemon sent 4 high ``respawned`` pages at the very tick a
killed test-harness run came back, each return gone 0.1 s later: nothing to act on. A
return's page is the first page about the run that came back: it waits for
``alerts.settle_s`` as a job's first page does, and follows the same rule at its
resolve (``Tracker._owes_open``): one gone within the settle by itself, or stopped by
someone else, is filed and never paged; one this product's own ``terminate`` stopped
still gets its open (the record of what ran and was stopped); one that stays is paged
once, at the settle. A real Daemon ticked on a fake clock over real processes; NVML
unavailable (its library does not exist), as on that host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.fakenvml.fixtures import REPO

_SCRIPT = r"""
import atexit, json, os, signal, subprocess, sys, time
from pathlib import Path
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon

tmp, token, mode = sys.argv[1], sys.argv[2], sys.argv[3]
cfg = parse_config(
    f"nvml: {{library: '{tmp}/no-such-libnvidia-ml.so.1'}}\n"
    f"training: {{device_glob: '{tmp}/nodev[0-9]*'}}\n"
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
script.write_text("import os, time\nwhile not os.path.exists(os.environ['GO']):\n"
                  "    time.sleep(0.01)\n")
procs = []
atexit.register(lambda: [p.kill() for p in procs if p.poll() is None])
def start(n):
    go = Path(tmp) / f"go-{n}"  # in its environment: one command line, one signature
    p = subprocess.Popen([sys.executable, "-S", str(script)], env={**os.environ, "GO": str(go)})
    procs.append(p)
    deadline = time.monotonic() + 10
    while str(script).encode() not in Path(f"/proc/{p.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    p.go = go
    return p
def ended(p, how):
    if how == "exit":
        p.go.touch()
    else:
        p.send_signal(signal.SIGTERM)
    code = p.wait(30)
    pending[p.pid] = -code if code < 0 else code << 8  # the wait(2) status
t0 = 1_900_000_000.0
# The first run: a test harness's teardown kills it 2 s in (not paged: issue 33, G).
first = start(0)
d.tick(t0)
d.tick(t0 + 2)
ended(first, "signal")
d.tick(t0 + 3)
d.tick(t0 + 10)
# It comes back a minute later.
back = start(1)
d.tick(t0 + 60)
[resp] = [r for r in d.db.open_findings() if r.kind == "respawned"]
if mode == "gone":  # ended by itself 0.1 s after it was seen back
    ended(back, "exit")
    ticks = [60.1, 66, 70]
elif mode == "stays":
    for dt in (62, 64, 65, 70):
        d.tick(t0 + dt)
    ended(back, "exit")
    ticks = [71]
else:  # this product's terminate (of the finding named by `mode`) stops it at 62 s
    [fid] = [r.id for r in d.db.open_findings() if r.kind == mode and r.root_pid == back.pid]
    d.tick(t0 + 61)
    d.db.record_action("cli", "terminate", f"PID {back.pid}", "ok", {}, t0 + 62, finding_id=fid)
    ended(back, "signal")
    ticks = [62, 66, 70]
for dt in [*ticks, 400, 410]:
    d.tick(t0 + dt)
sent = [
    [event, kind, round(at - t0, 1)]
    for event, kind, at, root in d.db.conn.execute(
        "SELECT d.event, f.kind, d.created_at, f.root_pid FROM deliveries d"
        " JOIN findings f ON f.id = d.finding_id ORDER BY d.id"
    )
    if root in (first.pid, back.pid)
]
resp = d.db.finding(resp.id)
print(json.dumps({
    "sent": sent,
    "open": [r.kind for r in d.db.open_findings() if r.root_pid in (first.pid, back.pid)],
    "respawned_resolved": resp.resolved_at is not None,
    "listed": resp.last_alert_at is None,
    # This test's findings only: the daemon sees the whole host, and the counter
    # findings_not_alerted counted another test's short run too (4 == 3 under xdist).
    "not_alerted": d.db.conn.execute(
        "SELECT COUNT(*) FROM findings WHERE root_pid IN (?, ?) AND last_alert_at IS NULL",
        (first.pid, back.pid),
    ).fetchone()[0],
}))
"""


def _run(tmp_path: Path, mode: str) -> dict[str, Any]:
    token = f"train_ret_{uuid.uuid4().hex[:8]}"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path), token, mode],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def test_a_return_gone_within_the_settle_is_not_paged(tmp_path: Path) -> None:
    """J's case: a killed test-harness run back, gone 0.1 s after it was seen (ended by
    itself). Before (7f5f2b2): ``[["open", "respawned", 60.0], ["resolve", "respawned",
    400.0]]`` (held open by its run's finding waiting for a return); after: nothing
    sent; the respawned finding is filed, resolved, counted not alerted."""
    doc = _run(tmp_path, "gone")
    assert doc["sent"] == []
    assert doc["respawned_resolved"] and doc["listed"] and doc["open"] == []
    assert doc["not_alerted"] == 3  # the first run's, the return's respawned and run's


def test_a_return_that_stays_is_paged_once_at_the_settle(tmp_path: Path) -> None:
    """The seed's ghost: a killed run back and still running is paged once, 5 s (the
    settle) after the tick that saw it back; its resolve once its run, ended by itself
    at 71 s, was not back within the window for a return. Before: the open at 60.0 s
    (the return's tick): ``[["open", "respawned", 60.0], ["resolve", "respawned",
    400.0]]`` on 7f5f2b2."""
    doc = _run(tmp_path, "stays")
    assert doc["sent"] == [["open", "respawned", 65.0], ["resolve", "respawned", 400.0]]


@pytest.mark.parametrize("named", ["respawned", "rogue-job"])
def test_a_return_our_terminate_stopped_within_the_settle_gets_its_open(
    tmp_path: Path, named: str
) -> None:
    """Stopped by this product's own ``terminate`` 2 s after it came back (naming the
    respawned finding, or the return's rogue-job folded into it, as the enforcer
    does): the open held back is owed at its resolve, with the resolve (the record of
    what ran and was stopped); nothing about its rogue-job of its own. Before
    (7f5f2b2): ``[["open", "respawned", 60.0], ["resolve", "respawned", 62.0]]``."""
    doc = _run(tmp_path, named)
    assert doc["sent"] == [["open", "respawned", 62.0], ["resolve", "respawned", 62.0]]


def test_a_return_on_a_gpu_is_paged_once_its_runs_picture_is_complete(tmp_path: Path) -> None:
    """The same rule as a job's first page: the return's own rogue-job (folded into its
    respawned) on a GPU, the same at two looks in a row, completes the picture: the
    respawned is paged then (2 s after the return), not at the end of the settle; the
    rogue-job stays folded (one page)."""
    import dataclasses
    import signal

    from rogue_watchdog.model import GpuHeld
    from rogue_watchdog.policy.findings import job_findings
    from tests.unit.test_pages import T0, _daemon
    from tests.unit.test_return_pages import _job

    d = _daemon(tmp_path)
    on_gpu = [GpuHeld("GPU-aaaa", 0, 4 << 30)]
    first = dataclasses.replace(_job(6700, 670), gpus=on_gpu, gpu_uuids=["GPU-aaaa"])
    back = dataclasses.replace(first, root_pid=6701, pids=[6701], start_ticks=671)
    d.tracker.update([first], job_findings([first]), T0)
    d.tracker.update([], [], T0 + 1, exits={6700: signal.SIGTERM})  # someone's kill
    for dt in (60, 62, 64, 66):
        d.tracker.update([back], job_findings([back]), T0 + dt)
    rows = d.db.conn.execute(
        "SELECT d.event, f.kind, d.created_at FROM deliveries d JOIN findings f"
        " ON f.id = d.finding_id WHERE d.created_at >= ? ORDER BY d.id",
        (T0 + 60,),
    ).fetchall()
    assert [(e, k, at - T0) for e, k, at in rows] == [("open", "respawned", 62.0)]
