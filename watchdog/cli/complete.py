"""``rogue-watchdog _complete KIND -- WORDS...``: what shell completion offers where
argparse cannot know the values: ids of open findings and PIDs of current training jobs.

The values come from the running daemon's status document (what ``status --json`` prints),
asked over the socket the words on the command line point at (``--config``, ``--socket``;
else the default), so ``rogue-watchdog terminate --config /srv/rw.yaml <TAB>`` asks that
configuration's daemon. The command is hidden: not in ``--help``, the man page or the
completion scripts' command list; the scripts :func:`completers` makes call it.

- ``targets`` (``terminate``, ``disable-source``): open finding ids (``F12``), then the
  root PIDs of the jobs the guard lets a person act on (those with a ``stop`` line).
  A sanctioned job's PID is never offered.
- ``pids`` (``explain``): the root PID and every PID of each current training job.

Completion must never print an error into a command line: a daemon that is not running,
a socket that cannot be read or an unparsable word gives no candidates and exit 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

COMMAND = "_complete"
KINDS = ("targets", "pids")
#: Seconds a completion waits for the daemon: a shell must not hang on TAB.
TIMEOUT_S = 1.0


def candidates(doc: dict[str, Any], kind: str) -> list[str]:
    """The completion values ``kind`` takes from a status document, in its order.

    Args:
        doc: A status document (docs/status.md).
        kind: One of :data:`KINDS`.

    Returns:
        Finding ids like ``F12`` and PIDs as decimal strings, each once.

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown completion kind {kind!r}")
    out: list[str] = []
    jobs = [j for j in doc.get("jobs") or [] if isinstance(j, dict)]
    if kind == "targets":
        for f in doc.get("findings") or []:
            if isinstance(f, dict) and isinstance(f.get("id"), int):
                out.append(f"F{f['id']}")
        # Only what the guard would let a person stop: its advice is the `stop` line.
        out += [str(j["root_pid"]) for j in jobs if j.get("stop") and _pid(j.get("root_pid"))]
    else:
        for j in jobs:
            out += [str(p) for p in [j.get("root_pid"), *(j.get("pids") or [])] if _pid(p)]
    return list(dict.fromkeys(out))


def _pid(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def main(argv: Sequence[str]) -> int:
    """Print one candidate a line for ``KIND -- WORDS...``; always exit 0 (see module)."""
    from ..daemon.ipc import StatusError, query_status
    from .common import CliError, emit, socket_path

    if not argv or argv[0] not in KINDS:
        return 0
    words = list(argv[1:])
    if words[:1] == ["--"]:
        words = words[1:]
    lenient = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    lenient.add_argument("--config")
    lenient.add_argument("--socket")
    try:
        args, _ = lenient.parse_known_args(words)
        doc = query_status(socket_path(args), timeout_s=TIMEOUT_S)
    except (argparse.ArgumentError, CliError, StatusError, OSError, SystemExit):
        return 0
    except Exception as exc:
        # A configuration file that is not YAML (socket_path's ConfigError): no
        # candidates. Only a loaded config.base can have raised one.
        base = sys.modules.get(f"{__name__.rsplit('.', 2)[0]}.config.base")
        if base is not None and isinstance(exc, base.ConfigError):
            return 0
        raise
    values = candidates(doc, argv[0])
    try:
        if values:
            emit("\n".join(values))
    except CliError:
        # Stdout closed or full (`>&-`, `> /dev/full`): nothing to offer, and a
        # completion says nothing on the terminal (before: a traceback, exit 70).
        return 0
    return 0


def completers() -> dict[str, dict[str, Any]]:
    """shtab ``.complete`` values for each kind: bash and zsh functions (and a fish
    command) that run the command being completed (the word the user typed, so a
    checkout's ``.venv/bin/rogue-watchdog`` asks its own code) with the words typed so
    far."""
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        fn = f"_rogue_watchdog_complete_{kind}"
        out[kind] = {
            "bash": fn,
            "zsh": f"{fn}",
            "fish": f"(rogue-watchdog {COMMAND} {kind} -- (commandline -opc)[2..-1] 2>/dev/null)",
            "preamble": {
                "bash": (
                    f"# $1: the word being completed; the daemon's {kind} (rogue-watchdog "
                    f"{COMMAND})\n"
                    f"{fn}() {{\n"
                    f'  compgen -W "$("${{COMP_WORDS[0]}}" {COMMAND} {kind} -- '
                    f'"${{COMP_WORDS[@]:1:COMP_CWORD-1}}" 2>/dev/null)" -- "$1"\n'
                    "}\n"
                ),
                "zsh": (
                    f"{fn}() {{\n"
                    "  local -a values\n"
                    f'  values=(${{(f)"$(${{words[1]}} {COMMAND} {kind} -- '
                    '${words[2,CURRENT-1]} 2>/dev/null)"})\n'
                    f"  compadd -a values\n"
                    "}\n"
                ),
            },
        }
    return out
