"""Benchmark: whole-process wall and CPU time of the commands people run from shells.

Runs, interleaved round by round so load changes hit all alike, each as a fresh process:

* ``rogue-watchdog --help``
* ``rogue-watchdog status`` against a daemon that is not running (a socket path that
  does not exist: exit 3), with ``--socket`` and as typed (the socket named by
  /etc/rogue-watchdog/config.yaml, or the default path)
* ``rogue-watchdog status --help``
* ``nvitop --once`` and ``gpustat`` (when installed: ``pip install .[test]``) against the
  fake ``libnvidia-ml.so.1`` of tests/fakenvml (one H200, nothing running), the peers that
  make "what is on GPU N" one command. The fake lacks some symbols they call
  (``nvmlSystemGetCudaDriverVersion``...), so they stop early with an error: their
  figures are lower bounds on a real run.

and prints the median wall and CPU seconds of each. The aim: ``--help`` and ``status``
at or below 0.06 s wall (median).

Usage: python bench/cli_startup_bench.py [--rounds 21]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GIB = 1024**3


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system of the child) and exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=21)
    args = ap.parse_args()

    bindir = Path(sys.executable).parent
    exe = shutil.which("rogue-watchdog", path=str(bindir)) or shutil.which("rogue-watchdog")
    if exe is None:
        print("rogue-watchdog is not installed next to this Python", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="cli-startup-bench-"))
    env = dict(os.environ)
    cases: dict[str, list[str]] = {
        "rogue-watchdog --help": [exe, "--help"],
        "rogue-watchdog status (no daemon)": [exe, "status", "--socket", str(tmp / "no.sock")],
        # As typed: the socket comes from the configuration (or the default path).
        "rogue-watchdog status (as typed)": [exe, "status"],
        "rogue-watchdog status --help": [exe, "status", "--help"],
    }
    peer_env = dict(env)
    try:
        from tests.fakenvml.fixtures import fake_nvml

        lib = fake_nvml(
            tmp,
            {
                "driver": "550.54.15",
                "devices": [
                    {"name": "NVIDIA H200", "uuid": "GPU-a", "total": 140 * GIB, "used": GIB}
                ],
            },
        )
        peer_env["LD_LIBRARY_PATH"] = str(lib)
        for name, argv in (("nvitop --once", ["nvitop", "--once"]), ("gpustat", ["gpustat"])):
            path = shutil.which(argv[0], path=str(bindir)) or shutil.which(argv[0])
            if path is not None:
                cases[name + " (fake NVML)"] = [path, *argv[1:]]
    except (OSError, subprocess.CalledProcessError) as exc:  # no gcc: no fake library
        print(f"peers skipped: cannot build the fake NVML library: {exc}", file=sys.stderr)

    walls: dict[str, list[float]] = {k: [] for k in cases}
    cpus: dict[str, list[float]] = {k: [] for k in cases}
    codes: dict[str, set[int]] = {k: set() for k in cases}
    for name, argv in cases.items():  # warm the page cache once
        run_once(argv, peer_env if "fake NVML" in name else env)
    for _ in range(args.rounds):
        for name, argv in cases.items():
            wall, cpu, code = run_once(argv, peer_env if "fake NVML" in name else env)
            walls[name].append(wall)
            cpus[name].append(cpu)
            codes[name].add(code)

    print(f"median of {args.rounds} runs, whole process ({os.cpu_count()} CPUs)")
    print(f"{'command':<40} {'wall s':>8} {'cpu s':>8}  exit")
    for name in cases:
        exits = ",".join(str(c) for c in sorted(codes[name]))
        print(
            f"{name:<40} {statistics.median(walls[name]):>8.3f} "
            f"{statistics.median(cpus[name]):>8.3f}  {exits}"
        )
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
