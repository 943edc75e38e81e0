"""Many GPU processes (issue 32 case 8, issue 34 item 3): the daemon's tick with one job of
N processes on one GPU, and its RSS before, during and after they end.

A launcher (a small C program hard-linked as ``SANDBOX/train_many.py``, so the default
launcher pattern makes it a job) maps a stand-in ``libcuda.so.1`` (as workers that hold
GPU memory have CUDA mapped) and forks N sleeping worker children; the stand-in NVML
(``tests/fakenvml``) lists every worker on GPU 0 with 64 MiB each. The daemon
(``Daemon`` with the parts ``rogue-watchdog run`` attaches: sources, enforcers, kernel
events) runs in a child interpreter (``--code DIR`` is the checkout measured), driven tick
by tick at a 1 s wall interval. Per tick: wall and CPU seconds (the whole process: the
NVML call thread and the event thread included); the peer, taking turns with the ticks in
the same run, is ``ps -e -o pid,ppid,args`` (wall and CPU from ``wait4``). RSS is the
child's ``VmRSS``: before (after warm-up ticks with no GPU process), during, and after the
workers ended (SIGKILL, reaped) and NVML lists nothing again.

Diagnosis switches (environment): ``MANY_PROFILE=FILE`` (cProfile of the steady ticks),
``MANY_TRACEMALLOC=DEPTH``, ``MANY_WHERE=1`` (gc, ``malloc_trim``, pymalloc's arena stats,
dead workers' records still alive), ``MANY_EVENTS=off``, ``MANY_SCAN_ONLY=1`` (the scan
without the tracker and state), ``MANY_VERBOSE=1`` (each tick on stderr).

``--case mixed`` splits N between a rogue launcher and a sanctioned one (an allowlist rule
with ``origin: {any: true}``), both on GPU 0.

Usage (root: every process's /proc, the proc connector)::

    python bench/many_gpu_procs.py [--procs 4096] [--case one|mixed] [--ticks 12]
                                   [--code DIR] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
MIB = 1 << 20
GIB = 1 << 30

LAUNCHER_C = r"""
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
/* train_many.py N [LIB]: map LIB (a stand-in libcuda.so.1: GPU workers have CUDA mapped),
   fork N workers that sleep; print their PIDs, one a line, then "ready". */
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2 && !dlopen(argv[2], RTLD_NOW)) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) { for (;;) pause(); }
        if (pid < 0) { perror("fork"); return 1; }
        printf("%d\n", (int)pid);
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
"""


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def rss_kib(key: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_ps() -> tuple[float, float]:
    """One ``ps -e -o pid,ppid,args``: (wall s, CPU s)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        ["ps", "-e", "-o", "pid,ppid,args"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, _, ru = os.wait4(proc.pid, 0)
    return time.perf_counter() - t0, ru.ru_utime + ru.ru_stime


class Launcher:
    """One launcher and its N forked workers (own session, killed as a group)."""

    def __init__(self, path: Path, n: int) -> None:
        cuda = path.parent / "libcuda.so.1"
        self.proc = subprocess.Popen(
            [str(path), str(n), str(cuda)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
            start_new_session=True, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.workers: list[int] = []
        for line in self.proc.stdout:
            if line.strip() == "ready":
                break
            self.workers.append(int(line))
        if len(self.workers) != n:
            self.stop()
            raise SystemExit(f"the launcher started {len(self.workers)} of {n} workers")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        # The workers are reparented on their parent's death; wait until /proc lacks them.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
            os.path.exists(f"/proc/{p}") for p in self.workers[-16:]
        ):
            time.sleep(0.05)
        # The bench's own record of the PIDs (4,096 ints born during the job) must not
        # stay alive into the "after" RSS: the last ``for la in launchers`` kept it.
        self.workers = []


def write_nvml(conf: Path, pids: list[int]) -> None:
    """The stand-in NVML's configuration (format: tests/fakenvml/fake_nvml.c): two GPUs,
    ``pids`` on GPU 0 with 64 MiB each. Written here, not with tests.fakenvml.build, so
    that a ``--code`` checkout's own tests package is never imported."""
    lines = [
        "driver\t550.54.15",
        f"device\tname=NVIDIA H200\tuuid=GPU-0-many\ttotal={1 << 50}\tused={len(pids) * 64 * MIB}",
        f"device\tname=NVIDIA H200\tuuid=GPU-1-many\ttotal={140 * GIB}\tused=0",
        *(f"proc\tdevice=0\tkind=compute\tpid={p}\tmem={64 * MIB}" for p in pids),
    ]
    tmp = conf.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, conf)


class _Notes:
    """The child's results, kept as JSON text in a buffer allocated before the job (by
    malloc, not pymalloc): a Python object the bench kept from the job's ticks would pin
    a pymalloc arena of the daemon's heap, and the RSS it holds would count as the
    daemon's."""

    def __init__(self, **first: Any) -> None:
        self._buf = bytearray(1 << 20)
        self._used = 0
        for key, value in first.items():
            self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        data = (json.dumps([key, value]) + "\n").encode()
        self._buf[self._used : self._used + len(data)] = data
        self._used += len(data)

    def result(self) -> dict[str, Any]:
        text = bytes(self._buf[: self._used]).decode()
        return {k: v for k, v in (json.loads(line) for line in text.splitlines())}


def child(sandbox: Path, procs: int, case: str, ticks: int, interval_s: float) -> dict[str, Any]:
    """In a fresh interpreter: the daemon, ticked before, during and after."""
    from rogue_watchdog.config import parse_config
    from rogue_watchdog.daemon.assemble import attach_parts
    from rogue_watchdog.daemon.loop import Daemon

    nvml_dir = sandbox / "nvml"
    conf = nvml_dir / "fake_nvml.conf"
    write_nvml(conf, [])
    rogue_bin = sandbox / "train_many.py"
    ok_bin = sandbox / "train_sanctioned.py"
    cfg = parse_config(
        f"nvml: {{library: '{nvml_dir / 'libnvidia-ml.so.1'}'}}\n"
        f"daemon: {{interval_s: {interval_s}, state_dir: '{sandbox / 'state'}',"
        f" socket: '{sandbox / 'sock'}', events: {os.environ.get('MANY_EVENTS', 'auto')}}}\n"
        "sanctioned:\n"
        f"  - {{name: bench-ok, cmdline: '{ok_bin} *', origin: {{any: true}}}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{sandbox / 'alerts.log'}'}}]}}\n",
        str(sandbox / "config.yaml"),
    )
    d = Daemon(cfg, None)
    attach_parts(d)
    out = _Notes(procs=procs, case=case)
    verbose = bool(os.environ.get("MANY_VERBOSE"))
    scan_only = bool(os.environ.get("MANY_SCAN_ONLY"))
    clock = [time.time()]
    due = [time.monotonic()]

    def tick() -> tuple[float, float, Any]:
        # Ticks start interval_s apart, as run_forever spaces them (a long one: at once).
        time.sleep(max(0.0, due[0] - time.monotonic()))
        due[0] = max(due[0], time.monotonic() - interval_s) + interval_s
        clock[0] += interval_s
        c0, t0 = cpu_s(), time.perf_counter()
        if scan_only:  # the scan alone, no tracker nor state (where RSS is kept)
            result = d.scanner.scan()
            summary = SimpleNamespace(result=result, findings=result.findings)
        else:
            summary = d.tick(clock[0])
        if verbose:
            print(
                f"tick {time.perf_counter() - t0:.3f} s wall, {cpu_s() - c0:.3f} s CPU",
                file=sys.stderr,
                flush=True,
            )
        return time.perf_counter() - t0, cpu_s() - c0, summary

    def phase(name: str, n: int) -> Any:
        walls, cpus, ps_w, ps_c = [], [], [], []
        summary = None
        for i in range(n):
            if i % 2:  # the peer takes turns with the ticks
                w, c = run_ps()
                ps_w.append(w)
                ps_c.append(c)
            w, c, summary = tick()
            walls.append(w)
            cpus.append(c)
            if i % 2 == 0:
                w, c = run_ps()
                ps_w.append(w)
                ps_c.append(c)
        out[name] = {
            "tick_wall_p50_s": statistics.median(walls), "tick_wall_p95_s": pct(walls, 95),
            "tick_cpu_p50_s": statistics.median(cpus), "tick_cpu_p95_s": pct(cpus, 95),
            "ps_wall_p50_s": statistics.median(ps_w), "ps_cpu_p50_s": statistics.median(ps_c),
            "ticks": n,
        }  # fmt: skip
        return summary

    for _ in range(3):
        tick()
    # A warm-up job of 8 workers comes and goes first: what one finding costs once (lazy
    # imports, the alert path, the state tables) is in the "before" RSS, not in the kept.
    warm = Launcher(rogue_bin, 8)
    try:
        write_nvml(conf, warm.workers)
        for _ in range(3):
            tick()
    finally:
        warm.stop()
    write_nvml(conf, [])
    for _ in range(3):
        tick()
    trace = os.environ.get("MANY_TRACEMALLOC")  # what the "after" RSS still holds
    if trace:
        import tracemalloc

        tracemalloc.start(int(trace))
    phase("before", ticks)
    if trace:
        snap0 = tracemalloc.take_snapshot()
    out["rss_before_mib"] = rss_kib() / 1024
    if os.environ.get("MANY_WHERE"):  # pymalloc's arenas and pools, on stderr
        sys._debugmallocstats()
    out["blocks_before"] = sys.getallocatedblocks()

    launchers = []
    gone: set[int] = set()
    if case == "mixed":
        shutil.copyfile(rogue_bin, ok_bin)
        os.chmod(ok_bin, 0o755)
        launchers = [Launcher(rogue_bin, procs - procs // 2), Launcher(ok_bin, procs // 2)]
    else:
        launchers = [Launcher(rogue_bin, procs)]
    try:
        if os.environ.get("MANY_WHERE"):  # else the bench keeps nothing born in the job
            gone.update(p for la in launchers for p in la.workers)
        write_nvml(conf, [p for la in launchers for p in la.workers])
        time.sleep(0.5)
        w, c, summary = tick()
        out["first_tick"] = {"wall_s": w, "cpu_s": c}
        profile = os.environ.get("MANY_PROFILE")  # a cProfile of the steady ticks
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        summary = phase("during", ticks)
        if profile:
            prof.disable()
            prof.dump_stats(profile)
        out["rss_during_mib"] = rss_kib() / 1024
        out["blocks_during"] = sys.getallocatedblocks()
        jobs = summary.result.jobs if summary.result else []
        out["jobs"] = sorted(
            (j.cmdline[0].rsplit("/", 1)[-1], j.verdict, len(j.pids)) for j in jobs
        )
        out["evidence"] = sorted(
            {e for j in jobs if j.cmdline[0].rsplit("/", 1)[-1].startswith("train_")
             for e in j.evidence}
        )  # fmt: skip
        out["findings"] = sorted(
            f"{f.kind}:{f.severity}" for f in summary.findings if f.root_pid is not None
        )
        out["gpu_processes"] = len(summary.result.gpu_processes) if summary.result else 0
        del summary, jobs  # the bench keeps nothing of the scan alive past this point
    finally:
        for la in launchers:
            la.stop()
        launchers.clear()
    write_nvml(conf, [])
    for _ in range(3):
        tick()
    phase("after", ticks)
    out["rss_after_mib"] = rss_kib() / 1024
    out["blocks_after"] = sys.getallocatedblocks()
    if trace:
        stats = tracemalloc.take_snapshot().compare_to(snap0, "traceback")
        for st in stats[:25]:
            print(st, file=sys.stderr)
            for line in st.traceback.format()[-6:]:
                print("   ", line, file=sys.stderr)
    out["rss_peak_mib"] = rss_kib("VmHWM") / 1024
    if os.environ.get("MANY_WHERE"):  # where the kept RSS is: Python garbage, malloc
        import ctypes
        import gc

        gc.collect()
        out["rss_after_gc_mib"] = rss_kib() / 1024
        sys._debugmallocstats()
        from rogue_watchdog.model import Proc

        dead = [o for o in gc.get_objects() if isinstance(o, Proc) and o.pid in gone]
        out["dead_procs_alive"] = len(dead)
        if dead:

            def owners(obj: object, depth: int) -> list[str]:
                refs = [
                    r
                    for r in gc.get_referrers(obj)
                    if r is not dead and type(r).__name__ not in ("frame", "list_iterator")
                ]
                here = [
                    f"{type(r).__name__}{len(r) if hasattr(r, '__len__') else ''}" for r in refs[:4]
                ]
                if depth and refs:
                    here += [">" + x for x in owners(refs[0], depth - 1)]
                return here

            out["dead_proc_owners"] = owners(dead[0], 6)
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        out["rss_after_trim_mib"] = rss_kib() / 1024
    return out.result()


def row(r: dict[str, Any]) -> str:
    """One line of text for the report and docs/performance.md."""
    d, b, a = r["during"], r["before"], r["after"]
    back = r["rss_after_mib"] / r["rss_before_mib"] - 1
    # The bench's own jobs (other jobs on a shared host are left out).
    mine = ", ".join(f"{n} {v} x{k}" for n, v, k in r["jobs"] if n.startswith("train_"))
    return (
        f"{r['procs']} GPU processes ({r['case']}: {mine}): "
        f"tick wall p50 {d['tick_wall_p50_s']:.3f} s / p95 {d['tick_wall_p95_s']:.3f} s, "
        f"CPU p50 {d['tick_cpu_p50_s']:.3f} s / p95 {d['tick_cpu_p95_s']:.3f} s "
        f"(first tick {r['first_tick']['wall_s']:.2f} s wall); peer `ps -e -o pid,ppid,args` "
        f"{d['ps_wall_p50_s']:.3f} s wall, {d['ps_cpu_p50_s']:.3f} s CPU; idle tick before "
        f"{b['tick_wall_p50_s'] * 1000:.0f} ms, after {a['tick_wall_p50_s'] * 1000:.0f} ms; "
        f"RSS {r['rss_before_mib']:.1f} -> {r['rss_during_mib']:.1f} -> "
        f"{r['rss_after_mib']:.1f} MiB ({back:+.1%} after; peak {r['rss_peak_mib']:.1f})"
    )


def measure(
    procs: int, case: str, ticks: int, code: Path, interval_s: float = 1.0
) -> dict[str, Any]:
    """Build the launcher, run :func:`child` against ``code`` and return its answer."""
    compiler = shutil.which("gcc")
    if compiler is None:
        raise SystemExit("needs gcc (the stand-in NVML and the launcher are C)")
    sandbox = Path(tempfile.mkdtemp(prefix="rw-many-"))
    try:
        src = sandbox / "launcher.c"
        src.write_text(LAUNCHER_C)
        subprocess.run(
            [compiler, "-O2", "-o", str(sandbox / "train_many.py"), str(src), "-ldl"], check=True
        )
        stub = sandbox / "cuda.c"
        stub.write_text("int cuInit(unsigned int flags) { (void)flags; return 0; }\n")
        lib = sandbox / "libcuda.so.1"
        subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(stub)], check=True)
        sys.path.insert(0, str(REPO))
        from tests.fakenvml.build import build_library  # this checkout's: 65,536 processes

        build_library(sandbox / "nvml")
        from codepath import import_path  # bench/ is sys.path[0]

        env = dict(os.environ, PYTHONPATH=import_path(code))
        done = subprocess.run(
            [sys.executable, __file__, "--code", str(code), "--child", str(sandbox), str(procs),
             case, str(ticks), str(interval_s)],
            stdout=subprocess.PIPE, text=True, env=env, check=True,
        )  # fmt: skip
        return dict(json.loads(done.stdout.splitlines()[-1]))
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=4096, help="GPU processes (default 4096)")
    ap.add_argument("--case", choices=("one", "mixed"), default="one")
    ap.add_argument("--ticks", type=int, default=12, help="ticks per phase (default 12)")
    ap.add_argument("--code", default=str(REPO), help="the watchdog checkout to measure")
    ap.add_argument("--json", action="store_true", help="print the raw JSON too")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        from codepath import import_path  # bench/ is sys.path[0]

        sys.path[:0] = import_path(Path(args.code)).split(os.pathsep)
        sandbox, procs, case, ticks, interval = args.child
        res = child(Path(sandbox), int(procs), case, int(ticks), float(interval))
        print(json.dumps(res))
        return 0
    if os.geteuid() != 0:
        raise SystemExit("run as root (every process's /proc, the proc connector)")
    r = measure(args.procs, args.case, args.ticks, Path(args.code).resolve())
    if args.json:
        print(json.dumps(r, indent=1))
    print(row(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
