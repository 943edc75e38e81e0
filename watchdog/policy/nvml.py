"""What NVML's observations mean: the findings of one NVML snapshot.

:class:`~watchdog.sources.nvml.NvmlSource` reports what it could not see or what made
no sense (:data:`~watchdog.sources.nvml.GpuProblem`); this module alone decides the
finding each one makes, its severity and its words, and whether the scan is blind to
every GPU process (docs/nvml.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..model import Finding, GpuInfo, GpuProcess, NvmlStatus
from ..sources.nvml_records import (
    LIST_KINDS,
    CallHung,
    GpuProblem,
    GpuVanished,
    ImpossibleEntry,
    ListsUnreadable,
    NvmlSnapshot,
    QueryFailed,
    TooManyMigs,
)

# What a blind GPU means for the jobs on it, said in every finding that makes one blind.
HELD_OPEN = "its jobs' findings stay open until their processes are seen to exit"
# nvml_lib's reason when no libnvidia-ml.so.1 can be loaded: no NVIDIA GPU to see, which
# is not a blind spot.
NO_LIBRARY = "NVML library not found"


@dataclasses.dataclass(frozen=True)
class GpuView:
    """What one NVML snapshot tells a scan, judged.

    Attributes:
        status: Whether NVML answered, its driver version, or why not.
        gpus: Whole GPUs and MIG devices, as listed.
        processes: The processes NVML listed.
        findings: :func:`nvml_findings`.
        blind_gpus: Indexes of GPUs whose holders may be missing.
        blind_to_all: :func:`blind_to_all`.
    """

    status: NvmlStatus
    gpus: tuple[GpuInfo, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    findings: tuple[Finding, ...] = ()
    blind_gpus: tuple[int, ...] = ()
    blind_to_all: bool = False


#: NVML switched off (``nvml.enabled: false``): nothing seen, nothing blind.
DISABLED = GpuView(NvmlStatus(False, None, "disabled in config"))


def gpu_view(snap: NvmlSnapshot) -> GpuView:
    """The judged view of ``snap`` (:class:`GpuView`)."""
    return GpuView(
        NvmlStatus(snap.available, snap.driver_version, snap.error),
        tuple(snap.gpus),
        tuple(snap.processes),
        tuple(nvml_findings(snap)),
        tuple(snap.blind_gpus),
        blind_to_all(snap),
    )


def blind_to_all(snap: NvmlSnapshot) -> bool:
    """True when no GPU process can be seen at all: NVML is unavailable for a reason
    other than there being no NVML library (no NVIDIA driver, no GPU)."""
    return not snap.available and not str(snap.error or "").startswith(NO_LIBRARY)


def nvml_findings(snap: NvmlSnapshot) -> list[Finding]:
    """Every finding one snapshot makes, in the order NVML was asked.

    Args:
        snap: :meth:`watchdog.sources.nvml.NvmlSource.snapshot`'s answer.

    Returns:
        ``binding-mismatch``, ``gpu-processes-hidden``, ``gpu-query-failed`` and
        ``gpu-query-hung`` findings of its problems; then, when NVML is unavailable,
        ``nvml-unavailable`` (info) and, when that blinds the scan, one
        ``gpu-processes-hidden`` (info, fingerprint ``nvml``).
    """
    out = [_finding(p) for p in snap.problems]
    if not snap.available:
        out.append(Finding("nvml-unavailable", "info", f"NVML unavailable: {snap.error}"))
        if blind_to_all(snap):
            out.append(
                Finding(
                    "gpu-processes-hidden",
                    "info",
                    f"cannot see GPU processes: NVML unavailable: {snap.error}; jobs' "
                    "findings stay open until their processes are seen to exit",
                    details={"fingerprint": "nvml", "error": snap.error},
                )
            )
    return out


def _finding(problem: GpuProblem) -> Finding:
    match problem:
        case ImpossibleEntry():
            return _impossible(problem)
        case TooManyMigs():
            return _too_many_migs(problem)
        case ListsUnreadable():
            return _hidden(problem)
        case CallHung():
            return _hung(problem)
        case QueryFailed():
            return Finding(
                kind="gpu-query-failed",
                severity="warning",
                message=f"cannot query {problem.subject}: {problem.error}",
                details={"gpu_index": problem.gpu_index, "error": problem.error},
            )
        case GpuVanished():
            what = (
                "is no longer in NVML's device list"
                if problem.error is None
                else f"cannot be queried: {problem.error}"
            )
            return Finding(
                kind="gpu-query-failed",
                severity="warning",
                message=(
                    f"GPU {problem.gpu_index} ({problem.gpu_uuid}) {what}: its processes "
                    "cannot be seen, so jobs on it are held open until their processes are "
                    "seen to exit"
                ),
                details={
                    "fingerprint": f"vanished:{problem.gpu_uuid}",
                    "gpu_index": problem.gpu_index,
                    "gpu_uuid": problem.gpu_uuid,
                    "error": problem.error,
                },
            )


def _impossible(p: ImpossibleEntry) -> Finding:
    return Finding(
        kind="binding-mismatch",
        severity="warning",
        message=(
            f"NVML listed an impossible {p.list_kind} process on {p.label} ({p.gpu.uuid}): "
            f"{p.bad}; the NVML binding and driver disagree, entry dropped"
        ),
        details={
            "gpu_index": p.gpu.index,
            "gpu_uuid": p.gpu.uuid,
            "list_kind": p.list_kind,
            "pid": p.pid,
            "used_memory_bytes": p.used_memory_bytes,
        },
    )


def _too_many_migs(p: TooManyMigs) -> Finding:
    return Finding(
        kind="binding-mismatch",
        severity="warning",
        message=(
            f"NVML reported {p.slots} MIG device slots on {p.label} ({p.gpu.uuid}), "
            f"more than any GPU has; only the first {p.probed} were probed: the NVML "
            "binding and driver disagree"
        ),
        details={
            "gpu_index": p.gpu.index,
            "gpu_uuid": p.gpu.uuid,
            "max_mig_device_count": p.slots,
            "probed": p.probed,
        },
    )


def _hidden(p: ListsUnreadable) -> Finding:
    # Only the compute list blinds the scan to training; graphics and MPS are told.
    blinding = "compute" in p.failures
    reasons = list(dict.fromkeys(p.failures.values()))
    return Finding(
        kind="gpu-processes-hidden",
        severity="warning" if blinding else "info",
        message=f"cannot see processes on {p.label}: {'; '.join(reasons)}"
        + (f"; {HELD_OPEN}" if blinding else ""),
        details={
            "gpu_index": p.gpu.index,
            "gpu_uuid": p.gpu.uuid,
            "mig_index": p.gpu.mig_index,
            "lists": {kind: p.failures[kind] for kind in LIST_KINDS if kind in p.failures},
        },
    )


def _hung(p: CallHung) -> Finding:
    scope = (
        f"processes on GPU {p.gpu_index} are not seen until it returns; the other GPUs and "
        "the OS sources are still scanned"
        if p.gpu_index is not None
        else "no GPU is listed until it returns; the OS sources are still scanned"
    )
    return Finding(
        kind="gpu-query-hung",
        severity="warning",
        message=f"NVML call hung: {p.text}; {scope}",
        details={
            "fingerprint": p.what,
            "gpu_index": p.gpu_index,
            "call": p.calling,
            "stuck_s": round(p.stuck_s, 1),
        },
    )


def nvml_snapshot_json(snap: NvmlSnapshot) -> dict[str, Any]:
    """A snapshot as plain JSON, its problems as the findings they make (without the
    ``nvml-unavailable`` ones, which ``error`` already says).

    Args:
        snap: :meth:`watchdog.sources.nvml.NvmlSource.snapshot`'s answer.

    Returns:
        ``{"available", "driver_version", "error", "gpus", "processes", "findings",
        "process_api", "blind_gpus"}``, records as dicts named as their fields.
    """
    out = {f.name: getattr(snap, f.name) for f in dataclasses.fields(snap)}
    del out["problems"]
    out["findings"] = [_finding(p) for p in snap.problems]
    return {k: _plain(v) for k, v in out.items()}


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
