"""NVML source: which processes hold which GPU, as the NVIDIA driver reports it.

Uses nvidia-ml-py (``pynvml``) and its own library loading; the only calls made outside
pynvml are the unversioned v1 process listings (see :mod:`watchdog.sources.nvml_lib`).
A snapshot never raises: a missing library, an unloaded driver or a lost GPU become
``available=False`` with a reason, or a :class:`~watchdog.model.Finding` per device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pynvml

from watchdog.model import Finding, GpuInfo, GpuProcess
from watchdog.sources.nvml_lib import (
    RawProcess,
    list_processes_v1,
    load_library,
    memory_or_none,
)

ListKind = Literal["compute", "graphics", "mps"]
LIST_KINDS: tuple[ListKind, ...] = ("compute", "graphics", "mps")

# nvml.h symbol stems per list; "_v3" takes nvmlProcessInfo_t and "_v2"
# nvmlProcessInfo_v2_t (both 24 bytes), the unversioned one nvmlProcessInfo_v1_t (16).
_STEMS: dict[ListKind, str] = {
    "compute": "nvmlDeviceGetComputeRunningProcesses",
    "graphics": "nvmlDeviceGetGraphicsRunningProcesses",
    "mps": "nvmlDeviceGetMPSComputeRunningProcesses",
}
_API_VERSIONS = ("v3", "v2", "v1")
_BAD_PIDS = (0, 0xFFFF_FFFF)
# Most MIG slots probed per GPU. A100/H100/H200 have at most 7 GPU instances (NVIDIA MIG
# user guide); libnvidia-container sizes its table at MAX_MIG_DEVICES 8. A larger answer
# from nvmlDeviceGetMaxMigDeviceCount is a binding/driver disagreement, and looping over
# 2**31 slots would hang the scan.
MAX_MIG_SLOTS = 16


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
        findings: ``binding-mismatch``, ``gpu-processes-hidden``, ``gpu-query-failed``.
        process_api: Listing version used per list kind (``v3``, ``v2`` or ``v1``).
    """

    available: bool
    driver_version: str | None = None
    error: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    process_api: dict[str, str] = field(default_factory=dict)


class _Unavailable(Exception):
    """NVML as a whole cannot be used; the message is the reason."""


class _SymbolMissing(Exception):
    """No version of a listing symbol exists in the loaded library."""


def _describe(exc: BaseException) -> str:
    """``Insufficient Permissions (NVML error 4)`` for an NVMLError, else ``str(exc)``."""
    if isinstance(exc, pynvml.NVMLError):
        return f"{exc} (NVML error {exc.value})"
    return str(exc)


def _is_missing_symbol(exc: BaseException) -> bool:
    # pynvml reports a missing symbol as NVMLError_FunctionNotFound, or, from its
    # unversioned wrappers, as NVMLLibraryMismatchError (not an NVMLError subclass).
    return isinstance(exc, pynvml.NVMLError_FunctionNotFound | pynvml.NVMLLibraryMismatchError)


def _text(fn: Callable[..., Any], *args: Any) -> str:
    """Call a pynvml string getter and decode its bytes per field, never raising.

    pynvml's ``convertStrBytes`` wrapper decodes strictly as UTF-8, so one GPU name or
    UUID with other bytes would raise UnicodeDecodeError out of the whole snapshot; the
    undecorated function (``__wrapped__``, functools.wraps) returns the raw bytes, which
    are decoded here with undecodable bytes escaped (``\\xff``), keeping UUIDs distinct.

    Raises:
        pynvml.NVMLError: The NVML call itself failed.
    """
    raw = getattr(fn, "__wrapped__", fn)(*args)
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "backslashreplace")
    return str(raw)


def _from_pynvml(fn: Callable[[Any], list[Any]]) -> Callable[[Any], list[RawProcess]]:
    def call(handle: Any) -> list[RawProcess]:
        return [RawProcess(int(p.pid), memory_or_none(p.usedGpuMemory)) for p in fn(handle)]

    return call


def _listers(kind: ListKind) -> dict[str, Callable[[Any], list[RawProcess]]]:
    stem = _STEMS[kind]
    return {
        "v3": _from_pynvml(getattr(pynvml, stem + "_v3")),
        "v2": _from_pynvml(getattr(pynvml, stem + "_v2")),
        "v1": lambda handle: list_processes_v1(handle, stem),
    }


@dataclass
class _Device:
    """A device to list: a whole GPU or one of its MIG devices."""

    info: GpuInfo
    handle: Any
    label: str  # "GPU 0" or "GPU 0 MIG 1", for messages


class NvmlSource:
    """Reads GPUs and their processes through NVML.

    ``nvmlInit`` runs once per instance, on the first :meth:`snapshot`, and again on the
    next snapshot after a failure that made NVML unavailable. :meth:`close` shuts it down.
    """

    def __init__(self, library_path: str | None = None) -> None:
        """Prepare a source; nothing is loaded until the first snapshot.

        Args:
            library_path: Path of the NVML shared library to load instead of pynvml's
                default ``libnvidia-ml.so.1`` (found through the dynamic loader's path).
        """
        self._library_path = library_path
        self._initialized = False
        self._api: dict[ListKind, str] = {}
        # A missing library or driver stays missing for a while: retrying dlopen and
        # nvmlInit on every tick costs more than the rest of an idle tick.
        self.retry_after_s = 60.0
        self._unavailable: tuple[float, str] | None = None

    def close(self) -> None:
        """Call ``nvmlShutdown`` if this source initialised NVML; never raises."""
        if not self._initialized:
            return
        self._initialized = False
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()

    def __enter__(self) -> NvmlSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def snapshot(self, pid_max: int) -> NvmlSnapshot:
        """List GPUs and the processes NVML sees on them.

        Args:
            pid_max: ``/proc/sys/kernel/pid_max``; proc(5): one greater than the largest
                PID, so an NVML PID >= pid_max cannot be real.

        Returns:
            A snapshot; ``available`` False with ``error`` set when NVML cannot be used
            (library missing, driver not loaded, device count unreadable). Never raises.
        """
        now = time.monotonic()
        if self._unavailable is not None and now - self._unavailable[0] < self.retry_after_s:
            return NvmlSnapshot(available=False, error=self._unavailable[1])
        try:
            try:
                self._init()
            except _Unavailable as exc:
                self._unavailable = (now, str(exc))  # library or driver missing: back off
                raise
            self._unavailable = None
            return self._collect(pid_max)
        except _Unavailable as exc:
            return NvmlSnapshot(available=False, error=str(exc))
        except Exception as exc:  # a broken binding must not stop the OS-source scan
            self.close()
            return NvmlSnapshot(available=False, error=f"unexpected NVML failure: {exc!r}")

    # -- initialisation -------------------------------------------------------------

    def _init(self) -> None:
        if self._initialized:
            return
        if self._library_path is not None:
            try:
                load_library(self._library_path)
            except OSError as exc:
                raise _Unavailable(f"NVML library not found: {exc}") from exc
            except RuntimeError as exc:
                raise _Unavailable(str(exc)) from exc
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as exc:
            raise _Unavailable(
                "NVML library not found: libnvidia-ml.so.1 could not be loaded"
            ) from exc
        except pynvml.NVMLError as exc:
            raise _Unavailable(f"nvmlInit failed: {_describe(exc)}") from exc
        self._initialized = True
        self._api = {}

    # -- collection -----------------------------------------------------------------

    def _collect(self, pid_max: int) -> NvmlSnapshot:
        snap = NvmlSnapshot(available=True)
        try:
            snap.driver_version = _text(pynvml.nvmlSystemGetDriverVersion)
        except pynvml.NVMLError:
            snap.driver_version = None
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            # Whole-system failure (driver gone, all GPUs lost): re-init next time.
            self.close()
            raise _Unavailable(f"nvmlDeviceGetCount failed: {_describe(exc)}") from exc
        for index in range(count):
            self._collect_gpu(index, pid_max, snap)
        snap.process_api = {str(kind): version for kind, version in self._api.items()}
        return snap

    def _collect_gpu(self, index: int, pid_max: int, snap: NvmlSnapshot) -> None:
        label = f"GPU {index}"
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu = _Device(self._device_info(handle, index, None), handle, label)
        except pynvml.NVMLError as exc:
            snap.findings.append(_query_failed(label, index, exc))
            return
        snap.gpus.append(gpu.info)
        migs = self._mig_devices(gpu, snap)
        seen: set[int] = set()
        all_migs_listed = True
        for mig in migs or ():
            snap.gpus.append(mig.info)
            listed = self._list_device(mig, pid_max, snap, seen)
            all_migs_listed = all_migs_listed and listed
        # With MIG on, the whole-GPU list is an aggregate that NVML gives only to
        # privileged callers; when every MIG device was listed it adds nothing hidden.
        quiet = migs is not None and all_migs_listed
        self._list_device(gpu, pid_max, snap, seen, quiet_errors=quiet)

    def _device_info(self, handle: Any, index: int, mig_index: int | None) -> GpuInfo:
        uuid = _text(pynvml.nvmlDeviceGetUUID, handle)
        try:
            name = _text(pynvml.nvmlDeviceGetName, handle)
        except pynvml.NVMLError:
            name = "unknown"
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            total: int | None = int(mem.total)
            used: int | None = int(mem.used)
        except pynvml.NVMLError:
            total = used = None
        return GpuInfo(index, uuid, name, total, used, mig_index)

    def _mig_devices(self, gpu: _Device, snap: NvmlSnapshot) -> list[_Device] | None:
        """MIG devices of a GPU, or None when MIG is off or not supported."""
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(gpu.handle)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            return None
        except pynvml.NVMLError as exc:
            snap.findings.append(_query_failed(gpu.label, gpu.info.index, exc, "MIG mode"))
            return None
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            return None
        try:
            slots = int(pynvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle))
        except pynvml.NVMLError as exc:
            snap.findings.append(_query_failed(gpu.label, gpu.info.index, exc, "MIG devices"))
            return None
        if slots > MAX_MIG_SLOTS:
            snap.findings.append(_too_many_migs(gpu, slots))
            slots = MAX_MIG_SLOTS
        out: list[_Device] = []
        for slot in range(slots):
            label = f"{gpu.label} MIG {slot}"
            try:
                handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
                info = self._device_info(handle, gpu.info.index, slot)
            except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
                continue  # an empty slot: no MIG device configured there
            except pynvml.NVMLError as exc:
                snap.findings.append(_query_failed(label, gpu.info.index, exc))
                continue
            out.append(_Device(info, handle, label))
        return out

    def _list_device(
        self,
        dev: _Device,
        pid_max: int,
        snap: NvmlSnapshot,
        seen: set[int],
        quiet_errors: bool = False,
    ) -> bool:
        """Add a device's processes to ``snap``; True when every list could be read.

        ``seen`` holds PIDs already attributed on this physical GPU (MIG devices are
        listed before their parent, so a PID keeps its most precise device).
        """
        failures: dict[ListKind, str] = {}
        for kind in LIST_KINDS:
            try:
                raw = self._list(kind, dev.handle)
            except (pynvml.NVMLError, _SymbolMissing) as exc:
                failures[kind] = _describe(exc)
                continue
            for entry in raw:
                bad = _bad_value(entry, pid_max, dev.info.memory_total_bytes)
                if bad is not None:
                    snap.findings.append(_mismatch(dev, kind, entry, bad))
                    continue
                if entry.pid in seen:
                    continue
                seen.add(entry.pid)
                snap.processes.append(
                    GpuProcess(
                        pid=entry.pid,
                        gpu_uuid=dev.info.uuid,
                        gpu_index=dev.info.index,
                        used_memory_bytes=entry.used_memory_bytes,
                        list_kind=kind,
                    )
                )
        if failures and not quiet_errors:
            snap.findings.append(_hidden(dev, failures))
        return not failures

    def _list(self, kind: ListKind, handle: Any) -> list[RawProcess]:
        """One process list, trying ``_v3``, ``_v2`` then the unversioned symbol.

        The version that answered is remembered until the next ``nvmlInit``.
        """
        listers = _listers(kind)
        known = self._api.get(kind)
        versions = (known,) if known else _API_VERSIONS
        for version in versions:
            try:
                result = listers[version](handle)
            except Exception as exc:
                if _is_missing_symbol(exc):
                    continue
                self._api[kind] = version
                raise
            self._api[kind] = version
            return result
        raise _SymbolMissing(f"the library has no {_STEMS[kind]} symbol (v3, v2 or v1)")


def _bad_value(entry: RawProcess, pid_max: int, total_bytes: int | None) -> str | None:
    """Describe an impossible entry (binding and driver disagree on layout), else None."""
    if entry.pid in _BAD_PIDS or entry.pid >= pid_max:
        return f"PID {entry.pid}"
    used = entry.used_memory_bytes
    if used is not None and total_bytes is not None and used > total_bytes:
        return f"used memory {used} bytes above the device total of {total_bytes} bytes"
    return None


def _mismatch(dev: _Device, kind: ListKind, entry: RawProcess, bad: str) -> Finding:
    return Finding(
        kind="binding-mismatch",
        severity="warning",
        message=(
            f"NVML listed an impossible {kind} process on {dev.label} ({dev.info.uuid}): "
            f"{bad}; the NVML binding and driver disagree, entry dropped"
        ),
        details={
            "gpu_index": dev.info.index,
            "gpu_uuid": dev.info.uuid,
            "list_kind": kind,
            "pid": entry.pid,
            "used_memory_bytes": entry.used_memory_bytes,
        },
    )


def _too_many_migs(gpu: _Device, slots: int) -> Finding:
    return Finding(
        kind="binding-mismatch",
        severity="warning",
        message=(
            f"NVML reported {slots} MIG device slots on {gpu.label} ({gpu.info.uuid}), "
            f"more than any GPU has; only the first {MAX_MIG_SLOTS} were probed: the NVML "
            "binding and driver disagree"
        ),
        details={
            "gpu_index": gpu.info.index,
            "gpu_uuid": gpu.info.uuid,
            "max_mig_device_count": slots,
            "probed": MAX_MIG_SLOTS,
        },
    )


def _hidden(dev: _Device, failures: dict[ListKind, str]) -> Finding:
    reasons = list(dict.fromkeys(failures.values()))
    return Finding(
        kind="gpu-processes-hidden",
        severity="warning" if "compute" in failures else "info",
        message=f"cannot see processes on {dev.label}: {'; '.join(reasons)}",
        details={
            "gpu_index": dev.info.index,
            "gpu_uuid": dev.info.uuid,
            "mig_index": dev.info.mig_index,
            "lists": {kind: failures[kind] for kind in LIST_KINDS if kind in failures},
        },
    )


def _query_failed(label: str, index: int, exc: BaseException, what: str = "") -> Finding:
    subject = f"{what} of {label}" if what else label
    return Finding(
        kind="gpu-query-failed",
        severity="warning",
        message=f"cannot query {subject}: {_describe(exc)}",
        details={"gpu_index": index, "error": _describe(exc)},
    )


def nvml_snapshot_json(snapshot: NvmlSnapshot) -> dict[str, Any]:
    """Plain JSON-ready dict of a snapshot (dataclass fields, nested records as dicts).

    Args:
        snapshot: As returned by :meth:`NvmlSource.snapshot`.

    Returns:
        ``{"available", "driver_version", "error", "gpus", "processes", "findings",
        "process_api"}`` with lists of dicts named as the dataclass fields.
    """
    return dataclasses.asdict(snapshot)
