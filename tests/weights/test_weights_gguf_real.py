"""GGUF files written by llama.cpp's own writer (the ``gguf`` package).

Types the package can quantize are quantized by it from float data holding a NaN;
for the others the writer stores block bytes built here (a scale set to NaN at the
offset ``ggml-common.h`` gives), so every container byte still comes from the writer.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from rogue_watchdog.weights import verify
from rogue_watchdog.weights.gguf import GGML_TYPES

from .builders import gguf_bytes

ROW = 256  # one super-block; eight blocks of 32


def write(
    path: Path,
    tensors: dict[str, tuple[np.ndarray, Q | None]],
    alignment: int = 0,
    note: str = "",
) -> Path:
    """Write with gguf.GGUFWriter; ``(array, raw_dtype)`` per tensor (raw: byte rows)."""
    w = gguf.GGUFWriter(path, "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    if note:
        w.add_string("test.note", note)
    for name, (arr, raw_dtype) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def quantized(qtype: Q, nan_at: tuple[int, int] | None) -> tuple[np.ndarray, Q | None]:
    x = np.random.default_rng(0).standard_normal((2, ROW)).astype(np.float32)
    if nan_at is not None:
        x[nan_at] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NaN in the block max: the point
        q = quants.quantize(x, qtype)
    return q, (qtype if q.dtype == np.uint8 else None)


# (type, NaN count, first bad index) for a NaN at [1, 40]: flat 296, in the second
# 32-block of row 1 (first element 288), or the first super-block of row 1 (256).
# Q4_1 and Q5_1 hold two scales (d and m) per block, and both turn NaN.
WRITER_QUANTIZES = [
    (Q.F32, 1, 296),
    (Q.F16, 1, 296),
    (Q.BF16, 1, 296),
    (Q.Q4_0, 1, 288),
    (Q.Q4_1, 2, 288),
    (Q.Q5_0, 1, 288),
    (Q.Q5_1, 2, 288),
    (Q.Q8_0, 1, 288),
    (Q.TQ1_0, 1, 256),
    (Q.TQ2_0, 1, 256),
]


@pytest.mark.parametrize(("qtype", "nan", "first"), WRITER_QUANTIZES, ids=lambda v: str(v))
def test_writer_quantized_nan_is_refused_and_clean_passes(
    tmp_path: Path, qtype: Q, nan: int, first: int
) -> None:
    clean = write(tmp_path / "clean.gguf", {"w": quantized(qtype, None)})
    assert verify(clean).exit_code == 0
    bad = write(tmp_path / "bad.gguf", {"w": quantized(qtype, (1, 40))})
    report = verify(bad)
    assert report.exit_code == 1
    [t] = report.files[0].tensors
    assert (t.dtype, t.shape, t.nan, t.posinf, t.neginf, t.first_bad_index) == (
        qtype.name,
        (2, ROW),
        nan,
        0,
        0,
        first,
    )


def test_mxfp4_writer_drops_a_nan_so_only_a_nan_scale_can_be_seen(tmp_path: Path) -> None:
    # ggml's MXFP4 quantizer maps a NaN block maximum to a finite e8m0 exponent: the
    # file is finite and nothing in it says a NaN was there.
    q, raw = quantized(Q.MXFP4, (1, 40))
    assert verify(write(tmp_path / "dropped.gguf", {"w": (q, raw)})).exit_code == 0
    q = q.copy()
    q[1, 17] = 0xFF  # e8m0 scale of block 1 of row 1 (17-byte blocks): the e8m0 NaN
    report = verify(write(tmp_path / "nan.gguf", {"w": (q, raw)}))
    assert report.exit_code == 1
    [t] = report.files[0].tensors
    assert (t.nan, t.first_bad_index, t.unit) == (1, 288, "block-scale")


NAN_BITS = {"f16": (0x7E00).to_bytes(2, "little"), "f32": (0x7FC00000).to_bytes(4, "little")}
NAN_BITS["bf16"], NAN_BITS["f8_e8m0"] = (0x7FC0).to_bytes(2, "little"), b"\xff"


# Q8_1 is left out: the gguf package sizes its block 40 bytes (two f32), ggml's
# block_q8_1 is 36 (two f16); it is a dot-product intermediate no model file holds.
@pytest.mark.parametrize(
    "type_id",
    [i for i, g in GGML_TYPES.items() if g.quantized and g.name != "Q8_1"],
    ids=lambda i: GGML_TYPES[i].name,
)
def test_every_quant_type_through_the_writer(tmp_path: Path, type_id: int) -> None:
    g = GGML_TYPES[type_id]
    qtype = Q(type_id)
    blocks = np.zeros((2, g.block_bytes), np.uint8)  # zero scales: finite
    clean = write(tmp_path / "clean.gguf", {"w": (blocks.reshape(1, -1), qtype)})
    assert verify(clean).exit_code == 0
    if g.name == "IQ1_M":  # f16 scale from the top nibbles of the four u16 at 48..55
        blocks[1, 48:56] = np.array([0, 0, 0xE000, 0x7000], "<u2").view(np.uint8)
    elif g.name == "MXFP4":  # the e8m0 scale byte: 0xFF, NaN in the OCP MX spec
        blocks[1, 0] = 0xFF
    else:
        f = g.fields[0]
        pattern = NAN_BITS[f.code.name]
        blocks[1, f.offset_bytes : f.offset_bytes + len(pattern)] = list(pattern)
    report = verify(write(tmp_path / "bad.gguf", {"w": (blocks.reshape(1, -1), qtype)}))
    assert report.exit_code == 1
    [t] = report.files[0].tensors
    assert (t.dtype, t.shape, t.nan, t.first_bad_index) == (
        g.name,
        (1, 2 * g.block_elems),
        1,
        g.block_elems,
    )


@pytest.mark.parametrize(("type_id", "name"), [(40, "NVFP4"), (41, "Q1_0")])
def test_newer_ggml_types_are_not_verified_and_named(
    tmp_path: Path, type_id: int, name: str
) -> None:
    elems, nbytes = gguf.GGML_QUANT_SIZES[Q(type_id)]
    p = write(tmp_path / "new.gguf", {"w": (np.zeros((1, 2 * nbytes), np.uint8), Q(type_id))})
    report = verify(p)
    assert report.exit_code == 2
    assert report.files[0].error == f"tensor 'w': ggml type {type_id} ({name}) not verified"
    assert elems > 1


def test_unknown_ggml_type_id_is_not_verified_and_named(tmp_path: Path) -> None:
    p = tmp_path / "future.gguf"
    p.write_bytes(gguf_bytes([("w", 99, (32,), bytes(64))]))
    report = verify(p)
    assert report.exit_code == 2
    assert report.files[0].error == "tensor 'w': ggml type 99 (unknown to this gate) not verified"


def _table_end(path: Path) -> tuple[int, int]:
    """(end of the tensor-info table, start of data) as llama.cpp's reader sees them."""
    r = gguf.GGUFReader(path)
    f = r.tensors[-1].field
    return f.offset + sum(int(p.nbytes) for p in f.parts), int(r.data_offset)


@pytest.mark.parametrize("alignment", [1, 4, 8, 64, 256])
def test_general_alignment_honoured_with_no_extra_block_on_a_boundary(
    tmp_path: Path, alignment: int
) -> None:
    x = np.arange(64, dtype=np.float32)
    x[37] = np.nan
    for n in range(1, 2 * alignment + 2):  # note lengths until the table ends on a boundary
        p = write(tmp_path / "a.gguf", {"t": (x, None)}, alignment=alignment, note="n" * n)
        end, data = _table_end(p)
        if end % alignment == 0:
            break
    else:
        raise AssertionError("no name length put the table end on a boundary")
    assert data == end  # (a - end % a) % a == 0: no padding at all
    report = verify(p)
    assert report.exit_code == 1
    [t] = report.files[0].tensors
    assert (t.nan, t.first_bad_index) == (1, 37)


def test_alignment_that_is_not_a_power_of_two_is_not_verified(tmp_path: Path) -> None:
    p = tmp_path / "odd.gguf"
    p.write_bytes(gguf_bytes([("t", 0, (4,), bytes(16))], alignment=48))
    report = verify(p)
    assert report.exit_code == 2
    assert report.files[0].error == "bad general.alignment 48: must be a u32 power of two"
