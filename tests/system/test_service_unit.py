"""The shipped unit file: what systemd must see, and its measured exposure."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import REPO, need_program

pytestmark = pytest.mark.system

UNIT_FILE = REPO / "systemd" / "rogue-watchdog.service"
MAX_EXPOSURE = 4.5


def settings() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in UNIT_FILE.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_service_settings() -> None:
    s = settings()
    for key, value in {
        "Type": "notify",
        "NotifyAccess": "main",
        "WatchdogSec": "60s",
        "Restart": "on-failure",
        "ExecStart": (
            "/opt/rogue-watchdog/bin/rogue-watchdog run --config /etc/rogue-watchdog/config.yaml"
        ),
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "RuntimeDirectory": "rogue-watchdog",
        # sanctioned.json and outage.json survive a restart during a storage outage, a
        # stop then a start too (test_service_systemd checks it with systemd).
        "RuntimeDirectoryPreserve": "yes",
        "StateDirectory": "rogue-watchdog",
        "ProtectSystem": "strict",
        "ProtectHome": "read-only",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
        # hidepid=invisible hides what the daemon cannot ptrace; CAP_SYS_PTRACE: nothing.
        "ProtectProc": "invisible",
        "ProcSubset": "all",
    }.items():
        assert s.get(key) == [value], key
    caps = set(s["CapabilityBoundingSet"][0].split())
    assert caps == {
        "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_DAC_OVERRIDE", "CAP_KILL", "CAP_CHOWN",
        "CAP_FOWNER", "CAP_NET_ADMIN",
    }  # fmt: skip
    assert "PrivateUsers" not in s and "PrivateDevices" not in s


def test_exposure_within_budget() -> None:
    need_program("systemd-analyze")
    res = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(UNIT_FILE)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    m = re.search(r"Overall exposure level for rogue-watchdog\.service: (\d+\.\d+)", res.stdout)
    assert m, res.stdout[-2000:] + res.stderr
    exposure = float(m.group(1))
    assert exposure <= MAX_EXPOSURE, res.stdout
    assert exposure == 2.9  # docs/install.md quotes this figure: update both together
