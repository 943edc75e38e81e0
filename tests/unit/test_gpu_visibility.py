"""Policy for NVML PIDs missing from /proc: transient, invisible, or a PID namespace.

These exercise the policy function with a plain Python GPU source standing in for the
second NVML look; NVML itself is covered through the fake library in test_scan_gpu.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.unit.test_procfs import write_proc
from watchdog.model import GpuProcess
from watchdog.policy.findings import gpu_visibility_findings
from watchdog.sources.procfs import ProcessTable


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


def test_process_gone_on_the_second_look_is_transient(tmp_path: Path) -> None:
    source = SecondLook(processes=[entry(50)])  # PID 77 exited between the two looks
    visible, findings = gpu_visibility_findings(
        table(tmp_path), [entry(50), entry(77)], source, str(tmp_path)
    )
    assert [g.pid for g in visible] == [50]
    assert findings == []
    assert source.asked == 1


def test_still_listed_but_not_in_proc_is_invisible(tmp_path: Path) -> None:
    source = SecondLook(processes=[entry(50), entry(77)])
    _, findings = gpu_visibility_findings(
        table(tmp_path), [entry(50), entry(77)], source, str(tmp_path)
    )
    assert [(f.kind, f.details["pid"]) for f in findings] == [("gpu-pid-invisible", 77)]


def test_nothing_missing_never_asks_nvml_again(tmp_path: Path) -> None:
    source = SecondLook()
    visible, findings = gpu_visibility_findings(table(tmp_path), [entry(50)], source, str(tmp_path))
    assert ([g.pid for g in visible], findings, source.asked) == ([50], [], 0)
