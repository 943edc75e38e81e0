"""The one-pass float test of fp32/fp64/complex data agrees with the bit patterns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rogue_watchdog.weights import finite, verify
from rogue_watchdog.weights.dtypes import F32, F64
from rogue_watchdog.weights.finite import SUM_COLUMNS, any_nonfinite, scan_values

from .builders import st_array, write_safetensors


def test_the_float_sum_path_is_in_use_here() -> None:
    assert finite._FLOAT_SUMS_OK  # the self-test passed on this numpy and CPU


@pytest.mark.parametrize(
    ("ftype", "code", "utype"), [(np.float32, F32, "<u4"), (np.float64, F64, "<u8")]
)
@pytest.mark.parametrize("pos", [0, 5, SUM_COLUMNS - 1, SUM_COLUMNS, 3 * SUM_COLUMNS + 2])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_any_position_any_kind_is_caught(
    ftype: type, code: object, utype: str, pos: int, value: float
) -> None:
    x = np.linspace(-1, 1, 3 * SUM_COLUMNS + 3).astype(ftype)  # a tail past the full rows
    assert not any_nonfinite(code, x.view(utype))  # type: ignore[arg-type]
    x[pos] = value
    u = x.view(utype)
    assert any_nonfinite(code, u)  # type: ignore[arg-type]
    c = scan_values(code, u)  # type: ignore[arg-type]
    assert (c.nan, c.posinf, c.neginf, c.first_bad) == (
        int(np.isnan(value)),
        int(value == np.inf),
        int(value == -np.inf),
        pos,
    )


def test_sums_that_overflow_are_finite_after_counting(tmp_path: Path) -> None:
    big = np.full(4 * SUM_COLUMNS, 3e38, np.float32)  # column sums overflow to +Inf
    p = write_safetensors(tmp_path / "big.safetensors", {"w": st_array(big, "F32")})
    report = verify(p)
    assert report.exit_code == 0
    assert report.files[0].tensors[0].nan == 0


def test_complex_parts_still_counted_apart(tmp_path: Path) -> None:
    z = np.ones(3 * SUM_COLUMNS, np.complex64)
    z[SUM_COLUMNS + 1] = complex(np.nan, 1.0)
    z[2 * SUM_COLUMNS] = complex(1.0, -np.inf)
    p = write_safetensors(tmp_path / "c.safetensors", {"z": st_array(z, "C64")})
    [t] = verify(p).files[0].tensors
    assert (t.nan, t.posinf, t.neginf, t.first_bad_index) == (1, 0, 1, SUM_COLUMNS + 1)
