"""The blind window after a long tick (issue 32, case 3)."""

from __future__ import annotations

from watchdog.daemon.loop import EARLY_TICK_MIN_GAP_S, early_tick_spacing_s


def test_time_spent_acting_does_not_space_the_next_early_tick() -> None:
    # A tick of 61 s, 60 of them a terminate waiting out its grace: before, the next
    # early tick came 122 s after the tick began (61 s after it ended); now 2 s after
    # it began, i.e. at once.
    assert early_tick_spacing_s(61.0, 60.0) == 2.0
    assert early_tick_spacing_s(1.0, 0.0) == 2.0  # a scan's own cost still counts
    assert early_tick_spacing_s(60.0, 60.0) == EARLY_TICK_MIN_GAP_S
