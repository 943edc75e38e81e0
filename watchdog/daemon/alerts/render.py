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
import re
from collections.abc import Sequence
from typing import Any

from watchdog.hosttext import safe_json, safe_text
from watchdog.model import finding_ref
from watchdog.state import Delivery

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
    """Head, message and tail of the one-line alert text, each made safe
    (:func:`~watchdog.hosttext.safe_text`: no control character, no newline)."""
    f = payload.get("finding", {})
    event = payload.get("event", "open")
    kind, host = f.get("kind", "?"), payload.get("host", "?")
    sev = str(f.get("severity", "?")).upper()
    if event == "remind":
        head = (
            f"[{sev}] still open, {_instances(f)}seen {f.get('seen_count')} times since "
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
    return safe_text(head), safe_text(str(f.get("message", ""))), safe_text(tail)


def _instances(f: dict[str, Any]) -> str:
    """``now 49 instances (was 50; PID 7 gone), `` for a reminder about a changed count."""
    change = f.get("change")
    if not isinstance(change, dict):
        return ""
    if "instances" not in change:
        # Only what identifies the alert changed (the job came to hold a GPU).
        changed = change.get("labels_were")
        return "updated (its labels changed: GPU, user or origin), " if changed else ""
    text = f"now {change.get('instances')} instances (was {change.get('was')}"
    gone = change.get("gone_pids") or []
    if gone:
        text += f"; PID {', '.join(str(p) for p in gone[:5])} gone"
        if len(gone) > 5:
            text += f" and {len(gone) - 5} more"
    return text + "), "


def cut_at_word(text: str, room: int) -> str:
    """``text`` cut to at most ``room`` characters at a space, so no identifier in it (a
    UUID, a unit, a PID) is left half. A word longer than :data:`LONGEST_IDENTIFIER` is
    no identifier (a blob a job chose to print) and is cut where the sink's limit falls."""
    if len(text) <= room:
        return text
    if room > 0 and text[room] == " ":
        return text[:room]
    space = text.rfind(" ", 0, room)
    if space > 0 and room - space <= LONGEST_IDENTIFIER:
        return text[: space + 1]
    return text[:room]


#: The longest name kept whole when a message is cut: a unit name may be 255 characters
#: (systemd.unit(5)), a path component 255 (NAME_MAX).
LONGEST_IDENTIFIER = 256


def alert_text(payload: dict[str, Any], limit: int) -> str:
    """The one-line human text of an alert, at most ``limit`` characters, made safe.

    When too long, the finding's message is cut at a space (ending in ``…``); the head
    (what, where, how often) and the tail (finding id, PID) are always kept.
    """
    head, message, tail = _parts(payload)
    if len(head) + len(message) + len(tail) <= limit:
        return head + message + tail
    room = limit - len(head) - len(tail) - len(ELLIPSIS)
    if room < 0:
        return (head + tail)[: limit - len(ELLIPSIS)] + ELLIPSIS
    return head + cut_at_word(message, room) + ELLIPSIS + tail


def inert_code(text: str, fence: str) -> str:
    """``text`` inside a code span (Discord: ``fence`` two backticks) or a preformatted
    block (Slack: three) that nothing in ``text`` can close.

    ``text`` must already be safe (no newline, no control character). A run of backticks
    in it is broken by a zero-width space after every backtick but the last, so no run
    inside is longer than one and the fence, longer than any run, is the only thing
    that closes the span (CommonMark "code spans"; Discord's parser likewise, except that
    three backticks open a block there, hence two). A leading or trailing backtick gets
    a space beside the fence, which CommonMark strips.
    """
    body = _BACKTICK_RUN.sub("`" + ZWSP, text)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


_BACKTICK_RUN = re.compile(r"`(?=`)")
ZWSP = "\u200b"


def chat_text(payload: dict[str, Any], limit: int, fence: str) -> str:
    """The chat form of an alert: the head and tail as text, the finding's message (which
    quotes command lines, a job can forge anything in it) as inert code
    (:func:`inert_code`), at most ``limit`` characters (the message is cut, ``…``)."""
    head, message, tail = _parts(payload)
    if not message:  # an empty span would be a run of backticks, not a span
        return (head.rstrip(": ") + tail)[:limit]
    code = inert_code(message, fence)
    if len(head) + len(code) + len(tail) <= limit:
        return head + code + tail
    room = limit - len(head) - len(tail) - 2 * len(fence) - len(ELLIPSIS)
    if room < 1:
        return (head + tail)[: limit - len(ELLIPSIS)] + ELLIPSIS
    cut = cut_at_word(message, room)
    while cut:  # zero-width spaces and padding may lengthen it: shorten by the excess
        code = inert_code(cut + ELLIPSIS, fence)
        excess = len(head) + len(code) + len(tail) - limit
        if excess <= 0:
            break
        cut = cut_at_word(cut, len(cut) - excess)
    return head + inert_code(cut + ELLIPSIS, fence) + tail


SLACK_FENCE = "```"
DISCORD_FENCE = "``"


def slack_escape(text: str) -> str:
    """Escape Slack's three control characters (``&`` first)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(delivery: Delivery) -> dict[str, Any]:
    """``{"text": …}`` for a Slack incoming webhook (or a Slack-compatible one:
    Mattermost, Rocket.Chat)."""
    return {"text": slack_escape(chat_text(delivery.payload, SLACK_MAX_CHARS, SLACK_FENCE))}


def discord_body(delivery: Delivery) -> dict[str, Any]:
    """``{"content": …, "allowed_mentions": {"parse": []}}`` for a Discord webhook."""
    return {
        "content": chat_text(delivery.payload, DISCORD_MAX_CHARS, DISCORD_FENCE),
        "allowed_mentions": {"parse": []},
    }


def webhook_body(delivery: Delivery) -> dict[str, Any]:
    """The spooled payload as is (made safe), with ``delivery_id`` first."""
    return {"delivery_id": delivery_id(delivery), **safe_json(delivery.payload)}


# -- coalesced alerts (a storm: several alerts due at once on one sink) ------------------

BATCH_LINE_MAX_CHARS = 400


def batch_id(deliveries: Sequence[Delivery]) -> str:
    """The ``delivery_id`` of a coalesced message: derived from its members' ids, so a
    retry of the same batch carries the same id."""
    key = "\0".join(delivery_id(d) for d in deliveries)
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _batch_lines(deliveries: Sequence[Delivery], limit: int, fence: str) -> str:
    host = safe_text(str(deliveries[0].payload.get("host", "?")))
    events = [str(d.payload.get("event", "open")) for d in deliveries]
    counts = ", ".join(
        f"{events.count(e)} {e}" for e in ("open", "remind", "resolve") if e in events
    )
    head = f"{len(deliveries)} alerts on {host} ({counts}):"
    lines = [head]
    used = len(head)
    for i, d in enumerate(deliveries):
        line = chat_text(d.payload, BATCH_LINE_MAX_CHARS, fence)
        more = len(deliveries) - i
        reserve = len(f"\n… and {more} more (the log and webhook sinks list every one)")
        if used + 1 + len(line) + (reserve if more > 1 else 0) > limit:
            lines.append(f"… and {more} more (the log and webhook sinks list every one)")
            break
        lines.append(line)
        used += 1 + len(line)
    return "\n".join(lines)


def slack_batch_body(deliveries: Sequence[Delivery]) -> dict[str, Any]:
    """One Slack message listing several alerts (one line each, then "… and N more")."""
    # Escaping may lengthen the text: cut to a third, as for one alert (3000 of 40 000).
    return {"text": slack_escape(_batch_lines(deliveries, SLACK_MAX_CHARS, SLACK_FENCE))}


def discord_batch_body(deliveries: Sequence[Delivery]) -> dict[str, Any]:
    """One Discord message listing several alerts, at most 2000 characters."""
    return {
        "content": _batch_lines(deliveries, DISCORD_MAX_CHARS, DISCORD_FENCE),
        "allowed_mentions": {"parse": []},
    }


def webhook_batch_body(deliveries: Sequence[Delivery]) -> dict[str, Any]:
    """``{"delivery_id", "schema_version": 1, "event": "batch", "host", "count",
    "alerts": [every alert's own body]}``: the full list, nothing cut."""
    return {
        "delivery_id": batch_id(deliveries),
        "schema_version": 1,
        "event": "batch",
        "host": safe_text(str(deliveries[0].payload.get("host", ""))),
        "count": len(deliveries),
        "alerts": [webhook_body(d) for d in deliveries],
    }


def log_fields(delivery: Delivery) -> dict[str, Any]:
    """Keyword fields of the log sink's ``finding`` event (stable keys, docs/alerts.md)."""
    p = safe_json(delivery.payload)
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
