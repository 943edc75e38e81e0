"""Issue 32, case 10: the ship gate's smaller holes, each kept as a test of its exact value
(Daemon.tick(now) with real files, a real StateDB and the real verifier thread)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import save_file

from rogue_watchdog.weights import shipwatch
from rogue_watchdog.weights.freshness import past_limit
from tests.conftest import run_cli
from tests.weights.test_shipwatch import NAMES, T0, good_model, nan_model, rig
from tests.weights.test_shipwatch import utc as utc  # autouse: local times in UTC


def sharded(deploy: Path, second: object) -> Path:
    """A two-shard model: shard 1 finite, shard 2 written by ``second``; returns the index."""
    good_model(deploy / "model-00001-of-00002.safetensors")
    second(deploy / "model-00002-of-00002.safetensors")  # type: ignore[operator]
    # Both shards hold every name (good_model/nan_model write them all); the index maps
    # the first half to shard 1 and the rest to shard 2.
    weight_map = {n: "model-00001-of-00002.safetensors" for n in NAMES[:112]}
    weight_map.update({n: "model-00002-of-00002.safetensors" for n in NAMES[112:]})
    index = deploy / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    return index


def test_an_index_whose_shard_was_quarantined_is_reported_incomplete(tmp_path: Path) -> None:
    """Case 10a. Before (4ec0a01): once shard 2 was quarantined, its finding resolved and
    nothing was open: the index stayed "verified" and nothing said the model was now
    incomplete. Now the index is refused as incomplete, naming the shard and its undo,
    until the shard is back and verified finite."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    index = sharded(deploy, nan_model)
    shard = deploy / "model-00002-of-00002.safetensors"
    r = rig(tmp_path, "    quarantine: true\n")
    try:
        r.tick(T0)
        r.tick(T0 + 5)  # verified: shard 2 is NaN and moved aside in this tick
        assert not shard.exists()
        [action] = r.db.actions()
        assert len(r.open("weights-unverified")) == 1  # incomplete from this very tick
        r.tick(T0 + 10)
        assert r.open("poisoned-weights") == []  # the shard's own finding resolved
        [f] = r.open("weights-unverified")
        moved = action.details["moved_to"]
        assert f.message == (
            f"ship gate prod: {index} is incomplete, so the model is refused: 1 of 2 shards"
            f" it names is missing: {shard} (quarantined to {moved};"
            f" undo: rogue-watchdog undo --config {r.config_path} {action.id})"
        )  # the daemon's own config (issue 33): pasted, the undo reads its state
        assert f.details["fingerprint"] == f"prod:{index}"
        assert f.details["missing_shards"] == [str(shard)]
        assert r.events("weights-unverified") == ["open"]

        # A finite shard 2 is deployed: the index is whole again and verified again.
        good_model(shard, seed=1)
        for i in range(3, 6):
            r.tick(T0 + 5 * i)
        assert r.open("weights-unverified") == []
        assert r.open("poisoned-weights") == []
        assert r.events("weights-unverified") == ["open", "resolve"]
    finally:
        r.close()


def test_an_index_is_judged_again_when_a_shard_changes(tmp_path: Path) -> None:
    """The class behind 10a: an index's verdict depends on its shards, so a shard
    replaced by one that lacks the index's tensors makes the index not verified,
    although the index file itself never changed."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    index = sharded(deploy, good_model)
    r = rig(tmp_path)
    try:
        for i in range(3):
            r.tick(T0 + 5 * i)
        assert r.open("weights-unverified") == []
        shard = deploy / "model-00002-of-00002.safetensors"
        tmp = shard.with_name("partial")
        save_file({"other": np.zeros((2, 2), dtype=np.float16)}, str(tmp))
        os.replace(tmp, shard)
        for i in range(3, 6):
            r.tick(T0 + 5 * i)
        [f] = r.open("weights-unverified")
        assert f.details["path"] == str(index)
        assert "shard 'model-00002-of-00002.safetensors' lacks 112 tensors" in f.message
    finally:
        r.close()


def test_an_index_deployed_before_its_shards_is_judged_once_it_settled(tmp_path: Path) -> None:
    """A deploy that writes the index first and the shards after is not paged half-way:
    a missing shard makes an index incomplete only once the index has settled."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    index = sharded(deploy, good_model)
    shard = deploy / "model-00002-of-00002.safetensors"
    shard.unlink()
    r = rig(tmp_path)
    try:
        r.tick(T0)  # first sight of the index: not settled
        assert r.open("weights-unverified") == []
        good_model(shard, seed=2)  # the deploy step finishes
        for i in range(1, 4):
            r.tick(T0 + 5 * i)
        assert r.open("weights-unverified") == []
        shard.unlink()  # later, a shard goes: the settled index is incomplete at once
        r.tick(T0 + 20)
        [f] = r.open("weights-unverified")
        assert f.message == (
            f"ship gate prod: {index} is incomplete, so the model is refused: 1 of 2 shards"
            f" it names is missing: {shard}"
        )
    finally:
        r.close()


def test_a_slow_writer_is_not_judged_between_ticks_milliseconds_apart(tmp_path: Path) -> None:
    """Case 10b. A file written slowly, in nine pieces a few seconds apart, with two ticks
    a few milliseconds apart after each piece (extra ticks from process events). Before
    (4ec0a01, ``settle_s: 0``): those two polls saw the same half-written file, it was
    verified half-way and `weights-unverified` opened (a page) for a file that was never
    bad. Now ``settle_s`` (default 10 s, on the wall clock) keeps it unjudged while it is
    written, and the finished NaN file is reported once, as what it is."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    whole = nan_model(tmp_path / "whole.safetensors").read_bytes()
    target = deploy / "model.safetensors"
    r = rig(tmp_path, settle_s=None)
    try:
        now = T0
        step = len(whole) // 9 + 1
        with open(target, "wb") as fh:
            for i in range(9):
                fh.write(whole[i * step : (i + 1) * step])
                fh.flush()
                for _ in range(2):
                    r.tick(now)
                    now += 0.003
                now += 3.0
        for _ in range(5):  # finished: it settles and is verified
            r.tick(now)
            now += 5.0
        assert r.events("weights-unverified") == []
        assert r.events("poisoned-weights") == ["open"]
        assert r.counting.calls == ["model.safetensors"]  # read once, whole
    finally:
        r.close()


def test_settle_time_survives_a_wall_clock_set_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settle time is wall-clock time, and a wall clock set back by a day does not
    keep a NaN file unjudged for that day: the monotonic clock's 10 s count too."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    nan_model(deploy / "model.safetensors")
    mono = [100.0]
    monkeypatch.setattr(shipwatch, "time", SimpleNamespace(monotonic=lambda: mono[0]))
    r = rig(tmp_path, settle_s=None)
    try:
        r.tick(T0)
        r.tick(T0 + 9)  # 9 s on both clocks: not settled
        assert r.counting.calls == []
        mono[0] += 10.5
        r.tick(T0 - 86400)  # the wall clock went back a day; 10.5 s passed
        assert r.counting.calls == ["model.safetensors"]
        assert len(r.open("poisoned-weights")) == 1
    finally:
        r.close()


def test_a_wait_just_past_its_limit_never_reads_as_equal_to_it(tmp_path: Path) -> None:
    """Case 10c. Before (4ec0a01): a good output that had waited 120.4 s against a
    2-minute limit read "has waited 2 min (limit 2 min)": truncated to whole seconds, a
    wait just past the limit read as equal to it. Now the seconds get the decimals
    that tell them apart (truncated, so never more than it waited)."""
    deploy, train = tmp_path / "deploy", tmp_path / "train"
    deploy.mkdir()
    train.mkdir()
    out = good_model(train / "final.safetensors")
    r = rig(tmp_path, f"    train_dir: {train}\n    stale_after_s: 120\n")
    try:
        os.utime(out, (T0 - 120.4, T0 - 120.4))
        for t in (T0 - 10, T0 - 5):
            r.tick(t)
        assert r.open("deploy-stale") == []  # waited 115.4 s of 120
        r.tick(T0)
        [f] = r.open("deploy-stale")
        assert f.message == (
            f"ship gate prod: the deploy step did not run: newest good output {out}"
            f" (2023-11-14T22:11:19+00:00) has waited 2 min 0.4 s (limit 2 min) and nothing"
            f" verified finite is deployed in {deploy}"
        )
        assert f.details["waited_s"] == 120.4
    finally:
        r.close()


@pytest.mark.parametrize(
    ("value_s", "limit_s", "texts"),
    [
        (120.4, 120, ("2 min 0.4 s", "2 min")),  # case 10c
        (121.9, 120, ("2 min 1 s", "2 min")),  # whole seconds when they tell
        (120.05, 120, ("2 min 0.05 s", "2 min")),
        (120.0004, 120, ("just over 2 min", "2 min")),
        (90.7, 90.5, ("1 min 30.7 s", "1 min 30.5 s")),  # a limit with decimals, exact
        (7200.3, 7200, ("2 h 0.3 s", "2 h")),
        (3 * 86400 + 2.3, 86400, ("3 d 2 s", "1 d")),
    ],
)
def test_past_limit_words(value_s: float, limit_s: float, texts: tuple[str, str]) -> None:
    assert past_limit(value_s, limit_s) == texts


def test_undo_dry_run_predicts_the_failure_the_undo_then_has(tmp_path: Path) -> None:
    """Case 10e. A NaN model is quarantined, then the deploy step ships a fixed one at
    the same path. Before (4ec0a01): ``undo ID --dry-run`` printed ``would undo … rename
    … back to …`` and ``outcome: dry-run``, exit 0; the undo itself then failed (exit 1,
    "exists again"). Now the dry run checks what the undo checks, and says it would fail."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    model = nan_model(deploy / "model.safetensors")
    r = rig(tmp_path, "    quarantine: true\n")
    try:
        r.tick(T0)
        r.tick(T0 + 5)
        [action] = r.db.actions()
        good_model(model)  # the deploy step ships a fixed model
        state = str(tmp_path / "state")
        # --force: the file is still NaN (undo refuses that first: issue 33); this is
        # about the path taken again.
        dry = run_cli("undo", str(action.id), "--dry-run", "--force", "--state-dir", state)
        real = run_cli("undo", str(action.id), "--force", "--state-dir", state)
        moved = action.details["moved_to"]
        why = (
            f"rename {moved} back to {model}: {model} exists again; not overwriting it with {moved}"
        )
        assert (dry.returncode, dry.stdout) == (
            1,
            f"would undo action {action.id} (quarantine-weights {model}):\n"
            f"  WOULD FAIL: {why}\noutcome: would-fail\n",
        )
        assert (real.returncode, real.stdout) == (
            1,
            f"undo action {action.id} (quarantine-weights {model}):\n"
            f"  FAILED: {why}\noutcome: failed\n",
        )
    finally:
        r.close()


def test_check_config_refuses_a_quarantine_folder_on_another_file_system(tmp_path: Path) -> None:
    """Case 10f. Before (4ec0a01): ``check-config`` said OK (exit 0) for a quarantine
    folder on another file system, where every quarantine then fails (a rename across
    file systems is not atomic: EXDEV). Now it is an error naming file, line and key."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the temp dir")
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    qdir = shm / f"rw-quarantine-{os.getpid()}" / "prod"  # not created yet: /dev/shm decides
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "ship_gates:\n"
        "  - name: prod\n"
        f"    deploy_dir: {deploy}\n"
        "    quarantine: true\n"
        f"    quarantine_dir: {qdir}\n"
        "  - name: same\n"
        f"    deploy_dir: {deploy}\n"
        "    quarantine: true\n"
        f"    quarantine_dir: {tmp_path}/q\n"
    )
    res = run_cli("check-config", str(cfg))
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (
        f"rogue-watchdog: config error: {cfg}:5: ship_gates[0].quarantine_dir: {qdir} is on"
        f" another file system than deploy_dir {deploy}: a rename across file systems is not"
        " atomic (EXDEV), so every quarantine would fail; leave quarantine_dir out (the"
        " default lies inside deploy_dir) or name a folder on the same file system\n"
        f"rogue-watchdog: {cfg}: 1 error\n"
    )
    assert not qdir.parent.exists()  # checking created nothing


def test_a_shard_replaced_by_rm_then_cp_is_not_an_incomplete_model(tmp_path: Path) -> None:
    """A shard missing for less than ``settle_s`` (10 s here) may be one being replaced
    (rm, then cp): no page; one gone for longer makes the index incomplete."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    index = sharded(deploy, good_model)
    shard = deploy / "model-00002-of-00002.safetensors"
    r = rig(tmp_path, settle_s=None)
    try:
        for i in range(4):
            r.tick(T0 + 5 * i)
        shard.unlink()  # the deploy step removes it, then copies the new one
        r.tick(T0 + 20)
        good_model(shard, seed=3)
        for i in range(5, 9):
            r.tick(T0 + 5 * i)
        assert r.ever("weights-unverified") == []
        shard.unlink()  # now gone for good
        r.tick(T0 + 45)
        assert r.open("weights-unverified") == []  # gone 0 s of 10
        r.tick(T0 + 55)
        [f] = r.open("weights-unverified")
        assert f.details["path"] == str(index)
    finally:
        r.close()
