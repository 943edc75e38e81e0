"""The daemon keeps the slurmstepd substring filter between ticks while no record of the
process table was read again (issue 34): every change that can alter the filter's
answer (a process added, gone, or read again after an exec) moves ``reads_changed``."""

from __future__ import annotations

import shutil
from pathlib import Path

from rogue_watchdog.lineage.slurm import stepd_candidates
from rogue_watchdog.sources.procfs import ProcessTable
from tests.unit.test_procfs import write_proc


def test_reads_changed_moves_whenever_the_slurmstepd_filter_may_answer_otherwise(
    tmp_path: Path,
) -> None:
    write_proc(tmp_path, 1, ppid=0, start=1, comm="init", argv=["/sbin/init"])
    write_proc(tmp_path, 20, ppid=1, start=50, comm="bash", argv=["bash"])
    table = ProcessTable(str(tmp_path))
    table.refresh()
    kept = table.reads_changed
    assert stepd_candidates(table) == []
    table.refresh()  # nothing changed: the kept answer holds
    assert table.reads_changed == kept

    write_proc(tmp_path, 30, ppid=1, start=70, comm="slurmstepd", argv=["slurmstepd: [1.batch]"])
    table.refresh()
    assert table.reads_changed != kept
    assert stepd_candidates(table) == [30]

    # An exec that keeps comm and the stat line: only the event's re-read sees it.
    kept = table.reads_changed
    (tmp_path / "20" / "cmdline").write_bytes(b"/usr/sbin/slurmstepd\0")
    table.reinspect([20])
    table.refresh()
    assert table.reads_changed != kept
    assert stepd_candidates(table) == [20, 30]

    kept = table.reads_changed
    shutil.rmtree(tmp_path / "30")
    table.refresh()
    assert table.reads_changed != kept
    assert stepd_candidates(table) == [20]
