"""The configuration in force, kept beside the state database for one-shot commands.

``scan`` and ``explain`` without ``--config`` judge under the running daemon's
configuration file so that their verdicts are the daemon's. While an edit of that file
stands refused (invalid, or untrusted), the daemon runs the version it accepted last and
the file no longer holds it: the commands failed with the file's error. So the daemon
keeps a byte copy of each version it puts in force, named by nothing but its checksum
(the status document's ``config.checksum``), and a command that finds the file refused
judges under the copy whose checksum is the one in force, and says so. The copy sits in
the state directory (root's, like the database): a configuration can name secrets files
and receivers, which the status socket (readable by a group) must not serve.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from ..config import MAX_CONFIG_BYTES, config_checksum
from ..safeio import read_regular

COPY_NAME = "config-in-force.yaml"


def _sha16(data: bytes) -> str:
    # config.config_checksum's, of bytes already read (those written must be those hashed).
    return hashlib.sha256(data).hexdigest()[:16]


def keep_in_force_copy(
    state_dir: str | Path, config_path: str | None, checksum: str | None
) -> str | None:
    """Write the configuration in force to ``STATE_DIR/config-in-force.yaml``.

    The file is read again and written only when its bytes still have ``checksum`` (the
    one the daemon computed when it loaded them): an edit in between is not the version
    in force. The copy is replaced atomically (a new file of a random name, ``rename(2)``),
    mode 0600; a daemon on
    built-in defaults, or one whose file changed meanwhile, leaves none.

    Args:
        state_dir: The daemon's state directory.
        config_path: The configuration file in force; None on built-in defaults.
        checksum: Its checksum when loaded (16 hex digits), None when unreadable.

    Returns:
        None when the copy is in place (or rightly absent); else why it is not, for the
        caller to say (a full or read-only state directory, an edit meanwhile).
    """
    copy = Path(state_dir) / COPY_NAME
    data = None
    if config_path is not None and checksum is not None:
        try:
            data = read_regular(config_path, MAX_CONFIG_BYTES)
        except OSError as exc:
            return _drop(copy, f"cannot read {config_path}: {exc.strerror or exc}")
        if _sha16(data) != checksum:
            return _drop(copy, f"{config_path} changed while it was loaded")
    if data is None:
        return _drop(copy, None)
    tmp = None
    try:
        # A fresh file of a random name (O_EXCL, 0600), as outage.json's: at a fixed
        # name a FIFO planted in a state directory others can write blocked the
        # daemon's open(2) forever (blind), and a planted file would be the copy.
        fd, tmp = tempfile.mkstemp(prefix=f".{COPY_NAME}.", dir=copy.parent)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, copy)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        # A copy of an older version must not stand for this one.
        return _drop(copy, f"cannot write {copy}: {exc.strerror or exc}")
    return None


def _drop(copy: Path, why: str | None) -> str | None:
    try:
        copy.unlink(missing_ok=True)
    except OSError as exc:
        # Still there, still named by its own checksum: a reader takes it only when that
        # is the one in force, so a stale copy is never used; say it stayed.
        return f"{why or 'no copy due'}; the old copy stays ({exc.strerror or exc})"
    return why


def in_force_copy(state_dir: str, checksum: str) -> str | None:
    """The kept copy of the configuration whose checksum is ``checksum``, or None.

    Args:
        state_dir: The running daemon's state directory (its status document's).
        checksum: The checksum in force (the status document's ``config.checksum``).

    Returns:
        The copy's path when it exists, is a regular file of at most
        ``MAX_CONFIG_BYTES`` and its bytes have that checksum; None otherwise (no copy,
        another version's, unreadable: the caller keeps the file's own error).
    """
    copy = os.path.join(state_dir, COPY_NAME)
    return copy if config_checksum(copy) == checksum else None
