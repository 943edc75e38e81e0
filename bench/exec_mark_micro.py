"""exec_mark per stat line: the mark before (fields 26-28, ints) against the one now
(fields 26-28 and 45-51, bytes). ``nice -n 5 python bench/exec_mark_micro.py``; reads
this process's own stat line. Prints microseconds per call, best of 5 x 200,000."""

from __future__ import annotations

import os
import timeit
from collections.abc import Callable
from pathlib import Path

from rogue_watchdog.sources.procfs import exec_mark


def _before(text: bytes) -> int | None:
    rest = text[text.rfind(b")") + 2 :].split(None, 26)
    start_code, end_code, start_stack = int(rest[23]), int(rest[24]), int(rest[25])
    return start_code ^ (end_code << 1) ^ (start_stack << 2)


def main() -> None:
    """Time both marks on this process's stat line."""
    raw = Path(f"/proc/{os.getpid()}/stat").read_bytes()
    marks: tuple[tuple[str, Callable[[bytes], int | None]], ...] = (
        ("before", _before),
        ("now", exec_mark),
    )
    n = 200_000
    for name, mark in marks:
        best = min(timeit.repeat(lambda mark=mark: mark(raw), number=n, repeat=5))
        print(f"{name}: {best / n * 1e6:.3f} us/call")


if __name__ == "__main__":
    main()
