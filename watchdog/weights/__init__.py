"""Ship gate for model weights: refuse any file holding a NaN or an infinity.

Public API:
    :func:`verify` returns a :class:`Report`; :func:`require_finite` raises
    :class:`WeightsRefusedError` (:class:`NonFiniteWeightsError` or
    :class:`UnverifiedWeightsError`) unless every value is finite.
"""

from watchdog.weights.api import require_finite, verify
from watchdog.weights.errors import (
    NonFiniteWeightsError,
    NotVerifiedError,
    UnverifiedWeightsError,
    WeightsRefusedError,
)
from watchdog.weights.report import FileReport, Report, Status, TensorReport

__all__ = [
    "FileReport",
    "NonFiniteWeightsError",
    "NotVerifiedError",
    "Report",
    "Status",
    "TensorReport",
    "UnverifiedWeightsError",
    "WeightsRefusedError",
    "require_finite",
    "verify",
]
