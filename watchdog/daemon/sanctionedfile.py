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

from .runfile import beside_socket, read_json, write_json

FILE_NAME = "sanctioned.json"
# One identity is about 60 bytes: this holds tens of thousands.
MAX_BYTES = 4 << 20

Ident = tuple[int, int]  # (PID, start ticks)


def sanctioned_path(socket_path: str) -> str:
    """The file beside the status socket ``socket_path``."""
    return beside_socket(socket_path, FILE_NAME)


def write_sanctioned(path: str, procs: dict[Ident, str], boot_id: str | None) -> None:
    """Replace the file at ``path`` with ``procs`` (atomically, mode 0600).

    Args:
        path: :func:`sanctioned_path`.
        procs: ``(PID, start ticks) -> rule`` of every process sanctioned now.
        boot_id: This boot's id (start ticks count from boot).

    Raises:
        OSError: The file could not be written (its directory is missing or full).
    """
    write_json(path, {
        "boot_id": boot_id,
        "procs": [[pid, start, rule] for (pid, start), rule in sorted(procs.items())],
    })  # fmt: skip


def read_sanctioned(path: str, boot_id: str | None) -> dict[Ident, str]:
    """The identities the file at ``path`` holds for boot ``boot_id``; empty when it is
    missing, untrusted, damaged or of another boot. Never raises.

    Args:
        path: :func:`sanctioned_path`.
        boot_id: This boot's id.
    """
    data = read_json(path, MAX_BYTES, boot_id)
    if data is None:
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
