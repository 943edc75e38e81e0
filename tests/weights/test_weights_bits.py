"""Bit-pattern rules against ml_dtypes, and the chunked scanner."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

from rogue_watchdog.weights import dtypes
from rogue_watchdog.weights.finite import any_nonfinite, count_nonfinite
from rogue_watchdog.weights.scan import Field, MappedFile, ScanContext, scan_mapped, scan_stream

EIGHT_AND_SIXTEEN = [
    (dtypes.BF16, ml_dtypes.bfloat16, np.uint16),
    (dtypes.F16, np.float16, np.uint16),
    (dtypes.E5M2, ml_dtypes.float8_e5m2, np.uint8),
    (dtypes.E4M3FN, ml_dtypes.float8_e4m3fn, np.uint8),
    (dtypes.E4M3FNUZ, ml_dtypes.float8_e4m3fnuz, np.uint8),
    (dtypes.E5M2FNUZ, ml_dtypes.float8_e5m2fnuz, np.uint8),
    (dtypes.E8M0, ml_dtypes.float8_e8m0fnu, np.uint8),
]


@pytest.mark.parametrize(("code", "ref", "utype"), EIGHT_AND_SIXTEEN, ids=lambda x: str(x)[:20])
def test_every_bit_pattern_matches_ml_dtypes(
    code: dtypes.FloatCode, ref: type, utype: type
) -> None:
    bits = np.arange(2**code.bits, dtype=utype)
    with np.errstate(invalid="ignore"):
        values = bits.view(ref).astype(np.float64)
    ref_nan, ref_pos, ref_neg = np.isnan(values), np.isposinf(values), np.isneginf(values)

    counts = count_nonfinite(code, bits)
    assert (counts.nan, counts.posinf, counts.neginf) == (
        int(ref_nan.sum()),
        int(ref_pos.sum()),
        int(ref_neg.sum()),
    )
    ref_bad = ref_nan | ref_pos | ref_neg
    assert counts.first_bad == int(np.argmax(ref_bad))
    # per pattern: the scalar rule, the exact counter and the fast test all agree
    fast = np.array([any_nonfinite(code, bits[i : i + 1]) for i in range(bits.size)])
    np.testing.assert_array_equal(fast, ref_bad)
    expected = np.where(
        ref_nan, "nan", np.where(ref_pos, "+inf", np.where(ref_neg, "-inf", "finite"))
    )
    got = np.array([code.classify(int(b)) for b in bits])
    np.testing.assert_array_equal(got, expected)


def test_fp4_and_fp6_have_no_nonfinite_encodings() -> None:
    for ref in (ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn):
        vals = np.arange(256, dtype=np.uint8).view(ref).astype(np.float64)
        assert np.isfinite(vals).all()
    for name in ("F4", "F6_E2M3", "F6_E3M2"):
        assert dtypes.SAFETENSORS_DTYPES[name].code is None


def test_documented_edge_patterns() -> None:
    assert dtypes.BF16.classify(0x7F80) == "+inf" and dtypes.BF16.classify(0xFF80) == "-inf"
    assert dtypes.BF16.classify(0x7F7F) == "finite" and dtypes.BF16.classify(0xFFC1) == "nan"
    assert dtypes.F16.classify(0x7BFF) == "finite"  # 65504
    assert dtypes.F16.classify(0xFBFF) == "finite"  # -65504
    assert dtypes.E4M3FN.classify(0x7E) == "finite"  # 448
    assert dtypes.E4M3FN.classify(0x7F) == "nan" and dtypes.E4M3FN.classify(0xFF) == "nan"
    assert dtypes.E4M3FNUZ.classify(0x80) == "nan" and dtypes.E4M3FNUZ.classify(0x7F) == "finite"
    assert dtypes.E5M2.classify(0x7C) == "+inf" and dtypes.E5M2.classify(0xFC) == "-inf"
    assert dtypes.E8M0.classify(0xFF) == "nan" and dtypes.E8M0.classify(0xFE) == "finite"


@pytest.mark.parametrize(
    ("code", "ftype", "utype"),
    [(dtypes.F32, np.float32, np.uint32), (dtypes.F64, np.float64, np.uint64)],
)
def test_fp32_fp64_special_values(code: dtypes.FloatCode, ftype: type, utype: type) -> None:
    info = np.finfo(ftype)
    finite = np.array(
        [0.0, -0.0, info.max, -info.max, info.tiny, info.smallest_subnormal, 1.0], dtype=ftype
    )
    assert count_nonfinite(code, finite.view(utype)).bad == 0
    assert not any_nonfinite(code, finite.view(utype))
    nbits = code.bits
    mant = 23 if nbits == 32 else 52
    exp_ones = ((1 << (nbits - 1)) - 1) & ~((1 << mant) - 1)
    sign = 1 << (nbits - 1)
    quiet = 1 << (mant - 1)
    patterns = np.array(
        [exp_ones, exp_ones | sign, exp_ones | 1, exp_ones | sign | quiet, exp_ones | quiet],
        dtype=utype,
    )  # +inf, -inf, signalling NaN, negative NaN, NaN with top mantissa bit
    c = count_nonfinite(code, patterns)
    assert (c.posinf, c.neginf, c.nan, c.first_bad) == (1, 1, 3, 0)
    ref = patterns.view(ftype)
    assert np.isposinf(ref[0]) and np.isneginf(ref[1]) and np.isnan(ref[2:]).all()


def _file_with(tmp_path, data: bytes):  # type: ignore[no-untyped-def]
    p = tmp_path / "raw.bin"
    p.write_bytes(data)
    return p


def test_chunked_parallel_scan_counts_and_first_index(tmp_path) -> None:  # type: ignore[no-untyped-def]
    n = 1_000_003
    arr = np.full(n, 0x3F80, dtype=np.uint16)  # bf16 1.0
    arr[[999_999, 1_000_002]] = 0x7FC0  # NaN in later chunks
    arr[500_000] = 0xFF80  # -inf
    arr[123_457] = 0x7F80  # +inf, the first bad one
    p = _file_with(tmp_path, b"\0" * 3 + arr.tobytes())  # unaligned start
    with ThreadPoolExecutor(2) as pool, MappedFile(p) as mf:
        ctx = ScanContext(executor=pool, chunk_bytes=64 << 10)
        c = scan_mapped(mf, 3, n, 2, [Field(0, dtypes.BF16)], ctx)
    assert (c.nan, c.posinf, c.neginf, c.first_bad) == (2, 1, 1, 123_457)


def test_stream_scan_matches_mapped(tmp_path) -> None:  # type: ignore[no-untyped-def]
    arr = np.zeros(300_001, dtype=np.float32)
    arr[-1] = np.nan
    data = arr.tobytes()
    pos = 0

    def read(k: int) -> bytes:
        nonlocal pos
        piece = data[pos : pos + min(k, 7777)]  # short reads on purpose
        pos += len(piece)
        return piece

    c = scan_stream(read, arr.size, 4, [Field(0, dtypes.F32)], ScanContext(chunk_bytes=10_000))
    assert (c.nan, c.first_bad) == (1, 300_000)
