"""SystemdResolver over fake /proc trees and the unit files in tests/fixtures/systemd.

The proc trees are written in the formats proc(5) documents; the ``systemctl show`` texts
in the live-systemd cases were recorded from systemd 252 booted in a PID namespace on the
project's machine (tests/system/test_systemd.py exercises the real thing).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.systemd import (
    SystemdResolver,
    parse_show,
    parse_timespan_s,
    parse_timestamp,
)
from rogue_watchdog.model import Origin, SystemdOrigin
from rogue_watchdog.sources.procfs import ProcessTable

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "systemd"
REPO = Path(__file__).resolve().parent.parent.parent
SYSTEM = str(FIX / "system")
USER_DIRS = (str(FIX / "users" / "{uid}" / ".config" / "systemd" / "user"),)
NOW = datetime(2026, 1, 7, 12, 0, 0, tzinfo=UTC)  # a Wednesday


class FakeProc:
    """Writes ``/proc/PID/{stat,cmdline,status,cgroup}`` under a fixture root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, pid: int, ppid: int, argv: Sequence[str], cgroup: str, uid: int = 0) -> None:
        d = self.root / str(pid)
        d.mkdir(parents=True)
        comm = argv[0].rsplit("/", 1)[-1][:15] if argv else "kthread"
        # Fields 3..22 (proc(5)): state ppid pgrp session tty tpgid flags ... starttime.
        rest = ["S", str(ppid), str(pid), str(pid), "0", "-1", "4194560"] + ["0"] * 12
        rest.append(str(1000 + pid))
        (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(rest) + " 0 0\n")
        (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
        (d / "status").write_text(
            f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{pid}\n"
        )
        (d / "cgroup").write_text(cgroup + "\n")


def make_ctx(
    root: Path, *, use_systemctl: bool = False, run_cmd: object = None, **kw: object
) -> ResolveContext:
    table = ProcessTable(str(root))
    table.refresh()
    args: dict[str, object] = {
        "table": table,
        "now": NOW,
        "unit_dirs": [SYSTEM],
        "cron_files": [str(FIX / "cron" / "crontab")],
        "cron_d_dir": str(FIX / "cron" / "cron.d"),
        "cron_spool_dirs": [str(FIX / "cron" / "crontabs")],
        "use_systemctl": use_systemctl,
    }
    if run_cmd is not None:
        args["run_cmd"] = run_cmd
    args.update(kw)
    return ResolveContext(**args)  # type: ignore[arg-type]


def resolve(
    root: Path, pid: int, resolver: SystemdResolver | None = None, **kw: Any
) -> Origin | None:
    ctx = make_ctx(root, **kw)
    r = resolver or SystemdResolver(systemd_run_dir=str(root / "no-systemd"))
    return r.resolve(ctx.table.ancestors(pid), ctx)


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    fp = FakeProc(tmp_path / "proc")
    fp.add(1, 0, ["/lib/systemd/systemd", "--system"], "0::/init.scope")
    return fp


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    # systemd-analyze reads calendar expressions in local time.
    monkeypatch.setenv("TZ", "UTC")


def test_weekly_timer_from_files(proc: FakeProc, utc: None) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("needs systemd-analyze (Debian package systemd)")
    proc.add(
        500,
        1,
        ["/usr/bin/python3", "/opt/legacy/train_weekly.py", "--epochs", "5"],
        "0::/system.slice/nightly-retrain.service",
    )
    origin = resolve(proc.root, 500)
    assert origin is not None
    assert origin.kind == "systemd"
    assert origin.fields == {
        "unit": "nightly-retrain.service",
        "unit_file": f"{SYSTEM}/nightly-retrain.service",
        "timer": "nightly-retrain.timer",
        "timer_schedule": "OnCalendar=Sun *-*-* 02:00:00",
        "next_run": "2026-01-11T02:00:00+00:00",
        "restart": "on-failure",
    }
    assert origin.remediation == (
        "systemctl disable --now nightly-retrain.timer && systemctl stop "
        "nightly-retrain.service && systemctl mask nightly-retrain.service"
    )
    ev = origin.evidence
    assert (
        ev[0] == "cgroup /system.slice/nightly-retrain.service: system unit nightly-retrain.service"
    )
    assert (
        f"unit file {SYSTEM}/nightly-retrain.service: "
        "ExecStart=`/usr/bin/python3 /opt/legacy/train_weekly.py --epochs 5`"
    ) in ev
    assert "next elapse 2026-01-11T02:00:00+00:00 (systemd-analyze calendar)" in ev
    # on-failure does not restart after SIGTERM or a clean exit: never "when the process dies".
    assert (
        "Restart=on-failure: systemd starts it again when it exits non-zero, is killed by a "
        "signal other than SIGHUP, SIGINT, SIGTERM or SIGPIPE (SIGKILL included), or times "
        "out; not after a clean exit or SIGTERM; stop the unit, and ``systemctl mask`` keeps "
        "anything from starting it"
    ) in ev
    assert "no crontab entry mentions /opt/legacy/train_weekly.py (3 crontab files read)" in ev


def test_next_elapse_unknown_without_systemd_analyze(proc: FakeProc) -> None:
    proc.add(
        500,
        1,
        ["/usr/bin/python3", "/opt/legacy/train_weekly.py"],
        "9:name=systemd:/system.slice/nightly-retrain.service\n0::/system.slice/nightly-retrain.service",
    )
    r = SystemdResolver(
        systemd_run_dir=str(proc.root / "none"), systemd_analyze="/nonexistent/systemd-analyze"
    )
    origin = resolve(proc.root, 500, r)
    assert origin is not None
    assert origin.fields["timer"] == "nightly-retrain.timer"
    assert origin.fields["timer_schedule"] == "OnCalendar=Sun *-*-* 02:00:00"
    assert origin.fields["next_run"] is None
    assert "next elapse unknown" in origin.evidence


def test_template_instance_without_timer_restart_always(proc: FakeProc) -> None:
    proc.add(
        600,
        1,
        ["/usr/bin/python3", "/srv/train_3.py", "--shard", "3"],
        "0::/system.slice/system-train.slice/train@3.service",
    )
    origin = resolve(proc.root, 600)
    assert origin is not None
    assert origin.fields == {
        "unit": "train@3.service",
        "unit_file": f"{SYSTEM}/train@.service",
        "timer": None,
        "timer_schedule": None,
        "next_run": None,
        "restart": "always",
    }
    assert origin.remediation == (
        "systemctl disable --now train@3.service && systemctl mask train@3.service"
    )
    assert "no timer starts train@3.service" in origin.evidence
    assert any(e.startswith("Restart=always: systemd starts it again") for e in origin.evidence)


def test_timer_with_unit_setting(proc: FakeProc, utc: None) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("needs systemd-analyze (Debian package systemd)")
    proc.add(610, 1, ["/usr/bin/python3", "/srv/train_ship.py"], "0::/system.slice/shipper.service")
    origin = resolve(proc.root, 610)
    assert origin is not None
    assert origin.fields["timer"] == "ship-weights.timer"
    assert origin.fields["timer_schedule"] == "OnCalendar=*-*-* 04:30:00; OnCalendar=*-*-* 16:30:00"
    assert origin.fields["next_run"] == "2026-01-07T16:30:00+00:00"  # the earlier of the two
    assert origin.remediation == (
        "systemctl disable --now ship-weights.timer && systemctl stop shipper.service"
    )


def test_monotonic_timer_next_unknown_offline(proc: FakeProc) -> None:
    proc.add(
        620, 1, ["/usr/bin/python3", "/srv/train_eval.py"], "0::/system.slice/hourly-eval.service"
    )
    origin = resolve(proc.root, 620)
    assert origin is not None
    assert origin.fields["timer"] == "hourly-eval.timer"
    assert origin.fields["timer_schedule"] == "OnBootSec=15min; OnUnitActiveSec=1h"
    assert origin.fields["next_run"] is None
    assert "next elapse unknown" in origin.evidence


def test_user_unit_in_process_scheduler(proc: FakeProc) -> None:
    """Public-report case: a user service's Python process spawns the trainer itself."""
    base = "0::/user.slice/user-1000.slice/user@1000.service"
    proc.add(900, 1, ["/lib/systemd/systemd", "--user"], base + "/init.scope", uid=1000)
    proc.add(
        910, 900, ["/usr/bin/python3", "/home/alice/sched/sched.py"],
        base + "/app.slice/sched.service", uid=1000,
    )  # fmt: skip
    proc.add(
        920, 910, ["/usr/bin/python3", "/home/alice/sched/train_nightly.py"],
        base + "/app.slice/sched.service", uid=1000,
    )  # fmt: skip
    r = SystemdResolver(systemd_run_dir=str(proc.root / "none"), user_unit_dirs=USER_DIRS)
    origin = resolve(proc.root, 920, r)
    try:
        user = pwd.getpwuid(1000).pw_name
    except KeyError:
        user = "1000"
    assert origin is not None
    assert origin.kind == "systemd"
    assert origin.fields == {
        "unit": "sched.service",
        "unit_file": f"{FIX}/users/1000/.config/systemd/user/sched.service",
        "timer": None,
        "timer_schedule": None,
        "next_run": None,
        "restart": "always",
        "user": user,
        "uid": 1000,
    }
    # The resolver says "user unit" in a typed field (read by disable-source and the
    # allowlist), not only through the presence of the uid.
    assert isinstance(origin, SystemdOrigin) and origin.user_unit
    assert origin.remediation == (
        f"systemctl --user -M {user}@ disable --now sched.service && "
        f"systemctl --user -M {user}@ mask sched.service"
    )
    ev = origin.evidence
    assert ev[0] == (
        "cgroup /user.slice/user-1000.slice/user@1000.service/app.slice/sched.service: "
        "user unit sched.service of user@1000.service (uid 1000)"
    )
    assert any(
        e.startswith("spawned inside sched.service by PID 910 (`/usr/bin/python3 /home/alice/")
        for e in ev
    )
    assert (
        "no crontab entry mentions /home/alice/sched/train_nightly.py (3 crontab files read)" in ev
    )
    # The service's main process itself resolves to the same unit, without the spawn line.
    main = resolve(proc.root, 910, r)
    assert main is not None
    assert main.fields["unit"] == "sched.service"
    assert not any(e.startswith("spawned inside") for e in main.evidence)


def test_crontab_mention_is_reported(proc: FakeProc, tmp_path: Path) -> None:
    cron = tmp_path / "crontab"
    cron.write_text("# header\n0 2 * * 0 root /usr/bin/python3 /srv/train_ship.py\n")
    proc.add(610, 1, ["/usr/bin/python3", "/srv/train_ship.py"], "0::/system.slice/shipper.service")
    origin = resolve(proc.root, 610, cron_files=[str(cron)], cron_spool_dirs=[])
    assert origin is not None
    assert f"crontab {cron}:2 also mentions /srv/train_ship.py" in origin.evidence


def test_crontab_check_looks_for_the_script_of_any_interpreter(
    proc: FakeProc, tmp_path: Path
) -> None:
    """pypy3 is an interpreter (one shared rule): the check looks for the script, so a
    crontab line running pypy3 on another script is no mention of this job."""
    cron = tmp_path / "crontab"
    cron.write_text("0 2 * * 0 root /usr/bin/pypy3 /srv/other.py\n")
    proc.add(611, 1, ["/usr/bin/pypy3", "/srv/train_ship.py"], "0::/system.slice/shipper.service")
    origin = resolve(
        proc.root,
        611,
        cron_files=[str(cron)],
        cron_d_dir=str(tmp_path / "no-cron.d"),
        cron_spool_dirs=[],
    )
    assert origin is not None
    assert "no crontab entry mentions /srv/train_ship.py (1 crontab files read)" in origin.evidence


def test_crontab_check_skips_cron_d_names_cron_ignores(proc: FakeProc, tmp_path: Path) -> None:
    """cron(8) (Debian) ignores /etc/cron.d names with a dot: a backup that mentions the
    job never starts it, so it is not reported; a live fragment is."""
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    line = "0 2 * * 0 root /usr/bin/python3 /srv/train_ship.py\n"
    (cron_d / "ship.dpkg-old").write_text(line)
    (cron_d / "ship.bak").write_text(line)
    (cron_d / "other").write_text("0 3 * * * root /bin/true\n")
    proc.add(612, 1, ["/usr/bin/python3", "/srv/train_ship.py"], "0::/system.slice/shipper.service")
    kw: dict[str, Any] = {"cron_files": [], "cron_d_dir": str(cron_d), "cron_spool_dirs": []}
    origin = resolve(proc.root, 612, **kw)
    assert origin is not None
    assert "no crontab entry mentions /srv/train_ship.py (1 crontab files read)" in origin.evidence
    (cron_d / "ship").write_text(line)
    origin = resolve(proc.root, 612, **kw)
    assert origin is not None
    assert f"crontab {cron_d}/ship:1 also mentions /srv/train_ship.py" in origin.evidence


@pytest.mark.parametrize(
    "cgroup",
    [
        "0::/user.slice/user-1000.slice/session-4.scope",
        "0::/system.slice/cron.service",
        "0::/system.slice/crond.service",
        "0::/init.scope",
        "0::/",
        "0::",
        "0::/user.slice/user-1000.slice/user@1000.service/init.scope",
        "0::/user.slice/user-1000.slice/user@1000.service",
        "0::/system.slice/docker-" + "ab" * 32 + ".scope",
        "0::/system.slice/slurmstepd.scope/job_13/step_batch/user/task_0",
        "0::/system.slice",
        "4:memory:/process_api/72e829cb6fb588e2e777e2893f1ccaf2",
    ],
)
def test_passes(proc: FakeProc, cgroup: str) -> None:
    proc.add(700, 1, ["/usr/bin/python3", "/srv/train_x.py"], cgroup)
    assert resolve(proc.root, 700) is None


def test_no_cgroup_file_and_empty_lineage(proc: FakeProc) -> None:
    proc.add(701, 1, ["/usr/bin/python3", "/srv/train_x.py"], "0::/system.slice/x.service")
    (proc.root / "701" / "cgroup").unlink()
    assert resolve(proc.root, 701) is None
    ctx = make_ctx(proc.root)
    assert SystemdResolver().resolve([], ctx) is None


def test_transient_scope(proc: FakeProc) -> None:
    proc.add(702, 1, ["/usr/bin/python3", "/srv/train_x.py"], "0::/system.slice/run-u12.scope")
    origin = resolve(proc.root, 702)
    assert origin is not None
    assert origin.fields["unit"] == "run-u12.scope"
    assert origin.remediation == "systemctl stop run-u12.scope"


# -- live systemd, recorded systemctl output -------------------------------------------

SERVICE_SHOW = (
    "Restart=on-failure\nMainPID=24\nId=nightly.service\nTriggeredBy=nightly.timer\n"
    "FragmentPath=/var/tmp/rwtest-HPIK/nightly.service\nDropInPaths=\n"
)
TIMER_SHOW = (
    "Id=nightly.timer\nUnit=nightly.service\n"
    "TimersMonotonic={ OnActiveUSec=1s ; next_elapse=1.5s }\n"
    "TimersCalendar={ OnCalendar=Sun *-*-* 02:00:00 ; next_elapse=Sun 2026-12-06 02:00:00 UTC }\n"
    "NextElapseUSecRealtime=\nFragmentPath=/var/tmp/rwtest-HPIK/nightly.timer\n"
)


def systemctl(answers: dict[str, str]) -> RecordingRunner:
    """``systemctl show`` answering by unit (the last argument); other units exit 1."""
    return RecordingRunner(
        answer=lambda argv: (
            CommandResult(0, answers[argv[-1]], "") if argv[-1] in answers else None
        ),
        default=CommandResult(1, "", "no"),
    )


def test_live_systemctl_show(proc: FakeProc, tmp_path: Path) -> None:
    run_dir = tmp_path / "run-systemd-system"
    run_dir.mkdir()
    proc.add(24, 1, ["/usr/bin/python3", "/srv/train_fake.py"], "0::/system.slice/nightly.service")
    rec = systemctl({"nightly.service": SERVICE_SHOW, "nightly.timer": TIMER_SHOW})
    r = SystemdResolver(systemd_run_dir=str(run_dir), systemd_analyze="/nonexistent")
    origin = resolve(
        proc.root,
        24,
        r,
        use_systemctl=True,
        run_cmd=rec,
        unit_dirs=[],
        now=datetime(2026, 11, 29, 22, 1, tzinfo=UTC),
    )
    assert origin is not None
    assert origin.fields == {
        "unit": "nightly.service",
        "unit_file": "/var/tmp/rwtest-HPIK/nightly.service",
        "timer": "nightly.timer",
        # Files unreadable here: the schedule comes from systemctl's normalized form.
        "timer_schedule": "OnCalendar=Sun *-*-* 02:00:00; OnActiveUSec=1s",
        "next_run": "2026-12-06T02:00:00+00:00",
        "restart": "on-failure",
    }
    assert rec.calls[0] == (
        "systemctl", "show", "--no-pager", "-p", "Id", "-p", "FragmentPath", "-p",
        "DropInPaths", "-p", "Restart", "-p", "MainPID", "-p", "TriggeredBy", "nightly.service",
    )  # fmt: skip
    assert rec.calls[1][-1] == "nightly.timer"
    assert len(rec.calls) == 2
    assert "started by nightly.timer [TriggeredBy (systemctl show)]: " in "\n".join(origin.evidence)


def test_live_not_used_when_disabled_or_unreachable(proc: FakeProc, tmp_path: Path) -> None:
    proc.add(24, 1, ["/usr/bin/python3", "/srv/train_ship.py"], "0::/system.slice/shipper.service")
    rec = systemctl({})
    run_dir = tmp_path / "rd"
    run_dir.mkdir()
    r = SystemdResolver(systemd_run_dir=str(run_dir), systemd_analyze="/nonexistent")
    assert resolve(proc.root, 24, r, use_systemctl=False, run_cmd=rec) is not None
    r2 = SystemdResolver(systemd_run_dir=str(tmp_path / "absent"), systemd_analyze="/nonexistent")
    origin = resolve(proc.root, 24, r2, use_systemctl=True, run_cmd=rec)
    assert rec.calls == []
    assert origin is not None
    assert origin.fields["timer"] == "ship-weights.timer"  # from files


def test_live_monotonic_future_elapse(proc: FakeProc, tmp_path: Path) -> None:
    run_dir = tmp_path / "rd"
    run_dir.mkdir()
    mono = time.clock_gettime(time.CLOCK_MONOTONIC) + 3600
    timer = f"Id=t.timer\nTimersMonotonic={{ OnUnitActiveUSec=1h ; next_elapse={mono:.6f}s }}\n"
    rec = systemctl(
        {"t.service": "Id=t.service\nTriggeredBy=t.timer\nRestart=no\n", "t.timer": timer}
    )
    proc.add(30, 1, ["/usr/bin/python3", "/srv/train_t.py"], "0::/system.slice/t.service")
    r = SystemdResolver(systemd_run_dir=str(run_dir), systemd_analyze="/nonexistent")
    origin = resolve(proc.root, 30, r, use_systemctl=True, run_cmd=rec, unit_dirs=[])
    assert origin is not None
    nxt = datetime.fromisoformat(origin.fields["next_run"])
    assert abs((nxt - (NOW + timedelta(hours=1))).total_seconds()) < 5
    assert origin.fields["timer_schedule"] == "OnUnitActiveUSec=1h"


def test_helpers() -> None:
    assert parse_show("A=1\nB=\nA=2\n") == {"A": ["1", "2"], "B": [""]}
    assert parse_timespan_s("6min 54.866838s") == pytest.approx(414.866838)
    assert parse_timespan_s("1d 2h") == 93600
    assert parse_timespan_s("n/a") is None
    assert parse_timestamp("Sun 2026-12-06 02:00:00 UTC", NOW) == datetime(
        2026, 12, 6, 2, 0, tzinfo=UTC
    )
    assert parse_timestamp("n/a", NOW) is None
    assert parse_timestamp("", NOW) is None


# -- hostile files in a user's own unit dir ---------------------------------------------

_RESOLVE_IN_CHILD = """
import json, sys
from datetime import UTC, datetime
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.systemd import SystemdResolver
from rogue_watchdog.sources.procfs import ProcessTable
proc_root, user_dirs, spool = sys.argv[1:4]
table = ProcessTable(proc_root)
table.refresh()
ctx = ResolveContext(table=table, now=datetime(2026, 1, 7, 12, tzinfo=UTC), unit_dirs=[],
                     cron_files=[], cron_d_dir=spool + "/none", cron_spool_dirs=[spool],
                     use_systemctl=False)
r = SystemdResolver(systemd_run_dir=proc_root + "/none", user_unit_dirs=[user_dirs],
                    systemd_analyze="/nonexistent")
o = r.resolve(table.ancestors(int(sys.argv[4])), ctx)
print(json.dumps(None if o is None else [o.kind, o.fields, list(o.evidence)]))
"""


def test_fifo_timer_and_dev_zero_dropin_in_user_unit_dir(proc: FakeProc, tmp_path: Path) -> None:
    """Tester's case: any user can plant these in ~/.config/systemd/user; a root scan hung
    on the FIFO, and the /dev/zero drop-in ran out of memory and fell through to orphan."""
    user_dir = tmp_path / "users" / "1000"
    (user_dir / "train.service.d").mkdir(parents=True)
    (user_dir / "train.service").write_text(
        "[Service]\nExecStart=/usr/bin/python3 /home/u/train_x.py\nRestart=always\n"
    )
    (user_dir / "train.timer").write_text("[Timer]\nOnCalendar=daily\n")
    os.mkfifo(user_dir / "evil.timer")
    os.mkfifo(user_dir / "train.service.d" / "aa.conf")
    os.symlink("/dev/zero", user_dir / "train.service.d" / "zz.conf")
    spool = tmp_path / "spool"
    spool.mkdir()
    os.mkfifo(spool / "mallory")
    base = "0::/user.slice/user-1000.slice/user@1000.service"
    proc.add(900, 1, ["/lib/systemd/systemd", "--user"], base + "/init.scope", uid=1000)
    proc.add(
        920, 900, ["/usr/bin/python3", "/home/u/train_x.py"],
        base + "/app.slice/train.service", uid=1000,
    )  # fmt: skip
    argv = [str(proc.root), str(tmp_path / "users" / "{uid}"), str(spool), "920"]
    res = subprocess.run(
        [sys.executable, "-c", _RESOLVE_IN_CHILD, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,  # the old reader blocked forever on the FIFO
        check=True,
    )
    kind, fields, evidence = json.loads(res.stdout)
    assert kind == "systemd"
    assert (fields["unit"], fields["unit_file"], fields["timer"], fields["restart"]) == (
        "train.service",
        str(user_dir / "train.service"),
        "train.timer",
        "always",
    )
    assert f"skipped {user_dir}/train.service.d/aa.conf: not a regular file" in evidence
    assert f"skipped {user_dir}/train.service.d/zz.conf: not a regular file" in evidence
    assert f"skipped {user_dir}/evil.timer: not a regular file" in evidence
    assert (
        "no crontab entry mentions /home/u/train_x.py (0 crontab files read); "
        f"not read: {spool}/mallory (not a regular file)"
    ) in evidence


def test_remediation_for_a_unit_file_in_etc_moves_it_before_the_mask() -> None:
    """`systemctl mask` fails ("already exists") for a unit file in /etc/systemd/system:
    the offered command moves it aside first; elsewhere the plain mask is offered."""
    from rogue_watchdog.lineage.systemd import _remediation

    assert _remediation(
        "retrain.service", None, "always", None, "/etc/systemd/system/retrain.service"
    ) == (
        "systemctl disable --now retrain.service && mv /etc/systemd/system/retrain.service "
        "/etc/systemd/system/retrain.service.rogue-watchdog-disabled && "
        "systemctl mask retrain.service"
    )
    assert _remediation(
        "retrain.service", None, "always", None, "/lib/systemd/system/retrain.service"
    ) == ("systemctl disable --now retrain.service && systemctl mask retrain.service")
