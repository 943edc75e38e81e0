"""A cron origin belongs to the process identity that cron started.

The incident: two crontab files run the same script under different locks
(``flock -n /run/X.lock /usr/bin/python3 /p/train.py``, X = a or b); the pipeline's rule
pins file a. After ``disable-source`` comments out b's line, the still-running ghost
from b must stay "started by .../b:4, entry since disabled", never move to a's line.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

import rogue_watchdog.scan as scan_mod
from rogue_watchdog.config import parse_config
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.lineage.cron import CronResolver
from rogue_watchdog.model import Job, Proc
from rogue_watchdog.policy.guard import ScanProtection, advise, with_advice
from rogue_watchdog.scan import Scanner
from rogue_watchdog.sources.procfs import ProcessTable
from tests.fixtures.proc.fakeproc import FakeProc, root_owned, write_tree

TRAIN = ("/usr/bin/python3", "/p/train.py")
CMD_A = "flock -n /run/a.lock /usr/bin/python3 /p/train.py"
CMD_B = "flock -n /run/b.lock /usr/bin/python3 /p/train.py"
MARKER = "# disabled by rogue-watchdog at 2026-11-29T12:00:00Z (rogue job, finding 6): "


def _proc(pid: int, ppid: int, argv: tuple[str, ...], exe: str | None = None) -> Proc:
    exe = exe or argv[0]
    return Proc(pid, ppid, 1000, "S", exe.rsplit("/", 1)[-1][:15], pid, pid, 0, "root", exe, argv)


def _chain(cmd: str, base: int) -> list[Proc]:
    """python3 → flock → /bin/sh -c CMD → CRON → cron → init."""
    return [
        _proc(base + 3, base + 2, TRAIN),
        _proc(base + 2, base + 1, ("flock", "-n", cmd.split()[2], *TRAIN), "/usr/bin/flock"),
        _proc(base + 1, base, ("/bin/sh", "-c", cmd), "/usr/bin/dash"),
        _proc(base, 100, ("CRON",), "/usr/sbin/cron"),
        _proc(100, 1, ("/usr/sbin/cron", "-f")),
        _proc(1, 0, ("/sbin/init",)),
    ]


def _host(tmp_path: Path, b_disabled: bool) -> ResolveContext:
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir(exist_ok=True)
    (cron_d / "a").write_text(f"SHELL=/bin/sh\n\n* * * * * root {CMD_A}\n")
    b_line = f"* * * * * root {CMD_B}"
    if b_disabled:
        b_line = MARKER + b_line
    (cron_d / "b").write_text(f"# retired pipeline\nMAILTO=''\n\n{b_line}\n")
    return ResolveContext(
        exe_owner=root_owned,
        table=ProcessTable(str(tmp_path / "noproc")),
        now=datetime(2026, 11, 29, 12, 0, 30, tzinfo=UTC),
        cron_files=(str(tmp_path / "crontab"),),
        cron_d_dir=str(cron_d),
        cron_spool_dirs=(),
    )


def test_ghost_stays_with_its_disabled_line(tmp_path: Path) -> None:
    live = CronResolver().resolve(_chain(CMD_B, 500), _host(tmp_path, b_disabled=False))
    assert live is not None
    assert (live.fields["file"], live.fields["line"]) == (f"{tmp_path}/cron.d/b", 4)

    ghost = CronResolver().resolve(_chain(CMD_B, 500), _host(tmp_path, b_disabled=True))
    assert ghost is not None and ghost.kind == "cron"
    assert (ghost.fields["file"], ghost.fields["line"]) == (f"{tmp_path}/cron.d/b", 4)
    assert ghost.fields["entry_state"] == "disabled"
    assert ghost.fields["entry"] == f"* * * * * root {CMD_B}"
    assert ghost.fields["next_run"] is None
    assert ghost.remediation is None
    job = Job(512, [512], "root", (), 0, None, [], [], origin=ghost, verdict="rogue")
    assert advise(job, ScanProtection()).explain_line(512) == (
        "none needed for the source (its crontab entry was disabled); the running job must "
        "still be stopped: rogue-watchdog terminate 512"
    )
    assert ghost.describe() == f"cron {tmp_path}/cron.d/b:4 (* * * * *), entry since disabled"
    assert any(
        e.startswith(f"started by {tmp_path}/cron.d/b:4, entry since disabled")
        for e in ghost.evidence
    )
    # The pipeline's line shares the script but is named only to say it did not start it.
    assert f"not {tmp_path}/cron.d/a:3: its command runs the same program, but cron ran " in (
        "\n".join(ghost.evidence)
    )

    pipeline = CronResolver().resolve(_chain(CMD_A, 600), _host(tmp_path, b_disabled=True))
    assert pipeline is not None
    assert (pipeline.fields["file"], pipeline.fields["line"]) == (f"{tmp_path}/cron.d/a", 3)
    assert "entry_state" not in pipeline.fields


def test_a_removed_line_is_never_cron_none_none(tmp_path: Path) -> None:
    ctx = _host(tmp_path, b_disabled=False)
    (tmp_path / "cron.d" / "b").write_text("# nothing here any more\n")
    gone = CronResolver().resolve(_chain(CMD_B, 500), ctx)
    assert gone is not None
    assert gone.fields["file"] is None and gone.fields["entry_state"] == "removed"
    assert gone.describe() == "cron, entry gone (no crontab line runs this command now)"
    assert "None" not in gone.describe()


def test_cron_tick_decides_which_of_two_identical_lines_fired(tmp_path: Path) -> None:
    # Same command in two files, on alternate minutes: the job shell's start time says
    # which one fired. btime 0 + start ticks: the shell started at 12:03:01 UTC (odd).
    proc_root = tmp_path / "proc"
    proc_root.mkdir()
    (proc_root / "stat").write_text("cpu 0 0 0 0\nbtime 0\n")
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    (cron_d / "even").write_text(f"*/2 * * * * root {CMD_A}\n")
    (cron_d / "odd").write_text(f"1-59/2 * * * * root {CMD_A}\n")
    ctx = ResolveContext(
        exe_owner=root_owned,
        table=ProcessTable(str(proc_root)),
        now=datetime(2026, 11, 29, 12, 3, 30, tzinfo=UTC),
        cron_files=(),
        cron_d_dir=str(cron_d),
        cron_spool_dirs=(),
    )
    hz = os.sysconf("SC_CLK_TCK")
    started = datetime(2026, 11, 29, 12, 3, 1, tzinfo=UTC).timestamp()
    chain = _chain(CMD_A, 500)
    shell = chain[2]
    chain[2] = Proc(shell.pid, shell.ppid, int(started * hz), "S", "dash", shell.pid, shell.pid,
                    0, "root", shell.exe, shell.cmdline)  # fmt: skip
    origin = CronResolver().resolve(chain, ctx)
    assert origin is not None
    assert origin.fields["file"] == f"{cron_d}/odd"
    assert not any(e.startswith("ambiguous") for e in origin.evidence)
    assert any(e.startswith(f"not {cron_d}/even:1: PID 501 started at") for e in origin.evidence)


CONFIG = """
nvml: {{enabled: false}}
paths: {{proc_root: {proc}, crontab: {root}/crontab, cron_d: {root}/cron.d, cron_spool: []}}
sanctioned:
  - name: pipeline
    cmdline: "/usr/bin/python3 /p/train.py"
    origin: {{cron_file: {root}/cron.d/a, cron_line: 1}}
    max_instances: 1
"""


def test_scanner_keeps_a_running_ghost_on_its_first_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemonised ghost (re-parented, no cron ancestor) is matched by command line: once
    its own line is disabled, a later match to the pipeline's line must not take it."""
    proc_root = tmp_path / "proc"
    write_tree(
        proc_root,
        [
            FakeProc(1, 0, ["/sbin/init"]),
            FakeProc(700, 1, list(TRAIN), cgroup=["0::/system.slice/cron.service"]),
        ],
    )
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    b_line = f"* * * * * root setsid {' '.join(TRAIN)} &"
    (cron_d / "b").write_text(f"# retired\n\n\n{b_line}\n")
    config = parse_config(CONFIG.format(proc=proc_root, root=tmp_path), f"{tmp_path}/t.yaml")
    scanner = Scanner(config)
    first = scanner.scan()
    ghost = next(j for j in first.jobs if j.root_pid == 700)
    assert (ghost.origin.fields["file"], ghost.origin.fields["line"]) == (f"{cron_d}/b", 4)
    assert ghost.verdict == "rogue"
    # The product's reversible action first, the by-hand command second.
    msg = next(f.message for f in first.findings if f.root_pid == 700)
    assert msg.endswith(
        f"; to stop the source: rogue-watchdog disable-source --config {tmp_path}/t.yaml 700 "
        f"(backs up the cron.d file {cron_d}/b; "
        "the undo command it prints, with the action id, restores it), or by hand: "
        f"sed -i '4s/^/# disabled by rogue-watchdog: /' {cron_d}/b"
    )

    # disable-source comments b out; the pipeline's line (a:1) runs the same script.
    (cron_d / "b").write_text(f"# retired\n\n\n{MARKER}{b_line}\n")
    (cron_d / "a").write_text(f"* * * * * root setsid {' '.join(TRAIN)} &\n")
    monkeypatch.setattr(scan_mod, "ORIGIN_TTL_S", -1.0)  # force re-resolution now
    later = scanner.scan()
    ghost = next(j for j in later.jobs if j.root_pid == 700)
    assert (ghost.origin.fields["file"], ghost.origin.fields["line"]) == (f"{cron_d}/b", 4)
    assert ghost.origin.fields["entry_state"] == "disabled"
    assert ghost.origin.remediation is None
    assert ghost.verdict == "rogue"
    assert ghost.origin.evidence[0] == (
        f"started by {cron_d}/b:4, entry since disabled: cron will not start it again from "
        "there, but this running copy must still be stopped"
    )
    assert ghost.origin.evidence[-1].startswith(
        f"kept for this process's lifetime: a later look matched cron {cron_d}/a:1"
    )
    msg = next(f.message for f in later.findings if f.root_pid == 700)
    assert f"from cron {cron_d}/b:4 (* * * * *), entry since disabled" in msg
    assert "to stop the source" not in msg
    # Fresh user E (issue 33): `status` gave this finding no next step (before: the
    # message ended `entry since disabled`), though `scan`'s `stop:` line had one.
    assert msg.endswith(
        "; its crontab entry was disabled: only the run is left; to stop it: "
        f"rogue-watchdog terminate --config {tmp_path}/t.yaml 700"
    )
    stop = ghost.advice.stop_line(700)
    assert stop is not None and stop.startswith(
        f"rogue-watchdog terminate --config {tmp_path}/t.yaml 700  # its crontab entry was"
    )

    # `undo` restores b byte for byte: the run's line is live again, and says so now
    # (before: `entry since disabled` kept, no advice on the source).
    (cron_d / "b").write_text(f"# retired\n\n\n{b_line}\n")
    again = scanner.scan()
    ghost = next(j for j in again.jobs if j.root_pid == 700)
    assert (ghost.origin.fields["file"], ghost.origin.fields["line"]) == (f"{cron_d}/b", 4)
    assert "entry_state" not in ghost.origin.fields
    assert ghost.origin.describe() == f"cron {cron_d}/b:4 (* * * * *)"
    assert ghost.origin.evidence[0] == (
        f"started by {cron_d}/b:4; the line was disabled while this process ran and is "
        "live again now: cron starts it on its schedule"
    )
    msg = next(f.message for f in again.findings if f.root_pid == 700)
    assert "entry since" not in msg
    assert msg.endswith(
        f"; to stop the source: rogue-watchdog disable-source --config {tmp_path}/t.yaml 700 "
        f"(backs up the cron.d file {cron_d}/b; "
        "the undo command it prints, with the action id, restores it), or by hand: "
        f"sed -i '4s/^/# disabled by rogue-watchdog: /' {cron_d}/b"
    )


def test_bash_exec_of_python_c_is_matched_by_containment(tmp_path: Path) -> None:
    """SHELL=/bin/bash execs a simple command: below CRON runs `python3 -c CODE` itself,
    whose `-c` argument is not the entry's command."""
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    (cron_d / "py").write_text("SHELL=/bin/bash\n* * * * * root python3 -c 'import train'\n")
    ctx = ResolveContext(
        exe_owner=root_owned,
        table=ProcessTable(str(tmp_path / "noproc")),
        now=datetime(2026, 11, 29, 12, 0, 30, tzinfo=UTC),
        cron_files=(),
        cron_d_dir=str(cron_d),
        cron_spool_dirs=(),
    )
    chain = [
        _proc(501, 500, ("python3", "-c", "import train"), "/usr/bin/python3.11"),
        _proc(500, 100, ("CRON",), "/usr/sbin/cron"),
        _proc(100, 1, ("/usr/sbin/cron", "-f")),
        _proc(1, 0, ("/sbin/init",)),
    ]
    origin = CronResolver().resolve(chain, ctx)
    assert origin is not None
    assert (origin.fields["file"], origin.fields["line"]) == (f"{cron_d}/py", 2)


def test_a_config_reload_keeps_the_first_origin(tmp_path: Path) -> None:
    """The daemon builds a new Scanner on SIGHUP; it inherits the origins found so far."""
    proc_root = tmp_path / "proc"
    write_tree(proc_root, [FakeProc(1, 0, ["/sbin/init"]), FakeProc(700, 1, list(TRAIN))])
    cron_d = tmp_path / "cron.d"
    cron_d.mkdir()
    b_line = f"* * * * * root setsid {' '.join(TRAIN)} &"
    (cron_d / "b").write_text(f"# retired\n\n\n{b_line}\n")
    config = parse_config(CONFIG.format(proc=proc_root, root=tmp_path), "t.yaml")
    old = Scanner(config)
    old.scan()
    (cron_d / "b").write_text(f"# retired\n\n\n{MARKER}{b_line}\n")
    (cron_d / "a").write_text(f"{b_line}\n")
    new = Scanner(config)
    new.keep_origins_of(old)
    ghost = next(j for j in new.scan().jobs if j.root_pid == 700)
    assert (ghost.origin.fields["file"], ghost.origin.fields["line"]) == (f"{cron_d}/b", 4)
    assert ghost.origin.fields["entry_state"] == "disabled"
    assert ghost.verdict == "rogue"


def test_an_ended_slurm_job_hands_its_worker_to_the_orphan_origin(tmp_path: Path) -> None:
    """Pinning keeps *who started* a process; a Slurm job that ended is still named by the
    orphan origin (with its state), not frozen as a live job with `scancel` advice."""
    from rogue_watchdog.model import OrphanOrigin, SlurmOrigin, SystemdOrigin

    scanner = Scanner(parse_config("nvml: {enabled: false}\n", "t.yaml"))
    ctx = scanner.context(datetime(2026, 11, 29, 12, 0, tzinfo=UTC))
    ident = (4242, 100)
    slurm = SlurmOrigin(("...",), "scancel 1", job_id=1, state="RUNNING")
    scanner._pinned[ident] = slurm
    orphan = OrphanOrigin(("orphan of Slurm job 1 (CANCELLED)",), "kill -TERM 4242",
                          slurm_job_id=1, slurm_job_state="CANCELLED")  # fmt: skip
    assert scanner._keep_first(ident, orphan, ctx) is orphan
    # Another definite source is not taken: the first is kept, with a note.
    other = SystemdOrigin((), "systemctl stop x.service", unit="x.service")
    kept = scanner._keep_first(ident, other, ctx)
    assert (kept.kind, kept.fields["job_id"]) == ("slurm", 1)
    assert kept.evidence[-1].startswith("kept for this process's lifetime: a later look matched")


def test_the_lines_that_can_have_started_a_run_are_those_of_its_first_look() -> None:
    """Which crontab lines were identical (``also``) is a fact of the start: a later look
    neither drops one that was edited since nor adds one that became identical."""
    from rogue_watchdog.model import CronOrigin

    scanner = Scanner(parse_config("nvml: {enabled: false}\n", "t.yaml"))
    ctx = scanner.context(datetime(2026, 11, 29, 12, 0, tzinfo=UTC))
    ident = (4242, 100)
    first = CronOrigin(("...",), None, file="/etc/cron.d/legacy", line=4,
                       also=("/etc/cron.d/pipeline:2",))  # fmt: skip
    scanner._pinned[ident] = first
    edited = CronOrigin(("a later look",), None, file="/etc/cron.d/legacy", line=4,
                        entry_state="disabled")  # fmt: skip
    kept = scanner._keep_first(ident, edited, ctx)
    assert isinstance(kept, CronOrigin)
    assert (kept.also, kept.entry_state) == (("/etc/cron.d/pipeline:2",), "disabled")
    assert kept.evidence[-1] == (
        "ambiguous: /etc/cron.d/pipeline:2 had the same command when this process was "
        "first seen (kept for its lifetime: a later edit of that line does not change what "
        "can have started it)"
    )
    scanner._pinned[ident] = dataclasses.replace(first, also=())
    later = dataclasses.replace(edited, also=("/etc/cron.d/new:1",))
    again = scanner._keep_first(ident, later, ctx)
    assert isinstance(again, CronOrigin) and again.also == ()
    same = dataclasses.replace(first, evidence=("fresh",))
    scanner._pinned[ident] = first
    assert scanner._keep_first(ident, same, ctx) is same


def test_daemon_findings_offer_disable_source_by_finding_id(tmp_path: Path) -> None:
    """A filed finding names itself (F<id>): it still works once the job has exited."""
    from rogue_watchdog.config.alerts import AlertSettings
    from rogue_watchdog.daemon.tracker import Tracker
    from rogue_watchdog.model import CronOrigin, Job
    from rogue_watchdog.policy.findings import job_findings
    from rogue_watchdog.state import StateDB

    origin = CronOrigin(
        ("...",),
        "sed -i '4s/^/# disabled by rogue-watchdog: /' /etc/cron.d/b",
        file="/etc/cron.d/b",
        line=4,
        schedule="* * * * *",
    )
    (job,) = with_advice(
        [Job(812, [812], "root", TRAIN, 100, None, [], [], origin, "rogue")], ScanProtection()
    )
    findings = job_findings([job])
    assert "rogue-watchdog disable-source 812 (" in findings[0].message  # a scan's view
    db = StateDB(str(tmp_path / "state"))
    tracker = Tracker(db, AlertSettings(), "host")
    for now in (1000.0, 1001.0):  # opened, then seen again
        tracker.update([job], job_findings([job]), now)
    (rec,) = db.open_findings()
    assert rec.message.endswith(
        f"; to stop the source: rogue-watchdog disable-source F{rec.id} (backs up the "
        "cron.d file /etc/cron.d/b; the undo command it prints, "
        "with the action id, restores it), or by hand: "
        "sed -i '4s/^/# disabled by rogue-watchdog: /' /etc/cron.d/b"
    )
