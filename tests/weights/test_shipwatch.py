"""Ship gates in the daemon: Daemon.tick(now) with real files, a real StateDB and the real
verifier thread; the clock is fake, file times are set with os.utime."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shlex
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from rogue_watchdog.config import parse_config
from rogue_watchdog.config.ship_gates import DEFAULT_PATTERNS
from rogue_watchdog.daemon.loop import Daemon
from rogue_watchdog.model import Finding
from rogue_watchdog.state import FindingRecord, StateDB
from rogue_watchdog.weights.report import FileReport
from rogue_watchdog.weights.scan import ScanContext
from rogue_watchdog.weights.shipwatch import ShipGateSource, build_ship_gate_sources, list_files
from rogue_watchdog.weights.verifyworker import VerifyWorker, verify_one
from tests.conftest import run_cli

from .builders import write_torch_zip

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times in messages are local; pin the zone so expected strings are literal."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


class Counting:
    """The real verifier, counting calls per path."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, path: Path, ctx: ScanContext) -> FileReport:
        self.calls.append(path.name)
        return verify_one(path, ctx)


class Rig:
    """A daemon with ship gates from ``gate_yaml`` and its state under ``tmp``."""

    def __init__(
        self, tmp: Path, gate_yaml: str, verify: object = None, settle_s: float | None = 0.0
    ) -> None:
        self.tmp = tmp
        cfg = parse_config(
            "nvml: {enabled: false}\n"
            f"daemon: {{state_dir: '{tmp}/state'}}\n"
            f"alerts: {{sinks: [{{type: log, path: '{tmp}/alerts.log'}}]}}\n"
            "ship_gates:\n" + gate_yaml,
            f"{tmp}/t.yaml",
        )
        self.config_path = f"{tmp}/t.yaml"
        self.db = StateDB(cfg.daemon.state_dir)
        self.counting = Counting()
        self.worker = VerifyWorker(verify or self.counting)  # type: ignore[arg-type]
        self.sources = build_ship_gate_sources(cfg, self.db, self.worker)
        self.daemon = Daemon(cfg, None, db=self.db, sources=self.sources, workers=[self.worker])
        if verify is None:
            # Deterministic ticks: a file submitted in a tick is reported in that tick
            # (the default 0.25 s wait is what test_a_slow_verification... exercises).
            for s in self.sources:
                s.wait_s = 60.0
                s.last_good_wait_s = 60.0
        if settle_s is not None and "settle_s" not in gate_yaml:
            # These ticks are seconds apart in fake time: "two polls" is what they test
            # (the default settle_s has tests of its own, in test_gate_holes.py).
            for s in self.sources:
                s.settle_s = settle_s

    @property
    def source(self) -> ShipGateSource:
        return self.sources[0]

    def tick(self, now: float, settle: bool = True) -> None:
        """One tick; with ``settle`` first wait for queued verifications to finish."""
        if settle:
            assert self.worker.wait(60)
        self.daemon.tick(now)
        assert not self.daemon.degraded, self.daemon.degraded

    def open(self, kind: str) -> list[FindingRecord]:
        return [f for f in self.db.open_findings() if f.kind == kind]

    def ever(self, kind: str) -> list[FindingRecord]:
        """Open and resolved findings of ``kind``, oldest first."""
        rows = self.db.conn.execute("SELECT id FROM findings WHERE kind=? ORDER BY id", (kind,))
        out = [self.db.finding(row[0]) for row in rows]
        return [f for f in out if f is not None]

    def events(self, kind: str) -> list[str]:
        rows = self.db.conn.execute("SELECT event, payload_json FROM deliveries ORDER BY id")
        return [e for e, p in rows if json.loads(p)["finding"]["kind"] == kind]

    def close(self) -> None:
        self.worker.stop()
        self.db.close()


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    deploy, train = tmp_path / "deploy", tmp_path / "train"
    deploy.mkdir()
    train.mkdir()
    return deploy, train


def rig(
    tmp_path: Path, extra: str = "", verify: object = None, settle_s: float | None = 0.0
) -> Rig:
    """A rig with one gate ``prod``; ``settle_s=None`` keeps the configured default."""
    r = Rig(
        tmp_path,
        f"  - name: prod\n    deploy_dir: {tmp_path}/deploy\n" + extra,
        verify,
        settle_s,
    )
    return r


NAMES = [f"model.layers.{i // 7}.proj{i % 7}.weight" for i in range(224)]


def nan_model(path: Path) -> Path:
    """The incident: 224 fp16 tensors, every value NaN (4x8 each: 7168 NaNs).

    Written by the ``safetensors`` package, as a training script would.
    """
    nan = np.full((4, 8), np.nan, dtype=np.float16)
    save_file({n: nan for n in NAMES}, str(path))
    return path


def good_model(path: Path, seed: int = 0) -> Path:
    arr = np.random.default_rng(seed).standard_normal((4, 8)).astype(np.float16)
    save_file({n: arr for n in NAMES}, str(path))
    return path


def replace(path: Path, writer: object) -> None:
    """Deploy the way a careful deploy step does: write aside, rename over."""
    tmp = path.with_name(path.name + ".partial")
    writer(tmp)  # type: ignore[operator]
    os.replace(tmp, path)


def test_poisoned_weights_open_after_two_polls_and_resolve_on_finite_replacement(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    deploy, _ = dirs
    r = rig(tmp_path)
    try:
        model = nan_model(deploy / "model.safetensors")
        r.tick(T0)
        assert r.counting.calls == []  # one poll: not settled, not read
        assert r.open("poisoned-weights") == []
        r.tick(T0 + 5)  # same size and mtime at two polls: verified now
        assert r.counting.calls == ["model.safetensors"]
        [f] = r.open("poisoned-weights")
        assert f.opened_at == T0 + 5
        assert f.severity == "critical"
        # What to do next (issue 33): before, the message stopped after the counts.
        assert f.message == (
            f"ship gate prod: {model} holds non-finite weights: 224 of 224 tensors"
            " non-finite (7168 NaN, 0 +Inf, 0 -Inf); next: move it out of "
            f"{tmp_path}/deploy before anything loads it (quarantine: true on gate prod has "
            f"the daemon do that, undoably); deploy the last good checkpoint to {model} "
            "through ``rogue-watchdog ship`` (it copies only weights that verify "
            "finite; ``rogue-watchdog verify-weights`` tells whether a checkpoint does)"
        )
        assert f.details["fingerprint"] == f"prod:{model}"
        assert f.details["totals"] == {
            "tensors": 224, "bad_tensors": 224, "nan": 7168, "posinf": 0, "neginf": 0,
        }  # fmt: skip
        assert f.details["bad_tensors"] == NAMES[:10]
        r.tick(T0 + 10)
        r.tick(T0 + 20)
        assert r.counting.calls == ["model.safetensors"]  # cached: read once
        assert r.db.finding(f.id).seen_count == 3  # type: ignore[union-attr]
        assert r.events("poisoned-weights") == ["open"]

        replace(model, good_model)
        r.tick(T0 + 25)  # the new version is not verified yet: still refused
        assert [x.id for x in r.open("poisoned-weights")] == [f.id]
        r.tick(T0 + 30)
        assert r.counting.calls == ["model.safetensors", "model.safetensors"]
        assert r.open("poisoned-weights") == []
        done = r.db.finding(f.id)
        assert done is not None and done.resolved_at is not None
        assert r.events("poisoned-weights") == ["open", "resolve"]
    finally:
        r.close()


def test_removed_file_resolves(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    deploy, _ = dirs
    r = rig(tmp_path)
    try:
        model = nan_model(deploy / "model.safetensors")
        for i in range(3):
            r.tick(T0 + 5 * i)
        assert len(r.open("poisoned-weights")) == 1
        model.unlink()
        r.tick(T0 + 15)
        assert r.open("poisoned-weights") == []
        assert r.events("poisoned-weights") == ["open", "resolve"]
    finally:
        r.close()


def test_file_still_being_written_is_not_verified(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    deploy, _ = dirs
    r = rig(tmp_path)
    try:
        whole = nan_model(tmp_path / "whole.safetensors").read_bytes()
        target = deploy / "model.safetensors"
        with open(target, "wb") as fh:
            for i, n in enumerate((1000, 5000, 9000)):
                fh.write(whole[fh.tell() : n])
                fh.flush()
                r.tick(T0 + 5 * i)
            assert r.counting.calls == []  # size changed between every two polls
            assert [f for f in r.db.open_findings() if f.details.get("gate")] == []
            fh.write(whole[fh.tell() :])
        r.tick(T0 + 15)  # first sight of the finished file
        assert r.counting.calls == []
        r.tick(T0 + 20)
        assert r.counting.calls == ["model.safetensors"]
        assert len(r.open("poisoned-weights")) == 1
    finally:
        r.close()


def test_settle_s_needs_that_long_between_the_two_polls(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    deploy, _ = dirs
    r = rig(tmp_path, "    settle_s: 60\n")
    try:
        nan_model(deploy / "model.safetensors")
        r.tick(T0)
        r.tick(T0 + 30)
        r.tick(T0 + 59)
        assert r.counting.calls == []
        r.tick(T0 + 60)
        assert r.counting.calls == ["model.safetensors"]
    finally:
        r.close()


def test_truncated_file_is_weights_unverified(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    deploy, _ = dirs
    r = rig(tmp_path)
    try:
        whole = good_model(tmp_path / "whole.safetensors").read_bytes()
        cut = deploy / "model.safetensors"
        cut.write_bytes(whole[:-100])
        for i in range(3):
            r.tick(T0 + 5 * i)
        [f] = r.open("weights-unverified")
        assert f.severity == "high"
        assert f.message.partition("; next: ")[0] == (
            f"ship gate prod: {cut} could not be verified, so it is refused:"
            " `tensor 'model.layers.9.proj5.weight': offsets 14208..14272 outside the"
            " 14236-byte buffer`"
        )
        assert r.open("poisoned-weights") == []
    finally:
        r.close()


def test_pickle_calling_os_system_is_refused_and_never_runs(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    deploy, _ = dirs
    r = rig(tmp_path, "    quarantine: true\n")
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {marker}",))

    try:
        evil = write_torch_zip(
            deploy / "pytorch_model.bin", None, {}, pickle_data=pickle.dumps({"w": Evil()})
        )
        for i in range(3):
            r.tick(T0 + 5 * i)
        [f] = r.open("weights-unverified")
        assert f.message.startswith(f"ship gate prod: {evil} could not be verified, so it is")
        assert "not a tensor rebuild function" in f.message
        assert not marker.exists()
        assert evil.exists()  # only non-finite files are quarantined
        assert r.db.actions() == []
    finally:
        r.close()


def test_quarantine_moves_the_file_and_undo_restores_it(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    deploy, _ = dirs
    r = rig(tmp_path, "    quarantine: true\n")
    try:
        (deploy / "v3").mkdir()
        model = nan_model(deploy / "v3" / "model.safetensors")
        digest = hashlib.sha256(model.read_bytes()).hexdigest()
        r.tick(T0)
        r.tick(T0 + 5)  # verified, reported and moved aside in this tick
        assert not model.exists()
        qdir = deploy / ".rogue-watchdog-quarantine"
        moved = qdir / "v3" / "model.safetensors.20231114T221325Z.quarantined"
        assert moved.exists()
        [action] = r.db.actions()
        assert (action.kind, action.target, action.outcome) == (
            "quarantine-weights", str(model), "done",
        )  # fmt: skip
        assert action.undo == [{"op": "rename", "from": str(model), "to": str(moved)}]  # type: ignore[comparison-overlap]
        assert action.details["moved_to"] == str(moved)
        [f] = r.open("poisoned-weights")
        assert f.message.partition("; next: ")[0] == (
            f"ship gate prod: {model} holds non-finite weights: 224 of 224 tensors non-finite"
            f" (7168 NaN, 0 +Inf, 0 -Inf); moved to {moved}"
            f" (undo: rogue-watchdog undo --config {r.config_path} {action.id})"
        )
        assert (f.details["quarantined_to"], f.details["action_id"]) == (str(moved), action.id)
        r.tick(T0 + 10)  # gone from the deploy directory: resolved
        assert r.open("poisoned-weights") == []
        assert r.events("poisoned-weights") == ["open", "resolve"]
        assert os.stat(qdir).st_mode & 0o777 == 0o700
        r.tick(T0 + 15)
        assert r.ever("poisoned-weights") == [r.db.finding(f.id)]  # not picked up again

        # Issue 33, fresh user F: undo put the NaN file back with no warning; the gate
        # quarantined it again 5 s later, with another critical page. Before (132b2a1):
        # rc 0, the file back. Now: refused (rc 1), saying why and how to insist; the
        # file stays where it is, the action not undone.
        state = ["--state-dir", str(tmp_path / "state")]
        out = run_cli("undo", str(action.id), *state)
        assert out.returncode == 1, out.stdout + out.stderr
        assert out.stdout.startswith(
            f"action {action.id} (quarantine-weights {model}): refusing: {moved} still "
            "holds non-finite values (tensor "
        ), out.stdout
        assert out.stdout.rstrip().endswith(
            "put back, it would be quarantined again at the gate's next look. Inspect it "
            "where it is; to put it back anyway (quarantined again, recorded, not paged "
            f"again): rogue-watchdog undo --state-dir {tmp_path / 'state'} --force {action.id}"
        ), out.stdout
        assert moved.exists() and not model.exists()
        kept = r.db.action(action.id)
        assert kept is not None and kept.undone_at is None
        # --force: the generic undo (the enforcement CLI) renames it back, byte for byte.
        out = run_cli("undo", str(action.id), *state, "--force")
        assert out.returncode == 0, out.stdout + out.stderr
        assert hashlib.sha256(model.read_bytes()).hexdigest() == digest
        assert not moved.exists()
        undone = r.db.action(action.id)
        assert undone is not None and undone.undone_at is not None
        # The gate quarantines it again (as it must), recorded, but pages no more: the
        # one who forced it back was told. Before: another critical open (and resolve).
        r.tick(T0 + 20)
        r.tick(T0 + 25)
        assert not model.exists()
        again = r.ever("poisoned-weights")[-1]
        assert again.id != f.id and again.severity == "info"
        assert "put back by ``rogue-watchdog undo --force`` (action " in again.message
        sent = [
            (e, json.loads(p)["finding"]["severity"])
            for e, p in r.db.conn.execute("SELECT event, payload_json FROM deliveries")
            if json.loads(p)["finding"]["kind"] == "poisoned-weights"
        ]
        assert [x for x in sent if x[1] == "critical"] == [
            ("open", "critical"),
            ("resolve", "critical"),
        ]
    finally:
        r.close()


def test_undo_of_a_quarantine_whose_file_was_repaired_needs_no_force(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    """The refusal is about the file as it is now: once the quarantined copy verifies
    finite (repaired where it lies), ``undo`` puts it back without ``--force``."""
    deploy, _ = dirs
    r = rig(tmp_path, "    quarantine: true\n")
    try:
        model = nan_model(deploy / "model.safetensors")
        r.tick(T0)
        r.tick(T0 + 5)
        [action] = r.db.actions()
        moved = Path(action.details["moved_to"])
        good_model(moved.with_name("fixed.safetensors")).replace(moved)
        out = run_cli("undo", str(action.id), "--state-dir", str(tmp_path / "state"))
        assert out.returncode == 0, out.stdout + out.stderr
        assert model.exists() and not moved.exists()
    finally:
        r.close()


def test_quarantine_to_another_file_system_fails_without_copying(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    deploy, _ = dirs
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the temp dir")
    qdir = shm / f"rw-quarantine-{os.getpid()}"
    r = rig(tmp_path, f"    quarantine: true\n    quarantine_dir: {qdir}\n")
    try:
        model = nan_model(deploy / "model.safetensors")
        for i in range(4):
            r.tick(T0 + 5 * i)
        assert model.exists()
        assert len(r.db.actions()) == 1  # tried once per file version, not every tick
        [f] = r.open("poisoned-weights")
        assert f.message.partition("; next: ")[0].endswith(
            f"; quarantine failed: quarantine folder {qdir} is on another file system than {model}"
        )
        [action] = r.db.actions()
        assert (action.outcome, action.undo) == ("failed", None)
        assert list(qdir.iterdir()) == []  # nothing was copied
    finally:
        r.close()
        shutil.rmtree(qdir, ignore_errors=True)


def test_deploy_stale_names_the_newest_good_output(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    deploy, train = dirs
    r = rig(tmp_path, f"    train_dir: {train}\n    stale_after_s: 86400\n")
    try:
        deployed = good_model(deploy / "model.safetensors", 1)
        os.utime(deployed, (T0 - 80 * 3600, T0 - 80 * 3600))
        old = good_model(train / "ckpt-100.safetensors", 2)
        os.utime(old, (T0 - 90 * 3600, T0 - 90 * 3600))  # older than deployed: irrelevant
        out = good_model(train / "ckpt-200.safetensors", 3)
        os.utime(out, (T0 - 30 * 3600, T0 - 30 * 3600))
        nan = nan_model(train / "ckpt-300.safetensors")  # newest, but NaN: not good
        os.utime(nan, (T0 - 25 * 3600, T0 - 25 * 3600))
        for i in range(4):
            r.tick(T0 + i)
        [f] = r.open("deploy-stale")
        assert f.severity == "high"
        assert f.message.partition("; next: ")[0] == (
            f"ship gate prod: the deploy step did not run: newest good output {out}"
            f" (2023-11-13T16:13:20+00:00) is 2 d 2 h newer than deployed {deployed}"
            " (2023-11-11T14:13:20+00:00); it has waited 1 d 6 h 3 s (limit 1 d)"
        )
        assert "ckpt-100.safetensors" not in r.counting.calls  # older than deployed
        assert r.open("poisoned-weights") == []  # training outputs are not gated

        # The deploy step runs (cp -p keeps the mtime): no longer stale.
        shutil.copy2(out, deploy / "model.safetensors")
        for i in range(5, 8):
            r.tick(T0 + i)
        assert r.open("deploy-stale") == []
        assert r.events("deploy-stale") == ["open", "resolve"]
    finally:
        r.close()


def test_poisoned_weights_name_the_newest_good_output_and_how_to_ship_it(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    # Issue 33: the finding said what was wrong but not what to do next.
    deploy, train = dirs
    r = rig(tmp_path, f"    train_dir: {train}\n    stale_after_s: 86400\n")
    try:
        model = nan_model(deploy / "model.safetensors")
        good = good_model(train / "ckpt-200.safetensors", 3)
        os.utime(good, (T0 - 30 * 3600, T0 - 30 * 3600))
        nan_model(train / "ckpt-300.safetensors")  # newer, but NaN: not the one to ship
        # When the finding opens, training outputs are verified newest first: ckpt-300
        # (NaN), then ckpt-200, so the page itself names the newest good one.
        for i in range(4):
            r.tick(T0 + 5 * i)
        [f] = r.open("poisoned-weights")
        [page] = paged(r, "poisoned-weights")
        assert page == f.message
        steps = f.message.partition("; next: ")[2]
        assert steps == (
            f"move it out of {deploy} before anything loads it (quarantine: true on gate prod "
            "has the daemon do that, undoably); "
            f"the newest training output verified finite is {good} "
            f"(2023-11-13T16:13:20+00:00); deploy it with: rogue-watchdog ship {good} {model}"
        )
        assert f.details["last_good"] == str(good)
    finally:
        r.close()


def paged(r: Rig, kind: str) -> list[str]:
    """The messages of the ``open`` alerts of ``kind`` (what a person was sent), in order."""
    rows = r.db.conn.execute("SELECT event, payload_json FROM deliveries ORDER BY id")
    found = [(e, json.loads(p)["finding"]) for e, p in rows]
    return [f["message"] for e, f in found if e == "open" and f["kind"] == kind]


def h_shape(
    tmp_path: Path, dirs: tuple[Path, Path], quarantine: bool = True, verify: object = None
) -> tuple[Rig, Path, Path]:
    """Fresh user H's gate (issue 33, trip 2): train_dir holds good.safetensors and, newer,
    bad.safetensors (NaN), both older than the deployed copy of the good one; returns the
    rig, ticked until everything there is judged, with good.safetensors and model2's path."""
    deploy, train = dirs
    q = str(quarantine).lower()
    r = rig(tmp_path, f"    train_dir: {train}\n    quarantine: {q}\n", verify)
    good = good_model(train / "good.safetensors", 3)
    bad = nan_model(train / "bad.safetensors")
    os.utime(good, (T0 - 3600, T0 - 3600))
    os.utime(bad, (T0 - 3599, T0 - 3599))  # the newest training output is the NaN one
    shutil.copyfile(good, deploy / "model.safetensors")
    os.utime(deploy / "model.safetensors", (T0 - 3598, T0 - 3598))  # deployed after both
    for i in range(3):
        r.tick(T0 + i)
    assert r.open("poisoned-weights") == []
    return r, good, deploy / "model2.safetensors"


def test_the_page_names_the_good_output_when_the_newest_output_is_the_nan_file_itself(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    # Fresh user H (issue 33, trip 2): `cp train/bad.safetensors prod/model2.safetensors`;
    # the critical page (quarantined, resolved 5 s later: the only message) said only
    # "deploy the last good checkpoint ... through `rogue-watchdog ship`". Outputs older
    # than the deployed good file were never verified, so no tick would have named it.
    r, good, model2 = h_shape(tmp_path, dirs)
    try:
        shutil.copyfile(tmp_path / "train" / "bad.safetensors", model2)  # cp: a new mtime
        os.utime(model2, (T0 + 10, T0 + 10))
        for i in range(3):
            r.tick(T0 + 10 + i)
        [page] = paged(r, "poisoned-weights")
        assert page.partition("; next: ")[2] == (
            f"the newest training output verified finite is {good} "
            f"(2023-11-14T21:13:20+00:00); deploy it with: rogue-watchdog ship {good} {model2}"
        )
        [f] = r.ever("poisoned-weights")
        assert f.details["last_good"] == str(good)
        assert f.details["quarantined_to"]
        # The command works as printed: the good weights are deployed where the bad were.
        cmd = shlex.split(page.partition("deploy it with: ")[2])
        assert cmd[0] == "rogue-watchdog"
        out = run_cli(*cmd[1:])
        assert out.returncode == 0, out.stdout + out.stderr
        assert model2.read_bytes() == good.read_bytes()
    finally:
        r.close()


def test_outputs_past_the_byte_bound_are_said_unverified_then_verified_in_the_background(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    # good.safetensors is past the bound (last_good_bytes): the page says what is not
    # verified and how to check it, never a guess; later ticks verify it in the
    # background and the open finding (status) names it. (bad.safetensors was verified
    # at the first ticks, before the deployed file was known good.)
    r, good, model2 = h_shape(tmp_path, dirs, quarantine=False)
    train = tmp_path / "train"
    try:
        assert r.counting.calls.count("bad.safetensors") == 1
        r.source.last_good_bytes = good.stat().st_size - 1
        shutil.copyfile(train / "bad.safetensors", model2)
        os.utime(model2, (T0 + 10, T0 + 10))
        r.tick(T0 + 10)
        r.tick(T0 + 11)
        [page] = paged(r, "poisoned-weights")
        assert page.partition("; next: ")[2] == (
            f"move it out of {tmp_path}/deploy before anything loads it (quarantine: true on "
            f"gate prod has the daemon do that, undoably); deploy the last good checkpoint to "
            f"{model2} through ``rogue-watchdog ship`` (it copies only weights that verify "
            "finite; ``rogue-watchdog verify-weights`` tells whether a checkpoint does); "
            f"1 training output in {train} is not verified yet, so none is named; "
            f"check: rogue-watchdog verify-weights {good}"
        )
        r.tick(T0 + 12)
        r.tick(T0 + 13)
        [f] = r.open("poisoned-weights")
        assert f.details["last_good"] == str(good)
        assert f.message.partition("; next: ")[2].endswith(
            f"the newest training output verified finite is {good} "
            f"(2023-11-14T21:13:20+00:00); deploy it with: rogue-watchdog ship {good} {model2}"
        )
        assert paged(r, "poisoned-weights") == [page]  # one page
        calls = r.counting.calls
        assert calls.count("good.safetensors") == calls.count("bad.safetensors") == 1
    finally:
        r.close()


def test_an_older_good_output_is_named_with_the_newer_ones_not_verified_yet(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    # big.safetensors, newer than good.safetensors, is past the byte bound: good is
    # named as the newest verified "so far", and big as not verified, with the command.
    r, good, model2 = h_shape(tmp_path, dirs)
    train = tmp_path / "train"
    try:
        big = train / "big.safetensors"
        arr = np.zeros((64, 64), dtype=np.float32)
        save_file({n: arr for n in NAMES}, str(big))
        os.utime(big, (T0 - 3599.5, T0 - 3599.5))  # between good and bad
        r.source.last_good_bytes = good.stat().st_size
        shutil.copyfile(train / "bad.safetensors", model2)
        os.utime(model2, (T0 + 10, T0 + 10))
        r.tick(T0 + 10)
        r.tick(T0 + 11)
        [page] = paged(r, "poisoned-weights")
        assert page.partition("; next: ")[2] == (
            f"the newest training output verified finite so far is {good} "
            f"(2023-11-14T21:13:20+00:00); deploy it with: rogue-watchdog ship {good} {model2}; "
            f"1 newer training output in {train} is not verified yet, so it may not be the "
            f"newest good one; check: rogue-watchdog verify-weights {big}"
        )
        [f] = r.ever("poisoned-weights")
        assert f.details["train_unverified"] == [str(big)]
    finally:
        r.close()


def test_outputs_past_the_time_bound_are_said_unverified(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    # A training output too slow to verify within last_good_wait_s (held here until
    # released): the page opens anyway, saying it is not verified yet.
    release, armed = threading.Event(), threading.Event()
    calls: list[str] = []

    def held(path: Path, ctx: ScanContext) -> FileReport:
        calls.append(path.name)
        if path.parent.name == "train" and armed.is_set():
            release.wait(60)  # a huge checkpoint on a slow disk
        return verify_one(path, ctx)

    r, good, model2 = h_shape(tmp_path, dirs, quarantine=False, verify=held)
    train = tmp_path / "train"
    try:
        r.source.wait_s = 60.0  # the deploy file itself is verified within its tick
        r.source.last_good_wait_s = 0.2
        armed.set()
        shutil.copyfile(train / "bad.safetensors", model2)
        os.utime(model2, (T0 + 10, T0 + 10))
        r.tick(T0 + 10)
        r.tick(T0 + 11)
        [page] = paged(r, "poisoned-weights")
        assert page.partition("; next: ")[2].endswith(
            "verify-weights`` tells whether a checkpoint does); "
            f"1 training output in {train} is not verified yet, so none is named; "
            f"check: rogue-watchdog verify-weights {good}"
        )
        release.set()
        for i in range(2, 5):
            r.tick(T0 + 10 + i)
        [f] = r.open("poisoned-weights")
        assert f.details["last_good"] == str(good)
        assert "train_unverified" not in f.details
        assert sorted(calls) == ["bad.safetensors", "good.safetensors", "model.safetensors",
                                 "model2.safetensors"]  # fmt: skip
    finally:
        release.set()
        r.close()


def test_when_no_training_output_is_finite_the_page_says_so(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    deploy, train = dirs
    r = rig(tmp_path, f"    train_dir: {train}\n    quarantine: true\n")
    try:
        nan_model(train / "ckpt-1.safetensors")
        nan_model(train / "ckpt-2.safetensors")
        model = nan_model(deploy / "model.safetensors")
        for i in range(3):
            r.tick(T0 + i)
        [page] = paged(r, "poisoned-weights")
        assert page.partition("; next: ")[2] == (
            f"no training output in {train} verifies finite (2 checked); deploy the last good "
            f"checkpoint to {model} through ``rogue-watchdog ship`` (it copies only weights that "
            "verify finite; ``rogue-watchdog verify-weights`` tells whether a checkpoint does)"
        )
    finally:
        r.close()


def test_not_stale_before_the_limit_and_nothing_deployed(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    deploy, train = dirs
    r = rig(tmp_path, f"    train_dir: {train}\n    stale_after_s: 7200\n")
    try:
        out = good_model(train / "final.safetensors")
        os.utime(out, (T0 - 3600, T0 - 3600))
        for i in range(3):
            r.tick(T0 + i)
        assert r.open("deploy-stale") == []  # waited 1 h of 2 h
        r.tick(T0 + 3601)
        [f] = r.open("deploy-stale")
        assert f.message.partition("; next: ")[0] == (
            f"ship gate prod: the deploy step did not run: newest good output {out}"
            f" (2023-11-14T21:13:20+00:00) has waited 2 h 1 s (limit 2 h) and nothing verified"
            f" finite is deployed in {deploy}"
        )
    finally:
        r.close()


def test_a_deployed_nan_file_does_not_count_as_deployed(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    """Only the NaN file is deployed; the older good output still waits: stale, in minutes."""
    deploy, train = dirs
    r = rig(tmp_path, f"    train_dir: {train}\n    stale_after_s: 300\n")
    try:
        out = good_model(train / "ckpt-100.safetensors")
        os.utime(out, (T0 - 400, T0 - 400))
        bad = nan_model(train / "ckpt-200.safetensors")
        os.utime(bad, (T0 - 200, T0 - 200))
        shipped = nan_model(deploy / "model.safetensors")  # the deploy shipped the NaN run
        os.utime(shipped, (T0 - 100, T0 - 100))
        for i in range(3):
            r.tick(T0 + i)
        assert len(r.open("poisoned-weights")) == 1
        [f] = r.open("deploy-stale")
        assert f.message.partition("; next: ")[0] == (
            f"ship gate prod: the deploy step did not run: newest good output {out}"
            " (2023-11-14T22:06:40+00:00) has waited 6 min 42 s (limit 5 min) and nothing"
            f" verified finite is deployed in {deploy}"
        )
        assert f.details["deploy_path"] is None
    finally:
        r.close()


def test_index_shard_behind_a_symlinked_folder_is_gated(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    deploy, _ = dirs
    store = tmp_path / "store"
    store.mkdir()
    good_model(deploy / "model-00001-of-00002.safetensors")
    nan_model(store / "model-00002-of-00002.safetensors")
    (deploy / "shards").symlink_to(store)
    weight_map = {n: "model-00001-of-00002.safetensors" for n in NAMES[:1]}
    weight_map.update({n: "shards/model-00002-of-00002.safetensors" for n in NAMES[1:]})
    (deploy / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    r = rig(tmp_path, "    quarantine: true\n")
    try:
        for i in range(3):
            r.tick(T0 + i)
        [f] = r.open("poisoned-weights")
        shard = deploy / "shards" / "model-00002-of-00002.safetensors"
        assert f.message.partition("; next: ")[0] == (
            f"ship gate prod: {shard} holds non-finite weights: 224 of 224 tensors non-finite"
            f" (7168 NaN, 0 +Inf, 0 -Inf); not moved: it lies outside {deploy}"
            " (named by a shard index)"
        )
        assert r.open("weights-unverified") == []
        assert (store / "model-00002-of-00002.safetensors").exists()
    finally:
        r.close()


def test_missing_deploy_dir_is_reported_not_silent(tmp_path: Path) -> None:
    r = rig(tmp_path)
    try:
        r.tick(T0)
        [f] = r.open("ship-gate-degraded")
        assert f.message.partition("; next: ")[0] == (
            f"ship gate prod: deploy_dir not fully checked: {tmp_path}/deploy is not a directory"
        )
    finally:
        r.close()


def test_a_slow_verification_does_not_block_the_tick(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    deploy, _ = dirs
    release = threading.Event()

    def slow(path: Path, ctx: ScanContext) -> FileReport:
        release.wait(30)  # a huge file on a slow disk
        return verify_one(path, ctx)

    r = rig(tmp_path, verify=slow)
    try:
        nan_model(deploy / "model.safetensors")
        r.tick(T0, settle=False)
        started = time.monotonic()
        r.tick(T0 + 5, settle=False)  # submits; must not wait for the result
        r.tick(T0 + 10, settle=False)
        assert time.monotonic() - started < 3.0
        assert r.open("poisoned-weights") == []
        release.set()
        r.tick(T0 + 15)
        assert len(r.open("poisoned-weights")) == 1
    finally:
        release.set()
        r.close()


def test_patterns_choose_the_files(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    deploy, _ = dirs
    (deploy / "model.onnx").write_bytes(b"\x08\x07onnx")
    (deploy / "tokenizer.json").write_text("{}")
    (deploy / "shards").mkdir()
    nan_model(deploy / "shards" / "a.safetensors")
    nan_model(deploy / "top.safetensors")
    default = rig(tmp_path)
    try:
        for i in range(2):
            default.tick(T0 + 5 * i)
        [onnx] = default.open("weights-unverified")  # a format it cannot read fails closed
        assert onnx.message == (
            f"ship gate prod: {deploy}/model.onnx could not be verified, so it is refused:"
            " `.onnx weights format not verified`"
        )
        assert sorted(f.details["path"] for f in default.open("poisoned-weights")) == [
            f"{deploy}/shards/a.safetensors",
            f"{deploy}/top.safetensors",
        ]
    finally:
        default.close()
    shutil.rmtree(tmp_path / "state")
    only = rig(tmp_path, "    patterns: ['SHARDS/*.SafeTensors']\n")
    try:
        for i in range(2):
            only.tick(T0 + 5 * i)
        assert [f.details["path"] for f in only.db.open_findings() if f.details.get("gate")] == [
            f"{deploy}/shards/a.safetensors"
        ]
        assert only.counting.calls == ["a.safetensors"]
    finally:
        only.close()


def test_symlinked_release_folder_is_gated_and_loops_are_walked_once(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    """The atomic-switch deploy: ``current -> releases/v7``, which loaders follow."""
    deploy, _ = dirs
    release = tmp_path / "releases" / "v7"
    release.mkdir(parents=True)
    nan_model(release / "model.safetensors")
    (deploy / "current").symlink_to(release)
    (release / "up").symlink_to(deploy)  # a loop back to the deploy folder
    listing = list_files(deploy, DEFAULT_PATTERNS)
    model = deploy / "current" / "model.safetensors"
    assert (list(listing.keys), listing.errors) == ([str(model)], [])
    assert listing.outside == {str(model): "reached through a symlinked folder"}
    r = rig(tmp_path, "    quarantine: true\n")
    try:
        for i in range(3):
            r.tick(T0 + i)
        [f] = r.open("poisoned-weights")
        assert f.message.partition("; next: ")[0] == (
            f"ship gate prod: {model} holds non-finite weights: 224 of 224 tensors"
            f" non-finite (7168 NaN, 0 +Inf, 0 -Inf); not moved: it lies outside {deploy}"
            " (reached through a symlinked folder)"
        )
        assert (release / "model.safetensors").exists()
    finally:
        r.close()


def test_a_check_that_cannot_start_refuses_the_file_instead_of_stranding_it(
    tmp_path: Path, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The verification context (and numpy) is made on the first file. When making it
    # failed, the file stayed "pending" for ever: no finding, a poisoned file unreported.
    def broken(*_a: object, **_k: object) -> object:
        raise ImportError("numpy is missing")

    monkeypatch.setattr("rogue_watchdog.weights.scan.ScanContext.default", broken)
    deploy, _ = dirs
    r = rig(tmp_path)
    try:
        bad = nan_model(deploy / "model.safetensors")
        for i in range(3):
            r.tick(T0 + 5 * i)
        [f] = r.open("weights-unverified")
        assert f.message.partition("; next: ")[0] == (
            f"ship gate prod: {bad} could not be verified, so it is refused:"
            " `the check could not start: ImportError: numpy is missing`"
        )
    finally:
        r.close()


def test_hugging_face_cache_link_is_quarantined_as_a_link_and_undone(tmp_path: Path) -> None:
    # snapshots/REV/model.safetensors -> ../../blobs/HASH (relative). Before, the link was
    # renamed, then the gate crashed on the dangling moved link (FileNotFoundError).
    repo = tmp_path / "deploy"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    blob = nan_model(repo / "blobs" / "0123deadbeef")
    digest = hashlib.sha256(blob.read_bytes()).hexdigest()
    link = snap / "model.safetensors"
    link.symlink_to("../../blobs/0123deadbeef")
    r = rig(tmp_path, "    quarantine: true\n")
    try:
        r.tick(T0)
        r.tick(T0 + 5)
        assert not os.path.lexists(link)
        moved = (
            repo / ".rogue-watchdog-quarantine" / "snapshots" / "abc123"
            / "model.safetensors.20231114T221325Z.quarantined"
        )  # fmt: skip
        assert os.readlink(moved) == "../../blobs/0123deadbeef"  # the link moved, dangling
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == digest  # target untouched
        [action] = r.db.actions()
        [f] = r.open("poisoned-weights")
        assert f.message.partition("; next: ")[0].endswith(
            f"moved to {moved} (undo: rogue-watchdog undo --config {r.config_path} {action.id})"
        )
        # --force: the blob it names is still NaN (without it, undo refuses: issue 33).
        out = run_cli("undo", str(action.id), "--state-dir", str(tmp_path / "state"), "--force")
        assert out.returncode == 0, out.stdout + out.stderr
        assert os.readlink(link) == "../../blobs/0123deadbeef"
        assert hashlib.sha256(link.read_bytes()).hexdigest() == digest
    finally:
        r.close()


def test_file_link_to_a_training_output_is_quarantined_by_renaming_the_link(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    deploy, train = dirs
    out = nan_model(train / "final.safetensors")
    link = deploy / "model.safetensors"
    link.symlink_to(out)
    listing = list_files(deploy, DEFAULT_PATTERNS)
    assert listing.outside == {str(link): f"a file link to {out}"}
    r = rig(tmp_path, "    quarantine: true\n")
    try:
        r.tick(T0)
        r.tick(T0 + 5)
        [f] = r.open("poisoned-weights")
        moved = (
            deploy / ".rogue-watchdog-quarantine" / "model.safetensors.20231114T221325Z.quarantined"
        )
        assert f.message.startswith(f"ship gate prod: {link} holds non-finite weights")
        assert f"moved to {moved}" in f.message
        assert not os.path.lexists(link) and os.readlink(moved) == str(out)
        assert out.exists()  # the training output itself is never touched
    finally:
        r.close()


def test_a_gate_that_fails_keeps_its_findings_open_and_pages_nothing_again(
    tmp_path: Path, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 32, noticed and left alone then: a gate whose tick raised had its open
    # findings resolved (read as a fixed file), then opened and paged again when it
    # answered. The gate now declares the findings it makes (covers): they stay open.
    deploy, _ = dirs
    r = rig(tmp_path)
    try:
        model = nan_model(deploy / "model.safetensors")
        r.tick(T0)
        r.tick(T0 + 5)
        [f] = r.open("poisoned-weights")
        assert r.source.covers(f.fingerprint)
        assert f.fingerprint == f"poisoned-weights:prod:{model}"
        assert not r.source.covers(f"poisoned-weights:production:{model}")
        assert not r.source.covers("remediation-failed:prod:x")

        def broken(now: float, result: object = None) -> list[Finding]:
            raise OSError("the gate's disk went away")

        monkeypatch.setattr(r.source, "findings", broken)
        r.daemon.tick(T0 + 10)
        assert "ship-gate prod" in r.daemon.degraded
        assert [x.id for x in r.open("poisoned-weights")] == [f.id]
        monkeypatch.undo()
        r.tick(T0 + 15)
        assert [x.id for x in r.open("poisoned-weights")] == [f.id]
        assert r.events("poisoned-weights") == ["open"]
    finally:
        r.close()
