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


def unread_reason(exc: OSError | ValueError) -> str:
    """Why a file or directory was not read, in the words every "not read" note uses.

    Args:
        exc: What :func:`read_regular`, ``os.stat`` or ``os.listdir`` raised (a
            ``ValueError`` for a path with a NUL byte).

    Returns:
        ``not a regular file``, ``too large: 1048577 bytes, limit 1048576``, or the
        system's error text in lower case (``permission denied``, ``not a directory``;
        strerror(3)).
    """
    if isinstance(exc, NotRegularFileError):
        return "not a regular file"
    if isinstance(exc, FileTooLargeError):
        return f"too large: {exc.size_bytes} bytes, limit {exc.limit_bytes}"
    if isinstance(exc, OSError) and exc.errno is not None:
        return os.strerror(exc.errno).lower()
    return str(exc)


# -- who can change a file the daemon obeys ---------------------------------------------


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _writers(st: os.stat_result) -> str | None:
    """Who besides the owner may write, from the permission bits (ACL entries show in
    the group bits as the mask, acl(5))."""
    if st.st_mode & stat.S_IWOTH:
        return "others"
    if st.st_mode & stat.S_IWGRP:
        try:
            import grp

            return f"group {grp.getgrgid(st.st_gid).gr_name}"
        except (KeyError, ImportError):
            return f"group {st.st_gid}"
    return None


def _chain(path: str) -> list[str]:
    """``path`` and every directory above it, nearest first."""
    out = [path]
    while True:
        parent = os.path.dirname(out[-1])
        if parent == out[-1]:
            return out
        out.append(parent)


def untrusted_reason(path: PathLike, trusted_uids: frozenset[int] | None = None) -> str | None:
    """Why someone other than root (or this process's user) could change ``path``: the
    test sshd's StrictModes applies to ``authorized_keys`` (sshd_config(5)).

    The file and every directory above it, along the path as written and along the
    resolved one, must be owned by a trusted user and writable by no one else (group or
    others; an ACL granting write shows in the group bits, acl(5)). A symlink on the way
    must be owned by a trusted user. A directory writable by others but sticky (``/tmp``,
    mode 1777) is accepted when the entry below it exists and is owned by a trusted
    user: unlink(2) and rename(2) in a sticky directory need that ownership. A path that
    does not exist is judged by the directories that do: if someone else could create
    it, that is the reason.

    Args:
        path: The file (configuration, secret, library, executable).
        trusted_uids: Owners allowed; default root and the effective uid.

    Returns:
        None when only trusted users can change it, else one sentence naming the first
        offending file or directory (nearest first) and its owner or mode, e.g.
        ``/etc/rw/config.yaml is writable by others (mode 0666)``.
    """
    trusted = trusted_uids if trusted_uids is not None else frozenset({0, os.geteuid()})
    literal = os.path.abspath(os.fspath(path))
    seen: set[str] = set()
    for chain in (_chain(literal), _chain(os.path.realpath(literal))):
        below: bool | None = None  # the entry below: None missing, True trusted-owned
        for item in chain:
            try:
                st = os.lstat(item)
            except FileNotFoundError:
                below = None
                continue
            except OSError as exc:
                return f"{item} cannot be checked ({exc.strerror})"
            is_dir = stat.S_ISDIR(st.st_mode)
            name = f"directory {item}" if is_dir else item
            if stat.S_ISLNK(st.st_mode):
                name = f"symlink {item}"
            if item not in seen:
                seen.add(item)
                if st.st_uid not in trusted:
                    who = _owner(st.st_uid)
                    return f"{name} is owned by {who}, not by root or the daemon's user"
                writers = None if stat.S_ISLNK(st.st_mode) else _writers(st)
                sticky = is_dir and bool(st.st_mode & stat.S_ISVTX)
                if writers is not None and not (sticky and below):
                    mode = stat.S_IMODE(st.st_mode)
                    if is_dir and below is None:
                        return (
                            f"{literal} does not exist and {name} lets {writers} create it "
                            f"(mode {mode:04o})"
                        )
                    return f"{name} is writable by {writers} (mode {mode:04o})"
            below = True
    return None
