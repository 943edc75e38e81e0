"""``ship SRC DST``: the bytes verified are the bytes renamed onto DST.

Files come from the real writers: the safetensors package, gguf-py's GGUFWriter and
``torch.save`` (CPU).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from rogue_watchdog.weights.ship import ship
from tests.conftest import run_cli


def _st(path: Path, value: float, n: int = 64) -> Path:
    save_file({"w": np.full((n, n), value, np.float32), "b": np.zeros(n, np.float32)}, str(path))
    return path


def _gguf(path: Path, value: float) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("w", np.full((8, 8), value, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _pt(path: Path, value: float) -> Path:
    torch.save({"w": torch.full((8, 8), value)}, str(path))
    return path


WRITERS = {"safetensors": (_st, ".safetensors"), "gguf": (_gguf, ".gguf"), "torch": (_pt, ".pt")}


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_finite_file_is_shipped_with_its_bytes_and_mode(tmp_path: Path, fmt: str) -> None:
    write, suffix = WRITERS[fmt]
    src = write(tmp_path / f"out{suffix}", 0.5)
    os.chmod(src, 0o644)
    dest = tmp_path / "prod"
    dest.mkdir()
    result = ship(src, dest / f"model{suffix}")
    assert (result.exit_code, result.destination) == (0, dest / f"model{suffix}")
    assert (dest / f"model{suffix}").read_bytes() == src.read_bytes()
    assert (dest / f"model{suffix}").stat().st_mode & 0o777 == 0o644
    assert _leftovers(dest) == []


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_nan_file_is_refused_and_the_old_one_stays(tmp_path: Path, fmt: str) -> None:
    write, suffix = WRITERS[fmt]
    dest = tmp_path / "prod"
    dest.mkdir()
    live = write(dest / f"model{suffix}", 1.0)
    old = live.read_bytes()
    src = write(tmp_path / f"out{suffix}", float("nan"))
    result = ship(src, live)
    assert (result.exit_code, result.destination) == (1, None)
    assert result.report.files[0].path == src
    assert live.read_bytes() == old
    assert _leftovers(dest) == []


def test_into_a_folder_takes_the_source_name(tmp_path: Path) -> None:
    src = _st(tmp_path / "model.safetensors", 1.0)
    dest = tmp_path / "prod"
    dest.mkdir()
    assert ship(src, dest).destination == dest / "model.safetensors"


def test_missing_source_special_file_and_missing_folder_are_not_shipped(tmp_path: Path) -> None:
    r = ship(tmp_path / "gone.safetensors", tmp_path / "x.safetensors")
    assert r.exit_code == 2 and "cannot open the source" in (r.report.files[0].error or "")
    assert r.refusal is None  # the source: not verified
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    r = ship(fifo, tmp_path / "x.safetensors")
    assert r.exit_code == 2 and "not a regular file" in (r.report.files[0].error or "")
    src = _st(tmp_path / "m.safetensors", 1.0)
    r = ship(src, tmp_path / "no" / "such" / "m.safetensors")
    assert (r.exit_code, r.refusal, r.report.files[0].path) == (
        2,
        "destination-error",
        tmp_path / "no" / "such" / "m.safetensors",
    )
    assert r.report.files[0].error == f"the destination folder does not exist: {tmp_path}/no/such"
    assert not (tmp_path / "x.safetensors").exists()


def test_a_destination_folder_that_is_a_file_is_a_destination_error(tmp_path: Path) -> None:
    src = _st(tmp_path / "m.safetensors", 1.0)
    r = ship(src, src / "m.safetensors")
    assert (r.exit_code, r.refusal) == (2, "destination-error")
    assert r.report.files[0].error == f"the destination folder is not a folder: {src}"


def test_cli_destination_folder_missing_says_not_shipped(tmp_path: Path) -> None:
    """First-day report: `ship try/w/good.npy try/nonexist/x.npy` printed `NOT VERIFIED
    try/nonexist/x.npy: cannot stage beside the destination: [Errno 2] ...` and logged
    reason not-verified, though the source was fine."""
    good = tmp_path / "good.npy"
    np.save(good, np.ones(4, np.float32))
    dst = tmp_path / "nonexist" / "x.npy"
    cp = run_cli("ship", "--no-progress", str(good), str(dst))
    assert cp.returncode == 2
    assert cp.stdout.splitlines() == [
        f"NOT SHIPPED {dst}: the destination folder does not exist: {dst.parent}"
    ]
    (event,) = [json.loads(x) for x in cp.stderr.splitlines() if x.startswith("{")]
    assert (event["event"], event["reason"], event["path"]) == (
        "weights-refused",
        "destination-error",
        str(dst),
    )
    doc = json.loads(run_cli("ship", "--json", "--no-progress", str(good), str(dst)).stdout)
    assert [f["status"] for f in doc["files"]] == ["destination-error"]


def test_cli_a_folder_as_the_source_says_ship_copies_one_file(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    _st(model / "model.safetensors", 1.0)
    cp = run_cli("ship", "--no-progress", str(model), str(tmp_path / "x.safetensors"))
    assert cp.returncode == 2
    assert cp.stdout.splitlines() == [
        f"NOT VERIFIED {model}: cannot open the source: not a regular file (a folder): ship "
        "copies one file; ship each weights file of the model (each shard, then its index)"
    ]


def test_suffix_of_the_destination_chooses_the_format(tmp_path: Path) -> None:
    # A safetensors file shipped under a .pt name would be read by torch.load: refused.
    src = _st(tmp_path / "m.safetensors", 1.0)
    r = ship(src, tmp_path / "model.pt")
    assert r.exit_code == 2 and not (tmp_path / "model.pt").exists()


def test_source_rewritten_during_the_copy_ships_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The gate's window, shown in the issue (the source rewritten after the check),
    # here as a writer that rewrites the source while ship copies it.
    src = _st(tmp_path / "out.safetensors", 1.0, n=1024)
    dest = tmp_path / "prod"
    dest.mkdir()
    nan = _st(tmp_path / "nan.safetensors", float("nan"), n=1024).read_bytes()
    calls = {"n": 0}

    def progress(n_bytes: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:  # after the first chunk: an in-place rewrite
            t = threading.Thread(target=lambda: src.write_bytes(nan))
            t.start()
            t.join()

    monkeypatch.setattr("rogue_watchdog.weights.ship._CHUNK_BYTES", 4096)  # many chunks
    r = ship(src, dest / "model.safetensors", progress=progress)
    assert r.exit_code in (1, 2) and r.destination is None
    assert not (dest / "model.safetensors").exists()
    assert _leftovers(dest) == []


def test_cli_ships_and_refuses(tmp_path: Path) -> None:
    good = _st(tmp_path / "good.safetensors", 1.0)
    bad = _st(tmp_path / "bad.safetensors", float("inf"))
    dest = tmp_path / "prod"
    dest.mkdir()
    cp = run_cli("ship", "--no-progress", str(good), str(dest / "model.safetensors"))
    assert cp.returncode == 0, cp.stderr
    assert f"SHIPPED {good} -> {dest / 'model.safetensors'}" in cp.stdout
    cp = run_cli("ship", "--no-progress", str(bad), str(dest / "model.safetensors"))
    assert cp.returncode == 1
    assert "REFUSED" in cp.stdout and '"event": "weights-refused"' in cp.stderr
    assert (dest / "model.safetensors").read_bytes() == good.read_bytes()


def test_destination_that_is_a_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    target = _st(tmp_path / "releases-v1.safetensors", 1.0)
    before = target.read_bytes()
    live = tmp_path / "model.safetensors"
    live.symlink_to(target)
    src = _st(tmp_path / "out.safetensors", 2.0)
    r = ship(src, live)
    assert r.exit_code == 0 and not live.is_symlink()
    assert live.read_bytes() == src.read_bytes() and target.read_bytes() == before


def test_ship_names_a_tensor_as_verify_weights_does(tmp_path: Path) -> None:
    """Fresh user F (issue 33): `ship bad.npy dst/model.npy` named the tensor `model`
    (the destination's stem: the staged copy was named as DST) where `verify-weights
    bad.npy` calls it `bad`. One rule now, the source's: both say `bad`."""
    bad = tmp_path / "bad.npy"
    np.save(bad, np.array([1.0, float("nan"), 3.0], np.float32))
    dest = tmp_path / "dst"
    dest.mkdir()
    verified = run_cli("verify-weights", "--no-progress", str(bad))
    shipped = run_cli("ship", "--no-progress", str(bad), str(dest / "model.npy"))
    assert (verified.returncode, shipped.returncode) == (1, 1)

    def tensor_rows(out: str) -> list[str]:
        return [x.split("\t")[0].strip() for x in out.splitlines() if x.count("\t") >= 6]

    assert tensor_rows(verified.stdout)[-1:] == tensor_rows(shipped.stdout)[-1:] == ["bad"]
    assert not (dest / "model.npy").exists() and _leftovers(dest) == []


def test_gate_says_the_command_was_not_run(tmp_path: Path) -> None:
    """Fresh user F (issue 33): `gate` printed REFUSED and exited 124 but never said in
    words that the command was not run (before, 132b2a1: no such line)."""
    bad = _st(tmp_path / "bad.safetensors", float("nan"))
    marker = tmp_path / "deployed"
    cp = run_cli("gate", "--no-progress", "--weights", str(bad), "--", "touch", str(marker))
    assert cp.returncode == 124 and not marker.exists()
    assert f"gate: the command was not run (a NaN or infinity found; exit 124): touch {marker}" in (
        cp.stderr.splitlines()
    )
    odd = tmp_path / "odd.onnx"
    odd.write_bytes(b"\x08\x07")
    cp = run_cli("gate", "--no-progress", "--weights", str(odd), "--", "echo", "a\nb")
    assert cp.returncode == 125
    assert "gate: the command was not run (not verified; exit 125): echo 'a⏎b'" in (
        cp.stderr.splitlines()
    )
    cp = run_cli("gate", "--json", "--no-progress", "--weights", str(bad), "--", "true")
    assert "not run" not in cp.stderr  # JSON stays JSON: the events carry the command


def test_gate_says_in_words_when_the_command_cannot_be_started(tmp_path: Path) -> None:
    """First-day report: `gate --weights W -- /nonexistent/cmd` exited 127 with only a
    JSON `gate-command-failed` event, where every other refusal says it in a plain line."""
    good = _st(tmp_path / "good.safetensors", 1.0)
    missing = tmp_path / "no such" / "cmd"
    cp = run_cli("gate", "--no-progress", "--weights", str(good), "--", str(missing), "x")
    assert cp.returncode == 127
    assert (
        "gate: the command was not run (the weights verified, but it could not be started: "
        f"no such file or directory; exit 127): '{missing}' x"
    ) in cp.stderr.splitlines()
    assert '"event": "gate-command-failed"' in cp.stderr
    noexec = tmp_path / "deploy.sh"
    noexec.write_text("#!/bin/sh\n")
    noexec.chmod(0o644)
    cp = run_cli("gate", "--no-progress", "--weights", str(good), "--", str(noexec))
    assert cp.returncode == 127
    assert (  # execve(2) wants an execute bit, for root too
        "gate: the command was not run (the weights verified, but it could not be "
        f"started: permission denied; exit 127): {noexec}"
    ) in cp.stderr.splitlines()
    cp = run_cli("gate", "--json", "--no-progress", "--weights", str(good), "--", str(missing))
    assert cp.returncode == 127 and "not run" not in cp.stderr  # JSON stays JSON
