"""Exceptions of the weights gate, and the checkpoint record :class:`NothingToShip` carries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .report import Report


class NotVerifiedError(Exception):
    """A file could not be fully read and checked (unsupported, truncated, inconsistent).

    The gate fails closed: a file that raised this never passes.
    """


class WeightsRefusedError(Exception):
    """Raised by :func:`watchdog.weights.require_finite` when weights must not ship.

    Attributes:
        report: The full verification report.
    """

    def __init__(self, report: Report) -> None:
        self.report = report
        super().__init__("; ".join(f.summary() for f in report.files if not f.ok))


class NonFiniteWeightsError(WeightsRefusedError):
    """At least one tensor holds a NaN or an infinity (CLI exit code 1)."""


class UnverifiedWeightsError(WeightsRefusedError):
    """No non-finite value was found but some file could not be verified (exit code 2)."""


class NothingToShip(RuntimeError):
    """No checkpoint is both finite and scored by a finite metric: ship nothing.

    Raised by :func:`watchdog.weights.fallback.best_checkpoint` for every way it can
    fail (missing file, unreadable, non-finite, unverifiable, NaN metric, empty list).

    Attributes:
        considered: Every checkpoint looked at, each with why it was skipped.
    """

    def __init__(self, message: str, considered: tuple[Candidate, ...]) -> None:
        super().__init__(message)
        self.considered = considered


@dataclass(frozen=True)
class Candidate:
    """One checkpoint that was considered, and why it was or was not a candidate.

    Attributes:
        path: The checkpoint file or folder, as given.
        metric: The monitored metric as a float, or None when it is not a number.
        reason: "" for a candidate; else why it was skipped.
    """

    path: Path
    metric: float | None
    reason: str = ""
