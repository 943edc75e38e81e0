"""Low-level NVML access that nvidia-ml-py does not offer: library loading from a path and
the v1 process listing.

nvidia-ml-py (``pynvml``) wires its unversioned ``nvmlDevice*RunningProcesses`` wrappers
to the ``_v3`` symbols, so on a driver that only exports the unversioned (v1) symbols there
is no pynvml call that works. :func:`list_processes_v1` calls those symbols through pynvml's
own symbol lookup (``_nvmlGetFunctionPointer``, so its library handle and error classes are
used) with the 16-byte ``nvmlProcessInfo_v1_t`` of nvml.h.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import pynvml

# nvml.h: #define NVML_VALUE_NOT_AVAILABLE (-1), stored in an unsigned long long field.
VALUE_NOT_AVAILABLE = 0xFFFF_FFFF_FFFF_FFFF


class ProcessInfoV1(ctypes.Structure):
    """``nvmlProcessInfo_v1_t`` of nvml.h: ``{unsigned int pid; unsigned long long
    usedGpuMemory;}``, 16 bytes with 4 bytes of padding after ``pid`` on x86-64."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


@dataclass(frozen=True, slots=True)  # slots: one per listed process per tick, no dict each
class RawProcess:
    """One entry of a running-process list, before any sanity check.

    Attributes:
        pid: PID as the driver reported it (u32).
        used_memory_bytes: GPU memory in bytes; None for ``NVML_VALUE_NOT_AVAILABLE``.
    """

    pid: int
    used_memory_bytes: int | None


def memory_or_none(value: int | None) -> int | None:
    """Map ``NVML_VALUE_NOT_AVAILABLE`` (and pynvml's None for it) to None.

    Args:
        value: ``usedGpuMemory`` as read from a struct or from pynvml.

    Returns:
        The byte count, or None when the driver did not know it.
    """
    if value is None or value == VALUE_NOT_AVAILABLE:
        return None
    return int(value)


def list_processes_v1(handle: object, symbol: str) -> list[RawProcess]:
    """Call an unversioned ``nvmlDevice*RunningProcesses`` symbol with v1 structs.

    Follows the two-call protocol of nvml.h: a first call with ``*infoCount == 0`` and a
    NULL array returns ``NVML_SUCCESS`` when nothing runs, or
    ``NVML_ERROR_INSUFFICIENT_SIZE`` with the needed count in ``*infoCount``.

    Args:
        handle: A pynvml device handle (``c_nvmlDevice_t``).
        symbol: e.g. ``nvmlDeviceGetComputeRunningProcesses``.

    Returns:
        The entries, in driver order.

    Raises:
        pynvml.NVMLError: The symbol is missing (``NVMLError_FunctionNotFound``), the
            library is not loaded (``NVMLError_Uninitialized``) or the driver refused.
    """
    fn = pynvml._nvmlGetFunctionPointer(symbol)
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    if ret == pynvml.NVML_SUCCESS:
        return []
    if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
        raise pynvml.NVMLError(ret)
    # Room for processes that start between the two calls, as pynvml does.
    count.value = count.value * 2 + 5
    array = (ProcessInfoV1 * count.value)()
    ret = fn(handle, ctypes.byref(count), array)
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return [
        RawProcess(int(array[i].pid), memory_or_none(int(array[i].usedGpuMemory)))
        for i in range(count.value)
    ]


def load_library(path: str) -> None:
    """Make pynvml use the shared library at ``path`` for its next ``nvmlInit``.

    pynvml keeps the loaded library in its module global ``nvmlLib`` and loads
    ``libnvidia-ml.so.1`` only while that is None; setting it first is the documented way
    to point pynvml elsewhere. A different library already loaded is replaced only while
    no ``nvmlInit`` is outstanding, and pynvml's symbol cache is emptied with it.

    Args:
        path: Path of an NVML-compatible shared library.

    Raises:
        OSError: ``dlopen`` failed (missing file, wrong architecture...).
        RuntimeError: Another NVML library is initialised in this process.
    """
    with pynvml.libLoadLock:
        current = pynvml.nvmlLib
        if current is not None and getattr(current, "_name", None) == path:
            return
        if current is not None and pynvml._nvmlLib_refcount > 0:
            raise RuntimeError(
                f"another NVML library ({getattr(current, '_name', '?')}) is in use in this process"
            )
        lib = ctypes.CDLL(path)
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
