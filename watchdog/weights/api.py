"""Python entry points: :func:`verify` and :func:`require_finite`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from watchdog.weights.discover import discover, sniff
from watchdog.weights.errors import (
    NonFiniteWeightsError,
    NotVerifiedError,
    UnverifiedWeightsError,
)
from watchdog.weights.gguf import verify_gguf
from watchdog.weights.numpy_format import verify_npy, verify_npz
from watchdog.weights.report import FileReport, Report
from watchdog.weights.safetensors import verify_safetensors
from watchdog.weights.scan import ProgressFn, ScanContext
from watchdog.weights.torchzip import verify_torchzip

PathLike = str | os.PathLike[str]

_VERIFIERS = {
    "safetensors": verify_safetensors,
    "torch-zip": verify_torchzip,
    "npy": verify_npy,
    "npz": verify_npz,
    "gguf": verify_gguf,
}

#: Verifier to use when content sniffing fails but the suffix names a format, so
#: that a damaged file gets that format's precise error instead of "unsupported".
_BY_SUFFIX = {
    ".safetensors": "safetensors",
    ".pt": "torch-zip",
    ".pth": "torch-zip",
    ".bin": "torch-zip",
    ".ckpt": "torch-zip",
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


def _identity(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def verify_file(path: Path, ctx: ScanContext) -> FileReport:
    """Verify one file, never raising: every failure becomes a not-verified report.

    The file must not change while it is read (size, mtime and inode are compared
    before and after), so a writer racing the check cannot slip bytes past it.
    """
    report = FileReport(path, "unknown")
    try:
        before = _identity(path)
        report.format = sniff(path)
        if report.format == "unknown":
            report.format = _BY_SUFFIX.get(path.suffix.lower(), "unknown")
        verifier = _VERIFIERS.get(report.format)
        if verifier is None:
            report.error = _UNSUPPORTED[report.format]
            return report
        verifier(path, ctx, report)
        if not report.tensors:
            report.error = "file holds no tensors"
        elif _identity(path) != before:
            report.error = "file changed while it was being verified"
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
    context = ScanContext.default(progress) if ctx is None else ctx
    try:
        files = [verify_file(p, context) for p in found.files]
    finally:
        if own:
            context.close()
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
