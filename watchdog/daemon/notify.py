"""systemd readiness, status and watchdog notifications (``sd_notify(3)``), no library.

The protocol is one ``AF_UNIX`` datagram of newline-separated ``KEY=VALUE`` lines sent to
the address in ``$NOTIFY_SOCKET`` (a path, or ``@name`` for the Linux abstract namespace).
Why no library: the wire format is a dozen lines; ``python-systemd`` needs libsystemd
headers to build and ``sdnotify`` does not handle ``WATCHDOG_USEC``/``WATCHDOG_PID``
(docs/install.md).

What the daemon sends (man sd_notify, systemd.service ``Type=notify``/``WatchdogSec=``):

- ``READY=1`` after the first tick, so ``systemctl start`` returns once a scan has run;
- ``STATUS=<one line>`` after each tick (``systemctl status`` shows it);
- ``WATCHDOG=1`` at least every half of ``$WATCHDOG_USEC``, from the tick hook and from a
  keep-alive thread that covers long ticks, but only while the loop is making progress
  (a tick stalled for more than ``stall_after_s`` stops the pings: systemd then kills and
  restarts the daemon, which is the point of the watchdog);
- ``STOPPING=1`` when the daemon begins to shut down.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING

from ..logs import get_logger

if TYPE_CHECKING:
    from .loop import Daemon, TickSummary

log = get_logger()

ENV_KEYS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
STALL_AFTER_S = 300.0


def notify_address(value: str) -> str | bytes:
    """The ``sendto`` address for a ``$NOTIFY_SOCKET`` value.

    Args:
        value: ``/path/to/socket`` or ``@name`` (abstract namespace).

    Returns:
        The path, or the abstract name as bytes with its leading NUL.

    Raises:
        ValueError: Empty, or a form this client does not speak (``vsock:``, systemd 254+).
    """
    if value.startswith("@") and len(value) > 1:
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    raise ValueError(f"unsupported NOTIFY_SOCKET {value!r}")


def watchdog_interval_s(env: Mapping[str, str], pid: int) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``$WATCHDOG_USEC``), or None.

    Per sd_watchdog_enabled(3): the watchdog applies to this process when
    ``$WATCHDOG_USEC`` is a positive integer and ``$WATCHDOG_PID`` is unset or ``pid``.
    """
    raw = env.get("WATCHDOG_USEC", "")
    if not raw.isdigit() or int(raw) == 0:
        return None
    owner = env.get("WATCHDOG_PID")
    if owner and owner != str(pid):
        return None
    return int(raw) / 1_000_000 / 2


class Notifier:
    """Sends sd_notify messages; silent no-op when not started by systemd.

    Also a daemon Worker (``start``/``stop``): the keep-alive thread, and ``STOPPING=1``
    on stop. Register :meth:`on_tick` in ``Daemon.on_tick``.

    Args:
        address: Destination from :func:`notify_address`; None disables everything.
        watchdog_s: Ping interval in seconds; None when the watchdog is off.
        stall_after_s: A tick running longer than this gets no keep-alive pings.
        clock: Monotonic clock (tests pass a fake).
    """

    name = "sd-notify"

    def __init__(
        self,
        address: str | bytes | None,
        watchdog_s: float | None = None,
        *,
        stall_after_s: float = STALL_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self.watchdog_s = watchdog_s if address is not None else None
        self.stall_after_s = stall_after_s
        self.clock = clock
        self.ready_sent = False
        self.interval_s = 5.0  # the daemon's tick interval; updated by on_tick
        self._progress_at = clock()  # last tick end (or start of the notifier)
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    @classmethod
    def from_env(cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        """Build from ``$NOTIFY_SOCKET``/``$WATCHDOG_USEC``/``$WATCHDOG_PID`` and unset them.

        Unsetting (like ``sd_notify(unset_environment=1)``) keeps the commands the daemon
        runs (systemctl, crontab) from inheriting them and talking to systemd as us.
        """
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET")
        address: str | bytes | None = None
        if raw:
            try:
                address = notify_address(raw)
            except ValueError as exc:
                log.warning("sd-notify-disabled", error=str(exc))
        watchdog_s = watchdog_interval_s(env, os.getpid())
        for key in ENV_KEYS:
            env.pop(key, None)
        return cls(address, watchdog_s)

    @property
    def enabled(self) -> bool:
        """True when a notify socket was given."""
        return self.address is not None

    def send(self, *lines: str) -> bool:
        """Send one datagram of ``KEY=VALUE`` lines.

        Returns:
            True when sent; False when disabled or the send failed (logged once per
            failure streak; the daemon carries on).
        """
        if self.address is None:
            return False
        data = "\n".join(lines).encode("utf-8", "replace")
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(
                        socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                    )
                self._sock.sendto(data, self.address)
            except OSError as exc:
                if not self._failing:
                    log.warning("sd-notify-failed", error=f"{type(exc).__name__}: {exc}")
                self._failing = True
                return False
        if self._failing:
            self._failing = False
            log.info("sd-notify-recovered")
        return True

    # -- hooks -------------------------------------------------------------------------

    def on_tick(self, summary: TickSummary, daemon: Daemon | None = None) -> None:
        """After each tick: ``STATUS=``, a watchdog ping, and ``READY=1`` the first time."""
        self._progress_at = self.clock()
        if daemon is not None:
            self.interval_s = daemon.config.daemon.interval_s
        lines = [f"STATUS={status_line(summary, daemon)}"]
        if self.watchdog_s is not None:
            lines.append("WATCHDOG=1")
        if not self.ready_sent:
            lines.insert(0, "READY=1")
        if self.send(*lines):
            self.ready_sent = True

    def hook(self, daemon: Daemon) -> Callable[[TickSummary], None]:
        """The ``Daemon.on_tick`` callable for ``daemon``."""

        def sd_notify_tick(summary: TickSummary) -> None:
            self.on_tick(summary, daemon)

        return sd_notify_tick

    def loop_alive(self) -> bool:
        """Whether the loop made progress recently enough to deserve a keep-alive ping.

        A tick that has run for longer than ``stall_after_s`` (measured from the end of the
        previous tick plus one interval) counts as stalled.
        """
        return self.clock() - self._progress_at <= self.interval_s + self.stall_after_s

    # -- Worker ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the keep-alive thread when the watchdog is on."""
        self._progress_at = self.clock()
        if self.watchdog_s is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._keepalive, name=self.name, daemon=True)
        self._thread.start()

    def _keepalive(self) -> None:
        assert self.watchdog_s is not None
        while not self._stop.wait(self.watchdog_s):
            if self.loop_alive():
                self.send("WATCHDOG=1")

    def stop(self) -> None:
        """Send ``STOPPING=1`` and end the keep-alive thread."""
        self.send("STOPPING=1")
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.close()
                self._sock = None


def status_line(summary: TickSummary, daemon: Daemon | None = None) -> str:
    """One line for ``STATUS=``: jobs, rogue count, open findings, scan time, degraded."""
    parts: list[str] = []
    result = summary.result
    if result is None:
        parts.append("scan failed")
    else:
        rogue = sum(1 for j in result.jobs if j.unsanctioned)
        parts.append(f"{len(result.jobs)} training job(s), {rogue} rogue or excess")
    if daemon is not None:
        try:
            parts.append(f"{daemon.db.open_finding_count()} open finding(s)")
        except Exception:  # the state part degrades on its own; the line stays useful
            parts.append("open findings unknown")
    parts.append(f"scan {summary.duration_s:.2f}s")
    if daemon is not None and daemon.degraded:
        parts.append("degraded: " + ", ".join(sorted(daemon.degraded)))
    return "; ".join(parts).replace("\n", " ")
