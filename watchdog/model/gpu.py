"""GPUs, the processes NVML sees on them, and NVML's health."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class GpuInfo:
    """One GPU (or MIG instance) as reported by NVML.

    Attributes:
        index: NVML device index; for a MIG instance, the parent's index.
        uuid: ``GPU-...`` or ``MIG-...`` UUID.
        name: Product name, e.g. ``NVIDIA H200``.
        memory_total_bytes: Framebuffer size in bytes, or None when NVML could not say.
        memory_used_bytes: Framebuffer in use in bytes, or None when NVML could not say.
        mig_index: MIG device index under ``index``, None for a whole GPU.
    """

    index: int
    uuid: str
    name: str
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    mig_index: int | None = None


@dataclass(frozen=True, slots=True)  # slots: one per listed process per tick, no dict each
class GpuProcess:
    """One entry of an NVML running-process list.

    Attributes:
        pid: PID as NVML reports it (host PID namespace of the driver).
        gpu_uuid: UUID of the GPU or MIG instance the entry was listed on.
        gpu_index: NVML index of that device.
        used_memory_bytes: GPU memory in bytes, or None when NVML reports it as
            not available (``NVML_VALUE_NOT_AVAILABLE``).
        list_kind: Which NVML list held it: ``compute``, ``graphics`` or ``mps``.
    """

    pid: int
    gpu_uuid: str
    gpu_index: int
    used_memory_bytes: int | None
    list_kind: Literal["compute", "graphics", "mps"]


@dataclass(frozen=True)
class GpuHeld:
    """What one job holds on one GPU (or MIG instance), summed over its members.

    Attributes:
        uuid: ``GPU-...`` or ``MIG-...`` UUID.
        index: NVML index of the GPU (a MIG instance's parent index).
        memory_bytes: NVML-reported memory in bytes; None when NVML did not say for any
            member on this device (``NVML_VALUE_NOT_AVAILABLE``).
    """

    uuid: str
    index: int
    memory_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        """``{"index", "uuid", "memory_bytes"}`` as in ``jobs[].gpus`` of the scan JSON."""
        return {"index": self.index, "uuid": self.uuid, "memory_bytes": self.memory_bytes}


@dataclass
class NvmlStatus:
    """NVML health as shown in ``scan --json`` under ``nvml``."""

    available: bool
    driver_version: str | None = None
    error: str | None = None
