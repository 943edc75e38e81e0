"""Would a compiled hot loop pay? Issue 34, item 4. The F16/BF16 check measured here was
integrated in session j (watchdog/weights/_finitec.c, docs/performance.md): ``verify
(product)`` and ``any_nonfinite (product)`` use it where it is built, ``..., numpy only``
is the same with it turned off (``finite._KERNEL``), the numpy path before it.

Two readers, each beside the product's own Python/numpy path in one run:

* **F16/BF16 non-finite check**, warm 1 GiB file map, the same method as
  ``bench/run_all.py``'s verify-weights rows: a read-only pass is the yardstick
  (``bench/weights_bench.py``'s ``read_only_pass``: a fresh read-only map, one numpy
  max per 4 MiB chunk on the pool ``verify`` uses), the cases take turns each round
  (the order rotating) and each case's ratio is the median of per-round ratios
  ``read-only time / case time``, in wall time and in CPU time (all threads). Cases:
  ``verify`` itself (the run_all row); ``verify`` with the C check swapped in for
  F16/BF16 (here only, restored after each call); the product's ``any_nonfinite``
  (numpy, two max-reductions) per 4 MiB chunk over the same map and pool; a numpy
  single read (``& 0x7fff`` into a cache-sized scratch, then its max); a read-only pass
  in C; a C single pass (and/add/or over the raw 16-bit words) per chunk, left to gcc's
  auto-vectoriser and written with vector extensions, built with ``-O2`` and with
  ``-O3 -march=x86-64-v2`` / ``-v3`` when the CPU runs them. On the product's 2-thread
  pool and inline (``--threads``).
* **the /proc walk** of the one-shot's first cycle: every ``/proc/PID`` listed, and
  ``stat``, ``cmdline``, ``status`` read and ``exe`` readlinked for each, as
  watchdog/sources/procfs.py does (its ``_read_bytes``: one 4096-byte read, more only
  when that one was full). Python (``os.scandir`` + the product's ``_read_bytes``)
  vs one C call that does the same opens/reads into a buffer, then Python slices
  the bytes out per process (parsing stays Python either way). Beside them, for
  scale, the product's own first-cycle table (``ProcessTable(late_reads=True)
  .refresh()`` on a new table: reads, parsing and records). CPU of the calling
  thread and wall time, median of rounds taking turns.

The C source is bench/compiled_readers.c, built with the host's ``gcc`` into a
temporary folder and loaded with ctypes (which releases the GIL during each call).

Usage::

    nice -n 5 python bench/compiled_readers.py [--only weights,walk] [--size-mib 1024]
        [--rounds 5] [--threads 2,1] [--walk-rounds 15] [--extra N]
        [--files stat,cmdline,status] [--no-exe] [--dir DIR] [--json FILE]

``--extra N`` starts N sleeping processes for the walk (the run_all rows' 2,000).
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import mmap
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if not any((Path(entry or ".") / "watchdog" / "__init__.py").is_file() for entry in sys.path):
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from weights_bench import CHUNK_BYTES, make_safetensors, read_only_pass  # noqa: E402

from rogue_watchdog.sources import procfs  # noqa: E402
from rogue_watchdog.weights import finite, verify  # noqa: E402
from rogue_watchdog.weights import scan as wscan  # noqa: E402
from rogue_watchdog.weights.dtypes import BF16, F16, FloatCode  # noqa: E402
from rogue_watchdog.weights.finite import any_nonfinite  # noqa: E402
from rogue_watchdog.weights.scan import ScanContext  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
SOURCE = BENCH / "compiled_readers.c"
#: Builds tried: label -> gcc flags. A build whose -march the CPU cannot run is skipped.
BUILDS = {
    "C -O2": ["-O2"],
    "C -O3 x86-64-v2": ["-O3", "-march=x86-64-v2"],
    "C -O3 x86-64-v3": ["-O3", "-march=x86-64-v3"],
}
#: What each -march level needs of /proc/cpuinfo's flags (x86-64 psABI levels).
MARCH_FLAGS = {
    "x86-64-v2": {"sse4_2", "popcnt", "ssse3"},
    "x86-64-v3": {"avx2", "bmi2", "fma", "movbe"},
}
CODES = {"F16": F16, "BF16": BF16}
#: The C checks: function -> how its loop is vectorised.
FUNCTIONS = {"any_nonfinite_u16": "auto", "any_nonfinite_u16_vec": "vector ext."}


# -- building ----------------------------------------------------------------------------


def cpu_flags() -> set[str]:
    """The flags of the first CPU in /proc/cpuinfo (empty when unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def build(folder: Path) -> dict[str, ctypes.CDLL]:
    """Each build of :data:`SOURCE` this CPU runs, loaded; label -> library."""
    compiler = shutil.which("gcc")
    if compiler is None:
        raise SystemExit("needs gcc: the compiled readers are built at run time")
    flags = cpu_flags()
    out: dict[str, ctypes.CDLL] = {}
    for i, (label, opts) in enumerate(BUILDS.items()):
        march = next((o.split("=", 1)[1] for o in opts if o.startswith("-march=")), None)
        if march is not None and not MARCH_FLAGS[march] <= flags:
            continue
        lib_path = folder / f"readers{i}.so"
        subprocess.run(
            [compiler, *opts, "-shared", "-fPIC", "-o", str(lib_path), str(SOURCE)], check=True
        )
        lib = ctypes.CDLL(str(lib_path))
        lib.any_nonfinite_u16.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint16]
        lib.any_nonfinite_u16.restype = ctypes.c_int
        lib.any_nonfinite_u16_vec.argtypes = lib.any_nonfinite_u16.argtypes
        lib.any_nonfinite_u16_vec.restype = ctypes.c_int
        lib.or_u64.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.or_u64.restype = ctypes.c_uint64
        lib.walk_proc.argtypes = [
            ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
            ctypes.c_long, ctypes.c_void_p, ctypes.c_long, ctypes.POINTER(ctypes.c_long),
        ]  # fmt: skip
        lib.walk_proc.restype = ctypes.c_long
        out[label] = lib
    return out


def gcc_version() -> str:
    try:
        return subprocess.run(
            ["gcc", "--version"], capture_output=True, text=True, check=True
        ).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "gcc (unknown)"


# -- shared ------------------------------------------------------------------------------


def load() -> str:
    """The 1/5/15-minute load averages, as text."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of the per-round ratios ``a[i] / b[i]`` (as bench/run_all.py)."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True) if y > 0)


def take_turns(
    cases: dict[str, Callable[[], object]], rounds: int, clocks: dict[str, Callable[[], float]]
) -> dict[str, dict[str, list[float]]]:
    """Each case once per round, the order rotating by one each round, after one
    warm-up of each; clock name -> case -> the clock's deltas."""
    names = list(cases)
    for name in names:
        cases[name]()
    out: dict[str, dict[str, list[float]]] = {c: {n: [] for n in names} for c in clocks}
    for i in range(rounds):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            t0 = {c: clock() for c, clock in clocks.items()}
            cases[name]()
            for c, clock in clocks.items():
                out[c][name].append(clock() - t0[c])
    return out


# -- the F16/BF16 check ------------------------------------------------------------------


def data_span(path: Path) -> tuple[int, int]:
    """(offset, length) of the tensor bytes of a safetensors file (after its header)."""
    with path.open("rb") as fh:
        header_len = int.from_bytes(fh.read(8), "little")
    start = 8 + header_len
    return start, path.stat().st_size - start


def chunked(
    path: Path, pool: Executor | None, check: Callable[[memoryview | mmap.mmap, int, int], bool]
) -> bool:
    """``check(map, offset, n_words)`` over every 4 MiB chunk of the tensor bytes of a
    fresh read-only map (as read_only_pass maps afresh), on ``pool``; True if any fired."""
    start, length = data_span(path)
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:

        def one(off: int) -> bool:
            return check(mm, off, min(CHUNK_BYTES, start + length - off) // 2)

        starts = range(start, start + length, CHUNK_BYTES)
        return any(list(map(one, starts) if pool is None else pool.map(one, starts)))


def numpy_check(code: FloatCode) -> Callable[[memoryview | mmap.mmap, int, int], bool]:
    """The product's check of one chunk: ``any_nonfinite`` on a ``<u2`` view."""

    def check(mm: memoryview | mmap.mmap, off: int, count: int) -> bool:
        a = np.frombuffer(mm, dtype="<u2", count=count, offset=off)
        try:
            return any_nonfinite(code, a)
        finally:
            del a

    return check


#: Words per piece of :func:`numpy_blocked_check`: 512 KiB, so the scratch stays in L2.
BLOCK_WORDS = 256 * 1024


def numpy_blocked_check(code: FloatCode) -> Callable[[memoryview | mmap.mmap, int, int], bool]:
    """A no-compiler single read for comparison: per 512 KiB piece, ``magnitude = w &
    0x7fff`` into a scratch array that stays in cache, then one max of the scratch (the
    two-reduction path reads the mapped bytes twice; this reads them once)."""
    bad_lo = code.bad_lo
    local = threading.local()

    def check(mm: memoryview | mmap.mmap, off: int, count: int) -> bool:
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = np.empty(BLOCK_WORDS, dtype="<u2")
        a = np.frombuffer(mm, dtype="<u2", count=count, offset=off)
        try:
            for i in range(0, count, BLOCK_WORDS):
                piece = a[i : i + BLOCK_WORDS]
                out = scratch[: piece.size]
                np.bitwise_and(piece, 0x7FFF, out=out)
                if int(out.max()) >= bad_lo:
                    return True
            return False
        finally:
            del a

    return check


def c_check(
    lib: ctypes.CDLL, code: FloatCode, fn: str = "any_nonfinite_u16"
) -> Callable[[memoryview | mmap.mmap, int, int], bool]:
    """The C single pass over one chunk (the address taken from a numpy view)."""
    bad_lo = code.bad_lo
    call = getattr(lib, fn)

    def check(mm: memoryview | mmap.mmap, off: int, count: int) -> bool:
        a = np.frombuffer(mm, dtype="<u2", count=count, offset=off)
        try:
            return bool(call(a.ctypes.data, count, bad_lo))
        finally:
            del a

    return check


def c_read_only(lib: ctypes.CDLL, path: Path, pool: Executor | None) -> None:
    """A read-only pass in C (``or_u64`` per 4 MiB chunk of a fresh map), for scale."""

    def check(mm: memoryview | mmap.mmap, off: int, count: int) -> bool:
        a = np.frombuffer(mm, dtype="<u8", count=count // 4, offset=off)
        try:
            return bool(lib.or_u64(a.ctypes.data, a.size) == 0)
        finally:
            del a

    chunked(path, pool, check)


def numpy_only(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with the product's compiled check turned off for the call (a checkout from
    before session j has none): the numpy path, in the same process and pool."""

    def run() -> object:
        saved = getattr(finite, "_KERNEL", None)
        finite._KERNEL = None
        try:
            return fn()
        finally:
            finite._KERNEL = saved

    return run


def verify_with(lib: ctypes.CDLL, fn: str, path: Path, ctx: ScanContext) -> int:
    """``verify`` with the C check swapped in for F16/BF16 (bench only, restored after):
    what the product row would read if the kernel were compiled, everything else kept.
    Returns verify's exit code."""
    call = getattr(lib, fn)
    bad_lo = {id(c): c.bad_lo for c in CODES.values()}

    def fast(code: FloatCode, values: Any) -> bool:
        if (
            id(code) in bad_lo
            and values.ndim == 1
            and values.flags.c_contiguous
            and values.dtype.byteorder in ("=", "<")
        ):
            return bool(call(values.ctypes.data, values.size, bad_lo[id(code)]))
        return any_nonfinite(code, values)

    saved = finite.any_nonfinite, wscan.any_nonfinite
    finite.any_nonfinite = wscan.any_nonfinite = fast  # type: ignore[assignment]
    try:
        return verify(path, ctx=ctx).exit_code
    finally:
        finite.any_nonfinite, wscan.any_nonfinite = saved


def self_test(libs: dict[str, ctypes.CDLL]) -> None:
    """Every build agrees with the product's check on planted values (or exits)."""
    base = np.arange(0, 3 * 128 + 7, dtype="<u2") % 0x3C00
    for dtype, code in CODES.items():
        for (label, lib), fn in itertools.product(libs.items(), FUNCTIONS):
            call = getattr(lib, fn)
            for pos in (None, 0, 31, 32, 127, 128, 300, base.size - 1):
                for bits in (code.bad_lo, code.bad_lo + 1, 0x7FFF, 0x8000 | code.bad_lo, 0xFFFF):
                    probe = base.copy()
                    if pos is not None:
                        probe[pos] = bits
                    want = any_nonfinite(code, probe)
                    got = bool(call(probe.ctypes.data, probe.size, code.bad_lo))
                    if got != want:
                        raise SystemExit(
                            f"{label} {fn} {dtype}: at {pos} {bits:#x}: {got} != {want}"
                        )


def section_weights(
    args: argparse.Namespace, libs: dict[str, ctypes.CDLL], folder: Path
) -> dict[str, Any]:
    """Every case over the same warm file, per dtype and per thread count."""
    size = args.size_mib * MIB
    out: dict[str, Any] = {}
    for dtype, code in CODES.items():
        path = folder / f"{dtype.lower()}.safetensors"
        make_safetensors(path, size, dtype)
        with path.open("rb+") as fh:
            os.fsync(fh.fileno())
        try:
            assert verify(path).exit_code == 0
            for threads in args.threads:
                out[f"{dtype}, {threads} thread(s)"] = weights_once(args, libs, path, code, threads)
        finally:
            path.unlink(missing_ok=True)
    return out


def weights_once(
    args: argparse.Namespace, libs: dict[str, ctypes.CDLL], path: Path, code: FloatCode,
    threads: int,
) -> dict[str, Any]:  # fmt: skip
    """The cases taking turns on ``threads`` threads: the product's pool (2 threads,
    as ``verify`` and run_all use it) or inline (1)."""
    ctx = ScanContext.default() if threads > 1 else ScanContext(executor=None)
    try:
        pool = ctx.executor
        got = getattr(pool, "_max_workers", 1)
        if got != threads:
            raise SystemExit(f"the product's pool has {got} threads here, not {threads}")
        cases: dict[str, Callable[[], object]] = {
            "read-only pass": lambda: read_only_pass(path, pool),  # type: ignore[arg-type]
            "verify (product)": lambda: verify(path, ctx=ctx),
            "verify, numpy only": numpy_only(lambda: verify(path, ctx=ctx)),
            "any_nonfinite (product)": lambda: chunked(path, pool, numpy_check(code)),
            "any_nonfinite, numpy only": numpy_only(lambda: chunked(path, pool, numpy_check(code))),
            "verify, C -O2 vector ext. in": lambda: verify_with(
                libs["C -O2"], "any_nonfinite_u16_vec", path, ctx
            ),
            "numpy blocked and+max": lambda: chunked(path, pool, numpy_blocked_check(code)),
            "C -O2 read-only (or_u64)": lambda: c_read_only(libs["C -O2"], path, pool),
        }
        for (label, lib), (fn, how) in itertools.product(libs.items(), FUNCTIONS.items()):
            cases[f"{label} {how}"] = lambda li=lib, f=fn: chunked(  # type: ignore[misc]
                path, pool, c_check(li, code, f)
            )
        if verify_with(libs["C -O2"], "any_nonfinite_u16_vec", path, ctx) != 0:
            raise SystemExit("verify with the C check swapped in did not pass a finite file")
        before = load()
        times = take_turns(
            cases, args.rounds, {"wall": time.perf_counter, "cpu": time.process_time}
        )
        after = load()
    finally:
        ctx.close()
    gib = path.stat().st_size / GIB
    wall, cpu = times["wall"], times["cpu"]
    rows = {
        name: {
            "gib_s": gib / statistics.median(t),
            "vs_read_only": paired_ratio(wall["read-only pass"], t),
            "cpu_s_per_gib": statistics.median(cpu[name]) / gib,
            "cpu_vs_read_only": paired_ratio(cpu["read-only pass"], cpu[name]),
        }
        for name, t in wall.items()
    }
    print(f"\n{code.name}, warm {gib:.3g} GiB, {threads} thread(s), {args.rounds} rounds, "
          f"load {before} -> {after}")  # fmt: skip
    print(f"  {'':30s} {'wall GiB/s':>10s} {'vs r/o':>7s} {'CPU s/GiB':>10s} {'vs r/o':>7s}")
    for name, r in rows.items():
        print(f"  {name:30s} {r['gib_s']:10.2f} {r['vs_read_only']:6.2f}x "
              f"{r['cpu_s_per_gib']:10.3f} {r['cpu_vs_read_only']:6.2f}x")  # fmt: skip
    return {"threads": threads, "load_before": before, "load_after": after, "rows": rows}


# -- the /proc walk ----------------------------------------------------------------------


def walk_python(root: str, names: Sequence[str], exe: bool) -> dict[int, list[bytes | None]]:
    """The product's reads: scandir, then ``_read_bytes`` per file and readlink of exe."""
    read = procfs._read_bytes
    out: dict[int, list[bytes | None]] = {}
    for e in os.scandir(root):
        name = e.name
        if not (name.isascii() and name.isdigit()):
            continue
        base = f"{root}/{name}"
        got: list[bytes | None] = [read(f"{base}/{n}") for n in names]
        if exe:
            try:
                got.append(os.fsencode(os.readlink(f"{base}/exe")))
            except OSError:
                got.append(None)
        out[int(name)] = got
    return out


class CWalk:
    """One C call reads everything into a buffer; Python slices it per process."""

    def __init__(self, lib: ctypes.CDLL, root: str, names: Sequence[str], exe: bool) -> None:
        self.lib = lib
        self.root = root.encode()
        self.names = b"".join(n.encode() + b"\0" for n in names)
        self.nnames = len(names)
        self.exe = exe
        self.per = 1 + len(names) + (1 if exe else 0)
        self.data = ctypes.create_string_buffer(8 * MIB)
        self.index = np.zeros(4096 * self.per, dtype=np.int32)

    def read(self) -> tuple[int, int]:
        """The C call alone, growing the buffers until they fit: (processes, bytes)."""
        used = ctypes.c_long(0)
        while True:
            n = self.lib.walk_proc(
                self.root, self.names, self.nnames, int(self.exe), self.data,
                len(self.data), self.index.ctypes.data, self.index.size, ctypes.byref(used),
            )  # fmt: skip
            if n == -2:
                self.data = ctypes.create_string_buffer(2 * len(self.data))
                self.index = np.zeros(2 * self.index.size, dtype=np.int32)
                continue
            if n < 0:
                raise OSError(f"cannot list {self.root.decode()}")
            return n, used.value

    def __call__(self) -> dict[int, list[bytes | None]]:
        """The C call, then one ``bytes`` per file per process, as the Python walk gives."""
        n, used = self.read()
        data = self.data.raw[:used]
        idx = self.index[: n * self.per].tolist()
        out: dict[int, list[bytes | None]] = {}
        pos = 0
        per = self.per
        for i in range(0, n * per, per):
            got: list[bytes | None] = []
            for length in idx[i + 1 : i + per]:
                if length < 0:
                    got.append(None)
                else:
                    got.append(data[pos : pos + length])
                    pos += length
            out[idx[i]] = got
        return out


def section_walk(args: argparse.Namespace, libs: dict[str, ctypes.CDLL]) -> dict[str, Any]:
    """The walk at the host's process count, plus ``--extra`` sleepers when asked."""
    from run_all import sleepers

    with sleepers(args.extra) as pids:
        return walk_now(args, libs, len(pids))


def walk_now(args: argparse.Namespace, libs: dict[str, ctypes.CDLL], extra: int) -> dict[str, Any]:
    names = [n for n in args.files.split(",") if n]
    lib = libs["C -O2"]  # the walk is system calls: the build flags do not matter
    cwalk = CWalk(lib, args.proc_root, names, args.exe)
    a, b = walk_python(args.proc_root, names, args.exe), cwalk()
    common = a.keys() & b.keys()
    same = sum(1 for pid in common if a[pid][0] == b[pid][0])  # stat lines of the moment
    procs = len(a)

    def table() -> None:
        procfs.ProcessTable(args.proc_root, late_reads=True).refresh()

    cases: dict[str, Callable[[], object]] = {
        "Python (scandir + _read_bytes)": lambda: walk_python(args.proc_root, names, args.exe),
        "C reads + Python slices": cwalk,
        "C reads only": cwalk.read,
        "product first-cycle table": table,
    }
    out: dict[str, Any] = {
        "processes": procs,
        "extra_sleepers": extra,
        "files": names + (["exe (readlink)"] if args.exe else []),
        "agree": f"{same}/{len(common)} stat lines byte-equal between the two walks",
    }
    before = load()
    times = take_turns(
        cases, args.walk_rounds, {"cpu": time.thread_time, "wall": time.perf_counter}
    )
    after = load()
    for clock_name, per_case in times.items():
        out[clock_name] = {
            "load_before": before,
            "load_after": after,
            "ms": {name: statistics.median(t) * 1000 for name, t in per_case.items()},
        }
    print(
        f"\n/proc walk, {procs} processes ({extra} of them our sleepers), "
        f"reading {', '.join(out['files'])}; {out['agree']}"
    )
    for clock_name in ("cpu", "wall"):
        r = out[clock_name]
        print(f"  {clock_name} ms (median of {args.walk_rounds}, "
              f"load {r['load_before']} -> {r['load_after']}):")  # fmt: skip
        for name, ms in r["ms"].items():
            print(f"    {name:32s} {ms:7.1f} ms  {ms * 1000 / max(procs, 1):5.1f} us/process")
    py, c = (
        out["cpu"]["ms"]["Python (scandir + _read_bytes)"],
        out["cpu"]["ms"]["C reads + Python slices"],
    )
    out["saved_cpu_ms"] = py - c
    out["saved_share_of_oneshot"] = (py - c) / 1000 / args.oneshot_s
    print(f"  C saves {py - c:.1f} ms CPU = {out['saved_share_of_oneshot']:.1%} of a "
          f"{args.oneshot_s:g} s one-shot")  # fmt: skip
    return out


# -- main --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--only", default="weights,walk", help="weights,walk")
    parser.add_argument("--size-mib", type=int, default=1024, help="weights file size")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the weights cases")
    parser.add_argument(
        "--threads",
        default="2,1",
        type=lambda t: [int(x) for x in t.split(",")],
        help="thread counts of the weights cases (2: the product's pool)",
    )
    parser.add_argument("--walk-rounds", type=int, default=15, help="rounds of the walk cases")
    parser.add_argument("--files", default="stat,cmdline,status", help="files read per process")
    parser.add_argument("--no-exe", dest="exe", action="store_false", help="skip readlink exe")
    parser.add_argument("--extra", type=int, default=0, help="sleepers started for the walk")
    parser.add_argument("--proc-root", default="/proc")
    parser.add_argument("--oneshot-s", type=float, default=0.38, help="the one-shot to compare")
    parser.add_argument("--dir", default=None, help="where the weights file is written")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    report: dict[str, Any] = {
        "host": f"{platform.node()}, {os.cpu_count()} CPUs, {platform.release()}, "
        f"{gcc_version()}, Python {platform.python_version()}, numpy {np.__version__}",
        "command": " ".join(["python", "bench/compiled_readers.py", *(argv or sys.argv[1:])]),
        "nice": os.nice(0),
        "load_start": load(),
    }
    print(f"{report['host']}; nice {report['nice']}; load {report['load_start']}")
    with tempfile.TemporaryDirectory(prefix="compiled-readers-", dir=args.dir) as tmp:
        folder = Path(tmp)
        libs = build(folder)
        self_test(libs)
        report["builds"] = list(libs)
        if "weights" in only:
            report["weights"] = section_weights(args, libs, folder)
        if "walk" in only:
            report["walk"] = section_walk(args, libs)
    report["load_end"] = load()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
