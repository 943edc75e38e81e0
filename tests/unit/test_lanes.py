"""Every system test file runs in CI: in exactly one lane, or among the actors."""

from __future__ import annotations

from collections import Counter

from tests.system.lanes import ACTORS, HERE, LANES


def test_every_system_test_file_is_in_exactly_one_lane_or_among_the_actors() -> None:
    listed = Counter([*ACTORS, *(f for files in LANES.values() for f in files)])
    on_disk = {p.name for p in HERE.glob("test_*.py")}
    assert sorted(set(listed) ^ on_disk) == []  # none forgotten, none stale
    assert [f for f, n in listed.items() if n > 1] == []
