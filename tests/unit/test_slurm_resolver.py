"""SlurmResolver on fake proc trees, with squeue/scontrol answers captured from Slurm 22.05.

The fixtures under tests/fixtures/slurm/ are real output of a single-node Slurm 22.05.8
(the harness in tests/system/slurmharness.py): job 1 ``retrain-weekly`` account
``ml-research`` running, job 2 ``second`` account ``other`` pending.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.proc.fakeproc import FakeProc, Recorder, lineage, make_context
from watchdog.lineage.base import CommandResult, ResolveContext
from watchdog.lineage.slurm import (
    SlurmResolver,
    parse_scontrol_job,
    parse_scontrol_record,
    parse_squeue_json,
    query_job,
)

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
SQUEUE_1_2 = (FIX / "squeue-22.05-running-and-pending.json").read_text()
SQUEUE_CANCELLED = (FIX / "squeue-22.05-cancelled-and-running.json").read_text()
SCONTROL_RUNNING = (FIX / "scontrol-22.05-running.txt").read_text()
SCONTROL_PENDING = (FIX / "scontrol-22.05-pending.txt").read_text()
SCONTROL_CANCELLED = (FIX / "scontrol-22.05-cancelled.txt").read_text()
INVALID = "slurm_load_jobs error: Invalid job id specified\n"

INIT = FakeProc(1, 0, ["/sbin/init"])
SLURMD = FakeProc(300, 1, ["/usr/sbin/slurmd", "-D"])


def _stepd(job: str, pid: int = 400) -> FakeProc:
    # setproctitle: argv is one string; Debian's binary is slurmstepd-wlm.
    return FakeProc(pid, 1, [f"slurmstepd: [{job}]"], exe="/usr/sbin/slurmstepd-wlm")


def _batch_tree(env: dict[str, str] | None = None) -> list[FakeProc]:
    return [
        INIT,
        SLURMD,
        _stepd("1.batch"),
        FakeProc(410, 400, ["/bin/sh", "/var/spool/slurmd/job00001/slurm_script"]),
        FakeProc(
            411,
            410,
            ["/usr/bin/python3", "/srv/train_fake.py"],
            comm="pt_main_thread",
            environ=env,
        ),
    ]


def _squeue_ok(job: int, text: str = SQUEUE_1_2) -> dict[tuple[str, ...], CommandResult | None]:
    return {("squeue", "--json", "-j", str(job)): CommandResult(0, text, "")}


def _resolve(ctx: ResolveContext, pid: int):  # type: ignore[no-untyped-def]
    return SlurmResolver().resolve(lineage(ctx, pid), ctx)


def test_stepd_ancestor_with_squeue_json(tmp_path: Path) -> None:
    rec = Recorder(_squeue_ok(1))
    ctx = make_context(tmp_path, _batch_tree(), rec)
    origin = _resolve(ctx, 411)
    assert origin is not None and origin.kind == "slurm"
    assert origin.fields == {
        "job_id": 1,
        "job_name": "retrain-weekly",
        "account": "ml-research",
        "user": "root",
        "partition": "rwtest",
        "step": "batch",
        "state": "RUNNING",
    }
    assert origin.remediation == "scancel 1"
    assert origin.evidence[0] == "ancestor PID 400 is slurmstepd: [1.batch]"
    assert rec.calls == [("squeue", "--json", "-j", "1")]


def test_squeue_json_ignores_dash_j_so_the_job_is_picked_by_id() -> None:
    # 22.05 lists every job despite -j: job 2 is the second entry, not the first.
    job = parse_squeue_json(SQUEUE_1_2, 2)
    assert job is not None
    assert (job.status, job.job_name, job.account, job.state) == (
        "found",
        "second",
        "other",
        "PENDING",
    )
    gone = parse_squeue_json(SQUEUE_1_2, 99)
    assert gone is not None and gone.status == "gone" and gone.ended


def test_squeue_json_newer_shapes() -> None:
    # 23.02+: job_state is a list, numbers are {"set", "infinite", "number"} objects.
    doc = {
        "jobs": [
            {
                "job_id": {"set": True, "infinite": False, "number": 7},
                "name": "n",
                "account": "acct",
                "user_name": "alice",
                "partition": "gpu",
                "job_state": ["RUNNING"],
            }
        ]
    }
    job = parse_squeue_json(json.dumps(doc), 7)
    assert job is not None
    assert (job.job_name, job.account, job.user, job.partition, job.state) == (
        "n",
        "acct",
        "alice",
        "gpu",
        "RUNNING",
    )
    assert parse_squeue_json("not json", 7) is None
    assert parse_squeue_json('{"errors": []}', 7) is None


def test_cancelled_job_in_listing_counts_as_ended() -> None:
    job = parse_squeue_json(SQUEUE_CANCELLED, 1)
    assert job is not None and job.status == "found" and job.state == "CANCELLED"
    assert job.ended


def test_scontrol_record_keeps_values_with_spaces_and_equals() -> None:
    rec = parse_scontrol_record("JobId=5 JobName=a b Comment=x y TRES=cpu=1,node=1 Account=(null)")
    assert rec == {
        "JobId": "5",
        "JobName": "a b",
        "Comment": "x y",
        "TRES": "cpu=1,node=1",
        "Account": "(null)",
    }
    real = parse_scontrol_record(SCONTROL_RUNNING)
    assert real["JobName"] == "retrain-weekly"
    assert real["Comment"] == "hello"
    assert real["AllocNode:Sid"] == "localhost:3898"
    assert real["TRES"] == "cpu=1,node=1,billing=1"


def test_scontrol_job_fields() -> None:
    job = parse_scontrol_job(SCONTROL_PENDING, 2)
    assert job is not None
    assert (job.job_name, job.account, job.user, job.partition, job.state) == (
        "second",
        "other",
        "root",
        "rwtest",
        "PENDING",
    )
    assert parse_scontrol_job(SCONTROL_PENDING, 3) is None
    cancelled = parse_scontrol_job(SCONTROL_CANCELLED, 1)
    assert cancelled is not None and cancelled.ended
    nulls = parse_scontrol_job("JobId=9 JobName=x UserId=bob(1000) Account=(null)", 9)
    assert nulls is not None and nulls.account is None and nulls.user == "bob"


def test_scontrol_fallback_when_squeue_has_no_json(tmp_path: Path) -> None:
    rec = Recorder(
        {
            ("squeue", "--json", "-j", "1"): CommandResult(1, "", "squeue: unrecognized option"),
            ("scontrol", "show", "job", "1", "-o"): CommandResult(0, SCONTROL_RUNNING, ""),
        }
    )
    ctx = make_context(tmp_path, _batch_tree(), rec)
    origin = _resolve(ctx, 411)
    assert origin is not None
    assert (origin.fields["job_name"], origin.fields["account"]) == (
        "retrain-weekly",
        "ml-research",
    )
    assert rec.calls[-1] == ("scontrol", "show", "job", "1", "-o")
    assert origin.evidence[-1].startswith("scontrol: job 1 name 'retrain-weekly'")


def test_no_cli_uses_the_job_environment(tmp_path: Path) -> None:
    env = {
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NAME": "retrain-weekly",
        "SLURM_JOB_ACCOUNT": "ml-research",
        "SLURM_JOB_USER": "root",
        "SLURM_JOB_PARTITION": "rwtest",
    }
    ctx = make_context(tmp_path, _batch_tree(env), Recorder())  # every command "missing"
    origin = _resolve(ctx, 411)
    assert origin is not None and origin.kind == "slurm"
    assert origin.fields["job_name"] == "retrain-weekly"
    assert origin.fields["account"] == "ml-research"
    assert origin.fields["state"] is None
    assert "from SLURM_JOB_* in the job's environment" in origin.evidence[-1]


def test_cli_disabled_and_no_environment_gives_null_fields(tmp_path: Path) -> None:
    rec = Recorder(_squeue_ok(1))
    ctx = make_context(tmp_path, _batch_tree(), rec, use_slurm_cli=False)
    origin = _resolve(ctx, 411)
    assert origin is not None
    assert origin.fields["job_id"] == 1
    assert origin.fields["job_name"] is None and origin.fields["account"] is None
    assert origin.evidence[-1] == (
        "Slurm not asked (Slurm CLI disabled (use_slurm_cli)); job name and account unknown"
    )
    assert rec.calls == []


def test_cgroup_v1_clue_for_a_live_job(tmp_path: Path) -> None:
    cg = ("9:name=systemd:/", "4:memory:/slurm/uid_0/job_1/step_batch/task_0")
    procs = [
        INIT,
        FakeProc(50, 1, ["/bin/bash"]),
        FakeProc(60, 50, ["/usr/bin/python3", "/srv/train.py"], cgroup=cg),
    ]
    ctx = make_context(tmp_path, procs, Recorder(_squeue_ok(1)))
    origin = _resolve(ctx, 60)
    assert origin is not None
    assert origin.fields["job_id"] == 1 and origin.fields["step"] == "batch"
    assert origin.evidence[0] == (
        "cgroup of PID 60 is a Slurm job cgroup: 4:memory:/slurm/uid_0/job_1/step_batch/task_0"
    )


def test_cgroup_v2_clue(tmp_path: Path) -> None:
    cg = ("0::/system.slice/slurmstepd.scope/job_2/step_0/user/task_0",)
    procs = [INIT, FakeProc(50, 1, ["/bin/bash"]), FakeProc(60, 50, ["python3"], cgroup=cg)]
    ctx = make_context(tmp_path, procs, Recorder(_squeue_ok(2)))
    origin = _resolve(ctx, 60)
    assert origin is not None
    assert (origin.fields["job_id"], origin.fields["step"], origin.fields["job_name"]) == (
        2,
        "0",
        "second",
    )


def test_ended_job_clue_is_left_to_the_orphan_resolver(tmp_path: Path) -> None:
    cg = ("4:memory:/slurm/uid_1000/job_77/step_batch",)
    procs = [
        INIT,
        FakeProc(60, 1, ["/usr/bin/python3", "-c", "w"], comm="pt_data_worker", cgroup=cg),
    ]
    ctx = make_context(tmp_path, procs, Recorder(_squeue_ok(77)))
    assert _resolve(ctx, 60) is None


def test_unconfirmed_job_under_pid1_is_left_to_orphan(tmp_path: Path) -> None:
    cg = ("4:memory:/slurm/uid_1000/job_77/step_batch",)
    procs = [INIT, FakeProc(60, 1, ["python3"], cgroup=cg)]
    ctx = make_context(tmp_path, procs, use_slurm_cli=False)
    assert _resolve(ctx, 60) is None


def test_daemonized_process_of_a_running_job_is_still_slurm(tmp_path: Path) -> None:
    cg = ("4:memory:/slurm/uid_0/job_1/step_batch",)
    procs = [INIT, FakeProc(60, 1, ["python3", "train.py"], cgroup=cg)]
    ctx = make_context(tmp_path, procs, Recorder(_squeue_ok(1)))
    origin = _resolve(ctx, 60)
    assert origin is not None and origin.fields["state"] == "RUNNING"


def test_environment_clue_for_completed_job_passes(tmp_path: Path) -> None:
    procs = [
        INIT,
        FakeProc(50, 1, ["/bin/bash"]),
        FakeProc(60, 50, ["python3"], environ={"SLURM_JOB_ID": "1"}),
    ]
    rec = Recorder(_squeue_ok(1, SQUEUE_CANCELLED))
    ctx = make_context(tmp_path, procs, rec)
    assert _resolve(ctx, 60) is None


def test_no_clue_no_origin(tmp_path: Path) -> None:
    procs = [INIT, FakeProc(50, 1, ["/bin/bash"]), FakeProc(60, 50, ["python3"], environ={})]
    rec = Recorder()
    ctx = make_context(tmp_path, procs, rec)
    assert _resolve(ctx, 60) is None
    assert rec.calls == []


def test_query_is_cached_and_invalid_id_means_gone(tmp_path: Path) -> None:
    rec = Recorder(
        {
            ("squeue", "--json", "-j", "5"): CommandResult(1, "", INVALID),
        }
    )
    ctx = make_context(tmp_path, [INIT], rec)
    first = query_job(5, ctx)
    second = query_job(5, ctx)
    assert first is second and first.status == "gone"
    assert rec.calls == [("squeue", "--json", "-j", "5")]


def test_controller_down_is_unavailable(tmp_path: Path) -> None:
    down = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
    rec = Recorder(
        {
            ("squeue", "--json", "-j", "5"): CommandResult(1, "", down),
            ("scontrol", "show", "job", "5", "-o"): CommandResult(1, "", down),
        }
    )
    ctx = make_context(tmp_path, [INIT], rec)
    job = query_job(5, ctx)
    assert job.status == "unavailable" and not job.ended
    assert job.via == "scontrol: " + down.strip()
