"""Issue 32, case 7: blindness never resolves nor re-labels; nor does a GPU released after
the page (busy-box CI, 2026-12-06). A rogue job seen by its
command line holds GPU 0; GPU 0 is lost for 30 s (the fake libnvidia-ml: the device's
handle query fails, NVML_ERROR_GPU_IS_LOST), then comes back. The daemon's tick, in a
fresh interpreter (pynvml keeps its library per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from rogue_watchdog.daemon.tracking.blind import last_seen_gpus
from rogue_watchdog.daemon.tracking.reminders import alert_labels
from rogue_watchdog.model import Finding
from rogue_watchdog.state import FindingRecord
from tests.conftest import need_program
from tests.fakenvml.fixtures import REPO, fake_nvml, library_path

# A real worker process and a real Daemon over the fake libnvidia-ml, one tick at a
# time: the start of each test's script (test_gpu_released.py uses it too).
HEADER = r"""
import json, subprocess, sys, time
from pathlib import Path
from tests.fakenvml.build import write_config
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon

lib, conf, tmp, token = sys.argv[1:5]
script = Path(tmp) / f"{token}.py"
script.write_text("import time\ntime.sleep(120)\n")
worker = subprocess.Popen([sys.executable, str(script)])
time.sleep(0.3)
GIB = 1 << 30
"""
DAEMON = r"""
cfg = parse_config(
    f"nvml: {{library: '{lib}'}}\n"
    f"training: {{launchers: ['{token}'], device_glob: '{tmp}/nodev[0-9]*'}}\n"
    f"daemon: {{state_dir: '{tmp}/state'}}\n"
    "alerts: {reminder_after_s: 3600, sinks: [{type: alertmanager, name: am,"
    " urls: ['http://127.0.0.1:9/'], resend_s: 60}]}\n",
    "t.yaml",
)
d = Daemon(cfg, None)
d.scanner.gpu_source.retry_first_s = 0.0
t = 5_000_000.0
"""
SCRIPT = (
    HEADER
    + r"""
def devices(lost):
    dev = {"uuid": "GPU-lost-0", "total": 80 * GIB, "used": 4 * GIB,
           "processes": [{"pid": worker.pid, "mem": 4 * GIB}]}
    if lost:
        dev["handle_error"] = 15  # NVML_ERROR_GPU_IS_LOST: the device query fails
    return {"devices": [dev]}
"""
    + DAEMON
    + r"""
for i, lost in enumerate([False] * 2 + [True] * 7 + [False] * 3):  # lost for 30 s
    write_config(Path(conf), devices(lost))
    d.tick(t + 5 * i)
rows = d.db.conn.execute("SELECT id, kind, root_pid, resolved_at FROM findings").fetchall()
mine = [(i, k, r is None) for i, k, p, r in rows if p == worker.pid]
notes = [(i, k, r is None) for i, k, p, r in rows if k.startswith("gpu-")]
sent = []
for fid, ev, payload in d.db.conn.execute(
        "SELECT finding_id, event, payload_json FROM deliveries ORDER BY id"):
    f = json.loads(payload)["finding"]
    if f.get("root_pid") == worker.pid or f["kind"].startswith("gpu-"):
        change = f.get("change") or {}
        sent.append([f["kind"], ev, "labels_were" in change,
                     [g.get("index") for g in f["details"].get("gpus", [])]])
worker.kill(); worker.wait()
print(json.dumps({"mine": mine, "notes": notes, "sent": sent}))
"""
)


def run_daemon_script(tmp_path: Path, script: str, prefix: str) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter over the fake libnvidia-ml; its last
    stdout line, parsed."""
    need_program("gcc")
    lib = fake_nvml(tmp_path, {"devices": []})
    token = f"{prefix}_{uuid.uuid4().hex[:8]}"
    out = subprocess.run(
        [sys.executable, "-c", script, str(library_path(lib)), str(lib / "fake_nvml.conf"),
         str(tmp_path), token],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def test_a_gpu_lost_for_30_s_neither_relabels_nor_resolves(tmp_path: Path) -> None:
    """Before (4ec0a01): the rogue job's alerts were ``open`` on GPU 0, then a reminder
    whose labels had lost ``gpu`` (``labels_were`` set: Alertmanager resolved the alert
    under the old labels and fired one without a GPU), then another when the GPU came
    back (resolve-and-fire again), for a rogue that never stopped; and the one lost GPU
    made two ``gpu-query-failed`` notes (``cannot query GPU 0`` and ``no longer in
    NVML's device list``). Now: one ``open``, nothing else for the rogue (its GPU labels
    kept while GPU 0 cannot be seen), and one degraded note (open, then resolve)."""
    doc = run_daemon_script(tmp_path, SCRIPT, "blindchurn")
    [(_rogue, kind, still_open)] = doc["mine"]
    assert (kind, still_open) == ("rogue-job", True)
    assert doc["sent"] == [
        ["rogue-job", "open", False, [0]],
        ["gpu-query-failed", "open", False, []],
        ["gpu-query-failed", "resolve", False, []],
    ]
    assert [(k, o) for _, k, o in doc["notes"]] == [("gpu-query-failed", False)]


def _gpu(index: int) -> dict[str, object]:
    return {"index": index, "uuid": f"GPU-{index}", "memory_bytes": 4 << 30}


def _rec(gpus: list[dict[str, object]]) -> FindingRecord:
    return FindingRecord(
        id=7, fingerprint="fp", kind="rogue-job", severity="high", message="m", root_pid=42,
        details={"gpus": gpus, "gpu_indexes": [g["index"] for g in gpus]}, opened_at=0.0,
        last_seen=0.0, seen_count=1, resolved_at=None, last_alert_at=0.0,
    )  # fmt: skip


def _sighting(gpus: list[dict[str, object]]) -> Finding:
    return Finding(
        "rogue-job", "high", "rogue training job PID 42, user bob", root_pid=42,
        details={"gpus": gpus, "gpu_indexes": [g["index"] for g in gpus], "user": "bob"},
    )  # fmt: skip


def test_labels_are_those_of_the_last_sighting_while_blind() -> None:
    """The labels an alert is identified by come out the same as last alerted, whether
    every GPU of the job or one of them is unseen; a sighting that lost nothing is kept."""
    both = _rec([_gpu(0), _gpu(1)])
    labels = alert_labels("h", 7, _sighting([_gpu(0), _gpu(1)]))
    for now in ([], [_gpu(0)], [_gpu(1)]):
        kept = last_seen_gpus(both, _sighting(now))
        assert alert_labels("h", 7, kept) == labels
        assert kept.details["gpu_indexes"] == [0, 1]
    kept = last_seen_gpus(both, _sighting([_gpu(0)]))
    assert kept.details["gpus_unseen"] == [1]
    assert kept.message == (
        "rogue training job PID 42, user bob; last seen on GPU 1 (4.0 GiB), which cannot be"
        " seen now"
    )
    same = _sighting([_gpu(0), _gpu(1)])
    assert last_seen_gpus(both, same) is same


RELEASED = (
    HEADER
    + r"""
def devices(held):
    procs = [{"pid": worker.pid, "mem": 6 * GIB}] if held else []
    return {"devices": [{"uuid": "GPU-rel-0", "total": 80 * GIB, "used": 6 * GIB,
                         "processes": procs}]}
"""
    + DAEMON
    + r"""
# On GPU 0 for two ticks (paged), then off it for 100 s while the process lives on.
for i, held in enumerate([True] * 2 + [False] * 20):
    write_config(Path(conf), devices(held))
    d.tick(t + 5 * i)
message = d.db.conn.execute(
    "SELECT message FROM findings WHERE root_pid = ?", (worker.pid,)).fetchone()[0]
worker.kill(); worker.wait()
d.tick(t + 5 * 22)
d.tick(t + 5 * 23)
sent = []
for fid, ev, payload in d.db.conn.execute(
        "SELECT finding_id, event, payload_json FROM deliveries ORDER BY id"):
    f = json.loads(payload)["finding"]
    if f.get("root_pid") == worker.pid:
        sent.append([f["kind"], ev, [g.get("index") for g in f["details"].get("gpus", [])]])
print(json.dumps({"sent": sent, "message": message}))
"""
)


def test_a_job_off_its_gpu_after_its_page_is_not_paged_again(tmp_path: Path) -> None:
    """CI of 2026-12-06, busy box: a cron ghost's run, seen between its CUDA teardown
    and its exit, was a ``remind`` at high whose labels had lost ``gpu``. Before
    (bd663fe): ``open`` on GPU 0, then a ``remind`` with no GPU (Alertmanager resolved
    the page and fired another), then the resolve. Now: the ``open`` and the
    ``resolve``, both on GPU 0, and the message says where the job was last seen."""
    doc = run_daemon_script(tmp_path, RELEASED, "gpurel")
    assert doc["sent"] == [["rogue-job", "open", [0]], ["rogue-job", "resolve", [0]]]
    assert doc["message"].endswith("; last seen on GPU 0 (6.0 GiB), not held now")


def test_released_gpus_are_named_as_released_not_unseen() -> None:
    kept = last_seen_gpus(_rec([_gpu(0), _gpu(1)]), _sighting([_gpu(1)]), released=True)
    assert kept.details["gpus_released"] == [0]
    assert "gpus_unseen" not in kept.details
    assert [g["index"] for g in kept.details["gpus"]] == [0, 1]
    assert kept.message == (
        "rogue training job PID 42, user bob; last seen on GPU 0 (4.0 GiB), not held now"
    )
