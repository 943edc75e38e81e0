"""Benchmark: run_all's exec -> finding and exec storm rows, two checkouts taking turns.

The two rows of ``bench/run_all.py --only daemon`` that the event path decides, on the
real ``rogue-watchdog run`` (kernel events, status socket, the stand-in NVML listing 8
of the sleepers, state database, log sink; the same configuration as run_all's daemon)
with the same population of sleeping processes up (default 2,000), measured for
``--base DIR`` and ``--code DIR`` (default: this checkout) in turns, the order swapped
every round, each run on a fresh daemon:

* exec -> finding: ``--launches`` trainers (a C program exec'd as
  ``SANDBOX/train_lat_K.py``, living 3 s) started 0.1 s apart; latency = the daemon's
  ``finding-opened`` log timestamp minus the time just before ``posix_spawn`` (run_all's
  definition). p50, p99 (nearest rank) and max per run, and over all runs of a side.
* exec storm: ``/bin/true`` vfork+exec'd at ``--rate``/s for ``--storm-s`` (run_all's
  generator); the daemon's CPU (``/proc/PID/stat``, every thread) as a share of a core,
  the events the kernel dropped (``status`` ``events.lost``) and the execs it saw; also
  each of the daemon's threads' CPU (``/proc/PID/task/TID/stat``), the two busiest
  printed (the event thread and the loop).

The load average is printed beside each run (the host is shared). ``--spy FILE`` records
the daemon with py-spy (``PY_SPY``, default ``py-spy`` on ``PATH``; collapsed stacks per
thread) during the first run's storm and latency phases, into FILE.storm and
FILE.latency.

Usage (root; niced)::

    nice -n 5 python bench/events_pair.py --base DIR [--code DIR] [--rounds 3]
        [--launches 100] [--storm-s 20] [--rate 500] [--procs 2000] [--spy FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import run_all  # noqa: E402  (bench/ on sys.path first)
from codepath import import_path  # noqa: E402
from events_bench import STORM_C  # noqa: E402


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of ``pid``."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_bytes()
        except OSError:
            continue
        f = stat[stat.rfind(b")") + 2 :].split()
        out[int(tid)] = (int(f[11]) + int(f[12])) / run_all.CLK_TCK
    return out


def spy(pid: int, out: str, seconds: float) -> subprocess.Popen[bytes] | None:
    exe = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if exe is None:
        return None
    return subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--threads", "--format", "raw", "--rate", "200",
         "--duration", str(int(seconds) + 1), "--output", out, "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def one_run(
    ctx: run_all.Ctx, trainer: Path, storm: Path, args: argparse.Namespace, spy_to: str | None
) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    d = run_all.Daemon(ctx, 2.0)
    try:
        time.sleep(8)  # start-up ticks, the first sighting's maps window partly
        n = args.launches
        launched: dict[int, float] = {}
        recorder = spy(d.pid, spy_to + ".latency", n * 0.1 + 3) if spy_to else None
        for k in range(n):
            path = run_all.named(trainer, f"train_lat_{k}.py")
            t = time.time()
            launched[os.posix_spawn(path, [path, "3000"], os.environ)] = t
            time.sleep(0.1)
        time.sleep(3 + 4)
        run_all.reap(list(launched))
        if recorder is not None:
            recorder.wait()
        d.collect()
        lat = [(d.opened[p] - t) * 1000 for p, t in launched.items() if p in d.opened]

        before = (d.status() or {}).get("events", {})
        time.sleep(1)
        recorder = spy(d.pid, spy_to + ".storm", args.storm_s) if spy_to else None
        c0, th0, t0 = run_all.proc_cpu_s(d.pid), thread_cpu(d.pid), time.monotonic()
        subprocess.run([str(storm), str(args.rate), str(args.storm_s)], check=True)
        c1, th1, t1 = run_all.proc_cpu_s(d.pid), thread_cpu(d.pid), time.monotonic()
        if recorder is not None:
            recorder.wait()
        after = (d.status() or {}).get("events", {})
    finally:
        d.stop()
    wall = t1 - t0
    threads = sorted(((th1[t] - th0.get(t, 0.0)) / wall * 100 for t in th1), reverse=True)
    return {
        "lat": lat,
        "found": f"{len(lat)}/{n}",
        "share": (c1 - c0) / wall * 100,
        "threads": threads[:2],
        "lost": int(after.get("lost", 0)) - int(before.get("lost", 0)),
        "execs": int(after.get("events", {}).get("exec", 0))
        - int(before.get("events", {}).get("exec", 0)),
        "load": (load0, os.getloadavg()[0]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", default=str(REPO), help="the checkout measured as 'after'")
    ap.add_argument("--base", required=True, help="the checkout measured as 'before'")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--storm-s", type=float, default=20.0)
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--spy", default=None, help="py-spy the first 'after' run into FILE.*")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (the proc connector, every process's /proc)")
    exe = shutil.which("rogue-watchdog", path=str(Path(sys.executable).parent))
    if exe is None:
        raise SystemExit("rogue-watchdog is not installed next to this Python")
    sandbox = Path(tempfile.mkdtemp(prefix="rw-events-pair-"))
    sides = [("before", Path(args.base).resolve()), ("after", Path(args.code).resolve())]
    results: dict[str, list[dict[str, Any]]] = {k: [] for k, _ in sides}
    try:
        with run_all.sleepers(args.procs) as pids:
            nvml_dir = run_all.fake_nvml(sandbox, pids[:8])
            trainer = run_all.gcc(sandbox, "trainer", run_all.TRAINER_C)
            storm = run_all.gcc(sandbox, "storm", STORM_C)
            config = sandbox / "config.yaml"
            config.write_text(f"nvml: {{library: {nvml_dir / 'libnvidia-ml.so.1'}}}\n")
            base = run_all.Ctx(
                argparse.Namespace(quick=False), sandbox, REPO, exe, {}, config, nvml_dir,
                pids[:8],
            )  # fmt: skip
            print(
                "| run | load (start, end) | exec -> finding p50 / p99 / max (found) "
                "| storm: daemon CPU | two busiest threads | execs seen | lost |"
            )
            print("| --- | --- | --- | --- | --- | --- | --- |")
            spied = False
            for i in range(args.rounds):
                for label, code in sides if i % 2 == 0 else sides[::-1]:
                    box = sandbox / f"r{i}-{label}"
                    box.mkdir()
                    env = dict(os.environ, PYTHONPATH=import_path(code))
                    env.pop("PYTHONDONTWRITEBYTECODE", None)
                    ctx = replace(base, sandbox=box, code=code, env=env)
                    spy_to = args.spy if (args.spy and label == "after" and not spied) else None
                    spied = spied or spy_to is not None
                    r = one_run(ctx, trainer, storm, args, spy_to)
                    results[label].append(r)
                    lat = r["lat"] or [float("nan")]
                    print(
                        f"| {label} #{i + 1} | {r['load'][0]:.1f}, {r['load'][1]:.1f} "
                        f"| {statistics.median(lat):.1f} / {run_all.pct(lat, 99):.1f} / "
                        f"{max(lat):.1f} ms ({r['found']}) | {r['share']:.2f} % "
                        f"| {', '.join(f'{x:.2f} %' for x in r['threads'])} "
                        f"| {r['execs']} | {r['lost']} |",
                        flush=True,
                    )
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
    for label, rs in results.items():
        lat = [x for r in rs for x in r["lat"]]
        if not lat:
            continue
        print(
            f"{label}: exec -> finding over {len(lat)} launches p50 "
            f"{statistics.median(lat):.1f} ms, p99 {run_all.pct(lat, 99):.1f} ms; per-run p99 "
            f"median {statistics.median(run_all.pct(r['lat'], 99) for r in rs if r['lat']):.1f} "
            f"ms; storm median {statistics.median(r['share'] for r in rs):.2f} % of a core, "
            f"lost {sum(r['lost'] for r in rs)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
