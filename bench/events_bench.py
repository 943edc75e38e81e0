"""Benchmark: kernel process events against polling, on real daemons and real processes.

Two ``rogue-watchdog run`` daemons watch the host side by side, each with its own state
dir and socket, NVML off, the default ``daemon.interval_s`` (5 s): ``events`` (the
default, ``daemon.events: auto``) and ``polling`` (``daemon.events: off``). Then:

1. **Latency**: N launches (default 200) of ``python3 -S SANDBOX/train_lat_K.py``, one
   every 0.15 s, each living 7 s (longer than the interval, so polling sees every one).
   Latency of a launch = the ``finding-opened`` log timestamp of its ``rogue-job``
   minus the time just before ``posix_spawn``. p50/p90/p99/max per daemon.
2. **Shortest-lived rogue**: for each lifetime (300, 100, 30 ms), M launches (default
   100) of a trainer that exits after that long (``time.sleep``; Python's start-up adds
   about 10 ms), one every 0.1 s. Counted: how many opened a ``rogue-job`` in each
   daemon.
3. **CPU**: each daemon's user+system CPU (``/proc/PID/stat``) over an idle window, then
   over a fork/exec storm: a C program (built with gcc) that ``vfork``+``exec``s
   ``/bin/true`` at a fixed rate (default 1,000/s) for the storm duration. Printed as a
   percentage of one core, with the events the kernel dropped (``status`` ``lost``).

Usage (root; CPU heavy, run it alone):
    python bench/events_bench.py [--launches 200] [--short 100] [--idle-s 30]
        [--storm-s 60] [--storm-rate 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = "/usr/bin/python3"
CLK_TCK = os.sysconf("SC_CLK_TCK")

STORM_C = r"""
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
/* storm RATE SECONDS: vfork+exec /bin/true RATE times a second for SECONDS. */
int main(int argc, char **argv) {
    long rate = atol(argv[1]);
    double seconds = atof(argv[2]);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long done = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        double el = (now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
        if (el >= seconds) break;
        long due = (long)(el * rate);
        while (done < due) {
            pid_t pid = vfork();
            if (pid == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
            if (pid > 0) waitpid(pid, 0, 0);
            done++;
        }
        struct timespec nap = {0, 500000};
        nanosleep(&nap, 0);
    }
    return 0;
}
"""


class Daemon:
    """One ``rogue-watchdog run`` child."""

    def __init__(self, sandbox: Path, name: str, events: str) -> None:
        self.name = name
        self.root = sandbox / name
        self.root.mkdir()
        config = self.root / "config.yaml"
        config.write_text(
            "nvml: {enabled: false}\n"
            "daemon:\n"
            f"  events: '{events}'\n"
            f"  state_dir: {self.root / 'state'}\n"
            f"  socket: {self.root / 'status.sock'}\n"
            "alerts:\n  sinks:\n"
            f"    - {{type: log, path: {self.root / 'alerts.log'}}}\n"
        )
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.stdout = self.root / "stdout"
        with self.stdout.open("wb") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self._offset = 0
        self.opened: dict[int, float] = {}  # root_pid -> first finding-opened time

    def ready(self) -> bool:
        return os.path.exists(self.root / "status.sock") and self.status() is not None

    def status(self) -> dict[str, Any] | None:
        res = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", "status", "--json", "--socket",
             str(self.root / "status.sock")],
            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
            check=False,
        )  # fmt: skip
        try:
            doc: dict[str, Any] = json.loads(res.stdout)
        except ValueError:
            return None
        return doc if "pid" in doc else None

    def collect(self) -> None:
        """Read new log lines: first ``finding-opened`` of a ``rogue-job`` per root PID."""
        with self.stdout.open("rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "finding-opened" and e.get("kind") == "rogue-job":
                ts = datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
                self.opened.setdefault(int(e["root_pid"]), ts)

    def cpu_s(self) -> float:
        stat = Path(f"/proc/{self.proc.pid}/stat").read_bytes()
        fields = stat[stat.rfind(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def wait(what: str, probe: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def spawn(argv: list[str]) -> int:
    return os.posix_spawn(argv[0], argv, os.environ)


def reap(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def latency(sandbox: Path, daemons: list[Daemon], n: int) -> None:
    folder = sandbox / "lat"
    folder.mkdir()
    launched: dict[int, float] = {}
    pids = []
    for k in range(n):
        script = folder / f"train_lat_{k}.py"
        script.write_text("import time\ntime.sleep(7)\n")
        t = time.time()
        pid = spawn([PYTHON, "-S", str(script)])
        launched[pid] = t
        pids.append(pid)
        time.sleep(0.15)
    time.sleep(8)
    reap(pids)
    print(f"\n## exec -> finding-opened latency, {n} launches (interval 5 s)")
    print("| daemon | found | p50 | p90 | p99 | max |")
    print("| --- | --- | --- | --- | --- | --- |")
    for d in daemons:
        d.collect()
        lat = [(d.opened[p] - t) * 1000 for p, t in launched.items() if p in d.opened]
        if not lat:
            print(f"| {d.name} | 0/{n} | | | | |")
            continue
        print(
            f"| {d.name} | {len(lat)}/{n} | {statistics.median(lat):.0f} ms "
            f"| {pct(lat, 90):.0f} ms | {pct(lat, 99):.0f} ms | {max(lat):.0f} ms |"
        )


def short_lived(sandbox: Path, daemons: list[Daemon], m: int) -> None:
    print(f"\n## shortest-lived rogue: {m} launches per lifetime")
    print("| lifetime | " + " | ".join(d.name for d in daemons) + " |")
    print("| --- |" + " --- |" * len(daemons))
    for ms in (300, 100, 30):
        folder = sandbox / f"short{ms}"
        folder.mkdir()
        pids = []
        for k in range(m):
            script = folder / f"train_s{ms}_{k}.py"
            script.write_text(f"import time\ntime.sleep({ms / 1000})\n")
            pids.append(spawn([PYTHON, "-S", str(script)]))
            time.sleep(0.1)
        time.sleep(6)  # one polling interval and a margin
        reap(pids)
        row = []
        for d in daemons:
            d.collect()
            row.append(f"{sum(1 for p in pids if p in d.opened)}/{m}")
        print(f"| {ms} ms | " + " | ".join(row) + " |")


def cpu(sandbox: Path, daemons: list[Daemon], idle_s: float, storm_s: float, rate: int) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise SystemExit("needs gcc for the storm generator")
    src = sandbox / "storm.c"
    src.write_text(STORM_C)
    binary = sandbox / "storm"
    subprocess.run([gcc, "-O2", "-o", str(binary), str(src)], check=True)

    def counters(d: Daemon) -> tuple[int, int, int]:
        ev = (d.status() or {}).get("events", {})
        return (
            ev.get("events", {}).get("exec", 0),
            ev.get("lost", 0),
            ev.get("early_ticks_requested", 0),
        )

    def window(seconds: float, storm: bool) -> dict[str, tuple[float, int, int, int]]:
        """Per daemon: CPU % of one core, execs seen, ENOBUFS losses, early-tick requests."""
        c0 = {d.name: counters(d) for d in daemons}
        before = {d.name: d.cpu_s() for d in daemons}
        t0 = time.monotonic()
        if storm:
            subprocess.run([str(binary), str(rate), str(seconds)], check=True)
        else:
            time.sleep(seconds)
        took = time.monotonic() - t0
        out = {}
        for d in daemons:
            c1 = counters(d)
            used = (d.cpu_s() - before[d.name]) / took * 100
            out[d.name] = (used, *(b - a for a, b in zip(c0[d.name], c1, strict=True)))
        return out

    idle = window(idle_s, False)
    storm = window(storm_s, True)
    print(
        f"\n## daemon CPU, % of one core (idle {idle_s:.0f} s: the shared host's own "
        f"processes only; storm: {rate} exec/s for {storm_s:.0f} s)"
    )
    print("| daemon | window | CPU | execs seen | event losses (ENOBUFS) | early ticks asked |")
    print("| --- | --- | --- | --- | --- | --- |")
    for d in daemons:
        for label, res in (("idle", idle), ("storm", storm)):
            used, execs, lost, early = res[d.name]
            if d.name == "events":
                print(f"| {d.name} | {label} | {used:.2f} % | {execs} | {lost} | {early} |")
            else:
                print(f"| {d.name} | {label} | {used:.2f} % | - | - | - |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--short", type=int, default=100)
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--storm-s", type=float, default=60.0)
    ap.add_argument("--storm-rate", type=int, default=1000)
    ap.add_argument("--skip", default="", help="comma list of latency,short,cpu to skip")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (the proc connector and other users' /proc)")
    skip = set(filter(None, args.skip.split(",")))
    sandbox = Path(tempfile.mkdtemp(prefix="rwbench-events-"))
    daemons: list[Daemon] = []
    try:
        daemons = [Daemon(sandbox, "events", "auto"), Daemon(sandbox, "polling", "off")]
        for d in daemons:
            wait(f"daemon {d.name}", d.ready, 60)
        mode = (daemons[0].status() or {}).get("events", {}).get("mode")
        print(f"event daemon mode: {mode}; host processes: {len(os.listdir('/proc'))} entries")
        if "latency" not in skip:
            latency(sandbox, daemons, args.launches)
        if "short" not in skip:
            short_lived(sandbox, daemons, args.short)
        if "cpu" not in skip:
            time.sleep(6)  # let the findings of the launches above resolve
            cpu(sandbox, daemons, args.idle_s, args.storm_s, args.storm_rate)
    finally:
        for d in daemons:
            d.stop()
        shutil.rmtree(sandbox, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
