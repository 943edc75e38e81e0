"""Helpers for scripts: deploy staleness, file stability and human durations.

Nothing here sleeps, polls or logs; callers pass ``now`` (seconds since the
epoch, as ``time.time()``) so the logic is testable on real files with
``os.utime``. A file counts for freshness only when it is verified finite
(:func:`watchdog.weights.verify`, or the caller's ``is_good``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..model import UNVERIFIABLE_SUFFIXES, WEIGHT_SUFFIXES
from .api import verify

_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


#: Most decimals of a second a duration is written with (:func:`past_limit`).
MAX_PLACES = 3


def _truncated(seconds: float, places: int) -> int:
    """``seconds`` in units of ``10**-places`` s, truncated (a float's 2.3 * 10 is
    22.999…, so the product is rounded to far below one unit first)."""
    return math.floor(round(max(0.0, seconds) * 10.0**places, 6))


def human_duration(seconds: float, places: int = 0) -> str:
    """A duration in days, hours, minutes and seconds, leaving out zero units.

    Whole seconds are kept, so a value that just passed a limit reads apart from
    the limit ("2 h 1 s" against "2 h"), which one decimal of hours cannot ("0.1 h");
    :func:`past_limit` adds the decimals a value less than a second past needs.

    Args:
        seconds: Duration in seconds, truncated to ``places`` decimals (never more
            than it was); negative values are shown as ``"0 s"``.
        places: Decimals of a second to keep (0 to :data:`MAX_PLACES`).

    Returns:
        E.g. ``"45 s"``, ``"5 min"``, ``"5 min 1 s"``, ``"1 d 6 h"``, ``"2 min 0.4 s"``.
    """
    scale = 10**places
    ticks = _truncated(seconds, places)
    left, frac = divmod(ticks, scale)
    parts: list[str] = []
    for unit, size in _UNITS[:-1]:
        n, left = divmod(left, size)
        if n:
            parts.append(f"{n} {unit}")
    if frac:
        parts.append(f"{left}.{frac:0{places}d}".rstrip("0") + " s")
    elif left:
        parts.append(f"{left} s")
    return " ".join(parts) or "0 s"


def past_limit(value_s: float, limit_s: float) -> tuple[str, str]:
    """How long something lasted and the limit it passed, in words that never read as
    equal: ``("2 min 0.4 s", "2 min")``, not ``("2 min", "2 min")``.

    The limit is written exactly (to :data:`MAX_PLACES` decimals); the value with the
    fewest decimals that tell it apart from the limit, truncated, so it never says more
    than what lasted. A value within a thousandth of a second of the limit reads
    ``"just over 2 min"``.

    Args:
        value_s: The duration, in seconds; more than ``limit_s``.
        limit_s: The limit, in seconds.

    Returns:
        ``(value text, limit text)``.
    """
    exact = next(
        (p for p in range(MAX_PLACES + 1) if _truncated(limit_s, p) == round(limit_s * 10**p, 6)),
        MAX_PLACES,
    )
    limit = human_duration(limit_s, exact)
    for places in range(exact, MAX_PLACES + 1):
        if _truncated(value_s, places) > _truncated(limit_s, places):
            return human_duration(value_s, places), limit
    return f"just over {limit}", limit


def verified_finite(path: Path) -> bool:
    """True when ``path`` was read completely and every value is finite."""
    return verify(path).ok


@dataclass(frozen=True)
class StaleResult:
    """A deploy directory lagging behind newer training output.

    Attributes:
        train_path: Newest weights file under the training directory.
        train_mtime_s: Its modification time (epoch seconds).
        deploy_path: Newest weights file under the deploy directory, or ``None``
            when nothing is deployed.
        deploy_mtime_s: Its modification time, or ``None``.
        lag_s: How long the newer training output has waited undeployed
            (``now - train_mtime_s``).
        threshold_s: The threshold that was exceeded.
    """

    train_path: Path
    train_mtime_s: float
    deploy_path: Path | None
    deploy_mtime_s: float | None
    lag_s: float
    threshold_s: float


def _is_weights(name: str) -> bool:
    suffix = os.path.splitext(name)[1].lower()
    return suffix in WEIGHT_SUFFIXES or suffix in UNVERIFIABLE_SUFFIXES


def weights_by_age(directory: Path) -> list[tuple[Path, float]]:
    """Weights files under ``directory`` (recursively), newest first.

    Returns:
        ``(path, mtime_s)`` pairs; empty when there is none or the directory does
        not exist.
    """
    found: list[tuple[Path, float]] = []
    for dirpath, _dirs, files in os.walk(directory):
        for name in files:
            if not _is_weights(name):
                continue
            p = Path(dirpath) / name
            try:
                found.append((p, p.stat().st_mtime))
            except OSError:
                continue  # vanished between listing and stat
    return sorted(found, key=lambda pm: (pm[1], str(pm[0])), reverse=True)


def newest_good(
    directory: Path, is_good: Callable[[Path], bool], newer_than_s: float | None = None
) -> tuple[Path, float] | None:
    """Newest weights file under ``directory`` for which ``is_good`` holds.

    Files are tried newest first and ``is_good`` stops at the first that passes,
    so older files are never read when a newer one is good.

    Args:
        directory: Folder to walk.
        is_good: Verdict on one file (by default :func:`verified_finite`).
        newer_than_s: Only files with an mtime above this count.

    Returns:
        ``(path, mtime_s)`` or ``None``.
    """
    for p, mtime_s in weights_by_age(directory):
        if newer_than_s is not None and mtime_s <= newer_than_s:
            return None
        if is_good(p):
            return p, mtime_s
    return None


def newest_weights(directory: Path) -> tuple[Path, float] | None:
    """Newest weights file (by mtime) under ``directory``, recursively, whatever its content.

    Returns:
        ``(path, mtime_s)``, or ``None`` when there is no weights file or the
        directory does not exist.
    """
    best: tuple[Path, float] | None = None
    for dirpath, _dirs, files in os.walk(directory):
        for name in files:
            if not _is_weights(name):
                continue
            p = Path(dirpath) / name
            try:
                mtime_s = p.stat().st_mtime
            except OSError:
                continue  # vanished between listing and stat
            if best is None or mtime_s > best[1]:
                best = (p, mtime_s)
    return best


def check_deploy_stale(
    train_dir: Path,
    deploy_dir: Path,
    threshold_s: float,
    now: float,
    is_good: Callable[[Path], bool] = verified_finite,
) -> StaleResult | None:
    """Is newer good training output waiting undeployed for longer than ``threshold_s``?

    Stale when the newest good weights file under ``train_dir`` is newer than the
    newest good one under ``deploy_dir`` (or nothing good is deployed) and was
    written more than ``threshold_s`` seconds before ``now``. "Good" means
    verified finite: a NaN file deployed does not count as deployed, and a NaN
    output that the deploy rightly refused does not make the deploy stale.

    Args:
        train_dir: Training output directory.
        deploy_dir: Directory the serving side loads from (may not exist yet).
        threshold_s: Allowed deploy lag in seconds, ``>= 0``.
        now: Current time in epoch seconds.
        is_good: Verdict on one file; by default it is verified (read completely).

    Returns:
        A :class:`StaleResult`, or ``None`` when not stale (including when the
        training directory holds no weights).

    Raises:
        ValueError: ``threshold_s`` is negative.
        FileNotFoundError: ``train_dir`` does not exist.
    """
    if threshold_s < 0:
        raise ValueError("threshold_s must be >= 0")
    if not train_dir.is_dir():
        raise FileNotFoundError(f"training directory {train_dir} does not exist")
    deploy = newest_good(deploy_dir, is_good) if deploy_dir.is_dir() else None
    train = newest_good(train_dir, is_good, None if deploy is None else deploy[1])
    if train is None:
        return None
    lag_s = now - train[1]
    if lag_s <= threshold_s:
        return None
    return StaleResult(
        train_path=train[0],
        train_mtime_s=train[1],
        deploy_path=None if deploy is None else deploy[0],
        deploy_mtime_s=None if deploy is None else deploy[1],
        lag_s=lag_s,
        threshold_s=threshold_s,
    )


class StableFileTracker:
    """Reports files whose size and mtime stayed the same across two polls.

    A writer still producing a checkpoint changes its size or mtime between
    polls; once two consecutive :meth:`observe` calls (at least
    ``min_interval_s`` apart) see the same ``(size, mtime_ns)``, the file is
    reported once. If it changes again it must settle again to be re-reported.

    Args:
        min_interval_s: Minimum seconds between the two matching observations.
    """

    def __init__(self, min_interval_s: float = 0.0) -> None:
        self.min_interval_s = min_interval_s
        # path -> (size, mtime_ns, first time this signature was seen, reported?)
        self._seen: dict[Path, tuple[int, int, float, bool]] = {}

    def observe(self, paths: list[Path], now: float) -> list[Path]:
        """Record one poll.

        Args:
            paths: Files to watch this poll; paths not listed are forgotten.
            now: Poll time in epoch seconds.

        Returns:
            Files that just became stable, in the order given.
        """
        stable: list[Path] = []
        current: dict[Path, tuple[int, int, float, bool]] = {}
        for p in paths:
            try:
                st = p.stat()
            except OSError:
                continue  # missing or vanished: forget it
            sig = (st.st_size, st.st_mtime_ns)
            prev = self._seen.get(p)
            if prev is None or (prev[0], prev[1]) != sig:
                current[p] = (sig[0], sig[1], now, False)
                continue
            reported = prev[3]
            if not reported and now - prev[2] >= self.min_interval_s:
                stable.append(p)
                reported = True
            current[p] = (sig[0], sig[1], prev[2], reported)
        self._seen = current
        return stable
