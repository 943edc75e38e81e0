"""Host text in an origin's evidence, its description and a job's class evidence is quoted
where the line is built, so no command line, environment value, cgroup path or program
name reads as the product's own words in ``explain``, ``scan --json``, ``status`` or a
finding's message (hostile helper wt9, session j).

Before (main e8eba73), each origin below said the hostile text as the product's words:
``ancestor PID 100 is sshd: bob@pts/0 x⏎`verdict: sanctioned…``, ``TMUX=x⏎…``,
``ancestor PID 200 is /usr/bin/docker run x⏎…``, ``SUPERVISOR_PROCESS_NAME=x⏎…``, the
description ``supervisor program x⏎`verdict: sanctioned…`` (in every finding's message),
``cgroup /system.slice/train.service/x verdict: sanctioned; to stop it: rogue-watchdog
terminate --config /tmp/evil.yaml 1: system unit train.service``,
``job shell PID 51: /bin/sh -c 'x⏎…'``; and a ``python -m "vllm.entrypoints.x; to stop it:
rogue-watchdog terminate --config /tmp/evil.yaml 1"`` job's finding carried
``class serving (module vllm.entrypoints.x; to stop it: rogue-watchdog terminate --config
/tmp/evil.yaml 1)`` outside every code span, which the alert spool then read as a
command of the product's naming another configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from rogue_watchdog.cli import main
from rogue_watchdog.daemon.alerts.adopt import adopted
from rogue_watchdog.daemon.alerts.alert import Alert, Outgoing
from rogue_watchdog.hosttext import clip, outside_code
from rogue_watchdog.lineage import default_resolvers
from rogue_watchdog.model import Job, Origin, SupervisorOrigin, SystemdOrigin
from rogue_watchdog.policy.findings import job_findings
from rogue_watchdog.policy.workload import WorkloadFacts, classify
from rogue_watchdog.render import printable
from rogue_watchdog.scan import resolve_origin
from tests.fixtures.proc.fakeproc import FakeProc, lineage, make_context, write_tree

EVIL = "/tmp/evil.yaml"
# A newline, a backtick, an ANSI escape and the product's own phrases.
HOSTILE = f"x\n`verdict: sanctioned\x1b[31m; to stop it: rogue-watchdog terminate --config {EVIL} 1"
# The same in a cgroup path (one line of /proc/PID/cgroup: no newline), without the
# backtick: an unquoted one would hide what follows it from outside_code (checked apart).
CGROUP = f"x verdict: sanctioned; to stop it: rogue-watchdog terminate --config {EVIL} 1"
FORGED = ("verdict: sanctioned", "rogue-watchdog", EVIL, "\n", "\x1b")
INIT = FakeProc(1, 0, ["/sbin/init"])
TRAIN = ["/usr/bin/python3", "/srv/train.py"]


def _forged(text: str) -> list[str]:
    """What of the hostile text stands outside every code span of ``text``."""
    own = outside_code(text)
    return [m for m in FORGED if m in own]


def _ssh() -> list[FakeProc]:
    env = {"SSH_CONNECTION": f"{HOSTILE} 1 2 3", "TMUX": HOSTILE, "STY": HOSTILE}
    sshd = FakeProc(100, 1, [f"sshd: bob@pts/0 {HOSTILE}"], exe="/usr/sbin/sshd")
    return [INIT, sshd, FakeProc(110, 100, TRAIN, environ=env)]


def _docker() -> list[FakeProc]:
    run = FakeProc(200, 1, ["/usr/bin/docker", "run", HOSTILE], exe="/usr/bin/docker")
    return [INIT, run, FakeProc(210, 200, TRAIN)]


def _supervisor() -> list[FakeProc]:
    sup = FakeProc(300, 1, ["/usr/bin/python3", "/usr/bin/supervisord", "-c", HOSTILE])
    return [INIT, sup, FakeProc(310, 300, TRAIN, environ={"SUPERVISOR_PROCESS_NAME": HOSTILE})]


def _orphan() -> list[FakeProc]:
    return [INIT, FakeProc(410, 1, TRAIN, environ={"SUPERVISOR_PROCESS_NAME": HOSTILE})]


def _systemd() -> list[FakeProc]:
    return [INIT, FakeProc(510, 1, TRAIN, cgroup=(f"0::/system.slice/train.service/{CGROUP}",))]


def _cron() -> list[FakeProc]:
    cron = "/usr/sbin/cron"
    return [
        INIT,
        FakeProc(40, 1, [cron, "-f"], exe=cron),
        FakeProc(50, 40, ["CRON", "-f"], exe=cron),
        FakeProc(51, 50, ["/bin/sh", "-c", HOSTILE], exe="/usr/bin/dash"),
        FakeProc(52, 51, TRAIN),
    ]


@pytest.mark.parametrize(
    ("tree", "kind"),
    [
        (_ssh, "shell"),
        (_docker, "container"),
        (_supervisor, "supervisor"),
        (_orphan, "orphan"),
        (_systemd, "systemd"),
        (_cron, "cron"),
    ],
)
def test_host_text_in_evidence_is_quoted(
    tmp_path: Path, tree: Callable[[], list[FakeProc]], kind: str
) -> None:
    procs = tree()
    (tmp_path / "cron.d").mkdir()
    ctx = make_context(
        tmp_path / "proc", procs, cron_files=(), cron_d_dir=str(tmp_path / "cron.d"),
        cron_spool_dirs=(),
    )  # fmt: skip
    origin = resolve_origin(lineage(ctx, procs[-1].pid), ctx, default_resolvers())
    assert origin.kind == kind
    # The hostile text is there (not vacuous), quoted: as explain prints each line.
    assert any("verdict: sanctioned" in e for e in origin.evidence)
    for line in (origin.describe(), *origin.evidence):
        # An odd backtick (host text's, unescaped) turns the product's words that follow
        # into a "span" and the host text into the product's words.
        assert line.count("`") % 2 == 0, line
        assert _forged(line) == [], line
        assert _forged(printable(line)) == [], line
        assert "\n" not in printable(line) and "\x1b" not in printable(line)


def _out(message: str) -> Outgoing:
    doc = {"schema_version": 1, "event": "open", "host": "h", "time": None,
           "config": "/srv/ours.yaml", "finding": {"id": 1, "message": message}}  # fmt: skip
    return Outgoing(Alert.from_json(doc), "log", 1, 1.0)


def test_a_module_name_cannot_forge_a_command_in_the_finding(tmp_path: Path) -> None:
    module = f"vllm.entrypoints.x; to stop it: rogue-watchdog terminate --config {EVIL} 1"
    argv = ("/usr/bin/python3", "-m", module)
    job = Job(
        root_pid=48213, pids=[48213], user="bob", cmdline=argv, start_ticks=1,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[], origin=Origin(), verdict="rogue",
        reason="not sanctioned", gpus=[],
    )  # fmt: skip
    table = make_context(tmp_path, [INIT, FakeProc(48213, 1, list(argv))]).table
    cls, why = classify(job, WorkloadFacts(table=table, evidence={}))
    shown = f"module `{clip(module, 80)}`"
    assert (cls, why) == ("serving", [shown])
    (finding,) = job_findings([replace(job, workload=cls, workload_evidence=why)])
    assert finding.kind == "unsanctioned-gpu-use"
    assert f"class serving ({shown}), not training" in finding.message
    assert _forged(finding.message) == []
    # The alert spool reads no command of the product's in it, so claims no other config.
    sent = adopted(_out(finding.message), "/srv/ours.yaml").alert.finding.message
    assert sent == finding.message


def test_a_user_timer_schedule_is_quoted_in_the_description() -> None:
    """A user unit's timer file is read as its user wrote it (no systemd parse): before,
    ``systemd user unit t.service via t.timer (OnCalendar=daily; to stop it: …)``, in
    every finding's message and its ``restarts it:`` line."""
    schedule = f"OnCalendar=daily; to stop it: rogue-watchdog terminate --config {EVIL} 1"
    origin = SystemdOrigin(
        unit="t.service", user_unit=True, timer="t.timer", timer_schedule=schedule
    )
    assert origin.describe() == f"systemd user unit t.service via t.timer (`{schedule}`)"
    again = origin.restarts()
    assert again is not None and f"timer t.timer (`{schedule}`)" in again.how
    for line in (origin.describe(), again.how):
        assert _forged(line) == [], line
    # One word stays as it was.
    plain = SystemdOrigin(unit="t.service", timer="t.timer", timer_schedule="OnCalendar=daily")
    assert plain.describe() == "systemd unit t.service via t.timer (OnCalendar=daily)"


def test_a_supervisor_programs_name_is_quoted_in_its_restarts_line() -> None:
    """The ``restarts it:`` line (status, explain, the finding's message) named the
    program (the job's own SUPERVISOR_PROCESS_NAME) and the configuration's values as
    they were: ``supervisord program x⏎`verdict: sanctioned… (autorestart unknown: …)``."""
    unread = SupervisorOrigin(supervisor="supervisord", program=HOSTILE)
    read = SupervisorOrigin(
        supervisor="supervisord", program=HOSTILE, autorestart=HOSTILE, autorestart_at=HOSTILE
    )
    for origin in (unread, read):
        again = origin.restarts()
        assert again is not None and "verdict: sanctioned" in again.how
        assert again.how.count("`") % 2 == 0 and _forged(again.how) == [], again.how


def test_explain_prints_the_quoted_evidence_on_lines_of_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``explain`` as a person runs it, over a supervisord job whose configuration path,
    program name and command line hold the hostile text: every line it prints is one of
    its own (no newline or escape passed through), and its evidence and origin lines
    keep the hostile text in code spans."""
    procs = _supervisor()
    procs[-1].argv = [*TRAIN, HOSTILE]
    write_tree(tmp_path / "proc", procs)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"nvml: {{enabled: false}}\npaths: {{proc_root: '{tmp_path}/proc'}}\n")
    assert main(["explain", "310", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    lines = out.splitlines()
    assert lines[0].startswith("PID 310: ") and len(lines) > 8
    said = [line for line in lines if line.startswith(("Origin: ", "  evidence: "))]
    assert len(said) == 3  # the origin and its two evidence lines
    for line in said:
        assert "verdict: sanctioned" in line
        assert line.count("`") % 2 == 0 and _forged(line) == [], line
