"""The ship gate against the loaders people use: the differential fuzzer, fixed budget.

For every file drawn (tests/weights/fuzzgen.py), if any loader returns a non-finite
value the gate does not exit 0, and if the gate exits 0 every loader that accepts the
file returns the same finite values (tests/weights/differential.py). The loaders are
the real ones: safetensors (numpy and torch), ``torch.load(weights_only=True)`` (plain
and mmap), numpy, gguf-py and llama.cpp's C reader. ``bench/gate_fuzz.py`` runs the same
property for longer and prints every disagreeing file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

from .differential import judge
from .fuzzgen import STRATEGIES, Case
from .loaders import loaders_for

EXAMPLES = int(os.environ.get("GATE_FUZZ_EXAMPLES", "300"))


@pytest.mark.parametrize("fmt", sorted(STRATEGIES))
def test_gate_agrees_with_every_loader(fmt: str, ggml_exe: Path, tmp_path: Path) -> None:
    loaders = loaders_for(".pt" if fmt == "torch" else f".{fmt}", ggml_exe)
    seen: dict[int, int] = {0: 0, 1: 0, 2: 0}

    # Fixed seed and no shrinking database: CI draws the same files every run; a
    # failure prints the file's mutations and every reader's answer.
    @settings(
        max_examples=EXAMPLES,
        database=None,
        deadline=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @seed(20261202)
    @given(case=STRATEGIES[fmt])
    def check(case: Case) -> None:
        path = tmp_path / f"case{case.suffix}"
        path.write_bytes(case.data)
        out = judge(path, loaders)
        seen[out.exit_code] += 1
        assert not out.violations, f"{case.mutations}\n{out.describe()}"

    check()
    # The budget exercised all three answers: files passed, refused as non-finite and
    # refused as not verified (a generator that only made broken files would test nothing).
    assert min(seen.values()) > 0, seen
