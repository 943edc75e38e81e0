"""The one HTTP POST of every HTTP sink (Slack, Discord, webhook, Alertmanager).

:func:`post` sends one JSON body once and says what came back: a 2xx, another status
with the head of its body and any wait the receiver asked for, or no answer (timeout,
connection failure). It never raises for the receiver's sake and never follows a redirect
(the client is built with ``follow_redirects=False``): each sink decides what an answer
means (``SendError``); the delivery worker owns retries and backoff
(:mod:`watchdog.daemon.alerts.delivery`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .secrets import redact

if TYPE_CHECKING:
    import httpx

# httpx logs every request URL at INFO ("HTTP Request: POST https://hooks…"): a webhook
# URL is a secret, so keep httpx/httpcore quiet even if someone turns on INFO logging.
logging.getLogger("httpx").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.WARNING)

USER_AGENT = "rogue-watchdog"
# Answers that mean "the receiver is down or busy", not "this message is refused".
RECEIVER_DOWN = frozenset({408, 425, 429})
# Answers about the URL itself (a revoked or mistyped webhook, a wrong token, an archived
# channel): every message would get them.
WRONG_URL = frozenset({401, 403, 404, 410})
# Longest wait a receiver may ask for before it counts as absurd (then retry_max_s caps it).
MAX_RETRY_AFTER_S = 86400.0
# Of an error answer's body only this much is read (200 characters are kept).
MAX_ERROR_BODY_BYTES = 4096
SNIPPET_CHARS = 200


class _FirstUseClient:
    """An ``httpx.Client`` made at its first use: httpx (about 3 MiB of the daemon's
    memory and 50 modules, issue 34) is imported only by a daemon that posts; the log
    sink and an Alertmanager keeper without an ``alertmanager`` sink never do."""

    def __init__(self) -> None:
        self._client: httpx.Client | None = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            import httpx

            self._client = httpx.Client(follow_redirects=False)
        return getattr(self._client, name)

    def close(self) -> None:
        """Close the client when one was made (none is made to be closed)."""
        if self._client is not None:
            self._client.close()


def new_client() -> httpx.Client:
    """The client an HTTP sink posts with: no redirect is followed (a 3xx is a failure;
    following it could carry the body, and the URL's token, elsewhere). It is made at
    its first use (:class:`_FirstUseClient`)."""
    return cast("httpx.Client", _FirstUseClient())


@dataclass(frozen=True)
class Answer:
    """What one POST got.

    Attributes:
        status: The HTTP status; None when no answer came (see :attr:`failure`).
        phrase: The status's reason phrase (``Internal Server Error``).
        snippet: Up to 200 characters of an error answer's body, on one line, not yet
            free of the URL (pass it through ``redact``).
        retry_after_s: The wait a 429 or 503 asked for (``Retry-After``, or Discord's
            ``retry_after`` body), seconds, when it said.
        failure: Why no answer came, free of the URL: ``timed out after 5 s
            (ReadTimeout)``, ``ConnectError: [Errno 111] Connection refused``.
    """

    status: int | None
    phrase: str = ""
    snippet: str = ""
    retry_after_s: float | None = None
    failure: str = ""

    @property
    def ok(self) -> bool:
        """A 2xx: delivered."""
        return self.status is not None and 200 <= self.status < 300


def post(
    client: httpx.Client,
    url: str,
    body: bytes,
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
) -> Answer:
    """POST ``body`` (JSON) to ``url`` once.

    Args:
        client: The sink's client (:func:`new_client`; one thread uses it at a time).
        url: Where to; a secret for webhooks, so it appears in no text returned.
        body: The encoded JSON document.
        timeout_s: For connecting and for each read, in seconds.
        headers: Extra headers (``idempotency-key``); ``content-type`` and
            ``user-agent`` are always sent.

    Returns:
        What came back; at most :data:`MAX_ERROR_BODY_BYTES` of an error body are read
        (a receiver's 300 MB error page is never buffered).
    """
    import httpx  # the sinks that post import it; the daemon's start does not

    sent = {"content-type": "application/json", "user-agent": USER_AGENT, **(headers or {})}
    try:
        with client.stream("POST", url, content=body, headers=sent, timeout=timeout_s) as resp:
            code = resp.status_code
            if 200 <= code < 300:
                return Answer(code, resp.reason_phrase)
            head = _read_head(resp, MAX_ERROR_BODY_BYTES)
            retry_after = _retry_after(resp, head) if code in (429, 503) else None
    except httpx.TimeoutException as exc:
        text = f"timed out after {timeout_s:g} s ({type(exc).__name__})"
        return Answer(None, failure=redact(text, url))
    except httpx.HTTPError as exc:
        return Answer(None, failure=redact(f"{type(exc).__name__}: {exc}", url))
    snippet = head.decode("utf-8", "replace")[:SNIPPET_CHARS].strip().replace("\n", " ")
    return Answer(code, resp.reason_phrase, snippet, retry_after)


def _read_head(resp: httpx.Response, limit_bytes: int) -> bytes:
    """At most ``limit_bytes`` of a streamed body; the rest is never read."""
    data = b""
    for chunk in resp.iter_bytes(chunk_size=1024):
        data += chunk
        if len(data) >= limit_bytes:
            break
    return data[:limit_bytes]


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
