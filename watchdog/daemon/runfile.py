"""Small JSON files the daemon keeps beside its status socket for the next daemon of
the same boot (``sanctioned.json``, ``outage.json``): one way to name, write and read
them, so each file says only what it holds.

Written whole and atomically (a temporary file from ``mkstemp``, mode 0600, renamed
over the old one: rename(2)); read only when no one but root (or the daemon's user)
can change it or a directory above it (a planted file could silence a page or keep a
rogue sanctioned), only up to a size, and only for the boot that wrote it (PIDs and
start ticks name processes of one boot).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any

from ..safeio import read_regular, untrusted_reason


def beside_socket(socket_path: str, name: str) -> str:
    """The path of file ``name`` in the directory of the status socket ``socket_path``."""
    return os.path.join(os.path.dirname(os.path.abspath(socket_path)), name)


def write_json(path: str, data: dict[str, Any]) -> None:
    """Replace the file at ``path`` with ``data`` as JSON, atomically, mode 0600.

    One ``json.dumps`` then one write: Python's chunked encoder (``json.dump``) took
    165 ms for 2,000 findings, in the tick (bench/outage_memory.py).

    Raises:
        OSError: Not written (its directory is missing, full or read-only); nothing is
            left behind.
    """
    name = os.path.basename(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(data))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: str, max_bytes: int, boot_id: str | None) -> dict[str, Any] | None:
    """The object the file at ``path`` holds, when it was written in boot ``boot_id``.

    Returns:
        The parsed object; None when the file is missing, untrusted
        (:func:`~watchdog.safeio.untrusted_reason`), larger than ``max_bytes``, not a
        JSON object (nested past the parser's depth too), or of another boot. Never
        raises.
    """
    if not os.path.lexists(path) or untrusted_reason(path) is not None:
        return None
    try:
        data = json.loads(read_regular(path, max_bytes))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("boot_id") != boot_id:
        return None
    return data
