"""Benchmark: how soon after its exec a rogue training process is denied the GPU.

One real ``rogue-watchdog run`` daemon (kernel process events on, the default; NVML
off) with ``enforcement.gpu_open: enforce`` through a rule naming only this benchmark's
sandbox, and a stand-in GPU node ``SANDBOX/nvidia0`` (``mknod c 195 0``: ENXIO while
allowed, EPERM once denied). Then N launches of ``python3 -S SANDBOX/train_gpu_K.py``,
one at a time: each opens the node in a loop from its first instruction and writes the
time from just before ``posix_spawn`` to its first EPERM, and how many opens got
through before (ENXIO). A sanctioned opener (``train_pipeline.py``) opens the node
every 10 ms throughout: its EPERM count must stay 0.

For scale: a framework opens ``/dev/nvidiactl`` at its CUDA initialisation, after the
interpreter has started and imported it; this rogue opens the node from its first line.

With ``--v2`` the denial is a cgroup v2 device program (``BPF_CGROUP_DEVICE``) on any
host, also a v1 or hybrid one: the benchmark becomes itself again in a private mount
namespace (``unshare -m``), mounts cgroup2 on a folder of its own (the daemon's
``paths.cgroup_root``), moves itself into one child cgroup of its own there (what it
starts is born in it) and, at the end, moves back, removes it and unmounts.

Usage (root, a cgroup v1 devices hierarchy, or --v2; run it alone):
    python bench/gpu_open_bench.py [--launches 50] [--json] [--v2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

ROGUE = """
import errno, os, sys, time
t0, node, out = float(sys.argv[1]), sys.argv[2], sys.argv[3]
allowed = 0
deadline = time.time() + 10
while time.time() < deadline:
    try:
        os.close(os.open(node, os.O_RDWR))
    except OSError as e:
        if e.errno == errno.EPERM:
            open(out, "w").write(f"{time.time() - t0} {allowed}")
            sys.exit(0)
        allowed += 1
    time.sleep(0.001)
open(out, "w").write(f"never {allowed}")
"""

PIPELINE = """
import errno, os, sys, time
node, out = sys.argv[1], sys.argv[2]
counts = {"EPERM": 0, "other": 0}
while not os.path.exists(out + ".stop"):
    try:
        os.close(os.open(node, os.O_RDWR))
    except OSError as e:
        counts["EPERM" if e.errno == errno.EPERM else "other"] += 1
    time.sleep(0.01)
open(out, "w").write(f"{counts['EPERM']} {counts['other']}")
"""


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launches", type=int, default=50, help="rogue launches (default 50)")
    p.add_argument("--json", action="store_true", help="print a JSON summary line")
    p.add_argument("--v2", action="store_true", help="cgroup v2, on a mount of its own")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.v2 and not args.inside:
        # Exec, not a child: the same process, in a private mount namespace.
        rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--v2"]
        unshare = ["unshare", "-m", "--propagation", "private"]
        os.execvp("unshare", [*unshare, sys.executable, __file__, "--v2", "--inside", *rest])
    if os.geteuid() != 0 or not (args.v2 or Path("/sys/fs/cgroup/devices/devices.deny").exists()):
        print("needs root and a cgroup v1 devices hierarchy (or --v2)", file=sys.stderr)
        return 2
    box = Path(tempfile.mkdtemp(prefix="gpu-open-bench-"))
    mine: Path | None = None
    home = ""
    if args.v2:
        (box / "cg2").mkdir()
        subprocess.run(["mount", "-t", "cgroup2", "none", str(box / "cg2")], check=True)
        home = next(
            ln[3:] for ln in Path("/proc/self/cgroup").read_text().splitlines()
            if ln.startswith("0::")
        )  # fmt: skip
        mine = box / "cg2" / f"rw-gpu-open-bench.{os.getpid()}"
        mine.mkdir()
        (mine / "cgroup.procs").write_text(str(os.getpid()))
    node = box / "nvidia0"
    os.mknod(node, 0o600 | 0o020000, os.makedev(195, 0))
    (box / "train_pipeline.py").write_text(PIPELINE)
    config = box / "config.yaml"
    config.write_text(
        "nvml: {enabled: false}\n"
        f"sanctioned: [{{name: pipeline, cmdline: '*{box}/train_pipeline.py*', "
        "origin: {any: true}}]\n"
        f"daemon: {{state_dir: '{box}/state', socket: '{box}/s.sock'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{box}/alerts.log'}}]}}\n"
        + (f"paths: {{cgroup_root: '{box}/cg2'}}\n" if args.v2 else "")
        + "enforcement:\n"
        f"  gpu_devices: ['{box}/nvidia[0-9]*']\n"
        f"  rules: [{{name: bench, cmdline: '*{box}/*', gpu_open: enforce}}]\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    log = open(box / "daemon.log", "wb")  # noqa: SIM115 (closed in finally)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "rogue_watchdog", "run", "--config", str(config)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    pipeline = subprocess.Popen(
        [sys.executable, str(box / "train_pipeline.py"), str(node), str(box / "pipeline.out")],
        start_new_session=True,
    )
    results: list[tuple[float, int]] = []
    never = 0
    try:
        for _ in range(300):  # the daemon's socket appears once it is running
            if (box / "s.sock").exists():
                break
            time.sleep(0.05)
        time.sleep(1.0)
        for k in range(args.launches):
            script = box / f"train_gpu_{k}.py"
            script.write_text(ROGUE)
            out = box / f"gpu_{k}.out"
            t0 = time.time()
            rogue = subprocess.Popen(
                [sys.executable, "-S", str(script), repr(t0), str(node), str(out)],
                start_new_session=True,
            )
            rogue.wait(timeout=30)
            took, allowed = out.read_text().split()
            if took == "never":
                never += 1
            else:
                results.append((float(took), int(allowed)))
            time.sleep(0.2)
        (box / "pipeline.out.stop").write_text("")
        pipeline.wait(timeout=10)
        eperm, other = (int(x) for x in (box / "pipeline.out").read_text().split())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pipeline.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=30)
        log.close()
        _remove_denials(box / "state" / "state.db")
        if mine is not None:
            (box / "cg2" / home.strip("/") / "cgroup.procs").write_text(str(os.getpid()))
            for _ in range(100):
                try:
                    mine.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
            subprocess.run(["umount", str(box / "cg2")], check=False)
        if not os.path.ismount(box / "cg2"):  # never descend into a cgroup mount
            shutil.rmtree(box, ignore_errors=True)
    ms = [r[0] * 1000 for r in results]
    summary = {
        "controller": "cgroup-v2" if args.v2 else "cgroup-v1",
        "launches": args.launches, "denied": len(results), "never_denied": never,
        "exec_to_eperm_ms": {
            "p50": round(statistics.median(ms), 1) if ms else None,
            "p90": round(pct(ms, 0.9), 1) if ms else None,
            "p99": round(pct(ms, 0.99), 1) if ms else None,
            "max": round(max(ms), 1) if ms else None,
        },
        "opens_allowed_before_denial": {
            "p50": statistics.median([r[1] for r in results]) if results else None,
            "max": max((r[1] for r in results), default=None),
        },
        "sanctioned_opens_eperm": eperm, "sanctioned_opens_enxio": other,
    }  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key}: {value}")
    return 0


def _remove_denials(db: Path) -> None:
    """Every denial cgroup the benchmark's daemon made: processes back, then removed."""
    try:
        conn = sqlite3.connect(db)
        rows = conn.execute("SELECT details_json FROM actions WHERE kind='gpu-deny'").fetchall()
        conn.close()
    except sqlite3.Error:
        rows = []
    for (details,) in rows:
        for cg in json.loads(details).get("cgroups") or []:
            path = Path(cg)
            if not path.is_dir() or not path.name.startswith("rogue-watchdog-gpu-deny."):
                continue
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (path.parent / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                path.rmdir()


if __name__ == "__main__":
    sys.exit(main())
