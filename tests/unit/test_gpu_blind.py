"""A GPU source going blind is not a job exiting: the daemon's tick against the fake
libnvidia-ml (loaded through the real pynvml path), in a fresh interpreter per test since
pynvml keeps its library per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import need_program
from tests.fakenvml.fixtures import REPO, fake_nvml, library_path

GIB = 1 << 30

_SCRIPT = r"""
import json, os, subprocess, sys, time
import structlog
structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
from pathlib import Path
from tests.fakenvml.build import write_config
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon

lib, conf, state, tmp = sys.argv[1:5]
worker = subprocess.Popen([sys.executable, f"{tmp}/worker.py"])
time.sleep(0.3)
GIB = 1 << 30
def spec(**dev):
    base = {"uuid": "GPU-aaaa", "total": 80 * GIB, "used": 4 * GIB,
            "processes": [{"pid": worker.pid, "mem": 4 * GIB}]}
    return {"devices": [{**base, **dev}]}

def make():
    cfg = parse_config(
        f"nvml: {{library: '{lib}'}}\n"
        f"training: {{device_glob: '{tmp}/nodev[0-9]*'}}\n"
        f"daemon: {{state_dir: '{state}'}}\n"
        "alerts: {reminder_after_s: 600}\n",
        "t.yaml",
    )
    d = Daemon(cfg, None)
    d.scanner.gpu_source.retry_first_s = 0.0  # the 1 s init back-off, without waiting
    return d

steps = []
def step(d, label, now, **dev):
    top = dev.pop("top", {})
    write_config(Path(conf), spec(**dev) | top)
    d.tick(now)
    rows = d.db.conn.execute(
        "SELECT id, kind, root_pid, resolved_at FROM findings ORDER BY id"
    ).fetchall()
    mine = [(i, k, r is None) for i, k, p, r in rows
            if p == worker.pid or k == "gpu-processes-hidden"]
    jobs = [j.root_pid for j in d.last.result.jobs if j.root_pid == worker.pid]
    steps.append([label, jobs, d.last.result.gpu_blind, mine])

t = 3_000_000.0
d = make()
step(d, "seen", t)
step(d, "no-permission", t + 2, proc_error=4)
step(d, "no-permission again", t + 4, proc_error=4)
step(d, "back", t + 6)
step(d, "count lost", t + 8, top={"count_error": 15})
step(d, "init fails", t + 10, top={"init_error": 9})
step(d, "init back", t + 12)
d.db.close()
d = make()  # a daemon restart while NVML is blind
step(d, "restart, blind", t + 14, top={"count_error": 15})
step(d, "restart, back", t + 16)
step(d, "blind again", t + 18, proc_error=4)
worker.kill(); worker.wait()
step(d, "exited while blind", t + 20, proc_error=4)
print(json.dumps([worker.pid, steps]))
"""


def test_visibility_blip_is_not_an_exit_nor_a_respawn(tmp_path: Path) -> None:
    """NVML refuses the process lists (NO_PERMISSION) for two ticks, loses the device
    count, fails nvmlInit once, and the daemon restarts while NVML is blind: the job (same
    PID, same start time) keeps its one rogue-job finding open throughout, never gets a
    `respawned`, and resolves only once its process is seen gone."""
    need_program("gcc")
    (tmp_path / "worker.py").write_text("import time\ntime.sleep(120)\n")
    lib = fake_nvml(tmp_path, {})
    state = tmp_path / "state"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(library_path(lib)), str(lib / "fake_nvml.conf"),
         str(state), str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    pid, steps = json.loads(out.stdout)
    # the id of the job's rogue-job finding (other jobs on the host get findings too)
    rogue = next(i for i, k, _ in steps[0][3] if k == "rogue-job")
    got = {label: (jobs, blind, [tuple(x) for x in found]) for label, jobs, blind, found in steps}
    hidden_ids = sorted({i for _, _, _, f in steps for i, k, _ in f if k == "gpu-processes-hidden"})
    assert [k for _, _, _, f in steps for _, k, _ in f].count("respawned") == 0
    assert got["seen"] == ([pid], False, [(rogue, "rogue-job", True)])
    first_hidden = hidden_ids[0]
    assert got["no-permission"] == (
        [],
        True,
        [(rogue, "rogue-job", True), (first_hidden, "gpu-processes-hidden", True)],
    )
    assert got["no-permission again"] == got["no-permission"]
    assert got["back"] == (
        [pid],
        False,
        [(rogue, "rogue-job", True), (first_hidden, "gpu-processes-hidden", False)],
    )
    for label in ("count lost", "init fails"):
        jobs, blind, found = got[label]
        assert (jobs, blind) == ([], True), label
        assert (rogue, "rogue-job", True) in found, label
    assert got["init back"][0:2] == ([pid], False)
    assert (rogue, "rogue-job", True) in got["init back"][2]
    assert got["restart, blind"][0:2] == ([], True)
    assert (rogue, "rogue-job", True) in got["restart, blind"][2]
    assert got["restart, back"][0:2] == ([pid], False)
    assert (rogue, "rogue-job", True) in got["restart, back"][2]
    assert (rogue, "rogue-job", True) in got["blind again"][2]
    # Seen gone (no /proc/PID), even though NVML is still blind: resolved.
    assert (rogue, "rogue-job", False) in got["exited while blind"][2]


_VANISH = r"""
import json, subprocess, sys, time
from pathlib import Path
from tests.fakenvml.build import write_config
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon

lib, conf, state, tmp = sys.argv[1:5]
worker = subprocess.Popen([sys.executable, f"{tmp}/worker.py"])
time.sleep(0.3)
GIB = 1 << 30
gpu0 = {"uuid": "GPU-0000", "total": 80 * GIB, "used": 0}
gpu1 = {"uuid": "GPU-1111", "total": 80 * GIB, "used": 4 * GIB,
        "processes": [{"pid": worker.pid, "mem": 4 * GIB}]}
cfg = parse_config(
    f"nvml: {{library: '{lib}'}}\n"
    f"training: {{device_glob: '{tmp}/nodev[0-9]*'}}\n"
    f"daemon: {{state_dir: '{state}'}}\n"
    "alerts: {reminder_after_s: 5}\n",
    "t.yaml",
)
d = Daemon(cfg, None)
steps = []
t = 4_000_000.0
for i, devs in enumerate([[gpu0, gpu1]] + [[gpu0]] * 5 + [[gpu0, gpu1]]):
    write_config(Path(conf), {"devices": devs})
    d.tick(t + 5 * i)
    rows = d.db.conn.execute(
        "SELECT id, kind, root_pid, resolved_at, message FROM findings ORDER BY id"
    ).fetchall()
    steps.append([
        [(i_, k, r is None) for i_, k, p, r, m in rows if p == worker.pid],
        [(i_, m, r is None) for i_, k, p, r, m in rows if k == "gpu-query-failed"],
        d.last.result.gpu_blind,
    ])
events = [r[0] for r in d.db.conn.execute(
    "SELECT payload_json FROM deliveries ORDER BY id").fetchall()]
worker.kill(); worker.wait()
print(json.dumps([worker.pid, steps, [json.loads(e)["event"] for e in events
    if json.loads(e)["finding"]["root_pid"] == worker.pid]]))
"""


def test_a_gpu_leaving_the_device_list_is_blindness_not_an_exit(tmp_path: Path) -> None:
    """Trust IV case 7: a GPU that dropped out of NVML's device list for 20 s resolved
    the finding of a live NVML-only process, reopened it under a new id, and nothing
    said the GPU vanished. Now: one finding, open throughout, no resolve and no reopen;
    a gpu-query-failed finding names the GPU while it is gone."""
    need_program("gcc")
    (tmp_path / "worker.py").write_text("import time\ntime.sleep(120)\n")
    lib = fake_nvml(tmp_path, {})
    out = subprocess.run(
        [sys.executable, "-c", _VANISH, str(library_path(lib)), str(lib / "fake_nvml.conf"),
         str(tmp_path / "state"), str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    _pid, steps, events = json.loads(out.stdout)
    (rogue,) = [i for i, k, _ in steps[0][0] if k == "rogue-job"]
    for mine, _vanished, _blind in steps:
        assert mine == [[rogue, "rogue-job", True]]  # never resolved, never a new id
    for _mine, vanished, blind in steps[1:6]:
        assert blind is True
        assert [(m, o) for _, m, o in vanished] == [
            (
                "GPU 1 (GPU-1111) is no longer in NVML's device list: its processes cannot "
                "be seen, so jobs on it are held open until their processes are seen to exit",
                True,
            )
        ]
    assert [o for _, _, o in steps[6][1]] == [False]  # back: resolved
    assert steps[6][2] is False
    assert "resolve" not in events and events.count("open") == 1
