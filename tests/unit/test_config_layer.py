"""``watchdog.config`` is the bottom layer: it imports nothing above it.

The configuration is read by every layer (sources, lineage, policy, actions, daemon), so
it may import only the standard library, third-party libraries and the plain modules
below: an import upward would make a cycle, and ``check-config`` would load the daemon.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

from tests.conftest import REPO

ALLOWED = ("watchdog.config", "watchdog.model", "watchdog.safeio", "watchdog.hosttext")


def _allowed(module: str) -> bool:
    return any(module == a or module.startswith(a + ".") for a in ALLOWED)


def test_config_modules_import_only_the_bottom_layer() -> None:
    found: list[str] = []
    for path in sorted((REPO / "watchdog" / "config").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.startswith("watchdog")]
    upward = [f for f in found if not _allowed(f.split(": ", 1)[1])]
    assert found, "the walk found no watchdog import at all"
    assert upward == []


def test_importing_the_config_loads_no_upper_layer() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, watchdog.config; print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=60,
        check=True,
    )
    loaded = [m for m in json.loads(done.stdout) if m.startswith("watchdog.")]
    assert [m for m in loaded if not _allowed(m)] == []
