"""Chunked scanning of tensor bytes, in place (memory map) or from a stream.

Bytes are viewed as a sequence of *units* of ``unit_bytes`` each (one element,
one complex element, or one quantization block) and each unit holds one or more
float *fields* at fixed byte offsets. Plain float tensors are units of one field
at offset 0; a GGUF Q2_K block is a 84-byte unit with two f16 fields at 80 and
82. Chunks of about :data:`CHUNK_BYTES` are checked on a small thread pool (numpy
releases the GIL inside reductions), and mapped pages are dropped after each
chunk so resident memory stays bounded whatever the file size.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .dtypes import FloatCode
from .errors import NotVerifiedError
from .finite import Counts, UIntArray, any_nonfinite, scan_values, uint_dtype
from .regular import open_regular

#: Bytes checked per chunk; a few MiB keeps a chunk cache-resident between the
#: two reductions of the fast path.
CHUNK_BYTES = 4 << 20
#: Chunks one thread checks in a row before dropping their pages at once: each
#: ``MADV_DONTNEED`` of a process with several threads interrupts the others to flush
#: their TLBs, so a few large drops cost less than many small ones.
CHUNKS_PER_RELEASE = 4

ProgressFn = Callable[[int], None]


@dataclass(frozen=True)
class Field:
    """One float value inside a unit.

    Attributes:
        offset_bytes: Byte offset of the value from the start of its unit.
        code: Encoding rule of the value.
        extract: For values not stored contiguously (GGUF IQ1_M), a function from
            the ``(n_units, unit_bytes)`` uint8 rows to the ``(n_units,)`` patterns.
    """

    offset_bytes: int
    code: FloatCode
    extract: Callable[[UIntArray], UIntArray] | None = None


@dataclass
class ScanContext:
    """Shared settings of one verification run.

    Attributes:
        executor: Thread pool for chunk checks, or ``None`` to check inline.
        progress: Called with the number of bytes just checked.
        chunk_bytes: Target chunk size in bytes.
        mapped: Read files through a memory map (the fastest). False reads each chunk
            with ``pread(2)`` into memory instead: a file that shrinks while it is read
            is then reported not verified, where a map's access past the new end kills
            the whole process with SIGBUS (mmap(2)). The daemon's ship watch reads with
            False: it must outlive whatever a writer does to a file under it.
    """

    executor: Executor | None = None
    progress: ProgressFn | None = None
    chunk_bytes: int = CHUNK_BYTES
    mapped: bool = True
    _owned: bool = field(default=False, repr=False)

    @classmethod
    def default(cls, progress: ProgressFn | None = None, *, mapped: bool = True) -> ScanContext:
        """A context with a pool of ``min(2, cpu count)`` threads (closed by :meth:`close`)."""
        workers = min(2, os.cpu_count() or 1)
        pool = ThreadPoolExecutor(max_workers=workers) if workers > 1 else None
        return cls(executor=pool, progress=progress, mapped=mapped, _owned=pool is not None)

    def close(self) -> None:
        """Shut down the thread pool if this context created it."""
        if self._owned and self.executor is not None:
            self.executor.shutdown(wait=True)
            self.executor = None

    def tick(self, n_bytes: int) -> None:
        """Report progress of ``n_bytes`` checked bytes."""
        if self.progress is not None:
            self.progress(n_bytes)


def _field_views(
    data: UIntArray, n_units: int, unit_bytes: int, fields: Sequence[Field], byteorder: str
) -> Iterator[tuple[FloatCode, UIntArray]]:
    """Yield ``(code, values)`` per field of ``n_units`` units held in uint8 ``data``."""
    if len(fields) == 1 and fields[0].offset_bytes == 0 and fields[0].code.nbytes == unit_bytes:
        code = fields[0].code
        yield code, data.view(uint_dtype(code.bits, byteorder))
        return
    rows = data.reshape(n_units, unit_bytes)
    for f in fields:
        if f.extract is not None:
            yield f.code, f.extract(rows)
            continue
        col = rows[:, f.offset_bytes : f.offset_bytes + f.code.nbytes]
        yield f.code, col.view(uint_dtype(f.code.bits, byteorder))[:, 0]


def check_units(
    data: UIntArray, unit_bytes: int, fields: Sequence[Field], byteorder: str = "<"
) -> Counts:
    """Counts over whole units in a uint8 array.

    Args:
        data: ``n * unit_bytes`` raw bytes as a uint8 array.
        unit_bytes: Size of one unit in bytes.
        fields: Float fields of each unit.
        byteorder: ``"<"`` or ``">"``.

    Returns:
        Summed counts of all fields; ``first_bad`` is a unit index into ``data``.
    """
    n_units = data.size // unit_bytes
    total = Counts()
    if _tiles_unit(unit_bytes, fields):
        # Complex elements: both parts share one rule and fill the unit, so the whole
        # run is tested as one contiguous array first; parts are counted apart only
        # when something is non-finite.
        code = fields[0].code
        if not any_nonfinite(code, data.view(uint_dtype(code.bits, byteorder))):
            return total
    for code, values in _field_views(data, n_units, unit_bytes, fields, byteorder):
        total.add(scan_values(code, values))
    return total


def _tiles_unit(unit_bytes: int, fields: Sequence[Field]) -> bool:
    """Several fields of one rule laid side by side from offset 0 filling the unit."""
    if len(fields) < 2 or any(f.extract is not None for f in fields):
        return False
    code = fields[0].code
    return len(fields) * code.nbytes == unit_bytes and all(
        f.code == code and f.offset_bytes == i * code.nbytes for i, f in enumerate(fields)
    )


class MappedFile:
    """A read-only memory map of a whole file, releasing pages after each chunk; or,
    with ``mapped=False``, the same reads done with ``pread(2)``.

    Args:
        path: File to map.
        mapped: False: no map (see :attr:`ScanContext.mapped`).

    Raises:
        NotRegularError: The path is a FIFO, device, socket or directory.
        OSError: The file cannot be opened or mapped.
    """

    def __init__(self, path: str | os.PathLike[str], mapped: bool = True) -> None:
        self._fh = open_regular(path)  # closed in close(); never a FIFO or device
        self.size = os.fstat(self._fh.fileno()).st_size
        self.mm: mmap.mmap | None = None
        if self.size and mapped:
            self.mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)

    def read(self, offset: int, n_bytes: int) -> bytes:
        """Copy ``n_bytes`` at ``offset``.

        Raises:
            NotVerifiedError: The range is outside the file, or (unmapped) the file
                shrank while it was read.
        """
        return bytes(self.view(offset, n_bytes))

    def view(self, offset: int, n_bytes: int) -> memoryview:
        """``n_bytes`` at ``offset``: a view of the map, or (unmapped) a buffer read now.

        Raises:
            NotVerifiedError: The range is outside the file, or (unmapped) the file
                shrank while it was read.
        """
        if offset < 0 or n_bytes < 0 or offset + n_bytes > self.size:
            raise NotVerifiedError(
                f"truncated: need bytes {offset}..{offset + n_bytes}, file has {self.size}"
            )
        if n_bytes == 0:
            return memoryview(b"")
        if self.mm is not None:
            return memoryview(self.mm)[offset : offset + n_bytes]
        data = os.pread(self._fh.fileno(), n_bytes, offset)
        if len(data) != n_bytes:
            raise NotVerifiedError(
                f"the file shrank while it was read: bytes {offset}..{offset + n_bytes} "
                f"of the {self.size} it had are gone"
            )
        return memoryview(data)

    def release(self, offset: int, n_bytes: int) -> None:
        """Drop mapped pages of a range from this process (the page cache keeps them)."""
        if self.mm is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        start = offset - offset % page
        end = min(self.size, offset + n_bytes)
        if end > start:
            with contextlib.suppress(OSError, ValueError):  # advisory only
                self.mm.madvise(mmap.MADV_DONTNEED, start, end - start)

    def close(self) -> None:
        """Unmap and close."""
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        self._fh.close()

    def __enter__(self) -> MappedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PendingCounts:
    """Counts of a mapped range whose chunks may still be checked on the thread pool.

    Several ranges (the tensors of one file) can be in flight at once, so both
    threads stay busy across tensor boundaries and small tensors. :meth:`result`
    waits and sums; :func:`gather` collects many and never leaves a chunk running
    on a mapping that is about to be closed.
    """

    def __init__(self, parts: list[tuple[int, Future[tuple[int, Counts]]]] | Counts) -> None:
        self._parts = parts

    def result(self) -> Counts:
        """Summed counts; ``first_bad`` is a unit index from the range start.

        Raises:
            Exception: Whatever a chunk check raised.
        """
        if isinstance(self._parts, Counts):
            return self._parts
        total = Counts()
        for _, fut in self._parts:
            first_unit, counts = fut.result()
            total.add(counts, first_unit)
        return total

    def cancel(self) -> None:
        """Cancel chunks not started and wait for those running (errors ignored)."""
        if isinstance(self._parts, Counts):
            return
        for _, fut in self._parts:
            fut.cancel()
        for _, fut in self._parts:
            if not fut.cancelled():
                with contextlib.suppress(Exception):
                    fut.result()


def gather(pending: Sequence[PendingCounts]) -> list[Counts]:
    """Results of several :class:`PendingCounts`, in order.

    Raises:
        Exception: The first error of any chunk; every other chunk is cancelled or
            waited for first, so none still reads the mapping.
    """
    try:
        return [p.result() for p in pending]
    except BaseException:
        for p in pending:
            p.cancel()
        raise


def gather_quietly(pending: Sequence[PendingCounts]) -> None:
    """Cancel or wait for every chunk of ``pending``, ignoring results and errors."""
    for p in pending:
        p.cancel()


def scan_mapped_async(
    mf: MappedFile,
    offset_bytes: int,
    n_units: int,
    unit_bytes: int,
    fields: Sequence[Field],
    ctx: ScanContext,
    byteorder: str = "<",
) -> PendingCounts:
    """Start checking ``n_units`` units at ``offset_bytes`` of a mapped file, in chunks.

    With a thread pool the chunks are queued on it and this returns at once; without
    one they are checked before it returns. Keep ``mf`` open until the result is
    taken (use :func:`gather` for several).

    Args:
        mf: The mapped file.
        offset_bytes: Start of the first unit.
        n_units: Number of units.
        unit_bytes: Bytes per unit.
        fields: Float fields of each unit.
        ctx: Thread pool, progress and chunk size.
        byteorder: ``"<"`` or ``">"``.

    Returns:
        The pending counts (``first_bad`` as a unit index from ``offset_bytes``).

    Raises:
        NotVerifiedError: The range extends past the end of the file.
    """
    total_bytes = n_units * unit_bytes
    if offset_bytes < 0 or offset_bytes + total_bytes > mf.size:
        raise NotVerifiedError(
            f"truncated: tensor bytes {offset_bytes}..{offset_bytes + total_bytes} "
            f"outside file of {mf.size} bytes"
        )
    if n_units == 0:
        return PendingCounts(Counts())
    per_chunk = max(1, ctx.chunk_bytes // unit_bytes)
    per_task = per_chunk * CHUNKS_PER_RELEASE

    def one(first_unit: int) -> tuple[int, Counts]:
        counts = Counts()
        end_unit = min(first_unit + per_task, n_units)
        for unit in range(first_unit, end_unit, per_chunk):
            k = min(per_chunk, end_unit - unit)
            start = offset_bytes + unit * unit_bytes
            data = np.frombuffer(mf.view(start, k * unit_bytes), dtype=np.uint8)
            try:
                counts.add(check_units(data, unit_bytes, fields, byteorder), unit - first_unit)
            finally:
                del data
            ctx.tick(k * unit_bytes)
        first_byte = offset_bytes + first_unit * unit_bytes
        mf.release(first_byte, (end_unit - first_unit) * unit_bytes)
        return first_unit, counts

    starts = range(0, n_units, per_task)
    if ctx.executor is None:
        total = Counts()
        for first_unit, counts in map(one, starts):
            total.add(counts, first_unit)
        return PendingCounts(total)
    return PendingCounts([(s, ctx.executor.submit(one, s)) for s in starts])


def scan_mapped(
    mf: MappedFile,
    offset_bytes: int,
    n_units: int,
    unit_bytes: int,
    fields: Sequence[Field],
    ctx: ScanContext,
    byteorder: str = "<",
) -> Counts:
    """Check ``n_units`` units starting at ``offset_bytes`` of a mapped file, in chunks.

    Args:
        mf: The mapped file.
        offset_bytes: Start of the first unit.
        n_units: Number of units.
        unit_bytes: Bytes per unit.
        fields: Float fields of each unit.
        ctx: Thread pool, progress and chunk size.
        byteorder: ``"<"`` or ``">"``.

    Returns:
        Counts with ``first_bad`` as a unit index from ``offset_bytes``.

    Raises:
        NotVerifiedError: The range extends past the end of the file.
    """
    return gather(
        [scan_mapped_async(mf, offset_bytes, n_units, unit_bytes, fields, ctx, byteorder)]
    )[0]


def scan_stream(
    read: Callable[[int], bytes],
    n_units: int,
    unit_bytes: int,
    fields: Sequence[Field],
    ctx: ScanContext,
    byteorder: str = "<",
) -> Counts:
    """Check ``n_units`` units read sequentially from ``read(n) -> bytes`` (e.g. a zip member).

    Raises:
        NotVerifiedError: The stream ends before ``n_units * unit_bytes`` bytes.
    """
    per_chunk = max(1, ctx.chunk_bytes // unit_bytes)
    total = Counts()
    done = 0
    while done < n_units:
        k = min(per_chunk, n_units - done)
        want = k * unit_bytes
        parts: list[bytes] = []
        got = 0
        while got < want:
            piece = read(want - got)
            if not piece:
                raise NotVerifiedError(
                    f"truncated stream: got {done * unit_bytes + got} of "
                    f"{n_units * unit_bytes} bytes"
                )
            parts.append(piece)
            got += len(piece)
        raw = parts[0] if len(parts) == 1 else b"".join(parts)
        data = np.frombuffer(raw, dtype=np.uint8)
        total.add(check_units(data, unit_bytes, fields, byteorder), done)
        ctx.tick(want)
        done += k
    return total


def element_layout(code: FloatCode, components: int = 1) -> tuple[int, list[Field]]:
    """``(unit_bytes, fields)`` for a tensor whose units are single elements.

    A complex element is one unit with a real and an imaginary field, so unit
    indices are element indices.
    """
    return code.nbytes * components, [Field(i * code.nbytes, code) for i in range(components)]
