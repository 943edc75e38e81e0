"""httpx is imported and its client made at the first POST, and prometheus_client only
where metrics are served (issue 34: about 9 MiB of the idle daemon's memory with only
a log sink and no metrics); an unused client closes without one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rogue_watchdog.daemon.alerts import http


def test_the_daemon_with_a_log_sink_and_no_metrics_imports_neither(tmp_path: Path) -> None:
    code = f"""
import sys
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.assemble import attach_parts, build_alert_workers
from rogue_watchdog.daemon.loop import Daemon
cfg = parse_config(
    "nvml: {{enabled: false}}\\n"
    "daemon: {{state_dir: {tmp_path}/state, events: off}}\\n"
    "alerts: {{sinks: [{{type: log, path: {tmp_path}/alerts.log}}]}}\\n",
    "t.yaml",
)
d = Daemon(cfg, None)
attach_parts(d)
workers = build_alert_workers(d)
d.tick(1_900_000_000.0)
workers[0].deliver_sink("log")
print(sorted(m for m in sys.modules if m.split(".")[0] in ("httpx", "prometheus_client")))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_an_unused_client_closes_without_making_one() -> None:
    client = http.new_client()
    client.close()
    assert client._client is None  # type: ignore[attr-defined]
