"""Processes holding an NVIDIA device node open, found through ``/proc/PID/fd``.

NVML lists only processes with a CUDA context; an orphaned DataLoader worker that
inherited the device fd from a killed leader can hold the device without one. The fd
walk finds it. It costs a ``readlink`` per fd, so steady-state scans look only at new
processes, at known holders, and at everyone once per full sweep.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
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

    def holders(
        self,
        table: ProcessTable,
        now_s: float,
        seeds: Collection[int] | None = None,
        *,
        sweep: bool = True,
    ) -> dict[int, tuple[str, ...]]:
        """Map PID → device paths it holds open.

        Args:
            table: A refreshed process table; its ``new_pids`` are always inspected.
            now_s: Monotonic time in seconds, to pace full sweeps.
            seeds: Inspect only the family lines of these GPU candidates (the one-shot
                scan while NVML sees every GPU): the seeds, their ancestors and
                descendants (:func:`related`), and the descendants of any ancestor found
                holding a device (its job's members). This is no sweep: the next call
                without ``seeds`` that is due sweeps.
            sweep: False never starts a full sweep (the daemon's exec path: one is left
                to the next whole tick, whose picture it joins); new processes and known
                holders are inspected as always.

        Returns:
            Holders visible now; a PID that exited is dropped.
        """
        if seeds is not None:
            looked = related(table, seeds)
            found = self._inspect(table, looked)
            # An ancestor holding a device is a trainer and roots a job: its other
            # descendants are that job's members, whose devices the job lists.
            more = {d for pid in found for d in table.descendants(pid)} - looked
            found.update(self._inspect(table, more))
            self._holders = found
            return found
        due = self._last_sweep_s is None or now_s - self._last_sweep_s >= self.sweep_interval_s
        if due and sweep:
            self._last_sweep_s = now_s
            candidates: Iterable[int] = list(table.procs)
        else:
            candidates = set(table.new_pids) | set(self._holders)
        self._holders = self._inspect(table, candidates)
        return self._holders

    def _inspect(self, table: ProcessTable, pids: Iterable[int]) -> dict[int, tuple[str, ...]]:
        """PID → devices held, for those of ``pids`` that hold any."""
        found: dict[int, tuple[str, ...]] = {}
        for pid in pids:
            proc = table.get(pid)
            if proc is None or proc.kernel_thread:
                continue
            devices = tuple(
                sorted({t for t in table.fd_targets(pid) if fnmatchcase(t, self.device_glob)})
            )
            if devices:
                found[pid] = devices
        return found


def related(table: ProcessTable, seeds: Iterable[int]) -> set[int]:
    """``seeds``, their ancestors and their descendants in ``table``: the processes
    whose device fds can change what a scan says about the jobs of ``seeds`` (a holder
    among them is a member of a seed's job, or a trainer above it that roots the job).

    Args:
        table: A refreshed process table.
        seeds: PIDs already known to be GPU candidates (NVML-listed, a launcher's
            command line, CUDA libraries mapped).

    Returns:
        The PIDs; seeds the table lacks are left out.
    """
    out: set[int] = set()
    for pid in set(seeds):
        if table.get(pid) is None:
            continue
        out.update(p.pid for p in table.ancestors(pid))
        out.update(table.descendants(pid))
    return out
