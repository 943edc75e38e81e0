"""The daemon keeps the slurmstepd substring filter between ticks and tests again only
the records read since (issue 34): every change that can alter the filter's answer (a
process added, gone, or read again after an exec) is named by ``read_since``, and the
answer kept so equals the filter over every record."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rogue_watchdog.lineage.slurm import stepd_candidates
from rogue_watchdog.sources import procfs
from rogue_watchdog.sources.procfs import ProcessTable
from tests.unit.test_procfs import write_proc


class Kept:
    """The daemon's rule (Daemon._record_slurm_members), beside the table."""

    def __init__(self, table: ProcessTable) -> None:
        self.table = table
        self.mark = table.reads_changed
        self.maybe = set(stepd_candidates(table))
        self.whole = 0

    def update(self) -> set[int]:
        since = self.table.read_since(self.mark)
        if since is None:
            self.whole += 1
            self.maybe = set(stepd_candidates(self.table))
        else:
            self.maybe = (self.maybe - since) | set(stepd_candidates(self.table, since))
        self.mark = self.table.reads_changed
        return self.maybe


def test_the_kept_slurmstepd_filter_equals_the_whole_one_after_every_change(
    tmp_path: Path,
) -> None:
    write_proc(tmp_path, 1, ppid=0, start=1, comm="init", argv=["/sbin/init"])
    write_proc(tmp_path, 20, ppid=1, start=50, comm="bash", argv=["bash"])
    table = ProcessTable(str(tmp_path))
    table.refresh()
    kept = Kept(table)
    mark = table.reads_changed
    table.refresh()  # nothing changed: nothing to test again
    assert table.read_since(mark) == set()
    assert kept.update() == set(stepd_candidates(table)) == set()

    write_proc(tmp_path, 30, ppid=1, start=70, comm="slurmstepd", argv=["slurmstepd: [1.batch]"])
    table.refresh()
    assert kept.update() == set(stepd_candidates(table)) == {30}

    # An exec that keeps comm and the stat line: only the event's re-read sees it.
    (tmp_path / "20" / "cmdline").write_bytes(b"/usr/sbin/slurmstepd\0")
    table.reinspect([20])
    table.refresh()
    assert kept.update() == set(stepd_candidates(table)) == {20, 30}

    shutil.rmtree(tmp_path / "30")
    table.refresh()
    assert kept.update() == set(stepd_candidates(table)) == {20}
    assert kept.whole == 0


def test_more_changes_than_the_log_holds_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(procfs, "READ_LOG_MAX", 2)
    write_proc(tmp_path, 1, ppid=0, start=1, comm="init", argv=["/sbin/init"])
    table = ProcessTable(str(tmp_path))
    table.refresh()
    mark = table.reads_changed
    for pid in (40, 41, 42):
        write_proc(tmp_path, pid, ppid=1, start=pid, comm="slurmstepd", argv=["slurmstepd"])
    table.refresh()
    assert table.read_since(mark) is None
    kept = Kept(table)
    assert kept.maybe == {40, 41, 42}
