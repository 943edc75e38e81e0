"""The gate reads each file the way the real loaders read it, or refuses it.

A file two readers can read differently (two zip directories, member names that
differ only in case, a polyglot of two formats) could be finite as the gate reads it
and NaN as ``torch.load``, ``np.load`` or ``safetensors`` read it. Each case here is
built from real files (the committed ``torch.save`` fixtures, ``np.save``,
``safetensors``) transformed with :mod:`zipfile` and :mod:`struct`.
"""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
from pathlib import Path

import numpy as np

from tests.conftest import run_cli
from watchdog.weights.api import verify_file
from watchdog.weights.report import Report
from watchdog.weights.scan import ScanContext

from .builders import PersId, PickleWriter, Global, ordered_dict, tensor, write_torch_zip

FIX = Path(__file__).resolve().parent / "fixtures"


def npy(a: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def verify_cli(*paths: Path) -> tuple[int, str]:
    cp = run_cli("verify-weights", "--no-progress", *map(str, paths))
    return cp.returncode, cp.stdout


def rooted(src: Path, dst: Path, root: str = "archive") -> Path:
    """The same checkpoint with its folder renamed, members stored uncompressed."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        old = zin.namelist()[0].split("/", 1)[0]
        for info in zin.infolist():
            zout.writestr(root + info.filename[len(old) :], zin.read(info))
    return dst


def _split(z: bytes) -> tuple[bytes, bytes, int]:
    e = z.rfind(b"PK\x05\x06")
    (k,) = struct.unpack("<H", z[e + 10 : e + 12])
    size, off = struct.unpack("<II", z[e + 12 : e + 20])
    return z[:off], z[off : off + size], k


def _shift_cd(cd: bytes, delta: int) -> bytes:
    out = bytearray(cd)
    i = 0
    while i < len(out):
        n, m, c = struct.unpack("<HHH", out[i + 28 : i + 34])
        (h,) = struct.unpack("<I", out[i + 42 : i + 46])
        out[i + 42 : i + 46] = struct.pack("<I", h + delta)
        i += 46 + n + m + c
    return bytes(out)


def two_directories(finite: bytes, nan: bytes) -> bytes:
    """One file, two archives: zipfile (which adjusts offsets for data in front of an
    archive) reads ``finite``; miniz (``torch.load``, offsets taken literally) ``nan``."""
    la, cda, k = _split(finite)
    lb, cdb, kb = _split(nan)
    assert k == kb and len(cda) == len(cdb)
    cda2 = _shift_cd(cda, len(lb) - len(cdb))
    eocd = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, k, k, len(cdb), len(lb) + len(la), 0)
    return lb + la + cdb + cda2 + eocd


def test_zip_with_two_central_directories_is_refused(tmp_path: Path) -> None:
    a = rooted(FIX / "torch_modern_finite.pt", tmp_path / "a.pt").read_bytes()
    b = rooted(FIX / "torch_modern_nonfinite.pt", tmp_path / "b.pt").read_bytes()
    p = tmp_path / "pytorch_model.bin"
    p.write_bytes(two_directories(a, b))
    with zipfile.ZipFile(p) as zf:  # what zipfile alone sees: the finite copy
        assert zf.read("archive/data/0") == zipfile.ZipFile(tmp_path / "a.pt").read(
            "archive/data/0"
        )
    assert verify_cli(p) == (
        2,
        f"NOT VERIFIED {p}: zip: central directory at 7348+1674 does not end at the"
        " end-of-central-directory record (10696): data in front of the archive or a second"
        " directory, which readers resolve differently\n",
    )


def test_zip_with_data_in_front_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "model.pt"
    p.write_bytes(b"\0" * 64 + (FIX / "torch_modern_finite.pt").read_bytes())
    assert verify_cli(p) == (
        2,
        f"NOT VERIFIED {p}: zip: zip64 end-of-central-directory record is not right before"
        " its locator\n",
    )
    q = tmp_path / "w.npz"
    with zipfile.ZipFile(q, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("a.npy", npy(np.zeros(2, np.float32)))
    q.write_bytes(b"\0" * 64 + q.read_bytes())
    assert verify_cli(q) == (
        2,
        f"NOT VERIFIED {q}: zip: central directory at 171+51 does not end at the"
        " end-of-central-directory record (286): data in front of the archive or a second"
        " directory, which readers resolve differently\n",
    )


def test_member_names_differing_only_in_case_are_refused(tmp_path: Path) -> None:
    src = FIX / "torch_modern_finite.pt"
    p = tmp_path / "case.pt"
    nan = np.full(6, np.nan, np.float32).tobytes()
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(p, "w", zipfile.ZIP_STORED) as zout:
        for n in zin.namelist():
            zout.writestr(n, zin.read(n))
            if n == "torch_modern_finite/data/0":
                zout.writestr("torch_modern_finite/Data/0", nan)
    assert verify_cli(p) == (
        2,
        f"NOT VERIFIED {p}: zip member 'torch_modern_finite/Data/0' appears more than once"
        " (also as 'torch_modern_finite/data/0', ignoring case): readers disagree on which"
        " copy they load\n",
    )


def test_npz_names_differing_in_case_stay_distinct_arrays(tmp_path: Path) -> None:
    p = tmp_path / "w.npz"
    np.savez(p, W=np.zeros(2, np.float32), w=np.ones(2, np.float32))
    assert verify_cli(p) == (0, f"OK {p}: 2 tensors finite\n")
