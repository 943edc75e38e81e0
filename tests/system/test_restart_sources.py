"""Issue 31 on real systemd (booted as PID 1 in a PID + mount namespace): what brings a
rogue back, and a service is never collateral.

``td-hub.service`` runs a hub (``hub_server.py``, the unit's own process, no training)
that launches a trainer and launches it again when it ends. Disabling the unit would
stop the hub: ``scan``, ``explain`` and ``disable-source`` never offer or do it unasked,
the daemon in terminate mode with ``auto_disable_source`` never does it, and a person
does it only with ``--stop-service td-hub.service``.

As in test_enforce_systemd.py, a private tmpfs is mounted on /etc/systemd/system inside
the namespace (``mask`` writes there) and the units live in the namespace's own
/run/systemd/system.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Spawned, _group_alive, need, need_program, need_root, poll
from tests.system.nsystemd import SYSTEMD, NamespacedSystemd

pytestmark = pytest.mark.system

HUB = "td-hub.service"
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "COLUMNS": "400"}


@pytest.fixture(scope="module")
def sd() -> Iterator[NamespacedSystemd]:
    need_root()
    need_program("unshare", "nsenter", "systemctl", "mount")
    need(Path(SYSTEMD).exists(), f"needs {SYSTEMD}")
    manager = NamespacedSystemd()
    try:
        manager.start()
        manager.nsenter("mount", "-t", "tmpfs", "rwrestart", "/etc/systemd/system")
        manager.systemctl("daemon-reload")
        yield manager
    finally:
        manager.stop()


def cli(sd: NamespacedSystemd, *args: str, config: str = "config.yaml") -> tuple[int, str]:
    """``python -m rogue_watchdog ARGS --config`` inside the namespace: (exit code, stdout)."""
    res = sd.nsenter(
        sys.executable, "-m", "rogue_watchdog", *args, "--config", str(sd.sandbox / config),
        env=ENV, check=False,
    )  # fmt: skip
    assert res.returncode in (0, 1), res.stderr[-3000:]
    return res.returncode, res.stdout


def scan_job(
    sd: NamespacedSystemd, script: Path, timeout_s: float = 20, config: str = "config.yaml"
) -> dict[str, Any]:
    """The one job of ``scan --json`` running ``script``, waiting until it runs."""
    deadline = time.monotonic() + timeout_s
    while True:
        _rc, out = cli(sd, "scan", "--json", config=config)
        jobs = [j for j in json.loads(out)["jobs"] if str(script) in j["cmdline"]]
        if len(jobs) == 1 or time.monotonic() > deadline:
            assert len(jobs) == 1, out
            job: dict[str, Any] = jobs[0]
            return job
        time.sleep(0.5)


def hub_state(sd: NamespacedSystemd) -> tuple[str, str]:
    return (
        sd.systemctl("is-active", HUB, check=False).stdout.strip(),
        sd.show(HUB, "MainPID")["MainPID"],
    )


@pytest.fixture
def hub(sd: NamespacedSystemd) -> Iterator[tuple[Path, Path]]:
    """td-hub.service (Restart=always) whose own process launches the trainer again 2 s
    after it ends; yields (hub script, trainer script)."""
    trainer = sd.write_file("train_hub.py", "import time\ntime.sleep(600)\n")
    hub = sd.write_file(
        "hub_server.py",
        "import subprocess, sys, time\nwhile True:\n"
        f"    subprocess.Popen([sys.executable, {str(trainer)!r}, '--from-hub']).wait()\n"
        "    time.sleep(2)\n",
    )
    sd.write_file(
        "config.yaml",
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{sd.sandbox}/state'}}\n"
        "enforcement: {grace_s: 3}\n",
    )
    run_units = Path(f"/proc/{sd.pid}/root/run/systemd/system")
    (run_units / HUB).write_text(
        "[Unit]\nDefaultDependencies=no\n\n[Service]\n"
        f"ExecStart=/usr/bin/python3 {hub}\nRestart=always\nRestartSec=1\n"
    )
    sd.systemctl("daemon-reload")
    sd.systemctl("start", HUB)
    try:
        yield hub, trainer
    finally:
        sd.systemctl("unmask", HUB, check=False)
        sd.stop_units([HUB])


def test_a_hub_unit_is_never_stopped_unasked(sd: NamespacedSystemd, hub: tuple[Path, Path]) -> None:
    """Issue 31, case 1. BEFORE (4ec0a01): `stop: rogue-watchdog disable-source PID &&
    rogue-watchdog terminate PID`, and `disable-source PID` ran `systemctl disable --now
    td-hub.service` and `mask`, stopping the hub, saying only "the running job has
    stopped too". AFTER: below."""
    hub_py, trainer = hub
    main = int(sd.wait_main_pid(HUB))
    job = scan_job(sd, trainer)
    pid = job["root_pid"]
    other = f"PID {main} `/usr/bin/python3 {hub_py}`"
    assert job["origin"]["unit"] == HUB
    assert job["origin"]["remediation"] is None
    advice = job["advice"]
    assert advice["disable"] is False
    assert advice["collateral"] == {
        "name": HUB,
        "what": f"systemd unit {HUB}",
        "others": [other],
        "by_hand": f"systemctl disable --now {HUB} && systemctl mask {HUB}",
    }
    cfg = f" --config {sd.sandbox / 'config.yaml'}"  # printed commands carry the config
    assert advice["stop"] == (
        f"rogue-watchdog terminate{cfg} {pid}  # --dry-run first to preview; stops the run "
        f"only: its source is a service, systemd unit {HUB} also runs {other}, not part of "
        f"the job, never stopped unasked; to stop the service {HUB} too: rogue-watchdog "
        f"disable-source{cfg} {pid} --stop-service {HUB}"
    )

    rc, out = cli(sd, "disable-source", str(pid))
    assert rc == 1
    assert out.splitlines()[0] == (
        f"cannot disable the source of rogue job PID {pid} `/usr/bin/python3 {trainer} "
        f"--from-hub`: disabling it would stop a service: systemd unit {HUB} also runs "
        f"{other}, not part of the job; a service is never stopped unasked. To stop this run "
        f"only: rogue-watchdog terminate{cfg} {pid}; to stop the service {HUB} as well: "
        f"rogue-watchdog disable-source{cfg} {pid} --stop-service {HUB}"
    )
    assert hub_state(sd) == ("active", str(main))
    rc, out = cli(sd, "disable-source", str(pid), "--stop-service", "other.service")
    assert rc == 1 and "--stop-service other.service names another service" in out
    assert hub_state(sd) == ("active", str(main))

    rc, out = cli(sd, "disable-source", str(pid), "--stop-service", HUB)
    assert rc == 0, out
    assert out.splitlines()[-1] == f"the service {HUB} was stopped with it, as asked"
    assert hub_state(sd) == ("inactive", "0")


def test_the_daemon_in_terminate_mode_never_disables_a_hub_unit(
    sd: NamespacedSystemd, hub: tuple[Path, Path]
) -> None:
    """Issue 31, case 1 with ``auto_disable_source``: the daemon stops the runs, never the
    hub. BEFORE (4ec0a01): it ran `disable --now` + `mask` of td-hub.service itself."""
    _hub_py, trainer = hub
    main = int(sd.wait_main_pid(HUB))
    scan_job(sd, trainer)
    state = sd.sandbox / "dstate"
    sd.write_file(
        "daemon.yaml",
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{state}', interval_s: 1, "
        f"socket: '{sd.sandbox}/d.sock', events: off}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{sd.sandbox}/alerts.log'}}]}}\n"
        "enforcement: {mode: terminate, auto_disable_source: true, grace_s: 1}\n",
    )
    log = sd.sandbox / "daemon.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            ["nsenter", "-t", str(sd.pid), "-p", "-m", "env", *(f"{k}={v}" for k, v in
             ENV.items()), sys.executable, "-m", "rogue_watchdog", "run", "--config",
             str(sd.sandbox / "daemon.yaml")],
            stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        kinds: list[tuple[str, str]] = []
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                with sqlite3.connect(f"file:{state}/state.db?mode=ro", uri=True) as db:
                    kinds = db.execute("SELECT kind, outcome FROM actions").fetchall()
            except sqlite3.Error:
                continue
            if kinds:
                break
    finally:
        # nsenter's child is the daemon: the whole group, or it outlives the test.
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        deadline = time.monotonic() + 20
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert ("terminate", "will-return") in kinds, log.read_text()[-3000:]
    assert all(k != "disable-source" for k, _o in kinds), kinds
    assert hub_state(sd) == ("active", str(main))
    skipped = [
        json.loads(line)
        for line in log.read_text().splitlines()
        if '"disable-source-skipped"' in line
    ]
    assert skipped and skipped[0]["reason"].startswith(
        f"its source is a service: systemd unit {HUB} also runs PID {main} "
    ), log.read_text()[-3000:]


def test_terminate_of_a_restart_always_unit_says_it_will_come_back(
    sd: NamespacedSystemd,
) -> None:
    """Issue 31, case 4 (systemd). BEFORE (4ec0a01): `outcome: ok`, exit 0, nothing else;
    systemd started the trainer again a second later."""
    trainer = sd.write_file("train_always.py", "import time\ntime.sleep(600)\n")
    sd.write_file(
        "always.yaml",
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{sd.sandbox}/always-state'}}\n"
        "enforcement: {grace_s: 3}\n",
    )
    unit = "rw-always.service"
    run_units = Path(f"/proc/{sd.pid}/root/run/systemd/system")
    (run_units / unit).write_text(
        "[Unit]\nDefaultDependencies=no\n\n[Service]\n"
        f"ExecStart=/usr/bin/python3 {trainer}\nRestart=always\nRestartSec=1\n"
    )
    sd.systemctl("daemon-reload")
    sd.systemctl("start", unit)
    try:
        pid = sd.wait_main_pid(unit)
        rc, out = cli(sd, "explain", str(pid), config="always.yaml")
        assert (
            "Restarts: at once, systemd Restart=always (what stops it: disable-source first)\n"
        ) in out
        rc, out = cli(sd, "terminate", str(pid), config="always.yaml")
        assert rc == 1
        assert out.splitlines() == [
            f"terminate rogue job PID {pid} `/usr/bin/python3 {trainer}` (action 1); origin "
            "systemd",
            "  its source starts it again: at once, systemd Restart=always",
            f"  PID {pid} `/usr/bin/python3 {trainer}`: SIGSTOP, SIGTERM, SIGCONT: exited",
            "outcome: will-return",
            "will come back: its source restarts it; disable-source first",
        ]
        back = sd.wait_main_pid(unit)
        assert back != pid
        # --and-source: the unit is disabled first, and nothing restarts it.
        rc, out = cli(sd, "terminate", str(back), "--and-source", config="always.yaml")
        assert rc == 0, out
        # Its own plan first, under its own head line; nothing said to start it again.
        assert out.splitlines()[0].startswith("disabled its source first (action ")
        assert "its source starts it again" not in out
        assert out.splitlines()[-1] == "outcome: ok"
        time.sleep(2.5)  # past RestartSec=1
        assert sd.show(unit, "MainPID")["MainPID"] == "0"
    finally:
        sd.systemctl("unmask", unit, check=False)
        sd.stop_units([unit])


def test_a_shell_loop_that_terminate_leaves_is_named_and_stopped_first(
    spawned: Spawned, tmp_path: Path
) -> None:
    """Issue 31, case 2 on a real `nohup bash -c 'while true; ...'` whose shell also runs
    a web server. BEFORE (4ec0a01): explain "Remediation: none needed for the source
    (nothing would start it again); to stop it: rogue-watchdog terminate PID, or by
    hand: kill -TERM PID", terminate `outcome: ok` (exit 0), the trainer back in 5 s."""
    need_root()
    (tmp_path / "train_loop.py").write_text("import time\ntime.sleep(300)\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n")
    loop = (
        "python3 -m http.server 0 >/dev/null 2>&1 & "
        "while true; do python3 train_loop.py; sleep 5; done"
    )
    spawned.start(
        ["/bin/sh", "-c", f"nohup bash -c {shlex.quote(loop)} >/dev/null 2>&1 & exit 0"],
        cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
    ).wait(timeout=10)  # fmt: skip

    def run(*args: str) -> tuple[int, str]:
        res = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", *args, "--config", str(config)],
            env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
            check=False,
        )  # fmt: skip
        return res.returncode, res.stdout

    def trainers() -> list[dict[str, Any]]:
        jobs = json.loads(run("scan", "--json")[1])["jobs"]
        return [j for j in jobs if j["cmdline"] == ["python3", "train_loop.py"]]

    job = poll("the trainer", trainers, 20)[0]
    pid, shell = job["root_pid"], job["lineage"][1]["pid"]
    server = next(p for p in poll("the server", lambda: _children(shell), 10) if p != pid)
    kill = (
        f"stop the loop first: kill -TERM {shell} (its shell alone: what else it started "
        "keeps running)"
    )
    assert job["advice"]["restarts"] == {
        "when": "after about 5 s",  # its body's `sleep 5` after the trainer
        "how": f"shell loop `while true` in PID {shell}",
        "stops": kill,
        "after_terminate": True,
    }
    rc, out = run("explain", str(pid))
    assert (
        f"Remediation: restarts it: after about 5 s, shell loop `while true` in PID {shell}; "
        f"to stop it: {kill}, then rogue-watchdog terminate --config {config} {pid}, or by hand: "
        f"kill -TERM {pid}\n"
    ) in out
    rc, out = run("terminate", str(pid))
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"terminate rogue job PID {pid} ")
    assert lines[1] == (
        f"  its source starts it again: after about 5 s, shell loop `while true` in PID {shell}"
    )
    assert lines[-2:] == ["outcome: will-return", f"will come back: its source restarts it; {kill}"]
    back = poll("the trainer back", lambda: [j for j in trainers() if j["root_pid"] != pid], 15)
    # The advice, followed: the loop's shell, then the run; the server keeps running.
    os.kill(shell, signal.SIGTERM)
    rc, out = run("terminate", str(back[0]["root_pid"]))
    assert rc == 0 and out.splitlines()[-1] == "outcome: ok", out
    time.sleep(6)  # past the loop's `sleep 5`: nothing comes back
    assert trainers() == []
    assert Path(f"/proc/{server}").exists()


def test_a_loop_in_an_executable_script_is_named_and_stopped_with_its_run(
    spawned: Spawned, tmp_path: Path
) -> None:
    """The loop in a ``#!/bin/bash`` script run as ``./retrain.sh`` (argv ``/bin/bash
    ./retrain.sh``), its shell running nothing else. BEFORE: ``advice.restarts`` null
    (nothing said to start it again), terminate stopped the run alone and the loop ran
    it again 5 s later."""
    need_root()
    (tmp_path / "train_loop.py").write_text("import time\ntime.sleep(300)\n")
    script = tmp_path / "retrain.sh"
    script.write_text("#!/bin/bash\nwhile true; do\n  python3 train_loop.py\n  sleep 5\ndone\n")
    script.chmod(0o755)
    config = tmp_path / "config.yaml"
    config.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n")
    spawned.start(
        ["/bin/sh", "-c", "nohup ./retrain.sh >/dev/null 2>&1 & exit 0"],
        cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
    ).wait(timeout=10)  # fmt: skip

    def run(*args: str) -> tuple[int, str]:
        res = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", *args, "--config", str(config)],
            env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
            check=False,
        )  # fmt: skip
        return res.returncode, res.stdout

    def trainers() -> list[dict[str, Any]]:
        jobs = json.loads(run("scan", "--json")[1])["jobs"]
        return [j for j in jobs if j["cmdline"] == ["python3", "train_loop.py"]]

    job = poll("the trainer", trainers, 20)[0]
    pid, shell = job["root_pid"], job["lineage"][1]["pid"]
    assert job["lineage"][1]["cmdline"] == ["/bin/bash", "./retrain.sh"]
    how = (
        f"shell loop `while true` in the script `./retrain.sh` of PID {shell} (as the file "
        "reads now)"
    )
    assert job["advice"]["restarts"] == {
        "when": "after about 5 s", "how": how, "stops": "terminate stops the loop with it",
        "after_terminate": False,
    }  # fmt: skip
    rc, out = run("terminate", str(pid))
    assert rc == 0 and out.splitlines()[-1] == "outcome: ok", out
    assert not Path(f"/proc/{shell}").exists() or _state(shell) == "Z"
    time.sleep(6)  # past the loop's `sleep 5`: nothing comes back
    assert trainers() == []


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def test_a_transient_unit_prints_no_undo_it_cannot_do(sd: NamespacedSystemd) -> None:
    """Issue 31, case 8. BEFORE (4ec0a01): remediation `systemctl disable --now U && systemctl
    mask U` (a mask link for a unit that is gone once stopped); disable-source printed
    `undo with: rogue-watchdog undo 1`, and `undo 1` said it had nothing to undo."""
    trainer = sd.write_file("train_transient.py", "import time\ntime.sleep(600)\n")
    sd.write_file(
        "transient.yaml",
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{sd.sandbox}/transient-state'}}\n",
    )
    unit = "rw-transient.service"
    sd.nsenter(
        "systemd-run", "--unit=rw-transient", "-p", "DefaultDependencies=no", "-p",
        "Restart=always", "/usr/bin/python3", str(trainer),
    )  # fmt: skip
    try:
        pid = sd.wait_main_pid(unit)
        job = scan_job(sd, trainer, config="transient.yaml")
        assert job["origin"]["remediation"] == f"systemctl stop {unit}"
        rc, out = cli(sd, "disable-source", str(pid), config="transient.yaml")
        assert rc == 0, out
        assert (
            "outcome: ok; nothing to undo (a transient unit is gone once stopped, and cannot "
            "be started again)\n"
        ) in out
        assert "undo with" not in out
    finally:
        sd.stop_units([unit])


def test_undo_is_recorded_before_it_starts_the_job_and_keeps_the_unit_files_mtime(
    sd: NamespacedSystemd,
) -> None:
    """Issue 31, case 8. BEFORE (4ec0a01): the restored unit file got a new mtime (its own
    was 1700000000), and the undo was recorded after its `systemctl start` ran (a daemon
    ticking in between opened `respawned`). AFTER: the undo's action row exists, as
    `running`, while it starts the unit, and the file's mtime is its own again."""
    trainer = sd.write_file("train_mtime.py", "import time\ntime.sleep(600)\n")
    sd.write_file(
        "mtime.yaml",
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{sd.sandbox}/mtime-state'}}\n",
    )
    unit = "rw-mtime.service"
    etc = Path(f"/proc/{sd.pid}/root/etc/systemd/system")
    (etc / unit).write_text(
        "[Unit]\nDefaultDependencies=no\n\n[Service]\n"
        f"ExecStart=/usr/bin/python3 {trainer}\nRestart=always\n"
        # Runs as the unit starts: what the state database says about the undo then.
        f"ExecStartPre=/bin/sh -c 'sqlite3 {sd.sandbox}/mtime-state/state.db "
        f'"SELECT kind, outcome FROM actions ORDER BY id" > {sd.sandbox}/at-start.txt '
        "2>&1 || true'\n"
    )
    os.utime(etc / unit, (1_700_000_000, 1_700_000_000))
    sd.systemctl("daemon-reload")
    sd.systemctl("start", unit)
    try:
        pid = sd.wait_main_pid(unit)
        rc, out = cli(sd, "disable-source", str(pid), config="mtime.yaml")
        assert rc == 0, out
        undo = next(x for x in out.splitlines() if "undo with" in x).split()[-1]
        rc, out = cli(sd, "undo", undo, config="mtime.yaml")
        assert rc == 0, out
        assert os.stat(etc / unit).st_mtime == 1_700_000_000
        sd.wait_main_pid(unit)
        if shutil.which("sqlite3"):
            seen = (sd.sandbox / "at-start.txt").read_text().splitlines()
            assert seen[-1] == "undo|running", seen
    finally:
        sd.systemctl("unmask", unit, check=False)
        sd.stop_units([unit])
