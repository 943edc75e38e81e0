"""GGUF files (llama.cpp / ggml), value checks and quantization block scales.

Format (ggml docs/gguf.md): magic ``GGUF``, u32 version (2 or 3), u64 tensor
count, u64 metadata count, metadata key/values, tensor infos (name, u32 n_dims,
u64 dims, u32 ggml type, u64 offset relative to the aligned data section), then
the data section at ``general.alignment`` (default 32). Block layouts follow
ggml's ``ggml-common.h``: every quantized block stores one or two f16 (Q8_K:
f32; MXFP4: e8m0) scales, at the start of the block except Q2_K, Q3_K, Q6_K,
TQ1_0 and TQ2_0, which keep them at the end. A non-finite scale makes its whole
block non-finite, so quantized tensors are counted by block scale.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .dtypes import BF16, F16, F32, F64, FloatCode
from .errors import NotVerifiedError
from .finite import UIntArray
from .report import FileReport, TensorReport
from .scan import (
    Field,
    MappedFile,
    PendingCounts,
    ScanContext,
    gather,
    gather_quietly,
    scan_mapped_async,
)

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_DEPTH = 8
#: ggml.h ``GGML_MAX_NAME``: a tensor name holds fewer bytes than this.
GGML_MAX_NAME = 64


def _iq1m_scale(rows: UIntArray) -> UIntArray:
    """f16 super-block scale of IQ1_M, spread over the top nibbles of 4 u16 scales."""
    sc = np.ascontiguousarray(rows[:, 48:56]).view("<u2").astype(np.uint16)
    out: UIntArray = (
        (sc[:, 0] >> 12)
        | ((sc[:, 1] >> 8) & 0x00F0)
        | ((sc[:, 2] >> 4) & 0x0F00)
        | (sc[:, 3] & 0xF000)
    ).astype(np.uint16)
    return out


#: |value| of each MXFP4 nibble as ggml stores it (``kvalues_mxfp4``, ggml-common.h:
#: E2M1 values doubled, since ggml multiplies by half the E8M0 scale).
_MXFP4_MAGNITUDE = np.array([0, 1, 2, 3, 4, 6, 8, 12] * 2, dtype=np.float32)
_F32_NAN_BITS = np.uint32(0x7FC00000)


def _mxfp4_extreme(rows: UIntArray) -> UIntArray:
    """f32 bit pattern of each MXFP4 block's largest-magnitude value, as ggml computes it.

    ggml's ``dequantize_row_mxfp4`` (ggml-quants.c) gives ``kvalues_mxfp4[q] * d`` in
    float32 with ``d = ggml_e8m0_to_fp32_half(e)`` = 2^(e-128): a finite scale from e = 253
    up overflows to ±inf on the block's larger nibbles (8 × 2^125 = 2^128). E8M0 0xFF is
    NaN in the OCP MX spec (and in torch's float8_e8m0fnu) while ggml reads it as 2^127:
    the readers differ, so such a block counts as NaN. Below 253 no nibble can overflow.
    """
    e = rows[:, 0]
    out: UIntArray = np.zeros(e.shape, dtype=np.uint32)
    high = np.flatnonzero(e >= 0xFD)
    if high.size:
        qs = rows[high, 1:17]
        mag = np.maximum(
            _MXFP4_MAGNITUDE[qs & 0x0F].max(axis=1), _MXFP4_MAGNITUDE[qs >> 4].max(axis=1)
        )
        d = ((e[high].astype(np.uint32) - 1) << 23).view(np.float32)
        with np.errstate(over="ignore"):
            out[high] = (mag * d).view(np.uint32)
        out[high[e[high] == 0xFF]] = _F32_NAN_BITS
    return out


#: f32 |d| above which ``d × 128`` may overflow (FLT_MAX / 128).
_Q8K_SAFE_SCALE = np.float32(3.4028235e38 / 128)


def _q8k_extreme(rows: UIntArray) -> UIntArray:
    """f32 bit pattern of each Q8_K block's largest-magnitude value ``|d| × max|q|``.

    ``dequantize_row_q8_K`` gives ``d * qs[j]`` in float32 (d f32 at offset 0, qs int8 at
    4..259): a finite d above FLT_MAX/128 can overflow to ±inf, and an infinite d times a
    zero quant is NaN, as in ggml.
    """
    d = np.ascontiguousarray(rows[:, 0:4]).view("<f4")[:, 0]
    out: UIntArray = np.ascontiguousarray(d).view(np.uint32).copy()
    big = np.flatnonzero(~(np.abs(d) <= _Q8K_SAFE_SCALE))
    if big.size:
        q = rows[big, 4:260].view(np.int8).astype(np.int16)
        qmax = np.abs(q).max(axis=1).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            out[big] = (np.abs(d[big]) * qmax).view(np.uint32)
    return out


@dataclass(frozen=True)
class GgmlType:
    """One ggml tensor type.

    Attributes:
        name: ggml name, e.g. ``"Q8_0"``.
        block_elems: Elements per block (1 for plain types).
        block_bytes: Bytes per block.
        fields: Float values checked in each block; empty for integer types.
    """

    name: str
    block_elems: int
    block_bytes: int
    fields: tuple[Field, ...]

    @property
    def quantized(self) -> bool:
        """True for block-quantized types (counted by block scale)."""
        return self.block_elems > 1


def _q(name: str, elems: int, nbytes: int, *offsets: int, code: FloatCode = F16) -> GgmlType:
    return GgmlType(name, elems, nbytes, tuple(Field(o, code) for o in offsets))


#: ggml_type ids (ggml.h ``enum ggml_type``) to layouts.
GGML_TYPES: dict[int, GgmlType] = {
    0: _q("F32", 1, 4, 0, code=F32),
    1: _q("F16", 1, 2, 0),
    2: _q("Q4_0", 32, 18, 0),
    3: _q("Q4_1", 32, 20, 0, 2),
    6: _q("Q5_0", 32, 22, 0),
    7: _q("Q5_1", 32, 24, 0, 2),
    8: _q("Q8_0", 32, 34, 0),
    10: _q("Q2_K", 256, 84, 80, 82),
    11: _q("Q3_K", 256, 110, 108),
    12: _q("Q4_K", 256, 144, 0, 2),
    13: _q("Q5_K", 256, 176, 0, 2),
    14: _q("Q6_K", 256, 210, 208),
    15: GgmlType("Q8_K", 256, 292, (Field(0, F32, _q8k_extreme),)),
    16: _q("IQ2_XXS", 256, 66, 0),
    17: _q("IQ2_XS", 256, 74, 0),
    18: _q("IQ3_XXS", 256, 98, 0),
    19: _q("IQ1_S", 256, 50, 0),
    20: _q("IQ4_NL", 32, 18, 0),
    21: _q("IQ3_S", 256, 110, 0),
    22: _q("IQ2_S", 256, 82, 0),
    23: _q("IQ4_XS", 256, 136, 0),
    24: _q("I8", 1, 1),
    25: _q("I16", 1, 2),
    26: _q("I32", 1, 4),
    27: _q("I64", 1, 8),
    28: _q("F64", 1, 8, 0, code=F64),
    29: GgmlType("IQ1_M", 256, 56, (Field(48, F16, _iq1m_scale),)),
    30: _q("BF16", 1, 2, 0, code=BF16),
    34: _q("TQ1_0", 256, 54, 52),
    35: _q("TQ2_0", 256, 66, 64),
    39: GgmlType("MXFP4", 32, 17, (Field(0, F32, _mxfp4_extreme),)),
}

#: ggml type ids with a name but no layout here: removed (4, 5), read differently by
#: ggml and gguf-py (9), repacked at load time
#: (31-33, 36-38) or newer than this table (40 and up). Files holding them are "not
#: verified", and the message names the type.
GGML_UNVERIFIED_NAMES: dict[int, str] = {
    4: "Q4_2",
    5: "Q4_3",
    # Readers disagree on the layout: ggml's block_q8_1 is two f16 and 32 int8 (36
    # bytes); gguf-py 0.19 sizes it 40 (two f32), so one of them misreads every tensor.
    9: "Q8_1, whose block ggml reads as 36 bytes and gguf-py as 40",
    31: "Q4_0_4_4",
    32: "Q4_0_4_8",
    33: "Q4_0_8_8",
    36: "IQ4_NL_4_4",
    37: "IQ4_NL_4_8",
    38: "IQ4_NL_8_8",
    40: "NVFP4",
    41: "Q1_0",
}

_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    """One GGUF tensor: name, ggml type, shape (ggml order, innermost first), data range."""

    name: str
    gtype: GgmlType
    dims: tuple[int, ...]
    begin_bytes: int
    nbytes: int


class _Cursor:
    def __init__(self, mf: MappedFile) -> None:
        self.mf, self.pos = mf, 0

    def take(self, n: int) -> bytes:
        data = self.mf.read(self.pos, n)
        self.pos += n
        return data

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.mf.size:
            raise NotVerifiedError("truncated GGUF metadata")
        self.pos += n

    def string(self) -> bytes:
        n = self.u64()
        if self.pos + n > self.mf.size:
            raise NotVerifiedError("GGUF string runs past the end of the file")
        return self.take(n)

    def value(self, vtype: int, depth: int = 0) -> int | None:
        """Read (mostly skip) a metadata value; returns it when it is an integer."""
        if depth > MAX_DEPTH:
            raise NotVerifiedError("GGUF metadata arrays nested too deeply")
        if vtype in _SCALAR_SIZES:
            raw = self.take(_SCALAR_SIZES[vtype])
            if vtype in (4, 10):
                return int.from_bytes(raw, "little")
            return None
        if vtype == _STRING:
            self.string()
            return None
        if vtype == _ARRAY:
            etype, count = self.u32(), self.u64()
            if etype == _ARRAY:
                # gguf-py reads arrays of arrays, ggml's gguf.cpp refuses them.
                raise NotVerifiedError("an array of arrays: ggml refuses it, gguf-py reads it")
            if etype not in _SCALAR_SIZES and etype != _STRING:
                # ggml refuses the element type whatever the count; gguf-py reads an empty
                # array of any type.
                raise NotVerifiedError(f"unknown GGUF metadata array type {etype}")
            if etype in _SCALAR_SIZES:
                self.skip(count * _SCALAR_SIZES[etype])
                return None
            if count * 8 > self.mf.size - self.pos:
                raise NotVerifiedError("GGUF array count larger than the file")
            for _ in range(count):
                self.value(etype, depth + 1)
            return None
        raise NotVerifiedError(f"unknown GGUF metadata type {vtype}")


def read_tensor_infos(mf: MappedFile) -> list[TensorInfo]:
    """Parse and validate the GGUF header and tensor table, by ggml's rules.

    The rules are those of ggml's ``gguf_init_from_file`` (ggml/src/gguf.cpp), the
    strictest reader, plus gguf-py's where it refuses what ggml reads: a file either
    reader would refuse or read differently is not verified. Keys are unique and not
    empty, no array holds arrays, tensor names are unique UTF-8 of fewer than 64 bytes,
    each row is whole blocks, each tensor starts where the previous one ends padded to
    the alignment (``GGML_PAD``), and the file holds the whole padded data section.

    Returns:
        Tensors in file order.

    Raises:
        NotVerifiedError: Bad magic, unsupported version (1, big-endian),
            truncated metadata, a duplicate or empty key, unknown tensor type, bad
            dims, or tensor data laid out other than ggml lays it out.
    """
    cur = _Cursor(mf)
    n_tensors, n_kv = _header_counts(cur, mf.size)
    alignment = _metadata_alignment(cur, n_kv)
    raw = _tensor_table(cur, n_tensors)
    # Padding is (a - pos % a) % a (ggml GGML_PAD): none when the tensor table ends
    # exactly on a boundary, never a whole extra block.
    data_start = cur.pos + _pad(cur.pos, alignment)
    return _laid_out(raw, data_start, alignment, mf.size)


# One tensor table entry as read: name, type, dims, offset into the data section.
_RawTensor = tuple[str, GgmlType, tuple[int, ...], int]


def _header_counts(cur: _Cursor, size_bytes: int) -> tuple[int, int]:
    """Read the magic and version; returns the tensor and metadata counts.

    Raises:
        NotVerifiedError: Not GGUF, a version other than 2 or 3, or counts the file
            (``size_bytes``) cannot hold.
    """
    if cur.take(4) != MAGIC:
        raise NotVerifiedError("not a GGUF file")
    version = cur.u32()
    if version not in (2, 3):
        raise NotVerifiedError(f"unsupported GGUF version {version} (big-endian or v1?)")
    n_tensors, n_kv = cur.u64(), cur.u64()
    if n_tensors > size_bytes // 24 or n_kv > size_bytes // 12:
        raise NotVerifiedError("GGUF counts larger than the file can hold")
    return n_tensors, n_kv


def _metadata_alignment(cur: _Cursor, n_kv: int) -> int:
    """Read the ``n_kv`` metadata pairs; returns the data alignment they set.

    Raises:
        NotVerifiedError: A key ggml and gguf-py read differently or refuse, a bad
            value, or a bad ``general.alignment``.
    """
    alignment = DEFAULT_ALIGNMENT
    keys: set[bytes] = set()
    for _ in range(n_kv):
        key = _metadata_key(cur, keys)
        keys.add(key)
        vtype = cur.u32()
        try:
            val = cur.value(vtype)
        except NotVerifiedError as exc:
            raise NotVerifiedError(
                f"GGUF metadata key {key.decode('utf-8', 'replace')!r}: {exc}"
            ) from None
        if key == b"general.alignment":
            # ggml's gguf.cpp: a u32 that is a power of two, else the file is invalid.
            if vtype != 4 or val is None or val == 0 or val & (val - 1):
                raise NotVerifiedError(f"bad general.alignment {val!r}: must be a u32 power of two")
            alignment = val
    return alignment


def _metadata_key(cur: _Cursor, keys: set[bytes]) -> bytes:
    """Read one metadata key that every reader reads alike and none of ``keys``.

    Raises:
        NotVerifiedError: An empty key, not UTF-8, a NUL byte, or a repeated key.
    """
    key = cur.string()
    if not key:
        raise NotVerifiedError("GGUF metadata key is empty")
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        # gguf-py decodes every key as UTF-8 and fails; ggml keeps the bytes.
        raise NotVerifiedError(
            f"GGUF metadata key {key.decode('utf-8', 'replace')!r} is not UTF-8:"
            " gguf-py refuses it, ggml reads it; readers disagree"
        ) from None
    if b"\0" in key:
        # ggml's gguf_find_key compares C strings (up to the NUL), gguf-py whole keys:
        # b"general.alignment\0x" sets the alignment for ggml only.
        raise NotVerifiedError(
            f"GGUF metadata key {key.decode('utf-8', 'replace')!r} holds a NUL byte:"
            " ggml reads it up to the NUL, gguf-py whole; readers disagree"
        )
    if key in keys:
        # ggml's gguf.cpp and gguf-py both refuse a repeated key: no loader reads it.
        raise NotVerifiedError(
            f"GGUF metadata key {key.decode('utf-8', 'replace')!r} appears more than"
            " once: ggml and gguf-py refuse the file"
        )
    return key


def _tensor_table(cur: _Cursor, n_tensors: int) -> list[_RawTensor]:
    """Read the ``n_tensors`` entries of the tensor table, in file order.

    Raises:
        NotVerifiedError: A name readers disagree on or repeated, bad dims, or a type
            this gate does not verify.
    """
    raw: list[_RawTensor] = []
    names: set[str] = set()
    for _ in range(n_tensors):
        name = _tensor_name(cur, names)
        names.add(name)
        n_dims = cur.u32()
        if n_dims > MAX_DIMS:
            raise NotVerifiedError(f"tensor {name!r}: {n_dims} dims")
        dims = tuple(cur.u64() for _ in range(n_dims))
        if n_dims == 0 or 0 in dims:
            # ggml reads one value (every ne[] defaults to 1) or none; gguf-py's
            # dequantizers reshape by the last dimension, which such a tensor lacks.
            what = "has no dimensions" if n_dims == 0 else f"holds no values (dims {dims})"
            raise NotVerifiedError(
                f"tensor {name!r} {what}: ggml reads it, gguf-py cannot convert it;"
                " readers disagree"
            )
        type_id, offset = cur.u32(), cur.u64()
        gtype = GGML_TYPES.get(type_id)
        if gtype is None:
            known = GGML_UNVERIFIED_NAMES.get(type_id, "unknown to this gate")
            raise NotVerifiedError(f"tensor {name!r}: ggml type {type_id} ({known}) not verified")
        raw.append((name, gtype, dims, offset))
    return raw


def _tensor_name(cur: _Cursor, names: set[str]) -> str:
    """Read one tensor name that ggml and gguf-py read alike and none of ``names``.

    Raises:
        NotVerifiedError: Not UTF-8, a NUL byte, ``GGML_MAX_NAME`` bytes or more, or a
            repeated name.
    """
    name_bytes = cur.string()
    try:
        name = name_bytes.decode("utf-8")
    except UnicodeDecodeError:
        # ggml keeps the bytes, gguf-py cannot read the file.
        raise NotVerifiedError(
            f"tensor name {name_bytes.decode('utf-8', 'replace')!r} is not UTF-8: readers disagree"
        ) from None
    if b"\0" in name_bytes:
        # ggml copies names as C strings: "w\0a" becomes "w" (and may collide).
        raise NotVerifiedError(
            f"tensor name {name!r} holds a NUL byte: ggml cuts it there, gguf-py keeps"
            " it; readers disagree"
        )
    if len(name_bytes) >= GGML_MAX_NAME:
        raise NotVerifiedError(
            f"tensor name {name!r} is {len(name_bytes)} bytes: ggml allows fewer than"
            f" {GGML_MAX_NAME}"
        )
    if name in names:
        raise NotVerifiedError(f"tensor {name!r} appears more than once")
    return name


def _laid_out(
    raw: list[_RawTensor], data_start: int, alignment: int, size_bytes: int
) -> list[TensorInfo]:
    """The tensors of ``raw`` placed in the file (data section at ``data_start``), each
    checked to lie where ggml expects it.

    Raises:
        NotVerifiedError: A row that is not whole blocks, a tensor not right after the
            previous one (padded to ``alignment``), or data past ``size_bytes``.
    """
    infos: list[TensorInfo] = []
    expected = 0
    for name, gtype, dims, offset in raw:
        n = math.prod(dims)
        row = dims[0] if dims else 1  # ggml: missing dims are 1
        if row % gtype.block_elems:
            raise NotVerifiedError(
                f"tensor {name!r}: row of {row} not a multiple of {gtype.block_elems}"
            )
        if offset != expected:
            # ggml requires exactly this layout; gguf-py reads any offset, so any other
            # layout (a hole, an overlap, another order) is read differently or refused.
            raise NotVerifiedError(
                f"tensor {name!r}: data at offset {offset}, but ggml expects {expected}"
                " (each tensor right after the previous one, padded to the alignment)"
            )
        nbytes = n // gtype.block_elems * gtype.block_bytes
        if data_start + offset + nbytes > size_bytes:
            raise NotVerifiedError(f"tensor {name!r}: data outside the file")
        infos.append(TensorInfo(name, gtype, dims, data_start + offset, nbytes))
        expected = offset + nbytes + _pad(nbytes, alignment)
    if raw and data_start + expected > size_bytes:
        # ggml reads the whole padded data section; a file cut inside the padding of
        # its last tensor loads in gguf-py and fails in ggml.
        raise NotVerifiedError(
            f"GGUF data section ends at {data_start + expected} with the last tensor's"
            f" padding, past the end of the file ({size_bytes})"
        )
    return infos


def _pad(n: int, alignment: int) -> int:
    """Bytes that pad ``n`` to a multiple of ``alignment`` (ggml's ``GGML_PAD``)."""
    return (alignment - n % alignment) % alignment


def verify_gguf(path: Path, ctx: ScanContext, report: FileReport) -> None:
    """Check every tensor of a GGUF file, appending to ``report.tensors``.

    Shapes are reported in numpy order (outermost first).

    Raises:
        NotVerifiedError: See :func:`read_tensor_infos`.
        OSError: The file cannot be read.
    """
    with MappedFile(path, ctx.mapped) as mf:
        checked: list[tuple[TensorReport, int]] = []
        pending: list[PendingCounts] = []
        try:
            for t in read_tensor_infos(mf):
                g = t.gtype
                tr = TensorReport(
                    t.name,
                    g.name,
                    tuple(reversed(t.dims)),
                    checked=bool(g.fields),
                    unit="block-scale" if g.quantized else "element",
                )
                report.tensors.append(tr)
                if not g.fields:
                    ctx.tick(t.nbytes)
                    continue
                n_blocks = t.nbytes // g.block_bytes
                pending.append(
                    scan_mapped_async(mf, t.begin_bytes, n_blocks, g.block_bytes, g.fields, ctx)
                )
                checked.append((tr, g.block_elems))
        except BaseException:
            gather_quietly(pending)
            raise
        for (tr, block_elems), c in zip(checked, gather(pending), strict=True):
            tr.nan, tr.posinf, tr.neginf = c.nan, c.posinf, c.neginf
            if c.first_bad is not None:
                tr.first_bad_index = c.first_bad * block_elems
