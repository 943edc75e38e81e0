"""What a hostile tester found against the one guard (Trust IV), each kept as a test of
its exact right value. Fake procfs trees only: nothing here signals a real process
(plans and dry runs read the fixture tree; signals would go to a recording double).

1. Two identical crontab lines, one of them the sanctioned pipeline's: the run was
   attributed to the other line, judged rogue and planned for termination.
2. `terminate` reached a neighbour in a leaderless process group whose command merely
   contained the job's script name (`check_train.py`), or the same interpreter.
3. `terminate` took a whole login-session scope (or cron.service) as the job's cgroup
   when the job's parent was PID 1: the shell, sshd, the cron daemon.
4. The Slurm sweep's trees reached slurmd, another job's slurmstepd and that job's
   processes through the same cgroup rule.
5. The advice named a member that had been sanctioned before its parent became a GPU
   holder.
6. The advice (and its `kill -- -PGID`) reached a member on `enforcement.protect`.
7. `terminate` ignored an `enforcement.protect` `{origin: ...}` entry.
8. `python3 - train.py`, `python3 -c "... # train.py"`, `node --eval=1 train.py` were
   training launchers.
"""

from __future__ import annotations

from pathlib import Path

from rogue_watchdog.actions.effects import RecordingEffects
from rogue_watchdog.actions.guards import Expected, SignalGuard
from rogue_watchdog.actions.remedy import Remedy, target_from_job
from rogue_watchdog.actions.terminate import plan_tree
from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.config import load_config, parse_config
from rogue_watchdog.config.base import Regex
from rogue_watchdog.lineage.base import runs_program
from rogue_watchdog.scan import Scanner
from rogue_watchdog.sources.procfs import ProcessTable
from rogue_watchdog.state import StateDB
from tests.fixtures.proc.fakeproc import FakeProc, write_tree

PY = "/usr/bin/python3"
BTIME = 1_800_000_000
# 20,000 ticks after boot at 100 Hz: 200 s, i.e. 00:03:20 past an hour boundary.
START = 20_000


def host(tmp_path: Path, procs: list[FakeProc], crontab: str = "", extra: str = "") -> Path:
    proc = tmp_path / "proc"
    write_tree(proc, procs)
    (proc / "stat").write_text(f"btime {BTIME}\n")
    (tmp_path / "crontab").write_text(crontab)
    (tmp_path / "crontab").chmod(0o644)
    (tmp_path / "cron.d").mkdir(exist_ok=True)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "nvml: {enabled: false}\n"
        f"paths: {{proc_root: '{proc}', crontab: '{tmp_path}/crontab', cron_d: "
        f"'{tmp_path}/cron.d', cron_spool: [], unit_dirs: []}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*', gpu_libraries: []}}\n"
        f"daemon: {{state_dir: '{tmp_path}/state', socket: '{tmp_path}/s.sock'}}\n" + extra
    )
    return cfg


def planned(tmp_path: Path, root: int, members: list[int], **guard: object) -> list[int]:
    table = ProcessTable(str(tmp_path / "proc"))
    table.refresh()
    exp = [Expected(p, table.procs[p].start_ticks, table.procs[p].cmdline) for p in members]
    g = SignalGuard(proc_root=str(tmp_path / "proc"), **guard)  # type: ignore[arg-type]
    return sorted(e.pid for e, _ in plan_tree(exp, g) if g.check(e.pid, e).__class__.__name__
                  == "LiveProc")  # fmt: skip


def cron_chain(start: int = START) -> list[FakeProc]:
    return [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(900, 1, ["/usr/sbin/cron", "-f"], exe="/usr/sbin/cron"),
        FakeProc(901, 900, ["/usr/sbin/CRON", "-f"], exe="/usr/sbin/cron", start=start),
        FakeProc(
            902,
            901,
            ["/bin/sh", "-c", f"{PY} /opt/pipeline/train.py"],
            exe="/usr/bin/dash",
            start=start,
        ),
        FakeProc(903, 902, [PY, "/opt/pipeline/train.py"], start=start),
    ]


def test_identical_lines_one_sanctioned_is_never_a_target(tmp_path: Path) -> None:
    crontab = (
        "SHELL=/bin/sh\n"
        f"0 * * * * root {PY} /opt/pipeline/train.py\n"
        f"*/5 * * * * root {PY} /opt/pipeline/train.py\n"
    )
    cfg = host(
        tmp_path, cron_chain(360_000), crontab,
        "sanctioned:\n  - name: pipeline\n    cmdline: '/usr/bin/python3 /opt/pipeline/train.py*'\n"
        f"    origin: {{cron_file: '{tmp_path}/crontab', cron_line: 3}}\n",
    )  # fmt: skip
    (job,) = [j for j in Scanner(load_config(str(cfg))).scan().jobs if j.root_pid == 903]
    assert job.origin.fields["also"] == [f"{tmp_path}/crontab:3"]
    # Which of the two fired cannot be told: not called rogue for it, and no target.
    assert (job.verdict, job.rule) == ("sanctioned", "pipeline")
    assert job.advice.refused is not None and job.origin.remediation is None


def test_a_neighbour_in_the_group_is_not_the_job(tmp_path: Path) -> None:
    procs = [
        FakeProc(1, 0, ["/sbin/init"]),
        # setsid sh -c "python3 train.py & python3 check_train.py & python3 webapp &"
        FakeProc(5391, 1, [PY, "/s/train.py"], pgid=5390, sid=5390),
        FakeProc(5392, 1, [PY, "/s/check_train.py"], pgid=5390, sid=5390),
        FakeProc(5393, 1, [PY, "/s/webapp"], pgid=5390, sid=5390),
        FakeProc(5394, 1, [PY, "/s/train.py", "--copy"], pgid=5390, sid=5390),
    ]
    host(tmp_path, procs)
    # Its own copy (same program, same owner, same group) is the job; neighbours are not.
    assert planned(tmp_path, 5391, [5391]) == [5391, 5394]


def test_a_login_session_scope_is_not_the_jobs_cgroup(tmp_path: Path) -> None:
    scope = ("0::/user.slice/user-1000.slice/session-7.scope",)
    procs = [
        FakeProc(1, 0, ["/sbin/init"], cgroup=("0::/init.scope",)),
        FakeProc(800, 1, ["/usr/sbin/sshd", "-D"], cgroup=scope),
        FakeProc(802, 800, ["-bash"], exe="/usr/bin/bash", uid=1000, cgroup=scope),
        FakeProc(803, 802, ["vim", "notes.txt"], uid=1000, cgroup=scope),
        FakeProc(900, 1, [PY, "/home/alice/train.py"], uid=1000, cgroup=scope),
    ]
    host(tmp_path, procs)
    assert planned(tmp_path, 900, [900]) == [900]


def test_the_sweep_never_reaches_slurm_or_another_job(tmp_path: Path) -> None:
    from rogue_watchdog.actions.slurmsweep import sweep

    unit = ("0::/system.slice/slurmd.service",)
    procs = [
        FakeProc(1, 0, ["/sbin/init"], cgroup=("0::/init.scope",)),
        FakeProc(500, 1, ["/usr/sbin/slurmd", "-D"], cgroup=unit),
        FakeProc(510, 500, ["slurmstepd: [43.0]"], exe="/usr/sbin/slurmstepd", cgroup=unit),
        FakeProc(
            511,
            510,
            [PY, "/home/bob/train.py"],
            uid=1001,
            cgroup=unit,
            environ={"SLURM_JOB_ID": "43"},
        ),
        FakeProc(
            900,
            1,
            [PY, "/home/alice/train.py"],
            uid=1000,
            cgroup=unit,
            start=8000,
            environ={"SLURM_JOB_ID": "41"},
        ),
    ]
    cfg = host(tmp_path, procs)
    table = ProcessTable(str(tmp_path / "proc"))
    ended = CommandResult(0, "JobId=41 JobName=t UserId=alice(1000) JobState=COMPLETED\n", "")
    report = sweep(
        load_config(str(cfg)), job_id=41, dry_run=True, epilog=True, epilog_uid=1000,
        recorded={(900, 8000): (41, 1000)}, table=table,
        run=RecordingRunner({("scontrol", "show", "job", "41", "-o"): ended}),
    )  # fmt: skip
    [outcome] = report.outcomes[41]
    assert [p.pid for p in outcome.procs if p.result == "would-signal"] == [900]


def test_advice_never_names_a_protected_member(tmp_path: Path) -> None:
    procs = [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(800, 1, ["/bin/bash", "-c", f"{PY} /home/u/train.py"], exe="/usr/bin/bash"),
        FakeProc(801, 800, [PY, "/home/u/train.py"], pgid=800, sid=800),
        FakeProc(802, 801, ["/opt/site/agent", "--report"], pgid=800, sid=800),
    ]
    cfg = host(tmp_path, procs, extra="enforcement: {protect: ['/opt/site/agent*']}\n")
    (job,) = Scanner(load_config(str(cfg))).scan().jobs
    assert job.advice.stop_pids == (801,)  # 802 protected, so 800 is shared with it
    assert job.advice.by_hand == "kill -TERM 801"


def test_a_once_sanctioned_member_is_never_named(tmp_path: Path) -> None:
    procs = [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(800, 1, [PY, "/opt/pipeline/driver.py"]),
        FakeProc(801, 800, [PY, "/opt/pipeline/train.py"], pgid=800, sid=800),  # one group
    ]
    cfg = host(
        tmp_path, procs,
        extra="sanctioned:\n  - {name: p, cmdline: '*train.py*', origin: {any: true},"
        " user: root}\n",
    )  # fmt: skip
    scanner = Scanner(load_config(str(cfg)), fd_sweep_interval_s=0.0)  # every fd, every scan
    assert [(j.root_pid, j.verdict) for j in scanner.scan().jobs] == [(801, "sanctioned")]
    (tmp_path / "nodev0").write_text("")
    fd = tmp_path / "proc" / "800" / "fd"
    fd.mkdir()
    (fd / "7").symlink_to(tmp_path / "nodev0")
    (job,) = scanner.scan().jobs
    assert job.root_pid == 800 and job.verdict == "rogue"
    assert job.advice.stop_pids == (800,)
    assert job.advice.by_hand == "kill -TERM 800"


def test_terminate_obeys_a_protected_origin(tmp_path: Path) -> None:
    (tmp_path / "cron.d").mkdir()
    (tmp_path / "cron.d" / "site").write_text(f"* * * * * root {PY} /opt/pipeline/train.py\n")
    (tmp_path / "cron.d" / "site").chmod(0o644)
    cfg = host(
        tmp_path, cron_chain(),
        extra=f"enforcement: {{protect: [{{origin: {{cron_file: '{tmp_path}/cron.d/*'}}}}]}}\n",
    )  # fmt: skip
    config = load_config(str(cfg))
    result = Scanner(config).scan()
    (job,) = [j for j in result.jobs if j.root_pid == 903]
    assert job.advice.refused is not None and "enforcement.protect" in job.advice.refused
    fx = RecordingEffects()
    assert result.protection is not None
    remedy = Remedy(
        config.enforcement, StateDB(str(tmp_path / "state")), fx, actor="t",
        backup_dir=str(tmp_path / "b"), proc_root=str(tmp_path / "proc"),
        protection=result.protection,
    )  # fmt: skip
    _aid, res = remedy.terminate(target_from_job(job, None, None, str(tmp_path / "proc")), 0.0)
    assert (res.outcome, fx.signals()) == ("refused", [])


def test_a_name_in_code_or_on_stdin_is_not_a_launcher() -> None:
    train = Regex(r"(^|[\s/])train[^\s/]*\.py(\s|$)")
    assert not runs_program([PY, "-", "/s/train.py"], train)
    assert not runs_program([PY, "-c", "print(1)  # train.py"], train)
    assert not runs_program(["node", "--eval=1", "train.py"], train)
    assert runs_program([PY, "-u", "/s/train.py"], train)
    assert not runs_program([PY, "/s/eval.py", "--from", "/s/train.py"], train)
    assert parse_config("", "c.yaml") is not None
