"""Command line: ``verify-weights PATH...``, ``gate --weights PATH -- COMMAND...`` and
``ship SRC DST``.

Exit codes of ``verify-weights``: 0 all finite, 1 non-finite found, 2 not verified
(unsupported, unreadable, truncated or inconsistent input). ``gate`` returns the
command's status when it ran, and its own statuses otherwise, apart from any a
command commonly uses: 124 refused (non-finite), 125 refused (not verified) or a
usage error, 127 the command could not be started. Any command's unexpected error
is 70 (``watchdog.cli.EXIT_INTERNAL_ERROR``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .common import emit
from .help import command_help

if TYPE_CHECKING:
    from ..weights.progress import ProgressBar

# The verifier (numpy) loads when a command runs, not when the parser is built.


def _progress(paths: list[Path], enabled: bool) -> ProgressBar | None:
    from ..weights.discover import discover
    from ..weights.progress import ProgressBar

    files = discover(paths).files
    total = 0
    for p in files:
        with contextlib.suppress(OSError):
            total += os.stat(p).st_size
    if not ProgressBar.wanted(total, sys.stderr, enabled):
        return None
    return ProgressBar(total, sys.stderr)


def _run_with_bar(
    paths: list[Path], enabled: bool, body: Callable[[ProgressBar | None], int]
) -> int:
    bar = _progress(paths, enabled)
    try:
        return body(bar)
    finally:
        if bar is not None:
            bar.close()


def cmd_verify(args: argparse.Namespace) -> int:
    """``verify-weights``: print the report (text or ``--json``) and return the exit code."""
    from ..weights.api import verify

    paths = [Path(p) for p in args.paths]

    def body(bar: ProgressBar | None) -> int:
        report = verify(paths, progress=bar.update if bar else None)
        if bar is not None:
            bar.close()  # end the bar's line before the report
        emit(report.to_json() if args.json else report.render_text())
        return report.exit_code

    return _run_with_bar(paths, not args.no_progress, body)


def cmd_gate(args: argparse.Namespace) -> int:
    """``gate``: verify ``--weights`` then run the command after ``--`` only if all finite."""
    from ..weights.gate import GATE_REFUSED_UNVERIFIED, run_gate

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("gate: no command given after --", file=sys.stderr)
        return GATE_REFUSED_UNVERIFIED
    paths = [Path(p) for p in args.weights]
    return _run_with_bar(
        paths,
        not args.no_progress,
        lambda bar: run_gate(
            paths,
            command,
            json_output=args.json,
            progress=bar.update if bar else None,
            after_verify=bar.close if bar else None,
        ),
    )


def cmd_ship(args: argparse.Namespace) -> int:
    """``ship``: copy SRC to DST only if the copied bytes verify finite (no check-use window)."""
    from ..weights.gate import log_refusals
    from ..weights.ship import ship

    src, dst = Path(args.src), Path(args.dst)

    def body(bar: ProgressBar | None) -> int:
        result = ship(src, dst, progress=bar.update if bar else None)
        if bar is not None:
            bar.close()
        out = json.dumps(result.to_dict(), indent=2) if args.json else result.render_text()
        if result.destination is not None and not args.json:
            out += f"\nSHIPPED {src} -> {result.destination}"
        emit(out)
        if result.exit_code != 0:
            command = ["ship", str(src), str(dst)]
            log_refusals(result.report, command, sys.stderr, result.refusal)
        return result.exit_code

    return _run_with_bar([src], not args.no_progress, body)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``verify-weights``, ``gate`` and ``ship`` subcommands, each with ``func=``."""
    p = subparsers.add_parser(
        "verify-weights",
        **command_help(
            "refuse weights holding NaN or infinity (exit 0 finite, 1 non-finite, 2 unverified)",
            "Read every value of each weights file (safetensors, PyTorch zip, NumPy, GGUF; "
            "a directory: every weights file in it, shards checked against their index) and "
            "refuse any NaN or infinity. Only input read completely counts as verified "
            "(docs/weights.md).",
            [
                "rogue-watchdog verify-weights model.safetensors",
                "rogue-watchdog verify-weights /srv/models/prod/ --json",
            ],
            [
                (0, "every value finite"),
                (1, "a NaN or infinity found"),
                (2, "not verified: unsupported, unreadable, truncated or inconsistent input"),
                (70, "internal error (a bug or a broken installation), never a verdict"),
            ],
        ),
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="weights file or model directory")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--no-progress", action="store_true", help="never draw a progress bar")
    p.set_defaults(func=cmd_verify)

    g = subparsers.add_parser(
        "gate",
        **command_help(
            "run a deploy command only if its weights are all finite",
            "Verify --weights like verify-weights, then run the command after -- only when "
            "every value is finite; its exit status becomes gate's. The command reads the "
            "files again after the check, so a writer in between is not seen: to copy "
            "weights into place, use ship.",
            [
                "rogue-watchdog gate --weights out/model.safetensors -- ./deploy.sh prod",
                "rogue-watchdog gate --weights a/ --weights b/ --json -- rsync -a a/ b/ host:/m/",
            ],
            [
                ("N", "the command's own exit status when it ran"),
                (124, "not run: a NaN or infinity found (gate's own, never the command's)"),
                (125, "not run: weights not verified, or no command after --"),
                (127, "verified, but the command could not be started"),
                (70, "gate's internal error (a bug or a broken installation)"),
            ],
        ),
    )
    g.add_argument(
        "--weights",
        action="append",
        required=True,
        metavar="PATH",
        help="weights file or model directory (repeatable)",
    )
    g.add_argument("--json", action="store_true", help="report as JSON (on stderr)")
    g.add_argument("--no-progress", action="store_true", help="never draw a progress bar")
    g.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND [ARGS...]",
        help="the deploy command, run only when every value is finite",
    )
    g.set_defaults(func=cmd_gate)

    s = subparsers.add_parser(
        "ship",
        **command_help(
            "copy a weights file into place only if the bytes copied are all finite",
            "Copy SRC from one open descriptor into a private staging folder beside DST, "
            "fsync, verify those staged bytes, and rename them onto DST: the bytes checked "
            "are the bytes shipped, with no window for a writer between check and deploy "
            "(gate has one). On a refusal DST is untouched and nothing is left behind.",
            [
                "rogue-watchdog ship out/model.safetensors /srv/models/prod/model.safetensors",
                "rogue-watchdog ship out/model.gguf /srv/models/prod/",
            ],
            [
                (0, "shipped: every value finite, DST replaced atomically"),
                (1, "not shipped: a NaN or infinity found"),
                (
                    2,
                    "not shipped: not verified, source changed while copied, destination "
                    "folder missing or unwritable, or I/O error",
                ),
            ],
        ),
    )
    s.add_argument("src", metavar="SRC", help="weights file to ship")
    s.add_argument("dst", metavar="DST", help="destination file, or a folder to ship into")
    s.add_argument("--json", action="store_true", help="machine-readable report")
    s.add_argument("--no-progress", action="store_true", help="never draw a progress bar")
    s.set_defaults(func=cmd_ship)
