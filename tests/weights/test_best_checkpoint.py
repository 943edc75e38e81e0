"""``best_checkpoint``: the best checkpoint that verifies finite, or ``NothingToShip``.

Checkpoints are written by the safetensors package and by ``torch.save`` (CPU).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from rogue_watchdog.weights import NothingToShip, best_checkpoint


def _st(path: Path, value: float) -> Path:
    save_file({"w": np.full((4, 4), value, np.float32)}, str(path))
    return path


def _pt(path: Path, value: float) -> Path:
    torch.save({"w": torch.full((4, 4), value)}, str(path))
    return path


def test_lowest_finite_loss_among_finite_checkpoints(tmp_path: Path) -> None:
    a = _st(tmp_path / "a.safetensors", 1.0)
    b = _pt(tmp_path / "b.pt", 2.0)
    c = _st(tmp_path / "c.safetensors", 3.0)
    assert best_checkpoint([(a, 0.5), (b, 0.2), (c, 0.9)]) == b
    assert best_checkpoint([(a, 0.5), (b, 0.2), (c, 0.9)], lower_is_better=False) == c


def test_missing_earlier_checkpoint_is_skipped_not_raised(tmp_path: Path) -> None:
    # The handed case: the docs' recipe sorted by st_mtime and raised FileNotFoundError.
    final = _st(tmp_path / "final.safetensors", float("nan"))
    gone = tmp_path / "epoch-3.safetensors"
    with pytest.raises(NothingToShip) as err:
        best_checkpoint([(gone, 0.1), (final, 0.05)])
    reasons = {c.path.name: c.reason for c in err.value.considered}
    assert "no such file or directory" in reasons["epoch-3.safetensors"]
    assert "non-finite" in reasons["final.safetensors"]


def test_missing_one_and_a_good_one_picks_the_good_one(tmp_path: Path) -> None:
    good = _pt(tmp_path / "epoch-2.pt", 1.0)
    assert best_checkpoint([(tmp_path / "epoch-3.pt", 0.1), (good, 0.3)]) == good


@pytest.mark.parametrize("metric", [float("nan"), float("inf"), "0.1", None, True])
def test_metric_that_is_not_a_finite_number_never_wins(tmp_path: Path, metric: object) -> None:
    a = _st(tmp_path / "a.safetensors", 1.0)
    b = _st(tmp_path / "b.safetensors", 1.0)
    assert best_checkpoint([(a, metric), (b, 0.7)]) == b  # type: ignore[list-item]
    with pytest.raises(NothingToShip, match="refusing to ship"):
        best_checkpoint([(a, metric)])  # type: ignore[list-item]


def test_metric_as_numpy_scalar_and_zero_dim_tensor(tmp_path: Path) -> None:
    a = _st(tmp_path / "a.safetensors", 1.0)
    b = _st(tmp_path / "b.safetensors", 1.0)
    assert best_checkpoint([(a, np.float32(0.3)), (b, torch.tensor(0.2))]) == b
    assert best_checkpoint([(a, np.float32(0.3)), (b, torch.tensor(float("nan")))]) == a


def test_unverifiable_and_empty_inputs(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"\x08\x07")
    bad_dir = tmp_path / "onnx-model"
    bad_dir.mkdir()
    (bad_dir / "model.onnx").write_bytes(b"\x08\x07")
    truncated = tmp_path / "t.safetensors"
    truncated.write_bytes(_st(tmp_path / "x.safetensors", 1.0).read_bytes()[:-3])
    with pytest.raises(NothingToShip) as err:
        best_checkpoint([(tmp_path / "model.onnx", 0.1), (bad_dir, 0.1), (truncated, 0.1)])
    assert [bool(c.reason) for c in err.value.considered] == [True, True, True]
    with pytest.raises(NothingToShip, match="no checkpoint given"):
        best_checkpoint([])
    with pytest.raises(NothingToShip, match="not a \\(path, metric\\) pair"):
        best_checkpoint([("only-a-path",)])  # type: ignore[list-item]


def test_a_model_directory_is_a_checkpoint(tmp_path: Path) -> None:
    d = tmp_path / "ckpt-100"
    d.mkdir()
    _st(d / "model.safetensors", 1.0)
    assert best_checkpoint([(d, 0.4)]) == d
