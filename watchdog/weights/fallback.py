"""The best-checkpoint fallback: the best earlier checkpoint that verifies, or nothing.

The incident behind the gate: a run ended with all weights NaN, a fallback looked for
"the best earlier checkpoint", found none (or crashed looking), and the caller shipped
the final weights anyway. :func:`best_checkpoint` never answers with a file it could not
verify, and every way of failing is the one exception :class:`NothingToShip`, so a
caller has no "other error" to mistake for "go ahead".
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, SupportsFloat

from ..hosttext import clip, code_span
from .errors import Candidate, NothingToShip

if TYPE_CHECKING:
    from .scan import ScanContext

PathLike = str | os.PathLike[str]


def _as_metric(value: object) -> float | None:
    """``value`` as a float, or None (``float()`` of a 0-d tensor or numpy scalar works)."""
    if isinstance(value, bool | str | bytes):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None


def _judge(path: Path, raw_metric: object, ctx: ScanContext | None) -> Candidate:
    """A :class:`Candidate` for one pair; every failure becomes a skip reason."""
    from .api import verify

    metric = _as_metric(raw_metric)
    if metric is None:
        # The metric is the training run's to write: quoted, as its repr.
        shown = code_span(clip(repr(raw_metric), 80))
        return Candidate(path, None, f"metric {shown} is not a number")
    if not math.isfinite(metric):
        # NaN compares false against everything, so it would silently win or lose.
        return Candidate(path, metric, f"metric {metric!r} is not finite")
    try:
        report = verify(path, ctx=ctx)
    except Exception as exc:  # verify never raises for bad files; anything else skips
        return Candidate(path, metric, f"not verified: {type(exc).__name__}: {exc}")
    if not report.ok:
        bad = [f.summary() for f in report.files if not f.ok] or ["no weights file"]
        return Candidate(path, metric, "; ".join(bad))
    return Candidate(path, metric)


def best_checkpoint(
    checkpoints: Iterable[tuple[PathLike, SupportsFloat]],
    *,
    lower_is_better: bool = True,
    ctx: ScanContext | None = None,
) -> Path:
    """The best checkpoint whose metric is finite and whose weights all verify finite.

    Every checkpoint is verified (:func:`watchdog.weights.verify`: every value read and
    finite, nothing unsupported, truncated or changing while read). Ties on the metric go
    to the checkpoint given first. A missing, unreadable, non-finite or unverifiable
    checkpoint, or one scored by a NaN, infinite or non-numeric metric, is skipped, never
    raised: the caller must not be able to catch "some other error" and ship anyway.

    Ship the answer through ``rogue-watchdog ship`` (or the gate) all the same: the
    checkpoint can change after this check.

    Args:
        checkpoints: ``(path, monitored metric)`` pairs; a path is a weights file or a
            model directory. The metric is anything ``float()`` takes (a Python float,
            a numpy scalar, a 0-d tensor).
        lower_is_better: True for a loss, False for an accuracy.
        ctx: Scan settings for :func:`~watchdog.weights.verify` (default: its own).

    Returns:
        The chosen path, as given.

    Raises:
        NothingToShip: No checkpoint is both finite and scored by a finite metric
            (also when ``checkpoints`` is empty, or iterating it fails);
            ``.considered`` lists every checkpoint with its reason.
    """
    considered: list[Candidate] = []
    try:
        pairs = list(checkpoints)
    except Exception as exc:
        raise NothingToShip(
            f"the checkpoint list could not be read ({type(exc).__name__}: {exc});"
            " refusing to ship",
            (),
        ) from None
    for pair in pairs:
        try:
            raw_path, raw_metric = pair
            path = Path(raw_path)
        except (TypeError, ValueError) as exc:
            considered.append(Candidate(Path(), None, f"not a (path, metric) pair: {exc}"))
            continue
        considered.append(_judge(path, raw_metric, ctx))
    best: tuple[float, Candidate] | None = None
    for c in considered:
        if c.reason or c.metric is None:
            continue
        score = c.metric if lower_is_better else -c.metric
        if best is None or score < best[0]:
            best = (score, c)
    if best is None:
        why = "; ".join(f"{c.path}: {c.reason}" for c in considered) or "no checkpoint given"
        raise NothingToShip(
            f"no checkpoint is finite and scored by a finite metric ({why}); refusing to ship",
            tuple(considered),
        )
    return best[1].path
