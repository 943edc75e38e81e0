"""Action CLI input a tester broke: huge or non-ASCII ids, malformed undo records, and
``disable-source`` for a finding whose job has exited (the documented cron case).

Every case runs ``python -m rogue_watchdog`` in a subprocess against a real state database.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from rogue_watchdog.cli.actions import CliError, parse_target
from rogue_watchdog.state import JobRecord, StateDB
from tests.conftest import run_cli

HUGE = "99999999999999999999"  # > 2**63 - 1: SQLite raised OverflowError on it
NOW = 1_800_000_000.0
ENTRY = "0 2 * * 0 root /usr/bin/python3 /opt/legacy/train_weekly.py --run 12345"
TAB = f"SHELL=/bin/sh\n# weekly retrain\n{ENTRY}\n".encode()
SIG = "0123456789abcdef"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"paths: {{cron_d: '{tmp_path}'}}\n"  # the tests' crontabs stand in tmp_path
    )
    StateDB(str(tmp_path / "state")).close()
    return cfg


def cli(config: Path, *args: str) -> tuple[int, str, str]:
    res = run_cli(*args, "--config", str(config))
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, res.stdout, res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("undo", HUGE), f"rogue-watchdog: no action {HUGE} in "),
        (("undo", HUGE, "--dry-run"), f"rogue-watchdog: no action {HUGE} in "),
        (("terminate", f"F{HUGE}", "--dry-run"), f"rogue-watchdog: no finding F{HUGE} in "),
        (("disable-source", f"F{HUGE}", "--dry-run"), f"rogue-watchdog: no finding F{HUGE} in "),
        (
            ("terminate", "²", "--dry-run"),
            "rogue-watchdog: '²': expected a PID (42) or a finding id (F12, #12 or finding:12)",
        ),
        (
            ("terminate", "F²", "--dry-run"),
            "rogue-watchdog: 'F²': expected a PID (42) or a finding id (F12, #12 or finding:12)",
        ),
        (("undo", "²"), "argument ACTION-ID: '²': expected an action id (ASCII digits)"),
        (("actions", "--limit", HUGE), f"argument --limit: '{HUGE}': expected a number from 1"),
        (("actions", "--limit", "0"), "argument --limit: '0': expected a number from 1 to 10000"),
        (("actions", "--limit", "²"), "argument --limit: '²': expected a number from 1 to 10000"),
    ],
)
def test_bad_ids_and_limits_are_usage_errors(
    config: Path, args: tuple[str, ...], message: str
) -> None:
    rc, out, err = cli(config, *args)
    assert rc == 2, (out, err)
    assert message in err


def test_limit_in_range_lists(config: Path) -> None:
    db = StateDB(str(config.parent / "state"))
    for i in range(3):
        db.record_action("cli:t", "terminate", f"PID {i}", "ok", {}, NOW + i)
    db.close()
    rc, out, _ = cli(config, "actions", "--limit", "2", "--json")
    assert rc == 0
    assert [a["target"] for a in json.loads(out)] == ["PID 2", "PID 1"]


@pytest.mark.parametrize(
    ("undo", "why"),
    [
        ('[{"op": "rename", "from": "/a"}]', "op 1 (rename): missing 'to'"),
        (
            '[{"op": "systemctl", "argv": "unmask x"}]',
            "op 1 (systemctl): 'argv' must be a non-empty list of strings, not 'unmask x'",
        ),
        (
            '[{"op": "scontrol", "argv": ["release", "4"]}, {"op": "restore_file", "path": "/x"}]',
            "op 2 (restore_file): missing 'backup'",
        ),
        ('{"ops": 3}', "undo record is not a list of ops"),
        (
            '[{"op": "crontab_restore", "user": "root", "backup": 7}]',
            "op 1 (crontab_restore): 'backup' must be a non-empty string, not 7",
        ),
        ('["rename"]', "op 1: unknown undo op 'rename'"),
    ],
)
def test_malformed_undo_record_is_refused_cleanly(config: Path, undo: str, why: str) -> None:
    db = StateDB(str(config.parent / "state"))
    aid = db.record_action("cli:t", "disable-source", "x", "ok", {}, NOW, undo=[])
    db.close()
    with sqlite3.connect(config.parent / "state" / "state.db") as conn:
        conn.execute("UPDATE actions SET undo_json=? WHERE id=?", (undo, aid))
    for extra in (("--dry-run",), ()):
        rc, out, err = cli(config, "undo", str(aid), *extra)
        assert rc == 2, (out, err)
        assert err == f"rogue-watchdog: action {aid} has an unreadable undo record: {why}\n"


def _gone_cron_job(
    config: Path, tab: Path, *, job_row: bool, kind: str, details: dict[str, object]
) -> int:
    """A finding about a cron job that has exited: resolved, as the tracker leaves it."""
    db = StateDB(str(config.parent / "state"))
    origin = {"kind": "cron", "file": str(tab), "line": 3, "entry": ENTRY, "user": "root"}
    summary = "/usr/bin/python3 /opt/legacy/train_weekly.py --run 12345"
    if job_row:
        rec = JobRecord(
            SIG, summary, "root", "rogue", origin, NOW, NOW + 60, 4242, 99, [4242], NOW + 120, 1
        )
        db.upsert_job(rec)
    fid = db.insert_finding(f"{kind}:{SIG}", kind, "high", "rogue job", 4242, details, NOW)
    db.resolve_finding(fid, NOW + 120)
    db.close()
    return fid


def test_disable_source_of_an_exited_cron_job_uses_the_recorded_origin(
    config: Path, tmp_path: Path
) -> None:
    tab = tmp_path / "legacy-retrain"
    tab.write_bytes(TAB)
    # A rogue-job finding records no origin itself: it comes from the job's row.
    fid = _gone_cron_job(
        config, tab, job_row=True, kind="rogue-job",
        details={"reason": "not in allowlist", "pids": [4242], "rule": None},
    )  # fmt: skip
    rc, out, err = cli(config, "disable-source", f"F{fid}", "--dry-run")
    assert rc == 0, (out, err)
    lines = out.splitlines()
    assert lines[0].startswith(
        "would disable the source of rogue job PID 4242"
        " `/usr/bin/python3 /opt/legacy/train_weekly.py --run 12345` (dry run, not recorded)"
    )
    assert lines[0].endswith(f"): cron-file {tab}:3")
    assert lines[2] == f"  comment out line 3: `{ENTRY}`"
    assert lines[3].endswith(f"(rogue job, finding F{fid}, signature {SIG}): {ENTRY}`")
    assert tab.read_bytes() == TAB  # a dry run changes nothing
    db = StateDB(str(config.parent / "state"))
    assert db.actions() == []  # ... and writes no action row
    db.close()
    # Its log line is the daemon's JSON "action" event, on stderr, at info.
    events = [json.loads(line) for line in err.splitlines()]
    assert [(e["event"], e["level"], e["dry_run"], e["outcome"]) for e in events] == [
        ("action", "info", True, "dry-run")
    ]
    # No action id for what was not recorded (issue 33: "id": 0 named no action).
    assert "id" not in events[0] and events[0]["recorded"] is False and "timestamp" in events[0]


def test_respawned_finding_carries_its_origin_without_a_job_row(
    config: Path, tmp_path: Path
) -> None:
    tab = tmp_path / "legacy-retrain"
    tab.write_bytes(TAB)
    origin = {"kind": "cron", "file": str(tab), "line": 3, "entry": ENTRY, "user": "root"}
    fid = _gone_cron_job(
        config, tab, job_row=False, kind="respawned",
        details={"signature": SIG, "gap_s": 720.0, "origin": origin},
    )  # fmt: skip
    rc, out, err = cli(config, "disable-source", f"F{fid}", "--dry-run")
    assert rc == 0, (out, err)
    assert out.splitlines()[0].endswith(f"): cron-file {tab}:3")


def test_exited_job_without_a_recorded_origin_is_refused(config: Path, tmp_path: Path) -> None:
    fid = _gone_cron_job(
        config, tmp_path / "none", job_row=False, kind="rogue-job",
        details={"reason": "not in allowlist", "pids": [4242], "rule": None},
    )  # fmt: skip
    rc, out, err = cli(config, "disable-source", f"F{fid}", "--dry-run")
    assert rc == 2, (out, err)
    assert (
        f"rogue-watchdog: finding F{fid} is resolved and recorded no origin for its job;"
        " nothing to act on"
    ) in err


@pytest.mark.parametrize("spelling", ["F{}", "#{}", "f{}", "finding:{}", " #{} "])
def test_finding_id_spellings_name_the_same_finding(
    config: Path, tmp_path: Path, spelling: str
) -> None:
    tab = tmp_path / "legacy-retrain"
    tab.write_bytes(TAB)
    fid = _gone_cron_job(
        config, tab, job_row=True, kind="rogue-job",
        details={"reason": "not in allowlist", "pids": [4242], "rule": None},
    )  # fmt: skip
    rc, out, err = cli(config, "disable-source", spelling.format(fid), "--dry-run")
    assert rc == 0, (out, err)
    lines = out.splitlines()
    assert lines[0].endswith(f"): cron-file {tab}:3")
    assert lines[3].endswith(f"(rogue job, finding F{fid}, signature {SIG}): {ENTRY}`")


def test_parse_target_spellings() -> None:
    assert parse_target("F12") == ("finding", 12)
    assert parse_target("#12") == ("finding", 12)
    assert parse_target("finding:12") == ("finding", 12)
    assert parse_target("12") == ("pid", 12)  # a bare number is always a PID
    with pytest.raises(CliError):
        parse_target("#")
    with pytest.raises(CliError):
        parse_target("##12")


def test_bare_number_that_is_a_finding_id_hints_the_spelling(config: Path) -> None:
    db = StateDB(str(config.parent / "state"))
    fid = db.insert_finding("rogue-job:x", "rogue-job", "high", "rogue job", 4242, {}, NOW)
    db.close()
    # PID 1 (init) is never a training job.
    assert fid == 1
    rc, _, err = cli(config, "terminate", "1", "--dry-run")
    assert rc == 2
    assert err == (
        f"rogue-watchdog: PID 1 is not part of a training job (see `rogue-watchdog explain "
        f"--config {config} 1`); "
        "for finding 1 write F1\n"
    )
