"""The GPU queue on a real single-node Slurm: findings, hold, cancel, Slurm-aware GPU policy.

Jobs are submitted by root (the sanctioned user, account ``ml-research``) and by a
throwaway system user created for this module (``useradd -M``, removed at teardown)
through ``runuser -u USER -- sbatch``. Two jobs of half the node's CPUs run; two
whole-node jobs wait (``PENDING``): one running and one pending entry per user.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.command import RecordingRunner, run
from rogue_watchdog.config.queue import QueueRule, QueueSettings
from rogue_watchdog.model import NvmlStatus, ScanResult
from rogue_watchdog.policy.guard import ScanProtection
from rogue_watchdog.queue.actions import QueueEnforcer
from rogue_watchdog.queue.slurm import SQUEUE_FORMAT, SlurmQueue, parse_squeue_formatted
from rogue_watchdog.queue.source import QueueSource
from rogue_watchdog.sources.procfs import ProcessTable
from rogue_watchdog.state import StateDB
from tests.conftest import Spawned, need, need_program, run_cli
from tests.fakenvml.fixtures import fake_nvml, library_path
from tests.system.slurmharness import PYTHON, SlurmHarness, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.system

STRANGER = "rwq-svcold"
RULES = (QueueRule("pipeline", user="root", account="ml-research"),)

# A scan whose guard protects nothing (no sanctioned job, no pin): queue rules decide.
SCAN = ScanResult("h", datetime.now(UTC), 0.0, NvmlStatus(False), protection=ScanProtection())


@dataclass
class Jobs:
    ok_running: int
    ok_pending: int
    bad_running: int
    bad_pending: int


@pytest.fixture(scope="module")
def stranger() -> Iterator[str]:
    """A throwaway system user without a home directory."""
    need(os.geteuid() == 0, "needs root")
    need_program("useradd", "userdel", "runuser")
    try:
        pwd.getpwnam(STRANGER)
        need(False, f"user {STRANGER} already exists; not touching it")
    except KeyError:
        pass
    subprocess.run(
        ["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", STRANGER], check=True, timeout=30
    )
    try:
        yield STRANGER
    finally:
        subprocess.run(["userdel", STRANGER], check=False, timeout=30)


@pytest.fixture
def cluster(
    slurm_cluster: SlurmHarness,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[SlurmHarness]:
    """The session cluster, with this process's Slurm clients pointed at it."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    yield slurm_cluster


def _submit(c: SlurmHarness, user: str | None, *opts: str, tag: str) -> int:
    argv = ["sbatch", "--parsable", "-o", "/dev/null", *opts]
    argv += ["--wrap", f"{PYTHON} {c.trainer} {tag}"]
    if user is not None:
        argv = ["runuser", "-u", user, "--", *argv]
    out = c.cli(*argv)
    job = int(out.stdout.strip().split(";")[0])
    c.job_ids.append(job)
    return job


@pytest.fixture
def jobs(cluster: SlurmHarness, stranger: str) -> Iterator[Jobs]:
    need(cluster.cpus >= 2, "needs 2 CPUs for two running jobs")
    half = f"--cpus-per-task={cluster.cpus // 2}"
    whole = f"--cpus-per-task={cluster.cpus}"
    ok_r = _submit(cluster, None, "-J", "retrain-weekly", "-A", "ml-research", half, tag="okr")
    bad_r = _submit(cluster, stranger, "-J", "old-trainer", "-A", "legacy", half, tag="badr")
    ok_p = _submit(cluster, None, "-J", "eval-nightly", "-A", "ml-research", whole, tag="okp")
    bad_p = _submit(cluster, stranger, "-J", "legacy-retrain", whole, tag="badp")
    mine = [ok_r, bad_r, ok_p, bad_p]
    try:
        cluster.wait_state(ok_r, {"RUNNING"})
        cluster.wait_state(bad_r, {"RUNNING"})
        cluster.wait_state(ok_p, {"PENDING"})
        cluster.wait_state(bad_p, {"PENDING"})
        yield Jobs(ok_r, ok_p, bad_r, bad_p)
    finally:
        cluster.cli("scancel", *map(str, mine), check=False)
        for j in mine:
            cluster.wait_state(j, {"", "CANCELLED", "COMPLETED"}, timeout_s=30)


def _show(c: SlurmHarness, job: int) -> dict[str, str]:
    from rogue_watchdog.lineage.slurm import parse_scontrol_record

    return parse_scontrol_record(c.cli("scontrol", "show", "job", "-o", str(job)).stdout)


def _mine(findings: list[Any], jobs: Jobs) -> dict[int, Any]:
    ids = {jobs.ok_running, jobs.ok_pending, jobs.bad_running, jobs.bad_pending}
    return {
        int(f.details["job_id"]): f
        for f in findings
        if f.kind == "queue-unsanctioned" and int(f.details["job_id"]) in ids
    }


def test_unknown_users_entries_are_reported_exactly(cluster: SlurmHarness, jobs: Jobs) -> None:
    source = QueueSource(SlurmQueue(), QueueSettings(slurm=True, sanctioned=RULES))
    found = _mine(source.findings(time.time(), None), jobs)
    assert sorted(found) == sorted([jobs.bad_running, jobs.bad_pending])
    pend, run = found[jobs.bad_pending], found[jobs.bad_running]
    assert (pend.severity, pend.details["state"], pend.details["user"]) == (
        "high", "pending", STRANGER,
    )  # fmt: skip
    assert (pend.details["job_name"], pend.details["account"]) == ("legacy-retrain", None)
    assert pend.details["fingerprint"] == f"slurm:{jobs.bad_pending}"
    # The sandbox cluster has no GPU: the job asked for CPUs only, and is not said to wait
    # for a GPU (issue 32, case 10d; it was "waiting for a GPU since").
    assert pend.message.startswith(
        f"Slurm job {jobs.bad_pending} `legacy-retrain` by user {STRANGER} waiting to run since "
    )
    assert f", no GPU requested); to remove it: scancel {jobs.bad_pending}" in pend.message
    assert pend.details["requests_gpu"] is False
    assert pend.message.endswith(f"; to remove it: scancel {jobs.bad_pending}")
    assert (run.details["state"], run.details["job_name"], run.details["account"]) == (
        "running", "old-trainer", "legacy",
    )  # fmt: skip
    assert f"Slurm job {jobs.bad_running} `old-trainer` by user {STRANGER} running since" in (
        run.message
    )
    assert source.backend.via == "squeue --json"  # type: ignore[attr-defined]


def test_formatted_squeue_agrees_with_json(cluster: SlurmHarness, jobs: Jobs) -> None:
    via_json = {e.job_id: e for e in SlurmQueue().entries()}
    text = cluster.cli("squeue", "-h", "-a", "-o", SQUEUE_FORMAT).stdout
    via_fmt = {e.job_id: e for e in parse_squeue_formatted(text)}
    for job in (jobs.ok_running, jobs.ok_pending, jobs.bad_running, jobs.bad_pending):
        a, b = via_json[str(job)], via_fmt[str(job)]
        assert (a.user, a.account, a.partition, a.name, a.phase, a.submit_time) == (
            b.user, b.account, b.partition, b.name, b.phase, b.submit_time,
        )  # fmt: skip


def _enforcer(
    action: str, tmp_path: Path, *, mode: str = "terminate", dry_run: bool = False
) -> tuple[QueueSource, QueueEnforcer, StateDB, RecordingRunner]:
    settings = QueueSettings(slurm=True, sanctioned=RULES, action=action)  # type: ignore[arg-type]
    source = QueueSource(SlurmQueue(), settings)
    db = StateDB(tmp_path / f"state-{action}-{mode}-{dry_run}")
    rec = RecordingRunner(answer=lambda argv: run(argv, 15.0))  # for real, recorded
    return (
        source,
        QueueEnforcer(source, settings, db, mode=mode, dry_run=dry_run, runner=rec),
        db,
        rec,
    )


def test_hold_touches_only_the_unknown_pending_entry(
    cluster: SlurmHarness, jobs: Jobs, tmp_path: Path
) -> None:
    # Observe mode and dry run change nothing.
    for mode, dry in (("observe", False), ("terminate", True)):
        source, enf, db, rec = _enforcer("hold", tmp_path, mode=mode, dry_run=dry)
        source.findings(time.time(), None)
        assert enf.act(time.time(), SCAN, None) == []
        assert rec.calls == []
        assert _show(cluster, jobs.bad_pending)["Reason"] != "JobHeldAdmin"
        dry_rows = [(a.kind, a.target, a.outcome, a.dry_run) for a in db.actions()]
        want = [("scontrol-hold", f"slurm job {jobs.bad_pending}", "dry-run", True)] if dry else []
        assert dry_rows == want
        db.close()

    source, enf, db, rec = _enforcer("hold", tmp_path)
    source.findings(time.time(), None)
    assert enf.act(time.time(), SCAN, None) == []
    assert rec.calls == [("scontrol", "hold", str(jobs.bad_pending))]
    held = _show(cluster, jobs.bad_pending)
    assert (held["JobState"], held["Reason"], held["Priority"]) == ("PENDING", "JobHeldAdmin", "0")
    for other in (jobs.ok_pending, jobs.ok_running, jobs.bad_running):
        rec_ = _show(cluster, other)
        assert rec_["Reason"] not in ("JobHeldAdmin", "JobHeldUser") and rec_["Priority"] != "0"
    (action,) = db.actions()
    assert (action.actor, action.kind, action.outcome, action.dry_run) == (
        "queue", "scontrol-hold", "ok", False,
    )  # fmt: skip
    undo: Any = action.undo  # a list of ops (the undo contract), typed loosely in StateDB
    assert undo == [{"op": "scontrol", "argv": ["release", str(jobs.bad_pending)]}]
    # The entry stays reported, now as held; a second tick does not hold it again.
    again = _mine(source.findings(time.time(), None), jobs)[jobs.bad_pending]
    assert again.details["held"] is True and again.message.endswith(
        f"; held; to remove it: scancel {jobs.bad_pending}"
    )
    enf.act(time.time(), SCAN, None)
    assert len(rec.calls) == 1
    # The recorded undo op restores it.
    cluster.cli("scontrol", *undo[0]["argv"])
    released = _show(cluster, jobs.bad_pending)
    assert released["Reason"] != "JobHeldAdmin" and released["Priority"] != "0"
    db.close()


def test_cancel_touches_only_the_unknown_entries(
    cluster: SlurmHarness, jobs: Jobs, tmp_path: Path
) -> None:
    source, enf, db, rec = _enforcer("cancel", tmp_path)
    source.findings(time.time(), None)
    assert enf.act(time.time(), SCAN, None) == []
    assert sorted(rec.calls) == sorted(
        [("scancel", str(jobs.bad_running)), ("scancel", str(jobs.bad_pending))]
    )
    for job in (jobs.bad_running, jobs.bad_pending):
        assert cluster.wait_state(job, {"CANCELLED", ""}) in ("CANCELLED", "")
        assert _show(cluster, job)["JobState"] == "CANCELLED"
    assert _show(cluster, jobs.ok_running)["JobState"] == "RUNNING"
    assert _show(cluster, jobs.ok_pending)["JobState"] == "PENDING"
    assert sorted((a.kind, a.target, a.outcome, a.undo) for a in db.actions()) == sorted(
        [
            ("scancel", f"slurm job {jobs.bad_running}", "ok", None),
            ("scancel", f"slurm job {jobs.bad_pending}", "ok", None),
        ]
    )
    # Nothing unsanctioned is left in the queue.
    assert _mine(source.findings(time.time(), None), jobs) == {}
    db.close()


GPU_WORKER = "import sys, time\ntime.sleep(600)\n"


def _pid_of(argv: tuple[str, ...], timeout_s: float = 30) -> int:
    table = ProcessTable()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid, proc in table.refresh().items():
            if proc.cmdline == argv:
                return pid
        time.sleep(0.2)
    raise AssertionError(f"no process {argv}")


def test_gpu_process_is_judged_by_its_slurm_job(
    cluster: SlurmHarness, spawned: Spawned, tmp_path: Path
) -> None:
    """A GPU holder inside a job of a sanctioned account is sanctioned; the same program
    outside any job is rogue. The script name matches no launcher: only NVML makes
    either of them a training job."""
    worker = cluster.root / "gpu_worker.py"
    worker.write_text(GPU_WORKER)
    job = cluster.sbatch(
        "-J", "retrain-weekly", "-A", "ml-research", wrap=f"{PYTHON} {worker} injob"
    )
    try:
        in_job = _pid_of((PYTHON, str(worker), "injob"))
        outside = spawned.start([PYTHON, str(worker), "outside"]).pid
        lib = fake_nvml(
            tmp_path,
            {"devices": [{"uuid": "GPU-q0", "total": 80 << 30, "processes": [
                {"pid": in_job, "mem": 3 << 30}, {"pid": outside, "mem": 5 << 30},
            ]}]},
        )  # fmt: skip
        config = tmp_path / "watchdog.yaml"
        config.write_text(
            "sanctioned:\n"
            "  - name: ml-train\n"
            f"    cmdline: '*/gpu_worker.py *'\n"
            "    origin: {slurm_account: ml-research}\n"
            f"nvml: {{library: '{library_path(lib)}'}}\n"
        )
        done = run_cli(
            "scan", "--json", "--config", str(config), env={"SLURM_CONF": str(cluster.conf)}
        )
        assert done.returncode in (0, 1), done.stderr
        doc = json.loads(done.stdout)
        by_root = {j["root_pid"]: j for j in doc["jobs"]}
        a, b = by_root[in_job], by_root[outside]
        assert (a["verdict"], a["rule"], a["origin"]["kind"], a["origin"]["job_id"]) == (
            "sanctioned", "ml-train", "slurm", job,
        )  # fmt: skip
        assert a["origin"]["account"] == "ml-research" and a["gpu_memory_bytes"] == 3 << 30
        assert (b["verdict"], b["gpu_memory_bytes"]) == ("rogue", 5 << 30)
        assert b["origin"]["kind"] != "slurm"
        assert "nvml" in a["evidence"] and "nvml" in b["evidence"]
    finally:
        cluster.cli("scancel", str(job), check=False)
