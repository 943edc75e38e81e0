"""Benchmark: the memory a storage outage keeps, and the outage file, at the bound.

Drives :class:`~rogue_watchdog.daemon.unstored.UnstoredFindings` directly (a state
database made to refuse writes with ``PRAGMA query_only``, as tests/unit/test_unstored.py
does) through N runs, one after another, three running at each tick, each paged at its
first sighting and resolved when gone: the churn of a probe loop during a long outage.
The findings are shaped as the scan makes them (a ``root``, a fingerprint, a GPU, a
command line of about 120 characters), without processes.

Printed: the findings kept, the bytes Python holds for them (``tracemalloc``, the
delivered alerts drained as the delivery worker would), and, with every kept finding
open and paged (the largest file the bound allows), ``outage.json``'s size and the time
one write takes (median of 20, tmpfs or not: the directory given).

Usage: python bench/outage_memory.py [--runs 5000] [--dir /dev/shm] [--no-cap]
       --no-cap: the memory as it was before the bound (MAX_FINDINGS, MAX_RUNS lifted).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from rogue_watchdog.config import parse_config
from rogue_watchdog.daemon import unstored
from rogue_watchdog.daemon.outagefile import write_outage
from rogue_watchdog.daemon.unstored import UnstoredFindings
from rogue_watchdog.model import Finding
from rogue_watchdog.state import StateDB

T0 = 2_000_000.0


def rogue(i: int) -> Finding:
    """Run ``i``'s finding, with a command line and GPU as a real one has."""
    pid = 10_000 + i
    details: dict[str, Any] = {
        "root": [pid, 500_000 + i],
        "fingerprint": f"{i:016x}",
        "gpus": [{"index": i % 8, "uuid": f"GPU-{i % 8:08d}-0000-0000-0000-000000000000"}],
        "user": "alice",
    }
    cmd = f"/usr/bin/python3 /home/alice/probe/train_probe.py --seed {i} --epochs 1 --out /tmp/p"
    return Finding("rogue-job", "high", f"rogue training job PID {pid}, `{cmd}`", pid, details)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5000)
    ap.add_argument("--dir", default=None, help="where to write outage.json (default: a temp dir)")
    ap.add_argument("--no-cap", action="store_true", help="lift the bound (before)")
    args = ap.parse_args()
    if args.no_cap:
        unstored.MAX_FINDINGS = unstored.MAX_RUNS = 1 << 62
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config(
            f"alerts:\n  settle_s: 0\n  sinks: [{{type: log, path: '{tmp}/a.log'}}]\n", "t.yaml"
        )
        db = StateDB(f"{tmp}/state")
        db.conn.execute("PRAGMA query_only=ON")
        tracemalloc.start()
        u = UnstoredFindings()
        base = tracemalloc.get_traced_memory()[0]
        for t in range(args.runs):
            found = [rogue(i) for i in range(max(0, t - 2), t + 1)]
            u.track(db, [], found, T0 + t, signature=lambda _j: "", alerts=cfg.alerts,
                    host="h", blind=False)  # fmt: skip
            for d in u.spool.rows():
                u.spool.done(d.id)  # sent, as the delivery worker does
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        kept = len(u.open) + len(u.resolved)
        print(f"runs {args.runs}, cap {unstored.MAX_FINDINGS}: kept {kept} findings, dropped "
              f"{u.dropped.findings}; memory held {held / 1e6:.2f} MB "
              f"({held / max(kept, 1):.0f} B a finding)")  # fmt: skip
        # The largest file the bound allows: every kept finding open and paged.
        paged = [dataclasses.replace(r, resolved_at=None, last_alert_at=T0) for r in u.resolved]
        account = u.account(paged)
        where = Path(args.dir or tmp)
        path = str(where / "outage.json")
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            write_outage(path, account, "boot")
            times.append(time.perf_counter() - t0)
        size = Path(path).stat().st_size
        Path(path).unlink()
        print(f"outage.json with {len(paged)} paged findings: {size / 1e6:.2f} MB "
              f"({size / max(len(paged), 1):.0f} B a finding), write median "
              f"{statistics.median(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms "
              f"({where})")  # fmt: skip
        db.close()


if __name__ == "__main__":
    main()
