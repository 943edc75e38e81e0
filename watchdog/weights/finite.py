"""Bit-mask non-finite checks over unsigned-integer views of raw tensor bytes.

A check never converts values to floating point: each value is read as the
unsigned integer that stores it and compared against the patterns of its
:class:`~watchdog.weights.dtypes.FloatCode`. Arrays may be strided views (for
example the scale field of every quantization block).

The fast test of F16, BF16, E5M2 and E4M3FN values is compiled C where the optional
extension ``_finitec`` was built (setup.py; watchdog/weights/_finitec.c): one read of
the data instead of numpy's two reductions (issue 34, item 4; docs/performance.md). It
is used only after it agrees with the bit-pattern rules on probes at import (every
finite pattern, non-finite ones planted at every position of a short buffer, aligned
and not), only on little-endian hosts and only for contiguous little-endian arrays;
everything else, and every host without it, takes the numpy path.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .dtypes import BF16, E4M3FN, E5M2, F16, F32, F64, FloatCode

UIntArray = npt.NDArray[np.unsignedinteger]

_UINT = {8: "u1", 16: "u2", 32: "u4", 64: "u8"}
_SINT = {8: "i1", 16: "i2", 32: "i4", 64: "i8"}
_IEEE_FLOATS: dict[FloatCode, np.dtype[np.floating]] = {
    F32: np.dtype(np.float32),
    F64: np.dtype(np.float64),
}
_NATIVE = "<" if sys.byteorder == "little" else ">"

#: Columns of the vertical sum in :func:`_float_sums_finite`: the accumulator row
#: (4-8 KiB) stays in L1 while each row of the input streams past it once.
SUM_COLUMNS = 1024


def _float_sums_finite(values: UIntArray, ftype: np.dtype[np.floating]) -> bool:
    """True only if every value, read as an IEEE float, is finite; one read of the data.

    The values are summed column-wise (``add.reduce`` over axis 0 of a
    ``(rows, SUM_COLUMNS)`` view). IEEE 754 addition carries a NaN or an infinity into
    the sum (NaN + x = NaN, Inf + finite = Inf, Inf + -Inf = NaN), so all column sums
    finite proves all values finite. A sum that overflows is only a false alarm:
    the caller then counts exactly. The leftover tail is tested by its bit patterns.
    """
    floats = values.view(ftype)
    n_rows = floats.size // SUM_COLUMNS
    body = n_rows * SUM_COLUMNS
    with np.errstate(all="ignore"):  # overflow and invalid are the signal, not an error
        sums = np.add.reduce(floats[:body].reshape(n_rows, SUM_COLUMNS), axis=0)
        finite = bool(np.isfinite(sums).all()) if n_rows else True
    if not finite:
        return False
    tail = floats[body:]
    return bool(np.isfinite(tail).all()) if tail.size else True


def _float_sums_trustworthy() -> bool:
    """Self-test of :func:`_float_sums_finite` on this numpy build and CPU.

    A build that flushed or skipped non-finite values in the summation loop would let
    a NaN through; then the bit-pattern reductions are used instead.
    """
    for code, ftype in _IEEE_FLOATS.items():
        utype = np.dtype(_NATIVE + _UINT[code.bits])
        base = np.linspace(-3.0, 3.0, 3 * SUM_COLUMNS + 5).astype(ftype)
        if not _float_sums_finite(base.view(utype), ftype):
            return False
        inf = code.inf_code or 0
        patterns = [code.nan_lo, code.nan_hi, code.sign_bit | code.nan_lo, inf, code.sign_bit | inf]
        for pos in (0, SUM_COLUMNS - 1, 2 * SUM_COLUMNS + 7, base.size - 1):
            for bits in patterns:
                probe = base.copy().view(utype)
                probe[pos] = bits
                if _float_sums_finite(probe, ftype):
                    return False
    return True


_FLOAT_SUMS_OK = _float_sums_trustworthy()

#: ``kernel(values, itemsize, bad_lo)``: True when any magnitude is at least ``bad_lo``.
Kernel = Callable[[UIntArray, int, int], bool]

#: The codes the compiled check serves: sign-magnitude formats whose non-finite
#: magnitudes are exactly those at or above ``bad_lo``, 8 or 16 bits wide.
KERNEL_CODES = (F16, BF16, E5M2, E4M3FN)

#: Bytes of the self-test's largest probes: over the 64 KiB from which the compiled
#: check releases the GIL (``RELEASE_GIL_BYTES`` in _finitec.c), so both of its
#: branches are tested.
KERNEL_LARGE_BYTES = 1 << 17


def _bad_mask(code: FloatCode, values: UIntArray) -> npt.NDArray[np.bool_]:
    """Elementwise :meth:`FloatCode.classify` != "finite": the definition, no shortcut."""
    mag = values & values.dtype.type(code.abs_mask)
    bad = (mag >= code.nan_lo) & (mag <= code.nan_hi)
    if code.inf_code is not None:
        bad |= mag == code.inf_code
    return bad


def _kernel_probes(code: FloatCode) -> list[tuple[UIntArray, bool]]:
    """Arrays and the answer each must get: every finite pattern (aligned and at an odd
    byte address), boundary non-finite patterns planted at every position of a buffer
    spanning three vector steps and a tail, then at a few positions unaligned, and a
    buffer of :data:`KERNEL_LARGE_BYTES` clean and with one non-finite value."""
    utype = np.dtype(_NATIVE + _UINT[code.bits])
    every = np.arange(1 << code.bits, dtype=utype)
    bad = _bad_mask(code, every)
    finite = every[~bad]
    shifted = np.frombuffer(b"\0" + finite.tobytes(), dtype=utype, offset=1)
    probes: list[tuple[UIntArray, bool]] = [(finite, False), (shifted, False)]
    step = 64 // code.nbytes  # words per step of the kernel's vector loop
    base = finite[: 3 * step + 5].copy()
    raw = b"\0" + base.tobytes()
    nonfinite = [int(v) for v in every[bad]]
    for pos in range(base.size):
        probe = base.copy()
        probe[pos] = code.bad_lo
        probes.append((probe, True))
    for bits in sorted({nonfinite[0], nonfinite[-1], code.sign_bit | code.bad_lo}):
        for pos in (0, step - 1, step, base.size - 1):
            probe = np.frombuffer(raw, dtype=utype, offset=1).copy()
            probe[pos] = bits
            unaligned = np.frombuffer(b"\0" + probe.tobytes(), dtype=utype, offset=1)
            probes += [(probe, True), (unaligned, True)]
    # Long enough that the C code releases the GIL (its RELEASE_GIL_BYTES, 64 KiB): a
    # build blind only on that branch would otherwise pass the probes above and miss
    # every non-finite value in a tensor's chunks.
    large = np.resize(finite, KERNEL_LARGE_BYTES // code.nbytes + 5)  # + 5: a tail
    probes.append((large, False))
    for pos in (large.size // 2 + 1, large.size - 1):  # in the vector loop, in the tail
        probe = large.copy()
        probe[pos] = code.bad_lo
        probes.append((probe, True))
    return probes


def _kernel_trustworthy(kernel: Kernel) -> bool:
    """Self-test of the compiled check against the bit-pattern definition, on this
    build and CPU: any disagreement (a miscompiled or stale module) and numpy decides."""
    try:
        for code in KERNEL_CODES:
            for probe, want in _kernel_probes(code):
                if kernel(probe, code.nbytes, code.bad_lo) is not want:
                    return False
    except Exception:  # whatever a broken build raises, numpy's path still answers
        return False
    return True


def _loadable_elf(path: str) -> bool:
    """Whether every loadable segment (``PT_LOAD``) of the ELF file ``path`` lies inside
    the file: the dynamic loader maps them, and touching a page past the end of a file
    cut short (a full disk, an interrupted install) kills the process with SIGBUS, in the
    import, before any self-test runs. Source: the ELF header and program header layouts
    of the System V gABI (``e_phoff`` at 32/28, ``e_phentsize``/``e_phnum`` at 54/42;
    ``p_offset``, ``p_filesz`` at 8, 32 in ELF64 and 4, 16 in ELF32)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(64)
            if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2):
                return False
            wide = head[4] == 2
            order = "<" if head[5] == 1 else ">"
            if wide and len(head) < 64:
                return False
            (phoff,) = struct.unpack_from(order + ("Q" if wide else "I"), head, 32 if wide else 28)
            entsize, count = struct.unpack_from(order + "HH", head, 54 if wide else 42)
            fh.seek(phoff)
            table = fh.read(entsize * count)
    except OSError:
        return False
    if len(table) < entsize * count or entsize < (56 if wide else 32):
        return False
    for i in range(count):
        entry = table[i * entsize : (i + 1) * entsize]
        (kind,) = struct.unpack_from(order + "I", entry, 0)
        if wide:
            (offset,), (filesz,) = (struct.unpack_from(order + "Q", entry, o) for o in (8, 32))
        else:
            (offset,), (filesz,) = (struct.unpack_from(order + "I", entry, o) for o in (4, 16))
        if kind == 1 and offset + filesz > size:
            return False
    return True


def _kernel_file_whole() -> bool:
    """False when the module's file on a Linux host is an ELF file cut short (or not one
    at all): importing it would crash the process (:func:`_loadable_elf`)."""
    name = f"{__package__}._finitec"
    if name in sys.modules or not sys.platform.startswith("linux"):
        return True  # loaded already (nothing is mapped again), or not an ELF platform
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return True  # nothing to map: the import fails (ImportError) and numpy answers
    return _loadable_elf(spec.origin)


def _load_kernel() -> Kernel | None:
    """The compiled check, or ``None``: not built, cut short, not trusted, or a
    big-endian host (where it was never run; numpy's reductions are right on every
    host)."""
    if sys.byteorder != "little" or not _kernel_file_whole():
        return None
    try:
        from ._finitec import any_nonfinite as kernel
    except ImportError:
        return None
    return kernel if _kernel_trustworthy(kernel) else None


_KERNEL = _load_kernel()


def uint_dtype(bits: int, byteorder: str = "<") -> np.dtype[np.unsignedinteger]:
    """Numpy unsigned dtype of ``bits`` width and ``byteorder`` (``"<"`` or ``">"``).

    Raises:
        KeyError: ``bits`` is not 8, 16, 32 or 64.
    """
    return np.dtype(byteorder + _UINT[bits])


@dataclass
class Counts:
    """Non-finite counts of a run of values.

    Attributes:
        nan: Number of NaN values.
        posinf: Number of +Inf values.
        neginf: Number of -Inf values.
        first_bad: Index (in the caller's units) of the first non-finite value,
            or ``None`` when all values are finite.
    """

    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    first_bad: int | None = None

    @property
    def bad(self) -> int:
        """Total number of non-finite values."""
        return self.nan + self.posinf + self.neginf

    def add(self, other: Counts, index_offset: int = 0) -> None:
        """Accumulate ``other``, whose ``first_bad`` is relative to ``index_offset``."""
        self.nan += other.nan
        self.posinf += other.posinf
        self.neginf += other.neginf
        if other.first_bad is not None:
            idx = other.first_bad + index_offset
            if self.first_bad is None or idx < self.first_bad:
                self.first_bad = idx


def any_nonfinite(code: FloatCode, values: UIntArray) -> bool:
    """Fast test whether any value is non-finite.

    Contiguous little-endian fp16, bf16, e5m2 and e4m3fn values go to the compiled
    check where it is loaded (module docstring): one read of the data. Contiguous
    native fp32/fp64 values are summed column-wise as floats: one read of the data (see
    :func:`_float_sums_finite`). Other sign-magnitude values (strided, or without the
    compiled check) take two max-reductions and allocate nothing: a negative non-finite
    value is an unsigned maximum at or above ``sign | bad_lo`` and a positive one is a
    signed maximum at or above ``bad_lo``.

    Args:
        code: Encoding rule of the values.
        values: Unsigned integers of width ``code.bits`` (any shape, may be strided).

    Returns:
        True if at least one value is NaN or infinite.
    """
    if values.size == 0:
        return False
    if (
        _KERNEL is not None
        and values.flags.c_contiguous
        and values.dtype.byteorder in ("=", "|", "<")
        and values.dtype.itemsize == code.nbytes
        and code in KERNEL_CODES
    ):
        return _KERNEL(values, code.nbytes, code.bad_lo)
    ftype = _IEEE_FLOATS.get(code)
    if (
        ftype is not None
        and _FLOAT_SUMS_OK
        and values.ndim == 1
        and values.flags.c_contiguous
        and values.flags.aligned
        and values.dtype.byteorder in ("=", "|", _NATIVE)
        # One pass (read-only speed); when a sum is not finite (a non-finite value, or
        # only an overflow of huge finite values) the reductions below decide.
        and _float_sums_finite(values, ftype)
    ):
        return False
    if code.sign_magnitude:
        signed = values.view(values.dtype.byteorder + _SINT[code.bits])
        return bool(
            int(values.max()) >= code.sign_bit | code.bad_lo or int(signed.max()) >= code.bad_lo
        )
    if (
        code.inf_code is None
        and code.nan_lo == code.nan_hi
        and code.abs_mask == 2 * code.sign_bit - 1
    ):
        target = code.nan_lo
        if target == 2 * code.sign_bit - 1:
            return bool(int(values.max()) == target)
        if target == code.sign_bit:
            signed = values.view(values.dtype.byteorder + _SINT[code.bits])
            return bool(int(signed.min()) == -code.sign_bit)
    return count_nonfinite(code, values).bad > 0


def count_nonfinite(code: FloatCode, values: UIntArray) -> Counts:
    """Exact NaN/+Inf/-Inf counts and the first bad index of ``values``.

    Args:
        code: Encoding rule of the values.
        values: Unsigned integers of width ``code.bits``; flattened in C order.

    Returns:
        The counts; ``first_bad`` is the C-order flat index into ``values``.
    """
    flat = values.reshape(-1)
    if flat.size == 0:
        return Counts()
    full = 2 * code.sign_bit - 1
    mag = flat if code.abs_mask == full else flat & flat.dtype.type(code.abs_mask)
    is_nan = (mag >= code.nan_lo) & (mag <= code.nan_hi)
    out = Counts(nan=int(np.count_nonzero(is_nan)))
    bad = is_nan
    if code.inf_code is not None:
        is_inf = mag == code.inf_code
        if is_inf.any():
            neg = flat >= flat.dtype.type(code.sign_bit)
            out.neginf = int(np.count_nonzero(is_inf & neg))
            out.posinf = int(np.count_nonzero(is_inf)) - out.neginf
            bad = is_nan | is_inf
    if out.bad:
        out.first_bad = int(np.argmax(bad))
    return out


def scan_values(code: FloatCode, values: UIntArray) -> Counts:
    """Counts for ``values``: the fast test first, exact counting only if it fires."""
    if not any_nonfinite(code, values):
        return Counts()
    return count_nonfinite(code, values)
