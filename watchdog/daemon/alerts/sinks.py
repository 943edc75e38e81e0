"""Alert sinks: where one spooled delivery goes.

A sink's :meth:`~Sink.send` returns on success and raises :class:`SendError` otherwise;
the delivery worker decides about retries. The log sink writes one structlog JSON line;
the three webhook sinks POST JSON with httpx (``slack``: ``{"text"}``, ``discord``:
``{"content"}``, ``webhook``: the payload as is), counting only a 2xx answer as delivered.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, Protocol

import httpx
import structlog

from watchdog.config.alerts import SinkSettings
from watchdog.daemon.alerts.render import (
    batch_id,
    delivery_id,
    discord_batch_body,
    discord_body,
    log_fields,
    slack_batch_body,
    slack_body,
    webhook_batch_body,
    webhook_body,
)
from watchdog.daemon.alerts.secrets import SecretError, read_url, redact
from watchdog.model import LOG_LEVELS
from watchdog.safeio import NotRegularFileError, kind_of
from watchdog.state import Delivery

# httpx logs every request URL at INFO ("HTTP Request: POST https://hooks…"): a webhook
# URL is a secret, so keep httpx/httpcore quiet even if someone turns on INFO logging.
logging.getLogger("httpx").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.WARNING)

USER_AGENT = "rogue-watchdog"
_BODIES: dict[str, Callable[[Delivery], dict[str, Any]]] = {
    "slack": slack_body,
    "discord": discord_body,
    "webhook": webhook_body,
}
_BATCH_BODIES: dict[str, Callable[[Sequence[Delivery]], dict[str, Any]]] = {
    "slack": slack_batch_body,
    "discord": discord_batch_body,
    "webhook": webhook_batch_body,
}
# Answers that mean "the receiver is down or busy", not "this message is refused":
# they hold back the sink's other deliveries until the retry (order is kept).
_RECEIVER_DOWN = frozenset({408, 425, 429})
# Answers about the URL itself (a revoked or mistyped webhook, a wrong token, an archived
# channel): every alert would get them, so the sink waits for the URL to be fixed (it is
# read again on every attempt) instead of setting each alert aside.
_WRONG_URL = frozenset({401, 403, 404, 410})
# Longest wait a receiver may ask for before it counts as absurd (then retry_max_s caps it).
MAX_RETRY_AFTER_S = 86400.0
# Of an error answer's body only this much is read (200 characters are kept).
MAX_ERROR_BODY_BYTES = 4096


class SendError(Exception):
    """A delivery attempt failed.

    Args:
        reason: Why, already free of secrets (stored as ``last_error``, logged, shown
            in ``status``).
        sink_down: True when the whole sink is unusable for now (connection refused,
            timeout, 5xx, 429, a wrong URL, missing secret): its other deliveries wait
            too. False when only this message failed.
        retry_after_s: How long the receiver asked to wait, in seconds (``Retry-After``
            header, or Discord's ``retry_after`` in a 429 body), when it said.
        permanent: This message can never be sent as it is (it cannot be encoded, or the
            receiver refused it with a 4xx that is not about the URL or rate): the worker
            sets it aside (dead letter) instead of retrying it.
    """

    def __init__(
        self,
        reason: str,
        *,
        sink_down: bool = True,
        retry_after_s: float | None = None,
        permanent: bool = False,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.sink_down = sink_down
        self.retry_after_s = retry_after_s
        self.permanent = permanent


class Sink(Protocol):
    """One configured alert destination. Webhook sinks also have ``send_batch`` (several
    alerts as one message), which the worker uses to coalesce a storm."""

    settings: SinkSettings

    def send(self, delivery: Delivery) -> None:
        """Deliver once.

        Raises:
            SendError: The attempt failed; the reason carries no secret.
        """
        ...


class LogSink:
    """A structlog JSON line per alert, ``event="finding"``, on stdout or appended to a
    file (opened per line, so logrotate may move it at any time).

    Args:
        settings: A ``log`` sink; ``path`` None means stdout.
    """

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    def send(self, delivery: Delivery) -> None:
        """Write the line.

        Raises:
            SendError: The file cannot be opened or written (permissions, disk full).
        """
        fields = log_fields(delivery)  # made safe: valid UTF-8, no control character
        # The level follows the finding's severity; a resolved finding is news, not alarm.
        severity = str(fields.get("severity"))
        level = "info" if fields["action"] == "resolve" else LOG_LEVELS.get(severity, "warning")
        try:
            if self.settings.path is None:
                self._write(sys.stdout, level, fields)
            else:
                with open_log_file(self.settings.path) as fh:
                    self._write(fh, level, fields)
        except (OSError, ValueError) as exc:  # ValueError: stdout closed (detached)
            where = self.settings.path or "stdout"
            text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise SendError(f"cannot write to {where}: {text}") from None

    @staticmethod
    def _write(fh: Any, level: str, fields: dict[str, Any]) -> None:
        logger = structlog.wrap_logger(
            structlog.PrintLogger(fh),
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
                structlog.processors.JSONRenderer(),
            ],
            wrapper_class=structlog.BoundLogger,
            cache_logger_on_first_use=False,
        )
        getattr(logger, level)("finding", **fields)


def open_log_file(path: str) -> IO[str]:
    """Open ``path`` for appending without ever blocking: a regular file, or created.

    ``O_NONBLOCK`` because opening a FIFO for writing waits for a reader forever
    (fifo(7)), which would stall every alert; FIFOs, devices and sockets are refused.

    Raises:
        OSError: Cannot open or create it, or it is not a regular file.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd = os.open(path, flags, 0o640)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(errno.EINVAL, f"not a regular file ({kind_of(mode)})")
        os.set_blocking(fd, True)
        return open(fd, "a", encoding="utf-8", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def _seconds(value: object) -> float | None:
    """A wait in seconds from a header or JSON value; None when not a usable number
    (an HTTP date, NaN, negative, absurdly large)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: rare for webhooks, the backoff applies instead
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_AFTER_S)


def _retry_after(resp: httpx.Response, head: bytes) -> float | None:
    """``Retry-After`` (seconds), else the ``retry_after`` of a JSON body: Discord
    answers a 429 with ``{"retry_after": 4.5, …}`` in seconds and may send no header
    (discord-api-docs "Rate Limits"; issues #1454, #4722)."""
    header = resp.headers.get("retry-after")
    if header is not None:
        return _seconds(header.strip())
    try:
        doc = json.loads(head)
    except (ValueError, RecursionError):
        return None
    return _seconds(doc.get("retry_after")) if isinstance(doc, dict) else None


class WebhookSink:
    """POST the rendered body to a URL read from the environment or a file.

    Args:
        settings: A ``slack``, ``discord`` or ``webhook`` sink.
        client: Shared httpx client (the worker's; one thread uses it).
        environ: Environment to read ``url_env`` from; None means ``os.environ``.
    """

    def __init__(
        self,
        settings: SinkSettings,
        client: httpx.Client,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.environ = environ
        self._body = _BODIES[settings.type]

    def send(self, delivery: Delivery) -> None:
        """POST once; a 2xx answer is success, anything else raises.

        Raises:
            SendError: Secret unreadable, connection failure, timeout (``timeout_s``
                for connecting and for each read), or a non-2xx status; ``permanent``
                when the alert cannot be encoded or the receiver refused it.
        """
        self._post(lambda: self._body(delivery), delivery_id(delivery))

    def send_batch(self, deliveries: Sequence[Delivery]) -> None:
        """POST several alerts as one message (a storm coalesced: one chat message
        listing them, or one webhook document with the full list).

        Raises:
            SendError: As :meth:`send`.
        """
        self._post(lambda: _BATCH_BODIES[self.settings.type](deliveries), batch_id(deliveries))

    def _post(self, build: Callable[[], dict[str, Any]], key: str) -> None:
        try:
            # Every renderer made its host text safe (hosttext); this only fails on a
            # payload no encoder takes, which no retry can change.
            body = json.dumps(build(), ensure_ascii=False).encode("utf-8")
        except Exception as exc:  # a payload no encoder takes is never sendable
            raise SendError(
                f"cannot encode the alert: {type(exc).__name__}: {str(exc)[:120]}",
                sink_down=False,
                permanent=True,
            ) from None
        try:
            url = read_url(self.settings, self.environ)
        except SecretError as exc:  # redact anyway: a misconfigured name may be a URL
            raise SendError(redact(str(exc))) from None
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "idempotency-key": key,
        }
        try:
            with self.client.stream(
                "POST", url, content=body, headers=headers, timeout=self.settings.timeout_s
            ) as resp:
                code = resp.status_code
                if 200 <= code < 300:
                    return
                reason = f"HTTP {code} {resp.reason_phrase}".rstrip()
                head = _read_head(resp, MAX_ERROR_BODY_BYTES)
                retry_after = _retry_after(resp, head) if code in (429, 503) else None
        except httpx.TimeoutException as exc:
            raise SendError(
                redact(f"timed out after {self.settings.timeout_s:g} s ({type(exc).__name__})", url)
            ) from None
        except httpx.HTTPError as exc:
            raise SendError(redact(f"{type(exc).__name__}: {exc}", url)) from None
        snippet = head.decode("utf-8", "replace")[:200].strip().replace("\n", " ")
        if snippet:
            reason += f": {snippet}"
        down = code >= 500 or code in _RECEIVER_DOWN or code in _WRONG_URL
        if code in _WRONG_URL:
            reason += " (the webhook URL or its token is wrong or revoked)"
        raise SendError(
            redact(reason, url),
            sink_down=down,
            retry_after_s=retry_after,
            permanent=not down and 400 <= code < 500,
        )


def _read_head(resp: httpx.Response, limit_bytes: int) -> bytes:
    """At most ``limit_bytes`` of a streamed body; the rest is never read (a receiver's
    300 MB error page must not be buffered to keep 200 characters of it)."""
    data = b""
    for chunk in resp.iter_bytes(chunk_size=1024):
        data += chunk
        if len(data) >= limit_bytes:
            break
    return data[:limit_bytes]
