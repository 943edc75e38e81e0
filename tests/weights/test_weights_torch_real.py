"""Checkpoints written by real ``torch.save`` (torch 2.x), read without torch.

The files come from ``fixtures/make_torch_fixtures.py`` (the torch version that wrote
them is in ``fixtures/torch_versions.json``). torch 2.x writes fp8 and uint16/32/64
tensors with ``torch._utils._rebuild_tensor_v3`` over ``torch.storage.UntypedStorage``;
a restricted unpickler that does not know those names can never pass a clean file.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from rogue_watchdog.weights import Status, verify
from rogue_watchdog.weights.errors import NotVerifiedError
from rogue_watchdog.weights.torchzip import load_restricted
from tests.conftest import run_cli

FIX = Path(__file__).resolve().parent / "fixtures"
FLOATS = ["float32", "float16", "bfloat16", "float64"]
FP8 = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]
INTS = ["uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "uint8"]


def test_fixtures_record_the_torch_that_wrote_them() -> None:
    versions = json.loads((FIX / "torch_versions.json").read_text())
    assert versions["torch"].startswith("2.")
    with zipfile.ZipFile(FIX / "torch_modern_finite.pt") as zf:
        pkl = zf.read("torch_modern_finite/data.pkl")
    assert b"_rebuild_tensor_v3" in pkl and b"UntypedStorage" in pkl  # the modern names


def test_clean_modern_checkpoint_passes_without_executing_code() -> None:
    p = FIX / "torch_modern_finite.pt"
    cp = run_cli("verify-weights", "--no-progress", str(p))
    assert cp.returncode == 0, cp.stdout
    assert cp.stdout == f"OK {p}: 21 tensors finite (9 cannot hold non-finite values)\n"
    [f] = verify(p).files
    assert [(t.name, t.dtype, t.shape) for t in f.tensors] == [
        *((f"w.{n}", n, (2, 3)) for n in [*FLOATS, *FP8, "float8_e8m0fnu"]),
        *((f"i.{n}", n, (2, 3)) for n in INTS),
        ("mask", "bool", (3,)),
        ("c64", "complex64", (2,)),
        ("t", "float16", (2, 3)),
        ("param", "bfloat16", (2, 2)),
    ]


def test_nonfinite_modern_checkpoint_counts_every_kind_exactly() -> None:
    p = FIX / "torch_modern_nonfinite.pt"
    report = verify(p)
    assert report.exit_code == 1
    [f] = report.files
    bad = {t.name: (t.nan, t.posinf, t.neginf, t.first_bad_index) for t in f.bad_tensors}
    assert bad == {
        # [0, 1] = +Inf (flat 1), [1, 2] = NaN (flat 5)
        **{f"w.{n}": (1, 1, 0, 1) for n in [*FLOATS, "float8_e5m2"]},
        # no infinity in these: +Inf casts to NaN (e4m3fn 0x7F) or to the one NaN (0x80)
        **{f"w.{n}": (1, 0, 0, 5) for n in ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2fnuz"]},
        "w.float8_e8m0fnu": (1, 0, 0, 3),  # byte 0xFF at [1, 0]
        "c64": (0, 0, 1, 1),  # imaginary part -Inf
        # transposed view: storage position 3 is element (1, 1), C-order index 4
        "t": (1, 0, 0, 4),
    }
    assert f.summary() == f"REFUSED {p}: 11 of 21 tensors non-finite"


def test_legacy_and_whole_module_checkpoints_are_not_verified() -> None:
    legacy, module = FIX / "torch_legacy.pt", FIX / "torch_module.pt"
    report = verify([legacy, module])
    assert report.exit_code == 2
    assert [f.summary() for f in report.files] == [
        f"NOT VERIFIED {legacy}: legacy (pre-zip) PyTorch pickle format not verified",
        f"NOT VERIFIED {module}: pickle references torch.nn.modules.linear.Linear,"
        " which is not a tensor rebuild function",
    ]
    assert all(f.status is Status.NOT_VERIFIED for f in report.files)


def test_rebuild_v3_needs_a_torch_dtype() -> None:
    # The dtype argument must be a torch dtype global, never an arbitrary object.
    with zipfile.ZipFile(FIX / "torch_modern_finite.pt") as zf:
        pkl = zf.read("torch_modern_finite/data.pkl")
    forged = pkl.replace(b"ctorch\nfloat8_e4m3fn\n", b"cbuiltins\nprint\n", 1)
    assert forged != pkl
    with pytest.raises(NotVerifiedError) as info:
        load_restricted(forged)
    assert str(info.value) == (
        "pickle references builtins.print, which is not a tensor rebuild function"
    )
