"""SupervisorResolver on fake trees of each supervisor, and on a real fake supervisord.

The real case follows a public report: a supervisord-like parent is killed, its child is
adopted by init and keeps running, and a second supervisord starts another copy. The
adopted child is an orphan that keeps the supervisor clue; the new copy is a supervisor
origin with the program name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rogue_watchdog.command import RecordingRunner
from rogue_watchdog.lineage import default_resolvers
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.supervisor import SupervisorResolver, supervisor_kind
from rogue_watchdog.model import Origin
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import Spawned
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context

INIT = FakeProc(1, 0, ["/sbin/init"])
TRAIN = ["/usr/bin/python3", "/srv/retrain/train.py"]
CONF = "/etc/supervisor/supervisord.conf"
SUPERVISORD = FakeProc(
    80,
    1,
    ["/usr/bin/python3", "/usr/bin/supervisord", "-n", "-c", CONF],
    exe="/usr/bin/python3.11",
)


def _resolve(ctx: ResolveContext, pid: int) -> Origin | None:
    return SupervisorResolver().resolve(lineage(ctx, pid), ctx)


def test_supervisord_program_from_environment(tmp_path: Path) -> None:
    env = {"SUPERVISOR_ENABLED": "1", "SUPERVISOR_PROCESS_NAME": "retrain"}
    env["SUPERVISOR_GROUP_NAME"] = "retrain"
    procs = [INIT, SUPERVISORD, FakeProc(90, 80, TRAIN, environ=env)]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 90)
    assert origin is not None and origin.kind == "supervisor"
    assert origin.fields == {
        "program": "retrain",
        "supervisor": "supervisord",
        "supervisor_pid": 80,
        "config": CONF,
        # This test's tree is fake; the config it names is not on this host.
        "settings_unread": f"{CONF} could not be read: no such file or directory",
    }
    assert origin.remediation == (
        f"supervisorctl -c {CONF} stop retrain  # then delete [program:retrain] from {CONF} "
        f"and run: supervisorctl -c {CONF} update"
    )
    assert origin.evidence == (
        f"ancestor PID 80 is supervisord: `/usr/bin/python3 /usr/bin/supervisord -n -c {CONF}`",
        "SUPERVISOR_PROCESS_NAME=retrain in the environment of PID 90",
    )


def test_supervisord_group_member_and_grandchild(tmp_path: Path) -> None:
    env = {"SUPERVISOR_PROCESS_NAME": "worker_01", "SUPERVISOR_GROUP_NAME": "trainers"}
    sup = FakeProc(80, 1, ["/usr/local/bin/supervisord"])  # no -c: default config
    procs = [
        INIT,
        sup,
        FakeProc(90, 80, ["/bin/sh", "-c", "exec-wrapper"], environ=env),
        FakeProc(95, 90, TRAIN, environ={}),
    ]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 95)
    assert origin is not None
    assert origin.fields["program"] == "worker_01"
    assert origin.remediation is not None
    assert origin.remediation.startswith("supervisorctl stop trainers:worker_01  #")


def test_supervisord_without_readable_environment(tmp_path: Path) -> None:
    ctx = make_context(tmp_path, [INIT, SUPERVISORD, FakeProc(90, 80, TRAIN)])
    origin = _resolve(ctx, 90)
    assert origin is not None
    assert origin.fields["program"] == "/usr/bin/python3 /srv/retrain/train.py"


@pytest.mark.parametrize(
    ("scanner", "supervise", "remediation", "config"),
    [
        (
            ["runsvdir", "-P", "/etc/service", "log: ..."],
            ["runsv", "retrain"],
            "sv down /etc/service/retrain && rm /etc/service/retrain",
            "/etc/service/retrain",
        ),
        (
            ["s6-svscan", "/run/service"],
            ["s6-supervise", "retrain"],
            "s6-svc -d /run/service/retrain  # then remove /run/service/retrain "
            "and run: s6-svscanctl -an /run/service/retrain/..",
            "/run/service/retrain",
        ),
        (
            ["svscan", "/service"],
            ["supervise", "retrain"],
            "svc -d /service/retrain  # then remove /service/retrain and run: "
            "svc -x /service/retrain",
            "/service/retrain",
        ),
    ],
)
def test_service_directory_supervisors(
    tmp_path: Path, scanner: list[str], supervise: list[str], remediation: str, config: str
) -> None:
    procs = [
        INIT,
        FakeProc(70, 1, scanner, exe=f"/usr/bin/{scanner[0]}"),
        FakeProc(80, 70, supervise, exe=f"/usr/bin/{supervise[0]}"),
        FakeProc(90, 80, TRAIN),
    ]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 90)
    assert origin is not None
    assert origin.fields["program"] == "retrain"
    assert origin.fields["supervisor"] == supervise[0]
    assert origin.fields["config"] == config
    assert origin.remediation == remediation


def test_pm2_app(tmp_path: Path) -> None:
    god = FakeProc(80, 1, ["PM2 v5.3.0: God Daemon (/root/.pm2)"], exe="/usr/bin/node")
    env = {"name": "trainer", "pm_id": "0", "PM2_HOME": "/root/.pm2"}
    ctx = make_context(tmp_path, [INIT, god, FakeProc(90, 80, TRAIN, environ=env)])
    origin = _resolve(ctx, 90)
    assert origin is not None
    assert (origin.fields["program"], origin.fields["supervisor"]) == ("trainer", "pm2")
    assert origin.remediation == "pm2 delete trainer && pm2 save"


def test_not_supervised(tmp_path: Path) -> None:
    procs = [INIT, FakeProc(50, 1, ["/usr/sbin/cron", "-f"]), FakeProc(60, 50, TRAIN)]
    ctx = make_context(tmp_path, procs)
    assert _resolve(ctx, 60) is None


def test_supervisor_names_behind_an_interpreter(tmp_path: Path) -> None:
    procs = [
        INIT,
        FakeProc(10, 1, ["/usr/bin/python3", "-m", "supervisor.supervisord"]),
        FakeProc(11, 1, ["/usr/bin/python3", "-u", "/opt/circus/bin/circusd", "c.ini"]),
        FakeProc(12, 1, ["/usr/bin/python3", "/srv/supervise_metrics.py"]),
    ]
    ctx = make_context(tmp_path, procs)
    kinds = [supervisor_kind(ctx.table.procs[pid]) for pid in (10, 11, 12)]
    assert kinds == ["supervisord", "circusd", None]


FAKE_SUPERVISORD = """#!/usr/bin/python3
# A stand-in for supervisord: starts one program with supervisord's child environment.
import os, subprocess, sys, time
conf = sys.argv[sys.argv.index("-c") + 1]
env = {"PATH": "/usr/bin:/bin", "SUPERVISOR_ENABLED": "1",
       "SUPERVISOR_PROCESS_NAME": "retrain", "SUPERVISOR_GROUP_NAME": "retrain",
       "SUPERVISOR_SERVER_URL": "unix:///tmp/supervisor.sock"}
child = subprocess.Popen(["/usr/bin/python3", os.path.join(os.path.dirname(conf), "train_fake.py")],
                         env=env, stdin=subprocess.DEVNULL)
with open(sys.argv[-1] + ".tmp", "w") as fh:
    fh.write(str(child.pid))
os.rename(sys.argv[-1] + ".tmp", sys.argv[-1])
while True:
    time.sleep(1)
"""


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "supervisord").write_text(FAKE_SUPERVISORD)
    (tmp_path / "supervisord").chmod(0o755)
    (tmp_path / "supervisord.conf").write_text("[program:retrain]\ncommand=train_fake.py\n")
    (tmp_path / "train_fake.py").write_text("import time\ntime.sleep(120)\n")
    yield tmp_path


def _start_supervisord(spawned: Spawned, sandbox: Path, tag: str) -> tuple[int, int]:
    pidfile = sandbox / f"child-{tag}.pid"
    sup = spawned.start(
        [str(sandbox / "supervisord"), "-n", "-c", str(sandbox / "supervisord.conf"), str(pidfile)],
        env={"PATH": "/usr/bin:/bin"},
    )
    for _ in range(200):
        if pidfile.exists():
            return sup.pid, int(pidfile.read_text())
        time.sleep(0.05)
    raise AssertionError("fake supervisord did not start its program")


MINE = default_resolvers()  # the registry, in its order: the first answer wins


def _first(lineage_: list, ctx: ResolveContext) -> Origin | None:  # type: ignore[type-arg]
    for resolver in MINE:
        origin = resolver.resolve(lineage_, ctx)
        if origin is not None:
            return origin
    return None


def test_killed_supervisord_orphan_and_second_copy(sandbox: Path, spawned: Spawned) -> None:
    sup1, child1 = _start_supervisord(spawned, sandbox, "1")
    try:
        os.kill(sup1, signal.SIGKILL)
        spawned.procs[0].wait(timeout=10)  # reaped: child1 has been re-parented now
        sup2, child2 = _start_supervisord(spawned, sandbox, "2")
        table = ProcessTable()
        table.refresh()
        ctx = ResolveContext(table=table, now=datetime.now(UTC), run_cmd=RecordingRunner())
        orphan_proc = table.get(child1)
        assert orphan_proc is not None and orphan_proc.ppid != sup1
        orphan = _first(table.ancestors(child1), ctx)
        assert orphan is not None and orphan.kind == "orphan"
        assert orphan.fields["supervisor_program"] == "retrain"
        assert orphan.fields["parent_pid"] == orphan_proc.ppid
        assert orphan.evidence[0] == "orphan of supervisor program retrain (parent exited)"
        assert orphan.remediation == f"kill -TERM {child1}"

        copy = _first(table.ancestors(child2), ctx)
        assert copy is not None and copy.kind == "supervisor"
        assert copy.fields == {
            "program": "retrain",
            "supervisor": "supervisord",
            "supervisor_pid": sup2,
            "config": str(sandbox / "supervisord.conf"),
            # The config names none of these: supervisord's defaults (issue 31, case 6).
            "section": "program:retrain",
            "section_file": str(sandbox / "supervisord.conf"),
            "autostart": "true",
            "autostart_at": "default",
            "autorestart": "unexpected",
            "autorestart_at": "default",
            "startretries": "3",
            "exitcodes": "0",
        }
    finally:
        # sup1 is already reaped, so the fixture skips its group: end child1 by PID.
        with contextlib.suppress(ProcessLookupError):
            os.kill(child1, signal.SIGKILL)


def _run_pasted(line: str, tmp_path: Path, program: str) -> list[str]:
    """Paste ``line`` into bash with a recording stand-in for ``program``; its argv."""
    import subprocess

    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    log = tmp_path / f"{program}.argv"
    stub = bindir / program
    stub.write_text(f'#!/bin/sh\nfor a in "$@"; do printf \'%s\\0\' "$a"; done > {log}\n')
    stub.chmod(0o755)
    done = subprocess.run(
        ["/bin/bash", "-c", line],
        env={"PATH": f"{bindir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return log.read_bytes().decode().split("\0")[:-1]


def test_hostile_program_and_group_names_stay_one_quoted_argument(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    name = f"x; touch {pwned} #"
    env = {"SUPERVISOR_PROCESS_NAME": name, "SUPERVISOR_GROUP_NAME": "grp\nfake line"}
    ctx = make_context(tmp_path / "proc", [INIT, SUPERVISORD, FakeProc(90, 80, TRAIN, environ=env)])
    origin = _resolve(ctx, 90)
    assert origin is not None and origin.remediation is not None
    assert origin.remediation == (
        f"supervisorctl -c {CONF} stop $'grp\\nfake line:x; touch {pwned} #'  # then delete "
        f"[program:x; touch {pwned} #] from {CONF} and run: supervisorctl -c {CONF} update"
    )
    assert "\n" not in origin.remediation
    # Pasted into a shell it does exactly what it says: one stop, with the exact name.
    argv = _run_pasted(origin.remediation, tmp_path, "supervisorctl")
    assert argv == ["-c", CONF, "stop", f"grp\nfake line:{name}"]
    assert not pwned.exists()


def test_hostile_pm2_name_and_service_dir_are_quoted(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    env = {"name": f"app; touch {pwned}", "pm_id": "0"}
    god = FakeProc(70, 1, ["PM2 v5.3.0: God Daemon (/root/.pm2)"], exe="/usr/bin/node")
    ctx = make_context(tmp_path / "proc", [INIT, god, FakeProc(90, 70, TRAIN, environ=env)])
    origin = _resolve(ctx, 90)
    assert origin is not None
    assert origin.remediation == f"pm2 delete 'app; touch {pwned}' && pm2 save"
    assert _run_pasted(origin.remediation.split(" && ")[0], tmp_path, "pm2") == [
        "delete",
        f"app; touch {pwned}",
    ]
    assert not pwned.exists()
