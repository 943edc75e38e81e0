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
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from watchdog.weights import safetensors
from watchdog.weights.errors import NotVerifiedError
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
        OSError: The file cannot be read.
    """
    with open(path, "rb") as fh:
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
        with zipfile.ZipFile(path) as zf:
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


def discover(paths: list[Path]) -> Discovery:
    """Expand files and model directories into weights files and early failures."""
    out = Discovery()
    seen: set[Path] = set()

    def add(p: Path) -> None:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            out.files.append(p)

    for p in paths:
        if p.is_dir():
            _walk(p, out, add)
        elif p.is_file():
            if p.name.endswith(INDEX_SUFFIX):
                out.problems.extend(check_index(p))
                continue
            add(p)
        else:
            out.problems.append(FileReport(p, "unknown", error="no such file or directory"))
    return out


def _walk(root: Path, out: Discovery, add: object) -> None:
    found = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            suffix = p.suffix.lower()
            if name.endswith(INDEX_SUFFIX):
                out.problems.extend(check_index(p))
            elif suffix in WEIGHT_SUFFIXES:
                add(p)  # type: ignore[operator]
                found += 1
            elif suffix in UNVERIFIABLE_SUFFIXES:
                out.problems.append(
                    FileReport(p, "unknown", error=f"{suffix} weights format not verified")
                )
                found += 1
    if not found:
        out.problems.append(FileReport(root, "directory", error="no weights files found"))


def check_index(index: Path) -> list[FileReport]:
    """Check a shard index: every shard it names exists (and holds its tensors).

    Returns:
        An empty list when the index is consistent, else one not-verified report.
    """
    try:
        doc = json.loads(index.read_text(encoding="utf-8"))
        weight_map = doc["weight_map"]
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
        ):
            raise ValueError("weight_map must map tensor names to shard file names")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [FileReport(index, "weights-index", error=f"unreadable index: {exc}")]
    by_shard: dict[str, set[str]] = {}
    for tensor, shard in weight_map.items():
        by_shard.setdefault(shard, set()).add(tensor)
    errors: list[str] = []
    for shard, tensors in sorted(by_shard.items()):
        sp = index.parent / shard
        if Path(shard).is_absolute() or ".." in Path(shard).parts:
            errors.append(f"shard {shard!r} outside the model directory")
        elif not sp.is_file():
            errors.append(f"shard {shard!r} named by the index is missing")
        elif sp.suffix == ".safetensors":
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
