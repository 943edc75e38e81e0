"""Cost of a ship gate enforced at open (fanotify), beside the same open without it.

    sudo .venv/bin/python bench/open_gate_bench.py [--opens 5000] [--size-mib 1024]

Needs root (fanotify permission events). In one run, inside a fresh temporary folder:

1. ``open(2)`` + ``close(2)`` of an already-verified safetensors file, ``--opens`` times,
   from a child process (the gate lets its own process through), in a gated folder and
   in an ungated one, interleaved in rounds; p50 and p99 of each and the added cost.
2. Time to the first byte of a ``--size-mib`` file whose version was never verified
   (verified at open, the reader waiting), beside ``cat`` of the same file ungated
   (page cache warm for both).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from rogue_watchdog.config.ship_gates import DEFAULT_PATTERNS  # noqa: E402
from rogue_watchdog.weights.api import verify_file  # noqa: E402
from rogue_watchdog.weights.opengate import OpenGate  # noqa: E402
from rogue_watchdog.weights.scan import ScanContext  # noqa: E402

_CHILD = """
import os, sys, time, json
path, n = sys.argv[1], int(sys.argv[2])
out = []
for _ in range(n):
    t = time.perf_counter_ns()
    fd = os.open(path, os.O_RDONLY)
    os.close(fd)
    out.append(time.perf_counter_ns() - t)
print(json.dumps(out))
"""

_FIRST_BYTE = """
import os, sys, time
t = time.perf_counter_ns()
fd = os.open(sys.argv[1], os.O_RDONLY)
os.read(fd, 1)
print(time.perf_counter_ns() - t)
os.close(fd)
"""


def _opens(path: Path, n: int) -> list[int]:
    cp = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(n)], capture_output=True, text=True
    )
    if cp.returncode != 0:
        raise SystemExit(f"child failed: {cp.stderr}")
    out: list[int] = json.loads(cp.stdout)
    return out


def _pct(ns: list[int], q: float) -> float:
    return float(np.percentile(np.array(ns) / 1e6, q))


def _first_byte_ms(path: Path) -> float:
    cp = subprocess.run(
        [sys.executable, "-c", _FIRST_BYTE, str(path)], capture_output=True, text=True
    )
    if cp.returncode != 0:
        raise SystemExit(f"reader failed: {cp.stderr}")
    return int(cp.stdout) / 1e6


def _big(path: Path, size_mib: int) -> None:
    n = size_mib * 1024 * 1024 // 4
    rng = np.random.default_rng(0)
    save_file({"w": (rng.standard_normal(n, dtype=np.float32) * 0.02)}, str(path))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--opens", type=int, default=5000, help="opens per side (default 5000)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--size-mib", type=int, default=1024, help="first-byte file (default 1024)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root (fanotify permission events)")
    ctx = ScanContext.default(None, mapped=False)
    with tempfile.TemporaryDirectory(prefix="open-gate-bench-") as tmp:
        gated, plain = Path(tmp) / "gated", Path(tmp) / "plain"
        gated.mkdir()
        plain.mkdir()
        for d in (gated, plain):
            save_file({"w": np.ones((64, 64), np.float32)}, str(d / "model.safetensors"))
        gate = OpenGate(
            "bench", "open", [gated], DEFAULT_PATTERNS, lambda p, n: verify_file(p, ctx, name=n)
        )
        gate.start()
        try:
            assert gate.state()[0] == "enforcing", gate.state()
            _opens(gated / "model.safetensors", 1)  # verified here, once
            per = max(1, args.opens // args.rounds)
            with_gate: list[int] = []
            without: list[int] = []
            for _ in range(args.rounds):
                with_gate += _opens(gated / "model.safetensors", per)
                without += _opens(plain / "model.safetensors", per)
            _big(gated / "big.safetensors", args.size_mib)
            os.link(gated / "big.safetensors", plain / "big.safetensors")
            subprocess.run(["cat", str(plain / "big.safetensors")], stdout=subprocess.DEVNULL)
            t = time.perf_counter()
            subprocess.run(["cat", str(plain / "big.safetensors")], stdout=subprocess.DEVNULL)
            cat_ms = (time.perf_counter() - t) * 1e3
            plain_first = _first_byte_ms(plain / "big.safetensors")
            gated_first = _first_byte_ms(gated / "big.safetensors")
            assert not gate.decisions, gate.decisions
        finally:
            gate.stop()
            ctx.close()
    print(f"open+close of a verified file, {len(with_gate)} opens per side, ms:")
    print(f"  without gate: p50 {_pct(without, 50):.4f}  p99 {_pct(without, 99):.4f}")
    print(f"  with gate:    p50 {_pct(with_gate, 50):.4f}  p99 {_pct(with_gate, 99):.4f}")
    print(
        f"  added:        p50 {_pct(with_gate, 50) - _pct(without, 50):.4f}"
        f"  p99 {_pct(with_gate, 99) - _pct(without, 99):.4f}"
    )
    print(f"first byte of a {args.size_mib} MiB file never verified before, ms:")
    print(f"  without gate: {plain_first:.2f}   cat of the whole file: {cat_ms:.1f}")
    print(f"  with gate (verified at open): {gated_first:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
