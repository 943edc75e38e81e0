"""Differential fuzzer of the ship gate against the loaders people use.

    python bench/gate_fuzz.py --cases 100000 --seed 4242 [--formats gguf,npy] [--save DIR]

Draws ``--cases`` files (split evenly over the formats) from the structure-aware
generators in ``tests/weights/fuzzgen.py``, feeds each to the gate (``verify``, what
``verify-weights`` runs) and to the loaders for its suffix (``tests/weights/loaders.py``:
safetensors, ``torch.load(weights_only=True)`` plain and mmap, numpy, gguf-py, and
llama.cpp's C reader built once for this run), and checks the property of
``tests/weights/differential.py``. Prints each disagreeing file with every reader's
answer (and saves it under ``--save``), then counts per format: cases, gate exits
0/1/2, files each loader refused, violations per kind. Exits 1 on any violation.

Needs the test extras (``scripts/setup.sh --test``: torch, safetensors, gguf, ml_dtypes,
hypothesis, and the llama-cpp-python sdist for the C reader).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hseed  # noqa: E402

from tests.weights.differential import judge  # noqa: E402
from tests.weights.fuzzgen import STRATEGIES, Case  # noqa: E402
from tests.weights.ggml.build import build_reader  # noqa: E402
from tests.weights.loaders import loaders_for  # noqa: E402


def _fuzz_format(
    fmt: str,
    per: int,
    args: argparse.Namespace,
    work: Path,
    exe: Path | None,
    c: collections.Counter[str],
    found: list[tuple[Case, str]],
) -> None:
    """Run ``per`` cases of one format, counting into ``c`` and appending to ``found``."""
    loaders = loaders_for(".pt" if fmt == "torch" else f".{fmt}", exe)

    @settings(
        max_examples=per,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hseed(args.seed)
    @given(case=STRATEGIES[fmt])
    def run(case: Case) -> None:
        path = work / f"case{case.suffix}"
        path.write_bytes(case.data)
        out = judge(path, loaders)
        c["cases"] += 1
        c[f"gate exit {out.exit_code}"] += 1
        for r in out.readings:
            if not r.accepted:
                c[f"{r.loader} refused"] += 1
                if out.exit_code == 0 and args.show_lenient:
                    print(f"LENIENT [{fmt}] {' '.join(case.mutations)}: {r.summary()}")
        for kind, _ in out.violations:
            c[f"violation {kind}"] += 1
        if out.violations:
            text = f"[{fmt}] {' '.join(case.mutations) or 'no mutation'}\n{out.describe()}"
            found.append((case, text))
            print(text, flush=True)
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"{fmt}-{len(found)}{case.suffix}").write_bytes(case.data)

    run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=2000, help="files in all (default 2000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--formats", default=",".join(STRATEGIES), help="comma-separated")
    ap.add_argument("--save", type=Path, help="folder for every disagreeing file")
    ap.add_argument(
        "--show-lenient",
        action="store_true",
        help="print each file the gate passed that a loader refused",
    )
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = ap.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    unknown = set(formats) - set(STRATEGIES)
    if unknown:
        ap.error(f"unknown formats {sorted(unknown)}; choose from {sorted(STRATEGIES)}")
    with tempfile.TemporaryDirectory(prefix="gate-fuzz-") as tmp:
        work = Path(tmp)
        exe = build_reader(work / "ggml") if "gguf" in formats else None
        stats: dict[str, collections.Counter[str]] = {f: collections.Counter() for f in formats}
        found: list[tuple[Case, str]] = []
        t0 = time.monotonic()
        per = max(1, args.cases // len(formats))
        for fmt in formats:
            _fuzz_format(fmt, per, args, work, exe, stats[fmt], found)
        elapsed = time.monotonic() - t0
    total = sum(c["cases"] for c in stats.values())
    if args.json:
        print(
            json.dumps(
                {
                    "seed": args.seed,
                    "cases": total,
                    "violations": len(found),
                    "elapsed_s": round(elapsed, 1),
                    "per_format": {f: dict(c) for f, c in stats.items()},
                },
                indent=2,
            )
        )
    else:
        print(f"seed {args.seed}: {total} cases in {elapsed:.0f} s, {len(found)} violating files")
        for fmt, c in stats.items():
            print(f"  {fmt}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
