"""``rogue_watchdog.config`` is the bottom layer: importing it loads nothing above it.

The configuration is read by every layer (sources, lineage, policy, actions, daemon), so
it may import only the standard library, third-party libraries and the plain modules
below. `lint-imports` (.importlinter) checks every import statement; this test checks
what a fresh interpreter actually loads, package ``__init__`` side effects included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

ALLOWED = (
    "rogue_watchdog.config",
    "rogue_watchdog.model",
    "rogue_watchdog.safeio",
    "rogue_watchdog.hosttext",
    "rogue_watchdog.hostpaths",
    "rogue_watchdog.spelling",
)


def _allowed(module: str) -> bool:
    return any(module == a or module.startswith(a + ".") for a in ALLOWED)


def test_importing_the_config_loads_no_upper_layer() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, rogue_watchdog.config; print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=60,
        check=True,
    )
    loaded = [m for m in json.loads(done.stdout) if m.startswith("rogue_watchdog.")]
    assert [m for m in loaded if not _allowed(m)] == []
