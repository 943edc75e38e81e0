"""Rogue services on real processes: a spawned train_*.py listening on loopback ports."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rogue_watchdog.config import parse_config
from rogue_watchdog.config.services import SanctionedPort, ServiceSettings
from rogue_watchdog.model import Finding, ScanResult
from rogue_watchdog.policy.services import (
    service_findings,
    service_pids,
)
from rogue_watchdog.scan import Scanner, read_listens
from rogue_watchdog.sources.sockets import Listen, listening_for
from tests.conftest import Spawned

# The trainer listens on TCP 127.0.0.1 and UDP ::1 (when the host has IPv6), starts a
# non-training helper that listens on its own TCP port, and writes all ports to argv[1].
TRAINER = """import json, os, socket, subprocess, sys, time
tcp = socket.socket(); tcp.bind(("127.0.0.1", 0)); tcp.listen()
ports = {"tcp": tcp.getsockname()[1], "udp6": None}
try:
    udp = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); udp.bind(("::1", 0))
    ports["udp6"] = udp.getsockname()[1]
except OSError:
    pass
helper = subprocess.Popen([sys.executable, "-c",
    "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen();"
    " print(s.getsockname()[1], flush=True); time.sleep(120)"], stdout=subprocess.PIPE)
ports["helper"] = int(helper.stdout.readline())
ports["helper_pid"] = helper.pid
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump(ports, fh)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""


def _start(spawned: Spawned, tmp_path: Path) -> tuple[int, dict[str, int]]:
    script = tmp_path / "train_listen.py"
    script.write_text(TRAINER)
    out = tmp_path / "ports.json"
    pid = spawned.start([sys.executable, str(script), str(out)]).pid
    deadline = time.monotonic() + 20
    while not out.exists():
        assert time.monotonic() < deadline, "trainer did not report its ports"
        time.sleep(0.05)
    return pid, json.loads(out.read_text())


def _scan(extra: str = "") -> tuple[Scanner, ScanResult]:
    scanner = Scanner(parse_config("nvml: {enabled: false}\n" + extra, "t.yaml"))
    return scanner, scanner.scan()


def _services(scanner: Scanner, result: ScanResult, settings: ServiceSettings) -> list[Finding]:
    return service_findings(
        result.jobs, read_listens(result.jobs, scanner.table, None, "/proc"), settings
    )


def test_rogue_trainer_and_its_helper_report_their_exact_ports(
    spawned: Spawned, tmp_path: Path
) -> None:
    pid, ports = _start(spawned, tmp_path)
    helper = ports["helper_pid"]
    want = [Listen(pid, "tcp", "127.0.0.1", ports["tcp"])]
    if ports["udp6"] is not None:
        want.append(Listen(pid, "udp", "::1", ports["udp6"]))
    want.append(Listen(helper, "tcp", "127.0.0.1", ports["helper"]))
    got = [(x.pid, x.proto, x.address, x.port) for x in listening_for([pid, helper])]
    assert got == sorted((x.pid, x.proto, x.address, x.port) for x in want)

    scanner, result = _scan()
    job = next(j for j in result.jobs if j.root_pid == pid)
    assert job.verdict == "rogue"
    assert helper in service_pids(job, scanner.table)  # a descendant of the root

    mine = [f for f in _services(scanner, result, ServiceSettings()) if f.root_pid == pid]
    assert len(mine) == 1
    f = mine[0]
    assert (f.kind, f.severity) == ("rogue-service", "high")
    assert f.details["listening"] == [
        {"proto": x.proto, "address": x.address, "port": x.port, "pid": x.pid} for x in sorted(want)
    ]
    assert f"PID {pid} listening on 127.0.0.1:{ports['tcp']}/tcp" in f.message
    assert f"PID {helper} listening on 127.0.0.1:{ports['helper']}/tcp" in f.message
    assert f"started its own training run: rogue job PID {pid}" in f.message


def test_sanctioned_ports_are_not_reported(spawned: Spawned, tmp_path: Path) -> None:
    pid, ports = _start(spawned, tmp_path)
    scanner, result = _scan()
    settings = ServiceSettings(
        sanctioned_ports=(
            SanctionedPort("trainer-api", ports["tcp"], address="127.0.0.1", proto="tcp"),
            SanctionedPort("helper", ports["helper"]),
        )
    )
    mine = [f for f in _services(scanner, result, settings) if f.root_pid == pid]
    if ports["udp6"] is None:
        assert mine == []
        return
    assert len(mine) == 1
    assert mine[0].details["listening"] == [
        {"proto": "udp", "address": "::1", "port": ports["udp6"], "pid": pid}
    ]
    everything = ServiceSettings(
        sanctioned_ports=(*settings.sanctioned_ports, SanctionedPort("dns-ish", ports["udp6"]))
    )
    assert [f for f in _services(scanner, result, everything) if f.root_pid == pid] == []


def test_sanctioned_job_listening_is_not_a_rogue_service(spawned: Spawned, tmp_path: Path) -> None:
    pid, _ = _start(spawned, tmp_path)
    rule = (
        "sanctioned:\n  - name: listener\n    cmdline: '*train_listen.py*'\n"
        "    origin: {any: true}\n"
    )
    scanner, result = _scan(rule)
    job = next(j for j in result.jobs if j.root_pid == pid)
    assert job.verdict == "sanctioned"
    assert [f for f in _services(scanner, result, ServiceSettings()) if f.root_pid == pid] == []


def test_loopback_socket_outside_any_job_is_not_reported(spawned: Spawned) -> None:
    # A listener that is not training (no launcher, no GPU) is no job: nothing to say.
    code = (
        "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); time.sleep(60)"
    )
    p = spawned.start([sys.executable, "-c", code])
    time.sleep(0.5)
    scanner, result = _scan()
    assert all(p.pid not in j.pids for j in result.jobs)
    found = _services(scanner, result, ServiceSettings())
    assert all(p.pid not in [x["pid"] for x in f.details["listening"]] for f in found)
