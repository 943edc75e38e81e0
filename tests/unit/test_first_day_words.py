"""What a first-day user read that was wrong (session j): each test asserts the text or
exit code the user gets, and failed before its fix."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rogue_watchdog.cli import main
from rogue_watchdog.config import ConfigError, load_config, parse_config
from rogue_watchdog.model import Job, Restarts
from rogue_watchdog.scan import Scanner, remembered_sanctioned
from rogue_watchdog.sources.procfs import boot_id
from rogue_watchdog.state import StateDB
from tests.unit.test_trust_hostile import PY, START, cron_chain, host

RULE = "sanctioned:\n  - {name: my-sleeper, cmdline: '*train.py*', origin: {any: true}}\n"
MATCHED = datetime(2026, 12, 7, 5, 17, 23, tzinfo=UTC)
MID_RUN = (
    "sanctioned by rule 'my-sleeper' from 2026-12-07T05:17:23Z (matched while it ran; it "
    "was rogue before); kept for its life"
)


def _rescan(tmp_path: Path, before: Scanner, extra: str, now: datetime) -> tuple[Scanner, list]:
    """A config reload (the daemon's): a new Scanner keeping what the old one knew."""
    cfg = tmp_path / "config.yaml"
    base = cfg.read_text().replace(RULE, "")
    cfg.write_text(base + extra)
    scanner = Scanner(load_config(str(cfg)))
    scanner.keep_origins_of(before)
    return scanner, scanner.scan(now).jobs


def test_a_rule_added_while_it_ran_is_not_said_to_have_sanctioned_it_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = Scanner(load_config(str(host(tmp_path, cron_chain()))))
    (job,) = [j for j in first.scan().jobs if j.root_pid == 903]
    assert job.verdict == "rogue"
    # The operator adds the rule while it runs: sanctioned from then, for its life.
    added, jobs = _rescan(tmp_path, first, RULE, MATCHED)
    assert [(j.verdict, j.reason) for j in jobs if j.root_pid == 903] == [
        ("sanctioned", "matches rule 'my-sleeper'")
    ]
    # ...and stays sanctioned once the rule is gone, with when it became so.
    removed, jobs = _rescan(tmp_path, added, "", MATCHED)
    (job,) = [j for j in jobs if j.root_pid == 903]
    assert (job.verdict, job.reason) == (
        "sanctioned",
        MID_RUN + " (now: no rule matches its command line)",
    )
    (changed,) = [f for f in removed.scan(MATCHED).findings if f.kind == "sanctioned-changed"]
    assert changed.message == (
        f"sanctioned job PID 903 `{PY} /opt/pipeline/train.py` stays sanctioned by rule "
        "'my-sleeper' until it exits: it was from 2026-12-07T05:17:23Z (matched while it "
        "ran; it was rogue before) (its crontab entry was removed; if it started now: no rule "
        "matches its command line); a "
        "new run is judged by the rules and the source as they are then"
    )
    # What the daemon records is what a one-shot explain reads.
    db = StateDB(str(tmp_path / "state"))
    db.set_sanctioned_procs(
        removed.sanctioned, boot_id(str(tmp_path / "proc")), 0.0, removed.sanctioned_matched
    )
    db.close()
    cfg = tmp_path / "config.yaml"
    assert main(["explain", "903", "--config", str(cfg)]) == 0
    assert MID_RUN in capsys.readouterr().out


def test_a_process_sanctioned_at_its_first_look_still_says_when_it_started(
    tmp_path: Path,
) -> None:
    first = Scanner(load_config(str(host(tmp_path, cron_chain(), extra=RULE))))
    first.scan()
    _, jobs = _rescan(tmp_path, first, "", MATCHED)
    (job,) = [j for j in jobs if j.root_pid == 903]
    assert job.reason.startswith(
        "sanctioned by rule 'my-sleeper' when it started; kept for its life"
    )


def _undo_setup(tmp_path: Path) -> tuple[Path, StateDB]:
    """A configuration with its own state directory (no NVML), and that state."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n")
    return cfg, StateDB(str(tmp_path / "state"))


def test_already_undone_says_when_in_iso_8601_utc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, db = _undo_setup(tmp_path)
    aid = db.record_action("cli:root", "terminate", "PID 42", "ok", {}, 0.0, undo={"op": "x"})
    db.mark_undone(aid, MATCHED.timestamp())
    db.close()
    assert main(["undo", str(aid), "--config", str(cfg)]) == 1
    assert capsys.readouterr().out == (f"action {aid} was already undone at 2026-12-07T05:17:23Z\n")


def test_undo_of_a_terminate_says_why_there_is_nothing_to_undo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Stop 46's fresh user: `undo 7` of a terminate said only "has nothing to undo".
    cfg, db = _undo_setup(tmp_path)
    aid = db.record_action("cli:root", "terminate", "PID 42 (1 process(es))", "ok", {}, 0.0)
    db.close()
    assert main(["undo", str(aid), "--config", str(cfg)]) == 1
    assert capsys.readouterr().out == (
        f"action {aid} (terminate PID 42 (1 process(es))) has nothing to undo: a terminate "
        "stops processes, and a stopped process cannot be put back (start the job again "
        "yourself if it was wanted)\n"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "enforcement: {mode: obsrve}",
            "enforcement.mode: must be observe or terminate, got 'obsrve'",
        ),
        (
            "services: {sanctioned_ports: [{name: x, port: 80, proto: sctp}]}",
            "services.sanctioned_ports[0].proto: must be tcp or udp, got 'sctp'",
        ),
        (
            "alerts: {sinks: [{type: log, name: o, min_severity: loud}]}",
            "alerts.sinks[0].min_severity: must be one of info, warning, high, critical, "
            "got 'loud'",
        ),
        ("queue: {slurm: maybe}", "queue.slurm: expected true, false or auto, got 'maybe'"),
        (
            "slurm: {drain_on: [rogu]}",
            "slurm.drain_on[0]: expected one of ('rogue', 'excess'), got 'rogu'",
        ),
        # What was written is host text: quoted, its control characters escaped.
        (
            'enforcement: {mode: "obs\\nerve\\u202e"}',
            "enforcement.mode: must be observe or terminate, got 'obs\\nerve\\u202e'",
        ),
    ],
)
def test_an_enum_error_echoes_the_value_written(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(text + "\n", "c.yaml")
    assert str(exc.value) == "c.yaml:1: " + message


REPO = Path(__file__).resolve().parents[2]


def test_gpu_view_without_nvml_is_documented_as_it_behaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # By design (docs/status.md, docs/scan-json-schema.md): while NVML is unavailable no
    # job can be placed, so `--gpu N` lists every job with a note; exit 2 is only for a
    # GPU NVML, answering, does not list. The README said exit 2 for both.
    cfg = host(tmp_path, cron_chain())
    assert main(["scan", "--gpu", "0", "--config", str(cfg)]) == 1  # the rogue job's finding
    out = capsys.readouterr().out.splitlines()
    assert out[3] == (
        "GPU 0: NVML is unavailable, so no job can be placed on a GPU: every training job is listed"
    )
    rows = {
        line.split("|")[1].strip(): line.split("|")[3].strip()
        for line in (REPO / "README.md").read_text().splitlines()
        if line.startswith("| `rogue-watchdog scan [")
        or line.startswith("| `rogue-watchdog status [")
    }
    assert rows["`rogue-watchdog scan [--config F] [--gpu N] [--json]`"].endswith(
        "2 usage/config error or a `--gpu N` that NVML, answering, does not list (while NVML is "
        "unavailable, `--gpu N` lists every job with a note and the exit code follows the "
        "findings)"
    )
    assert (
        "2 usage or a `--gpu N` that NVML, answering, does not list (while NVML is "
        in (rows["`rogue-watchdog status [--gpu N] [--severity LEVEL] [--limit N] [--json]`"])
    )


def _at_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queued: bool) -> Job:
    """Job 1 of atd's spool, running (``=`` file), with or without a queued copy (2)."""
    from rogue_watchdog.lineage import at
    from rogue_watchdog.policy.guard import ScanProtection, with_advice
    from tests.unit.test_cron_resolver import AT_JOB, _resolve_at_job

    spool = tmp_path / "atjobs"
    spool.mkdir()
    monkeypatch.setattr(at, "AT_SPOOLS", (str(spool),))
    (spool / "=0000101c8be6a").write_text(AT_JOB)
    if queued:
        (spool / "a0000201c8c000").write_text(AT_JOB)
    origin, _ = _resolve_at_job(tmp_path, spool)
    assert origin is not None
    argv = ("/usr/bin/python3", "/srv/ml/train_at.py")
    (job,) = with_advice(
        [Job(53, [53], "root", argv, 1000, None, [], [], origin, "rogue")], ScanProtection()
    )
    return job


def test_a_running_at_job_is_stopped_by_terminate_not_atrm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `atrm 1` of the RUNNING job 1 only prints "Warning: deleting running job": it was
    # the finding's only advice. Nothing queued: the run is what to stop.
    job = _at_job(tmp_path, monkeypatch, queued=False)
    assert job.advice.finding_text("F1") == (
        "; to stop it: rogue-watchdog terminate F1, or by hand: kill -TERM 53"
    )
    assert job.advice.stop_line(53) == "rogue-watchdog terminate 53, or by hand: kill -TERM 53"
    assert job.advice.explain_line(53) == (
        "none needed for the source (nothing would start it again); to stop it: "
        "rogue-watchdog terminate 53, or by hand: kill -TERM 53"
    )


def test_a_running_at_job_with_a_queued_copy_names_atrm_for_the_copy_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _at_job(tmp_path, monkeypatch, queued=True)
    assert job.advice.finding_text("F1") == (
        "; restarts it: on schedule, at job(s) 2 queued with the same commands (it "
        "re-queues itself); to stop the source: rogue-watchdog disable-source F1 (backs up "
        "the queued jobs' scripts; the undo command it prints, with the action id, restores "
        "it), or by hand: atrm 2; to stop this run: rogue-watchdog terminate F1"
    )
    assert job.advice.stop_line(53) == (
        "rogue-watchdog disable-source 53 && rogue-watchdog terminate 53  # --dry-run first to "
        "preview"
    )


UNKNOWN = Restarts(
    "unknown",
    "atd (neither this run's job file nor atd's queue was read: a queued copy may run it again)",
)


@pytest.mark.parametrize(
    ("again", "key", "first", "last"),
    [
        (
            UNKNOWN,
            "may_return",
            "its source may start it again: could not tell whether it does (atd (neither "
            "this run's job file nor atd's queue was read: a queued copy may run it again))",
            "may come back: could not tell whether its source starts it again (atd (neither "
            "this run's job file nor atd's queue was read: a queued copy may run it again))",
        ),
        (
            Restarts("on schedule", "its cron line", "disable-source first"),
            "will_return",
            # Once with its prefix (BEFORE: "its source starts it again: restarts it: ...").
            "its source starts it again: on schedule, its cron line",
            "will come back: its source restarts it; disable-source first",
        ),
    ],
)
def test_terminate_claims_a_return_only_when_it_knows_one(
    tmp_path: Path, again: Restarts, key: str, first: str, last: str
) -> None:
    # BEFORE: a running at job whose return could not be told ended `outcome:
    # will-return`, `will come back: its source restarts it` (exit 1) under `restarts
    # it: unknown`. A return not known is not claimed in words; its outcome is
    # `may-return` (exit 1), never `ok`, which readers take for "stays stopped"
    # (simulator I15, seed 68601: test_sim_faults).
    import dataclasses

    from rogue_watchdog.actions.remedy import target_from_job, terminate_extras
    from rogue_watchdog.cli.actions import _coming_back, _said_before

    config = load_config(str(host(tmp_path, cron_chain())))
    (job,) = [j for j in Scanner(config).scan().jobs if j.root_pid == 903]
    job = dataclasses.replace(job, advice=dataclasses.replace(job.advice, restarts=again))
    target = target_from_job(job, None, None, str(tmp_path / "proc"))
    assert terminate_extras(target, False) == {
        key: {"restarts": again.line(), "stops": again.stops}
    }
    assert _said_before(again) == first
    # The README's exit codes say the same as --help (BEFORE: "0 done, 1 refused or
    # failed, 2 usage", without will-return's exit 1).
    (row,) = [
        line
        for line in (REPO / "README.md").read_text().splitlines()
        if line.startswith("| `rogue-watchdog terminate ")
    ]
    assert row.endswith(
        "| 0 done, 1 refused or failed, or stopped but its source starts it again "
        "(`outcome: will-return`) or may (`outcome: may-return`: could not tell), 2 usage |"
    )
    assert _coming_back(again, "will-return" if again.known else "may-return") == last


@pytest.mark.parametrize(
    ("body", "when"),
    [
        # The user's loop: it sleeps 5 s after each run (BEFORE: "at once").
        ("while true; do python3 train.py 20; sleep 5; done", "after about 5 s"),
        ("while true; do python3 train.py && sleep 2.5; done", "after about 2.5 s"),
        ("while sleep 60; do python3 train.py; done", "after about 60 s"),
        ("while true; do python3 train.py; done", "when its loop comes round"),
        ('while true; do python3 train.py; sleep "$T"; done', "when its loop comes round"),
        ("while true; do python3 train.py; done; sleep 7", "when its loop comes round"),
    ],
)
def test_a_shell_loop_says_when_it_runs_the_job_again(body: str, when: str) -> None:
    from rogue_watchdog.model import Advice, Proc
    from rogue_watchdog.policy.guard import shell_loop

    root = Proc(900, 812, 1, "S", "python3", cmdline=("python3", "train.py"))
    shell = Proc(812, 1, 1, "S", "bash", cmdline=("bash", "-c", body), exe="/usr/bin/bash")
    job = Job(900, [900], "u", root.cmdline, 1, None, [], [root, shell])
    loop = shell_loop(job, stop_pids=(900, 812))  # its shell runs only the loop
    assert loop is not None
    assert loop.line() == f"restarts it: {when}, shell loop `{body.split(';')[0]}` in PID 812"
    # The Remediation line of explain: the loop is its source, and terminate stops it.
    # BEFORE: "none needed for the source (restarts it: at once, ...; terminate stops the
    # loop with it); to stop it: ...".
    advice = Advice(stops_job=True, by_hand="kill -TERM 812 900", restarts=loop)
    assert advice.explain_line(900) == (
        f"{loop.line()}; terminate stops the loop with it; to stop both: rogue-watchdog "
        "terminate 900, or by hand: kill -TERM 812 900"
    )


def test_a_rule_added_across_a_daemon_restart_still_says_it_matched_mid_run(
    tmp_path: Path,
) -> None:
    # The daemon that judged it rogue stopped; the one started with the new rule reads
    # the present jobs' verdicts, so the match is "from" then, recorded for explain.
    import time

    from rogue_watchdog.daemon.loop import Daemon

    cfg = host(tmp_path, cron_chain())
    d = Daemon(load_config(str(cfg)), str(cfg))
    d.tick(time.time())
    d.db.close()
    cfg.write_text(cfg.read_text() + RULE)
    d = Daemon(load_config(str(cfg)), str(cfg))
    d.tick(MATCHED.timestamp())
    d.db.close()
    procs, matched = remembered_sanctioned(str(tmp_path / "state"), str(tmp_path / "proc"))
    assert procs == {(903, START): "my-sleeper"}
    assert matched == {(903, START): MATCHED.timestamp()}
