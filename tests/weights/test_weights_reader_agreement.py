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

from rogue_watchdog.weights.api import verify_file
from rogue_watchdog.weights.report import Report
from rogue_watchdog.weights.scan import ScanContext
from tests.conftest import run_cli

from .builders import (
    Global,
    PersId,
    PickleWriter,
    Reduce,
    ordered_dict,
    tensor,
    write_torch_zip,
)

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


def test_safetensors_suffix_with_zip_content_is_refused(tmp_path: Path) -> None:
    """``safetensors`` reads ``PK\\x03\\x04\\0\\0\\0\\0`` as a 67,324,752-byte header length:
    a NaN tensor behind the padded header, a finite .npz in a U8 tensor after it."""
    zb = io.BytesIO()
    with zipfile.ZipFile(zb, "w", zipfile.ZIP_STORED) as z:
        z.writestr("a.npy", npy(np.zeros(4, np.float32)))
    zbytes = zb.getvalue()
    header = {
        "weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "zz": {"dtype": "U8", "shape": [len(zbytes)], "data_offsets": [16, 16 + len(zbytes)]},
    }
    (n,) = struct.unpack("<Q", b"PK\x03\x04\0\0\0\0")
    h = json.dumps(header).encode()
    p = tmp_path / "model.safetensors"
    with p.open("wb") as f:
        f.write(struct.pack("<Q", n) + h + b" " * (n - len(h)))
        f.write(np.full(4, np.nan, np.float32).tobytes() + zbytes)
    assert verify_cli(p) == (
        2,
        f"NOT VERIFIED {p}: content is npz but the suffix .safetensors makes loaders read it"
        " as safetensors: not verified\n",
    )


def test_torch_suffix_with_npy_content_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "model.pt"
    p.write_bytes(npy(np.zeros(2, np.float32)))
    assert verify_cli(p) == (
        2,
        f"NOT VERIFIED {p}: content is npy but the suffix .pt makes loaders read it as"
        " torch-zip: not verified\n",
    )


def _pickle(build: list[object]) -> bytes:
    """A protocol-4 pickle: the parts are objects for the writer or raw opcode bytes."""
    w = PickleWriter(stack_global=True)
    for part in build:
        if isinstance(part, bytes):
            w.out += part
        else:
            w.emit(part)
    return w.finish()


GOOD = tensor("FloatStorage", "0", 4, (4,))
BAD = tensor("FloatStorage", "1", 4, (4,))
STORAGES = {"0": np.zeros(4, np.float32).tobytes(), "1": np.full(4, np.nan, np.float32).tobytes()}


def _write(path: Path, extra: list[object]) -> Path:
    # {"w": GOOD, "extra": <extra>}
    data = _pickle([b"}(", "w", GOOD, "extra", *extra, b"u"])
    return write_torch_zip(path, None, STORAGES, pickle_data=data)


def test_torch_tensor_used_as_a_dict_key_is_checked(tmp_path: Path) -> None:
    p = _write(tmp_path / "key.pt", [b"}(", BAD, 1, b"u"])
    rc, out = verify_cli(p)
    assert rc == 1
    assert out.splitlines()[2] == "  extra.<key 0>\tfloat32\t4\t4\t0\t0\t0\telement"


def test_torch_bare_storage_is_checked_whole(tmp_path: Path) -> None:
    storage = PersId(("storage", Global("torch", "FloatStorage"), "1", "cpu", 4))
    p = _write(tmp_path / "storage.pt", [storage])
    rc, out = verify_cli(p)
    assert rc == 1
    assert out.splitlines()[2] == "  extra\tfloat32\t4\t4\t0\t0\t0\telement"


def test_torch_tensors_in_sets_are_checked(tmp_path: Path) -> None:
    for name, opcodes in (
        ("set", [b"\x8f(", BAD, b"\x90"]),  # EMPTY_SET, MARK, item, ADDITEMS
        # What torch.save writes (protocol 2): __builtin__.set([...]).
        ("set2", [Reduce(Global("__builtin__", "set"), ([BAD],))]),
        ("fset", [b"(", BAD, b"\x91"]),  # MARK, item, FROZENSET
    ):
        p = _write(tmp_path / f"{name}.pt", opcodes)
        rc, out = verify_cli(p)
        assert rc == 1, out
        assert out.splitlines()[2] == "  extra.<item 0>\tfloat32\t4\t4\t0\t0\t0\telement"


def test_torch_storage_no_tensor_reaches_is_checked(tmp_path: Path) -> None:
    """A tensor rebuilt and dropped (POP) still names a storage: it is checked too."""
    p = _write(tmp_path / "dropped.pt", [BAD, b"0", 1])
    rc, out = verify_cli(p)
    assert rc == 1
    assert out.splitlines()[2] == (
        "  <tensor 1 not reachable from the root>\tfloat32\t4\t4\t0\t0\t0\telement"
    )


def test_torch_state_on_a_tensor_is_refused(tmp_path: Path) -> None:
    p = _write(tmp_path / "build.pt", [GOOD, {"storage": 1}, b"b"])  # BUILD
    assert verify_cli(p) == (
        2,
        f"NOT VERIFIED {p}: pickle sets state on a tensor\n",
    )


def test_npz_member_named_like_a_folder_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "w.npz"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_STORED) as z:
        z.writestr("a.npy", npy(np.zeros(4, np.float32)))
        z.writestr("b.npy/", npy(np.full(4, np.nan, np.float32)))
    assert verify_cli(p) == (
        2,
        f"NOT VERIFIED {p}: member 'b.npy/' is named like a folder, yet np.load reads it as"
        " an array: not verified\n",
    )


def test_rewrite_during_verification_restoring_mtime_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "model.safetensors"
    n = 1 << 16
    hdr = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    p.write_bytes(struct.pack("<Q", len(hdr)) + hdr + bytes(4 * n))
    st = os.stat(p)
    wrote: list[int] = []

    def rewrite(_n_bytes: int) -> None:
        if not wrote:  # after the first chunk: NaN into bytes already checked
            with p.open("r+b") as f:
                f.seek(8 + len(hdr))
                f.write(struct.pack("<f", float("nan")))
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
            wrote.append(1)

    report = verify_file(p, ScanContext(progress=rewrite, chunk_bytes=1 << 12))
    assert wrote and os.stat(p).st_mtime_ns == st.st_mtime_ns
    assert report.error == (
        "file changed while it was being verified (inode, size, mtime or ctime differ before"
        " and after)"
    )
    assert Report(files=[report]).exit_code == 2


def test_walk_finds_pth_tar_and_names_what_it_skips(tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    d.mkdir()
    np.save(d / "ok.npy", np.zeros(2, np.float32))
    write_torch_zip(
        d / "model_best.pth.tar",
        ordered_dict({"w": BAD}),
        {"1": STORAGES["1"]},
    )
    (d / "README.txt").write_text("notes\n")
    rc, out = verify_cli(d)
    assert rc == 1
    lines = out.splitlines()
    assert lines[0] == f"{d / 'model_best.pth.tar'}:"
    assert f"NOTE skipped {d / 'README.txt'}: .txt is not a weights file suffix" in lines
    assert f"OK {d / 'ok.npy'}: 1 tensor finite" in lines
