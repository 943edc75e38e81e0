"""One entry of a GPU queue (Slurm or home-grown), as every queue backend reports it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Phase = Literal["pending", "running", "other"]

# squeue(1) "JOB STATE CODES": states in which a job waits for resources, and states in
# which it holds them. Everything else (COMPLETING, terminal states) is "other".
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
RUNNING_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"}
)


# A GPU request in any of Slurm's spellings (gpu:1, gres:gpu:a100:2, gres/gpu=1), and the
# GPU shares (mps, shard), which are GPUs too.
_GPU_GRES = re.compile(r"(?:^|[,:/])(?:gpu|mps|shard)(?:[:=(,]|$)", re.IGNORECASE)


def gpu_requested(requests: Iterable[Any]) -> bool:
    """Does any of a job's resource requests (Slurm's ``tres_per_node``, ``tres_per_job``,
    ``tres_per_task``, ``tres_per_socket``, ``tres_req_str``) name a GPU?"""
    return any(isinstance(r, str) and _GPU_GRES.search(r) for r in requests)


def phase_of(state: str | None) -> Phase:
    """Map a Slurm-style state (or ``waiting``/``queued``/``running``) to a phase."""
    s = (state or "").strip().upper()
    if s in PENDING_STATES or s in ("WAITING", "QUEUED", "HELD"):
        return "pending"
    if s in RUNNING_STATES:
        return "running"
    return "other"


@dataclass(frozen=True)
class QueueEntry:
    """A job in a queue.

    Attributes:
        queue: Which queue listed it: ``slurm`` or ``command``.
        job_id: The queue's identifier as text (``42``, ``42_3`` for an array task).
        user: Owner's user name, or None when the queue did not say.
        account: Accounting name (Slurm ``--account``), or None.
        partition: Partition or pool, or None.
        name: Job name, or None.
        state: The queue's own state word, e.g. ``PENDING``.
        reason: Why it waits or was held (Slurm ``Reason``: ``Priority``,
            ``Resources``, ``JobHeldUser``...), or None.
        submit_time: POSIX seconds of submission, or None.
        start_time: POSIX seconds the job started (running) or is expected to (pending;
            Slurm's estimate), or None.
        priority: Scheduling priority; 0 means held in Slurm.
        extra: Further facts for details (command, work dir, nodes).
        requests_gpu: Whether the job asked for a GPU (``--gres=gpu``, ``--gpus``...):
            None when the queue did not say what it asked for (``squeue -o``).
    """

    queue: str
    job_id: str
    user: str | None
    account: str | None
    partition: str | None
    name: str | None
    state: str
    reason: str | None = None
    submit_time: float | None = None
    start_time: float | None = None
    priority: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    requests_gpu: bool | None = None

    @property
    def phase(self) -> Phase:
        """``pending``, ``running`` or ``other``."""
        return phase_of(self.state)

    @property
    def held(self) -> bool:
        """True when the job is held (Slurm: reason ``JobHeld*`` or priority 0 pending)."""
        if self.reason is not None and self.reason.startswith("JobHeld"):
            return True
        return self.phase == "pending" and self.priority == 0

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form used in finding details and ``status``."""
        return {
            "queue": self.queue,
            "job_id": self.job_id,
            "user": self.user,
            "account": self.account,
            "partition": self.partition,
            "name": self.name,
            "state": self.state,
            "phase": self.phase,
            "reason": self.reason,
            "submit_time": self.submit_time,
            "start_time": self.start_time,
            "priority": self.priority,
            "held": self.held,
            "requests_gpu": self.requests_gpu,
            **({"extra": self.extra} if self.extra else {}),
        }
