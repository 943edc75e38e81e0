"""Benchmark: the state database over a simulated month of churn, with and without
retention.

Drives the real :class:`~rogue_watchdog.daemon.tracker.Tracker` and
:class:`~rogue_watchdog.state.StateDB` (temp state dir) with synthetic jobs: a few
long-lived rogue jobs that stay all month, and a stream of short rogue jobs (each its own
command line, so each a new job signature and a new finding) that live one to three ticks.
Every tick spools open/resolve alerts for two sinks; a stand-in for the delivery worker
marks every due alert delivered (as a healthy receiver would), and retention
(``StateDB.prune`` with the ``daemon.retention_*_s`` windows) runs every 300 s of
simulated time, as the daemon does.

Printed per simulated day: the database size (``state.db`` + WAL), rows per table, and
the median time (ms) of each query the daemon runs every tick or on every status/scrape:

- ``open``: open findings (tracker, metrics), ``present``: jobs present (tracker),
- ``pending``: a sink's queued alerts (delivery worker), ``spool``: per-sink counts
  (metrics), ``health``: delivery health (status),
- ``old-spool`` / ``old-pending``: the same two as the previous schema ran them (a
  GROUP BY over every delivery; a scan for the queue), for comparison.

Aim: flat figures once the retention windows are full (7 days by default); without
retention size and the old queries grow with history.

Usage: python bench/state_retention_bench.py [--days 30] [--tick-s 60]
           [--churn-per-h 300] [--retention-days 7] [--no-retention] [--both]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rogue_watchdog.config.alerts import AlertSettings, SinkSettings
from rogue_watchdog.daemon.metrics import spool_counts
from rogue_watchdog.daemon.tracker import Tracker
from rogue_watchdog.model import Job, Origin
from rogue_watchdog.policy.findings import job_findings
from rogue_watchdog.state import StateDB

SINKS = ("hook", "slack")
PRUNE_EVERY_S = 300.0
OLD_SPOOL = (
    "SELECT sink, SUM(delivered_at IS NULL), SUM(attempts), SUM(delivered_at IS NOT NULL)"
    " FROM deliveries GROUP BY sink ORDER BY sink"
)
OLD_PENDING = (
    "SELECT * FROM deliveries NOT INDEXED WHERE delivered_at IS NULL AND sink=? ORDER BY id"
    " LIMIT 200"
)


def job(pid: int, name: str) -> Job:
    origin = Origin(kind="cron", fields={"file": "/etc/cron.d/churn", "line": 1, "script": None})
    return Job(
        root_pid=pid,
        pids=[pid, pid + 1],
        user="mlops",
        cmdline=("python3", f"/opt/ml/{name}.py", "--epochs", "1"),
        start_ticks=pid,
        gpu_memory_bytes=2**30,
        gpu_uuids=[],
        lineage=[],
        origin=origin,
        verdict="rogue",
        reason="not sanctioned: no rule matches",
    )


def letters(n: int) -> str:
    """``n`` in base 26 letters: a job signature folds runs of 5+ digits (run ids), so
    distinct jobs must differ in something else."""
    out = ""
    while True:
        n, r = divmod(n, 26)
        out = chr(97 + r) + out
        if n == 0:
            return out


def timed(fn: Callable[[], Any], repeat: int = 15) -> float:
    """Median wall time of ``fn`` in milliseconds."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def size_mib(directory: Path) -> float:
    total = sum(
        (directory / n).stat().st_size
        for n in ("state.db", "state.db-wal")
        if (directory / n).exists()
    )
    return total / 2**20


def run(days: float, tick_s: float, churn_per_h: float, retention_s: float) -> list[str]:
    out = []
    with tempfile.TemporaryDirectory(prefix="rw-retention-") as tmp:
        db = StateDB(tmp)
        alerts = AlertSettings(sinks=tuple(SinkSettings(type="log", name=n) for n in SINKS))
        tracker = Tracker(db, alerts, "bench-host")
        steady = [job(10_000 + 10 * i, f"steady_{i}") for i in range(20)]
        short: list[tuple[Job, float]] = []  # (job, leaves at)
        per_tick = churn_per_h * tick_s / 3600.0
        carry = 0.0
        serial = 0
        t0 = 1_700_000_000.0
        now = t0
        pruned_at = -1e18
        day = 0
        tick_ms: list[float] = []
        header = (
            f"{'day':>4} {'MiB':>7} {'jobs':>7} {'findings':>8} {'deliveries':>10} "
            f"{'tick':>6} {'open':>6} {'present':>7} {'pending':>7} {'spool':>6} "
            f"{'health':>6} {'old-spool':>9} {'old-pending':>11}"
        )
        out.append(header)
        print(header, flush=True)
        end = t0 + days * 86400
        while now < end:
            carry += per_tick
            while carry >= 1:
                carry -= 1
                serial += 1
                short.append(
                    (
                        job(100_000 + 10 * serial, f"churn_{letters(serial)}"),
                        now + tick_s * (1 + serial % 3),
                    )
                )
            short = [(j, leave) for j, leave in short if leave > now]
            jobs = steady + [j for j, _ in short]
            started = time.perf_counter()
            tracker.update(jobs, job_findings(jobs), now)
            for sink in SINKS:  # a healthy receiver: everything due goes out
                for d in db.pending(sink, 1000):
                    db.mark_delivered(d.id, now)
            if retention_s > 0 and now - pruned_at >= PRUNE_EVERY_S:
                pruned_at = now
                db.prune(now, findings_s=retention_s, alerts_s=retention_s, jobs_s=retention_s)
            tick_ms.append((time.perf_counter() - started) * 1000)
            now += tick_s
            if now - t0 >= (day + 1) * 86400:
                day += 1
                counts = [
                    db.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                    for t in ("jobs", "findings", "deliveries")
                ]
                row = (
                    f"{day:>4} {size_mib(Path(tmp)):>7.1f} {counts[0]:>7} {counts[1]:>8} "
                    f"{counts[2]:>10} {statistics.median(tick_ms):>6.2f} "
                    f"{timed(db.open_findings):>6.2f} {timed(db.present_jobs):>7.2f} "
                    f"{timed(lambda: db.pending('hook', 200)):>7.2f} "
                    f"{timed(lambda: spool_counts(db)):>6.2f} "
                    f"{timed(db.delivery_health):>6.2f} "
                    f"{timed(lambda: db.conn.execute(OLD_SPOOL).fetchall(), 5):>9.2f} "
                    f"{timed(lambda: db.conn.execute(OLD_PENDING, ('hook',)).fetchall(), 5):>11.2f}"
                )
                tick_ms = []
                out.append(row)
                print(row, flush=True)
        db.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=float, default=30)
    ap.add_argument("--tick-s", type=float, default=60.0, help="simulated seconds per tick")
    ap.add_argument("--churn-per-h", type=float, default=300.0, help="short rogue jobs per hour")
    ap.add_argument("--retention-days", type=float, default=7.0)
    ap.add_argument("--no-retention", action="store_true", help="only the run without retention")
    ap.add_argument("--both", action="store_true", help="also a run without retention")
    args = ap.parse_args()
    print(
        f"# {args.days:g} days, a tick every {args.tick_s:g} s, {args.churn_per_h:g} short "
        f"rogue jobs/h, 20 steady rogue jobs, 2 sinks; times in ms (median); "
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    if not args.no_retention:
        print(f"\n## retention {args.retention_days:g} days (the default windows)")
        run(args.days, args.tick_s, args.churn_per_h, args.retention_days * 86400)
    if args.no_retention or args.both:
        print("\n## no retention (retention_*_s: 0)")
        run(args.days, args.tick_s, args.churn_per_h, 0.0)


if __name__ == "__main__":
    main()
