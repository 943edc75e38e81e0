"""Finding ids on a first day: F1 first, no number skipped.

A fresh user's first day reported its first finding as F2 ("finding ids skip numbers").
No id is given out without its row on a plain first day, nor when the state database
refuses writes at start and takes them again (the ids paged from memory are stored
under themselves, and the database goes on after them). The gap that user saw was, as
far as could be told, a finding filed about another user's run on the shared host that
ended before any page (``status`` lists those apart while open; none is paged), not a
number skipped. Ids are skipped only where the never-reused guarantee
needs it: one paged from memory and never stored (dropped by the memory's bound, or
resolved before a restart: tests/unit/test_outage_bound.py, test_outage_restart.py).
"""

from __future__ import annotations

from pathlib import Path

from rogue_watchdog.daemon.loop import Daemon
from tests.conftest import Spawned
from tests.unit.test_outage_restart import T0, full, rogue, start


def _ids(d: Daemon) -> list[tuple[int, str]]:
    rows = d.db.conn.execute("SELECT id, kind FROM findings ORDER BY id")
    return [(int(i), str(k)) for i, k in rows]


def test_a_first_day_numbers_its_findings_from_f1(spawned: Spawned, tmp_path: Path) -> None:
    d, _w = start(tmp_path, full=False, outage_file=None)
    d.tick(T0)
    first = rogue(spawned, tmp_path, "a")
    d.tick(T0 + 5)
    second = rogue(spawned, tmp_path, "b")
    d.tick(T0 + 10)
    ids = [i for i, _k in _ids(d)]
    # The host's other jobs are filed too: every id from 1 up is a row, none skipped.
    assert ids == list(range(1, len(ids) + 1)), _ids(d)
    assert {first, second} <= {f.root_pid for f in d.db.open_findings()}
    assert d.db.next_finding_id() == len(ids) + 1
    d.db.close()


def test_a_start_during_an_outage_skips_no_id_once_writes_come_back(
    spawned: Spawned, tmp_path: Path
) -> None:
    d, _w = start(tmp_path, full=True, outage_file=None)
    rogue(spawned, tmp_path, "a")
    d.tick(T0)  # kept in memory, paged from there
    full(d, False)
    d.tick(T0 + 5)  # stored under the ids they were paged with
    rogue(spawned, tmp_path, "b")
    d.tick(T0 + 10)
    ids = [i for i, _k in _ids(d)]
    assert ids == list(range(1, len(ids) + 1)), _ids(d)
    assert d.db.next_finding_id() == len(ids) + 1
    d.db.close()
