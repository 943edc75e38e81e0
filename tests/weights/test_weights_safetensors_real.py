"""safetensors files written by the ``safetensors`` package itself (its numpy API).

Hand-built files (tests/weights/builders.py) stay for what this writer never
produces: broken headers, holes, overlaps, truncation.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from rogue_watchdog.weights import verify
from tests.conftest import run_cli

# numpy dtype -> the safetensors dtype name the writer records
DTYPES = [
    ("float16", "F16"),
    ("float32", "F32"),
    ("float64", "F64"),
    (ml_dtypes.bfloat16, "BF16"),
    (ml_dtypes.float8_e4m3fn, "F8_E4M3"),
    (ml_dtypes.float8_e5m2, "F8_E5M2"),
    (ml_dtypes.float8_e4m3fnuz, "F8_E4M3FNUZ"),
    (ml_dtypes.float8_e5m2fnuz, "F8_E5M2FNUZ"),
    (ml_dtypes.float8_e8m0fnu, "F8_E8M0"),
    ("complex64", "C64"),
]
INTS = [("int8", "I8"), ("uint16", "U16"), ("uint32", "U32"), ("uint64", "U64"), ("bool", "BOOL")]


def test_every_dtype_the_writer_knows_passes_when_finite(tmp_path: Path) -> None:
    tensors = {
        name: np.ones((3, 4), dtype=dt) for dt, name in DTYPES + INTS
    }  # 1.0 is finite in every format, e8m0 included
    p = tmp_path / "model.safetensors"
    save_file(tensors, str(p), metadata={"format": "np"})
    [f] = verify(p).files
    assert f.summary() == f"OK {p}: 15 tensors finite (5 cannot hold non-finite values)"
    assert sorted((t.name, t.dtype, t.shape) for t in f.tensors) == sorted(
        (name, name, (3, 4)) for _, name in DTYPES + INTS
    )


# (dtype, name, values written at flat 5 and 9, expected (nan, +inf, -inf, first))
NONFINITE = [
    ("float16", "F16", (np.nan, -np.inf), (1, 0, 1, 5)),
    ("float32", "F32", (np.inf, np.nan), (1, 1, 0, 5)),
    ("float64", "F64", (-np.inf, -np.inf), (0, 0, 2, 5)),
    (ml_dtypes.bfloat16, "BF16", (np.nan, np.inf), (1, 1, 0, 5)),
    (ml_dtypes.float8_e5m2, "F8_E5M2", (np.inf, np.nan), (1, 1, 0, 5)),
    (ml_dtypes.float8_e4m3fn, "F8_E4M3", (np.nan, 448.0), (1, 0, 0, 5)),  # 448: finite max
    (ml_dtypes.float8_e4m3fnuz, "F8_E4M3FNUZ", (np.nan, 240.0), (1, 0, 0, 5)),
    (ml_dtypes.float8_e5m2fnuz, "F8_E5M2FNUZ", (1.0, np.nan), (1, 0, 0, 9)),
    (ml_dtypes.float8_e8m0fnu, "F8_E8M0", (np.nan, 2.0**127), (1, 0, 0, 5)),
]


@pytest.mark.parametrize(("dt", "name", "values", "want"), NONFINITE, ids=[n[1] for n in NONFINITE])
def test_nonfinite_values_written_by_the_writer(
    tmp_path: Path,
    dt: object,
    name: str,
    values: tuple[float, float],
    want: tuple[int, int, int, int],
) -> None:
    arr = np.ones((3, 4), dtype=dt)  # type: ignore[call-overload]
    arr.flat[5], arr.flat[9] = values
    p = tmp_path / "m.safetensors"
    save_file({"w": arr}, str(p))
    report = verify(p)
    assert report.exit_code == 1
    [t] = report.files[0].tensors
    assert (t.dtype, t.nan, t.posinf, t.neginf, t.first_bad_index) == (name, *want)


def test_sharded_model_from_the_writer_refused_by_the_cli(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 8)).astype(ml_dtypes.bfloat16)
    b = a.copy()
    b[7, 7] = np.nan
    save_file({"a": a}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"b": b}, str(tmp_path / "model-00002-of-00002.safetensors"))
    cp = run_cli("verify-weights", "--no-progress", str(tmp_path))
    assert cp.returncode == 1
    assert cp.stdout.splitlines() == [
        f"{tmp_path / 'model-00002-of-00002.safetensors'}:",
        "  tensor\tdtype\tshape\tNaN\t+Inf\t-Inf\tfirst_bad_index\tunit",
        "  b\tBF16\t8x8\t1\t0\t0\t63\telement",
        f"OK {tmp_path / 'model-00001-of-00002.safetensors'}: 1 tensor finite",
        f"REFUSED {tmp_path / 'model-00002-of-00002.safetensors'}: 1 of 1 tensors non-finite",
    ]
