"""Real single-node Slurm: drain on rogue GPU use (resume only our own drain), and the
job-end sweep that stops leftovers of ended jobs (setsid'ed, SIGTERM ignored).

The GPU is a plain file in the sandbox named by ``training.device_glob``: holding it open
is what "holds a GPU" means to the device-fd source, as in the other system tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import poll, run_cli
from tests.system.slurmharness import PYTHON, SlurmHarness, slurm_cluster  # noqa: F401
from watchdog.actions.slurmnode import SlurmDrainer, node_state, run_command
from watchdog.config.slurm import SlurmNodeSettings
from watchdog.model import CronOrigin, Job
from watchdog.sources.procfs import ProcessTable

pytestmark = pytest.mark.system
HOST = socket.gethostname().split(".")[0]
# Ignores SIGTERM, leaves the job's session and process tree, holds the "GPU" open.
ORPHAN = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "if os.fork(): os._exit(0)\n"
    "os.setsid()\n"
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
    st = node_state(HOST, run_command(10))
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


def _orphan_job(cluster: SlurmHarness, tmp: Path, tag: str) -> tuple[int, int]:
    gpu = tmp / "nvidia0"
    gpu.write_text("")
    script = cluster.root / f"orphan_{tag}.py"
    script.write_text(ORPHAN)
    pidfile = cluster.root / f"orphan_{tag}.pid"
    job = cluster.sbatch(wrap=f"{PYTHON} {script} {gpu} {pidfile}")
    pid = poll("the orphan's pid file", lambda: pidfile.exists() and pidfile.read_text(), 30)
    cluster.extra_pids.append(int(pid))
    cluster.wait_state(job, {"COMPLETED", ""})
    return job, int(pid)


def _config(tmp: Path, extra: str = "") -> Path:
    cfg = tmp / "config.yaml"
    cfg.write_text(
        f"training: {{device_glob: '{tmp}/nvidia[0-9]*'}}\n"
        f"slurm: {{node_name: {HOST}, sweep_grace_s: 0.5}}\n" + extra
    )
    return cfg


def _alive(pid: int) -> bool:
    proc = ProcessTable().refresh().get(pid)
    return proc is not None and not proc.is_zombie


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
        assert lines[0].startswith(
            f"PID {pid} (root) is an orphan of Slurm job {job}, holds {tmp_path}/nvidia0: "
        )
        assert f"job {job}: PID {pid} killed after SIGTERM+SIGKILL" in lines
        assert not _alive(pid)
        assert _state()[0] == "idle"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


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
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_long_reason_reads_back_whole(cluster: SlurmHarness, tmp_path: Path) -> None:
    drainer = SlurmDrainer(SlurmNodeSettings(drain_on=("rogue",), node_name=HOST), str(tmp_path))
    job = _rogue()
    job.user = "u" * 190
    drainer.apply([job])
    state, reason = _state()
    assert state == "drained"
    assert reason is not None and len(reason) == 200 and reason.endswith("u" * 100)
    drainer.apply([])
    assert _state() == ("idle", None)
