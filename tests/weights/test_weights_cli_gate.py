"""verify-weights and gate subcommands, API exceptions, refusal events."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rogue_watchdog.cli.weights import register
from rogue_watchdog.weights import (
    NonFiniteWeightsError,
    UnverifiedWeightsError,
    WeightsRefusedError,
    require_finite,
)

from .builders import st_array, write_safetensors

REPO = Path(__file__).resolve().parents[2]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rogue-watchdog")
    register(p.add_subparsers(dest="cmd", required=True))
    return p


def run_cli(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return int(args.func(args))


@pytest.fixture()
def clean(tmp_path: Path) -> Path:
    return write_safetensors(
        tmp_path / "clean.safetensors", {"w": st_array(np.ones(4, np.float32), "F32")}
    )


@pytest.fixture()
def poisoned(tmp_path: Path) -> Path:
    a = np.full((2, 2), np.nan, np.float32)
    return write_safetensors(
        tmp_path / "poisoned.safetensors", {"w": st_array(a, "F32"), "v": st_array(a, "F32")}
    )


@pytest.fixture()
def unsupported(tmp_path: Path) -> Path:
    p = tmp_path / "model.onnx"
    p.write_bytes(b"\x08\x07\x12\x07pytorch")  # an ONNX-ish protobuf prefix
    return p


def test_verify_weights_exit_codes_and_text(
    clean: Path, poisoned: Path, unsupported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["verify-weights", str(clean)]) == 0
    assert f"OK {clean}: 1 tensor finite" in capsys.readouterr().out
    assert run_cli(["verify-weights", str(poisoned)]) == 1
    out = capsys.readouterr().out
    assert f"REFUSED {poisoned}: 2 of 2 tensors non-finite" in out
    assert "w\tF32\t2x2\t4\t0\t0\t0\telement" in out
    assert run_cli(["verify-weights", str(unsupported)]) == 2
    assert "NOT VERIFIED" in capsys.readouterr().out
    assert run_cli(["verify-weights", str(clean), str(unsupported)]) == 2
    assert run_cli(["verify-weights", str(clean), str(poisoned), str(unsupported)]) == 1


def test_verify_weights_json(poisoned: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["verify-weights", "--json", "--no-progress", str(poisoned)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 1 and doc["ok"] is False
    f = doc["files"][0]
    assert f["status"] == "non-finite" and f["totals"]["nan"] == 8
    assert f["tensors"][0] == {
        "name": "w",
        "dtype": "F32",
        "shape": [2, 2],
        "checked": True,
        "nan": 4,
        "posinf": 0,
        "neginf": 0,
        "first_bad_index": 0,
        "unit": "element",
        "note": None,
    }


def _marker_cmd(marker: Path) -> list[str]:
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('deployed')"]


def test_gate_runs_command_only_for_clean_weights(
    tmp_path: Path,
    clean: Path,
    poisoned: Path,
    unsupported: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    marker = tmp_path / "deployed"
    assert run_cli(["gate", "--weights", str(poisoned), "--", *_marker_cmd(marker)]) == 124
    assert not marker.exists()
    err = capsys.readouterr().err
    event = json.loads([ln for ln in err.splitlines() if ln.startswith("{")][-1])
    assert event["event"] == "weights-refused" and event["reason"] == "non-finite"
    assert event["path"] == str(poisoned) and event["counts"]["nan"] == 8
    assert event["counts"]["bad_tensors"] == 2 and event["exit_code"] == 1

    assert run_cli(["gate", "--weights", str(unsupported), "--", *_marker_cmd(marker)]) == 125
    assert not marker.exists()
    assert '"reason": "not-verified"' in capsys.readouterr().err

    args = ["gate", "--weights", str(clean), "--weights", str(poisoned), "--", *_marker_cmd(marker)]
    assert run_cli(args) == 124 and not marker.exists()

    assert run_cli(["gate", "--weights", str(clean), "--", *_marker_cmd(marker)]) == 0
    assert marker.read_text() == "deployed"


def test_gate_returns_command_status_and_handles_missing_command(clean: Path) -> None:
    exit3 = [sys.executable, "-c", "raise SystemExit(3)"]
    assert run_cli(["gate", "--weights", str(clean), "--", *exit3]) == 3
    assert run_cli(["gate", "--weights", str(clean), "--", "/nonexistent/deploy"]) == 127
    assert run_cli(["gate", "--weights", str(clean), "--"]) == 125


def test_cli_in_a_subprocess(tmp_path: Path, clean: Path, poisoned: Path) -> None:
    code = (
        "import argparse, sys; from rogue_watchdog.cli.weights import register; "
        "p = argparse.ArgumentParser(); register(p.add_subparsers(dest='c', required=True)); "
        "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))"
    )
    marker = tmp_path / "deployed"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code, *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert run("verify-weights", str(poisoned)).returncode == 1
    r = run("gate", "--weights", str(poisoned), "--", *_marker_cmd(marker))
    assert r.returncode == 124 and not marker.exists() and "weights-refused" in r.stderr
    r = run("gate", "--weights", str(clean), "--", *_marker_cmd(marker))
    assert r.returncode == 0 and marker.exists()


def test_require_finite_raises_clear_errors(clean: Path, poisoned: Path, unsupported: Path) -> None:
    assert require_finite(clean).ok
    with pytest.raises(NonFiniteWeightsError, match=r"REFUSED .*poisoned.safetensors: 2 of 2"):
        require_finite(poisoned)
    with pytest.raises(UnverifiedWeightsError, match="NOT VERIFIED") as info:
        require_finite([clean, unsupported])
    assert isinstance(info.value, WeightsRefusedError) and info.value.report.exit_code == 2


def test_an_unverifiable_format_is_named_alike_alone_or_in_a_folder(tmp_path: Path) -> None:
    # Before: "unsupported format, not verified" for the file alone, but
    # ".onnx weights format not verified" for the same file found in a folder.
    (tmp_path / "m.onnx").write_bytes(b"\x08\x07onnx")
    line = f"NOT VERIFIED {tmp_path / 'm.onnx'}: .onnx weights format not verified"
    for target in (tmp_path / "m.onnx", tmp_path):
        done = subprocess.run(
            [sys.executable, "-m", "rogue_watchdog", "verify-weights", str(target)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert line in done.stdout.splitlines()
