"""CLI: ``health-check`` — the job-end sweep for Slurm's Epilog and HealthCheckProgram.

``rogue-watchdog health-check --epilog`` in ``Epilog=`` (the ended job is the one in
``SLURM_JOB_ID``), or plain ``rogue-watchdog health-check`` in ``HealthCheckProgram=``.
Exit codes (watchdog/actions/slurmsweep.py): 0 clean, 1 something of an ended job is left
(node drained), 2 usage or configuration errors, 3 not checked: Slurm could not be asked
whether a job with processes here ended (nothing signalled, node drained).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from .common import command_config_path, config_parent, emit
from .help import command_help

if TYPE_CHECKING:
    from ..actions.slurmsweep import SweepJournal
    from ..state import StateDB


def cmd_health_check(args: argparse.Namespace) -> int:
    """Run the sweep and print what it found and did."""
    from ..actions.slurmsweep import report_json, sweep
    from ..config import load_config
    from ..render import printable

    job_id: int | None = args.job
    if args.epilog and job_id is None:
        value = os.environ.get("SLURM_JOB_ID", "")
        if not (value.isascii() and value.isdigit()):
            print(
                "rogue-watchdog: health-check --epilog needs SLURM_JOB_ID (set by slurmd) "
                "or --job N",
                file=sys.stderr,
            )
            return 2
        job_id = int(value)
    config = load_config(command_config_path(args.config, acts=True))
    uid_text = os.environ.get("SLURM_JOB_UID", "") if args.epilog else ""
    journal, db = _journal(config.daemon.state_dir, args.epilog, args.dry_run)
    try:
        report = sweep(
            config,
            job_id=job_id,
            dry_run=args.dry_run,
            epilog=args.epilog,
            epilog_uid=int(uid_text) if uid_text.isascii() and uid_text.isdigit() else None,
            journal=journal,
        )
    finally:
        if db is not None:
            db.close()
    if args.json:
        emit(json.dumps(report_json(report), indent=2))
    else:
        emit("\n".join(printable(line) for line in report.lines()))
    return report.exit_code


def _journal(
    state_dir: str, epilog: bool, dry_run: bool
) -> tuple[SweepJournal | None, StateDB | None]:
    """The sweep's write-ahead record in the daemon's state database, and the database
    to close; a database that cannot be opened makes a journal that refuses every wave
    (nothing signalled, the node drained: fail closed)."""
    from ..actions.remedy import default_actor
    from ..actions.slurmsweep import SweepJournal
    from ..state import StateDB, StateError

    if dry_run:
        return None, None
    actor = "slurm-epilog" if epilog else default_actor()
    try:
        db = StateDB(state_dir)
    except StateError as exc:
        return SweepJournal(None, actor, error=str(exc)), None
    return SweepJournal(db, actor), db


def _job_id(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"not a Slurm job id: {text!r}")
    return int(text)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``health-check`` to the CLI."""
    p = sub.add_parser(
        "health-check",
        parents=[config_parent()],
        **command_help(
            "Slurm Epilog / HealthCheckProgram: stop leftovers of ended jobs, drain if stuck",
            "Find processes proven to belong to Slurm jobs that Slurm confirms have ended (the "
            "job's cgroup, recorded below its slurmstepd, or descended from such a process; "
            "SLURM_JOB_ID in an environment is only a claim), name each as an orphan of its "
            "job, stop them with escalation (every guard of `terminate` applies), recheck for "
            "copies they started and, when anything is left, drain this node with a reason "
            "naming it (docs/slurm.md). Fails closed: when Slurm cannot be asked nothing is "
            "signalled, the node is drained and the exit code is 3. A drain is lifted only by "
            "a check that finds everything it was for gone. As Slurm's Epilog, `--epilog` "
            "sweeps the job in $SLURM_JOB_ID.",
            [
                "rogue-watchdog health-check --dry-run",
                "rogue-watchdog health-check --epilog   # Epilog=... in slurm.conf",
                "rogue-watchdog health-check --job 812 --json",
            ],
            [
                (0, "nothing left over, or every leftover stopped"),
                (1, "something of an ended job is left: the node was drained"),
                (2, "usage or configuration error"),
                (3, "not checked: Slurm could not be asked; nothing signalled, node drained"),
            ],
        ),
    )
    p.add_argument("--epilog", action="store_true", help="the ended job is $SLURM_JOB_ID")
    p.add_argument("--job", type=_job_id, help="sweep this ended job id only")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="report only; signal, record and drain nothing (same plan and exit code)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_health_check)
