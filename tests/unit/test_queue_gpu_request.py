"""Issue 32, case 10d: a pending job that asked for no GPU is not "waiting for a GPU"."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rogue_watchdog.queue.generic import parse_json_lines
from rogue_watchdog.queue.model import gpu_requested
from rogue_watchdog.queue.slurm import parse_squeue_formatted, parse_squeue_json
from rogue_watchdog.queue.source import entry_finding

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times in messages are local; pin the zone so expected strings are literal."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _pending(doc: dict[str, object]) -> str:
    [job] = [e for e in parse_squeue_json(json.dumps(doc)) if e.phase == "pending"]
    return entry_finding(job).message


def test_a_cpu_only_slurm_job_is_not_waiting_for_a_gpu() -> None:
    """Before (4ec0a01): ``Slurm job 2 'second' by user root waiting for a GPU since
    2026-11-29T22:00:44+00:00 (account other, partition rwtest, reason Resources); to
    remove it: scancel 2`` for job 2 of Slurm 22.05's own ``squeue --json``, which asked
    for ``cpu=2,mem=2000M,node=1,billing=2`` and no GPU. Now it is waiting to run, and
    says it asked for no GPU."""
    doc = json.loads((FIX / "squeue-22.05-running-and-pending.json").read_text())
    assert _pending(doc) == (
        "Slurm job 2 `second` by user root waiting to run since 2026-11-29T22:00:44+00:00"
        " (account other, partition rwtest, reason Resources, no GPU requested); to remove"
        " it: scancel 2"
    )
    [job] = [e for e in parse_squeue_json(json.dumps(doc)) if e.phase == "pending"]
    assert entry_finding(job).details["requests_gpu"] is False


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tres_per_node", "gres:gpu:1"),  # --gres=gpu:1
        ("tres_per_node", "gpu:a100:2"),
        ("tres_per_job", "gres:gpu:4"),  # --gpus=4
        ("tres_per_task", "gres/gpu=1"),  # --gpus-per-task=1 (23.x spelling)
        ("tres_per_node", "gres:shard:2"),  # a GPU share is a GPU
        ("tres_req_str", "cpu=1,mem=1G,node=1,billing=1,gres/gpu=1"),
    ],
)
def test_a_job_that_asked_for_a_gpu_waits_for_one(key: str, value: str) -> None:
    doc = json.loads((FIX / "squeue-22.05-running-and-pending.json").read_text())
    for job in doc["jobs"]:
        job[key] = value
    assert _pending(doc) == (
        "Slurm job 2 `second` by user root waiting for a GPU since 2026-11-29T22:00:44+00:00"
        " (account other, partition rwtest, reason Resources); to remove it: scancel 2"
    )


def test_a_queue_that_does_not_say_is_not_said_to_wait_for_a_gpu() -> None:
    line = "2|svc-old|(null)|gpu|PENDING|2026-11-29T22:30:10|N/A|4294901759|Priority|retrain\n"
    [job] = parse_squeue_formatted(line)
    assert job.requests_gpu is None
    message = entry_finding(job).message
    assert " waiting to run since " in message and "no GPU requested" not in message
    # A home-grown queue says so with "gpus".
    entries, _ = parse_json_lines('{"id": 1, "gpus": 2}\n{"id": 2, "gpus": 0}\n{"id": 3}\n')
    assert [e.requests_gpu for e in entries] == [True, False, None]


def test_gpu_requested_spellings() -> None:
    assert gpu_requested(["gres:gpu:1"]) and gpu_requested(["gpu:1"])
    assert gpu_requested(["cpu=1,gres/mps=50"])
    assert not gpu_requested(["", "cpu=2,mem=2000M,node=1,billing=2"])
    assert not gpu_requested(["gres:gpudirect_license:1", "license:gpus_ok"])
