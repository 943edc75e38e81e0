"""Issue 37, noticed and left alone then: the queue check read 22.05's ``squeue --json``
with slurmctld down (exit 0, an ``errors`` list, no jobs; the real output in
tests/fixtures/slurm) as an empty queue: every open ``queue-unsanctioned`` finding
resolved, nothing said Slurm gave no answer, and when slurmctld came back each job was
opened (paged) again. Now it is no answer: the queue is degraded, said once, and what it
had open stays open, neither resolved nor re-opened (blindness never pages)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from rogue_watchdog.command import CommandResult, RecordingRunner
from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.queue.slurm import SlurmQueue
from rogue_watchdog.queue.source import QueueSource

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
UP = (FIX / "squeue-22.05-running-and-pending.json").read_text()
DOWN = (FIX / "squeue-22.05-controller-down.json").read_text()
CONNECT = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
KINDS = ("queue-unsanctioned", "component-degraded")


REFUSED = "squeue --json reported errors: `Failed while looking for jobs: Unspecified error`"
FAILED = f"squeue --json: exit 1: `{CONNECT}`"


@pytest.mark.parametrize(
    ("json_down", "said"),
    [
        (CommandResult(0, DOWN, ""), REFUSED),  # 22.05: exit 0, an errors list, no jobs
        (CommandResult(1, "", CONNECT + "\n"), FAILED),  # a squeue that exits 1
    ],
    ids=["errors-document", "exit-1"],
)
def test_slurmctld_down_keeps_queue_findings_open_and_says_so_once(
    tmp_path: Path, json_down: CommandResult, said: str
) -> None:
    """Ticks 5 s apart: Slurm answers twice, gives no answer three times, then answers
    twice again (jobs 1 and 2, neither sanctioned, all along).

    Before (4456053), with the 22.05 document: findings ``slurm:1`` and ``slurm:2``
    opened, resolved at the first blind tick and opened again as new findings when
    Slurm answered (deliveries open, open, resolve, resolve, open, open); ``queue:slurm``
    never degraded. With a squeue that exits 1 the same resolve and re-open, degraded
    said. Now, both: each opened once and still open; one ``component-degraded`` finding
    for ``queue:slurm``, opened at the first blind tick, resolved when Slurm answered."""
    doc = {"down": False}

    def answer(argv: Sequence[str]) -> CommandResult:
        if list(argv[:2]) == ["squeue", "--json"]:
            return json_down if doc["down"] else CommandResult(0, UP, "")
        return CommandResult(1, "", CONNECT + "\n")  # formatted squeue: no controller

    cfg = parse_config(
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n", "t.yaml"
    )
    d = Daemon(
        cfg, None, sources=[QueueSource(SlurmQueue(RecordingRunner(answer=answer)), cfg.queue)]
    )
    degraded = []
    try:
        for i, down in enumerate([False, False, True, True, True, False, False]):
            doc["down"] = down
            d.tick(5_000_000.0 + 5 * i)
            degraded.append(d.degraded.get("queue:slurm"))
        rows = d.db.conn.execute(
            "SELECT id, kind, fingerprint, severity, resolved_at FROM findings ORDER BY id"
        ).fetchall()
        mine = {fid: fp for fid, kind, fp, _sev, _res in rows if kind in KINDS}
        findings = [(fp, sev, res is None) for fid, kind, fp, sev, res in rows if fid in mine]
        sent = [
            (mine[fid], event)
            for fid, event in d.db.conn.execute(
                "SELECT finding_id, event FROM deliveries ORDER BY id"
            )
            if fid in mine
        ]
    finally:
        d.db.close()
    said = f"QueueError: {said}; squeue -o: exit 1: `{CONNECT}`"
    assert degraded == [None, None, said, said, said, None, None]
    assert findings == [
        ("queue-unsanctioned:slurm:1", "high", True),
        ("queue-unsanctioned:slurm:2", "high", True),
        ("component-degraded:queue:slurm", "warning", False),
    ]
    assert sent == [
        ("queue-unsanctioned:slurm:1", "open"),
        ("queue-unsanctioned:slurm:2", "open"),
        ("component-degraded:queue:slurm", "open"),
        ("component-degraded:queue:slurm", "resolve"),
    ]


def test_with_the_database_unwritable_too_queue_findings_stay_open_in_memory(
    tmp_path: Path,
) -> None:
    """The same, while the state database refuses every write (findings kept and
    alerted from memory, issue 32): before this change the in-memory tracking resolved
    ``slurm:1`` and ``slurm:2`` at the first blind tick (two resolves) and opened them
    again when Slurm answered (two more opens). Now: two opens, nothing else."""
    doc = {"down": False}

    def answer(argv: Sequence[str]) -> CommandResult:
        if list(argv[:2]) == ["squeue", "--json"]:
            return CommandResult(0, DOWN if doc["down"] else UP, "")
        return CommandResult(1, "", CONNECT + "\n")

    cfg = parse_config(
        f"nvml: {{enabled: false}}\ndaemon: {{state_dir: '{tmp_path}/state'}}\n", "t.yaml"
    )
    queue = QueueSource(SlurmQueue(RecordingRunner(answer=answer)), cfg.queue)
    d = Daemon(cfg, None, sources=[queue])
    d.db.conn.execute("PRAGMA query_only=ON")  # every write refused, as on a full disk
    events = []
    try:
        for i, down in enumerate([False, False, True, True, False, False]):
            doc["down"] = down
            d.tick(5_000_000.0 + 5 * i)
            assert d.last is not None and d.last.track is not None
            events += [("open", r.fingerprint) for r in d.last.track.opened]
            events += [("resolve", r.fingerprint) for r in d.last.track.resolved]
        assert d.degraded["state"].startswith("OperationalError: attempt to write a readonly")
    finally:
        d.db.close()
    assert [e for e in events if e[1].startswith("queue-unsanctioned:")] == [
        ("open", "queue-unsanctioned:slurm:1"),
        ("open", "queue-unsanctioned:slurm:2"),
    ]
