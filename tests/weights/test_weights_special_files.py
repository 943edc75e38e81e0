"""FIFOs, devices and symlink loops among weights files: refused, never opened, never a hang.

A FIFO opened for reading blocks until a writer comes (fifo(7)); before the fix one in a
deploy directory stopped the single verifier thread and so blinded every ship gate, and
``verify-weights`` hung. Every check that could hang runs in a subprocess with a timeout
or in a thread joined with a timeout; a thread left blocked is released by opening the
FIFO for writing.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from rogue_watchdog.weights import regular
from rogue_watchdog.weights.regular import NotRegularError, open_regular
from tests.conftest import run_cli

from .builders import st_array, write_safetensors
from .test_shipwatch import NAMES, T0, Rig, good_model, nan_model


def release(fifo: Path) -> None:
    """Unblock any reader stuck opening ``fifo`` (ENXIO when there is none)."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def one_nan(path: Path) -> Path:
    return write_safetensors(path, {"w": st_array(np.array([1.0, np.nan], np.float32), "F32")})


def test_fifo_in_one_gate_blinds_no_gate(tmp_path: Path) -> None:
    g1, g2 = tmp_path / "gate1", tmp_path / "gate2"
    g1.mkdir()
    g2.mkdir()
    fifo = g1 / "a.safetensors"
    os.mkfifo(fifo)
    bad1 = nan_model(g1 / "b.safetensors")
    bad2 = nan_model(g2 / "model.safetensors")
    r = Rig(
        tmp_path,
        f"  - name: one\n    deploy_dir: {g1}\n  - name: two\n    deploy_dir: {g2}\n",
    )
    for s in r.sources:
        s.wait_s = 10.0  # a blocked verifier shows as missing findings, not a hung test
    try:
        r.tick(T0, settle=False)
        r.tick(T0 + 5, settle=False)
        assert r.worker.wait(20), "the verifier thread is stuck"
        r.tick(T0 + 10, settle=False)
        poisoned = sorted(
            (f.details["gate"], f.details["path"]) for f in r.open("poisoned-weights")
        )
        assert poisoned == [("one", str(bad1)), ("two", str(bad2))]
        [unverified] = r.open("weights-unverified")
        assert unverified.details["path"] == str(fifo)
        assert unverified.details["error"] == "not a regular file (a FIFO)"
        assert unverified.message == (
            f"ship gate one: {fifo} could not be verified, so it is refused:"
            " `not a regular file (a FIFO)`"
        )
        assert r.open("ship-gate-degraded") == []
    finally:
        release(fifo)
        r.close()


def test_verify_weights_dir_with_fifo_judges_the_other_files(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    os.mkfifo(d / "a.safetensors")
    bad = one_nan(d / "b.safetensors")
    try:
        cp = run_cli("verify-weights", "--no-progress", str(d), timeout=30)
    finally:
        release(d / "a.safetensors")
    assert cp.returncode == 1, cp.stderr  # the NaN file is still found
    assert f"NOT VERIFIED {d / 'a.safetensors'}: not a regular file (a FIFO)" in cp.stdout
    assert str(bad) in cp.stdout
    assert "Traceback" not in cp.stderr


def test_explicit_fifo_and_device_are_not_regular_files(tmp_path: Path) -> None:
    fifo = tmp_path / "w.safetensors"
    os.mkfifo(fifo)
    try:
        cp = run_cli("verify-weights", "--no-progress", str(fifo), "/dev/zero", timeout=30)
    finally:
        release(fifo)
    assert cp.returncode == 2, cp.stderr
    assert cp.stdout.splitlines() == [
        f"NOT VERIFIED {fifo}: not a regular file (a FIFO)",
        "NOT VERIFIED /dev/zero: not a regular file (a character device)",
    ]


def test_gate_refuses_a_fifo_without_running_the_command(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    good_model(d / "model.safetensors")
    os.mkfifo(d / "extra.safetensors")
    marker = tmp_path / "ran"
    try:
        cp = run_cli(
            "gate", "--no-progress", "--weights", str(d), "--", "touch", str(marker), timeout=30
        )
    finally:
        release(d / "extra.safetensors")
    assert cp.returncode == 125, cp.stderr
    assert not marker.exists()
    assert "not a regular file (a FIFO)" in cp.stderr


def test_fifo_index_and_fifo_shard_are_not_verified(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    good_model(d / "model-1.safetensors")
    os.mkfifo(d / "model-2.safetensors")
    (d / "model.safetensors.index.json").write_text(
        f'{{"weight_map": {{"{NAMES[0]}": "model-1.safetensors", "b": "model-2.safetensors"}}}}'
    )
    os.mkfifo(d / "other.safetensors.index.json")
    try:
        cp = run_cli("verify-weights", "--no-progress", str(d), timeout=30)
    finally:
        release(d / "model-2.safetensors")
        release(d / "other.safetensors.index.json")
    assert cp.returncode == 2, cp.stderr
    out = cp.stdout.splitlines()
    assert (
        f"NOT VERIFIED {d / 'model.safetensors.index.json'}:"
        " shard 'model-2.safetensors' is not a regular file"
    ) in out
    assert f"NOT VERIFIED {d / 'other.safetensors.index.json'}: not a regular file (a FIFO)" in out
    assert f"NOT VERIFIED {d / 'model-2.safetensors'}: not a regular file (a FIFO)" in out


def test_symlink_loop_is_not_verified_not_a_traceback(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    good_model(d / "model.safetensors")
    loop = d / "loop.safetensors"
    loop.symlink_to("loop.safetensors")
    cp = run_cli("verify-weights", "--no-progress", str(d), str(loop), timeout=30)
    assert cp.returncode == 2, cp.stderr
    assert "Traceback" not in cp.stderr
    assert (
        cp.stdout.splitlines().count(
            f"NOT VERIFIED {loop}: cannot stat: Too many levels of symbolic links"
        )
        == 2
    )  # once from the directory walk, once as an explicit path


def test_open_regular_rechecks_the_open_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path swapped for a FIFO after the stat is caught by fstat, without blocking."""
    fifo = tmp_path / "swapped"
    os.mkfifo(fifo)
    monkeypatch.setattr(regular, "check_regular", lambda path: None)  # lose the race
    caught: list[BaseException] = []

    def attempt() -> None:
        try:
            open_regular(fifo).close()
        except BaseException as exc:
            caught.append(exc)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(10)
    blocked = t.is_alive()
    release(fifo)
    t.join(10)
    assert not blocked, "open_regular blocked opening a FIFO"
    [exc] = caught
    assert isinstance(exc, NotRegularError)
    assert str(exc) == "not a regular file (a FIFO)"
