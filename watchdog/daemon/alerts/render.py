"""Turn a spooled alert (``deliveries.payload_json``, see tracker.alert_payload) into the
body each sink type sends. docs/alerts.md shows every body exactly.

Sources: Slack message formatting (``&``, ``<``, ``>`` are control characters and must be
sent as ``&amp;``, ``&lt;``, ``&gt;``: https://api.slack.com/reference/surfaces/formatting);
Discord "Execute Webhook" (``content`` up to 2000 characters; ``allowed_mentions`` with an
empty ``parse`` list stops ``@everyone`` in a command line from pinging anyone:
https://discord.com/developers/docs/resources/webhook#execute-webhook).
"""

from __future__ import annotations

import hashlib
from typing import Any

from watchdog.daemon.state import Delivery
from watchdog.model import finding_ref

DISCORD_MAX_CHARS = 2000
# Slack accepts far longer messages but truncates past 40 000 characters and advises
# keeping ``text`` short; 3000 keeps even a fully escaped text well inside.
SLACK_MAX_CHARS = 3000
ELLIPSIS = "…"


def delivery_id(delivery: Delivery) -> str:
    """A stable identifier of one delivery, the same on every retry and after a restart,
    so a receiver can drop a duplicate (the at-least-once window, docs/alerts.md).

    Derived from the host, the sink, the spool row id and its creation time (a state
    database recreated after corruption restarts row ids, never creation times).

    Returns:
        32 hex digits.
    """
    host = str(delivery.payload.get("host", ""))
    key = f"{host}\0{delivery.sink}\0{delivery.id}\0{delivery.created_at!r}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _parts(payload: dict[str, Any]) -> tuple[str, str, str]:
    """Head, message and tail of the one-line alert text."""
    f = payload.get("finding", {})
    event = payload.get("event", "open")
    kind, host = f.get("kind", "?"), payload.get("host", "?")
    sev = str(f.get("severity", "?")).upper()
    if event == "remind":
        head = (
            f"[{sev}] still open, seen {f.get('seen_count')} times since "
            f"{f.get('opened_at')}: {kind} on {host}: "
        )
    elif event == "resolve":
        head = (
            f"[RESOLVED] {kind} on {host}, seen {f.get('seen_count')} times since "
            f"{f.get('opened_at')}: "
        )
    else:
        head = f"[{sev}] {kind} on {host}: "
    pid = f.get("root_pid")
    tail = f" (finding {finding_ref(f.get('id'))}" + (
        f", root PID {pid})" if pid is not None else ")"
    )
    return head, str(f.get("message", "")), tail


def alert_text(payload: dict[str, Any], limit: int) -> str:
    """The one-line human text of an alert, at most ``limit`` characters.

    When too long, the finding's message is cut (ending in ``…``); the head (what, where,
    how often) and the tail (finding id, PID) are always kept.
    """
    head, message, tail = _parts(payload)
    if len(head) + len(message) + len(tail) <= limit:
        return head + message + tail
    room = limit - len(head) - len(tail) - len(ELLIPSIS)
    if room < 0:
        return (head + tail)[: limit - len(ELLIPSIS)] + ELLIPSIS
    return head + message[:room] + ELLIPSIS + tail


def slack_escape(text: str) -> str:
    """Escape Slack's three control characters (``&`` first)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(delivery: Delivery) -> dict[str, Any]:
    """``{"text": …}`` for a Slack incoming webhook (or a Slack-compatible one:
    Mattermost, Rocket.Chat)."""
    return {"text": slack_escape(alert_text(delivery.payload, SLACK_MAX_CHARS))}


def discord_body(delivery: Delivery) -> dict[str, Any]:
    """``{"content": …, "allowed_mentions": {"parse": []}}`` for a Discord webhook."""
    return {
        "content": alert_text(delivery.payload, DISCORD_MAX_CHARS),
        "allowed_mentions": {"parse": []},
    }


def webhook_body(delivery: Delivery) -> dict[str, Any]:
    """The spooled payload as is, with ``delivery_id`` first."""
    return {"delivery_id": delivery_id(delivery), **delivery.payload}


def log_fields(delivery: Delivery) -> dict[str, Any]:
    """Keyword fields of the log sink's ``finding`` event (stable keys, docs/alerts.md)."""
    p = delivery.payload
    f = p.get("finding", {})
    return {
        "action": p.get("event"),
        "kind": f.get("kind"),
        "severity": f.get("severity"),
        "message": f.get("message"),
        "root_pid": f.get("root_pid"),
        "finding_id": f.get("id"),
        "host": p.get("host"),
        "seen_count": f.get("seen_count"),
        "opened_at": f.get("opened_at"),
        "resolved_at": f.get("resolved_at"),
        "delivery_id": delivery_id(delivery),
    }
