"""Policy for NVML PIDs missing from /proc: transient, invisible, or a PID namespace.

These exercise the policy (which reads nothing) and the scan's second look
(``still_hidden``) with a plain Python GPU source standing in for NVML; NVML itself is
covered through the fake library in test_scan_gpu.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rogue_watchdog.model import Finding, GpuProcess
from rogue_watchdog.policy.findings import gpu_visibility_findings, missing_gpu_processes
from rogue_watchdog.scan import still_hidden
from rogue_watchdog.sources.procfs import ProcessTable
from tests.unit.test_procfs import write_proc


@dataclass
class SecondLook:
    """What NVML lists when asked again."""

    processes: list[GpuProcess] = field(default_factory=list)
    asked: int = 0

    def snapshot(self, pid_max: int) -> SecondLook:
        self.asked += 1
        return self


def entry(pid: int) -> GpuProcess:
    return GpuProcess(pid, "GPU-a", 0, 1024, "compute")


def table(tmp_path: Path) -> ProcessTable:
    write_proc(tmp_path, 1, ppid=0, start=1, comm="init", argv=["/sbin/init"])
    write_proc(tmp_path, 50, ppid=1, start=9, comm="python3", argv=["python3", "x.py"])
    t = ProcessTable(str(tmp_path))
    t.refresh()
    return t


def visibility(
    t: ProcessTable, entries: list[GpuProcess], source: SecondLook | None, root: str
) -> tuple[list[GpuProcess], list[Finding]]:
    """What the scan does: the missing entries, its second look, then the policy."""
    hidden = still_hidden(missing_gpu_processes(t, entries), source, root, t.pid_max())  # type: ignore[arg-type]
    return gpu_visibility_findings(t, entries, hidden)


def test_process_gone_on_the_second_look_is_transient(tmp_path: Path) -> None:
    source = SecondLook(processes=[entry(50)])  # PID 77 exited between the two looks
    visible, findings = visibility(table(tmp_path), [entry(50), entry(77)], source, str(tmp_path))
    assert [g.pid for g in visible] == [50]
    assert findings == []
    assert source.asked == 1


def test_still_listed_but_not_in_proc_is_invisible(tmp_path: Path) -> None:
    source = SecondLook(processes=[entry(50), entry(77)])
    _, findings = visibility(table(tmp_path), [entry(50), entry(77)], source, str(tmp_path))
    assert [(f.kind, f.details["pid"]) for f in findings] == [("gpu-pid-invisible", 77)]


def test_nothing_missing_never_asks_nvml_again(tmp_path: Path) -> None:
    source = SecondLook()
    visible, findings = visibility(table(tmp_path), [entry(50)], source, str(tmp_path))
    assert ([g.pid for g in visible], findings, source.asked) == ([50], [], 0)


def test_the_policy_reads_nothing(tmp_path: Path) -> None:
    """The policy took the NVML source and re-read /proc itself (issue: policy does I/O);
    now it is given what the second look found, and reports exactly that."""
    t = table(tmp_path)
    assert missing_gpu_processes(t, [entry(1), entry(50), entry(77)]) == [entry(77)]
    _, findings = gpu_visibility_findings(t, [entry(50), entry(77)], [entry(77)])
    assert [(f.kind, f.details["pid"]) for f in findings] == [("gpu-pid-invisible", 77)]
    _, findings = gpu_visibility_findings(t, [entry(50), entry(77)], [])
    assert findings == []
