"""What `scripts/setup.sh --test` must have installed: every program a test asks for with
``need_program`` and every build dependency ``debian/control`` names.

A machine that had a package installed by hand hides a gap in the setup script (a fresh
Debian 12 VM had no debhelper, so the package test failed there and nowhere else). These
checks fail on such a gap instead of letting one system test skip or error far away.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO, need_program


def _needed_programs() -> set[str]:
    """Every string literal passed to ``need_program(...)`` anywhere under tests/."""
    names: set[str] = set()
    for path in (REPO / "tests").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "need_program"
            ):
                names.update(
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                )
    return names


def test_every_program_a_test_needs_is_installed() -> None:
    names = _needed_programs()
    # The scan itself must find the calls (a refactor renaming the helper would make this
    # test vacuous): the suite asks for dozens of programs, cron and gcc among them.
    assert {"cron", "gcc", "sbatch", "podman", "dockerd", "dpkg-buildpackage"} <= names
    missing = sorted(n for n in names if shutil.which(n) is None)
    assert missing == [], f"not on PATH after scripts/setup.sh --test: {missing}"


def test_debian_build_dependencies_are_installed() -> None:
    need_program("dpkg-checkbuilddeps")
    control = Path(REPO, "debian", "control")
    done = subprocess.run(
        ["dpkg-checkbuilddeps", str(control)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
