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
# one: a path as config_args writes it (plain, or in single quotes), ending before the
# punctuation around a command in a message (`…`, (…), a comma, a semicolon).
_COMMAND = re.compile(
    r"\brogue-watchdog ((?:allowlist|weights|fleet|slurm) )?([a-z][a-z-]*)"
    r"( --config ('[^']*'|[^\s`'\"(),;]+))?"
)


def _path(arg: str) -> str:
    return arg[1:-1].replace("'\"'\"'", "'") if arg.startswith("'") else arg


def adopted(out: Outgoing, ours: str | None) -> Outgoing:
    """``out`` as this daemon sends it: unchanged when its configuration wrote it (or
    nothing tells that another did); else with each printed ``rogue-watchdog`` command
    naming ``ours`` and a note saying which configuration spooled it.

    A row spooled before rows recorded their configuration counts as another's when a
    command in it names another ``--config``.

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
    writer = out.alert.config
    named = {_path(m.group(4)) for m in _COMMAND.finditer(message) if m.group(4)}
    foreign = writer != ours if writer is not None else any(p != ours for p in named)
    if not foreign:
        return out
    mine = config_args(ours)

    def rename(m: re.Match[str]) -> str:
        if m.group(4) is None and writer is None:
            return m.group(0)  # an older row's command without --config: left as written
        return f"rogue-watchdog {m.group(1) or ''}{m.group(2)}{mine}"

    whose = writer or ", ".join(sorted(named))
    note = (
        f"; [spooled under the configuration {whose} (another install sharing this state "
        "directory, or this daemon before a reload): the commands in it name this "
        f"daemon's configuration ({ours or 'the built-in defaults'}), which reads the same "
        "state database]"
    )
    finding["message"] = _COMMAND.sub(rename, message) + note
    return Outgoing(Alert.from_json(doc), out.sink, out.row, out.created_at)
