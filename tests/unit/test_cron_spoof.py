"""A cron origin must be proven: the real cron daemon, the entry's user, the entry's time.

Fake proc trees replay the ways a process can pose as a cron job: a copy of some program
named ``cron`` running ``/bin/sh -c "<the entry's exact command>"``, the real binary's
path in another mount namespace (not root's file), a job shell running as another user
than the entry's, and a start time when the entry's schedule did not fire. None of them
may be attributed to the real line (which ``disable-source`` would then comment out).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from rogue_watchdog.command import RecordingRunner
from rogue_watchdog.lineage import default_resolvers
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.cron import CronResolver
from rogue_watchdog.model import Origin
from rogue_watchdog.scan import resolve_origin
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context

UTC = ZoneInfo("UTC")
CMD = "/usr/bin/python3 /opt/pipe/train_x.py --cron"
ARGV = ["/usr/bin/python3", "/opt/pipe/train_x.py", "--cron"]
NOBODY = 65534  # the entry's user: "nobody" exists in every passwd
FIRED = datetime(2026, 11, 30, 3, 0, 1, tzinfo=UTC)  # one second after 0 3 * * * fired
OFF_TICK = datetime(2026, 11, 30, 6, 28, 0, tzinfo=UTC)
HZ = os.sysconf("SC_CLK_TCK")
START_TICKS = 100 + 7200 * HZ  # the job shell starts two hours after boot


def _host(
    tmp_path: Path, started: datetime, procs: list[FakeProc], schedule: str = "0 3 * * *"
) -> ResolveContext:
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    (cron_d / "retrain").write_text(f"SHELL=/bin/sh\n# the pipeline\n{schedule} nobody {CMD}\n")
    root = tmp_path / "proc"
    ctx = make_context(
        root,
        procs,
        RecordingRunner(),
        cron_files=(),
        cron_d_dir=str(cron_d),
        cron_spool_dirs=(),
    )
    # btime such that START_TICKS after boot is `started`.
    btime = started.timestamp() - START_TICKS / HZ
    (root / "stat").write_text(f"cpu 0 0 0 0\nbtime {btime:.2f}\n")
    ctx.now = datetime(2026, 11, 30, 6, 30, tzinfo=UTC)
    return ctx


def _chain(
    cron_exe: str = "/usr/sbin/cron",
    cron_exe_uid: int = 0,
    shell_uid: int = NOBODY,
    cron_before_s: float = 7000.0,
) -> list[FakeProc]:
    """init → cron → CRON → /bin/sh -c CMD → trainer, Debian's shape; cron started
    ``cron_before_s`` before the job shell."""
    at = START_TICKS
    daemon_at = START_TICKS - int(cron_before_s * HZ)
    return [
        FakeProc(1, 0, ["/sbin/init"], start=1),
        FakeProc(
            40, 1, ["/usr/sbin/cron", "-f"], exe=cron_exe, exe_uid=cron_exe_uid, start=daemon_at
        ),
        FakeProc(50, 40, ["CRON", "-f"], exe=cron_exe, exe_uid=cron_exe_uid, start=at),
        FakeProc(51, 50, ["/bin/sh", "-c", CMD], exe="/usr/bin/dash", uid=shell_uid, start=at),
        FakeProc(52, 51, ARGV, uid=shell_uid, start=at),
    ]


def _origin(ctx: ResolveContext, pid: int = 52) -> Origin:
    return resolve_origin(lineage(ctx, pid), ctx, default_resolvers())


def _line3(tmp_path: Path) -> str:
    return f"{tmp_path}/cron.d/retrain"


def test_real_cron_at_the_entry_tick_as_its_user_is_the_entry(tmp_path: Path) -> None:
    ctx = _host(tmp_path, FIRED, _chain())
    origin = _origin(ctx)
    assert (origin.kind, origin.fields["file"], origin.fields["line"]) == (
        "cron",
        _line3(tmp_path),
        3,
    )
    assert origin.fields["user"] == "nobody"
    assert origin.remediation == (
        f"sed -i '3s/^/# disabled by rogue-watchdog: /' {_line3(tmp_path)}"
    )


def test_fake_cron_binary_is_not_cron(tmp_path: Path) -> None:
    # cp python3 /work/advtest/fake/cron; it runs /bin/sh -c "<exact entry command>",
    # as root, at 06:28 (the entry fires at 03:00).
    chain = _chain(cron_exe="/work/advtest/fake/cron", shell_uid=0)
    chain[4] = FakeProc(52, 51, ARGV, uid=0, start=START_TICKS)
    ctx = _host(tmp_path, OFF_TICK, chain)
    origin = _origin(ctx)
    assert origin.kind != "cron"
    assert origin.fields.get("file") is None
    assert (
        "ancestor PID 50 is named like a cron daemon (cron) but is not one: its executable "
        "/work/advtest/fake/cron is not a known binary of that daemon"
    ) in origin.evidence
    assert "sed" not in (origin.remediation or "")


def test_cron_path_not_owned_by_root_is_not_cron(tmp_path: Path) -> None:
    # A user's own binary mounted at /usr/sbin/cron in a user+mount namespace.
    ctx = _host(tmp_path, FIRED, _chain(cron_exe_uid=1000))
    origin = _origin(ctx)
    assert origin.kind != "cron"
    assert (
        "ancestor PID 50 is named like a cron daemon (cron) but is not one: the owner of "
        "its executable /usr/sbin/cron is UID 1000, not root"
    ) in origin.evidence


def test_job_shell_of_another_user_is_not_the_entry(tmp_path: Path) -> None:
    chain = _chain(shell_uid=0)
    chain[4] = FakeProc(52, 51, ARGV, uid=0, start=START_TICKS)
    ctx = _host(tmp_path, FIRED, chain)
    origin = CronResolver().resolve(lineage(ctx, 52), ctx)
    assert origin is not None and origin.kind == "cron"
    assert (origin.fields["file"], origin.fields["line"], origin.remediation) == (
        None,
        None,
        None,
    )
    assert origin.fields["user"] == "root"
    assert origin.fields["entry_state"] == "unattributed"
    assert origin.describe() == "cron, no entry can have started it (wrong user or time)"
    assert (
        f"not {_line3(tmp_path)}:3: PID 51 runs as root, and cron runs that entry as nobody"
    ) in origin.evidence
    assert origin.evidence[-1] == (
        "no live entry can have started it (wrong user or time): it is attributed to no "
        "line, and no line is to be disabled for it"
    )


def test_job_shell_started_when_the_entry_did_not_fire_is_not_the_entry(
    tmp_path: Path,
) -> None:
    ctx = _host(tmp_path, OFF_TICK, _chain())
    origin = CronResolver().resolve(lineage(ctx, 52), ctx)
    assert origin is not None
    assert (origin.fields["file"], origin.remediation) == (None, None)
    assert (
        f"not {_line3(tmp_path)}:3: PID 51 started at 2026-11-30T06:28:00+00:00, 12480 s "
        "after that entry (0 3 * * *) last fired: it did not fire then"
    ) in origin.evidence


@pytest.mark.parametrize(
    ("started", "uid", "why"),
    [
        (OFF_TICK, NOBODY, "started at 2026-11-30T06:28:00+00:00, 12480 s after that entry"),
        (FIRED, 0, "runs as root, and cron runs that entry as nobody"),
    ],
)
def test_reparented_replay_of_the_command_is_not_the_entry(
    tmp_path: Path, started: datetime, uid: int, why: str
) -> None:
    # setsid python3 /opt/pipe/train_x.py --cron & from a login: re-parented to PID 1.
    procs = [FakeProc(1, 0, ["/sbin/init"]), FakeProc(52, 1, ARGV, uid=uid, start=START_TICKS)]
    ctx = _host(tmp_path, started, procs)
    origin = _origin(ctx)
    assert origin.kind == "orphan"
    assert any(e.startswith(f"not {_line3(tmp_path)}:3: PID 52 {why}") for e in origin.evidence)


def test_reparented_job_at_its_tick_as_its_user_is_the_entry(tmp_path: Path) -> None:
    procs = [
        FakeProc(1, 0, ["/sbin/init"]),
        FakeProc(52, 1, ARGV, uid=NOBODY, start=START_TICKS),
    ]
    ctx = _host(tmp_path, FIRED, procs)
    origin = _origin(ctx)
    assert (origin.kind, origin.fields["file"], origin.fields["line"]) == (
        "cron",
        _line3(tmp_path),
        3,
    )


@pytest.mark.parametrize("case", ["fake-daemon", "wrong-user", "wrong-time"])
def test_disable_source_never_targets_the_real_line_for_a_spoof(tmp_path: Path, case: str) -> None:
    from rogue_watchdog.actions.effects import Effects
    from rogue_watchdog.actions.planners import plan_disable

    chain, started = {
        "fake-daemon": (_chain(cron_exe="/work/advtest/fake/cron"), FIRED),
        "wrong-user": (_chain(shell_uid=0), FIRED),
        "wrong-time": (_chain(), OFF_TICK),
    }[case]
    ctx = _host(tmp_path, started, chain)
    before = (tmp_path / "cron.d/retrain").read_bytes()
    plan = plan_disable(
        _origin(ctx),
        reason="rogue job",
        now=1_800_000_000.0,
        backup_dir=str(tmp_path / "bk"),
        effects=Effects(),
    )
    assert plan.refused is not None
    assert plan.target == "-"
    assert (tmp_path / "cron.d/retrain").read_bytes() == before


@pytest.mark.parametrize(
    ("cron_before_s", "line"),
    [(5, 3), (3600, None)],
)
def test_reboot_entry_runs_only_when_cron_starts(
    tmp_path: Path, cron_before_s: float, line: int | None
) -> None:
    # cron started 5 s (it ran the @reboot line) or an hour (it did not) before the shell.
    chain = _chain(cron_before_s=cron_before_s)
    ctx = _host(tmp_path, OFF_TICK, chain, schedule="@reboot")
    origin = CronResolver().resolve(lineage(ctx, 52), ctx)
    assert origin is not None and origin.fields["line"] == line
    if line is None:
        assert (
            f"not {_line3(tmp_path)}:3: PID 51 started at 2026-11-30T06:28:00+00:00, 3600 s "
            "after cron started; cron runs @reboot entries only when it starts"
        ) in origin.evidence


def test_anacron_job_long_after_anacron_started_is_its_line(tmp_path: Path) -> None:
    # anacron runs a job after its delay (minutes), by elapsed days: no clock to check.
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/crontab").write_text("")
    (tmp_path / "etc/anacrontab").write_text(f"1\t15\tretrain\t{CMD}\n")
    procs = [
        FakeProc(1, 0, ["/sbin/init"], start=1),
        FakeProc(40, 1, ["/usr/sbin/anacron", "-d", "-q", "-s"], start=100),
        FakeProc(51, 40, ["/bin/sh", "-c", CMD], exe="/usr/bin/dash", start=START_TICKS),
        FakeProc(52, 51, ARGV, start=START_TICKS),
    ]
    ctx = make_context(
        tmp_path / "proc", procs, RecordingRunner(), cron_files=(str(tmp_path / "etc/crontab"),)
    )
    origin = CronResolver().resolve(lineage(ctx, 52), ctx)
    assert origin is not None
    assert (origin.fields["file"], origin.fields["line"]) == (f"{tmp_path}/etc/anacrontab", 1)
