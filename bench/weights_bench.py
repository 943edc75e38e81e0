"""Benchmark of ``rogue_watchdog.weights.verify`` on large F16, BF16 and F32 safetensors files.

Everything is measured side by side in one run, on a warm page cache, best of
``--repeat`` interleaved runs, per dtype:

* verify in process vs a **read-only pass** over the same bytes: a fresh read-only
  memory map, one max-reduction per 4 MiB chunk, on one thread and on a pool of as
  many threads as verify uses (aim: verify >= 0.9x of the pass with the same threads);
* verify vs a plain memory-mapped read (memcpy, one thread; it writes what it reads);
* the whole ``rogue-watchdog verify-weights`` process vs ``cat FILE > /dev/null``;
* (BF16 only) verify vs ``safetensors.safe_open(...).get_tensor`` + ``np.isfinite``
  per tensor (aim >= 15x faster) and vs ``torch.isfinite`` when torch is installed;
* peak RSS of a fresh process verifying a 4 GiB file (aim <= 256 MiB).

Usage::

    python bench/weights_bench.py [--size-gib 1] [--rss-size-gib 4] [--dtypes F16,BF16,F32]
                                  [--repeat 5] [--dir /tmp] [--keep]

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
# The checkout this script sits in, unless a caller already put one first on the path:
# bench/run_all.py --code DIR imports this module in a child whose sys.path starts with
# DIR, and inserting REPO ahead of it measured this checkout instead of DIR.
if not any((Path(entry or ".") / "watchdog" / "__init__.py").is_file() for entry in sys.path):
    sys.path.insert(0, str(REPO))

from rogue_watchdog.weights import verify  # noqa: E402
from rogue_watchdog.weights.scan import CHUNK_BYTES, ScanContext  # noqa: E402

TENSOR_BYTES = 64 << 20
#: Bits per element and the first non-finite magnitude of each benchmarked dtype.
DTYPES = {"F16": (16, 0x7C00), "BF16": (16, 0x7F80), "F32": (32, 0x7F80_0000)}


def make_safetensors(
    path: Path, size_bytes: int, dtype: str = "BF16", seed: int = 0, values: str = "normal"
) -> None:
    """Write random finite tensors of 64 MiB each, ``size_bytes`` in all.

    ``values="normal"``: N(0, 0.02) like trained weights; ``"bits"``: magnitudes
    uniform over every finite bit pattern (up to the largest finite value), signs
    random.
    """
    bits, bad_lo = DTYPES[dtype]
    width = bits // 8
    n_tensors = max(1, size_bytes // TENSOR_BYTES)
    per = size_bytes // n_tensors // width
    header = {
        f"layers.{i}.weight": {
            "dtype": dtype,
            "shape": [per],
            "data_offsets": [i * per * width, (i + 1) * per * width],
        }
        for i in range(n_tensors)
    }
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(seed)
    utype = np.dtype(f"<u{width}")
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for _ in range(n_tensors):
            if values == "normal":
                x = rng.standard_normal(per, dtype=np.float32) * np.float32(0.02)
                if dtype == "F16":
                    raw = x.astype(np.float16).tobytes()
                elif dtype == "BF16":
                    raw = (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # truncate
                else:
                    raw = x.tobytes()
                fh.write(raw)
                continue
            mag = rng.integers(0, bad_lo, size=per, dtype=utype)  # never Inf/NaN
            sign = rng.integers(0, 2, size=per, dtype=utype) << utype.type(bits - 1)
            fh.write((mag | sign).tobytes())


def make_bf16_safetensors(path: Path, size_bytes: int, seed: int = 0) -> None:
    """Random finite bf16 tensors (the RSS run and older callers)."""
    make_safetensors(path, size_bytes, "BF16", seed)


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


def read_only_pass(path: Path, pool: ThreadPoolExecutor | None) -> None:
    """The yardstick: read every byte once from a fresh read-only map, writing nothing.

    One ``max`` over each 4 MiB chunk viewed as 64-bit integers (numpy's fastest
    reduction), on ``pool`` (chunks spread over its threads) or inline.
    """
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        n = len(mm) // 8 * 8

        def one(off: int) -> int:
            count = min(CHUNK_BYTES, n - off) // 8
            a = np.frombuffer(mm, dtype=np.uint64, count=count, offset=off)
            try:
                return int(a.max())
            finally:
                del a

        starts = range(0, n, CHUNK_BYTES)
        list(map(one, starts) if pool is None else pool.map(one, starts))


def whole_process(cmd: list[str]) -> float:
    """Wall time of a command, start to exit (seconds)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def interleaved(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best time of each function over ``repeat`` rounds, the functions taking turns.

    Taking turns spreads a noisy neighbour's load over every measure alike.
    """
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def bench_dtype(path: Path, repeat: int) -> dict[str, object]:
    """Verify vs its yardsticks on one warm file."""
    warm(path)
    size_gib = path.stat().st_size / (1 << 30)
    assert verify(path).exit_code == 0
    ctx = ScanContext.default()  # the pool verify() uses, kept for the yardstick
    threads = getattr(ctx.executor, "_max_workers", 1)
    pool = ctx.executor if isinstance(ctx.executor, ThreadPoolExecutor) else None
    cli = [sys.executable, "-m", "rogue_watchdog", "verify-weights", "--no-progress", str(path)]
    try:
        t = interleaved(
            {
                "verify": lambda: verify(path),
                "read_only_1_thread": lambda: read_only_pass(path, None),
                "read_only_pool": lambda: read_only_pass(path, pool),
                "mmap_memcpy": lambda: mmap_read(path),
                "cat": lambda: whole_process(["sh", "-c", 'cat "$1" > /dev/null', "sh", str(path)]),
                "verify_weights_process": lambda: whole_process(cli),
            },
            repeat,
        )
    finally:
        ctx.close()

    def gib_s(name: str) -> float:
        return round(size_gib / t[name], 2)

    return {
        "file_gib": round(size_gib, 3),
        "verify_threads": threads,
        "verify_gib_per_s": gib_s("verify"),
        "read_only_pass_gib_per_s": {
            "1": gib_s("read_only_1_thread"),
            str(threads): gib_s("read_only_pool"),
        },
        "verify_vs_read_only_same_threads": round(t["read_only_pool"] / t["verify"], 2),
        "verify_vs_read_only_1_thread": round(t["read_only_1_thread"] / t["verify"], 2),
        "verify_vs_mmap_memcpy": round(t["mmap_memcpy"] / t["verify"], 2),
        "verify_weights_process_s": round(t["verify_weights_process"], 3),
        "verify_weights_process_gib_per_s": gib_s("verify_weights_process"),
        "cat_s": round(t["cat"], 3),
        "cat_gib_per_s": gib_s("cat"),
        "verify_weights_process_vs_cat": round(t["cat"] / t["verify_weights_process"], 2),
    }


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
        "from rogue_watchdog.weights import verify; r = verify(sys.argv[1]);"
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
    ap.add_argument("--dtypes", default="F16,BF16,F32")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--values", choices=["normal", "bits"], default="normal")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="weights-bench-", dir=args.dir))
    big = tmp / "bf16-rss.safetensors"
    made: list[Path] = [big]
    results: dict[str, object] = {
        "cpus": os.cpu_count(),
        "chunk_bytes": CHUNK_BYTES,
        "values": args.values,
        "numpy": np.__version__,
    }
    try:
        for dtype in args.dtypes.split(","):
            path = tmp / f"{dtype.lower()}.safetensors"
            made.append(path)
            make_safetensors(path, int(args.size_gib * (1 << 30)), dtype, values=args.values)
            r = bench_dtype(path, args.repeat)
            if dtype == "BF16":
                t_verify = best_of(lambda p=path: verify(p), args.repeat)  # type: ignore[misc]
                try:
                    t_st = best_of(lambda p=path: safetensors_isfinite(p), 1)  # type: ignore[misc]
                    r.update(
                        safetensors_isfinite_s=round(t_st, 3),
                        speedup_vs_safetensors=round(t_st / t_verify, 1),
                    )
                except ImportError as exc:
                    r["safetensors_isfinite"] = f"skipped: {exc}"
                try:
                    t_torch = best_of(lambda p=path: torch_isfinite(p), 1)  # type: ignore[misc]
                    r.update(
                        torch_isfinite_s=round(t_torch, 3),
                        speedup_vs_torch=round(t_torch / t_verify, 2),
                    )
                except ImportError as exc:
                    r["torch_isfinite"] = f"skipped: {exc}"
            results[dtype] = r
            if not args.keep:
                path.unlink()
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
            for p in made:
                p.unlink(missing_ok=True)
            tmp.rmdir()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
