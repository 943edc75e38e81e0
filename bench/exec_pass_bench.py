"""Benchmark: the daemon's exec path in process (issue 34, item 1).

A real :class:`~rogue_watchdog.daemon.loop.Daemon` (``run_forever`` in a thread, the
kernel's proc connector attached as ``rogue-watchdog run`` attaches it, NVML off, a 2 s
interval, a log sink) on this host with N sleeping processes up (bench/sleepers.py).
After the sleepers' GPU-library window (``GpuLibraryCache.recheck_s``) has passed,
L trainers are started ``--gap-s`` apart, each a C program exec'd under a launcher name
(``SANDBOX/train_lat_K.py``, a hard link per launch, as in bench/run_all.py) living
``--life-ms``. Measured:

* exec -> finding: the wall time the daemon logged each trainer's ``rogue-job`` as
  opened (its ``finding-opened`` log call) minus the time just before ``posix_spawn``;
* what answered each wake: the wall time of every exec pass (``Daemon.exec_tick``) and
  of every whole tick in the same window, and the exec -> finding of the trainers a
  whole tick judged (their capture came while a tick ran, or was left to one); each
  pass's and tick's CPU time too (``time.thread_time``, what neighbours move least).

p50 / p99 / max of each, with the load average before and after (a shared host's
neighbours move every figure). ``--profile FILE`` writes a cProfile of the exec passes
alone, ``--profile-ticks FILE`` one of the whole ticks. ``--code DIR`` measures another
checkout (bench/codepath.py), e.g. an older commit unpacked with ``git archive``.

Usage (root: the proc connector)::

    nice -n 5 python bench/exec_pass_bench.py [--sleepers 2000] [--launches 40]
        [--gap-s 0.1] [--life-ms 3000] [--code DIR] [--profile FILE]
        [--profile-ticks FILE] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

TRAINER_C = r"""
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 30;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, 0);
    return 0;
}
"""


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def summary(values: list[float]) -> dict[str, Any]:
    """Count, p50, p99 and max, in milliseconds (``values`` in seconds)."""
    if not values:
        return {"n": 0}
    ms = [v * 1000 for v in values]
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(pct(ms, 99), 1),
        "max_ms": round(max(ms), 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sleepers", type=int, default=2000)
    ap.add_argument("--launches", type=int, default=40)
    ap.add_argument("--gap-s", type=float, default=0.1)
    ap.add_argument("--life-ms", type=int, default=3000)
    ap.add_argument("--code", type=Path, help="measure this checkout instead")
    ap.add_argument("--profile", type=Path, help="write a cProfile of the exec passes")
    ap.add_argument("--profile-ticks", type=Path, help="write a cProfile of the whole ticks")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    if args.code is not None:
        from codepath import import_path

        for entry in reversed(import_path(args.code).split(os.pathsep)):
            sys.path.insert(0, entry)

    from sleepers import sleepers

    from rogue_watchdog.config import parse_config
    from rogue_watchdog.daemon.events import attach_events
    from rogue_watchdog.daemon.loop import Daemon

    gcc = shutil.which("gcc")
    if gcc is None:
        print("gcc is needed to build the trainer", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="exec-pass-bench-") as tmp:
        sandbox = Path(tmp)
        src = sandbox / "trainer.c"
        src.write_text(TRAINER_C)
        trainer = sandbox / "trainer"
        subprocess.run([gcc, "-O2", "-o", str(trainer), str(src)], check=True)
        cfg = parse_config(
            "nvml: {enabled: false}\n"
            f"daemon: {{state_dir: '{sandbox}/state', interval_s: 2}}\n"
            f"alerts:\n  sinks: [{{type: log, path: '{sandbox}/alerts.log'}}]\n",
            "bench.yaml",
        )
        with sleepers(args.sleepers):
            d = Daemon(cfg, None)
            source = attach_events(d)
            if source is None:
                print("kernel process events are off", file=sys.stderr)
                return 2
            in_tick = threading.Event()
            # When the event thread handed each capture on (the exec's half of the
            # latency), and every garbage collection's pause (the tail's suspects).
            captured_at: dict[int, float] = {}
            in_tick_capture: set[int] = set()  # captured while a whole tick ran
            capture = source._capture

            def timed_capture(pid: int, libraries: tuple[str, ...]) -> None:
                capture(pid, libraries)
                captured_at.setdefault(pid, time.time())
                if in_tick.is_set():
                    in_tick_capture.add(pid)

            source._capture = timed_capture  # type: ignore[method-assign]
            measuring = threading.Event()
            gc_pauses: list[tuple[int, float, float]] = []  # generation, start, seconds
            gc_start = [0.0]

            def gc_timer(phase: str, info: dict[str, Any]) -> None:
                if phase == "start":
                    gc_start[0] = time.perf_counter()
                elif measuring.is_set():
                    took = time.perf_counter() - gc_start[0]
                    gc_pauses.append((info["generation"], time.time() - took, took))

            gc.callbacks.append(gc_timer)
            opened: dict[int, float] = {}
            by_tick: set[int] = set()  # opened by a whole tick, not by an exec pass
            passes: list[float] = []
            ticks: list[float] = []
            # The same, in CPU time of the loop's thread: what neighbours move least.
            pass_cpu: list[float] = []
            tick_cpu: list[float] = []
            log_events = d._log_events

            def logged(track: Any) -> None:
                at = time.time()
                for rec in track.opened:
                    if rec.kind == "rogue-job" and rec.root_pid is not None:
                        opened.setdefault(rec.root_pid, at)
                        if in_tick.is_set():
                            by_tick.add(rec.root_pid)
                log_events(track)

            d._log_events = logged  # type: ignore[method-assign]
            import cProfile

            profiler = cProfile.Profile() if args.profile is not None else None
            tick_profiler = cProfile.Profile() if args.profile_ticks is not None else None
            exec_tick, tick = d.exec_tick, d.tick

            # From the end of a whole tick to the start of the pass right after it (the
            # loop's own wait: the pass's length before 6393294, none since).
            after_tick: list[float] = []
            last_end: list[Any] = [None, 0.0]  # "tick" or "pass", perf_counter at its end

            def timed_exec(now: float) -> Any:
                t, c = time.perf_counter(), time.thread_time()
                if measuring.is_set() and last_end[0] == "tick":
                    after_tick.append(t - last_end[1])
                if profiler is not None and measuring.is_set():
                    profiler.enable()
                try:
                    return exec_tick(now)
                finally:
                    if profiler is not None:
                        profiler.disable()
                    if measuring.is_set():
                        passes.append(time.perf_counter() - t)
                        pass_cpu.append(time.thread_time() - c)
                    last_end[:] = ["pass", time.perf_counter()]

            def timed_tick(now: float) -> Any:
                t, c = time.perf_counter(), time.thread_time()
                in_tick.set()
                if tick_profiler is not None and measuring.is_set():
                    tick_profiler.enable()
                try:
                    return tick(now)
                finally:
                    if tick_profiler is not None:
                        tick_profiler.disable()
                    in_tick.clear()
                    if measuring.is_set():
                        ticks.append(time.perf_counter() - t)
                        tick_cpu.append(time.thread_time() - c)
                    last_end[:] = ["tick", time.perf_counter()]

            d.exec_tick = timed_exec  # type: ignore[method-assign]
            d.tick = timed_tick  # type: ignore[method-assign]
            loop = threading.Thread(target=d.run_forever, daemon=True)
            loop.start()
            # Past the sleepers' GPU-library window (10 s of maps re-reads after a
            # process is first seen): a steady host, as a daemon meets it.
            time.sleep(12)
            measuring.set()
            launched: dict[int, float] = {}
            try:
                for k in range(args.launches):
                    path = sandbox / f"train_lat_{k}.py"
                    os.link(trainer, path)
                    t = time.time()
                    pid = os.posix_spawn(str(path), [str(path), str(args.life_ms)], os.environ)
                    launched[pid] = t
                    time.sleep(args.gap_s)
                time.sleep(args.life_ms / 1000 + 3)
            finally:
                for pid in launched:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, 0)
                measuring.clear()
                d.request_stop()
                loop.join(30)
    lat = [opened[p] - t for p, t in launched.items() if p in opened]
    # A launch whose exec -> finding window held a collection: the pause and the launch.
    in_gc = [
        p
        for p, t in launched.items()
        if p in opened and any(t <= at + took and at <= opened[p] for _, at, took in gc_pauses)
    ]
    out = {
        "code": str(args.code or BENCH.parent),
        "sleepers": args.sleepers,
        "launches": args.launches,
        "found": len(lat),
        "exec_to_finding": summary(lat),
        "opened_by_tick": summary(
            [opened[p] - t for p, t in launched.items() if p in opened and p in by_tick]
        ),
        "exec_to_capture": summary(
            [captured_at[p] - t for p, t in launched.items() if p in captured_at]
        ),
        "capture_to_finding": summary(
            [opened[p] - captured_at[p] for p in launched if p in opened and p in captured_at]
        ),
        "captured_during_a_tick": summary(
            [opened[p] - t for p, t in launched.items() if p in opened and p in in_tick_capture]
        ),
        "captured_between_ticks": summary(
            [
                opened[p] - t
                for p, t in launched.items()
                if p in opened and p in captured_at and p not in in_tick_capture
            ]
        ),
        "gc_pauses": {
            f"gen{g}": summary([took for gen, _, took in gc_pauses if gen == g]) for g in range(3)
        },
        "launches_with_a_gc_pause": len(in_gc),
        "pass_right_after_a_tick_waited": summary(after_tick),
        "exec_pass": summary(passes),
        "whole_tick": summary(ticks),
        "exec_pass_cpu": summary(pass_cpu),
        "whole_tick_cpu": summary(tick_cpu),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    if profiler is not None and args.profile is not None:
        profiler.dump_stats(str(args.profile))
    if tick_profiler is not None and args.profile_ticks is not None:
        tick_profiler.dump_stats(str(args.profile_ticks))
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
