"""Which files cron reads as crontabs: one listing for every resolver that looks at them.

The cron resolver parses these files to name a job's entry; the systemd resolver searches
them to say whether a crontab line also starts a unit's job. Both must see the same set,
or one of them blames (or misses) a file cron never runs.

Rules (Debian cron 3.0, cron(8) and its "DEBIAN SPECIFIC" section):

* the system crontabs named by the caller (``/etc/crontab``), in that order;
* ``/etc/cron.d/NAME`` only when NAME passes :func:`~watchdog.lineage.crontab.cron_d_name_ok`
  (letters, digits, ``_`` and ``-``): ``foo.dpkg-old``, ``foo.bak`` and ``.placeholder``
  are ignored by cron, so they are not listed;
* every file in a spool directory except hidden ones (``crontab(1)`` names spool files
  after their user; ``.`` files are its temporary files), owner = file name;
* a file cron refuses to load is no crontab (:func:`cron_skips`): the system crontab and
  ``cron.d`` files must be regular files owned by root, with one link, writable by
  no group or other (Debian cron's "BAD FILE MODE", "WRONG FILE OWNER", "NUMBER OF HARD
  LINKS > 1"); a spool file must belong to its user and be writable by no one else. A
  0666 copy of a line never fires (seen on Debian 12, shared/notes/system-tests.md).

Directories found inside ``cron.d`` or a spool directory are skipped silently: Debian's
``/var/spool/cron`` holds the ``crontabs`` directory itself. A directory that exists but
cannot be listed is recorded with the reason: a caller then never claims that no entry
starts a job.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..safeio import unread_reason
from .crontab import cron_d_name_ok

# Largest crontab read, in bytes. Cron sets no limit, but no real crontab comes near
# 1 MiB, and a root scan must not read a giant someone put in a spool directory.
MAX_CRONTAB_BYTES = 1 << 20


@dataclass(frozen=True)
class CrontabFile:
    """One file cron reads.

    Attributes:
        path: Its path.
        system: True for the system format (a user field before the command).
        owner: The user a spool crontab belongs to (its file name); None for system ones.
    """

    path: str
    system: bool
    owner: str | None


@dataclass
class CrontabListing:
    """The crontabs cron reads, and the directories that could not be listed.

    Attributes:
        files: In cron(8)'s load order: system files, ``cron.d`` by name, spool
            directories in the given order, each by name.
        problems: ``(directory, reason)`` per directory not listed, the reason in
            :func:`~watchdog.safeio.unread_reason`'s words (``permission denied``).
    """

    files: list[CrontabFile] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)


def _names(path: str, problems: list[tuple[str, str]]) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []  # no such directory: cron reads nothing there either
    except (OSError, ValueError) as exc:
        problems.append((path, unread_reason(exc)))
        return []


def cron_skips(path: str, system: bool, owner: str | None = None) -> str | None:
    """Why cron refuses to load ``path`` as a crontab, or None when it loads it (or the
    file is missing, unreadable or not a regular file: the reader says so then).

    Args:
        path: The crontab.
        system: A system crontab (``/etc/crontab``, ``cron.d``): root's alone.
        owner: For a spool file, the user it is named after.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None  # a FIFO or a directory: the reader refuses it and says why
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"mode {st.st_mode & 0o7777:04o}: writable by group or others"
    if system:
        if st.st_uid != 0:
            return f"owned by UID {st.st_uid}, not root"
        if st.st_nlink > 1:
            return f"{st.st_nlink} hard links"
        return None
    if owner is not None:
        try:
            uid = pwd.getpwnam(owner).pw_uid
        except KeyError:
            return None  # no such user: cron logs ORPHAN and skips; the reader decides
        if st.st_uid != uid:
            return f"owned by UID {st.st_uid}, not {owner}'s"
    return None


def list_crontabs(
    cron_files: Sequence[str], cron_d_dir: str, spool_dirs: Sequence[str]
) -> CrontabListing:
    """List the files cron reads as crontabs (module docstring: the rules followed).

    Args:
        cron_files: System crontabs, e.g. ``("/etc/crontab",)``; listed even when
            missing (the reader decides; a missing file is no problem).
        cron_d_dir: The ``cron.d`` directory.
        spool_dirs: User crontab directories, Debian's first.

    Returns:
        The listing; reading the files is the caller's (through :mod:`watchdog.safeio`).
    """
    out = CrontabListing()
    out.files += [CrontabFile(p, True, None) for p in cron_files if cron_skips(p, True) is None]
    for name in _names(cron_d_dir, out.problems):
        path = os.path.join(cron_d_dir, name)
        if cron_d_name_ok(name) and not os.path.isdir(path) and cron_skips(path, True) is None:
            out.files.append(CrontabFile(path, True, None))
    for spool in spool_dirs:
        for name in _names(spool, out.problems):
            path = os.path.join(spool, name)
            if (
                not name.startswith(".")
                and not os.path.isdir(path)
                and cron_skips(path, False, name) is None
            ):
                out.files.append(CrontabFile(path, False, name))
    return out
