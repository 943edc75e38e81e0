"""Benchmark of ``watchdog.weights.verify`` on large bf16 safetensors files.

Ratios are measured side by side in one run, on a warm page cache:

* verify vs a plain memory-mapped read (memcpy) of the same bytes (aim >= 0.8x);
* verify vs ``safetensors.safe_open(...).get_tensor`` + ``np.isfinite`` per
  tensor (aim >= 15x faster; needs ``safetensors``, bench-only);
* verify vs ``torch.isfinite`` on the tensors loaded by safetensors (when torch is
  installed);
* peak RSS of a fresh process verifying a 4 GiB file (aim <= 256 MiB).

Usage::

    python bench/weights_bench.py [--size-gib 1] [--rss-size-gib 4] [--dir /tmp] [--keep]

The big files are deleted afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from watchdog.weights import verify  # noqa: E402

TENSOR_BYTES = 64 << 20


def make_bf16_safetensors(path: Path, size_bytes: int, seed: int = 0) -> None:
    """Write random finite bf16 tensors of 64 MiB each, ``size_bytes`` in all."""
    n_tensors = max(1, size_bytes // TENSOR_BYTES)
    per = size_bytes // n_tensors // 2
    header = {
        f"layers.{i}.weight": {
            "dtype": "BF16",
            "shape": [per],
            "data_offsets": [i * per * 2, (i + 1) * per * 2],
        }
        for i in range(n_tensors)
    }
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for _ in range(n_tensors):
            mag = rng.integers(0, 0x7F80, size=per, dtype=np.uint16)  # never Inf/NaN
            sign = rng.integers(0, 2, size=per, dtype=np.uint16) << 15
            fh.write((mag | sign).tobytes())


def warm(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(64 << 20):
            pass


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def mmap_read(path: Path) -> None:
    """Copy every byte out of a memory map in 4 MiB chunks (one thread)."""
    chunk = 4 << 20
    dst = bytearray(chunk)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        mv = memoryview(mm)
        try:
            for off in range(0, len(mm), chunk):
                piece = mv[off : off + chunk]
                dst[: len(piece)] = piece
                del piece
        finally:
            mv.release()


def safetensors_isfinite(path: Path) -> bool:
    import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy for the cast below)
    from safetensors import safe_open

    ok = True
    with safe_open(str(path), framework="np") as f:
        for k in f.keys():  # noqa: SIM118 - safe_open has no __iter__
            ok &= bool(np.isfinite(f.get_tensor(k).astype(np.float32)).all())
    return ok


def torch_isfinite(path: Path) -> bool:
    import torch
    from safetensors import safe_open

    ok = True
    with safe_open(str(path), framework="pt") as f:
        for k in f.keys():  # noqa: SIM118
            ok &= bool(torch.isfinite(f.get_tensor(k)).all())
    return ok


def peak_rss_mib(path: Path) -> tuple[float, int]:
    """Peak RSS (MiB) of a fresh process verifying ``path``, and its exit code.

    Read from ``VmHWM`` in ``/proc/self/status``: unlike ``ru_maxrss`` it belongs
    to the new address space, so it does not inherit this (large) process's peak
    across fork/exec.
    """
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]);"
        "from watchdog.weights import verify; r = verify(sys.argv[1]);"
        "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0];"
        "print(r.exit_code, hwm.split()[1])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(REPO)], capture_output=True, text=True
    )
    exit_code, rss_kib = out.stdout.split()
    return int(rss_kib) / 1024, int(exit_code)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--rss-size-gib", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="weights-bench-", dir=args.dir))
    small = tmp / "bf16-1g.safetensors"
    big = tmp / "bf16-4g.safetensors"
    results: dict[str, object] = {"cpus": os.cpu_count()}
    try:
        make_bf16_safetensors(small, int(args.size_gib * (1 << 30)))
        warm(small)
        size_gib = small.stat().st_size / (1 << 30)
        assert verify(small).exit_code == 0
        t_verify = best_of(lambda: verify(small), args.repeat)
        t_mmap = best_of(lambda: mmap_read(small), args.repeat)
        results.update(
            file_gib=round(size_gib, 3),
            verify_s=round(t_verify, 3),
            verify_gib_per_s=round(size_gib / t_verify, 2),
            mmap_read_s=round(t_mmap, 3),
            verify_speed_vs_mmap_read=round(t_mmap / t_verify, 2),
        )
        try:
            t_st = best_of(lambda: safetensors_isfinite(small), 1)
            results.update(
                safetensors_isfinite_s=round(t_st, 3),
                speedup_vs_safetensors=round(t_st / t_verify, 1),
            )
        except ImportError as exc:
            results["safetensors_isfinite"] = f"skipped: {exc}"
        try:
            t_torch = best_of(lambda: torch_isfinite(small), 1)
            results.update(
                torch_isfinite_s=round(t_torch, 3), speedup_vs_torch=round(t_torch / t_verify, 2)
            )
        except ImportError as exc:
            results["torch_isfinite"] = f"skipped: {exc}"
        small.unlink()
        if args.rss_size_gib > 0:
            make_bf16_safetensors(big, int(args.rss_size_gib * (1 << 30)))
            warm(big)
            rss, code = peak_rss_mib(big)
            results.update(
                rss_file_gib=round(big.stat().st_size / (1 << 30), 3),
                peak_rss_mib=round(rss, 1),
                rss_run_exit_code=code,
            )
    finally:
        if not args.keep:
            for p in (small, big):
                p.unlink(missing_ok=True)
            tmp.rmdir()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
