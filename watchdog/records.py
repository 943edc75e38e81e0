"""The records the state store keeps, as plain data: jobs, runs, findings, alert
deliveries and actions.

Nothing here touches SQLite: :mod:`watchdog.state` reads and writes these rows, and the
layers that only hand them around (the plug-in Protocols, the report, policy's learning
period) import them from here without depending on the store.

Times are POSIX seconds (``float``) throughout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .model import UnreadableRecord


@dataclass(frozen=True)
class JobRecord:
    """A row of ``jobs``: one job signature and when it was seen."""

    signature: str
    summary: str
    user: str | None
    verdict: str
    origin: dict[str, Any] | UnreadableRecord
    first_seen: float
    last_seen: float
    root_pid: int
    start_ticks: int
    pids: list[int]
    gone_at: float | None
    sightings: int


@dataclass(frozen=True)
class RunRecord:
    """A row of ``job_runs``: one run (one root process) of a job.

    Attributes:
        signature: The job's signature (:func:`watchdog.policy.signature.job_signature`).
        root_pid: Root PID of the run.
        start_ticks: Its start time in clock ticks after boot.
        user: Owner of the root process.
        cmdline: Root command line, exactly as seen (JSON keeps non-UTF-8 bytes).
        origin: The origin record (scan JSON ``origin`` object).
        verdict: Verdict of its last sighting.
        rule: The allowlist rule that matched, or None.
        started_at: POSIX time it was first seen.
        last_seen: POSIX time it was last seen.
        gpu_s: GPU-seconds it held: seconds between sightings times GPUs held.
        gpus: UUIDs of every GPU it held, sorted.
        max_gpu_bytes: The most GPU memory it held at one sighting (NVML, summed over its
            members and GPUs); None when NVML never said.
        workload: Its workload class at its last sighting (``training``, ``serving``...);
            None for a run recorded before classes were.
        workload_evidence: Why, as the scan said it.
    """

    signature: str
    root_pid: int
    start_ticks: int
    user: str | None
    cmdline: list[str]
    origin: dict[str, Any] | UnreadableRecord
    verdict: str
    rule: str | None
    started_at: float
    last_seen: float
    gpu_s: float = 0.0
    gpus: list[str] | None = None
    max_gpu_bytes: int | None = None
    workload: str | None = None
    workload_evidence: list[str] | None = None


@dataclass(frozen=True)
class FindingRecord:
    """A row of ``findings``."""

    id: int
    fingerprint: str
    kind: str
    severity: str
    message: str
    root_pid: int | None
    details: dict[str, Any]
    opened_at: float
    last_seen: float
    seen_count: int
    resolved_at: float | None
    last_alert_at: float | None
    instances: int = 1
    alerted_instances: int | None = None
    alerted_pids: list[int] | None = None
    alerted_routing: dict[str, Any] | None = None


@dataclass(frozen=True)
class Delivery:
    """A row of ``deliveries``: one alert event for one sink."""

    id: int
    finding_id: int
    sink: str
    event: str
    payload: dict[str, Any]
    created_at: float
    attempts: int
    next_attempt_at: float
    delivered_at: float | None
    last_error: str | None
    dead_at: float | None = None


@dataclass(frozen=True)
class ActionRecord:
    """A row of ``actions``: something rogue-watchdog did (or would have done).

    Attributes:
        state: ``done`` (finished), ``pending`` (its owner is still at it, or was
            interrupted: see :attr:`owner`), ``recovering`` (found interrupted and being
            finished or reported by another process), ``interrupted`` (found
            interrupted, finished or reported since; ``details["interrupted"]`` says
            what was done and what was not).
        owner: Who is performing a ``pending`` or ``recovering`` action: ``pid``,
            ``start_ticks``, ``boot_id`` and ``session`` (the state database handle's
            random id), or None for rows written before write-ahead records.
        finished_at: POSIX time the row was finished, or None.
    """

    id: int
    created_at: float
    actor: str
    kind: str
    target: str
    finding_id: int | None
    signature: str | None
    dry_run: bool
    outcome: str
    details: dict[str, Any]
    undo: list[dict[str, Any]] | dict[str, Any] | None
    undone_at: float | None
    state: str = "done"
    owner: dict[str, Any] | None = None
    finished_at: float | None = None


@dataclass(frozen=True)
class ActionStep:
    """A row of ``action_steps``: one side effect of an action, written before it is
    made (``status`` ``intent``) and marked after (``done`` or ``failed``).

    An ``intent`` step of an interrupted action may or may not have taken effect: it is
    never repeated blindly (a signal) and is checked on the host where it can be (a
    rename: which of its two names exists).

    Attributes:
        id: Step id (increasing in the order the steps were written).
        action_id: The action it belongs to.
        at: POSIX time the intent was written.
        op: What kind of side effect: ``signal`` (a wave of one signal to several
            processes), ``rename``, ``write``, ``backup``, ``remove``, ``run``,
            ``touch``, ``wait`` (a deadline, e.g. the end of a grace period).
        status: ``intent``, ``done`` or ``failed``.
        detail: What it is to do (JSON object).
        result: What it did (``done``) or why it failed (``failed``), else None.
    """

    id: int
    action_id: int
    at: float
    op: str
    status: str
    detail: dict[str, Any]
    result: dict[str, Any] | None
