"""Help text shared by every subcommand: a description, examples and exit codes.

argparse prints ``epilog`` after the options; RawDescriptionHelpFormatter keeps the
example lines as written. The man page (scripts/build_manpage.py) and shell completion
(``rogue-watchdog completion``) are generated from the same parser.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from typing import Any


def command_help(
    summary: str,
    description: str,
    examples: Sequence[str],
    exit_codes: Sequence[tuple[int | str, str]],
) -> dict[str, Any]:
    """Keyword arguments for ``add_parser``: one-line ``help`` for the command list, and a
    ``description`` and ``epilog`` (examples, exit codes) for the command's ``--help``.

    Args:
        summary: The line shown in ``rogue-watchdog --help``.
        description: What the command does, in a few sentences.
        examples: Command lines, each optionally followed by ``  # comment``.
        exit_codes: ``(code, meaning)`` pairs.
    """
    lines = ["examples:", *(f"  {e}" for e in examples), "", "exit codes:"]
    lines += [f"  {code!s:<4}{meaning}" for code, meaning in exit_codes]
    return {
        "help": summary,
        # RawDescriptionHelpFormatter keeps text as written, so wrap it here.
        "description": textwrap.fill(description, width=78),
        "epilog": "\n".join(lines),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
