"""NumPy ``.npy`` and ``.npz`` files, never unpickling.

Format (numpy.lib.format, NEP 1): magic ``\\x93NUMPY``, major/minor version,
header length (u16 for 1.0, u32 for 2.0/3.0), then a Python-literal dict
``{'descr': ..., 'fortran_order': ..., 'shape': ...}``, then the raw array bytes.
The header is read by numpy's own public reader (``numpy.lib.format.read_magic`` and
``read_array_header_1_0``/``_2_0``, which evaluate it with :func:`ast.literal_eval`),
over the bytes already read within this module's size limit, so the gate and
``np.load`` agree on what a header says. ``.npz`` is a zip of ``.npy`` members; stored
members are checked in place and deflated ones streamed. Object arrays (pickles) and
structured or void types are not verified.
"""

from __future__ import annotations

import contextlib
import io
import math
import struct
import tokenize
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from .dtypes import NUMPY_FLOATS, DType
from .errors import NotVerifiedError
from .regular import open_zip
from .report import FileReport, TensorReport
from .scan import MappedFile, ScanContext, element_layout, scan_mapped
from .zipmember import (
    MemberReader,
    require_plain_layout,
    require_unique_members,
)

MAX_HEADER_BYTES = 1 << 20
_SKIPPABLE_KINDS = "biuUSmM"  # bool, ints, strings, datetimes: never non-finite


@dataclass(frozen=True)
class NpyHeader:
    """A parsed ``.npy`` header.

    Attributes:
        dtype: Element type (``code`` is ``None`` for integer/bool/string types).
        byteorder: ``"<"`` or ``">"``.
        fortran_order: True when data is stored column-major.
        shape: Shape in elements.
        data_offset_bytes: Offset of the array data from the start of the ``.npy``.
        nbytes: Size of the array data in bytes.
    """

    dtype: DType
    byteorder: str
    fortran_order: bool
    shape: tuple[int, ...]
    data_offset_bytes: int
    nbytes: int


def parse_header(head: bytes) -> NpyHeader:
    """Parse the header at the start of a ``.npy`` stream.

    Args:
        head: At least the whole header (longer input is fine); at most
            ``MAX_HEADER_BYTES + 12`` bytes are ever looked at.

    Raises:
        NotVerifiedError: Bad magic or version, truncated or oversized header,
            not a literal dict, object/void/structured dtype, or bad shape.
    """
    fp = io.BytesIO(head)
    try:
        version = npy_format.read_magic(fp)
    except ValueError as exc:
        raise NotVerifiedError("not a .npy file (bad magic or truncated)") from exc
    if version == (1, 0):
        read_header = npy_format.read_array_header_1_0
    elif version in ((2, 0), (3, 0)):
        read_header = npy_format.read_array_header_2_0
    else:
        # np.load accepts these three versions only (numpy.lib.format._check_version).
        raise NotVerifiedError(f"unsupported .npy version {version[0]}.{version[1]}")
    size_format = "<H" if version == (1, 0) else "<I"
    start = 8 + struct.calcsize(size_format)
    if len(head) >= start:
        (hlen,) = struct.unpack(size_format, head[8:start])
        if hlen > MAX_HEADER_BYTES:
            raise NotVerifiedError(
                f"oversized .npy header ({hlen} bytes, limit {MAX_HEADER_BYTES})"
            )
        if len(head) < start + hlen:
            raise NotVerifiedError(
                f"truncated .npy header ({hlen} bytes announced, {len(head) - start} present)"
            )
    if version == (3, 0):
        # numpy (1.24 to 2.x) has no public reader for 3.0. It differs from 2.0 only in
        # decoding the header as UTF-8 instead of Latin-1, which numpy writes only for
        # field names of structured dtypes that Latin-1 cannot encode: refused here
        # anyway. An ASCII header reads the same either way, so 2.0's reader serves it.
        (hlen,) = struct.unpack("<I", head[8:12]) if len(head) >= 12 else (0,)
        if not head[12 : 12 + hlen].isascii():
            raise NotVerifiedError(
                "format 3.0 header with non-ASCII text (UTF-8 field names of a structured"
                " dtype): not verified"
            )
    try:
        shape, fortran, npd = read_header(fp, max_header_size=MAX_HEADER_BYTES)
    except (
        ValueError,
        SyntaxError,
        TypeError,
        OverflowError,
        MemoryError,
        RecursionError,
        tokenize.TokenError,
    ) as exc:
        # numpy's messages quote the whole header: keep the first line, shortened; say
        # what failed when the parser says nothing (deep nesting exhausts its stack).
        why = str(exc).split("\n", 1)[0] or type(exc).__name__
        if isinstance(exc, RecursionError | MemoryError):
            why = "nested too deeply to read"
        raise NotVerifiedError(f"bad .npy header: {why[:200]}") from exc
    # numpy accepts bools and negative sizes in the shape; no array has them.
    if not all(not isinstance(x, bool) and x >= 0 for x in shape):
        raise NotVerifiedError(f"bad shape {shape!r:.80}")
    if npd.fields is not None:
        raise NotVerifiedError(f"structured dtype {npd.descr!r:.60} not verified")
    byteorder = ">" if npd.byteorder == ">" else "<"
    key = f"{npd.kind}{npd.itemsize}"
    if key in NUMPY_FLOATS:
        dtype = NUMPY_FLOATS[key]
    elif npd.kind in _SKIPPABLE_KINDS and npd.subdtype is None:
        dtype = DType(npd.str, npd.itemsize * 8, None)
    else:
        raise NotVerifiedError(f"dtype {npd.str!r} not verified (object, void or extended type)")
    nbytes = math.prod(shape) * npd.itemsize
    return NpyHeader(dtype, byteorder, fortran, shape, fp.tell(), nbytes)


def _fortran_to_c_index(index: int, shape: tuple[int, ...]) -> int:
    multi = np.unravel_index(index, shape, order="F")
    return int(np.ravel_multi_index(multi, shape, order="C"))


def _check(
    name: str, h: NpyHeader, reader: MappedFile | MemberReader, base: int, ctx: ScanContext
) -> TensorReport:
    tr = TensorReport(name, h.dtype.name, h.shape, checked=h.dtype.checked)
    if h.dtype.code is None or h.nbytes == 0:
        ctx.tick(h.nbytes)
        return tr
    unit_bytes, fields = element_layout(h.dtype.code, h.dtype.components)
    n_units = h.nbytes // unit_bytes
    if isinstance(reader, MappedFile):
        c = scan_mapped(
            reader, base + h.data_offset_bytes, n_units, unit_bytes, fields, ctx, h.byteorder
        )
    else:
        c = reader.scan(h.data_offset_bytes, n_units, unit_bytes, fields, ctx, h.byteorder)
    tr.nan, tr.posinf, tr.neginf = c.nan, c.posinf, c.neginf
    if c.first_bad is not None and h.fortran_order and len(h.shape) > 1:
        tr.first_bad_index = _fortran_to_c_index(c.first_bad, h.shape)
    else:
        tr.first_bad_index = c.first_bad
    return tr


def verify_npy(path: Path, ctx: ScanContext, report: FileReport) -> None:
    """Check a ``.npy`` file; the data must end exactly at the end of the file.

    Raises:
        NotVerifiedError: See :func:`parse_header`; size mismatch.
        OSError: The file cannot be read.
    """
    with MappedFile(path, ctx.mapped) as mf:
        h = parse_header(mf.read(0, min(mf.size, MAX_HEADER_BYTES + 12)))
        if h.data_offset_bytes + h.nbytes != mf.size:
            raise NotVerifiedError(
                f"data is {mf.size - h.data_offset_bytes} bytes, shape x dtype needs {h.nbytes}"
            )
        report.tensors.append(_check(path.stem, h, mf, 0, ctx))


def verify_npz(path: Path, ctx: ScanContext, report: FileReport) -> None:
    """Check every ``.npy`` member of a ``.npz`` archive.

    Raises:
        NotVerifiedError: Unreadable zip, a member that is not ``.npy``, a bad
            member header, size mismatch, or a failed CRC of a streamed member.
        OSError: The file cannot be read.
    """
    with MappedFile(path, ctx.mapped) as mf, contextlib.ExitStack() as stack:
        try:
            zf = stack.enter_context(open_zip(path))
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise NotVerifiedError(f"unreadable zip: {exc}") from exc
        require_plain_layout(mf, zf)
        require_unique_members(zf)
        # Every member counts, folder entries too: np.load opens a member named
        # "b.npy/" as an array like any other.
        infos = zf.infolist()
        if not infos:
            raise NotVerifiedError("empty .npz archive")
        for info in infos:
            if info.is_dir():
                raise NotVerifiedError(
                    f"member {info.filename!r} is named like a folder, yet np.load reads it"
                    " as an array: not verified"
                )
            if not info.filename.endswith(".npy"):
                raise NotVerifiedError(f"member {info.filename!r} is not a .npy array")
            reader = MemberReader(zf, mf, info)
            h = parse_header(reader.read_head(MAX_HEADER_BYTES + 12))
            if h.data_offset_bytes + h.nbytes != reader.size:
                raise NotVerifiedError(f"member {info.filename!r}: size mismatch")
            try:
                tr = _check(info.filename[: -len(".npy")], h, reader, 0, ctx)
            except zipfile.BadZipFile as exc:
                raise NotVerifiedError(f"member {info.filename!r}: {exc}") from exc
            report.tensors.append(tr)
