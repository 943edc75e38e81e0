"""Reading zip members in place (stored) or as a stream (compressed).

Source: PKWARE APPNOTE.TXT 4.3.7 (local file header: signature ``PK\\x03\\x04``,
26 fixed bytes, then file name and extra field, then the data).
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Callable, Sequence
from typing import IO

from watchdog.weights.errors import NotVerifiedError
from watchdog.weights.finite import Counts
from watchdog.weights.scan import (
    Field,
    MappedFile,
    PendingCounts,
    ScanContext,
    scan_mapped,
    scan_mapped_async,
    scan_stream,
)

LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")


def stored_data_offset(mf: MappedFile, info: zipfile.ZipInfo) -> int:
    """Absolute file offset of an uncompressed member's data.

    Raises:
        NotVerifiedError: The local header is missing, names another file, or its
            data runs past the end of the file.
    """
    raw = mf.read(info.header_offset, LOCAL_HEADER.size)
    fields = LOCAL_HEADER.unpack(raw)
    if fields[0] != b"PK\x03\x04":
        raise NotVerifiedError(f"zip member {info.filename!r}: bad local header")
    name_len, extra_len = int(fields[9]), int(fields[10])
    name = mf.read(info.header_offset + LOCAL_HEADER.size, name_len)
    if name.decode("utf-8", "replace") != info.filename and name.decode("cp437") != info.filename:
        raise NotVerifiedError(f"zip member {info.filename!r}: local header names {name!r}")
    start: int = info.header_offset + LOCAL_HEADER.size + name_len + extra_len
    if start + info.file_size > mf.size:
        raise NotVerifiedError(f"zip member {info.filename!r}: data past the end of the file")
    return start


def require_unique_members(zf: zipfile.ZipFile) -> None:
    """Refuse an archive that names one member twice.

    Readers disagree on which copy a duplicated name means: :mod:`zipfile` returns
    the last central-directory entry, miniz (``torch.load``) the first. Verifying one
    copy says nothing about the other, so such an archive is not verifiable.

    Raises:
        NotVerifiedError: Some member name occurs more than once (the message names it).
    """
    seen: set[str] = set()
    for info in zf.infolist():
        if info.filename in seen:
            raise NotVerifiedError(
                f"zip member {info.filename!r} appears more than once: readers disagree"
                " on which copy they load"
            )
        seen.add(info.filename)


class MemberReader:
    """Reads ranges of one zip member, in place when stored, else by streaming.

    Args:
        zf: The open archive.
        mf: The same file, memory-mapped.
        info: The member.

    Raises:
        NotVerifiedError: The member uses an unsupported compression or is
            encrypted, or its local header is inconsistent.
    """

    def __init__(self, zf: zipfile.ZipFile, mf: MappedFile, info: zipfile.ZipInfo) -> None:
        self.zf, self.mf, self.info = zf, mf, info
        if info.flag_bits & 0x1:
            raise NotVerifiedError(f"zip member {info.filename!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise NotVerifiedError(
                f"zip member {info.filename!r}: compression {info.compress_type} unsupported"
            )
        self.stored = info.compress_type == zipfile.ZIP_STORED
        self.data_offset = stored_data_offset(mf, info) if self.stored else -1

    @property
    def size(self) -> int:
        """Uncompressed size in bytes."""
        return self.info.file_size

    def open(self) -> IO[bytes]:
        """A fresh stream over the whole member (decompressing, CRC checked at the end)."""
        return self.zf.open(self.info)

    def read_head(self, n_bytes: int) -> bytes:
        """The first ``min(n_bytes, size)`` bytes."""
        n = min(n_bytes, self.size)
        if self.stored:
            return self.mf.read(self.data_offset, n)
        with self.open() as fh:
            return fh.read(n)

    def buffer(self, offset_bytes: int, n_bytes: int) -> memoryview:
        """``n_bytes`` at ``offset_bytes`` inside the member: mapped in place when stored,
        else decompressed into memory.

        Raises:
            NotVerifiedError: The range is outside the member or the stream is short.
        """
        if offset_bytes + n_bytes > self.size:
            raise NotVerifiedError(f"zip member {self.info.filename!r}: range past its end")
        if self.stored:
            assert self.mf.mm is not None or n_bytes == 0
            if self.mf.mm is None:
                return memoryview(b"")
            start = self.data_offset + offset_bytes
            return memoryview(self.mf.mm)[start : start + n_bytes]
        with self.open() as fh:
            _skip(fh.read, offset_bytes)
            data = fh.read(n_bytes)
        if len(data) != n_bytes:
            raise NotVerifiedError("truncated zip member")
        return memoryview(data)

    def scan_async(
        self,
        offset_bytes: int,
        n_units: int,
        unit_bytes: int,
        fields: Sequence[Field],
        ctx: ScanContext,
        byteorder: str = "<",
    ) -> PendingCounts:
        """Like :meth:`scan`, but a stored member's chunks are only queued on the pool.

        A compressed member is streamed (and checked) before this returns.

        Raises:
            NotVerifiedError: The range is outside the member or the stream is short.
        """
        if not self.stored:
            return PendingCounts(
                self.scan(offset_bytes, n_units, unit_bytes, fields, ctx, byteorder)
            )
        if offset_bytes + n_units * unit_bytes > self.size:
            raise NotVerifiedError(f"zip member {self.info.filename!r}: range past its end")
        return scan_mapped_async(
            self.mf, self.data_offset + offset_bytes, n_units, unit_bytes, fields, ctx, byteorder
        )

    def scan(
        self,
        offset_bytes: int,
        n_units: int,
        unit_bytes: int,
        fields: Sequence[Field],
        ctx: ScanContext,
        byteorder: str = "<",
    ) -> Counts:
        """Check ``n_units`` units at ``offset_bytes`` inside the member.

        Raises:
            NotVerifiedError: The range is outside the member or the stream is short.
        """
        if offset_bytes + n_units * unit_bytes > self.size:
            raise NotVerifiedError(f"zip member {self.info.filename!r}: range past its end")
        if self.stored:
            return scan_mapped(
                self.mf,
                self.data_offset + offset_bytes,
                n_units,
                unit_bytes,
                fields,
                ctx,
                byteorder,
            )
        with self.open() as fh:
            _skip(fh.read, offset_bytes)
            counts = scan_stream(fh.read, n_units, unit_bytes, fields, ctx, byteorder)
            if offset_bytes + n_units * unit_bytes == self.size:
                fh.read(1)  # reaching EOF makes zipfile check the CRC
            return counts


def _skip(read: Callable[[int], bytes], n_bytes: int) -> None:
    left = n_bytes
    while left > 0:
        piece = read(min(left, 1 << 20))
        if not piece:
            raise NotVerifiedError("truncated zip member")
        left -= len(piece)
