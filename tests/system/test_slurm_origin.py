"""Real single-node Slurm: running, pending and ended jobs resolve to the right origin.

The harness (tests/system/slurmharness.py) runs munged, slurmctld and slurmd in a
sandbox. Accounting storage is ``none``: Slurm keeps ``--account`` as submitted and
reports it through squeue/scontrol, so the account is asserted as Slurm reports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rogue_watchdog.lineage.base import ResolveContext, split_answer
from rogue_watchdog.lineage.orphan import OrphanResolver
from rogue_watchdog.lineage.slurm import SlurmResolver
from rogue_watchdog.model import Origin, SlurmOrigin
from rogue_watchdog.sources.procfs import ProcessTable
from tests.conftest import run_cli
from tests.system.slurmharness import PYTHON, SlurmHarness, slurm_cluster  # noqa: F401

pytestmark = pytest.mark.system


@pytest.fixture
def cluster(slurm_cluster: SlurmHarness, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmHarness]:  # noqa: F811
    """The session cluster, with this process's Slurm clients pointed at it."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    yield slurm_cluster


def _resolve(pid: int, resolver: SlurmResolver | OrphanResolver) -> Origin | None:
    table = ProcessTable()
    table.refresh()
    ctx = ResolveContext(table=table, now=datetime.now(UTC))
    # A resolver answers with its notes beside the origin (lineage.base.Resolved).
    return split_answer(resolver.resolve(table.ancestors(pid), ctx))[0]


def _stepd_pid(trainer: int) -> int:
    table = ProcessTable()
    table.refresh()
    return next(p.pid for p in table.ancestors(trainer) if p.cmdline[0].startswith("slurmstepd:"))


def test_running_then_pending_job_resolve_with_exact_ids(cluster: SlurmHarness) -> None:
    cpus = f"--cpus-per-task={cluster.cpus}"  # each job takes the whole node
    first = cluster.sbatch(
        "-J", "retrain-weekly", "-A", "ml-research", cpus, wrap=f"{PYTHON} {cluster.trainer} first"
    )
    second = cluster.sbatch(
        "-J", "eval-nightly", "-A", "ml-eval", cpus, wrap=f"{PYTHON} {cluster.trainer} second"
    )
    try:
        trainer = cluster.trainer_pid("first")
        assert cluster.wait_state(second, {"PENDING"}) == "PENDING"
        origin = _resolve(trainer, SlurmResolver())
        assert origin is not None and origin.kind == "slurm"
        assert origin.fields == {
            "job_id": first,
            "job_name": "retrain-weekly",
            "account": "ml-research",
            "user": "root",
            "partition": cluster.partition,
            "step": "batch",
            "state": "RUNNING",
        }
        assert origin.remediation == f"scancel {first}"
        stepd = _stepd_pid(trainer)
        assert origin.evidence[0] == f"ancestor PID {stepd} is `slurmstepd: [{first}.batch]`"

        # The pending job has no process yet; once the first is cancelled it runs.
        cluster.cli("scancel", str(first))
        trainer2 = cluster.trainer_pid("second")
        origin2 = _resolve(trainer2, SlurmResolver())
        assert origin2 is not None
        assert (origin2.fields["job_id"], origin2.fields["job_name"]) == (second, "eval-nightly")
        assert origin2.fields["account"] == "ml-eval"
        assert origin2.remediation == f"scancel {second}"
    finally:
        cluster.cli("scancel", str(first), str(second), check=False)


# A job whose payload double-forks a renamed worker (setsid, PPID 1 after the fork) and
# writes its PID; proctrack/linuxproc only follows the parent chain, so the worker
# survives scancel: the "ended job, worker still holds memory" report.
LEAKER = """import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open("/proc/self/comm", "w") as fh:
            fh.write("pt_data_worker")
        with open(sys.argv[1] + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"""


def test_case_a_worker_outliving_its_job_is_an_orphan(
    cluster: SlurmHarness, tmp_path: Path
) -> None:
    leaker = cluster.root / "train_leaky.py"
    leaker.write_text(LEAKER)
    pidfile = cluster.root / "worker.pid"
    job = cluster.sbatch("-J", "leaky", "-A", "ml-research", wrap=f"{PYTHON} {leaker} {pidfile}")
    deadline = time.monotonic() + 30
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    worker = int(pidfile.read_text())
    cluster.extra_pids.append(worker)
    try:
        # Double-forked out of its step (proctrack/linuxproc: no job cgroup), only its
        # environment names the job: a claim anyone can make, never a Slurm origin, even
        # while the job runs.
        claim = (
            f"claims Slurm job {job} in its environment, not confirmed (SLURM_JOB_ID={job} in "
            f"the environment of PID {worker}; no slurmstepd ancestor and no Slurm job cgroup)"
        )
        assert _resolve(worker, SlurmResolver()) is None
        cluster.cli("scancel", str(job))
        cluster.wait_state(job, {"CANCELLED", ""})
        table = ProcessTable()
        table.refresh()
        proc = table.get(worker)
        assert proc is not None and proc.comm == "pt_data_worker" and proc.ppid == 1
        assert _resolve(worker, SlurmResolver()) is None
        origin = _resolve(worker, OrphanResolver())
        assert origin is not None and origin.kind == "orphan"
        assert (origin.fields["slurm_job_id"], origin.fields["slurm_job_state"]) == (None, None)
        assert origin.remediation == f"kill -TERM {worker}"
        assert claim in origin.evidence
        # The whole registry, through the CLI, agrees (the worker runs train_leaky.py).
        scanned = _scan_origin(cluster, tmp_path, worker)
        assert scanned["kind"] == "orphan"
        assert scanned["slurm_job_id"] is None
        assert scanned["message"] == "orphan (parent exited)"
        assert claim in scanned["evidence"]  # type: ignore[operator]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)


CONFIG = """sanctioned:
  - name: nightly-eval
    cmdline: '* eval.py'
    origin: {slurm_account: ml-eval}
nvml: {enabled: false}
"""


def _scan_origin(cluster: SlurmHarness, tmp_path: Path, pid: int) -> dict[str, object]:
    """The ``origin`` object ``scan --json`` gives the job containing ``pid``."""
    origin = _scan_job(cluster, tmp_path, pid)["origin"]
    assert isinstance(origin, dict)
    return origin


def _scan_job(cluster: SlurmHarness, tmp_path: Path, pid: int) -> dict[str, object]:
    """The job ``scan --json`` gives for the job containing ``pid``."""
    config = tmp_path / "watchdog.yaml"
    config.write_text(CONFIG)
    done = run_cli("scan", "--json", "--config", str(config), env={"SLURM_CONF": str(cluster.conf)})
    assert done.returncode in (0, 1), done.stderr
    jobs = [j for j in json.loads(done.stdout)["jobs"] if pid in j["pids"]]
    assert len(jobs) == 1, jobs
    job: dict[str, object] = jobs[0]
    return job


def test_scan_json_names_the_slurm_job(cluster: SlurmHarness, tmp_path: Path) -> None:
    """End to end: ``python -m rogue_watchdog scan --json`` on a real Slurm batch job."""
    job = cluster.sbatch(
        "-J", "retrain-weekly", "-A", "ml-research", wrap=f"{PYTHON} {cluster.trainer} e2e"
    )
    try:
        origin = _scan_origin(cluster, tmp_path, cluster.trainer_pid("e2e"))
        assert origin["kind"] == "slurm"
        assert (origin["job_id"], origin["job_name"], origin["account"]) == (
            job,
            "retrain-weekly",
            "ml-research",
        )
        assert origin["remediation"] == f"scancel {job}"
    finally:
        cluster.cli("scancel", str(job), check=False)


def test_an_array_task_comes_back_until_its_waiting_tasks_are_cancelled(
    cluster: SlurmHarness, tmp_path: Path
) -> None:
    """A task of a real job array: the array's waiting tasks run the same script again,
    and the advised ``scancel --state=PENDING ARRAY`` cancels those and nothing else."""
    cpus = f"--cpus-per-task={cluster.cpus}"  # one task at a time: the rest wait
    array = cluster.sbatch(
        "-J", "sweep-lr", "-A", "ml-research", cpus, "--array=0-3",
        wrap=f"{PYTHON} {cluster.trainer} sweep",
    )  # fmt: skip
    try:
        trainer = cluster.trainer_pid("sweep")
        origin = _resolve(trainer, SlurmResolver())
        assert isinstance(origin, SlurmOrigin)
        task = origin.job_id
        assert task is not None
        cluster.job_ids.append(task)  # teardown waits for the task's own slurmstepd too
        assert (origin.array_job_id, origin.array_task_id) == (array, 0)
        assert origin.describe() == (
            f"Slurm job {task} (task 0 of array {array}) `sweep-lr` account ml-research"
        )
        again = origin.restarts()
        assert again is not None and again.line() == (
            f"restarts it: when Slurm starts the array's next task, Slurm job array {array} "
            "has tasks 1-3 pending (3 tasks), each runs the same batch script"
        )
        assert origin.remediation == f"scancel --state=PENDING {array} && scancel {task}"
        # The scan's advice says the same, end to end.
        advice = _scan_job(cluster, tmp_path, trainer)["advice"]
        assert advice["restarts"]["stops"] == (  # type: ignore[index]
            f"cancel the array's waiting tasks first: scancel --state=PENDING {array}"
        )

        # The advised command cancels the waiting tasks only: this task still runs.
        cluster.cli("scancel", "--state=PENDING", str(array))
        waiting = ["squeue", "-h", "-r", "-j", str(array), "-t", "PENDING", "-o", "%i"]
        deadline = time.monotonic() + 30
        while cluster.cli(*waiting).stdout.strip() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cluster.cli(*waiting).stdout.strip() == ""
        assert cluster.state(task) == "RUNNING"
        after = _resolve(trainer, SlurmResolver())
        assert isinstance(after, SlurmOrigin) and after.array_pending is False
        assert after.restarts() is None
        assert after.remediation == f"scancel {task}"
    finally:
        cluster.cli("scancel", str(array), check=False)
