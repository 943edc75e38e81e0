"""A home-grown GPU queue: a command that prints one JSON object per line.

Each line describes one entry (docs/queue.md)::

    {"id": "17", "user": "svc-old", "name": "legacy-retrain", "state": "waiting",
     "account": "ml", "partition": "a100", "submitted": "2025-03-01T02:00:00+00:00"}

``id`` is required; ``job_id``/``job_name``/``pool``/``submit_time`` are accepted as
aliases; times are POSIX seconds or ISO 8601; ``state`` is ``waiting``/``pending``/
``queued``/``held`` (pending) or ``running`` (default ``pending``). Other keys are kept
as ``extra``. Blank lines are ignored; malformed lines are counted, not fatal.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..command import CommandRunner, run
from .model import QueueEntry
from .slurm import QueueError

_KNOWN = {
    "id", "job_id", "user", "account", "partition", "pool", "name", "job_name", "state",
    "reason", "submitted", "submit_time", "started", "start_time", "priority",
}  # fmt: skip


def _str(obj: dict[str, Any], *keys: str) -> str | None:
    for k in keys:
        v = obj.get(k)
        if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v):
            return str(v)
    return None


def _when(obj: dict[str, Any], *keys: str) -> float | None:
    for k in keys:
        v = obj.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
        if isinstance(v, str) and v:
            try:
                return datetime.fromisoformat(v).astimezone().timestamp()
            except ValueError:
                continue
    return None


def parse_json_lines(text: str, queue: str = "command") -> tuple[list[QueueEntry], list[str]]:
    """Entries of a home-grown queue's output.

    Args:
        text: One JSON object per line.
        queue: Name stored in each entry's ``queue``.

    Returns:
        ``(entries, problems)``: problems name each rejected line (``line 3: no id``).
    """
    entries: list[QueueEntry] = []
    problems: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            problems.append(f"line {n}: not JSON")
            continue
        if not isinstance(obj, dict):
            problems.append(f"line {n}: not an object")
            continue
        job_id = _str(obj, "id", "job_id")
        if job_id is None:
            problems.append(f"line {n}: no id")
            continue
        prio = obj.get("priority")
        gpus = obj.get("gpus")  # how many GPUs it asked for, when the queue says
        asked = gpus > 0 if isinstance(gpus, int | float) and not isinstance(gpus, bool) else None
        entries.append(
            QueueEntry(
                queue=queue,
                job_id=job_id,
                user=_str(obj, "user"),
                account=_str(obj, "account"),
                partition=_str(obj, "partition", "pool"),
                name=_str(obj, "name", "job_name"),
                state=(_str(obj, "state") or "pending").upper(),
                reason=_str(obj, "reason"),
                submit_time=_when(obj, "submitted", "submit_time"),
                start_time=_when(obj, "started", "start_time"),
                priority=prio if isinstance(prio, int) and not isinstance(prio, bool) else None,
                extra={k: v for k, v in obj.items() if k not in _KNOWN},
                requests_gpu=asked,
            )
        )
    return entries, problems


class CommandQueue:
    """Reads a home-grown queue by running its listing command.

    Args:
        argv: The command (never run through a shell).
        run_cmd: Command runner (tests may replace it).
        timeout_s: Wall-clock limit in seconds.
    """

    name = "command"

    def __init__(
        self, argv: tuple[str, ...], run_cmd: CommandRunner = run, timeout_s: float = 10.0
    ) -> None:
        self.argv = argv
        self.run_cmd = run_cmd
        self.timeout_s = timeout_s
        self.problems: list[str] = []

    def entries(self) -> list[QueueEntry]:
        """Run the command and parse its lines (problems kept in :attr:`problems`).

        Raises:
            QueueError: The command is missing, timed out or exited non-zero.
        """
        res = self.run_cmd(list(self.argv), self.timeout_s)
        if not res.ran:
            raise QueueError(f"{self.argv[0]}: not runnable or timed out")
        if res.returncode != 0:
            why = (res.stderr or res.stdout).strip().splitlines()
            raise QueueError(f"{self.argv[0]}: exit {res.returncode}: {why[0] if why else ''}")
        entries, self.problems = parse_json_lines(res.stdout)
        return entries
