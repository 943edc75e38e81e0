"""Structure-aware generators for the gate's differential fuzzer.

Each strategy draws a file the way a writer lays it out and then bends one or more of
its structural rules: header fields, key bytes and escapes, duplicates, integer widths,
alignment, padding, offsets, member names, and values at the bit patterns that matter
(NaN, infinities, the largest finite values, scales that overflow once dequantized).
A :class:`Case` carries the bytes, the suffix a user would give the file and the list
of mutations applied, so a disagreement names what produced it.

Values come from a numpy generator seeded by one drawn integer (cheap to draw, and
hypothesis still shrinks the structure around it).
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

F32_SPECIAL = [
    1.0,
    -2.5,
    0.0,
    -0.0,
    3.0e38,
    -3.4028235e38,
    1e-45,
    float("nan"),
    float("inf"),
    float("-inf"),
]


@dataclass(frozen=True)
class Case:
    """One fuzzed file.

    Attributes:
        suffix: The suffix the file is saved under (what a user's loader sees).
        data: The file's bytes.
        mutations: What was bent, in order, e.g. ``("gguf:offsets=swapped",)``.
    """

    suffix: str
    data: bytes
    mutations: tuple[str, ...] = field(default=())

    @property
    def fmt(self) -> str:
        """The format family: ``gguf``, ``safetensors``, ``npy``, ``npz``, ``torch``."""
        return {".pt": "torch", ".npy": "npy", ".npz": "npz"}.get(self.suffix, self.suffix[1:])


class _Bender:
    """Draws, at each structural rule, the writer's own choice or (rarely) a bent one.

    Each rule keeps the writer's choice with probability ``keep`` (hypothesis shrinks
    towards it), so a case usually bends one or two rules and the rest stay valid, and
    a disagreement points at what was bent.
    """

    def __init__(self, draw: st.DrawFn, tag: str, muts: list[str], keep: int = 85) -> None:
        self.draw, self.tag, self.muts, self.keep = draw, tag, muts, keep

    def __call__(self, name: str, options: list[Any]) -> Any:
        if self.draw(st.integers(0, 99)) < self.keep:
            return options[0]
        choice = self.draw(st.sampled_from(options[1:]))
        self.muts.append(f"{self.tag}:{name}={choice}")
        return choice


def _values(rng: np.random.Generator, n: int, special_p: float) -> np.ndarray:
    """float64 values N(0, 1), each replaced with probability ``special_p`` by a special."""
    v = rng.standard_normal(n)
    mask = rng.random(n) < special_p
    v[mask] = rng.choice(F32_SPECIAL, size=int(mask.sum()))
    return v


# ---------------------------------------------------------------- GGUF

#: ggml type id -> (name, block elements, block bytes, scale fields (offset, kind)).
#: Scale kinds: "f16", "f32", "e8m0". Layouts from ggml-common.h.
GGUF_TYPES: dict[int, tuple[str, int, int, tuple[tuple[int, str], ...]]] = {
    0: ("F32", 1, 4, ()),
    1: ("F16", 1, 2, ()),
    30: ("BF16", 1, 2, ()),
    28: ("F64", 1, 8, ()),
    24: ("I8", 1, 1, ()),
    26: ("I32", 1, 4, ()),
    2: ("Q4_0", 32, 18, ((0, "f16"),)),
    3: ("Q4_1", 32, 20, ((0, "f16"), (2, "f16"))),
    6: ("Q5_0", 32, 22, ((0, "f16"),)),
    8: ("Q8_0", 32, 34, ((0, "f16"),)),
    9: ("Q8_1", 32, 36, ((0, "f16"), (2, "f16"))),
    10: ("Q2_K", 256, 84, ((80, "f16"), (82, "f16"))),
    11: ("Q3_K", 256, 110, ((108, "f16"),)),
    12: ("Q4_K", 256, 144, ((0, "f16"), (2, "f16"))),
    14: ("Q6_K", 256, 210, ((208, "f16"),)),
    15: ("Q8_K", 256, 292, ((0, "f32"),)),
    16: ("IQ2_XXS", 256, 66, ((0, "f16"),)),
    19: ("IQ1_S", 256, 50, ((0, "f16"),)),
    20: ("IQ4_NL", 32, 18, ((0, "f16"),)),
    23: ("IQ4_XS", 256, 136, ((0, "f16"),)),
    29: ("IQ1_M", 256, 56, ()),
    34: ("TQ1_0", 256, 54, ((52, "f16"),)),
    35: ("TQ2_0", 256, 66, ((64, "f16"),)),
    39: ("MXFP4", 32, 17, ((0, "e8m0"),)),
}

F16_SCALES = [0x3C00, 0x2E66, 0x7BFF, 0xFBFF, 0x0001, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7C01]
F32_SCALES = [1.0, 0.01, 3.0e38, 3.4028235e38, 2.0e36, 2.7e36, 1.0e30, float("inf"), float("nan")]
E8M0_SCALES = [127, 120, 0, 1, 2, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF]


def _gstr(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _kv(key: bytes, vtype: int, payload: bytes) -> bytes:
    return _gstr(key) + struct.pack("<I", vtype) + payload


def _gguf_tensor_bytes(rng: np.random.Generator, gtype: int, n_el: int, special_p: float) -> bytes:
    name, blk, bsize, scales = GGUF_TYPES[gtype]
    if blk == 1:
        v = _values(rng, n_el, special_p)
        with np.errstate(over="ignore", invalid="ignore"):
            if name == "F32":
                return v.astype("<f4").tobytes()
            if name == "F16":
                return v.astype("<f2").tobytes()
            if name == "BF16":
                return (v.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
            if name == "F64":
                return v.astype("<f8").tobytes()
        return rng.integers(0, 256, n_el * bsize, dtype=np.uint8).tobytes()
    n_blocks = n_el // blk
    raw = bytearray(rng.integers(0, 256, n_blocks * bsize, dtype=np.uint8).tobytes())
    for b in range(n_blocks):
        for off, kind in scales:
            pos = b * bsize + off
            special = rng.random() < special_p
            if kind == "f16":
                bits = int(rng.choice(F16_SCALES)) if special else 0x2E66  # 0.1
                raw[pos : pos + 2] = struct.pack("<H", bits)
            elif kind == "f32":
                raw[pos : pos + 4] = struct.pack(
                    "<f", float(rng.choice(F32_SCALES)) if special else 0.01
                )
            else:
                raw[pos] = int(rng.choice(E8M0_SCALES)) if special else 120
    return bytes(raw)


@st.composite
def gguf_cases(draw: st.DrawFn) -> Case:
    """A GGUF file: metadata, tensor table and data section, with its rules bent."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    muts: list[str] = []
    bend = _Bender(draw, "gguf", muts)
    special_p = draw(st.sampled_from([0.0, 0.0, 0.05, 0.5, 1.0]))
    version = bend("version", [3, 2, 1, 0, 4, 0x03000000])
    # --- metadata
    kvs: list[bytes] = [_kv(b"general.architecture", 8, _gstr(b"llama"))]
    align_kind = bend("alignment", ["u32", "none", "u64", "u16", "i32", "dup", "bad"])
    align_val = draw(st.sampled_from([32, 32, 32, 64, 16, 8, 1, 256]))
    alignment = align_val
    if align_kind == "u32":
        kvs.append(_kv(b"general.alignment", 4, struct.pack("<I", align_val)))
    elif align_kind == "none":
        alignment = 32
    elif align_kind == "u64":
        kvs.append(_kv(b"general.alignment", 10, struct.pack("<Q", align_val)))
    elif align_kind == "u16":
        kvs.append(_kv(b"general.alignment", 2, struct.pack("<H", align_val)))
    elif align_kind == "i32":
        kvs.append(_kv(b"general.alignment", 5, struct.pack("<i", align_val)))
    elif align_kind == "dup":
        other = draw(st.sampled_from([8, 64, 1, 32]))
        first_wins = draw(st.booleans())
        kvs.append(_kv(b"general.alignment", 4, struct.pack("<I", align_val)))
        kvs.append(_kv(b"general.alignment", 4, struct.pack("<I", other)))
        alignment = align_val if first_wins else other
    else:
        alignment = draw(st.sampled_from([0, 3, 48]))
        kvs.append(_kv(b"general.alignment", 4, struct.pack("<I", alignment)))
        alignment = alignment or 32
    extra = bend(
        "kv",
        [
            "plain",
            "array-u8",
            "array-str",
            "nested-array",
            "empty-key",
            "dup-key",
            "bool",
            "bad-type",
            "nul-key",
            "nul-alignment-key",
            "key-not-utf8",
            "empty-array-bad-type",
        ],
    )
    if extra == "array-u8":
        kvs.append(_kv(b"x.u8", 9, struct.pack("<IQ", 0, 3) + b"\x01\x02\x03"))
    elif extra == "array-str":
        kvs.append(_kv(b"x.s", 9, struct.pack("<IQ", 8, 2) + _gstr(b"a") + _gstr(b"bc")))
    elif extra == "nested-array":
        kvs.append(
            _kv(b"x.n", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 0, 2) + b"\x01\x02")
        )
    elif extra == "empty-key":
        kvs.append(_kv(b"", 4, struct.pack("<I", 1)))
    elif extra == "dup-key":
        kvs.append(_kv(b"general.architecture", 8, _gstr(b"gpt2")))
    elif extra == "bool":
        kvs.append(_kv(b"x.b", 7, b"\x02"))
    elif extra == "bad-type":
        kvs.append(_kv(b"x.t", 13, b""))
    elif extra == "nul-key":  # ggml compares keys as C strings (the hostile tester's class)
        kvs.append(_kv(b"x.k\0tail", 4, struct.pack("<I", 1)))
    elif extra == "nul-alignment-key":  # general.alignment to ggml alone
        kvs.append(_kv(b"general.alignment\0x", 4, struct.pack("<I", 64)))
    elif extra == "key-not-utf8":  # gguf-py decodes keys, ggml keeps bytes
        kvs.append(_kv(b"x.\xff\xfe", 4, struct.pack("<I", 1)))
    elif extra == "empty-array-bad-type":  # ggml checks the type whatever the count
        kvs.append(_kv(b"x.e", 9, struct.pack("<IQ", 13, 0)))
    # --- tensors
    types = list(GGUF_TYPES)
    n_t = draw(st.integers(1, 3))
    tensors: list[tuple[bytes, int, tuple[int, ...], bytes]] = []
    for i in range(n_t):
        gtype = draw(st.sampled_from(types))
        _, blk, _bsize, _ = GGUF_TYPES[gtype]
        rows = draw(st.integers(1, 2))
        dims: tuple[int, ...] = (
            (blk * draw(st.integers(1, 2)), rows) if rows > 1 else (blk * draw(st.integers(1, 2)),)
        )
        n_el = int(np.prod(dims))
        tensors.append(
            (f"t{i}".encode(), gtype, dims, _gguf_tensor_bytes(rng, gtype, n_el, special_p))
        )
    name_kind = bend(
        "names",
        [
            "plain",
            "dup",
            "empty",
            "long63",
            "long64",
            "non-utf8",
            "non-utf8-pair",
            "nul",
            "nul-pair",
        ],
    )
    if name_kind == "dup" and n_t > 1:
        tensors[1] = (tensors[0][0], *tensors[1][1:])
    elif name_kind == "empty":
        tensors[0] = (b"", *tensors[0][1:])
    elif name_kind in ("long63", "long64"):
        tensors[0] = (b"w" * (63 if name_kind == "long63" else 64), *tensors[0][1:])
    elif name_kind == "non-utf8":
        tensors[0] = (b"t\xff", *tensors[0][1:])
    elif name_kind == "non-utf8-pair" and n_t > 1:
        tensors[0] = (b"t\xfe", *tensors[0][1:])
        tensors[1] = (b"t\xff", *tensors[1][1:])
    elif name_kind == "nul":  # ggml copies names up to the NUL: 't0\0a' is 't0' to it
        tensors[0] = (tensors[0][0] + b"\0a", *tensors[0][1:])
    elif name_kind == "nul-pair" and n_t > 1:  # two names ggml reads as one
        tensors[1] = (tensors[0][0] + b"\0b", *tensors[1][1:])
    dims_kind = bend("dims", ["exact", "not-block-multiple", "zero", "no-dims", "five-dims", "big"])
    table_dims: list[tuple[int, ...]] = [t[2] for t in tensors]
    if dims_kind == "not-block-multiple":
        table_dims[0] = (table_dims[0][0] + 1, *table_dims[0][1:])
    elif dims_kind == "zero":
        table_dims[0] = (0, *table_dims[0][1:])
    elif dims_kind == "no-dims":
        table_dims[0] = ()
    elif dims_kind == "five-dims":
        table_dims[0] = (*table_dims[0], 1, 1, 1, 1)[:5]
    elif dims_kind == "big":
        table_dims[0] = (table_dims[0][0], 2**62)
    # --- data layout
    layout = bend(
        "offsets", ["padded", "unpadded", "swapped", "hole", "overlap", "unaligned", "shared"]
    )
    data = b""
    offsets: list[int] = []
    order = list(range(n_t))
    if layout == "swapped" and n_t > 1:
        order = order[::-1]
    placed: dict[int, int] = {}
    for i in order:
        raw = tensors[i][3]
        if layout != "unpadded":
            data += b"\0" * (-len(data) % alignment)
        if layout == "hole" and i == order[-1] and n_t > 1:
            data += b"\0" * alignment
        placed[i] = len(data)
        data += raw
    offsets = [placed[i] for i in range(n_t)]
    if layout == "overlap" and n_t > 1:
        offsets[1] = offsets[0]
    elif layout == "unaligned":
        offsets[-1] += 1
    elif layout == "shared" and n_t > 1:
        offsets[1] = offsets[0]
    tail_kind = bend("tail", ["padded", "unpadded", "garbage", "truncated"])
    if tail_kind == "padded":
        data += b"\0" * (-len(data) % alignment)
    elif tail_kind == "garbage":
        data += b"\0" * (-len(data) % alignment) + bytes(rng.integers(0, 256, 40, dtype=np.uint8))
    elif tail_kind == "truncated":
        data = data[: max(0, len(data) - draw(st.integers(1, 8)))]
    counts = bend("counts", ["exact", "tensors+1", "tensors-1", "kv+1", "kv-1"])
    n_tensor_field = n_t + (1 if counts == "tensors+1" else -1 if counts == "tensors-1" else 0)
    n_kv_field = len(kvs) + (1 if counts == "kv+1" else -1 if counts == "kv-1" else 0)
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensor_field, n_kv_field) + b"".join(kvs)
    infos = b""
    for (name, gtype, _dims, _raw), dims, off in zip(tensors, table_dims, offsets, strict=True):
        infos += _gstr(name) + struct.pack("<I", len(dims))
        infos += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", gtype, off)
    out = head + infos
    pad = bend("table-padding", ["exact", "none", "extra"])
    if pad == "exact":
        out += b"\0" * (-len(out) % alignment)
    elif pad == "extra":
        out += b"\0" * ((-len(out) % alignment) + alignment)
    muts.append(f"gguf:types={','.join(GGUF_TYPES[t[1]][0] for t in tensors)}")
    return Case(".gguf", out + data, tuple(muts))


# ---------------------------------------------------------------- safetensors

ST_DTYPES = {
    "F32": "<f4",
    "F16": "<f2",
    "F64": "<f8",
    "BF16": "bf16",
    "I32": "<i4",
    "U8": "<u1",
    "BOOL": "|b1",
    "F8_E4M3": "e4m3",
    "F8_E5M2": "e5m2",
}


def _st_raw(rng: np.random.Generator, dtype: str, n: int, special_p: float) -> bytes:
    v = _values(rng, n, special_p)
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype in ("F32", "F16", "F64"):
            return v.astype(ST_DTYPES[dtype]).tobytes()
        if dtype == "BF16":
            return (v.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
        if dtype in ("F8_E4M3", "F8_E5M2"):
            import ml_dtypes

            t = ml_dtypes.float8_e4m3fn if dtype == "F8_E4M3" else ml_dtypes.float8_e5m2
            return v.astype(t).tobytes()
    if dtype == "BOOL":
        return rng.integers(0, 2, n, dtype=np.uint8).tobytes()
    return rng.integers(0, 256, n * np.dtype(ST_DTYPES[dtype]).itemsize, dtype=np.uint8).tobytes()


def _escape_all(s: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in s)


@st.composite
def safetensors_cases(draw: st.DrawFn) -> Case:
    """A safetensors file: 8-byte length, JSON header, buffer, with its rules bent."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    muts: list[str] = []
    bend = _Bender(draw, "safetensors", muts)
    special_p = draw(st.sampled_from([0.0, 0.0, 0.05, 1.0]))
    n_t = draw(st.integers(1, 3))
    entries: list[tuple[str, str, list[int], bytes]] = []
    for i in range(n_t):
        dtype = draw(st.sampled_from(list(ST_DTYPES)))
        shape = draw(st.sampled_from([[4], [2, 3], [1], [0], [], [3, 1]]))
        n = int(np.prod(shape)) if shape else 1
        entries.append((f"w{i}", dtype, shape, _st_raw(rng, dtype, n, special_p)))
    layout = bend(
        "offsets", ["sorted", "reversed", "hole", "overlap", "short", "trailing", "leading"]
    )
    order = list(range(n_t))
    if layout == "reversed":
        order = order[::-1]
    buf = b""
    offs: dict[int, list[int]] = {}
    for i in order:
        if layout == "hole" and i == order[-1] and n_t > 1:
            buf += b"\0\0\0\0"
        offs[i] = [len(buf), len(buf) + len(entries[i][3])]
        buf += entries[i][3]
    if layout == "leading":
        buf = b"\0" * 4 + buf
        for v in offs.values():
            v[0] += 4
            v[1] += 4
    if layout == "overlap" and n_t > 1:
        offs[1] = list(offs[0])
    elif layout == "short":
        offs[0][1] -= 1
    elif layout == "trailing":
        buf += b"\x00\x00\xc0\x7f"
    # --- header JSON, as text, so its spelling can be bent
    items: list[tuple[str, str]] = []
    meta = bend("metadata", ["none", "strings", "non-string", "nested", "dup-in-meta"])
    if meta == "strings":
        items.append(('"__metadata__"', '{"format":"pt"}'))
    elif meta == "non-string":
        items.append(('"__metadata__"', '{"step":1}'))
    elif meta == "nested":
        items.append(('"__metadata__"', '{"a":{"b":"c"}}'))
    elif meta == "dup-in-meta":
        items.append(('"__metadata__"', '{"a":"1","a":"2"}'))
    num = bend("numbers", ["ints", "floats", "exponent", "negative-zero", "leading-plus"])

    def n2s(x: int) -> str:
        if num == "floats":
            return f"{x}.0"
        if num == "exponent" and x:
            return f"{x}e0"
        if num == "negative-zero" and x == 0:
            return "-0"
        return str(x)

    key_kind = bend(
        "keys", ["plain", "escaped", "dup-escaped", "dup-raw", "nul", "lone-surrogate", "case"]
    )
    dtype_kind = bend("dtype", ["exact", "lowercase", "unknown"])
    shape_kind = bend("shape", ["exact", "negative", "float", "string", "extra-field"])
    for i, (name, dtype, shape, _raw) in enumerate(entries):
        key = json.dumps(name)
        if key_kind == "escaped" and i == 0:
            key = '"' + _escape_all(name) + '"'
        elif key_kind == "nul" and i == 0:
            key = '"w\\u0000"'
        elif key_kind == "lone-surrogate" and i == 0:
            key = '"w\\ud800"'
        dt = (
            dtype.lower()
            if dtype_kind == "lowercase" and i == 0
            else ("F7" if dtype_kind == "unknown" and i == 0 else dtype)
        )
        shp = ",".join(str(s) for s in shape)
        if shape_kind == "negative" and i == 0 and shape:
            shp = ",".join(["-1", *map(str, shape[1:])])
        elif shape_kind == "float" and i == 0 and shape:
            shp = ",".join(f"{s}.0" for s in shape)
        elif shape_kind == "string" and i == 0 and shape:
            shp = ",".join(f'"{s}"' for s in shape)
        body = (
            f'{{"dtype":"{dt}","shape":[{shp}],"data_offsets":[{n2s(offs[i][0])},{n2s(offs[i][1])}]'
        )
        if shape_kind == "extra-field" and i == 0:
            body += ',"extra":1'
        items.append((key, body + "}"))
    if key_kind in ("dup-escaped", "dup-raw", "case"):
        name0 = entries[0][0]
        other = offs[n_t - 1] if n_t > 1 else offs[0]
        k = {
            "dup-escaped": '"' + _escape_all(name0) + '"',
            "dup-raw": json.dumps(name0),
            "case": json.dumps(name0.upper()),
        }[key_kind]
        d0 = entries[n_t - 1][1] if n_t > 1 else entries[0][1]
        s0 = ",".join(map(str, entries[n_t - 1][2] if n_t > 1 else entries[0][2]))
        items.insert(
            draw(st.integers(0, len(items))),
            (k, f'{{"dtype":"{d0}","shape":[{s0}],"data_offsets":[{other[0]},{other[1]}]}}'),
        )
    text = "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    ws = bend(
        "whitespace", ["pad-spaces", "none", "leading-space", "tabs-newlines", "nul-pad", "bom"]
    )
    hb = text.encode("utf-8", "surrogatepass")
    if ws == "pad-spaces":
        hb += b" " * (-len(hb) % 8)
    elif ws == "leading-space":
        hb = b" " + hb
    elif ws == "tabs-newlines":
        hb = hb.replace(b",", b",\n\t")
    elif ws == "nul-pad":
        hb += b"\0" * (8 - len(hb) % 8)
    elif ws == "bom":
        hb = b"\xef\xbb\xbf" + hb
    hlen = bend("header-length", ["exact", "plus-4", "minus-1", "huge"])
    n = len(hb) + (4 if hlen == "plus-4" else -1 if hlen == "minus-1" else 0)
    if hlen == "huge":
        n = 2**63
    return Case(".safetensors", struct.pack("<Q", n) + hb + buf, tuple(muts))


# ---------------------------------------------------------------- numpy

NPY_DESCRS = ["<f4", ">f4", "<f2", ">f2", "<f8", "<c8", "|u1", "<i4", "|b1", "=f4", "f4", "<e"]


def _npy_bytes(
    draw: st.DrawFn, rng: np.random.Generator, muts: list[str], tag: str, keep: int = 85
) -> bytes:
    bend = _Bender(draw, tag, muts, keep)
    descr = draw(st.sampled_from(NPY_DESCRS))
    shape = draw(st.sampled_from([(4,), (2, 3), (), (0,), (3, 1)]))
    fortran = bend("fortran_order", [False, True])
    dt = np.dtype(descr)
    n = int(np.prod(shape)) if shape else 1
    special_p = draw(st.sampled_from([0.0, 0.0, 0.1, 1.0]))
    v = _values(rng, n, special_p)
    with np.errstate(over="ignore", invalid="ignore"):
        if dt.kind in "fc":
            raw = v.astype(dt).tobytes()
        elif dt.kind == "b":
            raw = rng.integers(0, 2, n, dtype=np.uint8).tobytes()
        else:
            raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).tobytes()
    version = bend("version", [(1, 0), (2, 0), (3, 0), (0, 9), (1, 1)])
    hdr_kind = bend(
        "header",
        [
            "exact",
            "extra-key",
            "missing-key",
            "list-shape",
            "float-shape",
            "negative-shape",
            "spaces",
            "no-newline",
            "tuple-descr",
        ],
    )
    shape_s = repr(tuple(shape))
    if hdr_kind == "list-shape":
        shape_s = repr(list(shape))
    elif hdr_kind == "float-shape" and shape:
        shape_s = "(" + ", ".join(f"{s}.0" for s in shape) + ",)"
    elif hdr_kind == "negative-shape" and shape:
        shape_s = "(" + ", ".join(["-1", *map(str, shape[1:])]) + ",)"
    descr_s = repr(descr)
    if hdr_kind == "tuple-descr":
        descr_s = f"[('', {descr!r})]"
    d = f"{{'descr': {descr_s}, 'fortran_order': {fortran}, 'shape': {shape_s}, }}"
    if hdr_kind == "extra-key":
        d = d[:-1] + "'x': 1, }"
    elif hdr_kind == "missing-key":
        d = f"{{'descr': {descr_s}, 'shape': {shape_s}, }}"
    elif hdr_kind == "spaces":
        d = "  " + d
    enc = d.encode("latin1")
    if hdr_kind != "no-newline":
        pre = 10 if version[0] == 1 else 12
        total = pre + len(enc) + 1
        align = bend("alignment", [64, 16, 1])
        enc += b" " * (-total % align) + b"\n"
    length = struct.pack("<H", len(enc)) if version[0] == 1 else struct.pack("<I", len(enc))
    size = bend("data", ["exact", "short", "long"])
    if size == "short":
        raw = raw[:-1]
    elif size == "long":
        raw += b"\x00\x00\xc0\x7f"
    return b"\x93NUMPY" + bytes(version) + length + enc + raw


@st.composite
def npy_cases(draw: st.DrawFn) -> Case:
    """An ``.npy`` file: magic, version, header dict, data, with its rules bent."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    muts: list[str] = []
    return Case(".npy", _npy_bytes(draw, rng, muts, "npy"), tuple(muts))


@st.composite
def npz_cases(draw: st.DrawFn) -> Case:
    """An ``.npz``: a zip of ``.npy`` members, with names, duplicates and compression bent."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    muts: list[str] = []
    n = draw(st.integers(1, 3))
    names = [f"m{i}.npy" for i in range(n)]
    naming = draw(
        st.sampled_from(
            ["plain"] * 5 + ["no-suffix", "suffix-pair", "case-pair", "dup", "folder", "dir-entry"]
        )
    )
    if naming != "plain":
        muts.append(f"npz:names={naming}")
    if naming == "no-suffix":
        names[0] = "m0"
    elif naming == "suffix-pair":
        names.append("m0")
    elif naming == "case-pair":
        names.append("M0.npy")
    elif naming == "dup":
        names.append("m0.npy")
    elif naming == "folder":
        names[0] = "sub/m0.npy"
    elif naming == "dir-entry":
        names[0] = "m0.npy/"
    comp = draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))
    buf = io.BytesIO()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names are the point
        with zipfile.ZipFile(buf, "w", comp) as zf:
            for name in names:
                zf.writestr(name, _npy_bytes(draw, rng, muts, f"npz[{name}]", keep=95))
    data = buf.getvalue()
    front = draw(st.sampled_from(["none"] * 6 + ["prefix"]))
    if front == "prefix":
        muts.append("npz:prefix-bytes")
        data = b"\0" * 16 + data
    return Case(".npz", data, tuple(muts))


# ---------------------------------------------------------------- torch zip


@st.composite
def torch_cases(draw: st.DrawFn) -> Case:
    """A ``torch.save`` checkpoint (the real writer), then its zip members bent."""
    import torch

    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    muts: list[str] = []
    special_p = draw(st.sampled_from([0.0, 0.0, 0.1, 1.0]))
    dtypes = [
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.int64,
        torch.bool,
    ]
    sd: dict[str, Any] = {}
    for i in range(draw(st.integers(1, 3))):
        dt = draw(st.sampled_from(dtypes))
        shape = draw(st.sampled_from([(4,), (2, 3), (), (0,)]))
        n = int(np.prod(shape)) if shape else 1
        v = torch.from_numpy(_values(rng, n, special_p)).reshape(shape)
        t = (
            v.to(dt)
            if dt.is_floating_point
            else torch.from_numpy(rng.integers(-3, 3, n)).reshape(shape).to(dt)
        )
        view = draw(st.sampled_from(["plain"] * 4 + ["transposed", "slice", "shared"]))
        if view == "transposed" and t.dim() == 2:
            t = t.t()
            muts.append("torch:view=transposed")
        elif view == "slice" and t.dim() >= 1 and t.shape[0] > 1:
            t = t[1:]
            muts.append("torch:view=slice")
        elif view == "shared" and sd:
            base = next(iter(sd.values()))
            if base.numel():
                t = base.reshape(-1)[:1]
                muts.append("torch:view=shared")
        sd[f"w{i}"] = t
    buf = io.BytesIO()
    torch.save(sd, buf)
    data = buf.getvalue()
    edit = draw(
        st.sampled_from(
            ["none"] * 6
            + [
                "rename-root",
                "case",
                "dup-member",
                "byteorder-big",
                "drop-byteorder",
                "poison-storage",
                "restore-stored",
                "deflate-storage",
            ]
        )
    )
    if edit == "none":
        return Case(".pt", data, tuple(muts))
    muts.append(f"torch:members={edit}")
    with zipfile.ZipFile(io.BytesIO(data)) as zin:
        members = [(i.filename, zin.read(i)) for i in zin.infolist()]
    root = members[0][0].split("/", 1)[0]
    out: list[tuple[str, bytes]] = []
    storages = [
        i
        for i, (n, _) in enumerate(members)
        if n.startswith(f"{root}/data/") and "/serialization_id" not in n and n.count("/") == 2
    ]
    for name, raw in members:
        if edit == "rename-root":
            name = "other" + name[len(root) :]
        elif edit == "case" and name.startswith(f"{root}/data/"):
            name = f"{root}/Data/" + name[len(f"{root}/data/") :]
        elif edit == "byteorder-big" and name.endswith("/byteorder"):
            raw = b"big"
        elif edit == "drop-byteorder" and name.endswith("/byteorder"):
            continue
        out.append((name, raw))
    if edit == "dup-member" and storages:
        n0, raw0 = members[storages[0]]
        out.append((n0, bytes(b ^ 0xFF for b in raw0)))
    if edit == "poison-storage" and storages:
        n0, raw0 = members[storages[0]]
        poisoned = bytes(b"\xff" * len(raw0))
        out = [(n, poisoned if n == n0 else r) for n, r in out]
    zbuf = io.BytesIO()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(zbuf, "w", zipfile.ZIP_STORED) as zf:
            for name, raw in out:
                deflate = edit == "deflate-storage" and "/data/" in name
                zf.writestr(name, raw, zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)
    return Case(".pt", zbuf.getvalue(), tuple(muts))


STRATEGIES = {
    "gguf": gguf_cases(),
    "safetensors": safetensors_cases(),
    "npy": npy_cases(),
    "npz": npz_cases(),
    "torch": torch_cases(),
}
