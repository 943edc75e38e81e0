"""Degraded components say so and clear on recovery (issue 32, case 6)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.alerts import DeliveryWorker
from tests.conftest import REPO


def test_alerts_degraded_clears_when_rounds_succeed_again(tmp_path: Path) -> None:
    """Before: ``alerts`` stayed degraded, with its warning finding, after deliveries
    succeeded again."""
    cfg = parse_config(f"daemon: {{state_dir: '{tmp_path}'}}\n", "t.yaml")
    degraded: dict[str, str] = {}
    from rogue_watchdog.state import StateDB

    w = DeliveryWorker(StateDB(tmp_path), lambda: cfg.alerts, degraded=degraded)
    w._round_failed("log", RuntimeError("database is locked"))
    w._round_failed("", RuntimeError("database is locked"))
    assert degraded == {"alerts": "RuntimeError: database is locked"}
    w._round_ok("log")
    assert "alerts" in degraded  # the supervisor's last round still failed
    w._round_ok("")
    assert degraded == {}


def test_an_unusable_nvml_library_at_start_is_degraded(tmp_path: Path) -> None:
    """Before: a garbage libnvidia-ml was only an info finding, nothing degraded."""
    lib = tmp_path / "libnvidia-ml.so.1"
    lib.write_bytes(b"this is not an ELF file\n" * 10)
    code = textwrap.dedent(
        f"""
        from rogue_watchdog.config import parse_config
        from rogue_watchdog.daemon.loop import Daemon
        cfg = parse_config(
            "nvml: {{library: '{lib}'}}\\n"
            "daemon: {{state_dir: '{tmp_path}/state'}}\\n", "t.yaml")
        d = Daemon(cfg, None)
        d.tick(1_000_000.0)
        print("PARTS", sorted(d.degraded))
        print("NVML", d.degraded.get("nvml", ""))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    said = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out if " " in line}
    assert said["PARTS"] == "['nvml']"
    assert said["NVML"] == f"NVML library not found: {lib}: invalid ELF header"
