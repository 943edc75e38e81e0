"""Spooled alerts another install wrote into a shared state directory (issue 33).

Two checkouts (or a package and a checkout) may run their daemons with the same
``daemon.state_dir`` (the host's ``/var/lib/rogue-watchdog``). The alert spool is in
that directory, so the daemon started last replays the rows the other one queued, and
their printed commands name the other's ``--config``: pasted, ``status --config
OTHER`` answers that the daemon on the socket "is another daemon", a dead end. Each row
records the configuration that wrote it (:attr:`~.alert.Alert.config`); a row written
under another one is sent with its commands naming this daemon's configuration (which
reads the same state database, so the same finding and action ids), and a note says
whose it was.
"""

from __future__ import annotations

import re

from ...hostpaths import config_args
from .alert import Alert, Outgoing

# `rogue-watchdog VERB` (or `GROUP VERB`), and the `--config PATH` after it when there is
# one: a path as config_args writes it (plain, or shlex.quote's single quotes, where each
# apostrophe of the path is '"'"'), ending before the punctuation around a command in a
# message (`…`, (…), a comma, a semicolon).
_COMMAND = re.compile(
    r"\brogue-watchdog ((?:allowlist|weights|fleet|slurm) )?([a-z][a-z-]*)"
    r"( --config ('[^']*'(?:\"'\"'[^']*')*|[^\s`'\"(),;]+))?"
)


def _path(arg: str) -> str:
    return arg[1:-1].replace("'\"'\"'", "'") if arg.startswith("'") else arg


def _shown(text: str) -> str:
    """A configuration path as the product's words show it: a backtick as ``\\x60``, as
    :func:`~watchdog.hosttext.own_code` does, so it cannot open or close a span."""
    return text.replace("`", "\\x60")


def _pieces(message: str) -> list[tuple[bool, str]]:
    """``message`` split at its backticks, each piece with whether it is the product's
    own words: outside every code span. Host text is quoted in code spans only
    (:func:`~watchdog.hosttext.code_span`), which may spell any command, ``--config``
    included (a process ``rogue-watchdog status --config /tmp/evil.yaml``): never read
    as a configuration, never rewritten. A command the product sets as code is written
    with :func:`~watchdog.hosttext.own_code` (`` ``rogue-watchdog run`` ``), which
    leaves it outside every span: told apart by where it stands, not by what it says."""
    return [(i % 2 == 0, piece) for i, piece in enumerate(message.split("`"))]


def _acts(m: re.Match[str]) -> bool:
    """Whether the command runs against the daemon or its state database (so it must
    name the configuration that reads it); ``allowlist`` and ``check-config`` name a
    candidate file of the operator's, never rewritten."""
    return m.group(1) is None and m.group(2) != "check-config"


def adopted(out: Outgoing, ours: str | None) -> Outgoing:
    """``out`` as this daemon sends it: unchanged when nothing in it was written under
    another configuration; else with each printed ``rogue-watchdog`` command that acts
    on the daemon or the state database naming ``ours``, and a note saying which
    configuration wrote it.

    Written under another configuration: the row records another one (another
    install's daemon spooled it), or a command in it names another absolute
    ``--config`` (a row spooled before rows recorded theirs, or this daemon resolving a
    finding the other one opened: its message is the other's).

    Args:
        out: A spooled alert on its way to a sink.
        ours: This daemon's configuration file (:func:`watchdog.hostpaths.config_file`).

    Returns:
        The alert to send.
    """
    doc = out.alert.to_json()
    finding = doc.get("finding")
    message = finding.get("message") if isinstance(finding, dict) else None
    if not isinstance(finding, dict) or not isinstance(message, str):
        return out
    writer = out.alert.config if out.alert.config != ours else None
    pieces = _pieces(message)
    # Paths compared as shown: a message names a path holding a backtick with \x60.
    shown_ours = _shown(ours) if ours is not None else None
    named = {
        p for own, piece in pieces if own for m in _COMMAND.finditer(piece)
        if m.group(4) and _acts(m) and (p := _path(m.group(4))).startswith("/")
        and p != shown_ours
    }  # fmt: skip
    if writer is None and not named:
        return out
    mine = _shown(config_args(ours))

    def rename(m: re.Match[str]) -> str:
        if not _acts(m):
            return m.group(0)
        if m.group(4) is None and writer is None:
            return m.group(0)  # no --config, and nothing says whose: left as written
        if m.group(4) is not None and _path(m.group(4)) not in named | {_shown(writer or "")}:
            return m.group(0)  # ours already, or a relative path of the operator's
        return f"rogue-watchdog {m.group(1) or ''}{m.group(2)}{mine}"

    whose = ", ".join(sorted(named | ({_shown(writer)} if writer else set())))
    note = (
        f"; [written under the configuration {whose} (another install sharing this state "
        "directory, or this daemon before a reload): the commands in it name this "
        f"daemon's configuration ({shown_ours or 'the built-in defaults'}), which reads the "
        "same state database]"
    )
    finding["message"] = "`".join(_COMMAND.sub(rename, p) if own else p for own, p in pieces)
    finding["message"] += note
    return Outgoing(Alert.from_json(doc), out.sink, out.row, out.created_at)
