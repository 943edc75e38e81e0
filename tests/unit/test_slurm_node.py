"""``slurm:`` settings, drain reasons, and the drainer's decisions against a scripted sinfo.

The real scontrol/sinfo path runs in tests/system/test_slurm_node.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from rogue_watchdog.actions.slurmnode import SlurmDrainer, clean_reason
from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.config import ConfigError, parse_config
from rogue_watchdog.config.slurm import SlurmNodeSettings
from rogue_watchdog.model import Job, OrphanOrigin


def test_settings_parse() -> None:
    cfg = parse_config("slurm:\n  drain_on: [rogue, excess, rogue]\n  node_name: gpu07\n")
    assert cfg.slurm == SlurmNodeSettings(drain_on=("rogue", "excess"), node_name="gpu07")
    assert parse_config("").slurm.drain_on == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("slurm: {drain_on: [sanctioned]}", "c.yaml:1: slurm.drain_on[0]: expected one of"),
        ("slurm: {drain: [rogue]}", "c.yaml:1: slurm.drain: unknown key 'drain'"),
        ("slurm: {sweep_grace_s: 0}", "c.yaml:1: slurm.sweep_grace_s: must be greater than 0"),
    ],
)
def test_settings_errors_name_file_line_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert str(err.value).startswith(message), str(err.value)


def test_reason_is_one_printable_line() -> None:
    assert clean_reason("rogue-watchdog: user bob\n[root@x] é") == (
        "rogue-watchdog: user bob?[root@x] ?"
    )
    assert clean_reason("x" * 500).startswith("rogue-watchdog: xxx")
    assert len(clean_reason("x" * 500)) == 200


class Sinfo:
    """Scripted sinfo/scontrol (a :data:`~rogue_watchdog.command.CommandRunner`): keeps a node
    state, records every call. Not a RecordingRunner: its answers change with the calls."""

    def __init__(self, state: str = "idle", reason: str = "none", fail: bool = False) -> None:
        self.state, self.reason, self.fail = state, reason, fail
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        self.calls.append(tuple(argv))
        if self.fail:
            return CommandResult(1, "", "slurm_load_partitions: Unable to contact slurm controller")
        if argv[0] == "sinfo":
            return CommandResult(0, f"{self.state}|{self.reason}\n", "")
        if "state=drain" in argv:
            self.state, self.reason = "drained", argv[-1].removeprefix("reason=")
        elif "state=resume" in argv:
            self.state, self.reason = "idle", "none"
        return CommandResult(0, "", "")


def _job(verdict: str) -> Job:
    return Job(
        root_pid=7, pids=[7], user="bob\nx", cmdline=("t",), start_ticks=1,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[], origin=OrphanOrigin(),
        verdict=verdict,  # type: ignore[arg-type]
    )  # fmt: skip


def test_excess_drains_only_when_configured(tmp_path: Path) -> None:
    run = Sinfo()
    only_rogue = SlurmDrainer(
        SlurmNodeSettings(drain_on=("rogue",), node_name="n1"), str(tmp_path), run
    )
    assert only_rogue.apply([_job("excess"), _job("sanctioned")]) == []
    assert run.calls == []  # nothing to do: Slurm is not even asked
    both = SlurmDrainer(
        SlurmNodeSettings(drain_on=("rogue", "excess"), node_name="n1"), str(tmp_path), run
    )
    both.apply([_job("excess")])
    assert run.calls[-1] == (
        "scontrol", "update", "nodename=n1", "state=drain",
        "reason=rogue-watchdog: excess training job PID 7 user bob?x (orphan) holds the GPU",
    )  # fmt: skip


def test_admin_drain_is_left_alone(tmp_path: Path) -> None:
    run = Sinfo(state="drained", reason="bad DIMM")
    d = SlurmDrainer(SlurmNodeSettings(drain_on=("rogue",), node_name="n1"), str(tmp_path), run)
    assert d.apply([_job("rogue")]) == []
    assert d.apply([]) == []
    assert all(c[0] == "sinfo" for c in run.calls)
    assert (run.state, run.reason) == ("drained", "bad DIMM")


def test_unreachable_controller_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    d = SlurmDrainer(
        SlurmNodeSettings(drain_on=("rogue",), node_name="n1"), str(tmp_path), Sinfo(fail=True)
    )
    [f] = d.apply([_job("rogue")])
    assert (f.kind, f.severity) == ("slurm-drain-failed", "warning")
    assert f.message == (
        "cannot read the state of Slurm node n1: "
        "`slurm_load_partitions: Unable to contact slurm controller`"
    )


def test_drain_survives_a_daemon_restart(tmp_path: Path) -> None:
    run = Sinfo()
    settings = SlurmNodeSettings(drain_on=("rogue",), node_name="n1")
    SlurmDrainer(settings, str(tmp_path), run).apply([_job("rogue")])
    assert run.state == "drained"
    SlurmDrainer(settings, str(tmp_path), run).apply([])  # a new daemon process
    assert (run.state, run.reason) == ("idle", "none")


def test_daemon_gets_the_drainer_only_when_configured(tmp_path: Path) -> None:
    from rogue_watchdog.daemon.assemble import attach_parts
    from rogue_watchdog.daemon.loop import Daemon

    for text, want in (("slurm: {drain_on: [rogue]}\n", ["slurm-drain"]), ("", [])):
        cfg = parse_config(
            f"daemon: {{state_dir: '{tmp_path}'}}\nnvml: {{enabled: false}}\n" + text
        )
        daemon = Daemon(cfg)
        try:
            attach_parts(daemon)
            assert [e.name for e in daemon.enforcers if e.name == "slurm-drain"] == want
        finally:
            daemon.db.close()


def test_epilog_without_a_job_id_is_a_usage_error() -> None:
    # A subprocess: main() configures logging onto the stderr it is given.
    from tests.conftest import run_cli

    res = run_cli("health-check", "--epilog", env={"SLURM_JOB_ID": ""})
    assert res.returncode == 2
    assert "needs SLURM_JOB_ID" in res.stderr


def _scontrol(job: int, state: str, user: str = "nobody(65534)") -> CommandResult:
    return CommandResult(0, f"JobId={job} JobName=x UserId={user} JobState={state}\n", "")


def test_leftovers_are_proven_members_of_an_ended_job_owned_by_its_user(tmp_path: Path) -> None:
    """Trust IV case 8 on a fixture tree: SLURM_JOB_ID in an environment is a claim, not
    membership. Only a process seen below the job's slurmstepd (or in its cgroup) and
    owned by the job's user is a leftover; the others are reported and left alone."""
    from rogue_watchdog.actions.slurmsweep import find_leftovers
    from tests.fixtures.proc.fakeproc import FakeProc, make_context

    env = {"SLURM_JOB_ID": "77"}
    nobody = 65534
    procs = [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(50, 1, ["/usr/sbin/slurmd", "-D"]),
        FakeProc(60, 1, ["slurmstepd: [77.batch]"], exe="/usr/sbin/slurmstepd"),
        FakeProc(61, 60, ["/usr/bin/python3", "train.py"], environ=env, uid=nobody),  # Slurm's
        FakeProc(70, 1, ["/usr/bin/python3", "worker.py"], environ=env, uid=nobody),  # a claim
        FakeProc(72, 1, ["/usr/bin/python3", "w2.py"], environ=env, uid=nobody, start=200),
        FakeProc(73, 1, ["/usr/bin/python3", "b.py"], environ=env, uid=1001, start=201),
        FakeProc(74, 1, ["/bin/sleep", "600"], environ=env, uid=0),  # a root sleep: a claim
        FakeProc(75, 72, ["/usr/bin/python3", "child.py"], environ=env, uid=nobody),
        FakeProc(80, 50, ["/bin/sh", "/etc/slurm/epilog.sh"], environ=env),  # the Epilog
        FakeProc(81, 80, ["rogue-watchdog", "health-check"], environ=env),  # this sweep
    ]
    # What the daemon saw below slurmstepd [77.batch] while the job ran.
    recorded = {(72, 200): (77, nobody), (73, 201): (77, 1001)}
    ended = RecordingRunner({("scontrol", "show", "job", "77", "-o"): _scontrol(77, "COMPLETED")})
    ctx = make_context(tmp_path / "proc", procs, run_cmd=ended)
    report = find_leftovers(
        ctx.table, ctx, "/dev/nvidia[0-9]*", job_id=77, self_pid=81, recorded=recorded
    )
    assert [(lo.pid, lo.proof) for lo in report.leftovers] == [
        (72, "recorded below slurmstepd while the job ran"),
        (75, "child of PID 72"),
    ]
    claim = "only its environment says so: no job cgroup, not seen below slurmstepd"
    assert [(u.pid, u.proof) for u in report.unconfirmed] == [(70, claim), (74, claim)]
    # Proven in the job, another user's: reported (and drained for), never signalled.
    assert [(u.pid, u.proof) for u in report.foreign] == [
        (73, "recorded below slurmstepd while the job ran; it runs as UID 1001 and the "
         "job's user is UID 65534"),
    ]  # fmt: skip
    assert report.unknown_jobs == {} and report.running_jobs == {}


def test_a_running_job_is_never_swept(tmp_path: Path) -> None:
    """Trust IV case 8: `--job N` and `--epilog` for a job still RUNNING planned kills."""
    from rogue_watchdog.actions.slurmsweep import find_leftovers
    from tests.fixtures.proc.fakeproc import FakeProc, make_context

    env = {"SLURM_JOB_ID": "77"}
    procs = [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(72, 1, ["/usr/bin/python3", "w2.py"], environ=env, uid=65534, start=200),
    ]
    running = RecordingRunner({("scontrol", "show", "job", "77", "-o"): _scontrol(77, "RUNNING")})
    ctx = make_context(tmp_path / "proc", procs, run_cmd=running)
    for epilog in (False, True):
        report = find_leftovers(
            ctx.table, ctx, "/dev/nvidia[0-9]*", job_id=77, self_pid=99,
            recorded={(72, 200): (77, 65534)}, epilog=epilog, epilog_uid=65534,
        )  # fmt: skip
        assert (report.leftovers, report.running_jobs) == ([], {77: "RUNNING"}), epilog
    # No answer from Slurm: neither `--job N` nor the Epilog (whose SLURM_JOB_ID is a
    # claim too) sweeps anything; the process is reported unchecked (issue 37, case 1).
    ctx = make_context(tmp_path / "proc2", procs, run_cmd=RecordingRunner())
    for epilog in (False, True):
        ctx.cache.clear()
        report = find_leftovers(
            ctx.table, ctx, "/dev/nvidia[0-9]*", job_id=77, self_pid=99,
            recorded={(72, 200): (77, 65534)}, epilog=epilog, epilog_uid=65534,
        )  # fmt: skip
        assert report.leftovers == [] and [u.pid for u in report.unchecked] == [72], epilog
        assert report.unknown_jobs == {
            77: "squeue did not run (No such file or directory); scontrol did not run "
            "(No such file or directory)"
        }
