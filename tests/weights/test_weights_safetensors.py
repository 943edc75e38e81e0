"""safetensors: values, dtypes, malformed headers, sharded model directories."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from rogue_watchdog.weights import Status, verify
from rogue_watchdog.weights.api import verify_file
from rogue_watchdog.weights.scan import ScanContext

from .builders import safetensors_bytes, st_array, write_safetensors


def one(path: Path):  # type: ignore[no-untyped-def]
    report = verify(path)
    assert len(report.files) == 1
    return report.files[0]


def u8(*vals: int) -> bytes:
    return bytes(vals)


@pytest.mark.parametrize(
    ("dtype", "raw", "shape"),
    [
        ("F16", np.array([65504, -65504], np.float16).tobytes(), [2]),
        ("F32", np.array([-0.0, 0.0], np.float32).tobytes(), [2]),
        ("BF16", np.array([-0.0, 3.0e38], ml_dtypes.bfloat16).tobytes(), [2]),
        ("F8_E4M3", u8(0x7E, 0xFE, 0x00), [3]),  # ±448
        ("F8_E4M3FNUZ", u8(0x7F, 0xFF, 0x00), [3]),
        ("F8_E5M2FNUZ", u8(0x7F, 0xFF), [2]),
        ("F8_E8M0", u8(0x00, 0xFE), [2]),
        ("F4", u8(0xFF, 0x77, 0x88), [6]),  # every nibble pattern is finite
        ("F6_E2M3", u8(0xFF, 0xFF, 0xFF), [4]),
        ("F32", b"", [0, 7]),  # empty tensor
        ("I32", np.array([-1, 0x7FC00000], np.int32).tobytes(), [2]),  # NaN bits but integer
        ("U8", u8(0xFF), [1]),
        ("BOOL", u8(1, 0), [2]),
        ("C64", np.array([1 + 2j, -0.0 - 1j], np.complex64).tobytes(), [2]),
        ("F64", np.array([np.finfo(np.float64).max], np.float64).tobytes(), [1]),
    ],
)
def test_must_pass(tmp_path: Path, dtype: str, raw: bytes, shape: list[int]) -> None:
    f = one(write_safetensors(tmp_path / "m.safetensors", {"w": (dtype, shape, raw)}))
    assert f.status is Status.FINITE, f.error
    assert f.tensors[0].dtype == dtype and f.tensors[0].shape == tuple(shape)


@pytest.mark.parametrize(
    ("dtype", "raw", "expect"),
    [
        ("F8_E4M3", u8(0x00, 0x7F), (1, 0, 0, 1)),
        ("F8_E4M3", u8(0xFF), (1, 0, 0, 0)),
        ("F8_E4M3FNUZ", u8(0x01, 0x80), (1, 0, 0, 1)),
        ("F8_E5M2FNUZ", u8(0x80), (1, 0, 0, 0)),
        ("F8_E5M2", u8(0x7C, 0xFC, 0x7D), (1, 1, 1, 0)),
        ("F8_E8M0", u8(0x7F, 0xFF), (1, 0, 0, 1)),
        ("F32", np.array([1, -np.inf], np.float32).tobytes(), (0, 0, 1, 1)),
        ("F16", np.array([-np.inf], np.float16).tobytes(), (0, 0, 1, 0)),
        ("C64", np.array([1, complex(1, np.nan)], np.complex64).tobytes(), (1, 0, 0, 1)),
    ],
)
def test_must_fail(tmp_path: Path, dtype: str, raw: bytes, expect: tuple[int, ...]) -> None:
    n = len(raw) // {"C64": 8, "F32": 4, "F16": 2}.get(dtype, 1)
    f = one(write_safetensors(tmp_path / "m.safetensors", {"w": (dtype, [n], raw)}))
    t = f.tensors[0]
    assert f.status is Status.NON_FINITE
    assert (t.nan, t.posinf, t.neginf, t.first_bad_index) == expect


def test_single_nan_in_last_element_of_large_tensor(tmp_path: Path) -> None:
    arr = np.ones((3, 1_000_001), dtype=ml_dtypes.bfloat16)  # ~6 MiB, several chunks
    arr[-1, -1] = np.nan
    p = write_safetensors(tmp_path / "big.safetensors", {"a": st_array(arr, "BF16")})
    f = verify_file(p, ScanContext(chunk_bytes=1 << 20))
    t = f.tensors[0]
    assert (t.nan, t.posinf, t.neginf, t.first_bad_index) == (1, 0, 0, arr.size - 1)
    assert verify(p).exit_code == 1


def test_released_file_with_one_nan_conv_weight_is_named(tmp_path: Path) -> None:
    # Shape of public reports: a released VAE/UNet where exactly one conv kernel holds NaN.
    rng = np.random.default_rng(0)
    tensors = {}
    for name in (
        "decoder.conv_in.weight",
        "decoder.mid.block_1.conv1.weight",
        "decoder.up.2.block.0.conv2.weight",
        "decoder.conv_out.weight",
    ):
        tensors[name] = rng.standard_normal((8, 4, 3, 3)).astype(np.float16)
    tensors["decoder.up.2.block.0.conv2.weight"][5, 1, 2, 0] = np.nan
    p = write_safetensors(
        tmp_path / "vae.safetensors", {k: st_array(v, "F16") for k, v in tensors.items()}
    )
    report = verify(p)
    f = report.files[0]
    assert [t.name for t in f.bad_tensors] == ["decoder.up.2.block.0.conv2.weight"]
    assert f.bad_tensors[0].first_bad_index == np.ravel_multi_index((5, 1, 2, 0), (8, 4, 3, 3))
    assert f.summary() == f"REFUSED {p}: 1 of 4 tensors non-finite"
    assert "decoder.up.2.block.0.conv2.weight" in report.render_text()


def test_all_nan_model_reports_n_of_n(tmp_path: Path) -> None:
    nan = np.full((4, 4), np.nan, ml_dtypes.bfloat16)
    p = write_safetensors(
        tmp_path / "model.safetensors", {f"t{i}": st_array(nan, "BF16") for i in range(224)}
    )
    f = one(p)
    assert f.summary() == f"REFUSED {p}: 224 of 224 tensors non-finite"
    assert f.totals()["nan"] == 224 * 16


GOOD = {"a": ("F32", [2], np.ones(2, np.float32).tobytes()), "b": ("F32", [1], b"\0" * 4)}


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda b: b[:-1], "outside the 11-byte buffer"),  # truncated data
        (lambda b: b[:5], "truncated"),  # truncated length prefix
        (lambda b: struct.pack("<Q", 10**6) + b[8:], "larger than the file"),
        (lambda b: struct.pack("<Q", 10**12) + b[8:], "exceeds"),
        (lambda b: b + b"\0", "incomplete"),  # trailing bytes
        (lambda b: b[:8] + b"[" + b[9:], "JSON"),
    ],
)
def test_malformed_never_pass(tmp_path: Path, mutate, needle: str) -> None:  # type: ignore[no-untyped-def]
    raw = mutate(safetensors_bytes(GOOD))
    p = tmp_path / "bad.safetensors"
    p.write_bytes(raw)
    f = one(p)
    assert f.status is Status.NOT_VERIFIED
    assert needle in (f.error or "")
    assert verify(p).exit_code == 2


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, "overlaps"),
        ({"b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 1 << 40]}}, "outside"),
        ({"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 12]}}, "needs 8"),
        ({"b": {"dtype": "F32", "shape": [-1], "data_offsets": [8, 12]}}, "bad shape"),
        ({"b": {"dtype": "Q4", "shape": [1], "data_offsets": [8, 12]}}, "unknown dtype"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, "leaves a hole"),
        ({"b": {"dtype": "F4", "shape": [3], "data_offsets": [8, 10]}}, "needs None"),
    ],
)
def test_inconsistent_offsets(tmp_path: Path, override: dict, needle: str) -> None:  # type: ignore[type-arg]
    p = tmp_path / "bad.safetensors"
    p.write_bytes(safetensors_bytes(GOOD, header_override=override))
    f = one(p)
    assert f.status is Status.NOT_VERIFIED and needle in (f.error or ""), f.error


def test_duplicate_header_key_is_refused(tmp_path: Path) -> None:
    header = (
        b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    )
    p = tmp_path / "dup.safetensors"
    p.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 4)
    assert "duplicate" in (one(p).error or "")


def test_header_only_file_without_tensors_is_not_verified(tmp_path: Path) -> None:
    p = write_safetensors(tmp_path / "empty.safetensors", {}, metadata={"format": "pt"})
    assert one(p).status is Status.NOT_VERIFIED


def _sharded(tmp_path: Path, poison: bool = False) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    a = np.ones(4, np.float32)
    b = np.ones(4, np.float32)
    if poison:
        b[3] = np.inf
    write_safetensors(d / "model-00001-of-00002.safetensors", {"x.weight": st_array(a, "F32")})
    write_safetensors(d / "model-00002-of-00002.safetensors", {"y.weight": st_array(b, "F32")})
    index = {
        "metadata": {"total_size": 32},
        "weight_map": {
            "x.weight": "model-00001-of-00002.safetensors",
            "y.weight": "model-00002-of-00002.safetensors",
        },
    }
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    (d / "config.json").write_text("{}")
    return d


def test_sharded_directory_clean_and_poisoned(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "p").mkdir()
    clean = verify(_sharded(tmp_path / "c"))
    assert clean.exit_code == 0 and len(clean.files) == 2
    bad = verify(_sharded(tmp_path / "p", poison=True))
    assert bad.exit_code == 1
    assert [t.name for f in bad.files for t in f.bad_tensors] == ["y.weight"]


def test_missing_shard_named_by_index(tmp_path: Path) -> None:
    d = _sharded(tmp_path)
    (d / "model-00002-of-00002.safetensors").unlink()
    report = verify(d)
    assert report.exit_code == 2
    errors = [f.error for f in report.files if f.error]
    assert any(
        "model-00002-of-00002.safetensors' named by the index is missing" in e for e in errors
    )


def test_index_naming_tensor_absent_from_shard(tmp_path: Path) -> None:
    d = _sharded(tmp_path)
    idx = d / "model.safetensors.index.json"
    doc = json.loads(idx.read_text())
    doc["weight_map"]["z.weight"] = "model-00001-of-00002.safetensors"
    idx.write_text(json.dumps(doc))
    report = verify(d)
    assert report.exit_code == 2
    assert any("lacks 1 tensors, e.g. 'z.weight'" in (f.error or "") for f in report.files)


def test_empty_directory_and_missing_path_are_not_verified(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("hi")
    assert verify(tmp_path).exit_code == 2
    assert verify(tmp_path / "nope.safetensors").exit_code == 2
