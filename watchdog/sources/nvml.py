"""NVML source: which processes hold which GPU, as the NVIDIA driver reports it.

Uses nvidia-ml-py (``pynvml``) and its own library loading; the only calls made outside
pynvml are the unversioned v1 process listings (see :mod:`watchdog.sources.nvml_lib`).
A snapshot never raises: a missing library, an unloaded driver or a lost GPU become
``available=False`` with a reason, or a :data:`GpuProblem` observation per device
(:mod:`watchdog.policy.nvml` decides which findings they make).
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pynvml

from ..logs import get_logger
from ..model import GpuInfo, GpuProcess
from .nvml_lib import (
    RawProcess,
    list_processes_v1,
    load_library,
    memory_or_none,
)
from .nvml_records import (
    LIST_KINDS,
    CallHung,
    GpuVanished,
    ImpossibleEntry,
    ListKind,
    ListsUnreadable,
    NvmlSnapshot,
    QueryFailed,
    TooManyMigs,
)

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
# Retry after NVML could not be initialised: first after 1 s, doubling up to 60 s.
INIT_RETRY_FIRST_S = 1.0
INIT_RETRY_MAX_S = 60.0

log = get_logger()


class _Unavailable(Exception):
    """NVML as a whole cannot be used; the message is the reason.

    ``back_off`` is False for a failure after a good ``nvmlInit`` (device count lost):
    the next snapshot initialises again at once.
    """

    def __init__(self, message: str, back_off: bool = True) -> None:
        super().__init__(message)
        self.back_off = back_off


class _SymbolMissing(Exception):
    """No version of a listing symbol exists in the loaded library."""


class _Batch:
    """A group of NVML calls run together on the worker thread (one GPU, or init).

    ``calling`` names the NVML entry point in progress, for the hung message.
    """

    def __init__(self, fn: Callable[[_Batch], Any]) -> None:
        self.fn = fn
        self.calling = ""
        self.hung_in = ""  # what `calling` was when the batch timed out
        self.started = 0.0
        self.finished = 0.0
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def call(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        self.calling = name
        return fn(*args)


class _Hung(Exception):
    """A batch of NVML calls did not return within the timeout (it may never)."""

    def __init__(self, what: str, batch: _Batch, now: float) -> None:
        self.what = what
        self.calling = batch.hung_in or batch.calling or "an NVML call"
        self.stuck_s = now - batch.started
        super().__init__(
            f"{self.calling} for {what} has not returned for {self.stuck_s:.0f} s "
            "(a hung driver, e.g. after an Xid error)"
        )


class _Worker:
    """One daemon thread that runs batches in order.

    A worker whose batch hung is retired: it exits once that batch returns, and a fresh
    worker takes the next batches, so one stuck call never blocks the rest.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="rogue-watchdog-nvml", daemon=True).start()

    def submit(self, batch: _Batch) -> None:
        self._queue.put(batch)

    def retire(self) -> None:
        self._queue.put(None)

    def _loop(self) -> None:
        while (batch := self._queue.get()) is not None:
            try:
                batch.result = batch.fn(batch)
            except BaseException as exc:  # handed to the waiting caller
                batch.error = exc
            finally:
                batch.finished = time.monotonic()
                batch.done.set()


class _Runner:
    """Runs NVML batches off the caller's thread, under a hard timeout.

    At most one hung batch per key (``system``, ``GPU 0``...): while it is stuck the key
    is not called again (its callers get :class:`_Hung` at once), and no thread piles up.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._worker: _Worker | None = None
        self.stuck: dict[str, _Batch] = {}

    def run(self, key: str, fn: Callable[[_Batch], Any]) -> Any:
        now = time.monotonic()
        old = self.stuck.get(key)
        if old is not None:
            if not old.done.is_set():
                raise _Hung(key, old, now)
            del self.stuck[key]
            log.info(
                "nvml-call-returned", what=key, call=old.hung_in,
                after_s=round(old.finished - old.started, 1),
            )  # fmt: skip
        if self._worker is None:
            self._worker = _Worker()
        batch = _Batch(fn)
        batch.started = now
        self._worker.submit(batch)
        if not batch.done.wait(self.timeout_s):
            self._worker.retire()
            self._worker = None
            batch.hung_in = batch.calling
            self.stuck[key] = batch
            raise _Hung(key, batch, time.monotonic())
        if batch.error is not None:
            raise batch.error
        return batch.result


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


_SYMBOL_SUFFIX = {"v3": "_v3", "v2": "_v2", "v1": ""}


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
    Every NVML call runs on a worker thread under ``call_timeout_s`` (see :class:`_Runner`).
    """

    def __init__(self, library_path: str | None = None, call_timeout_s: float = 10.0) -> None:
        """Prepare a source; nothing is loaded until the first snapshot.

        Args:
            library_path: Path of the NVML shared library to load instead of pynvml's
                default ``libnvidia-ml.so.1`` (found through the dynamic loader's path).
            call_timeout_s: Seconds the calls for one GPU (or ``nvmlInit`` plus the
                device count) may take before they count as hung.
        """
        self._library_path = library_path
        self._initialized = False
        self._api: dict[ListKind, str] = {}
        self._runner = _Runner(call_timeout_s)
        # A missing library or unloaded driver is retried after INIT_RETRY_FIRST_S,
        # doubling up to INIT_RETRY_MAX_S: short blips cost one tick, while a host
        # without a driver does not pay dlopen + nvmlInit on every tick.
        self.retry_first_s = INIT_RETRY_FIRST_S
        self.retry_max_s = INIT_RETRY_MAX_S
        self.retry_after_s = 0.0
        self._retry_at: float | None = None
        self._down: tuple[float, str, int] | None = None  # since, last error, failures
        # Whole GPUs seen listed, UUID -> last index: one that drops out of the device
        # list is a blind spot (its processes cannot be seen), never "nothing running".
        self._seen_gpus: dict[str, int] = {}

    @property
    def seen_gpus(self) -> dict[str, int]:
        """The whole GPUs seen listed so far, UUID -> last index (a copy)."""
        return dict(self._seen_gpus)

    def remember_gpus(self, gpus: Mapping[str, int]) -> None:
        """Count ``gpus`` (UUID -> index) as seen listed before this source existed (a
        reload builds a new source; a restart reads them back): one of them missing from
        NVML's list is a blind GPU, not a GPU whose processes all ended.

        Args:
            gpus: UUID -> index of whole GPUs an earlier source saw.
        """
        for uuid, index in gpus.items():
            self._seen_gpus.setdefault(uuid, index)

    def close(self) -> None:
        """Call ``nvmlShutdown`` if this source initialised NVML; never raises or blocks
        longer than the call timeout."""
        if not self._initialized:
            return
        self._initialized = False

        def shutdown(batch: _Batch) -> None:
            with contextlib.suppress(pynvml.NVMLError):
                batch.call("nvmlShutdown", pynvml.nvmlShutdown)

        with contextlib.suppress(_Hung, Exception):
            self._runner.run("system", shutdown)

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
            (library missing, driver not loaded, device count unreadable, or those calls
            hung). Never raises, and never waits much longer than the call timeout per
            GPU: a hung GPU is skipped with a ``gpu-query-hung`` finding.
        """
        now = time.monotonic()
        if self._retry_at is not None and now < self._retry_at and self._down is not None:
            return NvmlSnapshot(available=False, error=self._down[1])
        try:
            driver, count = self._runner.run("system", self._system)
        except _Hung as exc:
            return NvmlSnapshot(
                available=False, error=f"NVML hung: {exc}", problems=[_hung(exc, None)]
            )
        except _Unavailable as exc:
            self._unavailable(now, str(exc), exc.back_off)
            return NvmlSnapshot(available=False, error=str(exc))
        except Exception as exc:  # a broken binding must not stop the OS-source scan
            self.close()
            return NvmlSnapshot(available=False, error=f"unexpected NVML failure: {exc!r}")
        self._recovered(now)
        snap = NvmlSnapshot(available=True, driver_version=driver)
        for index in range(count):
            try:
                part: NvmlSnapshot = self._runner.run(
                    f"GPU {index}",
                    functools.partial(self._collect_gpu, index=index, pid_max=pid_max),
                )
            except _Hung as exc:
                snap.problems.append(_hung(exc, index))
                snap.blind_gpus.append(index)
                continue
            except Exception as exc:  # a broken binding: this GPU only
                snap.problems.append(QueryFailed(index, f"GPU {index}", _describe(exc)))
                snap.blind_gpus.append(index)
                continue
            snap.gpus += part.gpus
            snap.processes += part.processes
            snap.problems += part.problems
            snap.blind_gpus += part.blind_gpus
        snap.process_api = {str(kind): version for kind, version in self._api.items()}
        self._vanished(snap)
        return snap

    def _vanished(self, snap: NvmlSnapshot) -> None:
        """A ``gpu-query-failed`` finding, and a blind GPU, for every whole GPU listed
        before that NVML no longer lists (fallen off the bus, reset, hidden by a
        driver blip): its processes are not seen, which is not the same as gone."""
        listed = {g.uuid: g.index for g in snap.gpus if g.mig_index is None}
        for uuid, index in sorted(self._seen_gpus.items(), key=lambda kv: kv[1]):
            if uuid in listed:
                continue
            # A GPU whose own query failed is that same event: one problem, not two.
            whole = (index, f"GPU {index}")
            failed = [
                p
                for p in snap.problems
                if isinstance(p, QueryFailed) and (p.gpu_index, p.subject) == whole
            ]
            for p in failed:
                snap.problems.remove(p)
            snap.problems.append(GpuVanished(index, uuid, failed[0].error if failed else None))
            if index not in snap.blind_gpus:
                snap.blind_gpus.append(index)
        self._seen_gpus.update(listed)

    def _unavailable(self, now: float, error: str, back_off: bool) -> None:
        since, _, failures = self._down or (now, error, 0)
        self._down = (since, error, failures + 1)
        if not back_off:
            self._retry_at = None
            return
        delay = self.retry_after_s * 2 if self.retry_after_s else self.retry_first_s
        self.retry_after_s = min(delay, self.retry_max_s)
        self._retry_at = now + self.retry_after_s

    def _recovered(self, now: float) -> None:
        if self._down is None:
            return
        since, error, failures = self._down
        log.info(
            "nvml-recovered", after_s=round(now - since, 1), failed_attempts=failures,
            last_error=error,
        )  # fmt: skip
        self._down = None
        self._retry_at = None
        self.retry_after_s = 0.0

    # -- initialisation -------------------------------------------------------------

    def _system(self, batch: _Batch) -> tuple[str | None, int]:
        """``nvmlInit`` when needed, the driver version and the device count (worker thread)."""
        self._init(batch)
        try:
            driver: str | None = batch.call(
                "nvmlSystemGetDriverVersion", _text, pynvml.nvmlSystemGetDriverVersion
            )
        except pynvml.NVMLError:
            driver = None
        try:
            count = int(batch.call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))
        except pynvml.NVMLError as exc:
            # Whole-system failure (driver gone, all GPUs lost): re-init next time.
            self._initialized = False
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            raise _Unavailable(
                f"nvmlDeviceGetCount failed: {_describe(exc)}", back_off=False
            ) from exc
        return driver, count

    def _init(self, batch: _Batch) -> None:
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
            batch.call("nvmlInit", pynvml.nvmlInit)
        except pynvml.NVMLError_LibraryNotFound as exc:
            raise _Unavailable(
                "NVML library not found: libnvidia-ml.so.1 could not be loaded"
            ) from exc
        except pynvml.NVMLError as exc:
            raise _Unavailable(f"nvmlInit failed: {_describe(exc)}") from exc
        self._initialized = True
        self._api = {}

    # -- collection -----------------------------------------------------------------

    def _collect_gpu(self, batch: _Batch, index: int, pid_max: int) -> NvmlSnapshot:
        """One GPU and its MIG devices, on the worker thread, into a fresh part-snapshot
        (a batch that hung is dropped whole; it never writes into the caller's)."""
        snap = NvmlSnapshot(available=True)
        label = f"GPU {index}"
        try:
            handle = batch.call(
                "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index
            )
            gpu = _Device(self._device_info(batch, handle, index, None), handle, label)
        except pynvml.NVMLError as exc:
            snap.problems.append(QueryFailed(index, label, _describe(exc)))
            snap.blind_gpus.append(index)
            return snap
        snap.gpus.append(gpu.info)
        migs = self._mig_devices(batch, gpu, snap)
        seen: set[int] = set()
        all_migs_listed = True
        for mig in migs or ():
            snap.gpus.append(mig.info)
            listed = self._list_device(batch, mig, pid_max, snap, seen)
            all_migs_listed = all_migs_listed and listed
        # With MIG on, the whole-GPU list is an aggregate that NVML gives only to
        # privileged callers; when every MIG device was listed it adds nothing hidden.
        quiet = migs is not None and all_migs_listed
        self._list_device(batch, gpu, pid_max, snap, seen, quiet_errors=quiet)
        return snap

    def _device_info(
        self, batch: _Batch, handle: Any, index: int, mig_index: int | None
    ) -> GpuInfo:
        uuid = batch.call("nvmlDeviceGetUUID", _text, pynvml.nvmlDeviceGetUUID, handle)
        try:
            name = batch.call("nvmlDeviceGetName", _text, pynvml.nvmlDeviceGetName, handle)
        except pynvml.NVMLError:
            name = "unknown"
        try:
            mem = batch.call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
            total: int | None = int(mem.total)
            used: int | None = int(mem.used)
        except pynvml.NVMLError:
            total = used = None
        return GpuInfo(index, uuid, name, total, used, mig_index)

    def _mig_devices(self, batch: _Batch, gpu: _Device, snap: NvmlSnapshot) -> list[_Device] | None:
        """MIG devices of a GPU, or None when MIG is off or not supported."""
        try:
            current, _pending = batch.call(
                "nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, gpu.handle
            )
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            return None
        except pynvml.NVMLError as exc:
            snap.problems.append(
                QueryFailed(gpu.info.index, f"MIG mode of {gpu.label}", _describe(exc))
            )
            return None
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            return None
        try:
            slots = int(
                batch.call(
                    "nvmlDeviceGetMaxMigDeviceCount",
                    pynvml.nvmlDeviceGetMaxMigDeviceCount,
                    gpu.handle,
                )
            )
        except pynvml.NVMLError as exc:
            snap.problems.append(
                QueryFailed(gpu.info.index, f"MIG devices of {gpu.label}", _describe(exc))
            )
            return None
        if slots > MAX_MIG_SLOTS:
            snap.problems.append(TooManyMigs(gpu.info, gpu.label, slots, MAX_MIG_SLOTS))
            slots = MAX_MIG_SLOTS
        out: list[_Device] = []
        for slot in range(slots):
            label = f"{gpu.label} MIG {slot}"
            try:
                handle = batch.call(
                    "nvmlDeviceGetMigDeviceHandleByIndex",
                    pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
                    gpu.handle,
                    slot,
                )
                info = self._device_info(batch, handle, gpu.info.index, slot)
            except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
                continue  # an empty slot: no MIG device configured there
            except pynvml.NVMLError as exc:
                snap.problems.append(QueryFailed(gpu.info.index, label, _describe(exc)))
                continue
            out.append(_Device(info, handle, label))
        return out

    def _list_device(
        self,
        batch: _Batch,
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
                raw = self._list(batch, kind, dev.handle)
            except (pynvml.NVMLError, _SymbolMissing) as exc:
                failures[kind] = _describe(exc)
                continue
            for entry in raw:
                bad = _bad_value(entry, pid_max, dev.info.memory_total_bytes)
                if bad is not None:
                    snap.problems.append(
                        ImpossibleEntry(
                            dev.info, dev.label, kind, entry.pid, entry.used_memory_bytes, bad
                        )
                    )
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
            snap.problems.append(ListsUnreadable(dev.info, dev.label, failures))
            if "compute" in failures and dev.info.index not in snap.blind_gpus:
                snap.blind_gpus.append(dev.info.index)
        return not failures

    def _list(self, batch: _Batch, kind: ListKind, handle: Any) -> list[RawProcess]:
        """One process list, trying ``_v3``, ``_v2`` then the unversioned symbol.

        The version that answered is remembered until the next ``nvmlInit``.
        """
        listers = _listers(kind)
        known = self._api.get(kind)
        versions = (known,) if known else _API_VERSIONS
        for version in versions:
            try:
                result: list[RawProcess] = batch.call(
                    _STEMS[kind] + _SYMBOL_SUFFIX[version], listers[version], handle
                )
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


def _hung(exc: _Hung, index: int | None) -> CallHung:
    return CallHung(index, exc.what, exc.calling, exc.stuck_s, str(exc))
