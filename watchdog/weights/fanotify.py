"""fanotify permission events through glibc (ctypes), behind one small injectable object.

Follows fanotify(7), fanotify_init(2) and fanotify_mark(2). Only what the open gate
needs: a ``FAN_CLASS_CONTENT`` group, ``FAN_OPEN_PERM`` marks on folders (their direct
children, ``FAN_EVENT_ON_CHILD``) and on single files (an inode mark), reading event
records, and answering ``FAN_ALLOW`` / ``FAN_DENY``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from dataclasses import dataclass

FAN_CLOEXEC = 0x00000001
FAN_CLASS_CONTENT = 0x00000004
FAN_OPEN_PERM = 0x00010000
FAN_EVENT_ON_CHILD = 0x08000000
FAN_MARK_ADD = 0x00000001
FAN_ALLOW = 0x01
FAN_DENY = 0x02
FAN_NOFD = -1
AT_FDCWD = -100

#: ``struct fanotify_event_metadata``: event_len, vers, reserved, metadata_len, mask, fd, pid.
_METADATA = struct.Struct("<IBBHQii")
#: ``struct fanotify_response``: fd, response.
_RESPONSE = struct.Struct("<iI")


@dataclass(frozen=True)
class Event:
    """One permission event.

    Attributes:
        fd: A read-only descriptor of the file being opened (the kernel opened it for the
            listener without raising events); close it after answering.
        pid: The opener's process (thread group) id.
        mask: The event bits (``FAN_OPEN_PERM``).
    """

    fd: int
    pid: int
    mask: int


class FanotifyUnavailable(OSError):
    """fanotify cannot be used here (no kernel support, no CAP_SYS_ADMIN, no glibc call)."""


class Fanotify:
    """A fanotify group of class ``FAN_CLASS_CONTENT`` (the real kernel interface).

    Raises:
        FanotifyUnavailable: ``fanotify_init`` is missing or failed (errno named:
            ``EPERM`` without CAP_SYS_ADMIN, ``ENOSYS``/``EINVAL`` without kernel support).
    """

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        try:
            self._init = libc.fanotify_init
            self._mark = libc.fanotify_mark
        except AttributeError as exc:
            raise FanotifyUnavailable(0, f"glibc has no fanotify calls: {exc}") from None
        self._init.argtypes = [ctypes.c_uint, ctypes.c_uint]
        self._init.restype = ctypes.c_int
        self._mark.argtypes = [
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint64,
            ctypes.c_int,
            ctypes.c_char_p,
        ]
        self._mark.restype = ctypes.c_int
        fd = self._init(FAN_CLASS_CONTENT | FAN_CLOEXEC, os.O_RDONLY | os.O_LARGEFILE)
        if fd < 0:
            err = ctypes.get_errno()
            raise FanotifyUnavailable(err, f"fanotify_init: {os.strerror(err)}")
        self.fd = fd

    def mark(self, path: str, folder: bool) -> None:
        """Gate opens of ``path`` (a folder: of its direct children; a file: of itself).

        Raises:
            OSError: The mark failed (errno: ``EXDEV``/``ENODEV`` a filesystem that
                refuses it, ``ENOENT`` the path went away, ...).
        """
        mask = FAN_OPEN_PERM | (FAN_EVENT_ON_CHILD if folder else 0)
        if self._mark(self.fd, FAN_MARK_ADD, mask, AT_FDCWD, os.fsencode(path)) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"fanotify_mark: {os.strerror(err)}", path)

    def read(self) -> list[Event]:
        """Read the events waiting (blocks until at least one when none is)."""
        buf = os.read(self.fd, 64 * _METADATA.size)
        events: list[Event] = []
        pos = 0
        while pos + _METADATA.size <= len(buf):
            event_len, _vers, _res, _mlen, mask, fd, pid = _METADATA.unpack_from(buf, pos)
            if event_len < _METADATA.size:
                break
            events.append(Event(fd, pid, mask))
            pos += event_len
        return events

    def respond(self, event_fd: int, allow: bool) -> None:
        """Answer one permission event (the opener's ``open(2)`` returns, or fails EPERM)."""
        os.write(self.fd, _RESPONSE.pack(event_fd, FAN_ALLOW if allow else FAN_DENY))

    def close(self) -> None:
        """Close the group: its marks go and every waiting open proceeds (fails open)."""
        os.close(self.fd)
