"""Real single-node Slurm: drain on rogue GPU use (resume only our own drain), and the
job-end sweep that stops leftovers of ended jobs (setsid'ed, SIGTERM ignored).

The GPU is a plain file in the sandbox named by ``training.device_glob``: holding it open
is what "holds a GPU" means to the device-fd source, as in the other system tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rogue_watchdog.actions.slurmnode import SlurmDrainer, node_state
from rogue_watchdog.command import run
from rogue_watchdog.config import load_config
from rogue_watchdog.config.slurm import SlurmNodeSettings
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.hosttext import quoted_command
from rogue_watchdog.model import CronOrigin, Job
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import poll, run_cli
from tests.system.slurmharness import PYTHON, SlurmHarness, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.system
HOST = socket.gethostname().split(".")[0]
# A worker that ignores SIGTERM, leaves the job's session and process tree and holds the
# "GPU" open; the job's main process lives on for argv[3] seconds (the daemon sees the
# worker below slurmstepd meanwhile), then exits and Slurm calls the job done.
ORPHAN = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "if os.fork():\n"
    "    time.sleep(float(sys.argv[3])); os._exit(0)\n"
    "os.setsid()\n"
    "gpu = open(sys.argv[1])\n"
    "open(sys.argv[2], 'w').write(str(os.getpid()))\n"
    "time.sleep(600)\n"
)
# As ORPHAN, but SIGTERM makes it start a fresh copy of itself in a new session (which
# writes its PID to argv[2] + ".copy") and exit; the copy does the same.
RESPAWNER = (
    "import os, signal, subprocess, sys, time\n"
    "def again(*_):\n"
    "    p = subprocess.Popen([sys.executable, sys.argv[0], sys.argv[1], sys.argv[2] + '.copy',\n"
    "                          '0', 'copy'], start_new_session=True)\n"
    "    open(sys.argv[2] + '.spawning', 'w').write(str(p.pid))\n"
    "    os.rename(sys.argv[2] + '.spawning', sys.argv[2] + '.spawned')\n"
    "    os._exit(0)\n"
    "signal.signal(signal.SIGTERM, again)\n"
    "if len(sys.argv) < 5 and os.fork():\n"
    "    time.sleep(float(sys.argv[3])); os._exit(0)\n"
    "if len(sys.argv) < 5: os.setsid()\n"
    "gpu = open(sys.argv[1])\n"
    "open(sys.argv[2], 'w').write(str(os.getpid()))\n"
    "time.sleep(600)\n"
)


@pytest.fixture
def cluster(slurm_cluster: SlurmHarness, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmHarness]:  # noqa: F811
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    try:
        yield slurm_cluster
    finally:
        slurm_cluster.cli("scontrol", "update", f"nodename={HOST}", "state=resume", check=False)


def _state() -> tuple[str, str | None]:
    st = node_state(HOST, run, 10)
    assert not isinstance(st, str), st
    return st.state, st.reason


def _rogue(pid: int = 4242) -> Job:
    return Job(
        root_pid=pid, pids=[pid], user="alice", cmdline=("python3", "train.py"),
        start_ticks=1, gpu_memory_bytes=None, gpu_uuids=[], lineage=[],
        origin=CronOrigin(), verdict="rogue",
    )  # fmt: skip


def test_drain_while_rogue_then_resume_our_own(cluster: SlurmHarness, tmp_path: Path) -> None:
    drainer = SlurmDrainer(SlurmNodeSettings(drain_on=("rogue",), node_name=HOST), str(tmp_path))
    assert _state() == ("idle", None)
    findings = drainer.apply([_rogue()])
    reason = "rogue-watchdog: rogue training job PID 4242 user alice (cron) holds the GPU"
    assert [(f.kind, f.severity) for f in findings] == [("slurm-node-drained", "info")]
    assert _state() == ("drained", reason)
    # Still rogue next tick: no second scontrol, the drain holds.
    assert drainer.apply([_rogue()])[0].details["reason"] == reason
    # That job ended and another holds the GPU: the reason names the one there now.
    now = "rogue-watchdog: rogue training job PID 4343 user alice (cron) holds the GPU"
    assert drainer.apply([_rogue(4343)])[0].details["reason"] == now
    assert _state() == ("drained", now)
    assert drainer.apply([]) == []
    assert _state() == ("idle", None)
    assert not (tmp_path / "slurm-drain.json").exists()


def test_never_undo_an_admins_drain(cluster: SlurmHarness, tmp_path: Path) -> None:
    drainer = SlurmDrainer(SlurmNodeSettings(drain_on=("rogue",), node_name=HOST), str(tmp_path))
    cluster.cli("scontrol", "update", f"nodename={HOST}", "state=drain", "reason=disk swap")
    assert drainer.apply([_rogue()]) == []
    assert drainer.apply([]) == []
    assert _state() == ("drained", "disk swap")
    # Ours, then the admin re-drains with their reason: resolving leaves theirs in place.
    cluster.cli("scontrol", "update", f"nodename={HOST}", "state=resume")
    drainer.apply([_rogue()])
    assert _state()[1] is not None and _state()[1].startswith("rogue-watchdog: ")
    cluster.cli("scontrol", "update", f"nodename={HOST}", "state=drain", "reason=admin now")
    assert drainer.apply([]) == []
    assert _state() == ("drained", "admin now")


def _orphan_job(
    cluster: SlurmHarness, tmp: Path, tag: str, source: str = ORPHAN, record: bool = True
) -> tuple[int, int]:
    """Submit a job whose worker outlives it; while the job runs, a daemon tick (the
    real loop, state in ``tmp/state``) records what runs below its slurmstepd."""
    gpu = tmp / "nvidia0"
    gpu.write_text("")
    script = cluster.root / f"orphan_{tag}.py"
    script.write_text(source)
    pidfile = cluster.root / f"orphan_{tag}.pid"
    job = cluster.sbatch(wrap=f"{PYTHON} {script} {gpu} {pidfile} 4")
    pid = poll("the orphan's pid file", lambda: pidfile.exists() and pidfile.read_text(), 30)
    cluster.extra_pids.append(int(pid))
    if record:
        daemon = Daemon(load_config(str(_config(tmp))), None)
        daemon.tick(time.time())
        daemon.db.close()
    cluster.wait_state(job, {"COMPLETED", ""})
    return job, int(pid)


def _config(tmp: Path, extra: str = "") -> Path:
    cfg = tmp / "config.yaml"
    cfg.write_text(
        "nvml: {enabled: false}\n"
        f"training: {{device_glob: '{tmp}/nvidia[0-9]*'}}\n"
        f"daemon: {{state_dir: '{tmp}/state'}}\n"
        f"slurm: {{node_name: {HOST}, sweep_grace_s: 0.5}}\n" + extra
    )
    return cfg


def _alive(pid: int) -> bool:
    proc = ProcessTable().refresh().get(pid)
    return proc is not None and not proc.is_zombie


def _kill(*pids: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_health_check_stops_a_setsid_orphan_that_ignores_sigterm(
    cluster: SlurmHarness, tmp_path: Path
) -> None:
    job, pid = _orphan_job(cluster, tmp_path, "a")
    try:
        assert _alive(pid)  # Slurm called the job done; the orphan lives on
        env = {"SLURM_CONF": str(cluster.conf)}
        res = run_cli("health-check", "--config", str(_config(tmp_path)), env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        lines = res.stdout.splitlines()
        # The command as every report line shows it: cut at 160 characters, which a long
        # temporary path (pytest-xdist's popen-gwN/ level) reaches.
        argv = (PYTHON, f"{cluster.root}/orphan_a.py", f"{tmp_path}/nvidia0",
                f"{cluster.root}/orphan_a.pid", "4")  # fmt: skip
        assert lines[0] == (
            f"PID {pid} (root) is an orphan of Slurm job {job}, holds {tmp_path}/nvidia0 "
            f"(recorded below slurmstepd while the job ran): {quoted_command(argv, 160)}"
        )
        assert f"job {job}: PID {pid} killed after SIGTERM+SIGKILL" in lines
        assert not _alive(pid)
        assert _state()[0] == "idle"
    finally:
        _kill(pid)


def test_epilog_drains_the_node_when_an_orphan_survives(
    cluster: SlurmHarness, tmp_path: Path
) -> None:
    job, pid = _orphan_job(cluster, tmp_path, "b")
    try:
        cfg = _config(tmp_path, "enforcement: {protect: ['*orphan_b.py*']}\n")
        env = {"SLURM_CONF": str(cluster.conf), "SLURM_JOB_ID": str(job)}
        res = run_cli("health-check", "--epilog", "--config", str(cfg), env=env)
        assert res.returncode == 1, res.stdout + res.stderr
        reason = f"rogue-watchdog: orphan of Slurm job {job} survived termination (PID {pid})"
        assert f"node drained: {reason}" in res.stdout.splitlines()
        assert _state() == ("drained", reason)
        assert _alive(pid)  # protected: never signalled
        # The protection is lifted and the leftover is gone: the next sweep lifts its drain.
        _kill(pid)
        poll("the orphan to exit", lambda: not _alive(pid) or None, 10)
        res = run_cli("health-check", "--epilog", "--config", str(cfg), env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert _state() == ("idle", None)
    finally:
        _kill(pid)


def test_an_environment_claim_is_never_killed(cluster: SlurmHarness, tmp_path: Path) -> None:
    """Trust IV case 8: a process of another user and a root `sleep` whose environments
    carry SLURM_JOB_ID of an ended job were planned and killed. A claim is not
    membership: both are reported, neither is signalled."""
    job, pid = _orphan_job(cluster, tmp_path, "c")
    _kill(pid)
    env = {**os.environ, "SLURM_JOB_ID": str(job)}
    other = subprocess.Popen(
        ["runuser", "-u", "nobody", "--", "sleep", "300"], env=env, start_new_session=True
    )
    sleep = subprocess.Popen(["sleep", "301"], env=env, start_new_session=True)
    try:
        poll("both claimants", lambda: (_alive(other.pid) and _alive(sleep.pid)) or None, 10)
        sleeper = poll("user nobody's sleep", lambda: next((
            p for p, proc in ProcessTable().refresh().items()
            if proc.cmdline == ("sleep", "300") and proc.user == "nobody"
        ), None), 10)  # fmt: skip
        cfg = _config(tmp_path)
        base = {"SLURM_CONF": str(cluster.conf)}
        for argv, extra in (
            (["--job", str(job)], {}),
            (["--epilog"], {"SLURM_JOB_ID": str(job), "SLURM_JOB_UID": "0"}),
            ([], {}),
        ):
            res = run_cli(
                "health-check", *argv, "--json", "--config", str(cfg), env={**base, **extra}
            )
            doc = json.loads(res.stdout)
            assert doc["leftovers"] == [] and doc["outcomes"] == {}, (argv, doc)
            claimed = {u["pid"]: u["proof"] for u in doc["unconfirmed"]}
            claim = "only its environment says so: no job cgroup, not seen below slurmstepd"
            # runuser carries the environment too: as much a claim as the rest.
            assert claimed == dict.fromkeys((other.pid, sleeper, sleep.pid), claim), argv
            assert res.returncode == 0
            assert _alive(sleeper) and _alive(sleep.pid)
    finally:
        for p in (other, sleep):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_a_running_job_is_never_swept(cluster: SlurmHarness, tmp_path: Path) -> None:
    """Trust IV case 8: `--job N` / `--epilog` for a job still RUNNING planned kills."""
    gpu = tmp_path / "nvidia0"
    gpu.write_text("")
    job = cluster.sbatch(wrap=f"{PYTHON} -c 'import time; time.sleep(60)'")
    cluster.wait_state(job, {"RUNNING"})
    cfg = _config(tmp_path)
    for argv, extra in ((["--job", str(job)], {}), (["--epilog"], {"SLURM_JOB_ID": str(job)})):
        res = run_cli(
            "health-check", *argv, "--config", str(cfg),
            env={"SLURM_CONF": str(cluster.conf), **extra},
        )  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        # Issue 37, case 5: said "no leftovers of ended Slurm jobs".
        assert res.stdout.splitlines() == [
            f"Slurm job {job}: still RUNNING: its processes are Slurm's, not swept"
        ], argv
    assert cluster.state(job) == "RUNNING"
    # A process of it that left slurmstepd while it runs is still the job's, not swept.
    env = {**os.environ, "SLURM_JOB_ID": str(job)}
    out = subprocess.Popen(["sleep", "302"], env=env, start_new_session=True)
    try:
        res = run_cli(
            "health-check", "--job", str(job), "--config", str(cfg),
            env={"SLURM_CONF": str(cluster.conf)},
        )  # fmt: skip
        assert res.stdout.splitlines() == [
            f"Slurm job {job}: still RUNNING: its processes are Slurm's, not swept"
        ]
        assert _alive(out.pid)
    finally:
        out.kill()
        out.wait()
        cluster.cli("scancel", str(job), check=False)
        cluster.wait_state(job, {"CANCELLED", "COMPLETED", ""})


def test_a_leftover_that_starts_a_copy_is_not_clean(cluster: SlurmHarness, tmp_path: Path) -> None:
    """Trust IV case 8: a leftover that on SIGTERM starts a fresh copy in a new session
    was reported `exited`, survivors [], exit 0, while the copy lived. Issue 37: the
    kernel's fork events tie the copy to the leftover; it is frozen and SIGKILLed (no
    SIGTERM to copy itself again) and only then is the node clean."""
    job, pid = _orphan_job(cluster, tmp_path, "r", source=RESPAWNER)
    # The copy's PID as the leftover that started it wrote it: the sweep may kill the
    # copy before its interpreter has started, before it could write a pid file itself.
    copyfile = cluster.root / "orphan_r.pid.spawned"
    copy = 0
    try:
        cfg = _config(tmp_path)
        env = {"SLURM_CONF": str(cluster.conf)}
        res = run_cli("health-check", "--job", str(job), "--json", "--config", str(cfg), env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        doc = json.loads(res.stdout)
        copy = int(poll("the copy's PID", lambda: copyfile.exists() and copyfile.read_text(), 10))
        cluster.extra_pids.append(copy)
        assert [lo["pid"] for lo in doc["leftovers"]] == [pid]
        assert [c["pid"] for c in doc["copies"]] == [copy]
        assert doc["survivors"] == [] and doc["drained"] is None
        killed = [p["signals"] for o in doc["outcomes"][str(job)] for p in o["procs"]]
        assert killed == [["SIGSTOP", "SIGTERM", "SIGCONT"], ["SIGSTOP", "SIGKILL"]]
        assert not _alive(pid) and not _alive(copy)
        assert _state() == ("idle", None)
    finally:
        cluster.extra_pids.kill([pid, *([copy] if copy else [])])


def test_a_long_reason_reads_back_whole(cluster: SlurmHarness, tmp_path: Path) -> None:
    drainer = SlurmDrainer(SlurmNodeSettings(drain_on=("rogue",), node_name=HOST), str(tmp_path))
    job = dataclasses.replace(_rogue(), user="u" * 190)
    drainer.apply([job])
    state, reason = _state()
    assert state == "drained"
    assert reason is not None and len(reason) == 200 and reason.endswith("u" * 100)
    drainer.apply([])
    assert _state() == ("idle", None)
