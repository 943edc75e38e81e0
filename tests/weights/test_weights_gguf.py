"""GGUF: plain tensors value by value, quantized tensors by block scales."""

from __future__ import annotations

import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from rogue_watchdog.weights import Status, verify

from .builders import f16_bits, gguf_bytes, q2_k_blocks, q8_0_blocks

NAN16, INF16, ONE16 = 0x7E00, 0x7C00, f16_bits(1.0)


def one(path: Path):  # type: ignore[no-untyped-def]
    report = verify(path)
    assert len(report.files) == 1
    return report.files[0]


def write(tmp_path: Path, tensors, **kw) -> Path:  # type: ignore[no-untyped-def]
    p = tmp_path / "m.gguf"
    p.write_bytes(gguf_bytes(tensors, **kw))
    return p


def test_q8_0_with_one_nan_block_scale(tmp_path: Path) -> None:
    scales = [ONE16] * 8
    scales[5] = NAN16
    p = write(
        tmp_path,
        [
            ("tok_embd.weight", 8, (64, 4), q8_0_blocks(scales)),
            ("output_norm.weight", 0, (64,), np.ones(64, np.float32).tobytes()),
        ],
    )
    f = one(p)
    by = {t.name: t for t in f.tensors}
    t = by["tok_embd.weight"]
    assert (t.dtype, t.shape, t.unit) == ("Q8_0", (4, 64), "block-scale")
    assert (t.nan, t.first_bad_index) == (1, 5 * 32)
    assert not by["output_norm.weight"].nonfinite
    assert verify(p).exit_code == 1


def test_q2_k_nan_scale_at_block_end(tmp_path: Path) -> None:
    blocks = [(ONE16, ONE16), (ONE16, ONE16), (ONE16, NAN16)]  # dmin (bytes 82..83) of block 2
    f = one(write(tmp_path, [("blk.0.ffn_down.weight", 10, (768,), q2_k_blocks(blocks))]))
    t = f.tensors[0]
    assert (t.nan, t.first_bad_index) == (1, 2 * 256)
    # the same bytes read with the scale at the block start would look finite:
    raw = q2_k_blocks(blocks)
    assert struct.unpack_from("<H", raw, 2 * 84)[0] == 0


@pytest.mark.parametrize(
    ("type_id", "block", "offsets"),
    [
        (2, 18, [0]),
        (3, 20, [0, 2]),
        (6, 22, [0]),
        (7, 24, [0, 2]),
        (11, 110, [108]),
        (12, 144, [0, 2]),
        (13, 176, [0, 2]),
        (14, 210, [208]),
        (20, 18, [0]),
        (23, 136, [0]),
        (16, 66, [0]),
        (17, 74, [0]),
        (18, 98, [0]),
        (19, 50, [0]),
        (21, 110, [0]),
        (22, 82, [0]),
        (34, 54, [52]),
        (35, 66, [64]),
    ],
)
def test_every_f16_scale_position(
    tmp_path: Path, type_id: int, block: int, offsets: list[int]
) -> None:
    elems = 32 if block in (18, 20, 22, 24) and type_id in (2, 3, 6, 7, 20) else 256
    good = bytearray(block * 2)
    for off in offsets:
        for b in range(2):
            struct.pack_into("<H", good, b * block + off, ONE16)
    f = one(write(tmp_path, [("t", type_id, (elems * 2,), bytes(good))]))
    assert f.status is Status.FINITE, f.error
    for off in offsets:
        bad = bytearray(good)
        struct.pack_into("<H", bad, block + off, 0xFC00)  # -inf in block 1
        f = one(write(tmp_path, [("t", type_id, (elems * 2,), bytes(bad))]))
        t = f.tensors[0]
        assert (t.neginf, t.first_bad_index) == (1, elems), (type_id, off)


def test_q8_k_f32_scale_mxfp4_e8m0_scale_and_iq1_m(tmp_path: Path) -> None:
    q8k = bytearray(292 * 2)
    struct.pack_into("<f", q8k, 292, float("inf"))
    mx = bytes([0x7F] + [0] * 16 + [0xFF] + [0] * 16)  # block 1 scale is e8m0 NaN
    iq1m = bytearray(56 * 2)
    # IQ1_M scale f16 bits come from the top nibble of four u16 scales at bytes 48..55
    for i, nib in enumerate((0x0, 0x0, 0xE, 0x7)):  # NaN 0x7E00, low nibble first
        struct.pack_into("<H", iq1m, 56 + 48 + 2 * i, nib << 12)
    f = one(
        write(
            tmp_path,
            [
                ("a", 15, (512,), bytes(q8k)),
                ("b", 39, (64,), mx),
                ("c", 29, (512,), bytes(iq1m)),
            ],
        )
    )
    by = {t.name: t for t in f.tensors}
    # ggml reads d * q: an infinite d times the block's zero quants is NaN, not +inf.
    assert (by["a"].nan, by["a"].posinf, by["a"].first_bad_index) == (1, 0, 256)
    assert (by["b"].nan, by["b"].first_bad_index) == (1, 32)
    assert (by["c"].nan, by["c"].first_bad_index) == (1, 256)


def test_plain_types_value_by_value(tmp_path: Path) -> None:
    bf = np.ones(40, ml_dtypes.bfloat16)
    bf[39] = -np.inf
    f16 = np.array([65504, -65504, -0.0, 0], np.float16)
    f = one(
        write(
            tmp_path,
            [
                ("bf", 30, (40,), bf.tobytes()),
                ("h", 1, (4,), f16.tobytes()),
                ("i", 26, (2,), np.array([-1, 0x7FC00000], np.int32).tobytes()),
                ("d", 28, (1,), np.array([np.nan]).tobytes()),
            ],
        )
    )
    by = {t.name: t for t in f.tensors}
    assert (by["bf"].neginf, by["bf"].first_bad_index) == (1, 39)
    assert not by["h"].nonfinite and by["i"].checked is False and by["d"].nan == 1


@pytest.mark.parametrize(
    ("kw", "cut", "needle"),
    [
        ({}, 20, "truncated"),
        ({}, -1, "padding, past the end of the file"),
        ({"version": 1}, 0, "version 1"),
        ({"offsets": [8]}, 0, "data at offset 8, but ggml expects 0"),
        ({"offsets": [1 << 40]}, 0, "data at offset 1099511627776, but ggml expects 0"),
    ],
)
def test_malformed_gguf(tmp_path: Path, kw: dict, cut: int, needle: str) -> None:  # type: ignore[type-arg]
    raw = gguf_bytes([("t", 0, (4,), np.ones(4, np.float32).tobytes())], **kw)
    if cut:
        raw = raw[:cut]
    p = tmp_path / "bad.gguf"
    p.write_bytes(raw)
    f = one(p)
    assert f.status is Status.NOT_VERIFIED and needle in (f.error or ""), f.error


def test_overlap_and_unknown_type(tmp_path: Path) -> None:
    raw32 = np.ones(8, np.float32).tobytes()
    f = one(write(tmp_path, [("a", 0, (8,), raw32), ("b", 0, (8,), raw32)], offsets=[0, 0]))
    assert f.error == (
        "tensor 'b': data at offset 0, but ggml expects 32 (each tensor right after the"
        " previous one, padded to the alignment)"
    )
    f = one(write(tmp_path, [("a", 31, (8,), raw32)]))  # removed Q4_0_4_4
    assert f.error == "tensor 'a': ggml type 31 (Q4_0_4_4) not verified"
