"""Run the lifecycle simulator long: ``python bench/trust_sim.py --steps 100000 --seed S``.

Drives the real Scanner, Daemon.tick and enforcer over a simulated host
(tests/sim/machine.py) for about STEPS rule steps, in examples of ``--per-example``
steps, with daemon kills between action steps and storage outages injected, and checks
the invariants I1–I8 after every tick (I7, every side effect has its write-ahead record,
at every side effect). Each violation is printed with
the shrunk list of steps that leads to it (hypothesis's "Falsifying example"); the exit
status is 1 when there is any, 0 when there is none. ``--json`` prints a summary line.

Runs in its own process: pynvml loads one NVML library per process, and the simulator's
is the fake ``libnvidia-ml.so.1`` built from tests/fakenvml (gcc).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.sim.machine import TrustMachine


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000, help="rule steps in all (default 2000)")
    p.add_argument("--per-example", type=int, default=40, help="steps per example (40)")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    p.add_argument("--no-shrink", action="store_true", help="report the first failure unshrunk")
    p.add_argument("--json", action="store_true", help="print a JSON summary line")
    args = p.parse_args(argv)
    examples = max(1, args.steps // args.per_example)
    work = Path(tempfile.mkdtemp(prefix="trust-sim-run-", dir=os.environ.get("TMPDIR")))
    TrustMachine.workdir = work
    TrustMachine._hypothesis_internal_use_seed = args.seed  # type: ignore[attr-defined]
    phases = [Phase.generate] if args.no_shrink else [Phase.generate, Phase.shrink]
    conf = settings(
        max_examples=examples,
        stateful_step_count=args.per_example,
        deadline=None,
        database=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=True,
        print_blob=False,
    )
    started = time.monotonic()
    violations: list[str] = []
    try:
        run_state_machine_as_test(TrustMachine, settings=conf)
    except BaseException as exc:  # every failure is a violation (or a broken simulator)
        text = "".join(traceback.format_exception(exc))
        violations.append(text)
        print(text, file=sys.stderr)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    summary = {
        "steps": examples * args.per_example,
        "examples": examples,
        "seed": args.seed,
        "violations": len(violations),
        **TrustMachine.counts,
        "wall_s": round(time.monotonic() - started, 1),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"trust_sim: {summary['steps']} steps in {examples} examples (seed {args.seed}): "
            f"{TrustMachine.counts['ticks']} ticks, {TrustMachine.counts['jobs']} jobs judged, "
            f"{TrustMachine.counts['signals']} signals, {TrustMachine.counts['kills']} daemon "
            f"kills, {TrustMachine.counts['storage_faults']} storage outages, "
            f"{TrustMachine.counts['taken_over']} actions taken over, "
            f"{TrustMachine.counts['lost_verdicts']} known-limit signals: "
            f"{len(violations)} violation(s), {summary['wall_s']} s"
        )
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
