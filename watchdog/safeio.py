"""Reading files that someone else may have replaced with a FIFO, a device or a giant.

Crontabs, unit files, configuration, secret files and weights live in places other users
or other programs control. Opening a FIFO for reading blocks until a writer appears
(fifo(7)) and ``/dev/zero`` never ends, so one special file would hang a scan, the status
socket or the alert worker. Every such read goes through here: ``stat(2)`` (following
symlinks) before opening, ``open(2)`` with ``O_NONBLOCK`` (returns at once for a FIFO, no
effect on a regular file), ``fstat(2)`` again on the open descriptor (the path may have
been swapped in between), and a size limit that refuses rather than truncates.
"""

from __future__ import annotations

import errno
import os
import stat

PathLike = str | os.PathLike[str]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFileError(OSError):
    """The path is a FIFO, device, socket or directory; it was not read."""


class FileTooLargeError(OSError):
    """The file is larger than the caller's limit; it was not read.

    Attributes:
        size_bytes: Its size (at least this many bytes when it grew while being read).
        limit_bytes: The limit it broke.
    """

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {limit_bytes} bytes")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


def kind_of(mode: int) -> str:
    """``a FIFO``, ``a character device``... for a ``st_mode`` that is not a regular file."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a special file"


def _require_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(errno.EINVAL, f"not a regular file ({kind_of(mode)})")


def open_regular_fd(path: PathLike) -> int:
    """Open a regular file read-only without ever blocking in ``open(2)``.

    Returns:
        A file descriptor the caller must close.

    Raises:
        NotRegularFileError: Not a regular file, before or after opening.
        OSError: Cannot be stat'ed or opened (missing, permission, symlink loop).
    """
    _require_regular(os.stat(path).st_mode)  # refuse devices before open(2) touches them
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        _require_regular(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: PathLike, max_bytes: int) -> bytes:
    """The whole content of a regular file of at most ``max_bytes`` bytes.

    Raises:
        NotRegularFileError: Not a regular file.
        FileTooLargeError: Larger than ``max_bytes`` (checked before and while reading,
            so a file that grows meanwhile is refused too).
        OSError: Cannot be stat'ed, opened or read.
    """
    fd = open_regular_fd(path)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise FileTooLargeError(size, max_bytes)
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise FileTooLargeError(size, max_bytes)
        return b"".join(chunks)
    finally:
        os.close(fd)
