"""Opening weights files only when they are regular files.

Opening a FIFO for reading blocks until a writer appears (fifo(7)), and reading a
device such as ``/dev/zero`` never ends, so one special file in a deploy directory
would hang the verifier thread and blind every gate. Every weights file is therefore
stat'ed (following symlinks) before it is opened, opened with ``O_NONBLOCK`` (which
makes ``open(2)`` of a FIFO return at once and has no effect on a regular file), and
checked again with ``fstat(2)`` on the open descriptor, since the path may have been
swapped between the two calls. Anything else is "not a regular file", not verified.
"""

from __future__ import annotations

import contextlib
import os
import stat
import zipfile
from collections.abc import Iterator
from typing import BinaryIO

from .. import safeio
from .errors import NotVerifiedError

PathLike = str | os.PathLike[str]


class NotRegularError(NotVerifiedError):
    """The path is a FIFO, device, socket or directory, so it is not read at all."""


def not_regular_message(mode: int) -> str:
    """The report text for a file of ``mode`` (``st_mode``) that is not regular."""
    return f"not a regular file ({safeio.kind_of(mode)})"


def check_regular(path: PathLike) -> os.stat_result:
    """Stat ``path`` following symlinks and require a regular file.

    Returns:
        The ``stat(2)`` result.

    Raises:
        NotRegularError: The path is not a regular file.
        OSError: The path cannot be stat'ed (missing, symlink loop: ``ELOOP``, ...).
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularError(not_regular_message(st.st_mode))
    return st


def open_regular(path: PathLike) -> BinaryIO:
    """Open a regular file for binary reading without ever blocking in ``open(2)``.

    Returns:
        An unbuffered-position binary file object (``"rb"``), owned by the caller.

    Raises:
        NotRegularError: The path is not a regular file, before or after opening.
        OSError: The path cannot be stat'ed or opened.
    """
    try:
        fd = safeio.open_regular_fd(path)
    except safeio.NotRegularFileError as exc:
        raise NotRegularError(exc.strerror or "not a regular file") from None
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def open_zip(path: PathLike) -> Iterator[zipfile.ZipFile]:
    """A :class:`zipfile.ZipFile` over :func:`open_regular`, closing both on exit.

    Raises:
        NotRegularError: See :func:`open_regular`.
        zipfile.BadZipFile: Not a zip archive.
        OSError: The file cannot be read.
    """
    with open_regular(path) as fh, zipfile.ZipFile(fh) as zf:
        yield zf
