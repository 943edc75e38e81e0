"""``ship SRC DST``: deploy a weights file with no window between the check and the deploy.

``gate --weights P -- cp P DST`` verifies ``P`` and then lets the command read ``P`` again:
a writer that rewrites ``P`` in between ships bytes nobody checked. ``ship`` instead

1. opens ``SRC`` once and copies from that one descriptor into a new file in a private
   staging folder (mode 0700, created beside ``DST``, so on the same filesystem and out
   of reach of every other non-root user);
2. ``fsync``\\ s it and verifies those staged bytes (the very bytes that will be renamed:
   nobody else can open the staging folder to change them);
3. renames the staged file onto ``DST`` (``rename(2)``: atomic, a reader sees the old
   file or the new one, never a partial one) and ``fsync``\\ s ``DST``'s folder;
4. on anything else (non-finite, not verified, the source changing while copied, an
   I/O error) removes the staged file and folder and leaves ``DST`` as it was.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import safeio
from .report import FileReport, Report

if TYPE_CHECKING:
    from .scan import ProgressFn, ScanContext

PathLike = str | os.PathLike[str]

#: Bytes per copy call (``copy_file_range(2)`` moves them in the kernel).
_CHUNK_BYTES = 64 * 1024 * 1024
#: The ``weights-refused`` reason (and the JSON file ``status``) of a refusal about
#: ``DST``, not the weights: its folder is missing or cannot be written. The source may
#: well be fine, so it is never called "not verified".
DESTINATION_ERROR = "destination-error"
# Write errors that are the destination filesystem's, whichever call meets them.
_DESTINATION_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)


@dataclass(frozen=True)
class ShipResult:
    """What ``ship`` did.

    Attributes:
        report: The verification report of the staged copy (or the copy's failure).
        destination: The final path written, or None when nothing was written.
        refusal: :data:`DESTINATION_ERROR` when ``DST`` was the problem (the report's
            one file is then ``DST``, its error the reason); None when the report's
            status says why.
    """

    report: Report
    destination: Path | None
    refusal: str | None = None

    @property
    def exit_code(self) -> int:
        """0 shipped, 1 non-finite (nothing shipped), 2 not verified or the destination
        could not be written (nothing shipped)."""
        return self.report.exit_code

    def render_text(self) -> str:
        """The report's text, or ``NOT SHIPPED DST: WHY`` for a destination error."""
        if self.refusal is None:
            return self.report.render_text()
        return "\n".join(f"NOT SHIPPED {f.path}: {f.error}" for f in self.report.files)

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON mapping; a destination error is its file's ``status``."""
        out = self.report.to_dict()
        if self.refusal is not None:
            for f in out["files"]:
                f["status"] = self.refusal
        return out


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _copy_fd(src_fd: int, dst_fd: int, progress: ProgressFn | None) -> int:
    """Copy ``src_fd`` from offset 0 to its end into ``dst_fd``; returns the bytes copied."""
    copied = 0
    use_cfr = hasattr(os, "copy_file_range")
    while True:
        n = 0
        if use_cfr:
            try:
                n = os.copy_file_range(src_fd, dst_fd, _CHUNK_BYTES, copied, copied)
            except OSError:  # EXDEV on old kernels, EINVAL on some filesystems
                use_cfr = False
        if not use_cfr:
            data = os.pread(src_fd, 1024 * 1024, copied)
            n = len(data)
            view = memoryview(data)
            while view:
                view = view[os.pwrite(dst_fd, view, copied + n - len(view)) :]
        if n == 0:
            return copied
        copied += n
        if progress is not None:
            progress(n)


def _refused(path: Path, fmt: str, error: str, refusal: str | None = None) -> ShipResult:
    return ShipResult(Report(files=[FileReport(path, fmt, error=error)]), None, refusal)


def _destination_refused(dst: Path, exc: OSError) -> ShipResult:
    """``DST``'s folder is missing, not a folder, or not writable (``exc`` from staging
    beside it, writing there or renaming onto ``DST``): the weights are not the problem."""
    folder = dst.parent
    if exc.errno == errno.ENOENT and not folder.exists():
        why = f"the destination folder does not exist: {folder}"
    elif exc.errno == errno.ENOTDIR:
        why = f"the destination folder is not a folder: {folder}"
    else:
        why = f"cannot write the destination: {safeio.unread_reason(exc)}"
    return _refused(dst, "unknown", why, DESTINATION_ERROR)


def _source_refused(src: Path, exc: OSError) -> ShipResult:
    why = safeio.unread_reason(exc)
    if src.is_dir():
        # ship copies one file; a model folder is shipped file by file (docs/weights.md).
        why += (
            " (a folder): ship copies one file; ship each weights file of the model (each"
            " shard, then its index)"
        )
    return _refused(src, "unknown", f"cannot open the source: {why}")


def _destination(src: Path, dst: Path) -> Path:
    """``DST`` itself, or ``DST/<SRC's name>`` when ``DST`` is a folder (as ``cp`` does)."""
    return dst / src.name if dst.is_dir() else dst


def ship(
    src: PathLike,
    dst: PathLike,
    *,
    ctx: ScanContext | None = None,
    progress: ProgressFn | None = None,
) -> ShipResult:
    """Copy the weights file ``src`` to ``dst`` only if the copied bytes are all finite.

    The bytes verified are the bytes renamed onto ``dst``: copied from one descriptor
    of ``src`` into a private staging folder beside ``dst``, fsync'ed, verified there
    (:func:`watchdog.weights.verify`, with ``dst``'s suffix choosing the format), then
    renamed. The copy gets ``src``'s permission bits (not its owner).

    Args:
        src: A regular weights file (a symlink is followed, once, at open).
        dst: The destination file, or an existing folder to ship into under ``src``'s
            name. Its folder must exist.
        ctx: Scan settings for the verification (default: two threads).
        progress: Called with bytes copied, then bytes verified.

    Returns:
        The result; ``exit_code`` 0 means ``destination`` now holds the verified bytes.
        On 1 or 2 ``dst`` is untouched and no staged file is left behind; ``refusal``
        is :data:`DESTINATION_ERROR` when ``dst``'s folder was missing or unwritable.

    Raises:
        Nothing for bad input: a missing source, a special file, an unwritable
        destination folder or an I/O error is an exit-2 report naming the path.
    """
    from .api import verify

    src_p, dst_p = Path(src), _destination(Path(src), Path(dst))
    try:
        src_fd = safeio.open_regular_fd(src_p)
    except OSError as exc:
        return _source_refused(src_p, exc)
    stage: str | None = None
    try:
        before = os.fstat(src_fd)
        try:
            stage = tempfile.mkdtemp(prefix=f".{dst_p.name}.ship-", dir=dst_p.parent)
        except OSError as exc:
            return _destination_refused(dst_p, exc)
        # Named as the source (its stem, DST's suffix choosing the format): a tensor a
        # file names after itself (.npy) reads as `verify-weights SRC` calls it.
        staged = Path(stage) / f"{src_p.stem}{dst_p.suffix}"
        out_fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            copied = _copy_fd(src_fd, out_fd, progress)
            os.fsync(out_fd)
            written = os.fstat(out_fd)
        finally:
            os.close(out_fd)
        after = os.fstat(src_fd)
        if _identity(before) != _identity(after) or copied != after.st_size:
            return _refused(
                src_p,
                "unknown",
                "the source changed while it was copied (inode, size, mtime or ctime differ"
                " before and after): nothing shipped",
            )
        checked = verify(staged, ctx=ctx, progress=progress)
        # The user names the source; the staged name means nothing to them.
        report = Report(
            files=[dataclasses.replace(f, path=src_p) for f in checked.files], notes=checked.notes
        )
        if report.exit_code != 0:
            return ShipResult(report, None)
        if _identity(os.stat(staged)) != _identity(written):
            return _refused(src_p, "unknown", "the staged copy was replaced: nothing shipped")
        os.chmod(staged, stat.S_IMODE(before.st_mode) & 0o777)
        try:
            os.rename(staged, dst_p)
        except OSError as exc:  # DST a folder, or made read-only meanwhile
            return _destination_refused(dst_p, exc)
        dir_fd = os.open(dst_p.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)
        return ShipResult(report, dst_p)
    except OSError as exc:
        if exc.errno in _DESTINATION_ERRNOS:  # the staged copy's filesystem is DST's
            return _destination_refused(dst_p, exc)
        return _refused(src_p, "unknown", f"ship failed: {type(exc).__name__}: {exc}")
    finally:
        os.close(src_fd)
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
