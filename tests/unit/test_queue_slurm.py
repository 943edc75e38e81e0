"""Reading Slurm's queue: squeue --json (22.05 and 23.02+ shapes), formatted, scontrol.

The 22.05 documents are real output captured from the sandboxed Slurm of the system
tests (tests/fixtures/slurm); the 23.02+ shape is the same job rewritten the way newer
versions print it (numbers as {set, infinite, number}, job_state a list).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.queue.slurm import (
    SQUEUE_FORMAT,
    QueueError,
    SlurmQueue,
    entry_from_scontrol,
    parse_squeue_formatted,
    parse_squeue_json,
)

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def _summary(entries: Sequence[object]) -> list[tuple[object, ...]]:
    return [
        (e.job_id, e.user, e.account, e.partition, e.name, e.state, e.phase, e.reason)  # type: ignore[attr-defined]
        for e in entries
    ]


def test_squeue_json_22_05_running_and_pending() -> None:
    entries = parse_squeue_json((FIX / "squeue-22.05-running-and-pending.json").read_text())
    assert _summary(entries) == [
        ("1", "root", "ml-research", "rwtest", "retrain-weekly", "RUNNING", "running", None),
        ("2", "root", "other", "rwtest", "second", "PENDING", "pending", "Resources"),
    ]
    assert entries[1].submit_time == 1795989644.0
    assert entries[0].start_time == 1795989645.0
    assert entries[1].priority == 4294901758
    assert not entries[1].held


def test_squeue_json_terminal_states_are_other() -> None:
    entries = parse_squeue_json((FIX / "squeue-22.05-cancelled-and-running.json").read_text())
    assert [(e.job_id, e.phase) for e in entries] == [("1", "other"), ("2", "running")]


def test_squeue_json_newer_shape() -> None:
    doc = json.loads((FIX / "squeue-22.05-running-and-pending.json").read_text())
    job = doc["jobs"][1]
    for key in ("job_id", "submit_time", "start_time", "priority"):
        job[key] = {"set": True, "infinite": False, "number": job[key]}
    job["job_state"] = ["PENDING", "REQUEUED"]
    job["array_job_id"] = {"set": True, "infinite": False, "number": 0}
    job["array_task_id"] = {"set": False, "infinite": False, "number": 0}
    entries = parse_squeue_json(json.dumps(doc))
    assert _summary(entries)[1] == (
        "2", "root", "other", "rwtest", "second", "PENDING", "pending", "Resources",
    )  # fmt: skip
    assert (entries[1].submit_time, entries[1].priority) == (1795989644.0, 4294901758)
    assert "array" not in entries[1].extra


def test_squeue_json_rejects_non_documents() -> None:
    with pytest.raises(QueueError, match="not JSON"):
        parse_squeue_json("squeue: error: ...")
    with pytest.raises(QueueError, match="no 'jobs' list"):
        parse_squeue_json('{"meta": {}}')


def test_formatted_output_keeps_pipes_in_names() -> None:
    text = (
        "2|svc-old|(null)|rwtest|PENDING|2026-11-29T22:30:10|N/A|0|JobHeldAdmin|legacy|retrain\n"
        "1|alice|ml|gpu|RUNNING|2026-11-29T22:30:10|2026-11-29T22:30:12|4294901759|None|train\n"
        "short|line\n"
    )
    entries = parse_squeue_formatted(text)
    assert _summary(entries) == [
        ("2", "svc-old", None, "rwtest", "legacy|retrain", "PENDING", "pending", "JobHeldAdmin"),
        ("1", "alice", "ml", "gpu", "train", "RUNNING", "running", None),
    ]
    assert entries[0].held and entries[0].start_time is None
    local = datetime.fromisoformat("2026-11-29T22:30:12").astimezone().timestamp()
    assert entries[1].start_time == local


def test_scontrol_record() -> None:
    e = entry_from_scontrol((FIX / "scontrol-22.05-pending.txt").read_text())
    assert e is not None
    assert _summary([e]) == [
        ("2", "root", "other", "rwtest", "second", "PENDING", "pending", "Resources")
    ]
    assert e.extra == {"work_dir": "/tmp/slurmtry.hTFZ"}
    assert entry_from_scontrol("") is None


def canned(answers: dict[str, CommandResult]) -> RecordingRunner:
    """Answers Slurm commands by their first two words; any other: a missing program."""
    return RecordingRunner(answer=lambda argv: answers.get(" ".join(argv[:2])))


def test_falls_back_to_formatted_output_and_remembers_old_squeue() -> None:
    line = "7|bob|acc|p|PENDING|2026-11-29T22:30:10|N/A|1|Priority|job7\n"
    run = canned(
        {
            "squeue --json": CommandResult(1, "", "squeue: unrecognized option '--json'"),
            "squeue -h": CommandResult(0, line, ""),
        }
    )
    q = SlurmQueue(run)
    assert [e.job_id for e in q.entries()] == ["7"]
    assert q.via == "squeue -o" and q.json_ok is False
    q.entries()
    assert run.calls == [
        ("squeue", "--json"),
        ("squeue", "-h", "-a", "-o", SQUEUE_FORMAT),
        ("squeue", "-h", "-a", "-o", SQUEUE_FORMAT),
    ]


def test_no_controller_raises_with_both_reasons() -> None:
    err = CommandResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller")
    q = SlurmQueue(canned({"squeue --json": err, "squeue -h": err}))
    with pytest.raises(QueueError) as exc:
        q.entries()
    assert str(exc.value) == (
        "squeue --json: exit 1: `slurm_load_jobs error: Unable to contact slurm controller`; "
        "squeue -o: exit 1: `slurm_load_jobs error: Unable to contact slurm controller`"
    )


DOWN = (FIX / "squeue-22.05-controller-down.json").read_text()
CONNECT = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
REFUSED = "squeue --json reported errors: `Failed while looking for jobs: Unspecified error`"


def test_squeue_json_with_slurmctld_down_is_no_answer_never_an_empty_queue() -> None:
    """Issue 37, noticed: 22.05's squeue --json exits 0 with {"errors": [...], "jobs":
    []} when slurmctld is down (the real output, captured on the harness). Before
    (4456053): read as an empty queue, 0 entries. Now: no answer, with the errors said
    as the health-check's job lookups say them (one reading: squeue_refused)."""
    with pytest.raises(QueueError) as exc:
        parse_squeue_json(DOWN)
    assert str(exc.value) == REFUSED
    err = CommandResult(1, "", CONNECT + "\n")
    run = canned({"squeue --json": CommandResult(0, DOWN, ""), "squeue -h": err})
    q = SlurmQueue(run)
    with pytest.raises(QueueError) as exc:
        q.entries()
    assert str(exc.value) == f"{REFUSED}; squeue -o: exit 1: `{CONNECT}`"
    assert q.json_ok is None  # a squeue that speaks JSON: asked again next time
    assert run.calls == [("squeue", "--json"), ("squeue", "-h", "-a", "-o", SQUEUE_FORMAT)]


def test_show_distinguishes_gone_from_failure() -> None:
    gone = CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
    assert SlurmQueue(canned({"scontrol show": gone})).show("9") is None
    with pytest.raises(QueueError):
        SlurmQueue(canned({})).show("9")  # scontrol missing
    rec = (FIX / "scontrol-22.05-running.txt").read_text()
    got = SlurmQueue(canned({"scontrol show": CommandResult(0, rec, "")})).show("1")
    assert got is not None and (got.job_id, got.phase) == ("1", "running")


def test_slurm_auto_needs_squeue_and_a_slurm_conf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/queue.md: `auto` = squeue on PATH and Slurm configured on this host."""
    from rogue_watchdog.queue.slurm import SlurmQueue

    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    conf = tmp_path / "slurm.conf"
    monkeypatch.setenv("SLURM_CONF", str(conf))
    assert SlurmQueue.available() is False  # no squeue
    squeue = bindir / "squeue"
    squeue.write_text("#!/bin/sh\nexit 0\n")
    squeue.chmod(0o755)
    assert SlurmQueue.available() is False  # a client without a configuration
    conf.write_text("ClusterName=x\n")
    assert SlurmQueue.available() is True
