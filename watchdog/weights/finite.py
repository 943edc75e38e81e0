"""Bit-mask non-finite checks over unsigned-integer views of raw tensor bytes.

A check never converts values to floating point: each value is read as the
unsigned integer that stores it and compared against the patterns of its
:class:`~watchdog.weights.dtypes.FloatCode`. Arrays may be strided views (for
example the scale field of every quantization block).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .dtypes import F32, F64, FloatCode

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

    Contiguous native fp32/fp64 values are summed column-wise as floats: one read
    of the data (see :func:`_float_sums_finite`). Other sign-magnitude formats
    (fp16, bf16, e5m2, e4m3fn) take two max-reductions and allocate nothing: a
    negative non-finite value is an unsigned maximum at or above ``sign | bad_lo``
    and a positive one is a signed maximum at or above ``bad_lo``.

    Args:
        code: Encoding rule of the values.
        values: Unsigned integers of width ``code.bits`` (any shape, may be strided).

    Returns:
        True if at least one value is NaN or infinite.
    """
    if values.size == 0:
        return False
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
