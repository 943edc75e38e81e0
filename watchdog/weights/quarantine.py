"""Moving a refused weights file aside: one atomic ``rename(2)`` into the quarantine folder.

A rename within one file system is atomic: a loader sees either the poisoned file at its
path or nothing, never half a file, and the bytes are untouched so ``rogue-watchdog
undo`` can put them back. The quarantined name ends in ``.quarantined`` (not a weights
suffix), so neither a loader globbing ``*.safetensors`` nor the gates pick it up again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config.base import ConfigError
from ..config.ship_gates import ShipGate
from ..faults import fault_point
from ..hosttext import plain_or_code
from ..state import ActionJournal, JournalError, NullJournal
from .verifyworker import FileKey

#: Suffix of every quarantined file.
QUARANTINE_SUFFIX = ".quarantined"


class QuarantineError(OSError):
    """The file could not be moved aside; the message says why."""


class FileOps:
    """Every file-system side effect of the ship gates, replaceable in tests."""

    def makedirs(self, path: Path) -> None:
        """Create ``path`` (mode 0700: only its owner may read quarantined files) and its
        missing parents."""
        path.mkdir(parents=True, exist_ok=True, mode=0o700)

    def rename(self, src: Path, dst: Path) -> None:
        """``rename(2)`` ``src`` to ``dst`` (same file system)."""
        os.rename(src, dst)

    def link(self, src: Path, dst: Path) -> None:
        """``link(2)``: fails when ``dst`` exists (used to put a file back without clobbering)."""
        os.link(src, dst)

    def symlink(self, text: str, path: Path) -> None:
        """``symlink(2)``: a link at ``path`` reading ``text`` (fails when ``path`` exists)."""
        os.symlink(text, path)

    def unlink(self, path: Path) -> None:
        """``unlink(2)``."""
        os.unlink(path)

    def fsync_dir(self, path: Path) -> None:
        """Make a rename in ``path`` durable (``fsync(2)`` on the directory)."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Quarantined:
    """Where a file went.

    Attributes:
        original: The path it had in the deploy directory.
        moved_to: Its path in the quarantine folder.
    """

    original: Path
    moved_to: Path


def quarantine_target(path: Path, deploy_dir: Path, qdir: Path, now: float) -> Path:
    """A free name in ``qdir`` for ``path``: its path relative to ``deploy_dir``, a UTC
    time stamp and :data:`QUARANTINE_SUFFIX`, e.g.
    ``qdir/v3/model.safetensors.20231114T221320Z.quarantined``."""
    try:
        rel = path.relative_to(deploy_dir)
    except ValueError:
        rel = Path(path.name)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    base = qdir / rel.parent / f"{rel.name}.{stamp}"
    target = base.with_name(base.name + QUARANTINE_SUFFIX)
    n = 1
    while os.path.lexists(target):
        target = base.with_name(f"{base.name}-{n}{QUARANTINE_SUFFIX}")
        n += 1
    return target


def _same_version(a: FileKey, b: FileKey) -> bool:
    # ctime changes on rename; size, mtime and inode do not.
    return (a.size_bytes, a.mtime_ns, a.ino) == (b.size_bytes, b.mtime_ns, b.ino)


def quarantine_file(
    key: FileKey,
    deploy_dir: Path,
    qdir: Path,
    now: float,
    ops: FileOps,
    journal: ActionJournal | None = None,
) -> Quarantined:
    """Move the verified version ``key`` of a file into ``qdir``.

    When the listed name is a symbolic link (a file link to a training output, a Hugging
    Face snapshot entry ``model.safetensors -> ../../blobs/HASH``), the link itself is
    renamed, never its target: the name loaders open goes away and the bytes elsewhere
    are untouched. A relative link dangles once moved; it is checked by its text and by
    the version of the target it named before the move.

    Args:
        key: The file version that was found non-finite.
        deploy_dir: The gate's deploy directory (for the relative name).
        qdir: Quarantine folder; created if missing. Must be on the same file system.
        now: POSIX time (for the name).
        ops: The side-effect object.
        journal: The quarantine action's write-ahead record: the rename (and a put-back)
            is written before it is made and marked after (issue 32, case 4).

    Returns:
        Where the file (or the link) went.

    Raises:
        QuarantineError: The file changed or vanished before the move, the quarantine
            folder is on another file system (``EXDEV``: a copy would not be atomic, so
            none is attempted), or another ``OSError`` (permissions, read-only mount).
    """
    src = Path(key.path)
    journal = journal or NullJournal()
    try:
        if not _same_version(FileKey.of(src), key):
            raise QuarantineError(errno.ESTALE, "file changed since it was verified")
        link_text = os.readlink(src) if os.path.islink(src) else None
        target = Path(os.path.realpath(src))
        dst = quarantine_target(src, deploy_dir, qdir, now)
        ops.makedirs(qdir)  # first, so that the folder itself gets mode 0700
        ops.makedirs(dst.parent)
        step = journal.intent("rename", {"from": str(src), "to": str(dst), "link": link_text})
        fault_point("quarantine:intent")
        try:
            ops.rename(src, dst)
        except OSError as exc:
            journal.failed(step, f"{type(exc).__name__}: {exc}")
            raise
        fault_point("quarantine:renamed")
        journal.done(step)
    except QuarantineError:
        raise
    except JournalError as exc:
        raise QuarantineError(errno.EIO, f"not moved: {exc}") from None
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise QuarantineError(
                errno.EXDEV,
                f"quarantine folder {qdir} is on another file system than "
                f"{plain_or_code(str(src), 300)}",
            ) from None
        raise QuarantineError(
            exc.errno, f"cannot move {plain_or_code(str(src), 300)} aside: {exc.strerror}"
        ) from None
    # The deploy step may have replaced the file between the check and the rename; if a
    # different version was moved, put it back (never clobbering a newer one).
    if not _moved_same(dst, link_text, target, key):
        try:
            back = journal.intent("rename", {"from": str(dst), "to": str(src), "put_back": True})
            if link_text is not None or os.path.islink(dst):
                ops.symlink(os.readlink(dst), src)
            else:
                ops.link(dst, src)
            ops.unlink(dst)
            journal.done(back)
        except OSError as exc:
            raise QuarantineError(
                exc.errno,
                f"a newer {plain_or_code(str(src), 300)} was moved to "
                f"{plain_or_code(str(dst), 300)} by mistake and could not be put back",
            ) from None
        raise QuarantineError(errno.ESTALE, "file was replaced while it was being moved aside")
    for d in {dst.parent, src.parent}:
        with contextlib.suppress(OSError):  # durability is best effort; the move happened
            ops.fsync_dir(d)
    return Quarantined(src, dst)


def _moved_same(dst: Path, link_text: str | None, target: Path, key: FileKey) -> bool:
    """Is what now lies at ``dst`` the version ``key`` that was to be moved?"""
    try:
        if link_text is None:
            return not os.path.islink(dst) and _same_version(FileKey.of(dst), key)
        # The same link (same text), and the file it named is still that version.
        return os.readlink(dst) == link_text and _same_version(FileKey.of(target), key)
    except OSError:
        return False


def _device(path: str) -> int | None:
    """The file system ``path`` is on, or would be created on (its nearest existing
    ancestor: the gate creates a missing quarantine folder there); None when unknown."""
    p = Path(path)
    for candidate in (p, *p.parents):
        try:
            return os.stat(candidate).st_dev
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return None


def check_quarantine_dirs(source: str, gates: Sequence[ShipGate]) -> list[ConfigError]:
    """What ``check-config`` says about each gate's ``quarantine_dir`` on this host: it
    must be on the deploy directory's file system, or every quarantine fails (a rename
    across file systems is not atomic; :func:`quarantine_file` refuses it, ``EXDEV``).

    Only a ``quarantine_dir`` given with ``quarantine: true`` beside a ``deploy_dir``
    that exists is compared (a deploy directory still to be mounted is not judged). A
    subfolder of the deploy directory that is a mount of its own is not looked at.

    Args:
        source: The configuration file.
        gates: Its ship gates.

    Returns:
        One error per such gate, naming file, line and key; nothing is created.
    """
    out: list[ConfigError] = []
    for i, gate in enumerate(gates):
        if not gate.quarantine or gate.quarantine_dir is None:
            continue
        try:
            deploy_dev = os.stat(gate.deploy_dir).st_dev
        except OSError:
            continue
        qdev = _device(gate.quarantine_dir)
        if qdev is None or qdev == deploy_dev:
            continue
        out.append(
            ConfigError(
                source,
                gate.quarantine_dir_line,
                f"ship_gates[{i}].quarantine_dir",
                f"{gate.quarantine_dir} is on another file system than deploy_dir"
                f" {gate.deploy_dir}: a rename across file systems is not atomic (EXDEV),"
                " so every quarantine would fail; leave quarantine_dir out (the default"
                " lies inside deploy_dir) or name a folder on the same file system",
            )
        )
    return out
