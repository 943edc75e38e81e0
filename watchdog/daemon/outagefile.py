"""The findings paged from memory during a storage outage, kept beside the status socket.

While ``state.db`` refuses writes (a full, read-only or failing state directory: issue
32), the daemon tracks and pages findings from memory (:mod:`watchdog.daemon.unstored`).
Before, a restart during such an outage lost that memory: the new daemon could neither
write nor read that the running rogue had been paged, opened its finding afresh and
paged it a second time. The open findings already paged from memory, with the alerts
kept in memory not yet sent, are therefore also written to a small file in the socket's
directory (``/run/rogue-watchdog`` by default), as :mod:`.sanctionedfile` keeps the
sanctioned identities: another file system than the state directory (the outage's disk
is not this one), cleared at reboot like the process identities it names. The next
daemon reads it at start and keeps those findings in memory under their ids, paged
already, until the database takes them (:meth:`UnstoredFindings.adopt`).

Why a side file and not only the database read read-only: what was paged during an
outage was never in the database, so no read of it can tell; the database is read as
well (a finding stored since, or an id given out since, is not taken from the file).

The file is trusted only when no one but root (or the daemon's user) can change it or a
directory above it (:func:`~watchdog.safeio.untrusted_reason`): a planted file would
silence the page of a rogue. An untrusted, damaged or another boot's file is no
account: the daemon then says, in the page of a run older than itself, that it may
repeat an earlier one (:attr:`UnstoredFindings.unknown_before`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any

from ..records import FindingRecord
from .runfile import beside_socket, read_json, write_json

FILE_NAME = "outage.json"
# A paged finding is about 0.8 KB of JSON (1.6 MB for 2,000: bench/outage_memory.py), an
# alert queued about as much per sink; the memory holds at most unstored.MAX_FINDINGS
# findings. A larger file is no account (the pages then say they may repeat one).
MAX_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class OutageAccount:
    """What an earlier daemon of this boot paged from memory during a storage outage.

    Attributes:
        findings: Its open findings already paged (``last_alert_at`` set).
        queued: ``(finding id, sink, event, payload, queued at)`` of the alerts kept in
            memory not yet sent when the file was written (theirs, and the resolve of a
            finding resolved since); POSIX time they were queued.
        next_id: The first finding id it had not given out: the next daemon goes on
            past it, so an id once paged names one finding only.
    """

    findings: list[FindingRecord]
    queued: list[tuple[int, str, str, dict[str, Any], float]]
    next_id: int = 1


def outage_path(socket_path: str) -> str:
    """The file beside the status socket ``socket_path``."""
    return beside_socket(socket_path, FILE_NAME)


def write_outage(path: str, account: OutageAccount, boot_id: str | None) -> None:
    """Replace the file at ``path`` with ``account`` (atomically: a temporary file in
    the same directory renamed over it; mode 0600).

    Args:
        path: :func:`outage_path`.
        account: The findings paged from memory and their alerts still queued.
        boot_id: This boot's id (PIDs and start ticks name processes of one boot).

    Raises:
        OSError: The file could not be written (its directory is missing, full or
            read-only).
    """
    # Not dataclasses.asdict: a deep copy of every finding, in the tick.
    names = [f.name for f in dataclasses.fields(FindingRecord)]
    write_json(path, {
        "boot_id": boot_id,
        "findings": [{n: getattr(r, n) for n in names} for r in account.findings],
        "queued": [list(q) for q in account.queued],
        "next_id": account.next_id,
    })  # fmt: skip


def remove_outage(path: str) -> None:
    """Remove the file at ``path`` (the database holds its findings now); a missing one
    is fine.

    Raises:
        OSError: It could not be removed.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def read_outage(path: str, boot_id: str | None) -> OutageAccount | None:
    """The account the file at ``path`` holds for boot ``boot_id``; None when there is
    none to go by: no file (no daemon of this boot was in an outage, or it could not
    write one: the two look alike), an untrusted or damaged one, or another boot's. A
    daemon in an outage writes the file even with nothing paged, so that an empty
    account and no account differ. Never raises.

    Args:
        path: :func:`outage_path`.
        boot_id: This boot's id.
    """
    data = read_json(path, MAX_BYTES, boot_id)
    if data is None:
        return None
    try:
        return _account(data, boot_id)
    except (ValueError, TypeError, OverflowError, RecursionError):
        # Damaged past what the checks below read (a number no float holds, a list
        # that is a number): no account, never a daemon that cannot start (it would
        # page nothing).
        return None


def _account(data: Any, boot_id: str | None) -> OutageAccount | None:
    """:func:`read_outage` of the parsed file."""
    if not isinstance(data, dict) or data.get("boot_id") != boot_id:
        return None
    findings = [r for r in map(_record, data.get("findings") or []) if r is not None]
    queued = [
        (q[0], q[1], q[2], q[3], float(q[4]))
        for q in data.get("queued") or []
        if isinstance(q, list)
        and len(q) == 5
        and isinstance(q[0], int)
        and isinstance(q[1], str)
        and q[2] in ("open", "remind", "resolve")
        and isinstance(q[3], dict)
        and isinstance(q[4], (int, float))
    ]
    next_id = data.get("next_id")
    if not isinstance(next_id, int) or isinstance(next_id, bool):
        next_id = 1  # none said: the findings' own ids still count (adopt)
    return OutageAccount(findings, queued, next_id)


_TYPES: dict[str, tuple[type, ...]] = {
    "id": (int,),
    "fingerprint": (str,),
    "kind": (str,),
    "severity": (str,),
    "message": (str,),
    "root_pid": (int, type(None)),
    "details": (dict,),
    "opened_at": (int, float),
    "last_seen": (int, float),
    "seen_count": (int,),
    "resolved_at": (type(None),),  # only open findings are written
    "last_alert_at": (int, float),  # only findings paged already
    "instances": (int,),
    "alerted_instances": (int, type(None)),
    "alerted_pids": (list, type(None)),
    "alerted_routing": (dict, type(None)),
}


def _record(item: object) -> FindingRecord | None:
    """One finding of the file, or None when it is not one as written."""
    if not isinstance(item, dict) or set(item) != set(_TYPES):
        return None
    if any(not isinstance(item[k], t) or isinstance(item[k], bool) for k, t in _TYPES.items()):
        return None
    return FindingRecord(**item)
