"""The ship gate's promise, checked against the loaders on one file.

Property (docs/weights.md, "Checked against the loaders"):

1. If any loader returns a non-finite value, the gate does not exit 0.
2. If the gate exits 0, every loader that accepts the file returns the same tensors
   with the same finite values.
3. Where two readers' rules differ (one accepts the file, another refuses it), the gate
   does not exit 0; nor when every reader refuses it (the gate's rules then differ from
   all of theirs).

:func:`judge` runs the gate (the same ``verify`` the CLI runs) and every loader for the
file's suffix, and names each broken clause. Used by the CI fuzz test, the plain
regression tests and ``bench/gate_fuzz.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rogue_watchdog.weights import verify

from .loaders import Reading


@dataclass(frozen=True)
class Outcome:
    """The gate's exit code beside each loader's reading, and the broken clauses.

    Attributes:
        exit_code: What ``verify-weights`` would exit with (0, 1 or 2).
        gate_says: The gate's one-line summary of the file.
        readings: One per loader.
        violations: ``(kind, text)`` pairs; kind ``non-finite-passed`` (clause 1),
            ``loaders-differ-passed`` (clause 2) or ``rules-differ-passed`` (clause 3).
            Empty when the property holds.
    """

    exit_code: int
    gate_says: str
    readings: tuple[Reading, ...]
    violations: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        """The gate's answer and every reader's, one per line."""
        lines = [f"gate: exit {self.exit_code}: {self.gate_says}"]
        lines += [f"  {r.summary()}" for r in self.readings]
        lines += [f"  VIOLATION {k}: {t}" for k, t in self.violations]
        return "\n".join(lines)


def _differs(a: Reading, b: Reading) -> str | None:
    assert a.values is not None and b.values is not None
    ka = set(a.values) - set(a.opaque) - set(b.opaque)
    kb = set(b.values) - set(a.opaque) - set(b.opaque)
    if ka != kb:
        return f"{a.loader} returns tensors {sorted(ka)}, {b.loader} returns {sorted(kb)}"
    for k in sorted(ka):
        va, vb = a.values[k], b.values[k]
        if va.shape != vb.shape:
            return f"tensor {k!r}: {a.loader} has {va.size} values, {b.loader} {vb.size}"
        if va.dtype.kind != vb.dtype.kind and not (va.dtype.kind in "iu" and vb.dtype.kind in "iu"):
            return f"tensor {k!r}: {a.loader} returns {va.dtype}, {b.loader} {vb.dtype}"
        if not np.array_equal(va, vb):
            i = int(np.flatnonzero(va != vb)[0])
            return f"tensor {k!r}: element {i} is {va[i]!r} in {a.loader}, {vb[i]!r} in {b.loader}"
    return None


def judge(path: Path, loaders: list[Callable[[Path], Reading]]) -> Outcome:
    """Run the gate and the loaders on ``path`` and check the property.

    Args:
        path: The file, saved under the suffix its loaders expect.
        loaders: From :func:`tests.weights.loaders.loaders_for`.

    Returns:
        The outcome; ``violations`` is empty when the property holds.
    """
    report = verify(path)
    f = report.files[0] if report.files else None
    says = f.summary() if f is not None else "no file report"
    readings = tuple(load(path) for load in loaders)
    violations: list[tuple[str, str]] = []
    if report.exit_code == 0:
        for r in readings:
            bad = r.non_finite()
            if bad:
                violations.append(
                    ("non-finite-passed", f"{r.loader} reads non-finite values in {bad}")
                )
        accepted = [r for r in readings if r.accepted]
        refused = [r for r in readings if not r.accepted and not r.unsupported]
        if refused and not accepted:
            violations.append(
                (
                    "rules-differ-passed",
                    "every reader refuses the file: " + "; ".join(r.summary() for r in refused),
                )
            )
        if accepted and refused:
            violations.append(
                (
                    "rules-differ-passed",
                    f"{', '.join(r.loader for r in accepted)} accept the file, "
                    + "; ".join(r.summary() for r in refused),
                )
            )
        for a, b in itertools.combinations(accepted, 2):
            why = _differs(a, b)
            if why:
                violations.append(("loaders-differ-passed", why))
    return Outcome(report.exit_code, says, readings, tuple(violations))
