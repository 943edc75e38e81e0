"""Reading zip members in place (stored) or as a stream (compressed).

Source: PKWARE APPNOTE.TXT 4.3.7 (local file header: signature ``PK\\x03\\x04``,
26 fixed bytes, then file name and extra field, then the data).
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Callable, Sequence
from typing import IO

from .errors import NotVerifiedError
from .finite import Counts
from .scan import (
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
    start = _local_data_offset(mf, info)
    if start + info.file_size > mf.size:
        raise NotVerifiedError(f"zip member {info.filename!r}: data past the end of the file")
    return start


def require_unique_members(zf: zipfile.ZipFile, *, fold_case: bool = False) -> None:
    """Refuse an archive that names one member twice.

    Readers disagree on which copy a duplicated name means: :mod:`zipfile` returns
    the last central-directory entry, miniz (``torch.load``) the first. Verifying one
    copy says nothing about the other, so such an archive is not verifiable.

    Args:
        zf: The open archive.
        fold_case: Compare names ignoring case, as miniz's ``mz_zip_reader_locate_file``
            does without ``MZ_ZIP_FLAG_CASE_SENSITIVE`` (the flags ``torch.load``
            passes): ``archive/Data/0`` is then the same member as ``archive/data/0``.

    Raises:
        NotVerifiedError: Some member name occurs more than once (the message names it).
    """
    seen: dict[str, str] = {}
    for info in zf.infolist():
        key = info.filename.casefold() if fold_case else info.filename
        if key in seen:
            first = seen[key]
            also = "" if first == info.filename else f" (also as {first!r}, ignoring case)"
            raise NotVerifiedError(
                f"zip member {info.filename!r} appears more than once{also}: readers"
                " disagree on which copy they load"
            )
        seen[key] = info.filename


EOCD = struct.Struct("<4sHHHHIIH")
ZIP64_LOCATOR = struct.Struct("<4sIQI")
ZIP64_EOCD = struct.Struct("<4sQHHIIQQQQ")
#: Longest tail that can hold the end-of-central-directory record (22 bytes plus a
#: comment of at most 65,535 bytes).
_MAX_EOCD_TAIL = EOCD.size + 0xFFFF


def require_plain_layout(mf: MappedFile, zf: zipfile.ZipFile) -> None:
    """Refuse an archive whose layout two zip readers could read differently.

    :mod:`zipfile` shifts every offset by the bytes found in front of the archive
    (``concat`` in ``_RealGetContents``); miniz, which ``torch.load`` uses, takes the
    offsets literally. One file can thus hold two central directories, one for each
    reader. Only the plain layout both read alike is accepted (APPNOTE 4.3.6): the
    end-of-central-directory record (and a zip64 locator and record when present)
    ends the file, the central directory ends right where they begin, the first local
    header is at offset 0, and every member's local header names the member and its
    data lies before the next member and before the central directory.

    Raises:
        NotVerifiedError: Data in front of the archive, a comment or trailing bytes
            after the last record, a central directory that does not end where the
            records begin, or local headers that disagree with the central directory.
    """
    tail_start = max(0, mf.size - _MAX_EOCD_TAIL)
    tail = mf.read(tail_start, mf.size - tail_start)
    pos = tail.rfind(b"PK\x05\x06")
    if pos < 0 or pos + EOCD.size > len(tail):
        raise NotVerifiedError("zip: no end-of-central-directory record")
    eocd_at = tail_start + pos
    _sig, disk, cd_disk, _n_disk, n_total, cd_size, cd_offset, comment_len = EOCD.unpack(
        tail[pos : pos + EOCD.size]
    )
    if eocd_at + EOCD.size + comment_len != mf.size:
        raise NotVerifiedError(
            "zip: bytes after the end-of-central-directory record; readers disagree on"
            " which directory is the archive's"
        )
    if disk or cd_disk:
        raise NotVerifiedError("zip: multi-disk archive not verified")
    cd_end = eocd_at
    loc_at = eocd_at - ZIP64_LOCATOR.size
    has_locator = loc_at >= 0 and mf.read(loc_at, 4) == b"PK\x06\x07"
    if not has_locator and (0xFFFFFFFF in (cd_size, cd_offset) or n_total == 0xFFFF):
        raise NotVerifiedError("zip: zip64 archive without a zip64 locator")
    if has_locator:
        # Like zipfile and miniz, a locator right before the record means zip64 (torch
        # writes one even for small files); its record must sit right before it.
        _lsig, _ldisk, rec_at, _ndisks = ZIP64_LOCATOR.unpack(mf.read(loc_at, ZIP64_LOCATOR.size))
        if rec_at + ZIP64_EOCD.size != loc_at:
            raise NotVerifiedError(
                "zip: zip64 end-of-central-directory record is not right before its locator"
            )
        fields = ZIP64_EOCD.unpack(mf.read(rec_at, ZIP64_EOCD.size))
        if fields[0] != b"PK\x06\x06":
            raise NotVerifiedError("zip: bad zip64 end-of-central-directory record")
        cd_size, cd_offset = int(fields[8]), int(fields[9])
        cd_end = rec_at
    if cd_offset + cd_size != cd_end:
        raise NotVerifiedError(
            f"zip: central directory at {cd_offset}+{cd_size} does not end at the"
            f" end-of-central-directory record ({cd_end}): data in front of the archive or"
            " a second directory, which readers resolve differently"
        )
    if zf.start_dir != cd_offset:
        raise NotVerifiedError("zip: offsets need adjusting for data in front of the archive")
    infos = sorted(zf.infolist(), key=lambda i: i.header_offset)
    if infos and infos[0].header_offset != 0:
        raise NotVerifiedError(f"zip: {infos[0].header_offset} bytes before the first local header")
    limit = cd_offset
    for info in reversed(infos):
        start = _local_data_offset(mf, info)
        if start + info.compress_size > limit:
            raise NotVerifiedError(
                f"zip member {info.filename!r}: data overlaps the next member or the"
                " central directory"
            )
        limit = info.header_offset


def _local_data_offset(mf: MappedFile, info: zipfile.ZipInfo) -> int:
    """Offset of a member's (possibly compressed) data, after checking its local header."""
    raw = mf.read(info.header_offset, LOCAL_HEADER.size)
    fields = LOCAL_HEADER.unpack(raw)
    if fields[0] != b"PK\x03\x04":
        raise NotVerifiedError(f"zip member {info.filename!r}: bad local header")
    name_len, extra_len = int(fields[9]), int(fields[10])
    name = mf.read(info.header_offset + LOCAL_HEADER.size, name_len)
    if name.decode("utf-8", "replace") != info.filename and name.decode("cp437") != info.filename:
        raise NotVerifiedError(f"zip member {info.filename!r}: local header names {name!r}")
    return int(info.header_offset + LOCAL_HEADER.size + name_len + extra_len)


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
            return self.mf.view(self.data_offset + offset_bytes, n_bytes)
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
