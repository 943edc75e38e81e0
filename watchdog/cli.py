"""The ``rogue-watchdog`` command line: a thin layer over the library.

Exit codes (docs/cli.md): 0 nothing to report, 1 findings (or non-finite weights),
2 usage or configuration errors (or weights that could not be verified).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

import structlog

from watchdog import __version__
from watchdog.actions.cli import register as register_actions
from watchdog.actions.slurm_cli import register as register_slurm
from watchdog.config import Config, ConfigError, load_config
from watchdog.daemon.cli import register as register_daemon
from watchdog.lineage.describe import describe_origin
from watchdog.model import REPORTED_SEVERITIES
from watchdog.queue.source import one_shot_queue_findings
from watchdog.render import printable, result_json, result_table
from watchdog.scan import Scanner, resolve_origin
from watchdog.weights.cli import register as register_weights

DEFAULT_CONFIG = "/etc/rogue-watchdog/config.yaml"


def resolve_config_path(path: str | None) -> str | None:
    """The ``--config`` value, else the default file when it exists, else None."""
    if path is None and os.path.exists(DEFAULT_CONFIG):
        return DEFAULT_CONFIG
    return path


def _config(path: str | None) -> Config:
    return load_config(resolve_config_path(path))


def cmd_scan(args: argparse.Namespace) -> int:
    """``scan``: one pass over the host; exit 1 when a finding of warning or above is open."""
    config = _config(args.config)
    result = Scanner(config).scan()
    result.findings.extend(one_shot_queue_findings(config))
    code = 1 if any(f.severity in REPORTED_SEVERITIES for f in result.findings) else 0
    emit(json.dumps(result_json(result), indent=2) if args.json else result_table(result))
    return code


def cmd_explain(args: argparse.Namespace) -> int:
    """``explain PID``: the lineage of one process, its job and its origin, in words.

    When the PID belongs to a training job, the job's verdict is shown and the origin is
    the job root's (a worker's own parent is the launcher, not the spawner).
    """
    config = _config(args.config)
    scanner = Scanner(config)
    result = scanner.scan()
    lineage = scanner.table.ancestors(args.pid)
    if not lineage:
        print(
            f"rogue-watchdog: PID {args.pid} is not visible in {config.paths.proc_root}",
            file=sys.stderr,
        )
        return 2
    job = next((j for j in result.jobs if args.pid in j.pids), None)
    if job is not None:
        origin = job.origin
    else:
        origin = resolve_origin(lineage, scanner.context(result.time), scanner.resolvers)

    lines: list[str] = []
    out = lines.append

    out(f"PID {args.pid}: {lineage[0].args_text}")
    if job is None:
        out("Not a training job (no GPU, no device fd, no launcher command line).")
    else:
        root = (
            "" if job.root_pid == args.pid else f" (member of the job rooted at PID {job.root_pid})"
        )
        out(f"Training job{root}: {len(job.pids)} process(es), verdict {job.verdict}")
        out(f"  why: {job.reason}")
        out(f"  counted as training because: {', '.join(job.evidence)}")
    out("Lineage (nearest first):")
    for depth, p in enumerate(lineage):
        out(f"  {'  ' * depth}{p.pid:>7} {p.user or '?':<10} {p.exe or '?'}  {p.args_text[:100]}")
    out(f"Origin: {describe_origin(origin)} (kind {origin.kind})")
    for key, value in origin.fields.items():
        if value is not None and value != "":
            out(f"  {key}: {value}")
    for e in origin.evidence:
        out(f"  evidence: {e}")
    out(f"Remediation: {origin.remediation or 'none known: the origin could not be named'}")
    emit("\n".join(printable(line) for line in lines))
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    """``check-config FILE``: validate and summarise a configuration file."""
    config = load_config(args.file)
    emit(
        f"{printable(args.file)}: OK: {_count(len(config.sanctioned), 'sanctioned rule')}, "
        f"{_count(len(config.launchers), 'launcher pattern')}, "
        f"{_count(len(config.ignore), 'ignore entry', 'ignore entries')}"
    )
    return 0


def emit(text: str) -> None:
    """Print to stdout; a reader that went away (``| head``) is not an error.

    Raises:
        OutputError: stdout is closed or cannot be written (``>&-``, ``> /dev/full``).
    """
    if sys.stdout is None:
        raise OutputError("standard output is closed")
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Keep Python from failing again at exit while flushing the dead pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError as exc:
        raise OutputError(f"cannot write the output: {exc.strerror}") from None


class OutputError(RuntimeError):
    """The report could not be written to standard output."""


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="rogue-watchdog",
        description=(
            "Find training jobs running outside the sanctioned pipeline, name their origin, "
            "and refuse non-finite weights at ship points."
        ),
    )
    parser.add_argument("--version", action="version", version=f"rogue-watchdog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("scan", help="scan this host once and report training jobs")
    p.add_argument("--config", help=f"configuration file (default {DEFAULT_CONFIG} if present)")
    p.add_argument("--json", action="store_true", help="print the documented JSON document")
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser("explain", help="show the lineage and origin of one process")
    p.add_argument("pid", type=int)
    p.add_argument("--config", help=f"configuration file (default {DEFAULT_CONFIG} if present)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("check-config", help="validate a configuration file")
    p.add_argument("file")
    p.set_defaults(func=cmd_check_config)

    register_weights(sub)
    register_daemon(sub)
    register_actions(sub)
    register_slurm(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rogue-watchdog`` console script.

    Returns:
        The process exit code.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "run":
        # One-shot commands keep stdout for their report; their log events go to stderr.
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(printable(f"rogue-watchdog: config error: {exc}"), file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`| head`): quiet the dead pipe so exit does not fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OutputError as exc:
        if sys.stderr is not None:
            print(f"rogue-watchdog: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
