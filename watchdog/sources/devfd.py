"""Processes holding an NVIDIA device node open, found through ``/proc/PID/fd``.

NVML lists only processes with a CUDA context; an orphaned DataLoader worker that
inherited the device fd from a killed leader can hold the device without one. The fd
walk finds it. It costs a ``readlink`` per fd, so steady-state scans look only at new
processes, at known holders, and at everyone once per full sweep.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from .procfs import ProcessTable


class DeviceFdSource:
    """Finds device-node holders.

    Args:
        device_glob: fnmatch pattern for device paths, default ``/dev/nvidia[0-9]*``
            (``/dev/nvidiactl`` and ``/dev/nvidia-uvm`` are opened by every CUDA
            program but name no GPU). Tests point it at plain files.
        sweep_interval_s: Seconds between full sweeps of every process.
    """

    def __init__(self, device_glob: str, sweep_interval_s: float = 60.0) -> None:
        self.device_glob = device_glob
        self.sweep_interval_s = sweep_interval_s
        self._holders: dict[int, tuple[str, ...]] = {}
        self._last_sweep_s: float | None = None

    def holders(self, table: ProcessTable, now_s: float) -> dict[int, tuple[str, ...]]:
        """Map PID → device paths it holds open.

        Args:
            table: A refreshed process table; its ``new_pids`` are always inspected.
            now_s: Monotonic time in seconds, to pace full sweeps.

        Returns:
            Holders visible now; a PID that exited is dropped.
        """
        sweep = self._last_sweep_s is None or now_s - self._last_sweep_s >= self.sweep_interval_s
        if sweep:
            self._last_sweep_s = now_s
            candidates: Iterable[int] = list(table.procs)
        else:
            candidates = set(table.new_pids) | set(self._holders)
        found: dict[int, tuple[str, ...]] = {}
        for pid in candidates:
            proc = table.get(pid)
            if proc is None or proc.kernel_thread:
                continue
            devices = tuple(
                sorted({t for t in table.fd_targets(pid) if fnmatchcase(t, self.device_glob)})
            )
            if devices:
                found[pid] = devices
        self._holders = found
        return found
