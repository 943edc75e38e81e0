"""Plain data shared by every layer: processes, GPUs, origins, jobs, advice and findings.

Nothing in this package performs I/O. Sources fill these records, lineage resolvers read
them, policy judges them, and the CLI renders them. One module per concept:

========== =================================================================
finding    verdicts, finding kinds, workload classes, :class:`Finding`
process    :class:`Proc`
gpu        :class:`GpuInfo`, :class:`GpuProcess`, :class:`GpuHeld`, :class:`NvmlStatus`
origin     the origin base record :class:`Origin` (the ``unknown`` kind), labels
origins    each origin kind's record and :data:`ORIGIN_KINDS`, the typed list of them
readback   :func:`origin_from_json`: a recorded origin read back, never trusted
advice     :class:`Advice`, :class:`Collateral`
job        :class:`Job` and the guard's Protocol
result     :class:`ScanResult`
weights    weights-file suffixes shared with the configuration
========== =================================================================

Callers import from the package (``from ..model import Job``); the modules are its
layout, not its interface.
"""

from __future__ import annotations

from .advice import (
    UNDECIDED,
    Advice,
    Collateral,
    Copies,
)
from .finding import (
    FINDING_KINDS,
    LOG_LEVELS,
    NON_TRAINING_CLASSES,
    REPORTED_SEVERITIES,
    SEVERITIES,
    UNSANCTIONED_VERDICTS,
    VERDICTS,
    WORKLOAD_CLASSES,
    Finding,
    FindingKind,
    Severity,
    UnsanctionedVerdict,
    Verdict,
    WorkloadClass,
    finding_ref,
    fmt_bytes,
)
from .gpu import (
    GpuHeld,
    GpuInfo,
    GpuProcess,
    NvmlStatus,
)
from .job import (
    Job,
    Protection,
)
from .origin import (
    DISABLE_FIRST,
    MAX_ORIGIN_LABEL_CHARS,
    UNKNOWN_ORIGIN,
    Origin,
    OriginKind,
    PinKey,
    PinType,
    Restarts,
    UnreadableOrigin,
    UnreadableRecord,
    bounded_label,
    unit_label,
)
from .origins import (
    FALSY,
    NOT_LIVE,
    ORIGIN_KINDS,
    TRUTHY,
    AtOrigin,
    ContainerOrigin,
    CronOrigin,
    KubernetesOrigin,
    OrphanOrigin,
    ShellOrigin,
    SlurmOrigin,
    SupervisorOrigin,
    SystemdOrigin,
    array_stop,
    origin_kind,
    origin_kinds,
)
from .process import (
    Proc,
)
from .readback import (
    origin_from_json,
)
from .result import (
    ScanResult,
)
from .weights import (
    INDEX_SUFFIX,
    UNVERIFIABLE_SUFFIXES,
    WEIGHT_SUFFIXES,
)

__all__ = [
    "DISABLE_FIRST",
    "FALSY",
    "FINDING_KINDS",
    "INDEX_SUFFIX",
    "LOG_LEVELS",
    "MAX_ORIGIN_LABEL_CHARS",
    "NON_TRAINING_CLASSES",
    "NOT_LIVE",
    "ORIGIN_KINDS",
    "REPORTED_SEVERITIES",
    "SEVERITIES",
    "TRUTHY",
    "UNDECIDED",
    "UNKNOWN_ORIGIN",
    "UNSANCTIONED_VERDICTS",
    "UNVERIFIABLE_SUFFIXES",
    "VERDICTS",
    "WEIGHT_SUFFIXES",
    "WORKLOAD_CLASSES",
    "Advice",
    "AtOrigin",
    "Collateral",
    "ContainerOrigin",
    "Copies",
    "CronOrigin",
    "Finding",
    "FindingKind",
    "GpuHeld",
    "GpuInfo",
    "GpuProcess",
    "Job",
    "KubernetesOrigin",
    "NvmlStatus",
    "Origin",
    "OriginKind",
    "OrphanOrigin",
    "PinKey",
    "PinType",
    "Proc",
    "Protection",
    "Restarts",
    "ScanResult",
    "Severity",
    "ShellOrigin",
    "SlurmOrigin",
    "SupervisorOrigin",
    "SystemdOrigin",
    "UnreadableOrigin",
    "UnreadableRecord",
    "UnsanctionedVerdict",
    "Verdict",
    "WorkloadClass",
    "array_stop",
    "bounded_label",
    "finding_ref",
    "fmt_bytes",
    "origin_from_json",
    "origin_kind",
    "origin_kinds",
    "unit_label",
]
