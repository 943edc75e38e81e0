"""Kernel process events (proc connector) drive the real daemon.

Every test runs ``python -m rogue_watchdog run`` as a subprocess with a sandboxed state dir,
socket and alerts log, and reads its JSON log events (``finding-opened`` with kind and
root_pid), its state database and ``rogue-watchdog status --json``. The processes are
real: a real cron line, a real ``exec`` under the same PID, a real fork/exec flood, a
real shared object named ``libcudart.so.12`` mapped with ``dlopen``. The event-driven
cases run with ``daemon.interval_s`` of 60 s, so what is found within seconds was found
through the kernel's events, not by the periodic sweep.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Spawned, need, need_program, need_root, poll, run_cli
from tests.system.cronharness import PYTHON, CronHarness

pytestmark = pytest.mark.system

CRON_LINE = 4  # the entry's line in the cron.d file written below


@dataclass
class Daemon:
    """One ``rogue-watchdog run`` subprocess."""

    proc: subprocess.Popen[bytes]
    root: Path

    @property
    def socket(self) -> str:
        return str(self.root / "status.sock")

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in (self.root / "stdout").read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def named(self, event: str, **match: Any) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events()
            if e.get("event") == event and all(e.get(k) == v for k, v in match.items())
        ]

    def status(self) -> dict[str, Any]:
        res = run_cli("status", "--json", "--socket", self.socket)
        assert res.returncode in (0, 1), res.stderr
        doc: dict[str, Any] = json.loads(res.stdout)
        return doc

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        conn = sqlite3.connect(self.root / "state" / "state.db", timeout=10.0)
        try:
            conn.row_factory = sqlite3.Row
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    def alive(self) -> None:
        if self.proc.poll() is not None:
            tail = (self.root / "stdout").read_text(errors="replace")[-3000:]
            raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_daemon(
    sandbox: Path, *, interval_s: float, extra: str = "", prefix: tuple[str, ...] = ()
) -> Daemon:
    """Start the daemon on a config in ``sandbox/daemon`` and wait for its first tick."""
    root = sandbox / "daemon"
    root.mkdir()
    config = root / "config.yaml"
    config.write_text(
        "nvml:\n  enabled: false\n"
        "daemon:\n"
        f"  interval_s: {interval_s}\n"
        f"  state_dir: {root / 'state'}\n"
        f"  socket: {root / 'status.sock'}\n"
        f"{extra}"
        "alerts:\n"
        "  sinks:\n"
        f"    - {{type: log, path: {root / 'alerts.log'}}}\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    with (root / "stdout").open("wb") as fh:
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "rogue_watchdog", "run", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    d = Daemon(proc, root)

    def ready() -> bool:
        d.alive()
        return os.path.exists(d.socket) and bool(d.named("daemon-started"))

    poll("the daemon to start", ready, 60, 0.1)
    poll("the first tick", lambda: d.status().get("last_scan"), 30, 0.2)
    return d


@pytest.fixture
def sandbox() -> Iterator[Path]:
    need_root()
    path = Path(tempfile.mkdtemp(prefix="rwtest-events-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    try:
        yield started
    finally:
        for d in started:
            d.stop()


def _opened(d: Daemon, kind: str, root_pid: int) -> list[dict[str, Any]]:
    return d.named("finding-opened", kind=kind, root_pid=root_pid)


# -- a 300 ms trainer from a real cron line ------------------------------------------------


def test_300ms_cron_trainer_found_with_cron_line_and_periodic(
    daemons: list[Daemon],
) -> None:
    """A trainer that lives 300 ms, run by a real cron line every minute: caught by its
    exec event with its cron file and line, resolved when it exits; its second run,
    after the first ended by itself (the kernel's exit event says so), is one periodic
    finding, not a ``respawned`` (issue 35)."""
    need_root()
    need_program("cron", "pgrep")
    need(Path(PYTHON).exists(), f"needs {PYTHON}")
    h = CronHarness()
    try:
        h.ensure_cron()
        trainer = h.trainer("cron300")
        trainer.write_text("import time\ntime.sleep(0.3)\n")
        d = start_daemon(h.sandbox, interval_s=60)
        daemons.append(d)
        assert d.status()["events"]["mode"] == "events"
        cron_file = h.add_cron_d(
            [
                "# rogue-watchdog system test: a trainer that lives 300 ms, every minute",
                'MAILTO=""',
                "SHELL=/bin/sh",
                f"* * * * * root {PYTHON} {trainer}",
            ]
        )
        origin = f"cron {cron_file}:{CRON_LINE} (* * * * *)"
        command = f"`{PYTHON} {trainer}`"

        def runs() -> list[dict[str, Any]]:
            d.alive()
            return [
                e
                for e in d.named("finding-opened", kind="rogue-job")
                if command in e.get("message", "")
            ]

        [first] = poll("the first run to be caught", runs, h.seconds_to_fire() + 20, 0.25)
        assert first["message"].startswith(
            f"rogue training job PID {first['root_pid']}, user root, {command}, from {origin}"
        ), first["message"]

        # It lived 300 ms and ended by itself: its exit is seen long before the 60 s sweep,
        # and its finding is held open for the return window (issue 35: a cron ghost's
        # next run continues it, one page in all), not resolved.
        def gone() -> list[dict[str, Any]]:
            rows = d.query("SELECT * FROM jobs WHERE summary LIKE ?", (f"%{trainer}%",))
            return [r for r in rows if r["gone_at"] is not None]

        [job] = poll("the first run's end", gone, 10)
        recorded = json.loads(job["origin_json"])
        assert (recorded["kind"], recorded["file"], recorded["line"]) == (
            "cron",
            str(cron_file),
            CRON_LINE,
        )
        assert job["user"] == "root" and job["root_pid"] == first["root_pid"]
        assert d.named("finding-resolved", id=first["id"]) == []

        def continued() -> list[dict[str, Any]]:
            d.alive()
            rows = d.query("SELECT * FROM findings WHERE id=?", (first["id"],))
            return [r for r in rows if r["message"].startswith("periodic: 2 runs")]

        [row] = poll("the second run to continue the first run's finding", continued, 75, 0.25)
        assert "latest run: rogue training job PID " in row["message"]
        assert f"from {origin}" in row["message"]
        assert row["resolved_at"] is None
        # One open for the loop: the second run opened no finding of its own.
        assert [e["id"] for e in runs()] == [first["id"]]
        details = json.loads(row["details_json"])
        assert details["origin"]["file"] == str(cron_file)
        assert details["origin"]["line"] == CRON_LINE
        assert details["periodic"]["runs"] == 2
        assert 50 < details["periodic"]["cadence_s"] < 70  # one cron minute
        assert details["periodic"]["pid"] != first["root_pid"]
        # Other processes on the host may respawn: none of ours did (it ended by itself).
        ours = [
            x
            for x in (
                json.loads(r["details_json"])
                for r in d.query("SELECT * FROM findings WHERE kind='respawned'")
            )
            if x["origin"].get("file") == str(cron_file)
        ]
        assert ours == []
        [job] = d.query("SELECT sightings FROM jobs WHERE summary LIKE ?", (f"%{trainer}%",))
        assert job["sightings"] == 2
    finally:
        for d in daemons:
            d.stop()
        h.close()


# -- exec under the same PID ---------------------------------------------------------------


def test_exec_under_same_pid_detected_from_the_exec_event(
    sandbox: Path, daemons: list[Daemon], spawned: Spawned
) -> None:
    d = start_daemon(sandbox, interval_s=60)
    daemons.append(d)
    # Two trainers: one signature each, so each gets its own finding.
    trainers = {name: sandbox / f"train_{name}.py" for name in ("sh", "py")}
    for trainer in trainers.values():
        trainer.write_text("import time\ntime.sleep(60)\n")
    go = sandbox / "go"
    # A shell (dash) and a Python process wait for the go file, then exec the trainer
    # in the same process. The Python one keeps its comm (python3 -> python3): no
    # cheap check of the stat line can tell, only the kernel's exec event.
    sh = spawned.start(
        [
            "/bin/sh",
            "-c",
            f"while [ ! -e {go} ]; do sleep 0.05; done; exec {PYTHON} {trainers['sh']}",
        ]
    )
    waiter = (
        "import os, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
        f"os.execv({PYTHON!r}, [{PYTHON!r}, os.environ['TRAINER']])\n"
    )
    py = spawned.start([PYTHON, "-c", waiter], env={**os.environ, "TRAINER": str(trainers["py"])})
    # SIGHUP: a reload and a tick now, so the daemon knows both PIDs before the exec
    # (the next sweep is a minute away).
    reloaded = time.time()
    os.kill(d.proc.pid, signal.SIGHUP)
    poll(
        "the reload tick",
        lambda: d.named("config-reloaded") and d.status()["last_scan"]["time"] >= reloaded,
        15,
    )
    assert _opened(d, "rogue-job", sh.pid) == [] and _opened(d, "rogue-job", py.pid) == []
    go.touch()
    execed_at = time.time()
    for pid, trainer in ((sh.pid, trainers["sh"]), (py.pid, trainers["py"])):
        [event] = poll(f"the exec of {pid} to be found", partial(_opened, d, "rogue-job", pid), 10)
        assert f"PID {pid}, user root, `{PYTHON} {trainer}`" in event["message"]
        seen = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        # Within seconds, while the next sweep is a minute away: the exec event did it.
        assert seen - execed_at < 5


# -- event loss under a flood ----------------------------------------------------------------


def test_flood_loss_counted_swept_and_rogue_found(
    sandbox: Path, daemons: list[Daemon], spawned: Spawned
) -> None:
    d = start_daemon(
        sandbox, interval_s=60, extra="  events_rcvbuf_bytes: 4096\n"
    )  # the smallest buffer: a flood overflows it at once
    daemons.append(d)
    flood = "while :; do /bin/true; done"
    floods = [spawned.start(["/bin/sh", "-c", flood]) for _ in range(4)]
    time.sleep(1.0)
    trainer = sandbox / "train_flood.py"
    trainer.write_text("import time\ntime.sleep(60)\n")
    rogue = spawned.start([PYTHON, str(trainer)])
    try:
        [event] = poll(
            "the rogue started during the flood to be found",
            lambda: _opened(d, "rogue-job", rogue.pid),
            20,
        )
        assert f"PID {rogue.pid}, user root, `{PYTHON} {trainer}`" in event["message"]

        def lost() -> dict[str, Any] | None:
            ev = d.status()["events"]
            return ev if ev["lost"] > 0 and ev["full_sweeps"] > 0 else None

        ev = poll("the loss to be counted and swept", lost, 20)
    finally:
        for p in floods:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    assert ev["mode"] == "events"
    # A flood was seen (four /bin/true loops: thousands of execs a second on an idle host,
    # several hundred beside two other test workers on two CPUs).
    assert ev["events"]["exec"] > 300
    assert d.named("proc-events-lost")


# -- no events: polling, and said so ---------------------------------------------------------


def test_unavailable_events_fall_back_to_polling_and_say_so(
    sandbox: Path, daemons: list[Daemon], spawned: Spawned
) -> None:
    need_program("unshare", "nsenter")
    # A new network namespace: the kernel's connector lives in the initial one only.
    d = start_daemon(
        sandbox,
        interval_s=1,
        extra="  metrics_listen: 127.0.0.1:9464\n",
        prefix=("unshare", "--net", "sh", "-c", 'ip link set lo up; exec "$0" "$@"'),
    )
    daemons.append(d)
    ev = d.status()["events"]
    assert ev["mode"] == "polling" and ev["available"] is False
    assert ev["reason"].startswith("kernel process events unavailable (Connection refused)")
    text = run_cli("status", "--socket", d.socket).stdout
    assert "process events: unavailable, polling only (kernel process events unavailable" in text
    [warning] = d.named("proc-events-unavailable")
    assert warning["level"] == "warning"
    # The daemon runs in the namespace; scrape its metrics from inside it.
    scrape = subprocess.run(
        ["nsenter", "-t", str(d.proc.pid), "-n", PYTHON, "-c",
         "import urllib.request;print(urllib.request.urlopen("
         "'http://127.0.0.1:9464/metrics', timeout=10).read().decode())"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert "rogue_watchdog_proc_events_up 0.0" in scrape.stdout.splitlines()
    # Polling still finds a trainer.
    trainer = sandbox / "train_poll.py"
    trainer.write_text("import time\ntime.sleep(60)\n")
    rogue = spawned.start([PYTHON, str(trainer)])
    poll("polling to find the trainer", lambda: _opened(d, "rogue-job", rogue.pid), 15)
    assert len(d.named("proc-events-unavailable")) == 1  # said once


# -- GPU-capable before touching a GPU --------------------------------------------------------

_STUB_C = "int cudaRuntimeGetVersion(int *v) { *v = 12040; return 0; }\n"
_RUN_PY = """import ctypes, sys, time
ctypes.CDLL(sys.argv[1])
time.sleep(60)
"""


def _stand_in_cudart(sandbox: Path) -> Path:
    need_program("gcc")
    src = sandbox / "cudart.c"
    src.write_text(_STUB_C)
    lib = sandbox / "lib" / "libcudart.so.12"
    lib.parent.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def test_run_py_mapping_cudart_is_a_candidate(
    sandbox: Path, daemons: list[Daemon], spawned: Spawned
) -> None:
    lib = _stand_in_cudart(sandbox)
    d = start_daemon(sandbox, interval_s=60)
    daemons.append(d)
    script = sandbox / "run.py"
    script.write_text(_RUN_PY)
    proc = spawned.start([PYTHON, str(script), str(lib)])
    # Found by its maps before it touches a GPU; while young and on no GPU it is taken for
    # a short-lived probe (issue 35): reported, at warning, not a rogue training job yet.
    [event] = poll(
        "run.py to be found by its maps",
        lambda: _opened(d, "unsanctioned-gpu-use", proc.pid),
        10,
        0.1,
    )
    assert f"PID {proc.pid}, user root, `{PYTHON} {script} {lib}`" in event["message"]
    [job] = [j for j in d.status()["jobs"] if j["root_pid"] == proc.pid]
    assert (job["verdict"], job["workload"]) == ("rogue", "probe")
    # The one-shot scan (no events) finds it too, with the evidence named.
    res = run_cli("scan", "--json", "--config", str(d.root / "config.yaml"))
    doc = json.loads(res.stdout)
    [sj] = [j for j in doc["jobs"] if j["root_pid"] == proc.pid]
    assert sj["evidence"] == ["gpu-library"]
    assert res.returncode == 1


# -- ProtectProc=invisible (hidepid) never blinds silently -----------------------------------


def test_hidepid_hides_nothing_with_ptrace_and_is_reported_without(sandbox: Path) -> None:
    need_program("unshare", "capsh", "mount")
    mnt = sandbox / "proc"
    mnt.mkdir()
    probe = f"from rogue_watchdog.scan import hidepid_blind; print(hidepid_blind({str(mnt)!r}))"
    py = f"{sys.executable} -c {shlex.quote(probe)}"
    script = (
        f"mount -t proc -o hidepid=invisible proc {mnt} && {py} && "
        f"capsh --drop=cap_sys_ptrace -- -c {shlex.quote(py)}"
    )
    res = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "None",
        f"{mnt} is mounted with hidepid=invisible and rogue-watchdog lacks CAP_SYS_PTRACE: "
        "other users' processes are hidden from it, so their training jobs are missed; "
        "grant CAP_SYS_PTRACE (the shipped unit does) or mount /proc without hidepid",
    ]
