"""OrphanResolver: re-parented processes, with the clues that survive their parent.

Case (a) from a public report: a Slurm job ended while a renamed data-loader worker,
re-parented to PID 1, still holds GPU memory. It must come out as an orphan carrying the
job id from its cgroup, whatever its ``comm`` says.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.container import ContainerResolver
from rogue_watchdog.lineage.orphan import OrphanResolver
from rogue_watchdog.lineage.slurm import SlurmResolver
from rogue_watchdog.model import Origin
from rogue_watchdog.sources.procfs import ProcessTable
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context
from tests.unit.test_slurm_resolver import SQUEUE_1_2

INIT = FakeProc(1, 0, ["/sbin/init"])
WORKER_ARGV = ["/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main"]


def _resolve(ctx: ResolveContext, pid: int) -> Origin | None:
    return OrphanResolver().resolve(lineage(ctx, pid), ctx)


def test_case_a_worker_of_ended_slurm_job(tmp_path: Path) -> None:
    cg = (
        "9:name=systemd:/",
        "4:memory:/slurm/uid_1000/job_77/step_batch/task_0",
        "0::/",
    )
    worker = FakeProc(4242, 1, WORKER_ARGV, comm="pt_data_worker", uid=1000, cgroup=cg)
    rec = RecordingRunner({("squeue", "--json", "-j", "77"): CommandResult(0, SQUEUE_1_2, "")})
    ctx = make_context(tmp_path, [INIT, worker], rec)
    chain = lineage(ctx, 4242)
    assert SlurmResolver().resolve(chain, ctx) is None  # the job is gone
    assert ContainerResolver().resolve(chain, ctx) is None
    origin = _resolve(ctx, 4242)
    assert origin is not None and origin.kind == "orphan"
    assert origin.fields["message"] == "orphan of Slurm job 77 (ended)"
    assert origin.fields["slurm_job_id"] == 77
    assert origin.fields["slurm_job_state"] is None
    assert origin.fields["parent_pid"] == 1
    assert origin.remediation == "kill -TERM 4242"
    assert origin.evidence[:2] == (
        "orphan of Slurm job 77 (ended)",
        "PID 4242 was adopted by PID 1 (init)",
    )
    assert origin.evidence[-1] == (
        "cgroup names Slurm job 77 (4:memory:/slurm/uid_1000/job_77/step_batch/task_0); "
        "squeue --json no longer knows job 77: the job has ended"
    )
    assert rec.calls == [("squeue", "--json", "-j", "77")]  # asked once, cached


def test_user_slice_and_root_cgroups(tmp_path: Path) -> None:
    procs = [
        INIT,
        FakeProc(60, 1, ["python3", "train.py"], cgroup=("0::/user.slice/user-1000.slice",)),
        FakeProc(61, 1, ["python3", "train.py"], cgroup=("0::/",)),
    ]
    ctx = make_context(tmp_path, procs)
    a = _resolve(ctx, 60)
    b = _resolve(ctx, 61)
    assert a is not None and a.fields["cgroup"] == "/user.slice/user-1000.slice"
    assert a.fields["slurm_job_id"] is None and a.fields["unit"] is None
    assert b is not None and b.fields["cgroup"] == "/"


def test_adopted_by_systemd_user_subreaper(tmp_path: Path) -> None:
    cg = ("0::/user.slice/user-1000.slice/user@1000.service/init.scope",)
    procs = [
        INIT,
        FakeProc(700, 1, ["/lib/systemd/systemd", "--user"], cgroup=cg),
        FakeProc(710, 700, ["python3", "train.py"], cgroup=cg),
    ]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 710)
    assert origin is not None
    assert origin.evidence[1] == "PID 710 was adopted by subreaper PID 700 (systemd --user)"


def test_adopted_by_init_of_a_nested_pid_namespace(tmp_path: Path) -> None:
    procs = [
        INIT,
        FakeProc(900, 1, ["/sbin/init"], nspid=(900, 1)),
        FakeProc(910, 900, ["python3", "train.py"], nspid=(910, 33)),
    ]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 910)
    assert origin is not None and origin.fields["parent_pid"] == 900


def test_environment_job_id_and_supervisor_clue(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "12", "SUPERVISOR_PROCESS_NAME": "retrain"}
    ctx = make_context(tmp_path, [INIT, FakeProc(60, 1, ["python3"], environ=env)])
    ctx.use_slurm_cli = False
    origin = _resolve(ctx, 60)
    assert origin is not None
    # SLURM_JOB_ID in its own environment is a claim anyone can make: no job is named.
    assert origin.fields["slurm_job_id"] is None
    assert origin.fields["message"] == "orphan of supervisor program retrain (parent exited)"
    assert (
        "claims Slurm job 12 in its environment, not confirmed (SLURM_JOB_ID=12 in the "
        "environment of PID 60; no slurmstepd ancestor and no Slurm job cgroup)"
    ) in origin.evidence
    assert origin.fields["supervisor_program"] == "retrain"


def test_not_orphaned(tmp_path: Path) -> None:
    # The parent is a live, ordinary process (an app server that spawns trainers).
    procs = [
        INIT,
        FakeProc(50, 1, ["/usr/bin/python3", "/srv/app.py"]),
        FakeProc(60, 50, ["python3", "train.py"]),
    ]
    ctx = make_context(tmp_path, procs)
    assert _resolve(ctx, 60) is None
    assert _resolve(ctx, 1) is None


def test_orphaned_wrapper_makes_its_job_an_orphan(tmp_path: Path) -> None:
    # `bash -c 'python3 train.py; echo done' &` whose starter exited: bash is adopted.
    procs = [INIT, FakeProc(50, 1, ["/bin/bash"]), FakeProc(60, 50, ["python3", "train.py"])]
    ctx = make_context(tmp_path, procs)
    origin = _resolve(ctx, 60)
    assert origin is not None and origin.kind == "orphan"
    assert origin.remediation == "kill -TERM 60"  # the guard widens it (test_guard.py)
    # Its own parent (bash) is alive: the one that exited is the wrapper's parent.
    assert origin.fields["message"] == (
        "orphan: its wrapper bash (PID 50) was adopted (the wrapper's parent exited)"
    )
    assert origin.fields["parent_pid"] == 1
    assert origin.evidence[1].startswith("its wrapper bash (PID 50) was adopted by PID 1")


DOUBLE_FORK = """
import os, sys, time
r, w = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # let the caller's pipes close
            os.dup2(null, fd)
        with open("/proc/self/comm", "w") as fh:
            fh.write("pt_data_worker")
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        time.sleep(120)
        os._exit(0)
    os._exit(0)
os.close(w)
print(os.read(r, 32).decode(), flush=True)
"""


def test_real_double_forked_worker_is_an_orphan(tmp_path: Path) -> None:
    """A real renamed worker whose parent exited: adopted by PID 1 or a subreaper."""
    done = subprocess.run(
        [sys.executable, "-c", DOUBLE_FORK],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )
    pid = int(done.stdout.strip())
    try:
        table = ProcessTable()
        table.watched.add(pid)  # its comm changes after it was first seen
        for _ in range(100):
            table.refresh()
            p = table.get(pid)
            if p is not None and p.comm == "pt_data_worker":
                break
            time.sleep(0.05)
        proc = table.get(pid)
        assert proc is not None and proc.comm == "pt_data_worker"
        ctx = ResolveContext(table=table, now=datetime.now(UTC), run_cmd=RecordingRunner())
        origin = OrphanResolver().resolve(table.ancestors(pid), ctx)
        assert origin is not None and origin.kind == "orphan"
        assert origin.fields["parent_pid"] == proc.ppid
        assert origin.remediation == f"kill -TERM {pid}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_slurm_orphan_text_names_the_job_and_its_state(tmp_path: Path) -> None:
    """Message, table cell and finding carry what the JSON knows."""
    from rogue_watchdog.model import Job
    from rogue_watchdog.policy.findings import job_findings
    from tests.unit.test_slurm_resolver import SQUEUE_CANCELLED

    cg = ("4:memory:/slurm/uid_1000/job_1/step_batch",)
    worker = FakeProc(4243, 1, WORKER_ARGV, uid=1000, cgroup=cg)
    rec = RecordingRunner({("squeue", "--json", "-j", "1"): CommandResult(0, SQUEUE_CANCELLED, "")})
    ctx = make_context(tmp_path, [INIT, worker], rec)
    origin = _resolve(ctx, 4243)
    assert origin is not None and origin.kind == "orphan"
    assert (origin.fields["slurm_job_id"], origin.fields["slurm_job_state"]) == (1, "CANCELLED")
    assert origin.fields["message"] == "orphan of Slurm job 1 (CANCELLED)"
    assert origin.evidence[0] == "orphan of Slurm job 1 (CANCELLED)"
    assert origin.describe() == "orphan of Slurm job 1 (CANCELLED)"
    job = Job(4243, [4243], "u", tuple(WORKER_ARGV), 100, None, [], lineage(ctx, 4243), origin)
    (finding,) = job_findings([job])
    assert "from orphan of Slurm job 1 (CANCELLED)" in finding.message
