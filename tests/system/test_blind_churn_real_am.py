"""Issue 32, case 7 on a real Alertmanager (Debian's ``prometheus-alertmanager``, on a
loopback port with its own data directory): a rogue job seen by its command line holds
GPU 0; GPU 0 is lost for three ticks (the fake NVML, through the real pynvml path: the
device's handle query fails, NVML_ERROR_GPU_IS_LOST), then comes back. Alertmanager must
see one alert for the job, under one set of labels, firing throughout.

Before (4ec0a01), during the loss Alertmanager held the job's alert under labels without
``gpu`` (the one with ``gpu="0"`` posted resolved) and, once the GPU was back, under
``gpu="0"`` again (the other resolved): two resolve-and-fire pairs for a rogue that never
stopped.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, need_program, poll
from tests.fakenvml.fixtures import fake_nvml, library_path

pytestmark = pytest.mark.system

SCRIPT = r"""
import json, subprocess, sys, time
import httpx
from pathlib import Path
from tests.fakenvml.build import write_config
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.alerts import DeliveryWorker
from rogue_watchdog.daemon.loop import Daemon

lib, conf, tmp, am, token = sys.argv[1:6]
script = Path(tmp) / f"{token}.py"
script.write_text("import time\ntime.sleep(120)\n")
worker = subprocess.Popen([sys.executable, str(script)])
time.sleep(0.3)
GIB = 1 << 30
def devices(lost):
    dev = {"uuid": "GPU-am-lost", "total": 80 * GIB, "used": 4 * GIB,
           "processes": [{"pid": worker.pid, "mem": 4 * GIB}]}
    if lost:
        dev["handle_error"] = 15
    return {"devices": [dev]}
cfg = parse_config(
    f"nvml: {{library: '{lib}'}}\n"
    f"training: {{launchers: ['{token}'], device_glob: '{tmp}/nodev[0-9]*'}}\n"
    f"daemon: {{state_dir: '{tmp}/state'}}\n"
    f"alerts: {{sinks: [{{type: alertmanager, name: am, urls: ['{am}'], resend_s: 60}}]}}\n",
    "t.yaml",
)
d = Daemon(cfg, None)
d.scanner.gpu_source.retry_first_s = 0.0
w = DeliveryWorker(d.db, lambda: d.config.alerts, jitter=0.0)
steps = []
finding = None
# The first tick opens the finding; its first alert waits for a second look that is the
# same (alerts.settle_s), so the alert is active from the second tick on.
plan = [("settle", False), ("seen", False)] + [("lost", True)] * 3 + [("back", False)] * 2
for label, lost in plan:
    write_config(Path(conf), devices(lost))
    d.tick(time.time())
    w.deliver_due()
    if finding is None:
        (finding,) = [r[0] for r in d.db.conn.execute(
            "SELECT id FROM findings WHERE root_pid=? AND kind='rogue-job'", (worker.pid,))]
    active = httpx.get(f"{am}/api/v2/alerts", params={"active": "true"}, timeout=5).json()
    steps.append([label, sorted(
        json.dumps(a["labels"], sort_keys=True) for a in active
        if a["labels"].get("finding") == str(finding))])
worker.kill(); worker.wait()
print(json.dumps({"finding": finding, "steps": steps}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_lost_gpu_leaves_one_alert_under_one_set_of_labels(tmp_path: Path) -> None:
    need_program("prometheus-alertmanager", "gcc")
    port = free_port()
    (tmp_path / "am").mkdir()
    (tmp_path / "am" / "alertmanager.yml").write_text(
        "route: {receiver: none}\nreceivers:\n  - name: none\n"
    )
    log = open(tmp_path / "am.log", "wb")  # noqa: SIM115
    am = subprocess.Popen(
        ["prometheus-alertmanager", f"--config.file={tmp_path}/am/alertmanager.yml",
         f"--storage.path={tmp_path}/am/data", f"--web.listen-address=127.0.0.1:{port}",
         "--cluster.listen-address=", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"{base}/-/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        poll("Alertmanager ready", ready, 30)
        lib = fake_nvml(tmp_path, {"devices": []})
        token = f"amblind_{uuid.uuid4().hex[:8]}"
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(library_path(lib)), str(lib / "fake_nvml.conf"),
             str(tmp_path), base, token],
            capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        assert doc["steps"][0] == ["settle", []], doc["steps"]
        seen = {tuple(active) for label, active in doc["steps"] if label != "settle"}
        assert len(seen) == 1, doc["steps"]  # one alert, one set of labels, throughout
        [(labels_json,)] = seen
        labels = json.loads(labels_json)
        assert (labels["gpu"], labels["gpu_uuid"]) == ("0", "GPU-am-lost")
        assert labels["finding"] == str(doc["finding"])
    finally:
        am.terminate()
        am.wait(timeout=10)
        log.close()
