"""The built-in sinks: the log sink and the three webhook sinks.

A sink's :meth:`~watchdog.daemon.alerts.base.Sink.send` returns on success and raises
:class:`~watchdog.daemon.alerts.base.SendError` otherwise; the delivery worker decides
about retries. The log sink writes one structlog JSON line; the webhook sinks POST JSON
(:func:`watchdog.daemon.alerts.http.post`): ``slack`` ``{"text"}``, ``discord``
``{"content"}``, ``webhook`` the alert's document as is, counting only a 2xx answer as
delivered. Each is listed once in :data:`watchdog.config.sinks.SINK_KINDS` and
:data:`watchdog.daemon.alerts.delivery.SINK_FACTORIES`.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

import structlog

from ...config.alerts import SinkSettings
from ...model import LOG_LEVELS
from ...safeio import NotRegularFileError, kind_of
from . import http
from .alert import Outgoing, batch_id
from .base import SendError, SinkContext
from .render import (
    discord_batch_body,
    discord_body,
    log_fields,
    slack_batch_body,
    slack_body,
    webhook_batch_body,
    webhook_body,
)
from .secrets import SecretError, read_url, redact

__all__ = ["LogSink", "SendError", "WebhookSink", "discord", "open_log_file", "slack", "webhook"]

Body = Callable[[Outgoing], dict[str, Any]]
BatchBody = Callable[[Sequence[Outgoing]], dict[str, Any]]


class LogSink:
    """A structlog JSON line per alert, ``event="finding"``, on stdout or appended to a
    file (opened per line, so logrotate may move it at any time).

    Args:
        settings: A ``log`` sink; ``path`` None means stdout.
        context: Unused (a log sink needs no client); accepted as every sink factory's is.
    """

    def __init__(self, settings: SinkSettings, context: SinkContext | None = None) -> None:
        self.settings = settings

    def send(self, out: Outgoing) -> None:
        """Write the line.

        Raises:
            SendError: The file cannot be opened or written (permissions, disk full).
        """
        fields = log_fields(out)  # made safe: valid UTF-8, no control character
        # The level follows the finding's severity; a resolved finding is news, not alarm.
        severity = str(fields.get("severity"))
        level = "info" if fields["action"] == "resolve" else LOG_LEVELS.get(severity, "warning")
        try:
            if self.settings.path is None and _at_terminal(sys.stdout):
                print(_human_line(level, fields), file=sys.stdout, flush=True)
            elif self.settings.path is None:
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


def _at_terminal(fh: Any) -> bool:
    try:
        return bool(fh.isatty())
    except (AttributeError, ValueError):  # closed (detached) or not a file
        return False


def _human_line(level: str, fields: dict[str, Any]) -> str:
    """An alert for a person watching the daemon at a terminal (its first run): the
    time, the finding's id, what happened and its message; the JSON line (a pipe, a
    file, the journal) keeps every field. ``fields`` are already made safe."""
    ref = f"F{fields['finding_id']} " if fields.get("finding_id") is not None else ""
    return (
        f"{time.strftime('%H:%M:%S')} rogue-watchdog: {level}: {ref}{fields.get('action')} "
        f"{fields.get('kind')} [{fields.get('severity')}]: {fields.get('message')}"
    )


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


class WebhookSink:
    """POST a rendered body to a URL read from the environment or a file.

    Args:
        settings: The sink's settings (``url_env`` or ``url_file``).
        context: Its client and environment.
        body: One alert's body.
        batch_body: Several alerts' body, one message.
    """

    def __init__(
        self, settings: SinkSettings, context: SinkContext, body: Body, batch_body: BatchBody
    ) -> None:
        self.settings = settings
        self.context = context
        self._body = body
        self._batch_body = batch_body

    def send(self, out: Outgoing) -> None:
        """POST once; a 2xx answer is success, anything else raises.

        Raises:
            SendError: Secret unreadable, connection failure, timeout (``timeout_s``
                for connecting and for each read), or a non-2xx status; ``permanent``
                when the alert cannot be encoded or the receiver refused it.
        """
        self._post(lambda: self._body(out), out.delivery_id)

    def send_batch(self, batch: Sequence[Outgoing]) -> None:
        """POST several alerts as one message (a storm coalesced: one chat message
        listing them, or one webhook document with the full list).

        Raises:
            SendError: As :meth:`send`.
        """
        self._post(lambda: self._batch_body(batch), batch_id(batch))

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
            url = read_url(self.settings, self.context.environ)
        except SecretError as exc:  # redact anyway: a misconfigured name may be a URL
            raise SendError(redact(str(exc))) from None
        answer = http.post(
            self.context.client, url, body, self.settings.timeout_s, {"idempotency-key": key}
        )
        if answer.ok:
            return
        if answer.status is None:
            raise SendError(answer.failure)
        code = answer.status
        reason = f"HTTP {code} {answer.phrase}".rstrip()
        if answer.snippet:
            reason += f": {answer.snippet}"
        # The receiver is down or busy, or the URL itself is wrong (every alert would get
        # the answer, so the sink waits for the URL to be fixed: it is read again on every
        # attempt): its other deliveries wait too, in order.
        down = code >= 500 or code in http.RECEIVER_DOWN or code in http.WRONG_URL
        if code in http.WRONG_URL:
            reason += " (the webhook URL or its token is wrong or revoked)"
        raise SendError(
            redact(reason, url),
            sink_down=down,
            retry_after_s=answer.retry_after_s,
            permanent=not down and 400 <= code < 500,
        )


def slack(settings: SinkSettings, context: SinkContext) -> WebhookSink:
    """A ``slack`` sink (or a Slack-compatible one: Mattermost, Rocket.Chat)."""
    return WebhookSink(settings, context, slack_body, slack_batch_body)


def discord(settings: SinkSettings, context: SinkContext) -> WebhookSink:
    """A ``discord`` sink."""
    return WebhookSink(settings, context, discord_body, discord_batch_body)


def webhook(settings: SinkSettings, context: SinkContext) -> WebhookSink:
    """A generic ``webhook`` sink: the alert's JSON document as is."""
    return WebhookSink(settings, context, webhook_body, webhook_batch_body)
