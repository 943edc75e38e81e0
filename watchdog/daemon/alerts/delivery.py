"""The alert delivery worker: drains the ``deliveries`` spool in a thread of its own.

The tick loop only spools (one row per alert and sink, in the tick's transaction); this
worker sends, so a slow or dead receiver never delays a scan. It uses its own SQLite
connection (StateDB hands each thread one) and never holds a transaction while it waits
on the network.

Delivery rules (docs/alerts.md):

- A row is marked delivered only after a 2xx (or a written log line); a row is never
  sent again once marked. A crash between the 2xx and the mark resends it once after
  the restart: the at-least-once window. Every body carries a stable ``delivery_id``
  (header ``Idempotency-Key``) so a receiver can drop the duplicate.
- A failure is retried after ``retry_base_s · 2^(n-1)`` seconds, capped at
  ``retry_max_s``. When the receiver is down (connection refused, timeout, 5xx, 429)
  the whole sink pauses until that retry, so its alerts keep their order and a dead
  receiver costs one attempt per retry, not one per queued alert.
- Alerts about one finding go out in order (open, remind, resolve) on each sink.
- Rows for a sink no longer in the configuration stay spooled untouched.
- A webhook sink whose URL cannot be read (``url_env`` unset, ``url_file`` missing or
  writable by others) is a degraded component ``alert-sink:NAME`` (``status``, the
  ``component-degraded`` finding, the metric) until it can; its alerts stay spooled
  and are not attempted meanwhile.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import structlog

from watchdog.daemon.alerts.backoff import Backoff
from watchdog.daemon.alerts.secrets import SecretError, read_url, redact
from watchdog.daemon.alerts.sinks import SendError, Sink, make_sink
from watchdog.daemon.settings import AlertSettings, SinkSettings
from watchdog.daemon.state import Delivery, StateDB

if TYPE_CHECKING:
    from watchdog.daemon.loop import TickSummary

log = structlog.get_logger("rogue-watchdog")
# Degraded-component name of a sink whose URL cannot be read: ``alert-sink:NAME``.
SINK_COMPONENT = "alert-sink:"


@dataclass
class RoundResult:
    """What one :meth:`DeliveryWorker.deliver_due` did.

    Attributes:
        delivered: Delivery ids marked delivered, in send order.
        failed: Delivery id → the (secret-free) error of its failed attempt.
        paused: Sinks skipped because they are down until a retry time.
    """

    delivered: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    paused: set[str] = field(default_factory=set)


def _pending(db: StateDB, sink: str, limit: int) -> list[Delivery]:
    """Undelivered rows of one sink, oldest first, due or not."""
    rows = db.conn.execute(
        "SELECT * FROM deliveries WHERE delivered_at IS NULL AND sink=? ORDER BY id LIMIT ?",
        (sink, limit),
    )
    return [_row(r) for r in rows]


def _row(r: Any) -> Delivery:
    return Delivery(
        r["id"], r["finding_id"], r["sink"], r["event"], json.loads(r["payload_json"]),
        r["created_at"], r["attempts"], r["next_attempt_at"], r["delivered_at"],
        r["last_error"],
    )  # fmt: skip


class DeliveryWorker:
    """Sends spooled alerts; implements the daemon's Worker protocol.

    Args:
        db: The state database (the worker's thread gets its own connection).
        alerts: Returns the alert settings in force (re-read each round, so a SIGHUP
            reload that changes sinks or retry limits takes effect).
        clock: POSIX time source for the thread; tests call :meth:`deliver_due` with
            their own ``now`` instead.
        poll_interval_s: Longest sleep between rounds; :meth:`wake` (called after each
            tick) starts a round at once.
        jitter: Fraction by which retry delays are shortened at random (0: exact).
        rand: Random source for the jitter, in [0, 1).
        environ: Environment for ``url_env``; None means ``os.environ``.
        batch: Rows read per sink and round.
        degraded: The daemon's ``degraded`` dict: a round that fails as a whole (state
            database unreadable) is recorded there as ``alerts`` until a round succeeds.

    Attributes:
        name: ``alerts`` (for degrade messages).
    """

    name = "alerts"

    def __init__(
        self,
        db: StateDB,
        alerts: Callable[[], AlertSettings],
        *,
        clock: Callable[[], float] = time.time,
        poll_interval_s: float = 1.0,
        jitter: float = 0.1,
        rand: Callable[[], float] = random.random,
        environ: Mapping[str, str] | None = None,
        batch: int = 200,
        degraded: dict[str, str] | None = None,
    ) -> None:
        self.db = db
        self.degraded = degraded
        self.alerts = alerts
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.jitter = jitter
        self.rand = rand
        self.environ = environ if environ is not None else os.environ
        self.batch = batch
        self.client = httpx.Client(follow_redirects=False)
        self._sinks: dict[str, Sink] = {}
        self._down_until: dict[str, float] = {}
        self._failing: dict[str, str] = {}
        self._orphans_noted: set[str] = set()
        self._secret_problems: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one round ---------------------------------------------------------------------

    def _sink(self, settings: SinkSettings) -> Sink:
        sink = self._sinks.get(settings.name)
        if sink is None or sink.settings != settings:
            sink = make_sink(settings, self.client, self.environ)
            self._sinks[settings.name] = sink
        return sink

    def deliver_due(self, now: float | None = None) -> RoundResult:
        """Send every due delivery once, in spool order per sink.

        Args:
            now: A fixed POSIX time used for "due", for ``delivered_at`` and as the start
                of retry delays (tests); None reads :attr:`clock` before each attempt and
                after each failure, so a delay starts when a slow attempt gave up.

        Returns:
            What was delivered, what failed (and why), which sinks were paused.
        """
        out = RoundResult()
        with self._lock:
            settings = self.alerts()
            backoff = Backoff(settings.retry_base_s, settings.retry_max_s, self.jitter)
            configured = {s.name: s for s in settings.sinks}
            self._note_unconfigured(configured)
            self._forget_removed_sinks(configured)
            for name, sink_settings in configured.items():
                if not self._secret_ok(sink_settings):
                    out.paused.add(name)
                    continue
                if self._down_until.get(name, -math.inf) > self._time(now):
                    out.paused.add(name)
                    continue
                self._down_until.pop(name, None)
                self._drain(self._sink(sink_settings), now, backoff, out)
        return out

    def _time(self, now: float | None) -> float:
        return self.clock() if now is None else now

    def _drain(self, sink: Sink, now: float | None, backoff: Backoff, out: RoundResult) -> None:
        name = sink.settings.name
        waiting: set[int] = set()  # findings with an earlier row not yet due on this sink
        for d in _pending(self.db, name, self.batch):
            if d.finding_id in waiting:
                continue
            if d.next_attempt_at > self._time(now):
                waiting.add(d.finding_id)
                continue
            try:
                sink.send(d)
            except SendError as exc:
                delay = backoff.delay_s(d.attempts + 1, self.rand() if self.jitter else 0.0)
                if exc.retry_after_s is not None:
                    delay = max(delay, min(exc.retry_after_s, backoff.cap_s))
                retry_at = self._time(now) + delay
                self.db.mark_failed(d.id, exc.reason, retry_at)
                out.failed[d.id] = exc.reason
                self._note_failure(name, exc.reason)
                if exc.sink_down:
                    self._down_until[name] = retry_at
                    return
                waiting.add(d.finding_id)
                continue
            except Exception as exc:  # a bug in a sink must not kill the worker
                reason = f"internal error in the {name} sink: {type(exc).__name__}"
                retry_at = self._time(now) + backoff.delay_s(d.attempts + 1)
                self.db.mark_failed(d.id, reason, retry_at)
                out.failed[d.id] = reason
                self._note_failure(name, reason)
                self._down_until[name] = retry_at
                return
            self.db.mark_delivered(d.id, self._time(now))
            out.delivered.append(d.id)
            self._note_ok(name)

    # -- say it once -------------------------------------------------------------------

    def _secret_ok(self, settings: SinkSettings) -> bool:
        """Whether the sink's URL can be read; otherwise the sink is a degraded component
        (logged once) so ``status`` and the metrics name it instead of a silent queue."""
        part = f"{SINK_COMPONENT}{settings.name}"
        problem: str | None = None
        if settings.type != "log":
            try:
                read_url(settings, self.environ)
            except SecretError as exc:
                problem = redact(str(exc))
        if problem is None:
            if self._secret_problems.pop(part, None) is not None:
                log.info("component-recovered", component=part)
            if self.degraded is not None:
                self.degraded.pop(part, None)
            return True
        if self._secret_problems.get(part) != problem:
            log.error("component-degraded", component=part, error=problem)
        self._secret_problems[part] = problem
        if self.degraded is not None:
            self.degraded[part] = problem
        return False

    def _forget_removed_sinks(self, configured: dict[str, SinkSettings]) -> None:
        for part in list(self._secret_problems):
            if part[len(SINK_COMPONENT) :] not in configured:
                del self._secret_problems[part]
                if self.degraded is not None:
                    self.degraded.pop(part, None)

    def _note_failure(self, sink: str, reason: str) -> None:
        if self._failing.get(sink) != reason:
            log.error("alert-sink-failing", sink=sink, error=reason)
        self._failing[sink] = reason

    def _note_ok(self, sink: str) -> None:
        if self._failing.pop(sink, None) is not None:
            log.info("alert-sink-recovered", sink=sink)

    def _note_unconfigured(self, configured: dict[str, SinkSettings]) -> None:
        rows = self.db.conn.execute(
            "SELECT sink, COUNT(*) FROM deliveries WHERE delivered_at IS NULL GROUP BY sink"
        ).fetchall()
        for sink, count in rows:
            if sink not in configured and sink not in self._orphans_noted:
                self._orphans_noted.add(sink)
                log.warning(
                    "alert-sink-unconfigured",
                    sink=sink,
                    queued=count,
                    message="alerts spooled for a sink no longer configured stay queued",
                )

    # -- Worker protocol ---------------------------------------------------------------

    def wake(self) -> None:
        """Start a round now instead of after the poll interval."""
        self._wake.set()

    def on_tick(self, summary: TickSummary) -> None:
        """``Daemon.on_tick`` hook: a tick may have spooled alerts, send them now."""
        self.wake()

    def _run(self) -> None:
        failing: str | None = None
        try:
            while not self._stop.is_set():
                try:
                    self.deliver_due()
                    if failing is not None:
                        log.info("component-recovered", component=self.name)
                        if self.degraded is not None:
                            self.degraded.pop(self.name, None)
                    failing = None
                except Exception as exc:  # the database may be locked or gone
                    text = f"{type(exc).__name__}: {exc}"
                    if text != failing:
                        log.error("component-degraded", component=self.name, error=text)
                    failing = text
                    if self.degraded is not None:
                        self.degraded[self.name] = text
                self._wake.wait(self.poll_interval_s)
                self._wake.clear()
        finally:
            self.db.close()  # this thread's connection only

    def start(self) -> None:
        """Start the delivery thread (returns at once)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rogue-watchdog-alerts")
        self._thread.daemon = True  # a hung request must not keep the process alive
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop the thread; wait for an attempt in flight at most ``timeout_s``
        (default: the longest sink timeout plus one second)."""
        self._stop.set()
        self._wake.set()
        if timeout_s is None:
            timeout_s = 1.0 + max((s.timeout_s for s in self.alerts().sinks), default=0.0)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                return  # stuck in a request: a daemon thread, it dies with the process
        self.client.close()
