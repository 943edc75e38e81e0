"""Deploy staleness and file stability on real files with controlled mtimes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from rogue_watchdog.weights.freshness import StableFileTracker, check_deploy_stale, human_duration

from .builders import safetensors_bytes, st_array

T0 = 1_700_000_000.0
GOOD = safetensors_bytes({"w": st_array(np.arange(4, dtype=np.float32), "F32")})
NAN = safetensors_bytes({"w": st_array(np.array([1, np.nan, 2, 3], np.float32), "F32")})


def touch(p: Path, mtime_s: float, data: bytes = GOOD) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    os.utime(p, (mtime_s, mtime_s))
    return p


def test_a_nan_file_deployed_does_not_count_as_deployed(tmp_path: Path) -> None:
    """Only the NaN file is deployed and an older good output waits: that is stale."""
    train, deploy = tmp_path / "train", tmp_path / "deploy"
    good = touch(train / "ckpt-1.safetensors", T0)
    touch(train / "ckpt-2.safetensors", T0 + 50, NAN)  # refused by the deploy step
    touch(deploy / "model.safetensors", T0 + 60, NAN)  # ... or shipped anyway
    r = check_deploy_stale(train, deploy, threshold_s=600, now=T0 + 601)
    assert r is not None
    assert (r.train_path, r.deploy_path, r.lag_s) == (good, None, 601)


def test_human_duration_keeps_a_passed_limit_apart_from_the_limit() -> None:
    got = [human_duration(s) for s in (-3, 0, 45, 300, 301.9, 7201, 30 * 3600, 50 * 3600 + 59)]
    assert got == ["0 s", "0 s", "45 s", "5 min", "5 min 1 s", "2 h 1 s", "1 d 6 h", "2 d 2 h 59 s"]


def test_stale_when_newer_training_output_waits_past_threshold(tmp_path: Path) -> None:
    train, deploy = tmp_path / "train", tmp_path / "deploy"
    touch(deploy / "model.safetensors", T0)
    new = touch(train / "ckpt-2" / "model.safetensors", T0 + 100)
    touch(train / "ckpt-1" / "model.safetensors", T0 + 50)
    touch(train / "notes.txt", T0 + 500)  # not weights
    assert check_deploy_stale(train, deploy, threshold_s=600, now=T0 + 100 + 600) is None
    r = check_deploy_stale(train, deploy, threshold_s=600, now=T0 + 100 + 601)
    assert r is not None
    assert (r.train_path, r.train_mtime_s, r.lag_s) == (new, T0 + 100, 601)
    assert (r.deploy_path, r.deploy_mtime_s) == (deploy / "model.safetensors", T0)


def test_not_stale_when_deploy_is_current_or_nothing_trained(tmp_path: Path) -> None:
    train, deploy = tmp_path / "train", tmp_path / "deploy"
    touch(train / "model.safetensors", T0)
    touch(deploy / "model.safetensors", T0 + 1)
    assert check_deploy_stale(train, deploy, 0, now=T0 + 10_000) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_deploy_stale(empty, deploy, 0, now=T0 + 10_000) is None


def test_nothing_deployed_yet_counts_as_stale(tmp_path: Path) -> None:
    train = tmp_path / "train"
    touch(train / "w.gguf", T0, b"x")
    r = check_deploy_stale(train, tmp_path / "missing", 60, now=T0 + 61, is_good=lambda p: True)
    assert r is not None and r.deploy_path is None and r.deploy_mtime_s is None


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        check_deploy_stale(tmp_path / "nope", tmp_path, 1, now=T0)
    with pytest.raises(ValueError, match="threshold_s"):
        check_deploy_stale(tmp_path, tmp_path, -1, now=T0)


def test_stable_file_tracker(tmp_path: Path) -> None:
    a = touch(tmp_path / "a.safetensors", T0, b"1")
    b = touch(tmp_path / "b.safetensors", T0, b"1")
    tr = StableFileTracker()
    assert tr.observe([a, b], now=T0 + 1) == []  # first sight
    touch(b, T0 + 2, b"12")  # b still being written
    assert tr.observe([a, b], now=T0 + 3) == [a]
    assert tr.observe([a, b], now=T0 + 5) == [b]  # a already reported
    assert tr.observe([a, b], now=T0 + 7) == []
    touch(a, T0 + 8, b"123")  # rewritten: must settle again
    assert tr.observe([a, b], now=T0 + 9) == []
    assert tr.observe([a, b], now=T0 + 11) == [a]
    a.unlink()
    assert tr.observe([a, b], now=T0 + 13) == []  # vanished files are dropped


def test_stable_tracker_min_interval_and_mtime_only_change(tmp_path: Path) -> None:
    a = touch(tmp_path / "a.bin", T0, b"same")
    tr = StableFileTracker(min_interval_s=30)
    assert tr.observe([a], now=T0 + 1) == []
    assert tr.observe([a], now=T0 + 10) == []  # unchanged but too soon
    os.utime(a, (T0 + 20, T0 + 20))  # same size, new mtime
    assert tr.observe([a], now=T0 + 40) == []
    assert tr.observe([a], now=T0 + 71) == [a]
