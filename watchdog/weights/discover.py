"""Finding weights files: format sniffing, model directories and shard indexes.

A model directory is walked recursively (symlinked folders are not followed).
Files with a weights suffix are verified; files with a suffix of a weights
format this gate cannot read (ONNX, HDF5, …) are reported "not verified"; a
``*.index.json`` (``model.safetensors.index.json``, ``pytorch_model.bin.index.json``)
must name only shards that exist, and for safetensors shards only tensors
present in them.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from watchdog.weights.errors import NotVerifiedError
from watchdog.weights.regular import not_regular_message, open_regular, open_zip
from watchdog.weights.report import FileReport

WEIGHT_SUFFIXES = frozenset(
    {".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".npy", ".npz", ".gguf"}
)
UNVERIFIABLE_SUFFIXES = frozenset(
    {
        ".onnx",
        ".h5",
        ".hdf5",
        ".keras",
        ".msgpack",
        ".tflite",
        ".pb",
        ".pkl",
        ".pickle",
        ".joblib",
        ".ggml",
        ".mlmodel",
        ".engine",
        ".plan",
        ".params",
        ".pdparams",
        ".ot",
        ".nemo",
        ".mar",
        ".llamafile",
        ".tensors",
        ".pte",
    }
)
INDEX_SUFFIX = ".index.json"


def sniff(path: Path) -> str:
    """Detect the format of a file from its content (never from its name alone).

    Returns:
        ``"safetensors"``, ``"torch-zip"``, ``"npy"``, ``"npz"``, ``"gguf"``,
        ``"torch-legacy"`` (pre-1.6 pickle stream), ``"zip"`` (other archive) or
        ``"unknown"``.

    Raises:
        NotRegularError: The path is a FIFO, device, socket or directory.
        OSError: The file cannot be read.
    """
    with open_regular(path) as fh:
        head = fh.read(16)
    if head.startswith(b"GGUF"):
        return "gguf"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _sniff_zip(path)
    if len(head) >= 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] > 1:
        return "safetensors"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "torch-legacy"
    return "unknown"


def _sniff_zip(path: Path) -> str:
    try:
        with open_zip(path) as zf:
            names = [n for n in zf.namelist() if not n.endswith("/")]
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return "zip"
    if any(n.endswith("/data.pkl") and n.count("/") == 1 for n in names):
        return "torch-zip"
    if names and all(n.endswith(".npy") for n in names):
        return "npz"
    return "zip"


@dataclass
class Discovery:
    """What a set of paths expands to.

    Attributes:
        files: Weights files to verify, in order, without duplicates.
        problems: Reports for paths that already fail (missing paths, empty
            directories, unverifiable formats, broken indexes).
    """

    files: list[Path] = field(default_factory=list)
    problems: list[FileReport] = field(default_factory=list)


def _stat_problem(p: Path) -> tuple[os.stat_result | None, FileReport | None]:
    """Stat ``p`` following symlinks: ``(stat, None)``, or ``(None, report)`` saying why not.

    A symlink loop (``ELOOP``) or a vanished path is "not verified" naming the path,
    never an exception.
    """
    try:
        return os.stat(p), None
    except FileNotFoundError:
        return None, FileReport(p, "unknown", error="no such file or directory")
    except OSError as exc:
        return None, FileReport(p, "unknown", error=f"cannot stat: {exc.strerror or exc}")


def discover(paths: list[Path]) -> Discovery:
    """Expand files and model directories into weights files and early failures.

    Only regular files (after following symlinks) are kept; a FIFO, device or
    socket is reported "not a regular file" and never opened, so it cannot block.
    """
    out = Discovery()
    seen: set[tuple[int, int]] = set()

    def add(p: Path, st: os.stat_result) -> None:
        key = (st.st_dev, st.st_ino)  # no resolve(): it raises on a symlink loop
        if key not in seen:
            seen.add(key)
            out.files.append(p)

    for p in paths:
        st, problem = _stat_problem(p)
        if st is None:
            assert problem is not None
            out.problems.append(problem)
        elif stat.S_ISDIR(st.st_mode):
            _walk(p, out, add)
        elif not stat.S_ISREG(st.st_mode):
            out.problems.append(FileReport(p, "unknown", error=not_regular_message(st.st_mode)))
        elif p.name.endswith(INDEX_SUFFIX):
            out.problems.extend(check_index(p))
        else:
            add(p, st)
    return out


def _walk(root: Path, out: Discovery, add: Callable[[Path, os.stat_result], None]) -> None:
    found = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            suffix = p.suffix.lower()
            is_index = name.endswith(INDEX_SUFFIX)
            if not is_index and suffix not in WEIGHT_SUFFIXES:
                if suffix in UNVERIFIABLE_SUFFIXES:
                    out.problems.append(
                        FileReport(p, "unknown", error=f"{suffix} weights format not verified")
                    )
                    found += 1
                continue
            found += 0 if is_index else 1
            st, problem = _stat_problem(p)
            if st is None:
                assert problem is not None
                out.problems.append(problem)
            elif not stat.S_ISREG(st.st_mode):
                out.problems.append(FileReport(p, "unknown", error=not_regular_message(st.st_mode)))
            elif is_index:
                out.problems.extend(check_index(p))
            else:
                add(p, st)
    if not found:
        out.problems.append(FileReport(root, "directory", error="no weights files found"))


def check_index(index: Path) -> list[FileReport]:
    """Check a shard index: every shard it names exists (and holds its tensors).

    Returns:
        An empty list when the index is consistent, else one not-verified report.
    """
    try:
        with open_regular(index) as fh:
            doc = json.loads(fh.read().decode("utf-8"))
        weight_map = doc["weight_map"]
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
        ):
            raise ValueError("weight_map must map tensor names to shard file names")
    except (NotVerifiedError, OSError, ValueError, KeyError, TypeError) as exc:
        return [FileReport(index, "weights-index", error=f"unreadable index: {exc}")]
    by_shard: dict[str, set[str]] = {}
    for tensor, shard in weight_map.items():
        by_shard.setdefault(shard, set()).add(tensor)
    errors: list[str] = []
    for shard, tensors in sorted(by_shard.items()):
        sp = index.parent / shard
        if Path(shard).is_absolute() or ".." in Path(shard).parts:
            errors.append(f"shard {shard!r} outside the model directory")
        elif not sp.exists():
            errors.append(f"shard {shard!r} named by the index is missing")
        elif not sp.is_file():
            errors.append(f"shard {shard!r} is not a regular file")
        elif sp.suffix == ".safetensors":
            # Imported here: the reader pulls in numpy, and the suffix constants above are
            # read by every configuration load (ship gates).
            from watchdog.weights import safetensors

            try:
                missing = tensors - safetensors.tensor_names(sp)
            except (NotVerifiedError, OSError):
                continue  # the shard's own verification reports it
            if missing:
                errors.append(
                    f"shard {shard!r} lacks {len(missing)} tensors, e.g. {min(missing)!r}"
                )
    if errors:
        return [FileReport(index, "weights-index", error="; ".join(errors))]
    return []
