"""Benchmark: the proc-events thread's CPU per exec during an exec storm, in process.

The whole-daemon storm row of ``bench/run_all.py`` reads the daemon's process CPU, which
on a shared 2-CPU host moves with the neighbours (10.7-16.1 % across runs of the same
code). This bench measures only the thread that the storm loads: a
``ProcEventSource`` (the daemon's event reader, with the daemon's launcher check) runs
in a child process, and its thread's own CPU clock (``pthread_getcpuclockid``: user and
system time of that thread alone, nanosecond resolution) is read before and after the
storm generator of ``bench/events_bench.py`` (``/bin/true`` vfork+exec'd at RATE/s).

Printed per run: the thread's CPU seconds, the execs it saw (every exec on the host, the
neighbours' included), CPU per exec (µs), the thread's share of a core, its user and
system time (``/proc/self/task/TID/stat``), its reading rounds (wake-ups) per exec, the
events lost (``ENOBUFS``) and the execs missed (gone before their ``cmdline`` was read:
``/bin/true`` lives well under a millisecond, so how many are missed depends on how soon
the thread runs, and a missed exec costs only a failing ``open``). With
``--base DIR`` the runs alternate between DIR's watchdog and this checkout's (or
``--code``'s), pair by pair, and the load average is printed beside each pair.

With ``--daemon`` the child runs the daemon itself in process (``Daemon.run_forever``
with ``attach_events``: the daemon's own launcher check and wake-ups, NVML off, 2 s
interval) and the loop thread's CPU is printed beside the event thread's.

Usage (root; run niced, alone):
    nice -n 5 python bench/storm_thread.py [--rate 500] [--seconds 10] [--pairs 3]
        [--base DIR] [--code DIR] [--profile | --daemon] [--trainers N]

``--trainers N`` also starts N trainers living 30 ms (exec to exit, launcher-named)
evenly through each storm and prints how many the reader captured at exec (what a
later read of a storm's execs would cost).
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
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CANDIDATE_MEMO = 1024


def ticks(stat: str) -> tuple[int, int]:
    """utime and stime (clock ticks) of one thread, from its ``stat`` file."""
    with open(stat) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def launch_trainers(seconds: float) -> list[int]:
    """``STORM_TRAINERS=BINARY:N``: N trainers living 30 ms from exec to exit, started
    evenly through the storm under launcher names (hard links ``train_s30_K.py`` beside
    BINARY, as bench/run_all.py's), reaped; their PIDs."""
    spec = os.environ.get("STORM_TRAINERS")
    if not spec:
        return []
    binary, count = spec.rsplit(":", 1)
    pids = []
    for k in range(int(count)):
        path = f"{binary}_s30_{k}.py"
        if not os.path.exists(path):
            os.link(binary, path)
        pids.append(os.posix_spawn(path, [path, "30"], os.environ))
        time.sleep(seconds / (int(count) + 1))
    for pid in pids:
        os.waitpid(pid, 0)
    return pids


def child(rate: int, seconds: float, storm: str, profile: bool) -> dict[str, Any]:
    """In a fresh process: one event source, its thread's CPU over one storm."""
    from rogue_watchdog.config import Config
    from rogue_watchdog.policy.jobs import is_launcher
    from rogue_watchdog.sources.procevents import ProcEventSource

    cfg = Config()
    launchers = cfg.training.launchers
    # The daemon's check (watchdog/daemon/events.py): the answer kept per command.
    known: dict[Any, bool] = {}

    def is_candidate(proc: Any) -> bool:
        key = (proc.exe, proc.cmdline)
        answer = known.get(key)
        if answer is None:
            if len(known) >= CANDIDATE_MEMO:
                known.clear()
            answer = known[key] = is_launcher(proc, launchers)
        return answer

    source = ProcEventSource("/proc", is_candidate, cfg.training.gpu_libraries)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        run = source._run

        def profiled() -> None:
            assert profiler is not None
            profiler.enable()
            try:
                run()
            finally:
                profiler.disable()

        source._run = profiled  # type: ignore[method-assign]
    rounds = [0]
    read_all = source._read_all

    def counted(*args: Any) -> Any:
        rounds[0] += 1
        return read_all(*args)

    source._read_all = counted  # type: ignore[method-assign]  # the thread's wake-ups
    source.start()
    if not source.available:
        raise SystemExit(f"no proc connector: {source.reason}")
    thread = source._thread
    assert thread is not None and thread.ident is not None
    clock = time.pthread_getcpuclockid(thread.ident)
    time.sleep(1.0)  # the subscription's first events and the thread's start settle
    events0 = dict(source.counters.events)
    lost0, missed0 = source.counters.lost, source.counters.missed
    stat = f"/proc/self/task/{thread.native_id}/stat"
    u0, s0 = ticks(stat)
    r0, c0, w0 = rounds[0], time.clock_gettime(clock), time.monotonic()
    gen = subprocess.Popen([storm, str(rate), str(seconds)])
    trainers = launch_trainers(seconds)
    if gen.wait() != 0:
        raise SystemExit("the storm generator failed")
    time.sleep(0.2)  # the last datagrams of the storm
    r1, c1, w1 = rounds[0], time.clock_gettime(clock), time.monotonic()
    u1, s1 = ticks(stat)
    events = {k: v - events0.get(k, 0) for k, v in source.counters.events.items()}
    lost = source.counters.lost - lost0
    missed = source.counters.missed - missed0
    source.stop()
    execs = events.get("exec", 0)
    with source._lock:
        captured = source._batch.candidates & set(trainers)
    out = {
        "trainers": len(trainers),
        "trainers_caught": len(captured),
        "cpu_s": c1 - c0,
        "wall_s": w1 - w0,
        "execs": execs,
        "events": events,
        "lost": lost,
        "rounds": r1 - r0,
        "missed": missed,
        "us_per_exec": (c1 - c0) / max(execs, 1) * 1e6,
        "share": (c1 - c0) / (w1 - w0) * 100,
        "user_s": (u1 - u0) / os.sysconf("SC_CLK_TCK"),
        "system_s": (s1 - s0) / os.sysconf("SC_CLK_TCK"),
        "threads": threading.active_count(),
    }
    if profiler is not None:
        import io
        import pstats

        buf = io.StringIO()
        pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(25)
        out["profile"] = buf.getvalue()
    return out


def child_daemon(rate: int, seconds: float, storm: str) -> dict[str, Any]:
    """In a fresh process: the daemon itself (``Daemon.run_forever`` with
    ``attach_events``, NVML off, 2 s interval, a log sink in a temporary directory), its
    loop thread's and its event thread's CPU over one storm."""
    from rogue_watchdog.config import parse_config
    from rogue_watchdog.daemon.events import attach_events
    from rogue_watchdog.daemon.loop import Daemon

    tmp = Path(tempfile.mkdtemp(prefix="rwbench-storm-daemon-"))
    try:
        cfg = parse_config(
            "nvml: {enabled: false}\n"
            f"daemon: {{state_dir: '{tmp}/state', interval_s: 2}}\n"
            f"alerts:\n  sinks: [{{type: log, path: '{tmp}/alerts.log'}}]\n",
            "storm.yaml",
        )
        d = Daemon(cfg, None)
        source = attach_events(d)
        assert source is not None
        loop = threading.Thread(target=d.run_forever, name="loop")
        loop.start()
        time.sleep(6)  # the first ticks and the subscription
        if not source.available or source._thread is None:
            raise SystemExit(f"no proc connector: {source.reason}")
        threads = {"loop": loop, "events": source._thread}
        clocks = {k: time.pthread_getcpuclockid(t.ident or 0) for k, t in threads.items()}
        execs0 = source.counters.events["exec"]
        lost0, missed0 = source.counters.lost, source.counters.missed
        c0 = {k: time.clock_gettime(c) for k, c in clocks.items()}
        w0 = time.monotonic()
        subprocess.run([storm, str(rate), str(seconds)], check=True)
        c1 = {k: time.clock_gettime(c) for k, c in clocks.items()}
        w1 = time.monotonic()
        execs = source.counters.events["exec"] - execs0
        d.request_stop()
        loop.join(30)
        return {
            "share": {k: (c1[k] - c0[k]) / (w1 - w0) * 100 for k in clocks},
            "us_per_exec": (c1["events"] - c0["events"]) / max(execs, 1) * 1e6,
            "execs": execs,
            "lost": source.counters.lost - lost0,
            "missed": source.counters.missed - missed0,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_child(
    code: Path, rate: int, seconds: float, storm: Path, profile: bool, daemon: bool = False
) -> dict[str, Any]:
    """This script as a child importing ``rogue_watchdog`` from ``code``."""
    sys.path.insert(0, str(BENCH))
    from codepath import import_path

    env = dict(os.environ, PYTHONPATH=f"{import_path(code)}{os.pathsep}{BENCH}")
    argv = [sys.executable, __file__, "--child", str(rate), str(seconds), str(storm)]
    res = subprocess.run(
        [*argv, *(["--profile"] if profile else []), *(["--daemon"] if daemon else [])],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise SystemExit(f"child failed ({res.returncode}): {res.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return doc


def build_storm(sandbox: Path) -> Path:
    """The storm generator of bench/events_bench.py, compiled."""
    sys.path.insert(0, str(BENCH))
    from events_bench import STORM_C

    gcc = shutil.which("gcc")
    if gcc is None:
        raise SystemExit("needs gcc for the storm generator")
    src = sandbox / "storm.c"
    src.write_text(STORM_C)
    binary = sandbox / "storm"
    subprocess.run([gcc, "-O2", "-o", str(binary), str(src)], check=True)
    return binary


def line(label: str, r: dict[str, Any]) -> str:
    caught = f" {r['trainers_caught']} / {r['trainers']} |" if r.get("trainers") else ""
    return (
        f"| {label} | {r['cpu_s'] * 1000:.0f} ms | {r['execs']} | {r['us_per_exec']:.1f} µs "
        f"| {r['share']:.2f} % | {r['user_s']:.2f} / {r['system_s']:.2f} s "
        f"| {r['rounds'] / max(r['execs'], 1):.2f} | {r['lost']} | {r['missed']} |{caught}"
    )


def daemon_pairs(
    kinds: list[tuple[str, Path]], rate: int, seconds: float, pairs: int, storm: Path
) -> None:
    """``--daemon``: the daemon's loop and event threads, taking turns with ``--base``."""
    print(f"exec storm, {rate} execs/s for {seconds:.0f} s, the daemon in process")
    print("| run | loop thread | event thread | event thread per exec | execs | lost | missed |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for i in range(pairs):
        for label, path in kinds if i % 2 == 0 else kinds[::-1]:
            r = run_child(path, rate, seconds, storm, False, daemon=True)
            print(
                f"| {label} #{i + 1} (load {os.getloadavg()[0]:.1f}) "
                f"| {r['share']['loop']:.2f} % | {r['share']['events']:.2f} % "
                f"| {r['us_per_exec']:.1f} µs | {r['execs']} | {r['lost']} | {r['missed']} |",
                flush=True,
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--code", default=str(REPO), help="the watchdog checkout to measure")
    ap.add_argument("--base", default=None, help="a checkout to compare with, run by run")
    ap.add_argument("--profile", action="store_true", help="cProfile the thread (one run)")
    ap.add_argument(
        "--daemon", action="store_true", help="the daemon in process: its loop and event threads"
    )
    ap.add_argument(
        "--trainers", type=int, default=0,
        help="also start N trainers living 30 ms during each storm; count those captured",
    )  # fmt: skip
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        rate, seconds, storm = args.child
        if args.daemon:
            print(json.dumps(child_daemon(int(rate), float(seconds), storm)))
        else:
            print(json.dumps(child(int(rate), float(seconds), storm, args.profile)))
        return 0
    if os.geteuid() != 0:
        raise SystemExit("run as root (the proc connector)")
    sandbox = Path(tempfile.mkdtemp(prefix="rwbench-storm-"))
    try:
        storm = build_storm(sandbox)
        if args.trainers:
            from run_all import TRAINER_C

            src = sandbox / "trainer.c"
            src.write_text(TRAINER_C)
            subprocess.run(["gcc", "-O2", "-o", str(sandbox / "train"), str(src)], check=True)
            os.environ["STORM_TRAINERS"] = f"{sandbox / 'train'}:{args.trainers}"
        code = Path(args.code).resolve()
        if args.profile:
            r = run_child(code, args.rate, args.seconds, storm, True)
            print(line("profiled", r))
            print(r["profile"])
            return 0
        kinds = [("after", code)]
        if args.base:
            kinds.insert(0, ("before", Path(args.base).resolve()))
        if args.daemon:
            daemon_pairs(kinds, args.rate, args.seconds, args.pairs, storm)
            return 0
        print(f"exec storm, {args.rate} execs/s for {args.seconds:.0f} s, event thread only")
        print(
            "| run | thread CPU | execs seen | CPU per exec | share of a core "
            "| user / system | rounds per exec | lost | missed |"
            + (" 30 ms trainers caught |" if args.trainers else "")
        )
        print("|" + " --- |" * (10 if args.trainers else 9))
        results: dict[str, list[dict[str, Any]]] = {k: [] for k, _ in kinds}
        for i in range(args.pairs):
            order = kinds if i % 2 == 0 else kinds[::-1]
            for label, path in order:
                r = run_child(path, args.rate, args.seconds, storm, False)
                results[label].append(r)
                load = os.getloadavg()[0]
                print(line(f"{label} #{i + 1} (load {load:.1f})", r), flush=True)
        for label, rs in results.items():
            us = statistics.median(r["us_per_exec"] for r in rs)
            share = statistics.median(r["share"] for r in rs)
            print(
                f"{label}: median {us:.1f} µs per exec, {share:.2f} % of a core; "
                f"lost {sum(r['lost'] for r in rs)}, missed {sum(r['missed'] for r in rs)}"
            )
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
