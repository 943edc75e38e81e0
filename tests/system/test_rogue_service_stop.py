"""Issue 31, case 7, on real processes and a real daemon: a retired service (an orphan
listening on a port) launches a trainer, and launches it again 3 s after it ends.

BEFORE (4ec0a01), the same steps: the finding said ``kill -TERM SVC RUN``; ``disable-source
F<id>``: "its origin (unknown) names nothing to disable, and
enforcement.quarantine_unknown_exe is off"; ``explain RUN``: "Remediation: none known: the
origin could not be named"; ``remediation-failed``: "spawned this time by unknown origin";
``terminate F<id>`` of the rogue-service finding signalled the run alone, and the service
started another (notes: /work/notes/restart-before/case7.txt).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.hosttext import command_text
from tests.conftest import REPO, Spawned, need_root, poll

pytestmark = pytest.mark.system

SERVICE = """import socket, subprocess, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
while True:
    subprocess.Popen([sys.executable, {trainer!r}]).wait()
    time.sleep(3)
"""


def _rows(state: Path, sql: str) -> list[Any]:
    try:
        with sqlite3.connect(f"file:{state}/state.db?mode=ro", uri=True) as db:
            return db.execute(sql).fetchall()
    except sqlite3.Error:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_a_rogue_service_is_named_as_the_source_and_stopped_with_its_run(
    spawned: Spawned, tmp_path: Path
) -> None:
    need_root()
    trainer = tmp_path / "train_job.py"
    trainer.write_text("import time\ntime.sleep(300)\n")
    service = tmp_path / "old_service.py"
    service.write_text(SERVICE.format(trainer=str(trainer)))
    config = tmp_path / "config.yaml"
    state = tmp_path / "state"
    config.write_text(
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{state}', interval_s: 1, "
        f"socket: '{tmp_path}/s.sock', events: off}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]}}\n"
        "enforcement: {grace_s: 2}\n"
    )
    # setsid, then the launching shell exits: the service is re-parented.
    spawned.start(
        ["/bin/sh", "-c", f"{sys.executable} {service} & exit 0"], env={"PATH": "/usr/bin:/bin"}
    ).wait(timeout=10)
    spawned.daemon(config, tmp_path / "daemon.log")

    def cli(*args: str) -> tuple[int, str]:
        res = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", *args, "--config", str(config)],
            env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
            check=False,
        )  # fmt: skip
        return res.returncode, res.stdout

    sql = (
        "SELECT id, root_pid, message, details_json FROM findings WHERE kind='rogue-service' "
        "AND resolved_at IS NULL ORDER BY id DESC"
    )
    fid, run, message, details = poll("rogue-service", lambda: _rows(state, sql), 60)[0]
    svc = json.loads(details)["service_pids"][0]
    port = json.loads(details)["listening"][0]["port"]
    py = sys.executable
    cfg = f" --config {config}"  # printed commands carry the daemon's configuration
    assert message.endswith(
        f"; to stop the service and its run: rogue-watchdog terminate{cfg} {svc} (stops the "
        f"service and its run), or by hand: kill -TERM {svc} {run}"
    )
    source = f"the service PID {svc} (listening on 127.0.0.1:{port}/tcp), which started the run"

    rc, out = cli("disable-source", f"F{fid}")
    assert (rc, out) == (
        1,
        f"cannot disable the source of rogue job PID {run} "
        f"`{command_text([py, str(trainer)], 120)}`: its source is {source} itself: a "
        f"process, with no file or unit to disable; to stop the service and its run: "
        f"rogue-watchdog terminate{cfg} {svc} (or by hand: kill -TERM {svc} {run})\n",
    )
    rc, out = cli("explain", str(run))
    assert (
        f"Remediation: its source is {source} itself: to stop the service and its run: "
        f"rogue-watchdog terminate{cfg} {svc} (or by hand: kill -TERM {svc} {run}); to stop "
        f"this run only: rogue-watchdog terminate{cfg} {run}\n"
    ) in out

    # The run alone: the service starts another, and remediation-failed names it. The
    # terminate leaves the service, which still runs: never `ok` (may-return, exit 1).
    rc, out = cli("terminate", str(run))
    assert rc == 1 and _alive(svc), out
    assert (
        "outcome: may-return\nmay come back: could not tell whether its source starts it "
        f"again (its launcher PID {svc} " in out
    ), out
    failed = poll(
        "remediation-failed",
        lambda: _rows(state, "SELECT message FROM findings WHERE kind='remediation-failed'"),
        30,
    )[0][0]
    back = int(failed.split(" is back as PID ")[1].split()[0])
    assert f"; spawned this time by {source} itself; as its terminate said, its " in failed
    assert failed.endswith(
        f"still runs and may "
        f"start it again (stop the launcher first: kill -TERM {svc}); the daemon does not "
        f"terminate it again; to stop the service and its run: "
        f"rogue-watchdog terminate{cfg} {svc} (or by hand: kill -TERM {svc} {back})"
    ), failed

    # terminate F<id> of the rogue-service finding stops exactly what it names.
    fid2 = poll(
        "the second rogue-service",
        lambda: [r for r in _rows(state, sql) if r[1] == back],
        30,
    )[0][0]
    rc, out = cli("terminate", f"F{fid2}")
    assert rc == 0, out
    lines = out.splitlines()
    svc_text = command_text([py, str(service)], 100)
    assert (
        lines[1] == f"  with the service that launched it: PID {svc} `{svc_text}` (rogue-service)"
    )
    assert lines[2:] == [
        f"  PID {back} `{command_text([py, str(trainer)], 100)}`: SIGSTOP, SIGTERM, SIGCONT: "
        "exited",
        f"  PID {svc} `{svc_text}`: SIGSTOP, SIGTERM, SIGCONT: exited",
        "outcome: ok",
    ]
    time.sleep(4)  # past the service's 3 s relaunch: nothing comes back
    assert not _alive(svc) and not _alive(back)
    rc, out = cli("scan", "--json")
    assert not [j for j in json.loads(out)["jobs"] if str(trainer) in j["cmdline"]]
