"""Generate man/rogue-watchdog.1 from the command line's own parser (argparse-manpage).

Usage: .venv/bin/python scripts/build_manpage.py [--outfile man/rogue-watchdog.1]

Run it after changing a command, an option or its help; tests/unit/test_cli_help.py fails
while the committed page differs from what this prints. The package installs the page as
share/man/man1/rogue-watchdog.1 (pyproject.toml, data-files).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def render() -> str:
    """The man page text (roff), reproducible: dated by the version, not the clock."""
    from argparse_manpage.manpage import Manpage

    from watchdog import __version__
    from watchdog.cli import build_parser

    parser = build_parser()
    page = Manpage(
        parser,
        _data={
            "project_name": "rogue-watchdog",
            # NAME's one line: what whatis(1) and apropos(1) find.
            "description": "find rogue GPU training jobs, their origin, and poisoned weights",
            "manual_title": "rogue-watchdog manual",
            "version": __version__,
            "date": f"version {__version__}",
            "url": "",
            "author": "",
        },
    )
    page.add_section("examples and exit codes", "=", _epilogs(parser))
    return str(page)


def _roff_literal(text: str) -> str:
    """Text shown as written (``.nf``): backslashes and dashes escaped, and no line
    starting with a control character."""
    out = []
    for line in text.splitlines():
        line = line.replace("\\", "\\e").replace("-", "\\-")
        out.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(out)


def _epilogs(parser: argparse.ArgumentParser) -> str:
    """Each command's examples and exit codes (its ``--help`` epilog), one subsection each."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = []
    for name, sub in subs.choices.items():
        if sub.epilog:
            title = _roff_literal(f"rogue-watchdog {name}")
            parts += [f".SS {title}", ".nf"]
            parts += [_roff_literal(sub.epilog), ".fi"]
    return "\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outfile", default=str(REPO / "man" / "rogue-watchdog.1"))
    args = ap.parse_args()
    out = Path(args.outfile)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
