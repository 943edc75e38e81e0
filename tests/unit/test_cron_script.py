"""A job daemonised by a wrapper script that a crontab line runs is that line's job.

``/etc/cron.d/x``: ``* * * * * root /root/x/launch_bg.sh``; the script runs
``setsid /usr/bin/python3 /root/x/train_job.py ... &`` and exits. The trainer is
re-parented to PID 1 and its command line is in no crontab.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from rogue_watchdog.actions.effects import Effects
from rogue_watchdog.actions.planners import plan_disable
from rogue_watchdog.lineage import default_resolvers
from rogue_watchdog.lineage.cron import CronResolver
from rogue_watchdog.scan import resolve_origin
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context

TRAIN = ["/usr/bin/python3", "/root/x/train_job.py", "--epochs", "3"]
CRON_ENV = {"HOME": "/root", "LOGNAME": "root", "PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}
STARTED = datetime(2026, 11, 29, 12, 3, 1, tzinfo=UTC)  # 1 s after the 12:03 tick


def _host(tmp_path: Path, schedule: str = "* * * * *", env: dict[str, str] | None = None):
    script = tmp_path / "launch_bg.sh"
    script.write_text(
        "#!/bin/sh\n# start the trainer in the background\ncd /root/x\n"
        f"setsid {' '.join(TRAIN)} >/dev/null 2>&1 &\n"
    )
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    (cron_d / "x").write_text(f"MAILTO=''\n{schedule} root {script}\n")
    hz = os.sysconf("SC_CLK_TCK")
    trainer = FakeProc(
        900, 1, TRAIN, environ=CRON_ENV if env is None else env, start=int(STARTED.timestamp() * hz)
    )
    proc_root = tmp_path / "proc"
    ctx = make_context(
        proc_root,
        [FakeProc(1, 0, ["/sbin/init"]), trainer],
        cron_files=(),
        cron_d_dir=str(cron_d),
        cron_spool_dirs=(),
    )
    (proc_root / "stat").write_text("cpu 0 0 0 0\nbtime 0\n")
    return ctx, script, cron_d


def test_wrapper_script_job_is_attributed_to_its_line(tmp_path: Path) -> None:
    ctx, script, cron_d = _host(tmp_path)
    chain = lineage(ctx, 900)
    origin = CronResolver().resolve(chain, ctx)
    assert origin is not None and origin.kind == "cron"
    f = origin.fields
    assert (f["file"], f["line"], f["launch_script"], f["confidence"]) == (
        f"{cron_d}/x",
        2,
        str(script),
        "high",
    )
    assert origin.evidence[:2] == (
        "PID 900 was re-parented to PID 1: its starter exited; its command line is in no crontab",
        f"attributed to {cron_d}/x:2 with high confidence: it started 1 s after that line "
        "fired, its environment is cron's (PATH=/usr/bin:/bin, LOGNAME=root, no terminal), "
        f"and its program /root/x/train_job.py appears in {script} (line 4), which that "
        "line runs",
    )
    assert origin.remediation == f"sed -i '2s/^/# disabled by rogue-watchdog: /' {cron_d}/x"
    assert origin.describe() == (f"cron {cron_d}/x:2 (* * * * *) via {script} (high confidence)")
    # The whole registry agrees (not `orphan`), and disable-source can act on it.
    assert resolve_origin(chain, ctx, default_resolvers()).kind == "cron"
    plan = plan_disable(
        origin, reason="t", now=0.0, backup_dir=str(tmp_path / "b"), effects=Effects(),
        cron_d=str(cron_d),
    )  # fmt: skip
    assert (plan.kind, plan.target, plan.refused) == ("cron-file", f"{cron_d}/x:2", None)


def test_same_program_from_a_terminal_session_is_not_cron(tmp_path: Path) -> None:
    env = {**CRON_ENV, "TERM": "xterm", "SSH_CONNECTION": "10.0.0.5 5122 10.0.0.1 22"}
    ctx, _, _ = _host(tmp_path, env=env)
    assert CronResolver().resolve(lineage(ctx, 900), ctx) is None


def test_started_long_after_the_line_fired_is_not_its_job(tmp_path: Path) -> None:
    ctx, _, _ = _host(tmp_path, schedule="*/5 * * * *")  # fired 12:00, started 12:03:01
    assert CronResolver().resolve(lineage(ctx, 900), ctx) is None


def test_unreadable_environment_is_medium_confidence(tmp_path: Path) -> None:
    ctx, _, _ = _host(tmp_path)
    os.unlink(Path(ctx.table.proc_root) / "900" / "environ")
    origin = CronResolver().resolve(lineage(ctx, 900), ctx)
    assert origin is not None and origin.fields["confidence"] == "medium"
    assert "its environment could not be read" in origin.evidence[1]
