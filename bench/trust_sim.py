"""Run the lifecycle simulator long: ``python bench/trust_sim.py --steps 100000 --seed S``.

Drives the real Scanner, Daemon.tick and enforcer over a simulated host
(tests/sim/machine.py) for about STEPS rule steps, in examples of ``--per-example``
steps, with daemon kills between action steps, storage outages and kernel process
events (lost, late, out of order) injected, and checks
the invariants I1–I16 after every tick (I12, every side effect has its write-ahead
record, at every side effect). ``--machine slurm`` drives the
job-end sweep (``health-check``) and the daemon's drain keeper over a simulated Slurm
node instead (tests/sim/slurm.py: jobs, their end, an unreachable controller, the
Epilog) and checks S1–S4. Each violation is printed with
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

from tests.sim.machine import ExecPathMachine, TrustMachine
from tests.sim.slurm import SlurmMachine


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000, help="rule steps in all (default 2000)")
    p.add_argument("--per-example", type=int, default=40, help="steps per example (40)")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    p.add_argument("--no-shrink", action="store_true", help="report the first failure unshrunk")
    p.add_argument("--json", action="store_true", help="print a JSON summary line")
    p.add_argument(
        "--machine", choices=("trust", "slurm"), default="trust",
        help="trust: the daemon over cron/shell/launch lifecycles and restart sources "
        "(I1-I16); slurm: the job-end sweep over a Slurm node (S1-S5)",
    )  # fmt: skip
    p.add_argument(
        "--events", choices=("on", "off"), default="on",
        help="on: the first daemon follows the simulated kernel's process events and each "
        "scan is checked against a full-walk twin (I16; a restart draws on or off); "
        "off: the first daemon polls",
    )  # fmt: skip
    p.add_argument(
        "--exec-path", choices=("on", "off"), default="on",
        help="on: the daemon's exec path (captures judged between ticks) is a step too, "
        "each of its scans checked against the twin's whole scan (I16); off: ticks only",
    )  # fmt: skip
    args = p.parse_args(argv)
    examples = max(1, args.steps // args.per_example)
    work = Path(tempfile.mkdtemp(prefix="trust-sim-run-", dir=os.environ.get("TMPDIR")))
    machine: type[TrustMachine] | type[SlurmMachine] = (
        SlurmMachine
        if args.machine == "slurm"
        else ExecPathMachine
        if args.exec_path == "on"
        else TrustMachine
    )
    if args.machine == "slurm":
        import logging

        import structlog

        # The keeper logs every drain and resume it makes: thousands in a long run.
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    machine.workdir = work
    if issubclass(machine, TrustMachine):
        TrustMachine.events = args.events == "on"
    machine._hypothesis_internal_use_seed = args.seed  # type: ignore[union-attr]
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
        run_state_machine_as_test(machine, settings=conf)
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
        "machine": args.machine,
        "violations": len(violations),
        **machine.counts,
        "wall_s": round(time.monotonic() - started, 1),
    }
    if args.json:
        print(json.dumps(summary))
    elif args.machine == "slurm":
        c = machine.counts
        print(
            f"trust_sim --machine slurm: {summary['steps']} steps in {examples} examples "
            f"(seed {args.seed}): {c['jobs']} jobs, {c['sweeps']} sweeps, {c['ticks']} "
            f"keeper ticks, {c['signals']} signals, {c['resumes']} resumes: "
            f"{len(violations)} violation(s), {summary['wall_s']} s"
        )
    else:
        c = machine.counts
        print(
            f"trust_sim: {summary['steps']} steps in {examples} examples (seed {args.seed}): "
            f"{c['ticks']} ticks, {c['jobs']} jobs judged, "
            f"{c['signals']} signals, {c.get('kills', 0)} daemon kills, "
            f"{c.get('storage_faults', 0)} storage outages, "
            f"{c.get('taken_over', 0)} actions taken over, "
            f"{c.get('engine_restarts', 0)} containers restarted by their policy, "
            f"{c.get('program_restarts', 0)} supervisord restarts, "
            f"{c.get('at_runs', 0)} at job runs, {c.get('will_return', 0)} will-return "
            f"terminates, {c.get('compared', 0)} scans checked against a full walk "
            f"({c.get('event_walks', 0)} by events, {c.get('events_lost', 0)} losses; "
            f"{c.get('exec_compared', 0)} by the exec path, judging "
            f"{c.get('exec_jobs', 0)} new jobs, {c.get('exec_passes', 0)} passes filed): "
            f"{len(violations)} violation(s), "
            f"{summary['wall_s']} s"
        )
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
