"""Verdicts, finding kinds, workload classes and the Finding record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

# Re-exported: how outputs spell severities, sizes and finding ids lives in a module the
# status client can import without this one's dataclasses.
from ..spelling import REPORTED_SEVERITIES as REPORTED_SEVERITIES
from ..spelling import SEVERITIES as SEVERITIES
from ..spelling import Severity as Severity
from ..spelling import finding_ref as finding_ref
from ..spelling import fmt_bytes as fmt_bytes

Verdict = Literal["sanctioned", "rogue", "excess", "ignored"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
# Verdicts of jobs no rule allows to run as they are: they get findings, listening
# sockets and remediation; sanctioned and ignored jobs get none of these.
UnsanctionedVerdict = Literal["rogue", "excess"]
UNSANCTIONED_VERDICTS: tuple[UnsanctionedVerdict, ...] = get_args(UnsanctionedVerdict)
# The log level a finding's events are written at (the log sink's lines, the loop's
# finding-opened), one table for both. A level says whether something failed, the
# severity how urgent it is: `error` is what this daemon logs of its own failures
# (component-degraded, alert-sink-failing, action-not-recorded, state-dir-lost), so a
# rogue job found (high: the daemon doing its job) is a warning, and only a critical
# finding (a remediation or action that did not hold, refused weights shipped, /proc
# unreadable) is an error; none is `critical`. Before, high was `error` and critical
# `critical` (fresh user, first day: "an open rogue-job is logged at level error").
LOG_LEVELS: dict[str, str] = {
    "info": "info",
    "warning": "warning",
    "high": "warning",
    "critical": "error",
}
# Every kind of Finding the code emits; mypy checks each ``Finding(kind=...)`` against it,
# so an alert rule's ``kinds:`` can be validated against FINDING_KINDS with no hand-kept
# list. docs/scan-json-schema.md describes each kind (a unit test holds the two equal).
# The order is the one config errors list them in (unchanged from the old hand-kept copy).
FindingKind = Literal[
    "binding-mismatch", "component-degraded", "deploy-stale", "excess-instances",
    "gpu-memory-unexplained", "gpu-pid-invisible", "gpu-processes-hidden", "gpu-query-failed",
    "gpu-query-hung", "limited-visibility", "needs-restart",
    "nvml-unavailable", "pid-namespace", "poisoned-weights", "proc-unavailable",
    "queue-output-malformed", "queue-unavailable", "queue-unsanctioned",
    "remediation-failed", "respawned", "rogue-job", "rogue-service", "sanctioned-changed",
    "ship-gate-degraded", "unsanctioned-gpu-use",
    "state-recovered", "weights-unverified", "zombie-gpu-memory",
    "slurm-drain-failed", "slurm-node-drained", "weights-open-refused", "action-interrupted",
]  # fmt: skip
FINDING_KINDS: tuple[FindingKind, ...] = get_args(FindingKind)


# What a GPU job is, decided by watchdog.policy.workload.classify (docs/config.md,
# "Workload classes"): only ``training`` (and ``unknown``, treated as training: it may
# be one) is a rogue *training* job; the others outside the allowlist are
# ``unsanctioned-gpu-use`` at their class's severity.
WorkloadClass = Literal["training", "serving", "interactive", "system", "probe", "unknown"]
WORKLOAD_CLASSES: tuple[WorkloadClass, ...] = get_args(WorkloadClass)
# Classes that are not training: their findings, severities and exemptions are their own.
NON_TRAINING_CLASSES: tuple[WorkloadClass, ...] = ("serving", "interactive", "system", "probe")


@dataclass(frozen=True)
class Finding:
    """Something a person should know about.

    Attributes:
        kind: Stable identifier, one of :data:`FindingKind`, e.g. ``rogue-job``.
        severity: ``info``, ``warning``, ``high`` or ``critical``.
        message: One sentence for people.
        root_pid: The job's root PID, when the finding is about a job.
        details: Extra machine-readable facts (stable keys per kind).
    """

    kind: FindingKind
    severity: Severity
    message: str
    root_pid: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


# Field metadata of origin records (see Origin.fields): a field marked _OPTIONAL is left
# out of the JSON while it is None; one marked _shown_with(name) is left out while the
# field ``name`` is None, one marked _shown_if(flag) while the bool ``flag`` is False
# (keys that appear together, or only for some origins); one marked _HIDDEN never
# appears under its own key.
