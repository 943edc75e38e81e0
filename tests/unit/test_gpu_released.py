"""A job that leaves its GPU after it was paged is not paged again (CI of 2026-12-06,
busy box: a cron ghost's run, seen between its CUDA teardown and its exit, was a
``remind`` at high whose labels had lost ``gpu``). The daemon's tick runs in a fresh
interpreter (pynvml keeps its library per process) against the fake libnvidia-ml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.conftest import need_program
from tests.fakenvml.fixtures import REPO, fake_nvml, library_path
from watchdog.daemon.tracking.blind import last_seen_gpus
from watchdog.model import Finding
from watchdog.state import FindingRecord

SCRIPT = r"""
import json, subprocess, sys, time
from pathlib import Path
from tests.fakenvml.build import write_config
from watchdog.config import parse_config
from watchdog.daemon.loop import Daemon

lib, conf, tmp, token = sys.argv[1:5]
script = Path(tmp) / f"{token}.py"
script.write_text("import time\ntime.sleep(120)\n")
worker = subprocess.Popen([sys.executable, str(script)])
time.sleep(0.3)
GIB = 1 << 30
def devices(held):
    procs = [{"pid": worker.pid, "mem": 6 * GIB}] if held else []
    return {"devices": [{"uuid": "GPU-rel-0", "total": 80 * GIB, "used": 6 * GIB,
                         "processes": procs}]}
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


def test_a_job_off_its_gpu_after_its_page_is_not_paged_again(tmp_path: Path) -> None:
    """Before (bd663fe): ``open`` on GPU 0, then a ``remind`` with no GPU (its labels
    had lost ``gpu``: Alertmanager resolved the page and fired another), then the
    resolve. Now: the ``open`` and the ``resolve``, both on GPU 0, and the message says
    where the job was last seen."""
    need_program("gcc")
    lib = fake_nvml(tmp_path, {"devices": []})
    token = f"gpurel_{uuid.uuid4().hex[:8]}"
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(library_path(lib)), str(lib / "fake_nvml.conf"),
         str(tmp_path), token],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["sent"] == [["rogue-job", "open", [0]], ["rogue-job", "resolve", [0]]]
    assert doc["message"].endswith("; last seen on GPU 0 (6.0 GiB), not held now")


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


def test_released_gpus_are_named_as_released_not_unseen() -> None:
    kept = last_seen_gpus(_rec([_gpu(0), _gpu(1)]), _sighting([_gpu(1)]), released=True)
    assert kept.details["gpus_released"] == [0]
    assert "gpus_unseen" not in kept.details
    assert [g["index"] for g in kept.details["gpus"]] == [0, 1]
    assert kept.message == (
        "rogue training job PID 42, user bob; last seen on GPU 0 (4.0 GiB), not held now"
    )
