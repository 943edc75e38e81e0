"""Nothing unverified passes: duplicate zip members, unreadable folders, index-named shards.

Each test keeps one input that once verified ``OK`` (exit 0) while holding a NaN, or
that gave a misleading message, and asserts the exact exit code and the message that
names the member or path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rogue_watchdog.weights import verify
from tests.conftest import nobody_python, run_cli

from .builders import ordered_dict, pickle_bytes, st_array, tensor, write_safetensors

NAN4 = np.array([1.0, np.nan, 2.0, 3.0], np.float32)
GOOD4 = np.arange(4, dtype=np.float32)


def _zip_with_duplicate(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate name": the point here
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
            for name, data in members:
                zf.writestr(name, data)
    return path


def test_torch_zip_with_a_duplicated_storage_member_is_not_verified(tmp_path: Path) -> None:
    # torch.load (miniz) takes the first copy, the NaN one; Python's zipfile the last.
    pkl = pickle_bytes(ordered_dict({"w": tensor("FloatStorage", "0", 4, (4,))}))
    p = _zip_with_duplicate(
        tmp_path / "pytorch_model.bin",
        [
            ("archive/data.pkl", pkl),
            ("archive/byteorder", b"little"),
            ("archive/data/0", NAN4.tobytes()),
            ("archive/data/0", GOOD4.tobytes()),
            ("archive/version", b"3\n"),
        ],
    )
    with zipfile.ZipFile(p) as zf:  # the copy a zipfile-based check would have read
        assert zf.read("archive/data/0") == GOOD4.tobytes()
    report = verify(p)
    assert report.exit_code == 2
    assert report.files[0].summary() == (
        f"NOT VERIFIED {p}: zip member 'archive/data/0' appears more than once:"
        " readers disagree on which copy they load"
    )


def test_npz_with_a_duplicated_member_is_not_verified(tmp_path: Path) -> None:
    def npy(a: np.ndarray) -> bytes:
        import io

        buf = io.BytesIO()
        np.save(buf, a)
        return buf.getvalue()

    p = _zip_with_duplicate(tmp_path / "w.npz", [("w.npy", npy(NAN4)), ("w.npy", npy(GOOD4))])
    report = verify(p)
    assert report.exit_code == 2
    assert report.files[0].error == (
        "zip member 'w.npy' appears more than once: readers disagree on which copy they load"
    )


def test_truncated_bin_says_truncated(tmp_path: Path) -> None:
    src = tmp_path / "full.bin"
    pkl = pickle_bytes(ordered_dict({"w": tensor("FloatStorage", "0", 4, (4,))}))
    with zipfile.ZipFile(src, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", pkl)
        zf.writestr("archive/data/0", GOOD4.tobytes())
    raw = src.read_bytes()
    p = tmp_path / "pytorch_model.bin"
    p.write_bytes(raw[: len(raw) // 2])
    cp = run_cli("verify-weights", "--no-progress", str(p))
    assert cp.returncode == 2
    assert cp.stdout == (
        f"NOT VERIFIED {p}: truncated or damaged zip archive: its central directory"
        " (at the end of the file) cannot be read\n"
    )


# -- unreadable folders, checked as a user who really gets EACCES -----------------------


@pytest.fixture
def as_nobody() -> Iterator[list[str]]:
    """This checkout's Python as user nobody (root's mode 000 is no barrier), from any
    checkout path (:func:`tests.conftest.nobody_python`)."""
    with nobody_python("numpy", "rogue_watchdog.weights") as argv:
        yield argv


@pytest.fixture
def public_tmp() -> Iterator[Path]:
    """A folder user nobody can enter (pytest's tmp_path lives under a mode-700 folder)."""
    root = Path(tempfile.mkdtemp(prefix="rw-weights-nobody-", dir="/tmp"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        for dirpath, dirnames, _ in os.walk(root):
            for d in dirnames:
                os.chmod(os.path.join(dirpath, d), 0o755)
        shutil.rmtree(root)


def _as_nobody(cmd: list[str], *paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, "-m", "rogue_watchdog", "verify-weights", "--no-progress", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )


def test_unreadable_subfolder_holding_a_nan_shard_is_not_verified(
    as_nobody: list[str], public_tmp: Path
) -> None:
    model = public_tmp / "model"
    (model / "hidden").mkdir(parents=True)
    write_safetensors(model / "model-00001.safetensors", {"a": st_array(GOOD4, "F32")})
    write_safetensors(model / "hidden" / "model-00002.safetensors", {"b": st_array(NAN4, "F32")})
    for p in (model, model / "model-00001.safetensors"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.chmod(model / "hidden", 0o000)
    cp = _as_nobody(as_nobody, model)
    assert cp.returncode == 2, cp.stderr
    assert cp.stdout.splitlines() == [
        f"NOT VERIFIED {model / 'hidden'}: cannot read directory: Permission denied",
        f"OK {model / 'model-00001.safetensors'}: 1 tensor finite",
    ]


def test_unreadable_directory_given_directly_says_permission_denied(
    as_nobody: list[str], public_tmp: Path
) -> None:
    model = public_tmp / "model"
    model.mkdir()
    write_safetensors(model / "model.safetensors", {"a": st_array(GOOD4, "F32")})
    os.chmod(model, 0o000)
    cp = _as_nobody(as_nobody, model)
    assert cp.returncode == 2, cp.stderr
    assert cp.stdout == f"NOT VERIFIED {model}: cannot read directory: Permission denied\n"


# -- shard indexes -------------------------------------------------------------------


def _index(path: Path, weight_map: dict[str, str]) -> Path:
    path.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


def test_index_shard_behind_a_symlinked_folder_is_verified(tmp_path: Path) -> None:
    model, store = tmp_path / "model", tmp_path / "store"
    model.mkdir()
    store.mkdir()
    write_safetensors(model / "model-00001-of-00002.safetensors", {"a": st_array(GOOD4, "F32")})
    write_safetensors(store / "model-00002-of-00002.safetensors", {"b": st_array(NAN4, "F32")})
    (model / "shards").symlink_to(store)
    _index(
        model / "model.safetensors.index.json",
        {"a": "model-00001-of-00002.safetensors", "b": "shards/model-00002-of-00002.safetensors"},
    )
    cp = run_cli("verify-weights", "--no-progress", str(model))
    assert cp.returncode == 1, cp.stderr
    shard = model / "model-00001-of-00002.safetensors"
    nan_shard = model / "shards" / "model-00002-of-00002.safetensors"
    assert cp.stdout.splitlines()[-2:] == [
        f"OK {shard}: 1 tensor finite",
        f"REFUSED {nan_shard}: 1 of 1 tensors non-finite",
    ]


def test_index_shard_outside_the_tree_is_verified_and_said_so(tmp_path: Path) -> None:
    model, other = tmp_path / "model", tmp_path / "other"
    model.mkdir()
    other.mkdir()
    write_safetensors(other / "s2.safetensors", {"b": st_array(NAN4, "F32")})
    write_safetensors(model / "s1.safetensors", {"a": st_array(GOOD4, "F32")})
    index = _index(
        model / "model.safetensors.index.json",
        {"a": "s1.safetensors", "b": "../other/s2.safetensors"},
    )
    cp = run_cli("verify-weights", "--no-progress", str(model))
    assert cp.returncode == 1, cp.stderr
    named = model / "../other/s2.safetensors"
    assert f"NOTE {named} named by {index} resolves to {other / 's2.safetensors'}, outside" in (
        cp.stdout
    )
    assert f"REFUSED {named}: 1 of 1 tensors non-finite" in cp.stdout.splitlines()


def test_index_naming_a_missing_shard_or_a_missing_tensor_is_not_verified(
    tmp_path: Path,
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    write_safetensors(model / "s1.safetensors", {"a": st_array(GOOD4, "F32")})
    index = _index(
        model / "model.safetensors.index.json",
        {"a": "s1.safetensors", "ghost": "s1.safetensors", "b": "s2.safetensors"},
    )
    report = verify(model)
    assert report.exit_code == 2
    assert [f.summary() for f in report.files] == [
        f"NOT VERIFIED {index}: shard 's1.safetensors' lacks 1 tensors, e.g. 'ghost';"
        " shard 's2.safetensors' named by the index is missing",
        f"OK {model / 's1.safetensors'}: 1 tensor finite",
    ]


def test_symlink_loop_folder_is_walked_once_and_said_so(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    write_safetensors(model / "m.safetensors", {"a": st_array(GOOD4, "F32")})
    (model / "again").symlink_to(".")
    cp = run_cli("verify-weights", "--no-progress", str(model), timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == [
        f"NOTE skipped {model / 'again'}: symlinked folder leads to {model}, walked already",
        f"OK {model / 'm.safetensors'}: 1 tensor finite",
    ]


def test_gate_does_not_run_the_deploy_for_a_duplicated_member(tmp_path: Path) -> None:
    pkl = pickle_bytes(ordered_dict({"w": tensor("FloatStorage", "0", 4, (4,))}))
    p = _zip_with_duplicate(
        tmp_path / "pytorch_model.bin",
        [
            ("archive/data.pkl", pkl),
            ("archive/data/0", NAN4.tobytes()),
            ("archive/data/0", GOOD4.tobytes()),
        ],
    )
    marker = tmp_path / "deployed"
    cp = run_cli("gate", "--no-progress", "--weights", str(p), "--", "touch", str(marker))
    assert cp.returncode == 125
    assert not marker.exists()
    assert f"NOT VERIFIED {p}: zip member 'archive/data/0' appears more than once" in cp.stderr
