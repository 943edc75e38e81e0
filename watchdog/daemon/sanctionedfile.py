"""The sanctioned identities of this boot, kept beside the status socket as well.

A sanctioned process stays sanctioned for its life, also across a restart: the daemon
records each one in ``state.db`` (``sanctioned_procs``). While the database refuses
writes (a full or unwritable state directory: issue 32), a run judged sanctioned only
then was lost by a restart before the outage ended, and the restarted daemon judged it
afresh: with its sanctioned line edited meanwhile, it terminated a run it had
sanctioned. The same identities are therefore also written to a small file in the
socket's directory (``/run/rogue-watchdog`` by default: another file system than the
state directory, cleared at reboot like the identities it holds), and read back at
start beside the database's.

The file is trusted only when no one but root (or the daemon's user) can change it or a
directory above it (:func:`~watchdog.safeio.untrusted_reason`): a planted file would
sanction a rogue. An untrusted, damaged or another boot's file is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile

from ..safeio import read_regular, untrusted_reason

FILE_NAME = "sanctioned.json"
# One identity is about 60 bytes: this holds tens of thousands.
MAX_BYTES = 4 << 20

Ident = tuple[int, int]  # (PID, start ticks)


def sanctioned_path(socket_path: str) -> str:
    """The file beside the status socket ``socket_path``."""
    return os.path.join(os.path.dirname(os.path.abspath(socket_path)), FILE_NAME)


def write_sanctioned(path: str, procs: dict[Ident, str], boot_id: str | None) -> None:
    """Replace the file at ``path`` with ``procs`` (atomically, mode 0600).

    Args:
        path: :func:`sanctioned_path`.
        procs: ``(PID, start ticks) -> rule`` of every process sanctioned now.
        boot_id: This boot's id (start ticks count from boot).

    Raises:
        OSError: The file could not be written (its directory is missing or full).
    """
    data = {
        "boot_id": boot_id,
        "procs": [[pid, start, rule] for (pid, start), rule in sorted(procs.items())],
    }
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_sanctioned(path: str, boot_id: str | None) -> dict[Ident, str]:
    """The identities the file at ``path`` holds for boot ``boot_id``; empty when it is
    missing, untrusted, damaged or of another boot. Never raises.

    Args:
        path: :func:`sanctioned_path`.
        boot_id: This boot's id.
    """
    if not os.path.lexists(path) or untrusted_reason(path) is not None:
        return {}
    try:
        data = json.loads(read_regular(path, MAX_BYTES))
    except (OSError, ValueError, RecursionError):  # nested past the parser's depth
        return {}
    if not isinstance(data, dict) or data.get("boot_id") != boot_id:
        return {}
    out: dict[Ident, str] = {}
    procs = data.get("procs")
    for item in procs if isinstance(procs, list) else []:
        if (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], int)
            and isinstance(item[1], int)
            and isinstance(item[2], str)
        ):
            out[(item[0], item[1])] = item[2]
    return out
