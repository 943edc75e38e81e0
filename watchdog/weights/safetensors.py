"""safetensors files: header validation and in-place value checks.

Format (https://github.com/huggingface/safetensors, "Format"): an 8-byte
little-endian header length N, N bytes of UTF-8 JSON mapping each tensor name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the
byte buffer after the header) plus optional ``"__metadata__"``, then the byte
buffer. Validation mirrors the reference implementation: header no larger than
100 MB and inside the file, tensors contiguous from offset 0 with no overlap or
hole, each ``end - begin == numel * bits / 8``, and the buffer ending exactly at
the last tensor.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .dtypes import SAFETENSORS_DTYPES, DType
from .errors import NotVerifiedError
from .report import FileReport, TensorReport
from .scan import (
    MappedFile,
    PendingCounts,
    ScanContext,
    element_layout,
    gather,
    gather_quietly,
    scan_mapped_async,
)

MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header.

    Attributes:
        name: Tensor name.
        dtype: Element type.
        shape: Shape in elements.
        begin_bytes: Start offset in the file (absolute, header included).
        nbytes: Size of the tensor data in bytes.
    """

    name: str
    dtype: DType
    shape: tuple[int, ...]
    begin_bytes: int
    nbytes: int


def _utf8(text: str) -> str:
    """``text``, refused when it holds a lone surrogate (``"\\ud800"``).

    Python's json decodes an unpaired ``\\uD800`` escape into a str that is not
    Unicode; serde_json (the safetensors library) refuses the header.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise NotVerifiedError(
            f"header string {text!r} holds an unpaired surrogate escape: safetensors refuses it"
        ) from None
    return text


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if _utf8(k) in out:
            raise NotVerifiedError(f"duplicate key {k!r} in header")
        out[k] = _utf8(v) if isinstance(v, str) else v
    return out


#: serde_json's default recursion limit: deeper arrays and objects are refused.
SERDE_MAX_DEPTH = 128
U64_MAX = (1 << 64) - 1


def _serde_int(literal: str) -> int | float:
    """A JSON integer as serde_json reads it: ``-0`` is the float -0.0, not an integer,
    and one outside i64/u64 is a float (then no shape or offset), or out of range."""
    if literal == "-0":
        return -0.0
    value = int(literal)
    if -(1 << 63) <= value <= U64_MAX:
        return value
    return _serde_float(literal)


def _serde_float(literal: str) -> float:
    """A JSON number with a fraction or exponent; serde_json refuses one that overflows
    f64 (``1e400``: "number out of range"), which Python reads as infinity."""
    value = float(literal)
    if not math.isfinite(value):
        raise NotVerifiedError(
            f"header number {literal[:40]} is out of range: safetensors refuses it"
        )
    return value


def _serde_constant(name: str) -> float:
    """``NaN``, ``Infinity``: Python's json accepts them, JSON and serde_json do not."""
    raise NotVerifiedError(f"header holds {name}, which is not JSON: safetensors refuses it")


def _depth(value: object) -> int:
    """Nesting depth of a parsed JSON value (a scalar 0, ``[]`` 1), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            d += 1
            deepest = max(deepest, d)
            stack.extend((x, d) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _size_overflows(shape: list[int]) -> bool:
    """Whether the element count overflows u64 as safetensors computes it: a checked
    product from the first dimension on, so ``[2**32, 2**32, 0]`` overflows before the 0."""
    n = 1
    for d in shape:
        n *= d
        if n > U64_MAX:
            return True
    return False


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def read_header(mf: MappedFile) -> list[TensorEntry]:
    """Parse and validate the header of a mapped safetensors file.

    Args:
        mf: The mapped file.

    Returns:
        Tensors sorted by offset.

    Raises:
        NotVerifiedError: Truncated file, header length past the end of the file,
            invalid JSON, unknown dtype, bad shape, or offsets that overlap, leave
            holes, lie outside the buffer or disagree with shape × dtype.
    """
    if mf.size < 8:
        raise NotVerifiedError(f"truncated: {mf.size} bytes, no header length")
    (n,) = struct.unpack("<Q", mf.read(0, 8))
    if n > MAX_HEADER_BYTES:
        raise NotVerifiedError(f"header length {n} exceeds {MAX_HEADER_BYTES}")
    if 8 + n > mf.size:
        raise NotVerifiedError(f"header length {n} larger than the file ({mf.size} bytes)")
    try:
        header = json.loads(
            mf.read(8, n).decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_int=_serde_int,
            parse_float=_serde_float,
            parse_constant=_serde_constant,
        )
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotVerifiedError(f"header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise NotVerifiedError("header is not a JSON object")
    if _depth(header) > SERDE_MAX_DEPTH:
        raise NotVerifiedError(
            f"header nested deeper than {SERDE_MAX_DEPTH} levels: safetensors refuses it"
        )
    data_start = 8 + n
    data_len = mf.size - data_start
    entries: list[tuple[int, int, str, DType, tuple[int, ...]]] = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise NotVerifiedError("__metadata__ must map strings to strings")
            continue
        if not isinstance(info, dict):
            raise NotVerifiedError(f"tensor {name!r}: entry is not an object")
        dtype = SAFETENSORS_DTYPES.get(info.get("dtype"))  # type: ignore[arg-type]
        if dtype is None:
            raise NotVerifiedError(f"tensor {name!r}: unknown dtype {info.get('dtype')!r}")
        shape = info.get("shape")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise NotVerifiedError(f"tensor {name!r}: bad shape {shape!r}")
        if _size_overflows(shape):
            raise NotVerifiedError(
                f"tensor {name!r}: shape {shape} overflows the element count: safetensors"
                " refuses it"
            )
        offs = info.get("data_offsets")
        if not (isinstance(offs, list) and len(offs) == 2 and all(_is_int(o) for o in offs)):
            raise NotVerifiedError(f"tensor {name!r}: bad data_offsets {offs!r}")
        begin, end = offs
        if begin < 0 or end < begin:
            raise NotVerifiedError(f"tensor {name!r}: invalid offsets {begin}..{end}")
        if end > data_len:
            raise NotVerifiedError(
                f"tensor {name!r}: offsets {begin}..{end} outside the {data_len}-byte buffer"
            )
        need = dtype.nbytes_for(math.prod(shape))
        if need is None or need != end - begin:
            raise NotVerifiedError(
                f"tensor {name!r}: {end - begin} bytes, but shape {shape} x {dtype.name} "
                f"needs {need}"
            )
        entries.append((begin, end, name, dtype, tuple(shape)))
    entries.sort(key=lambda e: (e[0], e[1]))
    expected = 0
    for begin, end, name, _, _ in entries:
        if begin != expected:
            kind = "overlaps the previous tensor" if begin < expected else "leaves a hole"
            raise NotVerifiedError(f"tensor {name!r} at offset {begin} {kind}")
        expected = end
    if expected != data_len:
        raise NotVerifiedError(
            f"buffer is {data_len} bytes but tensors cover {expected} (incomplete metadata)"
        )
    return [TensorEntry(nm, dt, sh, data_start + b, e - b) for b, e, nm, dt, sh in entries]


def verify_safetensors(path: Path, ctx: ScanContext, report: FileReport) -> None:
    """Check every tensor of a safetensors file, appending to ``report.tensors``.

    Raises:
        NotVerifiedError: See :func:`read_header`.
        OSError: The file cannot be read.
    """
    with MappedFile(path, ctx.mapped) as mf:
        entries = read_header(mf)
        checked: list[TensorReport] = []
        pending: list[PendingCounts] = []
        try:
            for e in entries:
                tr = TensorReport(e.name, e.dtype.name, e.shape, checked=e.dtype.checked)
                if e.dtype.code is not None:
                    unit_bytes, fields = element_layout(e.dtype.code, e.dtype.components)
                    n_units = e.nbytes // unit_bytes
                    pending.append(
                        scan_mapped_async(mf, e.begin_bytes, n_units, unit_bytes, fields, ctx)
                    )
                    checked.append(tr)
                else:
                    ctx.tick(e.nbytes)
                report.tensors.append(tr)
        except BaseException:
            gather_quietly(pending)
            raise
        for tr, c in zip(checked, gather(pending), strict=True):
            tr.nan, tr.posinf, tr.neginf, tr.first_bad_index = (
                c.nan,
                c.posinf,
                c.neginf,
                c.first_bad,
            )


def tensor_names(path: Path) -> set[str]:
    """Names of the tensors in a safetensors file (header only).

    Raises:
        NotVerifiedError: The header is invalid.
        OSError: The file cannot be read.
    """
    with MappedFile(path, mapped=False) as mf:  # a header: pread, and no SIGBUS risk
        return {e.name for e in read_header(mf)}
