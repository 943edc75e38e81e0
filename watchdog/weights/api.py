"""Python entry points: :func:`verify` and :func:`require_finite`."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..model import UNVERIFIABLE_SUFFIXES
from .discover import discover, sniff
from .errors import (
    NonFiniteWeightsError,
    NotVerifiedError,
    UnverifiedWeightsError,
)
from .regular import open_regular
from .report import FileReport, Report

if TYPE_CHECKING:
    from .scan import ProgressFn, ScanContext

PathLike = str | os.PathLike[str]

Verifier = Callable[[Path, "ScanContext", FileReport], None]


# Each format's reader is imported when a file of that format is first verified: a run
# over safetensors files never loads the pickle reader of torch checkpoints, the GGUF
# block tables or numpy's ``.npy`` header parser (part of ``verify-weights`` start-up).
def _safetensors(path: Path, ctx: ScanContext, report: FileReport) -> None:
    from .safetensors import verify_safetensors  # imported on first use

    verify_safetensors(path, ctx, report)


def _torchzip(path: Path, ctx: ScanContext, report: FileReport) -> None:
    from .torchzip import verify_torchzip  # imported on first use

    verify_torchzip(path, ctx, report)


def _npy(path: Path, ctx: ScanContext, report: FileReport) -> None:
    from .numpy_format import verify_npy  # imported on first use

    verify_npy(path, ctx, report)


def _npz(path: Path, ctx: ScanContext, report: FileReport) -> None:
    from .numpy_format import verify_npz  # imported on first use

    verify_npz(path, ctx, report)


def _gguf(path: Path, ctx: ScanContext, report: FileReport) -> None:
    from .gguf import verify_gguf  # imported on first use

    verify_gguf(path, ctx, report)


#: Every weights format, once: its name (as :func:`~watchdog.weights.discover.sniff`
#: gives it) → the function verifying a file of it (the typed list; no names in strings).
_VERIFIERS: dict[str, Verifier] = {
    "safetensors": _safetensors,
    "torch-zip": _torchzip,
    "npy": _npy,
    "npz": _npz,
    "gguf": _gguf,
}


def _verifier(fmt: str) -> Verifier | None:
    """The verify function of format ``fmt``, or None."""
    return _VERIFIERS.get(fmt)


#: The format a loader uses for a file of this suffix (``safetensors.load_file`` reads
#: any ``.safetensors`` as safetensors, ``torch.load`` reads ``.pt`` files as torch).
#: Where the suffix names a format, the file is verified as that format only: content
#: that looks like another format is refused, since a polyglot file can be finite in
#: one reading and NaN in another. Content that looks like nothing known is verified
#: as the suffix's format, so a damaged file gets that format's precise error.
_BY_SUFFIX = {
    ".safetensors": "safetensors",
    ".pt": "torch-zip",
    ".pth": "torch-zip",
    ".bin": "torch-zip",
    ".ckpt": "torch-zip",
    ".tar": "torch-zip",
    ".npy": "npy",
    ".npz": "npz",
    ".gguf": "gguf",
}

_UNSUPPORTED = {
    "torch-legacy": "legacy (pre-zip) PyTorch pickle format not verified",
    "zip": "zip archive is neither a torch.save checkpoint nor an .npz",
    "zip-damaged": (
        "truncated or damaged zip archive: its central directory (at the end of the file)"
        " cannot be read"
    ),
    "unknown": "unsupported format, not verified",
}


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What a rewrite changes: ``utime(2)`` can restore the mtime but not the ctime."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _format_for(path: Path, sniffed: str) -> tuple[str, str | None]:
    """``(format to verify as, refusal)`` for a file whose content sniffed as ``sniffed``."""
    expected = _BY_SUFFIX.get(path.suffix.lower())
    if expected is None or sniffed == expected:
        return sniffed, None
    if sniffed == "unknown":
        return expected, None
    if sniffed in _VERIFIERS:
        return sniffed, (
            f"content is {sniffed} but the suffix {path.suffix} makes loaders read it as"
            f" {expected}: not verified"
        )
    return sniffed, None  # zip, damaged zip or legacy pickle: refused as such


def verify_file(path: Path, ctx: ScanContext, *, name: Path | None = None) -> FileReport:
    """Verify one file, never raising: every failure becomes a not-verified report.

    ``name``, when given, is the name a loader would open the file by (its suffix picks
    the format): the open gate verifies ``/proc/self/fd/N`` of the file being opened.

    The file is read as the format its suffix names (a mismatching content is
    refused). It must not change while it is read: the path's and the open
    descriptor's device, inode, size, mtime and ctime are compared before and after
    (``fstat(2)`` on a descriptor held throughout), so neither a writer racing the
    check and restoring the mtime nor a swap of the path can slip bytes past it.
    """
    report = FileReport(path, "unknown")
    try:
        with open_regular(path) as held:
            before = _identity(os.stat(path))
            held_before = _identity(os.fstat(held.fileno()))
            named = path if name is None else name
            report.format, refusal = _format_for(named, sniff(path))
            verifier = _verifier(report.format)
            if refusal is not None:
                report.error = refusal
                return report
            if verifier is None:
                report.error = _UNSUPPORTED[report.format]
                if report.format == "unknown" and named.suffix.lower() in UNVERIFIABLE_SUFFIXES:
                    # As a directory walk says it (discover): the format is named.
                    report.error = f"{named.suffix.lower()} weights format not verified"
                return report
            verifier(path, ctx, report)
            if not report.tensors:
                report.error = "file holds no tensors"
            elif (
                _identity(os.stat(path)) != before
                or _identity(os.fstat(held.fileno())) != held_before
                or held_before != before
            ):
                report.error = (
                    "file changed while it was being verified (inode, size, mtime or ctime"
                    " differ before and after)"
                )
    except NotVerifiedError as exc:
        report.error = str(exc)
    except Exception as exc:  # fail closed on anything unexpected
        report.error = f"unreadable: {type(exc).__name__}: {exc}"
    return report


def _as_list(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(paths, str | os.PathLike):
        return [Path(paths)]
    return [Path(p) for p in paths]


def verify(
    paths: PathLike | Sequence[PathLike],
    *,
    progress: ProgressFn | None = None,
    ctx: ScanContext | None = None,
) -> Report:
    """Verify weights files and model directories.

    Args:
        paths: A file, a model directory, or a sequence of them. Directories are
            walked for weights files; shard indexes are checked.
        progress: Called with the number of bytes just checked (any thread).
        ctx: Scan settings; by default a two-thread pool.

    Returns:
        The report; ``report.ok`` is True only if every value of every file was
        read and is finite. ``report.exit_code`` is 0, 1 (non-finite) or 2 (not
        verified). Never raises for bad input files.
    """
    found = discover(_as_list(paths))
    own = ctx is None
    if ctx is None:
        # Here, not at import: the daemon imports this module for its ship gates and
        # needs numpy (the scan kernels) only when it verifies a file.
        from .scan import ScanContext

        ctx = ScanContext.default(progress)
    try:
        files = [verify_file(p, ctx) for p in found.files]
    finally:
        if own:
            ctx.close()
    return Report(files=found.problems + files, notes=found.notes)


def require_finite(paths: PathLike | Sequence[PathLike]) -> Report:
    """Verify and raise unless every value is finite and every file was fully read.

    Args:
        paths: As for :func:`verify`.

    Returns:
        The (passing) report.

    Raises:
        NonFiniteWeightsError: A NaN or infinity was found (names the tensors).
        UnverifiedWeightsError: Some file is unsupported, unreadable, truncated or
            inconsistent, or no weights file was found.
    """
    report = verify(paths)
    if report.exit_code == 1:
        raise NonFiniteWeightsError(report)
    if report.exit_code != 0:
        raise UnverifiedWeightsError(report)
    return report
