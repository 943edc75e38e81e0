"""A job (a training run: its processes, origin, verdict and advice) and the guard's Protocol."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from .advice import UNDECIDED, Advice
from .finding import NON_TRAINING_CLASSES, UNSANCTIONED_VERDICTS, Verdict, WorkloadClass
from .gpu import GpuHeld
from .origin import UNKNOWN_ORIGIN, Origin
from .process import Proc


@dataclass(frozen=True)
class Job:
    """A training job: a process tree judged as one.

    Attributes:
        root_pid: Topmost training process of the tree.
        pids: Every member PID, root first, then ascending.
        user: Owner of the root process.
        cmdline: Root process command line.
        start_ticks: Root start time in clock ticks after boot.
        gpu_memory_bytes: Sum over members of NVML-reported memory in bytes; None when
            no member had a known figure.
        gpu_uuids: GPUs the members hold (NVML lists or device fds), sorted.
        lineage: Root's ancestors, root first, up to PID 1.
        origin: Resolved origin of the root.
        verdict: Policy verdict.
        rule: Name of the allowlist rule that matched (for ``sanctioned``/``excess``),
            or of the ignore entry (for ``ignored``).
        reason: Why the verdict was reached, in words.
        evidence: Why the job counts as training (``nvml``, ``device-fd``, ``launcher``).
        devices: Device nodes the members hold open (``/dev/nvidia0``...).
        listening: Sockets the job (and processes sharing its origin) listen on, as
            ``{proto, address, port, pid}``; filled for rogue and excess jobs.
        gpus: Per GPU the members are listed on by NVML: index and memory held,
            sorted by index then UUID.
        advice: What may be done about it, decided by the guard
            (:func:`watchdog.policy.guard.advise`); :data:`UNDECIDED` until then.
        workload: What kind of GPU work it is (:data:`WorkloadClass`), decided by
            :func:`watchdog.policy.workload.classify`; until then (a job rebuilt from
            a record, a test's) ``training``, what every job was before classes.
        workload_evidence: Why, in short phrases (``module vllm.entrypoints.openai.api_server``).
    """

    root_pid: int
    pids: list[int]
    user: str | None
    cmdline: tuple[str, ...]
    start_ticks: int
    gpu_memory_bytes: int | None
    gpu_uuids: list[str]
    lineage: list[Proc]
    origin: Origin = UNKNOWN_ORIGIN
    verdict: Verdict = "rogue"
    rule: str | None = None
    reason: str = ""
    evidence: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    listening: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[GpuHeld] = field(default_factory=list)
    advice: Advice = UNDECIDED
    workload: WorkloadClass = "training"
    workload_evidence: list[str] = field(default_factory=list)

    @property
    def unsanctioned(self) -> bool:
        """True for ``rogue`` and ``excess`` jobs (:data:`UNSANCTIONED_VERDICTS`): the ones
        findings, socket listings, remediation and node drains are about."""
        return self.verdict in UNSANCTIONED_VERDICTS

    @property
    def gpu_indexes(self) -> list[int]:
        """NVML indexes of the GPUs the job is on, ascending, each once."""
        return sorted({g.index for g in self.gpus})

    def exemption(self) -> str:
        """The ignore entry that would exempt this job's user and class, as YAML flow
        text: ``ignore: [{name: alice-interactive, user: alice, class: interactive}]``."""
        user = self.user or "-"
        name = f"{user}-{self.workload}"
        # A user name is host text: quoted (JSON is YAML) unless it is a plain word.
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", user):
            user, name = json.dumps(user), json.dumps(name)
        return f"ignore: [{{name: {name}, user: {user}, class: {self.workload}}}]"

    @property
    def may_train(self) -> bool:
        """True unless the job's class says it is not training (``serving``,
        ``interactive``, ``system``, ``probe``): what the enforcer, node drains and
        ``rogue-service`` act on."""
        return self.workload not in NON_TRAINING_CLASSES


class Protection(Protocol):
    """What one scan must never target, as the actions ask it (the one guard,
    :class:`watchdog.policy.guard.ScanProtection`, implements it).

    Attributes:
        identities: ``(PID, start ticks)`` of every process of a sanctioned or ignored job.
        pids: Their PIDs.
    """

    @property
    def identities(self) -> frozenset[tuple[int, int]]:
        """See the class attributes."""
        ...

    @property
    def pids(self) -> frozenset[int]:
        """See the class attributes."""
        ...

    def source_refusal(self, origin: Origin) -> str | None:
        """Why ``origin``'s source must never be disabled, or None when it may be."""
        ...

    @property
    def training(self) -> frozenset[int]:
        """PIDs of the scan's rogue and excess jobs: stopping them is no collateral."""
        ...

    def process_refusal(self, proc: Proc) -> str | None:
        """Why ``proc`` must never be signalled, or None."""
        ...

    def member_refusal(self, pid: int, start_ticks: int) -> str:
        """The refusal's words for a process of :attr:`identities`: whose it is (a
        sanctioned job's, an ignored job's)."""
        ...
