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
import functools
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from .. import __version__, logs
from . import actions, allowlist, complete, daemon, fleet, scan, slurm, weights
from .common import LOG_FORMATS, CliError, drop_stdout, emit, finish_stdout
from .help import command_help

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

Each command's --help has examples and its exit codes; the man page has them all
(`man rogue-watchdog` where the package is installed, `man -l man/rogue-watchdog.1` in a
checkout).
"""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its help and ``--version`` text written by :func:`emit`:
    argparse drops a failed write to stdout (``--help > /dev/full`` exited 0 with
    nothing said, or 120 when the buffer's flush failed at exit) and prints help meant
    for a closed stdout on stderr."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if message and file is sys.stdout:
            emit(message.removesuffix("\n"))
        else:
            super()._print_message(message, file)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered.

    Args:
        only: Build just this subcommand's parser (the others are declared to a stand-in
            that keeps nothing): what one command parses is the same, and a command run
            does not pay for the others' arguments and help texts (half of ``status``).
            None, or a name no register function declares, builds them all.
    """
    parser = _Parser(
        prog="rogue-watchdog",
        description=(
            "Find training jobs running outside the sanctioned pipeline, name their origin, "
            "and refuse non-finite weights at ship points."
        ),
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rogue-watchdog {__version__}")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="auto",
        help="how commands write their log events (one-shot commands on stderr, run on "
        "stdout): human lines at a terminal, JSON lines otherwise (a pipe, a file, the "
        "journal) or with --json (auto, the default), or always json or human",
    )
    real = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub: Any = real if only is None else _OnlyCommand(real, only)

    scan.register(sub)
    weights.register(sub)
    daemon.register(sub)
    actions.register(sub)
    fleet.register(sub)
    allowlist.register(sub)
    allowlist.register_report(sub)
    daemon.register_top(sub)

    p = sub.add_parser(
        "completion",
        **command_help(
            "print the shell completion script (bash, zsh or fish)",
            "Print a completion script generated from this command line's own parser "
            "(shtab): every command and option completes, PATH and FILE arguments complete "
            "file names, and the targets of terminate and disable-source (open finding ids, "
            "PIDs of jobs that may be stopped) and explain's PIDs (current training jobs) "
            "come from the running daemon's status.",
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
    slurm.register(sub)
    if only is not None and not sub.found:
        return build_parser()
    return parser


class _Discard:
    """Takes every call a register function makes on a parser it does not need and
    keeps nothing (argparse builds each argument's action and help eagerly)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: _Discard()

    def __iter__(self) -> Iterator[Any]:
        return iter(())


class _OnlyCommand:
    """The subparsers action, passed on for one command name only."""

    def __init__(self, real: Any, only: str) -> None:
        self.real, self.only, self.found = real, only, False

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if self.only != name and self.only not in kwargs.get("aliases", ()):
            return _Discard()
        self.found = True
        return self.real.add_parser(name, **kwargs)


def command_word(words: Sequence[str]) -> str | None:
    """The subcommand named in ``words`` (the first word that is not a top-level option
    or its value), or None when there is none or help is asked for first."""
    skip = False
    for word in words:
        # argparse takes any unambiguous prefix of a long option (--he is --help).
        name = word.split("=", 1)[0]
        if skip:
            skip = False
        elif len(name) > 2 and "--log-format".startswith(name):
            skip = "=" not in word
        elif word in ("-h", "--") or (
            len(name) > 2 and ("--help".startswith(name) or "--version".startswith(name))
        ):
            return None
        elif not word.startswith("-"):
            return word
    return None


COMPLETION_SHELLS = ("bash", "zsh", "fish")


def cmd_completion(args: argparse.Namespace) -> int:
    """``completion SHELL``: the completion script shtab generates from :func:`build_parser`."""
    import shtab

    emit(shtab.complete(build_parser(), shell=args.shell))
    return 0


#: Exit code of any command's unexpected error (a crash, an import error, a bug):
#: ``EX_SOFTWARE`` of sysexits(3). Never 1, which means "non-finite" to
#: ``verify-weights``, "rogue" to ``scan`` and "refused" to ``terminate``: a healthy file
#: must not read as poisoned because the verifier crashed (issue 32, case 9).
EXIT_INTERNAL_ERROR = 70


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rogue-watchdog`` console script.

    Returns:
        The process exit code; :data:`EXIT_INTERNAL_ERROR` (70) when the command
        failed in a way it does not expect (the traceback is on stderr).
    """
    try:
        return _main(argv)
    except Exception:  # the last line of defence: a crash must not read as a verdict
        import traceback

        if sys.stderr is not None:
            traceback.print_exc(file=sys.stderr)
            print(
                f"rogue-watchdog: internal error (exit {EXIT_INTERNAL_ERROR}): this is a bug "
                "or a broken installation, not a verdict about the input",
                file=sys.stderr,
            )
        return EXIT_INTERNAL_ERROR


def _main(argv: Sequence[str] | None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] == [complete.COMMAND]:
        return complete.main(words[1:])
    parser = build_parser(command_word(words))
    try:
        # Help and --version are written here too (_Parser): their failure is a CliError.
        args = parser.parse_args(words)
        if getattr(args, "func", None) is None:
            parser.print_help()
            return 2
        if args.command not in ("run", "status", "completion", "top"):
            # One-shot commands keep stdout for their report; their log events go to
            # stderr: a line for a person at a terminal, JSON lines like the daemon's for
            # a pipe, a file or a --json run. Configured when the first event is logged
            # (watchdog.logs): importing structlog is a sixth of a `scan` that logs
            # nothing. (`status` never logs.)
            from .common import configure_logging

            fmt = args.log_format
            if fmt == "auto" and getattr(args, "json", False):
                fmt = "json"
            logs.defer_configure(functools.partial(configure_logging, sys.stderr, fmt))
        code = int(args.func(args))
        finish_stdout()
        return code
    except BrokenPipeError:
        # The reader went away (`| head`): quiet the dead pipe so exit does not fail too.
        drop_stdout()
        return 0
    except CliError as exc:
        if sys.stderr is not None:
            print(f"rogue-watchdog: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not _is_config_error(exc):
            raise
        from ..config.base import ConfigError, errors_of
        from ..render import printable

        assert isinstance(exc, ConfigError)
        for error in errors_of(exc):
            print(printable(f"rogue-watchdog: config error: {error}"), file=sys.stderr)
        return 2
    finally:
        # A command that logged nothing leaves no configuration behind for whatever
        # logs next in this process (a test calling main() again).
        logs.defer_configure(None)


def _is_config_error(exc: BaseException) -> bool:
    # Only a command that loaded config.base can raise its ConfigError; importing it (and
    # PyYAML) up front would cost every `status` and `--help` its start-up time.
    base = sys.modules.get(f"{__name__.rpartition('.')[0]}.config.base")
    return base is not None and isinstance(exc, base.ConfigError)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
