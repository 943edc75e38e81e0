"""Element types and their non-finite bit patterns.

Every rule here is a pure bit-pattern test on the unsigned integer that stores a
value, so no floating-point support is needed from numpy for exotic formats.

Sources:
    * IEEE 754-2019 (binary16/32/64: exponent all ones is Inf or NaN).
    * bfloat16: the top 16 bits of binary32.
    * OCP 8-bit Floating Point Specification (OFP8) rev 1.0: E5M2 keeps IEEE
      Inf/NaN; E4M3 ("fn") has no Inf and NaN only at S.1111.111.
    * Graphcore/AMD "fnuz" FP8: NaN only at 0x80 (negative zero), no Inf.
    * OCP Microscaling Formats (MX) v1.0: E8M0 NaN only at 0xFF; FP4 E2M1 and
      FP6 E2M3/E3M2 have no non-finite encodings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FloatCode:
    """Bit-pattern rule telling which encodings of one float format are non-finite.

    Attributes:
        name: Human name of the encoding, e.g. ``"bf16"``.
        bits: Storage width in bits (8, 16, 32 or 64).
        abs_mask: Mask that clears the sign bit; all ones when the format has no
            sign-magnitude special values (fnuz, e8m0).
        inf_code: Magnitude bits (after ``abs_mask``) of infinity, or ``None``
            when the format has no infinity. The sign bit tells +Inf from -Inf.
        nan_lo: Lowest magnitude bits (after ``abs_mask``) that encode NaN.
        nan_hi: Highest magnitude bits that encode NaN (inclusive).
    """

    name: str
    bits: int
    abs_mask: int
    inf_code: int | None
    nan_lo: int
    nan_hi: int

    @property
    def nbytes(self) -> int:
        """Storage width in bytes."""
        return self.bits // 8

    @property
    def sign_bit(self) -> int:
        """Value of the top (sign) bit."""
        return 1 << (self.bits - 1)

    @property
    def sign_magnitude(self) -> bool:
        """True when every non-finite magnitude lies at the top of the magnitude range.

        Then "any non-finite" reduces to two max-reductions (unsigned and signed)
        with no temporary arrays, which is the fast path of the scanner.
        """
        return self.abs_mask == self.sign_bit - 1 and self.nan_hi == self.abs_mask

    @property
    def bad_lo(self) -> int:
        """Lowest magnitude that is non-finite (Inf or NaN)."""
        return self.nan_lo if self.inf_code is None else min(self.inf_code, self.nan_lo)

    def classify(self, pattern: int) -> str:
        """Classify one bit pattern.

        Args:
            pattern: The unsigned storage integer, ``0 <= pattern < 2**bits``.

        Returns:
            ``"nan"``, ``"+inf"``, ``"-inf"`` or ``"finite"``.
        """
        mag = pattern & self.abs_mask
        if self.nan_lo <= mag <= self.nan_hi:
            return "nan"
        if self.inf_code is not None and mag == self.inf_code:
            return "-inf" if pattern & self.sign_bit else "+inf"
        return "finite"


F64 = FloatCode(
    "f64",
    64,
    0x7FFF_FFFF_FFFF_FFFF,
    0x7FF0_0000_0000_0000,
    0x7FF0_0000_0000_0001,
    0x7FFF_FFFF_FFFF_FFFF,
)
F32 = FloatCode("f32", 32, 0x7FFF_FFFF, 0x7F80_0000, 0x7F80_0001, 0x7FFF_FFFF)
F16 = FloatCode("f16", 16, 0x7FFF, 0x7C00, 0x7C01, 0x7FFF)
BF16 = FloatCode("bf16", 16, 0x7FFF, 0x7F80, 0x7F81, 0x7FFF)
E5M2 = FloatCode("f8_e5m2", 8, 0x7F, 0x7C, 0x7D, 0x7F)
E4M3FN = FloatCode("f8_e4m3fn", 8, 0x7F, None, 0x7F, 0x7F)
E4M3FNUZ = FloatCode("f8_e4m3fnuz", 8, 0xFF, None, 0x80, 0x80)
E5M2FNUZ = FloatCode("f8_e5m2fnuz", 8, 0xFF, None, 0x80, 0x80)
E8M0 = FloatCode("f8_e8m0", 8, 0xFF, None, 0xFF, 0xFF)


@dataclass(frozen=True)
class DType:
    """An element type of a tensor file.

    Attributes:
        name: Name as the file format spells it (e.g. ``"BF16"``, ``"<f4"``).
        bits: Storage bits per element (4 for FP4; 64 for complex64).
        code: Non-finite rule of each component, or ``None`` when no encoding of
            the type is non-finite (integers, bool, FP4, FP6): such tensors are
            skipped after their size is validated.
        components: Float components per element (2 for complex).
    """

    name: str
    bits: int
    code: FloatCode | None
    components: int = 1

    @property
    def checked(self) -> bool:
        """True when values of this type can be non-finite and are scanned."""
        return self.code is not None

    def nbytes_for(self, n_elements: int) -> int | None:
        """Bytes needed for ``n_elements`` elements, or ``None`` if not whole bytes."""
        total_bits = n_elements * self.bits
        if total_bits % 8:
            return None
        return total_bits // 8


def _int(name: str, bits: int) -> DType:
    return DType(name, bits, None)


#: safetensors dtypes (huggingface/safetensors ``Dtype``), plus the fnuz FP8
#: variants and C128 named by some writers.
SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": _int("BOOL", 8),
    "U8": _int("U8", 8),
    "I8": _int("I8", 8),
    "U16": _int("U16", 16),
    "I16": _int("I16", 16),
    "U32": _int("U32", 32),
    "I32": _int("I32", 32),
    "U64": _int("U64", 64),
    "I64": _int("I64", 64),
    "F4": DType("F4", 4, None),
    "F6_E2M3": DType("F6_E2M3", 6, None),
    "F6_E3M2": DType("F6_E3M2", 6, None),
    "F8_E5M2": DType("F8_E5M2", 8, E5M2),
    "F8_E4M3": DType("F8_E4M3", 8, E4M3FN),
    "F8_E4M3FNUZ": DType("F8_E4M3FNUZ", 8, E4M3FNUZ),
    "F8_E5M2FNUZ": DType("F8_E5M2FNUZ", 8, E5M2FNUZ),
    "F8_E8M0": DType("F8_E8M0", 8, E8M0),
    "F16": DType("F16", 16, F16),
    "BF16": DType("BF16", 16, BF16),
    "F32": DType("F32", 32, F32),
    "F64": DType("F64", 64, F64),
    "C64": DType("C64", 64, F32, components=2),
    "C128": DType("C128", 128, F64, components=2),
}

#: PyTorch storage class names (``torch.<Name>``) as pickled by ``torch.save``.
TORCH_STORAGES: dict[str, DType] = {
    "DoubleStorage": DType("float64", 64, F64),
    "FloatStorage": DType("float32", 32, F32),
    "HalfStorage": DType("float16", 16, F16),
    "BFloat16Storage": DType("bfloat16", 16, BF16),
    "ComplexFloatStorage": DType("complex64", 64, F32, components=2),
    "ComplexDoubleStorage": DType("complex128", 128, F64, components=2),
    "Float8_e5m2Storage": DType("float8_e5m2", 8, E5M2),
    "Float8_e4m3fnStorage": DType("float8_e4m3fn", 8, E4M3FN),
    "Float8_e5m2fnuzStorage": DType("float8_e5m2fnuz", 8, E5M2FNUZ),
    "Float8_e4m3fnuzStorage": DType("float8_e4m3fnuz", 8, E4M3FNUZ),
    "Float8_e8m0fnuStorage": DType("float8_e8m0fnu", 8, E8M0),
    "LongStorage": _int("int64", 64),
    "IntStorage": _int("int32", 32),
    "ShortStorage": _int("int16", 16),
    "CharStorage": _int("int8", 8),
    "ByteStorage": _int("uint8", 8),
    "BoolStorage": _int("bool", 8),
    "UInt16Storage": _int("uint16", 16),
    "UInt32Storage": _int("uint32", 32),
    "UInt64Storage": _int("uint64", 64),
    "QInt8Storage": _int("qint8", 8),
    "QUInt8Storage": _int("quint8", 8),
    "QInt32Storage": _int("qint32", 32),
    "ComplexHalfStorage": DType("complex32", 32, F16, components=2),
}

#: ``torch.<name>`` dtypes as ``torch.save`` pickles them (the third-to-last argument
#: of ``torch._utils._rebuild_tensor_v3``; ``torch/_utils.py``, ``c10/core/ScalarType.h``),
#: with the usual aliases. Sub-byte integer and packed types take one byte per element
#: in a storage and hold no non-finite encoding.
TORCH_DTYPES: dict[str, DType] = {
    "float64": TORCH_STORAGES["DoubleStorage"],
    "float32": TORCH_STORAGES["FloatStorage"],
    "float16": TORCH_STORAGES["HalfStorage"],
    "bfloat16": TORCH_STORAGES["BFloat16Storage"],
    "complex32": DType("complex32", 32, F16, components=2),
    "complex64": TORCH_STORAGES["ComplexFloatStorage"],
    "complex128": TORCH_STORAGES["ComplexDoubleStorage"],
    "float8_e5m2": TORCH_STORAGES["Float8_e5m2Storage"],
    "float8_e4m3fn": TORCH_STORAGES["Float8_e4m3fnStorage"],
    "float8_e5m2fnuz": TORCH_STORAGES["Float8_e5m2fnuzStorage"],
    "float8_e4m3fnuz": TORCH_STORAGES["Float8_e4m3fnuzStorage"],
    "float8_e8m0fnu": TORCH_STORAGES["Float8_e8m0fnuStorage"],
    "float4_e2m1fn_x2": _int("float4_e2m1fn_x2", 8),
    "int64": _int("int64", 64),
    "int32": _int("int32", 32),
    "int16": _int("int16", 16),
    "int8": _int("int8", 8),
    "uint64": _int("uint64", 64),
    "uint32": _int("uint32", 32),
    "uint16": _int("uint16", 16),
    "uint8": _int("uint8", 8),
    "bool": _int("bool", 8),
    "qint8": _int("qint8", 8),
    "quint8": _int("quint8", 8),
    "qint32": _int("qint32", 32),
    "quint4x2": _int("quint4x2", 8),
    "quint2x4": _int("quint2x4", 8),
    "bits8": _int("bits8", 8),
    "bits16": _int("bits16", 16),
    "bits1x8": _int("bits1x8", 8),
    "bits2x4": _int("bits2x4", 8),
    "bits4x2": _int("bits4x2", 8),
    **{f"int{n}": _int(f"int{n}", 8) for n in range(1, 8)},
    **{f"uint{n}": _int(f"uint{n}", 8) for n in range(1, 8)},
}
for _alias, _name in (
    ("double", "float64"),
    ("float", "float32"),
    ("half", "float16"),
    ("chalf", "complex32"),
    ("cfloat", "complex64"),
    ("cdouble", "complex128"),
    ("long", "int64"),
    ("int", "int32"),
    ("short", "int16"),
):
    TORCH_DTYPES[_alias] = TORCH_DTYPES[_name]

#: NumPy type codes (``dtype.kind`` + itemsize) of the ``.npy`` header ``descr``.
NUMPY_FLOATS: dict[str, DType] = {
    "f2": DType("float16", 16, F16),
    "f4": DType("float32", 32, F32),
    "f8": DType("float64", 64, F64),
    "c8": DType("complex64", 64, F32, components=2),
    "c16": DType("complex128", 128, F64, components=2),
}
