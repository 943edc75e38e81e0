"""Issue 32, case 10e, as a class: ``undo --dry-run`` runs the checks the undo runs, so
each failure the undo would have is predicted, and nothing changes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rogue_watchdog.actions.effects import Effects, RecordingEffects
from rogue_watchdog.actions.undo import describe, run_undo


def _both(ops: list[dict[str, object]]) -> tuple[tuple[str, str | None], tuple[str, str | None]]:
    """(dry run, real undo) as (outcome, error): the dry run first, changing nothing."""
    fx = RecordingEffects()
    dry = run_undo(ops, fx, dry_run=True)  # type: ignore[arg-type]
    assert fx.calls == []
    real = run_undo(ops, Effects())  # type: ignore[arg-type]
    return (dry.outcome, dry.error), (real.outcome, real.error)


def test_the_file_to_put_back_is_gone(tmp_path: Path) -> None:
    op = {"op": "rename", "from": str(tmp_path / "w"), "to": str(tmp_path / "w.q")}
    dry, real = _both([op])
    why = f"{describe(op)}: {tmp_path}/w.q is gone: nothing to put back"
    assert dry == ("would-fail", why)
    assert real == ("failed", why)


def test_a_backup_that_changed(tmp_path: Path) -> None:
    backup = tmp_path / "cron.bak"
    backup.write_bytes(b"* * * * * /bin/true\n")
    op = {
        "op": "restore_file", "path": str(tmp_path / "job"), "backup": str(backup),
        "uid": 0, "gid": 0, "mode": 0o644,
        "sha256": hashlib.sha256(b"something else").hexdigest(),
    }  # fmt: skip
    dry, real = _both([op])
    assert dry[0] == "would-fail" and real[0] == "failed"
    assert dry[1] == real[1] and "changed (sha256" in (dry[1] or "")
    assert not (tmp_path / "job").exists()


def test_a_folder_that_is_gone(tmp_path: Path) -> None:
    (tmp_path / "w.q").write_bytes(b"w")
    op = {"op": "rename", "from": str(tmp_path / "gone" / "w"), "to": str(tmp_path / "w.q")}
    dry, real = _both([op])
    assert dry == ("would-fail", f"{describe(op)}: folder {tmp_path}/gone is gone")
    assert real == ("failed", dry[1])


def test_another_file_system(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the temp dir")
    moved = shm / f"rw-undo-{os.getpid()}.q"
    moved.write_bytes(b"w")
    try:
        op = {"op": "rename", "from": str(tmp_path / "w"), "to": str(moved)}
        dry, real = _both([op])
        why = f"{describe(op)}: {moved} is on another file system than {tmp_path}"
        assert dry == ("would-fail", why)
        assert real == ("failed", dry[1])
        assert moved.exists()  # nothing was copied
    finally:
        moved.unlink()


def test_ops_are_checked_against_what_the_ops_before_would_leave(tmp_path: Path) -> None:
    """Two renames through one name: the second is possible only after the first; the
    dry run (which runs neither) knows it, and predicts the undo's success."""
    (tmp_path / "b").write_bytes(b"w")
    ops = [
        {"op": "rename", "from": str(tmp_path / "a"), "to": str(tmp_path / "b")},
        {"op": "rename", "from": str(tmp_path / "b"), "to": str(tmp_path / "c")},
    ]
    (tmp_path / "c").write_bytes(b"v")
    dry, real = _both(ops)  # type: ignore[arg-type]
    assert dry == ("dry-run", None) and real == ("ok", None)
    assert (tmp_path / "a").read_bytes() == b"w" and (tmp_path / "b").read_bytes() == b"v"


def test_commands_are_said_to_answer_only_when_they_run() -> None:
    res = run_undo([{"op": "systemctl", "argv": ["unmask", "x.service"]}], Effects(), dry_run=True)
    assert res.done == ["systemctl unmask x.service (its answer is known only when it runs)"]
