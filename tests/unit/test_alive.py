"""One liveness check (issue 30): "the same PID, the same start time, not a zombie".

The scan's table (:meth:`ProcessTable.alive`, as of its last refresh) and the live read
of the hands (:func:`alive_now`) answer it through one function,
:func:`~rogue_watchdog.sources.procfs.is_alive`; a zombie, a reused PID and a vanished
PID are each not alive, in both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rogue_watchdog.sources.procfs import ProcessTable, alive_now, is_alive
from tests.fixtures.proc.fakeproc import FakeProc, write_tree

START = 100


def _tree(root: Path) -> None:
    write_tree(
        root,
        [
            FakeProc(1, 0, ["/sbin/init"]),
            FakeProc(10, 1, ["/usr/bin/python3", "train.py"], start=START),
            FakeProc(11, 1, ["/usr/bin/python3", "done.py"], start=START),
        ],
    )
    stat = root / "11" / "stat"
    stat.write_text(stat.read_text().replace(") S ", ") Z ", 1))


CASES = [
    pytest.param((10, START), True, id="running"),
    pytest.param((11, START), False, id="zombie"),
    pytest.param((10, START + 1), False, id="reused-pid"),
    pytest.param((12, START), False, id="vanished-pid"),
]


@pytest.mark.parametrize(("identity", "want"), CASES)
def test_the_table_and_the_live_read_agree(
    tmp_path: Path, identity: tuple[int, int], want: bool
) -> None:
    _tree(tmp_path)
    table = ProcessTable(str(tmp_path))
    table.refresh()
    assert table.alive(identity) is want
    assert alive_now(identity, str(tmp_path)) is want


def test_is_alive_is_the_one_rule() -> None:
    from rogue_watchdog.model import Proc

    proc = Proc(pid=10, ppid=1, comm="python3", state="S", start_ticks=START)
    assert is_alive(proc, START)
    assert not is_alive(proc, START + 1)
    assert not is_alive(None, START)
    zombie = Proc(pid=10, ppid=1, comm="python3", state="Z", start_ticks=START)
    assert not is_alive(zombie, START)
