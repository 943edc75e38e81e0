"""What NVML said at one moment, as plain records: the snapshot and the problems in it.

Apart from :mod:`watchdog.sources.nvml` so that policy can judge a snapshot without
importing pynvml (the scan imports it only when NVML is used).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from ..model import GpuInfo, GpuProcess

ListKind = Literal["compute", "graphics", "mps"]
LIST_KINDS: tuple[ListKind, ...] = get_args(ListKind)


@dataclass(frozen=True)
class ImpossibleEntry:
    """A process entry no driver can mean (PID 0 or at/above ``pid_max``, more memory
    than the device has): the binding and the driver disagree on the record layout.

    Attributes:
        gpu: The device listed.
        label: ``GPU 0`` or ``GPU 0 MIG 1``.
        list_kind: The list it came from.
        pid: The PID as read.
        used_memory_bytes: The memory as read.
        bad: What is impossible, in words (``PID 0``).
    """

    gpu: GpuInfo
    label: str
    list_kind: ListKind
    pid: int
    used_memory_bytes: int | None
    bad: str


@dataclass(frozen=True)
class TooManyMigs:
    """``nvmlDeviceGetMaxMigDeviceCount`` gave more slots than any GPU has; only the
    first ``probed`` were read."""

    gpu: GpuInfo
    label: str
    slots: int
    probed: int


@dataclass(frozen=True)
class ListsUnreadable:
    """Process lists of one device that could not be read.

    Attributes:
        gpu: The device.
        label: ``GPU 0`` or ``GPU 0 MIG 1``.
        failures: List kind → NVML's error (``Insufficient Permissions (NVML error 4)``).
    """

    gpu: GpuInfo
    label: str
    failures: dict[ListKind, str]


@dataclass(frozen=True)
class CallHung:
    """An NVML call that has not returned within ``nvml.call_timeout_s``.

    Attributes:
        gpu_index: The GPU whose batch hung; None for the system-wide calls.
        what: The batch (``system``, ``GPU 1``).
        calling: The call that hung (``nvmlDeviceGetUUID``).
        stuck_s: Seconds since the batch started.
        text: The whole reason in words.
    """

    gpu_index: int | None
    what: str
    calling: str
    stuck_s: float
    text: str


@dataclass(frozen=True)
class QueryFailed:
    """A device query NVML refused (the device is then partly or wholly unseen).

    Attributes:
        gpu_index: The GPU.
        subject: What was asked, e.g. ``MIG mode of GPU 0`` or ``GPU 0``.
        error: NVML's error.
    """

    gpu_index: int
    subject: str
    error: str


@dataclass(frozen=True)
class GpuVanished:
    """A whole GPU listed before that NVML no longer lists (off the bus, reset), or whose
    device query now fails (``error``: NVML's, e.g. ``GPU is lost``; the one problem
    said about that GPU, not a second ``QueryFailed`` beside it)."""

    gpu_index: int
    gpu_uuid: str
    error: str | None = None


#: What NVML could not tell, or told impossibly: observations, which
#: :mod:`watchdog.policy.nvml` turns into findings.
GpuProblem = ImpossibleEntry | TooManyMigs | ListsUnreadable | CallHung | QueryFailed | GpuVanished


@dataclass
class NvmlSnapshot:
    """What NVML said at one moment.

    Attributes:
        available: False when NVML could not be used at all; ``error`` says why.
        driver_version: e.g. ``550.54.15``; None when unavailable or unreadable.
        error: Reason NVML is unavailable, for "NVML unavailable: <reason>"; else None.
        gpus: Whole GPUs in index order, each followed by its MIG devices.
        processes: One entry per (pid, device); a PID listed on several lists of a
            device keeps the first list's kind (compute, graphics, mps order).
        problems: What NVML could not tell or told impossibly (:data:`GpuProblem`).
        process_api: Listing version used per list kind (``v3``, ``v2`` or ``v1``).
        blind_gpus: Indexes of GPUs whose process lists could not be read in full this
            time (an error, or a call still hung): their holders may be missing.
    """

    available: bool
    driver_version: str | None = None
    error: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    problems: list[GpuProblem] = field(default_factory=list)
    process_api: dict[str, str] = field(default_factory=dict)
    blind_gpus: list[int] = field(default_factory=list)
