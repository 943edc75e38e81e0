"""How long the opening of a ``poisoned-weights`` finding holds its tick to name the last
good training output (issue 33, fresh user H), and whether the page names it.

H's shape: ``train_dir`` holds a good output of ``--size-gib`` GiB and, newer, the NaN
file; both are older than the deployed good model, so no tick verified them before.
Then the NaN file is copied into the deploy folder. Measured: the tick in which the
finding opens (it verifies the good output then, within ``LAST_GOOD_WAIT_S`` and
``LAST_GOOD_BYTES``), against the same tick with no ``train_dir``; warm page cache,
best of ``--repeat``. The real verifier thread, a real state database, real files.

Usage::

    python bench/last_good_bench.py [--size-gib 1,3] [--repeat 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from rogue_watchdog.config import parse_config
from rogue_watchdog.state import StateDB
from rogue_watchdog.weights.shipwatch import build_ship_gate_sources
from rogue_watchdog.weights.verifyworker import VerifyWorker


def _write(path: Path, size_gib: float, value: float) -> None:
    n = int(size_gib * (1 << 30)) // 2 // 16
    arr = np.full((16, n), value, dtype=np.float16)
    save_file({"w": arr}, str(path))


def opening_tick(root: Path, size_gib: float, train: bool) -> tuple[float, str]:
    """Seconds of the tick that opens the finding, and its message's ``next:`` part."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "train").mkdir(parents=True)
    (root / "prod").mkdir()
    good, bad = root / "train" / "good.safetensors", root / "train" / "bad.safetensors"
    _write(good, size_gib, 1.0)
    _write(bad, 0.001, float("nan"))
    now = time.time()
    os.utime(good, (now - 60, now - 60))
    os.utime(bad, (now - 30, now - 30))
    _write(root / "prod" / "model.safetensors", 0.001, 1.0)  # the deployed good model
    train_dir = f"    train_dir: {root}/train\n" if train else ""
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{root}/state'}}\n"
        "ship_gates:\n"
        f"  - name: prod\n    deploy_dir: {root}/prod\n    quarantine: true\n"
        f"    settle_s: 0\n{train_dir}",
        f"{root}/t.yaml",
    )
    db = StateDB(cfg.daemon.state_dir)
    worker = VerifyWorker()
    [src] = build_ship_gate_sources(cfg, db, worker)
    src.wait_s = 30.0
    try:
        for i in range(3):
            src.findings(now + i)
        shutil.copyfile(bad, root / "prod" / "model2.safetensors")
        src.findings(now + 10)
        t0 = time.perf_counter()
        out = src.findings(now + 11)  # model2 settled: verified, refused, paged
        took = time.perf_counter() - t0
        [f] = [f for f in out if f.kind == "poisoned-weights"]
        return took, f.message.partition("; next: ")[2]
    finally:
        worker.stop()
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gib", default="1,3")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="last-good-bench-", dir=args.dir))
    try:
        for size in [float(s) for s in args.size_gib.split(",")]:
            for train in (False, True):
                runs = [opening_tick(root, size, train) for _ in range(args.repeat)]
                best = min(t for t, _ in runs)
                named = "verified finite is" in runs[0][1]
                print(
                    f"good output {size:g} GiB, train_dir {'set' if train else 'unset'}: "
                    f"opening tick {best * 1000:.0f} ms (best of {args.repeat}); "
                    f"page names it: {named}"
                    + ("" if named or not train else f" ({runs[0][1].rpartition('; ')[2][:60]}...)")
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
