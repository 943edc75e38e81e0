"""Turn an alert (:class:`~watchdog.daemon.alerts.alert.Alert`) into the body each sink
kind sends. docs/alerts.md shows every body exactly.

Sources: Slack message formatting (``&``, ``<``, ``>`` are control characters and must be
sent as ``&amp;``, ``&lt;``, ``&gt;``: https://api.slack.com/reference/surfaces/formatting);
Discord "Execute Webhook" (``content`` up to 2000 characters; ``allowed_mentions`` with an
empty ``parse`` list stops ``@everyone`` in a command line from pinging anyone:
https://discord.com/developers/docs/resources/webhook#execute-webhook).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...hosttext import safe_json, safe_text
from ...model import finding_ref
from .alert import Alert, AlertFinding, Outgoing, batch_id

DISCORD_MAX_CHARS = 2000
# Slack accepts far longer messages but truncates past 40 000 characters and advises
# keeping ``text`` short; 3000 keeps even a fully escaped text well inside.
SLACK_MAX_CHARS = 3000
ELLIPSIS = "…"


def _parts(alert: Alert) -> tuple[str, str, str]:
    """Head, message and tail of the one-line alert text, each made safe
    (:func:`~watchdog.hosttext.safe_text`: no control character, no newline)."""
    f = alert.finding
    kind, host = _shown(f.kind), _shown(alert.host)
    sev = _shown(f.severity).upper()
    if alert.event == "remind":
        head = (
            f"[{sev}] still open, {_instances(f)}seen {f.seen_count} times since "
            f"{f.opened_at}: {kind} on {host}: "
        )
    elif alert.event == "resolve":
        head = f"[RESOLVED] {kind} on {host}, seen {f.seen_count} times since {f.opened_at}: "
    else:
        head = f"[{sev}] {kind} on {host}: "
    pid = f.root_pid
    tail = f" (finding {finding_ref(f.id)}" + (f", root PID {pid})" if pid is not None else ")")
    return safe_text(head), safe_text(f.message), safe_text(tail)


def _shown(value: str | None) -> str:
    """A value of the alert as chat text shows it: ``?`` when the row lacks it."""
    return "?" if value is None else value


def _instances(f: AlertFinding) -> str:
    """``now 49 instances (was 50; PID 7 gone), `` for a reminder about a changed count."""
    change = f.change
    if change is None:
        return ""
    if change.instances is None:
        # Only what identifies the alert changed (the job came to hold a GPU).
        changed = change.labels_were
        if changed and changed.get("severity") not in (None, f.severity):
            # Say what a person must know (issue 33: a reload's remind gave no reason).
            return f"severity now {f.severity} (was {changed['severity']}), "
        return "updated (its labels changed: GPU, user or origin), " if changed else ""
    text = f"now {change.instances} instances (was {change.was}"
    gone = change.gone_pids
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


def alert_text(alert: Alert, limit: int) -> str:
    """The one-line human text of an alert, at most ``limit`` characters, made safe.

    When too long, the finding's message is cut at a space (ending in ``…``); the head
    (what, where, how often) and the tail (finding id, PID) are always kept.
    """
    head, message, tail = _parts(alert)
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


def chat_text(alert: Alert, limit: int, fence: str) -> str:
    """The chat form of an alert: the head and tail as text, the finding's message (which
    quotes command lines, a job can forge anything in it) as inert code
    (:func:`inert_code`), at most ``limit`` characters (the message is cut, ``…``)."""
    head, message, tail = _parts(alert)
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


def slack_body(out: Outgoing) -> dict[str, Any]:
    """``{"text": …}`` for a Slack incoming webhook (or a Slack-compatible one:
    Mattermost, Rocket.Chat)."""
    return {"text": slack_escape(chat_text(out.alert, SLACK_MAX_CHARS, SLACK_FENCE))}


def discord_body(out: Outgoing) -> dict[str, Any]:
    """``{"content": …, "allowed_mentions": {"parse": []}}`` for a Discord webhook."""
    return {
        "content": chat_text(out.alert, DISCORD_MAX_CHARS, DISCORD_FENCE),
        "allowed_mentions": {"parse": []},
    }


def webhook_body(out: Outgoing) -> dict[str, Any]:
    """The alert's JSON document as spooled (made safe), with ``delivery_id`` first."""
    return {"delivery_id": out.delivery_id, **safe_json(out.alert.to_json())}


# -- coalesced alerts (a storm: several alerts due at once on one sink) ------------------

BATCH_LINE_MAX_CHARS = 400


def _batch_lines(deliveries: Sequence[Outgoing], limit: int, fence: str) -> str:
    host = safe_text(_shown(deliveries[0].alert.host))
    events = [d.alert.event for d in deliveries]
    counts = ", ".join(
        f"{events.count(e)} {e}" for e in ("open", "remind", "resolve") if e in events
    )
    head = f"{len(deliveries)} alerts on {host} ({counts}):"
    lines = [head]
    used = len(head)
    for i, d in enumerate(deliveries):
        line = chat_text(d.alert, BATCH_LINE_MAX_CHARS, fence)
        more = len(deliveries) - i
        reserve = len(f"\n… and {more} more (the log and webhook sinks list every one)")
        if used + 1 + len(line) + (reserve if more > 1 else 0) > limit:
            lines.append(f"… and {more} more (the log and webhook sinks list every one)")
            break
        lines.append(line)
        used += 1 + len(line)
    return "\n".join(lines)


def slack_batch_body(deliveries: Sequence[Outgoing]) -> dict[str, Any]:
    """One Slack message listing several alerts (one line each, then "… and N more")."""
    # Escaping may lengthen the text: cut to a third, as for one alert (3000 of 40 000).
    return {"text": slack_escape(_batch_lines(deliveries, SLACK_MAX_CHARS, SLACK_FENCE))}


def discord_batch_body(deliveries: Sequence[Outgoing]) -> dict[str, Any]:
    """One Discord message listing several alerts, at most 2000 characters."""
    return {
        "content": _batch_lines(deliveries, DISCORD_MAX_CHARS, DISCORD_FENCE),
        "allowed_mentions": {"parse": []},
    }


def webhook_batch_body(deliveries: Sequence[Outgoing]) -> dict[str, Any]:
    """``{"delivery_id", "schema_version": 1, "event": "batch", "host", "count",
    "alerts": [every alert's own body]}``: the full list, nothing cut."""
    return {
        "delivery_id": batch_id(deliveries),
        "schema_version": 1,
        "event": "batch",
        "host": safe_text(deliveries[0].alert.host or ""),
        "count": len(deliveries),
        "alerts": [webhook_body(d) for d in deliveries],
    }


def log_fields(out: Outgoing) -> dict[str, Any]:
    """Keyword fields of the log sink's ``finding`` event (stable keys, docs/alerts.md),
    made safe."""
    a, f = out.alert, out.alert.finding
    fields: dict[str, Any] = {
        "action": a.event,
        "kind": f.kind,
        "severity": f.severity,
        "message": f.message,
        "root_pid": f.root_pid,
        "finding_id": f.id,
        "host": a.host,
        "seen_count": f.seen_count,
        "opened_at": f.opened_at,
        "resolved_at": f.resolved_at,
        "delivery_id": out.delivery_id,
    }
    if a.event == "remind" and f.change is not None:
        fields["change"] = f.change.to_json()  # why this reminder (issue 33)
    return dict(safe_json(fields))
