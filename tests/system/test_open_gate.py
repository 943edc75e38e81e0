"""Ship gates enforced at open(2), with the real kernel's fanotify permission events.

Readers are separate processes (the gate's own process is always let through): ``cat``,
``python -c "open(p, 'rb').read()"`` and ``safetensors``' mmap load. Every folder marked
is under the test's tmp dir; the listener is stopped in teardown (its marks go with it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from rogue_watchdog.config.ship_gates import DEFAULT_PATTERNS
from rogue_watchdog.weights.api import verify_file
from rogue_watchdog.weights.fanotify import Fanotify, FanotifyUnavailable
from rogue_watchdog.weights.opengate import Decision, OpenGate
from rogue_watchdog.weights.report import FileReport
from rogue_watchdog.weights.scan import ScanContext
from tests.conftest import need, need_program, need_root

pytestmark = pytest.mark.system

EPERM_CAT = "Operation not permitted"


def _fanotify_here() -> None:
    need_root()
    need_program("cat", "cp")
    try:
        Fanotify().close()
    except FanotifyUnavailable as exc:
        need(False, f"fanotify permission events unavailable: {exc}")


def _st(path: Path, value: float) -> Path:
    save_file({"w": np.full((16, 16), value, np.float32)}, str(path))
    return path


def _cat(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["cat", str(path)], capture_output=True, text=True, errors="replace")


def _python_read(path: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; open(sys.argv[1], 'rb').read(); print('read')"
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)


def _safetensors_load(path: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys; from safetensors.numpy import load_file\nload_file(sys.argv[1]); print('ok')"
    )
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)


@pytest.fixture
def gates() -> Iterator[Callable[..., tuple[OpenGate, list[Decision]]]]:
    _fanotify_here()
    made: list[OpenGate] = []
    ctx = ScanContext.default(None, mapped=False)

    def make(
        roots: list[Path],
        mode: str = "open",
        verify: Callable[[Path, Path], FileReport] | None = None,
        timeout_s: float = 5.0,
    ) -> tuple[OpenGate, list[Decision]]:
        seen: list[Decision] = []
        gate = OpenGate(
            "t",
            mode,
            roots,
            DEFAULT_PATTERNS,
            verify or (lambda p, n: verify_file(p, ctx, name=n)),
            timeout_s=timeout_s,
            on_decision=seen.append,
        )
        gate.start()
        made.append(gate)
        return gate, seen

    yield make
    for g in made:
        g.stop()
    ctx.close()


def test_nan_version_refused_to_every_reader_writer_replaces_it(
    tmp_path: Path, gates: Callable[..., tuple[OpenGate, list[Decision]]]
) -> None:
    deploy = tmp_path / "deploy"
    (deploy / "sub").mkdir(parents=True)
    bad = _st(deploy / "model.safetensors", float("nan"))
    good = _st(deploy / "sub" / "other.safetensors", 1.0)
    (deploy / "config.json").write_text("{}")
    healthy = _st(tmp_path / "healthy.safetensors", 0.5)
    gate, seen = gates([deploy])
    assert gate.state() == ("enforcing", "")

    cp = _cat(bad)
    assert cp.returncode == 1 and EPERM_CAT in cp.stderr
    cp = _python_read(bad)
    assert cp.returncode == 1 and "PermissionError: [Errno 1] Operation not permitted" in cp.stderr
    cp = _safetensors_load(bad)
    # openat(2) fails EPERM (strace), but safetensors 0.8 words every open error of
    # safe_open as "FileNotFoundError: No such file or directory" (docs/weights.md).
    assert cp.returncode == 1 and f"No such file or directory: {bad}" in cp.stderr
    assert _cat(good).returncode == 0  # a subfolder is gated too, and healthy opens
    assert _cat(deploy / "config.json").stdout == "{}"
    assert len(seen) == 3 and {d.path for d in seen} == {str(bad)}
    assert all(d.refused and "1 of 1 tensors non-finite" in d.reason for d in seen)
    assert seen[0].opener["command"] == f"cat {bad}" and seen[0].opener["uid"] == 0

    # The writer is never blocked: cp opens O_WRONLY|O_TRUNC over the refused file.
    done = subprocess.run(["cp", str(healthy), str(bad)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _python_read(bad).stdout == "read\n"
    assert _safetensors_load(bad).stdout == "ok\n"
    assert len(seen) == 3


def test_rename_into_place_is_verified_at_first_open(
    tmp_path: Path, gates: Callable[..., tuple[OpenGate, list[Decision]]]
) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    _gate, seen = gates([deploy])
    tmp = _st(deploy / ".model.tmp", float("inf"))
    os.rename(tmp, deploy / "model.safetensors")
    assert EPERM_CAT in _cat(deploy / "model.safetensors").stderr
    os.rename(_st(deploy / ".model2.tmp", 2.0), deploy / "model.safetensors")
    assert _cat(deploy / "model.safetensors").returncode == 0
    assert [d.refused for d in seen] == [True]


def test_links_outside_and_the_hugging_face_cache_layout(
    tmp_path: Path, gates: Callable[..., tuple[OpenGate, list[Decision]]]
) -> None:
    # models--org--m/snapshots/REV/model.safetensors -> ../../blobs/HASH (relative link)
    repo = tmp_path / "hub" / "models--org--m"
    snap = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    _st(repo / "blobs" / "deadbeef", float("nan"))
    (snap / "model.safetensors").symlink_to("../../blobs/deadbeef")
    outside = tmp_path / "train" / "out.safetensors"
    outside.parent.mkdir()
    _st(outside, float("nan"))
    (snap / "extra.safetensors").symlink_to(outside)
    gate, seen = gates([repo])  # deploy_dir: the model's folder in the HF cache
    assert gate.state()[0] == "enforcing"
    for path in (snap / "model.safetensors", repo / "blobs" / "deadbeef", outside):
        cp = _cat(path)
        assert cp.returncode == 1 and EPERM_CAT in cp.stderr, path
    assert {d.path for d in seen} == {str(repo / "blobs" / "deadbeef"), str(outside)}
    assert _safetensors_load(snap / "model.safetensors").returncode == 1

    # Between two ticks (no refresh): a new revision's blob and link, and the training
    # output replaced by rename behind the file link. Both are gated at once.
    rev2 = repo / "snapshots" / "def456"
    rev2.mkdir()
    _st(repo / "blobs" / "cafe0001", float("inf"))
    (rev2 / "model.safetensors").symlink_to("../../blobs/cafe0001")
    os.rename(_st(outside.with_name("tmp.safetensors"), float("nan")), outside)
    for path in (rev2 / "model.safetensors", outside):
        assert EPERM_CAT in _cat(path).stderr, path
    assert seen[-2].path == str(repo / "blobs" / "cafe0001")
    _st(repo / "blobs" / "cafe0002", 1.0)
    os.rename(repo / "blobs" / "cafe0002", repo / "blobs" / "cafe0001")
    assert _cat(rev2 / "model.safetensors").returncode == 0


def test_audit_lets_the_open_through_and_says_what_it_would_refuse(
    tmp_path: Path, gates: Callable[..., tuple[OpenGate, list[Decision]]]
) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    bad = _st(deploy / "model.safetensors", float("nan"))
    gate, seen = gates([deploy], mode="audit")
    assert gate.state() == ("auditing", "")
    assert _cat(bad).returncode == 0
    assert [(d.path, d.refused) for d in seen] == [(str(bad), False)]


def test_verification_past_the_limit_is_refused_and_said_so(
    tmp_path: Path, gates: Callable[..., tuple[OpenGate, list[Decision]]]
) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    good = _st(deploy / "model.safetensors", 1.0)

    def slow(path: Path, name: Path) -> FileReport:
        time.sleep(1.0)
        return FileReport(name, "safetensors")

    _gate, seen = gates([deploy], verify=slow, timeout_s=0.2)
    cp = _cat(good)
    assert cp.returncode == 1 and EPERM_CAT in cp.stderr
    assert seen[0].reason == "not verified within 0.2 s at open: refused"


def test_a_stopped_listener_is_not_enforcing_and_the_kernel_fails_open(
    tmp_path: Path, gates: Callable[..., tuple[OpenGate, list[Decision]]]
) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    bad = _st(deploy / "model.safetensors", float("nan"))
    gate, _seen = gates([deploy])
    assert _cat(bad).returncode == 1
    gate.stop()
    assert gate.state() == (
        "not enforcing",
        "the open listener is not running (the kernel fails open)",
    )
    assert _cat(bad).returncode == 0


def test_daemon_gate_with_enforce_open(tmp_path: Path) -> None:
    # The daemon's ship gate: enforcing at its first tick, a refused reader becomes a
    # weights-open-refused finding naming it, and a stopped listener says so.
    from rogue_watchdog.config import parse_config
    from rogue_watchdog.daemon.loop import Daemon
    from rogue_watchdog.state import StateDB
    from rogue_watchdog.weights.shipwatch import build_ship_gate_sources
    from rogue_watchdog.weights.verifyworker import VerifyWorker, verify_one

    _fanotify_here()
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    cfg = parse_config(
        "nvml: {enabled: false}\n"
        f"daemon: {{state_dir: '{tmp_path}/state'}}\n"
        f"alerts: {{sinks: [{{type: log, path: '{tmp_path}/alerts.log'}}]}}\n"
        f"ship_gates:\n  - name: prod\n    deploy_dir: {deploy}\n    enforce: open\n",
        "t.yaml",
    )
    db = StateDB(cfg.daemon.state_dir)
    worker = VerifyWorker(verify_one)
    sources = build_ship_gate_sources(cfg, db, worker)
    daemon = Daemon(cfg, None, db=db, sources=sources, workers=[worker])
    try:
        daemon.tick(1000.0)
        assert sources[0].enforcement() == ("enforcing", "")
        from rogue_watchdog.daemon.status import build_status, render_status

        doc = build_status(daemon)
        assert doc["ship_gates"] == [
            {"name": "prod", "enforce": "open", "at_open": "enforcing", "why": ""}
        ]
        assert "ship gate prod: enforcing at open\n" in render_status(doc, 200, False) + "\n"
        bad = _st(deploy / "model.safetensors", float("nan"))
        cp = _cat(bad)
        assert cp.returncode == 1 and EPERM_CAT in cp.stderr
        daemon.tick(1001.0)
        refused = [f for f in db.open_findings() if f.kind == "weights-open-refused"]
        assert len(refused) == 1
        assert f"refused a read open of {bad} by PID" in refused[0].message
        assert f"cat {bad}" in refused[0].message
        sources[0].open_gate.stop()  # type: ignore[union-attr]
        daemon.tick(1002.0)
        assert sources[0].enforcement()[0] == "not enforcing"
        assert build_status(daemon)["ship_gates"][0]["at_open"] == "not enforcing"
        from rogue_watchdog.daemon.metrics import MetricsCollector

        collector = MetricsCollector()
        assert daemon.last is not None
        collector.update(daemon, daemon.last)
        [family] = [m for m in collector.collect() if m.name.endswith("ship_gate_at_open")]
        assert {s.labels["state"]: s.value for s in family.samples} == {
            "enforcing": 0,
            "auditing": 0,
            "not enforcing": 1,
        }
        degraded = [f for f in db.open_findings() if f.kind == "ship-gate-degraded"]
        assert [f.message for f in degraded] == [
            "ship gate prod: not enforcing at open (the open listener is not running"
            " (the kernel fails open)); the after-the-fact gate still runs"
        ]
    finally:
        for s in sources:
            s.close()
        worker.stop()
        db.close()
