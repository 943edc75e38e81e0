"""Benchmark: a catastrophic configured regex against a hostile command line, RE2 (what the
product uses, :class:`rogue_watchdog.config.base.Regex`) beside Python's ``re`` (what it used).

The pattern is ``(a+)+$``, the case of docs/config.md; the command line is
``python3 train.py`` followed by N ``a`` and a ``!``, which any user can start. Python's
``re`` backtracks through 2^N ways to split the run of ``a``: each extra ``a`` doubles the
time. Each ``re`` search runs in a child process killed after ``--limit-s`` seconds, so the
benchmark itself never stalls.

Printed per N: seconds for one search with RE2 (the median of 200) and with ``re`` (or
``> limit`` when it was killed), and the ratio.

Usage: python bench/regex_bench.py [--lengths 16,20,22,24,26,30,1000,100000] [--limit-s 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from rogue_watchdog.config.base import Regex

PATTERN = "(a+)+$"
_CHILD = (
    "import re, sys, time\n"
    "p = re.compile(sys.argv[1]); text = sys.argv[2]\n"
    "t = time.perf_counter(); m = p.search(text); print(time.perf_counter() - t, bool(m))\n"
)


def command_line(n: int) -> str:
    return "python3 train.py " + "a" * n + "!"


def re2_seconds(n: int) -> tuple[float, bool]:
    rx = Regex(PATTERN)
    text = command_line(n)
    times = []
    found = False
    for _ in range(200):
        t = time.perf_counter()
        found = rx.search(text) is not None
        times.append(time.perf_counter() - t)
    return statistics.median(times), found


def re_seconds(n: int, limit_s: float) -> tuple[float | None, bool | None]:
    try:
        res = subprocess.run(
            [sys.executable, "-c", _CHILD, PATTERN, command_line(n)],
            capture_output=True, text=True, timeout=limit_s, check=True,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, None
    seconds, found = res.stdout.split()
    return float(seconds), found == "True"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="16,20,22,24,26,30,1000,100000")
    ap.add_argument("--limit-s", type=float, default=20.0)
    args = ap.parse_args()
    print(f"pattern {PATTERN!r}; command line 'python3 train.py ' + N*'a' + '!'")
    print(f"{'N':>7} {'RE2 s':>12} {'re s':>12} {'re / RE2':>10}  match (RE2, re)")
    stalled = False
    for n in (int(x) for x in args.lengths.split(",")):
        fast, found = re2_seconds(n)
        if stalled:  # longer inputs only take longer: do not wait for them again
            slow, slow_found = None, None
        else:
            slow, slow_found = re_seconds(n, args.limit_s)
            stalled = slow is None
        slow_text = f"> {args.limit_s:g}" if slow is None else f"{slow:.6f}"
        ratio = "" if slow is None else f"{slow / fast:,.0f}x"
        print(f"{n:>7} {fast:>12.7f} {slow_text:>12} {ratio:>10}  {found}, {slow_found}")


if __name__ == "__main__":
    main()
