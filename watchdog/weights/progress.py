"""A dependency-free progress bar for long verifications on a terminal."""

from __future__ import annotations

import threading
import time
from typing import TextIO

MIN_BYTES = 256 << 20  # smaller inputs finish too fast to need a bar


class ProgressBar:
    """Thread-safe byte progress written to a TTY stream, redrawn at most 10×/s.

    Args:
        total_bytes: Bytes expected in all.
        stream: Where to draw (normally ``sys.stderr``).
        label: Prefix of the line.
    """

    def __init__(self, total_bytes: int, stream: TextIO, label: str = "verify-weights") -> None:
        self.total_bytes = max(1, total_bytes)
        self.stream = stream
        self.label = label
        self.done_bytes = 0
        self._lock = threading.Lock()
        self._last_s = 0.0
        self._drawn = False
        self._closed = False

    @staticmethod
    def wanted(total_bytes: int, stream: TextIO, enabled: bool = True) -> bool:
        """True when a bar should be drawn: enabled, a TTY, and a large input."""
        return enabled and total_bytes >= MIN_BYTES and stream.isatty()

    def update(self, n_bytes: int) -> None:
        """Add ``n_bytes`` checked bytes and redraw if due."""
        with self._lock:
            self.done_bytes += n_bytes
            now = time.monotonic()
            if now - self._last_s < 0.1 and self.done_bytes < self.total_bytes:
                return
            if self._closed:
                return
            self._last_s = now
            self._drawn = True
            pct = min(100, 100 * self.done_bytes // self.total_bytes)
            filled = pct * 30 // 100
            self.stream.write(
                f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {pct:3d}% "
                f"{self.done_bytes >> 20}/{self.total_bytes >> 20} MiB"
            )
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line (once; later updates are ignored)."""
        with self._lock:
            if self._drawn and not self._closed:
                self.stream.write("\n")
                self.stream.flush()
            self._closed = True
