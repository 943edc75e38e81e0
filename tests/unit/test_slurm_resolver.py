"""SlurmResolver on fake proc trees, with squeue/scontrol answers captured from Slurm 22.05.

The fixtures under tests/fixtures/slurm/ are real output of a single-node Slurm 22.05.8
(the harness in tests/system/slurmharness.py): job 1 ``retrain-weekly`` account
``ml-research`` running, job 2 ``second`` account ``other`` pending.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.lineage.base import ResolveContext, split_answer
from rogue_watchdog.lineage.slurm import (
    SlurmResolver,
    parse_scontrol_job,
    parse_scontrol_record,
    parse_squeue_json,
    query_job,
)
from rogue_watchdog.model import Proc
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context

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


def _squeue_ok(job: int, text: str = SQUEUE_1_2) -> dict[tuple[str, ...], CommandResult]:
    return {("squeue", "--json", "-j", str(job)): CommandResult(0, text, "")}


def _resolve(ctx: ResolveContext, pid: int):  # type: ignore[no-untyped-def]
    return SlurmResolver().resolve(lineage(ctx, pid), ctx)


def test_stepd_ancestor_with_squeue_json(tmp_path: Path) -> None:
    rec = RecordingRunner(_squeue_ok(1))
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
    assert origin.evidence[0] == "ancestor PID 400 is `slurmstepd: [1.batch]`"
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
    rec = RecordingRunner(
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
    assert origin.evidence[-1].startswith("scontrol: job 1 name retrain-weekly")


def test_no_cli_uses_the_job_environment(tmp_path: Path) -> None:
    env = {
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NAME": "retrain-weekly",
        "SLURM_JOB_ACCOUNT": "ml-research",
        "SLURM_JOB_USER": "root",
        "SLURM_JOB_PARTITION": "rwtest",
    }
    ctx = make_context(tmp_path, _batch_tree(env), RecordingRunner())  # every command "missing"
    origin = _resolve(ctx, 411)
    assert origin is not None and origin.kind == "slurm"
    assert origin.fields["job_name"] == "retrain-weekly"
    # The job's user sets its own environment: no account reaches a rule from there.
    assert origin.fields["account"] is None
    assert origin.fields["state"] is None
    assert origin.remediation == "scancel 1"  # the job is proven by its slurmstepd
    assert origin.evidence[-1] == (
        "Slurm not asked (squeue did not run (No such file or directory); scontrol did not "
        "run (No such file or directory)); account unknown; "
        "SLURM_JOB_ACCOUNT=ml-research in the job's environment is not trusted "
        "(the job's user can set it)"
    )


def test_cli_disabled_and_no_environment_gives_null_fields(tmp_path: Path) -> None:
    rec = RecordingRunner(_squeue_ok(1))
    ctx = make_context(tmp_path, _batch_tree(), rec, use_slurm_cli=False)
    origin = _resolve(ctx, 411)
    assert origin is not None
    assert origin.fields["job_id"] == 1
    assert origin.fields["job_name"] is None and origin.fields["account"] is None
    assert origin.evidence[-1] == (
        "Slurm not asked (Slurm CLI disabled (use_slurm_cli)); account unknown"
    )
    assert rec.calls == []


def test_cgroup_v1_clue_for_a_live_job(tmp_path: Path) -> None:
    cg = ("9:name=systemd:/", "4:memory:/slurm/uid_0/job_1/step_batch/task_0")
    procs = [
        INIT,
        FakeProc(50, 1, ["/bin/bash"]),
        FakeProc(60, 50, ["/usr/bin/python3", "/srv/train.py"], cgroup=cg),
    ]
    ctx = make_context(tmp_path, procs, RecordingRunner(_squeue_ok(1)))
    origin = _resolve(ctx, 60)
    assert origin is not None
    assert origin.fields["job_id"] == 1 and origin.fields["step"] == "batch"
    assert origin.evidence[0] == (
        "cgroup of PID 60 is a Slurm job cgroup: 4:memory:/slurm/uid_0/job_1/step_batch/task_0"
    )


def test_cgroup_v2_clue(tmp_path: Path) -> None:
    cg = ("0::/system.slice/slurmstepd.scope/job_2/step_0/user/task_0",)
    procs = [INIT, FakeProc(50, 1, ["/bin/bash"]), FakeProc(60, 50, ["python3"], cgroup=cg)]
    ctx = make_context(tmp_path, procs, RecordingRunner(_squeue_ok(2)))
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
    ctx = make_context(tmp_path, procs, RecordingRunner(_squeue_ok(77)))
    assert _resolve(ctx, 60) is None


def test_unconfirmed_job_under_pid1_is_left_to_orphan(tmp_path: Path) -> None:
    cg = ("4:memory:/slurm/uid_1000/job_77/step_batch",)
    procs = [INIT, FakeProc(60, 1, ["python3"], cgroup=cg)]
    ctx = make_context(tmp_path, procs, use_slurm_cli=False)
    assert _resolve(ctx, 60) is None


def test_daemonized_process_of_a_running_job_is_still_slurm(tmp_path: Path) -> None:
    cg = ("4:memory:/slurm/uid_0/job_1/step_batch",)
    procs = [INIT, FakeProc(60, 1, ["python3", "train.py"], cgroup=cg)]
    ctx = make_context(tmp_path, procs, RecordingRunner(_squeue_ok(1)))
    origin = _resolve(ctx, 60)
    assert origin is not None and origin.fields["state"] == "RUNNING"


def test_environment_clue_for_completed_job_passes(tmp_path: Path) -> None:
    procs = [
        INIT,
        FakeProc(50, 1, ["/bin/bash"]),
        FakeProc(60, 50, ["python3"], environ={"SLURM_JOB_ID": "1"}),
    ]
    rec = RecordingRunner(_squeue_ok(1, SQUEUE_CANCELLED))
    ctx = make_context(tmp_path, procs, rec)
    assert split_answer(_resolve(ctx, 60))[0] is None  # its claim is only a note


def test_no_clue_no_origin(tmp_path: Path) -> None:
    procs = [INIT, FakeProc(50, 1, ["/bin/bash"]), FakeProc(60, 50, ["python3"], environ={})]
    rec = RecordingRunner()
    ctx = make_context(tmp_path, procs, rec)
    assert _resolve(ctx, 60) is None
    assert rec.calls == []


def test_query_is_cached_and_invalid_id_means_gone(tmp_path: Path) -> None:
    rec = RecordingRunner(
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
    rec = RecordingRunner(
        {
            ("squeue", "--json", "-j", "5"): CommandResult(1, "", down),
            ("scontrol", "show", "job", "5", "-o"): CommandResult(1, "", down),
        }
    )
    ctx = make_context(tmp_path, [INIT], rec)
    job = query_job(5, ctx)
    assert job.status == "unavailable" and not job.ended
    assert job.via == f"squeue failed: `{down.strip()}`; scontrol failed: `{down.strip()}`"


# -- a Slurm origin must be proven, never taken from what the process says ---------------

CLAIM_ENV = {"SLURM_JOB_ID": "4242", "SLURM_JOB_ACCOUNT": "research"}
CLAIM_NOTE = (
    "claims Slurm job 4242 in its environment, not confirmed (SLURM_JOB_ID=4242 in the "
    "environment of PID 60; no slurmstepd ancestor and no Slurm job cgroup)"
)


def _user_shell_tree(env: dict[str, str], uid: int = 1000) -> list[FakeProc]:
    return [
        INIT,
        FakeProc(50, 1, ["/bin/bash"], uid=uid),
        FakeProc(60, 50, ["/usr/bin/python3", "/tmp/train_x.py"], uid=uid, environ=env),
    ]


def test_environment_alone_is_a_claim_not_a_slurm_origin(tmp_path: Path) -> None:
    # SLURM_JOB_ID=4242 SLURM_JOB_ACCOUNT=research python3 train_x.py, Slurm CLI failing.
    ctx = make_context(tmp_path, _user_shell_tree(CLAIM_ENV), RecordingRunner())
    origin, notes = split_answer(_resolve(ctx, 60))
    assert origin is None
    assert list(notes) == [CLAIM_NOTE]


def test_environment_naming_a_running_job_is_still_only_a_claim(tmp_path: Path) -> None:
    # Slurm answers that job 1 runs (as root); the process merely names it.
    env = {"SLURM_JOB_ID": "1"}
    rec = RecordingRunner(_squeue_ok(1))
    ctx = make_context(tmp_path, _user_shell_tree(env, uid=0), rec)
    origin, notes = split_answer(_resolve(ctx, 60))
    assert origin is None
    assert list(notes) == [CLAIM_NOTE.replace("4242", "1")]
    assert rec.calls == []  # nothing to confirm against: Slurm is not even asked


def test_scan_never_sanctions_an_environment_claim(tmp_path: Path) -> None:
    from rogue_watchdog.config import OriginPin
    from rogue_watchdog.lineage import default_resolvers
    from rogue_watchdog.policy.allowlist import origin_mismatch
    from rogue_watchdog.scan import resolve_origin

    ctx = make_context(tmp_path, _user_shell_tree(CLAIM_ENV), RecordingRunner())
    origin = resolve_origin(lineage(ctx, 60), ctx, default_resolvers())
    assert origin.kind != "slurm"
    assert CLAIM_NOTE in origin.evidence
    assert "scancel" not in (origin.remediation or "")
    # The example's research-slurm rule (origin: {slurm_account: research}) must not match.
    assert origin_mismatch(OriginPin.of(slurm_account="research"), origin) == (
        "origin must be Slurm account 'research'"
    )


def test_title_set_with_exec_a_is_not_slurmstepd(tmp_path: Path) -> None:
    # exec -a "slurmstepd: [4242.0]" python3 ...: the title names another user's job.
    fake = FakeProc(400, 1, ["slurmstepd: [4242.0]"], exe="/usr/bin/python3", uid=1000)
    procs = [INIT, fake, FakeProc(60, 400, ["/usr/bin/python3", "/tmp/t.py"], uid=1000)]
    rec = RecordingRunner(_squeue_ok(4242))
    ctx = make_context(tmp_path, procs, rec)
    origin, notes = split_answer(_resolve(ctx, 60))
    assert origin is None
    assert list(notes) == [
        "ancestor PID 400 looks like slurmstepd (`slurmstepd: [4242.0]`) but is not: its "
        "executable /usr/bin/python3 is not a known binary of that daemon"
    ]
    assert rec.calls == []


def test_slurmstepd_binary_not_owned_by_root_is_refused(tmp_path: Path) -> None:
    stepd = FakeProc(400, 1, ["slurmstepd: [1.0]"], exe="/home/u/slurmstepd", exe_uid=1000)
    procs = [INIT, stepd, FakeProc(60, 400, ["/usr/bin/python3", "/tmp/t.py"])]
    ctx = make_context(tmp_path, procs, RecordingRunner(_squeue_ok(1)))
    origin, notes = split_answer(_resolve(ctx, 60))
    assert origin is None
    assert list(notes) == [
        "ancestor PID 400 looks like slurmstepd (`slurmstepd: [1.0]`) but is not: the owner "
        "of its executable /home/u/slurmstepd is UID 1000, not root"
    ]


def test_slurmstepd_not_running_as_root_is_refused(tmp_path: Path) -> None:
    stepd = FakeProc(400, 1, ["slurmstepd: [1.0]"], exe="/usr/sbin/slurmstepd", uid=1000)
    procs = [INIT, stepd, FakeProc(60, 400, ["/usr/bin/python3", "/tmp/t.py"], uid=1000)]
    ctx = make_context(tmp_path, procs, RecordingRunner(_squeue_ok(1)))
    origin, notes = split_answer(_resolve(ctx, 60))
    assert origin is None
    assert notes[0].endswith("but is not: it runs as UID 1000, not root")


def test_real_slurmstepd_but_job_of_another_user_is_not_confirmed(tmp_path: Path) -> None:
    # Slurm says job 1 belongs to root; the process under that stepd runs as UID 1000.
    procs = _batch_tree()
    procs[-1] = FakeProc(411, 410, ["/usr/bin/python3", "/srv/train_fake.py"], uid=4321)
    ctx = make_context(tmp_path, procs, RecordingRunner(_squeue_ok(1)))
    origin, notes = split_answer(_resolve(ctx, 411))
    assert origin is None
    assert list(notes) == [
        "ancestor PID 400 is `slurmstepd: [1.batch]`, but squeue --json says job 1 belongs "
        "to root and PID 411 runs as 4321: not Slurm job 1's, not confirmed"
    ]


def test_real_slurmstepd_is_proof_and_scancel_names_its_job(tmp_path: Path) -> None:
    ctx = make_context(
        tmp_path, _batch_tree({"SLURM_JOB_ID": "4242"}), RecordingRunner(_squeue_ok(1))
    )
    origin = _resolve(ctx, 411)
    assert origin is not None and origin.fields["job_id"] == 1
    assert origin.remediation == "scancel 1"
    assert origin.evidence[:2] == (
        "ancestor PID 400 is `slurmstepd: [1.batch]`",
        "slurmstepd PID 400 runs /usr/sbin/slurmstepd-wlm (owned by root, as root)",
    )


def test_slurm_names_in_a_delegated_user_cgroup_are_not_a_job_cgroup(tmp_path: Path) -> None:
    cg = (
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/slurmstepd.scope/"
        "job_4242/step_0",
    )
    procs = [INIT, FakeProc(50, 1, ["/bin/bash"], uid=1000)]
    procs.append(FakeProc(60, 50, ["python3", "t.py"], uid=1000, cgroup=cg))
    rec = RecordingRunner(_squeue_ok(4242))
    ctx = make_context(tmp_path, procs, rec)
    assert _resolve(ctx, 60) is None
    assert rec.calls == []


def test_v1_job_cgroup_of_another_uid_is_not_this_process_job(tmp_path: Path) -> None:
    cg = ("4:memory:/slurm/uid_0/job_1/step_batch",)
    procs = [INIT, FakeProc(50, 1, ["/bin/bash"], uid=1000)]
    procs.append(FakeProc(60, 50, ["python3", "t.py"], uid=1000, cgroup=cg))
    ctx = make_context(tmp_path, procs, RecordingRunner(_squeue_ok(1)))
    assert _resolve(ctx, 60) is None


def test_exe_owner_reads_the_executable_file_through_proc(tmp_path: Path) -> None:
    import os

    from rogue_watchdog.lineage.base import exe_owner
    from rogue_watchdog.sources.procfs import ProcessTable

    target = tmp_path / "bin" / "slurmstepd"
    target.parent.mkdir()
    target.write_text("")
    (tmp_path / "proc" / "7").mkdir(parents=True)
    os.symlink(target, tmp_path / "proc" / "7" / "exe")
    ctx = ResolveContext(table=ProcessTable(str(tmp_path / "proc")), now=datetime.now(UTC))
    assert exe_owner(Proc(7, 1, 100, "S", "slurmstepd"), ctx) == os.getuid()
    # No such process: cannot be checked.
    assert exe_owner(Proc(8, 1, 100, "S", "slurmstepd"), ctx) is None


def test_a_user_written_value_cannot_set_the_fields_slurm_reports() -> None:
    """A job's name, comment, command and work dir are its user's text, and a value runs
    to the next ` Key=`: before, `--comment 'x Account=ml-sanctioned'` made the job's
    Account (the allowlist's slurm_account) the comment's, and a name `x ArrayJobId=777`
    made a job of no array a task of another user's array 777, advising `scancel
    --state=PENDING 777`. A key said twice is no answer; the array ids count only before
    JobName (where scontrol prints them); a name not followed by UserId is no answer."""
    line = SCONTROL_RUNNING.strip()
    assert parse_scontrol_record(line)["Account"] == "ml-research"
    forged = line.replace("Comment=hello", "Comment=x Account=ml-sanctioned JobId=9")
    rec = parse_scontrol_record(forged)
    assert "Account" not in rec and rec["JobId"] == "1"
    job = parse_scontrol_job(forged, 1)
    assert job is not None and job.account is None and job.user == "root"
    named = line.replace("JobName=retrain-weekly", "JobName=x ArrayJobId=777 ArrayTaskId=3")
    job = parse_scontrol_job(named, 1)
    assert job is not None and (job.array_job_id, job.array_task_id) == (None, None)
    assert job.job_name is None
    posing = line.replace("JobName=retrain-weekly", "JobName=sanctioned-name Foo=1")
    assert parse_scontrol_record(posing).get("JobName") is None
