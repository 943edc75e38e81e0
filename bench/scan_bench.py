"""Benchmark: CPU time of one steady-state scan cycle against `ps` and a naive psutil query.

Spawns N sleeping processes (default 2,000), then measures, in the same run and
interleaved so load changes hit all three alike:

* one steady-state ``Scanner.scan()`` cycle (process table warm; deep inspection only
  for new PIDs; NVML through whatever library is installed, usually none here),
* one run of ``ps -eo pid,ppid,user,args`` (CPU time of the child process),
* a naive psutil query of the same fields for every process,

and prints the median CPU seconds of each and the ratios. The aim (issue 2): a
steady-state cycle at or below 0.25x the ``ps`` run.

Usage: python bench/scan_bench.py [--procs 2000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil
from sleepers import sleepers  # bench/ is sys.path[0] for this script

from rogue_watchdog.config import Config
from rogue_watchdog.scan import Scanner


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure_ps() -> float:
    before = cpu_children()
    subprocess.run(["ps", "-eo", "pid,ppid,user,args"], stdout=subprocess.DEVNULL, check=True)
    return cpu_children() - before


def measure_psutil() -> float:
    before = cpu_self()
    rows = []
    for p in psutil.process_iter(["pid", "ppid", "username", "cmdline"]):
        rows.append(p.info)
    return cpu_self() - before


def measure_scan(scanner: Scanner) -> float:
    before = cpu_self()
    scanner.scan()
    return cpu_self() - before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()

    with sleepers(args.procs, 600):
        nproc = len(os.listdir("/proc"))
        scanner = Scanner(Config())
        first_before = cpu_self()
        scanner.scan()  # first cycle: deep inspection of every process
        first = cpu_self() - first_before
        scanner.scan()
        scans, pss, psus = [], [], []
        for _ in range(args.rounds):
            scans.append(measure_scan(scanner))
            pss.append(measure_ps())
            psus.append(measure_psutil())
        s, p, u = statistics.median(scans), statistics.median(pss), statistics.median(psus)
        print(f"processes visible: ~{nproc} entries in /proc ({args.procs} sleepers spawned)")
        print(f"first (cold) scan cycle CPU:     {first * 1000:8.2f} ms")
        print(f"steady-state scan cycle CPU:     {s * 1000:8.2f} ms (median of {args.rounds})")
        print(f"ps -eo pid,ppid,user,args CPU:   {p * 1000:8.2f} ms")
        print(f"naive psutil full query CPU:     {u * 1000:8.2f} ms")
        print(f"ratio scan/ps:                   {s / p:8.3f}x  (aim <= 0.25x)")
        print(f"ratio scan/psutil:               {s / u:8.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
