"""Benchmark: what setting a GPU denial's rule costs the daemon, cgroup v1 beside v2.

Per round, in a child cgroup of this benchmark's own: v1 ``mkdir`` + one ``devices.deny``
write + ``rmdir`` (in the host's v1 ``devices`` hierarchy, when it has one) and v2
``mkdir`` + :func:`rogue_watchdog.actions.devprog.attach` (load, the check of the programs in
force before and after, attach) + ``detach`` + ``rmdir`` (on a cgroup2 mount of its own
in a private mount namespace: it runs itself again under ``unshare -m``). No process is
moved. Prints p50/p99 in ms of each.

Usage (root): python bench/gpu_rule_cost.py [--rounds 200] [--nodes 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rogue_watchdog.actions import devprog  # noqa: E402


def pcts(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "p50": round(statistics.median(ms), 3),
        "p99": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 3),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--nodes", type=int, default=3, help="device rules per denial")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.inside:
        unshare = ["unshare", "-m", "--propagation", "private", sys.executable, __file__]
        argv = [*unshare, "--inside", "--rounds", str(args.rounds), "--nodes", str(args.nodes)]
        os.execvp("unshare", argv)
    rules = [f"c 195:{m} rwm" for m in range(args.nodes)]
    out: dict[str, object] = {"rounds": args.rounds, "nodes": args.nodes}
    v1 = Path("/sys/fs/cgroup/devices")
    if (v1 / "devices.deny").exists():
        took = []
        for k in range(args.rounds):
            cg = v1 / f"rw-rule-cost.{os.getpid()}.{k}"
            t0 = time.perf_counter()
            cg.mkdir()
            for rule in rules:
                (cg / "devices.deny").write_text(rule)
            took.append((time.perf_counter() - t0) * 1000)
            cg.rmdir()
        out["v1_mkdir_write_ms"] = pcts(took)
    box = Path(tempfile.mkdtemp(prefix="rw-rule-cost-"))
    mnt = box / "cg2"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "cgroup2", "none", str(mnt)], check=True)
    try:
        mine = mnt / f"rw-rule-cost.{os.getpid()}"
        mine.mkdir()
        took, lift = [], []
        for k in range(args.rounds):
            cg = mine / f"c{k}"
            t0 = time.perf_counter()
            cg.mkdir()
            prog = devprog.attach(str(cg), rules)
            took.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            devprog.detach(str(cg), prog)
            cg.rmdir()
            lift.append((time.perf_counter() - t0) * 1000)
        mine.rmdir()
        out["v2_mkdir_attach_ms"] = pcts(took)
        out["v2_detach_rmdir_ms"] = pcts(lift)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
        if not os.path.ismount(mnt):
            mnt.rmdir()
            box.rmdir()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
