"""The ``rogue-watchdog`` command line: a thin layer over the library.

Exit codes (docs/cli.md): 0 nothing to report, 1 findings (or non-finite weights),
2 usage or configuration errors (or weights that could not be verified).

Start-up cost matters: ``status``, ``--help`` and ``gate`` run from shells and pipelines.
Building the parser imports only argparse and the small ``register`` modules; each
command imports what it needs (scanner, weights, actions, daemon loop, numpy, httpx,
structlog) when it runs. tests/unit/test_cli_startup.py keeps it that way.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from watchdog import __version__
from watchdog.actions.cli import register as register_actions
from watchdog.actions.slurm_cli import register as register_slurm
from watchdog.clihelp import command_help
from watchdog.daemon.cli import register as register_daemon
from watchdog.fleet import register as register_fleet
from watchdog.weights.cli import register as register_weights

if TYPE_CHECKING:
    from watchdog.config import Config

DEFAULT_CONFIG = "/etc/rogue-watchdog/config.yaml"

MAIN_EPILOG = """\
common questions:
  what is on GPU 3, who started it, how do I stop it coming back?
      rogue-watchdog scan --gpu 3
  where did PID 48213 come from?
      rogue-watchdog explain 48213
  stop it, and keep its cron line / timer from starting it again (undoable):
      rogue-watchdog disable-source 48213 --dry-run
      rogue-watchdog disable-source 48213 && rogue-watchdog terminate 48213
  what does the running daemon see?
      rogue-watchdog status            (status --gpu 3 for one GPU)
  are these weights finite?
      rogue-watchdog verify-weights model/

Each command's --help has examples and its exit codes; `man rogue-watchdog` has them all.
"""


def resolve_config_path(path: str | None) -> str | None:
    """The ``--config`` value, else the default file when it exists, else None."""
    if path is None and os.path.exists(DEFAULT_CONFIG):
        return DEFAULT_CONFIG
    return path


def _config(path: str | None) -> Config:
    from watchdog.config import load_config

    return load_config(resolve_config_path(path))


def config_line(path: str | None, config: Config) -> str:
    """Which configuration a one-shot command used, for the top of its report."""
    if path is None:
        return (
            f"config: none (no --config, and {DEFAULT_CONFIG} does not exist): "
            "nothing is sanctioned, so every training job is rogue"
        )
    n = len(config.sanctioned)
    return f"config: {path} ({n} sanctioned rule{'' if n == 1 else 's'})"


def cmd_scan(args: argparse.Namespace) -> int:
    """``scan``: one pass over the host; exit 1 when a finding of warning or above is open."""
    import json

    from watchdog.config import load_config
    from watchdog.model import REPORTED_SEVERITIES
    from watchdog.queue.source import one_shot_queue_findings
    from watchdog.render import filter_gpu, gpu_view_note, result_json, result_table
    from watchdog.scan import Scanner

    path = resolve_config_path(args.config)
    config = load_config(path)
    result = Scanner(config).scan()
    result.findings.extend(one_shot_queue_findings(config))
    notes: list[str] = []
    if args.gpu is not None:
        note = gpu_view_note(result, args.gpu)
        notes = [note] if note else []
        result = filter_gpu(result, args.gpu)
    code = 1 if any(f.severity in REPORTED_SEVERITIES for f in result.findings) else 0
    if args.json:
        emit(json.dumps(result_json(result), indent=2))
    else:
        emit(result_table(result, config_line=config_line(path, config), notes=notes))
    return code


def cmd_explain(args: argparse.Namespace) -> int:
    """``explain PID``: the lineage of one process, its job and its origin, in words.

    When the PID belongs to a training job, the job's verdict is shown and the origin is
    the job root's (a worker's own parent is the launcher, not the spawner).
    """
    from watchdog.lineage.describe import describe_origin, remediation_text
    from watchdog.render import printable
    from watchdog.scan import Scanner, resolve_origin

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
        out(f"  {'  ' * depth}{p.pid:>7} {p.user or '-':<10} {p.exe or '-'}  {p.args_text[:100]}")
    said = describe_origin(origin)
    # Each fact once: the kind when the description does not start with it, and no field
    # or evidence line that only repeats the description ("orphan (parent exited)").
    kind = "" if said.lower().startswith(origin.kind) else f" (kind {origin.kind})"
    out(f"Origin: {said}{kind}")
    for key, value in origin.fields.items():
        if value is not None and value != "" and str(value) != said:
            out(f"  {key}: {value}")
    for e in origin.evidence:
        if e != said:
            out(f"  evidence: {e}")
    target = job.root_pid if job is not None and job.verdict in ("rogue", "excess") else None
    out(f"Remediation: {remediation_text(origin, target)}")
    emit("\n".join(printable(line) for line in lines))
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    """``check-config FILE``: validate and summarise a configuration file.

    Every error is listed (one ``config error:`` line each, on stderr), not only the
    first; warnings (``config warning:``) do not change the exit code. Besides
    :func:`~watchdog.config.load_config` (syntax, values, trust of the file and of the
    files it names), it checks what only matters on the running host: each webhook
    sink's URL can be read (:func:`~watchdog.daemon.alerts.secrets.check_sink_secrets`).

    Returns:
        0 valid, 2 invalid.
    """
    from watchdog.config import load_config
    from watchdog.config.base import ConfigError, errors_of
    from watchdog.daemon.alerts.secrets import check_sink_secrets
    from watchdog.render import printable

    config: Config | None = None
    try:
        config = load_config(args.file)
        errors, warnings, refs = [], list(config.warnings), config.refs
    except ConfigError as exc:  # go on: the sinks that parsed are still checked
        errors, warnings, refs = errors_of(exc), list(exc.warnings), exc.refs
    more_errors, more_warnings = check_sink_secrets(args.file, refs)
    said = {e.key for e in errors}  # an untrusted url_file is already one error
    errors += [e for e in more_errors if e.key not in said]
    warnings += more_warnings
    for w in sorted(warnings, key=lambda e: e.line or 0):
        print(printable(f"rogue-watchdog: config warning: {w}"), file=sys.stderr)
    if errors:
        for e in sorted(errors, key=lambda e: e.line or 0):
            print(printable(f"rogue-watchdog: config error: {e}"), file=sys.stderr)
        print(
            printable(f"rogue-watchdog: {args.file}: {_count(len(errors), 'error')}"),
            file=sys.stderr,
        )
        return 2
    assert config is not None
    emit(
        f"{printable(args.file)}: OK: {_count(len(config.sanctioned), 'sanctioned rule')}, "
        f"{_count(len(config.launchers), 'launcher pattern')}, "
        f"{_count(len(config.ignore), 'ignore entry', 'ignore entries')}"
        + (f", {_count(len(warnings), 'warning')}" if warnings else "")
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


def gpu_index(text: str) -> int:
    """argparse type for ``--gpu N``: an NVML device index (ASCII digits)."""
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or int(t) > 1023:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a GPU index (0, 1, ...)")
    return int(t)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="rogue-watchdog",
        description=(
            "Find training jobs running outside the sanctioned pipeline, name their origin, "
            "and refuse non-finite weights at ship points."
        ),
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rogue-watchdog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "scan",
        **command_help(
            "scan this host once and report training jobs",
            "Scan this host once: every training job (NVML compute processes, device fds, "
            "launcher command lines), the GPU it is on and the memory it holds, its origin "
            "(cron line, systemd unit, Slurm job, container, shell...), its verdict against "
            "the allowlist, and how to stop it. Without --config, "
            f"{DEFAULT_CONFIG} is used when it exists; otherwise nothing is sanctioned.",
            [
                "rogue-watchdog scan --gpu 3          # who is on GPU 3, and how to stop it",
                "rogue-watchdog scan --config /etc/rogue-watchdog/config.yaml",
                "rogue-watchdog scan --json | jq '.jobs[] | {root_pid, verdict, gpus}'",
                "COLUMNS=200 rogue-watchdog scan | less -S",
            ],
            [
                (0, "nothing to report"),
                (1, "a finding of severity warning or above (a rogue training job, say)"),
                (2, "usage or configuration error"),
            ],
        ),
    )
    p.add_argument("--config", help=f"configuration file (default {DEFAULT_CONFIG} if present)")
    p.add_argument("--json", action="store_true", help="print the JSON of docs/scan-json-schema.md")
    p.add_argument(
        "--gpu",
        type=gpu_index,
        metavar="N",
        help="only GPU N (NVML index, MIG instances included): its jobs and their findings",
    )
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser(
        "explain",
        **command_help(
            "show the lineage and origin of one process",
            "The parent chain of one process up to PID 1, the training job it belongs to "
            "(verdict, why it counts as training) and its origin with the evidence and the "
            "command that stops the source.",
            ["rogue-watchdog explain 48213", "rogue-watchdog explain $(pgrep -f train_big.py)"],
            [(0, "explained"), (2, "the PID is not visible, or a configuration error")],
        ),
    )
    p.add_argument("pid", type=int, metavar="PID", help="any process ID visible in /proc")
    p.add_argument("--config", help=f"configuration file (default {DEFAULT_CONFIG} if present)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser(
        "check-config",
        **command_help(
            "validate a configuration file",
            "Validate a configuration file and count its rules; an error names the file, "
            "the line and the key.",
            ["rogue-watchdog check-config /etc/rogue-watchdog/config.yaml"],
            [(0, "valid"), (2, "invalid (the message names file, line and key)")],
        ),
    )
    p.add_argument("file", metavar="FILE", help="the YAML configuration to check")
    p.set_defaults(func=cmd_check_config)

    register_weights(sub)
    register_daemon(sub)
    register_actions(sub)
    register_fleet(sub)

    p = sub.add_parser(
        "top",
        **command_help(
            "live view: GPUs, jobs and findings, with keys to act",
            "A live, refreshing view (also `status --watch`): the GPUs with the memory "
            "sanctioned and unsanctioned jobs hold, every training job with its verdict, GPU, "
            "origin and command, and the open findings, from the daemon's status socket, or "
            "from a local scan when no daemon runs. Keys: up/down (j/k) select a job, e "
            "explain it, t terminate it, d disable its source (both ask to confirm and run "
            "the ordinary commands, guards and all), r refresh, q quit.",
            ["rogue-watchdog top", "rogue-watchdog top --interval 5 --config /etc/rw.yaml"],
            [(0, "quit with q"), (2, "usage error, or no terminal")],
        ),
    )
    add_watch_arguments(p)
    p.set_defaults(func=cmd_top)

    p = sub.add_parser(
        "completion",
        **command_help(
            "print the shell completion script (bash, zsh or fish)",
            "Print a completion script generated from this command line's own parser "
            "(shtab): every command and option completes, PATH and FILE arguments complete "
            "file names.",
            [
                "rogue-watchdog completion bash > /etc/bash_completion.d/rogue-watchdog",
                "rogue-watchdog completion zsh > ~/.zfunc/_rogue-watchdog  # with fpath+=~/.zfunc",
                "rogue-watchdog completion fish > ~/.config/fish/completions/rogue-watchdog.fish",
            ],
            [(0, "printed"), (2, "usage error (an unsupported shell)")],
        ),
    )
    p.add_argument("shell", choices=COMPLETION_SHELLS, help="the shell to complete in")
    p.set_defaults(func=cmd_completion)
    register_slurm(sub)
    return parser


COMPLETION_SHELLS = ("bash", "zsh", "fish")


def add_watch_arguments(p: argparse.ArgumentParser) -> None:
    """The live view's options (``top``; ``status --watch`` shares the socket ones)."""
    p.add_argument("--config", help=f"configuration file (default {DEFAULT_CONFIG} if present)")
    p.add_argument("--socket", help="status socket (default: daemon.socket of the config)")
    p.add_argument(
        "--interval",
        type=_seconds,
        default=2.0,
        help="seconds between refreshes (default 2)",
    )
    p.add_argument(
        "--timeout", type=_seconds, default=5.0, help="seconds to wait for the daemon (default 5)"
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (0 < value <= 3600):  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be seconds in (0, 3600], got {text!r}")
    return value


def cmd_top(args: argparse.Namespace) -> int:
    """``top``: the live view (watchdog/top.py)."""
    from watchdog.top import run

    return run(args)


def cmd_completion(args: argparse.Namespace) -> int:
    """``completion SHELL``: the completion script shtab generates from :func:`build_parser`."""
    import shtab

    emit(shtab.complete(build_parser(), shell=args.shell))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rogue-watchdog`` console script.

    Returns:
        The process exit code.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    if args.command not in ("run", "status", "completion", "top"):
        # One-shot commands keep stdout for their report; their log events go to stderr,
        # as JSON lines like the daemon's. (`status` never logs, and importing structlog
        # would double its start-up time.)
        from watchdog.daemon.cli import configure_logging

        configure_logging(sys.stderr)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        # The reader went away (`| head`): quiet the dead pipe so exit does not fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OutputError as exc:
        if sys.stderr is not None:
            print(f"rogue-watchdog: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not _is_config_error(exc):
            raise
        from watchdog.config.base import ConfigError, errors_of
        from watchdog.render import printable

        assert isinstance(exc, ConfigError)
        for error in errors_of(exc):
            print(printable(f"rogue-watchdog: config error: {error}"), file=sys.stderr)
        return 2


def _is_config_error(exc: BaseException) -> bool:
    # Only a command that loaded watchdog.config.base can raise its ConfigError; importing
    # it (and PyYAML) up front would cost every `status` and `--help` its start-up time.
    base = sys.modules.get("watchdog.config.base")
    return base is not None and isinstance(exc, base.ConfigError)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
