"""The lifecycle simulator in CI: a fixed budget of steps, one fixed seed (derandomized),
over the real Scanner, Daemon.tick and enforcer (tests/sim/machine.py). Any invariant
I1–I8 broken fails the test with hypothesis's shrunk steps; ``bench/trust_sim.py
--steps 100000`` runs the same machine long. Its own process: pynvml loads one NVML
library per process (the fake one, built from tests/fakenvml).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO, need_program


def test_lifecycles_keep_every_invariant() -> None:
    need_program("gcc")
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "trust_sim.py"), "--steps", "800", "--seed", "0",
         "--json"],
        capture_output=True, text=True, timeout=600, check=False, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["violations"] == 0, out.stderr[-6000:]
    assert out.returncode == 0
    # The budget really exercised the daemon: ticks ran, jobs were judged, signals sent.
    assert summary["ticks"] > 20 and summary["jobs"] > 50 and summary["signals"] > 0, summary
