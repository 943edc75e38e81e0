"""Every file the differential fuzzer found during development, as a plain test.

Each test builds the smallest file of one class the fuzzer (bench/gate_fuzz.py,
tests/weights/test_gate_differential.py) found, and asserts the gate's exact answer
beside what the real readers do with the same bytes: the reason the gate must refuse.
Before the fix each of these files passed the gate with exit 0.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from rogue_watchdog.weights import Status, verify

from .builders import _gstr, gguf_bytes
from .differential import judge
from .loaders import (
    Reading,
    _lacks_dtype,
    gguf_py,
    loaders_for,
    safetensors_numpy,
    torch_load,
    torch_load_mmap,
)

F32 = np.ones(8, np.float32).tobytes()


def _write(tmp_path: Path, name: str, raw: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(raw)
    return p


def _gate(path: Path) -> tuple[int, str]:
    report = verify(path)
    f = report.files[0]
    return report.exit_code, (f.error or "")


def mxfp4_block(e: int, nibble: int) -> bytes:
    """One MXFP4 block (ggml-common.h block_mxfp4: u8 E8M0 exponent, 16 bytes of nibbles)."""
    return bytes([e]) + bytes([nibble | nibble << 4]) * 16


# kvalues_mxfp4[7] is 12 (ggml's doubled E2M1 magnitudes); ggml multiplies it by
# 2^(e-128). 12 × 2^(0xFD-128) = 1.5 × 2^128 overflows f32 to inf in ggml's to_float,
# and 0xFE twice as far; 0xFC (0.75 × 2^128) is the largest finite block.
@pytest.mark.parametrize(
    ("e", "exit_code", "inf"),
    [(0xFC, 0, 0), (0xFD, 1, 1), (0xFE, 1, 1)],
    ids=["0xFC-finite", "0xFD-overflow", "0xFE-overflow"],
)
def test_mxfp4_block_that_overflows_in_ggml(
    tmp_path: Path, ggml: Callable[[Path], Reading], e: int, exit_code: int, inf: int
) -> None:
    p = _write(tmp_path, "m.gguf", gguf_bytes([("w", 39, (32,), mxfp4_block(e, 7))]))
    report = verify(p)
    t = report.files[0].tensors[0]
    assert (report.exit_code, t.posinf + t.neginf, t.unit) == (exit_code, inf, "block-scale")
    r = ggml(p)
    assert r.values is not None
    assert np.isinf(r.values["w"]).sum() == 32 * inf  # every element of the block
    assert not judge(p, loaders_for(".gguf", None)).violations


def _kv(key: str, type_id: int, payload: bytes) -> bytes:
    return _gstr(key) + struct.pack("<I", type_id) + payload


# (id, extra kv pairs, count, the gate's exact refusal, which reader refuses the file)
GGUF_KV_CASES = [
    (
        "duplicate-alignment",
        _kv("general.alignment", 4, struct.pack("<I", 32)),
        1,
        "key 'general.alignment' appears more than once: ggml and gguf-py refuse the file",
        ("ggml", "gguf-py"),
    ),
    ("empty-key", _kv("", 4, struct.pack("<I", 1)), 1, "GGUF metadata key is empty", ("ggml",)),
    (
        "array-of-arrays",
        _kv("x", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 1) + struct.pack("<I", 7)),
        1,
        "GGUF metadata key 'x': an array of arrays: ggml refuses it, gguf-py reads it",
        ("ggml",),
    ),
]


@pytest.mark.parametrize(
    ("extra", "n", "error", "refusers"),
    [c[1:] for c in GGUF_KV_CASES],
    ids=[c[0] for c in GGUF_KV_CASES],
)
def test_gguf_metadata_readers_disagree_on(
    tmp_path: Path,
    ggml: Callable[[Path], Reading],
    extra: bytes,
    n: int,
    error: str,
    refusers: tuple[str, ...],
) -> None:
    p = _write(tmp_path, "k.gguf", gguf_bytes([("w", 0, (8,), F32)], extra_kv=extra, n_extra_kv=n))
    code, says = _gate(p)
    assert code == 2 and error in says, says
    readers = {"ggml": ggml(p), "gguf-py": gguf_py(p)}
    assert {k for k, r in readers.items() if not r.accepted} == set(refusers)


def test_gguf_offsets_that_only_gguf_py_follows(
    tmp_path: Path, ggml: Callable[[Path], Reading]
) -> None:
    # A 32-byte hole before the first tensor: gguf-py reads the offset as written,
    # ggml insists on the packed layout and refuses the file.
    p = _write(tmp_path, "h.gguf", gguf_bytes([("w", 0, (8,), F32 + F32)], offsets=[32]))
    assert _gate(p) == (
        2,
        "tensor 'w': data at offset 32, but ggml expects 0 (each tensor"
        " right after the previous one, padded to the alignment)",
    )
    assert gguf_py(p).accepted and not ggml(p).accepted


def test_gguf_last_tensor_without_its_padding(
    tmp_path: Path, ggml: Callable[[Path], Reading]
) -> None:
    raw = gguf_bytes([("w", 0, (4,), F32[:16])])[:-16]  # cut inside the padding
    p = _write(tmp_path, "p.gguf", raw)
    code, says = _gate(p)
    assert code == 2 and says.endswith(f"padding, past the end of the file ({len(raw)})"), says
    assert gguf_py(p).accepted and not ggml(p).accepted


@pytest.mark.parametrize(
    ("name", "error", "refuser"),
    [
        (
            b"n" * 64,
            "tensor name '" + "n" * 64 + "' is 64 bytes: ggml allows fewer than 64",
            "ggml",
        ),
        (b"w\xff", "tensor name 'w\ufffd' is not UTF-8: readers disagree", "gguf-py"),
    ],
    ids=["name-64-bytes", "name-not-utf8"],
)
def test_gguf_tensor_names_readers_disagree_on(
    tmp_path: Path, ggml: Callable[[Path], Reading], name: bytes, error: str, refuser: str
) -> None:
    good = gguf_bytes([("@" * len(name), 0, (8,), F32)])
    # Same length, so every offset and the padding stay right: only the name differs.
    p = _write(tmp_path, "n.gguf", good.replace(b"@" * len(name), name, 1))
    assert _gate(p) == (2, error)
    readers = {"ggml": ggml(p), "gguf-py": gguf_py(p)}
    assert not readers[refuser].accepted
    assert all(r.accepted for k, r in readers.items() if k != refuser)


def test_q8_1_whose_block_size_readers_disagree_on(
    tmp_path: Path, ggml: Callable[[Path], Reading]
) -> None:
    block = struct.pack("<ee", 1.0, 0.0) + bytes(32)  # ggml's block_q8_1: 36 bytes
    p = _write(tmp_path, "q.gguf", gguf_bytes([("w", 9, (32, 2), block * 2)]))
    assert _gate(p) == (
        2,
        "tensor 'w': ggml type 9 (Q8_1, whose block ggml reads as 36 bytes and gguf-py"
        " as 40) not verified",
    )
    # gguf-py sizes the block as 40 bytes and has no dequantizer for it: it reads the
    # tensor with no values to compare (opaque), and so does this test's ggml reader.
    assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1] == (32, 40)
    assert ggml(p).accepted and gguf_py(p).opaque == ("w",)


@pytest.mark.parametrize("gtype", [0, 1, 30], ids=["F32", "F16", "BF16"])
@pytest.mark.parametrize(
    ("dims", "what"),
    [((), "has no dimensions"), ((0,), "holds no values (dims (0,))")],
    ids=["no-dims", "zero-dim"],
)
def test_gguf_tensor_without_values_to_agree_on(
    tmp_path: Path, ggml: Callable[[Path], Reading], gtype: int, dims: tuple[int, ...], what: str
) -> None:
    """Found once clause 3 (readers' rules differ) was checked: a BF16 tensor with
    n_dims 0 passed with exit 0 (ggml reads it as one value, gguf-py's dequantizer fails
    with IndexError), and one with a 0 dimension (ggml reads no values, gguf-py fails
    to reshape). Every type is refused, whichever reader happens to cope."""
    raw = b"" if dims else {0: F32[:4], 1: b"\x00\x3c", 30: b"\x80\x3f"}[gtype]
    p = _write(tmp_path, "z.gguf", gguf_bytes([("w", gtype, dims, raw)]))
    assert _gate(p) == (
        2,
        f"tensor 'w' {what}: ggml reads it, gguf-py cannot convert it; readers disagree",
    )
    assert ggml(p).accepted
    if gtype == 30:
        assert not gguf_py(p).accepted


@pytest.mark.parametrize(
    ("extra", "error", "refuser"),
    [
        (
            struct.pack("<Q", 2) + b"\xff\xfe" + struct.pack("<II", 4, 1),  # key, u32 1
            "GGUF metadata key '\ufffd\ufffd' is not UTF-8: gguf-py refuses it, ggml reads it;"
            " readers disagree",
            "gguf-py",
        ),
        (
            _gstr("x.a") + struct.pack("<IIQ", 9, 13, 0),  # an empty array of type 13
            "GGUF metadata key 'x.a': unknown GGUF metadata array type 13",
            "ggml",
        ),
    ],
    ids=["key-not-utf8", "empty-array-of-type-13"],
)
def test_gguf_metadata_only_one_reader_accepts(
    tmp_path: Path, ggml: Callable[[Path], Reading], extra: bytes, error: str, refuser: str
) -> None:
    """The hostile tester's files once clause 3 was checked: both passed with exit 0."""
    p = _write(tmp_path, "k.gguf", gguf_bytes([("w", 0, (8,), F32)], extra_kv=extra, n_extra_kv=1))
    assert _gate(p) == (2, error)
    readers = {"ggml": ggml(p), "gguf-py": gguf_py(p)}
    assert {k for k, r in readers.items() if not r.accepted} == {refuser}


def _st(tmp_path: Path, header: bytes, data: bytes) -> Path:
    return _write(tmp_path, "s.safetensors", struct.pack("<Q", len(header)) + header + data)


@pytest.mark.parametrize(
    ("header", "error"),
    [
        (
            b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":NaN}}',
            "header holds NaN, which is not JSON: safetensors refuses it",
        ),
        (
            b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1e400}}',
            "header number 1e400 is out of range: safetensors refuses it",
        ),
        (
            b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":'
            + b"[" * 129
            + b"]" * 129
            + b"}}",
            "header nested deeper than 128 levels: safetensors refuses it",
        ),
        (
            b'{"w":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]},'
            b'"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
            "tensor 'w': shape [4294967296, 4294967296, 0] overflows the element count:"
            " safetensors refuses it",
        ),
        (
            b'{"w":{"dtype":"F32","shape":[2,18446744073709551616,0],"data_offsets":[0,0]},'
            b'"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
            "tensor 'w': bad shape [2, 1.8446744073709552e+19, 0]",
        ),
    ],
    ids=["nan-constant", "number-out-of-range", "nested-129", "count-overflows", "dim-over-u64"],
)
def test_safetensors_header_serde_refuses(tmp_path: Path, header: bytes, error: str) -> None:
    """The hostile tester's headers: Python's json read them, serde_json (the safetensors
    library) refuses them, and the gate passed each with exit 0 while no reader loaded
    it (now clause 3 of the differential check: every reader refusing counts too)."""
    p = _st(tmp_path, header, np.arange(2, dtype="<f4").tobytes())
    assert _gate(p) == (2, error)
    outcome = judge(p, loaders_for(".safetensors", None))
    assert outcome.exit_code == 2
    assert not any(r.accepted for r in outcome.readings)


def test_safetensors_key_with_a_lone_surrogate(tmp_path: Path) -> None:
    # Python's json turns "\ud800" into a str that is not Unicode; serde_json refuses.
    header = json.dumps({"w\ud800": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})
    assert "\\ud800" in header  # the escape as a writer emits it
    p = _write(tmp_path, "s.safetensors", struct.pack("<Q", len(header)) + header.encode() + F32)
    code, says = _gate(p)
    assert code == 2 and "unpaired surrogate escape: safetensors refuses it" in says, says
    assert "unexpected end of hex escape" in safetensors_numpy(p).error


def test_safetensors_offset_written_as_minus_zero(tmp_path: Path) -> None:
    # serde_json reads -0 as a float, so safetensors refuses the offset; Python reads int 0.
    header = b'{"w":{"dtype":"F32","shape":[8],"data_offsets":[-0,32]}}'
    p = _write(tmp_path, "z.safetensors", struct.pack("<Q", len(header)) + header + F32)
    code, says = _gate(p)
    assert code == 2 and "data_offsets" in says, says
    assert not safetensors_numpy(p).accepted
    assert verify(p).files[0].status is Status.NOT_VERIFIED


# Files a hostile tester built by hand after the fuzzer's run (kept as they were found,
# tests/weights/fixtures/hostile/). Each passed the gate with exit 0 before.
HOSTILE = Path(__file__).parent / "fixtures" / "hostile"


@pytest.mark.parametrize(
    ("name", "root"), [("deflate_nan_mmap.pt", "plain2"), ("deflated_values_differ.pt", "plain")]
)
def test_torch_storage_stored_deflated(name: str, root: str) -> None:
    # torch.save stores every storage; re-zipped with DEFLATE, torch.load inflates it
    # and torch.load(mmap=True) maps the compressed bytes as values.
    p = HOSTILE / name
    assert _gate(p) == (
        2,
        f"storage member '{root}/data/0' is compressed: torch.load inflates it,"
        " torch.load(mmap=True) maps the compressed bytes; readers disagree",
    )
    plain, mapped = torch_load(p), torch_load_mmap(p)
    assert plain.values is not None and mapped.values is not None
    assert not plain.non_finite()
    assert not np.array_equal(plain.values["w"], mapped.values["w"])
    if name == "deflate_nan_mmap.pt":
        assert mapped.non_finite() == ["w"]


def test_gguf_key_with_a_nul_moves_ggml_alignment(ggml: Callable[[Path], Reading]) -> None:
    # b"general.alignment\0x" = 64: ggml's gguf_find_key compares C strings and takes it
    # as the alignment (data at 256: +inf), gguf-py and the gate kept 32 (finite 0..15).
    p = HOSTILE / "nulkey_align.gguf"
    assert _gate(p) == (
        2,
        "GGUF metadata key 'general.alignment\\x00x' holds a NUL byte: ggml reads it up to"
        " the NUL, gguf-py whole; readers disagree",
    )
    assert ggml(p).non_finite() == ["w"] and not gguf_py(p).non_finite()


@pytest.mark.parametrize(
    ("name", "shown"), [("nulname.gguf", "w\\x00a"), ("nulname3.gguf", "w\\x00")]
)
def test_gguf_tensor_name_with_a_nul(
    ggml: Callable[[Path], Reading], name: str, shown: str
) -> None:
    p = HOSTILE / name
    assert _gate(p) == (
        2,
        f"tensor name '{shown}' holds a NUL byte: ggml cuts it there, gguf-py keeps it;"
        " readers disagree",
    )
    g, py = ggml(p), gguf_py(p)
    assert g.values is not None and py.values is not None
    assert sorted(g.values) != sorted(py.values) or name == "nulname3.gguf"


# The two files gate_fuzz --cases 10000 --seed 8675309 reported as rules-differ-passed
# (kept as found, tests/weights/fixtures/fuzz-8675309/). The gate was right: both are
# valid safetensors with a BF16 tensor; safetensors.numpy "refused" them only because
# nothing in the fuzzing process had imported ml_dtypes yet (numpy knows bfloat16 only
# once it is registered). The harness now reads them with ml_dtypes loaded.
FUZZ_8675309 = Path(__file__).parent / "fixtures" / "fuzz-8675309"


@pytest.mark.parametrize("name", ["bf16-no-mutation", "bf16-extra-field"])
def test_bf16_file_safetensors_numpy_reads_once_ml_dtypes_is_loaded(name: str) -> None:
    p = FUZZ_8675309 / f"{name}.safetensors"
    report = verify(p)
    assert report.exit_code == 0
    assert [t.dtype for t in report.files[0].tensors if t.dtype == "BF16"] == ["BF16"]
    out = judge(p, loaders_for(".safetensors", None))
    assert out.violations == ()
    np_read, torch_read = out.readings
    assert np_read.values is not None and torch_read.values is not None
    assert sorted(np_read.values) == sorted(torch_read.values) == ["w0", "w1", "w2"]
    for k in np_read.values:
        assert np.array_equal(np_read.values[k], torch_read.values[k])


def test_safetensors_numpy_without_ml_dtypes_lacks_a_type_and_says_so() -> None:
    # A fresh interpreter, as a user's program without ml_dtypes: the refusal is numpy's
    # missing type (TypeError), which the harness counts as unsupported, not a rule.
    import subprocess
    import sys

    p = FUZZ_8675309 / "bf16-extra-field.safetensors"
    code = (
        "import sys; from safetensors.numpy import load_file\n"
        "try: load_file(sys.argv[1])\n"
        "except Exception as e: print(type(e).__name__, e)\n"
    )
    cp = subprocess.run(
        [sys.executable, "-c", code, str(p)], capture_output=True, text=True, check=True
    )
    assert cp.stdout.strip() == "TypeError data type 'bfloat16' not understood"
    exc = TypeError("data type 'bfloat16' not understood")
    assert _lacks_dtype(exc)
    assert not _lacks_dtype(TypeError("unsupported operand"))
