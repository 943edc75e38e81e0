"""Progress bar: only on a TTY for large inputs, one line, closed once."""

from __future__ import annotations

import io

from rogue_watchdog.weights.progress import MIN_BYTES, ProgressBar


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_wanted_only_on_tty_for_large_inputs() -> None:
    assert ProgressBar.wanted(MIN_BYTES, FakeTTY())
    assert not ProgressBar.wanted(MIN_BYTES - 1, FakeTTY())
    assert not ProgressBar.wanted(MIN_BYTES, io.StringIO())
    assert not ProgressBar.wanted(MIN_BYTES, FakeTTY(), enabled=False)


def test_draws_percentage_and_ends_line_once() -> None:
    out = FakeTTY()
    bar = ProgressBar(4 << 20, out)
    bar.update(4 << 20)
    assert out.getvalue().endswith("100% 4/4 MiB")
    bar.close()
    bar.close()
    bar.update(1)
    assert out.getvalue().count("\n") == 1 and out.getvalue().endswith("\n")
