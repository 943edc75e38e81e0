"""Finding weights files: format sniffing, model directories and shard indexes.

A model directory is walked recursively, through symlinked folders (a folder
reached twice, e.g. by a symlink loop, is walked once and the skip is noted); a
folder that cannot be listed is "not verified", never skipped.
Files with a weights suffix are verified; files with a suffix of a weights
format this gate cannot read (ONNX, HDF5, …) are reported "not verified"; a
``*.index.json`` (``model.safetensors.index.json``, ``pytorch_model.bin.index.json``)
must name only shards that exist, and for safetensors shards only tensors
present in them; every shard it names is verified wherever it resolves.
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

from ..model import INDEX_SUFFIX, UNVERIFIABLE_SUFFIXES, WEIGHT_SUFFIXES
from .errors import NotVerifiedError
from .regular import not_regular_message, open_regular, open_zip
from .report import FileReport


def sniff(path: Path) -> str:
    """Detect the format of a file from its content (never from its name alone).

    Returns:
        ``"safetensors"``, ``"torch-zip"``, ``"npy"``, ``"npz"``, ``"gguf"``,
        ``"torch-legacy"`` (pre-1.6 pickle stream), ``"zip"`` (other archive),
        ``"zip-damaged"`` (starts like a zip but its central directory cannot be
        read: truncated or damaged) or ``"unknown"``.

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
        # A zip's directory is at its end, so a cut-off archive starts right but
        # cannot be opened: say so instead of "not a checkpoint".
        return "zip-damaged"
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
        problems: Reports for paths that already fail (missing paths, unreadable or
            empty directories, unverifiable formats, broken indexes).
        notes: What the walk did not read twice or found outside a model directory,
            and why (e.g. a symlinked folder already walked, a shard outside the tree).
    """

    files: list[Path] = field(default_factory=list)
    problems: list[FileReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


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
        return None, FileReport(p, "unknown", error=f"cannot stat: {_reason(exc)}")


def _reason(exc: OSError) -> str:
    """``strerror`` ("Permission denied"), or the exception text."""
    return exc.strerror or str(exc)


def discover(paths: list[Path]) -> Discovery:
    """Expand files and model directories into weights files and early failures.

    Only regular files (after following symlinks) are kept; a FIFO, device or
    socket is reported "not a regular file" and never opened, so it cannot block.
    Symlinked folders are walked (a loader reaches them too); one that leads back to
    a folder already walked is skipped and said so in ``notes``. Every shard a
    ``*.index.json`` names is verified wherever it resolves.
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
            _walk(p, st, out, add)
        elif not stat.S_ISREG(st.st_mode):
            out.problems.append(FileReport(p, "unknown", error=not_regular_message(st.st_mode)))
        elif p.name.endswith(INDEX_SUFFIX):
            _index(p, p.parent, out, add)
        else:
            add(p, st)
    return out


def _walk(
    root: Path,
    root_st: os.stat_result,
    out: Discovery,
    add: Callable[[Path, os.stat_result], None],
) -> None:
    found = 0
    unreadable = False
    walked: dict[tuple[int, int], str] = {(root_st.st_dev, root_st.st_ino): str(root)}

    def onerror(exc: OSError) -> None:
        # os.walk calls this for a folder it cannot list; without it the folder
        # and everything below would be skipped without a word.
        nonlocal unreadable
        unreadable = True
        where = Path(exc.filename) if exc.filename else root
        out.problems.append(
            FileReport(where, "directory", error=f"cannot read directory: {_reason(exc)}")
        )

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=True):
        keep: list[str] = []
        for d in sorted(dirnames):
            sub = os.path.join(dirpath, d)
            try:
                dst = os.stat(sub)
            except OSError as exc:
                unreadable = True
                out.problems.append(
                    FileReport(Path(sub), "directory", error=f"cannot stat: {_reason(exc)}")
                )
                continue
            key = (dst.st_dev, dst.st_ino)
            if key in walked:  # a symlink back to a folder already walked (or a loop)
                out.notes.append(
                    f"skipped {sub}: symlinked folder leads to {walked[key]}, walked already"
                )
                continue
            walked[key] = sub
            keep.append(d)
        dirnames[:] = keep
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
                else:  # never skipped without a word: a loader may still read it
                    out.notes.append(
                        f"skipped {p}: {suffix or 'no suffix'} is not a weights file suffix"
                    )
                continue
            found += 0 if is_index else 1
            st, problem = _stat_problem(p)
            if st is None:
                assert problem is not None
                out.problems.append(problem)
            elif not stat.S_ISREG(st.st_mode):
                out.problems.append(FileReport(p, "unknown", error=not_regular_message(st.st_mode)))
            elif is_index:
                found += _index(p, root, out, add)
            else:
                add(p, st)
    if not found and not unreadable:
        out.problems.append(FileReport(root, "directory", error="no weights files found"))


def _index(
    index: Path, root: Path, out: Discovery, add: Callable[[Path, os.stat_result], None]
) -> int:
    """Check an index and queue every shard it names; returns the number of shards queued."""
    problems, shards = check_index(index)
    out.problems.extend(problems)
    real_root = os.path.realpath(root)
    for shard in shards:
        st, _problem = _stat_problem(shard)
        if st is None:  # check_index reported it already
            continue
        real = os.path.realpath(shard)
        if os.path.commonpath([real, real_root]) != real_root:
            out.notes.append(
                f"{shard} named by {index} resolves to {real}, outside {root}: verified there"
            )
        add(shard, st)
    return len(shards)


def _read_weight_map(index: Path) -> dict[str, str]:
    """``weight_map`` of a shard index (tensor name → shard file name).

    Raises:
        NotVerifiedError, OSError, ValueError, KeyError, TypeError: Unreadable or
            malformed index.
    """
    with open_regular(index) as fh:
        doc = json.loads(fh.read().decode("utf-8"))
    weight_map = doc["weight_map"]
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise ValueError("weight_map must map tensor names to shard file names")
    return weight_map


def index_shards(index: Path) -> list[Path]:
    """Paths of the shards an index names (``index.parent / name``), without checking them.

    Returns:
        One path per distinct shard name, sorted; empty when the index is unreadable
        (its own check reports that).
    """
    try:
        weight_map = _read_weight_map(index)
    except (NotVerifiedError, OSError, ValueError, KeyError, TypeError):
        return []
    return [index.parent / shard for shard in sorted(set(weight_map.values()))]


def check_index(index: Path) -> tuple[list[FileReport], list[Path]]:
    """Check a shard index: every shard it names exists (and holds its tensors).

    Returns:
        ``(problems, shards)``: one not-verified report when the index is unreadable
        or inconsistent (else none), and every shard path it names that exists as a
        regular file, wherever it resolves (through symlinked folders, ``..`` or an
        absolute name), so that the caller verifies each one.
    """
    try:
        weight_map = _read_weight_map(index)
    except (NotVerifiedError, OSError, ValueError, KeyError, TypeError) as exc:
        return [FileReport(index, "weights-index", error=f"unreadable index: {exc}")], []
    by_shard: dict[str, set[str]] = {}
    for tensor, shard in weight_map.items():
        by_shard.setdefault(shard, set()).add(tensor)
    errors: list[str] = []
    shards: list[Path] = []
    for shard, tensors in sorted(by_shard.items()):
        sp = index.parent / shard
        try:
            st = os.stat(sp)
        except FileNotFoundError:
            errors.append(f"shard {shard!r} named by the index is missing")
            continue
        except OSError as exc:
            errors.append(f"shard {shard!r} cannot be read: {_reason(exc)}")
            continue
        if not stat.S_ISREG(st.st_mode):
            errors.append(f"shard {shard!r} is not a regular file")
            continue
        shards.append(sp)
        if sp.suffix == ".safetensors":
            # Imported here: the reader pulls in numpy, and the suffix constants above are
            # read by every configuration load (ship gates).
            from . import safetensors

            try:
                missing = tensors - safetensors.tensor_names(sp)
            except (NotVerifiedError, OSError):
                continue  # the shard's own verification reports it
            if missing:
                errors.append(
                    f"shard {shard!r} lacks {len(missing)} tensors, e.g. {min(missing)!r}"
                )
    problems = [FileReport(index, "weights-index", error="; ".join(errors))] if errors else []
    return problems, shards
