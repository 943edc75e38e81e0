"""Issue 35: page only for what a person must act on.

Each handed case as a test of its exact value (docs/first-week.md, "Pages"):

- case 1: a short CUDA job run every 5 s from a user's loop, ending by itself each time,
  paged ``rogue-job`` + ``respawned`` on every run; now it is one periodic finding and
  one page for the whole loop;
- case 4: NVML memory appearing a tick after the open made a ``remind`` 2 s after the
  ``open``; now the open waits for its first complete picture (``alerts.settle_s``);
- case 5: during ``daemon.learn_until`` ``rogue-service`` stayed ``high``.

The daemon's ticks run on real processes with a fake clock; how each run ended is what
the kernel's exit event says (``Daemon.exit_statuses``, fed here from ``wait``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from tests.conftest import Spawned, need_program, poll
from tests.fakenvml.fixtures import REPO, fake_nvml, library_path
from watchdog.config import parse_config
from watchdog.daemon.loop import Daemon

T0 = 1_900_000_000.0
PROBE = "import sys, time\ntime.sleep(float(sys.argv[1]))\n"


def _daemon(tmp_path: Path, extra: str = "") -> Daemon:
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'{extra}}}\n"
        f"alerts:\n  sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]\n",
        "t.yaml",
    )
    return Daemon(cfg, None)


def pages(d: Daemon, mark: str, pids: Collection[int] = ()) -> list[tuple[str, str, str]]:
    """``(event, kind, severity)`` of every spooled open or remind naming ``mark`` or
    about one of ``pids``."""
    rows = d.db.conn.execute(
        "SELECT event, payload_json FROM deliveries WHERE event IN ('open', 'remind') ORDER BY id"
    ).fetchall()
    out = []
    for event, payload in rows:
        doc = json.loads(payload)
        if mark in payload or doc["finding"]["root_pid"] in pids:
            out.append((event, doc["finding"]["kind"], doc["finding"]["severity"]))
    return out


def _wait_status(p: subprocess.Popen[bytes]) -> int:
    """The wait(2) status the kernel's exit event carries for ``p``."""
    code = p.wait(30)
    return -code if code < 0 else code << 8


def _visible(pid: int, script: Path) -> bool:
    try:
        return str(script).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class ExitFeed:
    """What the proc connector hands the daemon: exit statuses since the last tick."""

    def __init__(self) -> None:
        self.pending: dict[int, int] = {}

    def __call__(self) -> dict[int, int]:
        out, self.pending = self.pending, {}
        return out


def _loop(
    spawned: Spawned, d: Daemon, script: Path, feed: ExitFeed, runs: int, kill_at: int = -1
) -> list[int]:
    """``runs`` runs of ``script`` 5 s apart, ticked while each runs and after it ended
    (by itself, or by SIGTERM for run ``kill_at``)."""
    pids = []
    for i in range(runs):
        p = spawned.start([sys.executable, "-S", str(script), "30" if i == kill_at else "0.2"])
        poll("the run to exec", lambda p=p: _visible(p.pid, script), 10, 0.01)
        pids.append(p.pid)
        d.tick(T0 + 5 * i)
        if i == kill_at:
            p.send_signal(signal.SIGTERM)
        feed.pending[p.pid] = _wait_status(p)
        d.tick(T0 + 5 * i + 0.5)
    return pids


def test_case1_a_loop_of_short_runs_is_one_periodic_finding_and_one_page(
    spawned: Spawned, tmp_path: Path
) -> None:
    """Case 1: before, 23 pages for 12 runs (rogue-job, then rogue-job + respawned per
    run); after, one periodic finding with its count, cadence and origin, one page."""
    d = _daemon(tmp_path)
    feed = ExitFeed()
    d.exit_statuses = feed  # type: ignore[attr-defined,unused-ignore]
    script = tmp_path / "train_probe.py"
    script.write_text(PROBE)
    pids = _loop(spawned, d, script, feed, 12)
    got = pages(d, str(script), pids)
    assert len(got) == 1, got
    assert got == [("open", "rogue-job", "high")]
    rows = [f for f in d.db.open_findings() if str(script) in f.message]
    assert len(rows) == 1
    periodic = rows[0].details["periodic"]
    assert (periodic["runs"], periodic["cadence_s"]) == (11, 5.0)
    assert rows[0].root_pid is None and rows[0].details["origin"]["kind"] in ("shell", "orphan")
    assert rows[0].message.startswith("periodic: 11 runs about every 5s since ")


def test_a_killed_run_of_a_periodic_loop_comes_back_paged_at_once(
    spawned: Spawned, tmp_path: Path
) -> None:
    """``respawned`` keeps its meaning inside a loop: the run after one stopped by a
    signal is paged (once), the loop stays one finding."""
    d = _daemon(tmp_path)
    feed = ExitFeed()
    d.exit_statuses = feed  # type: ignore[attr-defined,unused-ignore]
    script = tmp_path / "train_loop.py"
    script.write_text(PROBE)
    pids = _loop(spawned, d, script, feed, 6, kill_at=3)
    got = pages(d, str(script), pids)
    assert got == [("open", "rogue-job", "high"), ("open", "respawned", "high")]
    back = [f for f in d.db.findings() if f.kind == "respawned"]
    assert [f.root_pid for f in back] == [pids[4]]


def test_without_exit_evidence_every_return_is_still_a_respawn(
    spawned: Spawned, tmp_path: Path
) -> None:
    """No exit event (polling only): nothing says the run ended by itself, so each
    return is ``respawned``, as before: never quieter without evidence."""
    d = _daemon(tmp_path)
    script = tmp_path / "train_blind.py"
    script.write_text(PROBE)
    pids = _loop(spawned, d, script, ExitFeed(), 3)
    kinds = [k for _e, k, _s in pages(d, str(script), pids)]
    assert kinds.count("respawned") == 2


_CASE4 = r"""
import json, subprocess, sys, time
from pathlib import Path
from tests.fakenvml.build import write_config
from watchdog.config import parse_config
from watchdog.daemon.loop import Daemon

lib, conf, state, tmp = sys.argv[1:5]
script = Path(tmp) / "train_settle.py"
script.write_text("import time\ntime.sleep(60)\n")
worker = subprocess.Popen([sys.executable, str(script)])
time.sleep(0.3)
GIB = 1 << 30
def nvml(listed):
    procs = [{"pid": worker.pid, "mem": 4 * GIB}] if listed else []
    write_config(Path(conf), {"devices": [{"uuid": "GPU-aaaa", "total": 80 * GIB,
                                           "used": 4 * GIB if listed else 0,
                                           "processes": procs}]})
cfg = parse_config(
    f"nvml: {{library: '{lib}'}}\n"
    f"training: {{device_glob: '{tmp}/nodev[0-9]*'}}\n"
    f"daemon: {{state_dir: '{state}'}}\n"
    f"alerts: {{sinks: [{{type: log, path: '{tmp}/alerts.log'}}]}}\n",
    "t.yaml",
)
d = Daemon(cfg, None)
d.scanner.gpu_source.retry_first_s = 0.0
t = 1_900_000_000.0
for dt, listed in ((0, False), (2, True), (4, True), (6, True), (30, True)):
    nvml(listed)
    d.tick(t + dt)
rows = d.db.conn.execute(
    "SELECT event, payload_json FROM deliveries WHERE event IN ('open', 'remind') ORDER BY id"
).fetchall()
out = []
for event, payload in rows:
    doc = json.loads(payload)
    if str(script) in payload:
        f = doc["finding"]
        out.append([event, f["kind"], f["details"].get("gpu_indexes"), doc["time"]])
worker.kill(); worker.wait()
print(json.dumps(out))
"""


def test_case4_memory_a_tick_later_is_part_of_the_open_not_a_remind(tmp_path: Path) -> None:
    """Case 4: before, ``open`` then ``remind`` 2 s later (the job now held GPU 0): two
    pages for one incident. After: one ``open``, naming GPU 0, once the picture held
    still for a look (here at +4 s, within ``alerts.settle_s``)."""
    need_program("gcc")
    lib = fake_nvml(tmp_path, {})
    out = subprocess.run(
        [sys.executable, "-c", _CASE4, str(library_path(lib)), str(lib / "fake_nvml.conf"),
         str(tmp_path / "state"), str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    got: list[list[Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    assert [(e, k, g) for e, k, g, _at in got] == [("open", "rogue-job", [0])], got


_SERVICE = """import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(120)
"""


def test_case5_learning_downgrades_rogue_service_too(spawned: Spawned, tmp_path: Path) -> None:
    """Case 5: before, a rogue trainer listening on 127.0.0.1 during ``learn_until`` gave
    ``rogue-job`` info but ``rogue-service`` high; after, both info."""
    d = _daemon(tmp_path, ", learn_until: '2033-05-18T03:33:20+00:00'")
    script = tmp_path / "train_serving.py"
    script.write_text(_SERVICE)
    port = tmp_path / "port"
    pid = spawned.start([sys.executable, str(script), str(port)]).pid
    poll("the port", port.exists, 20, 0.05)
    time.sleep(0.1)
    d.tick(T0)
    mine = sorted((f.kind, f.severity) for f in d.db.open_findings() if f.root_pid == pid)
    assert mine == [("rogue-job", "info"), ("rogue-service", "info")]
    assert [p for p in pages(d, str(script)) if p[2] != "info"] == []
