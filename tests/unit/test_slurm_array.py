"""A Slurm job array task comes back: the array's waiting tasks run the same batch script.

The recorded outputs are real (Debian 12's Slurm 22.05.8, tests/system/slurmharness.py,
``sbatch --array=0-9 --cpus-per-task=<all>``): task 0 runs as job 442001, the array's own
record 442000 holds tasks 1-9 pending; then ``scancel --state=PENDING 442000`` cancelled
those and left task 0 running. BEFORE this change every Slurm origin answered
``restarts()`` None: the finding said nothing would start the task again, and terminate's
outcome was ``ok`` while nine more runs of the same script waited.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from rogue_watchdog.actions.enforcer import Enforcer
from rogue_watchdog.actions.remedy import target_from_job, terminate_extras
from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.lineage.base import ResolveContext, split_answer
from rogue_watchdog.lineage.slurm import (
    SlurmResolver,
    parse_array_scontrol,
    parse_array_squeue,
    parse_scontrol_job,
    parse_squeue_json,
    task_count,
)
from rogue_watchdog.model import CronOrigin, Job, Origin, Proc, SlurmOrigin, origin_from_json
from rogue_watchdog.model.advice import Advice
from rogue_watchdog.policy.guard import ProtectedSource, ScanProtection, with_advice
from rogue_watchdog.policy.signature import job_signature
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context
from tests.unit.test_pages import _daemon
from tests.unit.test_remediation_superseded import _tick

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
SQUEUE_ARRAY = (FIX / "squeue-22.05-array-task-and-pending.json").read_text()
SQUEUE_ARRAY_DONE = (FIX / "squeue-22.05-array-pending-cancelled.json").read_text()
SQUEUE_PLAIN = (FIX / "squeue-22.05-running-and-pending.json").read_text()
SCONTROL_TASK = (FIX / "scontrol-22.05-array-task.txt").read_text()
SCONTROL_ARRAY = (FIX / "scontrol-22.05-array-with-pending.txt").read_text()
SCONTROL_ARRAY_DONE = (FIX / "scontrol-22.05-array-pending-cancelled.txt").read_text()
SCONTROL_PLAIN = (FIX / "scontrol-22.05-running.txt").read_text()

TASK, ARRAY = 442001, 442000
RESTARTS = (
    "restarts it: when Slurm starts the array's next task, Slurm job array 442000 has "
    "tasks 1-9 pending (9 tasks), each runs the same batch script"
)
STOPS = "cancel the array's waiting tasks first: scancel --state=PENDING 442000"
UNKNOWN = (
    "restarts it: unknown, Slurm job array 442000 (whether tasks of it wait to start could "
    "not be told; each runs the same batch script)"
)
T0 = 1800151200.0
NO_SQUEUE = CommandResult(1, "", "squeue: unrecognized option '--json'")


def _tree(job: int, env: dict[str, str] | None = None) -> list[FakeProc]:
    # What the recorded run looked like (tests/fixtures/slurm, lineage of task 0).
    return [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(300, 1, ["/usr/sbin/slurmd", "-D"]),
        FakeProc(400, 300, [f"slurmstepd: [{job}.batch]"], exe="/usr/sbin/slurmstepd-wlm"),
        FakeProc(410, 400, ["/bin/sh", f"/var/spool/slurmd/job{job}/slurm_script"]),
        FakeProc(411, 410, ["/usr/bin/python3", "/srv/train_fake.py"], environ=env),
    ]


def _resolve(tmp_path: Path, answers: dict[tuple[str, ...], CommandResult], job: int = TASK):  # type: ignore[no-untyped-def]
    rec = RecordingRunner(answers)
    ctx: ResolveContext = make_context(tmp_path, _tree(job), rec)
    origin, _notes = split_answer(SlurmResolver().resolve(lineage(ctx, 411), ctx))
    assert isinstance(origin, SlurmOrigin)
    return origin, rec.calls


def _squeue(job: int, text: str) -> dict[tuple[str, ...], CommandResult]:
    return {("squeue", "--json", "-j", str(job)): CommandResult(0, text, "")}


def _rogue(origin: Origin) -> Job:
    return Job(411, [411], "root", ["/usr/bin/python3", "/srv/train_fake.py"], 1000, None,
               [], [], origin, "rogue")  # fmt: skip


# -- what Slurm says -----------------------------------------------------------------------


def test_squeue_and_scontrol_give_the_array_and_task_ids() -> None:
    task = parse_squeue_json(SQUEUE_ARRAY, TASK)
    assert task is not None and (task.array_job_id, task.array_task_id) == (ARRAY, 0)
    # The array's own record holds tasks 1-9: an array, no single task id.
    own = parse_squeue_json(SQUEUE_ARRAY, ARRAY)
    assert own is not None and (own.array_job_id, own.array_task_id) == (ARRAY, None)
    plain = parse_squeue_json(SQUEUE_PLAIN, 1)  # array_job_id 0, array_task_id null
    assert plain is not None and (plain.array_job_id, plain.array_task_id) == (None, None)
    by_scontrol = parse_scontrol_job(SCONTROL_TASK, TASK)
    assert by_scontrol is not None
    assert (by_scontrol.array_job_id, by_scontrol.array_task_id) == (ARRAY, 0)
    # A cancelled array record says ArrayTaskId=4294967294 (NO_VAL): no task id.
    cancelled = parse_scontrol_job(SCONTROL_ARRAY_DONE, ARRAY)
    assert cancelled is not None
    assert (cancelled.array_job_id, cancelled.array_task_id) == (ARRAY, None)
    no_array = parse_scontrol_job(SCONTROL_PLAIN, 1)
    assert no_array is not None and (no_array.array_job_id, no_array.array_task_id) == (None, None)


def test_waiting_tasks_are_read_only_from_a_listing_of_the_whole_array() -> None:
    for said in (
        parse_array_squeue(SQUEUE_ARRAY, ARRAY, TASK),
        parse_array_scontrol(SCONTROL_ARRAY, ARRAY, TASK),
    ):
        assert said is not None and (said.status, said.tasks, said.count) == ("pending", "1-9", 9)
    for said in (
        parse_array_squeue(SQUEUE_ARRAY_DONE, ARRAY, TASK),
        parse_array_scontrol(SCONTROL_ARRAY_DONE, ARRAY, TASK),
    ):
        assert said is not None and (said.status, said.tasks, said.count) == ("none", "", None)
    # `scontrol show job TASK` prints the task's line alone, and a listing without the
    # task or the array's own record covers no array: neither is "none pending".
    assert parse_array_scontrol(SCONTROL_TASK, ARRAY, TASK) is None
    assert parse_array_squeue(SQUEUE_PLAIN, ARRAY, TASK) is None
    assert parse_array_squeue(SQUEUE_ARRAY, ARRAY, 999) is None


def test_task_count_reads_slurm_task_expressions() -> None:
    assert [task_count(t) for t in ("1-9", "0-8:2", "1,3%2", "7", "3,5-7")] == [9, 5, 2, 1, 4]
    assert [task_count(t) for t in ("", "9-1", "1-9:0", "a-b", "1;2")] == [None] * 5
    assert task_count("0-4000000") == 4000001  # counted, never listed
    # Before: ValueError (int() of more than 4300 digits) out of the array's resolve.
    assert task_count("1-" + "9" * 5000) is None


# -- the origin and what it answers ----------------------------------------------------------


def test_a_task_with_pending_tasks_comes_back(tmp_path: Path) -> None:
    origin, calls = _resolve(
        tmp_path, {**_squeue(TASK, SQUEUE_ARRAY), **_squeue(ARRAY, SQUEUE_ARRAY)}
    )
    assert calls == [("squeue", "--json", "-j", str(TASK)), ("squeue", "--json", "-j", str(ARRAY))]
    assert origin.describe() == (
        "Slurm job 442001 (task 0 of array 442000) `sweep-lr` account ml-research"
    )
    assert {k: v for k, v in origin.fields.items() if k.startswith("array")} == {
        "array_job_id": ARRAY,
        "array_task_id": 0,
        "array_pending": True,
        "array_pending_tasks": "1-9",
        "array_pending_count": 9,
    }
    assert origin.evidence[-1] == "squeue --json: tasks 1-9 of array 442000 wait to start"
    again = origin.restarts()
    assert again is not None and again.line() == RESTARTS and again.stops == STOPS
    assert again.known and again.after_terminate
    assert origin.remediation == "scancel --state=PENDING 442000 && scancel 442001"
    assert origin_from_json(origin.to_json()) == origin

    (job,) = with_advice([_rogue(origin)], ScanProtection())
    assert job.advice is not None
    assert job.advice.finding_text(411) == (
        f"; {RESTARTS}; to stop the source: scancel --state=PENDING 442000 && scancel 442001"
    )
    assert job.advice.explain_line(411) == "scancel --state=PENDING 442000 && scancel 442001"
    # terminate (the task's own scancel or signals) leaves the array: will-return.
    extras = terminate_extras(target_from_job(job, None, None), source_disabled=False)
    assert extras["will_return"] == {"restarts": RESTARTS, "stops": STOPS, "each_run": True}


def test_by_scontrol_when_squeue_has_no_json(tmp_path: Path) -> None:
    origin, calls = _resolve(
        tmp_path,
        {
            ("squeue", "--json", "-j", str(TASK)): NO_SQUEUE,
            ("scontrol", "show", "job", str(TASK), "-o"): CommandResult(0, SCONTROL_TASK, ""),
            ("squeue", "--json", "-j", str(ARRAY)): NO_SQUEUE,
            ("scontrol", "show", "job", str(ARRAY), "-o"): CommandResult(0, SCONTROL_ARRAY, ""),
        },
    )
    assert calls[-1] == ("scontrol", "show", "job", str(ARRAY), "-o")
    assert origin.evidence[-1] == "scontrol: tasks 1-9 of array 442000 wait to start"
    again = origin.restarts()
    assert again is not None and again.line() == RESTARTS and again.stops == STOPS


def test_an_array_with_no_task_left_waiting_does_not_come_back(tmp_path: Path) -> None:
    done = {**_squeue(TASK, SQUEUE_ARRAY_DONE), **_squeue(ARRAY, SQUEUE_ARRAY_DONE)}
    origin, _ = _resolve(tmp_path, done)
    assert origin.describe() == (
        "Slurm job 442001 (task 0 of array 442000) `sweep-lr` account ml-research"
    )
    assert (origin.array_pending, origin.array_pending_tasks) == (False, None)
    assert origin.evidence[-1] == "squeue --json: no task of array 442000 waits to start"
    assert origin.restarts() is None
    assert origin.remediation == "scancel 442001"
    (job,) = with_advice([_rogue(origin)], ScanProtection())
    assert job.advice is not None
    assert job.advice.finding_text(411) == "; to stop the source: scancel 442001"
    extras = terminate_extras(target_from_job(job, None, None), source_disabled=False)
    assert "will_return" not in extras and "may_return" not in extras


def test_unanswered_array_may_come_back_never_nothing(tmp_path: Path) -> None:
    down = CommandResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller")
    origin, calls = _resolve(
        tmp_path,
        {
            **_squeue(TASK, SQUEUE_ARRAY),
            ("squeue", "--json", "-j", str(ARRAY)): down,
            ("scontrol", "show", "job", str(ARRAY), "-o"): down,
        },
    )
    assert len(calls) == 3
    assert (origin.array_job_id, origin.array_pending) == (ARRAY, None)
    assert origin.evidence[-1] == (
        "whether tasks of array 442000 wait to start could not be told (squeue failed: "
        "`slurm_load_jobs error: Unable to contact slurm controller`; scontrol failed: "
        "`slurm_load_jobs error: Unable to contact slurm controller`)"
    )
    again = origin.restarts()
    assert again is not None and again.line() == UNKNOWN and again.stops == STOPS
    assert not again.known
    assert origin.remediation == "scancel --state=PENDING 442000 && scancel 442001"
    (job,) = with_advice([_rogue(origin)], ScanProtection())
    extras = terminate_extras(target_from_job(job, None, None), source_disabled=False)
    assert extras["may_return"] == {"restarts": UNKNOWN, "stops": STOPS, "each_run": True}
    assert "will_return" not in extras


def test_slurm_not_asked_an_array_claimed_by_the_environment_may_come_back(
    tmp_path: Path,
) -> None:
    # The recorded task's own environment (SLURM_ARRAY_* as slurmstepd set them).
    env = {"SLURM_JOB_ID": str(TASK), "SLURM_ARRAY_JOB_ID": str(ARRAY), "SLURM_ARRAY_TASK_ID": "0"}
    rec = RecordingRunner()  # neither squeue nor scontrol runs
    ctx = make_context(tmp_path, _tree(TASK, env), rec)
    origin, _notes = split_answer(SlurmResolver().resolve(lineage(ctx, 411), ctx))
    assert isinstance(origin, SlurmOrigin)
    assert (origin.array_job_id, origin.array_claimed) == (None, ARRAY)
    assert origin.describe() == "Slurm job 442001"  # a claim names no array
    again = origin.restarts()
    assert again is not None and again.line() == (
        "restarts it: unknown, Slurm job array 442000, as the job's environment claims "
        "(Slurm was not asked: whether tasks of it wait to start could not be told)"
    )
    # Nothing to run on the claim's word: no array command, no array stop target.
    assert again.stops is None
    assert origin.remediation == "scancel 442001"
    assert origin.stop_targets() == (("slurm-job", TASK),)
    # Without the claim (a job of no array, Slurm not asked): today's answer.
    (tmp_path / "p").mkdir()
    bare = make_context(tmp_path / "p", _tree(TASK, {"SLURM_JOB_ID": str(TASK)}), RecordingRunner())
    plain, _ = split_answer(SlurmResolver().resolve(lineage(bare, 411), bare))
    assert isinstance(plain, SlurmOrigin) and plain.restarts() is None


def test_a_job_of_no_array_keeps_its_answer(tmp_path: Path) -> None:
    origin, calls = _resolve(tmp_path, _squeue(1, SQUEUE_PLAIN), job=1)
    assert calls == [("squeue", "--json", "-j", "1")]  # no array asked about
    assert origin.describe() == "Slurm job 1 `retrain-weekly` account ml-research"
    assert not any(k.startswith("array") for k in origin.to_json())
    assert origin.restarts() is None
    assert origin.remediation == "scancel 1"
    assert origin.stop_targets() == (("slurm-job", 1),)
    (job,) = with_advice([_rogue(origin)], ScanProtection())
    assert job.advice is not None
    assert job.advice.finding_text(411) == "; to stop the source: scancel 1"
    assert job.advice.explain_line(411) == "scancel 1"


def test_no_array_advice_while_a_sanctioned_job_is_a_task_of_the_same_array(
    tmp_path: Path,
) -> None:
    origin, _ = _resolve(tmp_path, {**_squeue(TASK, SQUEUE_ARRAY), **_squeue(ARRAY, SQUEUE_ARRAY)})
    # Another task of the array, renamed (scontrol update) and sanctioned by its own rule:
    # its source key differs, the array is shared. Cancelling the waiting tasks is not
    # advised.
    sanctioned = SlurmOrigin(job_id=442003, job_name="eval", account="ml-research",
                             array_job_id=ARRAY, array_task_id=2)  # fmt: skip
    guard = ScanProtection(sources=(ProtectedSource("sanctioned rule 'eval'", origin=sanctioned),))
    (job,) = with_advice([_rogue(origin)], guard)
    assert job.advice is not None and job.advice.source_refused is not None
    assert job.advice.restarts is None
    assert "scancel" not in job.advice.finding_text(411)
    assert job.origin.remediation is None


# -- the daemon: an array's tasks are terminated each, a cron line's run once ----------------


class _Remedy:
    """Stands in for the enforcer's Remedy: records what it was asked to start."""

    def __init__(self) -> None:
        self.started: list[int] = []

    def begin_terminate(
        self, target: SimpleNamespace, now: float, source_disabled: bool
    ) -> SimpleNamespace:
        self.started.append(target.root_pid)
        return SimpleNamespace(step=lambda: None)


def _daemon_job(origin: Origin, pid: int = 5001) -> Job:
    root = Proc(pid=pid, ppid=400, start_ticks=100, state="S", comm="python3", uid=0)
    again = origin.restarts()
    return Job(
        root_pid=pid, pids=[pid], user="root", cmdline=("/usr/bin/python3", "/srv/train_fake.py"),
        start_ticks=100, gpu_memory_bytes=None, gpu_uuids=[], lineage=[root], origin=origin,
        verdict="rogue", advice=Advice(restarts=again),
    )  # fmt: skip


def test_the_daemon_terminates_each_task_of_an_array_as_it_starts(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    enf = Enforcer(d.config, d.db, clock=lambda: T0)
    task = SlurmOrigin(job_id=TASK, job_name="sweep-lr", account="ml-research",
                       array_job_id=ARRAY, array_task_id=0, array_pending=True,
                       array_pending_tasks="1-9", array_pending_count=9)  # fmt: skip
    cron = CronOrigin(file="/etc/cron.d/x", line=2, schedule="0 2 * * 0", user="root")
    for origin, started in ((task, [5001]), (cron, [])):
        job = _daemon_job(origin)
        sig = job_signature("root", job.cmdline, origin)
        # A terminate of an earlier run already said its source starts it again.
        target = SimpleNamespace(
            restarts=job.advice.restarts, service=(), service_note=None, copies=None
        )
        details = terminate_extras(target, source_disabled=False)  # type: ignore[arg-type]
        record = {"root": [5000, 90], "procs": [], **details}
        d.db.record_action("daemon", "terminate", "PID 5000", "will-return", record, T0 - 60,
                           signature=sig)  # fmt: skip
        remedy = _Remedy()
        enf._stop(remedy, job, SimpleNamespace(finding_id=1, refused=None, root_pid=5001),  # type: ignore[arg-type]
                  False, sig)  # fmt: skip
        # The next task is one of the array's last nine: terminated, as before arrays
        # were read. A cron line starts runs forever: terminate-futile, as it was.
        assert remedy.started == started, origin.kind


def test_the_remediation_failed_finding_says_each_task_is_terminated(tmp_path: Path) -> None:
    d = _daemon(tmp_path)
    clock = [T0]
    enf = Enforcer(d.config, d.db, clock=lambda: clock[0])
    task = SlurmOrigin(job_id=TASK, job_name="sweep-lr", account="ml-research",
                       array_job_id=ARRAY, array_task_id=0, array_pending=True,
                       array_pending_tasks="1-9", array_pending_count=9)  # fmt: skip
    job = _daemon_job(task)
    sig = job_signature("root", job.cmdline, task)
    details = terminate_extras(
        SimpleNamespace(restarts=job.advice.restarts, service=(), service_note=None, copies=None),  # type: ignore[arg-type]
        source_disabled=False,
    )
    assert details["will_return"] == {"restarts": RESTARTS, "stops": STOPS, "each_run": True}
    d.db.record_action("daemon", "terminate", "PID 5000", "will-return",
                       {"root": [5000, 90], "procs": [], **details}, T0, signature=sig)  # fmt: skip
    _tick(d, enf, clock, T0 + 50, [job])
    (message,) = [
        r[0]
        for r in d.db.conn.execute("SELECT message FROM findings WHERE kind = 'remediation-failed'")
    ]
    assert message.endswith(
        f"as its terminate said, its source {RESTARTS} ({STOPS}); the daemon terminates each "
        "run it starts"
    ), message
