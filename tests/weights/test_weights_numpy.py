"""NumPy .npy / .npz, written by numpy itself; never unpickled."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rogue_watchdog.weights import Status, verify


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


def _npy(version: tuple[int, int], header: bytes, data: bytes) -> bytes:
    """A .npy with the given version and literal header text, padded as numpy pads."""
    prefix = b"\x93NUMPY" + bytes(version)
    size = 2 if version == (1, 0) else 4
    pad = -(len(prefix) + size + len(header) + 1) % 64
    text = header + b" " * pad + b"\n"
    length = len(text).to_bytes(size, "little")
    return prefix + length + text + data


NAN_F4 = np.array([1.0, np.nan], "<f4").tobytes()


def test_format_3_header_is_read(tmp_path: Path) -> None:
    """Format 3.0 (UTF-8 header) has no public numpy reader; an ASCII one is read."""
    head = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
    (tmp_path / "v3.npy").write_bytes(_npy((3, 0), head, NAN_F4))
    assert np.load(tmp_path / "v3.npy").shape == (2,)  # numpy reads it too
    t = one(tmp_path / "v3.npy").tensors[0]
    assert (t.dtype, t.shape, t.nan, t.first_bad_index) == ("float32", (2,), 1, 1)


def test_format_3_structured_utf8_names_are_refused(tmp_path: Path) -> None:
    a = np.zeros(2, dtype=[("ä", "<f4"), ("\u20ac", "<f4")])
    with pytest.warns(UserWarning, match="format 3.0"):
        np.save(tmp_path / "s.npy", a)
    assert (tmp_path / "s.npy").read_bytes()[6:8] == b"\x03\x00"  # numpy chose 3.0
    f = one(tmp_path / "s.npy")
    assert f.status is Status.NOT_VERIFIED
    assert f.error == (
        "format 3.0 header with non-ASCII text (UTF-8 field names of a structured dtype):"
        " not verified"
    )


@pytest.mark.parametrize(
    ("version", "header", "error"),
    [
        # np.load refuses 1.1 (only 1.0, 2.0 and 3.0 exist): the gate must not pass it.
        ((1, 1), b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
         "unsupported .npy version 1.1"),
        ((1, 0), b"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }",
         "bad shape (-2,)"),
        ((1, 0), b"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }",
         "bad .npy header: fortran_order is not a valid bool: 0"),
        ((2, 0), b"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
         "structured dtype [('a', '<f4')] not verified"),
        ((1, 0), b"{'descr': '<f4', 'shape': (2,), }",
         "bad .npy header: Header does not contain the correct keys: ['descr', 'shape']"),
    ],
)  # fmt: skip
def test_bad_headers_are_refused_with_the_reason(
    tmp_path: Path, version: tuple[int, int], header: bytes, error: str
) -> None:
    (tmp_path / "h.npy").write_bytes(_npy(version, header, NAN_F4))
    f = one(tmp_path / "h.npy")
    assert f.status is Status.NOT_VERIFIED
    assert f.error == error


def test_header_longer_than_the_file_is_truncated(tmp_path: Path) -> None:
    raw = _npy((2, 0), b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"")
    (tmp_path / "t.npy").write_bytes(raw[:8] + (1 << 30).to_bytes(4, "little") + raw[12:])
    f = one(tmp_path / "t.npy")
    assert f.status is Status.NOT_VERIFIED
    # Before: "bad .npy header: EOF: reading array header, expected 1073741824 bytes got 58"
    assert f.error == "oversized .npy header (1073741824 bytes, limit 1048576)"
    (tmp_path / "t.npy").write_bytes(raw[:8] + (200).to_bytes(4, "little") + raw[12:])
    f = one(tmp_path / "t.npy")
    assert f.status is Status.NOT_VERIFIED
    assert f.error == f"truncated .npy header (200 bytes announced, {len(raw) - 12} present)"


def test_header_nested_too_deeply_says_so(tmp_path: Path) -> None:
    # Before: "bad .npy header: " and nothing more (the parser's MemoryError is silent).
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (" + b"-" * 500_000 + b"1,), }"
    (tmp_path / "t.npy").write_bytes(_npy((2, 0), header, b""))
    f = one(tmp_path / "t.npy")
    assert f.status is Status.NOT_VERIFIED
    assert f.error == "bad .npy header: nested too deeply to read"
