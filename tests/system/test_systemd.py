"""Real systemd (booted in a PID + mount namespace) starting fake trainers; ``scan`` runs
inside that namespace and must name the unit, its timer and schedule, and judge the jobs.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.conftest import REPO
from tests.system.nsystemd import NamespacedSystemd, nsystemd

__all__ = ["nsystemd"]  # the imported session fixture

pytestmark = pytest.mark.system

TRAINER = "import time\ntime.sleep(600)\n"


def next_sunday_0200(now: datetime) -> datetime:
    """First Sunday 02:00:00 local time strictly after ``now`` (aware, local zone)."""
    local = now.astimezone()
    day = local.replace(hour=2, minute=0, second=0, microsecond=0)
    day += timedelta(days=(6 - day.weekday()) % 7)
    if day <= local:
        day += timedelta(days=7)
    return day


def scan_inside(sd: NamespacedSystemd, config: str) -> dict[str, Any]:
    """Run ``python -m rogue_watchdog scan --json`` in the namespace, as an operator there would."""
    cfg = sd.write_file("config.yaml", config)
    res = sd.nsenter(
        sys.executable, "-m", "rogue_watchdog", "scan", "--json", "--config", str(cfg),
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TZ": "UTC"},
        check=False,
    )  # fmt: skip
    assert res.returncode in (0, 1, 2), res.stderr  # non-zero may mean "rogue found"
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def jobs_by_unit(data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for job in data["jobs"]:
        out.setdefault(job["origin"].get("unit") or "", []).append(job)
    return out


@pytest.fixture
def weekly(nsystemd: NamespacedSystemd) -> Iterator[NamespacedSystemd]:
    """The incident's shape: a weekly timer (plus OnActiveSec=1 to fire now) → trainer."""
    sd = nsystemd
    script = sd.write_file("train_fake.py", TRAINER)
    sd.add_unit(
        "nightly-retrain.service",
        "[Unit]\nDefaultDependencies=no\n\n[Service]\n"
        f"ExecStart=/usr/bin/python3 {script} --retired-model v1\nRestart=on-failure\n",
        reload=False,
    )
    sd.add_unit(
        "nightly-retrain.timer",
        "[Unit]\nDefaultDependencies=no\n\n[Timer]\nOnCalendar=Sun *-*-* 02:00:00\nOnActiveSec=1\n",
    )
    sd.systemctl("start", "nightly-retrain.timer")
    try:
        sd.wait_main_pid("nightly-retrain.service")
        yield sd
    finally:
        sd.stop_units(["nightly-retrain.timer", "nightly-retrain.service"])


def test_timer_started_service_names_unit_timer_schedule(weekly: NamespacedSystemd) -> None:
    sd = weekly
    data = scan_inside(sd, "nvml:\n  enabled: false\n")
    jobs = jobs_by_unit(data)["nightly-retrain.service"]
    assert len(jobs) == 1
    job = jobs[0]
    origin = job["origin"]
    assert job["verdict"] == "rogue"
    assert origin["kind"] == "systemd"
    assert origin["unit"] == "nightly-retrain.service"
    assert origin["unit_file"] == str(sd.unit_dir / "nightly-retrain.service")
    assert origin["timer"] == "nightly-retrain.timer"
    assert origin["timer_schedule"] == "OnCalendar=Sun *-*-* 02:00:00; OnActiveSec=1"
    scanned_at = datetime.fromisoformat(data["time"])
    assert datetime.fromisoformat(origin["next_run"]) == next_sunday_0200(scanned_at)
    assert origin["restart"] == "on-failure"
    assert origin["remediation"] == (
        "systemctl disable --now nightly-retrain.timer && systemctl stop "
        "nightly-retrain.service && systemctl mask nightly-retrain.service"
    )
    ev = "\n".join(origin["evidence"])
    assert "started by nightly-retrain.timer [TriggeredBy (systemctl show)]" in ev
    assert f"ExecStart=`/usr/bin/python3 {sd.sandbox}/train_fake.py --retired-model v1`" in ev
    # The root PID is the service's main PID, as the namespace sees it.
    assert job["root_pid"] == int(sd.show("nightly-retrain.service", "MainPID")["MainPID"])


@pytest.fixture
def shards(nsystemd: NamespacedSystemd) -> Iterator[NamespacedSystemd]:
    """Three instances of a sanctioned template unit, started one after another."""
    sd = nsystemd
    script = sd.write_file("train_shard.py", TRAINER)
    sd.add_unit(
        "train@.service",
        "[Unit]\nDefaultDependencies=no\n\n[Service]\n"
        f"ExecStart=/usr/bin/python3 {script} --shard %i\n",
    )
    units = [f"train@{i}.service" for i in (1, 2, 3)]
    try:
        for u in units:
            sd.systemctl("start", u)
            sd.wait_main_pid(u)
        yield sd
    finally:
        sd.stop_units(units)


ALLOW = """
nvml:
  enabled: false
sanctioned:
  - name: shard-pipeline
    cmdline: "/usr/bin/python3 *train_shard.py --shard *"
    origin:
      systemd_unit: "train@*.service"
    max_instances: 2
  - name: same-script-other-unit
    cmdline: "/usr/bin/python3 *train_shard.py*"
    origin:
      systemd_unit: "pipeline.service"
"""


def test_sanctioned_unit_and_excess_instance(shards: NamespacedSystemd) -> None:
    data = scan_inside(shards, ALLOW)
    by_unit = jobs_by_unit(data)
    verdicts = {u: (by_unit[u][0]["verdict"], by_unit[u][0]["rule"]) for u in by_unit if u}
    assert verdicts == {
        "train@1.service": ("sanctioned", "shard-pipeline"),
        "train@2.service": ("sanctioned", "shard-pipeline"),
        "train@3.service": ("excess", "shard-pipeline"),
    }
    o = by_unit["train@3.service"][0]["origin"]
    assert o["unit_file"] == str(shards.unit_dir / "train@.service")
    assert o["timer"] is None
    assert o["restart"] == "no"
    # train@3 is an instance the rule's pin names (train@*.service): the sanctioned
    # pipeline's own source. It is stopped as a job, never disabled.
    assert o["remediation"] is None
    advice = by_unit["train@3.service"][0]["advice"]
    assert advice["disable"] is False and advice["source_refused"].startswith(
        "systemd unit train@3.service is the origin of sanctioned rule 'shard-pipeline'"
    )


def test_unit_glob_mismatch_is_rogue(nsystemd: NamespacedSystemd) -> None:
    """The sanctioned script run from another unit is rogue: the origin pin decides."""
    sd = nsystemd
    script = sd.write_file("train_shard.py", TRAINER)
    sd.add_unit(
        "ghost.service",
        "[Unit]\nDefaultDependencies=no\n\n[Service]\n"
        f"ExecStart=/usr/bin/python3 {script} --shard 9\n",
    )
    try:
        sd.systemctl("start", "ghost.service")
        sd.wait_main_pid("ghost.service")
        data = scan_inside(sd, ALLOW)
        job = jobs_by_unit(data)["ghost.service"][0]
        assert job["verdict"] == "rogue"
        assert job["origin"]["kind"] == "systemd"
        assert job["origin"]["remediation"] == "systemctl disable --now ghost.service"
    finally:
        sd.stop_units(["ghost.service"])


SCHEDULER = """import subprocess, sys, time
subprocess.Popen([sys.executable, "{trainer}", "--nightly"])
time.sleep(600)
"""


def test_in_process_scheduler_inside_service(nsystemd: NamespacedSystemd) -> None:
    """A service's own Python process spawns the trainer: no timer, no cron line."""
    sd = nsystemd
    trainer = sd.write_file("train_inproc.py", TRAINER)
    sched = sd.write_file("sched.py", SCHEDULER.format(trainer=trainer))
    sd.add_unit(
        "sched.service",
        f"[Unit]\nDefaultDependencies=no\n\n[Service]\nExecStart=/usr/bin/python3 {sched}\n",
    )
    try:
        sd.systemctl("start", "sched.service")
        main_pid = sd.wait_main_pid("sched.service")
        deadline = time.monotonic() + 15
        jobs: list[dict[str, Any]] = []
        while not jobs and time.monotonic() < deadline:
            jobs = jobs_by_unit(scan_inside(sd, "nvml:\n  enabled: false\n")).get(
                "sched.service", []
            )
        assert len(jobs) == 1
        job = jobs[0]
        o = job["origin"]
        assert job["cmdline"] == ["/usr/bin/python3", str(trainer), "--nightly"]
        assert (o["kind"], o["unit"], o["timer"], o["restart"]) == (
            "systemd",
            "sched.service",
            None,
            "no",
        )
        assert [p["pid"] for p in job["lineage"]][1:] == [main_pid, 1]
        ev = o["evidence"]
        assert any(e.startswith(f"spawned inside sched.service by PID {main_pid} (") for e in ev)
        assert any(e.startswith(f"no crontab entry mentions {trainer}") for e in ev)
        # The unit's own process is a service, not the job: disabling the unit would stop
        # it, so that is never advised unasked (issue 31, case 1).
        assert o["remediation"] is None
        assert job["advice"]["collateral"] == {
            "name": "sched.service",
            "what": "systemd unit sched.service",
            "others": [f"PID {main_pid} `/usr/bin/python3 {sched}`"],
            "by_hand": "systemctl disable --now sched.service",
        }
    finally:
        sd.stop_units(["sched.service"])
