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
from typing import TYPE_CHECKING, Any

import httpx

from watchdog.config.alerts import AlertSettings, SinkSettings
from watchdog.daemon.alerts.secrets import SecretError, read_url, redact
from watchdog.daemon.alerts.sinks import MAX_ERROR_BODY_BYTES, SendError, _read_head
from watchdog.hosttext import safe_json
from watchdog.logs import get_logger
from watchdog.model import Origin
from watchdog.state import Delivery, StateDB

if TYPE_CHECKING:
    from watchdog.daemon.loop import Daemon
    from watchdog.plugins import Worker

log = get_logger()

API_PATH = "/api/v2/alerts"
# endsAt of a firing alert is this many re-send periods ahead (Prometheus uses 4): two
# lost re-sends in a row do not resolve it.
ENDS_AFTER_RESENDS = 4
USER_AGENT = "rogue-watchdog"
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


def alert_labels(payload: Mapping[str, Any]) -> dict[str, str]:
    """The identifying labels of a spooled alert.

    ``alertname``, ``host``, ``severity``, ``kind`` and ``finding`` (the finding id, so two
    findings never merge into one alert) always; ``gpu`` (NVML indices, comma-separated),
    ``gpu_uuid``, ``user``, ``origin_kind`` and ``origin`` (bounded, see
    :meth:`watchdog.model.Origin.label`) when the finding names them. Empty
    values are left out (Alertmanager treats an empty label as absent).
    """
    f = payload.get("finding", {})
    details = f.get("details") or {}
    kind = str(f.get("kind", "unknown"))
    labels = {
        "alertname": alertname(kind),
        "host": str(payload.get("host", "")),
        "severity": str(f.get("severity", "")),
        "kind": kind,
        "finding": str(f.get("id", "")),
    }
    gpus = details.get("gpus")
    if isinstance(gpus, list) and gpus:
        labels["gpu"] = ",".join(
            "?" if g.get("index") is None else str(g.get("index"))
            for g in gpus
            if isinstance(g, dict)
        )
        labels["gpu_uuid"] = ",".join(str(g.get("uuid", "")) for g in gpus if isinstance(g, dict))
    origin = details.get("origin")
    if isinstance(origin, dict):  # respawned: the whole origin object
        labels["origin_kind"] = str(origin.get("kind", ""))
        labels["origin"] = Origin.from_json(origin).label()
    if details.get("origin_kind"):
        labels["origin_kind"] = str(details["origin_kind"])
    if details.get("origin_label"):
        labels["origin"] = str(details["origin_label"])
    if details.get("user"):
        labels["user"] = str(details["user"])
    return {k: _cut(v, MAX_LABEL_CHARS) for k, v in labels.items() if v}


def alert_body(payload: Mapping[str, Any], now: float, resend_s: float) -> dict[str, Any]:
    """One ``postableAlert`` for a spooled payload, as of ``now``.

    Args:
        payload: The spooled alert (docs/alerts.md, "Payloads").
        now: POSIX time of the post: a firing alert ends ``ENDS_AFTER_RESENDS ·
            resend_s`` after it, unless sent again.
        resend_s: The sink's re-send period.

    Returns:
        ``labels``, ``annotations`` (``summary``, ``message``, ``remediation`` when known,
        ``root_pid``), ``startsAt`` (when the finding opened) and ``endsAt``.
    """
    f = payload.get("finding", {})
    details = f.get("details") or {}
    labels = alert_labels(payload)
    annotations = {
        "summary": f"{labels['kind']} on {labels.get('host', '?')}",
        "message": _cut(str(f.get("message", "")), MAX_ANNOTATION_CHARS),
    }
    remediation = details.get("remediation")
    if remediation is None and isinstance(details.get("origin"), dict):
        remediation = details["origin"].get("remediation")
    if remediation:
        annotations["remediation"] = _cut(str(remediation), MAX_ANNOTATION_CHARS)
    if f.get("root_pid") is not None:
        annotations["root_pid"] = str(f["root_pid"])
    body: dict[str, Any] = {"labels": labels, "annotations": annotations}
    if f.get("opened_at"):
        body["startsAt"] = f["opened_at"]
    if payload.get("event") == "resolve" and f.get("resolved_at"):
        body["endsAt"] = f["resolved_at"]
    else:
        body["endsAt"] = _rfc3339(now + ENDS_AFTER_RESENDS * resend_s)
    return body


class AlertmanagerSink:
    """Posts alerts to every configured Alertmanager.

    Args:
        settings: An ``alertmanager`` sink (``urls``, or ``url_env``/``url_file`` for one
            URL kept secret).
        client: Shared httpx client (one thread uses it at a time).
        environ: Environment to read ``url_env`` from; None means ``os.environ``.
        clock: POSIX time source for ``endsAt``.
    """

    def __init__(
        self,
        settings: SinkSettings,
        client: httpx.Client,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.client = client
        self.environ = environ
        self.clock = clock

    def send(self, delivery: Delivery) -> None:
        """Post one spooled alert (open, remind or resolve). When the alert's labels
        changed since the last one (``change.labels_were``: the job came to hold a GPU),
        the alert under the old labels is posted resolved in the same request: labels
        identify an Alertmanager alert, and one left firing would linger to its endsAt.

        Raises:
            SendError: No Alertmanager accepted it.
        """
        with sink_lock(self.settings.name):
            now = self.clock()
            body = alert_body(delivery.payload, now, self.settings.resend_s)
            change = delivery.payload.get("finding", {}).get("change") or {}
            was = change.get("labels_were") if isinstance(change, dict) else None
            if isinstance(was, dict) and was and was != body["labels"]:
                old = {**body, "labels": {str(k): str(v) for k, v in was.items()}}
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
        headers = {"content-type": "application/json", "user-agent": USER_AGENT}
        errors: list[str] = []
        refused = 0
        for url, shown in targets:
            try:
                with self.client.stream(
                    "POST", url, content=data, headers=headers, timeout=self.settings.timeout_s
                ) as resp:
                    code = resp.status_code
                    if 200 <= code < 300:
                        continue
                    head = _read_head(resp, MAX_ERROR_BODY_BYTES).decode("utf-8", "replace")
            except httpx.TimeoutException as exc:
                errors.append(f"{shown}: timed out after {self.settings.timeout_s:g} s"
                              f" ({type(exc).__name__})")  # fmt: skip
                continue
            except httpx.HTTPError as exc:
                errors.append(f"{shown}: " + redact(f"{type(exc).__name__}: {exc}", url))
                continue
            if 400 <= code < 500 and code not in (408, 425, 429):
                refused += 1
            snippet = head[:200].strip().replace("\n", " ")
            errors.append(redact(f"{shown}: HTTP {code} {snippet}".rstrip(), url))
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
        url = read_url(self.settings, self.environ)
        where = self.settings.url_env or self.settings.url_file or "?"
        return [(url.rstrip("/") + API_PATH, f"Alertmanager from {where}")]


def firing(db: StateDB, sink: str) -> list[dict[str, Any]]:
    """Payloads of the alerts still firing on ``sink``: the newest delivered ``open`` or
    ``remind`` of each finding that has no ``resolve`` spooled (delivered or not)."""
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
    return [json.loads(r[0]) for r in rows]


class AlertmanagerKeeper:
    """Re-sends firing alerts to each ``alertmanager`` sink every ``resend_s``; implements
    the daemon's Worker protocol.

    Args:
        db: The state database (this thread gets its own connection).
        alerts: Returns the alert settings in force (re-read each round: reloads apply).
        clock: POSIX time source.
        environ: Environment for ``url_env``; None means ``os.environ``.
        poll_interval_s: Longest sleep between checks.
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
    ) -> None:
        self.db = db
        self.alerts = alerts
        self.clock = clock
        self.environ = environ
        self.poll_interval_s = poll_interval_s
        self.client = httpx.Client(follow_redirects=False)
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
            sink = AlertmanagerSink(settings, self.client, self.environ)
            out[settings.name] = self._resend(sink, t)
        return out

    def _resend(self, sink: AlertmanagerSink, now: float) -> int:
        name = sink.settings.name
        with sink_lock(name):
            # Read inside the lock: a resolve posted before it is already in the spool.
            payloads = firing(self.db, name)
            if not payloads:
                return 0
            bodies = [alert_body(p, now, sink.settings.resend_s) for p in payloads]
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
                self._stop.wait(self.poll_interval_s)
        finally:
            self.db.close()

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
        timeout_s = 1.0 + max((s.timeout_s for s in self.alerts().sinks), default=0.0)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                return
        self.client.close()


def build_alertmanager_workers(daemon: Daemon) -> list[Worker]:
    """The re-send worker, always (it idles while no ``alertmanager`` sink is configured,
    so a reload that adds one needs no restart)."""
    return [AlertmanagerKeeper(daemon.db, lambda: daemon.config.alerts)]
