"""PyTorch zip checkpoints, read with the restricted unpickler (no torch)."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from rogue_watchdog.weights import Status, verify
from rogue_watchdog.weights.errors import NotVerifiedError
from rogue_watchdog.weights.torchzip import load_restricted

from .builders import (
    Global,
    Reduce,
    ordered_dict,
    pickle_bytes,
    tensor,
    torch_state_dict,
    write_torch_zip,
)


def one(path: Path):  # type: ignore[no-untyped-def]
    report = verify(path)
    assert len(report.files) == 1
    return report.files[0]


def test_fsdp_fp16_checkpoint_with_every_tensor_nan(tmp_path: Path) -> None:
    # Public-report shape: an fp16 FSDP run whose saved pytorch_model.bin is all NaN.
    projs = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    names = [f"model.layers.{i // 7}.{projs[i % 7]}.weight" for i in range(224)]
    nan = np.full((4, 8), np.nan, dtype=np.float16)
    p = torch_state_dict(tmp_path / "pytorch_model.bin", {n: nan for n in names}, "HalfStorage")
    f = one(p)
    assert f.format == "torch-zip"
    assert f.summary() == f"REFUSED {p}: 224 of 224 tensors non-finite"
    assert all(t.nan == 32 and t.first_bad_index == 0 and t.dtype == "float16" for t in f.tensors)
    assert verify(p).exit_code == 1


def test_clean_checkpoint_passes_with_names_and_shapes(tmp_path: Path) -> None:
    arrays = {
        "enc.weight": np.ones((3, 5), ml_dtypes.bfloat16),
        "enc.bias": np.zeros(3, ml_dtypes.bfloat16),
    }
    f = one(torch_state_dict(tmp_path / "m.pt", arrays, "BFloat16Storage"))
    assert f.status is Status.FINITE
    assert [(t.name, t.shape, t.dtype) for t in f.tensors] == [
        ("enc.weight", (3, 5), "bfloat16"),
        ("enc.bias", (3,), "bfloat16"),
    ]


def test_nested_checkpoint_parameter_and_integer_storages(tmp_path: Path) -> None:
    w = np.ones(6, np.float32)
    w[4] = -np.inf
    obj = {
        "epoch": 3,
        "best_metric": float("nan"),  # a Python float is not a tensor
        "model": ordered_dict(
            {
                "w": Reduce(
                    Global("torch._utils", "_rebuild_parameter"),
                    (tensor("FloatStorage", "0", 6, (2, 3)), True, ordered_dict()),
                ),
                "steps": tensor("LongStorage", "1", 2, (2,)),
            }
        ),
    }
    storages = {"0": w.tobytes(), "1": np.array([1, 2], np.int64).tobytes()}
    f = one(write_torch_zip(tmp_path / "ckpt.pth", obj, storages))
    by = {t.name: t for t in f.tensors}
    assert (by["model.w"].neginf, by["model.w"].first_bad_index) == (1, 4)
    assert by["model.steps"].checked is False and not by["model.steps"].nonfinite


def test_compressed_storage_is_not_verified(tmp_path: Path) -> None:
    # torch.load(mmap=True) maps a deflated storage's compressed bytes as its values
    # (tests/weights/test_gate_regressions.py shows the NaN it reads).
    arr = np.zeros(50_000, np.float32)
    f = one(torch_state_dict(tmp_path / "c.pt", {"x": arr}, "FloatStorage", compress=True))
    assert (f.status, f.error) == (
        Status.NOT_VERIFIED,
        "storage member 'archive/data/0' is compressed: torch.load inflates it,"
        " torch.load(mmap=True) maps the compressed bytes; readers disagree",
    )


def test_big_endian_checkpoint(tmp_path: Path) -> None:
    arr = np.array([1.0, np.inf, 2.0], dtype=">f4")
    f = one(torch_state_dict(tmp_path / "be.pt", {"x": arr}, "FloatStorage", byteorder="big"))
    assert (f.tensors[0].posinf, f.tensors[0].first_bad_index) == (1, 1)


def test_views_into_shared_storage(tmp_path: Path) -> None:
    base = np.arange(12, dtype=np.float32)
    base[10] = np.nan
    obj = {
        "head": tensor("FloatStorage", "0", 12, (2, 2), offset=0),  # elements 0..3
        "tail": tensor("FloatStorage", "0", 12, (2,), offset=9),  # elements 9..10
        "col": tensor("FloatStorage", "0", 12, (3,), stride=(4,), offset=2),  # 2, 6, 10
    }
    f = one(write_torch_zip(tmp_path / "v.pt", obj, {"0": base.tobytes()}))
    by = {t.name: t for t in f.tensors}
    assert not by["head"].nonfinite
    assert (by["tail"].nan, by["tail"].first_bad_index) == (1, 1)
    assert (by["col"].nan, by["col"].first_bad_index, by["col"].note) == (1, 2, None)


def test_strided_view_counts_its_own_elements_in_c_order(tmp_path: Path) -> None:
    base = np.arange(8, dtype=np.float16)
    base[3] = np.nan  # storage position 3
    base[5] = np.inf  # inside the span of "gaps", but not one of its elements
    obj = {
        # w.t() of a (2, 3) tensor: element (i, j) sits at storage position i + 2j.
        "t": tensor("HalfStorage", "0", 8, (2, 3), stride=(1, 2)),
        "gaps": tensor("HalfStorage", "0", 8, (2,), stride=(2,), offset=4),  # 4 and 6
    }
    f = one(write_torch_zip(tmp_path / "t.pt", obj, {"0": base.tobytes()}))
    by = {t.name: t for t in f.tensors}
    # Storage position 3 is element (1, 1): C-order index 1 * 3 + 1 = 4.
    assert (by["t"].nan, by["t"].posinf, by["t"].first_bad_index) == (1, 1, 4)
    assert not by["gaps"].nonfinite
    assert np.ravel_multi_index((1, 1), (2, 3)) == 4


def test_pickle_calling_os_system_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {marker}",))

    for i, data in enumerate(
        [
            pickle.dumps({"w": Evil()}, protocol=2),
            pickle.dumps({"w": Evil()}, protocol=4),  # STACK_GLOBAL
            pickle_bytes({"w": Reduce(Global("posix", "system"), (f"touch {marker}",))}),
            pickle_bytes(Reduce(Global("builtins", "eval"), (f"open('{marker}','w')",)), True),
        ]
    ):
        p = write_torch_zip(tmp_path / f"evil{i}.pt", None, {}, pickle_data=data)
        f = one(p)
        assert f.status is Status.NOT_VERIFIED
        assert "not a tensor rebuild function" in (f.error or "")
        assert verify(p).exit_code == 2
    assert not marker.exists()


def test_missing_storage_member(tmp_path: Path) -> None:
    obj = {"w": tensor("FloatStorage", "0", 4, (4,)), "v": tensor("FloatStorage", "7", 4, (4,))}
    p = write_torch_zip(tmp_path / "m.pt", obj, {"0": np.zeros(4, np.float32).tobytes()})
    f = one(p)
    assert f.status is Status.NOT_VERIFIED and "archive/data/7' missing" in (f.error or "")


@pytest.mark.parametrize(
    ("obj", "storage", "needle"),
    [
        ({"w": tensor("FloatStorage", "0", 4, (4,))}, b"\0" * 12, "expected 16"),
        ({"w": tensor("FloatStorage", "0", 4, (5,))}, b"\0" * 16, "past the end"),
        ({"w": tensor("FloatStorage", "0", 4, (2,), offset=3)}, b"\0" * 16, "past the end"),
        ({"w": tensor("NopeStorage", "0", 4, (4,))}, b"\0" * 16, "torch.NopeStorage"),
        ({"w": 1}, b"", "no tensors"),
    ],
)
def test_inconsistent_checkpoints(tmp_path: Path, obj: object, storage: bytes, needle: str) -> None:
    f = one(write_torch_zip(tmp_path / "x.pt", obj, {"0": storage}))
    assert f.status is Status.NOT_VERIFIED and needle in (f.error or ""), f.error


def test_legacy_pickle_format_is_not_verified(tmp_path: Path) -> None:
    # Pre-1.6 torch.save: a bare pickle stream with only torch globals, which a pickle
    # scanner reports as clean. Its values cannot be checked here, so it must exit 2.
    p = tmp_path / "legacy.bin"
    p.write_bytes(pickle.dumps({"magic": 0x1950A86A20F9469CFC6C}, protocol=2) + b"\x00" * 64)
    f = one(p)
    assert f.format == "torch-legacy" and f.status is Status.NOT_VERIFIED
    assert "legacy" in (f.error or "")
    assert verify(p).exit_code == 2


def test_truncated_zip(tmp_path: Path) -> None:
    p = torch_state_dict(tmp_path / "t.pt", {"x": np.ones(64, np.float32)}, "FloatStorage")
    p.write_bytes(p.read_bytes()[:-40])
    assert one(p).status is Status.NOT_VERIFIED


def test_torchscript_like_archive_is_refused(tmp_path: Path) -> None:
    obj = Reduce(Global("__torch__.MyModule", "MyModule"), ())
    p = write_torch_zip(tmp_path / "ts.pt", obj, {})
    with zipfile.ZipFile(p, "a") as zf:
        zf.writestr("archive/code/__torch__.py", "def forward(self): ...")
    f = one(p)
    assert f.status is Status.NOT_VERIFIED


def test_restricted_unpickler_rejects_garbage() -> None:
    for data in (b"", b"\x80\x02", b"\x80\x02}q\x00(", b"not a pickle"):
        with pytest.raises(NotVerifiedError):
            load_restricted(data)
