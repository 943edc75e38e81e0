"""``find_target`` below the command line (issue 30): the job a PID or a finding names,
in a scan the caller made, without a subprocess or a host scan.

The command-line cases (spellings, huge ids, the exited cron job through
``disable-source``) stay in tests/unit/test_actions_cli_input.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rogue_watchdog.actions.target import TargetError, find_target
from rogue_watchdog.config import Config
from rogue_watchdog.model import NvmlStatus, ScanResult
from rogue_watchdog.state import JobRecord, StateDB

NOW = 1_800_000_000.0
SIG = "0123456789abcdef"
ENTRY = "0 2 * * 0 root /usr/bin/python3 /opt/legacy/train_weekly.py --run 12345"
ORIGIN = {"kind": "cron", "file": "/etc/cron.d/legacy", "line": 3, "entry": ENTRY, "user": "root"}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    store = StateDB(str(tmp_path / "state"))
    yield store
    store.close()


def _empty_scan() -> ScanResult:
    return ScanResult("h", datetime.fromtimestamp(NOW, UTC), 0.0, NvmlStatus(False))


def _gone(db: StateDB, *, job_row: bool, details: dict[str, object]) -> int:
    if job_row:
        summary = "/usr/bin/python3 /opt/legacy/train_weekly.py --run 12345"
        db.upsert_job(
            JobRecord(
                SIG, summary, "root", "rogue", ORIGIN, NOW, NOW + 60, 4242, 99, [4242], NOW, 1
            )
        )
    fid = db.insert_finding(f"rogue-job:{SIG}", "rogue-job", "high", "rogue", 4242, details, NOW)
    db.resolve_finding(fid, NOW + 120)
    return fid


def test_a_pid_in_no_job_is_refused_with_the_finding_hint(db: StateDB) -> None:
    fid = _gone(db, job_row=False, details={})
    with pytest.raises(TargetError) as exc:
        find_target(Config(), db, "pid", fid, _empty_scan())
    # PID 1 (the finding's id) runs: no training job; a PID not running says it exited
    # (issue 33: a pasted hint for a run that had ended read "not a training job").
    assert str(exc.value) == (
        f"PID {fid} is not part of a training job (see `rogue-watchdog explain {fid}`);"
        f" for finding {fid} write F{fid}"
    )
    gone = 4_194_305  # above PID_MAX_LIMIT (include/linux/threads.h): never a PID
    with pytest.raises(TargetError) as exc:
        find_target(Config(), db, "pid", gone, _empty_scan())
    assert str(exc.value) == (
        f"PID {gone} is not running (it exited): nothing to terminate; a job's finding still"
        " names what starts it (`rogue-watchdog status`)"
    )


def test_an_unknown_finding_is_refused(db: StateDB) -> None:
    with pytest.raises(TargetError, match=r"^no finding F7 in "):
        find_target(Config(), db, "finding", 7, _empty_scan())


def test_an_exited_job_names_its_source_from_the_recorded_origin(db: StateDB) -> None:
    fid = _gone(db, job_row=True, details={"pids": [4242]})
    target = find_target(Config(), db, "finding", fid, _empty_scan())
    assert not target.running
    assert (target.signature, target.finding_id, target.root_pid) == (SIG, fid, 4242)
    assert target.origin.kind == "cron" and target.origin.to_json()["entry"] == ENTRY


def test_an_exited_job_without_a_recorded_origin_is_refused(db: StateDB) -> None:
    fid = _gone(db, job_row=False, details={"pids": [4242]})
    with pytest.raises(TargetError) as exc:
        find_target(Config(), db, "finding", fid, _empty_scan())
    assert str(exc.value) == (
        f"finding F{fid} is resolved and recorded no origin for its job; nothing to act on"
    )
