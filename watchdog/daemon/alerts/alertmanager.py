"""The ``alertmanager`` sink: findings as Alertmanager alerts (docs/alerts.md).

Source: the Alertmanager v2 API (``POST /api/v2/alerts``, body a list of
``postableAlert``: ``labels``, ``annotations``, ``startsAt``, ``endsAt``,
``generatorURL``; https://github.com/prometheus/alertmanager/blob/main/api/v2/openapi.yaml)
and how Prometheus itself drives it: an alert without a final ``endsAt`` is sent with
``endsAt`` a few re-send periods ahead and sent again before that passes, or Alertmanager
resolves it by itself; a resolved alert is sent once with ``endsAt`` set to when it
resolved. Every Alertmanager of an HA cluster gets every alert (they deduplicate
notifications among themselves).

Two parts share the work:

- :class:`AlertmanagerSink` sends the spooled ``open``/``remind``/``resolve`` rows like any
  sink (delivery worker, retries, order).
- :class:`AlertmanagerKeeper`, a worker thread, re-sends every alert that is still firing
  every ``resend_s``: those whose ``open`` or ``remind`` went out on that sink and whose
  ``resolve`` is not spooled yet. It reads this from the spool, so it resumes after a
  restart. A lock per sink orders its posts with the delivery worker's: a re-send can never
  land after the resolve and fire the alert again.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ...config.alerts import AlertSettings, SinkSettings
from ...hosttext import safe_json
from ...logs import get_logger
from ...state import StateDB
from . import http
from .alert import Alert, Outgoing, Routing
from .base import SendError, SinkContext
from .secrets import SecretError, read_url, redact

log = get_logger()

API_PATH = "/api/v2/alerts"
# endsAt of a firing alert is this many re-send periods ahead (Prometheus uses 4): two
# lost re-sends in a row do not resolve it.
ENDS_AFTER_RESENDS = 4
MAX_LABEL_CHARS = 200
MAX_ANNOTATION_CHARS = 4000
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def sink_lock(name: str) -> threading.Lock:
    """The lock that orders every post of the sink called ``name`` (both threads)."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(name, threading.Lock())


def alertname(kind: str) -> str:
    """``RogueWatchdog`` plus the finding kind in CamelCase: ``rogue-job`` →
    ``RogueWatchdogRogueJob`` (distinct from the shipped Prometheus rules' names)."""
    return "RogueWatchdog" + "".join(p[:1].upper() + p[1:] for p in re.split(r"[-_]", kind))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alert_labels(alert: Alert) -> dict[str, str]:
    """The identifying labels of ``alert`` (:func:`routing_labels` of its finding)."""
    f = alert.finding
    return _labels(alert.host or "", f.id, f.kind or "unknown", f.severity or "", f.routing)


def routing_labels(
    host: str, finding_id: int | None, kind: str, severity: str, details: Mapping[str, Any]
) -> dict[str, str]:
    """The identifying labels of an alert about a finding with ``details`` (what the
    tracker keeps with each alert, to see when they change).

    ``alertname``, ``host``, ``severity``, ``kind`` and ``finding`` (the finding id, so two
    findings never merge into one alert) always; ``gpu`` (NVML indices, comma-separated),
    ``gpu_uuid``, ``user``, ``origin_kind`` and ``origin`` (bounded, see
    :meth:`watchdog.model.Origin.label`) when the finding names them. Empty
    values are left out (Alertmanager treats an empty label as absent).
    """
    return _labels(host, finding_id, kind, severity, Routing.from_details(details))


def _labels(
    host: str, finding_id: int | None, kind: str, severity: str, routing: Routing
) -> dict[str, str]:
    labels = {
        "alertname": alertname(kind),
        "host": host,
        "severity": severity,
        "kind": kind,
        "finding": "" if finding_id is None else str(finding_id),
    }
    for key in ("gpu", "gpu_uuid", "origin_kind", "origin", "user"):
        value = getattr(routing, key)
        if value is not None:
            labels[key] = value
    return {k: _cut(v, MAX_LABEL_CHARS) for k, v in labels.items() if v}


def alert_body(alert: Alert, now: float, resend_s: float) -> dict[str, Any]:
    """One ``postableAlert`` for ``alert``, as of ``now``.

    Args:
        alert: The alert (docs/alerts.md, "Payloads").
        now: POSIX time of the post: a firing alert ends ``ENDS_AFTER_RESENDS ·
            resend_s`` after it, unless sent again.
        resend_s: The sink's re-send period.

    Returns:
        ``labels``, ``annotations`` (``summary``, ``message``, ``remediation`` when known,
        ``root_pid``), ``startsAt`` (when the finding opened) and ``endsAt``.
    """
    f = alert.finding
    labels = alert_labels(alert)
    annotations = {
        "summary": f"{labels['kind']} on {labels.get('host', '?')}",
        "message": _cut(f.message, MAX_ANNOTATION_CHARS),
    }
    remediation = f.routing.remediation
    if remediation:
        annotations["remediation"] = _cut(remediation, MAX_ANNOTATION_CHARS)
    if f.root_pid is not None:
        annotations["root_pid"] = str(f.root_pid)
    body: dict[str, Any] = {"labels": labels, "annotations": annotations}
    if f.opened_at:
        body["startsAt"] = f.opened_at
    if alert.event == "resolve" and f.resolved_at:
        body["endsAt"] = f.resolved_at
    else:
        body["endsAt"] = _rfc3339(now + ENDS_AFTER_RESENDS * resend_s)
    return body


class AlertmanagerSink:
    """Posts alerts to every configured Alertmanager.

    Args:
        settings: An ``alertmanager`` sink (``urls``, or ``url_env``/``url_file`` for one
            URL kept secret).
        context: Its client (one thread uses it at a time), the environment to read
            ``url_env`` from, the clock for ``endsAt``.
    """

    def __init__(self, settings: SinkSettings, context: SinkContext) -> None:
        self.settings = settings
        self.context = context

    def send(self, out: Outgoing) -> None:
        """Post one spooled alert (open, remind or resolve). When the alert's labels
        changed since the last one (``change.labels_were``: the job came to hold a GPU),
        the alert under the old labels is posted resolved in the same request: labels
        identify an Alertmanager alert, and one left firing would linger to its endsAt.

        Raises:
            SendError: No Alertmanager accepted it.
        """
        with sink_lock(self.settings.name):
            now = self.context.clock()
            body = alert_body(out.alert, now, self.settings.resend_s)
            change = out.alert.finding.change
            was = change.labels_were if change is not None else None
            if was and was != body["labels"]:
                old = {**body, "labels": dict(was)}
                old["endsAt"] = _rfc3339(now)
                self.post([old, body])
            else:
                self.post([body])

    def post(self, alerts: list[dict[str, Any]]) -> list[str]:
        """POST ``alerts`` to every Alertmanager; success when at least one answers 2xx
        (the others get them again with the next re-send).

        Returns:
            The (secret-free) errors of the Alertmanagers that did not accept them.

        Raises:
            SendError: None accepted them: ``sink_down`` unless every answer was a 4xx
                other than 408/425/429 (the alerts themselves were refused).
        """
        try:
            targets = self._targets()
        except SecretError as exc:
            raise SendError(redact(str(exc))) from None
        # Host text (labels, the message) may hold lone surrogates: made inert first.
        data = json.dumps(safe_json(alerts), ensure_ascii=False).encode("utf-8")
        errors: list[str] = []
        refused = 0
        for url, shown in targets:
            answer = http.post(self.context.client, url, data, self.settings.timeout_s)
            if answer.ok:
                continue
            if answer.status is None:
                errors.append(f"{shown}: {answer.failure}")
                continue
            code = answer.status
            if 400 <= code < 500 and code not in http.RECEIVER_DOWN:
                refused += 1  # the alerts themselves (or this URL) were refused
            errors.append(redact(f"{shown}: HTTP {code} {answer.snippet}".rstrip(), url))
        if len(errors) < len(targets):
            return errors
        raise SendError("; ".join(errors), sink_down=refused < len(targets))

    def _targets(self) -> list[tuple[str, str]]:
        """``(POST URL, how errors name it)`` per Alertmanager; a secret URL is named by
        where it came from, an inline one by its host and port."""
        if self.settings.urls:
            out = []
            for base in self.settings.urls:
                shown = base.split("://", 1)[-1].split("/", 1)[0]
                out.append((base.rstrip("/") + API_PATH, shown))
            return out
        url = read_url(self.settings, self.context.environ)
        where = self.settings.url_env or self.settings.url_file or "?"
        return [(url.rstrip("/") + API_PATH, f"Alertmanager from {where}")]


def firing(db: StateDB, sink: str) -> list[Alert]:
    """The alerts still firing on ``sink``: the newest delivered ``open`` or ``remind`` of
    each finding that has no ``resolve`` spooled (delivered or not). A row that is no
    alert (damaged by hand) is left out: it was never sent."""
    rows = db.conn.execute(
        "SELECT d.payload_json FROM deliveries d"
        " WHERE d.sink=? AND d.delivered_at IS NOT NULL AND d.event != 'resolve'"
        " AND NOT EXISTS (SELECT 1 FROM deliveries r WHERE r.sink=d.sink"
        "   AND r.finding_id=d.finding_id AND r.event='resolve')"
        " AND d.id = (SELECT MAX(x.id) FROM deliveries x WHERE x.sink=d.sink"
        "   AND x.finding_id=d.finding_id AND x.delivered_at IS NOT NULL)"
        " ORDER BY d.finding_id",
        (sink,),
    ).fetchall()
    alerts = []
    for (text,) in rows:
        try:
            alerts.append(Alert.from_json(json.loads(text)))
        except (ValueError, RecursionError):  # UnreadableAlert, or not JSON at all
            continue
    return alerts


class AlertmanagerKeeper:
    """Re-sends firing alerts to each ``alertmanager`` sink every ``resend_s``; implements
    the daemon's Worker protocol.

    Args:
        db: The state database (this thread gets its own connection).
        alerts: Returns the alert settings in force (re-read each round: reloads apply).
        clock: POSIX time source.
        environ: Environment for ``url_env``; None means ``os.environ``.
        poll_interval_s: Longest sleep between checks while an ``alertmanager`` sink is
            configured; without one the thread sleeps until :meth:`on_reload` (a reload
            that adds one) or ``idle_s``.
        idle_s: Longest sleep without an ``alertmanager`` sink.
    """

    name = "alertmanager"

    def __init__(
        self,
        db: StateDB,
        alerts: Callable[[], AlertSettings],
        *,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
        poll_interval_s: float = 1.0,
        idle_s: float = 30.0,
    ) -> None:
        self.db = db
        self.idle_s = idle_s
        self._wake = threading.Event()
        self.alerts = alerts
        self.clock = clock
        self.environ = environ
        self.poll_interval_s = poll_interval_s
        self.client = http.new_client()
        self._last: dict[str, float] = {}
        self._failing: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def resend_due(self, now: float | None = None) -> dict[str, int]:
        """Re-send the firing alerts of every sink whose period has passed.

        Args:
            now: POSIX time (tests); None reads the clock.

        Returns:
            Sink name → alerts re-sent in this round (only sinks that were due).
        """
        out: dict[str, int] = {}
        for settings in self.alerts().sinks:
            if settings.type != "alertmanager":
                continue
            t = self.clock() if now is None else now
            if t - self._last.get(settings.name, -float("inf")) < settings.resend_s:
                continue
            self._last[settings.name] = t
            sink = AlertmanagerSink(settings, SinkContext(self.client, self.environ, self.clock))
            out[settings.name] = self._resend(sink, t)
        return out

    def _resend(self, sink: AlertmanagerSink, now: float) -> int:
        name = sink.settings.name
        with sink_lock(name):
            # Read inside the lock: a resolve posted before it is already in the spool.
            alerts = firing(self.db, name)
            if not alerts:
                return 0
            bodies = [alert_body(a, now, sink.settings.resend_s) for a in alerts]
            try:
                errors = sink.post(bodies)
            except SendError as exc:
                errors = [exc.reason]
                if self._failing.get(name) != exc.reason:
                    log.error("alertmanager-resend-failing", sink=name, error=exc.reason)
                self._failing[name] = exc.reason
                return 0
        if self._failing.pop(name, None) is not None:
            log.info("alertmanager-resend-recovered", sink=name)
        for err in errors:  # one Alertmanager of a pair down: say so once per error
            if self._failing.get(f"{name}\0peer") != err:
                log.warning("alertmanager-peer-failing", sink=name, error=err)
                self._failing[f"{name}\0peer"] = err
        if not errors:
            self._failing.pop(f"{name}\0peer", None)
        return len(bodies)

    def _run(self) -> None:
        failing: str | None = None
        try:
            while not self._stop.is_set():
                try:
                    self.resend_due()
                    failing = None
                except Exception as exc:  # database locked or gone: try again later
                    text = f"{type(exc).__name__}: {exc}"
                    if text != failing:
                        log.error("alertmanager-resend-failing", error=text)
                    failing = text
                keeps = any(s.type == "alertmanager" for s in self.alerts().sinks)
                # Without such a sink there is nothing to re-send until a reload adds one
                # (issue 34: a round every second on every host).
                self._wake.wait(self.poll_interval_s if keeps else self.idle_s)
                self._wake.clear()
        finally:
            self.db.close()

    def on_reload(self, daemon: object) -> None:
        """``Daemon.on_reload`` hook: an ``alertmanager`` sink added is kept at once."""
        self._wake.set()

    def start(self) -> None:
        """Start the re-send thread (returns at once)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rogue-watchdog-alertmanager")
        self._thread.daemon = True
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; wait at most the longest sink timeout plus one second."""
        self._stop.set()
        self._wake.set()
        timeout_s = 1.0 + max((s.timeout_s for s in self.alerts().sinks), default=0.0)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                return
        self.client.close()
