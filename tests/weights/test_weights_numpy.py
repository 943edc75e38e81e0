"""NumPy .npy / .npz, written by numpy itself; never unpickled."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from watchdog.weights import Status, verify


def one(path: Path):  # type: ignore[no-untyped-def]
    report = verify(path)
    assert len(report.files) == 1
    return report.files[0]


def test_npy_clean_and_poisoned(tmp_path: Path) -> None:
    a = np.ones((5, 7), np.float32)
    np.save(tmp_path / "a.npy", a)
    assert one(tmp_path / "a.npy").status is Status.FINITE
    a[4, 6] = -np.inf
    np.save(tmp_path / "b.npy", a)
    t = one(tmp_path / "b.npy").tensors[0]
    assert (t.name, t.shape, t.neginf, t.first_bad_index) == ("b", (5, 7), 1, 34)


def test_fortran_order_index_is_c_order(tmp_path: Path) -> None:
    a = np.asfortranarray(np.zeros((3, 4), np.float64))
    a[1, 2] = np.nan
    np.save(tmp_path / "f.npy", a)
    t = one(tmp_path / "f.npy").tensors[0]
    assert (t.nan, t.first_bad_index) == (1, 1 * 4 + 2)


def test_big_endian_and_complex(tmp_path: Path) -> None:
    np.save(tmp_path / "be.npy", np.array([1, np.nan, np.inf], dtype=">f2"))
    t = one(tmp_path / "be.npy").tensors[0]
    assert (t.nan, t.posinf, t.first_bad_index) == (1, 1, 1)
    np.save(tmp_path / "c.npy", np.array([1 + 1j, complex(0, -np.inf)], dtype=np.complex128))
    t = one(tmp_path / "c.npy").tensors[0]
    assert (t.neginf, t.first_bad_index) == (1, 1)


def test_integer_and_empty_arrays_pass(tmp_path: Path) -> None:
    np.save(tmp_path / "i.npy", np.array([0x7FC00000], np.int32))
    np.save(tmp_path / "e.npy", np.zeros((0, 3), np.float32))
    assert one(tmp_path / "i.npy").status is Status.FINITE
    assert one(tmp_path / "e.npy").status is Status.FINITE


def test_object_array_is_refused_and_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {marker}",))

    np.save(tmp_path / "o.npy", np.array([Evil()], dtype=object), allow_pickle=True)
    f = one(tmp_path / "o.npy")
    assert f.status is Status.NOT_VERIFIED and "not verified" in (f.error or "")
    assert not marker.exists()


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_members(tmp_path: Path, compressed: bool) -> None:
    big = np.zeros(400_000, np.float32)  # > 1 MiB, streamed in several reads when deflated
    big[-1] = np.nan
    save = np.savez_compressed if compressed else np.savez
    save(tmp_path / "w.npz", emb=np.ones((2, 2), np.float16), big=big, ids=np.arange(3))
    f = one(tmp_path / "w.npz")
    by = {t.name: t for t in f.tensors}
    assert f.format == "npz" and set(by) == {"emb", "big", "ids"}
    assert (by["big"].nan, by["big"].first_bad_index) == (1, 399_999)
    assert not by["emb"].nonfinite and by["ids"].checked is False


def test_corrupt_compressed_member_is_not_verified(tmp_path: Path) -> None:
    np.savez_compressed(tmp_path / "w.npz", x=np.arange(100_000, dtype=np.float32))
    raw = bytearray((tmp_path / "w.npz").read_bytes())
    with zipfile.ZipFile(tmp_path / "w.npz") as zf:
        info = zf.getinfo("x.npy")
    mid = info.header_offset + 30 + len("x.npy") + info.compress_size // 2
    raw[mid : mid + 16] = b"\xff" * 16
    (tmp_path / "w.npz").write_bytes(bytes(raw))
    assert one(tmp_path / "w.npz").status is not Status.FINITE


def test_truncated_npy(tmp_path: Path) -> None:
    np.save(tmp_path / "t.npy", np.ones(100, np.float32))
    raw = (tmp_path / "t.npy").read_bytes()
    for cut in (5, 60, len(raw) - 1):
        (tmp_path / "t.npy").write_bytes(raw[:cut])
        assert one(tmp_path / "t.npy").status is Status.NOT_VERIFIED
