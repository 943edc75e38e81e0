"""Benchmark: where the real daemon's idle CPU goes, tick by tick (issue 34).

Sets up what ``bench/run_all.py``'s daemon row runs (N sleeping processes, 8 of them
listed on the stand-in NVML, kernel events, the status socket, a log sink, a 2 s
interval), then runs ``rogue-watchdog run`` in a child process whose ``Daemon.tick`` and
``Scanner.scan`` are timed (thread CPU). After a settle, over a window, it reports:

- the whole process's CPU per tick (``os.times``: what run_all's row reads from
  ``/proc/PID/stat``) and as a share of a core;
- per tick (medians): the tick's own thread CPU, the scan's, and the tick's main stages
  (tracker, extra sources, sanctioned file, prune, state records, log lines, enforcers,
  on-tick hooks);
- each thread's CPU over the window (``/proc/self/task/TID/stat``);
- with ``--profile``: cProfile of the ticks in the window (main thread), top functions.

Usage: sudo python bench/idle_tick.py [--procs 2000] [--window 30] [--settle 12]
                                      [--code DIR] [--profile] [--pairs-with DIR]
       --code DIR: measure another checkout (e.g. ``git archive BASE`` unpacked).
       --pairs-with DIR: run DIR then this checkout (or --code), N times (--pairs).
       Environment: IDLE_TICK_PROF=FILE keeps the profile (pstats); IDLE_TICK_NO_SCAN=1
       leaves the scan out of it (the tick's other stages only).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from codepath import import_path  # noqa: E402

STAGES = (
    ("scanner", "scan"),
    ("tracker", "update"),
    ("daemon", "_source_findings"),
    ("daemon", "_write_sanctioned_file"),
    ("daemon", "_prune"),
    ("daemon", "_record_slurm_members"),
    ("daemon", "_record_gpus"),
    ("daemon", "_record_seen_gpus"),
    ("daemon", "_log_events"),
    ("daemon", "_recheck_reload"),
    ("daemon", "_health_findings"),
    ("daemon", "_nvml_health"),
    ("db", "ensure_present"),
)


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process, by ``TID name`` (its CPU clock:
    ``pthread_getcpuclockid``; /proc's ticks are 10 ms)."""
    out = {}
    for t in threading.enumerate():
        if t.ident is None:
            continue
        try:
            clock = time.pthread_getcpuclockid(t.ident)
            out[f"{t.native_id} {t.name}"] = time.clock_gettime(clock)
        except OSError:
            continue
    return out


def child(config: str, settle_s: float, window_s: float, profile: bool) -> dict[str, Any]:
    from rogue_watchdog.cli import main as cli_main
    from rogue_watchdog.daemon import loop

    state: dict[str, Any] = {"on": False, "ticks": [], "cur": {}, "exec_passes": 0}
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                if state["on"]:
                    cur = state["cur"]
                    cur[name] = cur.get(name, 0.0) + time.thread_time() - t0

        return wrapper

    orig_tick = loop.Daemon.tick
    orig_exec = loop.Daemon.exec_tick

    def tick(self: Any, now: float) -> Any:
        if "hooked" not in state:
            state["hooked"] = True
            objs = {"daemon": self, "scanner": self.scanner, "tracker": self.tracker,
                    "db": self.db}  # fmt: skip
            for owner, attr in STAGES:
                obj = objs[owner]
                if hasattr(obj, attr):
                    setattr(obj, attr, timed(f"{owner}.{attr}", getattr(obj, attr)))
            self.on_tick[:] = [timed(f"hook {getattr(h, '__name__', h)}", h) for h in self.on_tick]
            if prof is not None and os.environ.get("IDLE_TICK_NO_SCAN"):
                inner = self.scanner.scan

                def scan_unprofiled(*a: Any, **kw: Any) -> Any:
                    prof.disable()
                    try:
                        return inner(*a, **kw)
                    finally:
                        if state["on"]:
                            prof.enable()

                self.scanner.scan = scan_unprofiled
            for e in self.enforcers:
                e.act = timed(f"enforcer {e.name}", e.act)
            state["daemon"] = self
        on = state["on"]
        if on and prof is not None:
            prof.enable()
        t0 = time.thread_time()
        try:
            return orig_tick(self, now)
        finally:
            if on:
                if prof is not None:
                    prof.disable()
                state["cur"]["tick"] = time.thread_time() - t0
                state["ticks"].append(state["cur"])
                state["cur"] = {}

    def exec_tick(self: Any, now: float) -> Any:
        if state["on"]:
            state["exec_passes"] += 1
        return orig_exec(self, now)

    import gc

    gc_spent: dict[int, list[float]] = {0: [], 1: [], 2: []}
    gc_start = [0.0]

    def gc_cb(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start[0] = time.thread_time()
        elif state["on"]:
            gc_spent[info["generation"]].append(time.thread_time() - gc_start[0])

    gc.callbacks.append(gc_cb)
    loop.Daemon.tick = tick  # type: ignore[method-assign]
    loop.Daemon.exec_tick = exec_tick  # type: ignore[method-assign]
    result: dict[str, Any] = {}

    def window() -> None:
        time.sleep(settle_s)
        t0, c0, th0 = time.monotonic(), os.times(), thread_cpu()
        state["on"] = True
        time.sleep(window_s)
        state["on"] = False
        t1, c1, th1 = time.monotonic(), os.times(), thread_cpu()
        wall = t1 - t0
        cpu = (c1.user + c1.system) - (c0.user + c0.system)
        result.update(
            wall_s=wall,
            cpu_s=cpu,
            threads={k: th1[k] - th0.get(k, 0.0) for k in th1},
            rss_kib=int(
                next(
                    ln.split()[1]
                    for ln in Path("/proc/self/status").read_text().splitlines()
                    if ln.startswith("VmRSS:")
                )
            ),
        )
        state["daemon"].request_stop()

    threading.Thread(target=window, daemon=True).start()
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115 (the daemon's log)
    try:
        cli_main(["run", "--config", config])
    finally:
        sys.stdout = stdout
    ticks = state["ticks"]
    names = sorted({n for t in ticks for n in t})
    result["ticks"] = len(ticks)
    result["gc"] = {g: [len(v), round(sum(v) * 1000, 1)] for g, v in gc_spent.items()}
    result["objects"] = len(gc.get_objects())
    result["exec_passes"] = state["exec_passes"]
    result["stages_ms"] = {
        n: (
            round(statistics.median(t.get(n, 0.0) for t in ticks) * 1000, 3),
            round(statistics.fmean(t.get(n, 0.0) for t in ticks) * 1000, 3),
        )
        for n in names
    }
    if prof is not None:
        import io
        import pstats

        if os.environ.get("IDLE_TICK_PROF"):
            prof.dump_stats(os.environ["IDLE_TICK_PROF"])
        for key in ("tottime", "cumulative"):
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats(key).print_stats(45)
            sys.stderr.write(out.getvalue())
    return result


def run_one(code: Path, config: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=import_path(code))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = [sys.executable, __file__, "--child", str(config), str(args.settle), str(args.window)]
    if args.profile:
        argv.append("--profile")
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env=env, check=True)
    res = dict(json.loads(done.stdout.splitlines()[-1]))
    res["code"] = str(code)
    res["load"] = os.getloadavg()[0]
    return res


def report(r: dict[str, Any], interval_s: float) -> None:
    per_tick = r["cpu_s"] / (r["wall_s"] / interval_s) * 1000
    print(
        f"{r['code']}: {r['cpu_s'] / r['wall_s'] * 100:.2f}% of a core, {per_tick:.1f} ms per "
        f"interval; {r['ticks']} ticks, {r['exec_passes']} exec passes; RSS "
        f"{r['rss_kib'] / 1024:.1f} MiB; load {r['load']:.2f}"
    )
    print(f"    gc (generation: collections, ms): {r['gc']}; {r['objects']} objects tracked")
    for name, (medv, mean) in sorted(r["stages_ms"].items(), key=lambda kv: -kv[1][1]):
        print(f"    {name:40s} median {medv:7.3f} ms  mean {mean:7.3f} ms")
    for name, s in sorted(r["threads"].items(), key=lambda kv: -kv[1]):
        if s > 0:
            print(f"    thread {name:32s} {s * 1000:7.0f} ms in the window")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--window", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=12.0)
    ap.add_argument("--code", default=str(REPO))
    ap.add_argument("--pairs-with", default=None)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--child", nargs=3)
    args = ap.parse_args()
    if args.child:
        config, settle, window = args.child
        print(json.dumps(child(config, float(settle), float(window), args.profile)))
        return 0
    sys.path.insert(0, str(BENCH))
    from run_all import fake_nvml, sleepers

    with tempfile.TemporaryDirectory(prefix="rw-idle-tick-") as name, sleepers(args.procs) as pids:
        root = Path(name)
        nvml_dir = fake_nvml(root, pids[:8])
        config = root / "config.yaml"
        config.write_text(
            f"nvml: {{library: {nvml_dir / 'libnvidia-ml.so.1'}}}\n"
            "daemon:\n"
            "  interval_s: 2\n"
            "  events: auto\n"
            f"  state_dir: {root / 'state'}\n"
            f"  socket: {root / 'status.sock'}\n"
            "alerts:\n  sinks:\n"
            f"    - {{type: log, path: {root / 'alerts.log'}}}\n"
        )
        codes = [Path(args.code).resolve()]
        if args.pairs_with:
            codes.insert(0, Path(args.pairs_with).resolve())
        for _ in range(args.pairs):
            for code in codes:
                shutil.rmtree(root / "state", ignore_errors=True)
                report(run_one(code, config, args), 2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
