"""Retry delays for failed deliveries: exponential, capped, optionally jittered."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """``base_s · 2^(failures-1)``, at most ``cap_s``, shortened by up to ``jitter``.

    Attributes:
        base_s: Delay after the first failure (seconds).
        cap_s: Longest delay (seconds).
        jitter: Fraction (0..1) by which a delay may be shortened at random, so many
            hosts that lost the same receiver do not retry in lock step. 0 in tests.
    """

    base_s: float = 5.0
    cap_s: float = 600.0
    jitter: float = 0.0

    def delay_s(self, failures: int, rand: float = 0.0) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based).

        Args:
            failures: Failed attempts so far, including this one (≥ 1).
            rand: A number in [0, 1) (``random.random()``); 0 gives the full delay.

        Returns:
            5, 10, 20, 40 … 600, 600 with the defaults and no jitter.
        """
        exponent = min(max(failures, 1) - 1, 60)  # 2**60 · base is past any cap
        delay = min(self.cap_s, self.base_s * float(2**exponent))
        return delay * (1.0 - self.jitter * rand)
