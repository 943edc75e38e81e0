"""Exit codes that mean one thing (issue 32, case 9): an unexpected error is 70
(EX_SOFTWARE), never 1, which ``verify-weights`` uses for "non-finite"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rogue_watchdog.cli import EXIT_INTERNAL_ERROR, main
from tests.conftest import REPO


def test_a_crashing_verifier_exits_70_not_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: a crash of verify-weights (an import error) exited 1, "non-finite": a
    healthy file reported poisoned."""
    import rogue_watchdog.weights.api as api

    def broken(*args: object, **kwargs: object) -> None:
        raise ImportError("cannot import name 'frombuffer' from 'numpy'")

    monkeypatch.setattr(api, "verify", broken)
    healthy = tmp_path / "model.safetensors"
    healthy.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    assert main(["verify-weights", "--no-progress", str(healthy)]) == EXIT_INTERNAL_ERROR == 70
    err = capsys.readouterr().err
    assert "ImportError: cannot import name 'frombuffer'" in err
    assert "internal error (exit 70)" in err


def test_python_m_watchdog_that_cannot_load_exits_70(tmp_path: Path) -> None:
    (tmp_path / "yaml").mkdir()  # a broken installation: PyYAML shadowed by a broken one
    (tmp_path / "yaml" / "__init__.py").write_text("raise ImportError('broken yaml')\n")
    done = subprocess.run(
        [sys.executable, "-m", "rogue_watchdog", "check-config", str(tmp_path / "c.yaml")],
        cwd=REPO,
        env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 70, done.stderr
    assert "broken yaml" in done.stderr


def test_console_script_that_cannot_load_exits_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before (issue 33): the ``rogue-watchdog`` script imported the command line itself;
    when that failed (PyPI's ``watchdog`` over ours) it exited 1, "non-finite"."""
    from rogue_watchdog.__main__ import entry

    monkeypatch.setitem(sys.modules, "rogue_watchdog.cli", None)  # import raises
    assert entry() == 70
    assert "internal error (exit 70): cannot load" in capsys.readouterr().err
    script = Path(sys.executable).parent / "rogue-watchdog"
    assert "from rogue_watchdog.__main__ import entry" in script.read_text()
