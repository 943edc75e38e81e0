"""Benchmark: daemon memory and idle CPU over an hour-equivalent of ticks.

Spawns N sleeping processes (default 2,000; killed at the end), then, for each variant
and interval, runs a fresh child process that builds a real :class:`Daemon` (temp state
dir, log sink) and drives ``Daemon.tick(now)`` as fast as it can with ``now`` advancing
by the interval: 720 ticks at 5 s and 1,800 ticks at 2 s are one hour each. A child per
series keeps each RSS figure that of one daemon, not of everything measured before it.

Variants: ``nvml-off`` (``nvml.enabled: false``) and ``nvml-missing`` (the default,
enabled, on a host without libnvidia-ml: every tick retries ``nvmlInit``).

Per tick it records CPU seconds (``getrusage(RUSAGE_SELF)``, user + system). Full
device-fd sweeps are paced by the scanner on the monotonic clock, which barely moves when
ticks are driven fast, so the child forces one whenever simulated time crosses
``daemon.fd_sweep_interval_s`` (60 s): the sweep cost is counted at its real rate.

Printed per series: RSS after the first tick and after the hour (VmRSS, peak VmHWM),
CPU per tick (median, mean, p95, max; the first, cold tick apart) and CPU as a fraction
of one core at that interval (mean / interval; the median too). Aims (issue 3): RSS at
most 60 MiB, at most 0.5% of a core at a 2 s interval.

Usage: python bench/daemon_bench.py [--procs 2000] [--profile | --breakdown]
       --profile: cProfile 300 steady ticks of each variant at 2 s; top functions.
       --breakdown: 600 ticks of each variant at 2 s, CPU per stage of the tick
       (thread CPU time; no profiler overhead).
       --restat-every N: what-if: re-read each process's stat every N ticks (the
       ProcessTable default is 6) instead of the default.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sleepers import sleepers  # noqa: E402  (bench/ is sys.path[0] for this script)

VARIANTS = {"nvml-off": "nvml: {enabled: false}\n", "nvml-missing": ""}
SERIES = ((5.0, 720), (2.0, 1800))  # (interval_s, ticks): one hour each
T0 = 1_900_000_000.0  # simulated start (2030); any value works


def cpu_self_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def status_kib(field: str) -> int:
    """A ``kB`` field of /proc/self/status (proc(5)): VmRSS, VmHWM."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def make_daemon(variant: str, tmp: Path, interval_s: float = 5.0) -> Any:
    from rogue_watchdog.config import parse_config
    from rogue_watchdog.daemon.loop import Daemon

    cfg = parse_config(
        VARIANTS[variant] + "daemon:\n"
        f"  interval_s: {interval_s}\n"
        f"  state_dir: {tmp / 'state'}\n"
        f"  socket: {tmp / 'status.sock'}\n"
        f"alerts:\n  sinks: [{{type: log, path: {tmp / 'alerts.log'}}}]\n",
        f"<bench {variant}>",
    )
    return Daemon(cfg, None)


class Stages:
    """Thread CPU seconds spent in named stages of the tick, summed per tick."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.ticks: list[dict[str, float]] = []

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kw: Any) -> Any:
            before = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                spent = time.thread_time() - before
                self.current[name] = self.current.get(name, 0.0) + spent

        return timed

    def next_tick(self) -> None:
        self.ticks.append(self.current)
        self.current = {}

    def summary(self) -> dict[str, tuple[float, float]]:
        names = sorted({n for t in self.ticks for n in t})
        return {
            n: (
                statistics.median(t.get(n, 0.0) for t in self.ticks),
                statistics.fmean(t.get(n, 0.0) for t in self.ticks),
            )
            for n in names
        }


def instrument(d: Any) -> Stages:
    """Time the parts of a tick: the scan's stages, tracking, the rest of the tick."""
    import rogue_watchdog.scan as scan_mod

    st = Stages()
    sc = d.scanner
    sc.table.refresh = st.wrap("scan: ProcessTable.refresh", sc.table.refresh)
    sc._gpu = st.wrap("scan: NVML snapshot", sc._gpu)
    sc.devfd.holders = st.wrap("scan: device-fd holders (incl. sweeps)", sc.devfd.holders)
    for name in ("collect_training", "group_jobs", "resolve_origin", "judge"):
        setattr(scan_mod, name, st.wrap(f"scan: {name}", getattr(scan_mod, name)))
    sc.scan = st.wrap("scan (total)", sc.scan)
    d.tracker.update = st.wrap("tracker.update (state db)", d.tracker.update)
    d.tick = st.wrap("tick (total)", d.tick)
    return st


def child(
    variant: str,
    interval_s: float,
    ticks: int,
    profile: bool,
    breakdown: bool = False,
    restat_every: int | None = None,
) -> dict[str, Any]:
    """One daemon, ``ticks`` ticks ``interval_s`` apart; returns the measurements."""
    from rogue_watchdog.cli.daemon import configure_logging

    # The daemon's own JSON logging (its cost counts), discarded: stdout carries the
    # result, and on a shared host other people's test jobs would flood the report.
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115 (kept open)
    configure_logging()
    sys.stdout = stdout
    with tempfile.TemporaryDirectory(prefix="rw-daemon-bench-") as name:
        d = make_daemon(variant, Path(name), interval_s)
        if restat_every is not None:
            d.scanner.table.restat_every = restat_every
        rss_built = status_kib("VmRSS")
        sweep_s = d.config.daemon.fd_sweep_interval_s
        c0 = cpu_self_s()
        d.tick(T0)
        first_s = cpu_self_s() - c0
        rss_first = status_kib("VmRSS")
        last_sweep = T0
        per_tick: list[float] = []
        stages = instrument(d) if breakdown else None
        prof = None
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        wall0 = time.monotonic()
        for i in range(1, ticks):
            now = T0 + i * interval_s
            if now - last_sweep >= sweep_s:
                d.scanner.devfd._last_sweep_s = None  # a sweep is due in simulated time
                last_sweep = now
            before = cpu_self_s()
            d.tick(now)
            per_tick.append(cpu_self_s() - before)
            if stages is not None:
                stages.next_tick()
        wall = time.monotonic() - wall0
        if prof is not None:
            import io
            import pstats

            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
            sys.stderr.write(out.getvalue())
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(30)
            sys.stderr.write(out.getvalue())
        last = d.last
        jobs = len(last.result.jobs) if last and last.result else -1
        nvml = last.result.nvml.available if last and last.result else None
        open_findings = len(d.db.open_findings())
        db_bytes = sum(f.stat().st_size for f in Path(name, "state").iterdir())
        d.db.close()
        return {
            "variant": variant,
            "restat_every": d.scanner.table.restat_every,
            "interval_s": interval_s,
            "ticks": ticks,
            "procs": len([p for p in os.listdir("/proc") if p.isdigit()]),
            "rss_built_kib": rss_built,
            "rss_first_kib": rss_first,
            "rss_end_kib": status_kib("VmRSS"),
            "hwm_kib": status_kib("VmHWM"),
            "first_tick_cpu_s": first_s,
            "median_s": statistics.median(per_tick),
            "mean_s": statistics.fmean(per_tick),
            "p95_s": statistics.quantiles(per_tick, n=20)[-1],
            "max_s": max(per_tick),
            "wall_s": wall,
            "jobs_last_tick": jobs,
            "nvml_available": nvml,
            "open_findings": open_findings,
            "state_bytes": db_bytes,
            "degraded": dict(d.degraded),
            "stages": stages.summary() if stages is not None else None,
        }


def run_child(
    variant: str,
    interval_s: float,
    ticks: int,
    profile: bool,
    breakdown: bool,
    restat_every: int | None,
) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", variant, str(interval_s), str(ticks)]
    if restat_every is not None:
        argv += ["--restat-every", str(restat_every)]
    if profile:
        argv.append("--profile")
    if breakdown:
        argv.append("--breakdown")
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def report(r: dict[str, Any]) -> None:
    mib = 1024.0
    share = r["mean_s"] / r["interval_s"] * 100
    share_med = r["median_s"] / r["interval_s"] * 100
    print(
        f"[{r['variant']}, {r['ticks']} ticks at {r['interval_s']:g} s = "
        f"{r['ticks'] * r['interval_s'] / 3600:g} h simulated, {r['wall_s']:.1f} s wall, "
        f"stat re-read every {r['restat_every']} ticks]"
    )
    print(f"  processes in /proc:         {r['procs']}")
    print(
        f"  RSS: built {r['rss_built_kib'] / mib:.1f} MiB, after first tick "
        f"{r['rss_first_kib'] / mib:.1f} MiB, at the end {r['rss_end_kib'] / mib:.1f} MiB "
        f"(peak {r['hwm_kib'] / mib:.1f} MiB; aim <= 60 MiB)"
    )
    print(f"  first (cold) tick CPU:      {r['first_tick_cpu_s'] * 1000:8.2f} ms")
    print(
        f"  CPU per tick:               median {r['median_s'] * 1000:.2f} ms, "
        f"mean {r['mean_s'] * 1000:.2f} ms, p95 {r['p95_s'] * 1000:.2f} ms, "
        f"max {r['max_s'] * 1000:.2f} ms"
    )
    aim = "  (aim <= 0.5%)" if r["interval_s"] == 2.0 else ""
    print(f"  share of one core:          {share:.2f}% (mean), {share_med:.2f}% (median){aim}")
    print(
        f"  last tick: {r['jobs_last_tick']} jobs, nvml available={r['nvml_available']}, "
        f"{r['open_findings']} open findings, state {r['state_bytes'] / 2**20:.2f} MiB, "
        f"degraded={r['degraded'] or 'none'}"
    )
    if r["stages"]:
        print("  CPU per tick by stage (median / mean ms; stages nest inside scan and tick):")
        for name, (med, mean) in r["stages"].items():
            print(f"    {name:42s} {med * 1000:7.2f} / {mean * 1000:7.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--restat-every", type=int)
    ap.add_argument("--child", nargs=3, metavar=("VARIANT", "INTERVAL_S", "TICKS"))
    args = ap.parse_args()
    if args.child:
        variant, interval, ticks = args.child
        result = child(
            variant, float(interval), int(ticks), args.profile, args.breakdown, args.restat_every
        )
        print(json.dumps(result))
        return 0

    with sleepers(args.procs, 3600):
        print(f"command: {' '.join([sys.executable, *sys.argv])}")
        print(f"{args.procs} sleeping processes spawned; cores: {os.cpu_count()}")
        series = [(v, i, n) for v in VARIANTS for (i, n) in SERIES]
        if args.profile:
            series = [(v, 2.0, 300) for v in VARIANTS]
        elif args.breakdown:
            series = [(v, 2.0, 600) for v in VARIANTS]
        for variant, interval, ticks in series:
            report(
                run_child(variant, interval, ticks, args.profile, args.breakdown, args.restat_every)
            )
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
