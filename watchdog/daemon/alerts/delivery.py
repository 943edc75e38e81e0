"""The alert delivery worker: drains the ``deliveries`` spool, one thread per sink.

The tick loop only spools (one row per alert and sink, in the tick's transaction); this
worker sends, so a slow or dead receiver never delays a scan, and each sink drains on a
thread (and an HTTP client) of its own, so a receiver that takes 30 s to answer never
delays another sink. Each thread uses its own SQLite connection (StateDB hands each
thread one) and never holds a transaction while it waits on the network.

Delivery rules (docs/alerts.md):

- A row is marked delivered only after a 2xx (or a written log line); a row is never
  sent again once marked. A crash between the 2xx and the mark resends it once after
  the restart: the at-least-once window. Every body carries a stable ``delivery_id``
  (header ``Idempotency-Key``) so a receiver can drop the duplicate.
- A failure is retried after ``retry_base_s · 2^(n-1)`` seconds, capped at
  ``retry_max_s``. When the receiver is down (connection refused, timeout, 5xx, 429)
  the whole sink pauses until that retry, so its alerts keep their order and a dead
  receiver costs one attempt per retry, not one per queued alert.
  A wait the receiver names (``Retry-After``, Discord's ``retry_after`` body) is used
  instead of the backoff, capped at ``retry_max_s``.
- An alert the sink can never send (it cannot be encoded; a 4xx other than 408, 425,
  429 and the wrong-URL answers 401/403/404/410) is set aside: ``dead_at`` is set, it is
  logged once, counted in ``status`` and metrics, and holds back nothing.
- Alerts about one finding go out in order (open, remind, resolve) on each sink.
- Alerts due at once on a webhook sink go out as one message (``coalesce``), and a sink
  gets at most one message per ``min_interval_s`` (a rate limit): a storm is one post.
- Rows for a sink no longer in the configuration stay spooled untouched.
- Alerts the tick could not write to ``state.db`` wait in memory
  (:class:`~watchdog.daemon.alerts.memory.MemorySpool`) and are sent first, by the
  same rules: a full or unwritable state directory never silences a sink.
- A delivered row whose mark cannot be written (``state.db`` full or unwritable) is
  remembered as delivered in memory and never sent again; writing the mark is retried
  with the sink's backoff, and a failed attempt whose record cannot be written waits
  out its backoff all the same (issue 32, case 2: the same resolve had been posted 240
  times in 84 s).
- A webhook sink whose URL cannot be read (``url_env`` unset, ``url_file`` missing or
  writable by others) is a degraded component ``alert-sink:NAME`` (``status``, the
  ``component-degraded`` finding, the metric) until it can; its alerts stay spooled
  and are not attempted meanwhile.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...config.alerts import AlertSettings, SinkSettings
from ...config.sinks import sink_kind
from ...logs import get_logger
from ...state import Delivery, StateDB, delivery_row
from . import http
from .adopt import adopted
from .alert import Outgoing
from .alertmanager import AlertmanagerSink
from .backoff import Backoff
from .base import BatchSink, SendError, Sink, SinkContext, SinkFactory
from .memory import MemorySpool
from .secrets import SecretError, read_url, redact
from .sinks import LogSink, discord, slack, webhook

if TYPE_CHECKING:
    import httpx

log = get_logger()
#: How long an idle sink's thread waits between full rounds when nothing wakes it: a
#: spooled alert wakes it at once (the store's and the memory spool's listeners), rows
#: another process spooled are found by the supervisor's check (``elsewhere_poll_s``),
#: so this round only covers what neither sees (a row whose id reuses a pruned one).
IDLE_ROUND_S = 30.0
# Degraded-component name of a sink whose URL cannot be read: ``alert-sink:NAME``.
SINK_COMPONENT = "alert-sink:"


#: Every sink kind's factory, by the kind's name in
#: :data:`watchdog.config.sinks.SINK_KINDS` (which holds what the configuration reads).
SINK_FACTORIES: Mapping[str, SinkFactory] = {
    "log": LogSink,
    "slack": slack,
    "discord": discord,
    "webhook": webhook,
    "alertmanager": AlertmanagerSink,
}


def sink_factory(kind: str) -> SinkFactory:
    """The factory of the sink kind ``kind`` (:data:`SINK_FACTORIES`).

    Raises:
        KeyError: No kind of that name is listed.
    """
    factory = SINK_FACTORIES.get(kind)
    if factory is None:
        raise KeyError(f"no sink kind {kind!r} is listed")
    return factory


def make_sink(
    settings: SinkSettings, client: httpx.Client, environ: Mapping[str, str] | None = None
) -> Sink:
    """The sink object for one ``alerts.sinks[]`` entry, built by its kind's factory."""
    return sink_factory(settings.type)(settings, SinkContext(client, environ))


@dataclass
class RoundResult:
    """What one :meth:`DeliveryWorker.deliver_due` did.

    Attributes:
        delivered: Delivery ids marked delivered, in send order.
        failed: Delivery id → the (secret-free) error of its failed attempt.
        paused: Sinks skipped because they are down until a retry time, or because
            their rate limit (``min_interval_s``) has not passed since the last message.
        dead: Delivery id → why it was set aside (dead letter: it can never be sent).
        messages: Messages (requests, log lines) sent or attempted.
    """

    delivered: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    paused: set[str] = field(default_factory=set)
    dead: dict[int, str] = field(default_factory=dict)
    messages: int = 0


def _pending(db: StateDB, sink: str, limit: int) -> list[Delivery]:
    """Undelivered, not dead-lettered rows of one sink, oldest first, due or not."""
    return db.pending(sink, limit)


@dataclass
class _Unmarked:
    """Delivered rows whose ``delivered_at`` could not be written yet (by row id: when
    each was delivered), and when writing the marks is next tried."""

    rows: dict[int, float] = field(default_factory=dict)
    failures: int = 0
    retry_at: float = -math.inf
    error: str | None = None  # the last failure, said once


_row = delivery_row


def _reads_url(settings: SinkSettings) -> bool:
    """Whether the sink reads its URL from ``url_env`` or ``url_file`` (a log sink has
    none; inline Alertmanager URLs need none)."""
    kind = sink_kind(settings.type)
    return (kind is None or kind.receiver != "none") and not settings.urls


class DeliveryWorker:
    """Sends spooled alerts; implements the daemon's Worker protocol.

    Args:
        db: The state database (the worker's thread gets its own connection).
        alerts: Returns the alert settings in force (re-read each round, so a SIGHUP
            reload that changes sinks or retry limits takes effect).
        clock: POSIX time source for the thread; tests call :meth:`deliver_due` with
            their own ``now`` instead.
        poll_interval_s: Longest sleep between rounds while a sink has something to do
            (rows waiting for a retry, its rate limit or its receiver; a URL it cannot
            read; a round that failed) and between the supervisor's checks for rows
            another process spooled. A sink with nothing queued waits for
            :meth:`wake` (called when an alert is spooled in this process: the store's
            and the memory spool's listeners, and at a reload) or :data:`IDLE_ROUND_S`;
            a sink that needs a URL still reads it each poll interval.
        elsewhere_poll_s: How often the supervisor looks for rows another process
            spooled (a second daemon on a shared state directory, whose own worker
            sends them at its commit; a stopped one's are sent at this worker's start):
            one read of the spool's highest id.
        jitter: Fraction by which retry delays are shortened at random (0: exact).
        rand: Random source for the jitter, in [0, 1).
        environ: Environment for ``url_env``; None means ``os.environ``.
        batch: Rows read per sink and round.
        degraded: The daemon's ``degraded`` dict: a round that fails as a whole (state
            database unreadable) is recorded there as ``alerts`` until a round succeeds.
        memory: Alerts the tick could not spool in ``state.db`` (the daemon's
            ``unstored.spool``); sent before the database's rows.
        config_file: Returns this daemon's configuration file: a row another install's
            daemon spooled into a shared state directory is sent with its commands
            naming it (:func:`.adopt.adopted`).

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
        elsewhere_poll_s: float = 10.0,
        jitter: float = 0.1,
        rand: Callable[[], float] = random.random,
        environ: Mapping[str, str] | None = None,
        batch: int = 200,
        degraded: dict[str, str] | None = None,
        memory: MemorySpool | None = None,
        config_file: Callable[[], str | None] | None = None,
    ) -> None:
        self.db = db
        # This daemon's configuration file: a row another install's daemon spooled into
        # a shared state directory is sent with its commands naming it (.adopt).
        self.config_file = config_file
        self.memory = memory if memory is not None else MemorySpool()
        self._unmarked: dict[str, _Unmarked] = {}  # by sink
        # Row id → retry time of a failed attempt whose record could not be written.
        self._retry_at: dict[int, float] = {}
        self.degraded = degraded
        self.alerts = alerts
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.elsewhere_poll_s = elsewhere_poll_s
        self.jitter = jitter
        self.rand = rand
        self.environ = environ if environ is not None else os.environ
        self.batch = batch
        self._clients: dict[str, httpx.Client] = {}
        self._sinks: dict[str, Sink] = {}
        self._down_until: dict[str, float] = {}
        self._next_send: dict[str, float] = {}
        self._singles: set[str] = set()  # sinks whose last coalesced message was refused
        self._failing: dict[str, str] = {}
        self._orphans_noted: set[str] = set()
        self._secret_problems: dict[str, str] = {}
        self._rounds_failing: dict[str, str] = {}  # thread ("" supervisor) → its error
        self._lock = threading.Lock()  # the configuration view and the sink table
        self._sink_locks: dict[str, threading.Lock] = {}  # one drain of a sink at a time
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._wakes: dict[str, threading.Event] = {}
        # Sink → worker-clock time its thread has something to do again (inf: nothing
        # queued, wait for a wake-up); set by each round (issue 34: an empty spool was
        # read every second and at every tick).
        self._next_at: dict[str, float] = {}
        self._last_id: int | None = None  # the highest spool row id the supervisor saw
        self._thread: threading.Thread | None = None
        self._threads: dict[str, threading.Thread] = {}

    # -- one round ---------------------------------------------------------------------

    def _client(self, key: str) -> httpx.Client:
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = http.new_client()
            return client

    def _sink(self, settings: SinkSettings) -> Sink:
        with self._lock:
            sink = self._sinks.get(settings.name)
        if sink is None or sink.settings != settings:
            sink = make_sink(settings, self._client(settings.name), self.environ)
            with self._lock:
                self._sinks[settings.name] = sink
        return sink

    def _configured(self) -> tuple[AlertSettings, dict[str, SinkSettings]]:
        """The alert settings in force and the sinks they configure, by name."""
        with self._lock:
            settings = self.alerts()
            configured = {s.name: s for s in settings.sinks}
            self._note_unconfigured(configured)
            self._forget_removed_sinks(configured)
        return settings, configured

    def _sink_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._sink_locks.setdefault(name, threading.Lock())

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
        settings, configured = self._configured()
        for name, sink_settings in configured.items():
            self._round(name, sink_settings, settings, now, out)
        return out

    def deliver_sink(self, name: str, now: float | None = None) -> RoundResult | None:
        """One round for the sink called ``name`` only (its thread's loop body).

        Returns:
            What was done, or None when no sink of that name is configured any more.
        """
        settings, configured = self._configured()
        sink_settings = configured.get(name)
        if sink_settings is None:
            return None
        out = RoundResult()
        self._round(name, sink_settings, settings, now, out)
        return out

    def _round(
        self,
        name: str,
        sink_settings: SinkSettings,
        settings: AlertSettings,
        now: float | None,
        out: RoundResult,
    ) -> None:
        with self._sink_lock(name):
            self._next_at[name] = math.inf
            if not self._secret_ok(sink_settings):
                self._soon(name, self._time(now) + self.poll_interval_s)
                out.paused.add(name)
                return
            t = self._time(now)
            down = self._down_until.get(name, -math.inf)
            wait = self._next_send.get(name, -math.inf)
            if down > t or wait > t:
                self._soon(name, max(down, wait))
                out.paused.add(name)
                return
            self._down_until.pop(name, None)
            backoff = Backoff(settings.retry_base_s, settings.retry_max_s, self.jitter)
            try:
                self._drain(self._sink(sink_settings), now, backoff, out)
            finally:
                unmarked = self._unmarked.get(name)
                if unmarked is not None and unmarked.rows:  # marks to write again
                    self._soon(name, unmarked.retry_at)

    def _time(self, now: float | None) -> float:
        return self.clock() if now is None else now

    def _soon(self, name: str, at: float) -> None:
        """The sink has something to do at ``at`` (worker clock) or earlier."""
        self._next_at[name] = min(self._next_at.get(name, math.inf), at)

    def wait_s(self, name: str) -> float | None:
        """How long the sink's thread may sleep after its round: until its next known
        time, at most the poll interval; None when nothing is queued (idle)."""
        at = self._next_at.get(name, math.inf)
        if at == math.inf:
            return None
        return min(self.poll_interval_s, max(0.0, at - self.clock()))

    def _due(self, name: str, now: float | None, typed: dict[int, Outgoing]) -> list[Delivery]:
        """Rows of ``name`` to send now, oldest first: due, and not behind an earlier row
        of the same finding that is not due (alerts about one finding keep their order).
        Each row's alert is read once, into ``typed`` (row id → alert)."""
        waiting: set[int] = set()
        due = []
        unmarked = self._unmarked.get(name, _Unmarked()).rows
        for d in self._rows(name, now):
            if d.id in unmarked:
                continue  # delivered; only its mark is not written yet: never resend
            if d.finding_id in waiting:
                continue  # due after the earlier row of its finding (noted below)
            at = max(d.next_attempt_at, self._retry_at.get(d.id, -math.inf))
            if at > self._time(now):
                self._soon(name, at)
                waiting.add(d.finding_id)
                continue
            typed[d.id] = Outgoing.from_delivery(d)
            if self.config_file is not None:  # unknown (a bare worker): sent as spooled
                typed[d.id] = adopted(typed[d.id], self.config_file())
            due.append(d)
        return due

    def _rows(self, name: str, now: float | None = None) -> list[Delivery]:
        """The sink's rows waiting in memory, then those of ``state.db``; only the
        memory's when the database cannot be read (they must not wait on it)."""
        rows = self.memory.pending(name)
        try:
            stored = _pending(self.db, name, self.batch)
        except Exception:
            if not rows:
                raise
            # The database's rows are unknown: read again at the next poll interval.
            self._soon(name, self._time(now) + self.poll_interval_s)
            return rows
        if len(stored) >= self.batch:  # more may wait beyond this batch: look again soon
            self._soon(name, self._time(now) + self.poll_interval_s)
        return rows + stored

    def _flush_marks(self, name: str, now: float | None, backoff: Backoff) -> None:
        """Write the delivered marks that could not be written before, when their
        retry is due; a failure waits out the sink's backoff again."""
        pending = self._unmarked.get(name)
        if pending is None or not pending.rows or pending.retry_at > self._time(now):
            return
        try:
            for row, when in list(pending.rows.items()):
                self.db.mark_delivered(row, when)
                del pending.rows[row]
        except Exception as exc:
            pending.failures += 1
            pending.retry_at = self._time(now) + backoff.delay_s(pending.failures)
            self._marks_failed(name, exc)
            return
        pending.failures = 0
        if pending.error is not None:
            pending.error = None
            log.info("alert-marks-recorded", sink=name)

    def _mark_delivered(self, name: str, d: Delivery, done: float, backoff: Backoff) -> None:
        """Record ``d`` delivered: in memory for a memory row; in ``state.db``
        otherwise, remembered in memory when that write fails (never sent again)."""
        if d.id < 0:
            self.memory.done(d.id)
            return
        pending = self._unmarked.setdefault(name, _Unmarked())
        if pending.rows:  # earlier marks wait for their retry: keep the order
            pending.rows[d.id] = done
            return
        try:
            self.db.mark_delivered(d.id, done)
        except Exception as exc:
            pending.rows[d.id] = done
            pending.failures += 1
            pending.retry_at = done + backoff.delay_s(pending.failures)
            self._marks_failed(name, exc)

    def _marks_failed(self, name: str, exc: Exception) -> None:
        """Say once per sink and error that deliveries cannot be recorded (not per
        alert, not per retry: a storm on a full disk must not flood the log)."""
        pending = self._unmarked.setdefault(name, _Unmarked())
        text = f"{type(exc).__name__}: {exc}"
        # A connection that met a read-only file (chattr +i, a read-only remount) can
        # stay read-only after the file is writable again: the next try reconnects.
        with contextlib.suppress(Exception):
            self.db.close()  # this thread's connection only
        if pending.error != text:
            log.error(
                "alert-mark-failed",
                sink=name,
                error=text,
                message="delivered, but not recorded in state.db; not sent again, the "
                "record is retried with the sink's backoff",
            )
        pending.error = text

    def _mark_failed(self, d: Delivery, reason: str, retry_at: float) -> None:
        """Record a failed attempt; when it cannot be written, the retry time is kept
        in memory so the backoff holds all the same."""
        self._soon(d.sink, retry_at)
        if d.id < 0:
            self.memory.failed(d.id, reason, retry_at)
            return
        self._retry_at[d.id] = retry_at
        try:
            self.db.mark_failed(d.id, reason, retry_at)
        except Exception:
            return
        self._retry_at.pop(d.id, None)

    def _mark_dead(self, d: Delivery, reason: str, now: float) -> None:
        if d.id < 0:
            self.memory.done(d.id)
            return
        try:
            self.db.mark_dead(d.id, reason, now)
        except Exception:
            self._retry_at[d.id] = math.inf  # set aside for this run at least

    def _drain(self, sink: Sink, now: float | None, backoff: Backoff, out: RoundResult) -> None:
        name = sink.settings.name
        self._flush_marks(name, now, backoff)
        typed: dict[int, Outgoing] = {}
        due = self._due(name, now, typed)
        if not due:
            return
        interval = sink.settings.interval_s
        batching = isinstance(sink, BatchSink)
        if sink.settings.coalesce and batching and len(due) > 1 and name not in self._singles:
            groups = [due]
        else:
            groups = [[d] for d in due]
        self._singles.discard(name)
        blocked: set[int] = set()  # findings whose earlier alert failed in this round
        sent = 0
        for group in groups:
            if any(d.finding_id in blocked for d in group):
                continue
            if sent and interval > 0:
                # Rate limit: one message per round; the rest wait for the next.
                self._soon(name, self._next_send.get(name, self._time(now)))
                break
            sent += 1
            out.messages += 1
            try:
                if len(group) == 1:
                    sink.send(typed[group[0].id])
                else:
                    assert isinstance(sink, BatchSink)
                    sink.send_batch([typed[d.id] for d in group])
            except SendError as exc:
                self._next_send[name] = self._time(now) + interval
                if self._failed(name, group, exc, now, backoff, out):
                    return
                if not exc.permanent:  # a dead letter holds back nothing
                    blocked.update(d.finding_id for d in group)
                continue
            except Exception as exc:  # a bug in a sink must not kill the worker
                reason = f"internal error in the {name} sink: {type(exc).__name__}"
                retry_at = self._time(now) + backoff.delay_s(group[0].attempts + 1)
                self._down_until[name] = retry_at
                for d in group:
                    self._mark_failed(d, reason, retry_at)
                    out.failed[d.id] = reason
                self._note_failure(name, reason)
                return
            self._next_send[name] = self._time(now) + interval
            done = self._time(now)
            for d in group:
                self._mark_delivered(name, d, done, backoff)
                out.delivered.append(d.id)
            self._note_ok(name)

    def _failed(
        self,
        name: str,
        group: list[Delivery],
        exc: SendError,
        now: float | None,
        backoff: Backoff,
        out: RoundResult,
    ) -> bool:
        """Record a failed message; True when the sink is down (stop draining it)."""
        if exc.permanent and len(group) == 1:
            d = group[0]
            self._mark_dead(d, exc.reason, self._time(now))
            out.dead[d.id] = exc.reason
            log.error(
                "alert-dead-lettered",
                sink=name,
                delivery=d.id,
                finding_id=d.finding_id,
                alert_event=d.event,
                error=exc.reason,
                message="this alert can never be sent to this sink; it is set aside",
            )
            return False
        if exc.permanent:  # a coalesced message refused: send its alerts one by one
            self._singles.add(name)
            for d in group:
                self._mark_failed(d, exc.reason, self._time(now))
                out.failed[d.id] = exc.reason
            self._note_failure(name, exc.reason)
            return True
        attempts = max(d.attempts for d in group) + 1
        if exc.retry_after_s is not None:  # the receiver said how long: honour it
            delay = min(exc.retry_after_s, backoff.cap_s)
        else:
            delay = backoff.delay_s(attempts, self.rand() if self.jitter else 0.0)
        retry_at = self._time(now) + delay
        if exc.sink_down:
            self._down_until[name] = retry_at
        for d in group:
            self._mark_failed(d, exc.reason, retry_at)
            out.failed[d.id] = exc.reason
        self._note_failure(name, exc.reason)
        return bool(exc.sink_down)

    # -- say it once -------------------------------------------------------------------

    def _secret_ok(self, settings: SinkSettings) -> bool:
        """Whether the sink's URL can be read; otherwise the sink is a degraded component
        (logged once) so ``status`` and the metrics name it instead of a silent queue."""
        part = f"{SINK_COMPONENT}{settings.name}"
        problem: str | None = None
        if _reads_url(settings):
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
        try:
            queued = self.db.queued_by_sink()
        except Exception:  # unreadable: the sinks' own rounds say so; memory rows go on
            return
        for sink, count in queued.items():
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
        """Start a round now, on every sink (and the supervisor's: a reload's sinks)."""
        self._wake.set()
        with self._lock:
            events = list(self._wakes.values())
        for event in events:
            event.set()

    def on_tick(self, summary: object) -> None:
        """A wake-up for a hook list (:meth:`wake`). The daemon no longer registers it
        (:func:`~watchdog.daemon.assemble.build_alert_workers`): an alert spooled in this
        process wakes the worker when it is committed, so a tick that spooled nothing
        costs no round."""
        self.wake()

    def on_reload(self, daemon: object) -> None:
        """``Daemon.on_reload`` hook: sinks added, removed or changed take effect now."""
        self.wake()

    def _spooled_elsewhere(self) -> bool:
        """Whether ``deliveries`` holds a row newer than any seen by this check: another
        process (a second daemon on a shared state directory) spooled it, or this one
        did and its wake-up already came (one spare round then)."""
        last = self.db.last_delivery_id()
        seen, self._last_id = self._last_id, last
        return seen is not None and last > seen

    def _run(self) -> None:
        """The supervising thread: one draining thread per configured sink (a reload
        that adds a sink starts its thread; a removed sink's thread ends) at a wake-up,
        and the check for rows another process spooled each ``elsewhere_poll_s`` (one
        indexed read, instead of every sink's round each second)."""
        full_at = check_at = -math.inf  # monotonic times of the next round and check
        # The check's mark is taken before any sink thread's first round reads the spool:
        # a row another process spools between that round and a later first check would
        # otherwise be in the mark, never woken for, and wait for the sink's own poll.
        with contextlib.suppress(Exception):  # the database may be locked: the check's
            self._last_id = self.db.last_delivery_id()  # first look takes the mark then
        try:
            while not self._stop.is_set():
                wait_s = self.poll_interval_s
                try:
                    woken = self._wake.is_set()
                    if woken or time.monotonic() >= full_at:
                        self._wake.clear()
                        _settings, configured = self._configured()
                        for name in configured:
                            self._ensure_thread(name)
                        full_at = time.monotonic() + IDLE_ROUND_S
                    if woken or time.monotonic() >= check_at:
                        if self._spooled_elsewhere():
                            self._wake_sinks()
                        check_at = time.monotonic() + self.elsewhere_poll_s
                    self._round_ok("")
                    wait_s = max(0.0, min(full_at, check_at) - time.monotonic())
                except Exception as exc:  # the database may be locked or gone
                    full_at = check_at = -math.inf  # again at the next poll interval
                    self._round_failed("", exc)
                self._wake.wait(wait_s)
        finally:
            self.db.close()  # this thread's connection only

    def _wake_sinks(self) -> None:
        with self._lock:
            events = list(self._wakes.values())
        for event in events:
            event.set()

    def _round_failed(self, thread: str, exc: Exception) -> None:
        """A round of ``thread`` (a sink's name; "" the supervisor) failed as a whole:
        ``alerts`` is degraded, logged once per distinct error."""
        text = f"{type(exc).__name__}: {exc}"
        with self._lock:
            was = self._rounds_failing.get(thread)
            self._rounds_failing[thread] = text
        if text != was:
            log.error("component-degraded", component=self.name, error=text)
        if self.degraded is not None:
            self.degraded[self.name] = text

    def _round_ok(self, thread: str) -> None:
        """A round of ``thread`` succeeded: once no thread's last round failed,
        ``alerts`` is no longer degraded (issue 32, case 6: it had stayed degraded,
        with its warning finding, after deliveries succeeded again)."""
        with self._lock:
            if self._rounds_failing.pop(thread, None) is None or self._rounds_failing:
                return
        log.info("component-recovered", component=self.name)
        if self.degraded is not None:
            self.degraded.pop(self.name, None)

    def _ensure_thread(self, name: str) -> None:
        with self._lock:
            thread = self._threads.get(name)
            if thread is not None and thread.is_alive():
                return
            event = self._wakes.setdefault(name, threading.Event())
            thread = threading.Thread(
                target=self._run_sink, args=(name, event), name=name, daemon=True
            )
            self._threads[name] = thread
        thread.start()

    def _run_sink(self, name: str, event: threading.Event) -> None:
        """One sink's loop: drain it, then wait for a wake-up or until it has something
        to do (a retry, its rate limit, its receiver's pause: at most the poll
        interval); with nothing queued, for a wake-up or :data:`IDLE_ROUND_S`."""
        try:
            while not self._stop.is_set():
                wait_s: float | None = self.poll_interval_s
                try:
                    if self.deliver_sink(name) is None:
                        self._round_ok(name)
                        return  # no longer configured
                    self._round_ok(name)
                    wait_s = self.wait_s(name)
                except Exception as exc:  # the database may be locked or gone
                    self._round_failed(name, exc)
                if wait_s is None:
                    self._idle(name, event)
                else:
                    event.wait(wait_s)
                event.clear()
        finally:
            self.db.close()  # this thread's connection only

    def _idle(self, name: str, event: threading.Event) -> None:
        """Wait with nothing queued: until a wake-up, :data:`IDLE_ROUND_S`, or (for a
        sink that needs a URL) the poll interval at which its URL stops being readable,
        which is then a degraded component as soon as before."""
        until = time.monotonic() + IDLE_ROUND_S
        while not self._stop.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return
            settings = self._needs_url(name)
            if event.wait(min(left, self.poll_interval_s) if settings else left):
                return
            if settings is not None:
                with self._sink_lock(name):
                    if not self._secret_ok(settings):
                        return  # a round pauses the sink and reads it each interval

    def _needs_url(self, name: str) -> SinkSettings | None:
        """The sink's settings when it reads a URL (``url_env``, ``url_file``)."""
        for settings in self.alerts().sinks:
            if settings.name == name:
                return settings if _reads_url(settings) else None
        return None

    def start(self) -> None:
        """Start the delivery thread (returns at once)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        # An alert spooled in this process wakes the sinks once it is committed.
        self.db.add_spool_listener(self.wake)
        self.memory.listeners.append(self.wake)
        self._thread = threading.Thread(target=self._run, name="rogue-watchdog-alerts")
        self._thread.daemon = True  # a hung request must not keep the process alive
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop the thread; wait for an attempt in flight at most ``timeout_s``
        (default: the longest sink timeout plus one second)."""
        self._stop.set()
        self._wake.set()
        self.db.remove_spool_listener(self.wake)
        with contextlib.suppress(ValueError):
            self.memory.listeners.remove(self.wake)
        if timeout_s is None:
            timeout_s = 1.0 + max((s.timeout_s for s in self.alerts().sinks), default=0.0)
        with self._lock:
            events = list(self._wakes.values())
            threads = [t for t in (self._thread, *self._threads.values()) if t is not None]
            self._thread, self._threads = None, {}
        for event in events:
            event.set()
        deadline = time.monotonic() + timeout_s
        stuck = False
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            stuck = stuck or thread.is_alive()
        if stuck:
            return  # stuck in a request: daemon threads, they die with the process
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
