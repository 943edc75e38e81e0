"""Ship gate for model weights: refuse any file holding a NaN or an infinity.

Public API:
    :func:`verify` returns a :class:`Report`; :func:`require_finite` raises
    :class:`WeightsRefusedError` (:class:`NonFiniteWeightsError` or
    :class:`UnverifiedWeightsError`) unless every value is finite;
    :func:`best_checkpoint` picks the best checkpoint that verifies, else raises
    :class:`NothingToShip`.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import require_finite, verify
    from .errors import (
        NonFiniteWeightsError,
        NothingToShip,
        NotVerifiedError,
        UnverifiedWeightsError,
        WeightsRefusedError,
    )
    from .fallback import best_checkpoint
    from .report import FileReport, Report, Status, TensorReport

# Loaded on first use (PEP 562): importing a submodule such as ``rogue_watchdog.cli.weights``
# or ``rogue_watchdog.config.ship_gates`` must not pull in numpy for commands that never verify.
_HOME = {
    "best_checkpoint": "fallback",
    "NothingToShip": "errors",
    "require_finite": "api",
    "verify": "api",
    "NonFiniteWeightsError": "errors",
    "NotVerifiedError": "errors",
    "UnverifiedWeightsError": "errors",
    "WeightsRefusedError": "errors",
    "FileReport": "report",
    "Report": "report",
    "Status": "report",
    "TensorReport": "report",
}


def __getattr__(name: str) -> Any:
    import importlib

    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)


__all__ = [
    "FileReport",
    "NonFiniteWeightsError",
    "NotVerifiedError",
    "NothingToShip",
    "Report",
    "Status",
    "TensorReport",
    "UnverifiedWeightsError",
    "WeightsRefusedError",
    "best_checkpoint",
    "require_finite",
    "verify",
]
