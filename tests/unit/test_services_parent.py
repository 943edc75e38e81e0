"""A retired service started outside cron or systemd (``setsid``), listening on a port and
starting a trainer child, is a rogue service: real processes, real sockets."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from rogue_watchdog.config import parse_config
from rogue_watchdog.config.services import ServiceSettings
from rogue_watchdog.hostpaths import config_args
from rogue_watchdog.hosttext import command_text
from rogue_watchdog.policy.services import service_findings
from rogue_watchdog.scan import Scanner, read_listens
from tests.conftest import Spawned

# Listens on 127.0.0.1, starts the train_job.py beside it as its child, reports both to argv[1].
SERVICE = """import json, os, socket, subprocess, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
child = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "train_job.py")])
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump({"port": s.getsockname()[1], "pid": os.getpid(), "child": child.pid}, fh)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""


def test_setsid_service_that_starts_the_trainer_is_a_rogue_service(
    spawned: Spawned, tmp_path: Path
) -> None:
    service = tmp_path / "old_service.py"
    service.write_text(SERVICE)
    trainer = tmp_path / "train_job.py"
    trainer.write_text("import time\ntime.sleep(120)\n")
    out = tmp_path / "ports.json"
    # setsid (new session), then the launching shell exits: the service is re-parented.
    # A clean environment: no ssh/tmux clue inherited from whoever runs the tests.
    launcher = spawned.start(
        ["/bin/sh", "-c", f"{sys.executable} {service} {out} & exit 0"],
        env={"PATH": "/usr/bin:/bin"},
    )
    launcher.wait(timeout=10)
    deadline = time.monotonic() + 20
    while not out.exists():
        assert time.monotonic() < deadline, "service did not start"
        time.sleep(0.05)
    info = json.loads(out.read_text())
    svc, child, port = info["pid"], info["child"], info["port"]
    assert os.getpgid(svc) == launcher.pid  # cleaned up with the launcher's group

    scanner = Scanner(parse_config("nvml: {enabled: false}\n", "t.yaml"))
    result = scanner.scan()
    job = next(j for j in result.jobs if j.root_pid == child)
    assert job.verdict == "rogue"
    assert job.origin.kind == "unknown"
    assert job.listening == [{"proto": "tcp", "address": "127.0.0.1", "port": port, "pid": svc}]

    found = [f for f in result.findings if f.kind == "rogue-service" and f.root_pid == child]
    assert len(found) == 1
    f = found[0]
    assert f.severity == "high"
    assert f.details["listening"] == job.listening
    assert f.details["service_pids"] == [svc]
    assert f.message == (
        f"service PID {svc} `{command_text([sys.executable, str(service), str(out)], 80)}` "
        f"(PID {svc} listening on 127.0.0.1:{port}/tcp), started the run: rogue job PID "
        f"{child} `{command_text([sys.executable, str(trainer)], 120)}`; to stop the service "
        f"and its run: rogue-watchdog terminate{config_args('t.yaml')} {svc} (stops the "
        "service and its run), or by "
        f"hand: kill -TERM {svc} {child}"
    )
    # The daemon's source computes the same finding.
    again = service_findings(
        result.jobs, read_listens(result.jobs, scanner.table, None, "/proc"), ServiceSettings()
    )
    assert [x.message for x in again if x.root_pid == child] == [f.message]


def test_a_sanctioned_runs_launcher_is_never_named_a_rogue_service() -> None:
    """An excess run started by the same listening launcher as the sanctioned run: the
    launcher is the pipeline's, so no "started the run" and no kill advice for it."""
    from rogue_watchdog.model import Job, Proc
    from rogue_watchdog.policy.services import (
        launching_ancestors,
        protected_pids,
        service_finding,
    )
    from rogue_watchdog.sources.sockets import Listen

    init = Proc(1, 0, 1, "S", "init", exe="/sbin/init", cmdline=("/sbin/init",))
    svc = Proc(812, 1, 5, "S", "python3", exe="/usr/bin/python3", cmdline=("python3", "svc.py"))
    argv = ("python3", "train.py")
    ok = Proc(813, 812, 9, "S", "python3", exe="/usr/bin/python3", cmdline=argv)
    extra = Proc(814, 812, 12, "S", "python3", exe="/usr/bin/python3", cmdline=argv)
    sanctioned = Job(813, [813], "u", argv, 9, None, [], [ok, svc, init], verdict="sanctioned")
    excess = Job(814, [814], "u", argv, 12, None, [], [extra, svc, init], verdict="excess")
    assert launching_ancestors(excess) == [svc]  # on its own, the launcher counts
    protected = protected_pids([sanctioned, excess])
    assert launching_ancestors(excess, None, protected) == []
    f = service_finding(excess, [Listen(812, "tcp", "127.0.0.1", 8080)], (), protected)
    assert f is not None
    assert "started the run" not in f.message and "kill -TERM" not in f.message
    assert "service_pids" not in f.details
