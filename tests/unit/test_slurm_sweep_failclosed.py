"""Issue 37 (Trust VIII): the decisions of the fail-closed Slurm sweep, on the simulated
node of the lifecycle simulator (tests/sim/slurm.py: a procfs tree, a Slurm CLI double,
signals applied to the model). The same cases on real Slurm are in
tests/system/test_slurm_failclosed.py.
"""

from __future__ import annotations

import errno
import json
import signal
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from rogue_watchdog.actions.slurmrecord import (
    JobEntry,
    RecordedProc,
    SweepRecord,
    check_entry,
    load_record,
    record_path,
    save_record,
    settle,
)
from rogue_watchdog.actions.slurmsweep import SweepReport
from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.config import parse_config
from rogue_watchdog.lineage.slurm import parse_squeue_json, query_job
from rogue_watchdog.sources.procevents import ForkWatch, parse_lineage_events
from tests.conftest import REPO
from tests.fixtures.proc.fakeproc import FakeProc, make_context
from tests.sim.slurm import NODE, PY, SlurmMachine, SlurmSimHost

DOWN = (REPO / "tests/fixtures/slurm/squeue-22.05-controller-down.json").read_text()
CONNECT = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SlurmMachine]:
    SlurmMachine.workdir = tmp_path
    machine = SlurmMachine()
    try:
        yield machine
    finally:
        machine.teardown()


def _cgroup(sim: SlurmMachine) -> SlurmSimHost:
    sim.choose_plugin("cgroup")
    return sim.host


def sweep(
    sim: SlurmMachine, job: int | None, epilog: bool = False, dry: bool = False
) -> SweepReport:
    """One ``health-check`` run, checked against the simulator's invariants."""
    h = sim.host
    h.confirmed = set()
    h.epilog_job = job if epilog else None
    report = sim._run(sim.config(), job, epilog, dry)
    sim._after()
    sim.never_wrong_in_the_dangerous_direction()
    return report


def tick(sim: SlurmMachine) -> None:
    sim._keeper()
    sim.never_wrong_in_the_dangerous_direction()


def leftover(h: SlurmSimHost, **kw: object) -> tuple[int, int]:
    """A job of UID 1001 whose worker was recorded below slurmstepd, left the job, and
    outlived it: (job id, worker PID)."""
    opts = {"gpu": True, "stubborn": False, "respawn": None, "protected": False, **kw}
    job = h.submit(1001, **opts)  # type: ignore[arg-type]
    h.record_members()
    h.escape(job)
    h.end(job, "COMPLETED")
    assert job.worker is not None
    return job.job_id, job.worker


def drained(h: SlurmSimHost) -> tuple[bool, str | None]:
    return h.drained, h.reason


# -- asking Slurm --------------------------------------------------------------------------


def test_squeue_json_with_errors_is_no_answer(tmp_path: Path) -> None:
    """22.05's squeue --json exits 0 with {"errors": [...], "jobs": []} when slurmctld
    is down (captured on the harness): read as a listing it said every job was gone."""
    assert parse_squeue_json(DOWN, 12) is None
    runner = RecordingRunner(
        {
            ("squeue", "--json", "-j", "12"): CommandResult(0, DOWN, ""),
            ("scontrol", "show", "job", "12", "-o"): CommandResult(1, "", CONNECT + "\n"),
        }
    )
    ctx = make_context(tmp_path / "proc", [FakeProc(1, 0, ["/sbin/init"])], runner)
    job = query_job(12, ctx, 2.0)
    assert (job.status, job.via) == (
        "unavailable",
        "squeue reported errors: `Failed while looking for jobs: Unspecified error`; "
        f"scontrol failed: `{CONNECT}`",
    )


@pytest.mark.parametrize(
    ("answer", "via"),
    [
        (CommandResult.timed_out, "squeue timed out after 2 s; scontrol timed out after 2 s"),
        (
            lambda prog, _t: CommandResult.not_runnable(prog),
            "squeue did not run (No such file or directory); scontrol did not run (No such "
            "file or directory)",
        ),
    ],
)
def test_it_says_what_each_command_did(tmp_path: Path, answer, via: str) -> None:  # type: ignore[no-untyped-def]
    """Case 4: `squeue/scontrol not runnable` for commands that had run and timed out."""
    runner = RecordingRunner(answer=lambda argv: answer(argv[0], 2.0))
    ctx = make_context(tmp_path / "proc", [FakeProc(1, 0, ["/sbin/init"])], runner)
    assert query_job(12, ctx, 2.0).via == via


# -- case 1: nothing is signalled unless Slurm confirmed the end in this run ------------


@pytest.mark.parametrize("mode", ["timeout", "missing", "errors"])
def test_the_epilog_of_a_running_job_signals_nothing_when_slurm_cannot_be_asked(
    sim: SlurmMachine, mode: str
) -> None:
    h = sim.host
    job = h.submit(1001, gpu=True, stubborn=False, respawn=None, protected=False)
    h.record_members()
    h.escape(job)  # still RUNNING: the worker left its tree
    h.controller = mode
    for dry in (True, False):
        report = sweep(sim, job.job_id, epilog=True, dry=dry)
        assert report.exit_code == 3 and report.leftovers == [] and report.outcomes == {}
        assert [u.pid for u in report.unchecked] == [job.worker]
    assert sim.effects.seen == [] and job.worker in h.procs
    reason = (
        f"rogue-watchdog: Slurm job {job.job_id} not checked, Slurm could not be asked "
        f"(PID {job.worker} left running)"
    )
    assert not h.drained  # Slurm cannot be told either; the daemon tells it once it answers
    h.controller = "up"
    tick(sim)
    assert drained(h) == (True, reason)


def test_an_ended_job_is_swept_once_slurm_answers(sim: SlurmMachine) -> None:
    h = sim.host
    job, worker = leftover(h)
    h.controller = "timeout"
    report = sweep(sim, job, epilog=True)
    assert (report.exit_code, worker in h.procs) == (3, True)
    h.controller = "up"
    report = sweep(sim, job, epilog=True)
    assert (report.exit_code, worker in h.procs, report.resumed) == (0, False, False)
    assert not Path(record_path(str(h.root / "state"))).exists()


def test_a_gpu_claim_of_an_unchecked_job_is_never_killed_once_slurm_answers(
    sim: SlurmMachine,
) -> None:
    """The simulator's counterexample (seed 1): root's `sleep` with SLURM_JOB_ID=99 and a
    GPU open, swept while Slurm timed out, was recorded as proven; once Slurm answered
    (job 99 unknown: ended) the next sweep killed it."""
    h = sim.host
    claim = h.add(h._pid(), 1, ("/bin/sleep", "600"), "/bin/sleep", ("bystander", 0),
                  uid=0, env={"SLURM_JOB_ID": "99"}, gpu=True)  # fmt: skip
    h.controller = "timeout"
    assert sweep(sim, 99).exit_code == 3
    h.controller = "up"
    report = sweep(sim, 99)
    assert sim.effects.seen == [] and claim.pid in h.procs
    assert [u.pid for u in report.gpu_claims] == [claim.pid] and report.exit_code == 1


# -- case 2: a drain is lifted only by evidence about its own job ----------------------


def test_a_sweep_of_another_job_never_lifts_the_drain(sim: SlurmMachine) -> None:
    h = sim.host
    job, worker = leftover(h, protected=True)
    report = sweep(sim, job, epilog=True)
    reason = f"rogue-watchdog: orphan of Slurm job {job} survived termination (PID {worker})"
    assert (report.exit_code, report.drained, drained(h)) == (1, reason, (True, reason))
    other = h.submit(1002, gpu=False, stubborn=False, respawn=None, protected=False)
    h.end(other, "COMPLETED")
    for named, epilog in ((999, False), (other.job_id, True)):
        report = sweep(sim, named, epilog=epilog)
        assert (report.exit_code, report.held, report.other_jobs) == (0, reason, [job])
        assert not report.resumed and drained(h) == (True, reason)
    h.exit(worker)
    tick(sim)  # a check of its own job: nothing is left
    assert drained(h) == (False, None)


def test_the_daemon_keeps_the_reason_current(sim: SlurmMachine) -> None:
    """Case 5: a sweep drain named an exited PID until the next sweep."""
    h = sim.host
    job, first = leftover(h, protected=True)
    second = h.spawn(h.procs[first], (*h.procs[first].argv[:2], "child"), ("job", job)).pid
    sweep(sim, job, epilog=True)
    assert h.reason == (
        f"rogue-watchdog: orphan of Slurm job {job} survived termination (PID {first}, {second})"
    )
    h.exit(second)
    tick(sim)
    assert (
        h.reason == f"rogue-watchdog: orphan of Slurm job {job} survived termination (PID {first})"
    )


def test_an_admins_resume_of_our_drain_is_not_fought(sim: SlurmMachine) -> None:
    h = sim.host
    job, _worker = leftover(h, protected=True)
    sweep(sim, job, epilog=True)
    h.drained, h.reason = False, None  # an admin resumed it: their decision
    tick(sim)
    assert drained(h) == (False, None)
    report = sweep(sim, job, epilog=True)  # the same processes: not set again
    assert report.drain_error and report.drain_error.startswith("our drain was resumed")
    assert drained(h) == (False, None) and report.exit_code == 1


# -- case 3: proof outlives the process it was found on --------------------------------


def test_a_copy_in_a_new_session_with_an_empty_environment_is_stopped(sim: SlurmMachine) -> None:
    h = sim.host
    job, worker = leftover(h, respawn="empty")
    report = sweep(sim, job, epilog=True)
    [copy] = report.copies
    assert copy.proof == (
        f"forked by PID {worker} during the sweep (orphan of Slurm job {job}: PID {worker})"
    )
    assert (report.exit_code, report.survivors, copy.pid in h.procs) == (0, [], False)
    assert (copy.pid, signal.SIGKILL) in sim.effects.seen
    assert not [p for p in h.procs.values() if p.label == ("job", job)]


@pytest.mark.parametrize("events", ["off", "lost"])
def test_a_copy_that_cannot_be_told_apart_keeps_the_node_drained(
    sim: SlurmMachine, events: str
) -> None:
    h = sim.host
    sim.events = events
    job, _worker = leftover(h, respawn="empty")
    bystander = h.add(h._pid(), h.slurmd.pid, ("/usr/bin/python3", "/home/u/notebook.py"),
                      "/usr/bin/python3", ("bystander", 0), uid=1001)  # fmt: skip
    report = sweep(sim, job, epilog=True)
    copies = [p for p in h.procs.values() if p.label == ("job", job)]
    assert [u.pid for u in report.uncertain] == [c.pid for c in copies]
    assert report.exit_code == 1 and bystander.pid in h.procs
    assert h.reason == (
        f"rogue-watchdog: Slurm job {job}: maybe a copy of a leftover: PID {copies[0].pid}"
    )
    h.exit(copies[0].pid)
    tick(sim)
    assert drained(h) == (False, None)


def test_a_recorded_copy_stays_proven_for_the_next_sweep(sim: SlurmMachine) -> None:
    """A copy that kept its environment was demoted to "claims Slurm job N, not
    confirmed … left alone" by the next sweep; the record keeps its proof."""
    h = sim.host
    job, _worker = leftover(h, respawn="env")
    sim.events = "off"
    sweep(sim, job, epilog=True)  # the copy: uncertain, recorded
    [copy] = [p for p in h.procs.values() if p.label == ("job", job)]
    assert (
        h.reason == f"rogue-watchdog: Slurm job {job}: maybe a copy of a leftover: PID {copy.pid}"
    )
    # A spontaneous copy of the copy between sweeps: its child, then on its own.
    again = h.copy(copy)
    h.exit(copy.pid)
    tick(sim)
    assert (
        h.reason == f"rogue-watchdog: Slurm job {job}: maybe a copy of a leftover: PID {again.pid}"
    )
    report = sweep(sim, job)
    assert [u.pid for u in report.unconfirmed] == []  # never demoted to a claim
    assert report.exit_code == 1 and again.pid in h.procs  # still not proof: never signalled


def test_copies_found_by_the_daemon_inherit_the_proof(sim: SlurmMachine) -> None:
    h = sim.host
    job, worker = leftover(h, protected=True)
    sweep(sim, job, epilog=True)
    child = h.spawn(h.procs[worker], (PY, "/home/u/loader.py"), ("job", job), env={})
    tick(sim)  # the daemon sees it below the survivor: the survivor's proof is its
    h.exit(worker)  # the child, re-parented to PID 1, is all that is left
    tick(sim)
    assert (
        h.reason
        == f"rogue-watchdog: orphan of Slurm job {job} survived termination (PID {child.pid})"
    )
    report = sweep(sim, job)
    assert [lo.pid for lo in report.leftovers] == [child.pid] and child.pid not in h.procs


# -- case 4 / 5: exit codes, dry runs, another user's processes, still RUNNING ----------


@pytest.mark.parametrize(("kind", "code"), [("plain", 0), ("stubborn", 0), ("protected", 1)])
def test_dry_run_and_real_run_agree(sim: SlurmMachine, kind: str, code: int) -> None:
    h = sim.host
    job, _worker = leftover(h, stubborn=kind == "stubborn", protected=kind == "protected")
    dry = sweep(sim, job, epilog=True, dry=True)
    real = sweep(sim, job, epilog=True)
    assert (dry.exit_code, real.exit_code) == (code, code)
    assert sim._planned(dry) == sim._planned(real)


def test_another_users_process_in_the_jobs_cgroup_is_reported_and_drained(
    sim: SlurmMachine,
) -> None:
    h = _cgroup(sim)
    job, worker = leftover(h)
    lines = h.procs[worker].cgroup
    root = h.add(h._pid(), 1, ("/bin/sleep", "303"), "/bin/sleep", ("bystander", 0),
                 uid=0, cgroup=lines)  # fmt: skip
    report = sweep(sim, job, epilog=True)
    [foreign] = report.foreign
    assert foreign.pid == root.pid and foreign.proof == (
        f"cgroup 4:memory:/slurm_{NODE}/uid_1001/job_{job}/step_batch/task_0; it runs as UID "
        "0 and the job's user is UID 1001"
    )
    assert report.exit_code == 1 and root.pid in h.procs and worker not in h.procs
    assert (
        h.reason
        == f"rogue-watchdog: Slurm job {job} ended, another user's PID {root.pid} left in it"
    )


def test_a_running_job_without_escaped_processes_is_still_running(sim: SlurmMachine) -> None:
    h = sim.host
    job = h.submit(1001, gpu=True, stubborn=False, respawn=None, protected=False)
    for epilog in (False, True):
        report = sweep(sim, job.job_id, epilog=epilog)
        assert report.lines() == [
            f"Slurm job {job.job_id}: still RUNNING: its processes are Slurm's, not swept"
        ]


# -- the record and Slurm ---------------------------------------------------------------


def test_the_record_survives_a_round_trip_and_a_reboot_empties_it(tmp_path: Path) -> None:
    rp = RecordedProc(5, 50, "survived", 1001, "cgroup x", "4:memory:/slurm/job_7", ((1, 1),))
    rec = SweepRecord("n1", "boot-a", {7: JobEntry(7, [rp], 60, ((9, 60),))}, applied="r")
    save_record(str(tmp_path), rec)
    assert load_record(str(tmp_path), "boot-a", "n1") == rec
    again = load_record(str(tmp_path), "boot-b", "n1")
    assert (again.jobs, again.applied) == ({}, "r")  # nothing left; our drain may be lifted
    assert load_record(str(tmp_path), "boot-a", "other").jobs == {}
    Path(record_path(str(tmp_path))).write_text("{not json")
    assert load_record(str(tmp_path), "boot-a", "n1").applied is None


def test_an_orphan_with_a_parent_that_ran_before_is_not_a_copy(tmp_path: Path) -> None:
    """The uncertain rule: only processes whose every ancestor started since the last
    check (a copy whose starter exited) owned by a recorded user."""
    procs = [
        FakeProc(1, 0, ["/sbin/init"], start=1),
        FakeProc(50, 1, ["/bin/bash"], uid=1001, start=10),  # a login shell, before
        FakeProc(60, 50, ["python3", "notebook.py"], uid=1001, start=300),
        FakeProc(70, 1, ["python3", "worker.py", "copy"], uid=1001, start=301),
        FakeProc(80, 1, ["python3", "other.py"], uid=1002, start=302),
    ]
    ctx = make_context(tmp_path / "proc", procs)
    entry = JobEntry(7, [RecordedProc(40, 20, "survived", 1001, "recorded")], 200, ())
    found = check_entry(entry, ctx.table)
    assert [(rp.pid, rp.kind) for rp in found.found] == [(70, "uncertain")]
    assert [rp.pid for rp in found.gone] == [40]


def test_settle_leaves_an_admins_drain_and_counts_a_resume_slurm_half_refused() -> None:
    settings = parse_config("slurm: {node_name: n1}").slurm
    rec = SweepRecord("n1", None, {}, applied="rogue-watchdog: x")
    calls: list[tuple[str, ...]] = []
    state = {"drained": True, "reason": "rogue-watchdog: x"}

    def run(argv, timeout_s):  # type: ignore[no-untyped-def]
        calls.append(tuple(argv))
        if argv[0] == "sinfo":
            return CommandResult(
                0, f"{'drained' if state['drained'] else 'idle'}|{state['reason']}\n", ""
            )
        state["drained"] = False  # 22.05 after a restart: lifted, and an error all the same
        return CommandResult(1, "", "slurm_update error: Invalid node state specified\n")

    done = settle(rec, settings, run)
    assert (done.resumed, done.error, rec.applied) == (True, None, None)
    admin = SweepRecord("n1", None, {}, applied="rogue-watchdog: x")
    state.update(drained=True, reason="bad DIMM")
    calls.clear()
    done = settle(admin, settings, run)
    assert (done.resumed, [c[0] for c in calls]) == (False, ["sinfo"])


# -- fork events ------------------------------------------------------------------------


def _event(what: int, *fields: int) -> bytes:
    payload = (
        struct.pack("=II", what, 0)
        + struct.pack("=Q", 0)
        + struct.pack(f"={len(fields)}I", *fields)
    )
    body = struct.pack("=IIIIHH", 1, 1, 0, 0, len(payload), 0) + payload
    return struct.pack("=IHHII", 16 + len(body), 3, 0, 0, 0) + body


def test_fork_events_name_new_processes_and_ends() -> None:
    data = (
        _event(0x1, 10, 10, 11, 11)  # 10 forks 11
        + _event(0x1, 11, 11, 12, 11)  # a thread of 11: not a process
        + _event(0x80000000, 11, 11)  # 11 exits
    )
    assert list(parse_lineage_events(data)) == [("fork", 10, 11), ("exit", 11, 11)]


def test_a_reused_pid_is_not_followed() -> None:
    class Sock:
        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks = chunks

        def recv(self, _n: int) -> bytes:
            if not self.chunks:
                raise BlockingIOError(errno.EAGAIN, "empty")
            return self.chunks.pop(0)

        def close(self) -> None:
            pass

    events = [
        _event(0x1, 10, 10, 11, 11),  # the leftover 10 forks its copy 11
        _event(0x80000000, 10, 10),  # and exits
        _event(0x1, 5, 5, 10, 10),  # PID 10 reused by someone else's child
        _event(0x1, 10, 10, 12, 12),  # which forks 12: not the leftover's
        _event(0x1, 11, 11, 13, 13),  # the copy forks 13: the leftover's
    ]
    watch = ForkWatch(opener=lambda _n: Sock(events))  # type: ignore[arg-type,return-value]
    assert watch.forked_by([10]) == {11: 10, 13: 11}
    broken = ForkWatch(opener=lambda _n: (_ for _ in ()).throw(OSError(errno.EPERM, "no")))
    assert (broken.complete, broken.reason) == (False, "kernel process events unavailable (no)")


def test_the_report_json_names_every_list(sim: SlurmMachine) -> None:
    from rogue_watchdog.actions.slurmsweep import report_json

    h = sim.host
    job, _worker = leftover(h, protected=True)
    doc = report_json(sweep(sim, job, epilog=True))
    assert json.loads(json.dumps(doc))["exit_code"] == 1 and doc["survivors"]


def test_two_epilogs_at_once_keep_each_others_entries(sim: SlurmMachine) -> None:
    """Epilogs of jobs that end together run at once: one that read the record before the
    other wrote its survivor must not write over it (nor resume the node)."""
    h = sim.host
    job_a, worker_a = leftover(h, protected=True)
    job_b, _worker_b = leftover(h)
    ask = h.run
    other: list[SweepReport] = []

    def run(argv, timeout_s):  # type: ignore[no-untyped-def]
        # While B's Epilog asks Slurm about B, A's Epilog runs to its end.
        if tuple(argv[:2]) == ("squeue", "--json") and argv[3] == str(job_b) and not other:
            h.epilog_job = job_a
            other.append(sim._run(sim.config(), job_a, True, False))
            h.epilog_job = job_b
        return ask(argv, timeout_s)

    h.run = run  # type: ignore[method-assign]
    h.confirmed = set()
    h.epilog_job = job_b
    report = sim._run(sim.config(), job_b, True, False)
    sim._after()
    sim.never_wrong_in_the_dangerous_direction()
    reason = f"rogue-watchdog: orphan of Slurm job {job_a} survived termination (PID {worker_a})"
    assert other[0].drained == reason
    assert (report.exit_code, report.held, report.other_jobs) == (0, reason, [job_a])
    assert drained(h) == (True, reason) and list(h.read_record()["jobs"]) == [str(job_a)]
