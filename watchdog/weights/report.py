"""Verification results: per tensor, per file, and for a whole run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


class Status(StrEnum):
    """Outcome of verifying one file."""

    FINITE = "finite"
    NON_FINITE = "non-finite"
    NOT_VERIFIED = "not-verified"


@dataclass
class TensorReport:
    """Result for one tensor.

    Attributes:
        name: Tensor name (safetensors key, state-dict key path, npz member, GGUF name).
        dtype: Element type as the file names it.
        shape: Logical shape in elements.
        checked: False when the type cannot hold non-finite values (integers,
            bool, FP4/FP6), so values were not scanned.
        nan: NaN count.
        posinf: +Inf count.
        neginf: -Inf count.
        first_bad_index: C-order flat element index of the first non-finite value
            in storage order (column-major for a Fortran-ordered ``.npy``; for a
            strided torch view, the first of the view's own elements in C order), or
            ``None``. For quantized tensors this is the first element of the first
            block whose scale is non-finite.
        unit: What the counts count: ``"element"``, or ``"block-scale"`` for
            quantized GGUF tensors (one bad scale poisons its whole block).
        note: Extra detail about how the tensor was checked, or ``None``.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    checked: bool = True
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    first_bad_index: int | None = None
    unit: str = "element"
    note: str | None = None

    @property
    def nonfinite(self) -> bool:
        """True when any NaN or infinity was found."""
        return self.nan + self.posinf + self.neginf > 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping with stable keys."""
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "checked": self.checked,
            "nan": self.nan,
            "posinf": self.posinf,
            "neginf": self.neginf,
            "first_bad_index": self.first_bad_index,
            "unit": self.unit,
            "note": self.note,
        }


@dataclass
class FileReport:
    """Result for one file.

    Attributes:
        path: The file.
        format: Detected format (``safetensors``, ``torch-zip``, ``npy``, ``npz``,
            ``gguf``, ``safetensors-index``) or ``unknown``.
        tensors: Per-tensor results, in file order.
        error: Why the file is not verified, or ``None``.
    """

    path: Path
    format: str
    tensors: list[TensorReport] = field(default_factory=list)
    error: str | None = None

    @property
    def status(self) -> Status:
        """Non-finite beats not-verified beats finite (both refuse)."""
        if any(t.nonfinite for t in self.tensors):
            return Status.NON_FINITE
        if self.error is not None:
            return Status.NOT_VERIFIED
        return Status.FINITE

    @property
    def ok(self) -> bool:
        """True only when the file was fully read and every value is finite."""
        return self.status is Status.FINITE

    @property
    def bad_tensors(self) -> list[TensorReport]:
        """Tensors holding at least one non-finite value."""
        return [t for t in self.tensors if t.nonfinite]

    def totals(self) -> dict[str, int]:
        """Summed counts: ``tensors``, ``bad_tensors``, ``nan``, ``posinf``, ``neginf``."""
        return {
            "tensors": len(self.tensors),
            "bad_tensors": len(self.bad_tensors),
            "nan": sum(t.nan for t in self.tensors),
            "posinf": sum(t.posinf for t in self.tensors),
            "neginf": sum(t.neginf for t in self.tensors),
        }

    def summary(self) -> str:
        """One line, e.g. ``REFUSED model.safetensors: 224 of 224 tensors non-finite``."""
        n = len(self.tensors)
        status = self.status
        if status is Status.NON_FINITE:
            line = f"REFUSED {self.path}: {len(self.bad_tensors)} of {n} tensors non-finite"
            if self.error:
                line += f" (and not fully verified: {self.error})"
            return line
        if status is Status.NOT_VERIFIED:
            return f"NOT VERIFIED {self.path}: {self.error}"
        skipped = sum(1 for t in self.tensors if not t.checked)
        extra = f" ({skipped} cannot hold non-finite values)" if skipped else ""
        return f"OK {self.path}: {n} tensor{'' if n == 1 else 's'} finite{extra}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping with stable keys."""
        return {
            "path": str(self.path),
            "format": self.format,
            "status": self.status.value,
            "error": self.error,
            "totals": self.totals(),
            "tensors": [t.to_dict() for t in self.tensors],
        }


@dataclass
class Report:
    """Result of verifying one or more paths.

    Attributes:
        files: One entry per weights file (and per failed index, unreadable or empty
            directory).
        notes: What the walk skipped or found outside a model directory, and why.
    """

    files: list[FileReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True only when there is at least one file and every file is finite."""
        return bool(self.files) and all(f.ok for f in self.files)

    @property
    def exit_code(self) -> int:
        """0 all finite, 1 non-finite found anywhere, 2 otherwise not verified."""
        if any(f.status is Status.NON_FINITE for f in self.files):
            return 1
        if not self.ok:
            return 2
        return 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping with stable keys."""
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "files": [f.to_dict() for f in self.files],
            "notes": list(self.notes),
        }

    def to_json(self) -> str:
        """The report as a JSON document."""
        return json.dumps(self.to_dict(), indent=2)

    def render_text(self) -> str:
        """Human report: a table of non-finite tensors per file, then summary lines."""
        lines: list[str] = []
        for f in self.files:
            bad = f.bad_tensors
            if bad:
                lines.append(f"{f.path}:")
                lines.append("  tensor\tdtype\tshape\tNaN\t+Inf\t-Inf\tfirst_bad_index\tunit")
                for t in bad:
                    shape = "x".join(str(d) for d in t.shape) or "scalar"
                    lines.append(
                        f"  {t.name}\t{t.dtype}\t{shape}\t{t.nan}\t{t.posinf}\t{t.neginf}"
                        f"\t{t.first_bad_index}\t{t.unit}"
                    )
        lines.extend(f"NOTE {n}" for n in self.notes)
        lines.extend(f.summary() for f in self.files)
        return "\n".join(lines)
